// npurt/detail/runtime.hpp — the scheduling layer: the virtual clock, the timed-action queue, the
// stream FIFOs, event positions, the device-memory registry, and the loop that drives them
// together with the host's io_context. One per npurt::system. Single-threaded by design: every
// handler, host coroutine and device completion runs on the thread that calls run(), in an order
// fixed by (virtual time, sequence), so results never depend on thread timing.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/device_queue.hpp>
#include <npurt/detail/object_pool.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/observer.hpp>
#include <npurt/time.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <unordered_set>
#include <vector>

namespace npurt {

/// Options of a system that do not belong to the hardware preset.
struct system_options {
  /// Host time one enqueue (launch, copy, memset, record, wait) costs the calling host lane:
  /// the order CANN and CUDA measure for an asynchronous launch.
  picoseconds launch_overhead{2'500'000};
  /// Host memcpy bandwidth for host-to-host copies, bytes per second.
  double host_copy_bandwidth = 20e9;
  /// Attach a profiler and write a Chrome trace at shutdown when NPURT_TRACE is set.
  bool trace_from_env = true;
  /// The devices' task scheduler (detail/device_queue.hpp).
  dispatch_model dispatch = dispatch_model::per_stream;
};

namespace detail {

/// A host-side operation waiting for a completion (an awaited launch, a sync, an event wait).
/// Type-erased so that tasks stay plain records; concrete ops hold the Asio handler.
struct op_base {
  void (*complete_fn)(op_base*, std::error_code) = nullptr;
  void complete(std::error_code ec) { complete_fn(this, ec); }
};

class runtime;

/// One enqueued unit of stream work. The task_info part is what the backend sees.
struct task : task_info {
  task* next = nullptr;            // stream FIFO
  op_base* waiter = nullptr;       // host op completed with the task's outcome
  std::uint64_t seq = 0;           // position in its stream (1-based)
  // event_wait: the stream position waited for; event_record: the event id recorded.
  std::uint32_t target_stream = 0;
  std::uint64_t target_seq = 0;
  std::uint64_t event_id = 0;
  std::function<void()>* callback = nullptr;  // host_callback only (kept out of the record)
  kernel_desc* owned_kernel = nullptr;
  std::shared_ptr<const void> owned_extra;  // what `collective` points into (freed with the task)
  bool blocked = false;            // an event wait not yet satisfied
  std::error_code error;           // set when the task failed or was aborted
};

/// A waiter on a stream position: runs fn when the stream completes task `seq`.
struct position_waiter {
  void (*fn)(runtime&, void* ctx, std::uint64_t arg, std::error_code) = nullptr;
  void* ctx = nullptr;
  std::uint64_t arg = 0;
};

struct stream_state {
  std::uint32_t id = 0;
  device_id device = 0;
  std::uint8_t priority = 4;
  std::uint32_t flags = 0;
  task* head = nullptr;            // oldest not-yet-completed task
  task* tail = nullptr;
  bool head_started = false;
  bool wake_pending = false;       // a timer will start the head when its submit time comes
  bool destroyed = false;          // handle gone: free the state once drained
  bool invalidated = false;        // its device was reset: the handle no longer works
  std::uint64_t enqueued = 0;      // seq of the last enqueued task
  std::uint64_t completed = 0;     // seq of the last completed task
  sim_time host_cursor{};          // host lane time of this stream's enqueues
  std::multimap<std::uint64_t, position_waiter> waiters;
  boost::asio::strand<boost::asio::io_context::executor_type> strand;

  explicit stream_state(boost::asio::io_context& ioc) : strand(boost::asio::make_strand(ioc)) {}
};

struct event_state {
  std::uint64_t id = 0;
  device_id device = 0;
  std::uint32_t refs = 0;         // handles alive
  bool wait_for_record = false;     // a stream wait before the first record holds until it
  std::vector<struct task*> unbound; // such waits, blocked until the first record
  std::uint64_t records = 0;        // how many times it was recorded
  std::uint32_t stream = 0;         // the latest record's stream position
  std::uint64_t seq = 0;
  std::uint64_t record_task = 0;
  bool has_time = false;            // the latest record completed
  sim_time time{};
};

/// One live device allocation. Device addresses are non-canonical on x86-64 (bit 62 set), so a
/// device pointer dereferenced on the host faults instead of reading host memory.
struct allocation {
  std::uint64_t address = 0;
  std::size_t bytes = 0;
  device_id device = 0;
  std::byte* backing = nullptr;   // host storage in functional mode
  bool pool = false;              // a memory pool's segment or reserved range: users see its blocks
  std::size_t mapped = 0;         // reserved ranges: bytes mapped (counted as used)
};

struct host_allocation {
  const void* base = nullptr;
  std::size_t bytes = 0;
};

inline constexpr std::uint64_t device_address_base = 0x4000'0000'0000'0000ULL;
inline constexpr int device_address_shift = 44;  // 16 TiB of address space per device

inline constexpr bool is_device_address(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & device_address_base) != 0;
}
inline constexpr device_id device_of_address(const void* p) noexcept {
  return static_cast<device_id>((reinterpret_cast<std::uintptr_t>(p) & ~device_address_base) >> device_address_shift);
}

class runtime final : public backend_host {
 public:
  NPURT_DECL runtime(std::unique_ptr<npurt::backend> b, const system_options& opts);
  NPURT_DECL ~runtime() override;
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  // --- backend_host ---
  [[nodiscard]] sim_time now() const noexcept override { return now_; }
  NPURT_DECL void call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) override;
  NPURT_DECL void complete(task_info& t, std::error_code ec) override;
  [[nodiscard]] observer* tracer() noexcept override { return observers_.empty() ? nullptr : &fanout_; }
  NPURT_DECL std::byte* translate(device_id dev, const void* addr, std::size_t bytes) noexcept override;

  /// call_at that can be taken back: returns a ticket for cancel_timer. A cancelled action
  /// never runs and never moves the clock.
  NPURT_DECL std::uint64_t call_at_cancellable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                               std::uint64_t arg) override;
  NPURT_DECL void cancel_timer(std::uint64_t ticket) override;

  // --- loop ---
  NPURT_DECL void run(std::error_code& ec);
  /// Runs until pred() holds or nothing can run. Only outside run(): host code that blocks (a
  /// synchronous synchronize) drives the simulation itself.
  NPURT_DECL void run_until(const std::function<bool()>& pred, std::error_code& ec);
  [[nodiscard]] bool in_run() const noexcept { return running_; }
  [[nodiscard]] boost::asio::io_context& io() noexcept { return ioc_; }
  [[nodiscard]] npurt::backend& backend() noexcept { return *backend_; }
  [[nodiscard]] const system_options& options() const noexcept { return opts_; }
  [[nodiscard]] const std::string& last_deadlock_report() const noexcept { return deadlock_report_; }

  // --- observers ---
  NPURT_DECL void add_observer(observer& o);
  NPURT_DECL void remove_observer(observer& o);
  [[nodiscard]] bool tracing() const noexcept { return !observers_.empty(); }
  [[nodiscard]] observer& fanout() noexcept { return fanout_; }

  // --- streams ---
  NPURT_DECL std::uint32_t create_stream(device_id dev, int priority, std::uint32_t flags);
  NPURT_DECL void release_stream(std::uint32_t id) noexcept;  // handle destroyed: drain, then free
  [[nodiscard]] NPURT_DECL stream_state* find_stream(std::uint32_t id) noexcept;
  [[nodiscard]] NPURT_DECL bool stream_idle(std::uint32_t id) const noexcept;
  [[nodiscard]] NPURT_DECL bool position_reached(std::uint32_t stream, std::uint64_t seq) const noexcept;
  /// Calls w when the stream completes `seq` (at once, in the loop, if it already has).
  NPURT_DECL void wait_position(std::uint32_t stream, std::uint64_t seq, const position_waiter& w);

  // --- tasks ---
  NPURT_DECL task* new_task(stream_state& s, task_kind kind);
  /// Charges the host lane, stamps the task and appends it to its stream.
  NPURT_DECL void enqueue(stream_state& s, task* t);
  NPURT_DECL void free_task(task* t) noexcept;
  NPURT_DECL kernel_desc* new_kernel(const kernel_desc& k);

  // --- events ---
  NPURT_DECL std::uint64_t create_event(device_id dev, bool wait_for_record = false);
  /// A record was enqueued: waits that preceded the first record now wait for this one.
  NPURT_DECL void bind_unbound_waits(event_state& e);
  NPURT_DECL void destroy_event(std::uint64_t id) noexcept;
  [[nodiscard]] NPURT_DECL event_state* find_event(std::uint64_t id) noexcept;

  // --- memory ---
  /// Raw device memory; `pool` marks a memory pool's segment (users cannot free it directly).
  NPURT_DECL void* device_malloc(device_id dev, std::size_t bytes, std::error_code& ec, bool pool = false);
  NPURT_DECL void device_free(device_id dev, void* p, std::error_code& ec, bool pool = false);
  /// The live allocation holding p: a raw allocation, or a pool block (never a pool's segment,
  /// so a pointer into cached pool memory is not live).
  NPURT_DECL const allocation* find_allocation(const void* p) const noexcept;
  // Address ranges for growable pool arenas (expandable segments): reserve address space, then
  // map and unmap physical memory inside it.
  NPURT_DECL std::uint64_t reserve_range(device_id dev, std::size_t bytes, std::error_code& ec);
  NPURT_DECL void release_range(std::uint64_t addr) noexcept;
  NPURT_DECL std::error_code map_range(std::uint64_t range, std::size_t bytes);
  NPURT_DECL void unmap_range(std::uint64_t range, std::size_t bytes) noexcept;
  /// Pool blocks handed to users, so that copies and kernels can check them.
  NPURT_DECL void register_pool_block(device_id dev, std::uint64_t addr, std::size_t bytes);
  NPURT_DECL void unregister_pool_block(std::uint64_t addr) noexcept;
  NPURT_DECL void drop_pool_blocks(device_id dev) noexcept;
  /// Reports a pool allocation or free to the observers.
  NPURT_DECL void trace_memory(device_id dev, memory_op op, std::uint64_t addr, std::size_t bytes, std::size_t in_use,
                               std::size_t reserved, std::uint32_t stream);
  [[nodiscard]] NPURT_DECL std::size_t device_used(device_id dev) const noexcept;
  NPURT_DECL void* host_malloc(std::size_t bytes, std::error_code& ec);
  NPURT_DECL void host_free(void* p, std::error_code& ec);
  [[nodiscard]] NPURT_DECL const host_allocation* find_host_allocation(const void* p) const noexcept;
  /// (stream, last enqueued seq) of every live stream of a device with pending work.
  [[nodiscard]] NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> device_positions(device_id dev) const;
  /// Device reset: streams and events of the device stop working (handles report invalid).
  NPURT_DECL void invalidate_device(device_id dev) noexcept;
  /// Frees every allocation of a device (device reset).
  NPURT_DECL void release_device_memory(device_id dev) noexcept;

  /// Host operations outstanding (for deadlock detection: somebody still waits).
  void host_wait_begin() noexcept { ++host_waits_; }
  void host_wait_end() noexcept { --host_waits_; }
  /// Counts a handler posted by the device side, so the loop knows to poll.
  void note_post() noexcept { ++posts_; }
  /// Storage for the records of awaited operations whose handlers bring no allocator.
  [[nodiscard]] block_recycler& op_memory() noexcept { return op_memory_; }

  [[nodiscard]] std::size_t live_tasks() const noexcept { return tasks_.live(); }
  [[nodiscard]] std::size_t device_count() const noexcept { return backend_->device_count(); }
  [[nodiscard]] std::uint64_t next_task_id() const noexcept { return next_task_id_; }
  /// Communicator ids, unique per system (deterministic: they appear in error messages).
  [[nodiscard]] std::uint64_t new_communicator_id() noexcept { return next_communicator_id_++; }

 private:
  struct timed_action {
    sim_time at;
    std::uint64_t order;
    void (*fn)(void*, std::uint64_t);
    void* ctx;
    std::uint64_t arg;
    friend bool operator>(const timed_action& a, const timed_action& b) noexcept {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  /// Broadcasts observer calls to every attached observer.
  class fanout_observer final : public observer {
   public:
    explicit fanout_observer(std::vector<observer*>& list) : list_(list) {}
    void on_task(const task_info& t) override { for (auto* o : list_) o->on_task(t); }
    void on_event_record(const event_record_info& i) override { for (auto* o : list_) o->on_event_record(i); }
    void on_event_wait(const event_wait_info& i) override { for (auto* o : list_) o->on_event_wait(i); }
    void on_memory(const memory_info& i) override { for (auto* o : list_) o->on_memory(i); }
    void on_link_transfer(const link_transfer_info& i) override { for (auto* o : list_) o->on_link_transfer(i); }
    void on_collective_step(const collective_step_info& i) override { for (auto* o : list_) o->on_collective_step(i); }
    void on_host_range(const host_range_info& i) override { for (auto* o : list_) o->on_host_range(i); }
    void on_stream_created(device_id d, std::uint32_t s, std::uint8_t p) override {
      for (auto* o : list_) o->on_stream_created(d, s, p);
    }
    void on_shutdown(sim_time t) override { for (auto* o : list_) o->on_shutdown(t); }

   private:
    std::vector<observer*>& list_;
  };

  NPURT_DECL void try_start(stream_state& s);
  NPURT_DECL void start_task(stream_state& s, task* t);
  NPURT_DECL void finish_task(stream_state& s, task* t);
  NPURT_DECL void perform_copy(task& t);
  NPURT_DECL bool step();  // one loop iteration; false when nothing can run
  NPURT_DECL bool resolve_deadlock(bool only_cycles);
  NPURT_DECL std::string describe_wait_chain(const stream_state& s) const;
  NPURT_DECL bool wait_cycle_from(const stream_state& s) const;
  static NPURT_DECL void wake_stream(void* ctx, std::uint64_t stream_id);
  static NPURT_DECL void task_done_now(void* ctx, std::uint64_t task_ptr);
  static NPURT_DECL void on_wait_satisfied(runtime& rt, void* ctx, std::uint64_t arg, std::error_code ec);

  system_options opts_;
  std::unique_ptr<npurt::backend> backend_;
  // One thread runs everything (determinism), so the scheduler needs no locks.
  boost::asio::io_context ioc_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE};
  sim_time now_{};
  std::uint64_t order_ = 0;
  std::uint64_t next_task_id_ = 1;
  std::uint64_t next_communicator_id_ = 1;
  std::priority_queue<timed_action, std::vector<timed_action>, std::greater<>> timers_;
  std::unordered_set<std::uint64_t> cancelled_;
  std::vector<timed_action> now_queue_;  // actions due at now_, in call order
  std::size_t now_head_ = 0;
  bool running_ = false;
  std::uint64_t posts_ = 0;
  std::size_t host_waits_ = 0;
  std::string deadlock_report_;
  block_recycler op_memory_;

  object_pool<task, 4096> tasks_;
  object_pool<kernel_desc, 256> kernels_;
  std::vector<std::unique_ptr<stream_state>> streams_;  // index = stream id; ids are never reused
  std::vector<std::unique_ptr<event_state>> events_;    // index = event id

  std::map<std::uint64_t, allocation> allocations_;     // by address
  std::map<std::uint64_t, allocation> pool_blocks_;     // by address: blocks inside pool segments
  std::unordered_set<std::uint64_t> freed_;             // addresses freed, to tell double frees
  std::vector<std::uint64_t> next_address_;             // per device: bump pointer (never reused)
  std::vector<std::size_t> used_;                       // per device: bytes allocated
  std::map<const void*, host_allocation> host_allocations_;

  std::vector<observer*> observers_;
  fanout_observer fanout_{observers_};
  device_queue queue_;
};

}  // namespace detail
}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/runtime.ipp>
#endif
