// npurt/task.hpp — npurt's own coroutine type, and a completion token that resumes it from the
// completion itself.
//
//   npurt::task<void> step(npurt::stream& s, npurt::event ready) {
//     co_await ready.async_wait(npurt::use_task);          // an event dependency
//     co_await s.async_launch(kernel, npurt::use_task);    // resumes when the kernel completes
//   }
//   npurt::spawn(sys, step(s, ev), [](std::exception_ptr e) { ... });
//   sys.run();
//
// An operation awaited with `npurt::use_task` keeps its record in the awaiting coroutine's frame
// (nothing is allocated) and, when the task completes, resumes the coroutine through the loop's
// queue of actions due at this instant instead of an Asio post: the resumption happens at the
// virtual time of the completion, in the loop's fixed order, and never inside the initiating
// call. Errors are thrown from the co_await as npurt's typed exceptions; a task that failed is
// named with what went wrong, as the blocking forms name it. Tasks run on the
// system's thread, outside any strand: a strand orders handlers among themselves, and a task is
// never run concurrently with one because the loop runs everything on one thread.
//
// Cancellation: spawn() takes the cancellation slot bound to its handler, as co_spawn does, and
// passes emits to the operation the task awaits (docs/runtime.md, "Cancellation").
//
// `use_awaitable` keeps working for Asio coroutines; `use_task` is for npurt::task only (an
// Asio awaitable cannot co_await a foreign awaiter). Operations whose completion carries a value
// besides the error (async_malloc, session::async_run) give it as the co_await's result.
#pragma once

#include <npurt/detail/async_op.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/system.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace npurt {

/// Completion token: `co_await op(..., npurt::use_task)` inside an npurt::task.
struct use_task_t {
  constexpr use_task_t() noexcept = default;
};
inline constexpr use_task_t use_task{};

template <class T = void>
class task;

namespace detail {

/// The cancellation state of a task spawned with a connected cancellation slot: what was emitted
/// so far, and the signal whose slot the operation awaited now is bound to. Shared by every
/// npurt::task the spawned one awaits, as an Asio awaitable thread shares its state.
struct task_cancel {
  boost::asio::cancellation_slot outer;   // the spawn's handler's slot
  boost::asio::cancellation_signal inner;  // forwards to the awaited operation
  boost::asio::cancellation_type cancelled = boost::asio::cancellation_type::none;

  /// What a spawned task honours: terminal and partial. A task that has run has had effects, so
  /// a "total" cancellation (nothing happened) cannot be honoured and is ignored.
  static constexpr boost::asio::cancellation_type honoured =
      boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial;

  struct forward {
    task_cancel* self;
    void operator()(boost::asio::cancellation_type t) const {
      if ((t & honoured) == boost::asio::cancellation_type::none) return;
      self->cancelled = self->cancelled | t;
      self->inner.emit(t);
    }
  };
};

/// Binds an await to its task's cancellation, when the task was spawned with a connected slot.
/// False when the task was cancelled before this await (Asio's awaitables likewise throw at the
/// next await once cancelled): `ec` says so and nothing is initiated.
template <class P>
bool connect_cancel(std::coroutine_handle<P> h, std::error_code& ec, boost::asio::cancellation_slot& slot) {
  if constexpr (requires { h.promise().cancel; }) {
    if (task_cancel* c = h.promise().cancel) [[unlikely]] {
      if (c->cancelled != boost::asio::cancellation_type::none) {
        ec = make_error_code(errc::operation_aborted);
        return false;
      }
      slot = c->inner.slot();
    }
  }
  return true;
}

template <class Initiation, class... Args>
class direct_awaiter {
 public:
  template <class I, class... A>
  explicit direct_awaiter(I&& init, A&&... args) : init_(std::forward<I>(init)), args_(std::forward<A>(args)...) {}

  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) {
    if (!connect_cancel(h, op_.ec, op_.slot)) return false;
    op_.waiting = h;
    std::apply([&](auto&&... a) { std::move(init_)(direct_handler{&op_}, std::move(a)...); }, std::move(args_));
    return !op_.early;
  }
  void await_resume() const {
    if (!op_.ec) [[likely]]
      return;  // before any category test: comparing categories is an out-of-line call
    if (op_.thrown) std::rethrow_exception(op_.thrown);
    if (is_timeout(op_.ec))
      throw timeout_error(op_.ec,
                          op_.timeout_limit > 0
                              ? "npurt: awaited operation" + timeout_detail(op_.timer, op_.timeout_limit)
                              : std::string("npurt: awaited operation"),
                          op_.timer, op_.timeout_limit);
    if (op_.ec == errc::operation_aborted) throw_error(op_.ec, "npurt: awaited operation aborted or cancelled");
    if (op_.ec) throw_error(op_.ec, "npurt: awaited operation failed");
  }

 private:
  Initiation init_;
  std::tuple<Args...> args_;
  direct_op op_;
};

/// Where a value-carrying completion (`void(async_error_code, T)`, e.g. async_malloc's pointer)
/// leaves its result for the awaiting task. Such operations complete through the runtime's
/// ordinary handler path (a post, never inside the initiating call), so the handler only stores
/// and resumes.
template <class T>
struct value_await_state {
  std::coroutine_handle<> waiting;
  std::error_code ec;
  std::optional<T> value;
  boost::asio::cancellation_slot slot;
  bool initiating = false;
  bool early = false;  // completed inside the initiating call: the await does not suspend
  std::exception_ptr thrown;  // see detail::thrown_slot
};

template <class T>
struct value_handler {
  value_await_state<T>* st;

  using cancellation_slot_type = boost::asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return st->slot; }

  void operator()(const async_error_code& e, T v) const {
    st->ec = e ? std::error_code(e) : std::error_code{};
    st->value.emplace(std::move(v));
    if (st->initiating) {
      st->early = true;
      return;
    }
    st->waiting.resume();
  }
};

template <class T>
std::exception_ptr* thrown_slot(value_handler<T>& h) noexcept {
  return &h.st->thrown;
}

/// Called during the initiation, the handler only stores (see detail::complete_at_call).
template <class T>
bool complete_at_call(value_handler<T>& h, std::error_code ec) {
  h(to_async_error(ec), T{});
  return true;
}

template <class T, class Initiation, class... Args>
class value_awaiter {
 public:
  template <class I, class... A>
  explicit value_awaiter(I&& init, A&&... args) : init_(std::forward<I>(init)), args_(std::forward<A>(args)...) {}

  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) {
    if (!connect_cancel(h, st_.ec, st_.slot)) return false;
    st_.waiting = h;
    // An initiation that throws leaves through the co_await; this state is not read again.
    st_.initiating = true;
    std::apply([&](auto&&... a) { std::move(init_)(value_handler<T>{&st_}, std::move(a)...); }, std::move(args_));
    st_.initiating = false;
    return !st_.early;
  }
  T await_resume() {
    if (st_.ec) [[unlikely]] {
      if (st_.thrown) std::rethrow_exception(st_.thrown);
      if (is_timeout(st_.ec)) throw timeout_error(st_.ec, "npurt: awaited operation");
      if (st_.ec == errc::operation_aborted) throw_error(st_.ec, "npurt: awaited operation aborted or cancelled");
      throw_error(st_.ec, "npurt: awaited operation failed");
    }
    return std::move(*st_.value);
  }

 private:
  Initiation init_;
  std::tuple<Args...> args_;
  value_await_state<T> st_;
};

template <class T>
struct task_promise_base {
  std::coroutine_handle<> continuation;
  std::exception_ptr error;
  task_cancel* cancel = nullptr;  // the spawn's, when it was given a cancellation slot
  // One awaiter per task: a second one would resume a frame suspended in an operation (or take
  // a value already moved out), so it is refused instead.
  bool started = false;
  bool taken = false;
  // Its task object was destroyed while it was suspended in an operation: the frame finishes on
  // its own and destroys itself (see task::drop).
  bool orphaned = false;
  // The runtime of the spawn at the root of its await chain (null when an awaiter of another
  // kind started it): an orphaned frame is held there, so a system that dies before the frame
  // ends destroys it rather than leaking it.
  runtime* rt = nullptr;
  std::uint64_t frame_id = 0;  // non-zero while the runtime holds the orphaned frame

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      // Symmetric transfer to whoever awaited this task: no stack growth along chains.
      const std::coroutine_handle<> c = h.promise().continuation;
      if (h.promise().orphaned) {  // nobody holds it: suspended here, it may go
        if (h.promise().frame_id) h.promise().rt->release_frame(h.promise().frame_id);
        h.destroy();
      }
      return c ? c : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T>
struct task_promise : task_promise_base<T> {
  std::optional<T> value;
  npurt::task<T> get_return_object() noexcept;
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (this->error) std::rethrow_exception(this->error);
    return std::move(*value);
  }
};

template <>
struct task_promise<void> : task_promise_base<void> {
  npurt::task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

/// The frame that runs a spawned task to its end and reports how it ended. The runtime holds it
/// until it ends: a system destroyed first destroys it, and with it the task it awaits.
struct spawned {
  struct promise_type {
    task_cancel* cancel = nullptr;  // read by the task it awaits
    runtime* rt = nullptr;          // set once the runtime holds the frame
    std::uint64_t frame_id = 0;
    spawned get_return_object() noexcept { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // Only the completion handler can throw here: out of system::run(), to the program.
    void unhandled_exception() { throw; }
    /// The start at the spawn's instant (a due-now action of the loop).
    void start(promise_type*) { std::coroutine_handle<promise_type>::from_promise(*this).resume(); }
    ~promise_type() {
      if (rt) rt->release_frame(frame_id);
    }
  };
  std::coroutine_handle<promise_type> h;
};

/// The handler is type-erased: a coroutine frame that held a caller's lambda type would have no
/// linkage when the caller is a function with internal linkage (GCC's -Wsubobject-linkage).
template <class T>
spawned drive(runtime& rt, npurt::task<T> t, std::function<void(std::exception_ptr)> h,
              std::unique_ptr<task_cancel> cancel) {
  // A frame destroyed with its system leaves no handler in the slot either.
  struct disconnect {
    task_cancel* c;
    ~disconnect() {
      if (c) c->outer.clear();
    }
  } slot_guard{cancel.get()};
  std::exception_ptr e;
  try {
    co_await std::move(t);
  } catch (...) { e = std::current_exception(); }
  // The task has ended: a later emit must find no handler (the slot may be reused from h).
  if (cancel) cancel->outer.clear();
  slot_guard.c = nullptr;
  rt.host_wait_end();
  h(e);  // what it throws leaves through system::run() (spawned::promise_type rethrows it)
}

}  // namespace detail

/// A lazily started coroutine of npurt's own: starts when awaited (by another task) or spawned,
/// once: a second co_await throws caller_error(errc::invalid_argument), as does awaiting an
/// empty task (spawn refuses one at the call). Move-only. Destroying a task destroys its frame,
/// except while the frame is suspended in an operation (the task was moved away from its
/// awaiter): the frame then runs to its end and destroys itself (or dies with its system, if that
/// comes first), and its awaiter's co_await throws as for an empty task.
template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle_type h) noexcept : h_(h) {}
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      drop();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() { drop(); }

  /// Default-constructed or moved-from: nothing to await or spawn.
  [[nodiscard]] bool empty() const noexcept { return !h_; }

  /// A task is awaited once. An empty task (default-constructed or moved-from), one that another
  /// await or spawn started, and one whose result was taken do not suspend: the co_await throws
  /// caller_error(errc::invalid_argument).
  bool await_ready() const noexcept { return !h_ || h_.promise().started; }
  template <class P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> c) noexcept {
    // An awaited task is cancelled with its awaiter.
    if constexpr (requires { c.promise().cancel; }) h_.promise().cancel = c.promise().cancel;
    if constexpr (requires { c.promise().rt; }) h_.promise().rt = c.promise().rt;
    h_.promise().started = true;
    h_.promise().continuation = c;
    return h_;
  }
  T await_resume() {
    if (!h_) [[unlikely]]
      throw_error(make_error_code(errc::invalid_argument),
                  "npurt::task: co_await of an empty task (default-constructed or moved-from)");
    promise_type& p = h_.promise();
    if (!h_.done()) [[unlikely]]
      throw_error(make_error_code(errc::invalid_argument),
                  "npurt::task: co_await of a task that another co_await or spawn is running");
    if (p.taken) [[unlikely]]
      throw_error(make_error_code(errc::invalid_argument),
                  "npurt::task: co_await of a task whose result was already taken (a task is awaited once)");
    p.taken = true;
    return p.take();
  }

 private:
  // A frame suspended in an operation is pointed at by the runtime, and resumed by it: destroying
  // it would leave that pointer dangling (a task object moved away from its awaiter, then
  // destroyed). Such a frame is orphaned instead: it runs to its end and destroys itself there.
  // Only a dying system destroys suspended frames, after taking its own pointers back: the
  // runtime holds an orphaned frame until it ends, as it holds spawned ones.
  void drop() noexcept {
    if (!h_) return;
    promise_type& p = h_.promise();
    if (p.started && !h_.done() && detail::runtime::frame_teardown == 0) {
      p.orphaned = true;
      if (p.rt) {
        try {
          p.frame_id = p.rt->adopt_frame(h_.address());
        } catch (...) {  // out of memory: the frame still ends on its own, only a dying system misses it
        }
      }
    } else {
      h_.destroy();
    }
    h_ = {};
  }
  handle_type h_;
};

template <class T>
npurt::task<T> detail::task_promise<T>::get_return_object() noexcept {
  return npurt::task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}
inline npurt::task<void> detail::task_promise<void>::get_return_object() noexcept {
  return npurt::task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}

namespace detail {
template <class R>
inline constexpr bool is_task_v = false;
template <class T>
inline constexpr bool is_task_v<npurt::task<T>> = true;

/// The task spawn() runs for a callable: it awaits `t`, the task of `*keep`'s call, and holds
/// `keep` (the callable, on the heap at a fixed address) until `t` has ended. A lambda coroutine
/// refers to its captures through the lambda object; called as a temporary (`spawn(sys, [&] ->
/// task<void> {...}())`) that object dies at the end of the call's full-expression while the
/// coroutine still reads through it. (Type-erased: a frame with a field of a lambda's type makes
/// GCC warn, -Wsubobject-linkage.)
template <class T>
npurt::task<T> await_keeping([[maybe_unused]] std::shared_ptr<void> keep, npurt::task<T> t) {
  co_return co_await std::move(t);
}
}  // namespace detail

/// Runs `t` on `sys`, starting at the current instant (never inside this call), and calls
/// done(exception_ptr) when it ends: null, or what escaped the task. system::run() runs until
/// it has ended. An empty task throws caller_error(errc::invalid_argument) here, and done is
/// never called.
///
/// Cancellation, as with asio::co_spawn: bind a slot to `done`
/// (`asio::bind_cancellation_slot(sig.slot(), done)`). A terminal or partial emit ends the
/// operation the task awaits at that moment, as that operation honours it, and every later
/// co_await in the task throws caller_error(errc::operation_aborted) without starting anything.
template <class T, class Done>
void spawn(system& sys, task<T> t, Done done) {
  // Refused at the call: the handler would only learn of the mistake once the loop ran, far from
  // the code that made it.
  if (t.empty()) [[unlikely]]
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::spawn: the task is empty (default-constructed or moved-from); nothing was spawned");
  detail::runtime& rt = detail::runtime_of(sys);
  std::unique_ptr<detail::task_cancel> cancel;
  if (auto slot = boost::asio::get_associated_cancellation_slot(done); slot.is_connected()) [[unlikely]] {
    cancel = std::make_unique<detail::task_cancel>();
    cancel->outer = slot;
    slot.template emplace<detail::task_cancel::forward>(cancel.get());
  }
  detail::task_cancel* c = cancel.get();
  detail::spawned d =
      detail::drive(rt, std::move(t), std::function<void(std::exception_ptr)>(std::move(done)), std::move(cancel));
  auto& p = d.h.promise();
  p.cancel = c;
  try {
    p.frame_id = rt.adopt_frame(d.h.address());
  } catch (...) {
    d.h.destroy();
    throw;
  }
  p.rt = &rt;
  rt.host_wait_begin();  // the task counts as a waiter until it ends
  rt.timers().call_at(rt.now(), detail::timer_action::member<&detail::spawned::promise_type::start>(&p, &p));
}

/// spawn() whose escaping exception is rethrown from system::run().
template <class T>
void spawn(system& sys, task<T> t) {
  spawn(sys, std::move(t), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
}

/// spawn() of a function object that returns a task, as asio::co_spawn takes one: `f` is kept
/// (moved) in the spawned frame until the task `f()` returns has ended, so a lambda coroutine's
/// captures stay alive: `npurt::spawn(sys, [&, n = 3]() -> npurt::task<void> { ... }, done)`.
template <class F, class Done>
  requires(detail::is_task_v<std::invoke_result_t<F&>>)
void spawn(system& sys, F f, Done done) {
  auto keep = std::make_shared<F>(std::move(f));
  auto t = (*keep)();
  spawn(sys, detail::await_keeping(std::move(keep), std::move(t)), std::move(done));
}

/// spawn(sys, f, done) whose escaping exception is rethrown from system::run().
template <class F>
  requires(detail::is_task_v<std::invoke_result_t<F&>>)
void spawn(system& sys, F f) {
  auto keep = std::make_shared<F>(std::move(f));
  auto t = (*keep)();
  spawn(sys, detail::await_keeping(std::move(keep), std::move(t)));
}

}  // namespace npurt

template <>
class boost::asio::async_result<npurt::use_task_t, void(npurt::async_error_code)> {
 public:
  template <class Initiation, class... Args>
  static auto initiate(Initiation&& init, npurt::use_task_t, Args&&... args) {
    return npurt::detail::direct_awaiter<std::decay_t<Initiation>, std::decay_t<Args>...>(
        std::forward<Initiation>(init), std::forward<Args>(args)...);
  }
};

/// `T v = co_await op(..., npurt::use_task)` for operations that complete with a value after the
/// error (async_malloc's pointer, a session's run_result); a failure is thrown as for launches.
template <class T>
class boost::asio::async_result<npurt::use_task_t, void(npurt::async_error_code, T)> {
 public:
  template <class Initiation, class... Args>
  static auto initiate(Initiation&& init, npurt::use_task_t, Args&&... args) {
    return npurt::detail::value_awaiter<T, std::decay_t<Initiation>, std::decay_t<Args>...>(
        std::forward<Initiation>(init), std::forward<Args>(args)...);
  }
};
