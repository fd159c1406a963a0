// npurt/profiler/trace_reader.hpp — loads a Chrome trace written by npurt::write_chrome_trace
// back into trace_data, so a trace file can be summarised and rendered again (npurt-trace does).
//
// Uses Boost.JSON: the program links its library (-lboost_json; Debian's libboost-json1.83-dev),
// or compiles its bodies once by including <boost/json/src.hpp> in exactly one translation unit.
// This header includes only the declarations.
//
// What comes back is what the trace holds: tasks, event waits (from the flow arrows), event
// records (attached to their record tasks), memory operations, link transfers, collective
// steps, host ranges and streams. Engine tracks and counters are derived data and are skipped.
//
// A trace file is input from outside: the reader checks it before anything computes with it, and
// a trace it returns is one every output can handle without overflow or impossible figures.
//   - Times are non-negative and at most max_trace_time (2^62 ps, about 53 days); durations are
//     non-negative and an event's end (start + duration) is within that range too.
//   - Device ids are -1 (host) .. max_trace_devices - 1; tasks, streams and waits are on devices.
//   - Task ids are unique, and the dependencies (stream order by id, and each wait's record task)
//     form no cycle.
//   - The durations of all tasks, and their flops and bytes, add up without overflow.
//   - A name is at most max_trace_name bytes; a file at most trace_read_limits::max_bytes.
// Anything else is errc::parse_error with a message that names the event (traceEvents[i]) and
// the field, and quotes at most a short prefix of the offending text.
//
// @par Thread Safety
// Pure functions of their arguments.
#pragma once

#include <npurt/error.hpp>
#include <npurt/profiler/trace_data.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace npurt {

/// The largest time a trace may hold, in picoseconds: sums of two times still fit an int64.
inline constexpr std::int64_t max_trace_time = std::int64_t{1} << 62;
/// Device ids in a trace are below this.
inline constexpr std::int64_t max_trace_devices = std::int64_t{1} << 20;
/// The longest name (kernel, link, range) a trace may hold, in bytes.
inline constexpr std::size_t max_trace_name = 4096;

struct trace_read_limits {
  /// A larger file is rejected before it is parsed.
  std::size_t max_bytes = std::size_t{8} << 30;
};

/// Reads a Chrome trace JSON text written by npurt. On failure sets ec to errc::parse_error,
/// puts a message saying where and what in `message`, and returns empty data.
inline trace_data read_chrome_trace(std::string_view text, std::error_code& ec, std::string& message);

/// Throwing overload: npurt::caller_error with code errc::parse_error.
inline trace_data read_chrome_trace(std::string_view text);

/// Reads a trace file in pieces (the text is never held whole). A file that cannot be opened sets
/// ec to the system's reason (std::generic_category: no_such_file_or_directory,
/// permission_denied, ...); one larger than limits.max_bytes, to errc::parse_error. `message`
/// does not repeat the path, which the caller knows.
inline trace_data read_chrome_trace_file(const std::string& path, std::error_code& ec, std::string& message,
                                         const trace_read_limits& limits = {});

/// Throwing overload: npurt::caller_error with errc::parse_error for a file that is not an npurt
/// trace, an npurt::error with the system's code for one that cannot be opened or read; what()
/// starts with the path.
inline trace_data read_chrome_trace_file(const std::string& path, const trace_read_limits& limits = {});

/// Checks data against the rules above (the reader calls it). Empty when valid, else what is
/// wrong, naming the task.
inline std::string check_trace(const trace_data& data);

}  // namespace npurt

#include <npurt/impl/trace_reader.hpp>
