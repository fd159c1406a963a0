// npurt/impl/runtime.ipp — bodies of detail::runtime.
#pragma once

#include <npurt/detail/runtime.hpp>

#include <mimalloc.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace npurt::detail {

namespace {
constexpr std::size_t device_granule = 512;  // aclrtMalloc-style alignment of device allocations
constexpr std::size_t round_up(std::size_t v, std::size_t g) noexcept { return (v + g - 1) / g * g; }
}  // namespace

NPURT_DECL runtime::runtime(std::unique_ptr<npurt::backend> b, const system_options& opts)
    : opts_(opts), backend_(std::move(b)) {
  if (!backend_) throw_error(make_error_code(errc::invalid_argument), "npurt::system: null backend");
  streams_.emplace_back();  // id 0 means "no stream"
  events_.emplace_back();   // id 0 means "a task event"
  const std::size_t n = backend_->device_count();
  next_address_.resize(n);
  used_.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d)
    next_address_[d] = device_address_base | (static_cast<std::uint64_t>(d) << device_address_shift) | 0x10000;
  backend_->attach(*this);
  queue_.configure(opts_.dispatch);
}

NPURT_DECL runtime::~runtime() {
  // Whoever still waits is told the system is going away; the io_context then destroys the
  // posted handlers (and with them any suspended coroutine frames) without running them.
  for (auto& sp : streams_) {
    if (!sp) continue;
    for (task* t = sp->head; t;) {
      task* next = t->next;
      if (t->waiter) t->waiter->complete(make_error_code(errc::operation_aborted));
      free_task(t);
      t = next;
    }
    sp->head = sp->tail = nullptr;
    for (auto& [seq, w] : sp->waiters) w.fn(*this, w.ctx, w.arg, make_error_code(errc::operation_aborted));
    sp->waiters.clear();
  }
  for (auto& [addr, a] : allocations_)
    if (a.backing) mi_free(a.backing);
  for (auto& [p, h] : host_allocations_) mi_free(const_cast<void*>(p));
}

// ---------------------------------------------------------------------------------------------
// Timed actions and the loop

NPURT_DECL void runtime::call_at(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx, std::uint64_t arg) {
  if (at <= now_)
    now_queue_.push_back({now_, order_++, fn, ctx, arg});
  else
    timers_.push({at, order_++, fn, ctx, arg});
}

NPURT_DECL std::uint64_t runtime::call_at_cancellable(sim_time at, void (*fn)(void*, std::uint64_t), void* ctx,
                                                      std::uint64_t arg) {
  const std::uint64_t ticket = order_;
  timers_.push({std::max(at, now_), order_++, fn, ctx, arg});
  return ticket;
}

NPURT_DECL void runtime::cancel_timer(std::uint64_t ticket) { cancelled_.insert(ticket); }

NPURT_DECL bool runtime::step() {
  // Host first: handlers posted by completions resume at the virtual time they were posted.
  if (posts_ != 0) {
    posts_ = 0;
    // poll() runs until no handler is ready, including those posted while it runs, so
    // afterwards only device-side completions (counted in posts_) can make more ready.
    const std::size_t n = ioc_.poll();
    if (ioc_.stopped()) ioc_.restart();
    if (n != 0) return true;
  }
  if (now_head_ < now_queue_.size()) {
    // Actions appended while running are due now as well: run them in call order.
    while (now_head_ < now_queue_.size()) {
      const timed_action a = now_queue_[now_head_++];
      a.fn(a.ctx, a.arg);
    }
    now_queue_.clear();
    now_head_ = 0;
    return true;
  }
  while (!timers_.empty() && !cancelled_.empty() && cancelled_.erase(timers_.top().order) != 0) timers_.pop();
  if (!timers_.empty()) {
    const timed_action a = timers_.top();
    timers_.pop();
    now_ = a.at;
    a.fn(a.ctx, a.arg);
    return true;
  }
  // Nothing timed: one last look for host work posted from outside our accounting.
  const std::size_t n = ioc_.poll();
  if (ioc_.stopped()) ioc_.restart();
  return n != 0;
}

NPURT_DECL void runtime::run_until(const std::function<bool()>& pred, std::error_code& ec) {
  ec.clear();
  if (running_) {
    ec = make_error_code(errc::not_supported);  // a blocking wait inside run(): use the async form
    return;
  }
  running_ = true;
  posts_ = 1;  // handlers posted before run() (co_spawn) have not been counted
  bool deadlocked = false;
  const std::size_t reports_before = deadlock_report_.size();
  struct reset_flag {
    bool& f;
    ~reset_flag() { f = false; }
  } guard{running_};
  for (;;) {
    if (pred && pred()) break;
    if (step()) continue;
    if (tasks_.live() == 0 && host_waits_ == 0) break;
    deadlocked = true;
    if (!resolve_deadlock(false)) break;
  }
  if (deadlocked || deadlock_report_.size() != reports_before) ec = make_error_code(errc::deadlock);
  if (!ec && pred && !pred()) ec = make_error_code(errc::deadlock);
}

NPURT_DECL void runtime::run(std::error_code& ec) {
  deadlock_report_.clear();
  run_until({}, ec);
}

// ---------------------------------------------------------------------------------------------
// Deadlock detection

NPURT_DECL bool runtime::wait_cycle_from(const stream_state& s) const {
  const stream_state* cur = &s;
  for (std::size_t hops = 0; hops <= streams_.size(); ++hops) {
    const task* h = cur->head;
    if (!h || h->kind != task_kind::event_wait || !h->blocked) return false;
    if (h->target_stream == 0) return false;  // its record is not even enqueued yet
    if (h->target_stream == s.id) return true;
    if (h->target_stream >= streams_.size() || !streams_[h->target_stream]) return false;
    cur = streams_[h->target_stream].get();
  }
  return false;
}

NPURT_DECL std::string runtime::describe_wait_chain(const stream_state& s) const {
  std::ostringstream os;
  const task* h = s.head;
  os << "stream " << s.id << " (device " << s.device << ") waits at task " << h->id << " on ";
  if (h->event_id != 0)
    os << "event " << h->event_id;
  else
    os << "a task event";
  if (h->target_stream == 0) {
    os << " (never recorded yet)";
    return os.str();
  }
  os << " = stream " << h->target_stream << " position " << h->target_seq;
  if (h->target_stream < streams_.size() && streams_[h->target_stream]) {
    const stream_state& t = *streams_[h->target_stream];
    os << " (stream " << t.id << " has completed " << t.completed;
    if (t.head) os << ", its head is task " << t.head->id << " " << to_string(t.head->kind);
    os << ")";
  }
  return os.str();
}

NPURT_DECL bool runtime::resolve_deadlock(bool only_cycles) {
  // Every blocked wait is reported; those on a cycle (or all of them, when nothing at all can
  // run) are failed with errc::deadlock so that awaiting code resumes with the error.
  std::vector<stream_state*> blocked;
  for (auto& sp : streams_)
    if (sp && sp->head && sp->head_started && sp->head->kind == task_kind::event_wait && sp->head->blocked &&
        (!only_cycles || wait_cycle_from(*sp)))
      blocked.push_back(sp.get());
  std::ostringstream os;
  os << "deadlock at t=" << to_us(now_.time_since_epoch()) << " us: ";
  if (blocked.empty()) {
    os << host_waits_ << " host operation(s) wait and no stream or device can make progress";
    if (const std::string w = backend_->describe_waits(); !w.empty()) os << "; " << w;
    if (deadlock_report_.empty()) deadlock_report_ = os.str();
    return false;
  }
  bool first = true;
  for (auto* s : blocked) {
    os << (first ? "" : "; ") << describe_wait_chain(*s);
    first = false;
  }
  if (!only_cycles)
    if (const std::string w = backend_->describe_waits(); !w.empty()) os << "; " << w;
  if (!deadlock_report_.empty()) deadlock_report_ += "\n";
  deadlock_report_ += os.str();
  for (auto* s : blocked) {
    task* h = s->head;
    // Detach the wait from what it waited on, then fail it.
    if (h->target_stream == 0) {
      if (auto* e = find_event(h->event_id)) std::erase(e->unbound, h);
    } else if (auto* target = find_stream(h->target_stream)) {
      for (auto it = target->waiters.begin(); it != target->waiters.end(); ++it)
        if (it->second.arg == reinterpret_cast<std::uint64_t>(h)) {
          target->waiters.erase(it);
          break;
        }
    }
    h->blocked = false;
    h->error = make_error_code(errc::deadlock);
    call_at(now_, &runtime::task_done_now, this, reinterpret_cast<std::uint64_t>(h));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Streams and tasks

NPURT_DECL std::uint32_t runtime::create_stream(device_id dev, int priority, std::uint32_t flags) {
  auto s = std::make_unique<stream_state>(ioc_);
  s->id = static_cast<std::uint32_t>(streams_.size());
  s->device = dev;
  s->priority = static_cast<std::uint8_t>(std::clamp(priority, 0, 7));  // out of range clamps, as in CANN
  s->flags = flags;
  s->host_cursor = now_;
  streams_.push_back(std::move(s));
  const auto& st = *streams_.back();
  if (tracing()) fanout_.on_stream_created(dev, st.id, st.priority);
  return st.id;
}

NPURT_DECL void runtime::release_stream(std::uint32_t id) noexcept {
  if (id == 0 || id >= streams_.size() || !streams_[id]) return;
  auto& s = *streams_[id];
  s.destroyed = true;
  if (!s.head && s.waiters.empty()) streams_[id].reset();
}

NPURT_DECL stream_state* runtime::find_stream(std::uint32_t id) noexcept {
  return id < streams_.size() ? streams_[id].get() : nullptr;
}

NPURT_DECL bool runtime::stream_idle(std::uint32_t id) const noexcept {
  if (id >= streams_.size() || !streams_[id]) return true;
  return streams_[id]->head == nullptr;
}

NPURT_DECL bool runtime::position_reached(std::uint32_t stream, std::uint64_t seq) const noexcept {
  if (stream >= streams_.size() || !streams_[stream]) return true;  // freed streams are drained
  return streams_[stream]->completed >= seq;
}

NPURT_DECL void runtime::wait_position(std::uint32_t stream, std::uint64_t seq, const position_waiter& w) {
  if (position_reached(stream, seq)) {
    w.fn(*this, w.ctx, w.arg, {});
    return;
  }
  streams_[stream]->waiters.emplace(seq, w);
}

NPURT_DECL task* runtime::new_task(stream_state& s, task_kind kind) {
  task* t = tasks_.create();
  t->id = next_task_id_++;
  t->device = s.device;
  t->stream = s.id;
  t->priority = s.priority;
  t->kind = kind;
  return t;
}

NPURT_DECL kernel_desc* runtime::new_kernel(const kernel_desc& k) { return kernels_.create(k); }

NPURT_DECL void runtime::free_task(task* t) noexcept {
  if (t->owned_kernel) kernels_.destroy(t->owned_kernel);
  delete t->callback;
  tasks_.destroy(t);
}

NPURT_DECL void runtime::enqueue(stream_state& s, task* t) {
  // The host lane pays the enqueue; the task exists for the device from the moment the call returns.
  s.host_cursor = std::max(s.host_cursor, now_) + opts_.launch_overhead;
  t->submitted = s.host_cursor;
  t->seq = ++s.enqueued;
  if (s.tail)
    s.tail->next = t;
  else
    s.head = t;
  s.tail = t;
  queue_.on_enqueue(*t, s.id, (s.flags & (0x4u | 0x8u)) != 0);  // stream_flags overflow_edge, direct_submit
  if (s.head == t) try_start(s);
}

NPURT_DECL void runtime::try_start(stream_state& s) {
  task* t = s.head;
  if (!t || s.head_started) return;
  if (t->submitted > now_) {
    if (!s.wake_pending) {
      s.wake_pending = true;
      call_at(t->submitted, &runtime::wake_stream, this, s.id);
    }
    return;
  }
  if (!queue_.may_dispatch(*t)) return;  // the device's queue holds earlier tasks: woken on their dispatch
  start_task(s, t);
}

NPURT_DECL void runtime::wake_stream(void* ctx, std::uint64_t stream_id) {
  auto* rt = static_cast<runtime*>(ctx);
  if (auto* s = rt->find_stream(static_cast<std::uint32_t>(stream_id))) {
    s->wake_pending = false;
    rt->try_start(*s);
  }
}

NPURT_DECL void runtime::task_done_now(void* ctx, std::uint64_t task_ptr) {
  auto* rt = static_cast<runtime*>(ctx);
  auto* t = reinterpret_cast<task*>(task_ptr);
  t->end = rt->now_;
  rt->finish_task(*rt->find_stream(t->stream), t);
}

NPURT_DECL void runtime::on_wait_satisfied(runtime& rt, void*, std::uint64_t arg, std::error_code ec) {
  auto* t = reinterpret_cast<task*>(arg);
  t->blocked = false;
  if (ec) t->error = ec;
  // Through the now-queue rather than directly: long chains of waits must not recurse.
  rt.call_at(rt.now_, &runtime::task_done_now, &rt, arg);
}

NPURT_DECL void runtime::start_task(stream_state& s, task* t) {
  s.head_started = true;
  if (const std::uint32_t next = queue_.on_dispatch(*t)) call_at(now_, &runtime::wake_stream, this, next);
  t->ready = now_;
  t->start = now_;
  switch (t->kind) {
    case task_kind::kernel:
    case task_kind::memset:
    case task_kind::collective:
      backend_->submit(*t);
      return;
    case task_kind::memcpy:
      if (t->engine == engine_kind::host) {
        const double secs = static_cast<double>(t->copy.bytes) / opts_.host_copy_bandwidth;
        t->end = now_ + picoseconds{static_cast<std::int64_t>(secs * 1e12 + 0.5)};
        call_at(t->end, [](void* ctx, std::uint64_t p) {
          auto* rt = static_cast<runtime*>(ctx);
          auto* tk = reinterpret_cast<task*>(p);
          rt->perform_copy(*tk);
          rt->finish_task(*rt->find_stream(tk->stream), tk);
        }, this, reinterpret_cast<std::uint64_t>(t));
        return;
      }
      backend_->submit(*t);
      return;
    case task_kind::event_record: {
      if (auto* e = find_event(t->event_id); e && e->stream == s.id && e->seq == t->seq) {
        e->has_time = true;
        e->time = now_;
      }
      call_at(now_, &runtime::task_done_now, this, reinterpret_cast<std::uint64_t>(t));
      return;
    }
    case task_kind::event_wait:
      if (t->target_stream == 0) {
        // A wait made before the event's first record: hold until a record binds it.
        event_state* e = find_event(t->event_id);
        if (!e) {
          t->error = make_error_code(errc::invalid_event);
          call_at(now_, &runtime::task_done_now, this, reinterpret_cast<std::uint64_t>(t));
          return;
        }
        if (e->records == 0) {
          t->blocked = true;
          e->unbound.push_back(t);
          return;
        }
        t->target_stream = e->stream;
        t->target_seq = e->seq;
      }
      if (position_reached(t->target_stream, t->target_seq)) {
        call_at(now_, &runtime::task_done_now, this, reinterpret_cast<std::uint64_t>(t));
        return;
      }
      t->blocked = true;
      streams_[t->target_stream]->waiters.emplace(
          t->target_seq, position_waiter{&runtime::on_wait_satisfied, nullptr, reinterpret_cast<std::uint64_t>(t)});
      // A wait that closes a cycle can never be satisfied: say so now, not at the end of time.
      if (wait_cycle_from(s)) resolve_deadlock(true);
      return;
    case task_kind::host_callback:
      note_post();
      boost::asio::post(s.strand, [this, t] {
        try {
          if (t->callback) (*t->callback)();
        } catch (...) {
          t->error = make_error_code(errc::kernel_fault);
        }
        t->end = now_;
        finish_task(*find_stream(t->stream), t);
      });
      return;
  }
}

NPURT_DECL void runtime::complete(task_info& ti, std::error_code ec) {
  auto& t = static_cast<task&>(ti);
  if (ec) t.error = ec;
  if (!t.error && (t.kind == task_kind::memcpy || t.kind == task_kind::memset)) perform_copy(t);
  finish_task(*find_stream(t.stream), &t);
}

NPURT_DECL void runtime::perform_copy(task& t) {
  if (!backend_->functional()) return;
  const copy_desc& c = t.copy;
  auto resolve = [this](device_id dev, const void* p, std::size_t n) -> std::byte* {
    if (!is_device_address(p)) return static_cast<std::byte*>(const_cast<void*>(p));
    return translate(dev, p, n);
  };
  std::byte* dst = resolve(c.dst_device, c.dst, c.bytes);
  if (!dst) {
    // The memory was freed while the copy was queued: fail the task, touch nothing.
    t.error = make_error_code(errc::invalid_pointer);
    return;
  }
  if (t.kind == task_kind::memset) {
    std::memset(dst, c.value, c.bytes);
    return;
  }
  const std::byte* src = resolve(c.src_device, c.src, c.bytes);
  if (!src) {
    t.error = make_error_code(errc::invalid_pointer);
    return;
  }
  std::memmove(dst, src, c.bytes);
}

NPURT_DECL void runtime::finish_task(stream_state& s, task* t) {
  if (tracing()) {
    fanout_.on_task(*t);
    if (t->kind == task_kind::event_record) {
      fanout_.on_event_record({t->event_id, t->id, t->device, t->stream, t->end});
    } else if (t->kind == task_kind::event_wait) {
      event_wait_info w{t->event_id, t->id, t->device, t->stream, 0, 0, t->target_stream, t->start, t->end};
      if (auto* e = find_event(t->event_id)) {
        w.record_task = e->record_task;
        w.record_device = e->device;
      } else if (auto* ts = find_stream(t->target_stream)) {
        w.record_device = ts->device;
      }
      fanout_.on_event_wait(w);
    }
  }
  s.completed = t->seq;
  s.head = t->next;
  if (!s.head) s.tail = nullptr;
  s.head_started = false;
  op_base* w = t->waiter;
  const std::error_code err = t->error;
  free_task(t);
  if (w) w->complete(err);
  while (!s.waiters.empty() && s.waiters.begin()->first <= s.completed) {
    const position_waiter pw = s.waiters.begin()->second;
    s.waiters.erase(s.waiters.begin());
    pw.fn(*this, pw.ctx, pw.arg, {});
  }
  if (s.head)
    try_start(s);
  else if (s.destroyed && s.waiters.empty())
    streams_[s.id].reset();
}

// ---------------------------------------------------------------------------------------------
// Events

NPURT_DECL std::uint64_t runtime::create_event(device_id dev, bool wait_for_record) {
  auto e = std::make_unique<event_state>();
  e->id = events_.size();
  e->device = dev;
  e->wait_for_record = wait_for_record;
  events_.push_back(std::move(e));
  return events_.back()->id;
}

NPURT_DECL void runtime::bind_unbound_waits(event_state& e) {
  std::vector<task*> waits;
  waits.swap(e.unbound);
  for (task* t : waits) {
    t->target_stream = e.stream;
    t->target_seq = e.seq;
    wait_position(e.stream, e.seq, position_waiter{&runtime::on_wait_satisfied, nullptr, reinterpret_cast<std::uint64_t>(t)});
  }
}

NPURT_DECL void runtime::destroy_event(std::uint64_t id) noexcept {
  if (id != 0 && id < events_.size()) events_[id].reset();
}

NPURT_DECL event_state* runtime::find_event(std::uint64_t id) noexcept {
  return id != 0 && id < events_.size() ? events_[id].get() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Memory

NPURT_DECL void* runtime::device_malloc(device_id dev, std::size_t bytes, std::error_code& ec, bool pool) {
  ec.clear();
  if (dev < 0 || static_cast<std::size_t>(dev) >= device_count()) {
    ec = make_error_code(errc::invalid_device);
    return nullptr;
  }
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  const std::size_t capacity = backend_->properties(dev).memory_bytes;
  if (bytes > capacity) {
    ec = make_error_code(errc::size_overflow);
    return nullptr;
  }
  const std::size_t rounded = round_up(bytes, device_granule);
  if (used_[dev] + rounded > capacity) {
    ec = make_error_code(errc::out_of_memory);
    return nullptr;
  }
  std::byte* backing = nullptr;
  if (backend_->functional()) {
    backing = static_cast<std::byte*>(mi_zalloc_aligned(rounded, 64));
    if (!backing) {
      ec = make_error_code(errc::resource_exhausted);  // the host could not back the device memory
      return nullptr;
    }
  }
  const std::uint64_t addr = next_address_[dev];
  next_address_[dev] += round_up(rounded, 4096);
  allocations_.emplace(addr, allocation{addr, bytes, dev, backing, pool, 0});
  used_[dev] += rounded;
  if (tracing() && !pool)
    fanout_.on_memory({dev, memory_op::alloc, addr, rounded, used_[dev], used_[dev], 0, now_});
  return reinterpret_cast<void*>(addr);
}

NPURT_DECL void runtime::device_free(device_id dev, void* p, std::error_code& ec, bool pool) {
  ec.clear();
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  const auto addr = reinterpret_cast<std::uint64_t>(p);
  auto it = allocations_.find(addr);
  if (it == allocations_.end()) {
    ec = make_error_code(freed_.count(addr) ? errc::double_free : errc::invalid_pointer);
    return;
  }
  if (it->second.pool != pool) {
    ec = make_error_code(errc::invalid_pointer);  // pool memory goes back through its pool
    return;
  }
  if (it->second.device != dev) {
    ec = make_error_code(errc::stream_device_mismatch);
    return;
  }
  const std::size_t rounded = round_up(it->second.bytes, device_granule);
  if (it->second.backing) mi_free(it->second.backing);
  used_[dev] -= rounded;
  allocations_.erase(it);
  freed_.insert(addr);
  if (tracing() && !pool) fanout_.on_memory({dev, memory_op::free, addr, rounded, used_[dev], used_[dev], 0, now_});
}

NPURT_DECL const allocation* runtime::find_allocation(const void* p) const noexcept {
  const auto addr = reinterpret_cast<std::uint64_t>(p);
  auto find_in = [addr](const std::map<std::uint64_t, allocation>& m) -> const allocation* {
    auto it = m.upper_bound(addr);
    if (it == m.begin()) return nullptr;
    --it;
    if (addr >= it->second.address + it->second.bytes) return nullptr;
    return &it->second;
  };
  const allocation* a = find_in(allocations_);
  if (a && a->pool) return find_in(pool_blocks_);
  return a;
}

NPURT_DECL std::uint64_t runtime::reserve_range(device_id dev, std::size_t bytes, std::error_code& ec) {
  ec.clear();
  if (dev < 0 || static_cast<std::size_t>(dev) >= device_count()) {
    ec = make_error_code(errc::invalid_device);
    return 0;
  }
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return 0;
  }
  const std::uint64_t addr = next_address_[dev];
  next_address_[dev] += round_up(bytes, 1 << 21);
  allocations_.emplace(addr, allocation{addr, bytes, dev, nullptr, true, 0});
  return addr;
}

NPURT_DECL void runtime::release_range(std::uint64_t addr) noexcept {
  auto it = allocations_.find(addr);
  if (it == allocations_.end() || !it->second.pool) return;
  used_[it->second.device] -= it->second.mapped;
  if (it->second.backing) mi_free(it->second.backing);
  freed_.insert(addr);
  allocations_.erase(it);
}

NPURT_DECL std::error_code runtime::map_range(std::uint64_t range, std::size_t bytes) {
  auto it = allocations_.find(range);
  if (it == allocations_.end() || !it->second.pool) return make_error_code(errc::invalid_pointer);
  allocation& a = it->second;
  if (a.mapped + bytes > a.bytes) return make_error_code(errc::size_overflow);
  if (used_[a.device] + bytes > backend_->properties(a.device).memory_bytes) return make_error_code(errc::out_of_memory);
  if (backend_->functional() && !a.backing) {
    // One contiguous store for the whole range, so blocks that span mapping granules translate.
    a.backing = static_cast<std::byte*>(mi_zalloc_aligned(a.bytes, 64));
    if (!a.backing) return make_error_code(errc::resource_exhausted);
  }
  a.mapped += bytes;
  used_[a.device] += bytes;
  return {};
}

NPURT_DECL void runtime::unmap_range(std::uint64_t range, std::size_t bytes) noexcept {
  auto it = allocations_.find(range);
  if (it == allocations_.end() || !it->second.pool) return;
  const std::size_t n = std::min(bytes, it->second.mapped);
  it->second.mapped -= n;
  used_[it->second.device] -= n;
}

NPURT_DECL void runtime::register_pool_block(device_id dev, std::uint64_t addr, std::size_t bytes) {
  std::byte* backing = nullptr;
  auto it = allocations_.upper_bound(addr);
  if (it != allocations_.begin()) {
    --it;
    if (it->second.backing && addr >= it->second.address && addr < it->second.address + it->second.bytes)
      backing = it->second.backing + (addr - it->second.address);
  }
  pool_blocks_[addr] = allocation{addr, bytes, dev, backing, false, 0};
}

NPURT_DECL void runtime::unregister_pool_block(std::uint64_t addr) noexcept { pool_blocks_.erase(addr); }

NPURT_DECL void runtime::drop_pool_blocks(device_id dev) noexcept {
  std::erase_if(pool_blocks_, [dev](const auto& kv) { return kv.second.device == dev; });
}

NPURT_DECL void runtime::trace_memory(device_id dev, memory_op op, std::uint64_t addr, std::size_t bytes,
                                      std::size_t in_use, std::size_t reserved, std::uint32_t stream) {
  if (tracing()) fanout_.on_memory({dev, op, addr, bytes, in_use, reserved, stream, now_});
}

NPURT_DECL std::size_t runtime::device_used(device_id dev) const noexcept {
  return dev >= 0 && static_cast<std::size_t>(dev) < used_.size() ? used_[dev] : 0;
}

NPURT_DECL std::byte* runtime::translate(device_id dev, const void* addr, std::size_t bytes) noexcept {
  const allocation* a = find_allocation(addr);
  if (!a || a->device != dev || !a->backing) return nullptr;
  const auto off = reinterpret_cast<std::uint64_t>(addr) - a->address;
  if (bytes > a->bytes - off) return nullptr;
  return a->backing + off;
}

NPURT_DECL void runtime::release_device_memory(device_id dev) noexcept {
  drop_pool_blocks(dev);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.device == dev) {
      if (it->second.backing) mi_free(it->second.backing);
      freed_.insert(it->first);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  if (dev >= 0 && static_cast<std::size_t>(dev) < used_.size()) used_[dev] = 0;
}

NPURT_DECL void* runtime::host_malloc(std::size_t bytes, std::error_code& ec) {
  ec.clear();
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  void* p = mi_zalloc_aligned(bytes, 64);
  if (!p) {
    ec = make_error_code(errc::out_of_memory);
    return nullptr;
  }
  host_allocations_.emplace(p, host_allocation{p, bytes});
  if (tracing())
    fanout_.on_memory({-1, memory_op::alloc, reinterpret_cast<std::uint64_t>(p), bytes, 0, 0, 0, now_});
  return p;
}

NPURT_DECL void runtime::host_free(void* p, std::error_code& ec) {
  ec.clear();
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  auto it = host_allocations_.find(p);
  if (it == host_allocations_.end()) {
    ec = make_error_code(errc::invalid_pointer);
    return;
  }
  if (tracing())
    fanout_.on_memory({-1, memory_op::free, reinterpret_cast<std::uint64_t>(p), it->second.bytes, 0, 0, 0, now_});
  host_allocations_.erase(it);
  mi_free(p);
}

NPURT_DECL const host_allocation* runtime::find_host_allocation(const void* p) const noexcept {
  auto it = host_allocations_.upper_bound(p);
  if (it == host_allocations_.begin()) return nullptr;
  --it;
  const auto base = reinterpret_cast<std::uintptr_t>(it->second.base);
  if (reinterpret_cast<std::uintptr_t>(p) >= base + it->second.bytes) return nullptr;
  return &it->second;
}

NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> runtime::device_positions(device_id dev) const {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  for (const auto& sp : streams_)
    if (sp && sp->device == dev && sp->completed < sp->enqueued) out.emplace_back(sp->id, sp->enqueued);
  return out;
}

NPURT_DECL void runtime::invalidate_device(device_id dev) noexcept {
  for (auto& sp : streams_)
    if (sp && sp->device == dev) sp->invalidated = true;
  for (auto& ep : events_)
    if (ep && ep->device == dev) ep.reset();
}

// ---------------------------------------------------------------------------------------------
// Observers

NPURT_DECL void runtime::add_observer(observer& o) {
  if (std::find(observers_.begin(), observers_.end(), &o) == observers_.end()) observers_.push_back(&o);
}

NPURT_DECL void runtime::remove_observer(observer& o) {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), &o), observers_.end());
}

}  // namespace npurt::detail
