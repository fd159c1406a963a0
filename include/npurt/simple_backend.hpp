// npurt/simple_backend.hpp — the reference backend: serial engines with closed-form costs.
//
// Each device has one queue per engine; a task waits for its engine in (priority, task id)
// order and then takes exactly its cost: kernels::fixed kernels their duration plus a launch
// latency, copies latency + bytes / bandwidth of their link. It runs only kernels::fixed kernels.
// Dispatch decisions wait for the end of the instant (backend::flush), so a task ready at t
// never loses its engine to a lower-priority one that became ready at the same t.
// It exists so that the scheduling layer can be tested against arithmetic a reader can check,
// and as the smallest example of a backend; the simulator (npurt/sim) is the real device layer.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/observer.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <queue>
#include <vector>

namespace npurt {

struct simple_config {
  std::size_t devices = 1;
  device_properties properties = default_properties();
  picoseconds kernel_launch_latency{0};
  /// Host-to-host copies (memcpy on the host), bytes per second.
  double host_copy_bandwidth = 20e9;
  bool functional = true;

  static device_properties default_properties() {
    device_properties p;
    p.name = "simple";
    p.soc = "simple";
    p.ai_core_count = 32;
    p.vector_core_count = 32;
    p.clock_hz = 1e9;
    p.memory_bytes = std::size_t{1} << 30;
    p.hbm_bandwidth = 1.2e12;
    p.host_link_bandwidth = 25e9;
    p.host_link_latency = picoseconds{1'000'000};
    p.peer_link_bandwidth = 30e9;
    p.peer_link_latency = picoseconds{2'000'000};
    return p;
  }
};

class simple_backend final : public backend {
 public:
  /// Throws caller_error (errc::invalid_config) naming the field for a negative latency, a
  /// bandwidth or clock that is not a positive finite number, or more devices than a system holds.
  explicit simple_backend(simple_config cfg) : cfg_(checked(std::move(cfg))), engines_(cfg_.devices * engine_count) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "simple"; }
  [[nodiscard]] std::size_t device_count() const noexcept override { return cfg_.devices; }
  [[nodiscard]] const device_properties& properties(device_id) const override { return cfg_.properties; }
  void attach(backend_host& host) override { host_ = &host; }
  [[nodiscard]] bool functional() const noexcept override { return cfg_.functional; }

  [[nodiscard]] std::error_code validate(device_id, const kernel_desc& k) const override {
    if (!std::holds_alternative<kernels::fixed>(k.op)) return make_error_code(errc::not_supported);
    return validate_fixed(0, k.block_dim);
  }

  /// The exact cost this backend gives a task once it holds its engine.
  [[nodiscard]] picoseconds cost(const task_info& t) const noexcept {
    const device_properties& p = cfg_.properties;
    auto transfer = [](std::size_t bytes, double bw, picoseconds lat) {
      return saturating_add(lat, saturating_ps(static_cast<long double>(bytes) / bw * 1e12L + 0.5L));
    };
    switch (t.kind) {
      case task_kind::kernel: return saturating_add(cfg_.kernel_launch_latency, t.fixed.duration);
      case task_kind::memset: return transfer(t.copy.bytes, p.hbm_bandwidth, picoseconds{0});
      case task_kind::memcpy:
        switch (t.engine) {
          case engine_kind::host: return transfer(t.copy.bytes, cfg_.host_copy_bandwidth, picoseconds{0});
          case engine_kind::copy_h2d:
          case engine_kind::copy_d2h: return transfer(t.copy.bytes, p.host_link_bandwidth, p.host_link_latency);
          default:
            if (t.copy.src_device != t.copy.dst_device)
              return transfer(t.copy.bytes, p.peer_link_bandwidth, p.peer_link_latency);
            return transfer(t.copy.bytes, p.hbm_bandwidth, picoseconds{0});
        }
      default: return picoseconds{0};
    }
  }

  [[nodiscard]] std::error_code validate_fixed(device_id, std::uint32_t block_dim) const override {
    if (block_dim > cfg_.properties.ai_core_count) return make_error_code(errc::invalid_argument);
    return {};
  }

  void submit(task_info& t) override {
    engine& e = engines_[static_cast<std::size_t>(t.device) * engine_count + static_cast<std::size_t>(t.engine)];
    e.ready.push(&t);
    if (!e.busy) idle(e);
  }

  /// End of an instant: idle engines start the best of what became ready during it.
  void flush() override {
    std::vector<engine*> list;
    list.swap(to_dispatch_);
    for (engine* e : list) {
      e->queued = false;
      if (!e->busy) dispatch(*e);
    }
  }

  /// Ends one task (stream::abort): a running one frees its engine for the next in line, a
  /// queued one leaves the line.
  bool cancel(task_info& t) override {
    const auto dev = static_cast<std::size_t>(t.device);
    if (t.kind == task_kind::collective || t.device < 0 || dev * engine_count >= engines_.size()) return false;
    engine& e = engines_[dev * engine_count + static_cast<std::size_t>(t.engine)];
    if (e.running == &t) {
      e.running = nullptr;
      e.busy = false;
      ++e.generation;  // its end timer finds nothing to finish
      if (!e.ready.empty()) idle(e);
      return true;
    }
    std::vector<task_info*> keep;
    bool found = false;
    for (; !e.ready.empty(); e.ready.pop()) {
      if (e.ready.top() == &t) found = true;
      else keep.push_back(e.ready.top());
    }
    for (task_info* x : keep) e.ready.push(x);
    return found;
  }

  void abort(device_id dev) override {
    for (std::size_t i = 0; i < engine_count; ++i) {
      engine& e = engines_[static_cast<std::size_t>(dev) * engine_count + i];
      e.ready = {};
      e.running = nullptr;
      e.busy = false;
      ++e.generation;  // the running task's end timer finds nothing to finish
    }
  }

 private:
  static constexpr std::size_t engine_count = 8;

  static simple_config checked(simple_config c) {
    const auto bad = [](const char* field) {
      throw_error(make_error_code(errc::invalid_config), std::string("npurt::simple_config: ") + field);
    };
    const auto rate = [](double x) { return x > 0 && x <= 1e30; };  // positive, finite, not absurd
    const device_properties& p = c.properties;
    if (c.devices == 0 || c.devices > 65536) bad("devices must be 1..65536");
    if (c.kernel_launch_latency.count() < 0) bad("kernel_launch_latency is negative");
    if (p.host_link_latency.count() < 0) bad("properties.host_link_latency is negative");
    if (p.peer_link_latency.count() < 0) bad("properties.peer_link_latency is negative");
    if (!rate(c.host_copy_bandwidth)) bad("host_copy_bandwidth must be a positive finite number");
    if (!rate(p.hbm_bandwidth)) bad("properties.hbm_bandwidth must be a positive finite number");
    if (!rate(p.host_link_bandwidth)) bad("properties.host_link_bandwidth must be a positive finite number");
    if (!rate(p.peer_link_bandwidth)) bad("properties.peer_link_bandwidth must be a positive finite number");
    if (!rate(p.clock_hz)) bad("properties.clock_hz must be a positive finite number");
    return c;
  }
  struct later {
    bool operator()(const task_info* a, const task_info* b) const noexcept {
      return a->priority != b->priority ? a->priority > b->priority : a->id > b->id;
    }
  };
  struct engine {
    std::priority_queue<task_info*, std::vector<task_info*>, later> ready;
    bool busy = false;
    bool queued = false;  // in to_dispatch_
    simple_backend* owner = nullptr;
    task_info* running = nullptr;
    std::uint64_t generation = 0;
    bool overflow = false;  // the running task fails with errc::time_overflow
  };

  // An engine with nothing running and tasks ready: start one now, or at the end of the instant
  // when the host says so, so that every task ready at this instant competes for it.
  void idle(engine& e) {
    if (!host_->calls_flush()) return dispatch(e);
    if (e.queued) return;
    e.queued = true;
    to_dispatch_.push_back(&e);
    host_->request_flush();
  }

  void dispatch(engine& e) {
    if (e.ready.empty()) return;
    task_info* t = e.ready.top();
    e.ready.pop();
    e.busy = true;
    e.running = t;
    e.owner = this;
    t->start = host_->now();
    t->end = npurt::later(t->start, cost(*t));
    // A task that would end past the end of virtual time fails at once instead of wrapping the
    // clock (the failure reaches the caller as any task's does).
    e.overflow = t->end == end_of_time;
    if (e.overflow) t->end = t->start;
    if (t->kind == task_kind::memcpy && t->copy.src_device != t->copy.dst_device && host_->tracer())
      host_->tracer()->on_link_transfer({t->engine == engine_kind::copy_d2d ? "hccs" : "pcie", t->copy.src_device,
                                         t->copy.dst_device, t->copy.bytes, t->start, t->end});
    host_->call_at(t->end, &simple_backend::finished, &e, e.generation);
  }

  static void finished(void* ctx, std::uint64_t generation) {
    auto& e = *static_cast<engine*>(ctx);
    if (generation != e.generation || !e.running) return;  // aborted by a device reset
    task_info* t = e.running;
    e.running = nullptr;
    e.busy = false;
    e.owner->host_->complete(*t, e.overflow ? make_error_code(errc::time_overflow) : std::error_code{});
    if (!e.ready.empty()) e.owner->idle(e);
  }

  simple_config cfg_;
  backend_host* host_ = nullptr;
  std::vector<engine> engines_;
  std::vector<engine*> to_dispatch_;
};

/// `npurt::system sys{npurt::simple_config{.devices = 2}};`
inline std::unique_ptr<backend> make_backend(const simple_config& cfg) { return std::make_unique<simple_backend>(cfg); }

}  // namespace npurt
