// Shared helpers of the fault tests: a system on the ascend910 preset with a fault plan, and a
// recorder of finished tasks.
#pragma once

#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/preset.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fault_test {

using namespace std::chrono_literals;
using npurt::picoseconds;
using npurt::sim_time;

inline constexpr picoseconds ms(std::int64_t v) { return picoseconds{v * 1'000'000'000}; }
inline constexpr picoseconds sec(std::int64_t v) { return picoseconds{v * 1'000'000'000'000}; }
inline constexpr sim_time at(picoseconds p) { return sim_time{p}; }

struct task_row {
  std::uint64_t id;
  npurt::device_id device;
  std::uint32_t stream;
  std::string name;
  sim_time start, end;
  friend bool operator==(const task_row&, const task_row&) = default;
};

class recorder final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    if (t.kind == npurt::task_kind::kernel || t.kind == npurt::task_kind::collective ||
        t.kind == npurt::task_kind::memcpy || t.kind == npurt::task_kind::memset)
      rows.push_back({t.id, t.device, t.stream, std::string(t.name), t.start, t.end});
  }
  [[nodiscard]] const task_row* named(std::string_view n) const {
    for (const auto& r : rows)
      if (r.name == n) return &r;
    return nullptr;
  }
  std::vector<task_row> rows;
};

inline npurt::kernel_desc fixed_kernel(picoseconds d, std::string_view name) {
  return npurt::kernel_desc{npurt::kernels::fixed{d}, name, 0};
}

/// "k1", "k2", ...: appended rather than `"k" + std::to_string(i)`, which GCC 12 at -O3 reports as
/// an overlapping memcpy (-Wrestrict, GCC bug 105651).
inline std::string numbered(std::string_view prefix, int i) {
  std::string s{prefix};
  s += std::to_string(i);
  return s;
}

inline npurt::sim::faulty_preset preset(int devices, const npurt::fault_plan& plan) {
  return npurt::sim::with_faults(npurt::sim::presets::ascend910(devices), plan);
}

}  // namespace fault_test
