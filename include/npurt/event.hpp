// npurt/event.hpp — events: points in a stream's order that other streams and host code wait
// for, and whose completion times give exact elapsed times.
//
// Two kinds share one handle. A *task event* is what a fire-and-forget launch returns: the
// completion of that one task; it costs nothing to make. A *user event* comes from
// device::make_event() and is placed with stream::record(), like aclrtRecordEvent; waits refer to
// its latest record at the time of the wait. Handles are cheap to copy; a user event is
// destroyed with its last handle. A handle that outlives its system becomes a null handle
// (valid() is false, and every call reports errc::invalid_event).
//
// Errors: query() and synchronize() report the first unread failure of fire-and-forget work on
// the event's stream at or before the event's position (cudaEventQuery reports earlier
// asynchronous errors too), without reading it: the stream's synchronize still does.
//
// Thread safety: as for streams, every call comes from the thread that runs the system.
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/time.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace npurt {

class stream;
class device;
class event;

namespace detail {
/// For npurt's own components and tests: an event standing for a stream position.
struct event_access {
  /// `task`: the task at that position, when known (0: not known; a wait on it then names no task
  /// in traces).
  static event task_event(runtime& rt, std::uint32_t stream, std::uint64_t seq, std::uint64_t task = 0) noexcept;
};
}  // namespace detail

struct event_options {
  /// A stream wait made before the first record holds until a record comes, as CANN's
  /// synchronising events do (ACL_EVENT_SYNC), instead of failing with errc::event_not_recorded.
  bool wait_for_record = false;
};

class event {
 public:
  event() noexcept = default;
  NPURT_DECL event(const event& o) noexcept;
  NPURT_DECL event& operator=(const event& o) noexcept;
  event(event&& o) noexcept : rt_(std::move(o.rt_)), id_(o.id_), stream_(o.stream_), seq_(o.seq_), task_(o.task_) {}
  NPURT_DECL event& operator=(event&& o) noexcept;
  NPURT_DECL ~event();

  /// False for a default-constructed handle, one that outlived its system, and one whose
  /// device was reset (as after cudaDeviceReset, the handle no longer names an event): exactly
  /// when query() reports errc::invalid_event. Like stream::valid(), it asks the runtime.
  [[nodiscard]] NPURT_DECL bool valid() const noexcept;
  /// True for the events launches return; false for user events.
  [[nodiscard]] bool is_task_event() const noexcept { return rt_ && id_ == 0; }
  /// The user event's id (0 for task events).
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// A task event's task id (0 for user events and null handles): the id traces, the profiler
  /// and observers show for the launch, and the one the simulator's explain() takes, so a
  /// program can read the breakdown of the kernel it launched without watching every task.
  [[nodiscard]] std::uint64_t task_id() const noexcept { return id_ == 0 ? task_ : 0; }

  /// Whether the event has completed. A user event that was never recorded is an error
  /// (errc::event_not_recorded), as is a destroyed one (errc::invalid_event), and so is failed
  /// work before it on its stream (the failure's code; the throwing form names the task).
  [[nodiscard]] NPURT_DECL bool query() const;
  NPURT_DECL bool query(std::error_code& ec) const noexcept;
  /// The error query() would report, or success (completed or not): aclrtQueryEventStatus's
  /// error side without the bool.
  [[nodiscard]] NPURT_DECL std::error_code status() const noexcept;

  /// Waits from host code: `co_await ev.async_wait(asio::use_awaitable)`. Completes with
  /// errc::event_not_recorded at once for a user event that was never recorded, and with the
  /// failure of fire-and-forget work before the event on its stream, as query() reports it
  /// (without reading it: the stream's synchronize still does).
  template <class Token = detail::default_token>
    requires(!std::is_convertible_v<Token, std::optional<picoseconds>>)
  auto async_wait(Token&& token = {}) const;

  /// As async_wait, with a timeout in virtual time: completes with errc::wait_timeout when the
  /// timeout passes first.
  template <class Token = detail::default_token>
  auto async_wait(std::optional<picoseconds> timeout, Token&& token = {}) const;

  /// Blocks until the event completes by driving the simulation (only outside system::run;
  /// inside a coroutine use async_wait). Throws timeout_error when the timeout passes first. A
  /// wait that ends (this and async_wait) trims the device's pool to its release threshold, as
  /// cudaEventSynchronize does.
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout = no_timeout) const;
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout, std::error_code& ec) const;
  /// synchronize(no_timeout, ec): the error_code form without a timeout.
  void synchronize(std::error_code& ec) const { synchronize(no_timeout, ec); }

  /// When the latest record completed, for a completed user event.
  [[nodiscard]] NPURT_DECL std::optional<sim_time> completion_time() const noexcept;

  /// Milliseconds from `start` to `end`, both completed user events, like aclrtEventElapsedTime.
  /// Exact: virtual time has no measurement noise.
  friend NPURT_DECL double elapsed_time(const event& start, const event& end);
  friend NPURT_DECL double elapsed_time(const event& start, const event& end, std::error_code& ec) noexcept;

 private:
  friend class stream;
  friend class device;
  friend struct detail::event_access;
  // The stream position this event stands for now.
  NPURT_DECL bool position(std::uint32_t& stream, std::uint64_t& seq, std::error_code& ec) const noexcept;
  // The device whose pool a synchronize on this event trims, or -1 when it is not known.
  [[nodiscard]] NPURT_DECL device_id device_or_none() const noexcept;
  [[nodiscard]] detail::runtime* runtime_ptr() const noexcept { return rt_; }
  static event task_event(detail::runtime& rt, std::uint32_t stream, std::uint64_t seq, std::uint64_t task) noexcept {
    event e;
    e.rt_ = &rt;
    e.stream_ = stream;
    e.seq_ = seq;
    e.task_ = task;
    return e;
  }
  NPURT_DECL static event user_event(detail::runtime& rt, std::uint64_t id);
  // What is wrong with this event or the timeout of a host wait that `ec` refused, in words for
  // the refusal (empty when the code is not about either). Built only on the refusal path.
  [[nodiscard]] NPURT_DECL std::string wait_problem(std::error_code ec, std::optional<picoseconds> timeout) const;
  // async_wait's refusal at the call, with the words the throwing synchronize raises (see
  // detail::post_refusal). Out of line, so that the accepted path stays small.
  template <class Handler>
  [[gnu::noinline]] void refuse_wait(Handler&& handler, std::error_code ec, std::optional<picoseconds> timeout) const;
  // Gives up this handle's count on a user event (the runtime_ref leaves on its own).
  NPURT_DECL void release() noexcept;

  detail::runtime_ref rt_;  // null once the system is gone: the handle then is a null handle
  std::uint64_t id_ = 0;
  std::uint32_t stream_ = 0;
  std::uint64_t seq_ = 0;
  // A task event: the task's id, which a stream's wait on it names as the task it waited for
  // (the record task of a user event's wait), so that traces and the critical path see the edge.
  std::uint64_t task_ = 0;
};

NPURT_DECL double elapsed_time(const event& start, const event& end);
NPURT_DECL double elapsed_time(const event& start, const event& end, std::error_code& ec) noexcept;

inline event detail::event_access::task_event(runtime& rt, std::uint32_t stream, std::uint64_t seq,
                                              std::uint64_t task) noexcept {
  return event::task_event(rt, stream, seq, task);
}

template <class Handler>
void event::refuse_wait(Handler&& handler, std::error_code ec, std::optional<picoseconds> timeout) const {
  const std::string why = wait_problem(ec, timeout);
  detail::post_refusal(*rt_, std::forward<Handler>(handler), ec, device_or_none(), "npurt::event::async_wait", why);
}

template <class Token>
  requires(!std::is_convertible_v<Token, std::optional<picoseconds>>)
auto event::async_wait(Token&& token) const {
  return async_wait(no_timeout, std::forward<Token>(token));
}

template <class Token>
auto event::async_wait(std::optional<picoseconds> timeout, Token&& token) const {
  // Another thread's call copies no handle (a copy joins the system's handle list and counts a
  // user event's handles): it keeps only the system's loop, to tell the handler's executor apart.
  const boost::asio::io_context* foreign = rt_ && rt_->wrong_thread() ? &rt_->io() : nullptr;
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [foreign](auto handler, event self, std::optional<picoseconds> tmo) {
        if (foreign || (self.rt_ && self.rt_->wrong_thread())) [[unlikely]] {
          detail::refuse_foreign(foreign ? foreign : &self.rt_->io(), std::move(handler), -1,
                                 "npurt::event::async_wait");
          return;
        }
        if (!self.rt_) {
          detail::post_null_handle_error(std::move(handler), make_error_code(errc::invalid_event));
          return;
        }
        detail::runtime& rt = *self.rt_;
        std::uint32_t s = 0;
        std::uint64_t q = 0;
        std::error_code ec;
        if (!self.position(s, q, ec) || (ec = detail::check_timeout(tmo))) [[unlikely]] {
          self.refuse_wait(std::move(handler), ec, tmo);
          return;
        }
        // A task event's position is at least 1, which makes the op a peek; the device is the
        // one whose pool the completed wait trims.
        std::exception_ptr* thrown = detail::thrown_slot(handler);
        detail::cancellable_op* user = detail::make_op(rt, std::move(handler));
        detail::op_base* op = detail::sticky_op::create(rt, user, s, self.device_or_none(), q, thrown);
        const std::pair<std::uint32_t, std::uint64_t> pos[1] = {{s, q}};
        detail::start_multi_wait(rt, op, pos, tmo, user);
      },
      token, foreign ? event() : *this, timeout);
}

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/event.ipp>
#endif
