// npurt/profiler/svg_timeline.hpp — a trace as a static SVG timeline: a row per stream, engine
// lane, collective-step lane, link and host lane, a bar per task, a time axis and a legend.
//
// A picture of a large trace does not draw every task: past svg_options::max_bars bars, bars
// closer than a pixel on the same row merge into one (its tooltip says how many tasks it
// covers) and host marks are left out, so the file grows with the picture's size, not with the
// trace.
//
// @par Thread Safety
// Pure functions of their arguments.
#pragma once

#include <npurt/config.hpp>
#include <npurt/profiler/trace_data.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>

namespace npurt {

/// Options of write_svg(). check() says what is wrong with them; write_svg throws
/// caller_error(errc::invalid_argument) on options that fail it.
struct svg_options {
  std::string title = "npurt timeline";
  double width = 1200;       // pixels, whole image: 200 .. 100000
  double label_width = 190;  // pixels left of the time axis: 0 .. width
  double row_height = 18;    // 4 .. 200
  bool engines = true;  // engine occupancy rows
  bool links = true;    // link and collective-step rows
  bool host = true;     // host range rows
  bool control = true;  // ticks for event records and waits
  /// Above this many bars, bars less than a pixel apart on a row are merged.
  std::size_t max_bars = 20000;

  /// Empty when the options are usable, else what is wrong with them.
  [[nodiscard]] NPURT_DECL std::string check() const;
};

NPURT_DECL void write_svg(std::ostream& os, const trace_data& data, const svg_options& opts = {});

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/svg_timeline.ipp>
#endif
