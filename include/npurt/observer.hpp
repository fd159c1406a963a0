// npurt/observer.hpp — the tracing interface. Every layer reports what it does to the observers
// attached to its system; the profiler is one observer. With no observer attached the runtime
// pays one branch per report.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace npurt {

/// An event was recorded on a stream: it completes when the stream reaches the record.
struct event_record_info {
  std::uint64_t event = 0;       // event id (unique per system)
  std::uint64_t task = 0;        // the record task's id
  device_id device = 0;
  std::uint32_t stream = 0;
  sim_time time{};               // when the record completed
};

/// A stream waited on an event. `satisfied` is when the wait task saw the event complete.
struct event_wait_info {
  std::uint64_t event = 0;
  std::uint64_t task = 0;        // the wait task's id
  device_id device = 0;
  std::uint32_t stream = 0;
  std::uint64_t record_task = 0; // the record task it waited for (0 if none)
  device_id record_device = 0;
  std::uint32_t record_stream = 0;
  sim_time begin{};              // when the wait reached the head of its stream
  sim_time satisfied{};
};

enum class memory_op : std::uint8_t { alloc, free };

struct memory_info {
  device_id device = 0;          // -1: host
  memory_op op = memory_op::alloc;
  std::uint64_t address = 0;
  std::size_t bytes = 0;
  std::size_t in_use = 0;        // bytes allocated on the device after this operation
  std::size_t reserved = 0;      // bytes the pool holds from the device after it
  std::uint32_t stream = 0;      // 0 when not stream-ordered
  sim_time time{};
};

/// Bytes crossed a link (HCCS, PCIe, RoCE) between two endpoints.
struct link_transfer_info {
  std::string_view link;         // "hccs", "pcie", "roce", ...
  device_id src = 0;             // -1: host
  device_id dst = 0;
  std::size_t bytes = 0;
  sim_time start{};
  sim_time end{};
};

/// One step of a collective algorithm on one rank.
struct collective_step_info {
  std::uint64_t collective = 0;  // the collective task's id
  std::string_view op;           // "all_reduce", ...
  std::string_view algorithm;    // "ring", "mesh", ...
  device_id device = 0;
  device_id peer = 0;
  std::uint32_t step = 0;
  std::size_t bytes = 0;
  sim_time start{};
  sim_time end{};
};

enum class host_range_op : std::uint8_t { mark, push, pop };

/// msproftx-style user annotations from host code.
struct host_range_info {
  host_range_op op = host_range_op::mark;
  std::string_view name;
  std::uint32_t lane = 0;        // which host lane (0 unless the user says otherwise)
  sim_time time{};
};

class observer;

namespace detail {
class runtime;

/// What an observer is attached to; told when an attached observer is destroyed first.
class observer_host {
 public:
  virtual void observer_destroyed(observer& o) noexcept = 0;

 protected:
  ~observer_host() = default;
};
}  // namespace detail

/// Attach with system::add_observer. An observer may be destroyed before or after the systems
/// it is attached to, and may attach or remove observers (itself included) from inside a report.
class observer {
 public:
  observer() = default;
  // A copy is another observer: it is attached to nothing.
  observer(const observer&) noexcept {}
  observer& operator=(const observer&) noexcept { return *this; }
  // A system must never report to an observer that is gone, so one destroyed while attached
  // detaches itself.
  virtual ~observer() {
    for (auto* h : hosts_) h->observer_destroyed(*this);
  }
  /// A task finished (start and end are final).
  virtual void on_task(const task_info&) {}
  virtual void on_event_record(const event_record_info&) {}
  virtual void on_event_wait(const event_wait_info&) {}
  virtual void on_memory(const memory_info&) {}
  virtual void on_link_transfer(const link_transfer_info&) {}
  virtual void on_collective_step(const collective_step_info&) {}
  virtual void on_host_range(const host_range_info&) {}
  /// A stream was created; lets a trace name its track before any task runs.
  virtual void on_stream_created(device_id, std::uint32_t /*stream*/, std::uint8_t /*priority*/) {}
  /// The system is shutting down at virtual time `t`.
  virtual void on_shutdown(sim_time) {}

 private:
  friend class detail::runtime;
  std::vector<detail::observer_host*> hosts_;  // the runtimes this observer is attached to
};

}  // namespace npurt
