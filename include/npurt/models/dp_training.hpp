// npurt/models/dp_training.hpp — a data-parallel training loop that survives faults.
//
// Every rank holds a replica of a parameter vector. A step splits a global batch of `shards`
// data shards over the ranks (shard j on rank j mod ranks); each rank copies its shards to the
// device and sums them into a gradient (elementwise add kernels), the ranks all-reduce the
// gradients, and each applies SGD. Every `checkpoint_every` steps the parameters are
// checkpointed (npurt/checkpoint.hpp: kept serialized, and written to a file when a path is
// given). A failed step is handled by the recovery strategy (npurt/recovery.hpp): retries on the
// same devices, device restart, failover to a spare, or degrading to fewer ranks; every one of
// them resumes from the last checkpoint and replays the steps since, so the result is the
// result of a fault-free run, bit for bit (with integer-valued shards, the sums are exact in
// any order, so even a degraded run with another split matches).
//
// A blocking driver: call it outside system::run.
#pragma once

#include <npurt/checkpoint.hpp>
#include <npurt/collective.hpp>
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/observer.hpp>
#include <npurt/recovery.hpp>
#include <npurt/stream.hpp>
#include <npurt/system.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace npurt::models {

struct dp_training_options {
  std::vector<device_id> ranks;      // devices that train, rank order
  std::vector<device_id> spares;     // failover targets, used in order
  std::size_t params = 4096;         // f32 parameters
  std::uint32_t shards = 8;          // data shards per global batch
  std::uint32_t steps = 20;
  std::uint32_t checkpoint_every = 5;
  std::uint64_t data_seed = 1;
  float lr = 0.0625f;                // a power of two: updates stay exact
  recovery_strategy strategy{};
  std::filesystem::path checkpoint_path{};  // empty: checkpoints stay in memory
  /// Slow-device detector: a rank whose compute time in a step exceeds this multiple of the
  /// median of its peers' is reported (0 turns it off).
  double slow_factor = 1.5;
  /// Failed attempts after which the run aborts whatever the strategy says.
  std::uint32_t max_recoveries = 1000;
};

struct dp_slow_device {
  std::uint32_t step = 0;
  device_id device = 0;
  double ratio = 0;  // its compute time over the median of its peers'
  friend bool operator==(const dp_slow_device&, const dp_slow_device&) = default;
};

struct dp_training_report {
  std::vector<float> params;          // the final parameters (every replica holds them)
  std::uint32_t steps_done = 0;
  std::uint32_t failures = 0;         // failed step attempts
  std::uint32_t retries = 0, restarts = 0, failovers = 0, degrades = 0;
  std::uint32_t checkpoints = 0;
  std::uint32_t replayed_steps = 0;   // steps run again after resuming from a checkpoint
  std::vector<std::error_code> errors;  // the error each failed attempt was handled for
  std::vector<recovery_action> actions; // and the action taken
  std::vector<dp_slow_device> slow_devices;
  std::error_code fatal;              // set when the strategy said abort: the run stopped there
  std::vector<device_id> final_ranks;
  sim_time started{}, finished{};
};

namespace dp_detail {

inline std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Integer values in [-8, 8]: sums of a few of them are exact in f32 in any order.
inline std::vector<float> shard_data(std::uint64_t seed, std::uint64_t step, std::uint64_t shard, std::size_t n) {
  std::vector<float> v(n);
  const std::uint64_t base = mix(seed ^ mix(step * 0x10001ULL + shard + 1));
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(mix(base + i) % 17) - 8);
  return v;
}

/// Per device, the span of its gradient kernels in the current step (slow-device detector).
class compute_spans final : public observer {
 public:
  void on_task(const task_info& t) override {
    if (t.kind != task_kind::kernel || t.name != "grad_acc") return;
    auto [it, fresh] = spans.try_emplace(t.device, t.start, t.end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, t.start);
      it->second.second = std::max(it->second.second, t.end);
    }
  }
  std::map<device_id, std::pair<sim_time, sim_time>> spans;
};

struct rank_state {
  device_id dev = 0;
  stream s;
  void* param = nullptr;
  void* grad = nullptr;
};

class trainer {
 public:
  trainer(system& sys, const dp_training_options& o) : sys_(sys), o_(o), spares_(o.spares) {
    if (o.ranks.empty() || o.params == 0 || o.shards == 0 || o.checkpoint_every == 0)
      throw_error(make_error_code(errc::invalid_argument),
                  "train_data_parallel: ranks, params, shards and checkpoint_every must be non-zero");
    if (o.params > (std::size_t{1} << 28))
      throw_error(make_error_code(errc::size_overflow), "train_data_parallel: params exceeds 2^28");
    std::string why;
    if (const std::error_code ec = o.strategy.validate(&why)) throw_error(ec, "train_data_parallel: " + why);
    std::vector<device_id> all = o.ranks;
    all.insert(all.end(), o.spares.begin(), o.spares.end());
    for (device_id d : all) {
      std::error_code ec;
      (void)sys.find_device(d, ec);
      if (ec) throw_error(ec, "train_data_parallel: device " + std::to_string(d) + " does not exist");
    }
    std::sort(all.begin(), all.end());
    if (std::adjacent_find(all.begin(), all.end()) != all.end())
      throw_error(make_error_code(errc::invalid_argument), "train_data_parallel: a device is listed twice");
    sys.add_observer(spans_);
  }
  ~trainer() {
    // The ranks' buffers belong to this run: a second run on the same system must find the
    // devices' memory as the first one did.
    for (auto& r : ranks_) free_rank(r);
    sys_.remove_observer(spans_);
  }
  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  dp_training_report run() {
    report_.started = sys_.now();
    for (device_id d : o_.ranks) ranks_.push_back(make_rank(d));
    comm_ = communicator::init_all(sys_, devices());
    // The initial parameters are checkpoint 0: every replica starts from them.
    {
      checkpoint ck = create_checkpoint();
      ck.add_tensor("param", dtype::f32, {static_cast<std::int64_t>(o_.params)},
                    dp_detail::shard_data(o_.data_seed, ~0ULL, 0, o_.params));
      ck.set_metadata("step", std::int64_t{0});
      saved_ = ck.serialize();
    }
    std::uint32_t step = 0;
    {
      std::size_t bad = 0;
      std::uint32_t from = 0;
      if (const std::error_code ec = restore_all(from, bad))
        throw_error(ec, "train_data_parallel: the initial parameters could not be copied in");
    }
    std::uint32_t attempts = 0;
    bool short_watchdog = false;
    // Put back after a short retry watchdog: the one in force, which the caller may have set.
    const picoseconds watchdog = sys_.get_backend().op_execute_timeout();
    while (step < o_.steps) {
      std::size_t failed_rank = 0;
      bool dirty = false;
      const std::error_code ec = run_step(step, failed_rank, dirty);
      if (!ec) {
        if (short_watchdog) {
          (void)sys_.get_backend().set_op_execute_timeout(watchdog);
          short_watchdog = false;
        }
        detect_slow(step);
        attempts = 0;
        ++step;
        if (step % o_.checkpoint_every == 0 || step == o_.steps) {
          const std::error_code cec = take_checkpoint(step);
          if (cec) {
            // A failed checkpoint is a failed step: resume from the previous checkpoint.
            if (!recover(cec, 0, true, ++attempts, short_watchdog, step)) break;
          }
        }
        continue;
      }
      if (!recover(ec, failed_rank, dirty, ++attempts, short_watchdog, step)) break;
    }
    report_.steps_done = step;
    if (!report_.fatal) {
      std::vector<float> out(o_.params);
      std::error_code ec;
      ranks_[0].s.memcpy(out.data(), out.size() * sizeof(float), ranks_[0].param, out.size() * sizeof(float),
                         memcpy_kind::device_to_host, ec);
      if (!ec) ranks_[0].s.synchronize(no_timeout, ec);
      if (ec) report_.fatal = ec;
      else report_.params = std::move(out);
    }
    report_.final_ranks = devices();
    report_.finished = sys_.now();
    return std::move(report_);
  }

 private:
  std::vector<device_id> devices() const {
    std::vector<device_id> d;
    for (const auto& r : ranks_) d.push_back(r.dev);
    return d;
  }

  rank_state make_rank(device_id d) {
    rank_state r;
    r.dev = d;
    auto& dev = sys_.device(d);
    r.s = dev.make_stream();
    r.param = alloc(dev);
    r.grad = alloc(dev);
    return r;
  }

  /// A rank's buffer; a transient shortage is collected and retried (gc_and_retry) in place.
  void* alloc(device& dev) {
    std::error_code ec;
    for (std::uint32_t k = 0; k <= o_.strategy.max_retries; ++k) {
      void* p = dev.malloc(bytes(), ec);
      if (!ec) return p;
      if (ec != errc::out_of_memory) break;
      dev.mem_pool().empty_cache();
    }
    throw_error(ec, "train_data_parallel: buffers of device " + std::to_string(dev.id()));
  }

  void free_rank(rank_state& r) {
    std::error_code ec;
    auto& dev = sys_.device(r.dev);
    if (r.param) dev.free(r.param, ec);
    if (r.grad) dev.free(r.grad, ec);
    r.param = r.grad = nullptr;
  }

  [[nodiscard]] std::size_t bytes() const noexcept { return o_.params * sizeof(float); }

  tensor_desc desc(void* p) const { return tensor_desc{p, shape{static_cast<std::int64_t>(o_.params)}, dtype::f32}; }

  std::error_code run_step(std::uint32_t step, std::size_t& failed_rank, bool& dirty) {
    const std::size_t n = ranks_.size();
    std::vector<void*> x(n, nullptr);
    std::vector<std::vector<float>> host;
    spans_.spans.clear();
    auto release_x = [&] {
      for (std::size_t r = 0; r < n; ++r) {
        std::error_code fec;
        if (x[r]) sys_.device(ranks_[r].dev).free(x[r], fec);
      }
    };
    // Allocations first, for every rank: a refused one leaves nothing enqueued anywhere (a
    // collective with a missing rank would wait for it).
    for (std::size_t r = 0; r < n; ++r) {
      std::error_code ec;
      x[r] = sys_.device(ranks_[r].dev).malloc(bytes(), ec);
      if (ec) {
        failed_rank = r;
        release_x();
        return ec;
      }
    }
    dirty = true;
    std::size_t cur = 0;  // the rank being enqueued, for an error at the call
    try {
      for (std::size_t r = 0; r < n; ++r) {
        cur = r;
        rank_state& rk = ranks_[r];
        (void)rk.s.memset(rk.grad, bytes(), 0, bytes());
        for (std::uint32_t j = static_cast<std::uint32_t>(r); j < o_.shards; j += static_cast<std::uint32_t>(n)) {
          host.push_back(dp_detail::shard_data(o_.data_seed, step, j, o_.params));
          (void)rk.s.memcpy(x[r], bytes(), host.back().data(), bytes(), memcpy_kind::host_to_device);
          kernels::elementwise add{};
          add.fn = kernels::eltwise_fn::add;
          add.a = desc(rk.grad);
          add.b = desc(x[r]);
          add.y = desc(rk.grad);
          (void)rk.s.launch(kernel_desc{add, "grad_acc"});
        }
      }
      for (std::size_t r = 0; r < n; ++r, cur = r)
        comm_.all_reduce(ranks_[r].grad, ranks_[r].grad, o_.params, dtype::f32, reduce_op::sum, ranks_[r].s);
      for (std::size_t r = 0; r < n; ++r) {
        cur = r;
        kernels::sgd_update u{};
        u.param = desc(ranks_[r].param);
        u.grad = desc(ranks_[r].grad);
        u.lr = o_.lr;
        (void)ranks_[r].s.launch(kernel_desc{u, "sgd"});
      }
    } catch (const npurt::error& e) {
      // A call refused mid-step (a device lost meanwhile): the ranks already enqueued would
      // wait for it in their collective until the exec timeout; abort that instead.
      comm_.abort();
      drain();
      release_x();
      failed_rank = cur;
      return e.code();
    }
    const std::error_code worst = drain(&failed_rank);
    release_x();
    return worst;
  }

  /// Waits for every rank's stream; returns the most severe error and its rank.
  std::error_code drain(std::size_t* failed_rank = nullptr) {
    std::error_code worst;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      std::error_code ec;
      ranks_[r].s.synchronize(no_timeout, ec);
      if (ec && (!worst || severity(ec) > severity(worst))) {
        worst = ec;
        if (failed_rank) *failed_rank = r;
      }
    }
    return worst;
  }

  static int severity(std::error_code ec) noexcept {
    switch (classify(ec)) {
      case failure_class::none: return 0;
      case failure_class::device: return ec == errc::remote_error || ec == errc::operation_aborted ? 1 : 2;
      case failure_class::memory: return 3;
      case failure_class::timeout: return 4;
      case failure_class::device_lost: return 5;
      case failure_class::fatal: return 6;
    }
    return 6;
  }

  std::error_code take_checkpoint(std::uint32_t step) {
    std::error_code ec;
    checkpoint ck = create_checkpoint();
    ck.add_tensor("param", dtype::f32, {static_cast<std::int64_t>(o_.params)}, ranks_[0].param, ranks_[0].s, ec);
    if (ec) return ec;
    ck.set_metadata("step", static_cast<std::int64_t>(step));
    // A file that cannot be written is a failed checkpoint, handled by the strategy like any
    // other: thrown, it would discard the run's report. Until it is written, the previous
    // checkpoint stays the one to resume from.
    if (!o_.checkpoint_path.empty()) {
      ck.save(o_.checkpoint_path, ec);
      if (ec) return ec;
    }
    saved_ = ck.serialize();
    ++report_.checkpoints;
    return {};
  }

  /// Puts the last checkpoint on every rank and sets `from` to its step; a failed copy (a fault
  /// during the restore) is returned with its rank.
  std::error_code restore_all(std::uint32_t& from, std::size_t& failed_rank) {
    checkpoint ck = checkpoint::parse(saved_);
    try {
      for (auto& r : ranks_) (void)ck.copy_to_device("param", r.param, bytes(), r.s);
    } catch (const npurt::error& e) {
      drain();
      failed_rank = 0;
      return e.code();
    }
    if (const std::error_code ec = drain(&failed_rank)) return ec;
    from = static_cast<std::uint32_t>(ck.get_metadata<std::int64_t>("step"));
    return {};
  }

  /// Handles a failed attempt; false when the run must stop.
  bool recover(std::error_code ec, std::size_t failed_rank, bool dirty, std::uint32_t attempt, bool& short_watchdog,
               std::uint32_t& step) {
    ++report_.failures;
    const recovery_strategy& st = o_.strategy;
    recovery_action act = st.action_for(ec);
    // However the faults fall, the run ends: a bound on all recoveries of a run.
    if (report_.failures > o_.max_recoveries) act = recovery_action::abort;
    const bool lost =
        failed_rank < ranks_.size() && sys_.get_backend().status(ranks_[failed_rank].dev) == device_status::lost;
    if (lost && is_retry(act)) act = st.on_device_lost;  // retrying on a lost device cannot work
    if (is_retry(act) && attempt > st.max_retries)
      act = is_retry(st.on_device_lost) ? recovery_action::abort : st.on_device_lost;
    report_.errors.push_back(ec);
    report_.actions.push_back(act);
    drain();  // whatever else is pending finishes (or fails) before anything is rebuilt
    try {
      return apply(act, ec, failed_rank, dirty, attempt, short_watchdog, step);
    } catch (const npurt::error& e) {
      // A fault while recovering (the restarted device lost again, a refused allocation) is
      // one more failed attempt.
      drain();
      return recover(e.code(), failed_rank, true, attempt + 1, short_watchdog, step);
    }
  }

  bool apply(recovery_action act, std::error_code ec, std::size_t failed_rank, bool dirty, std::uint32_t attempt,
             bool& short_watchdog, std::uint32_t& step) {
    const recovery_strategy& st = o_.strategy;
    switch (act) {
      case recovery_action::abort: report_.fatal = ec; return false;
      case recovery_action::gc_and_retry:
        for (auto& r : ranks_) sys_.device(r.dev).mem_pool().empty_cache();
        [[fallthrough]];
      case recovery_action::retry: ++report_.retries; break;
      case recovery_action::retry_with_timeout:
        short_watchdog = !sys_.get_backend().set_op_execute_timeout(st.retry_timeout);
        ++report_.retries;
        break;
      case recovery_action::restart: {
        ++report_.restarts;
        rank_state& r = ranks_[failed_rank];
        sys_.device(r.dev).reset();  // frees its memory and invalidates its streams
        r = make_rank(r.dev);
        break;
      }
      case recovery_action::failover: {
        if (spares_.empty()) {
          report_.fatal = ec;
          return false;
        }
        ++report_.failovers;
        rank_state& r = ranks_[failed_rank];
        const device_id old = r.dev;
        free_rank(r);
        if (sys_.get_backend().status(old) == device_status::lost) sys_.device(old).reset();
        r = make_rank(spares_.front());
        spares_.erase(spares_.begin());
        break;
      }
      case recovery_action::degrade: {
        if (ranks_.size() <= 1) {
          report_.fatal = ec;
          return false;
        }
        ++report_.degrades;
        free_rank(ranks_[failed_rank]);
        const device_id old = ranks_[failed_rank].dev;
        ranks_.erase(ranks_.begin() + static_cast<std::ptrdiff_t>(failed_rank));
        if (sys_.get_backend().status(old) == device_status::lost) sys_.device(old).reset();
        break;
      }
    }
    sleep_for(sys_, is_retry(act) ? st.backoff_for(attempt) : picoseconds{0});
    comm_ = communicator::init_all(sys_, devices());
    if (dirty || !is_retry(act)) {
      std::size_t bad = 0;
      std::uint32_t from = 0;
      // A fault during the restore is one more failed attempt, handled the same way.
      if (const std::error_code rec = restore_all(from, bad))
        return recover(rec, bad, true, attempt + 1, short_watchdog, step);
      report_.replayed_steps += step - from;
      step = from;
    }
    return true;
  }

  void detect_slow(std::uint32_t step) {
    if (o_.slow_factor <= 0 || ranks_.size() < 2) return;
    std::vector<std::pair<device_id, double>> t;
    for (const auto& r : ranks_)
      if (auto it = spans_.spans.find(r.dev); it != spans_.spans.end())
        t.emplace_back(r.dev, static_cast<double>((it->second.second - it->second.first).count()));
    for (const auto& [dev, mine] : t) {
      std::vector<double> peers;
      for (const auto& [d2, v] : t)
        if (d2 != dev) peers.push_back(v);
      if (peers.empty()) continue;
      std::nth_element(peers.begin(), peers.begin() + static_cast<std::ptrdiff_t>(peers.size() / 2), peers.end());
      const double med = peers[peers.size() / 2];
      if (med > 0 && mine > o_.slow_factor * med) report_.slow_devices.push_back({step, dev, mine / med});
    }
  }

  system& sys_;
  dp_training_options o_;
  std::vector<device_id> spares_;
  std::vector<rank_state> ranks_;
  communicator comm_;
  std::vector<std::byte> saved_;
  compute_spans spans_;
  dp_training_report report_;
};

}  // namespace dp_detail

/// Runs the loop to the end or to an abort. Bad options are caller errors (nothing runs).
inline dp_training_report train_data_parallel(system& sys, const dp_training_options& opts) {
  dp_detail::trainer t(sys, opts);
  return t.run();
}

}  // namespace npurt::models
