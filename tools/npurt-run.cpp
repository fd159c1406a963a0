// npurt-run — compile and run a model on a simulated NPU and say where its time and memory go.
//
//   npurt-run MODEL [--dim NAME=N]... [--preset NAME|FILE.ini] [--precision P] [--schedule S]
//             [--opt-level L] [--timing-only] [--runs N] [--seed N] [--top N]
//             [--batch N] [--seq N] [--layers N] [--trace PATH] [--svg PATH] [--json PATH]
//
// MODEL is an .onnx file (when npurt was built with ONNX import) or a built-in model: mlp,
// resnet50, transformer, bert-large. The run is on device 0 of the preset. Everything printed
// is virtual time and bytes, so two runs of one command print the same bytes.
//
// Exit codes: 0 success (and --help), 1 bad command line, 2 the model cannot be loaded, compiled
// or run, or an output cannot be written.
#include <npurt/detail/trace_format.hpp>
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>
#include <npurt/npurt.hpp>
#include <npurt/profiler.hpp>
#include <npurt/sim/sim.hpp>
#if NPURT_HAS_ONNX
#include <npurt/onnx.hpp>
#endif

#include "cli_options.hpp"
#include "run_inputs.hpp"

#include <boost/json.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

struct options {
  std::string model;
  std::vector<std::string> dims;
  std::string preset = "ascend910";
  std::string precision = "fp32";
  std::string schedule;
  std::optional<int> opt_level;
  bool timing_only = false;
  int runs = 1;
  std::uint64_t seed = 1;
  std::size_t top = 10;
  std::int64_t batch = 1, seq = 128;
  int layers = 24;
  std::string trace, svg, json;
};

constexpr std::string_view builtins[] = {"mlp", "resnet50", "transformer", "bert-large"};

bool is_builtin(std::string_view m) {
  return std::find(std::begin(builtins), std::end(builtins), m) != std::end(builtins);
}

/// The model as a graph: a built-in at the options' sizes (timing-only unless it is small enough
/// to compute: the MLP), or an ONNX file with its symbolic dimensions sized by --dim.
npurt::graph load_model(const options& o, const std::map<std::string, std::int64_t, std::less<>>& dims) {
  if (o.model == "mlp") return npurt::models::mlp(o.batch, {784, 512, 256, 10}, !o.timing_only, o.seed);
  if (o.model == "resnet50") return npurt::models::resnet50_graph(o.batch, 224, false, o.seed);
  if (o.model == "transformer")
    return npurt::models::transformer_encoder({.batch = o.batch, .seq = o.seq}, false, o.seed);
  if (o.model == "bert-large") return npurt::models::bert_large(o.batch, o.seq, false, o.layers);
#if NPURT_HAS_ONNX
  return npurt::onnx::load(o.model, {.dims = dims});
#else
  (void)dims;
  throw npurt::graph_error(npurt::make_error_code(npurt::errc::not_supported), {}, {},
                           "'" + o.model +
                               "' is no built-in model (mlp, resnet50, transformer, bert-large), and this npurt was "
                               "built without ONNX import");
#endif
}

std::optional<npurt::precision> parse_precision(std::string_view s) {
  for (auto p : {npurt::precision::fp32, npurt::precision::fp16, npurt::precision::bf16, npurt::precision::mixed})
    if (npurt::to_string(p) == s) return p;
  return std::nullopt;
}
std::optional<npurt::schedule> parse_schedule(std::string_view s) {
  for (auto p : {npurt::schedule::sequential, npurt::schedule::parallel, npurt::schedule::pipeline})
    if (npurt::to_string(p) == s) return p;
  return std::nullopt;
}

/// Bytes in the unit that keeps them readable: "512 B", "12.0 KiB", "97.69 MiB", "1.50 GiB".
std::string size_text(std::uint64_t b) {
  char buf[64];
  const auto d = static_cast<double>(b);
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024);
  else if (b < (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", d / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1 << 30));
  return buf;
}
double us(npurt::picoseconds p) { return static_cast<double>(p.count()) / 1e6; }

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  return !out.fail();
}

int fail(const std::string& why) {
  std::cerr << "npurt-run: " << why << '\n';
  return 2;
}

int bad_option(const std::string& why) {
  std::cerr << "npurt-run: " << why << "\nRun with --help for more information.\n";
  return 1;
}

/// `s` with each byte that is no part of a well-formed UTF-8 sequence replaced by U+FFFD: a path
/// or an ONNX node name may hold any bytes, JSON text is UTF-8 (RFC 8259), and Boost.JSON's
/// serializer copies a string's bytes as they are.
std::string utf8_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = npurt::detail::utf8_sequence_length(s.substr(i));
    if (n == 0) out += npurt::detail::utf8_replacement;
    else out += s.substr(i, n);
    i += n == 0 ? 1 : n;
  }
  return out;
}

struct type_total {
  std::size_t count = 0;
  npurt::picoseconds busy{0};
};

}  // namespace

int main(int argc, char** argv) try {
  options o;
  CLI::App app{
      "Compile and run a model on a simulated NPU: latency, memory and the operators that take the time "
      "(exit 1: bad command line, 2: the model cannot be loaded, compiled or run)",
      "npurt-run"};
  app.add_option("model", o.model, "An .onnx file, or a built-in model: mlp, resnet50, transformer, bert-large")
      ->required();
  app.add_option("--dim", o.dims, "NAME=N: the size of an ONNX input's symbolic dimension (repeatable)");
  app.add_option("--preset", o.preset, "Hardware: ascend910, ascend910b, or a preset INI file")->capture_default_str();
  app.add_option("--precision", o.precision, "What the graph computes in: fp32, fp16, bf16, mixed")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "sequential, parallel or pipeline (default: the session's)");
  app.add_option("--opt-level", o.opt_level, "Graph optimization level 0..3")->check(CLI::Range(0, 3));
  app.add_flag("--timing-only", o.timing_only, "Simulate without data, even for a model that has it");
  app.add_option("--runs", o.runs, "Runs of the compiled graph (the first warms the pool)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--seed", o.seed,
                 "Seed of the generated inputs (floats in [-1, 1), signed integers -4..3, unsigned 0..7, bools 0/1) "
                 "and of the MLP's weights")
      ->capture_default_str()
      ->check(npurt_cli::whole_number_u64());
  app.add_option("--top", o.top, "How many operators to list")
      ->check(CLI::Range(std::size_t{0}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Batch of a built-in model")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{65536}))
      ->capture_default_str();
  app.add_option("--seq", o.seq, "Sequence length of transformer and bert-large")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{65536}))
      ->capture_default_str();
  app.add_option("--layers", o.layers, "Encoder blocks of bert-large")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--trace", o.trace, "Write the run's Chrome trace (ui.perfetto.dev) to this file");
  app.add_option("--svg", o.svg, "Write the run's timeline as SVG to this file");
  app.add_option("--json", o.json, "Write the report as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) { return app.exit(e) == 0 ? 0 : 1; }

  const auto prec = parse_precision(o.precision);
  if (!prec) return bad_option("unknown precision '" + o.precision + "' (fp32, fp16, bf16, mixed)");
  std::optional<npurt::schedule> sched;
  if (!o.schedule.empty() && !(sched = parse_schedule(o.schedule)))
    return bad_option("unknown schedule '" + o.schedule + "' (sequential, parallel, pipeline)");
  std::map<std::string, std::int64_t, std::less<>> dims;
  for (const auto& d : o.dims) {
    const auto eq = d.find('=');
    std::int64_t v = 0;
    const char* end = d.data() + d.size();
    const auto [p, ec] =
        eq == std::string::npos ? std::from_chars(end, end, v) : std::from_chars(d.data() + eq + 1, end, v);
    if (eq == std::string::npos || eq == 0 || ec != std::errc{} || p != end || v < 1)
      return bad_option("--dim wants NAME=N with N a whole number of at least 1, not '" + d + "'");
    if (!dims.emplace(d.substr(0, eq), v).second) return bad_option("--dim gives '" + d.substr(0, eq) + "' twice");
  }
  if (is_builtin(o.model) && !dims.empty()) return bad_option("--dim sizes an ONNX model's inputs, not a built-in's");

  npurt::sim::preset pr;
  {
    std::error_code ec;
    std::string what;
    if (o.preset == "ascend910" || o.preset == "ascend910b") pr = npurt::sim::presets::by_name(o.preset, 1);
    else pr = npurt::sim::load_preset(o.preset, ec, &what);
    if (ec) {
      // A misspelt built-in name reads as a file that is not there: say which names there are.
      std::error_code exists_ec;
      const bool no_file = !std::filesystem::exists(o.preset, exists_ec);
      return fail("preset '" + o.preset + "': " + (what.empty() ? ec.message() : what) +
                  (no_file ? " (the built-in presets are ascend910 and ascend910b)" : ""));
    }
  }

  npurt::graph g = load_model(o, dims);
  npurt::system sys{pr};
  npurt::profiler prof;
  sys.add_observer(prof);
  npurt::session s{sys, {.precision = *prec}};
  npurt::compile_options copts;
  copts.schedule = sched;
  copts.optimization_level = o.opt_level;
  copts.timing_only = o.timing_only;
  const npurt::compiled_graph c = s.compile(g, copts);
  const npurt::compile_report& rep = c.report();

  std::vector<npurt::tensor> inputs;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const auto& v = g.value(g.inputs()[i]);
    inputs.push_back(npurt_run::make_input(v.shape, v.type, rep.timing_only, o.seed, i));
  }
  std::vector<npurt::feed> feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i) feeds.push_back({g.inputs()[i], inputs[i]});

  npurt::run_result last;
  npurt::picoseconds first_latency{0};
  for (int r = 0; r < o.runs; ++r) {
    // The trace and the operator table are the last run's: a steady state, past the first
    // run's pool growth.
    if (r == o.runs - 1) prof.clear();
    last = s.run(c, feeds);
    if (r == 0) first_latency = last.latency;
  }

  std::map<std::string, type_total> by_type;
  npurt::picoseconds busy_total{0};
  for (const auto& op : last.ops) {
    auto& t = by_type[op.type];
    ++t.count;
    t.busy += op.busy;
    busy_total += op.busy;
  }
  std::vector<const npurt::op_timing*> top;
  for (const auto& op : last.ops) top.push_back(&op);
  std::stable_sort(top.begin(), top.end(), [](const auto* a, const auto* b) { return a->busy > b->busy; });
  if (top.size() > o.top) top.resize(o.top);
  std::vector<std::pair<std::string, type_total>> types(by_type.begin(), by_type.end());
  std::stable_sort(types.begin(), types.end(),
                   [](const auto& a, const auto& b) { return a.second.busy > b.second.busy; });
  const auto share = [&](npurt::picoseconds p) {
    return busy_total.count() > 0 ? 100.0 * static_cast<double>(p.count()) / static_cast<double>(busy_total.count())
                                  : 0.0;
  };
  const double steady_us = us(last.latency);
  const double per_second = steady_us > 0 ? 1e6 / steady_us : 0;

  std::ostringstream out;
  char line[512];
  const auto put = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out << line;
  };
  put("model       %s%s\n", o.model.c_str(), rep.timing_only ? " (timing-only)" : "");
  put("device      %s, %s, %s schedule, optimization level %d%s\n", sys.device(0).properties().name.c_str(),
      std::string(npurt::to_string(*prec)).c_str(), std::string(npurt::to_string(rep.schedule)).c_str(),
      rep.optimization_level, rep.memory_reuse ? "" : ", no memory reuse");
  // compile_report::kernels counts kernels only: the copies in and out come on top.
  put("graph       %zu operator%s (%zu fused away), %zu kernel%s, %zu stream%s\n", rep.operators,
      rep.operators == 1 ? "" : "s", rep.fused, rep.kernels, rep.kernels == 1 ? "" : "s", rep.streams,
      rep.streams == 1 ? "" : "s");
  put("memory      peak %s: activations %s (lower bound %s, without reuse %s), weights %s, inputs and outputs %s\n",
      size_text(rep.peak_bytes()).c_str(), size_text(rep.activation_bytes).c_str(),
      size_text(rep.activation_lower_bound).c_str(), size_text(rep.activation_no_reuse_bytes).c_str(),
      size_text(rep.weight_bytes).c_str(), size_text(rep.io_bytes).c_str());
  put("latency     %.3f us first run, %.3f us steady (%d run%s): %.1f runs per second", us(first_latency), steady_us,
      o.runs, o.runs == 1 ? "" : "s", per_second);
  if (is_builtin(o.model)) put(", %.1f samples per second", per_second * static_cast<double>(o.batch));
  put("\n");
  if (!top.empty()) {
    put("\n%-40s %-20s %6s %12s %12s %7s\n", "operator", "type", "stream", "start us", "busy us", "share");
    for (const auto* op : top)
      put("%-40s %-20s %6u %12.3f %12.3f %6.1f%%\n", op->name.c_str(), op->type.c_str(), op->stream, us(op->start),
          us(op->busy), share(op->busy));
    put("\n%-20s %8s %12s %7s\n", "type", "count", "busy us", "share");
    for (const auto& [type, t] : types)
      put("%-20s %8zu %12.3f %6.1f%%\n", type.c_str(), t.count, us(t.busy), share(t.busy));
  }
  const std::string text = out.str();
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  if (!std::cout) return fail("cannot write the report to standard output");

  if (!o.json.empty()) {
    // Boost.JSON escapes quotes and control characters; utf8_text makes the rest UTF-8.
    boost::json::array ops;
    for (const auto& op : last.ops)
      ops.push_back({{"name", utf8_text(op.name)},
                     {"type", utf8_text(op.type)},
                     {"stream", op.stream},
                     {"start_ps", op.start.count()},
                     {"end_ps", op.end.count()},
                     {"busy_ps", op.busy.count()}});
    const boost::json::object report{{"model", utf8_text(o.model)},
                                     {"device", utf8_text(sys.device(0).properties().name)},
                                     {"precision", npurt::to_string(*prec)},
                                     {"schedule", npurt::to_string(rep.schedule)},
                                     {"optimization_level", rep.optimization_level},
                                     {"timing_only", rep.timing_only},
                                     {"operators", rep.operators},
                                     {"fused", rep.fused},
                                     {"kernels", rep.kernels},
                                     {"streams", rep.streams},
                                     {"peak_bytes", rep.peak_bytes()},
                                     {"activation_bytes", rep.activation_bytes},
                                     {"activation_lower_bound", rep.activation_lower_bound},
                                     {"activation_no_reuse_bytes", rep.activation_no_reuse_bytes},
                                     {"weight_bytes", rep.weight_bytes},
                                     {"io_bytes", rep.io_bytes},
                                     {"runs", o.runs},
                                     {"first_latency_ps", first_latency.count()},
                                     {"latency_ps", last.latency.count()},
                                     {"busy_ps", busy_total.count()},
                                     {"ops", std::move(ops)}};
    const std::string text_json = boost::json::serialize(report) + "\n";
    errno = 0;
    if (!write_file(o.json, text_json))
      return fail("cannot write " + o.json + (errno != 0 ? ": " + std::generic_category().message(errno) : ""));
  }
  if (!o.trace.empty()) {
    std::error_code ec;
    prof.write_chrome_trace(o.trace, ec);
    if (ec) return fail("cannot write " + o.trace + ": " + ec.message());
  }
  if (!o.svg.empty()) {
    std::error_code ec;
    prof.write_svg(o.svg, ec, {.title = o.model});
    if (ec) return fail("cannot write " + o.svg + ": " + ec.message());
  }
  return 0;
} catch (const npurt::graph_error& e) {
  // The library names its option for a dimension it cannot size; a user of this tool has --dim.
  const std::string what = e.what();
  if (what.find("load_options::dims") != std::string::npos)
    return fail(what + "\n(size a symbolic dimension with --dim NAME=N)");
  return fail(what);
} catch (const std::exception& e) { return fail(e.what()); }
