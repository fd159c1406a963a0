// npurt/detail/timer_queue.hpp — the virtual clock and the actions due on it.
//
// Owns one invariant: the clock only moves forward, to the earliest pending action, and actions
// due at one time run in the order they were scheduled (a stable sequence number), never in
// thread order. An action is a typed callback: a member function of an object, with one pointer
// or one integer argument, bound at compile time, so no pointer travels as an integer.
#pragma once

#include <npurt/config.hpp>
#include <npurt/time.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_set>
#include <vector>

namespace npurt::detail {

/// A deferred call: run(a) calls what it was made from.
struct timer_action {
  void (*run)(const timer_action&) = nullptr;
  void* obj = nullptr;
  void* ptr = nullptr;                          // typed pointer argument (member form)
  std::uint64_t arg = 0;                        // integer argument (member and raw forms)
  void (*raw)(void*, std::uint64_t) = nullptr;  // the backend interface's plain callback

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

  /// Runs `a` when the clock reaches `at`; at or before now means at this instant.
  void call_at(sim_time at, const timer_action& a) {
    if (at <= now_) due_.push_back({now_, order_++, a});
    else timers_.push({at, order_++, a});
  }
  /// call_at that can be taken back: a cancelled action never runs and never moves the clock.
  std::uint64_t call_at_cancellable(sim_time at, const timer_action& a) {
    const std::uint64_t ticket = order_;
    timers_.push({std::max(at, now_), order_++, a});
    return ticket;
  }
  void cancel(std::uint64_t ticket) { cancelled_.insert(ticket); }

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
  /// Whether a timed action (cancellable ones included) is due at this instant.
  [[nodiscard]] bool timed_due_now() {
    drop_cancelled();
    return !timers_.empty() && timers_.top().at <= now_;
  }
  /// Moves the clock to the earliest timed action and runs it. False when none is pending.
  bool advance() {
    drop_cancelled();
    if (timers_.empty()) return false;
    const entry e = timers_.top();
    timers_.pop();
    now_ = e.at;
    e.a.run(e.a);
    return true;
  }

 private:
  struct entry {
    sim_time at;
    std::uint64_t order;
    timer_action a;
    friend bool operator>(const entry& x, const entry& y) noexcept {
      return x.at != y.at ? x.at > y.at : x.order > y.order;
    }
  };
  void drop_cancelled() {
    while (!timers_.empty() && !cancelled_.empty() && cancelled_.erase(timers_.top().order) != 0) timers_.pop();
  }

  sim_time now_{};
  std::uint64_t order_ = 0;
  std::priority_queue<entry, std::vector<entry>, std::greater<>> timers_;
  std::unordered_set<std::uint64_t> cancelled_;
  std::vector<entry> due_;  // actions due at now_, in call order
  std::size_t head_ = 0;
};

}  // namespace npurt::detail
