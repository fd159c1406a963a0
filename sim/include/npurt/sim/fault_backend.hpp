// npurt/sim/fault_backend.hpp — fault injection behind the backend interface.
//
// fault_backend wraps another backend (the simulator, or any other) and carries out a
// fault_plan (npurt/fault.hpp): it sits between the runtime and the wrapped backend, sees every
// task on its way down and every completion on its way up, and changes exactly what the plan
// says — a completion's error, its time, whether it comes at all — plus the allocations it
// refuses. It also owns the device-side detection that real runtimes run beside the hardware:
// the op-execute and collective-exec watchdogs, the heartbeat monitor, device status (lost
// until reset), and the exception-info callbacks. See docs/faults.md.
//
//   npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(8), plan)};
//   auto& faults = npurt::sim::faults_of(sys);
//   faults.enable_fault_detection(std::chrono::seconds(1));
#pragma once

#include <npurt/backend.hpp>
#include <npurt/fault.hpp>
#include <npurt/sim/preset.hpp>
#include <npurt/system.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace npurt::sim {

class fault_backend final : public npurt::backend, private npurt::backend_host {
 public:
  /// Wraps `inner`. invalid_config (caller_error) when the plan does not fit its devices.
  fault_backend(std::unique_ptr<npurt::backend> inner, fault_plan plan);
  ~fault_backend() override;

  // --- npurt::backend ---
  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::size_t device_count() const noexcept override { return inner_->device_count(); }
  [[nodiscard]] const device_properties& properties(device_id dev) const override { return inner_->properties(dev); }
  [[nodiscard]] link_properties link(device_id a, device_id b) const override { return inner_->link(a, b); }
  void attach(backend_host& host) override;
  /// A launch on a lost device is refused at the call with errc::device_lost.
  [[nodiscard]] std::error_code validate(device_id dev, const kernel_desc& k) const override {
    if (status(dev) == device_status::lost) return make_error_code(errc::device_lost);
    return inner_->validate(dev, k);
  }
  [[nodiscard]] std::error_code validate_fixed(device_id dev, std::uint32_t block_dim) const override {
    if (status(dev) == device_status::lost) return make_error_code(errc::device_lost);
    return inner_->validate_fixed(dev, block_dim);
  }
  [[nodiscard]] std::string describe_invalid(device_id dev, const kernel_desc& k) const override {
    if (status(dev) == device_status::lost)
      return "device " + std::to_string(dev) + " is lost after a fatal error; reset it";
    return inner_->describe_invalid(dev, k);
  }
  void submit(task_info& t) override;
  [[nodiscard]] bool functional() const noexcept override { return inner_->functional(); }
  void abort_collectives(std::uint64_t comm) override { inner_->abort_collectives(comm); }
  [[nodiscard]] std::string describe_waits() const override { return inner_->describe_waits(); }
  void flush() override { inner_->flush(); }
  /// Device reset: also repairs the device (a lost device is healthy again, its silence and
  /// damaged memory are gone); a thermal throttle outlasts a reset.
  void abort(device_id dev) override;
  /// Ends one task (stream::abort) as the wrapped backend can: a task this layer holds (to fail
  /// it later) is dropped here, one in flight there goes with its watchdog.
  bool cancel(task_info& t) override;
  [[nodiscard]] std::error_code admit_allocation(device_id dev, std::size_t bytes) override;
  [[nodiscard]] device_status status(device_id dev) const noexcept override;

  // --- detection ---
  /// Starts the heartbeat monitor: a device that stops answering is declared lost (its pending
  /// tasks fail with errc::lost_heartbeat, its peers' collectives with errc::remote_error) at
  /// the first heartbeat tick after it fell silent, so within one interval. Ticks are at
  /// multiples of `interval` in virtual time. Zero turns the monitor off; a negative interval
  /// is a caller_error (errc::invalid_argument) and leaves the monitor as it was.
  void enable_fault_detection(picoseconds interval);
  /// The op-execute watchdog of kernels and copies (aclrtSetOpExecuteTimeOut); defaults to the
  /// preset's op_execute_timeout. Zero: never. A task submitted from now on that runs longer
  /// than this (a hang, or merely a long task) fails with errc::task_timeout at exactly
  /// start + limit, and its engine is free again from then on.
  std::error_code set_op_execute_timeout(picoseconds t) override {
    if (t.count() < 0) return make_error_code(errc::invalid_argument);
    op_timeout_ = t;
    return {};
  }
  [[nodiscard]] picoseconds op_execute_timeout() const noexcept override { return op_timeout_; }
  /// Called for every failed task the backend reports (aclrtExceptionInfoCallbackRegister):
  /// device, stream, task ids and the error. Returns a handle for remove_exception_callback.
  /// A callback may add or remove callbacks, itself included: a report goes to the callbacks
  /// registered when it began, minus those removed since.
  std::uint64_t add_exception_callback(std::function<void(const exception_info&)> fn);
  void remove_exception_callback(std::uint64_t handle);

  /// Every fault injected so far, in the order they happened.
  [[nodiscard]] const std::vector<fault_record>& injected() const noexcept { return records_; }
  [[nodiscard]] const fault_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] npurt::backend& inner() noexcept { return *inner_; }

 private:
  // --- backend_host: what the wrapped backend sees ---
  [[nodiscard]] sim_time now() const noexcept override { return host_->now(); }
  void call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) override {
    host_->call_at(at, fn, ctx, arg);
  }
  void complete(task_info& t, std::error_code ec) override;
  void describe_failure(task_info& t, std::error_code ec, std::string why) override {
    host_->describe_failure(t, ec, std::move(why));  // dropped there if this layer changes the outcome
  }
  [[nodiscard]] observer* tracer() noexcept override { return host_->tracer(); }
  std::byte* translate(device_id dev, const void* addr, std::size_t bytes) noexcept override {
    return host_->translate(dev, addr, bytes);
  }
  std::uint64_t call_at_cancellable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                    std::uint64_t arg) override {
    return host_->call_at_cancellable(at, fn, ctx, arg);
  }
  void cancel_timer(std::uint64_t ticket) override { host_->cancel_timer(ticket); }
  std::uint64_t call_at_revocable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                  std::uint64_t arg) override {
    return host_->call_at_revocable(at, fn, ctx, arg);
  }
  void revoke_timer(std::uint64_t ticket) override { host_->revoke_timer(ticket); }
  [[nodiscard]] bool calls_flush() const noexcept override { return host_->calls_flush(); }
  void request_flush() noexcept override { host_->request_flush(); }

  struct spec_state {
    bool armed = false;        // a task fault waiting for its next eligible task
    bool started = false;      // a window or silence began
    bool done = false;         // used up, or repaired by a reset
    sim_time start{};
    std::uint32_t hits = 0;
    std::uint32_t oom_left = 0;
  };
  /// A task the fault layer completes itself: when `release` comes, with `ec`.
  struct held_task {
    task_info* task = nullptr;
    std::error_code ec;
    timeout_kind timer = timeout_kind::op_execute;  // ec is a timeout: the watchdog that fired
    picoseconds limit{0};                           // and its value
    std::uint64_t ticket = 0;
    bool timed = false;   // a release is scheduled (ticket is valid)
    bool silent = false;  // waits for its device's heartbeat detection or its watchdog
    bool remote = false;  // a peer's collective waiting for a silent member's detection
    device_id silent_device = -1;
    bool unseen = false;  // a collective the collective engine never saw: its failure is noted here
  };
  struct device_state {
    bool lost = false;
    std::optional<sim_time> silent_since;
    std::unordered_map<std::uint32_t, std::uint64_t> stream_tasks;  // per stream: tasks seen
    std::uint64_t allocations = 0;
  };

  /// The op-execute watchdog of a task in the wrapped backend: armed at submit, it ends the
  /// task at start + limit if it is still running then.
  struct watch {
    std::uint64_t ticket = 0;
    picoseconds limit{0};
  };
  static void on_watchdog(void* self, std::uint64_t task_id);
  void watchdog(std::uint64_t task_id);
  void arm_watch(std::uint64_t task_id, sim_time at, picoseconds limit);
  void unwatch(task_info& t);
  [[nodiscard]] bool watched(const task_info& t) const noexcept;
  /// The watchdog that ends a silent task (op execute, or its communicator's exec timeout).
  [[nodiscard]] std::pair<timeout_kind, picoseconds> silent_watchdog(const task_info& t) const noexcept;
  static void on_release(void* self, std::uint64_t task_id);
  static void on_silence(void* self, std::uint64_t spec);
  void release(std::uint64_t task_id);
  void hold(task_info& t, std::error_code ec, sim_time at, bool silent = false, bool remote = false,
            device_id silent_device = -1);
  void deliver(task_info& t, std::error_code ec, timeout_kind timer = timeout_kind::op_execute,
               picoseconds limit = picoseconds{0});
  void fail_peer_collectives(device_id dev);
  void hold_collective(task_info& t, std::error_code ec, sim_time at, bool silent = false, bool remote = false,
                       device_id silent_device = -1);
  void note_collective_failure(const task_info& t, std::error_code ec);
  void record(std::size_t spec, device_id dev, std::uint64_t task);
  bool trial(std::size_t spec, std::uint64_t key) const noexcept;
  void notice_windows();
  void evaluate_triggers(task_info& t, std::uint64_t stream_pos);
  void start_silence(device_id dev, sim_time since);
  [[nodiscard]] sim_time silent_release_time(const task_info& t, device_id silent_dev) const noexcept;
  [[nodiscard]] std::error_code silent_error(const task_info& t, device_id silent_dev) const noexcept;
  [[nodiscard]] bool window_active(std::size_t spec) const noexcept;
  [[nodiscard]] std::error_code collective_fate(const task_info& t, device_id* silent_member);
  [[nodiscard]] bool touches(const task_info& t, const fault_spec& f) const noexcept;
  [[nodiscard]] double slowdown(device_id dev) const noexcept;

  std::unique_ptr<npurt::backend> inner_;
  fault_plan plan_;
  npurt::backend_host* host_ = nullptr;
  std::vector<spec_state> specs_;
  std::vector<device_state> devices_;
  picoseconds op_timeout_{0};
  picoseconds heartbeat_{0};
  std::unordered_map<std::uint64_t, task_info*> inflight_;    // in the wrapped backend
  std::unordered_map<std::uint64_t, held_task> held_;          // completed by this layer
  std::unordered_map<std::uint64_t, std::error_code> fail_with_;  // completion error to impose
  /// Hands a hung kernel to the wrapped backend infinitely slowed (task_info::slowdown), so that
  /// it holds its cores and its place in the device's queue until the watchdog ends it; false
  /// when no watchdog runs.
  [[nodiscard]] bool hang_in_place(task_info& t);
  std::unordered_map<std::uint64_t, watch> watches_;           // op-execute watchdogs of in-flight tasks
  // A collective's fate is decided once, by its first rank, so all ranks agree.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::error_code, std::uint32_t>> fates_;
  // Operations failed here, before the collective engine: (communicator, sequence, point-to-point)
  // -> ranks that failed so far, so that the communicator notes each operation once.
  std::map<std::tuple<std::uint64_t, std::uint64_t, bool>, std::uint32_t> noted_;
  std::map<std::uint64_t, std::function<void(const exception_info&)>> callbacks_;
  std::uint64_t next_callback_ = 1;
  std::vector<fault_record> records_;
};

/// A preset together with a fault plan: `system sys{with_faults(presets::ascend910(8), plan)}`.
struct faulty_preset {
  preset hardware;
  fault_plan plan;
  sim_options options{};
};
[[nodiscard]] inline faulty_preset with_faults(preset p, fault_plan plan, const sim_options& opts = {}) {
  return {std::move(p), std::move(plan), opts};
}
[[nodiscard]] std::unique_ptr<npurt::backend> make_backend(const faulty_preset& p);

/// The fault layer of a system built on a fault_backend, or null.
[[nodiscard]] inline fault_backend* as_faulty(npurt::backend& b) noexcept { return dynamic_cast<fault_backend*>(&b); }
/// As as_faulty, throwing caller_error (errc::invalid_argument) when the system has no fault layer.
[[nodiscard]] fault_backend& faults_of(npurt::system& sys);

}  // namespace npurt::sim
