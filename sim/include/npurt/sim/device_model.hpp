// npurt/sim/device_model.hpp — engines, queues and shared bandwidth of the simulated devices.
//
// Each device has engines, each with its own ready queue: the AI-core pool (one pool on coupled
// parts; an AIC pool for cube kernels and an AIV pool for vector kernels on separated parts),
// the copy engines H2D, D2H, D2D (copy_engine_channels copies at once each), the collective
// engine, and one host engine for host-to-host copies. A ready task waits in its engine's queue
// ordered by (priority, task id) and starts, non-preemptively, when its head-of-queue turn comes
// and the engine has room (a kernel needs block_dim cores, 0 = the whole pool).
//
// Time inside a running task is a fluid model: a task has a fixed latency phase (kernel launch
// latency, link latency) and then a body of `work` units that progresses at a rate. The body
// draws bandwidth from shared resources — the device's HBM (kernels, on-device copies, memsets),
// a PCIe direction, an HCCS link direction, a RoCE port direction. Whenever the set of tasks on
// a resource changes, the rates of every task connected to it are recomputed by max-min fair
// progressive filling (each task capped at the rate it would run at alone), the remaining work is
// re-rated and the end re-scheduled; a generation counter makes the superseded end callbacks
// no-ops. Alone on its resources a task therefore takes exactly its uncontended cost: a copy
// latency + bytes / bandwidth, a kernel estimate().total.
//
// The per-task path is kept cheap (a kernels::fixed launch costs about 150 instructions from
// submit() to complete()): a task that draws on no resource (kernels::fixed, zero-byte copies,
// control tasks) never touches the fluid model, a task alone on its resources gets its rate in
// the same arithmetic without the component walk, and per-task state lives in reused flat slots.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/sim/cost_model.hpp>
#include <npurt/sim/preset.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace npurt::sim {

/// What explain() tells about a finished kernel.
struct task_explanation {
  std::uint64_t task = 0;
  device_id device = 0;
  std::uint32_t stream = 0;
  std::string_view name;            // the kernel's name (outlives the run by kernel_desc's rule)
  kernel_cost cost;                 // the uncontended breakdown (estimate() at full HBM bandwidth)
  sim_time start{};                 // cores taken; the launch latency starts here
  sim_time body_start{};            // after the launch latency
  sim_time end{};
  picoseconds contention{0};        // (end - start) - cost.total: time lost to sharing HBM
};

/// The uncontended time of a transfer: ceil(bytes / bytes_per_s) in picoseconds. Every copy and
/// the fluid model use this one formula, so a test can compute expected times exactly.
[[nodiscard]] picoseconds transfer_time(double bytes, double bytes_per_s) noexcept;

/// Which link a copy crosses and its uncontended parameters.
struct copy_path {
  std::string_view link;            // "pcie", "hccs", "roce", "hbm", "host"
  double bandwidth = 0;             // bytes/s
  picoseconds latency{0};
};

/// The path of a copy (memcpy or memset) on a preset: H2D/D2H over PCIe; on-device D2D at
/// d2d_bandwidth; peer D2D over HCCS inside a group, over the PCIe switch between groups of one
/// server, over RoCE between servers; H2H at host_memcpy_bandwidth; a device memset at
/// hbm_bandwidth after d2d_latency.
[[nodiscard]] copy_path path_of(const preset& p, task_kind kind, const copy_desc& c, engine_kind engine);
/// latency + transfer_time(bytes, bandwidth): what an uncontended copy or memset takes.
[[nodiscard]] picoseconds copy_time(const preset& p, task_kind kind, const copy_desc& c, engine_kind engine);

class collective_engine;

class device_model {
 public:
  device_model(const preset& p, const sim_options& opts);
  ~device_model();
  device_model(const device_model&) = delete;
  device_model& operator=(const device_model&) = delete;

  void attach(backend_host& host) noexcept;
  void submit(task_info& t);
  /// End of an instant: starts what was submitted (and what finishing tasks made room for)
  /// during it. An engine with room for everything starts the tasks in arrival order; one
  /// without room decides by (priority, task id), so a high-priority task that becomes ready at
  /// the same instant as a low-priority one is never passed by it.
  void flush();
  /// The collective engine has operations to fail at the end of this instant (a mismatch):
  /// the next flush() hands over to it. A flag, so that a flush without one tests one byte.
  void request_collective_flush() noexcept { coll_flush_ = true; }
  /// Device reset: drops every task of `dev` (queued, buffered or running) without completing
  /// it, frees the cores, channels and bandwidth they held, and lets others use them. The
  /// collectives `dev` takes part in fail on their other ranks.
  void abort(device_id dev);
  /// Ends one task (an op-execute watchdog, stream::abort) without completing it: a running one
  /// frees its cores, channel and bandwidth as abort() does; a queued one leaves its engine's
  /// line. False when `t` is unknown here or a collective, whose engine ends it.
  bool cancel(task_info& t);
  /// A peer transfer of a collective (t.kind == collective, t.copy says src, dst and bytes):
  /// runs on the link path_of() names, sharing it with copies and other transfers, and is
  /// reported to the collective engine instead of the host when it ends.
  void start_transfer(task_info& t);
  /// A collective's local reduction on t.device (t.kind == collective, t.engine == ai_core):
  /// t.fixed.duration on the whole vector-core pool, queued with the device's kernels by
  /// (priority, arrival) and, like them, never preempted; reported to the collective engine.
  void start_reduction(task_info& t);
  [[nodiscard]] collective_engine& collectives() noexcept { return *coll_; }
  /// Collectives waiting for peers, for a deadlock report.
  [[nodiscard]] std::string collectives_describe() const;
  [[nodiscard]] std::optional<task_explanation> explain(std::uint64_t task) const;
  [[nodiscard]] const preset& config() const noexcept { return preset_; }
  /// The cost estimate() gives, memoised by shape (ResNet-50 repeats a few dozen shapes).
  [[nodiscard]] kernel_cost cost_of(const kernel_desc& k, std::uint32_t cores);
  /// Tasks waiting in queues or running, over all engines.
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }

 private:
  enum class phase : std::uint8_t { idle, latency, body };
  // What finish() must do beyond freeing the slot (job::extra), so that a task with none of it
  // (a kernels::fixed launch, a control task) costs one test.
  enum : std::uint8_t { x_resources = 1, x_link = 2, x_cost = 4, x_fault = 8 };
  // The hot state of a task on an engine, one slot per task in flight, reused LIFO. Starting a
  // task writes only the words its path reads: a free slot always has nres == 0, an empty link
  // and extra == 0, and what only some tasks need (a kernel's cost breakdown, a functional
  // failure) lives in the cold per-slot vectors job_costs_ / job_faults_.
  struct alignas(64) job {  // two cache lines: indexing is a shift
    task_info* task = nullptr;
    std::uint32_t engine = 0;       // index into engines_ (no_engine: completes on its own)
    std::uint32_t need = 0;         // cores or channels held
    std::uint32_t gen = 0;
    std::uint32_t next_free = 0;    // free-list link while the slot is idle
    phase ph = phase::idle;
    std::uint8_t extra = 0;         // x_* bits; x_cost: job_costs_[slot] holds its estimate,
                             // x_fault: job_faults_[slot] holds the outcome to report
    // progressive filling scratch
    bool frozen = false, capped = false;
    std::uint32_t mark = 0;
    std::uint32_t nres = 0;
    std::uint32_t res[2] = {0, 0};  // resources the body draws on
    double work = 0;  // remaining body units
    double max_rate = 0;  // units/s alone
    double usage = 0;  // bytes of each resource per unit
    double rate = 0;  // current units/s
    double fill = 0;
    sim_time last{};  // when `work` was last settled
    sim_time body_start{};
    std::string_view link;  // for the tracer ("" = none)
  };
  struct resource {
    double capacity = 0;  // bytes/s
    std::vector<std::uint32_t> jobs;
    std::uint32_t mark = 0;
    double residual = 0;
    std::uint32_t active = 0;
  };
  struct queued {
    // Dispatch order (priority, then task id) packed into one word: the heap's comparisons
    // are then one compare each. Ids stay far below 2^56.
    std::uint64_t key;
    task_info* task;
    std::uint32_t need;
    static std::uint64_t key_of(std::uint8_t priority, std::uint64_t id) noexcept {
      return (std::uint64_t{priority} << 56) | (id & ((std::uint64_t{1} << 56) - 1));
    }
    friend bool operator<(const queued& a, const queued& b) noexcept { return a.key > b.key; }  // min on top
  };
  // An engine's waiting tasks, smallest key first. Tasks mostly arrive in key order (one
  // priority, ids rising), and those go to a sorted run that pops in O(1); a task that arrives
  // out of order goes to a heap beside it. Keys are unique, so the pops come in exactly the
  // order one heap of everything would give.
  class wait_queue {
   public:
    [[nodiscard]] bool empty() const noexcept { return head_ == run_.size() && heap_.empty(); }
    [[nodiscard]] std::size_t size() const noexcept { return run_.size() - head_ + heap_.size(); }
    [[nodiscard]] const queued& top() const noexcept {
      if (heap_.empty()) return run_[head_];
      if (head_ == run_.size() || heap_.front().key < run_[head_].key) return heap_.front();
      return run_[head_];
    }
    void push(const queued& q) {
      if (head_ == run_.size() || run_.back().key < q.key) [[likely]] {
        run_.push_back(q);
        return;
      }
      heap_.push_back(q);
      std::push_heap(heap_.begin(), heap_.end());
    }
    queued pop() {
      if (!heap_.empty() && (head_ == run_.size() || heap_.front().key < run_[head_].key)) {
        std::pop_heap(heap_.begin(), heap_.end());
        const queued q = heap_.back();
        heap_.pop_back();
        return q;
      }
      const queued q = run_[head_];
      if (++head_ == run_.size()) {
        run_.clear();
        head_ = 0;
      } else if (head_ >= 64 && head_ * 2 >= run_.size()) {
        run_.erase(run_.begin(), run_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
      }
      return q;
    }
    /// Drops the tasks `pred` selects; returns how many.
    template <class Pred>
    std::size_t erase_if(Pred pred) {
      const std::size_t before = size();
      run_.erase(run_.begin(), run_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
      std::erase_if(run_, pred);  // keeps the run sorted
      std::erase_if(heap_, pred);
      std::make_heap(heap_.begin(), heap_.end());
      return before - size();
    }

   private:
    std::vector<queued> run_;  // sorted by key from head_
    std::size_t head_ = 0;
    std::vector<queued> heap_;
  };
  struct engine {
    std::uint32_t capacity = 1;
    std::uint32_t free = 1;
    wait_queue heap;
    std::uint64_t pending_need = 0;  // summed needs of this instant's arrivals
    bool flushed = false;  // decided at this flush already
  };
  // One thing that happened during the current instant, in order: an arrival (task set), or an
  // engine that gained room while tasks waited (task null).
  struct pending {
    task_info* task;
    std::uint32_t engine;
    std::uint32_t need;
    std::uint32_t order;  // arrival order among an engine's arrivals, while deciding
  };

  static constexpr std::uint32_t no_engine = 0xffffffffu;
  static constexpr std::uint32_t no_slot = 0xffffffffu;

  static void on_timer(void* self, std::uint64_t arg);
  std::uint32_t engine_of(const task_info& t) const;
  [[gnu::noinline]] void submit_other(task_info& t);
  void enqueue(task_info& t, std::uint32_t e, std::uint32_t need);
  /// `need` cores of engine `e`, capped by the kernel's core limits (task_info::limits).
  [[gnu::cold]] std::uint32_t limited_need(const task_info& t, std::uint32_t e, std::uint32_t need) const;
  [[gnu::noinline]] void wait(task_info& t, std::uint32_t e, std::uint32_t need);
  void dispatch(std::uint32_t e);
  void drop_job(std::uint32_t slot, sim_time now);  // forgets a running job (abort, cancel)
  void defer(task_info* t, std::uint32_t e, std::uint32_t need);
  void decide_contended(std::uint32_t e, std::size_t from);
  void start(task_info& t, std::uint32_t e, std::uint32_t need, sim_time now);
  void start_kernel(std::uint32_t slot, sim_time now);
  void start_copy(std::uint32_t slot, sim_time now);
  void enter_body(std::uint32_t slot, sim_time now);
  void finish(std::uint32_t slot);
  [[gnu::noinline]] std::error_code release(std::uint32_t slot, sim_time now);
  void schedule(std::uint32_t slot, sim_time at);
  void rerate(const std::uint32_t* res, std::uint32_t n, sim_time now);
  void rerate_alone(job& j, std::uint32_t slot, sim_time now);
  std::uint32_t alloc_job();
  [[gnu::noinline]] std::uint32_t grow_jobs();
  std::uint32_t hbm(device_id d) const noexcept { return static_cast<std::uint32_t>(d) * 3; }
  std::uint32_t pcie_h2d(device_id d) const noexcept { return static_cast<std::uint32_t>(d) * 3 + 1; }
  std::uint32_t pcie_d2h(device_id d) const noexcept { return static_cast<std::uint32_t>(d) * 3 + 2; }
  std::uint32_t link_resource(std::uint64_t key, double capacity);
  void remember(std::uint32_t slot);

  preset preset_;
  sim_options opts_;
  backend_host* host_ = nullptr;
  bool buffered_ = false;  // the host calls flush(): decide at the end of an instant
  bool coll_flush_ = false;  // request_collective_flush() since the last flush()
  std::vector<pending> pending_, flushing_, arrivals_;
  std::uint32_t engines_per_device_ = 0;
  std::vector<engine> engines_;
  std::vector<resource> resources_;
  std::unordered_map<std::uint64_t, std::uint32_t> links_;  // lazily made HCCS/RoCE/host resources
  std::vector<job> jobs_;
  std::vector<kernel_cost> job_costs_;  // by slot, valid while jobs_[slot].extra has x_cost
  std::vector<std::error_code> job_faults_;  // by slot, valid while jobs_[slot].extra has x_fault
  // By slot: the ticket of the job's pending timer (0: none, or one due at this instant). A
  // timer superseded by a new end (bandwidth shared anew) or by the job's end (a watchdog, a
  // reset) is revoked, so it cannot move the clock past the last real work.
  std::vector<std::uint64_t> job_timers_;
  std::uint32_t free_jobs_ = no_slot;  // head of the idle slots' list
  std::error_code ok_;  // a success, made once (error_code{} is an out-of-line call)
  std::uint32_t mark_epoch_ = 0;
  std::vector<std::uint32_t> comp_jobs_, comp_res_;
  std::size_t in_flight_ = 0;
  std::unordered_map<std::string, kernel_cost> costs_;
  std::string key_;
  // Finished kernels by task id modulo the capacity: O(1), no allocation once grown.
  std::vector<task_explanation> history_;
  std::unique_ptr<collective_engine> coll_;
};

}  // namespace npurt::sim
