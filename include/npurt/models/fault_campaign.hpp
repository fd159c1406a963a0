// npurt/models/fault_campaign.hpp — many seeded runs of the data-parallel training loop with
// random faults of every kind, against one fault-free run: what was injected, what surfaced as
// an error, what was recovered, what was fatal, whether any run ended with wrong parameters
// without an error (a silent corruption), and the virtual time the faults cost.
//
// bench/fault_campaign prints it; the fault tests check that it is deterministic.
#pragma once

#include <npurt/fault.hpp>
#include <npurt/models/dp_training.hpp>
#include <npurt/recovery.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/preset.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace npurt::models {

struct fault_campaign_options {
  std::uint32_t runs = 50;
  std::uint32_t ranks = 4;     // plus one spare device
  std::uint32_t steps = 20;
  std::uint32_t checkpoint_every = 5;
  std::size_t params = 4096;
  std::uint64_t seed = 1;
  double rate = 0.004;         // per-task trial probability of the commonest faults
  picoseconds heartbeat{10'000'000'000};  // 10 ms monitor interval (0: off)
  recovery_strategy strategy{};
};

struct fault_campaign_result {
  std::uint32_t runs = 0;
  std::uint64_t injected = 0;            // faults the plans made happen
  std::uint64_t detected = 0;            // failed attempts reported to the loop as typed errors
  std::uint64_t slow_reports = 0;        // steps a throttled rank was reported slow in
  std::uint64_t recovered = 0;           // detected errors in runs that reached their last step
  std::uint64_t fatal_runs = 0;          // runs the strategy aborted (reported, not hidden)
  std::uint64_t silent_corruptions = 0;  // runs that ended without error and with wrong parameters
  std::uint64_t replayed_steps = 0;
  double clean_time_s = 0;               // virtual time of the fault-free run
  double lost_time_s = 0;                // sum over finished runs of (time - clean time)
  double max_lost_time_s = 0;
  std::map<std::string, std::uint64_t> injected_by_kind;
  std::map<std::string, std::uint64_t> errors_by_code;
  std::map<std::string, std::uint64_t> actions;
};

namespace campaign_detail {

inline fault_plan random_plan(const fault_campaign_options& o, std::uint64_t seed) {
  fault_plan p;
  p.seed = seed;
  // Some kinds run at a multiple of the rate: a probability above 1 is a certainty, not a plan
  // for the fault backend to refuse.
  const auto r = [&](double multiple) { return std::min(1.0, o.rate * multiple); };
  constexpr picoseconds ms{1'000'000'000};
  for (std::uint32_t d = 0; d < o.ranks; ++d) {
    const auto dev = static_cast<device_id>(d);
    p.add(fault_spec::aicore_exception(dev).random(r(1), 2));
    p.add(fault_spec::kernel_hang(dev).random(r(1.0 / 8), 1));
    p.add(fault_spec::hbm_ecc(dev).random(r(1.0 / 8), 1));
    p.add(fault_spec::link_down(dev, ms).random(r(1.0 / 2), 1));
    p.add(fault_spec::link_flap(dev, ms / 4, ms * 2).random(r(1.0 / 4), 1));
    p.add(fault_spec::lost_heartbeat(dev).random(r(1.0 / 8), 1));
    p.add(fault_spec::transient_oom(dev, 1).random(r(4), 1));
    p.add(fault_spec::thermal_throttle(dev, 2.0, ms * 2).random(r(1.0 / 2), 1));
  }
  p.add(fault_spec::network_interruption(0, ms, o.ranks / 2 == 0 ? 1 : o.ranks / 2).random(r(1.0 / 2), 1));
  return p;
}

inline dp_training_options training(const fault_campaign_options& o) {
  dp_training_options t;
  for (std::uint32_t d = 0; d < o.ranks; ++d) t.ranks.push_back(static_cast<device_id>(d));
  t.spares = {static_cast<device_id>(o.ranks)};
  t.params = o.params;
  t.steps = o.steps;
  t.checkpoint_every = o.checkpoint_every;
  t.data_seed = o.seed;
  t.strategy = o.strategy;
  return t;
}

inline double seconds(picoseconds p) { return static_cast<double>(p.count()) * 1e-12; }

}  // namespace campaign_detail

inline fault_campaign_result run_fault_campaign(const fault_campaign_options& o) {
  using namespace campaign_detail;
  if (o.ranks < 2 || o.runs == 0 || o.steps == 0)
    throw_error(make_error_code(errc::invalid_argument), "fault campaign: needs at least 2 ranks, 1 run and 1 step");
  // Checked before the fault-free run, so that a bad option costs nothing.
  if (!(o.rate >= 0 && o.rate <= 1))
    throw_error(make_error_code(errc::invalid_argument), "fault campaign: rate must be a probability in [0, 1]");
  if (o.heartbeat.count() < 0)
    throw_error(make_error_code(errc::invalid_argument), "fault campaign: heartbeat interval is negative");
  std::string why;
  if (const std::error_code ec = o.strategy.validate(&why)) throw_error(ec, "fault campaign: " + why);
  const auto hw = sim::presets::ascend910(static_cast<int>(o.ranks + 1));
  fault_campaign_result res;
  dp_training_report clean;
  {
    npurt::system sys{hw};
    clean = train_data_parallel(sys, training(o));
    if (clean.fatal) throw_error(clean.fatal, "fault campaign: the fault-free run failed");
  }
  res.clean_time_s = seconds(clean.finished - clean.started);
  for (std::uint32_t i = 0; i < o.runs; ++i) {
    npurt::system sys{sim::with_faults(hw, random_plan(o, o.seed * 1'000'003ULL + i))};
    auto& faults = sim::faults_of(sys);
    if (o.heartbeat.count() > 0) faults.enable_fault_detection(o.heartbeat);
    const dp_training_report r = train_data_parallel(sys, training(o));
    ++res.runs;
    res.injected += faults.injected().size();
    for (const auto& f : faults.injected()) ++res.injected_by_kind[std::string(to_string(f.kind))];
    res.detected += r.failures;
    res.slow_reports += r.slow_devices.size();
    res.replayed_steps += r.replayed_steps;
    for (const auto& e : r.errors) ++res.errors_by_code[e.message()];
    for (const auto a : r.actions) ++res.actions[std::string(to_string(a))];
    if (r.fatal) {
      ++res.fatal_runs;
      continue;
    }
    res.recovered += r.failures;
    const bool same = r.params.size() == clean.params.size() &&
                      std::memcmp(r.params.data(), clean.params.data(), r.params.size() * sizeof(float)) == 0;
    if (!same) ++res.silent_corruptions;
    const double lost = seconds(r.finished - r.started) - res.clean_time_s;
    res.lost_time_s += lost;
    res.max_lost_time_s = std::max(res.max_lost_time_s, lost);
  }
  return res;
}

}  // namespace npurt::models
