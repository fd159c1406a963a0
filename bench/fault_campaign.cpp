// Fault campaign: many seeded runs of a data-parallel training loop with random faults of every
// kind (npurt/models/fault_campaign.hpp), against the fault-free run. Prints what was injected,
// detected, recovered and fatal, the silent corruptions (must be 0) and the virtual time lost.
// Every number is virtual: the same command line prints the same table, byte for byte.
#include "bench_common.hpp"

#include <npurt/models/fault_campaign.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  npurt::models::fault_campaign_options o;
  npurt_bench::command_line cl{"Seeded fault campaign over a data-parallel training loop"};
  cl.app()
      .add_option("--runs", o.runs, "runs with random faults")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  cl.app()
      .add_option("--ranks", o.ranks, "training ranks (one spare device more)")
      ->capture_default_str()
      ->check(CLI::Range(2u, 64u));
  cl.app()
      .add_option("--steps", o.steps, "training steps per run")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  cl.app().add_option("--params", o.params, "f32 parameters")->capture_default_str()->check(CLI::Range(1u, 1u << 24));
  cl.app().add_option("--seed", o.seed, "campaign seed")->capture_default_str()->check(npurt_bench::whole_number_u64());
  cl.app()
      .add_option("--rate", o.rate, "per-task probability of the commonest faults")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.1));
  if (auto rc = cl.parse(argc, argv)) return *rc;

  npurt::models::fault_campaign_result r;
  try {
    r = npurt::models::run_fault_campaign(o);
  } catch (const npurt::error& e) {
    std::fprintf(stderr, "fault_campaign: %s\n", e.what());
    return 1;
  }
  npurt_bench::report rep{"fault_campaign: " + std::to_string(o.runs) + " runs x " + std::to_string(o.steps) +
                          " steps on " + std::to_string(o.ranks) + " ranks + 1 spare (ascend910), seed " +
                          std::to_string(o.seed)};
  rep.add("runs", r.runs, "runs");
  rep.add("faults injected", static_cast<double>(r.injected), "faults");
  for (const auto& [k, n] : r.injected_by_kind) rep.add("  injected " + k, static_cast<double>(n), "faults");
  rep.add("errors detected (failed attempts)", static_cast<double>(r.detected), "errors");
  for (const auto& [k, n] : r.errors_by_code) rep.add("  error: " + k, static_cast<double>(n), "errors");
  rep.add("slow-device reports (throttling)", static_cast<double>(r.slow_reports), "steps");
  rep.add("errors recovered", static_cast<double>(r.recovered), "errors");
  for (const auto& [k, n] : r.actions) rep.add("  action " + k, static_cast<double>(n), "actions");
  rep.add("runs reported fatal (aborted)", static_cast<double>(r.fatal_runs), "runs");
  rep.add("silent corruptions", static_cast<double>(r.silent_corruptions), "runs", "must be 0");
  rep.add("steps replayed from checkpoints", static_cast<double>(r.replayed_steps), "steps");
  rep.add("fault-free run", r.clean_time_s * 1e3, "ms", "virtual time");
  rep.add("virtual time lost, mean per finished run",
          r.runs > r.fatal_runs ? r.lost_time_s * 1e3 / static_cast<double>(r.runs - r.fatal_runs) : 0, "ms");
  rep.add("virtual time lost, worst run", r.max_lost_time_s * 1e3, "ms");
  return cl.finish(rep);
}
