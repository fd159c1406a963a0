// Helpers of the checkpoint tests: a scratch directory per test, file I/O, a typed-error check.
#pragma once

#include <npurt/checkpoint.hpp>

#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace ckpt_test {

namespace fs = std::filesystem;

/// A fresh directory under the system's temporary directory, removed at the end of the test.
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& tag) {
    path_ = fs::temp_directory_path() / ("npurt-ckpt-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }
  /// Names in the directory, for checking that no temporary file was left behind.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  fs::path path_;
};

inline std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = std::byte(static_cast<unsigned char>(c[i]));
  return out;
}

inline void write_file(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// The error parse() reports for these bytes (and checks the throwing overload agrees).
inline std::error_code parse_error_of(const std::vector<std::byte>& b) {
  std::error_code ec;
  auto c = npurt::checkpoint::parse(b, ec);
  if (ec) {
    CHECK(c.tensors().empty());
    CHECK(c.metadata().empty());
  }
  return ec;
}

}  // namespace ckpt_test
