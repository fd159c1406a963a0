// A minimal backend_host for driving the simulator without the runtime: host memory as device
// memory and a record of completions. Its clock is the runtime's own timer_queue, run as
// npurt::system runs it (actions due at once before the next timed one, a requested flush at the
// end of each instant), so a device-model test sees the order the simulator sees in production.
// `unbuffered` gives a host without flush(), the fallback a backend must keep for such hosts.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/detail/timer_queue.hpp>
#include <npurt/observer.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace npurt::sim::test {

class fake_host final : public backend_host {
 public:
  struct completion {
    std::uint64_t id;
    sim_time start, end;
    std::error_code ec;
  };
  struct unbuffered_t {};
  static constexpr unbuffered_t unbuffered{};

  /// A host that calls flush() of the backend that attaches to it (through flush_into).
  fake_host() = default;
  /// A host that never calls flush(): the backend must decide at once.
  explicit fake_host(unbuffered_t) : flushes_(false) {}

  /// The backend whose flush() ends each instant; set before backend::attach, which asks
  /// calls_flush().
  void flush_into(backend& b) noexcept { target_ = &b; }

  [[nodiscard]] sim_time now() const noexcept override { return clock_.now(); }
  void call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) override {
    clock_.call_at(at, detail::timer_action::plain(fn, ctx, arg));
  }
  std::uint64_t call_at_cancellable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                    std::uint64_t arg) override {
    return clock_.call_at_cancellable(at, detail::timer_action::plain(fn, ctx, arg));
  }
  void cancel_timer(std::uint64_t ticket) override { clock_.cancel(ticket); }
  std::uint64_t call_at_revocable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                  std::uint64_t arg) override {
    return clock_.call_at_revocable(at, detail::timer_action::plain(fn, ctx, arg));
  }
  void revoke_timer(std::uint64_t ticket) override { clock_.revoke(ticket); }
  [[nodiscard]] bool calls_flush() const noexcept override { return flushes_ && target_; }
  void request_flush() noexcept override { flush_pending_ = true; }
  void complete(task_info& t, std::error_code ec = {}) override {
    done.push_back({t.id, t.start, t.end, ec});
    if (on_complete) on_complete(t);
  }
  [[nodiscard]] observer* tracer() noexcept override { return tracer_; }
  std::byte* translate(device_id, const void* addr, std::size_t) noexcept override {
    return static_cast<std::byte*>(const_cast<void*>(addr));
  }

  void set_tracer(observer* o) { tracer_ = o; }
  /// Runs until nothing is left, in the system's order.
  void run() {
    for (;;) {
      settle();
      if (!clock_.advance()) break;
    }
  }
  /// Ends this instant without moving the clock: what is due at once, then the requested flush
  /// (a task submitted after it arrives at a backend that has already dispatched).
  void settle() {
    for (;;) {
      if (clock_.run_due()) continue;
      if (flush_pending_ && !clock_.timed_due_now()) {
        flush_pending_ = false;
        if (calls_flush()) target_->flush();
        continue;
      }
      return;
    }
  }
  [[nodiscard]] const completion* find(std::uint64_t id) const {
    for (const auto& c : done)
      if (c.id == id) return &c;
    return nullptr;
  }

  std::vector<completion> done;
  std::function<void(task_info&)> on_complete;

 private:
  detail::timer_queue clock_;
  bool flushes_ = true;
  bool flush_pending_ = false;
  backend* target_ = nullptr;
  observer* tracer_ = nullptr;
};

/// Task records with stable addresses and increasing ids.
class task_factory {
 public:
  task_info& kernel(const kernel_desc& k, std::uint8_t priority = 4, device_id dev = 0) {
    task_info& t = make(priority, dev);
    t.kind = task_kind::kernel;
    t.engine = engine_kind::ai_core;
    if (std::holds_alternative<kernels::fixed>(k.op)) {
      t.fixed = std::get<kernels::fixed>(k.op);
    } else {
      t.kernel = &k;
    }
    t.block_dim = k.block_dim;
    t.name = k.display_name();
    return t;
  }
  task_info& copy(engine_kind e, std::size_t bytes, device_id src, device_id dst, device_id dev = 0) {
    task_info& t = make(4, dev);
    t.kind = task_kind::memcpy;
    t.engine = e;
    t.copy.bytes = bytes;
    t.copy.src_device = src;
    t.copy.dst_device = dst;
    t.copy.kind = src < 0 ? (dst < 0 ? memcpy_kind::host_to_host : memcpy_kind::host_to_device)
                          : (dst < 0 ? memcpy_kind::device_to_host : memcpy_kind::device_to_device);
    return t;
  }

 private:
  task_info& make(std::uint8_t priority, device_id dev) {
    tasks_.emplace_back();
    task_info& t = tasks_.back();
    t.id = ++next_;
    t.priority = priority;
    t.device = dev;
    return t;
  }
  std::deque<task_info> tasks_;
  std::uint64_t next_ = 0;
};

}  // namespace npurt::sim::test
