// bench/stream_overhead — what the runtime costs per task, against two baselines measured in the
// same run: a bare binary-heap event queue and plain Asio (a coroutine on a strand doing one
// co_await post per step).
//
//   stream_overhead [--tasks N] [--awaits N] [--rounds N] [--case NAME] [--trace PATH] [--json PATH]
//
// --trace PATH writes the Chrome trace of a mixed workload instead (streams of three priorities,
// kernels of several sizes contending for the cores, event waits, awaited launches): two builds
// of the runtime that schedule alike write the same bytes.
//
// --case runs one measurement alone (one_stream, eight_streams, awaited, awaited_task, bare_heap,
// asio_post, graph_replay): what an instruction-level profiler such as callgrind needs to
// attribute a cost to one path.
//
// Cold numbers use a fresh system (task pools untouched); warm numbers repeat the work on the
// same system once its pools have grown. Each ratio compares two measurements taken in
// alternating rounds, and keeps the best round of each: on a shared machine, interference only
// ever adds time, so the minimum is the estimate least disturbed by it.
#include <npurt/npurt.hpp>
#if __has_include(<npurt/sim/sim.hpp>)
#include <npurt/sim/sim.hpp>
#define NPURT_BENCH_SIM 1
#endif
#if __has_include(<npurt/profiler.hpp>)
#include <npurt/profiler.hpp>
#define NPURT_BENCH_PROFILER 1
#endif

#include "bench_common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <memory>
#include <queue>

namespace asio = boost::asio;
using clk = std::chrono::steady_clock;

namespace {

std::unique_ptr<npurt::system> make_system(npurt::system_options opts = {}) {
#ifdef NPURT_BENCH_SIM
  return std::make_unique<npurt::system>(npurt::sim::presets::ascend910(1), opts);
#else
  return std::make_unique<npurt::system>(npurt::simple_config{}, opts);
#endif
}

const npurt::kernel_desc zero_kernel{npurt::kernels::fixed{}, "zero"};

/// Wall and thread-CPU nanoseconds per unit of work.
struct cost {
  double wall = 0;
  double cpu = 0;
};

/// The better of two measurements of the same work, each clock on its own.
cost best(cost a, cost b) { return {std::min(a.wall, b.wall), std::min(a.cpu, b.cpu)}; }

class stopwatch {
 public:
  stopwatch() : wall_(clk::now()), cpu_(npurt_bench::thread_cpu_seconds()) {}
  cost per(long n) const {
    return {npurt_bench::seconds_since(wall_) * 1e9 / static_cast<double>(n),
            (npurt_bench::thread_cpu_seconds() - cpu_) * 1e9 / static_cast<double>(n)};
  }

 private:
  clk::time_point wall_;
  double cpu_;
};

/// ns per task for `tasks` zero-duration fire-and-forget launches on one stream.
cost one_stream(npurt::system& sys, long tasks) {
  auto s = sys.device(0).make_stream();
  const stopwatch sw;
  for (long i = 0; i < tasks; ++i) s.launch(zero_kernel);
  sys.run();
  return sw.per(tasks);
}

/// ns per task over 8 streams, with a cross-stream event wait every 10 tasks.
cost eight_streams(npurt::system& sys, long tasks) {
  std::vector<npurt::stream> streams;
  for (int i = 0; i < 8; ++i) streams.push_back(sys.device(0).make_stream());
  const stopwatch sw;
  npurt::event last;
  for (long i = 0; i < tasks; ++i) {
    auto& s = streams[static_cast<std::size_t>(i % 8)];
    if (i % 10 == 9) s.wait(last);
    last = s.launch(zero_kernel);
  }
  sys.run();
  return sw.per(tasks);
}

/// ns per awaited launch: a coroutine doing `co_await s.async_launch(k, use_awaitable)`.
cost awaited(npurt::system& sys, long n) {
  auto s = sys.device(0).make_stream();
  const stopwatch sw;
  asio::co_spawn(
      s.get_executor(),
      [&]() -> asio::awaitable<void> {
        for (long i = 0; i < n; ++i) co_await s.async_launch(zero_kernel, asio::use_awaitable);
      },
      asio::detached);
  sys.run();
  return sw.per(n);
}

/// ns per awaited launch in npurt's own coroutine type: `co_await s.async_launch(k, use_task)`,
/// resumed from the completion through the loop's due-now queue (no Asio post).
cost awaited_task(npurt::system& sys, long n) {
  auto s = sys.device(0).make_stream();
  const stopwatch sw;
  auto body = [&]() -> npurt::task<void> {
    for (long i = 0; i < n; ++i) co_await s.async_launch(zero_kernel, npurt::use_task);
  };
  npurt::spawn(sys, body());
  sys.run();
  return sw.per(n);
}

/// ns per node for `tasks` zero-duration kernels replayed from a captured graph of 1,000 nodes
/// on one stream (the capture itself is outside the timing), and the simulated time per node
/// from the first launch to the end: the fire-and-forget case's work, submitted by graph
/// launches.
struct replay_cost {
  cost host;
  double virtual_ns_per_node = 0;
};
replay_cost graph_replay(npurt::system& sys, long tasks) {
  constexpr long nodes = 1000;
  auto s = sys.device(0).make_stream();
  s.begin_capture();
  for (long i = 0; i < nodes; ++i) s.launch(zero_kernel);
  npurt::stream_graph g = s.end_capture();
  const long launches = std::max(1L, tasks / nodes);
  const npurt::sim_time t0 = sys.now();
  const stopwatch sw;
  for (long i = 0; i < launches; ++i) g.launch(s);
  sys.run();
  const double per = static_cast<double>((sys.now() - t0).count()) / 1e3 / static_cast<double>(launches * nodes);
  return {sw.per(launches * nodes), per};
}

/// The simulated time per task of `tasks` zero-duration launches on one stream, one call each.
double eager_virtual_ns(long tasks) {
  auto sys = make_system();
  auto s = sys->device(0).make_stream();
  const npurt::sim_time t0 = sys->now();
  for (long i = 0; i < tasks; ++i) s.launch(zero_kernel);
  sys->run();
  return static_cast<double>((sys->now() - t0).count()) / 1e3 / static_cast<double>(tasks);
}

/// Baseline: a std::priority_queue of (time, sequence) records, one push and one pop per task.
cost bare_heap(long tasks) {
  struct rec {
    std::int64_t t;
    std::uint64_t seq;
    bool operator>(const rec& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<rec, std::vector<rec>, std::greater<>> q;
  std::uint64_t checksum = 0;
  const stopwatch sw;
  std::int64_t now = 0;
  for (long i = 0; i < tasks; ++i) {
    q.push({now + (i * 7919) % 13, static_cast<std::uint64_t>(i)});
    if (q.size() > 64) {
      now = q.top().t;
      checksum += q.top().seq;
      q.pop();
    }
  }
  while (!q.empty()) {
    checksum += q.top().seq;
    q.pop();
  }
  const cost c = sw.per(tasks);
  if (checksum == 42) std::printf(" ");  // keep the loop
  return c;
}

/// Flatness: ns per task for `tasks` fire-and-forget launches spread round-robin over `streams`
/// streams of one device, all queued before the run (so `tasks` is also the queue's depth).
cost spread(npurt::system& sys, int streams, long tasks) {
  std::vector<npurt::stream> ss;
  for (int i = 0; i < streams; ++i) ss.push_back(sys.device(0).make_stream());
  const stopwatch sw;
  for (long i = 0; i < tasks; ++i) ss[static_cast<std::size_t>(i % streams)].launch(zero_kernel);
  sys.run();
  return sw.per(tasks);
}

/// The bare heap at a given depth: `depth` records queued first, then `events` pops each followed
/// by a push, then the drain; ns per event (one push and one pop).
cost bare_heap_at(long depth, long events) {
  struct rec {
    std::int64_t t;
    std::uint64_t seq;
    bool operator>(const rec& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::vector<rec> v;
  v.reserve(static_cast<std::size_t>(depth) + 1);
  std::priority_queue<rec, std::vector<rec>, std::greater<>> q(std::greater<>{}, std::move(v));
  std::uint64_t checksum = 0;
  std::uint64_t seq = 0;
  const stopwatch sw;
  for (long i = 0; i < depth; ++i, ++seq) q.push({(i * 7919) % (depth * 2 + 13), seq});
  for (long i = 0; i < events - depth; ++i, ++seq) {
    const rec top = q.top();
    q.pop();
    checksum += top.seq;
    q.push({top.t + 1 + (i * 7919) % 13, seq});
  }
  while (!q.empty()) {
    checksum += q.top().seq;
    q.pop();
  }
  const cost c = sw.per(std::max(events, depth));
  if (checksum == 42) std::printf(" ");  // keep the loop
  return c;
}

/// Baseline: plain Asio, one co_await post on a strand per step.
cost asio_post(long n) {
  asio::io_context ioc{1};
  auto strand = asio::make_strand(ioc);
  const stopwatch sw;
  asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<void> {
        for (long i = 0; i < n; ++i) co_await asio::post(strand, asio::use_awaitable);
      },
      asio::detached);
  ioc.run();
  return sw.per(n);
}

#ifdef NPURT_BENCH_PROFILER
/// The --trace workload: what the launch path decides (ties, priorities, contention for the
/// cores, event waits, awaited launches) recorded by the profiler.
int write_trace(const std::string& path, long tasks) {
  auto sys = make_system();
  npurt::profiler prof;
  sys->add_observer(prof);
  std::vector<npurt::stream> streams;
  const int prios[3] = {npurt::priority::low, npurt::priority::normal, npurt::priority::high};
  for (int i = 0; i < 8; ++i) streams.push_back(sys->device(0).make_stream({.priority = prios[i % 3]}));
  npurt::event last;
  for (long i = 0; i < tasks; ++i) {
    auto& s = streams[static_cast<std::size_t>((i * 5) % 8)];
    if (i % 10 == 9) s.wait(last);
    npurt::kernel_desc k{npurt::kernels::fixed{npurt::picoseconds{(i % 7) * 700'000}, 0, 0}, "k"};
    k.block_dim = static_cast<std::uint32_t>((i % 4) * 8);
    last = s.launch(k);
  }
  auto aw = sys->device(0).make_stream({.priority = npurt::priority::high});
  asio::co_spawn(
      aw.get_executor(),
      [&]() -> asio::awaitable<void> {
        for (long i = 0; i < tasks / 10; ++i)
          co_await aw.async_launch(npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{300'000}}, "aw"},
                                   asio::use_awaitable);
      },
      asio::detached);
  sys->run();
  std::error_code ec;
  prof.write_chrome_trace(path, ec);
  if (ec) {
    std::fprintf(stderr, "stream_overhead: cannot write %s: %s\n", path.c_str(), ec.message().c_str());
    return 1;
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  long tasks = 1'000'000;
  long awaits = 200'000;
  int rounds = 7;
  std::string only;
  npurt_bench::command_line cl{"stream_overhead: runtime cost per task against a bare heap and plain Asio"};
  cl.app()
      .add_option("--tasks", tasks, "fire-and-forget launches per round")
      ->capture_default_str()
      ->check(CLI::Range(1L, 100'000'000L));
  cl.app()
      .add_option("--awaits", awaits, "awaited launches per round")
      ->capture_default_str()
      ->check(CLI::Range(1L, 100'000'000L));
  cl.app()
      .add_option("--rounds", rounds, "rounds; the best of each is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cl.app()
      .add_option("--case", only, "run only this measurement (for profilers)")
      ->check(CLI::IsMember(
          {"one_stream", "eight_streams", "awaited", "awaited_task", "bare_heap", "asio_post", "graph_replay"}));
  long flat_max = 1'000'000;
  cl.app()
      .add_option("--flat-max", flat_max,
                  "largest queue of the flatness sweep (10^3 up to this, by powers of 10; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0L, 100'000'000L));
  std::string trace;
  cl.app().add_option("--trace", trace, "write the Chrome trace of a mixed workload of --tasks tasks and stop");
  if (auto rc = cl.parse(argc, argv)) return *rc;
  if (!trace.empty()) {
#ifdef NPURT_BENCH_PROFILER
    return write_trace(trace, tasks);
#else
    std::fprintf(stderr, "stream_overhead: --trace needs the profiler\n");
    return 1;
#endif
  }
  npurt_bench::report r("stream_overhead");
  auto add = [&](const std::string& key, cost c, const std::string& note = {}) {
    r.add(key + "_ns", c.wall, "ns", note);
    r.add(key + "_cpu_ns", c.cpu, "ns", "thread CPU time");
  };

  if (!only.empty()) {
    // Each case alone, cold then its warm rounds, on one system.
    auto sys = make_system();
    const long n = only == "awaited" || only == "awaited_task" || only == "asio_post" ? awaits : tasks;
    cost c{1e300, 1e300};
    for (int i = 0; i <= rounds; ++i) {
      if (only == "one_stream") c = best(c, one_stream(*sys, n));
      else if (only == "eight_streams") c = best(c, eight_streams(*sys, n));
      else if (only == "awaited") c = best(c, awaited(*sys, n));
      else if (only == "awaited_task") c = best(c, awaited_task(*sys, n));
      else if (only == "asio_post") c = best(c, asio_post(n));
      else if (only == "graph_replay") c = best(c, graph_replay(*sys, n).host);
      else c = best(c, bare_heap(n));
    }
    add(only, c, "best of the rounds, run alone");
    return cl.finish(r);
  }

  // The baseline takes the best of the rounds too, measured between them: a single early run of
  // it would be compared with the best of seven of the runtime, and would swing the ratios with
  // whatever the machine did at that moment.
  cost heap = bare_heap(tasks);

  auto sys1 = make_system();
  const cost cold1 = one_stream(*sys1, tasks);
  cost warm1 = one_stream(*sys1, tasks);
  auto sys8 = make_system();
  const cost cold8 = eight_streams(*sys8, tasks);
  cost warm8 = eight_streams(*sys8, tasks);
  for (int i = 1; i < rounds; ++i) warm8 = best(warm8, eight_streams(*sys8, tasks));

  auto sysa = make_system();
  const cost cold_aw = awaited(*sysa, awaits);
  cost warm_aw = awaited(*sysa, awaits);
  cost asio_ns = asio_post(awaits);
  auto syst = make_system();
  (void)awaited_task(*syst, awaits);
  cost warm_task = awaited_task(*syst, awaits);
  auto sysg = make_system();
  (void)graph_replay(*sysg, tasks);
  replay_cost replay = graph_replay(*sysg, tasks);
  const double eager_ns = eager_virtual_ns(std::min(tasks, 100'000L));
  for (int i = 1; i < rounds; ++i) {
    replay.host = best(replay.host, graph_replay(*sysg, tasks).host);
    asio_ns = best(asio_ns, asio_post(awaits));
    heap = best(heap, bare_heap(tasks));
    warm_aw = best(warm_aw, awaited(*sysa, awaits));
    warm_task = best(warm_task, awaited_task(*syst, awaits));
  }

#ifdef NPURT_BENCH_PROFILER
  auto traced = make_system();
  npurt::profiler prof;
  // Recording then touches no fresh pages: every round is reserved up front.
  prof.reserve(static_cast<std::size_t>(rounds + 1) * static_cast<std::size_t>(tasks));
  traced->add_observer(prof);
  (void)one_stream(*traced, tasks);
  cost traced1 = one_stream(*traced, tasks);
  for (int i = 1; i < rounds; ++i) {
    warm1 = best(warm1, one_stream(*sys1, tasks));
    heap = best(heap, bare_heap(tasks));
    traced1 = best(traced1, one_stream(*traced, tasks));
  }
#else
  for (int i = 1; i < rounds; ++i) {
    warm1 = best(warm1, one_stream(*sys1, tasks));
    heap = best(heap, bare_heap(tasks));
  }
#endif

  // Flatness: the cost per task as the streams and the queued work grow, beside the bare heap
  // at the same depth (the runtime's timer heap holds about one entry per busy stream; a queue of
  // N tasks is compared with a heap of N events). Thread-CPU time, best of two runs each.
  struct flat_row {
    std::string key;
    long size;
    cost c;
    cost heap;
  };
  std::vector<flat_row> flat;
  if (flat_max > 0) {
    const long per = std::min(tasks, 1'000'000L);
    for (int streams : {1, 8, 64, 1024}) {
      cost c{1e300, 1e300};
      for (int k = 0; k < 2; ++k) {
        auto sys = make_system();
        c = best(c, spread(*sys, streams, per));
      }
      const cost h = best(bare_heap_at(streams, per), bare_heap_at(streams, per));
      flat.push_back({"flat_streams_" + std::to_string(streams), streams, c, h});
    }
    for (long n = 1000; n <= flat_max; n *= 10) {
      cost c{1e300, 1e300};
      const int reps = n >= 10'000'000 ? 1 : 2;
      for (int k = 0; k < reps; ++k) {
        auto sys = make_system();
        c = best(c, spread(*sys, 1, n));
      }
      cost h{1e300, 1e300};
      for (int k = 0; k < reps; ++k) h = best(h, bare_heap_at(n, n));
      flat.push_back({"flat_queued_" + std::to_string(n), n, c, h});
    }
  }

  add("baseline_bare_heap_per_event", heap, "best of the rounds");
  add("baseline_asio_post_per_step", asio_ns, "best of the rounds");
  add("one_stream_cold_per_task", cold1, "1 stream, fire-and-forget, fresh pools");
  add("one_stream_warm_per_task", warm1, "best of the rounds; target <= 100");
  add("eight_streams_cold_per_task", cold8, "event every 10 tasks");
  add("eight_streams_warm_per_task", warm8, "best of the rounds; target <= 100");
  add("awaited_launch_cold", cold_aw);
  add("awaited_launch_warm", warm_aw, "best of the rounds");
  add("awaited_task_launch_warm", warm_task, "npurt::task with use_task, best of the rounds");
  add("graph_replay_warm_per_node", replay.host, "zero kernels replayed from a 1,000-node graph, best of the rounds");
  r.add("graph_replay_over_one_stream_cpu", replay.host.cpu / warm1.cpu, "ratio", "host CPU per node against a launch");
  r.add("graph_replay_virtual_ns_per_node", replay.virtual_ns_per_node, "ns",
        "simulated time per node, first launch to last completion (deterministic)");
  r.add("eager_virtual_ns_per_launch", eager_ns, "ns", "the same, one launch call per kernel");
  r.add("one_stream_warm_over_bare_heap_cpu", warm1.cpu / heap.cpu, "ratio", "target <= 1.25");
  r.add("eight_streams_warm_over_bare_heap_cpu", warm8.cpu / heap.cpu, "ratio", "target <= 1.25");
  r.add("awaited_warm_over_bare_heap_cpu", warm_aw.cpu / heap.cpu, "ratio", "use_awaitable");
  r.add("awaited_task_warm_over_bare_heap_cpu", warm_task.cpu / heap.cpu, "ratio", "use_task; target <= 2");
  for (const auto& f : flat) {
    const bool streams = f.key.starts_with("flat_streams_");
    r.add(f.key + "_cpu_ns", f.c.cpu, "ns",
          streams ? "per task, 10^6 tasks over this many streams" : "per task, this many queued on 1 stream");
    r.add(f.key + "_heap_cpu_ns", f.heap.cpu, "ns", "bare heap at the same depth");
  }
  r.add("awaited_warm_over_asio_post_cpu", warm_aw.cpu / asio_ns.cpu, "ratio", "target <= 1.5");
#ifdef NPURT_BENCH_PROFILER
  add("one_stream_warm_profiled_per_task", traced1, "profiler attached");
  r.add("profiler_overhead_ratio_cpu", traced1.cpu / warm1.cpu, "ratio", "target <= 1.2");
  r.add("profiler_overhead_ratio_wall", traced1.wall / warm1.wall, "ratio");
#endif
  return cl.finish(r);
}
