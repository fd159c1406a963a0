// bench/trace_summarize — how the profiler's outputs scale with the size of a trace: summarize()
// (gap causes, critical path), reading a Chrome trace back, and the SVG timeline, on synthetic
// traces of one stream whose tasks are separated by gaps, half of them blocked by event waits.
//
//   trace_summarize [--tasks N] [--json PATH]
//
// Each step doubles the tasks; "growth" is the time per task at the largest size over the time
// per task at the smallest: about 1 for O(n) work, about 1 plus a few log steps for O(n log n).
#include <npurt/profiler.hpp>
#include <npurt/profiler/trace_reader.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <sstream>

namespace {

using clk = std::chrono::steady_clock;

npurt::trace_data make_trace(std::size_t n) {
  npurt::trace_data d;
  const auto name = d.intern("k");
  auto at = [](std::int64_t ps) { return npurt::sim_time{npurt::picoseconds{ps}}; };
  for (std::size_t i = 1; i <= n; ++i) {
    const auto t0 = static_cast<std::int64_t>(i) * 2'000'000;
    npurt::trace_task t;
    t.id = i;
    t.engine = npurt::engine_kind::ai_core;
    t.submitted = at(t0 - 500'000);
    t.ready = at(t0 - 200'000);
    t.start = at(t0);
    t.end = at(t0 + 1'000'000);
    t.name = name;
    d.tasks.push_back(t);
    if (i % 2 == 0) d.waits.push_back({i, i, 0, 0, 0, 0, 0, at(t0 - 900'000), at(t0 - 100'000)});
  }
  return d;
}

template <class F>
double best_of(int rounds, F&& f) {
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = clk::now();
    f();
    best = std::min(best, npurt_bench::seconds_since(t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  long tasks = 160000;
  npurt_bench::command_line cl{"trace_summarize: the trace reader and summary against the size of a trace"};
  cl.app()
      .add_option("--tasks", tasks, "tasks of the largest trace")
      ->capture_default_str()
      ->check(CLI::Range(1000L, 10'000'000L));
  if (auto rc = cl.parse(argc, argv)) return *rc;
  const auto largest = static_cast<std::size_t>(tasks);
  npurt_bench::report r("trace_summarize");
  double first_summary = 0, first_read = 0;
  std::size_t first_n = 0, n = std::max<std::size_t>(largest / 8, 1000);
  for (; n <= largest; n *= 2) {
    const auto d = make_trace(n);
    const double sum = best_of(3, [&] { (void)npurt::summarize(d); });
    std::ostringstream chrome;
    npurt::write_chrome_trace(chrome, d);
    const auto text = chrome.str();
    const double read = best_of(2, [&] { (void)npurt::read_chrome_trace(text); });
    std::ostringstream svg;
    const double draw = best_of(2, [&] {
      svg.str({});
      npurt::write_svg(svg, d);
    });
    const std::string k = std::to_string(n);
    r.add("summarize_" + k + "_tasks_ns_per_task", sum * 1e9 / static_cast<double>(n), "ns");
    r.add("read_" + k + "_tasks_ns_per_task", read * 1e9 / static_cast<double>(n), "ns");
    r.add("svg_" + k + "_tasks_ns_per_task", draw * 1e9 / static_cast<double>(n), "ns");
    r.add("svg_" + k + "_tasks_bytes", static_cast<double>(svg.str().size()), "bytes", "merged above 20000 bars");
    if (first_n == 0) {
      first_n = n;
      first_summary = sum / static_cast<double>(n);
      first_read = read / static_cast<double>(n);
    } else if (n * 2 > largest) {
      r.add("summarize_growth_per_task", sum / static_cast<double>(n) / first_summary, "ratio",
            "time per task, largest over smallest size");
      r.add("read_growth_per_task", read / static_cast<double>(n) / first_read, "ratio");
    }
  }
  return cl.finish(r);
}
