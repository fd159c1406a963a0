// libFuzzer target: the Chrome trace reader and every output of what it accepts.
//
// Properties checked on every input, beyond "no crash, no sanitizer report, no hang":
//   - a rejected trace has a short message (a prefix of the input at most);
//   - an accepted trace passes check_trace(), and its summary reports nothing impossible: no
//     critical path with more tasks than exist, no busy time beyond the span;
//   - the Chrome trace written from it reads back.
#include <npurt/profiler/chrome_trace.hpp>
#include <npurt/profiler/summary.hpp>
#include <npurt/profiler/svg_timeline.hpp>
#include <npurt/profiler/trace_reader.hpp>

#include <boost/json/src.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_summary(const npurt::trace_data& d) {
  const auto s = npurt::summarize(d, 5);
  check(s.critical_path.size() <= d.tasks.size());
  check(s.critical_path_busy <= s.critical_path_length);
  for (const auto& dev : s.devices) check(dev.busy <= s.span && dev.overlap <= dev.communication);
  for (const auto& st : s.streams) check(st.busy <= s.span && st.idle <= s.span);
  std::ostringstream os;
  npurt::write_summary_text(os, s);
  npurt::write_summary_json(os, s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(bytes), size};
  std::error_code ec;
  std::string message;
  const auto d = npurt::read_chrome_trace(text, ec, message);
  if (ec) {
    check(message.size() < 400);
    return 0;
  }
  check(npurt::check_trace(d).empty());
  check_summary(d);
  npurt::svg_options opts;
  opts.max_bars = 64;  // exercise the merging path on small inputs too
  std::ostringstream svg;
  npurt::write_svg(svg, d, opts);
  std::ostringstream chrome;
  npurt::write_chrome_trace(chrome, d);
  (void)npurt::read_chrome_trace(chrome.str(), ec, message);
  check(!ec);
  return 0;
}
