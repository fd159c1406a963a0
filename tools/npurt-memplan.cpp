// npurt-memplan: plans a CSV of buffers (MiniMalloc's id,lower,upper,size format) into one arena
// and reports the arena against the lower bound (peak live bytes) and against no reuse.
//
//   npurt-memplan INPUT.csv [--output PLAN.csv] [--alignment N] [--greedy] [--search-work N]
//   npurt-memplan INPUT.csv --check PLAN.csv      verify an existing plan (any planner's)
//
// Exit status: 0 for a valid plan, 1 for bad input, an invalid plan or a failed write, and
// CLI11's codes (non-zero) for a bad command line.
#include <npurt/memplan.hpp>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <system_error>

namespace {

namespace mp = npurt::memplan;

int fail(const std::string& msg) {
  std::cerr << "npurt-memplan: " << msg << "\n";
  return 1;
}

/// ": <the system's reason>" for a failed file operation that set errno, else nothing.
std::string reason(int e) { return e != 0 ? ": " + std::generic_category().message(e) : std::string(); }

// Everything printed on stdout must reach it: a full disk or a closed pipe is an error.
int finish(int status) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return fail("cannot write to standard output");
  return status;
}

// A decimal unsigned 64-bit integer, nothing else: CLI11's own conversion wraps "-5" and its
// range validators print the limits as doubles.
CLI::Validator u64_value(bool power_of_two) {
  return CLI::Validator(
      [power_of_two](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || err != std::errc{} || end != s.data() + s.size())
          return "expected an integer from 0 to 18446744073709551615, got '" + s.substr(0, 40) + "'";
        if (power_of_two && (v == 0 || (v & (v - 1)) != 0)) return "expected a power of two, got " + s;
        return {};
      },
      power_of_two ? "POWER_OF_TWO" : "UINT64");
}

std::string bytes(std::uint64_t v, bool saturated = false) {
  return (saturated ? "more than " : "") + std::to_string(v) + " bytes";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Plans buffers with known lifetimes into one arena (static memory planning), or checks a plan.\n"
      "INPUT is a CSV with the columns id,lower,upper,size (MiniMalloc's format): buffer id is live\n"
      "on the steps [lower, upper) and needs size bytes.",
      "npurt-memplan"};
  std::string input, output, check_path;
  mp::options opts;
  bool greedy = false;
  app.add_option("input", input, "buffers to plan (CSV)")->required();
  auto* out_opt = app.add_option("-o,--output", output, "write the plan (the input plus an offset column) as CSV");
  auto* check_opt = app.add_option("--check", check_path,
                                   "verify PLAN (a CSV with an offset column, from any planner) against INPUT: "
                                   "same buffers, each exactly once, aligned, no overlaps");
  app.add_option("--alignment", opts.alignment, "every offset is a multiple of N (a power of two)")
      ->capture_default_str()
      ->check(u64_value(true));
  auto* work_opt =
      app.add_option("--search-work", opts.search_work, "local-search budget in overlap pairs visited (0: no search)")
          ->capture_default_str()
          ->check(u64_value(false));
  auto* greedy_opt = app.add_flag("--greedy", greedy, "one greedy pass (size order, best fit) and no search");
  check_opt->excludes(out_opt)->excludes(work_opt)->excludes(greedy_opt);
  CLI11_PARSE(app, argc, argv);
  if (greedy) {
    opts.best_of_orders = false;
    opts.search_work = 0;
  }

  std::error_code ec;
  std::string msg;
  const auto t = mp::read_csv_file(input, ec, msg);
  if (ec) return fail(msg);
  const auto lb = mp::lower_bound(t.buffers, ec);
  if (ec) return fail(input + ": the bytes live at one step exceed 2^64 - 1");
  const auto naive = mp::no_reuse_size(t.buffers, ec);
  const bool naive_saturated = static_cast<bool>(ec);

  mp::check_report rep;
  std::vector<std::uint64_t> offsets;
  std::string method;
  double ms = 0;
  if (!check_path.empty()) {
    const auto p = mp::read_csv_file(check_path, ec, msg);
    if (ec) return fail(msg);
    if (!p.has_offsets) return fail(check_path + ": no offset column");
    rep = mp::check(t.buffers, p, opts.alignment);
    method = "given plan";
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = mp::make_plan(t.buffers, opts, ec);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ec) {
      std::string what;
      (void)mp::validate(t.buffers, opts.alignment, &what);
      return fail(input + ": " + (what.empty() ? ec.message() : what));
    }
    offsets = std::move(plan.offsets);
    method = plan.method;
    rep = mp::check(t.buffers, offsets, opts.alignment);
  }
  std::printf("buffers      %zu\n", t.buffers.size());
  std::printf("method       %s\n", method.c_str());
  if (rep.valid) std::printf("arena        %s\n", bytes(rep.arena_size).c_str());
  std::printf("lower bound  %s (peak live)\n", bytes(lb).c_str());
  std::printf("no reuse     %s\n",
              bytes(naive_saturated ? std::numeric_limits<std::uint64_t>::max() : naive, naive_saturated).c_str());
  if (lb > 0 && rep.valid) {
    std::printf("arena / LB   %.4f\n", static_cast<double>(rep.arena_size) / static_cast<double>(lb));
    std::printf("no reuse / arena  %.2fx (reuse factor)\n",
                static_cast<double>(naive) / static_cast<double>(rep.arena_size ? rep.arena_size : 1));
  }
  if (check_path.empty()) std::printf("plan time    %.2f ms\n", ms);
  std::printf("check        %s\n", rep.valid ? "valid" : ("INVALID: " + rep.error).c_str());
  if (!rep.valid) return finish(1);
  if (!output.empty()) {
    errno = 0;
    std::ofstream out(output);
    if (!out) return fail("cannot open " + output + " for writing" + reason(errno));
    mp::write_csv(out, t.buffers, &offsets);
    out.close();
    if (!out) return fail("cannot write " + output + reason(errno));
  }
  return finish(0);
}
