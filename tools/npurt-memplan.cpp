// npurt-memplan: plans a CSV of buffers (MiniMalloc's id,lower,upper,size format) into one arena
// and reports the arena against the lower bound (peak live bytes) and against no reuse.
//
//   npurt-memplan INPUT.csv [--output PLAN.csv] [--alignment N] [--greedy] [--search-work N]
//   npurt-memplan INPUT.csv --check PLAN.csv      verify an existing plan (any planner's)
#include <npurt/memplan.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace {

int usage() {
  std::cerr << "usage: npurt-memplan INPUT.csv [--output PLAN.csv] [--alignment N] [--greedy] [--search-work N]\n"
               "       npurt-memplan INPUT.csv --check PLAN.csv\n";
  return 2;
}

bool parse_u64(const char* s, std::uint64_t& v) {
  char* end = nullptr;
  v = std::strtoull(s, &end, 10);
  return end && *end == '\0' && *s != '\0' && *s != '-';
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, check_path;
  npurt::memplan::options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--output" || a == "-o") {
      const char* v = value();
      if (!v) return usage();
      output = v;
    } else if (a == "--check") {
      const char* v = value();
      if (!v) return usage();
      check_path = v;
    } else if (a == "--alignment") {
      const char* v = value();
      if (!v || !parse_u64(v, opts.alignment)) return usage();
    } else if (a == "--search-work") {
      const char* v = value();
      if (!v || !parse_u64(v, opts.search_work)) return usage();
    } else if (a == "--greedy") {
      opts.best_of_orders = false;
      opts.search_work = 0;
    } else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "npurt-memplan: unknown option " << a << "\n";
      return usage();
    } else if (input.empty()) {
      input = a;
    } else {
      return usage();
    }
  }
  if (input.empty()) return usage();

  std::error_code ec;
  std::string msg;
  auto t = npurt::memplan::read_csv_file(input, ec, msg);
  if (ec) {
    std::cerr << "npurt-memplan: " << msg << "\n";
    return 1;
  }
  const auto lb = npurt::memplan::lower_bound(t.buffers);
  const auto naive = npurt::memplan::no_reuse_size(t.buffers);

  std::vector<std::uint64_t> offsets;
  std::string method;
  double ms = 0;
  if (!check_path.empty()) {
    auto p = npurt::memplan::read_csv_file(check_path, ec, msg);
    if (ec) {
      std::cerr << "npurt-memplan: " << msg << "\n";
      return 1;
    }
    if (!p.has_offsets) {
      std::cerr << "npurt-memplan: " << check_path << ": no offset column\n";
      return 1;
    }
    offsets = p.offsets;
    t.buffers = p.buffers;
    method = "given plan";
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = npurt::memplan::make_plan(t.buffers, opts, ec);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ec) {
      std::cerr << "npurt-memplan: " << ec.message() << "\n";
      return 1;
    }
    offsets = std::move(plan.offsets);
    method = plan.method;
  }
  const auto rep = npurt::memplan::check(t.buffers, offsets, opts.alignment);
  std::printf("buffers      %zu\n", t.buffers.size());
  std::printf("method       %s\n", method.c_str());
  std::printf("arena        %llu bytes\n", static_cast<unsigned long long>(rep.arena_size));
  std::printf("lower bound  %llu bytes (peak live)\n", static_cast<unsigned long long>(lb));
  std::printf("no reuse     %llu bytes\n", static_cast<unsigned long long>(naive));
  if (lb > 0) {
    std::printf("arena / LB   %.4f\n", static_cast<double>(rep.arena_size) / static_cast<double>(lb));
    std::printf("no reuse / arena  %.2fx (reuse factor)\n",
                static_cast<double>(naive) / static_cast<double>(rep.arena_size ? rep.arena_size : 1));
  }
  if (check_path.empty()) std::printf("plan time    %.2f ms\n", ms);
  std::printf("check        %s\n", rep.valid ? "valid" : ("INVALID: " + rep.error).c_str());
  if (!rep.valid) return 1;
  if (!output.empty()) {
    std::ofstream out(output);
    if (!out) {
      std::cerr << "npurt-memplan: cannot write " << output << "\n";
      return 1;
    }
    npurt::memplan::write_csv(out, t.buffers, &offsets);
  }
  return 0;
}
