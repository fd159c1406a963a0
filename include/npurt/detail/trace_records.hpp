// npurt/detail/trace_records.hpp — the packed task records a profiler appends during a run
// (internal: profiler::data() expands them into trace_tasks).
#pragma once

#include <npurt/backend.hpp>

#include <cstdint>

namespace npurt {
namespace detail {

// A task as the profiler keeps it while the run goes on: 40 bytes, built in place in its
// trace_chunks. Times are the end and three 32-bit steps back from it (4.29 ms of picoseconds
// each). What is usually zero or absent (flops, bytes, block_dim, copy endpoints, a device above
// 62) and steps that do not fit follow the head only when needed, flagged in `flags`.
// profiler::data() expands them into trace_tasks.
struct task_head {
  std::uint64_t id;
  std::int64_t end;
  std::uint32_t run;   // end - start
  std::uint32_t wait;  // start - ready
  std::uint32_t stream;
  std::uint8_t priority;
  task_kind kind;
  engine_kind engine;
  std::uint8_t flags;   // without has_extra: the device
  std::uint32_t queue;  // ready - submitted
  std::uint32_t name;

  static constexpr std::uint8_t has_extra = 0x40;
  static constexpr std::uint8_t has_times = 0x80;
  static constexpr std::uint8_t device_mask = 0x3f;  // devices 0 .. 62 fit in the head
};

struct task_extra {
  std::uint64_t flops;
  std::uint64_t bytes;
  std::uint32_t block_dim;
  device_id device;
  device_id src_device;
  device_id dst_device;
};

struct task_times {
  std::int64_t submitted;
  std::int64_t ready;
  std::int64_t start;
};

}  // namespace detail

}  // namespace npurt
