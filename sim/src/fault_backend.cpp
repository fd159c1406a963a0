// The fault layer: carries out a fault_plan between the runtime and a wrapped backend.
#include <npurt/collective_types.hpp>
#include <npurt/detail/memory_registry.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/reference_kernels.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

namespace npurt::sim {

namespace {

constexpr sim_time never = sim_time::max();

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool is_task_fault(fault_kind k) noexcept {
  return k == fault_kind::aicore_exception || k == fault_kind::kernel_hang || k == fault_kind::hbm_ecc;
}

bool fatal(std::error_code ec) noexcept {
  return ec == errc::hbm_ecc_error || ec == errc::lost_heartbeat || ec == errc::device_lost;
}

bool overlaps(std::uint64_t a, std::size_t an, std::uint64_t b, std::size_t bn) noexcept {
  return an != 0 && bn != 0 && a < b + bn && b < a + an;
}

// Whether device memory [p, p + n) of the fault's device meets its damaged region. Each system
// has its own device address spaces, so the region is an offset range in the device's space: a
// plan written before its system exists names it with a pointer of another system of the same
// configuration (the same allocations give the same offsets).
bool in_region(const void* p, std::size_t n, const fault_spec& f) noexcept {
  constexpr std::uint64_t offset = detail::address_space_bytes - 1;
  return overlaps(reinterpret_cast<std::uintptr_t>(p) & offset, n, f.address & offset, f.bytes);
}

sim_time add(sim_time t, picoseconds d) noexcept {
  if (d.count() <= 0) return t;
  if (t.time_since_epoch().count() > std::numeric_limits<std::int64_t>::max() - d.count()) return never;
  return t + d;
}

}  // namespace

fault_backend::fault_backend(std::unique_ptr<npurt::backend> inner, fault_plan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {
  if (!inner_) throw_error(make_error_code(errc::null_pointer), "fault_backend: no backend to wrap");
  std::string what;
  if (const auto ec = npurt::validate(plan_, inner_->device_count(), &what)) throw_error(ec, what);
  specs_.resize(plan_.faults.size());
  devices_.resize(inner_->device_count());
  if (!devices_.empty()) op_timeout_ = inner_->properties(0).op_execute_timeout;
}

fault_backend::~fault_backend() = default;

void fault_backend::attach(backend_host& host) {
  host_ = &host;
  inner_->attach(*this);
  // A device that falls silent at a time must do so even while its work is in flight (its
  // peers' collectives must notice): the one trigger that needs a timer of its own.
  for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
    const fault_spec& f = plan_.faults[i];
    if (f.kind == fault_kind::lost_heartbeat && f.trigger == fault_trigger::at_time)
      host_->call_at(std::max(f.at, host_->now()), &fault_backend::on_silence, this, i);
  }
}

void fault_backend::enable_fault_detection(picoseconds interval) {
  // A negative interval is a mistake, not a request to turn the monitor off: saying so beats
  // running without detection the caller believes is on.
  if (interval.count() < 0)
    throw_error(make_error_code(errc::invalid_argument),
                "fault_backend::enable_fault_detection: negative interval " + std::to_string(interval.count()) + " ps");
  heartbeat_ = interval;
}

std::uint64_t fault_backend::add_exception_callback(std::function<void(const exception_info&)> fn) {
  const std::uint64_t h = next_callback_++;
  callbacks_.emplace(h, std::move(fn));
  return h;
}

void fault_backend::remove_exception_callback(std::uint64_t handle) { callbacks_.erase(handle); }

void fault_backend::record(std::size_t spec, device_id dev, std::uint64_t task) {
  records_.push_back({spec, plan_.faults[spec].kind, dev, host_->now(), task});
}

bool fault_backend::trial(std::size_t spec, std::uint64_t key) const noexcept {
  const double rate = plan_.faults[spec].rate;
  if (rate <= 0) return false;
  const std::uint64_t h = splitmix64(plan_.seed ^ splitmix64(spec * 0x100000001b3ULL + splitmix64(key)));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < rate;
}

bool fault_backend::window_active(std::size_t i) const noexcept {
  const fault_spec& f = plan_.faults[i];
  const spec_state& st = specs_[i];
  if (st.done || !st.started) return false;
  const sim_time t = host_->now();
  if (t < st.start) return false;
  if (f.duration.count() > 0 && t >= add(st.start, f.duration)) return false;
  if (f.kind == fault_kind::link_flap) {
    const auto phase = (t - st.start).count() / f.period.count();
    return phase % 2 == 0;
  }
  return true;
}

double fault_backend::slowdown(device_id dev) const noexcept {
  double s = 1;
  for (std::size_t i = 0; i < plan_.faults.size(); ++i)
    if (plan_.faults[i].kind == fault_kind::thermal_throttle && plan_.faults[i].device == dev && window_active(i))
      s = std::max(s, plan_.faults[i].factor);
  return s;
}

device_status fault_backend::status(device_id dev) const noexcept {
  if (dev < 0 || static_cast<std::size_t>(dev) >= devices_.size()) return device_status::healthy;
  const device_state& d = devices_[static_cast<std::size_t>(dev)];
  if (d.lost) return device_status::lost;
  if (d.silent_since && heartbeat_.count() > 0) {
    const auto hb = heartbeat_.count();
    const sim_time det{picoseconds{(d.silent_since->time_since_epoch().count() / hb + 1) * hb}};
    if (host_->now() >= det) return device_status::lost;
  }
  return slowdown(dev) > 1 ? device_status::throttled : device_status::healthy;
}

bool fault_backend::touches(const task_info& t, const fault_spec& f) const noexcept {
  if (t.kind == task_kind::memcpy || t.kind == task_kind::memset) {
    if (f.bytes == 0) return true;
    const bool dst = t.copy.dst_device == f.device && in_region(t.copy.dst, t.copy.dst_span(), f);
    const bool src =
        t.kind == task_kind::memcpy && t.copy.src_device == f.device && in_region(t.copy.src, t.copy.src_span(), f);
    return dst || src;
  }
  if (t.kind != task_kind::kernel) return false;
  if (f.bytes == 0) return true;
  if (!t.kernel || t.device != f.device) return false;  // no memory (kernels::fixed), or another device's
  for (const operand& o : operands(t.kernel->op))
    if (o.tensor && o.tensor->data && in_region(o.tensor->data, o.tensor->bytes(), f)) return true;
  return false;
}

void fault_backend::notice_windows() {
  // Windows set for a time open then for every device, whether or not their own device has
  // run a task since: a link that went down at t fails its peers' collectives from t on.
  const sim_time now = host_->now();
  for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
    const fault_spec& f = plan_.faults[i];
    spec_state& st = specs_[i];
    if (st.done || st.started || st.hits > 0 || f.trigger != fault_trigger::at_time || now < f.at) continue;
    if (is_task_fault(f.kind) || f.kind == fault_kind::lost_heartbeat || f.kind == fault_kind::transient_oom) continue;
    st.started = true;
    st.start = f.at;
    ++st.hits;
    records_.push_back({i, f.kind, f.device, f.at, 0});
  }
}

void fault_backend::evaluate_triggers(task_info& t, std::uint64_t stream_pos) {
  const sim_time now = host_->now();
  for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
    const fault_spec& f = plan_.faults[i];
    spec_state& st = specs_[i];
    if (st.done || f.device != t.device) continue;
    bool fire = false;
    sim_time start = now;
    switch (f.trigger) {
      case fault_trigger::at_time:
        fire = !st.started && !st.armed && st.hits == 0 && now >= f.at;
        start = f.at;
        break;
      case fault_trigger::at_task:
        fire = st.hits == 0 && !st.armed && t.stream == f.stream && stream_pos == f.task;
        break;
      case fault_trigger::random: {
        const bool room = f.max_hits == 0 || st.hits < f.max_hits;
        const bool eligible = f.kind == fault_kind::aicore_exception || f.kind == fault_kind::kernel_hang
                                  ? t.kind == task_kind::kernel
                              : f.kind == fault_kind::hbm_ecc ? touches(t, f)
                                                              : true;
        fire = room && !st.armed && !window_active(i) && eligible && trial(i, t.id);
        break;
      }
    }
    if (!fire) continue;
    ++st.hits;
    if (is_task_fault(f.kind)) {
      st.armed = true;  // recorded when it hits its task
      continue;
    }
    record(i, t.device, t.id);
    if (f.kind == fault_kind::lost_heartbeat) {
      st.started = true;
      start_silence(t.device, now);
      continue;
    }
    st.started = true;
    st.start = start;
    if (f.kind == fault_kind::transient_oom) st.oom_left = f.count;
  }
}

void fault_backend::on_silence(void* self, std::uint64_t spec) {
  auto& fb = *static_cast<fault_backend*>(self);
  spec_state& st = fb.specs_[spec];
  if (st.done || st.started) return;
  st.started = true;
  ++st.hits;
  const device_id dev = fb.plan_.faults[spec].device;
  fb.record(spec, dev, 0);
  fb.start_silence(dev, fb.host_->now());
}

void fault_backend::start_silence(device_id dev, sim_time since) {
  device_state& d = devices_[static_cast<std::size_t>(dev)];
  if (d.silent_since) return;
  d.silent_since = since;
  // The device's work in the wrapped backend stops where it is: take it out (the backend frees
  // its engines and fails the collectives the device was part of), and hold it here until the
  // monitor or a watchdog speaks for it.
  std::vector<task_info*> mine;
  for (const auto& [id, t] : inflight_)
    if (t->device == dev) mine.push_back(t);
  std::sort(mine.begin(), mine.end(), [](const task_info* a, const task_info* b) { return a->id < b->id; });
  for (task_info* t : mine) {
    inflight_.erase(t->id);
    unwatch(*t);
  }
  // The wrapped backend takes the abort for a reset and notes it as one on the communicators it
  // touches; their ranks hear the silence (lost_heartbeat, remote_error or a watchdog's timeout)
  // when this layer releases them, and HcclGetCommAsyncError must report that instead.
  struct noted {
    collective_comm_state* comm;
    std::error_code error;
    std::size_t message, records;
  };
  std::vector<noted> before;
  auto keep = [&](const task_info& t) {
    if (t.kind != task_kind::collective || !t.collective || !t.collective->comm) return;
    collective_comm_state& c = *t.collective->comm;
    if (std::find(c.devices.begin(), c.devices.end(), dev) == c.devices.end()) return;
    for (const noted& n : before)
      if (n.comm == &c) return;
    before.push_back({&c, c.async_error, c.message.size(), c.records.size()});
  };
  for (const task_info* t : mine) keep(*t);
  for (const auto& [id, t] : inflight_) keep(*t);
  inner_->abort(dev);
  for (const noted& n : before) {
    n.comm->async_error = n.error;
    n.comm->message.resize(n.message);
    n.comm->records.resize(n.records);
  }
  for (task_info* t : mine) hold_collective(*t, silent_error(*t, dev), silent_release_time(*t, dev), true, false, dev);
}

sim_time fault_backend::silent_release_time(const task_info& t, device_id silent_dev) const noexcept {
  const sim_time now = host_->now();
  if (heartbeat_.count() > 0) {
    const device_state& d = devices_[static_cast<std::size_t>(silent_dev)];
    const auto hb = heartbeat_.count();
    const sim_time det{picoseconds{(d.silent_since->time_since_epoch().count() / hb + 1) * hb}};
    return std::max(now, det);
  }
  const picoseconds limit = silent_watchdog(t).second;
  if (limit.count() <= 0) return never;
  return std::max(now, add(t.start, limit));
}

std::pair<timeout_kind, picoseconds> fault_backend::silent_watchdog(const task_info& t) const noexcept {
  if (t.kind != task_kind::collective) return {timeout_kind::op_execute, op_timeout_};
  // The communicator's timeout is already resolved against the preset; none means never.
  if (t.collective && t.collective->comm) {
    const std::optional<picoseconds> comm_limit = t.collective->comm->exec_timeout;
    return {timeout_kind::collective_exec, comm_limit ? *comm_limit : picoseconds{0}};
  }
  return {timeout_kind::collective_exec, inner_->properties(t.device).hccl_exec_timeout};
}

bool fault_backend::watched(const task_info& t) const noexcept {
  if (op_timeout_.count() <= 0) return false;
  return t.kind == task_kind::kernel ||
         ((t.kind == task_kind::memcpy || t.kind == task_kind::memset) && t.engine != engine_kind::host);
}

void fault_backend::arm_watch(std::uint64_t task_id, sim_time at, picoseconds limit) {
  if (at == never) return;
  // Cancellable: a task that ends in time takes its watchdog back, so the clock never moves to
  // a deadline nobody needed and traces stay as they are without the watchdog.
  watches_[task_id] = watch{host_->call_at_cancellable(at, &fault_backend::on_watchdog, this, task_id), limit};
}

void fault_backend::unwatch(task_info& t) {
  if (auto w = watches_.find(t.id); w != watches_.end()) {
    host_->cancel_timer(w->second.ticket);
    watches_.erase(w);
  }
  if (t.start == never) t.start = t.ready;  // never started in the wrapped backend
}

void fault_backend::on_watchdog(void* self, std::uint64_t task_id) {
  static_cast<fault_backend*>(self)->watchdog(task_id);
}

void fault_backend::watchdog(std::uint64_t task_id) {
  auto w = watches_.find(task_id);
  if (w == watches_.end()) return;
  const picoseconds limit = w->second.limit;
  watches_.erase(w);
  auto it = inflight_.find(task_id);
  if (it == inflight_.end()) return;
  task_info& t = *it->second;
  const sim_time now = host_->now();
  // The watchdog counts from the task's start on its engine, not from its submission: a task
  // still queued behind others (start not yet written) is looked at again one limit later.
  if (t.start == never) return arm_watch(task_id, add(now, limit), limit);
  if (const sim_time deadline = add(t.start, limit); deadline > now) return arm_watch(task_id, deadline, limit);
  // As the AI-core watchdog: the task is ended where it is, its engine freed, and it fails. A
  // backend that cannot end one task lets it run to its end.
  if (!inner_->cancel(t)) return;
  inflight_.erase(it);
  fail_with_.erase(task_id);
  t.end = now;
  deliver(t, make_error_code(errc::task_timeout), timeout_kind::op_execute, limit);
}

std::error_code fault_backend::silent_error(const task_info& t, device_id silent_dev) const noexcept {
  if (heartbeat_.count() > 0)
    return make_error_code(silent_dev == t.device ? errc::lost_heartbeat : errc::remote_error);
  return make_error_code(t.kind == task_kind::collective ? errc::collective_timeout : errc::task_timeout);
}

std::error_code fault_backend::collective_fate(const task_info& t, device_id* silent_member) {
  *silent_member = -1;
  if (!t.collective || !t.collective->comm) return {};
  const auto& comm = *t.collective->comm;
  for (device_id m : comm.devices) {
    if (m < 0 || static_cast<std::size_t>(m) >= devices_.size()) continue;
    const device_state& d = devices_[static_cast<std::size_t>(m)];
    if (d.lost || status(m) == device_status::lost) return make_error_code(errc::remote_error);
    if (d.silent_since && *d.silent_since <= host_->now()) {
      *silent_member = m;
      return make_error_code(errc::remote_error);
    }
  }
  if (comm.size() < 2) return {};
  const std::uint64_t seq = t.collective->sequence.empty() ? 0 : t.collective->sequence.front();
  const auto key = std::make_pair(comm.id, seq);
  if (auto it = fates_.find(key); it != fates_.end()) {
    const std::error_code ec = it->second.first;
    if (++it->second.second >= comm.size()) fates_.erase(it);
    return ec;
  }
  std::error_code ec;
  for (std::size_t i = 0; i < plan_.faults.size() && !ec; ++i) {
    const fault_spec& f = plan_.faults[i];
    if (!window_active(i)) continue;
    if (f.kind == fault_kind::link_down || f.kind == fault_kind::link_flap) {
      if (std::find(comm.devices.begin(), comm.devices.end(), f.device) != comm.devices.end())
        ec = make_error_code(errc::link_failure);
    } else if (f.kind == fault_kind::network_interruption) {
      const auto server = [&](device_id d) { return static_cast<std::uint32_t>(d) / f.server_size; };
      for (device_id m : comm.devices)
        if (server(m) != server(comm.devices.front())) ec = make_error_code(errc::link_failure);
    }
  }
  fates_.emplace(key, std::make_pair(ec, 1u));
  return ec;
}

void fault_backend::submit(task_info& t) {
  const auto dev = static_cast<std::size_t>(t.device);
  device_state& d = devices_[dev];
  const std::uint64_t pos = ++d.stream_tasks[t.stream];
  const sim_time now = host_->now();
  if (status(t.device) == device_status::lost) {
    hold_collective(t, make_error_code(errc::device_lost), now);  // until reset, nothing runs on it
    return;
  }
  notice_windows();
  evaluate_triggers(t, pos);
  if (d.silent_since && *d.silent_since <= now) {
    hold_collective(t, silent_error(t, t.device), silent_release_time(t, t.device), true, false, t.device);
    return;
  }
  bool hung = false;
  for (std::size_t i = 0; i < plan_.faults.size() && !hung; ++i) {
    const fault_spec& f = plan_.faults[i];
    spec_state& st = specs_[i];
    if (!st.armed || f.device != t.device) continue;
    if (f.kind == fault_kind::kernel_hang && t.kind == task_kind::kernel) {
      st.armed = false;
      record(i, t.device, t.id);
      if (hang_in_place(t)) {
        hung = true;
        continue;
      }
      // No watchdog to end it: it never completes, whatever it would have held.
      hold(t, make_error_code(errc::task_timeout), never);
      return;
    }
    if (f.kind == fault_kind::aicore_exception && t.kind == task_kind::kernel && !fail_with_.contains(t.id)) {
      st.armed = false;
      record(i, t.device, t.id);
      fail_with_[t.id] = make_error_code(errc::kernel_fault);
    } else if (f.kind == fault_kind::hbm_ecc && touches(t, f)) {
      st.armed = false;
      st.done = true;  // the region stays bad, and the device lost, until a reset repairs it
      record(i, t.device, t.id);
      fail_with_[t.id] = make_error_code(errc::hbm_ecc_error);
    }
  }
  if (t.kind == task_kind::collective) {
    device_id silent_member = -1;
    if (const std::error_code ec = collective_fate(t, &silent_member)) {
      if (silent_member >= 0)
        hold_collective(t, silent_error(t, silent_member), silent_release_time(t, silent_member), false, true,
                        silent_member);
      else hold_collective(t, ec, now);
      return;
    }
  }
  // The wrapped backend slows the task itself, so that it holds its cores, channel or (a
  // collective's part) its links and reductions for as long as it runs.
  if (const double s = slowdown(t.device); s > 1 && !hung) t.slowdown = s;
  inflight_[t.id] = &t;
  if (watched(t)) {
    t.start = never;  // the wrapped backend writes the start when the task reaches its engine
    arm_watch(t.id, add(now, op_timeout_), op_timeout_);
  }
  inner_->submit(t);
}

bool fault_backend::hang_in_place(task_info& t) {
  // A hung kernel keeps its AI cores, and the tasks queued behind it wait, until the watchdog
  // ends it at start + limit (CANN's AI-core watchdog): the wrapped backend runs it infinitely
  // slowly, on the engine and cores it would have used.
  if (op_timeout_.count() <= 0) return false;
  t.slowdown = std::numeric_limits<double>::infinity();
  // Should the wrapped backend be unable to end it early, it still fails as a hang.
  fail_with_[t.id] = make_error_code(errc::task_timeout);
  return true;
}

void fault_backend::complete(task_info& t, std::error_code ec) {
  inflight_.erase(t.id);
  picoseconds limit{0};
  if (auto w = watches_.find(t.id); w != watches_.end()) {
    limit = w->second.limit;
    host_->cancel_timer(w->second.ticket);
    watches_.erase(w);
  }
  const device_state& d = devices_[static_cast<std::size_t>(t.device)];
  const sim_time now = host_->now();
  if (d.silent_since && *d.silent_since <= now) {
    // A silent device reports nothing: the monitor or the watchdog will.
    fail_with_.erase(t.id);
    hold(t, silent_error(t, t.device), silent_release_time(t, t.device), true, false, t.device);
    return;
  }
  if (t.kind == task_kind::collective && ec == errc::operation_aborted && t.collective && t.collective->comm) {
    for (device_id m : t.collective->comm->devices) {
      if (m < 0 || static_cast<std::size_t>(m) >= devices_.size() || m == t.device) continue;
      if (const auto& md = devices_[static_cast<std::size_t>(m)]; md.silent_since && *md.silent_since <= now) {
        hold_collective(t, silent_error(t, m), silent_release_time(t, m), false, true, m);
        return;
      }
      if (devices_[static_cast<std::size_t>(m)].lost) {
        ec = make_error_code(errc::remote_error);
        break;
      }
    }
  }
  if (auto it = fail_with_.find(t.id); it != fail_with_.end()) {
    ec = it->second;
    fail_with_.erase(it);
  }
  // A hung kernel that a backend without cancel() ran to its end: still its watchdog's timeout.
  if (is_timeout(ec) && limit.count() > 0) return deliver(t, ec, timeout_kind::op_execute, limit);
  deliver(t, ec);
}

void fault_backend::hold(task_info& t, std::error_code ec, sim_time at, bool silent, bool remote,
                         device_id silent_device) {
  held_task h{&t, ec, timeout_kind::op_execute, picoseconds{0}, 0, false, silent, remote, silent_device};
  if (is_timeout(ec)) std::tie(h.timer, h.limit) = silent_watchdog(t);
  if (at != never) {
    h.ticket = host_->call_at_cancellable(at, &fault_backend::on_release, this, t.id);
    h.timed = true;
  }
  held_[t.id] = h;
}

void fault_backend::on_release(void* self, std::uint64_t task_id) {
  static_cast<fault_backend*>(self)->release(task_id);
}

void fault_backend::release(std::uint64_t task_id) {
  auto it = held_.find(task_id);
  if (it == held_.end()) return;
  const held_task h = it->second;
  held_.erase(it);
  task_info& t = *h.task;
  const sim_time now = host_->now();
  if (t.start > now) t.start = now;
  if (t.end < now) t.end = now;
  if (h.silent && h.silent_device == t.device) devices_[static_cast<std::size_t>(t.device)].lost = true;
  if (h.unseen && h.ec) note_collective_failure(t, h.ec);
  deliver(t, h.ec, h.timer, h.limit);
}

void fault_backend::hold_collective(task_info& t, std::error_code ec, sim_time at, bool silent, bool remote,
                                    device_id silent_device) {
  hold(t, ec, at, silent, remote, silent_device);
  if (t.kind == task_kind::collective) held_[t.id].unseen = true;
}

void fault_backend::note_collective_failure(const task_info& t, std::error_code ec) {
  // The collective engine notes the failures it sees (async_error, message, records); one this
  // layer decides never reaches it, and HcclGetCommAsyncError must still report it.
  if (!t.collective || !t.collective->comm) return;
  collective_comm_state& c = *t.collective->comm;
  const collective_op op = t.collective->calls.empty() ? collective_op::all_reduce : t.collective->calls.front().op;
  const bool p2p = op == collective_op::send || op == collective_op::recv;
  const std::uint64_t seq = t.collective->sequence.empty() ? 0 : t.collective->sequence.front();
  const std::string message = std::string(to_string(op)) + " #" + std::to_string(seq) + " of communicator '" + c.name +
                              "' (id " + std::to_string(c.id) + ") failed on rank " +
                              std::to_string(t.collective->rank) + " (device " + std::to_string(t.device) +
                              "): " + ec.message();
  if (t.collective->failure.empty()) t.collective->failure = message;
  const auto [it, first] = noted_.try_emplace(std::make_tuple(c.id, seq, p2p), 0u);
  if (++it->second >= (p2p ? 2u : c.size())) noted_.erase(it);
  if (!first) return;
  if (!c.async_error) c.async_error = ec;
  if (!c.message.empty()) c.message += "\n";
  c.message += message;
  if (c.keep_records) {
    collective_record r;
    r.sequence = seq;
    r.op = op;
    r.arrival.assign(c.size(), sim_time{});
    r.start = r.end = host_->now();
    r.error = ec;
    c.records.push_back(std::move(r));
  }
}

void fault_backend::deliver(task_info& t, std::error_code ec, timeout_kind timer, picoseconds limit) {
  if (fatal(ec) && !devices_[static_cast<std::size_t>(t.device)].lost) {
    devices_[static_cast<std::size_t>(t.device)].lost = true;
    fail_peer_collectives(t.device);
  }
  if (ec && !callbacks_.empty()) {
    const exception_info info{t.device, t.stream, t.id, ec, host_->now(), t.name};
    // A callback may add or remove callbacks, itself included (a one-shot one): the report goes
    // to those registered when it began and not removed since, and the one running is a copy,
    // so that removing it does not destroy it mid-call.
    std::vector<std::uint64_t> handles;
    handles.reserve(callbacks_.size());
    for (const auto& [h, fn] : callbacks_) handles.push_back(h);
    for (const std::uint64_t h : handles) {
      const auto it = callbacks_.find(h);
      if (it == callbacks_.end()) continue;
      const std::function<void(const exception_info&)> fn = it->second;
      fn(info);
    }
  }
  if (limit.count() > 0 && is_timeout(ec)) host_->complete_timeout(t, ec, timer, limit);
  else host_->complete(t, ec);
}

void fault_backend::fail_peer_collectives(device_id dev) {
  // The lost device will never join the collectives its peers already wait in: end them (the
  // peers then hear remote_error) instead of leaving them to the exec timeout.
  std::vector<std::uint64_t> comms;
  for (const auto& [id, t] : inflight_) {
    if (t->kind != task_kind::collective || !t->collective || !t->collective->comm) continue;
    const auto& members = t->collective->comm->devices;
    if (std::find(members.begin(), members.end(), dev) != members.end()) comms.push_back(t->collective->comm->id);
  }
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  for (std::uint64_t c : comms) inner_->abort_collectives(c);
}

bool fault_backend::cancel(task_info& t) {
  if (t.kind == task_kind::collective) return false;  // its ranks' fates are decided together
  if (auto h = held_.find(t.id); h != held_.end()) {
    if (h->second.timed) host_->cancel_timer(h->second.ticket);
    held_.erase(h);
    fail_with_.erase(t.id);
    return true;
  }
  const auto it = inflight_.find(t.id);
  if (it == inflight_.end() || !inner_->cancel(t)) return false;
  inflight_.erase(it);
  fail_with_.erase(t.id);
  unwatch(t);
  return true;
}

void fault_backend::abort(device_id dev) {
  // Forget the device's held and in-flight tasks without completing them, as the wrapped
  // backend forgets its own: the runtime drops the records.
  std::vector<std::uint64_t> ids;
  for (const auto& [id, h] : held_)
    if (h.task->device == dev) ids.push_back(id);
  for (std::uint64_t id : ids) {
    if (held_[id].timed) host_->cancel_timer(held_[id].ticket);
    held_.erase(id);
    fail_with_.erase(id);
  }
  std::erase_if(inflight_, [this, dev](const auto& kv) {
    if (kv.second->device != dev) return false;
    unwatch(*kv.second);
    return true;
  });
  std::erase_if(fail_with_,
                [this, dev](const auto& kv) { return !inflight_.contains(kv.first) && !held_.contains(kv.first); });
  inner_->abort(dev);
  device_state& d = devices_[static_cast<std::size_t>(dev)];
  const bool was_silent = d.silent_since.has_value();
  d.lost = false;
  d.silent_since.reset();
  // A reset repairs what a reset repairs: the silence and the damaged memory end; armed task
  // faults and windows (a throttle, a link) go on.
  for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
    const fault_spec& f = plan_.faults[i];
    if (f.device != dev) continue;
    if ((f.kind == fault_kind::lost_heartbeat && (was_silent || specs_[i].started)) || f.kind == fault_kind::hbm_ecc) {
      if (specs_[i].started || specs_[i].hits > 0) specs_[i].done = f.trigger != fault_trigger::random;
      specs_[i].started = false;
    }
  }
}

std::error_code fault_backend::admit_allocation(device_id dev, std::size_t /*bytes*/) {
  if (dev < 0 || static_cast<std::size_t>(dev) >= devices_.size()) return {};
  if (status(dev) == device_status::lost) return make_error_code(errc::device_lost);
  device_state& d = devices_[static_cast<std::size_t>(dev)];
  const std::uint64_t n = ++d.allocations;
  for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
    const fault_spec& f = plan_.faults[i];
    spec_state& st = specs_[i];
    if (f.kind != fault_kind::transient_oom || f.device != dev || st.done) continue;
    if (f.trigger == fault_trigger::at_time && !st.started && st.hits == 0 && host_->now() >= f.at) {
      st.started = true;
      st.oom_left = f.count;
      ++st.hits;
      record(i, dev, 0);
    } else if (f.trigger == fault_trigger::random && st.oom_left == 0 && (f.max_hits == 0 || st.hits < f.max_hits) &&
               trial(i, n | (1ULL << 63))) {
      st.oom_left = f.count;
      ++st.hits;
      record(i, dev, 0);
    }
    if (st.oom_left > 0) {
      --st.oom_left;
      return make_error_code(errc::out_of_memory);
    }
  }
  return {};
}

std::unique_ptr<npurt::backend> make_backend(const faulty_preset& p) {
  return std::make_unique<fault_backend>(make_backend(p.hardware, p.options), p.plan);
}

fault_backend& faults_of(npurt::system& sys) {
  if (auto* fb = as_faulty(sys.get_backend())) return *fb;
  throw_error(make_error_code(errc::invalid_argument), "faults_of: the system was not built on a fault_backend");
}

}  // namespace npurt::sim
