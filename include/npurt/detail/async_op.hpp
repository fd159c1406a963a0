// npurt/detail/async_op.hpp — how an Asio completion handler waits inside the runtime: a
// type-erased op allocated with the handler's associated allocator and completed by posting
// the handler to its associated executor. Posting (never invoking inline) keeps the order of
// resumptions fixed by the loop, and keeps device completions from re-entering host code.
#pragma once

#include <npurt/detail/runtime.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/system_executor.hpp>

#include <coroutine>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace npurt::detail {

/// The completion token of an asynchronous call given none: asio::deferred, which Asio itself
/// makes every executor's default from Boost 1.84 on. Older Boost has no default for an
/// io_context's executor, and a call without a token would not compile: with this one,
/// `co_await s.async_launch(k)` works in an Asio coroutine and `auto op = ev.async_wait();` is an
/// operation to start later.
using default_token = boost::asio::deferred_t;

/// The error an async operation completes with. Converting a std::error_code to Boost's asks
/// the category whether it wraps a Boost one (a dynamic_cast); success needs no such question.
inline async_error_code to_async_error(std::error_code ec) noexcept {
  return ec ? async_error_code(ec) : async_error_code();
}

/// An op a cancellation slot can reach (Asio's per-operation cancellation). The slot is the
/// handler's associated one; the initiating function arms it once the op waits, saying what a
/// cancellation does and which cancellation types it honours. Completion disarms it, so an
/// emit after the completion finds no handler. Without a connected slot nothing is installed.
struct cancellable_op : op_base {
  using cancel_type = boost::asio::cancellation_type;
  /// Ends the wait early; returns false when there was nothing left to end.
  using cancel_fn = bool (*)(void* ctx, cancellable_op* op);

  boost::asio::cancellation_slot slot;
  cancel_fn on_cancel = nullptr;  // non-null while armed
  void* cancel_ctx = nullptr;
  cancel_type honoured = cancel_type::none;

  void arm(cancel_fn fn, void* ctx, cancel_type types) {
    if (!slot.is_connected()) return;
    on_cancel = fn;
    cancel_ctx = ctx;
    honoured = types;
    slot.template emplace<forward>(this);
  }
  /// At completion: the slot's handler must not outlive the op.
  void disarm() noexcept {
    if (on_cancel) [[unlikely]] {
      on_cancel = nullptr;
      if (!in_emit) slot.clear();
    }
  }

 private:
  struct forward {
    cancellable_op* op;
    void operator()(cancel_type t) const {
      cancellable_op* o = op;
      if ((t & o->honoured) == cancel_type::none || !o->on_cancel) return;
      // The cancellation completes the op, which may free it (and would clear the slot, that
      // is this very handler): keep the slot, and clear it as the last thing done here.
      boost::asio::cancellation_slot s = o->slot;
      o->in_emit = true;
      const bool ended = o->on_cancel(o->cancel_ctx, o);
      if (ended) s.clear();
      else o->in_emit = false;
    }
  };
  bool in_emit = false;
};

/// The cancellation types a wait honours: ending it early has no side effect at all.
inline constexpr boost::asio::cancellation_type wait_cancel_types = boost::asio::cancellation_type::terminal |
                                                                    boost::asio::cancellation_type::partial |
                                                                    boost::asio::cancellation_type::total;
/// The cancellation types an awaited enqueue honours: the await ends early, but the queued work
/// stays queued and runs (its effects happen), so a "total" cancellation is not possible.
inline constexpr boost::asio::cancellation_type enqueue_cancel_types =
    boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial;

template <class Handler, class... Values>
class handler_op final : public cancellable_op {
 public:
  // Handlers without an allocator of their own take their record from the runtime's recycler:
  // an awaited launch then allocates nothing once warm, and leaves Asio's per-thread cache to
  // the strand post that completes it.
  static constexpr bool own_allocator =
      !std::is_same_v<boost::asio::associated_allocator_t<Handler>, std::allocator<void>>;
  using allocator_type = std::conditional_t<
      own_allocator,
      typename std::allocator_traits<boost::asio::associated_allocator_t<Handler>>::template rebind_alloc<handler_op>,
      recycler_allocator<handler_op>>;
  static allocator_type get_alloc(runtime& rt, const Handler& h) {
    if constexpr (own_allocator) return allocator_type(boost::asio::get_associated_allocator(h));
    else return allocator_type(rt.op_memory());
  }

  handler_op(runtime& rt, Handler&& h) : rt_(&rt), handler_(std::move(h)) {
    complete_fn = &do_complete;
    slot = boost::asio::get_associated_cancellation_slot(handler_);
  }

  /// Values delivered after the error_code (e.g. the pointer of an async_malloc).
  std::tuple<Values...> values{};

  static handler_op* create(runtime& rt, Handler&& h) {
    allocator_type alloc = get_alloc(rt, h);
    handler_op* p = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    std::allocator_traits<allocator_type>::construct(alloc, p, rt, std::move(h));
    rt.host_wait_begin();
    return p;
  }

 private:
  static void do_complete(op_base* base, std::error_code ec) {
    auto* self = static_cast<handler_op*>(base);
    self->disarm();
    runtime& rt = *self->rt_;
    allocator_type alloc = get_alloc(rt, self->handler_);
    Handler h(std::move(self->handler_));
    std::tuple<Values...> vals(std::move(self->values));
    std::allocator_traits<allocator_type>::destroy(alloc, self);
    std::allocator_traits<allocator_type>::deallocate(alloc, self, 1);
    rt.host_wait_end();
    auto ex = boost::asio::get_associated_executor(h, rt.io().get_executor());
    // When the handler's executor is a strand of our io_context (a stream's, a device's, or one
    // made on the system's executor; coroutines hold it type-erased), hand the completion straight
    // to that strand, never blocking and with the runtime's recycled storage. That is what
    // post() would do, minus the type-erased property queries, the work-tracking wrapper and
    // the second dispatch it makes when the handler runs.
    using strand_t = boost::asio::strand<boost::asio::io_context::executor_type>;
    const strand_t* st = nullptr;
    if constexpr (std::is_same_v<decltype(ex), boost::asio::any_io_executor>) st = ex.template target<strand_t>();
    else if constexpr (std::is_same_v<decltype(ex), strand_t>) st = &ex;
    // Only a strand of our own loop: the recycler is not for other threads' io_contexts.
    if (st && &st->context() == &rt.io()) {
      rt.post_to_strand(*st, [h = std::move(h), e = to_async_error(ec), vals = std::move(vals)]() mutable {
        std::apply([&](auto&&... v) { std::move(h)(e, std::move(v)...); }, std::move(vals));
      });
      return;
    }
    std::apply(
        [&](auto&&... v) { rt.post(ex, boost::asio::append(std::move(h), to_async_error(ec), std::move(v)...)); },
        std::move(vals));
  }

  runtime* rt_;
  Handler handler_;
};

/// The record of an operation awaited with npurt::use_task (npurt/task.hpp): it lives in the
/// awaiting coroutine's frame while that is suspended, and is the op the runtime completes.
/// Its slot, when connected, is the one of the spawned task it belongs to (npurt::spawn).
struct direct_op final : cancellable_op {
  runtime* rt = nullptr;
  std::coroutine_handle<> waiting;
  std::error_code ec;
  // What the throwing form of the operation raises for ec, when the operation knows more than
  // ec says (the task that failed): the await rethrows it instead of one built from ec.
  std::exception_ptr thrown;
  bool early = false;  // completed during initiation without a runtime: do not suspend

  static void on_complete(op_base* b, std::error_code e) {
    auto* self = static_cast<direct_op*>(b);
    self->disarm();
    self->ec = e;
    self->rt->host_wait_end();
    // Through the due-now queue, not an Asio post: at this instant, in the loop's order, and
    // never inside the caller (completions are reported from the scheduler's bookkeeping).
    self->rt->timers().call_at(self->rt->now(), timer_action::member<&direct_op::resume>(self, self));
  }
  void resume(direct_op*) { waiting.resume(); }
};

/// What an initiating function receives for npurt::use_task. make_op() recognises it and lets
/// the runtime complete the op directly; code that treats it as a plain handler posts it to the
/// system's io_context (its default executor there), which resumes the coroutine just the same.
struct direct_handler {
  direct_op* op;
  void operator()(const async_error_code& e) const {
    op->disarm();
    op->ec = e ? std::error_code(e) : std::error_code{};
    op->waiting.resume();
  }
};

template <class Handler>
inline constexpr bool is_direct_handler_v = std::is_same_v<std::decay_t<Handler>, direct_handler>;

/// The op an initiating function hands to the runtime for its completion handler.
template <class Handler>
cancellable_op* make_op(runtime& rt, Handler&& h) {
  if constexpr (is_direct_handler_v<Handler>) {
    h.op->rt = &rt;
    h.op->complete_fn = &direct_op::on_complete;
    h.op->thrown_to = &h.op->thrown;
    rt.host_wait_begin();
    return h.op;
  } else {
    return handler_op<std::decay_t<Handler>>::create(rt, std::forward<Handler>(h));
  }
}

/// Cancels the await of an enqueued task: the task stays queued and runs, and is from then on
/// fire-and-forget (a failure of it is the stream's sticky error).
inline bool cancel_enqueued(void* ctx, cancellable_op* op) {
  auto* t = static_cast<task*>(ctx);
  if (t->waiter != op) return false;
  t->waiter = nullptr;
  op->complete(make_error_code(errc::operation_aborted));
  return true;
}

/// For a handler whose await cannot suspend on a thread that does not run the loop: completes
/// it during the initiating call in a way its awaiter reads only once the call has returned
/// (the await then does not suspend), and says so. npurt::use_task's handlers are such
/// (their value-carrying one overloads this in npurt/task.hpp); others are posted.
template <class Handler>
bool complete_at_call(Handler& h, std::error_code ec) noexcept {
  if constexpr (is_direct_handler_v<Handler>) {
    h.op->ec = ec;
    h.op->early = true;
    return true;
  } else {
    return false;
  }
}

/// Whether `ex` runs its work on `loop` (the runtime's io_context): an executor that can say which
/// execution context it belongs to, as Asio's own do, or a legacy one with context().
template <class Executor>
bool runs_on(const Executor& ex, const boost::asio::io_context* loop) noexcept {
  using context_query = boost::asio::execution::context_as_t<boost::asio::execution_context&>;
  if constexpr (boost::asio::can_query_v<const Executor&, context_query>) {
    return &boost::asio::query(ex, boost::asio::execution::context_as<boost::asio::execution_context&>) ==
           static_cast<const boost::asio::execution_context*>(loop);
  } else if constexpr (requires { ex.context(); }) {
    return static_cast<const void*>(&ex.context()) == static_cast<const void*>(loop);
  } else {
    return false;
  }
}

/// Completes a handler with `ec` for a call made on a thread that does not run the system `loop`
/// belongs to: nothing of the system is touched, since its io_context is single-threaded and
/// unlocked (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE) and its counters, clock and recent error are
/// the loop thread's. As Asio completes an operation that cannot complete inline, the handler is
/// posted to its associated executor, Asio's system executor when it has none. One associated
/// with the system's own io_context, which cannot take work from this thread, runs on the system
/// executor without that association. npurt::use_task's awaits do not suspend and see the error
/// once the initiating call has returned (complete_at_call).
template <class Handler, class... Values>
void post_foreign(const boost::asio::io_context* loop, Handler&& h, std::error_code ec, Values&&... v) {
  if (complete_at_call(h, ec)) return;
  auto ex = boost::asio::get_associated_executor(h);
  if (runs_on(ex, loop)) [[unlikely]] {
    boost::asio::post(boost::asio::system_executor(),
                      [h = std::decay_t<Handler>(std::forward<Handler>(h)), e = to_async_error(ec),
                       vals = std::make_tuple(std::forward<Values>(v)...)]() mutable {
                        std::apply([&](auto&&... x) { std::move(h)(e, std::move(x)...); }, std::move(vals));
                      });
    return;
  }
  boost::asio::post(ex, boost::asio::append(std::forward<Handler>(h), to_async_error(ec), std::forward<Values>(v)...));
}

/// Completes a handler at once with an error, without touching the runtime's queues: the
/// caller's input was wrong and nothing was enqueued. From a thread that does not run the
/// system the runtime is not touched at all (post_foreign).
template <class Handler, class... Values>
void post_error(runtime& rt, Handler&& h, std::error_code ec, Values&&... v) {
  if (rt.wrong_thread()) [[unlikely]] {
    post_foreign(&rt.io(), std::forward<Handler>(h), ec, std::forward<Values>(v)...);
    return;
  }
  if constexpr (is_direct_handler_v<Handler> && sizeof...(Values) == 0) {
    make_op(rt, std::forward<Handler>(h))->complete(ec);
    return;
  }
  auto ex = boost::asio::get_associated_executor(h, rt.io().get_executor());
  rt.post(ex, boost::asio::append(std::forward<Handler>(h), to_async_error(ec), std::forward<Values>(v)...));
}

/// A host wait on several stream positions, with an optional timeout. Whichever of "all
/// positions reached" and "the timer fired" comes first completes the op; the other side
/// only drops its reference.
struct multi_wait {
  runtime* rt = nullptr;
  op_base* op = nullptr;
  std::size_t remaining = 0;
  std::size_t refs = 0;
  bool done = false;
  bool has_timer = false;
  std::uint64_t timer = 0;
  std::int64_t limit = 0;  // the timeout, for the op's timeout_error

  static void on_position(void* /*self*/, void* ctx, std::error_code ec) {
    auto* self = static_cast<multi_wait*>(ctx);
    if (!self->done && (ec || --self->remaining == 0)) {
      self->done = true;
      if (self->has_timer) {
        // The timeout will never fire now: take it back so it does not move the clock.
        self->rt->timers().cancel(self->timer);
        self->has_timer = false;
        self->release();
      }
      self->op->complete(ec);
    }
    self->release();
  }
  void on_timeout(std::uint64_t) {
    has_timer = false;
    if (!done) {
      done = true;
      op->timer = timeout_kind::sync;
      op->timeout_limit = limit;
      op->complete(make_error_code(errc::wait_timeout));
    }
    release();
  }
  void release() {
    if (--refs == 0) delete this;
  }
  /// A cancellation of the awaiting handler: the wait ends now with errc::operation_aborted and
  /// stops counting as a host wait; the positions' waiters only drop their references later.
  static bool cancel(void* ctx, cancellable_op* /*user*/) {
    auto* self = static_cast<multi_wait*>(ctx);
    if (self->done) return false;
    self->done = true;
    if (self->has_timer) {
      self->rt->timers().cancel(self->timer);
      self->has_timer = false;
      self->release();  // a position still holds its reference: self lives on
    }
    self->op->complete(make_error_code(errc::operation_aborted));
    return true;
  }
};

/// A negative timeout is the caller's error (no_timeout means none): never a silent "wait forever"
/// or "time out at once".
inline std::error_code check_timeout(const std::optional<picoseconds>& timeout) noexcept {
  return timeout && timeout->count() < 0 ? make_error_code(errc::invalid_argument) : std::error_code{};
}

/// Starts a multi_wait on positions [first, last) of (stream, seq) pairs, with an optional
/// timeout in virtual time. `user`, the op `op` completes, is armed for cancellation while the
/// wait waits. The caller has refused a timeout check_timeout refuses (with its words, before
/// making any op), so that only the refused call pays for the refusal.
template <class Positions>
void start_multi_wait(runtime& rt, op_base* op, const Positions& positions, std::optional<picoseconds> timeout,
                      cancellable_op* user = nullptr) {
  auto* w = new multi_wait{&rt, op, 0, 1, false};  // the extra ref is released below
  for (const auto& [stream, seq] : positions) {
    if (rt.position_reached(stream, seq)) continue;
    ++w->remaining;
    ++w->refs;
    rt.wait_position(stream, seq, position_waiter{&multi_wait::on_position, nullptr, w});
  }
  if (w->remaining == 0) {
    w->done = true;
    op->complete({});
  } else if (timeout && later(rt.now(), *timeout) != end_of_time) {  // past the end of time: never fires
    ++w->refs;
    w->has_timer = true;
    w->limit = timeout->count();
    w->timer = rt.timers().call_at_cancellable(later(rt.now(), *timeout),
                                               timer_action::member_value<&multi_wait::on_timeout>(w, 0));
  }
  if (!w->done && user) user->arm(&multi_wait::cancel, w, wait_cancel_types);
  w->release();
}

/// Completes a wait whose outcome, when the wait itself succeeded, is a failure of
/// fire-and-forget work: for a synchronize, the first unread failure of the stream (or of the
/// device, stream 0), read by it; for an event wait (upto != 0), the stream's unread failure at
/// or before position `upto`, left unread as event::query and event::synchronize leave it.
/// Like the blocking forms, a wait that ended trims the device's pool to its release threshold.
struct sticky_op final : op_base {
  runtime* rt = nullptr;
  op_base* user = nullptr;
  std::uint32_t stream = 0;  // 0: the device's failure
  device_id device = 0;      // -1: not known (an event whose stream is gone), nothing to trim
  std::uint64_t upto = 0;    // 0: take the failure; else peek at positions up to this one
  std::exception_ptr* thrown = nullptr;  // the awaiter's (thrown_slot), when it rethrows one

  static op_base* create(runtime& rt, op_base* user, std::uint32_t stream, device_id dev, std::uint64_t upto = 0,
                         std::exception_ptr* thrown = nullptr) {
    auto* op = new sticky_op;
    op->complete_fn = &done;
    op->rt = &rt;
    op->user = user;
    op->stream = stream;
    op->device = dev;
    op->upto = upto;
    op->thrown = thrown;
    return op;
  }
  static void done(op_base* b, std::error_code ec) {
    auto* self = static_cast<sticky_op*>(b);
    op_base* user = self->user;
    // The wait's own timeout, or the failure's timer: a throwing await names it.
    user->timer = self->timer;
    user->timeout_limit = self->timeout_limit;
    if (!ec) {
      // A device wait covers the positions of when it began: its device is idle, every recorded
      // use over, only if nothing was enqueued on it since.
      const bool all_streams = self->stream == 0 && self->rt->device_positions(self->device).empty();
      self->rt->device_synchronized(self->device, all_streams);
      ec = self->outcome(*user);
    } else if (self->thrown && ec == errc::wait_timeout) [[unlikely]] {
      *self->thrown = self->timeout_exception(ec);
    }
    delete self;
    user->complete(ec);
  }

 private:
  // The wait's own timer fired: the exception names the call that waited, as the blocking
  // form's names itself, which the op's kind tells (built only here, on the timeout).
  std::exception_ptr timeout_exception(std::error_code ec) const {
    const char* call = upto != 0 ? "npurt::event::async_wait"
                       : stream  ? "npurt::stream::async_synchronize"
                                 : "npurt::device::async_synchronize";
    try {
      throw_error_on(device, ec, call, timeout_limit);
    } catch (...) { return std::current_exception(); }
  }
  std::error_code outcome(op_base& user) const {
    const auto report = [&](const failure& f) {
      user.timer = f.timer;
      user.timeout_limit = f.timeout_limit;
      return f.ec;
    };
    if (upto != 0) {
      const failure* f = rt->peek_stream_failure(stream);
      if (!f || f->seq > upto)
        return rt->position_aborted(stream, upto) ? make_error_code(errc::operation_aborted) : std::error_code{};
      if (thrown) [[unlikely]]
        *thrown = failure_exception(*f, "npurt::event::async_wait: " + f->describe());
      return report(*f);
    }
    const failure f = stream ? rt->take_stream_failure(stream) : rt->take_device_failure(device);
    // The failure is read here: what the blocking form's message says of it must go with it now.
    if (f && thrown) [[unlikely]]
      *thrown = failure_exception(
          f,
          stream ? "npurt::stream::async_synchronize: " + f.describe()
                 : "npurt::device::async_synchronize: device " + std::to_string(device) + ": " + f.describe(),
          device);
    return report(f);
  }
};

/// Where an awaiter that rethrows an operation's own exception keeps it, or null for handlers
/// that receive only the code: an error_code alone cannot carry, say, the fields of an
/// out_of_memory_error, so an operation that knows more stores the exception its throwing form
/// would raise here. npurt::use_task's direct_op has the slot; its value-carrying handler
/// (npurt/task.hpp) overloads this, so a generic initiation calls it unqualified after
/// `using detail::thrown_slot;`. The slot outlives the handler's move into its op.
template <class Handler>
std::exception_ptr* thrown_slot(Handler& h) noexcept {
  if constexpr (is_direct_handler_v<Handler>) return &h.op->thrown;
  else return nullptr;
}

/// For an initiating function that refused its arguments before enqueuing anything: the words
/// its throwing form raises (`call: why: <the code's message>`) become the system's recent error
/// (system::recent_error_message, for a handler that hears the code alone), and the returned
/// exception, of the code's class, is what an awaiting npurt::task throws. Out of line: only
/// the refusal path pays for the words.
/// From a thread that does not run the system the words are not written (the recent error is
/// the loop thread's), and only the exception is returned.
NPURT_DECL std::exception_ptr note_refusal(runtime& rt, std::int32_t device, std::string_view call, std::error_code ec,
                                           std::string_view why);
/// The exception of a refusal (`call: why: <the code's message>`, of the code's class), without
/// writing it anywhere.
NPURT_DECL std::exception_ptr refusal_exception(std::int32_t device, std::string_view call, std::error_code ec,
                                                std::string_view why);

/// post_error for an initiating function's refusal, with its words (note_refusal): a throwing
/// await and recent_error_message say which argument was wrong, as the throwing form does.
template <class Handler>
void post_refusal(runtime& rt, Handler&& h, std::error_code ec, std::int32_t device, std::string_view call,
                  std::string_view why) {
  std::exception_ptr e = note_refusal(rt, device, call, ec, why);
  if (std::exception_ptr* slot = thrown_slot(h)) *slot = std::move(e);
  post_error(rt, std::forward<Handler>(h), ec);
}

/// An async call made on a thread that does not run the system `loop` belongs to: the handler
/// completes with errc::wrong_thread through post_foreign, touching nothing of the system, and
/// an awaiting npurt::task throws the words `call: <the code's message>`. Out of line: only the
/// refused call builds them.
template <class Handler, class... Values>
[[gnu::noinline]] void refuse_foreign(const boost::asio::io_context* loop, Handler&& h, std::int32_t device,
                                      std::string_view call, Values&&... v) {
  const std::error_code ec = make_error_code(errc::wrong_thread);
  if (std::exception_ptr* slot = thrown_slot(h)) *slot = refusal_exception(device, call, ec, {});
  post_foreign(loop, std::forward<Handler>(h), ec, std::forward<Values>(v)...);
}

/// Completes a handler with an error from an initiating function that has no runtime to post to
/// (a null handle): on the handler's associated executor, or Asio's system executor, never
/// inside the initiating call.
template <class Handler>
void post_null_handle_error(Handler&& h, std::error_code ec) {
  if constexpr (is_direct_handler_v<Handler>) {
    // No loop to resume from: the awaiting coroutine does not suspend and sees the error once
    // the initiating call has returned.
    h.op->ec = ec;
    h.op->early = true;
    return;
  }
  auto ex = boost::asio::get_associated_executor(h);
  boost::asio::post(ex, boost::asio::append(std::forward<Handler>(h), to_async_error(ec)));
}

/// A blocking host wait: drives the loop until done() or the virtual deadline, whichever first.
/// A timer at the deadline makes the clock stop exactly there.
template <class Done>
void wait_blocking(runtime& rt, Done done, sim_time deadline, std::error_code& ec) {
  ec.clear();
  if (done()) return;
  if (rt.in_run()) {
    ec = make_error_code(errc::not_supported);  // inside run(): use the async_ form
    return;
  }
  if ((ec = rt.check_thread())) return;
  std::uint64_t ticket = 0;
  const bool timed = deadline != sim_time::max();
  if (timed) ticket = rt.timers().call_at_cancellable(deadline, timer_action::nothing());
  rt.run_until([&] { return done() || (timed && rt.now() >= deadline); }, ec);
  if (timed) rt.timers().cancel(ticket);
  if (done()) return;
  if (!ec || (timed && rt.now() >= deadline)) ec = make_error_code(errc::wait_timeout);
}

}  // namespace npurt::detail
