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

/// The end of virtual time. Sums that would pass it saturate there, and a time there means
/// "later than the clock can count": a timeout that far away never fires, and a task that would
/// end there fails with errc::time_overflow instead of wrapping the clock around.
inline constexpr sim_time end_of_time = sim_time::max();

/// t + d (d >= 0), saturating at end_of_time instead of overflowing.
constexpr sim_time later(sim_time t, picoseconds d) noexcept { return d > end_of_time - t ? end_of_time : t + d; }

/// a + b (both >= 0), saturating at picoseconds::max().
constexpr picoseconds saturating_add(picoseconds a, picoseconds b) noexcept {
  return b > picoseconds::max() - a ? picoseconds::max() : a + b;
}

/// A non-negative count of picoseconds given as a floating-point number, truncated, saturating
/// at picoseconds::max() (NaN and infinity too): a cost model's cast can never overflow.
constexpr picoseconds saturating_ps(long double ps) noexcept {
  if (!(ps < 0x1p63L)) return picoseconds::max();
  if (!(ps > 0)) return picoseconds{0};
  return picoseconds{static_cast<std::int64_t>(ps)};
}

/// Cycles at a clock rate in Hz, rounded up to whole picoseconds so that no cost is ever
/// reported as shorter than the hardware would take (saturating at picoseconds::max()).
constexpr picoseconds cycles_to_ps(std::uint64_t cycles, double hz) noexcept {
  const long double ps = static_cast<long double>(cycles) * 1e12L / static_cast<long double>(hz);
  if (!(ps < 0x1p63L)) return picoseconds::max();
  auto whole = static_cast<std::int64_t>(ps);
  if (static_cast<long double>(whole) < ps) ++whole;
  return picoseconds{whole};
}

}  // namespace npurt
