// A small hand-made program fed to the profiler through the observer interface, and the numbers
// a person works out for it with pencil and paper (times in µs):
//
//   device 0, stream 1 (prio 4):  matmul [0,10]  record ev7 @10  relu [12,20] (ready 10: engine busy)
//   device 0, stream 2 (prio 0):  wait ev7 [2,10]  all_reduce [10,25]  d2h [30,34] (launched at 30)
//   device 0, stream 3 (prio 4):  fill [0,2]  fill [6,8] (an allocation on stream 3 landed at 6)
//   device 1, stream 10 (prio 4): k1 [0,5]  all_reduce [9,25] (ready 5: waits for its peer)
//   link hccs 0->1 [10,25] 4096 B; collective steps on device 0: [10,17] and [17,25]
//   host lane 0: range "step" [0,34], mark "launch" at 1
#pragma once

#include <npurt/profiler.hpp>

#include <sys/wait.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace test_program {

inline npurt::sim_time us(double v) { return npurt::sim_time{npurt::picoseconds{static_cast<std::int64_t>(v * 1e6)}}; }
inline npurt::picoseconds dus(double v) { return npurt::picoseconds{static_cast<std::int64_t>(v * 1e6)}; }

struct task_spec {
  std::uint64_t id;
  npurt::device_id device;
  std::uint32_t stream;
  std::uint8_t priority;
  npurt::task_kind kind;
  npurt::engine_kind engine;
  double submitted, ready, start, end;
  const char* name;
  std::uint64_t flops = 0, bytes = 0;
  npurt::device_id src = -1, dst = -1;
};

inline std::vector<task_spec> tasks() {
  using npurt::engine_kind;
  using npurt::task_kind;
  return {
      {1, 0, 1, 4, task_kind::kernel, engine_kind::ai_core, 0, 0, 0, 10, "matmul", 2000000, 65536},
      {2, 0, 1, 4, task_kind::event_record, engine_kind::none, 0, 10, 10, 10, "record"},
      {3, 0, 1, 4, task_kind::kernel, engine_kind::ai_core, 1, 10, 12, 20, "relu", 1000, 4096},
      {4, 0, 2, 0, task_kind::event_wait, engine_kind::none, 2, 2, 2, 10, "wait"},
      {5, 0, 2, 0, task_kind::collective, engine_kind::collective, 2, 10, 10, 25, "all_reduce", 0, 4096},
      {6, 0, 2, 0, task_kind::memcpy, engine_kind::copy_d2h, 30, 30, 30, 34, "d2h", 0, 1024, 0, -1},
      {7, 0, 3, 4, task_kind::kernel, engine_kind::ai_core, 0, 0, 0, 2, "fill", 10, 10},
      {8, 0, 3, 4, task_kind::kernel, engine_kind::ai_core, 0, 6, 6, 8, "fill", 10, 10},
      {9, 1, 10, 4, task_kind::kernel, engine_kind::ai_core, 0, 0, 0, 5, "k1"},
      {10, 1, 10, 4, task_kind::collective, engine_kind::collective, 0, 5, 9, 25, "all_reduce", 0, 4096},
  };
}

/// Feeds the program to an observer. `shuffle_seed` != 0 reports tasks, waits, links and steps
/// in another order (a profiler's outputs must not depend on it).
inline void feed(npurt::observer& o, unsigned shuffle_seed = 0) {
  o.on_stream_created(0, 1, 4);
  o.on_stream_created(0, 2, 0);
  o.on_stream_created(0, 3, 4);
  o.on_stream_created(1, 10, 4);
  o.on_host_range({npurt::host_range_op::push, "step", 0, us(0)});
  o.on_host_range({npurt::host_range_op::mark, "launch", 0, us(1)});
  o.on_memory({0, npurt::memory_op::alloc, 0x1000, 1 << 20, 1 << 20, 2 << 20, 3, us(6)});
  auto ts = tasks();
  if (shuffle_seed != 0) std::shuffle(ts.begin(), ts.end(), std::mt19937{shuffle_seed});
  std::vector<std::string> names;  // the names die before the profiler writes: it must copy them
  for (const auto& s : ts) names.emplace_back(s.name);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto& s = ts[i];
    npurt::task_info t;
    t.id = s.id;
    t.device = s.device;
    t.stream = s.stream;
    t.priority = s.priority;
    t.kind = s.kind;
    t.engine = s.engine;
    t.submitted = us(s.submitted);
    t.ready = us(s.ready);
    t.start = us(s.start);
    t.end = us(s.end);
    t.name = names[i];
    t.flops = s.flops;
    t.bytes = s.bytes;
    t.copy.src_device = s.src;
    t.copy.dst_device = s.dst;
    t.copy.bytes = s.bytes;
    if (s.id == 2) o.on_event_record({7, 2, 0, 1, us(10)});
    if (s.id == 4) o.on_event_wait({7, 4, 0, 2, 2, 0, 1, us(2), us(10)});
    o.on_task(t);
  }
  for (auto& n : names) n.assign(n.size(), '#');
  std::string link = "hccs", op = "all_reduce", algo = "ring";
  npurt::collective_step_info s0{5, op, algo, 0, 1, 0, 2048, us(10), us(17)};
  npurt::collective_step_info s1{5, op, algo, 0, 1, 1, 2048, us(17), us(25)};
  if (shuffle_seed != 0) std::swap(s0, s1);
  o.on_collective_step(s0);
  o.on_collective_step(s1);
  o.on_link_transfer({link, 0, 1, 4096, us(10), us(25)});
  link = "XXXX";
  op = "XXXXXXXXXX";
  o.on_host_range({npurt::host_range_op::pop, {}, 0, us(34)});
  o.on_shutdown(us(40));
}

/// Runs `tool args` with stdout and stderr into `out_file`: (exit status or -1, what it printed).
inline std::pair<int, std::string> run_tool(const std::string& tool, const std::string& args,
                                            const std::string& out_file) {
  const int st = std::system((tool + " " + args + " > " + out_file + " 2>&1").c_str());
  std::ifstream in(out_file);
  std::ostringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

}  // namespace test_program
