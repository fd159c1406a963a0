// npurt/system_options.hpp — the options of a system that do not belong to the hardware preset.
#pragma once

#include <npurt/time.hpp>

namespace npurt {

/// Options of an npurt::system. Every hardware number (host-to-host copy bandwidth included)
/// comes from the backend's preset; these are the runtime's own.
struct system_options {
  /// Host time one enqueue (launch, copy, memset, record, wait) costs the calling host lane:
  /// the order CANN and CUDA measure for an asynchronous launch.
  picoseconds launch_overhead{2'500'000};
  /// Attach a profiler and write a Chrome trace at shutdown when NPURT_TRACE is set.
  bool trace_from_env = true;
  /// Reject calls from a thread other than the one that created the system with
  /// errc::wrong_thread (the loop is single-threaded). Always on in builds without NDEBUG.
  bool check_thread = false;
};

}  // namespace npurt
