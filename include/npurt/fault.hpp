// npurt/fault.hpp — fault plans: which failures a fault-injecting backend makes happen, where
// and when, and what it reports to exception-info callbacks.
//
// A plan is data. The simulator's fault_backend (npurt/sim/fault_backend.hpp) wraps any backend
// and executes the plan behind the backend interface, so the runtime above it meets the faults
// exactly as it would meet real ones: failed completions, tasks that never end, refused
// allocations, slower devices. Every decision depends only on the plan, its seed and the
// (deterministic) task ids and virtual times, so a run with faults is as reproducible as one
// without. docs/faults.md describes each fault kind, its error code and the timeout hierarchy.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/error.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace npurt {

/// The failures a plan can inject.
enum class fault_kind : std::uint8_t {
  aicore_exception,      // a kernel fails with errc::kernel_fault; the device keeps working
  kernel_hang,           // a kernel never completes: the op-execute watchdog ends it
  hbm_ecc,               // an uncorrectable ECC error in a memory region: fatal, the device is lost
  link_down,             // the device's links are down for `duration`: its collectives fail
  link_flap,             // as link_down, alternating down and up every `period`
  lost_heartbeat,        // the device stops answering: its tasks never complete
  transient_oom,         // the next `count` device allocations fail with errc::out_of_memory
  thermal_throttle,      // the AI-core clock drops: the device's tasks take `factor` times longer
  network_interruption,  // collectives that cross servers fail for `duration`
};

constexpr std::string_view to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::aicore_exception: return "aicore_exception";
    case fault_kind::kernel_hang: return "kernel_hang";
    case fault_kind::hbm_ecc: return "hbm_ecc";
    case fault_kind::link_down: return "link_down";
    case fault_kind::link_flap: return "link_flap";
    case fault_kind::lost_heartbeat: return "lost_heartbeat";
    case fault_kind::transient_oom: return "transient_oom";
    case fault_kind::thermal_throttle: return "thermal_throttle";
    case fault_kind::network_interruption: return "network_interruption";
  }
  return "?";
}

/// When a fault happens.
enum class fault_trigger : std::uint8_t {
  at_time,  // at virtual time `at` (task faults hit the device's next eligible task from then on)
  at_task,  // when task number `task` (1-based) of stream `stream` reaches the device
  random,   // each eligible task (or allocation) of the device is a trial with probability `rate`
};

/// One fault of a plan. Build it with the named constructors and a trigger:
/// `fault_spec::aicore_exception(0).at_task(s.id(), 3)`,
/// `fault_spec::thermal_throttle(1, 2.0, 10ms).at_time(sim_time{5ms})`.
struct fault_spec {
  fault_kind kind = fault_kind::aicore_exception;
  device_id device = 0;
  fault_trigger trigger = fault_trigger::at_time;
  sim_time at{};               // at_time
  std::uint32_t stream = 0;    // at_task: the stream's id (stream::id())
  std::uint64_t task = 0;      // at_task: 1-based position among the stream's tasks reaching the device
  double rate = 0;             // random: probability per eligible task, in [0, 1]
  std::uint32_t max_hits = 1;  // random: how many times the fault may fire (0: unbounded)
  picoseconds duration{0};     // link_down, link_flap, thermal_throttle, network_interruption; 0 = until reset
  picoseconds period{0};       // link_flap: length of each down and each up phase
  double factor = 1;           // thermal_throttle: slowdown, >= 1 (2 = half the clock)
  std::uint64_t address = 0;   // hbm_ecc: the damaged region [address, address + bytes); bytes == 0:
  std::size_t bytes = 0;       //   the next task of the device that touches memory
  std::uint32_t count = 1;     // transient_oom: allocations refused
  std::uint32_t server_size = 8;  // network_interruption: devices per server

  static fault_spec make(fault_kind k, device_id d) {
    fault_spec s;
    s.kind = k;
    s.device = d;
    return s;
  }
  static fault_spec aicore_exception(device_id d) { return make(fault_kind::aicore_exception, d); }
  static fault_spec kernel_hang(device_id d) { return make(fault_kind::kernel_hang, d); }
  static fault_spec hbm_ecc(device_id d, const void* address = nullptr, std::size_t bytes = 0) {
    fault_spec s = make(fault_kind::hbm_ecc, d);
    s.address = reinterpret_cast<std::uintptr_t>(address);
    s.bytes = bytes;
    return s;
  }
  static fault_spec link_down(device_id d, picoseconds duration) {
    fault_spec s = make(fault_kind::link_down, d);
    s.duration = duration;
    return s;
  }
  static fault_spec link_flap(device_id d, picoseconds period, picoseconds duration) {
    fault_spec s = make(fault_kind::link_flap, d);
    s.period = period;
    s.duration = duration;
    return s;
  }
  static fault_spec lost_heartbeat(device_id d) { return make(fault_kind::lost_heartbeat, d); }
  static fault_spec transient_oom(device_id d, std::uint32_t count = 1) {
    fault_spec s = make(fault_kind::transient_oom, d);
    s.count = count;
    return s;
  }
  static fault_spec thermal_throttle(device_id d, double factor, picoseconds duration) {
    fault_spec s = make(fault_kind::thermal_throttle, d);
    s.factor = factor;
    s.duration = duration;
    return s;
  }
  /// Trials run on the tasks of device `d`; the interruption hits every cross-server collective.
  static fault_spec network_interruption(device_id d, picoseconds duration, std::uint32_t server_size = 8) {
    fault_spec s = make(fault_kind::network_interruption, d);
    s.duration = duration;
    s.server_size = server_size;
    return s;
  }

  fault_spec& at_time(sim_time t) {
    trigger = fault_trigger::at_time;
    at = t;
    return *this;
  }
  fault_spec& at_task(std::uint32_t stream_id, std::uint64_t n) {
    trigger = fault_trigger::at_task;
    stream = stream_id;
    task = n;
    return *this;
  }
  fault_spec& random(double probability, std::uint32_t hits = 1) {
    trigger = fault_trigger::random;
    rate = probability;
    max_hits = hits;
    return *this;
  }
};

/// The faults of one run, and the seed of its random triggers.
struct fault_plan {
  std::uint64_t seed = 0;
  std::vector<fault_spec> faults;

  fault_plan& add(const fault_spec& f) {
    faults.push_back(f);
    return *this;
  }
};

/// Checks a plan against a backend with `device_count` devices: errc::invalid_config naming the
/// fault and the field that is wrong (a device out of range, a rate outside [0, 1], a throttle
/// factor below 1 or not finite, a flap without a period, an at_task trigger without a stream).
[[nodiscard]] NPURT_DECL std::error_code validate(const fault_plan& plan, std::size_t device_count,
                                                  std::string* what = nullptr);

/// What an exception-info callback receives (aclrtExceptionInfoCallbackRegister's fields): the
/// failed task's device, stream and task ids, its error, and when it was reported.
struct exception_info {
  device_id device = 0;
  std::uint32_t stream = 0;
  std::uint64_t task = 0;
  std::error_code error;
  sim_time time{};
  std::string_view task_name{};
};

/// One fault the backend made happen: which spec of the plan, on which device, when, and the
/// task it hit (0 for allocations and windows that started between tasks).
struct fault_record {
  std::size_t spec = 0;
  fault_kind kind = fault_kind::aicore_exception;
  device_id device = 0;
  sim_time time{};
  std::uint64_t task = 0;
};

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/fault.ipp>
#endif
