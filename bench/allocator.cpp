// bench/allocator: the device caching allocator.
//  1. Cached path: nanoseconds per alloc+free pair, with glibc malloc and mimalloc measured in
//     the same run as baselines (the ratio is the number to read; machines differ).
//  2. Replays as alloc/free event streams: the simulator's ResNet-50 training step (the tensors
//     of models::resnet50's kernel list, models/memory_trace.hpp) at batch 32 and 256 for 3 steps on a
//     32 GiB device, a synthetic ResNet-50-like trace (fixed batch, and batch varying from step
//     to step), and the MiniMalloc traces A and K: peak reserved over peak allocated, over the
//     lower bound (peak requested live bytes), and external fragmentation (1 - largest free block
//     / free bytes) at the reserved peak, for "segmented" and "compact".
//
//   allocator [--json PATH] [--iters N] [--data DIR] [--replays-only | --cached-only]
//
// The measuring loops are separate functions, so a profiler can count one of them alone:
//   valgrind --tool=callgrind --toggle-collect='*ns_per_pair*' allocator --cached-only --iters 100000
//
// Note: Debian's libmimalloc.so.2 exports malloc/free, so in this binary plain malloc() is
// mimalloc; the glibc baseline calls __libc_malloc/__libc_free directly.
#include <npurt/detail/caching_allocator.hpp>
#include <npurt/detail/host_heap.hpp>
#include <npurt/memplan.hpp>
#include <npurt/models/memory_trace.hpp>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" void* __libc_malloc(std::size_t);
extern "C" void __libc_free(void*);

using namespace npurt::detail;

namespace {

volatile std::uintptr_t sink;

struct workload {
  std::vector<std::uint32_t> slot;
  std::vector<std::uint32_t> size;
};

// The reference microbenchmark's shape: 4096 live slots, each step frees one slot and refills
// it with a random size in [16, 4096] B. RNG is precomputed so only the allocator is timed.
workload make_workload(std::size_t n, std::size_t slots) {
  std::mt19937_64 rng(12345);
  workload w;
  w.slot.resize(n);
  w.size.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    w.slot[i] = static_cast<std::uint32_t>(rng() % slots);
    w.size[i] = 16 + static_cast<std::uint32_t>(rng() % 4081);
  }
  return w;
}

template <class Alloc, class Free>
[[gnu::noinline]] double ns_per_pair(const workload& w, std::size_t slots, Alloc&& alloc, Free&& free_, int repeat) {
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    std::vector<std::uintptr_t> live(slots);
    for (std::size_t s = 0; s < slots; ++s) live[s] = alloc(64);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < w.slot.size(); ++i) {
      auto& p = live[w.slot[i]];
      free_(p);
      p = alloc(w.size[i]);
    }
    const auto t1 = std::chrono::steady_clock::now();
    for (auto p : live) free_(p);
    best =
        std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(w.slot.size()));
  }
  return best;
}

template <class Alloc, class Free>
[[gnu::noinline]] double ns_hot(std::size_t n, Alloc&& alloc, Free&& free_, int repeat) {
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      auto p = alloc(4096);
      sink = p;
      free_(p);
    }
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                              static_cast<double>(n));
  }
  return best;
}

// ---- traces ----------------------------------------------------------------------------------

struct event {
  bool alloc;
  std::uint32_t id;
  std::size_t size;
};

struct trace_builder {
  std::vector<event> ev;
  std::uint32_t next = 0;
  std::uint32_t alloc(std::size_t size) {
    ev.push_back({true, next, size});
    return next++;
  }
  void free(std::uint32_t id) { ev.push_back({false, id, 0}); }
};

// Synthetic: ResNet-50 training steps in fp16 at 224x224 as a hand-written approximation (kept
// for comparison with the simulated trace below): forward keeps each layer's output for the
// backward pass and uses a short-lived workspace per convolution; backward walks the layers in
// reverse, creating input gradients and weight gradients and freeing what it consumed; the
// optimizer step frees the weight gradients. Weights and momentum live for the whole run.
std::vector<event> resnet50_trace(const std::vector<int>& batches) {
  trace_builder t;
  struct layer {
    std::size_t in_bytes, out_bytes, weight_bytes;
    bool conv;
  };
  std::vector<layer> proto;  // per-sample sizes, filled once
  auto add_conv = [&](int cin, int cout, int k, int hin, int stride) {
    const int hout = hin / stride;
    proto.push_back({static_cast<std::size_t>(cin) * hin * hin * 2, static_cast<std::size_t>(cout) * hout * hout * 2,
                     static_cast<std::size_t>(cin) * cout * k * k * 2, true});
    // Batch norm + ReLU on the output: same-sized activations.
    proto.push_back({static_cast<std::size_t>(cout) * hout * hout * 2, static_cast<std::size_t>(cout) * hout * hout * 2,
                     static_cast<std::size_t>(cout) * 4 * 2, false});
    return hout;
  };
  int h = add_conv(3, 64, 7, 224, 2) / 2;  // stem + max pool
  int cin = 64;
  const int blocks[4] = {3, 4, 6, 3}, mids[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s)
    for (int b = 0; b < blocks[s]; ++b) {
      const int stride = (b == 0 && s > 0) ? 2 : 1;
      const int mid = mids[s], out = mids[s] * 4;
      add_conv(cin, mid, 1, h, 1);
      const int h2 = add_conv(mid, mid, 3, h, stride);
      add_conv(mid, out, 1, h2, 1);
      if (b == 0) add_conv(cin, out, 1, h, stride);  // projection shortcut
      h = h2;
      cin = out;
    }
  proto.push_back({static_cast<std::size_t>(cin) * 2, 1000 * 2, static_cast<std::size_t>(cin) * 1000 * 2, true});  // fc

  std::vector<std::uint32_t> weights, momentum;
  for (const auto& l : proto) weights.push_back(t.alloc(l.weight_bytes));
  for (int batch : batches) {
    const auto B = static_cast<std::size_t>(batch);
    const auto input = t.alloc(proto[0].in_bytes * B);
    std::vector<std::uint32_t> saved;
    for (const auto& l : proto) {
      const auto out = t.alloc(l.out_bytes * B);
      if (l.conv) {
        const auto ws = t.alloc(std::min<std::size_t>(l.out_bytes * B / 2 + 4096, 64u << 20));
        t.free(ws);
      }
      saved.push_back(out);
    }
    const auto loss_grad = t.alloc(proto.back().out_bytes * B);
    std::uint32_t grad = loss_grad;
    std::vector<std::uint32_t> wgrads;
    for (std::size_t i = proto.size(); i-- > 0;) {
      const auto& l = proto[i];
      const auto gin = t.alloc(l.in_bytes * B);
      if (l.conv) {
        const auto ws = t.alloc(std::min<std::size_t>(l.in_bytes * B / 2 + 4096, 64u << 20));
        t.free(ws);
      }
      wgrads.push_back(t.alloc(l.weight_bytes));
      t.free(grad);
      t.free(saved[i]);
      grad = gin;
    }
    t.free(grad);
    t.free(input);
    if (momentum.empty())
      for (const auto& l : proto) momentum.push_back(t.alloc(l.weight_bytes));
    for (auto g : wgrads) t.free(g);
  }
  for (auto w : weights) t.free(w);
  for (auto m : momentum) t.free(m);
  return t.ev;
}

// MiniMalloc instances as alloc/free streams: frees before allocs at equal times.
std::vector<event> trace_from_plan(const std::vector<npurt::memplan::buffer>& b) {
  struct te {
    std::int64_t t;
    int kind;
    std::uint32_t i;
  };
  std::vector<te> v;
  for (std::uint32_t i = 0; i < b.size(); ++i) {
    v.push_back({b[i].lower, 1, i});
    v.push_back({b[i].upper, 0, i});
  }
  std::sort(v.begin(), v.end(), [](const te& x, const te& y) {
    return x.t != y.t ? x.t < y.t : x.kind != y.kind ? x.kind < y.kind : x.i < y.i;
  });
  std::vector<event> ev;
  for (const auto& e : v) ev.push_back({e.kind == 1, e.i, static_cast<std::size_t>(b[e.i].size)});
  return ev;
}

// The simulator's ResNet-50 training step at a batch size, `steps` times: parameters, momentum
// and FP16 weight copies allocated once, everything else per step.
std::vector<event> simulated_resnet50_trace(std::int64_t batch, int steps) {
  const auto tr = npurt::models::training_step_trace(batch);
  std::vector<event> ev;
  for (const auto& e : npurt::models::repeated_events(tr, steps))
    ev.push_back({e.alloc, e.buffer, static_cast<std::size_t>(e.size)});
  return ev;
}

struct replay_result {
  std::size_t lb = 0, peak_allocated = 0, peak_reserved = 0;
  double frag_at_peak = 0, frag_max = 0, ns_per_event = 0;
  std::uint64_t device_allocs = 0;
  std::string error;  // set when the replay ran out of device memory
};

replay_result replay(const std::vector<event>& ev, allocation_strategy strategy,
                     std::size_t capacity = std::size_t{64} << 30) {
  replay_result r;
  std::size_t live = 0;
  std::vector<std::size_t> sizes;
  for (const auto& e : ev) {
    if (e.id >= sizes.size()) sizes.resize(e.id + 1);
    if (e.alloc) {
      sizes[e.id] = e.size;
      live += e.size;
      r.lb = std::max(r.lb, live);
    } else {
      live -= sizes[e.id];
    }
  }
  counting_provider dev(capacity);
  caching_allocator_options o;
  o.strategy = strategy;
  caching_allocator a(dev, o);
  std::vector<std::uint64_t> addr(sizes.size());
  // Untimed pass for the memory numbers: fragmentation is sampled whenever reserved peaks.
  std::size_t last_peak = 0;
  for (const auto& e : ev) {
    if (e.alloc) {
      std::error_code ec;
      addr[e.id] = a.allocate(e.size, 0, ec);
      if (ec) {
        r.error = ec.message();
        r.peak_allocated = a.used_high();
        r.peak_reserved = a.reserved_high();
        return r;
      }
    } else {
      a.deallocate(addr[e.id], 0);
    }
    const auto reserved = a.reserved_current();
    if (reserved > last_peak || (e.alloc && reserved == last_peak)) {
      last_peak = reserved;
      const double f = a.snapshot().fragmentation();
      r.frag_at_peak = f;
      r.frag_max = std::max(r.frag_max, f);
    }
  }
  r.peak_allocated = a.used_high();
  r.peak_reserved = a.reserved_high();
  r.device_allocs = a.stats().num_device_alloc;
  // Timed pass: steady state, the cache warm from the pass above.
  // Enough repetitions for about a million events, best of three rounds.
  const std::size_t reps = std::max<std::size_t>(1, 1'000'000 / ev.size());
  r.ns_per_event = 1e300;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t rep = 0; rep < reps; ++rep)
      for (const auto& e : ev) {
        if (e.alloc) addr[e.id] = a.allocate(e.size, 0);
        else a.deallocate(addr[e.id], 0);
      }
    r.ns_per_event = std::min(r.ns_per_event,
                              std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                                  static_cast<double>(reps * ev.size()));
  }
  return r;
}

// The instances ship with the repository (test/data/memplan); the build passes their path.
std::string find_data(const char* arg) {
  if (arg) return arg;
  return NPURT_MEMPLAN_DATA;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench/allocator: the pool's cached alloc+free pair against glibc and mimalloc, and allocation "
      "traces replayed under the segmented and compact strategies.",
      "allocator"};
  std::string json_path, data_dir;
  std::size_t iters = 5'000'000;
  bool replays_only = false, cached_only = false;
  app.add_option("--json", json_path, "also write the numbers as JSON to this file");
  app.add_option("--iters", iters, "alloc+free pairs per measurement")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}));
  app.add_option("--data", data_dir, "folder of MiniMalloc instances; default: the repository's test/data/memplan")
      ->check(CLI::ExistingDirectory);
  auto* replays_flag = app.add_flag("--replays-only", replays_only, "skip the alloc+free measurements");
  app.add_flag("--cached-only", cached_only, "skip the replays")->excludes(replays_flag);
  CLI11_PARSE(app, argc, argv);
  const char* json = json_path.empty() ? nullptr : json_path.c_str();
  const char* data = data_dir.empty() ? nullptr : data_dir.c_str();
  const int repeat = 3;
  const std::size_t slots = 4096;
  const auto w = make_workload(replays_only ? 0 : iters, slots);

  void* probe = std::malloc(16);
  const bool malloc_is_mimalloc = mi_is_in_heap_region(probe);
  std::free(probe);

  counting_provider dev(std::size_t{64} << 30);
  caching_allocator cache(dev);
  struct cached_row {
    const char* name;
    double slots_ns, hot_ns;
  };
  std::vector<cached_row> rows;
  // Skipped with --replays-only: the replays are the slow part to iterate on, this the noisy one.
  if (!replays_only) {
    rows.push_back({"glibc malloc/free",
                    ns_per_pair(
                        w, slots, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(__libc_malloc(s)); },
                        [](std::uintptr_t p) { __libc_free(reinterpret_cast<void*>(p)); }, repeat),
                    ns_hot(
                        iters, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(__libc_malloc(s)); },
                        [](std::uintptr_t p) { __libc_free(reinterpret_cast<void*>(p)); }, repeat)});
    rows.push_back({"mi_malloc/mi_free",
                    ns_per_pair(
                        w, slots, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(mi_malloc(s)); },
                        [](std::uintptr_t p) { mi_free(reinterpret_cast<void*>(p)); }, repeat),
                    ns_hot(
                        iters, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(mi_malloc(s)); },
                        [](std::uintptr_t p) { mi_free(reinterpret_cast<void*>(p)); }, repeat)});
    rows.push_back(
        {"host_heap (64 B aligned)",
         ns_per_pair(
             w, slots, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(host_heap::allocate(s)); },
             [](std::uintptr_t p) { host_heap::deallocate(reinterpret_cast<void*>(p)); }, repeat),
         ns_hot(
             iters, [](std::size_t s) { return reinterpret_cast<std::uintptr_t>(host_heap::allocate(s)); },
             [](std::uintptr_t p) { host_heap::deallocate(reinterpret_cast<void*>(p)); }, repeat)});
    rows.push_back({"caching_allocator",
                    ns_per_pair(
                        w, slots, [&](std::size_t s) { return static_cast<std::uintptr_t>(cache.allocate(s, 0)); },
                        [&](std::uintptr_t p) { cache.deallocate(p, 0); }, repeat),
                    ns_hot(
                        iters, [&](std::size_t s) { return static_cast<std::uintptr_t>(cache.allocate(s, 0)); },
                        [&](std::uintptr_t p) { cache.deallocate(p, 0); }, repeat)});
    // The std::error_code overloads, which the runtime's non-throwing paths call.
    std::error_code ec;
    rows.push_back({"caching_allocator (ec)",
                    ns_per_pair(
                        w, slots, [&](std::size_t s) { return static_cast<std::uintptr_t>(cache.allocate(s, 0, ec)); },
                        [&](std::uintptr_t p) { cache.deallocate(p, 0, ec); }, repeat),
                    ns_hot(
                        iters, [&](std::size_t s) { return static_cast<std::uintptr_t>(cache.allocate(s, 0, ec)); },
                        [&](std::uintptr_t p) { cache.deallocate(p, 0, ec); }, repeat)});
  }
  const double glibc_slots = replays_only ? 1 : rows[0].slots_ns, mi_slots = replays_only ? 1 : rows[1].slots_ns;
  const double glibc_hot = replays_only ? 1 : rows[0].hot_ns, mi_hot = replays_only ? 1 : rows[1].hot_ns;

  if (!replays_only) {
    std::printf("cached path: ns per alloc+free pair (%zu pairs, best of %d; malloc() in this binary is %s)\n", iters,
                repeat, malloc_is_mimalloc ? "mimalloc" : "glibc");
    std::printf("%-26s %12s %9s %9s %12s %9s %9s\n", "allocator", "4096 slots", "/glibc", "/mimalloc", "hot 4 KiB",
                "/glibc", "/mimalloc");
  }
  for (const auto& r : rows)
    std::printf("%-26s %12.1f %9.2f %9.2f %12.1f %9.2f %9.2f\n", r.name, r.slots_ns, r.slots_ns / glibc_slots,
                r.slots_ns / mi_slots, r.hot_ns, r.hot_ns / glibc_hot, r.hot_ns / mi_hot);
  // The goal for the cached path: an alloc+free pair in at most 100 ns.
  constexpr double target_ns = 100.0;
  if (!replays_only)
    std::printf(
        "target <= %.0f ns per pair: caching_allocator at %.2f x target (4096 slots), %.2f x target (hot 4 KiB)\n",
        target_ns, rows[3].slots_ns / target_ns, rows[3].hot_ns / target_ns);

  struct trace_row {
    std::string name;
    std::size_t events;
    replay_result seg, cmp;
  };
  std::vector<trace_row> traces;
  auto add_trace = [&](std::string name, const std::vector<event>& ev, std::size_t capacity = std::size_t{64} << 30) {
    traces.push_back({std::move(name), ev.size(), replay(ev, allocation_strategy::segmented, capacity),
                      replay(ev, allocation_strategy::compact, capacity)});
  };
  // The simulator's training step on a 32 GiB device (an Ascend 910's HBM); 3 steps warm the cache.
  for (const std::int64_t batch : {32, 256})
    if (!cached_only)
      add_trace("sim resnet50 b" + std::to_string(batch) + " x3 steps", simulated_resnet50_trace(batch, 3),
                std::size_t{32} << 30);
  if (!cached_only) {
    add_trace("synthetic resnet50 b32 x3", resnet50_trace({32, 32, 32}));
    add_trace("synthetic resnet50 b32..25", resnet50_trace({32, 30, 27, 31, 25, 32}));
  }
  const std::string dir = find_data(data);
  for (const char* inst : {"minimalloc_A", "minimalloc_K"}) {
    if (cached_only) break;
    std::error_code ec;
    std::string msg;
    const auto t = npurt::memplan::read_csv_file(dir + "/" + inst + ".csv", ec, msg);
    if (!ec) add_trace(inst, trace_from_plan(t.buffers));
    else std::fprintf(stderr, "allocator: skipping %s (%s)\n", inst, msg.c_str());
  }
  if (!cached_only) {
    std::printf("\nreplays (LB = peak requested live bytes; frag = 1 - largest free / free, at the reserved peak)\n");
    std::printf("%-28s %7s %9s | %-9s %9s %9s %6s %8s | %-9s %9s %9s %6s %8s\n", "trace", "events", "LB MiB",
                "segmented", "rsv/alloc", "rsv/LB", "frag", "ns/ev", "compact", "rsv/alloc", "rsv/LB", "frag", "ns/ev");
    const double m = 1024.0 * 1024.0;
    for (const auto& t : traces) {
      const double lb = static_cast<double>(t.seg.lb);
      for (const auto* r : {&t.seg, &t.cmp})
        if (!r->error.empty())
          std::printf("%-28s %s: %s\n", t.name.c_str(), r == &t.seg ? "segmented" : "compact", r->error.c_str());
      std::printf("%-28s %7zu %9.1f | %9.1f %9.3f %9.3f %6.3f %8.1f | %9.1f %9.3f %9.3f %6.3f %8.1f\n", t.name.c_str(),
                  t.events, lb / m, static_cast<double>(t.seg.peak_reserved) / m,
                  static_cast<double>(t.seg.peak_reserved) / static_cast<double>(t.seg.peak_allocated),
                  static_cast<double>(t.seg.peak_reserved) / lb, t.seg.frag_at_peak, t.seg.ns_per_event,
                  static_cast<double>(t.cmp.peak_reserved) / m,
                  static_cast<double>(t.cmp.peak_reserved) / static_cast<double>(t.cmp.peak_allocated),
                  static_cast<double>(t.cmp.peak_reserved) / lb, t.cmp.frag_at_peak, t.cmp.ns_per_event);
    }
    std::printf(
        "(segmented/compact columns: peak reserved MiB, ratios, fragmentation, replay ns per event;\n"
        " sim = the simulator's ResNet-50 step, models/memory_trace.hpp; synthetic = a hand-written approximation)\n");
  }

  if (json) {
    std::ofstream out(json);
    out << "{\n  \"benchmark\": \"allocator\",\n  \"pairs\": " << (replays_only ? 0 : iters)
        << ",\n  \"malloc_is_mimalloc\": " << (malloc_is_mimalloc ? "true" : "false")
        << ",\n  \"target_ns_per_pair\": " << target_ns << ",\n  \"cached_path\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      out << "    {\"allocator\": \"" << r.name << "\", \"slots_ns_per_pair\": " << r.slots_ns
          << ", \"slots_ratio_glibc\": " << r.slots_ns / glibc_slots
          << ", \"slots_ratio_mimalloc\": " << r.slots_ns / mi_slots << ", \"hot_ns_per_pair\": " << r.hot_ns
          << ", \"hot_ratio_glibc\": " << r.hot_ns / glibc_hot << ", \"hot_ratio_mimalloc\": " << r.hot_ns / mi_hot
          << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    out << "  ],\n  \"replays\": [\n";
    for (std::size_t i = 0; i < traces.size(); ++i) {
      const auto& t = traces[i];
      auto emit = [&](const char* k, const replay_result& r) {
        out << "\"" << k << "\": {\"peak_reserved\": " << r.peak_reserved
            << ", \"peak_allocated\": " << r.peak_allocated << ", \"reserved_over_allocated\": "
            << static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated)
            << ", \"reserved_over_lb\": " << static_cast<double>(r.peak_reserved) / static_cast<double>(r.lb)
            << ", \"fragmentation_at_peak\": " << r.frag_at_peak << ", \"fragmentation_max\": " << r.frag_max
            << ", \"ns_per_event\": " << r.ns_per_event << ", \"device_allocs\": " << r.device_allocs
            << ", \"oom\": " << (r.error.empty() ? "false" : "true") << "}";
      };
      out << "    {\"trace\": \"" << t.name << "\", \"events\": " << t.events << ", \"lower_bound\": " << t.seg.lb
          << ", ";
      emit("segmented", t.seg);
      out << ", ";
      emit("compact", t.cmp);
      out << "}" << (i + 1 < traces.size() ? "," : "") << "\n";
    }
    out << "  ]\n}\n";
    out.close();
    if (!out) {
      std::fprintf(stderr, "allocator: cannot write %s\n", json);
      return 1;
    }
  }
  return npurt_bench::checked_stdout("allocator", 0);
}
