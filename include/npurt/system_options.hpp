// npurt/system_options.hpp — the options of a system that do not belong to the hardware preset.
#pragma once

#include <npurt/time.hpp>

#include <cstdint>

namespace npurt {

/// How a device's task scheduler orders the tasks of its streams.
enum class dispatch_model : std::uint8_t {
  /// Each stream's head goes to the engines as soon as its stream order and events allow;
  /// the engines order waiting tasks by (priority, arrival).
  per_stream,
  /// One execution queue per device and priority level, in submission order (detail/device_queue.hpp).
  shared_fifo,
};

/// The longest system_options::launch_overhead a system takes: 1 s. A host pays microseconds for
/// an asynchronous launch (aclrtLaunchKernel, cudaLaunchKernel); a much larger value is a unit
/// mistake, and one near the end of virtual time would put a stream's host lane there, and the
/// clock with it, after a launch or two.
inline constexpr picoseconds max_launch_overhead{1'000'000'000'000};

/// Options of an npurt::system. Every hardware number (host-to-host copy bandwidth included)
/// comes from the backend's preset; these are the runtime's own.
struct system_options {
  /// Host time one enqueue (launch, copy, memset, record, wait) costs the calling host lane:
  /// the order CANN and CUDA measure for an asynchronous launch.
  picoseconds launch_overhead{2'500'000};
  /// Host time each node after the first of a replayed stream_graph costs the launching lane
  /// (the first costs launch_overhead: the graph's own launch). A replay submits work the
  /// runtime prepared and checked at capture, so a node costs the host tens of nanoseconds,
  /// the order CUDA graphs show (80 kernels launched in 3.5 us of CPU time, CUDA.jl's graph
  /// documentation). At most max_launch_overhead.
  picoseconds graph_node_overhead{50'000};
  /// Attach a profiler and write a Chrome trace at shutdown when NPURT_TRACE is set.
  bool trace_from_env = true;
  /// Reject calls from a thread other than the one that created the system with
  /// errc::wrong_thread (the loop is single-threaded). Always on in builds without NDEBUG.
  bool check_thread = false;
  /// The devices' task scheduler (detail/device_queue.hpp). The default is the one the CANN
  /// runtime documents: every stream of a device feeds one execution queue per priority level.
  dispatch_model dispatch = dispatch_model::shared_fifo;
};

}  // namespace npurt
