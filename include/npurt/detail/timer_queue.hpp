// npurt/detail/timer_queue.hpp — the virtual clock and the actions due on it.
//
// Owns one invariant: the clock only moves forward, to the earliest pending action, and the
// order within an instant is fixed by call order (a stable sequence number), never by thread
// order. Two lists hold it: timed actions, queued for a time and run one at a time in (time,
// call order), and actions due at once (scheduled for now), run in call order. The loop runs
// every action due at once before the next timed one, so an action scheduled for now runs
// before timed actions queued earlier for this same instant (backend_host::call_at documents
// this for backends). An action is a typed callback: a member function of an object, with one
// pointer or one integer argument, bound at compile time, so no pointer travels as an integer.
#pragma once

#include <npurt/config.hpp>
#include <npurt/time.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

namespace npurt::detail {

/// A deferred call: run(a) calls what it was made from.
struct timer_action {
  void (*run)(const timer_action&) = nullptr;
  void* obj = nullptr;
  // A form uses either a typed pointer argument or a plain callback, never both: sharing one
  // word keeps a pending timer at six words, which the heap moves on every push and pop.
  union {
    void* ptr = nullptr;                // typed pointer argument (member form)
    void (*raw)(void*, std::uint64_t);  // the backend interface's plain callback (plain form)
  };
  std::uint64_t arg = 0;  // integer argument (member_value and plain forms)

  /// (obj->*Fn)(p) for a member function taking a pointer.
  template <auto Fn, class Obj, class Arg>
  static timer_action member(Obj* obj, Arg* p) noexcept {
    timer_action a;
    a.run = [](const timer_action& x) { (static_cast<Obj*>(x.obj)->*Fn)(static_cast<Arg*>(x.ptr)); };
    a.obj = obj;
    a.ptr = p;
    return a;
  }
  /// (obj->*Fn)(v) for a member function taking an integer.
  template <auto Fn, class Obj>
  static timer_action member_value(Obj* obj, std::uint64_t v) noexcept {
    timer_action a;
    a.run = [](const timer_action& x) { (static_cast<Obj*>(x.obj)->*Fn)(x.arg); };
    a.obj = obj;
    a.arg = v;
    return a;
  }
  /// fn(ctx, arg), as backend_host::call_at takes it.
  static timer_action plain(void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) noexcept {
    timer_action a;
    a.run = [](const timer_action& x) { x.raw(x.obj, x.arg); };
    a.obj = ctx;
    a.arg = arg;
    a.raw = fn;
    return a;
  }
  /// Does nothing: a deadline that only stops the clock.
  static timer_action nothing() noexcept {
    timer_action a;
    a.run = [](const timer_action&) {};
    return a;
  }
};

class timer_queue {
 public:
  [[nodiscard]] sim_time now() const noexcept { return now_; }

  /// Runs `a` when the clock reaches `at`; at or before now means due at once: it runs with
  /// run_due(), before the timed actions of this instant that advance() has not run yet.
  void call_at(sim_time at, const timer_action& a) {
    if (at <= now_) due_.push_back({now_, order_++, a});
    else push({at, order_++, a});
  }
  /// call_at that can be taken back: a cancelled action never runs and never moves the clock.
  /// Always timed, even at or before now: it runs after what is due at once and after the
  /// timed actions queued earlier for this instant.
  std::uint64_t call_at_cancellable(sim_time at, const timer_action& a) {
    const std::uint64_t ticket = order_;
    armed_.insert(ticket);
    push({std::max(at, now_), order_++, a});
    return ticket;
  }
  /// call_at for an action its caller may revoke (backend_host::call_at_revocable): the ticket,
  /// or 0 for an action due at this instant, which runs before anything could revoke it. No
  /// bookkeeping until a revoke: the caller knows whether the action is still pending.
  std::uint64_t call_at_revocable(sim_time at, const timer_action& a) {
    if (at <= now_) {
      due_.push_back({now_, order_++, a});
      return 0;
    }
    push({at, order_++, a});
    return order_;  // order + 1: never 0
  }
  /// Takes back a pending action of call_at_revocable (never one that ran).
  void revoke(std::uint64_t ticket) {
    if (ticket != 0) cancelled_.insert(ticket - 1);
  }
  /// Takes back an action of call_at_cancellable; one that already ran (a timed wait's
  /// deadline that was reached) or was cancelled is left alone.
  void cancel(std::uint64_t ticket) {
    // Only a pending ticket joins cancelled_: a fired one would stay there for good, and every
    // later advance would take the slow path for it.
    if (armed_.erase(ticket) != 0) cancelled_.insert(ticket);
  }
  /// Cancelled actions not yet dropped from the queue (for tests: it never exceeds the number
  /// of pending cancellable actions).
  [[nodiscard]] std::size_t cancelled_pending() const noexcept { return cancelled_.size(); }

  /// Runs every action due at this instant, including those they schedule for it, in call
  /// order. False when there was none.
  bool run_due() {
    if (head_ == due_.size()) return false;
    while (head_ < due_.size()) {
      const entry e = due_[head_++];
      e.a.run(e.a);
    }
    due_.clear();
    head_ = 0;
    return true;
  }
  /// Whether an action is queued to run at this instant (not yet run).
  [[nodiscard]] bool has_due() const noexcept { return head_ != due_.size(); }
  /// Whether a timed action (cancellable ones included) is due at this instant.
  [[nodiscard]] bool timed_due_now() {
    drop_cancelled();
    return !timers_.empty() && timers_.front().at <= now_;
  }
  /// Moves the clock to the earliest timed action and runs it. False when none is pending.
  bool advance() {
    drop_cancelled();
    if (timers_.empty()) return false;
    const entry e = pop();
    if (!armed_.empty()) [[unlikely]]
      armed_.erase(e.order);  // fired: a later cancel has nothing to take back
    now_ = e.at;
    e.a.run(e.a);
    return true;
  }

 private:
  struct entry {
    sim_time at;
    std::uint64_t order;
    timer_action a;
  };
  // (time, order) is unique, so any correct min-heap pops the same sequence. This one moves a
  // hole instead of swapping (one store per level, no temporaries), which std::push_heap and
  // std::pop_heap do not manage for a six-word entry.
  static bool before(const entry& x, const entry& y) noexcept { return x.at != y.at ? x.at < y.at : x.order < y.order; }
  // Forced inline: called from call_at and call_at_revocable, it would otherwise become a call on
  // every timed action.
  [[gnu::always_inline]] void push(const entry& e) {
    timers_.emplace_back();
    std::size_t i = timers_.size() - 1;
    entry* h = timers_.data();
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(e, h[parent])) break;
      h[i] = h[parent];
      i = parent;
    }
    h[i] = e;
  }
  entry pop() {
    const entry top = timers_.front();
    const entry last = timers_.back();
    timers_.pop_back();
    const std::size_t n = timers_.size();
    if (n != 0) {
      entry* h = timers_.data();
      std::size_t i = 0;
      for (;;) {
        std::size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(h[c + 1], h[c])) ++c;
        if (!before(h[c], last)) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
  // Cancellations are rare (timed host waits): the common case is one test, inline.
  void drop_cancelled() {
    if (!cancelled_.empty()) [[unlikely]]
      drop_cancelled_slow();
  }
  [[gnu::noinline]] void drop_cancelled_slow() {
    while (!timers_.empty() && !cancelled_.empty() && cancelled_.erase(timers_.front().order) != 0) (void)pop();
  }

  sim_time now_{};
  std::uint64_t order_ = 0;
  std::vector<entry> timers_;  // a binary min-heap by (at, order)
  std::unordered_set<std::uint64_t> armed_;      // cancellable actions not yet run or cancelled
  std::unordered_set<std::uint64_t> cancelled_;  // cancelled, still in timers_
  std::vector<entry> due_;  // actions due at now_, in call order
  std::size_t head_ = 0;
};

}  // namespace npurt::detail
