// npurt/recovery.hpp — what to do when work fails: error classes, per-class recovery actions,
// bounded retries with exponential backoff in virtual time.
//
// Transient errors are retried, persistent ones fail over or degrade, fatal ones stop and
// report. A recovery_strategy maps each class of error to an action; session::run_with_recovery
// and models::train_data_parallel carry the actions out:
//
//   session.set_recovery_strategy({.on_device_error = npurt::recovery_action::restart,
//                                  .on_memory_error = npurt::recovery_action::gc_and_retry,
//                                  .on_timeout = npurt::recovery_action::retry_with_timeout});
#pragma once

#include <npurt/config.hpp>
#include <npurt/error.hpp>
#include <npurt/system.hpp>
#include <npurt/time.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace npurt {

/// How an error is handled, from the cheapest to the last resort.
enum class recovery_action : std::uint8_t {
  retry,               // run the failed work again after a backoff (transient errors)
  gc_and_retry,        // free cached memory, then retry (out of memory)
  retry_with_timeout,  // retry with a short op-execute watchdog, so a second hang costs little
  restart,             // reset the device and resume from the last checkpoint
  failover,            // move the failed device's work to a spare device
  degrade,             // continue without the device: fewer ranks, work rebalanced
  abort,               // stop and report the error
};

constexpr std::string_view to_string(recovery_action a) noexcept {
  switch (a) {
    case recovery_action::retry: return "retry";
    case recovery_action::gc_and_retry: return "gc_and_retry";
    case recovery_action::retry_with_timeout: return "retry_with_timeout";
    case recovery_action::restart: return "restart";
    case recovery_action::failover: return "failover";
    case recovery_action::degrade: return "degrade";
    case recovery_action::abort: return "abort";
  }
  return "?";
}

/// The classes a recovery strategy distinguishes.
enum class failure_class : std::uint8_t {
  none,
  device,       // a task failed, the device lives on: AI core exception, link failure, a failed peer
  memory,       // out of memory, pool limit
  timeout,      // a watchdog or a wait ran out
  device_lost,  // fatal for the device: lost heartbeat, uncorrectable ECC, device_lost
  fatal,        // nothing to retry: a caller error, a deadlock, an unknown error
};

constexpr std::string_view to_string(failure_class c) noexcept {
  switch (c) {
    case failure_class::none: return "none";
    case failure_class::device: return "device";
    case failure_class::memory: return "memory";
    case failure_class::timeout: return "timeout";
    case failure_class::device_lost: return "device_lost";
    case failure_class::fatal: return "fatal";
  }
  return "?";
}

inline failure_class classify(std::error_code ec) noexcept {
  if (!ec) return failure_class::none;
  if (ec.category() != error_category()) return failure_class::fatal;
  switch (static_cast<errc>(ec.value())) {
    case errc::kernel_fault:
    case errc::link_failure:
    case errc::remote_error:
    case errc::device_error:
    case errc::operation_aborted: return failure_class::device;
    case errc::out_of_memory:
    case errc::pool_limit: return failure_class::memory;
    case errc::task_timeout:
    case errc::wait_timeout:
    case errc::event_wait_timeout:
    case errc::collective_timeout: return failure_class::timeout;
    case errc::device_lost:
    case errc::lost_heartbeat:
    case errc::hbm_ecc_error: return failure_class::device_lost;
    default: return failure_class::fatal;
  }
}

/// Which action each class gets, and the bounds of the retrying actions.
struct recovery_strategy {
  recovery_action on_device_error = recovery_action::retry;
  recovery_action on_memory_error = recovery_action::gc_and_retry;
  recovery_action on_timeout = recovery_action::retry_with_timeout;
  recovery_action on_device_lost = recovery_action::restart;
  /// Attempts of the retrying actions per unit of work before the error counts as persistent
  /// (and escalates to on_device_lost, or abort when that is a retry too).
  std::uint32_t max_retries = 3;
  /// Backoff before retry number k (1-based): backoff * backoff_factor^(k-1), at most max_backoff.
  picoseconds backoff{1'000'000'000};        // 1 ms
  double backoff_factor = 2;
  picoseconds max_backoff{1'000'000'000'000};  // 1 s
  /// retry_with_timeout: the op-execute watchdog while retrying.
  picoseconds retry_timeout{1'000'000'000'000};  // 1 s

  [[nodiscard]] recovery_action action_for(failure_class c) const noexcept {
    switch (c) {
      case failure_class::none: return recovery_action::retry;
      case failure_class::device: return on_device_error;
      case failure_class::memory: return on_memory_error;
      case failure_class::timeout: return on_timeout;
      case failure_class::device_lost: return on_device_lost;
      case failure_class::fatal: return recovery_action::abort;
    }
    return recovery_action::abort;
  }
  [[nodiscard]] recovery_action action_for(std::error_code ec) const noexcept { return action_for(classify(ec)); }

  /// errc::invalid_argument, with `what` naming the field, for a strategy that cannot be carried
  /// out as written: an action outside recovery_action (a cast integer), a negative backoff or
  /// backoff cap, a backoff factor below 1 or not finite, or a retry watchdog that is not
  /// positive (the watchdog would refuse it, and the retry would run with the long one).
  [[nodiscard]] std::error_code validate(std::string* what = nullptr) const {
    const auto bad = [&](const char* why) {
      if (what) *what = std::string("recovery_strategy: ") + why;
      return make_error_code(errc::invalid_argument);
    };
    for (const recovery_action a : {on_device_error, on_memory_error, on_timeout, on_device_lost})
      if (a > recovery_action::abort) return bad("an action is not a recovery_action");
    if (backoff.count() < 0) return bad("backoff is negative");
    if (max_backoff.count() < 0) return bad("max_backoff is negative");
    if (!std::isfinite(backoff_factor) || backoff_factor < 1) return bad("backoff_factor must be finite and >= 1");
    if (retry_timeout.count() <= 0) return bad("retry_timeout must be positive");
    return {};
  }

  /// The backoff before retry `attempt` (1-based), with saturating arithmetic.
  [[nodiscard]] picoseconds backoff_for(std::uint32_t attempt) const noexcept {
    if (attempt == 0 || backoff.count() <= 0) return picoseconds{0};
    const double f = std::pow(backoff_factor < 1 ? 1.0 : backoff_factor, static_cast<double>(attempt - 1));
    const double v = static_cast<double>(backoff.count()) * f;
    const picoseconds cap = max_backoff.count() > 0 ? max_backoff : backoff;
    // The cap is returned as the integer it is: near 2^63 its double rounds up out of range,
    // and converting that back is undefined.
    if (!std::isfinite(v) || v >= static_cast<double>(cap.count())) return cap;
    return picoseconds{static_cast<std::int64_t>(v)};
  }
};

/// Whether an action retries on the same devices.
constexpr bool is_retry(recovery_action a) noexcept {
  return a == recovery_action::retry || a == recovery_action::gc_and_retry || a == recovery_action::retry_with_timeout;
}

/// Blocks the host for `d` of virtual time, running whatever is due meanwhile (a backoff).
/// Outside system::run only, like the other blocking calls.
inline void sleep_for(system& sys, picoseconds d) {
  if (d.count() <= 0) return;
  auto& rt = detail::runtime_of(sys);
  bool woke = false;
  // Saturating: a sleep past the end of the clock ends there rather than wrapping into the past.
  const sim_time now = rt.now();
  const sim_time wake = d > sim_time::max() - now ? sim_time::max() : now + d;
  rt.call_at(wake, [](void* ctx, std::uint64_t) { *static_cast<bool*>(ctx) = true; }, &woke, 0);
  std::error_code ec;
  rt.run_until([&] { return woke; }, ec);
  throw_if(ec, "npurt::sleep_for");
}

}  // namespace npurt
