// npurt/detail/runtime.hpp — the scheduler and the loop of one npurt::system.
//
// The runtime composes the owners of the core's invariants, each in its own header:
//   timer_queue       (detail/timer_queue.hpp)       the virtual clock; actions due in call order
//   memory_registry   (detail/memory_registry.hpp)   which device pointers are live
//   deadlock_detector (detail/deadlock_detector.hpp) waits that can never end, and their report
// and is itself the scheduler: stream FIFOs, tasks, events, host lanes, dependencies between
// stream positions, sticky errors, and the loop that drives all of it together with the host's
// io_context. Public classes call its narrow verbs and never write its state.
// Single-threaded by design: every handler, host coroutine and device completion runs on the
// thread that calls run(), in an order fixed by (virtual time, sequence), so results never depend
// on thread timing.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/deadlock_detector.hpp>
#include <npurt/detail/device_queue.hpp>
#include <npurt/detail/memory_registry.hpp>
#include <npurt/detail/object_pool.hpp>
#include <npurt/detail/runtime_ref.hpp>
#include <npurt/detail/timer_queue.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/observer.hpp>
#include <npurt/system_options.hpp>
#include <npurt/time.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/allocator.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace npurt {

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
  bool orphan = false;             // its device was reset while a completion was on its way: free it then
  std::error_code error;           // set when the task failed or was aborted
  std::exception_ptr exception;    // host_callback only: what the callback threw
};

/// The first failure of fire-and-forget work on a stream or device, kept until read (CUDA's and
/// CANN's sticky error): which task failed, how, and for a host callback what it threw.
struct failure {
  std::error_code ec;
  std::uint64_t task = 0;          // task id
  std::uint32_t stream = 0;
  std::uint64_t seq = 0;           // its position in the stream
  std::string name;                // the task's name, owned
  std::exception_ptr exception;
  explicit operator bool() const noexcept { return static_cast<bool>(ec); }
  /// "task 7 (add) on stream 3 failed: <message>"
  [[nodiscard]] std::string describe() const;
};

/// A waiter on a stream position: runs fn(rt, ctx, ec) when the stream completes task `seq`.
struct position_waiter {
  void (*fn)(runtime&, void* ctx, std::error_code) = nullptr;
  void* ctx = nullptr;
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
  failure sticky;                  // first unread failure of fire-and-forget work
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

class runtime final : public backend_host {
 public:
  NPURT_DECL runtime(std::unique_ptr<npurt::backend> b, const system_options& opts);
  NPURT_DECL ~runtime() override;
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  // --- backend_host ---
  [[nodiscard]] sim_time now() const noexcept override { return clock_.now(); }
  void call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) override {
    clock_.call_at(at, timer_action::plain(fn, ctx, arg));
  }
  NPURT_DECL void complete(task_info& t, std::error_code ec) override;
  [[nodiscard]] observer* tracer() noexcept override { return trace_; }
  std::byte* translate(device_id dev, const void* addr, std::size_t bytes) noexcept override {
    return memory_.translate(dev, addr, bytes);
  }
  [[nodiscard]] bool calls_flush() const noexcept override { return true; }
  void request_flush() noexcept override { flush_pending_ = true; }

  /// call_at that can be taken back (the timer queue's): returns a ticket for cancel_timer. A
  /// cancelled action never runs and never moves the clock.
  std::uint64_t call_at_cancellable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                    std::uint64_t arg) override {
    return clock_.call_at_cancellable(at, timer_action::plain(fn, ctx, arg));
  }
  void cancel_timer(std::uint64_t ticket) override { clock_.cancel(ticket); }
  /// The clock and its actions (host waits put their timeouts there).
  [[nodiscard]] timer_queue& timers() noexcept { return clock_; }
  /// The registry of live device and pinned host memory.
  [[nodiscard]] memory_registry& memory() noexcept { return memory_; }
  [[nodiscard]] const memory_registry& memory() const noexcept { return memory_; }

  // --- loop ---
  NPURT_DECL void run(std::error_code& ec);
  /// Runs until pred() holds or nothing can run. Only outside run(): host code that blocks (a
  /// synchronous synchronize) drives the simulation itself.
  NPURT_DECL void run_until(const std::function<bool()>& pred, std::error_code& ec);
  /// Runs everything runnable at the current instant without moving the clock: what a blocking
  /// wait does before it returns, so the completion handlers of the work it waited for have run.
  NPURT_DECL void settle();
  [[nodiscard]] bool in_run() const noexcept { return running_; }
  /// errc::wrong_thread when called from another thread than the system's while checks are on.
  [[nodiscard]] NPURT_DECL std::error_code check_thread() const noexcept;
  [[nodiscard]] boost::asio::io_context& io() noexcept { return ioc_; }
  [[nodiscard]] npurt::backend& backend() noexcept { return *backend_; }
  [[nodiscard]] const system_options& options() const noexcept { return opts_; }
  [[nodiscard]] const std::string& last_deadlock_report() const noexcept { return deadlocks_.last_report(); }

  // --- observers ---
  NPURT_DECL void add_observer(observer& o);
  NPURT_DECL void remove_observer(observer& o);
  [[nodiscard]] bool tracing() const noexcept { return trace_ != nullptr; }
  /// Reports a pool allocation or free to the observers.
  NPURT_DECL void trace_memory(device_id dev, memory_op op, std::uint64_t addr, std::size_t bytes, std::size_t in_use,
                               std::size_t reserved, std::uint32_t stream);
  [[nodiscard]] observer& fanout() noexcept { return fanout_; }

  // --- streams ---
  NPURT_DECL std::uint32_t create_stream(device_id dev, int priority, std::uint32_t flags);
  NPURT_DECL void release_stream(std::uint32_t id) noexcept;  // handle destroyed: drain, then free
  [[nodiscard]] NPURT_DECL stream_state* find_stream(std::uint32_t id) noexcept;
  [[nodiscard]] NPURT_DECL bool stream_idle(std::uint32_t id) const noexcept;
  [[nodiscard]] NPURT_DECL bool position_reached(std::uint32_t stream, std::uint64_t seq) const noexcept;
  /// Calls w when the stream completes `seq` (at once, in the loop, if it already has).
  NPURT_DECL void wait_position(std::uint32_t stream, std::uint64_t seq, const position_waiter& w);
  /// The position of the stream's next enqueue minus one: where a synchronize waits.
  [[nodiscard]] NPURT_DECL std::uint64_t last_enqueued(std::uint32_t stream) const noexcept;

  // --- tasks ---
  NPURT_DECL task* new_task(stream_state& s, task_kind kind);
  /// Charges the host lane, stamps the task and appends it to its stream.
  NPURT_DECL void enqueue(stream_state& s, task* t);
  /// Enqueues on `stream` a wait for position `seq` of `target` (a pool's reuse fence), unless
  /// it is reached already.
  NPURT_DECL void enqueue_wait(std::uint32_t stream, std::uint32_t target, std::uint64_t seq, std::string_view name);
  NPURT_DECL void free_task(task* t) noexcept;
  /// A host callback's function, owned by the runtime until free_task: one whose task is still
  /// posted when the system dies (the io_context drops the handler unrun) is freed with it.
  std::function<void()>* own_callback(std::function<void()> fn) {
    auto* f = new std::function<void()>(std::move(fn));
    callbacks_.insert(f);
    return f;
  }
  NPURT_DECL kernel_desc* new_kernel(const kernel_desc& k);
  /// A copy of `name` that lives as long as the runtime (task names outlive their callers'
  /// strings: traces read them after the run).
  [[nodiscard]] NPURT_DECL std::string_view intern(std::string_view name);

  // --- sticky errors ---
  /// Reads (and clears) the first unread failure of a stream's fire-and-forget work.
  NPURT_DECL failure take_stream_failure(std::uint32_t stream) noexcept;
  /// The stream's first unread failure without clearing it, or null.
  [[nodiscard]] NPURT_DECL const failure* peek_stream_failure(std::uint32_t stream) const noexcept;
  /// Reads (and clears) the first unread failure of any stream of a device.
  NPURT_DECL failure take_device_failure(device_id dev) noexcept;
  /// aclrtResetDevice: every pending task of the device is dropped (its waiter completes with
  /// errc::operation_aborted), without waiting for it.
  NPURT_DECL void abort_device(device_id dev);

  // --- events ---
  NPURT_DECL std::uint64_t create_event(device_id dev, bool wait_for_record = false);
  /// stream::record: enqueues a record of `e` at the end of `s`, points the event at it, and
  /// lets waits made before the first record wait for it.
  NPURT_DECL void record_event(stream_state& s, event_state& e);
  /// Handle counting of user events: a user event dies with its last handle.
  NPURT_DECL void retain_event(std::uint64_t id) noexcept;
  NPURT_DECL void release_event(std::uint64_t id) noexcept;
  [[nodiscard]] NPURT_DECL event_state* find_event(std::uint64_t id) noexcept;

  // --- devices ---
  /// (stream, last enqueued seq) of every live stream of a device with pending work.
  [[nodiscard]] NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> device_positions(device_id dev) const;
  /// Device reset: streams and events of the device stop working (handles report invalid).
  NPURT_DECL void invalidate_device(device_id dev) noexcept;

  /// Host operations outstanding (for deadlock detection: somebody still waits).
  void host_wait_begin() noexcept { ++host_waits_; }
  void host_wait_end() noexcept { --host_waits_; }
  /// Posts a completion handler to its executor, and counts it so the loop knows to poll: the
  /// only way the runtime's side hands work to the host side.
  template <class Executor, class Handler>
  void post(const Executor& ex, Handler&& h) {
    ++posts_;
    boost::asio::post(ex, std::forward<Handler>(h));
  }
  /// As post, for a strand of this runtime's io_context: never blocking, and with the
  /// runtime's recycled storage for the handler.
  template <class Handler>
  void post_to_strand(const boost::asio::strand<boost::asio::io_context::executor_type>& st, Handler&& h) {
    ++posts_;
    boost::asio::require(st, boost::asio::execution::blocking.never,
                         boost::asio::execution::allocator(recycler_allocator<void>(op_memory_)))
        .execute(std::forward<Handler>(h));
  }
  /// Storage for the records of awaited operations whose handlers bring no allocator.
  [[nodiscard]] block_recycler& op_memory() noexcept { return op_memory_; }

  [[nodiscard]] std::size_t live_tasks() const noexcept { return tasks_.live(); }
  [[nodiscard]] std::size_t device_count() const noexcept { return backend_->device_count(); }
  [[nodiscard]] std::uint64_t next_task_id() const noexcept { return next_task_id_; }
  /// Communicator ids, unique per system (deterministic: they appear in error messages).
  [[nodiscard]] std::uint64_t new_communicator_id() noexcept { return next_communicator_id_++; }

 private:
  /// Broadcasts observer calls to every attached observer.
  class fanout_observer final : public observer {
   public:
    explicit fanout_observer(std::vector<observer*>& list) : list_(list) {}
    void on_task(const task_info& t) override {
      for (auto* o : list_) o->on_task(t);
    }
    void on_event_record(const event_record_info& i) override {
      for (auto* o : list_) o->on_event_record(i);
    }
    void on_event_wait(const event_wait_info& i) override {
      for (auto* o : list_) o->on_event_wait(i);
    }
    void on_memory(const memory_info& i) override {
      for (auto* o : list_) o->on_memory(i);
    }
    void on_link_transfer(const link_transfer_info& i) override {
      for (auto* o : list_) o->on_link_transfer(i);
    }
    void on_collective_step(const collective_step_info& i) override {
      for (auto* o : list_) o->on_collective_step(i);
    }
    void on_host_range(const host_range_info& i) override {
      for (auto* o : list_) o->on_host_range(i);
    }
    void on_stream_created(device_id d, std::uint32_t s, std::uint8_t p) override {
      for (auto* o : list_) o->on_stream_created(d, s, p);
    }
    void on_shutdown(sim_time t) override {
      for (auto* o : list_) o->on_shutdown(t);
    }

   private:
    std::vector<observer*>& list_;
  };

  NPURT_DECL void try_start(stream_state& s);
  NPURT_DECL void start_task(stream_state& s, task* t);
  NPURT_DECL void finish_task(stream_state& s, task* t);
  NPURT_DECL void perform_copy(task& t);
  NPURT_DECL void record_failure(const task& t, std::error_code ec);
  NPURT_DECL void detach_wait(task* t) noexcept;
  NPURT_DECL bool run_now();  // host handlers and actions due now; false when there were none
  NPURT_DECL bool step();  // one loop iteration; false when nothing can run
  NPURT_DECL bool resolve_deadlock(bool only_cycles);
  NPURT_DECL void wake_stream(std::uint64_t stream_id);
  NPURT_DECL void task_done_now(task* t);
  static NPURT_DECL void on_wait_satisfied(runtime& rt, void* ctx, std::error_code ec);
  /// Runs `t`'s completion at this instant, through the due-now queue (long chains of
  /// completions must not recurse).
  void done_now(task* t) { clock_.call_at(clock_.now(), timer_action::member<&runtime::task_done_now>(this, t)); }

  system_options opts_;
  std::unique_ptr<npurt::backend> backend_;
  // One thread runs everything (determinism), so the scheduler needs no locks.
  boost::asio::io_context ioc_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE};
  timer_queue clock_;
  observer* trace_ = nullptr;  // the fanout while any observer is attached
  memory_registry memory_;
  std::uint64_t next_task_id_ = 1;
  std::uint64_t next_communicator_id_ = 1;
  bool running_ = false;
  bool flush_pending_ = false;  // the backend asked for flush() at the end of this instant
  bool check_thread_ = false;
  std::thread::id owner_thread_ = std::this_thread::get_id();
  std::unordered_set<std::string> names_;  // interned task names (node-based: views stay valid)
  std::string_view last_name_;
  std::vector<failure> device_failures_;   // by device
  std::uint64_t posts_ = 0;
  std::size_t host_waits_ = 0;
  block_recycler op_memory_;

  object_pool<task, 4096> tasks_;
  object_pool<kernel_desc, 256> kernels_;
  std::vector<std::unique_ptr<stream_state>> streams_;  // index = stream id; ids are never reused
  std::vector<std::unique_ptr<event_state>> events_;    // index = event id
  deadlock_detector deadlocks_{streams_};

  std::vector<observer*> observers_;
  fanout_observer fanout_{observers_};
  device_queue queue_;
  // Last, so that it is destroyed first: handles still alive become null before anything they
  // could reach is gone.
  handle_list handles_;
  std::unordered_set<std::function<void()>*> callbacks_;  // see own_callback

  friend handle_list& handles_of(runtime& rt) noexcept;
};

inline handle_list& handles_of(runtime& rt) noexcept { return rt.handles_; }

}  // namespace detail
}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/runtime.ipp>
#endif
