// A minimal backend_host for driving the simulator without the runtime: a timed-callback heap
// ordered by (time, call order), host memory as device memory, and a record of completions.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/observer.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <vector>

namespace npurt::sim::test {

class fake_host final : public backend_host {
 public:
  struct completion {
    std::uint64_t id;
    sim_time start, end;
    std::error_code ec;
  };

  [[nodiscard]] sim_time now() const noexcept override { return now_; }
  void call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) override {
    heap_.push(timed{at < now_ ? now_ : at, seq_++, fn, ctx, arg});
  }
  void complete(task_info& t, std::error_code ec = {}) override {
    done.push_back({t.id, t.start, t.end, ec});
    if (on_complete) on_complete(t);
  }
  [[nodiscard]] observer* tracer() noexcept override { return tracer_; }
  std::byte* translate(device_id, const void* addr, std::size_t) noexcept override {
    return static_cast<std::byte*>(const_cast<void*>(addr));
  }

  void set_tracer(observer* o) { tracer_ = o; }
  /// Runs timed callbacks until none is left.
  void run() {
    while (!heap_.empty()) {
      timed t = heap_.top();
      heap_.pop();
      now_ = t.at;
      t.fn(t.ctx, t.arg);
    }
  }
  /// Advances to `t` running everything before it.
  void run_until(sim_time t) {
    while (!heap_.empty() && heap_.top().at <= t) {
      timed x = heap_.top();
      heap_.pop();
      now_ = x.at;
      x.fn(x.ctx, x.arg);
    }
    if (now_ < t) now_ = t;
  }
  [[nodiscard]] const completion* find(std::uint64_t id) const {
    for (const auto& c : done)
      if (c.id == id) return &c;
    return nullptr;
  }

  std::vector<completion> done;
  std::function<void(task_info&)> on_complete;

 private:
  struct timed {
    sim_time at;
    std::uint64_t seq;
    void (*fn)(void*, std::uint64_t);
    void* ctx;
    std::uint64_t arg;
    bool operator>(const timed& o) const noexcept { return at != o.at ? at > o.at : seq > o.seq; }
  };
  sim_time now_{};
  std::uint64_t seq_ = 0;
  std::priority_queue<timed, std::vector<timed>, std::greater<>> heap_;
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
