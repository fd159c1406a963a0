// npurt/detail/deadlock_detector.hpp — who waits on whom, and when that can never end.
//
// Owns one invariant: a wait that can never be satisfied is reported at once, with the chain of
// waits, instead of waiting out a timeout. It reads the scheduler's streams (a stream whose head
// is a blocked event wait waits on a position of another stream; one whose head is a blocked
// value wait waits for any work at all) and keeps the report; failing the waits it finds is the
// scheduler's job.
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/device_queue.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace npurt::detail {

struct stream_state;

class deadlock_detector {
 public:
  using stream_table = std::vector<std::unique_ptr<stream_state>>;

  /// `queue`: the devices' execution queues, which can hold a stream's head behind another
  /// stream's task (named in the report).
  deadlock_detector(const stream_table& streams, const device_queue& queue) noexcept
      : streams_(streams), queue_(queue) {}

  /// Whether the wait at the head of `s` closes a cycle of waits back to `s`.
  [[nodiscard]] NPURT_DECL bool closes_cycle(const stream_state& s) const;
  /// Streams whose head is a started, blocked wait (all of them, or only those on a cycle).
  [[nodiscard]] NPURT_DECL std::vector<stream_state*> blocked(bool only_cycles) const;
  /// Adds "deadlock at t=...: <chain>; <chain>" for these streams to the report; with none,
  /// reports that `host_waits` host operations wait while nothing can run. `backend_waits` (what
  /// the backend's pending work waits for, e.g. collectives waiting for peers) is appended when
  /// not empty.
  NPURT_DECL void report(sim_time now, const std::vector<stream_state*>& streams, std::size_t host_waits,
                         const std::string& backend_waits = {});
  [[nodiscard]] const std::string& last_report() const noexcept { return report_; }
  /// How many times the report has changed: a new deadlock is told by this, not by the text,
  /// which a new report may repeat.
  [[nodiscard]] std::uint64_t reports() const noexcept { return reports_; }
  /// The next deadlock replaces the report instead of adding to it; until then it stays for the
  /// user to read (system::run starts each run so).
  void start_new() noexcept { replace_ = true; }
  void clear() noexcept {
    report_.clear();
    replace_ = false;
  }

 private:
  [[nodiscard]] NPURT_DECL std::string describe_wait_chain(const stream_state& s) const;

  const stream_table& streams_;
  const device_queue& queue_;
  std::string report_;
  std::uint64_t reports_ = 0;
  bool replace_ = false;
};

}  // namespace npurt::detail
