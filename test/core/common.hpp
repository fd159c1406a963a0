// Shared helpers of the core tests: a recorder of finished tasks, and a small driver that runs
// a coroutine on a system and rethrows what it threw.
#pragma once

#include <npurt/npurt.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace npurt_test {

namespace asio = boost::asio;
using npurt::picoseconds;

inline constexpr picoseconds us(std::int64_t v) { return picoseconds{v * 1'000'000}; }
inline constexpr picoseconds ns(std::int64_t v) { return picoseconds{v * 1'000}; }

struct task_row {
  std::uint64_t id;
  npurt::device_id device;
  std::uint32_t stream;
  std::string name;
  npurt::sim_time start, end;
  friend bool operator==(const task_row&, const task_row&) = default;
};

/// Records every finished task. Declare it before the system: a system tells its observers
/// about its shutdown when it dies, so they must outlive it.
class recorder final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    rows.push_back({t.id, t.device, t.stream, std::string(t.name), t.start, t.end});
  }
  std::vector<task_row> rows;

  [[nodiscard]] std::vector<task_row> of_stream(std::uint32_t s) const {
    std::vector<task_row> out;
    for (const auto& r : rows)
      if (r.stream == s) out.push_back(r);
    return out;
  }
  /// The tasks named `name`, in the order they finished.
  [[nodiscard]] std::vector<task_row> named(std::string_view name) const {
    std::vector<task_row> out;
    for (const auto& r : rows)
      if (r.name == name) out.push_back(r);
    return out;
  }
};

/// Whether every byte of the host buffer is `v`.
inline bool all_bytes(const npurt::host_buffer& b, unsigned char v) {
  const auto* p = static_cast<const unsigned char*>(b.data());
  return std::all_of(p, p + b.size(), [&](unsigned char c) { return c == v; });
}

/// Spawns `aw` on the system, runs it, and rethrows an exception the coroutine ended with.
template <class Awaitable>
void run_coro(npurt::system& sys, Awaitable aw) {
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(sys.get_executor(), std::move(aw), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  sys.run();
  if (error) std::rethrow_exception(error);
  if (!done) throw std::runtime_error("coroutine did not finish");
}

/// The npurt error code `f` throws, or errc{} when it throws none.
template <class F>
npurt::errc thrown_code(F&& f) {
  try {
    f();
  } catch (const npurt::error& e) { return static_cast<npurt::errc>(e.code().value()); }
  return npurt::errc{};
}

/// The words of the npurt error `f` throws, or empty when it throws none.
template <class F>
std::string thrown_what(F&& f) {
  try {
    f();
  } catch (const npurt::error& e) { return e.what(); }
  return {};
}

inline npurt::simple_config simple(std::size_t devices = 1, picoseconds launch_latency = picoseconds{0}) {
  npurt::simple_config c;
  c.devices = devices;
  c.kernel_launch_latency = launch_latency;
  return c;
}

inline npurt::kernel_desc fixed(picoseconds d, std::string_view name = "k") {
  return npurt::kernel_desc{npurt::kernels::fixed{d}, name};
}

}  // namespace npurt_test
