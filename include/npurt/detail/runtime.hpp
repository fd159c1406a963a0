// npurt/detail/runtime.hpp — the loop of one npurt::system.
//
// The runtime composes the owners of the core's invariants, each in its own header:
//   timer_queue       (detail/timer_queue.hpp)       the virtual clock; timed actions in (time,
//                                                    call order), actions due at once before them
//   memory_registry   (detail/memory_registry.hpp)   which device pointers are live
//   scheduler         (detail/scheduler.hpp)         stream order, tasks, events, host lanes,
//                                                    dependencies, sticky errors
//   deadlock_detector (detail/deadlock_detector.hpp) waits that can never end, and their report
// and owns the loop that drives them together with the host's io_context: what runs at an
// instant, when an instant ends (the backend's flush), when the clock moves, and what happens
// when nothing can run. Public classes call the owners' narrow verbs and never write their state.
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
#include <npurt/detail/scheduler.hpp>
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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace npurt {

namespace detail {

class runtime final : public backend_host, private loop_parts, public scheduler, public observer_host {
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
  void complete(task_info& t, std::error_code ec) override { task_completed(t, ec); }
  void describe_failure(task_info& t, std::error_code ec, std::string why) override {
    auto& rec = static_cast<running_task&>(t);  // the backend only ever holds a stream's running_task
    rec.why = std::move(why);
    rec.why_ec = ec;
  }
  void complete_timeout(task_info& t, std::error_code ec, timeout_kind timer, picoseconds limit) override {
    auto& rec = static_cast<running_task&>(t);  // the backend only ever holds a stream's running_task
    rec.timer = timer;
    rec.timeout_limit = limit.count();
    task_completed(t, ec);
  }
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
  std::uint64_t call_at_revocable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                  std::uint64_t arg) override {
    return clock_.call_at_revocable(at, timer_action::plain(fn, ctx, arg));
  }
  void revoke_timer(std::uint64_t ticket) override { clock_.revoke(ticket); }
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
  /// A destructor that drives the loop (a stream's drain) cannot let a handler's exception out:
  /// it keeps the first one here, and the next run() or blocking wait throws it.
  void defer_exception(std::exception_ptr e) noexcept {
    if (!deferred_exception_) deferred_exception_ = std::move(e);
  }
  /// errc::wrong_thread when called from another thread than the system's while checks are on.
  [[nodiscard]] NPURT_DECL std::error_code check_thread() const noexcept;
  /// check_thread() as a test, inline for the launch path: one load while checks are off.
  [[nodiscard]] bool wrong_thread() const noexcept {
    return check_thread_ && std::this_thread::get_id() != owner_thread_;
  }
  [[nodiscard]] boost::asio::io_context& io() noexcept { return ioc_; }
  [[nodiscard]] npurt::backend& backend() noexcept { return *backend_; }
  [[nodiscard]] const system_options& options() const noexcept { return opts_; }
  [[nodiscard]] const std::string& last_deadlock_report() const noexcept { return deadlocks_.last_report(); }
  void clear_deadlock_report() noexcept { deadlocks_.clear(); }

  // --- observers ---
  NPURT_DECL void add_observer(observer& o);
  NPURT_DECL void remove_observer(observer& o);
  [[nodiscard]] bool tracing() const noexcept { return trace_ != nullptr; }
  /// Reports a pool allocation or free to the observers.
  NPURT_DECL void trace_memory(device_id dev, memory_op op, std::uint64_t addr, std::size_t bytes, std::size_t in_use,
                               std::size_t reserved, std::uint32_t stream);
  [[nodiscard]] observer& fanout() noexcept { return fanout_; }
  /// True while observers hear a report (a task's end, a memory event, ...): the report comes
  /// from inside the scheduler's bookkeeping of that event.
  [[nodiscard]] bool in_report() const noexcept { return fanout_.reporting(); }

  /// Host operations outstanding (for deadlock detection: somebody still waits).
  void host_wait_begin() noexcept { ++host_waits_; }
  void host_wait_end() noexcept { --host_waits_; }
  using loop_parts::post;
  /// Handlers posted to the host side since the loop last polled its io_context.
  [[nodiscard]] std::uint64_t posts_pending() const noexcept { return posts_; }
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

  /// Non-zero while a dying runtime destroys the frames of spawned tasks: a task that is
  /// suspended in an operation is then destroyed with its parent (the system's work is gone),
  /// where at any other time it is left to finish on its own (see npurt::task's destructor).
  static inline thread_local int frame_teardown = 0;
  /// The frames of spawned tasks (npurt::spawn) that have not ended: a system destroyed first
  /// destroys them, as the io_context does the Asio coroutines it still holds.
  std::uint64_t adopt_frame(void* frame) {
    frames_.emplace(next_frame_, frame);
    return next_frame_++;
  }
  void release_frame(std::uint64_t id) noexcept { frames_.erase(id); }

  [[nodiscard]] std::size_t device_count() const noexcept { return backend_->device_count(); }

  // --- pools ---
  /// The device's default pool, which every synchronisation on the device trims (null to take it
  /// away). A callback rather than the pool: the pool's header sits above the runtime's.
  void set_device_pool(device_id dev, void (*on_sync)(void*, bool), void* pool) {
    const auto i = static_cast<std::size_t>(dev);
    if (i >= device_pools_.size()) device_pools_.resize(i + 1);
    device_pools_[i] = {on_sync, pool};
  }
  /// A synchronize on `dev` ended: as cudaMemPoolAttrReleaseThreshold asks of every stream,
  /// event and device synchronisation, the device's pool gives back cached memory above its
  /// threshold. all_streams: every stream of the device is idle (a device synchronize).
  void device_synchronized(device_id dev, bool all_streams) {
    const auto i = static_cast<std::size_t>(dev);
    if (dev < 0 || i >= device_pools_.size() || !device_pools_[i].on_sync) return;
    device_pools_[i].on_sync(device_pools_[i].pool, all_streams);
  }
  /// Communicator ids, unique per system (deterministic: they appear in error messages).
  [[nodiscard]] std::uint64_t new_communicator_id() noexcept { return next_communicator_id_++; }
  /// Where an async enqueue's preparation writes the words of a refusal (stream::async_enqueue):
  /// one string kept for the purpose, so that an accepted call (every call but a refused one)
  /// builds and destroys none. Only the thread that runs the system prepares tasks.
  [[nodiscard]] std::string& refusal_words() noexcept { return refusal_words_; }

 private:
  std::string refusal_words_;
  /// Broadcasts observer calls to every attached observer.
  class fanout_observer final : public observer {
   public:
    void on_task(const task_info& t) override {
      each([&](observer& o) { o.on_task(t); });
    }
    void on_event_record(const event_record_info& i) override {
      each([&](observer& o) { o.on_event_record(i); });
    }
    void on_event_wait(const event_wait_info& i) override {
      each([&](observer& o) { o.on_event_wait(i); });
    }
    void on_memory(const memory_info& i) override {
      each([&](observer& o) { o.on_memory(i); });
    }
    void on_link_transfer(const link_transfer_info& i) override {
      each([&](observer& o) { o.on_link_transfer(i); });
    }
    void on_collective_step(const collective_step_info& i) override {
      each([&](observer& o) { o.on_collective_step(i); });
    }
    void on_host_range(const host_range_info& i) override {
      each([&](observer& o) { o.on_host_range(i); });
    }
    void on_stream_created(device_id d, std::uint32_t s, std::uint8_t p) override {
      each([&](observer& o) { o.on_stream_created(d, s, p); });
    }
    void on_shutdown(sim_time t) override {
      each([&](observer& o) { o.on_shutdown(t); });
    }

    /// False if `o` is attached already.
    bool add(observer& o) {
      if (std::find(list_.begin(), list_.end(), &o) != list_.end()) return false;
      list_.push_back(&o);
      ++live_;
      return true;
    }
    /// False if `o` is not attached.
    bool remove(observer& o) noexcept {
      const auto it = std::find(list_.begin(), list_.end(), &o);
      if (it == list_.end()) return false;
      --live_;
      // A report in progress walks the list by index: leave a hole until it ends.
      if (depth_ > 0) {
        *it = nullptr;
        holes_ = true;
      } else {
        list_.erase(it);
      }
      return true;
    }
    [[nodiscard]] bool empty() const noexcept { return live_ == 0; }
    [[nodiscard]] bool reporting() const noexcept { return depth_ > 0; }
    [[nodiscard]] const std::vector<observer*>& list() const noexcept { return list_; }

   private:
    // An observer may attach or remove observers, itself included, from inside a report: the walk
    // is by index over the observers attached when the report began, skipping removed ones, so
    // neither a reallocation nor an erase can pull the list from under it.
    template <class F>
    void each(F&& f) {
      struct depth_guard {
        fanout_observer& self;
        ~depth_guard() {
          if (--self.depth_ == 0 && self.holes_) {
            std::erase(self.list_, nullptr);
            self.holes_ = false;
          }
        }
      };
      ++depth_;
      depth_guard guard{*this};
      for (std::size_t i = 0, n = list_.size(); i < n; ++i)
        if (observer* o = list_[i]) f(*o);
    }

    std::vector<observer*> list_;
    std::size_t live_ = 0;   // non-null entries
    std::size_t depth_ = 0;  // reports in progress (a report may cause another)
    bool holes_ = false;
  };

  NPURT_DECL void observer_destroyed(observer& o) noexcept override;

  NPURT_DECL void wait_blocked(stream_state& s) override;
  NPURT_DECL bool run_now();  // host handlers and actions due now; false when there were none
  NPURT_DECL bool step();     // one loop iteration; false when nothing can run
  NPURT_DECL bool resolve_deadlock(bool only_cycles);

  struct device_pool {
    void (*on_sync)(void*, bool) = nullptr;
    void* pool = nullptr;
  };
  std::vector<device_pool> device_pools_;  // by device id; see set_device_pool
  std::uint64_t next_communicator_id_ = 1;
  std::map<std::uint64_t, void*> frames_;  // see adopt_frame; by spawn order, so they die in a fixed order
  std::uint64_t next_frame_ = 1;
  bool running_ = false;
  std::exception_ptr deferred_exception_;  // see defer_exception
  bool flush_pending_ = false;  // the backend asked for flush() at the end of this instant
  bool check_thread_ = false;
  std::thread::id owner_thread_ = std::this_thread::get_id();
  std::size_t host_waits_ = 0;
  deadlock_detector deadlocks_{streams(), queue()};

  fanout_observer fanout_;
  // Last, so that it is destroyed first: handles still alive become null before anything they
  // could reach is gone.
  handle_list handles_;

  friend handle_list& handles_of(runtime& rt) noexcept;
};

inline handle_list& handles_of(runtime& rt) noexcept { return rt.handles_; }

/// The error of a blocking synchronize that ended with ec and no task failure to report (none
/// when ec is empty): a call inside system::run, which cannot block (async_form names what to
/// use instead), a timeout with its limit, or a deadlock with the report system::run gives.
/// rt is null for a handle whose system is gone.
NPURT_DECL void throw_if_sync_error(const runtime* rt, std::error_code ec, std::string_view what,
                                    std::optional<picoseconds> timeout, std::int32_t device,
                                    std::string_view async_form);
/// What is wrong with a timeout check_timeout refused, in the words of a refusal. Out of line:
/// only a refused call builds them. Declared here, before the header-only build includes its
/// body: an attribute must come with the first declaration.
[[nodiscard]] NPURT_DECL std::string timeout_problem(picoseconds timeout);

}  // namespace detail
}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/runtime.ipp>
#endif
