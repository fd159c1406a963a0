// npurt/backend.hpp — the device layer's interface. The runtime (scheduling layer) hands a
// backend each task once the task's stream order and event dependencies are met; the backend
// decides when the task starts and ends on its engines and reports the completion back. The
// simulator in sim/ is one backend; tests and other hardware can bring their own.
#pragma once

#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

namespace npurt {

class observer;
struct collective_desc;         // collective_types.hpp
struct collective_comm_state;  // collective_types.hpp

using device_id = std::int32_t;

/// The kinds of AI core a core limit caps (aclrtDevResLimitType's ACL_RT_DEV_RES_CUBE_CORE and
/// ACL_RT_DEV_RES_VECTOR_CORE). On parts whose cores hold both units the cube limit is the one
/// that applies, to every kernel.
enum class core_kind : std::uint8_t { cube, vector };

/// What a device is, as cudaDeviceProp / aclrtGetDeviceInfo tell it. Filled by the backend from
/// its hardware preset.
struct device_properties {
  std::string name;                    // preset name, e.g. "ascend910"
  std::string soc;                     // SoC version, e.g. "Ascend910A"
  std::uint32_t ai_core_count = 0;     // cores that run cube work (AIC on separated parts)
  std::uint32_t vector_core_count = 0; // cores that run vector work (== ai_core_count when coupled)
  bool separated_cores = false;        // 910B-style AIC/AIV split
  double clock_hz = 0;                 // AI core clock
  std::size_t memory_bytes = 0;        // HBM capacity
  double hbm_bandwidth = 0;            // bytes per second
  std::size_t l2_bytes = 0;
  double host_link_bandwidth = 0;      // bytes per second, one direction (PCIe)
  picoseconds host_link_latency{0};
  double peer_link_bandwidth = 0;      // bytes per second per HCCS link
  picoseconds peer_link_latency{0};
  double cube_flops_per_cycle = 0;     // per core, FP16
  double peak_fp16_flops = 0;          // whole chip, per second
  bool bf16_supported = true;          // cube and vector units accept BF16 operands
  picoseconds hccl_connect_timeout{0}; // a communicator's default timeouts (0: never)
  picoseconds hccl_exec_timeout{0};
  picoseconds op_execute_timeout{0};   // the per-task watchdog of kernels and copies (0: never)
};

/// What joins two devices (aclrtGetDevicesTopo, cudaDeviceCanAccessPeer): the same device's HBM;
/// a direct HCCS link (Huawei Cache Coherence System, the Ascend servers' device-to-device
/// fabric); PCIe through the host, between devices of one server that share no HCCS link; or the
/// RoCE network between servers.
enum class link_kind : std::uint8_t { same_device, hccs, pcie, roce };

/// The link a device-to-device copy between two devices crosses, and what it costs: an
/// uncontended copy of n bytes takes latency + n / bandwidth.
struct link_properties {
  link_kind kind = link_kind::same_device;
  double bandwidth = 0;  // bytes per second, one direction
  picoseconds latency{0};
};

/// How many cores of `kind` a device has: the AI cores for cube work, the vector cores (the same
/// cores when they hold both units).
constexpr std::uint32_t core_count(const device_properties& p, core_kind kind) noexcept {
  return kind == core_kind::vector ? p.vector_core_count : p.ai_core_count;
}

/// Which engine of a device runs a task.
enum class engine_kind : std::uint8_t {
  none,        // control tasks (event record, event wait, host callback): no engine time
  ai_core,     // cube and vector work of kernels
  copy_h2d,
  copy_d2h,
  copy_d2d,    // on one device, or to a peer
  collective,
  host,        // H2H copies run on the host
};

/// What a stream task does. value_write and value_wait are control tasks of the stream's own
/// scheduler (aclrtValueWrite, aclrtValueWait), as event records and waits are: the runtime runs
/// them, and no backend is handed one.
enum class task_kind : std::uint8_t {
  kernel,
  memcpy,
  memset,
  event_record,
  event_wait,
  host_callback,
  collective,
  value_write,
  value_wait,
};

/// The most cores of each kind a task's kernel may hold (0: no limit): a stream's or device's
/// core limits (aclrtSetStreamResLimit, aclrtSetDeviceResLimit), which partition a device's cores
/// between streams as green contexts do.
struct core_limits {
  std::uint32_t cube = 0;
  std::uint32_t vector = 0;
  friend bool operator==(const core_limits&, const core_limits&) = default;
};

/// How a value wait compares the 64-bit word at its address with its operand (aclrtValueWait's
/// flags, cuStreamWaitValue64's). The wait holds its stream until the comparison is true.
enum class wait_condition : std::uint8_t {
  geq,   // (std::int64_t)(word - operand) >= 0: a counter that reached the operand, wrapping as it may
  eq,    // word == operand
  and_,  // (word & operand) != 0
  nor,   // ~(word | operand) != 0
};

enum class memcpy_kind : std::uint8_t { host_to_host, host_to_device, device_to_host, device_to_device, default_kind };

constexpr std::string_view to_string(engine_kind e) noexcept {
  switch (e) {
    case engine_kind::none: return "control";
    case engine_kind::ai_core: return "ai_core";
    case engine_kind::copy_h2d: return "copy_h2d";
    case engine_kind::copy_d2h: return "copy_d2h";
    case engine_kind::copy_d2d: return "copy_d2d";
    case engine_kind::collective: return "collective";
    case engine_kind::host: return "host";
  }
  return "?";
}

constexpr std::string_view to_string(core_kind k) noexcept { return k == core_kind::cube ? "cube" : "vector"; }

constexpr std::string_view to_string(wait_condition c) noexcept {
  switch (c) {
    case wait_condition::geq: return "geq";
    case wait_condition::eq: return "eq";
    case wait_condition::and_: return "and";
    case wait_condition::nor: return "nor";
  }
  return "?";
}

/// Whether `word` meets `c` against `operand` (see wait_condition).
constexpr bool condition_met(wait_condition c, std::uint64_t word, std::uint64_t operand) noexcept {
  switch (c) {
    case wait_condition::geq: return static_cast<std::int64_t>(word - operand) >= 0;
    case wait_condition::eq: return word == operand;
    case wait_condition::and_: return (word & operand) != 0;
    case wait_condition::nor: return ~(word | operand) != 0;
  }
  return false;
}

constexpr std::string_view to_string(task_kind k) noexcept {
  switch (k) {
    case task_kind::kernel: return "kernel";
    case task_kind::memcpy: return "memcpy";
    case task_kind::memset: return "memset";
    case task_kind::event_record: return "event_record";
    case task_kind::event_wait: return "event_wait";
    case task_kind::host_callback: return "host_callback";
    case task_kind::collective: return "collective";
    case task_kind::value_write: return "value_write";
    case task_kind::value_wait: return "value_wait";
  }
  return "?";
}

/// A copy or memset as the backend sees it. Pointers are device addresses or host pointers as
/// `kind` says; src_device/dst_device are -1 for host memory.
struct copy_desc {
  memcpy_kind kind = memcpy_kind::default_kind;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;  // every byte it moves (a 2-D copy: all its rows)
  device_id src_device = -1;
  device_id dst_device = -1;
  int value = 0;  // memset
  // A 2-D copy (stream::memcpy2d, cudaMemcpy2DAsync): `rows` rows of bytes / rows each, each row
  // dst_pitch (src_pitch) bytes after the one before it. One row is a plain copy.
  std::size_t rows = 1;
  std::size_t dst_pitch = 0;
  std::size_t src_pitch = 0;

  [[nodiscard]] std::size_t row_bytes() const noexcept { return rows > 1 ? bytes / rows : bytes; }
  /// The bytes from dst (src) to the end of its last row: the range the copy may touch.
  [[nodiscard]] std::size_t dst_span() const noexcept { return span(dst_pitch); }
  [[nodiscard]] std::size_t src_span() const noexcept { return span(src_pitch); }

 private:
  [[nodiscard]] std::size_t span(std::size_t pitch) const noexcept {
    return rows > 1 ? pitch * (rows - 1) + row_bytes() : bytes;
  }
};

/// The part of a task a backend may read and annotate. The runtime owns the record; the backend
/// holds a reference only between submit() and the matching complete().
struct task_info {
  std::uint64_t id = 0;         // global sequence number: the stable tie-break key
  device_id device = 0;
  std::uint32_t stream = 0;     // global stream id
  std::uint8_t priority = 4;    // 0 highest .. 7 lowest
  task_kind kind = task_kind::kernel;
  engine_kind engine = engine_kind::none;
  sim_time submitted{};         // when the host enqueued it
  sim_time ready{};             // when its dependencies were met and it reached the backend
  sim_time start{};             // set by the backend
  sim_time end{};               // set by the backend
  std::string_view name{};      // what traces show; interned by the runtime, valid until the system dies
  /// kind == kernel: the launched descriptor, or null for a kernels::fixed launch, whose cost
  /// is then in `fixed` (records stay small: a million queued fixed kernels cost little memory).
  const kernel_desc* kernel = nullptr;
  kernels::fixed fixed{};
  std::uint32_t block_dim = 0;  // kind == kernel: AI cores requested, 0 = all
  /// kind == kernel: its stream's core limits when it started; a backend that models cores
  /// gives the kernel no more than these.
  core_limits limits{};
  copy_desc copy{};             // kind == memcpy / memset
  std::uint64_t flops = 0;      // for the profiler; the backend may fill them in
  std::uint64_t bytes = 0;
  void* backend_data = nullptr; // scratch for the backend
  const collective_desc* collective = nullptr;  // kind == collective: the rank's call(s)
  /// What observer::on_task sees of how the task ended: the error of a task that failed or was
  /// aborted, null for one that succeeded (and while the task runs).
  const std::error_code* failure = nullptr;
  /// How many times slower than modelled the device runs this task (>= 1; set by a fault layer:
  /// a thermal throttle's factor, or infinity for a hung kernel, which runs until a watchdog
  /// cancels it): its latency and duration stretch, its bandwidth shrinks, and it holds its
  /// engine for all of that time. A backend that cannot slow a task runs it as modelled.
  double slowdown = 1;
};

/// Memory access the backend needs for functional execution.
class memory_view {
 public:
  virtual ~memory_view() = default;
  /// Host storage behind [addr, addr + bytes) of device memory, or nullptr when the range is not
  /// inside one live allocation or the device has no backing store (timing-only mode).
  virtual std::byte* translate(device_id dev, const void* addr, std::size_t bytes) noexcept = 0;
};

/// What the runtime offers its backend.
class backend_host : public memory_view {
 public:
  /// Current virtual time.
  [[nodiscard]] virtual sim_time now() const noexcept = 0;
  /// Calls fn(ctx, arg) when virtual time reaches `at` (at >= now(); an earlier time means now()).
  /// The order within one instant, as npurt::system's host runs it:
  /// - an action for a later time is queued; queued actions run one at a time in (at, call
  ///   order);
  /// - an action for now() (at <= now() at the call) is due at once: before the next queued
  ///   action runs, every action due at once runs, in call order, those they make due at once
  ///   included (and so do the host's completion handlers ready at this instant). So it runs
  ///   before the actions queued earlier for this same instant that have not run yet: if A and
  ///   B were queued for t and A, at t, calls call_at(t, C), the order is A, C, B.
  /// A flush() the backend requested comes after all of them, before the clock moves.
  virtual void call_at(sim_time at, void (*fn)(void* ctx, std::uint64_t arg), void* ctx, std::uint64_t arg) = 0;
  /// Reports that a task finished at now() with outcome ec. start/end must be set.
  virtual void complete(task_info& t, std::error_code ec = {}) = 0;
  /// Says in words what made a task fail with `ec` that the code alone cannot (the index that
  /// was out of range, and the range): the failure a synchronize reports names it. Call it
  /// before complete(); it applies only while the task's outcome is still `ec`. The default drops
  /// it.
  virtual void describe_failure(task_info& /*t*/, std::error_code /*ec*/, std::string /*why*/) {}
  /// complete() for a task a watchdog ended: which timer fired and its value, which the
  /// timeout_error of the task's failure reports (timer(), limit()).
  virtual void complete_timeout(task_info& t, std::error_code ec, timeout_kind /*timer*/, picoseconds /*limit*/) {
    complete(t, ec);
  }
  /// The observer to report engine-level activity to (link transfers, collective steps), or null.
  [[nodiscard]] virtual observer* tracer() noexcept = 0;
  /// call_at that can be taken back (a timeout that usually does not fire must not move the
  /// clock): returns a ticket for cancel_timer. The defaults cannot cancel. npurt::system's host
  /// always queues the action, even for now(): one for now() runs after the actions due at once
  /// and after those queued earlier for this instant (in the A, B, C example of call_at, a
  /// call_at_cancellable(t, D) made by A runs after B).
  virtual std::uint64_t call_at_cancellable(sim_time at, void (*fn)(void* ctx, std::uint64_t arg), void* ctx,
                                            std::uint64_t arg) {
    call_at(at, fn, ctx, arg);
    return 0;
  }
  virtual void cancel_timer(std::uint64_t /*ticket*/) {}
  /// call_at for an action the caller may supersede (a task's end that moves when bandwidth is
  /// shared anew, or that a watchdog or a reset ends early): returns a ticket for revoke_timer,
  /// 0 when there is nothing to revoke (an action for now(), due at once as call_at's is, runs
  /// before anything could revoke it). Unlike a cancellable action, the caller keeps track of
  /// whether it already ran.
  virtual std::uint64_t call_at_revocable(sim_time at, void (*fn)(void* ctx, std::uint64_t arg), void* ctx,
                                          std::uint64_t arg) {
    call_at(at, fn, ctx, arg);
    return 0;
  }
  /// Takes back a pending action of call_at_revocable, so that it neither runs nor moves the
  /// clock: the end of a simulation is the end of its last real work, not of a superseded
  /// deadline. Only for a ticket whose action has not run. The default cannot take it back.
  virtual void revoke_timer(std::uint64_t /*ticket*/) {}
  /// Whether this host calls backend::flush() at the end of an instant after request_flush().
  /// A backend that buffers dispatch decisions must fall back to deciding at once when it is not.
  [[nodiscard]] virtual bool calls_flush() const noexcept { return false; }
  /// Asks for one backend::flush() call once everything runnable at now() has run, before the
  /// clock moves: every task that becomes ready at this instant is then known.
  virtual void request_flush() noexcept {}
};

/// A device layer.
class backend {
 public:
  virtual ~backend() = default;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] virtual std::size_t device_count() const noexcept = 0;
  [[nodiscard]] virtual const device_properties& properties(device_id dev) const = 0;
  /// The link between two valid devices (the system checks the ids). By default the one a
  /// device-to-device copy of this interface's cost model crosses: the device's HBM when a == b,
  /// else a peer link of properties().peer_link_bandwidth and latency.
  [[nodiscard]] virtual link_properties link(device_id a, device_id b) const {
    const auto& p = properties(a);
    if (a == b) return {link_kind::same_device, p.hbm_bandwidth, picoseconds{0}};
    return {link_kind::hccs, p.peer_link_bandwidth, p.peer_link_latency};
  }
  /// Called once by the system before any submit.
  virtual void attach(backend_host& host) = 0;
  /// Checks a kernel before it is enqueued (shape, dtype, layout, block_dim against the cores
  /// the kernel may use): a clear error before anything runs. This is the only place block_dim
  /// is checked; a backend never clamps it silently.
  [[nodiscard]] virtual std::error_code validate(device_id dev, const kernel_desc& k) const = 0;
  /// validate() for a kernels::fixed launch, which only has a block_dim to check: the launch path
  /// of scheduling tests and benchmarks builds no full descriptor.
  [[nodiscard]] virtual std::error_code validate_fixed(device_id dev, std::uint32_t block_dim) const = 0;
  /// For a kernel validate() rejected: which operand, dimension or parameter is wrong, in words
  /// (the throwing launch puts it in its message). Empty when the backend cannot say more.
  [[nodiscard]] virtual std::string describe_invalid(device_id /*dev*/, const kernel_desc& /*k*/) const { return {}; }
  /// A task whose dependencies are met at host.now(). The backend must eventually call
  /// host.complete(t) exactly once.
  virtual void submit(task_info& t) = 0;
  /// Whether a device keeps a real backing store for its memory (functional mode).
  [[nodiscard]] virtual bool functional() const noexcept = 0;
  /// Fails every pending collective of communicator `comm` with errc::operation_aborted
  /// (HcclCommDestroy / ncclCommAbort). A backend without collectives has none.
  virtual void abort_collectives(std::uint64_t /*comm*/) {}
  /// What the backend's pending work waits for (collectives waiting for peers), for the
  /// runtime's deadlock report; empty when nothing waits there.
  [[nodiscard]] virtual std::string describe_waits() const { return {}; }
  /// Called by the host at the end of an instant, after the backend's request_flush(): the
  /// point where a backend that buffers submissions makes its dispatch decisions, so that a
  /// high-priority task ready at t is never passed by a low-priority one ready at the same t.
  virtual void flush() {}
  /// Device reset: forget every task of `dev` submitted and not yet completed, never completing
  /// it, and free the engines and bandwidth it held (aclrtResetDevice does not wait).
  virtual void abort(device_id dev) = 0;
  /// A watchdog or stream::abort ends one submitted task, running or still in line for its
  /// engine: forget it without completing it, freeing what it held, as abort() does for a whole
  /// device. False when the backend cannot (the task then runs on to its completion).
  virtual bool cancel(task_info& /*t*/) { return false; }
  /// Asked before device memory is handed out: a backend that injects faults answers
  /// errc::out_of_memory (a transient shortage) or errc::device_lost; {} lets it go ahead.
  [[nodiscard]] virtual std::error_code admit_allocation(device_id /*dev*/, std::size_t /*bytes*/) { return {}; }
  /// What the device is doing as far as the backend knows (healthy unless it injects faults).
  [[nodiscard]] virtual device_status status(device_id /*dev*/) const noexcept { return device_status::healthy; }
  /// aclrtSetOpExecuteTimeOut: the watchdog of every later kernel and copy (0: never), for a
  /// backend that runs one; errc::not_supported otherwise.
  virtual std::error_code set_op_execute_timeout(picoseconds /*limit*/) { return make_error_code(errc::not_supported); }
  /// The watchdog in force, as set_op_execute_timeout left it, so that a caller who shortens
  /// it can put back what was there; zero for a backend that runs none.
  [[nodiscard]] virtual picoseconds op_execute_timeout() const noexcept { return picoseconds{0}; }
};

}  // namespace npurt
