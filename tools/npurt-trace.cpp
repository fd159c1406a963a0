// npurt-trace — summarise or render a Chrome trace written by npurt.
//
//   npurt-trace summarize TRACE.json [--json] [--top N]
//   npurt-trace svg TRACE.json -o OUT.svg [--width PX] [--title TEXT] [--no-engines] [--no-links]
//
// Exit codes: 0 success (and --help), 1 bad command line, 2 the input is not a readable npurt
// trace or the output cannot be written.
#include <npurt/profiler/summary.hpp>
#include <npurt/profiler/svg_timeline.hpp>
#include <npurt/profiler/trace_reader.hpp>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstddef>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace {

int fail(const std::string& why) {
  std::cerr << "npurt-trace: " << why << '\n';
  return 2;
}

/// Writes the whole of `text` and closes the file; false if any byte did not reach it.
bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  out.close();
  return !out.fail();
}

struct command_line {
  std::string input, output;
  bool json = false;
  std::size_t top = 10;
  npurt::svg_options svg;
  bool summarize = false;
};

}  // namespace

int main(int argc, char** argv) try {
  command_line cl;
  CLI::App app{
      "Summarise or render a Chrome trace written by npurt (exit 1: bad command line, 2: bad input or "
      "output)",
      "npurt-trace"};
  app.require_subcommand(1);
  auto* sum = app.add_subcommand("summarize", "Busy time, idle gaps and their causes, top kernels, critical path");
  sum->add_option("trace", cl.input, "Chrome trace JSON written by npurt")->required();
  sum->add_flag("--json", cl.json, "Write the summary as JSON");
  sum->add_option("--top", cl.top, "How many kernels to list")->check(CLI::Range(std::size_t{0}, std::size_t{1000000}));
  auto* svg = app.add_subcommand("svg", "Render the trace as an SVG timeline");
  svg->add_option("trace", cl.input, "Chrome trace JSON written by npurt")->required();
  svg->add_option("-o,--output", cl.output, "SVG file to write")->required();
  svg->add_option("--width", cl.svg.width, "Width of the picture in pixels (200 .. 100000)");
  svg->add_option("--title", cl.svg.title, "Title line (at most 1000 bytes)");
  svg->add_option("--max-bars", cl.svg.max_bars, "Above this many bars, merge bars closer than a pixel")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  bool no_engines = false, no_links = false;
  svg->add_flag("--no-engines", no_engines, "Leave out the engine occupancy rows");
  svg->add_flag("--no-links", no_links, "Leave out the link and collective-step rows");
  // CLI11 reports a misspelt command, or an option before the command, as "a subcommand is
  // required": name what it was given instead.
  if (argc > 1 && std::string_view{argv[1]} != "summarize" && std::string_view{argv[1]} != "svg" &&
      std::string_view{argv[1]} != "-h" && std::string_view{argv[1]} != "--help") {
    std::cerr << "npurt-trace: unknown " << (argv[1][0] == '-' ? "option" : "command") << " '" << argv[1]
              << "' (commands: summarize, svg)\nRun with --help for more information.\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) { return app.exit(e) == 0 ? 0 : 1; }
  cl.summarize = sum->parsed();
  cl.svg.engines = !no_engines;
  cl.svg.links = !no_links;
  // CLI11 reads "nan", "inf" and 1e300 as numbers: the options say what a usable one is.
  if (const auto why = cl.svg.check(); !cl.summarize && !why.empty()) {
    std::cerr << "npurt-trace: bad option: " << why << "\nRun with --help for more information.\n";
    return 1;
  }

  std::error_code ec;
  std::string message;
  const auto data = npurt::read_chrome_trace_file(cl.input, ec, message);
  if (ec) return fail(cl.input + ": " + message);

  std::ostringstream text;
  if (cl.summarize) {
    const auto s = npurt::summarize(data, cl.top);
    if (cl.json) npurt::write_summary_json(text, s);
    else npurt::write_summary_text(text, s);
    const auto out = text.str();
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
    std::cout.flush();
    if (!std::cout) return fail("cannot write the summary to standard output");
    return 0;
  }
  npurt::write_svg(text, data, cl.svg);
  errno = 0;
  if (!write_file(cl.output, text.str()))
    return fail("cannot write " + cl.output + (errno != 0 ? ": " + std::generic_category().message(errno) : ""));
  return 0;
} catch (const std::exception& e) { return fail(e.what()); }
