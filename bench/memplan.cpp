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
#include <npurt/models/memory_trace.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

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

struct row {
  std::string name;
  std::size_t n = 0;
  std::uint64_t alignment = 1;
  std::uint64_t lb = 0, no_reuse = 0, greedy = 0, best_of = 0, plan = 0;
  double greedy_ms = 0, best_of_ms = 0, plan_ms = 0;
  std::string method;
  bool valid = false;
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
  CLI11_PARSE(app, argc, argv);
  const char* data_arg = data_dir.empty() ? nullptr : data_dir.c_str();
  const char* json = json_path.empty() ? nullptr : json_path.c_str();
  const char* write_trace = trace_dir.empty() ? nullptr : trace_dir.c_str();
  const std::string dir = find_data(data_arg);
  std::vector<row> rows;
  std::vector<std::string> files;
  if (fs::is_directory(dir))
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".csv") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) std::fprintf(stderr, "memplan: no instances found in %s (use --data DIR)\n", dir.c_str());
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
    rows.push_back(measure(name, b, repeat, 512));
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
  rows.push_back(measure("synthetic_30000", synthetic(30000, 1), repeat));
  rows.push_back(measure("synthetic_60000", synthetic(60000, 2), repeat));

  std::printf("%-18s %6s %12s %8s %9s %9s %9s %10s %10s %10s  %s\n", "instance", "n", "LB", "naive/LB", "greedy/LB",
              "bestof/LB", "plan/LB", "greedy ms", "bestof ms", "plan ms", "method");
  for (const auto& r : rows) {
    const double lb = static_cast<double>(r.lb);
    std::printf("%-18s %6zu %12llu %8.2f %9.4f %9.4f %9.4f %10.2f %10.2f %10.2f  %s%s\n", r.name.c_str(), r.n,
                static_cast<unsigned long long>(r.lb), static_cast<double>(r.no_reuse) / lb,
                static_cast<double>(r.greedy) / lb, static_cast<double>(r.best_of) / lb,
                static_cast<double>(r.plan) / lb, r.greedy_ms, r.best_of_ms, r.plan_ms, r.method.c_str(),
                r.valid ? "" : "  INVALID");
  }
  std::printf("(naive = no reuse; sim_resnet50_*: the simulator's training step, offsets aligned to 512 B)\n");
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
          << "\", \"valid\": " << (r.valid ? "true" : "false") << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    out << "  ]\n}\n";
  }
  for (const auto& r : rows)
    if (!r.valid) return 1;
  return 0;
}
