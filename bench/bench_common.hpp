// Shared by the benchmarks: wall-clock timing, a result table, and --json PATH output.
#pragma once

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace npurt_bench {

/// CPU time of the calling thread: less disturbed than wall time on a shared machine.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Rows of (name, value, unit), printed as a table and written as a flat JSON object.
class report {
 public:
  explicit report(std::string title) : title_(std::move(title)) {}
  void add(std::string key, double value, std::string unit, std::string note = {}) {
    rows_.push_back({std::move(key), value, std::move(unit), std::move(note)});
  }
  void print() const {
    std::printf("%s\n", title_.c_str());
    std::printf("%-52s %14s  %-8s %s\n", "measure", "value", "unit", "note");
    for (const auto& r : rows_) std::printf("%-52s %14.3f  %-8s %s\n", r.key.c_str(), r.value, r.unit.c_str(), r.note.c_str());
  }
  bool write_json(const std::string& path) const {
    std::ofstream os(path);
    if (!os) return false;
    os << "{\n  \"benchmark\": \"" << title_ << "\"";
    for (const auto& r : rows_) os << ",\n  \"" << r.key << "\": " << r.value;
    os << "\n}\n";
    return static_cast<bool>(os);
  }

 private:
  struct row {
    std::string key;
    double value;
    std::string unit;
    std::string note;
  };
  std::string title_;
  std::vector<row> rows_;
};

/// The value after --json, or empty.
inline std::string json_path(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) return argv[i + 1];
  return {};
}

inline bool has_flag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i)
    if (flag == argv[i]) return true;
  return false;
}

inline long arg_value(int argc, char** argv, std::string_view flag, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (flag == argv[i]) return std::stol(argv[i + 1]);
  return fallback;
}

/// Writes JSON if asked; returns the process exit code.
inline int finish(const report& r, int argc, char** argv) {
  r.print();
  const std::string path = json_path(argc, argv);
  if (!path.empty() && !r.write_json(path)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace npurt_bench
