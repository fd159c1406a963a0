// npurt/profiler/chrome_trace.hpp — a trace in the Chrome trace event format (JSON), for
// ui.perfetto.dev and chrome://tracing. A process per device and one for the host; a track per
// stream, engine lane, collective-step lane, link and host lane; flow arrows from event records
// to the waits they released; counters for link bandwidth and memory in use. read_chrome_trace()
// (npurt/profiler/trace_reader.hpp) loads it back.
//
// @par Thread Safety
// A pure function of its arguments.
#pragma once

#include <npurt/config.hpp>
#include <npurt/profiler/trace_data.hpp>

#include <iosfwd>

namespace npurt {

/// Writes `data` as a Chrome trace. Times are microseconds with six decimals: exact picoseconds.
NPURT_DECL void write_chrome_trace(std::ostream& os, const trace_data& data);

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/chrome_trace.ipp>
#endif
