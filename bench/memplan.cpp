// bench/memplan: the static planner on every instance in test/data/memplan, on the simulator's
// ResNet-50 training step (models/memory_trace.hpp: every tensor of the step's kernel list with its
// lifetime, batch 32 and 256, planned with 512 B alignment) and on synthetic DNN-like instances
// of 30,000 and 60,000 buffers. Prints arena / lower bound, no reuse / lower bound and plan time;
// --json PATH writes the same numbers; --write-trace DIR also writes the ResNet-50 steps as CSV
// (npurt-memplan's input).
//
//   memplan [--data DIR] [--json PATH] [--repeat N] [--write-trace DIR]
// DIR defaults to the repository's test/data/memplan.
#include <npurt/memplan.hpp>
#include <npurt/models/graphs.hpp>
#include <npurt/models/memory_trace.hpp>
#include <npurt/models/resnet50.hpp>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
namespace mp = npurt::memplan;

namespace {

// The instances ship with the repository (test/data/memplan); the build passes their path.
std::string find_data(const char* arg) {
  if (arg) return arg;
  return NPURT_MEMPLAN_DATA;
}

// A DNN-like trace: two buffers start per step; most die within a few steps (layer
// temporaries), some live for a few hundred (skip connections, saved activations), a few for
// thousands (activations kept for the backward pass). Sizes log-uniform 512 B .. 16 MiB.
std::vector<mp::buffer> synthetic(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<mp::buffer> b;
  b.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto lo = static_cast<std::int64_t>(i / 2);
    const auto r = rng() % 1000;
    std::int64_t life;
    if (r < 850) life = 1 + static_cast<std::int64_t>(rng() % 6);
    else if (r < 990) life = 10 + static_cast<std::int64_t>(rng() % 200);
    else life = 500 + static_cast<std::int64_t>(rng() % 4000);
    const double e = 9.0 + static_cast<double>(rng() % 1000) / 1000.0 * 15.0;  // 2^9 .. 2^24
    const auto size = (static_cast<std::uint64_t>(std::pow(2.0, e)) + 511) / 512 * 512;
    b.push_back({static_cast<std::int64_t>(i), lo, lo + life, size});
  }
  return b;
}

// ---- compiler-style graphs of 30,000-60,000 buffers, built from the models ----------------------
//
// One training step as a compiler's memory planner sees it: kernels in launch order, each reading
// and writing tensors; a buffer lives from the first kernel that touches it to the last one + 1.
struct step_graph {
  enum class kind : std::uint8_t { per_micro_batch, shared, persistent };
  std::vector<std::uint64_t> bytes;  // by tensor
  std::vector<kind> kinds;           // by tensor
  struct kernel {
    int phase = 0;  // 0 forward, 1 backward, 2 update
    std::vector<std::uint32_t> touches;
  };
  std::vector<kernel> kernels;
};

// The simulator's ResNet-50 training step (models/resnet50.hpp): weight gradients accumulate over
// the micro-batches (one buffer each), parameters and optimizer state persist.
step_graph resnet50_step(std::int64_t micro_batch) {
  const npurt::models::resnet50 model(micro_batch);
  step_graph g;
  for (const auto& t : model.tensors()) {
    g.bytes.push_back(t.bytes());
    using npurt::models::tensor_role;
    g.kinds.push_back(npurt::models::is_persistent(t.role) ? step_graph::kind::persistent
                      : t.role == tensor_role::weight_grad ? step_graph::kind::shared
                                                           : step_graph::kind::per_micro_batch);
  }
  for (std::size_t k = 0; k < model.accesses().size(); ++k) {
    step_graph::kernel kn;
    kn.phase = static_cast<int>(model.phases()[k]);
    const auto& a = model.accesses()[k];
    kn.touches = a.reads;
    kn.touches.insert(kn.touches.end(), a.writes.begin(), a.writes.end());
    g.kernels.push_back(std::move(kn));
  }
  return g;
}

// A Transformer stack (models::bert_large with `layers` encoder blocks) in training: the graph's
// operators in topological order are the forward kernels; the backward kernel of each operator,
// in reverse, reads what it read (saved activations) and its outputs' gradients and writes its
// inputs' gradients; the update reads each weight's accumulated gradient and writes the weight.
step_graph transformer_step(std::int64_t micro_batch, std::int64_t seq, int layers) {
  npurt::graph gr = npurt::models::bert_large(micro_batch, seq, false, layers, npurt::dtype::f16);
  gr.validate();
  std::map<std::string, std::uint32_t, std::less<>> id, grad;
  step_graph g;
  auto tensor = [&](auto& ids, const std::string& name, step_graph::kind k) {
    auto [it, fresh] = ids.try_emplace(name, static_cast<std::uint32_t>(g.bytes.size()));
    if (fresh) {
      const auto& v = gr.value(name);
      g.bytes.push_back(
          std::max<std::uint64_t>(1, static_cast<std::uint64_t>(v.shape.elements()) * npurt::size_of(v.type)));
      g.kinds.push_back(k);
    }
    return it->second;
  };
  auto is_weight = [&](const std::string& name) { return gr.value(name).kind == npurt::value_kind::constant; };
  const auto order = gr.topological_order();
  for (auto n : order) {
    step_graph::kernel kn;
    for (const auto& x : gr.nodes()[n].inputs)
      if (!x.empty())
        kn.touches.push_back(
            tensor(id, x, is_weight(x) ? step_graph::kind::persistent : step_graph::kind::per_micro_batch));
    for (const auto& y : gr.nodes()[n].outputs) kn.touches.push_back(tensor(id, y, step_graph::kind::per_micro_batch));
    g.kernels.push_back(std::move(kn));
  }
  std::vector<std::string> weights;
  for (auto r = order.rbegin(); r != order.rend(); ++r) {
    const auto& nd = gr.nodes()[*r];
    step_graph::kernel kn;
    kn.phase = 1;
    for (const auto& y : nd.outputs) kn.touches.push_back(tensor(grad, y, step_graph::kind::per_micro_batch));
    for (const auto& x : nd.inputs) {
      if (x.empty()) continue;
      kn.touches.push_back(id.at(x));
      const bool w = is_weight(x);
      if (w && !grad.count(x)) weights.push_back(x);
      kn.touches.push_back(tensor(grad, x, w ? step_graph::kind::shared : step_graph::kind::per_micro_batch));
    }
    g.kernels.push_back(std::move(kn));
  }
  for (const auto& w : weights) g.kernels.push_back({2, {grad.at(w), id.at(w)}});
  return g;
}

// Runs `micro_batches` micro-batches of a step through one device in the 1F1B order of pipeline
// parallelism (Narayanan et al., PipeDream-Flush, SC'21): `warmup` forward passes, then one
// forward and one backward alternately, then the remaining backward passes and one update.
// warmup >= micro_batches is GPipe's order (every forward before any backward). Every
// per-micro-batch tensor becomes one buffer per micro-batch.
// activations_only: plan only what a compiler's activation arena holds (weights, weight gradients
// and optimizer state live elsewhere).
std::vector<mp::buffer> pipelined(const step_graph& g, int micro_batches, int warmup, bool activations_only = false) {
  std::vector<std::pair<int, int>> blocks;  // (micro-batch, phase)
  int next_forward = 0;
  for (; next_forward < std::min(warmup, micro_batches); ++next_forward) blocks.emplace_back(next_forward, 0);
  for (int m = 0; m < micro_batches; ++m) {
    if (next_forward < micro_batches) blocks.emplace_back(next_forward++, 0);
    blocks.emplace_back(m, 1);
  }
  blocks.emplace_back(0, 2);
  const std::size_t nt = g.bytes.size();
  // Buffer key: tensor t of micro-batch m is t + m * nt; shared and persistent ones use m = 0.
  std::vector<std::int64_t> first(nt * static_cast<std::size_t>(micro_batches), -1), last(first.size(), -1);
  std::int64_t time = 0;
  for (const auto& [m, phase] : blocks)
    for (const auto& k : g.kernels) {
      if (k.phase != phase) continue;
      for (auto t : k.touches) {
        const std::size_t key =
            t + (g.kinds[t] == step_graph::kind::per_micro_batch ? static_cast<std::size_t>(m) * nt : 0);
        if (first[key] < 0) first[key] = time;
        last[key] = time;
      }
      ++time;
    }
  std::vector<mp::buffer> b;
  for (std::size_t key = 0; key < first.size(); ++key) {
    if (first[key] < 0) continue;
    if (activations_only && g.kinds[key % nt] != step_graph::kind::per_micro_batch) continue;
    const bool persistent = g.kinds[key % nt] == step_graph::kind::persistent;
    b.push_back({static_cast<std::int64_t>(b.size()), persistent ? 0 : first[key], persistent ? time : last[key] + 1,
                 g.bytes[key % nt]});
  }
  return b;
}

struct row {
  std::string name;
  std::size_t n = 0;
  std::uint64_t alignment = 1;
  std::uint64_t lb = 0, no_reuse = 0, greedy = 0, best_of = 0, plan = 0;
  double greedy_ms = 0, best_of_ms = 0, plan_ms = 0;
  std::string method;
  bool valid = false;
  double peak_mib = -1;  // large graphs: the planner's peak resident memory (measured in a child)
};

template <class F>
double time_ms(F&& f, int repeat) {
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

row measure(const std::string& name, const std::vector<mp::buffer>& b, int repeat, std::uint64_t alignment = 1) {
  row r;
  r.name = name;
  r.n = b.size();
  r.alignment = alignment;
  r.lb = mp::lower_bound(b);
  r.no_reuse = mp::no_reuse_size(b);
  mp::plan g, bo, full;
  r.greedy_ms = time_ms([&] { g = mp::greedy_plan(b, mp::order::size, mp::fit::best, alignment); }, repeat);
  mp::options only_orders;
  only_orders.search_work = 0;
  only_orders.alignment = alignment;
  r.best_of_ms = time_ms([&] { bo = mp::make_plan(b, only_orders); }, repeat);
  mp::options defaults;
  defaults.alignment = alignment;
  r.plan_ms = time_ms([&] { full = mp::make_plan(b, defaults); }, repeat);
  r.greedy = g.arena_size;
  r.best_of = bo.arena_size;
  r.plan = full.arena_size;
  r.method = full.method;
  r.valid = mp::check(b, full.offsets, alignment).valid && mp::check(b, g.offsets, alignment).valid &&
            mp::check(b, bo.offsets, alignment).valid;
  return r;
}

// The large graphs are measured in child processes forked before anything else runs, each of
// which builds its graph and plans it, so that each one's peak resident memory is its own: the
// child's peak RSS (wait4) minus the RSS it inherited at fork. It includes the graph and the
// model it came from, so it bounds the planner's own memory from above.
struct large_graph {
  std::string name;
  std::vector<mp::buffer> (*make)();
};

std::size_t rss_kib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

row measure_isolated(const large_graph& lg, int repeat, std::uint64_t alignment) {
  row r;
  r.name = lg.name;
  r.alignment = alignment;
  const std::size_t base = rss_kib();
  int fd[2];
  if (pipe(fd) != 0) return r;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    const auto b = lg.make();
    const row c = measure(lg.name, b, repeat, alignment);
    std::string out = std::to_string(c.n) + " " + std::to_string(c.lb) + " " + std::to_string(c.no_reuse) + " " +
                      std::to_string(c.greedy) + " " + std::to_string(c.best_of) + " " + std::to_string(c.plan) + " " +
                      std::to_string(c.greedy_ms) + " " + std::to_string(c.best_of_ms) + " " +
                      std::to_string(c.plan_ms) + " " + (c.valid ? "1 " : "0 ") + c.method;
    const char* p = out.c_str();
    for (std::size_t left = out.size(); left > 0;) {
      const auto w = write(fd[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    close(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  std::string text;
  char buf[256];
  for (ssize_t got; (got = read(fd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(got));
  close(fd[0]);
  int status = 0;
  struct rusage ru{};
  if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return r;
  char method[128] = {};
  int valid = 0;
  unsigned long long n = 0, lb = 0, nr = 0, gr = 0, bo = 0, pl = 0;
  if (std::sscanf(text.c_str(), "%llu %llu %llu %llu %llu %llu %lf %lf %lf %d %127s", &n, &lb, &nr, &gr, &bo, &pl,
                  &r.greedy_ms, &r.best_of_ms, &r.plan_ms, &valid, method) != 11)
    return r;
  r.n = n;
  r.lb = lb;
  r.no_reuse = nr;
  r.greedy = gr;
  r.best_of = bo;
  r.plan = pl;
  r.valid = valid == 1;
  r.method = method;
  const auto peak = static_cast<std::size_t>(ru.ru_maxrss);
  r.peak_mib = static_cast<double>(peak > base ? peak - base : 0) / 1024.0;
  return r;
}

// 30,000-60,000 buffers each. Sequential micro-batches (gradient accumulation: warm-up 1) keep a
// micro-batch's buffers apart from the next one's; pipeline orders overlap many micro-batches.
const std::vector<large_graph>& large_graphs() {
  static const std::vector<large_graph> g{
      {"resnet50_accum_mb32x96", [] { return pipelined(resnet50_step(32), 96, 1); }},
      {"resnet50_1f1b_mb16x96", [] { return pipelined(resnet50_step(16), 96, 4); }},
      {"bert24_accum_mb4x40", [] { return pipelined(transformer_step(4, 512, 24), 40, 1); }},
      {"bert24_gpipe_mb2x24", [] { return pipelined(transformer_step(2, 512, 24), 24, 24); }},
      {"bert96_1f1b_mb1x10", [] { return pipelined(transformer_step(1, 512, 96), 10, 4); }},
      // Activations only, as a compiler plans them.
      {"resnet50_accum_mb32x96_act", [] { return pipelined(resnet50_step(32), 96, 1, true); }},
      {"resnet50_1f1b_mb16x96_act", [] { return pipelined(resnet50_step(16), 96, 4, true); }},
      {"bert24_accum_mb4x40_act", [] { return pipelined(transformer_step(4, 512, 24), 40, 1, true); }},
      {"bert24_gpipe_mb2x24_act", [] { return pipelined(transformer_step(2, 512, 24), 24, 24, true); }},
      {"bert96_1f1b_mb1x10_act", [] { return pipelined(transformer_step(1, 512, 96), 10, 4, true); }},
  };
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench/memplan: the static planner on the instances of test/data/memplan, the simulator's "
      "ResNet-50 step and synthetic DNN-like instances; arena / lower bound and plan time.",
      "memplan"};
  std::string data_dir, json_path, trace_dir;
  int repeat = 3;
  app.add_option("--data", data_dir, "folder of instances (CSV); default: the repository's test/data/memplan")
      ->check(CLI::ExistingDirectory);
  app.add_option("--json", json_path, "also write the numbers as JSON to this file");
  app.add_option("--repeat", repeat, "rounds per instance; the best time is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--write-trace", trace_dir, "also write the ResNet-50 steps as CSV (npurt-memplan's input) here")
      ->check(CLI::ExistingDirectory);
  bool small_only = false;
  app.add_flag("--small-only", small_only, "skip the compiler-style graphs of 30,000-60,000 buffers");
  std::string only;
  app.add_option("--only", only, "run only the instances whose name contains this");
  CLI11_PARSE(app, argc, argv);
  const char* data_arg = data_dir.empty() ? nullptr : data_dir.c_str();
  const char* json = json_path.empty() ? nullptr : json_path.c_str();
  const char* write_trace = trace_dir.empty() ? nullptr : trace_dir.c_str();
  const std::string dir = find_data(data_arg);
  // A folder named on the command line that holds no instance is a mistake (a wrong path, the
  // CSVs elsewhere), not a run without instances: said before the long part of the run.
  if (data_arg) {
    bool any_csv = false;
    for (auto& e : fs::directory_iterator(dir)) any_csv = any_csv || e.path().extension() == ".csv";
    if (!any_csv) {
      std::fprintf(stderr, "memplan: --data %s: no instance (*.csv) in this folder\n", dir.c_str());
      return 1;
    }
  }
  // Compiler-style graphs from the models, 512 B aligned as a device planner would place them;
  // first, while this process is small (see measure_isolated).
  const auto want = [&](const std::string& name) { return name.find(only) != std::string::npos; };
  std::vector<row> large;
  if (!small_only)
    for (const auto& lg : large_graphs())
      if (want(lg.name)) large.push_back(measure_isolated(lg, repeat, 512));
  std::vector<row> rows;
  std::vector<std::string> files;
  if (fs::is_directory(dir))
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".csv" && want(e.path().stem().string())) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty() && only.empty())
    std::fprintf(stderr, "memplan: no instances found in %s (use --data DIR)\n", dir.c_str());
  for (const auto& f : files) {
    std::error_code ec;
    std::string msg;
    const auto t = mp::read_csv_file(f, ec, msg);
    if (ec) {
      std::fprintf(stderr, "memplan: %s\n", msg.c_str());
      return 1;
    }
    rows.push_back(measure(fs::path(f).stem().string(), t.buffers, repeat));
  }
  // The simulated training step: what a framework would plan ahead for one step's tensors.
  for (const std::int64_t batch : {32, 256}) {
    const auto tr = npurt::models::training_step_trace(batch);
    std::vector<mp::buffer> b;
    for (const auto& x : tr.buffers) b.push_back({x.id, x.lower, x.upper, x.size});
    const std::string name = "sim_resnet50_b" + std::to_string(batch);
    if (want(name)) rows.push_back(measure(name, b, repeat, 512));
    if (write_trace) {
      const std::string path = std::string(write_trace) + "/" + name + ".csv";
      std::ofstream out(path);
      npurt::models::write_csv(out, tr);
      if (!out) {
        std::fprintf(stderr, "memplan: cannot write %s\n", path.c_str());
        return 1;
      }
    }
  }
  if (want("synthetic_30000")) rows.push_back(measure("synthetic_30000", synthetic(30000, 1), repeat));
  if (want("synthetic_60000")) rows.push_back(measure("synthetic_60000", synthetic(60000, 2), repeat));
  rows.insert(rows.end(), large.begin(), large.end());
  if (rows.empty()) {
    std::fprintf(stderr, "memplan: no instance matches --only '%s'\n", only.c_str());
    return 1;
  }

  std::printf("%-26s %6s %12s %8s %9s %9s %9s %10s %10s %10s %8s  %s\n", "instance", "n", "LB", "naive/LB", "greedy/LB",
              "bestof/LB", "plan/LB", "greedy ms", "bestof ms", "plan ms", "peak MiB", "method");
  for (const auto& r : rows) {
    const double lb = static_cast<double>(r.lb);
    char peak[32] = "-";
    if (r.peak_mib >= 0) std::snprintf(peak, sizeof peak, "%.1f", r.peak_mib);
    std::printf("%-26s %6zu %12llu %8.2f %9.4f %9.4f %9.4f %10.2f %10.2f %10.2f %8s  %s%s\n", r.name.c_str(), r.n,
                static_cast<unsigned long long>(r.lb), static_cast<double>(r.no_reuse) / lb,
                static_cast<double>(r.greedy) / lb, static_cast<double>(r.best_of) / lb,
                static_cast<double>(r.plan) / lb, r.greedy_ms, r.best_of_ms, r.plan_ms, peak, r.method.c_str(),
                r.valid ? "" : "  INVALID");
  }
  std::printf(
      "(naive = no reuse; sim_resnet50_*: the simulator's training step, offsets aligned to 512 B;\n"
      " resnet50_*, bert*: a training step of micro-batches from models/ (accum: one after another, 1f1b/gpipe:\n"
      " pipeline orders; _act: activations only, without weights, weight gradients and optimizer state), 512 B "
      "aligned;\n"
      " peak MiB: the planner's peak resident memory over make_plan, greedy_plan and check, in a child process)\n");
  if (json) {
    std::ofstream out(json);
    out << "{\n  \"benchmark\": \"memplan\",\n  \"repeat\": " << repeat << ",\n  \"instances\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      const double lb = static_cast<double>(r.lb);
      out << "    {\"name\": \"" << r.name << "\", \"n\": " << r.n << ", \"lower_bound\": " << r.lb
          << ", \"no_reuse\": " << r.no_reuse << ", \"alignment\": " << r.alignment
          << ", \"greedy_size_best_fit\": " << r.greedy << ", \"best_of_orders\": " << r.best_of
          << ", \"plan\": " << r.plan << ", \"greedy_ratio\": " << static_cast<double>(r.greedy) / lb
          << ", \"best_of_ratio\": " << static_cast<double>(r.best_of) / lb
          << ", \"plan_ratio\": " << static_cast<double>(r.plan) / lb << ", \"greedy_ms\": " << r.greedy_ms
          << ", \"best_of_ms\": " << r.best_of_ms << ", \"plan_ms\": " << r.plan_ms << ", \"method\": \"" << r.method
          << "\", \"valid\": " << (r.valid ? "true" : "false");
      if (r.peak_mib >= 0) out << ", \"peak_mib\": " << r.peak_mib;
      out << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    out << "  ]\n}\n";
    out.close();
    if (!out) {
      std::fprintf(stderr, "memplan: cannot write %s\n", json);
      return 1;
    }
  }
  for (const auto& r : rows)
    if (!r.valid) return 1;
  return npurt_bench::checked_stdout("memplan", 0);
}
