// npurt/profiler/summary.hpp — what a run did, computed from its trace: busy time and
// utilisation per device, engine and stream, the idle gaps of each stream and why they happened,
// the kernels that took longest, and the critical path. Written as text or JSON.
//
// Time and memory are O(n log n) and O(n) in the size of the trace.
//
// @par Thread Safety
// Pure functions of their arguments.
#pragma once

#include <npurt/config.hpp>
#include <npurt/profiler/trace_data.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace npurt {

/// Why a stream sat idle between two pieces of work.
enum class gap_cause : std::uint8_t {
  event,   // a wait on an event blocked the stream
  peer,    // the next task is a collective: it waited for its peers
  memory,  // a stream-ordered allocation completed when the gap ended
  host,    // the host had not launched the next task yet (launch overhead, host work)
  engine,  // the next task was ready but its engine was busy with other streams
  other,
  queue,  // the next task was held in the device's execution queue behind earlier tasks of other
          // streams (dispatch_model::shared_fifo's head-of-line blocking)
};

constexpr std::string_view to_string(gap_cause c) noexcept {
  switch (c) {
    case gap_cause::event: return "event";
    case gap_cause::peer: return "peer";
    case gap_cause::memory: return "memory";
    case gap_cause::host: return "host";
    case gap_cause::engine: return "engine";
    case gap_cause::other: return "other";
    case gap_cause::queue: return "queue";
  }
  return "?";
}

/// What a run did, computed from records only (see summarize()).
///
/// Busy time is the union of the intervals of tasks that occupy an engine (control tasks such
/// as event records and waits do not); utilisation is busy time over the span of the whole
/// trace (first task start to last task end).
struct profile_summary {
  struct gap {
    sim_time begin{};
    sim_time end{};
    gap_cause cause = gap_cause::other;
    std::uint64_t next_task = 0;  // the task whose start ended the gap
    std::uint64_t event = 0;      // cause == event: the event waited on
    [[nodiscard]] picoseconds duration() const noexcept { return end - begin; }
  };
  struct stream_stats {
    device_id device = 0;
    std::uint32_t stream = 0;
    std::uint8_t priority = 4;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
    picoseconds idle{0};  // sum of the gaps
    std::vector<gap> gaps;
  };
  struct engine_stats {
    engine_kind engine = engine_kind::none;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
  };
  struct device_stats {
    device_id device = 0;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
    picoseconds compute{0};        // union of ai_core work
    picoseconds communication{0};  // union of collectives and peer copies
    picoseconds overlap{0};        // time both ran at once
    double overlap_fraction = 0;   // overlap / communication (0 without communication)
    std::size_t peak_memory = 0;   // largest in_use reported
    std::vector<engine_stats> engines;
  };
  struct kernel_stats {
    std::string name;
    std::uint64_t count = 0;
    picoseconds total{0};
    picoseconds max{0};
    std::uint64_t flops = 0;
    std::uint64_t bytes = 0;
  };
  struct path_task {
    std::uint64_t id = 0;
    std::string name;
    device_id device = 0;
    std::uint32_t stream = 0;
    task_kind kind = task_kind::kernel;
    engine_kind engine = engine_kind::none;
    sim_time start{};
    sim_time end{};
    bool via_event = false;  // its predecessor on the path is the record task of an event it waited on
    // It has no predecessor on the device (the first task of its stream): its predecessor on the
    // path is the task that ended last before the host enqueued it, what the host waited for.
    bool via_host = false;
    // A collective part that waited for its peers: its predecessor on the path is the part of the
    // rank that arrived last.
    bool via_peer = false;
    // Held in its device's execution queue (dispatch_model::shared_fifo) after everything it
    // depended on had ended: its predecessor on the path is the task it was dispatched behind.
    bool via_queue = false;
  };

  std::uint64_t tasks = 0;
  std::uint64_t failed_tasks = 0;  // tasks that failed or were aborted (counted in tasks too)
  std::uint64_t tasks_before_attach = 0;  // trace_data::tasks_before_attach: enqueued unrecorded
  sim_time begin{};
  sim_time end{};
  picoseconds span{0};
  std::vector<device_stats> devices;
  std::vector<stream_stats> streams;
  std::vector<kernel_stats> top_kernels;  // by total time, longest first
  /// Walked back from the task that ends last, each step to the predecessor (previous task on
  /// the stream, or the record task of an event it waited on) that ended last, or to the task a
  /// part waited for: the last rank's part of a collective, the task it was held behind in its
  /// device's execution queue, what the host waited for. First task first.
  std::vector<path_task> critical_path;
  picoseconds critical_path_length{0};  // last end - first start
  picoseconds critical_path_busy{0};    // sum of the durations of path tasks that use an engine
};

/// The summary of a trace. Tasks with duplicate ids or dependency cycles (which a trace reader
/// rejects) do not make it loop: the critical path visits each task at most once.
NPURT_DECL profile_summary summarize(const trace_data& data, std::size_t top_kernels = 10);
NPURT_DECL void write_summary_text(std::ostream& os, const profile_summary& s);
NPURT_DECL void write_summary_json(std::ostream& os, const profile_summary& s);

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/summary.ipp>
#include <npurt/impl/summary_output.ipp>
#endif
