// The device model: engines and their queues, the fluid model of shared bandwidth.
#include <npurt/sim/device_model.hpp>

#include <npurt/observer.hpp>
#include <npurt/sim/collective_engine.hpp>

#if __has_include(<npurt/sim/reference_kernels.hpp>)
#include <npurt/sim/reference_kernels.hpp>
#define NPURT_SIM_HAVE_REFERENCE 1
#else
#define NPURT_SIM_HAVE_REFERENCE 0
#endif

#include <boost/pfr.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

// The per-task path (submit to start, timer to finish) is a handful of small steps; inlining
// them into submit() and on_timer() keeps it a few dozen instructions per task.
#define NPURT_SIM_HOT [[gnu::always_inline]]

namespace npurt::sim {

namespace {

// A duration on a device `s` times slower (task_info::slowdown), rounded up to the picosecond;
// beyond the clock's range it saturates, and the job then fails with time_overflow.
picoseconds slowed(picoseconds d, double s) noexcept {
  if (!(s > 1) || d.count() <= 0) return d;
  const double v = std::ceil(static_cast<double>(d.count()) * s);
  return v < 0x1p63 ? picoseconds{static_cast<std::int64_t>(v)} : picoseconds::max();
}

// Engines of one device, in this order; the host engine is one more, after all devices.
enum : std::uint32_t { e_cube, e_vector, e_h2d, e_d2h, e_d2d, e_collective, engines_per_device };

template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

// Appends every field of a descriptor that decides its cost (never a data pointer): the memo key.
struct key_writer {
  std::string& s;
  void put(const void* p, std::size_t n) { s.append(static_cast<const char*>(p), n); }
  template <class T>
  void operator()(const T& v) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      put(&v, sizeof v);
    } else if constexpr (std::is_same_v<T, tensor_desc>) {
      // The same bytes as one put per field, in one append: every kernel of a run builds its key.
      char buf[1 + shape::max_rank * sizeof(std::int64_t) + 2];
      char* o = buf;
      *o++ = static_cast<char>(static_cast<std::uint8_t>(v.shape.rank()));
      for (auto d : v.shape) {
        std::memcpy(o, &d, sizeof d);
        o += sizeof d;
      }
      std::memcpy(o++, &v.type, 1);
      std::memcpy(o++, &v.format, 1);
      put(buf, static_cast<std::size_t>(o - buf));
    } else if constexpr (std::is_same_v<T, picoseconds>) {
      const auto c = v.count();
      put(&c, sizeof c);
    } else if constexpr (is_std_array<T>::value) {
      for (const auto& x : v) (*this)(x);
    } else {
      boost::pfr::for_each_field(v, *this);
    }
  }
};

constexpr std::uint64_t link_key(std::uint32_t kind, std::uint32_t a, std::uint32_t b) noexcept {
  return (static_cast<std::uint64_t>(kind) << 48) | (static_cast<std::uint64_t>(a) << 24) | b;
}

bool same_group(const preset& p, device_id a, device_id b) {
  for (const auto& g : p.hccs_groups) {
    const bool ha = std::find(g.begin(), g.end(), a) != g.end();
    if (ha) return std::find(g.begin(), g.end(), b) != g.end();
  }
  return false;
}

}  // namespace

picoseconds transfer_time(double bytes, double bytes_per_s) noexcept {
  if (!(bytes > 0)) return picoseconds{0};
  const long double ps = static_cast<long double>(bytes) * 1e12L / static_cast<long double>(bytes_per_s);
  return saturating_ps(std::ceil(ps));
}

copy_path path_of(const preset& p, task_kind kind, const copy_desc& c, engine_kind engine) {
  if (kind == task_kind::memset) {
    if (c.dst_device < 0) return {"host", p.host_memcpy_bandwidth, p.host_memcpy_latency};
    return {"hbm", p.hbm_bandwidth, p.d2d_latency};
  }
  if (engine == engine_kind::host || (c.src_device < 0 && c.dst_device < 0))
    return {"host", p.host_memcpy_bandwidth, p.host_memcpy_latency};
  if (c.src_device < 0 || c.dst_device < 0) return {"pcie", p.pcie_bandwidth, p.pcie_latency};
  if (c.src_device == c.dst_device) return {"hbm", p.d2d_bandwidth, p.d2d_latency};
  const auto server = [&](device_id d) { return static_cast<std::uint32_t>(d) / p.server_size; };
  if (server(c.src_device) != server(c.dst_device)) return {"roce", p.roce_bandwidth, p.roce_latency};
  if (same_group(p, c.src_device, c.dst_device)) return {"hccs", p.hccs_bandwidth, p.hccs_latency};
  return {"pcie", p.pcie_bandwidth, p.pcie_latency};
}

picoseconds copy_time(const preset& p, task_kind kind, const copy_desc& c, engine_kind engine) {
  const copy_path path = path_of(p, kind, c, engine);
  return path.latency + transfer_time(static_cast<double>(c.bytes), path.bandwidth);
}

device_model::device_model(const preset& p, const sim_options& opts)
    : preset_(p), opts_(opts), coll_(std::make_unique<collective_engine>(*this, preset_, opts.functional)) {
  const std::uint32_t n = p.device_count;
  engines_per_device_ = engines_per_device;
  engines_.resize(static_cast<std::size_t>(n) * engines_per_device + 1);
  for (std::uint32_t d = 0; d < n; ++d) {
    auto* e = &engines_[static_cast<std::size_t>(d) * engines_per_device];
    e[e_cube].capacity = p.ai_core_count;
    e[e_vector].capacity = p.separated_cores ? p.vector_core_count : p.ai_core_count;
    e[e_h2d].capacity = e[e_d2h].capacity = e[e_d2d].capacity = p.copy_engine_channels;
    e[e_collective].capacity = 1;
  }
  engines_.back().capacity = p.copy_engine_channels;  // host memcpy
  for (auto& e : engines_) e.free = e.capacity;
  resources_.resize(static_cast<std::size_t>(n) * 3);
  for (std::uint32_t d = 0; d < n; ++d) {
    resources_[hbm(static_cast<device_id>(d))].capacity = p.hbm_bandwidth;
    resources_[pcie_h2d(static_cast<device_id>(d))].capacity = p.pcie_bandwidth;
    resources_[pcie_d2h(static_cast<device_id>(d))].capacity = p.pcie_bandwidth;
  }
}

device_model::~device_model() = default;

void device_model::attach(backend_host& host) noexcept {
  host_ = &host;
  buffered_ = host.calls_flush();
  coll_->attach(host);
}

std::string device_model::collectives_describe() const { return coll_->describe(); }

void device_model::start_transfer(task_info& t) {
  ++in_flight_;
  t.start = host_->now();
  start(t, no_engine, 0, t.start);
}

void device_model::start_reduction(task_info& t) {
  ++in_flight_;
  const auto base = static_cast<std::uint32_t>(t.device) * engines_per_device_;
  const std::uint32_t e = base + (preset_.separated_cores ? e_vector : e_cube);
  enqueue(t, e, engines_[e].capacity);
}

std::uint32_t device_model::link_resource(std::uint64_t key, double capacity) {
  auto [it, inserted] = links_.try_emplace(key, static_cast<std::uint32_t>(resources_.size()));
  if (inserted) {
    resources_.emplace_back();
    resources_.back().capacity = capacity;
  }
  return it->second;
}

kernel_cost device_model::cost_of(const kernel_desc& k, std::uint32_t cores) {
  key_.clear();
  key_writer w{key_};
  const auto index = static_cast<std::uint8_t>(k.op.index());
  w.put(&index, 1);
  std::visit([&](const auto& op) { w(op); }, k.op);
  w.put(&cores, sizeof cores);
  if (auto it = costs_.find(key_); it != costs_.end()) return it->second;
  kernel_cost c = estimate(preset_, k, cores, preset_.hbm_bandwidth);
  if (costs_.size() < 65536) costs_.emplace(key_, c);
  return c;
}

NPURT_SIM_HOT inline std::uint32_t device_model::engine_of(const task_info& t) const {
  const auto base = static_cast<std::uint32_t>(t.device) * engines_per_device_;
  if (t.kind == task_kind::kernel) {
    const bool vector = preset_.separated_cores && t.kernel && !uses_cube(*t.kernel);
    return base + (vector ? e_vector : e_cube);
  }
  switch (t.engine) {
    case engine_kind::copy_h2d: return base + e_h2d;
    case engine_kind::copy_d2h: return base + e_d2h;
    case engine_kind::collective: return base + e_collective;
    case engine_kind::host: return static_cast<std::uint32_t>(engines_.size() - 1);
    case engine_kind::ai_core: return base + e_cube;
    default: return base + e_d2d;
  }
}

std::uint32_t device_model::grow_jobs() {
  jobs_.emplace_back();
  job_costs_.emplace_back();
  job_faults_.emplace_back();
  job_timers_.emplace_back();
  return static_cast<std::uint32_t>(jobs_.size() - 1);
}

NPURT_SIM_HOT inline std::uint32_t device_model::alloc_job() {
  if (free_jobs_ == no_slot) [[unlikely]]
    return grow_jobs();
  const std::uint32_t s = free_jobs_;
  free_jobs_ = jobs_[s].next_free;
  return s;
}

NPURT_SIM_HOT inline void device_model::schedule(std::uint32_t slot, sim_time at) {
  job& j = jobs_[slot];
  if (at == end_of_time) [[unlikely]] {
    if (j.task->slowdown > 1) {
      // Slowed past the end of the clock by a throttle or a hang, not by its own size: it runs
      // on, holding what it holds, until a watchdog ends it (without one, a deadlock names it).
      ++j.gen;
      if (std::uint64_t& pending = job_timers_[slot]; pending != 0) {
        host_->revoke_timer(pending);
        pending = 0;
      }
      return;
    }
    // Virtual time cannot count that far (the sums saturate there): the job fails now with a
    // typed error instead of wrapping the clock around.
    job_faults_[slot] = make_error_code(errc::time_overflow);
    j.extra |= x_fault;
    // Failing out of its latency, it never joined its resources' lists: release() must not
    // look for it there.
    if (j.ph == phase::latency) j.nres = 0;
    j.ph = phase::body;
    at = host_->now();
  }
  ++j.gen;
  std::uint64_t& pending = job_timers_[slot];
  if (pending != 0) host_->revoke_timer(pending);
  pending =
      host_->call_at_revocable(at, &device_model::on_timer, this, (static_cast<std::uint64_t>(j.gen) << 32) | slot);
}

void device_model::on_timer(void* self, std::uint64_t arg) {
  auto* m = static_cast<device_model*>(self);
  const auto slot = static_cast<std::uint32_t>(arg & 0xffffffffu);
  const auto gen = static_cast<std::uint32_t>(arg >> 32);
  job& j = m->jobs_[slot];  // slots are never given back: always in range
  if (j.gen != gen || j.ph == phase::idle) return;  // superseded
  m->job_timers_[slot] = 0;  // this was its pending timer
  if (j.ph == phase::latency) m->enter_body(slot, m->host_->now());
  else m->finish(slot);
}

void device_model::submit(task_info& t) {
  ++in_flight_;
  // The common case first: a kernel for a device the preset has (a negative id wraps to large).
  if (t.kind == task_kind::kernel && static_cast<std::uint32_t>(t.device) < preset_.device_count) [[likely]] {
    const std::uint32_t e = engine_of(t);
    const std::uint32_t pool = engines_[e].capacity;
    // block_dim was checked against the pool by validate(); 0 means the whole pool.
    std::uint32_t need = t.block_dim == 0 ? pool : t.block_dim;
    // Both limits in one load: a kernel without any pays one test.
    std::uint64_t limits = 0;
    static_assert(sizeof limits == sizeof t.limits);
    std::memcpy(&limits, &t.limits, sizeof limits);
    if (limits != 0) [[unlikely]]
      need = limited_need(t, e, need);
    enqueue(t, e, need);
    return;
  }
  submit_other(t);
}

std::uint32_t device_model::limited_need(const task_info& t, std::uint32_t e, std::uint32_t need) const {
  // Vector kernels have an engine of their own only on separated parts; elsewhere every kernel
  // runs on the AI cores, which the cube limit caps.
  const std::uint32_t local = e - static_cast<std::uint32_t>(t.device) * engines_per_device_;
  const std::uint32_t limit = local == e_vector ? t.limits.vector : t.limits.cube;
  return limit != 0 && limit < need ? limit : need;
}

void device_model::submit_other(task_info& t) {
  const auto out_of_range = [&](device_id d) {
    return d >= 0 && static_cast<std::uint32_t>(d) >= preset_.device_count;
  };
  const bool bad_device = t.device < 0 || out_of_range(t.device) ||
                          ((t.kind == task_kind::memcpy || t.kind == task_kind::memset) &&
                           (out_of_range(t.copy.src_device) || out_of_range(t.copy.dst_device)));
  // Control tasks (event record/wait, host callbacks, an engine-less task of another kind) and
  // collectives take no engine time here: the runtime resolves control tasks; collectives get
  // their cost from the collective engine of their own issue.
  const bool engine_task = t.kind == task_kind::kernel || t.kind == task_kind::memcpy || t.kind == task_kind::memset;
  if (t.kind == task_kind::collective && !bad_device) {
    --in_flight_;  // the collective engine owns it from here
    coll_->submit(t);
    return;
  }
  if (engine_task && !bad_device) {
    enqueue(t, engine_of(t), 1);
    return;
  }
  // Complete at this instant, outside submit().
  const sim_time now = host_->now();
  const std::uint32_t slot = alloc_job();
  job& j = jobs_[slot];
  j.task = &t;
  j.engine = no_engine;
  j.need = 0;
  j.ph = phase::body;
  if (bad_device) {
    job_faults_[slot] = make_error_code(errc::invalid_device);
    j.extra = x_fault;
  }
  t.start = now;
  schedule(slot, now);
}

NPURT_SIM_HOT inline void device_model::enqueue(task_info& t, std::uint32_t e, std::uint32_t need) {
  if (buffered_) return defer(&t, e, need);
  engine& eng = engines_[e];
  if (eng.heap.empty() && need <= eng.free) [[likely]] {
    // Nothing waits and there is room: what a push and dispatch() would do at once.
    eng.free -= need;
    start(t, e, need, host_->now());
    return;
  }
  wait(t, e, need);
}

void device_model::wait(task_info& t, std::uint32_t e, std::uint32_t need) {
  engine& eng = engines_[e];
  eng.heap.push(queued{queued::key_of(t.priority, t.id), &t, need});
  dispatch(e);
}

NPURT_SIM_HOT inline void device_model::defer(task_info* t, std::uint32_t e, std::uint32_t need) {
  if (pending_.empty()) host_->request_flush();
  pending_.push_back(pending{t, e, need, 0});
  engines_[e].pending_need += need;
}

void device_model::flush() {
  if (coll_flush_) [[unlikely]] {
    coll_flush_ = false;
    coll_->flush();
  }
  if (pending_.size() == 1) [[likely]] {
    // One arrival at this instant, with room for it: the loop below would start it and reset
    // its engine, without the swap and the second pass.
    const pending p = pending_.front();
    engine& eng = engines_[p.engine];
    if (p.task && eng.heap.empty() && eng.pending_need <= eng.free) {
      pending_.clear();  // what start() defers belongs to the next flush, as after the swap
      eng.free -= p.need;
      start(*p.task, p.engine, p.need, host_->now());
      eng.pending_need = 0;
      return;
    }
    // One engine to decide, and nothing else at this instant: the loops below would only
    // find it and reset it.
    flushing_.swap(pending_);
    decide_contended(p.engine, 0);
    eng.pending_need = 0;
    flushing_.clear();
    return;
  }
  flushing_.swap(pending_);
  for (std::size_t i = 0; i < flushing_.size(); ++i) {
    const pending p = flushing_[i];
    engine& eng = engines_[p.engine];
    if (eng.flushed) continue;
    if (p.task && eng.heap.empty() && eng.pending_need <= eng.free) [[likely]] {
      // Room for every arrival: start each in arrival order, as an immediate dispatch would.
      eng.free -= p.need;
      start(*p.task, p.engine, p.need, host_->now());
      continue;
    }
    decide_contended(p.engine, i);
    eng.flushed = true;
  }
  for (const pending& p : flushing_) {
    engines_[p.engine].pending_need = 0;
    engines_[p.engine].flushed = false;
  }
  flushing_.clear();
}

void device_model::drop_job(std::uint32_t slot, sim_time now) {
  job& j = jobs_[slot];
  // A job still in its latency knows its resources but joins their lists only in enter_body():
  // there is nothing to take off, and nobody's rate depended on it.
  const std::uint32_t nres = j.ph == phase::latency ? 0 : j.nres;
  const std::uint32_t res[2] = {j.res[0], j.res[1]};
  for (std::uint32_t i = 0; i < nres; ++i) {
    auto& v = resources_[res[i]].jobs;
    v.erase(std::find(v.begin(), v.end(), slot));
  }
  j.nres = 0;
  j.link = {};
  j.extra = 0;
  if (j.engine != no_engine) engines_[j.engine].free += j.need;
  ++j.gen;  // its scheduled end finds a stale generation
  if (std::uint64_t& pending = job_timers_[slot]; pending != 0) {
    host_->revoke_timer(pending);  // and does not move the clock
    pending = 0;
  }
  j.ph = phase::idle;
  j.next_free = free_jobs_;
  free_jobs_ = slot;
  --in_flight_;
  if (nres != 0) rerate(res, nres, now);  // who shared its bandwidth speeds up
}

bool device_model::cancel(task_info& t) {
  if (t.kind == task_kind::collective) return false;  // collectives end through their engine
  for (std::uint32_t slot = 0; slot < jobs_.size(); ++slot) {
    const job& j = jobs_[slot];
    if (j.ph == phase::idle || j.task != &t) continue;
    const std::uint32_t e = j.engine;
    drop_job(slot, host_->now());
    // The cores or channel it held are free for the next task in line.
    if (e != no_engine && !engines_[e].heap.empty()) {
      if (buffered_) defer(nullptr, e, 0);
      else dispatch(e);
    }
    return true;
  }
  // Still in line for its engine, or arrived at this instant and not yet placed: it leaves
  // the line, and what waited behind it may start.
  for (std::uint32_t e = 0; e < engines_.size(); ++e) {
    const std::size_t n = engines_[e].heap.erase_if([&t](const queued& q) { return q.task == &t; });
    if (n == 0) continue;
    in_flight_ -= n;
    if (buffered_) defer(nullptr, e, 0);
    else dispatch(e);
    return true;
  }
  const auto p = std::find_if(pending_.begin(), pending_.end(), [&t](const pending& x) { return x.task == &t; });
  if (p == pending_.end()) return false;  // unknown: nothing to end
  engines_[p->engine].pending_need -= p->need;
  pending_.erase(p);
  --in_flight_;
  return true;
}

void device_model::abort(device_id dev) {
  coll_->abort_device(dev);  // first: the collective tasks of `dev` are still alive
  const sim_time now = host_->now();
  for (std::uint32_t slot = 0; slot < jobs_.size(); ++slot) {
    const job& j = jobs_[slot];
    if (j.ph == phase::idle || !j.task || j.task->device != dev) continue;
    drop_job(slot, now);
  }
  for (auto& eng : engines_) {
    in_flight_ -= eng.heap.erase_if([dev](const queued& q) { return q.task->device == dev; });
  }
  for (const pending& p : pending_) engines_[p.engine].pending_need = 0;
  const auto before = pending_.size();
  std::erase_if(pending_, [dev](const pending& p) { return p.task && p.task->device == dev; });
  for (const pending& p : pending_)
    if (p.task) { engines_[p.engine].pending_need += p.need; }
  in_flight_ -= before - pending_.size();
  // Engines shared with other devices (host copies) may have room for their waiting tasks now.
  for (std::uint32_t e = 0; e < engines_.size(); ++e)
    if (!engines_[e].heap.empty()) {
      if (buffered_) defer(nullptr, e, 0);
      else dispatch(e);
    }
}

void device_model::decide_contended(std::uint32_t e, std::size_t from) {
  engine& eng = engines_[e];
  // This instant's arrivals of the engine, by priority (arrival order within one priority),
  // merged with the tasks already waiting: the higher priority first, a waiting task first
  // when priorities are equal.
  const std::size_t n = flushing_.size();
  const auto arrival_at = [&](std::size_t i) { return flushing_[i].engine == e && flushing_[i].task; };
  std::size_t first = from;
  while (first < n && !arrival_at(first)) ++first;
  std::size_t second = first + 1;
  while (second < n && !arrival_at(second)) ++second;
  // Mostly a single arrival (a stream's next task as its last one ends) meets the waiting
  // tasks: it is in order already and is merged from where it stands.
  const pending* arrivals = first < n ? &flushing_[first] : nullptr;
  std::size_t count = first < n ? 1 : 0;
  if (second < n) {
    arrivals_.clear();
    for (std::size_t i = first; i < n; ++i)
      if (arrival_at(i)) arrivals_.push_back(flushing_[i]);
    for (std::size_t i = 0; i < arrivals_.size(); ++i) arrivals_[i].order = static_cast<std::uint32_t>(i);
    std::sort(arrivals_.begin(), arrivals_.end(), [](const pending& a, const pending& b) {
      return a.task->priority != b.task->priority ? a.task->priority < b.task->priority : a.order < b.order;
    });
    arrivals = arrivals_.data();
    count = arrivals_.size();
  }
  const sim_time now = host_->now();
  std::size_t next = 0;
  for (;;) {
    const bool have_arrival = next < count;
    if (!have_arrival && eng.heap.empty()) break;
    const bool take_arrival =
        have_arrival && (eng.heap.empty() || arrivals[next].task->priority < (eng.heap.top().key >> 56));
    const std::uint32_t need = take_arrival ? arrivals[next].need : eng.heap.top().need;
    if (need > eng.free) break;  // the head waits for room; nothing overtakes it
    eng.free -= need;
    if (take_arrival) {
      start(*arrivals[next].task, e, need, now);
      ++next;
    } else {
      const queued q = eng.heap.pop();
      start(*q.task, e, q.need, now);
    }
  }
  for (; next < count; ++next)
    eng.heap.push(queued{queued::key_of(arrivals[next].task->priority, arrivals[next].task->id), arrivals[next].task,
                         arrivals[next].need});
  // dispatch()'s own first test, here: the new head mostly waits for room, and then the call
  // would do nothing.
  if (!eng.heap.empty() && eng.heap.top().need <= eng.free) dispatch(e);
}

void device_model::dispatch(std::uint32_t e) {
  engine& eng = engines_[e];
  if (eng.heap.empty() || eng.heap.top().need > eng.free) return;
  const sim_time now = host_->now();
  // Strict order: the head of the queue waits for room; nothing overtakes it.
  while (!eng.heap.empty() && eng.heap.top().need <= eng.free) {
    const queued q = eng.heap.pop();
    eng.free -= q.need;
    start(*q.task, e, q.need, now);
  }
}

NPURT_SIM_HOT inline void device_model::start(task_info& t, std::uint32_t e, std::uint32_t need, sim_time now) {
  const std::uint32_t slot = alloc_job();
  job& j = jobs_[slot];
  j.task = &t;
  j.engine = e;
  j.need = need;
  t.start = now;
  if (t.kind != task_kind::kernel) {
    if (t.kind == task_kind::collective && t.engine == engine_kind::ai_core) [[unlikely]] {
      j.ph = phase::body;  // a collective's reduction: exactly its duration on the cores
      j.body_start = now;
      return schedule(slot, later(now, slowed(t.fixed.duration, t.slowdown)));
    }
    return start_copy(slot, now);
  }
  if (t.kernel) return start_kernel(slot, now);
  // kernels::fixed: exactly its duration after the on-device launch latency, no HBM traffic.
  j.ph = phase::body;
  t.flops = t.fixed.flops;
  t.bytes = t.fixed.bytes;
  if (t.slowdown > 1) [[unlikely]] {
    j.body_start = later(now, slowed(preset_.kernel_launch_latency, t.slowdown));
    return schedule(slot, later(j.body_start, slowed(t.fixed.duration, t.slowdown)));
  }
  j.body_start = later(now, preset_.kernel_launch_latency);
  schedule(slot, later(j.body_start, t.fixed.duration));
}

void device_model::start_kernel(std::uint32_t slot, sim_time now) {
  job& j = jobs_[slot];
  task_info& t = *j.task;
  kernel_cost& c = job_costs_[slot];
  c = cost_of(*t.kernel, j.need);
  if (t.slowdown > 1) [[unlikely]] {
    // A throttled device: every phase takes longer, and the same bytes over a longer body draw
    // less HBM bandwidth.
    c.launch_latency = slowed(c.launch_latency, t.slowdown);
    c.body = slowed(c.body, t.slowdown);
    c.total = c.body > picoseconds::max() - c.launch_latency ? picoseconds::max() : c.launch_latency + c.body;
  }
  t.flops = c.flops;
  t.bytes = c.hbm_bytes;
#if NPURT_SIM_HAVE_REFERENCE
  if (opts_.functional && has_data(*t.kernel)) {
    std::string why;
    job_faults_[slot] = run_reference(*t.kernel, *host_, t.device, &why);
    if (!why.empty()) host_->describe_failure(t, job_faults_[slot], std::move(why));
    j.extra |= x_fault;
  }
#endif
  if (c.hbm_bytes > 0 && c.body.count() > 0) {
    j.nres = 1;
    j.res[0] = hbm(t.device);
    j.work = static_cast<double>(c.body.count());  // units: picoseconds of uncontended body
    j.max_rate = 1e12;
    j.usage = static_cast<double>(c.hbm_bytes) / j.work;
  }
  j.extra |= x_cost;  // also sends finish() to release() for its HBM share, if it has one
  const sim_time body_at = later(now, c.launch_latency);
  if (j.nres == 0) {
    j.ph = phase::body;
    j.body_start = body_at;
    schedule(slot, later(body_at, c.body));
  } else if (c.launch_latency.count() == 0) {
    enter_body(slot, now);
  } else {
    j.ph = phase::latency;
    schedule(slot, body_at);
  }
}

void device_model::start_copy(std::uint32_t slot, sim_time now) {
  job& j = jobs_[slot];
  task_info& t = *j.task;
  const copy_desc& c = t.copy;
  copy_path path = path_of(preset_, t.kind, c, t.engine);
  if (t.slowdown > 1) [[unlikely]] {
    path.latency = slowed(path.latency, t.slowdown);
    path.bandwidth /= t.slowdown;
  }
  t.bytes = c.bytes;
  j.link = path.link;
  j.work = static_cast<double>(c.bytes);
  j.max_rate = path.bandwidth;
  j.usage = 1;
  const device_id src = c.src_device, dst = c.dst_device;
  std::uint32_t n = 0;
  if (path.link == "hbm") {
    j.res[n++] = hbm(dst >= 0 ? dst : t.device);
    if (t.kind == task_kind::memcpy) j.usage = 2;  // read and write
    j.link = {};
  } else if (path.link == "pcie") {
    if (src < 0) j.res[n++] = pcie_h2d(dst);
    else if (dst < 0) j.res[n++] = pcie_d2h(src);
    else j.res[n++] = pcie_d2h(src), j.res[n++] = pcie_h2d(dst);
  } else if (path.link == "hccs") {
    j.res[n++] = link_resource(link_key(1, static_cast<std::uint32_t>(src), static_cast<std::uint32_t>(dst)),
                               preset_.hccs_bandwidth);
  } else if (path.link == "roce") {
    j.res[n++] = link_resource(link_key(2, static_cast<std::uint32_t>(src), 0), preset_.roce_bandwidth);
    j.res[n++] = link_resource(link_key(3, static_cast<std::uint32_t>(dst), 0), preset_.roce_bandwidth);
  } else {
    j.res[n++] = link_resource(link_key(4, 0, 0), preset_.host_memcpy_bandwidth);
  }
  if (c.bytes == 0) n = 0;
  j.nres = n;
  j.extra = static_cast<std::uint8_t>((n != 0 ? x_resources : 0) | (j.link.empty() ? 0 : x_link));
  if (n == 0) {
    j.ph = phase::body;
    j.body_start = later(now, path.latency);
    schedule(slot, j.body_start);
  } else if (path.latency.count() == 0) {
    enter_body(slot, now);
  } else {
    j.ph = phase::latency;
    schedule(slot, later(now, path.latency));
  }
}

void device_model::enter_body(std::uint32_t slot, sim_time now) {
  job& j = jobs_[slot];
  j.ph = phase::body;
  j.body_start = now;
  j.last = now;
  j.rate = 0;
  bool alone = j.nres != 0;
  for (std::uint32_t i = 0; i < j.nres; ++i) {
    auto& v = resources_[j.res[i]].jobs;
    v.push_back(slot);
    alone = alone && v.size() == 1;
  }
  if (alone) return rerate_alone(j, slot, now);
  const std::uint32_t res[2] = {j.res[0], j.res[1]};
  rerate(res, j.nres, now);
}

NPURT_SIM_HOT inline void device_model::finish(std::uint32_t slot) {
  job& j = jobs_[slot];
  task_info& t = *j.task;
  const sim_time now = host_->now();
  t.end = now;
  std::error_code fault = ok_;
  if (j.extra != 0) [[unlikely]]
    fault = release(slot, now);
  const std::uint32_t e = j.engine;
  if (e != no_engine) engines_[e].free += j.need;
  j.ph = phase::idle;
  j.next_free = free_jobs_;
  free_jobs_ = slot;
  --in_flight_;
  if (t.kind == task_kind::collective) [[unlikely]]
    coll_->on_transfer(t, fault);
  else host_->complete(t, fault);
  if (e != no_engine && !engines_[e].heap.empty()) {
    if (buffered_) defer(nullptr, e, 0);
    else dispatch(e);
  }
}

std::error_code device_model::release(std::uint32_t slot, sim_time now) {
  job& j = jobs_[slot];
  const task_info& t = *j.task;
  const std::uint32_t nres = j.nres;
  const std::uint32_t res[2] = {j.res[0], j.res[1]};
  bool others = false;  // whether anyone is left on its resources to speed up
  for (std::uint32_t i = 0; i < nres; ++i) {
    auto& v = resources_[res[i]].jobs;
    v.erase(std::find(v.begin(), v.end(), slot));
    others = others || !v.empty();
  }
  j.nres = 0;
  if (!j.link.empty()) {
    if (observer* o = host_->tracer()) {
      link_transfer_info info{j.link, t.copy.src_device, t.copy.dst_device, t.copy.bytes, t.start, t.end};
      o->on_link_transfer(info);
    }
    j.link = {};
  }
  if (j.extra & x_cost) remember(slot);
  const std::error_code fault = j.extra & x_fault ? job_faults_[slot] : ok_;
  j.extra = 0;
  // Others on the same resources speed up now.
  if (others) rerate(res, nres, now);
  return fault;
}

void device_model::rerate_alone(job& j, std::uint32_t slot, sim_time now) {
  // rerate() for a job alone on its resources, in the same floating-point steps: one round of
  // progressive filling (the job reaches its cap or fills its narrowest resource; with a single
  // job the general loop stops after one round either way), no component to collect.
  double delta = std::numeric_limits<double>::infinity();
  delta = std::min(delta, j.max_rate * j.usage - 0.0);
  for (std::uint32_t i = 0; i < j.nres; ++i) delta = std::min(delta, resources_[j.res[i]].capacity / 1u);
  delta = std::max(delta, 0.0);
  const double fill = 0.0 + delta;
  const bool capped = fill >= j.max_rate * j.usage * (1 - 1e-12);
  const double rate = capped ? j.max_rate : fill / j.usage;
  j.rate = rate;  // j.last == now and the rate was 0: no work to settle
  if (rate > 0) schedule(slot, later(now, transfer_time(j.work, rate)));
}

void device_model::rerate(const std::uint32_t* seed, std::uint32_t nseed, sim_time now) {
  // The connected component of jobs and resources around the seeds.
  ++mark_epoch_;
  comp_jobs_.clear();
  comp_res_.clear();
  for (std::uint32_t i = 0; i < nseed; ++i) {
    if (resources_[seed[i]].mark == mark_epoch_) continue;
    resources_[seed[i]].mark = mark_epoch_;
    comp_res_.push_back(seed[i]);
  }
  for (std::size_t r = 0; r < comp_res_.size(); ++r) {
    for (std::uint32_t s : resources_[comp_res_[r]].jobs) {
      job& j = jobs_[s];
      if (j.mark == mark_epoch_) continue;  // already collected
      j.mark = mark_epoch_;
      comp_jobs_.push_back(s);
      for (std::uint32_t i = 0; i < j.nres; ++i)
        if (resources_[j.res[i]].mark != mark_epoch_) {
          resources_[j.res[i]].mark = mark_epoch_;
          comp_res_.push_back(j.res[i]);
        }
    }
  }
  // Max-min fair progressive filling on bytes/s, each job capped at its solo rate.
  for (std::uint32_t s : comp_jobs_) {
    job& j = jobs_[s];
    j.fill = 0;
    j.frozen = false;
    j.capped = false;
  }
  for (std::uint32_t r : comp_res_) {
    resource& res = resources_[r];
    res.residual = res.capacity;
    res.active = static_cast<std::uint32_t>(res.jobs.size());
  }
  std::size_t unfrozen = comp_jobs_.size();
  while (unfrozen > 0) {
    double delta = std::numeric_limits<double>::infinity();
    for (std::uint32_t s : comp_jobs_) {
      const job& j = jobs_[s];
      if (!j.frozen) delta = std::min(delta, j.max_rate * j.usage - j.fill);
    }
    for (std::uint32_t r : comp_res_) {
      const resource& res = resources_[r];
      if (res.active) delta = std::min(delta, res.residual / res.active);
    }
    delta = std::max(delta, 0.0);
    for (std::uint32_t s : comp_jobs_) {
      job& j = jobs_[s];
      if (!j.frozen) j.fill += delta;
    }
    for (std::uint32_t r : comp_res_) {
      resource& res = resources_[r];
      res.residual -= delta * res.active;
    }
    std::size_t before = unfrozen;
    for (std::uint32_t s : comp_jobs_) {
      job& j = jobs_[s];
      if (j.frozen) continue;
      const double cap = j.max_rate * j.usage;
      bool freeze = j.fill >= cap * (1 - 1e-12);
      if (freeze) j.capped = true;
      for (std::uint32_t i = 0; i < j.nres && !freeze; ++i) {
        const resource& res = resources_[j.res[i]];
        freeze = res.residual <= res.capacity * 1e-12;
      }
      if (freeze) {
        j.frozen = true;
        --unfrozen;
        for (std::uint32_t i = 0; i < j.nres; ++i) --resources_[j.res[i]].active;
      }
    }
    if (unfrozen == before) break;  // cannot happen with positive capacities; never loop forever
  }
  for (std::uint32_t s : comp_jobs_) {
    job& j = jobs_[s];
    const double rate = j.capped ? j.max_rate : j.fill / j.usage;
    if (rate == j.rate && j.rate > 0) continue;  // unchanged: its scheduled end stands
    if (j.rate > 0) {
      j.work -= j.rate * static_cast<double>((now - j.last).count()) / 1e12;
      if (j.work < 0) j.work = 0;
    }
    j.last = now;
    j.rate = rate;
    if (!(rate > 0)) continue;  // starved (cannot happen with positive capacities)
    schedule(s, later(now, transfer_time(j.work, rate)));
  }
}

void device_model::remember(std::uint32_t slot) {
  const std::size_t cap = opts_.explain_history;
  if (cap == 0) return;
  const job& j = jobs_[slot];
  const kernel_cost& cost = job_costs_[slot];
  const task_info& t = *j.task;
  const std::size_t at = static_cast<std::size_t>(t.id % cap);
  if (history_.size() <= at) history_.resize(std::min(cap, std::max<std::size_t>(at + 1, history_.size() * 2)));
  task_explanation& x = history_[at];
  x.task = t.id;
  x.device = t.device;
  x.stream = t.stream;
  x.name = t.name.empty() && t.kernel ? t.kernel->display_name() : t.name;
  x.cost = cost;
  x.start = t.start;
  x.body_start = j.body_start;
  x.end = t.end;
  x.contention = (t.end - t.start) - cost.total;
}

std::optional<task_explanation> device_model::explain(std::uint64_t task) const {
  const std::size_t cap = opts_.explain_history;
  if (cap == 0 || task == 0) return std::nullopt;
  const std::size_t at = static_cast<std::size_t>(task % cap);
  if (at >= history_.size() || history_[at].task != task) return std::nullopt;
  return history_[at];
}

}  // namespace npurt::sim

#undef NPURT_SIM_HOT
