// npurt-trace — summarise or render a Chrome trace written by npurt.
//
//   npurt-trace summarize TRACE.json [--json] [--top N]
//   npurt-trace svg TRACE.json -o OUT.svg [--width PX] [--title TEXT] [--no-engines] [--no-links]
//
// Exit codes: 0 success, 1 bad command line, 2 the input is not a readable npurt trace (or the
// output cannot be written).
#include <npurt/detail/trace_reader.hpp>
#include <npurt/profiler.hpp>

// Boost.JSON's bodies, compiled once for this program.
#include <boost/json/src.hpp>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view usage =
    "usage: npurt-trace summarize TRACE.json [--json] [--top N]\n"
    "       npurt-trace svg TRACE.json -o OUT.svg [--width PX] [--title TEXT] [--no-engines] [--no-links]\n";

int bad_usage(std::string_view why) {
  std::cerr << "npurt-trace: " << why << '\n' << usage;
  return 1;
}

bool to_number(std::string_view s, double& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << usage;
    return args.empty() ? 1 : 0;
  }
  const std::string_view command = args[0];
  if (command != "summarize" && command != "svg") return bad_usage("unknown command '" + std::string{command} + "'");

  std::string input, output;
  bool json = false;
  std::size_t top = 10;
  npurt::svg_options svg;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const auto a = args[i];
    auto value = [&](std::string_view opt) -> std::string_view {
      if (i + 1 >= args.size()) {
        bad_usage(std::string{opt} + " needs a value");
        std::exit(1);
      }
      return args[++i];
    };
    if (a == "--json" && command == "summarize") {
      json = true;
    } else if (a == "--top" && command == "summarize") {
      double v = 0;
      if (!to_number(value(a), v) || v < 0) return bad_usage("--top needs a non-negative number");
      top = static_cast<std::size_t>(v);
    } else if ((a == "-o" || a == "--output") && command == "svg") {
      output = value(a);
    } else if (a == "--width" && command == "svg") {
      if (!to_number(value(a), svg.width) || svg.width < 200) return bad_usage("--width needs a number of pixels >= 200");
    } else if (a == "--title" && command == "svg") {
      svg.title = value(a);
    } else if (a == "--no-engines" && command == "svg") {
      svg.engines = false;
    } else if (a == "--no-links" && command == "svg") {
      svg.links = false;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      return bad_usage("unknown option '" + std::string{a} + "'");
    } else if (input.empty()) {
      input = a;
    } else {
      return bad_usage("more than one input file");
    }
  }
  if (input.empty()) return bad_usage("no input trace");
  if (command == "svg" && output.empty()) return bad_usage("svg needs -o OUT.svg");

  std::error_code ec;
  std::string message;
  const auto data = npurt::read_chrome_trace_file(input, ec, message);
  if (ec) {
    std::cerr << "npurt-trace: " << input << ": " << message << '\n';
    return 2;
  }

  if (command == "summarize") {
    const auto s = npurt::summarize(data, top);
    if (json) npurt::write_summary_json(std::cout, s);
    else npurt::write_summary_text(std::cout, s);
    return std::cout ? 0 : 2;
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::cerr << "npurt-trace: cannot write " << output << '\n';
    return 2;
  }
  npurt::write_svg(out, data, svg);
  out.flush();
  if (!out) {
    std::cerr << "npurt-trace: cannot write " << output << '\n';
    return 2;
  }
  return 0;
}
