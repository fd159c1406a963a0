// npurt/time.hpp — the simulated clock. Everything npurt reports happens on it; nothing reads
// the wall clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace npurt {

/// Virtual time is counted in integer picoseconds: exact, and 2^63 ps is over 100 days.
using picoseconds = std::chrono::duration<std::int64_t, std::pico>;

/// The simulated clock. It has no static now(): each npurt::system owns its own clock.
struct virtual_clock {
  using rep = std::int64_t;
  using period = std::pico;
  using duration = picoseconds;
  using time_point = std::chrono::time_point<virtual_clock, picoseconds>;
  static constexpr bool is_steady = true;
};

using sim_time = virtual_clock::time_point;

/// Waits take their timeout as std::optional<picoseconds> of virtual time: a duration, or
/// no_timeout to wait as long as it takes.
inline constexpr std::nullopt_t no_timeout = std::nullopt;

/// A duration as milliseconds in a double, as aclrtEventElapsedTime reports it.
constexpr double to_ms(picoseconds d) noexcept { return static_cast<double>(d.count()) / 1e9; }
constexpr double to_us(picoseconds d) noexcept { return static_cast<double>(d.count()) / 1e6; }

/// Cycles at a clock rate in Hz, rounded up to whole picoseconds so that no cost is ever
/// reported as shorter than the hardware would take.
constexpr picoseconds cycles_to_ps(std::uint64_t cycles, double hz) noexcept {
  const long double ps = static_cast<long double>(cycles) * 1e12L / static_cast<long double>(hz);
  auto whole = static_cast<std::int64_t>(ps);
  if (static_cast<long double>(whole) < ps) ++whole;
  return picoseconds{whole};
}

}  // namespace npurt
