// Shared by the benchmarks: wall-clock timing, a result table, and the command line (--help,
// --json PATH and the options each program adds).
#pragma once

#include <npurt/error.hpp>
#include <npurt/sim/preset.hpp>

#include <CLI/CLI.hpp>

#include "../tools/cli_options.hpp"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
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
    for (const auto& r : rows_)
      std::printf("%-52s %14.3f  %-8s %s\n", r.key.c_str(), r.value, r.unit.c_str(), r.note.c_str());
  }
  /// {"benchmark": title, "<key>": value, ..., "rows": [{"key", "value", "unit", "note"}, ...]}:
  /// the flat keys for scripts, the rows for scripts/bench_docs.py (units and notes included).
  bool write_json(const std::string& path) const {
    std::ofstream os(path);
    if (!os) return false;
    os << "{\n  \"benchmark\": " << quoted(title_);
    for (const auto& r : rows_) os << ",\n  " << quoted(r.key) << ": " << number(r.value);
    os << ",\n  \"rows\": [";
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const auto& r = rows_[i];
      os << (i ? ",\n" : "\n") << "    {\"key\": " << quoted(r.key) << ", \"value\": " << number(r.value)
         << ", \"unit\": " << quoted(r.unit) << ", \"note\": " << quoted(r.note) << "}";
    }
    os << "\n  ]\n}\n";
    os.close();
    return static_cast<bool>(os);
  }

 private:
  static std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  // JSON has no NaN or infinity: a value that is not finite is written as null.
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
  struct row {
    std::string key;
    double value;
    std::string unit;
    std::string note;
  };
  std::string title_;
  std::vector<row> rows_;
};

using npurt_cli::whole_number_u64;

/// Everything printed on standard output must reach it: a full disk or a closed pipe loses the
/// table, and is exit status 1 with a message, as an unwritable --json file is.
inline int checked_stdout(const std::string& program, int status) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "%s: cannot write to standard output\n", program.c_str());
    return 1;
  }
  return status;
}

/// The command line every benchmark shares: --help, --json PATH, and the options the program
/// adds, parsed by CLI11 so that a bad value is a clear error instead of an exception from deep
/// inside. Usage:
///   npurt_bench::command_line cl{"what the benchmark measures"};
///   cl.app().add_option("--steps", steps, "...")->check(CLI::PositiveNumber);
///   if (auto rc = cl.parse(argc, argv)) return *rc;
class command_line {
 public:
  explicit command_line(std::string description) : app_(std::move(description)) {
    app_.add_option("--json", json_, "also write the results to PATH as JSON")->option_text("PATH");
    app_.get_formatter()->column_width(34);
  }
  [[nodiscard]] CLI::App& app() noexcept { return app_; }

  /// --preset NAME: a built-in hardware preset (npurt::sim::presets::by_name).
  CLI::Option* add_preset(std::string& name) {
    return app_.add_option("--preset", name, "hardware preset")
        ->capture_default_str()
        ->type_name("NAME")
        ->check(CLI::Validator(
            [](const std::string& n) -> std::string {
              try {
                (void)npurt::sim::presets::by_name(n);
                return {};
              } catch (const npurt::error& e) { return e.what(); }
            },
            "", "preset"));
  }

  /// Parses argv. Returns the exit code to leave main with after --help (0) or a bad command
  /// line (the message is printed), or nullopt to go on.
  [[nodiscard]] std::optional<int> parse(int argc, char** argv) {
    try {
      app_.parse(argc, argv);
    } catch (const CLI::ParseError& e) { return app_.exit(e); }
    // A --json file that cannot be written is refused now, not after minutes of measuring.
    if (!json_.empty() && !writable(json_)) return 1;
    return std::nullopt;
  }

  /// The path given with --json, or empty.
  [[nodiscard]] const std::string& json_path() const noexcept { return json_; }

  /// Prints the table, writes JSON if asked; returns the process exit code.
  [[nodiscard]] int finish(const report& r) const {
    r.print();
    errno = 0;
    if (!json_.empty() && !r.write_json(json_)) {
      cannot_write(json_, errno);
      return 1;
    }
    return checked_stdout(program(), 0);
  }

 private:
  // The program's name (CLI11 keeps argv[0]).
  [[nodiscard]] std::string program() const { return app_.get_name().substr(app_.get_name().rfind('/') + 1); }
  // The system's reason, as the tools say it.
  void cannot_write(const std::string& path, int e) const {
    std::fprintf(stderr, "%s: cannot write %s%s\n", program().c_str(), path.c_str(),
                 e != 0 ? (": " + std::generic_category().message(e)).c_str() : "");
  }
  // Opens the path for appending, which creates no data and truncates nothing; a file this made
  // is removed again, so a run that fails later leaves nothing behind.
  [[nodiscard]] bool writable(const std::string& path) const {
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    errno = 0;
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
      cannot_write(path, errno);
      return false;
    }
    std::fclose(f);
    if (!existed && !ec) std::filesystem::remove(path, ec);
    return true;
  }
  CLI::App app_;
  std::string json_;
};

}  // namespace npurt_bench
