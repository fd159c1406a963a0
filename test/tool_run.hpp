// Running one of the installed command-line tools as a user runs it, from a test: through the
// shell (so that redirections such as > /dev/full can be given), with its exit status, standard
// output and standard error, in a scratch directory of the test process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tool_test {

struct result {
  int status = -1;  // exit code, or -1 if killed by a signal
  std::string out, err;
};

/// A directory of this test process's own, created on first use.
inline std::filesystem::path scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("npurt-tool-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A shell word in single quotes (built with +=: GCC 12 warns falsely on "'" + temporary).
inline std::string q(const std::string& s) {
  std::string w = "'";
  w += s;
  w += "'";
  return w;
}

/// Runs `tool args`; its standard output goes to `stdout_to` when given (and is then not read).
inline result run(const std::string& tool, const std::string& args, const std::string& stdout_to = "") {
  const auto out = scratch() / "stdout", err = scratch() / "stderr";
  const std::string cmd =
      q(tool) + " " + args + " > " + q(stdout_to.empty() ? out.string() : stdout_to) + " 2> " + q(err.string());
  const int st = std::system(cmd.c_str());
  result r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (stdout_to.empty()) r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace tool_test
