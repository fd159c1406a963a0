// npurt/impl/scheduler.ipp — bodies of detail::scheduler.
#pragma once

#include <npurt/collective_types.hpp>
#include <npurt/detail/scheduler.hpp>
#include <npurt/impl/memory_registry.ipp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

namespace npurt::detail {

NPURT_DECL loop_parts::loop_parts(std::unique_ptr<npurt::backend> b, const system_options& opts)
    : opts_(opts), backend_(std::move(b)), memory_(*backend_, clock_, trace_) {}

NPURT_DECL scheduler::scheduler(loop_parts& parts) : parts_(parts) {
  streams_.emplace_back();  // id 0 means "no stream"
  events_.emplace_back();   // id 0 means "a task event"
  device_failures_.resize(parts_.backend_->device_count());
  queue_.configure(parts_.opts_.dispatch);
}

NPURT_DECL void scheduler::abort_all() noexcept {
  for (auto& sp : streams_) {
    if (!sp) continue;
    for (task* t = sp->head; t;) {
      task* next = t->next;
      if (t->waiter) t->waiter->complete(make_error_code(errc::operation_aborted));
      free_task(t);
      t = next;
    }
    sp->head = sp->tail = nullptr;
    for (auto& [seq, w] : sp->waiters) w.fn(w.self, w.ctx, make_error_code(errc::operation_aborted));
    sp->waiters.clear();
  }
  value_waits_.clear();
  // Captured nodes own callbacks too: freed with their records, before the rest go.
  for (auto& sp : streams_)
    if (sp && sp->capture) abandon_capture(std::shared_ptr<capture_state>(sp->capture));
  for (auto& [id, g] : graphs_) drop_nodes(g.nodes, g.events);
  // Callbacks of tasks whose handlers are still posted (the io_context drops them unrun).
  for (auto* f : callbacks_) delete f;
  callbacks_.clear();
}

NPURT_DECL void scheduler::fail_blocked_wait(stream_state& s, std::error_code ec) {
  task* h = s.head;
  // Detach the wait from what it waited on, then fail it.
  detach_wait(h);
  h->blocked = false;
  s.run.error = ec;
  done_now(h);
}

// ---------------------------------------------------------------------------------------------
// Waits

NPURT_DECL void scheduler::detach_wait(task* h) noexcept {
  disarm_wait_timer(h);
  const task_side& x = *h->extra;
  if (h->kind == task_kind::value_wait) {
    std::erase(value_waits_, h);
  } else if (x.target_stream == 0) {
    if (auto* e = find_event(x.event_id)) std::erase(e->unbound, h);
  } else if (auto* target = find_stream(x.target_stream)) {
    for (auto it = target->waiters.begin(); it != target->waiters.end(); ++it)
      if (it->second.ctx == h) {
        target->waiters.erase(it);
        break;
      }
  }
}

NPURT_DECL void scheduler::arm_wait_timer(task* t) {
  if (t->extra->wait_limit <= 0) return;
  const sim_time at = later(now(), picoseconds{t->extra->wait_limit});
  if (at == end_of_time) return;  // past the end of time: never fires
  const std::uint64_t ticket =
      parts_.clock_.call_at_cancellable(at, timer_action::member_value<&scheduler::on_wait_timeout>(this, t->id));
  wait_timers_[t->id] = wait_timer{t, ticket};
}

NPURT_DECL void scheduler::disarm_wait_timer(task* t) noexcept {
  if (wait_timers_.empty()) return;  // the usual case: no event-wait timeout
  if (auto it = wait_timers_.find(t->id); it != wait_timers_.end()) {
    // Taken back, so that a wait that ends in time does not move the clock to its deadline.
    parts_.clock_.cancel(it->second.ticket);
    wait_timers_.erase(it);
  }
}

NPURT_DECL void scheduler::on_wait_timeout(std::uint64_t task_id) {
  auto it = wait_timers_.find(task_id);
  if (it == wait_timers_.end()) return;
  task* t = it->second.t;
  wait_timers_.erase(it);
  // As aclrtSetOpWaitTimeout: the wait task fails; the stream goes on (or stops, in
  // stop-on-failure mode) and its next synchronize reports the failure.
  detach_wait(t);
  t->blocked = false;
  running_task& r = find_stream(t->stream)->run;
  r.error = make_error_code(errc::event_wait_timeout);
  r.timer = timeout_kind::event_wait;
  done_now(t);
}

// ---------------------------------------------------------------------------------------------
// Streams and tasks

NPURT_DECL std::uint32_t scheduler::create_stream(device_id dev, int priority, std::uint32_t flags) {
  auto s = std::make_unique<stream_state>(parts_.ioc_);
  s->id = static_cast<std::uint32_t>(streams_.size());
  s->device = dev;
  s->priority = static_cast<std::uint8_t>(std::clamp(priority, 0, 7));  // out of range clamps, as in CANN
  s->flags = flags;
  s->host_cursor = now();
  s->limits = device_core_limits(dev);
  streams_.push_back(std::move(s));
  const auto& st = *streams_.back();
  if (parts_.trace_) parts_.trace_->on_stream_created(dev, st.id, st.priority);
  return st.id;
}

NPURT_DECL void scheduler::release_stream(std::uint32_t id) noexcept {
  if (id == 0 || id >= streams_.size() || !streams_[id]) return;
  auto& s = *streams_[id];
  s.destroyed = true;
  if (!s.head && s.waiters.empty()) free_stream(id);
}

NPURT_DECL void scheduler::free_stream(std::uint32_t id) noexcept {
  if (const std::shared_ptr<capture_state> c = streams_[id]->capture) {
    if (c->origin == id) {
      abandon_capture(c);  // never ended: no graph will come of it
    } else {
      // A stream that joined goes; the origin's end_capture says so.
      c->lane_streams[streams_[id]->capture_lane] = 0;
      invalidate_capture(*streams_[id], make_error_code(errc::invalid_stream),
                         "stream " + std::to_string(id) + ", which had joined the capture, was destroyed");
    }
  }
  if (failure& f = streams_[id]->sticky) {
    try {
      released_failures_.emplace(id, std::pair{streams_[id]->device, std::move(f)});
    } catch (...) {  // no memory to keep it: the device's failure still says so
    }
  }
  streams_[id].reset();
}

NPURT_DECL bool scheduler::stream_idle(std::uint32_t id) const noexcept {
  if (id >= streams_.size() || !streams_[id]) return true;
  return streams_[id]->head == nullptr;
}

NPURT_DECL bool scheduler::position_reached(std::uint32_t stream, std::uint64_t seq) const noexcept {
  if (stream >= streams_.size() || !streams_[stream]) return true;  // freed streams are drained
  return streams_[stream]->completed >= seq;
}

NPURT_DECL bool scheduler::position_aborted(std::uint32_t stream, std::uint64_t seq) const noexcept {
  if (stream >= streams_.size() || !streams_[stream]) return false;
  const auto& ranges = streams_[stream]->aborted;
  // The first range that ends at or after seq is the only one that may hold it.
  const auto it =
      std::lower_bound(ranges.begin(), ranges.end(), seq, [](const auto& r, std::uint64_t x) { return r.second < x; });
  return it != ranges.end() && seq > it->first;
}

namespace sched_detail {
// Memory freed while queued work may still use it (a pinned block with copies queued on it, a
// destroyed graph's allocations): released when the last of that work is done.
struct release_when_reached {
  std::function<void()> release;
  std::size_t refs;
  static void reached(void*, void* ctx, std::error_code) {
    auto* r = static_cast<release_when_reached*>(ctx);
    if (--r->refs != 0) return;
    r->release();
    delete r;
  }
  /// Releases at once when every (stream, position) of `after` is reached.
  static void arm(scheduler& s, std::function<void()> release,
                  const std::vector<std::pair<std::uint32_t, std::uint64_t>>& after) {
    std::size_t pending = 0;
    for (const auto& [id, seq] : after) pending += s.position_reached(id, seq) ? 0 : 1;
    if (pending == 0) return release();
    auto* r = new release_when_reached{std::move(release), pending};
    for (const auto& [id, seq] : after)
      if (!s.position_reached(id, seq)) s.wait_position(id, seq, position_waiter{&reached, nullptr, r});
  }
};
}  // namespace sched_detail

NPURT_DECL void scheduler::free_host(void* p, std::error_code& ec) {
  ec.clear();
  memory_registry& mem = parts_.memory_;
  const host_allocation* h = p ? mem.find_host_allocation(p) : nullptr;
  if (!h || h->base != p) return mem.host_free(p, ec);  // its errors: null, not a block start
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + h->bytes;
  const auto touches = [&](const void* q, std::size_t n) {
    return q && !is_device_address(q) && range_meets(reinterpret_cast<std::uintptr_t>(q), n, lo, hi);
  };
  std::vector<std::pair<std::uint32_t, std::uint64_t>> last;  // per stream, its last copy touching the block
  for (std::uint32_t id = 0; id < streams_.size(); ++id) {
    if (!streams_[id]) continue;
    std::uint64_t seq = 0;
    std::uint64_t at = streams_[id]->completed;  // the tasks' positions, counted from the head
    for (const task* t = streams_[id]->head; t; t = t->next) {
      ++at;
      if (t->kind == task_kind::memcpy && (touches(t->extra->copy.dst, t->extra->copy.dst_span()) ||
                                           touches(t->extra->copy.src, t->extra->copy.src_span())))
        seq = at;
    }
    if (seq != 0) last.emplace_back(id, seq);
  }
  if (last.empty()) return mem.host_free(p, ec);
  mem.retire_host(p);
  sched_detail::release_when_reached::arm(*this, [&mem, p] { mem.release_host(p); }, last);
}

NPURT_DECL void scheduler::wait_position(std::uint32_t stream, std::uint64_t seq, const position_waiter& w) {
  if (position_reached(stream, seq)) {
    w.fn(w.self, w.ctx, {});
    return;
  }
  streams_[stream]->waiters.emplace(seq, w);
}

NPURT_HOT_DECL task* scheduler::new_task(stream_state& s, task_kind kind) {
  task* t = tasks_.create();
  t->id = next_task_id_++;
  t->stream = s.id;
  t->kind = kind;
  return t;
}

NPURT_DECL task_side& scheduler::extra(task* t) {
  if (!t->extra) t->extra = extras_.create();
  return *t->extra;
}

NPURT_DECL kernel_desc* scheduler::new_kernel(const kernel_desc& k) { return kernels_.create(k); }

NPURT_DECL std::string_view scheduler::intern_slow(std::string_view name) {
  if (name == last_name_) return last_name_;  // a repeated name of a length intern() leaves to here
  last_name_ = *names_.emplace(name).first;
  return last_name_;
}

NPURT_DECL void scheduler::free_task(task* t) noexcept {
  if (t->owns_kernel) kernels_.destroy(const_cast<kernel_desc*>(t->desc.kernel));
  if (task_side* x = t->extra) {
    if (x->callback) callbacks_.erase(x->callback);
    delete x->callback;
    extras_.destroy(x);
  }
  tasks_.destroy(t);
}

NPURT_HOT_DECL std::uint64_t scheduler::enqueue(stream_state& s, task* t) {
  if (s.capture) [[unlikely]] {
    capture_task(s, t);
    return 0;
  }
  // The host lane pays the enqueue; the task exists for the device from the moment the call returns.
  s.host_cursor = later(std::max(s.host_cursor, now()), parts_.opts_.launch_overhead);
  return append(s, t);
}

NPURT_HOT_DECL std::uint64_t scheduler::enqueue(stream_state& s, task* t, picoseconds overhead) {
  if (s.capture) {
    capture_task(s, t);
    return 0;
  }
  s.host_cursor = later(std::max(s.host_cursor, now()), overhead);
  return append(s, t);
}

NPURT_DECL void scheduler::enqueue_wait(std::uint32_t stream, std::uint32_t target, std::uint64_t seq,
                                        std::string_view name) {
  stream_state* s = find_stream(stream);
  if (!s || (position_reached(target, seq) && !position_aborted(target, seq))) return;
  task* t = new_task(*s, task_kind::event_wait);
  task_side& x = extra(t);
  x.target_stream = target;
  x.target_seq = seq;
  t->name = name;
  enqueue(*s, t);
  note_wait(*s, target, seq);
}

NPURT_DECL void scheduler::note_wait(stream_state& s, std::uint32_t target, std::uint64_t seq) {
  if (target == s.id) return;
  auto& w = s.waits_for;
  const auto at =
      std::lower_bound(w.begin(), w.end(), target, [](const auto& x, std::uint32_t t) { return x.first < t; });
  if (at != w.end() && at->first == target) at->second = std::max(at->second, seq);
  else w.emplace(at, target, seq);
}

NPURT_DECL bool scheduler::stream_waits_for(std::uint32_t stream, std::uint32_t target,
                                            std::uint64_t seq) const noexcept {
  if (stream == target) return true;
  if (stream >= streams_.size() || !streams_[stream]) return false;
  const auto& w = streams_[stream]->waits_for;
  const auto at =
      std::lower_bound(w.begin(), w.end(), target, [](const auto& x, std::uint32_t t) { return x.first < t; });
  return at != w.end() && at->first == target && at->second >= seq;
}

NPURT_DECL void scheduler::try_start(stream_state& s) {
  task* t = s.head;
  if (!t || s.head_started) return;
  if (t->submitted > now()) {
    if (!s.wake_pending) {
      s.wake_pending = true;
      parts_.clock_.call_at(t->submitted, timer_action::member_value<&scheduler::wake_stream>(this, s.id));
    }
    return;
  }
  // The device's queue holds earlier tasks: woken on their dispatch.
  if (!queue_.may_dispatch(s.device, s.priority, t->id, (s.flags & device_queue::bypass_flags) != 0)) return;
  start_task(s, t);
}

NPURT_DECL void scheduler::wake_stream(std::uint64_t stream_id) {
  if (auto* s = find_stream(static_cast<std::uint32_t>(stream_id))) {
    s->wake_pending = false;
    try_start(*s);
  }
}

NPURT_DECL void scheduler::task_done_now(task* t) {
  if (t->orphan) return free_task(t);
  stream_state& s = *find_stream(t->stream);
  s.run.end = now();
  finish_task(s, t);
}

NPURT_DECL void scheduler::on_wait_satisfied(void* self, void* ctx, std::error_code ec) {
  auto* t = static_cast<task*>(ctx);
  auto* sched = static_cast<scheduler*>(self);
  sched->disarm_wait_timer(t);
  t->blocked = false;
  // A pool's reuse wait only needs the memory's last users gone: work an abort dropped is.
  if (ec && !(is_pool_wait(*t->extra) && ec == errc::operation_aborted)) sched->find_stream(t->stream)->run.error = ec;
  // Through the now-queue rather than directly: long chains of waits must not recurse.
  sched->done_now(t);
}

NPURT_DECL void scheduler::start_task(stream_state& s, task* t) {
  s.head_started = true;
  // The stream whose task is now first in the device's queue may start: woken at this instant.
  // Not this stream (its next task waits for this one), which a wake would leave as it is.
  if (const std::uint32_t next = queue_.on_dispatch(s.device, s.priority, t->id); next != 0 && next != s.id)
    parts_.clock_.call_at(now(), timer_action::member_value<&scheduler::wake_stream>(this, next));
  running_task& r = s.run;
  fill_running(s, t);
  if (s.stopped) {
    r.error = make_error_code(errc::operation_aborted);  // stop-on-failure: skipped, not run
    done_now(t);
    return;
  }
  switch (t->kind) {
    case task_kind::kernel:
    case task_kind::memset:
    case task_kind::collective: parts_.backend_->submit(r); return;
    case task_kind::memcpy:
      // Host-to-host copies too: the backend owns all data movement and its timing.
      parts_.backend_->submit(r);
      return;
    case task_kind::event_record: {
      if (auto* e = find_event(t->extra->event_id); e && e->stream == s.id && e->seq == r.seq) {
        e->has_time = true;
        e->time = now();
      }
      done_now(t);
      return;
    }
    case task_kind::event_wait: {
      task_side& x = *t->extra;
      if (x.target_stream == 0) {
        // A wait made before the event's first record: hold until a record binds it.
        event_state* e = find_event(x.event_id);
        if (!e) {
          r.error = make_error_code(errc::invalid_event);
          done_now(t);
          return;
        }
        if (e->records == 0) {
          t->blocked = true;
          e->unbound.push_back(t);
          arm_wait_timer(t);
          return;
        }
        x.target_stream = e->stream;
        x.target_seq = e->seq;
      }
      // A pool's reuse wait only needs the memory's last users gone, which dropped work is, once
      // the position counts as reached.
      if (!is_pool_wait(x) && position_aborted(x.target_stream, x.target_seq)) {
        // The record it waits for was dropped by a device reset or an abort: the wait cannot be
        // met, and a fire-and-forget wait would otherwise let the work after it run as if it
        // had been.
        r.error = make_error_code(errc::operation_aborted);
        done_now(t);
        return;
      }
      if (position_reached(x.target_stream, x.target_seq)) {
        done_now(t);
        return;
      }
      t->blocked = true;
      streams_[x.target_stream]->waiters.emplace(x.target_seq, position_waiter{&scheduler::on_wait_satisfied, this, t});
      arm_wait_timer(t);
      // A wait that closes a cycle can never be satisfied: the loop says so now, not at the end
      // of time.
      wait_blocked(s);
      return;
    }
    case task_kind::value_write:
    case task_kind::value_wait: start_value_task(s, t); return;
    case task_kind::host_callback:
      parts_.post(s.strand, [this, t] {
        if (t->orphan) return free_task(t);  // its device was reset meanwhile
        std::exception_ptr thrown;
        try {
          if (t->extra->callback) (*t->extra->callback)();
        } catch (...) { thrown = std::current_exception(); }
        // The callback may have reset its own device: this task was dropped with the device's
        // work (and its stream's record with it, if the stream was destroyed), and what it
        // threw goes with the device's other failures.
        if (t->orphan) return free_task(t);
        stream_state& st = *find_stream(t->stream);
        if (thrown) {
          // Not swallowed: the awaiting caller, or the stream's sticky error, gets it.
          st.run.error = make_error_code(errc::callback_failed);
          st.run.exception = std::move(thrown);
        }
        st.run.end = now();
        finish_task(st, t);
      });
      return;
  }
}

NPURT_DECL void scheduler::fill_running(stream_state& s, task* t) {
  running_task& r = s.run;
  // Every field from a fresh record: what the backend left in the previous task's (its scratch,
  // the times and counts it set) must not leak into this one.
  static_cast<task_info&>(r) = task_info{};
  r.id = t->id;
  r.device = s.device;
  r.stream = s.id;
  r.priority = s.priority;
  r.kind = t->kind;
  r.engine = t->engine;
  r.submitted = t->submitted;
  r.ready = now();
  r.start = now();
  r.name = t->name;
  r.kernel = t->kernel();
  r.block_dim = t->block_dim;
  r.limits = s.limits;
  r.rec = t;
  r.seq = s.completed + 1;
  // Only a failed task leaves an error or an exception behind (nothing stores a zero error of
  // another category): clearing a clear one would cost a category call per task.
  if (r.error) [[unlikely]]
    r.error.clear();
  if (r.exception) [[unlikely]]
    r.exception = nullptr;
  if (!r.why.empty()) [[unlikely]]
    r.why.clear();
  r.timer = timeout_kind::sync;
  r.timeout_limit = 0;
  switch (t->kind) {
    case task_kind::kernel:
      if (!t->has_desc) {
        r.fixed = t->fixed;
        r.flops = t->fixed.flops;
        r.bytes = t->fixed.bytes;
      }
      break;
    case task_kind::memcpy:
    case task_kind::memset:
      r.copy = t->extra->copy;
      r.bytes = r.copy.bytes;
      break;
    case task_kind::collective: r.collective = t->collective(); break;
    case task_kind::event_wait:
    case task_kind::value_wait: r.timeout_limit = t->extra->wait_limit; break;
    case task_kind::event_record:
    case task_kind::value_write:
    case task_kind::host_callback: break;
  }
}

NPURT_DECL void scheduler::task_completed(task_info& ti, std::error_code ec) {
  // The backend only ever holds a stream's running_task.
  auto& t = static_cast<running_task&>(ti);
  if (ec) t.error = ec;
  if (is_timeout(ec) && t.timeout_limit == 0) [[unlikely]] {
    // A backend that did not say which timer fired: the communicator's, for a collective (its
    // connect timeout bounds the first rendezvous when that is the earlier one), else the
    // code's.
    t.timer = timeout_kind_of(ec);
    if (t.kind == task_kind::collective && t.collective && t.collective->comm) {
      const auto& c = *t.collective->comm;
      std::optional<picoseconds> span = c.exec_timeout;
      t.timer = timeout_kind::collective_exec;
      if (!c.connected && c.connect_timeout && (!span || *c.connect_timeout <= *span)) {
        span = c.connect_timeout;
        t.timer = timeout_kind::collective_connect;
      }
      if (span) t.timeout_limit = span->count();
    }
  }
  if (!t.error && (t.kind == task_kind::memcpy || t.kind == task_kind::memset)) perform_copy(t);
  finish_task(*find_stream(t.stream), t.rec);
}

NPURT_DECL void scheduler::perform_copy(running_task& t) {
  if (!parts_.backend_->functional()) return;
  const copy_desc& c = t.copy;
  auto resolve = [this](device_id dev, const void* p, std::size_t n) -> std::byte* {
    if (!is_device_address(p)) return static_cast<std::byte*>(const_cast<void*>(p));
    return parts_.memory_.translate(dev, p, n);
  };
  std::byte* dst = resolve(c.dst_device, c.dst, c.dst_span());
  if (!dst) {
    // The memory was freed while the copy was queued: fail the task, touch nothing.
    t.error = make_error_code(errc::invalid_pointer);
    return;
  }
  if (t.kind == task_kind::memset) {
    std::memset(dst, c.value, c.bytes);
    return;
  }
  const std::byte* src = resolve(c.src_device, c.src, c.src_span());
  if (!src) {
    t.error = make_error_code(errc::invalid_pointer);
    return;
  }
  if (c.rows > 1) [[unlikely]] {
    const std::size_t width = c.row_bytes();
    for (std::size_t i = 0; i < c.rows; ++i) std::memmove(dst + i * c.dst_pitch, src + i * c.src_pitch, width);
    return;
  }
  std::memmove(dst, src, c.bytes);
}

NPURT_DECL void scheduler::finish_task(stream_state& s, task* t) {
  running_task& r = s.run;
  if (parts_.trace_) {
    r.failure = r.error ? &r.error : nullptr;
    parts_.trace_->on_task(r);
    if (t->kind == task_kind::event_record) {
      parts_.trace_->on_event_record({t->extra->event_id, r.id, r.device, r.stream, r.end});
    } else if (t->kind == task_kind::event_wait) {
      const task_side& x = *t->extra;
      // The record named when the wait was enqueued: the event may have been recorded again
      // since, or lost its last handle.
      event_wait_info w{x.event_id, r.id, r.device, r.stream, x.record_task, 0, x.target_stream, r.start, r.end};
      if (auto* e = find_event(x.event_id)) w.record_device = e->device;
      else if (auto* ts = find_stream(x.target_stream)) w.record_device = ts->device;
      parts_.trace_->on_event_wait(w);
    }
  }
  s.completed = r.seq;
  if (r.seq == s.skip_at) [[unlikely]]
    end_skip(s);  // the positions an abort dropped behind this task
  s.head = t->next;
  if (!s.head) s.tail = nullptr;
  s.head_started = false;
  op_base* w = t->waiter;
  const std::error_code err = r.error;
  if (err && !w) record_failure(r, err);  // fire-and-forget: nobody else would hear of it
  if (err && w) [[unlikely]]
    report_awaited_failure(r, err, *w);
  if (err && (s.flags & stop_on_failure_flag)) s.stopped = true;
  if (w && is_timeout(err)) [[unlikely]] {
    w->timer = r.timer;
    w->timeout_limit = r.timeout_limit;
  }
  free_task(t);
  if (w) w->complete(err);
  while (!s.waiters.empty() && s.waiters.begin()->first <= s.completed) {
    const position_waiter pw = s.waiters.begin()->second;
    s.waiters.erase(s.waiters.begin());
    pw.fn(pw.self, pw.ctx, {});
  }
  if (!value_waits_.empty()) [[unlikely]]
    recheck_value_waits();
  if (s.head) try_start(s);
  else if (s.destroyed && s.waiters.empty()) free_stream(s.id);
}

NPURT_DECL void scheduler::set_device_core_limits(device_id dev, core_limits l) {
  const auto d = static_cast<std::size_t>(dev);
  if (device_limits_.size() <= d) device_limits_.resize(d + 1);
  device_limits_[d] = l;
  for (auto& sp : streams_)
    if (sp && sp->device == dev) set_stream_core_limits(*sp, sp->own_limits);
}

NPURT_DECL void scheduler::set_stream_core_limits(stream_state& s, core_limits own) noexcept {
  s.own_limits = own;
  const core_limits d = device_core_limits(s.device);
  s.limits = {own.cube != 0 ? own.cube : d.cube, own.vector != 0 ? own.vector : d.vector};
}

NPURT_DECL scheduler::word_ref scheduler::word_at(device_id dev, const void* p) {
  if (!parts_.memory_.find_allocation(p)) return {};
  if (!parts_.backend_->functional())
    return {nullptr, &value_words_.try_emplace({dev, reinterpret_cast<std::uint64_t>(p)}, 0).first->second};
  return {parts_.memory_.translate(dev, p, sizeof(std::uint64_t)), nullptr};
}

NPURT_DECL std::optional<std::uint64_t> scheduler::read_word(device_id dev, const void* p) {
  const word_ref w = word_at(dev, p);
  if (w.kept) return *w.kept;
  if (!w.bytes) return std::nullopt;
  std::uint64_t v = 0;
  std::memcpy(&v, w.bytes, sizeof v);
  return v;
}

NPURT_DECL void scheduler::start_value_task(stream_state& s, task* t) {
  if (run_value_task(s, t) || s.run.error || t->kind == task_kind::value_write) {
    done_now(t);
    return;
  }
  // Until a task's completion changes the word (recheck_value_waits), the event-wait timeout or
  // the deadlock check at the end of time.
  t->blocked = true;
  value_waits_.push_back(t);
  arm_wait_timer(t);
}

NPURT_DECL bool scheduler::run_value_task(stream_state& s, task* t) {
  const task_side& x = *t->extra;
  const device_id dev = x.copy.dst_device;
  if (t->kind == task_kind::value_write) {
    const word_ref w = word_at(dev, x.copy.dst);
    if (w.kept) *w.kept = x.operand;
    else if (w.bytes) std::memcpy(w.bytes, &x.operand, sizeof x.operand);
    else fail_value_task(s, *t, "value write");  // freed while the write was queued
    return w.kept || w.bytes;
  }
  const std::optional<std::uint64_t> w = read_word(dev, x.copy.dst);
  if (!w) {
    fail_value_task(s, *t, "value wait");  // freed while the wait was queued or blocked
    return false;
  }
  return condition_met(x.condition, *w, x.operand);
}

NPURT_DECL void scheduler::fail_value_task(stream_state& s, const task& t, std::string_view what) {
  running_task& r = s.run;
  r.error = r.why_ec = make_error_code(errc::invalid_pointer);
  std::ostringstream os;
  os << "the word of the " << what << " at "
     << reinterpret_cast<const void*>(parts_.memory_.portable(reinterpret_cast<std::uint64_t>(t.extra->copy.dst)))
     << " is no longer live device memory: it was freed after the call";
  r.why = os.str();
}

NPURT_DECL void scheduler::recheck_value_waits() {
  // In place, in the order the waits blocked. Nothing here can block another wait or end one
  // twice: done_now only queues a completion, which runs after this pass.
  std::size_t kept = 0;
  for (task* t : value_waits_) {
    stream_state& ws = *find_stream(t->stream);
    if (!run_value_task(ws, t) && !ws.run.error) {
      value_waits_[kept++] = t;
      continue;
    }
    disarm_wait_timer(t);
    t->blocked = false;
    done_now(t);
  }
  value_waits_.resize(kept);
}

NPURT_DECL std::string failure::describe() const {
  std::string out = "task " + std::to_string(task);
  if (!name.empty()) out += " (" + name + ")";
  out += " on stream " + std::to_string(stream) + " failed";
  if (is_timeout(ec) && timeout_limit > 0) out += timeout_detail(timer, timeout_limit);
  if (!detail.empty()) out += " (" + detail + ")";
  if (exception) {
    try {
      std::rethrow_exception(exception);
    } catch (const std::exception& e) {
      out += " (threw: ";
      out += e.what();
      out += ")";
    } catch (...) {}
  }
  return out;
}

NPURT_DECL std::exception_ptr failure_exception(const failure& f, const std::string& what, std::int32_t device) {
  // A callback's own exception, as the blocking synchronize rethrows it (and as std::future and
  // co_spawn hand on what a coroutine threw).
  if (f.exception) return f.exception;
  try {
    throw_failure(f, what, device);
  } catch (...) { return std::current_exception(); }
}

namespace sched_detail {
// The failure record of a task that ended with `ec`.
inline failure failure_of(const running_task& t, std::error_code ec) {
  failure f;
  f.ec = ec;
  f.task = t.id;
  f.stream = t.stream;
  f.seq = t.seq;
  f.name = std::string(t.name);
  f.exception = t.exception;
  if (const collective_desc* c = t.rec ? t.rec->collective() : nullptr) f.detail = c->failure;
  if (f.detail.empty() && !t.why.empty() && t.why_ec == ec) f.detail = t.why;
  if (is_timeout(ec)) {
    f.timer = t.timer;
    f.timeout_limit = t.timeout_limit;
  }
  return f;
}

// The call an awaited task of this kind was enqueued by, as its throwing form names itself.
inline const char* awaited_call(task_kind k) noexcept {
  switch (k) {
    case task_kind::kernel: return "npurt::stream::async_launch";
    case task_kind::memcpy: return "npurt::stream::async_memcpy";
    case task_kind::memset: return "npurt::stream::async_memset";
    case task_kind::event_wait: return "npurt::stream::async_wait";
    case task_kind::host_callback: return "npurt::stream::async_callback";
    case task_kind::collective: return "npurt::communicator";
    case task_kind::value_write: return "npurt::stream::async_write_value";
    case task_kind::value_wait: return "npurt::stream::async_wait_value";
    case task_kind::event_record: break;
  }
  return "npurt: awaited operation";
}
}  // namespace sched_detail

NPURT_DECL void scheduler::record_failure(const running_task& t, std::error_code ec) {
  const failure f = sched_detail::failure_of(t, ec);
  recent_error_ = f.describe() + ": " + ec.message();
  // The first failure is the one reported.
  stream_state* s = find_stream(t.stream);
  if (s && !s->sticky) s->sticky = f;
  if (s && !s->launched_by.empty()) [[unlikely]] {
    // A graph's lane: the stream that launched the failed node's graph reports it (CUDA makes a
    // graph's fault sticky for the whole context; here the launching stream stands for it).
    // It stands at the launch's end there: events recorded after the graph see it, as does the
    // launch's own event, and the words still name the lane the node ran on.
    auto& by = s->launched_by;
    by.erase(by.begin(), std::find_if(by.begin(), by.end(), [&](const auto& l) { return l.upto >= t.seq; }));
    if (!by.empty())
      if (stream_state* to = find_stream(by.front().stream); to && !to->destroyed && !to->sticky) {
        to->sticky = f;
        to->sticky.seq = by.front().at;
      }
  }
  if (t.device >= 0 && static_cast<std::size_t>(t.device) < device_failures_.size())
    if (failure& d = device_failures_[static_cast<std::size_t>(t.device)]; !d) d = f;
}

NPURT_DECL void scheduler::report_awaited_failure(const running_task& t, std::error_code ec, op_base& w) {
  const failure f = sched_detail::failure_of(t, ec);
  const char* call = t.kind == task_kind::memcpy && t.copy.rows > 1 ? "npurt::stream::async_memcpy2d"
                                                                    : sched_detail::awaited_call(t.kind);
  std::string what = std::string(call) + ": " + f.describe();
  recent_error_ = what + ": " + ec.message();
  if (w.thrown_to) *w.thrown_to = failure_exception(f, what, t.device);
}

NPURT_DECL std::string scheduler::take_recent_error() noexcept {
  std::string out;
  out.swap(recent_error_);
  return out;
}

NPURT_DECL failure scheduler::take_stream_failure(std::uint32_t stream) noexcept {
  failure f;
  if (auto* s = find_stream(stream)) {
    std::swap(f, s->sticky);
    s->stopped = false;  // the failure is read: a stop-on-failure stream runs again
  }
  return f;
}

NPURT_DECL const failure* scheduler::peek_stream_failure(std::uint32_t stream) const noexcept {
  if (stream >= streams_.size()) return nullptr;
  if (!streams_[stream]) {
    const auto it = released_failures_.find(stream);
    return it == released_failures_.end() ? nullptr : &it->second.second;
  }
  if (!streams_[stream]->sticky) return nullptr;
  return &streams_[stream]->sticky;
}

NPURT_DECL failure scheduler::take_device_failure(device_id dev) noexcept {
  failure f;
  if (dev >= 0 && static_cast<std::size_t>(dev) < device_failures_.size())
    std::swap(f, device_failures_[static_cast<std::size_t>(dev)]);
  return f;
}

NPURT_DECL void scheduler::read_device_deadlock(device_id dev) noexcept {
  if (dev >= 0 && static_cast<std::size_t>(dev) < device_failures_.size()) {
    failure& f = device_failures_[static_cast<std::size_t>(dev)];
    if (f.ec == errc::deadlock) f = {};
  }
}

NPURT_DECL void scheduler::abort_device(device_id dev) {
  // A communicator with an operation of this device in flight cannot go on: the reset forgets
  // the device's parts, so its ranks' call numbers no longer line up and every later call would
  // wait for a part that never comes. It is aborted, as HCCL destroys a reset device's
  // communicators: its queued calls fail at once and later calls at the call.
  for (auto& sp : streams_) {
    if (!sp) continue;
    for (task* t = sp->head; t; t = t->next) {
      const collective_desc* c = t->collective();
      if (!c || !c->comm || c->comm->aborted ||
          std::find(c->comm->devices.begin(), c->comm->devices.end(), dev) == c->comm->devices.end())
        continue;
      collective_comm_state& comm = *c->comm;
      break_communicator(comm, "device " + std::to_string(dev) + " was reset with an operation of communicator '" +
                                   comm.name + "' (id " + std::to_string(comm.id) +
                                   ") in flight; make a new communicator (init_all)");
    }
  }
  parts_.backend_->abort(dev);  // the backend lets go of every task of the device
  queue_.forget(dev);     // and the device's execution queue of every task not yet dispatched
  const std::error_code aborted = make_error_code(errc::operation_aborted);
  std::vector<op_base*> waiters;
  for (auto& sp : streams_) {
    if (!sp || sp->device != dev) continue;
    stream_state& s = *sp;
    reset_streams_.insert(s.id);
    for (task* t = s.head; t;) {
      task* next = t->next;
      if (t->waiter) waiters.push_back(std::exchange(t->waiter, nullptr));
      if ((t->kind == task_kind::event_wait || t->kind == task_kind::value_wait) && t->blocked) detach_wait(t);
      const bool completion_queued = t == s.head && s.head_started && !t->blocked &&
                                     (t->kind == task_kind::event_record || t->kind == task_kind::event_wait ||
                                      t->kind == task_kind::value_write || t->kind == task_kind::value_wait ||
                                      t->kind == task_kind::host_callback);
      if (completion_queued) t->orphan = true;  // a now-action or strand handler still holds it: it frees the record
      else free_task(t);
      t = next;
    }
    s.head = s.tail = nullptr;
    s.head_started = false;
    if (s.enqueued > s.completed) s.aborted.emplace_back(s.completed, s.enqueued);
    s.completed = s.enqueued;
    s.skip_at = s.skip_to = 0;
    s.sticky = {};
  }
  device_failures_[static_cast<std::size_t>(dev)] = {};
  if (static_cast<std::size_t>(dev) < device_limits_.size()) device_limits_[static_cast<std::size_t>(dev)] = {};
  std::erase_if(released_failures_, [dev](const auto& kv) { return kv.second.first == dev; });
  for (op_base* w : waiters) w->complete(aborted);
  // Whoever waited on a position of these streams hears that it will never come.
  for (auto& sp : streams_) {
    if (!sp || sp->device != dev) continue;
    auto ws = std::move(sp->waiters);
    sp->waiters.clear();
    for (auto& [seq, w] : ws) w.fn(w.self, w.ctx, aborted);
  }
  for (auto& sp : streams_)
    if (sp && sp->device == dev && sp->destroyed && sp->waiters.empty()) sp.reset();
}

NPURT_DECL void scheduler::break_communicator(collective_comm_state& comm, const std::string& reason) {
  comm.aborted = true;
  comm.abort_reason = reason;
  // HcclGetCommAsyncError is where a rank learns why its operations failed: the calls still
  // queued behind other work fail only when they reach the engine, without passing through an
  // operation that would record it there.
  if (!comm.async_error) comm.async_error = make_error_code(errc::operation_aborted);
  if (!comm.message.empty()) comm.message += "\n";
  comm.message += comm.abort_reason;
}

NPURT_DECL void scheduler::abort_stream(stream_state& s) {
  const std::error_code aborted = make_error_code(errc::operation_aborted);
  std::vector<op_base*> waiters;
  std::vector<std::uint64_t> broken;  // communicators a dropped call put out of step
  task* keep = nullptr;               // the running task, when the backend cannot take it back
  for (task* t = s.head; t;) {
    task* next = t->next;
    const bool started = t == s.head && s.head_started;
    const bool backend_task = t->kind == task_kind::kernel || t->kind == task_kind::memcpy ||
                              t->kind == task_kind::memset || t->kind == task_kind::collective;
    bool orphan = false;
    if (!started) {
      // Out of the device's execution queue: the stream it held back may start now.
      if (const std::uint32_t first = queue_.on_dispatch(s.device, s.priority, t->id); first != 0 && first != s.id)
        parts_.clock_.call_at(now(), timer_action::member_value<&scheduler::wake_stream>(this, first));
      // A dropped call leaves its peers' calls without a partner, and every later one out of
      // step: the communicator is broken, as when a device is reset with a call in flight.
      if (const collective_desc* c = t->collective(); c && c->comm && !c->comm->aborted) {
        const collective_comm_state& comm = *c->comm;
        break_communicator(*c->comm, "stream " + std::to_string(s.id) +
                                         " was aborted with an operation of communicator '" + comm.name + "' (id " +
                                         std::to_string(comm.id) + ") queued; make a new communicator (init_all)");
        broken.push_back(c->comm->id);
      }
    } else if (backend_task) {
      // Dropped like the queued ones, and like a device reset's work it leaves no task in the
      // timeline: whether it held its engine yet or still waited in line, only the backend knows.
      if (!parts_.backend_->cancel(s.run)) {
        keep = t;  // a collective its peers are part of, or a backend that cannot stop it
        t = next;
        continue;
      }
    } else if (t->blocked) {
      detach_wait(t);  // an event or value wait not yet met
    } else {
      orphan = true;  // its completion is queued (a now-action, or a callback on the strand)
    }
    if (t->waiter) waiters.push_back(std::exchange(t->waiter, nullptr));
    if (orphan) t->orphan = true;
    else free_task(t);
    t = next;
  }
  const std::uint64_t from = keep ? s.run.seq : s.completed;
  if (s.enqueued > from) s.aborted.emplace_back(from, s.enqueued);
  if (keep) {
    keep->next = nullptr;
    s.head = s.tail = keep;
    if (s.enqueued > from) {
      s.skip_at = from;
      s.skip_to = s.enqueued;
    }
  } else {
    s.head = s.tail = nullptr;
    s.head_started = false;
    s.completed = s.enqueued;
  }
  // The stream no longer waits for what its dropped waits waited for: the pool may not reuse
  // memory here on their strength.
  std::erase_if(s.waits_for, [&](const auto& w) { return !position_reached(w.first, w.second); });
  for (op_base* w : waiters) w->complete(aborted);
  // Whoever waited on a dropped position hears that it will never come: now, or once the kept
  // task, which may still use what the dropped work would have, is done (end_skip).
  if (!keep) abort_waiters_after(s, from);
  // The peers' calls of a broken communicator, waiting at the engine for a partner that will
  // never come, fail now (the running call kept above among them), as communicator::abort's.
  for (const std::uint64_t id : broken) parts_.backend_->abort_collectives(id);
}

NPURT_DECL void scheduler::abort_waiters_after(stream_state& s, std::uint64_t from) {
  std::vector<position_waiter> dropped;
  for (auto it = s.waiters.upper_bound(from); it != s.waiters.end();) {
    dropped.push_back(it->second);
    it = s.waiters.erase(it);
  }
  for (const position_waiter& w : dropped) w.fn(w.self, w.ctx, make_error_code(errc::operation_aborted));
}

NPURT_DECL void scheduler::end_skip(stream_state& s) {
  const std::uint64_t from = s.skip_at;
  s.completed = s.skip_to;
  s.skip_at = s.skip_to = 0;
  abort_waiters_after(s, from);
}

NPURT_DECL void scheduler::abort_device_tasks(device_id dev) {
  std::vector<std::uint32_t> ids;
  for (const auto& sp : streams_)
    if (sp && sp->device == dev && !sp->capture) ids.push_back(sp->id);
  for (const std::uint32_t id : ids) {
    stream_state* s = find_stream(id);
    if (!s) continue;
    abort_stream(*s);
    if (s->destroyed && !s->head && s->waiters.empty()) free_stream(id);
  }
}

// ---------------------------------------------------------------------------------------------
// Events

NPURT_DECL std::uint64_t scheduler::create_event(device_id dev, bool wait_for_record) {
  auto e = std::make_unique<event_state>();
  e->id = events_.size();
  e->device = dev;
  e->wait_for_record = wait_for_record;
  events_.push_back(std::move(e));
  return events_.back()->id;
}

NPURT_DECL void scheduler::record_event(stream_state& s, event_state& e, picoseconds overhead) {
  task* t = new_task(s, task_kind::event_record);
  extra(t).event_id = e.id;
  t->name = "event_record";
  if (s.capture) {
    // A node: the event is recorded when the graph runs, and stays alive for it until then.
    capture_task(s, t);
    capture_state& c = *s.capture;
    if (std::find(c.events.begin(), c.events.end(), e.id) == c.events.end()) {
      ++e.refs;
      c.events.push_back(e.id);
    }
    c.records.emplace_back(e.id, c.nodes.size() - 1);
    e.captured_in = &c;
    return;
  }
  // The event points at this record before it is enqueued: the record may run at once.
  e.captured_in = nullptr;  // a record of an open capture is no longer its latest
  ++e.records;
  e.stream = s.id;
  e.seq = s.enqueued + 1;
  e.record_task = t->id;
  e.has_time = false;
  enqueue(s, t, overhead);
  // Waits made before the first record wait for this one.
  std::vector<task*> waits;
  waits.swap(e.unbound);
  for (task* w : waits) {
    w->extra->target_stream = e.stream;
    w->extra->target_seq = e.seq;
    w->extra->record_task = t->id;
    wait_position(e.stream, e.seq, position_waiter{&scheduler::on_wait_satisfied, this, w});
    // The wait is now on a position, as if it had started with this record bound: a record that
    // closes a cycle (behind the wait on its own stream, say) is a deadlock now, not when nothing
    // else is left to run.
    if (!position_reached(e.stream, e.seq))
      if (stream_state* ws = find_stream(w->stream)) wait_blocked(*ws);
  }
}

NPURT_DECL void scheduler::retain_event(std::uint64_t id) noexcept {
  if (auto* e = find_event(id)) ++e->refs;
}

NPURT_DECL void scheduler::release_event(std::uint64_t id) noexcept {
  if (auto* e = find_event(id); e && --e->refs == 0) events_[id].reset();
}

NPURT_DECL std::uint64_t scheduler::last_enqueued(std::uint32_t stream) const noexcept {
  return stream < streams_.size() && streams_[stream] ? streams_[stream]->enqueued : 0;
}

NPURT_DECL event_state* scheduler::find_event(std::uint64_t id) noexcept {
  return id != 0 && id < events_.size() ? events_[id].get() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Devices

NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> scheduler::device_positions(device_id dev) const {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  for (const auto& sp : streams_)
    if (sp && sp->device == dev && sp->completed < sp->enqueued) out.emplace_back(sp->id, sp->enqueued);
  return out;
}

NPURT_DECL void scheduler::invalidate_device(device_id dev) noexcept {
  // Captures and graphs of the device go with its streams and events, as a reset destroys a
  // device's captured models.
  for (auto& sp : streams_)
    if (sp && sp->device == dev && sp->capture) abandon_capture(std::shared_ptr<capture_state>(sp->capture));
  for (auto& [id, g] : graphs_)
    if (g.device == dev && !g.lost) {
      drop_nodes(g.nodes, g.events);
      g.lost = true;
    }
  // The reset takes the device's memory, the graphs' with it, and the words value writes kept.
  std::erase_if(graph_memory_, [&](const auto& m) { return m.second.device == dev; });
  std::erase_if(value_words_, [&](const auto& w) { return w.first.first == dev; });
  for (auto& sp : streams_)
    if (sp && sp->device == dev) sp->invalidated = true;
  for (auto& ep : events_)
    if (ep && ep->device == dev) ep.reset();
}

}  // namespace npurt::detail

namespace npurt::detail {

// ---------------------------------------------------------------------------------------------
// Capture and graphs

NPURT_DECL scheduler::~scheduler() {
  // Nodes live in this scheduler's pools: they go before the pools do (abort_all, which a
  // dying runtime calls first, has freed them already).
  for (auto& sp : streams_)
    if (sp && sp->capture) abandon_capture(std::shared_ptr<capture_state>(sp->capture));
  for (auto& [id, g] : graphs_) drop_nodes(g.nodes, g.events);
}

NPURT_DECL void scheduler::begin_capture(stream_state& s, bool relaxed) {
  s.capture = std::make_shared<capture_state>();
  s.capture->origin = s.id;
  s.capture->device = s.device;
  s.capture->relaxed = relaxed;
  s.capture->lane_streams.push_back(s.id);
  s.capture->lane_modes.emplace_back(s.priority, s.flags);
  s.capture_lane = 0;
}

NPURT_DECL void scheduler::capture_task(stream_state& s, task* t) {
  if (t->owns_kernel) {
    // Shared with every clone a launch makes, instead of copied for each.
    auto shared = std::make_shared<const kernel_desc>(*t->desc.kernel);
    kernels_.destroy(const_cast<kernel_desc*>(t->desc.kernel));
    t->owns_kernel = false;
    t->desc.kernel = shared.get();
    t->desc.ref = std::move(shared);
  }
  if (t->kind == task_kind::memcpy) {
    const copy_desc& c = t->extra->copy;
    const auto pinned = [&](const void* p) { return !is_device_address(p) && parts_.memory_.find_host_allocation(p); };
    t->extra->pinned_ends = static_cast<std::uint8_t>((pinned(c.src) ? 1 : 0) | (pinned(c.dst) ? 2 : 0));
  }
  s.capture->nodes.push_back(t);
  ++held_nodes_;
  s.capture->lanes.push_back(s.capture_lane);
  if (!s.capture->freed.empty()) [[unlikely]]
    check_freed(*s.capture, *t);
  if (!s.capture->open_groups.empty() && t->kind != task_kind::event_record && t->kind != task_kind::event_wait)
      [[unlikely]] {
    for (const auto& [lane, group] : s.capture->open_groups)
      if (lane == s.capture_lane) task_groups_.at(group).nodes.push_back(s.capture->nodes.size() - 1);
  }
}

NPURT_DECL std::error_code scheduler::capture_wait(stream_state& s, const event_state& e, std::string& why) {
  capture_state* c = const_cast<capture_state*>(e.captured_in);
  const std::error_code refused = make_error_code(errc::capture_unsupported);
  if (s.capture.get() != c && (s.capture || s.device != c->device)) {
    why = s.capture ? "the event was recorded in another open capture, and captures are not merged"
                    : "the event was recorded in an open capture of device " + std::to_string(c->device) +
                          ", and only a stream of that device can join it";
    if (s.capture) invalidate_capture(s, refused, "npurt::stream::wait: " + why);
    return refused;
  }
  // The record waited for: the event's latest in this capture.
  std::size_t record = 0;
  for (auto it = c->records.rbegin(); it != c->records.rend(); ++it)
    if (it->first == e.id) {
      record = it->second;
      break;
    }
  if (!s.capture) {
    // Joins, as a lane of its own: its work from now on is the capture's.
    s.capture = find_stream(c->origin)->capture;
    s.capture_lane = static_cast<std::uint32_t>(c->lane_streams.size());
    c->lane_streams.push_back(s.id);
    c->lane_modes.emplace_back(s.priority, s.flags);
  }
  if (c->lanes[record] == s.capture_lane) return {};  // stream order already waits for it
  task* w = new_task(s, task_kind::event_wait);
  task_side& x = extra(w);
  x.target_stream = c->lanes[record];
  x.target_seq = record;
  x.event_id = e.id;
  w->name = "event_wait";
  capture_task(s, w);
  return {};
}

NPURT_DECL void scheduler::invalidate_capture(stream_state& s, std::error_code ec, std::string why) {
  if (!s.capture || s.capture->invalidated) return;
  s.capture->invalidated = ec;
  s.capture->why = std::move(why);
}

NPURT_DECL stream_state* scheduler::strict_capture(device_id dev) noexcept {
  for (auto& sp : streams_)
    if (sp && sp->capture && !sp->capture->relaxed && (dev < 0 || sp->device == dev)) return sp.get();
  return nullptr;
}

NPURT_DECL void scheduler::drop_nodes(std::vector<task*>& nodes, std::vector<std::uint64_t>& events) noexcept {
  for (task* t : nodes) free_task(t);
  held_nodes_ -= nodes.size();
  nodes.clear();
  for (std::uint64_t e : events) release_event(e);
  events.clear();
}

NPURT_DECL void scheduler::leave_capture(capture_state& c) noexcept {
  for (const std::uint32_t id : c.lane_streams)
    if (stream_state* ls = id != 0 ? find_stream(id) : nullptr; ls && ls->capture.get() == &c) {
      ls->capture.reset();
      ls->capture_lane = 0;
    }
  for (std::uint64_t e : c.events)
    if (event_state* st = find_event(e); st && st->captured_in == &c) st->captured_in = nullptr;
}

NPURT_DECL void scheduler::abandon_capture(const std::shared_ptr<capture_state>& c) noexcept {
  leave_capture(*c);
  drop_nodes(c->nodes, c->events);
  drop_allocations(c->allocs);
  drop_task_groups(c->groups);
}

NPURT_DECL std::uint64_t scheduler::end_capture(stream_state& s, bool auto_free, std::error_code& ec,
                                                std::string& why) {
  const std::shared_ptr<capture_state> c = s.capture;
  if (c->origin != s.id) {
    ec = make_error_code(errc::capture_unmatched);
    why = "stream " + std::to_string(s.id) + " joined the capture that stream " + std::to_string(c->origin) +
          " began: end it there (the capture goes on)";
    return 0;
  }
  if (c->updating) {
    ec = make_error_code(errc::capture_unmatched);
    why = "the stream is in a task update (begin_task_update), not a capture: end it with end_task_update";
    return 0;
  }
  leave_capture(*c);
  if (!c->invalidated) {
    // Every lane must be waited for by another, up to its last node: its work would otherwise
    // be cut loose from the graph's end (ACL_ERROR_RT_STREAM_UNJOINED, cudaErrorStreamCaptureUnjoined).
    std::vector<std::size_t> last(c->lane_streams.size(), 0);
    std::vector<bool> has(c->lane_streams.size(), false);
    for (std::size_t i = 0; i < c->nodes.size(); ++i) {
      last[c->lanes[i]] = i;
      has[c->lanes[i]] = true;
    }
    for (std::uint32_t lane = 1; lane < c->lane_streams.size(); ++lane) {
      bool joined = !has[lane];
      for (std::size_t i = 0; i < c->nodes.size() && !joined; ++i) {
        const task& n = *c->nodes[i];
        joined = n.kind == task_kind::event_wait && c->lanes[i] != lane && n.extra->target_stream == lane &&
                 n.extra->target_seq == last[lane];
      }
      if (!joined) {
        ec = make_error_code(errc::capture_unjoined);
        why = "stream " + std::to_string(c->lane_streams[lane]) +
              " joined the capture, and nothing in it waits for that stream's last captured work (record an "
              "event there and wait for it on the capture's stream before end_capture)";
        drop_nodes(c->nodes, c->events);
        drop_allocations(c->allocs);
        drop_task_groups(c->groups);
        return 0;
      }
    }
  }
  if (c->invalidated) {
    // CANN and CUDA answer with the capture's own code; the words name the call that broke it.
    ec = make_error_code(errc::capture_invalidated);
    why = std::move(c->why);
    drop_nodes(c->nodes, c->events);
    drop_allocations(c->allocs);
    drop_task_groups(c->groups);
    return 0;
  }
  const std::uint64_t id = next_graph_++;
  graph_state& g = graphs_[id];
  g.device = s.device;
  g.nodes = std::move(c->nodes);
  g.lanes = std::move(c->lanes);
  g.lane_count = static_cast<std::uint32_t>(c->lane_streams.size());
  g.lane_modes = std::move(c->lane_modes);
  g.events = std::move(c->events);
  g.auto_free = auto_free;
  g.frees = std::move(c->frees);
  g.collectives = std::any_of(g.nodes.begin(), g.nodes.end(), [](const task* n) { return n->collective(); });
  g.allocs = std::move(c->allocs);
  for (const std::uint64_t a : g.allocs) {
    graph_allocation& m = graph_memory_.at(a);
    m.graph = id;
    m.capture = nullptr;
  }
  // A group never ended was never handed out: nobody can name it.
  for (const std::uint64_t gid : c->groups) {
    const bool open =
        std::any_of(c->open_groups.begin(), c->open_groups.end(), [&](const auto& lg) { return lg.second == gid; });
    if (open) {
      task_groups_.erase(gid);
      continue;
    }
    task_group_state& tg = task_groups_.at(gid);
    tg.graph = id;
    tg.capture = nullptr;
    g.groups.push_back(gid);
  }
  return id;
}

NPURT_DECL const graph_state* scheduler::find_graph(std::uint64_t id) const noexcept {
  const auto it = graphs_.find(id);
  return it == graphs_.end() ? nullptr : &it->second;
}

NPURT_DECL void scheduler::release_graph(std::uint64_t id) noexcept {
  const auto it = graphs_.find(id);
  if (it == graphs_.end()) return;
  graph_state& g = it->second;
  drop_nodes(g.nodes, g.events);
  if (!g.allocs.empty()) {
    // Its memory outlives the work its launches enqueued; an allocation a launch left
    // outstanding stays the program's to free.
    std::erase_if(g.in_flight, [&](const auto& p) { return position_reached(p.first, p.second); });
    for (const std::uint64_t a : g.allocs) {
      const auto m = graph_memory_.find(a);
      if (m == graph_memory_.end()) continue;  // its device was reset
      if (m->second.outstanding) m->second.graph = 0;
      else release_graph_memory(a, g.in_flight);
    }
  }
  drop_task_groups(g.groups);
  for (const std::uint32_t sid : g.lane_streams) release_stream(sid);
  graphs_.erase(it);
}

namespace sched_detail {
// How node `b` of an update differs from node `a` of the graph it updates, in words, or empty
// when `b` may take `a`'s place: the same kind, stream and dependencies; for a copy the same
// memories (kind, devices, pinned ends); for a collective the same communicator and calls but
// for their buffers. Kernels and callbacks may change freely, as cudaGraphExecUpdate's may.
inline std::string node_difference(const task& a, std::uint32_t lane_a, const task& b, std::uint32_t lane_b) {
  if (a.kind != b.kind)
    return "is " + std::string(to_string(b.kind)) + " in the update, " + std::string(to_string(a.kind)) +
           " in the graph";
  if (lane_a != lane_b)
    return "runs on the capture's stream " + std::to_string(lane_b) + " in the update, " + std::to_string(lane_a) +
           " in the graph";
  switch (a.kind) {
    case task_kind::event_wait:
      if (a.extra->target_stream != b.extra->target_stream || a.extra->target_seq != b.extra->target_seq)
        return "waits for another node";
      return {};
    case task_kind::event_record:
      return a.extra->event_id == b.extra->event_id ? std::string{} : "records another event";
    case task_kind::memcpy:
    case task_kind::memset: {
      const copy_desc& x = a.extra->copy;
      const copy_desc& y = b.extra->copy;
      if (x.kind != y.kind || x.src_device != y.src_device || x.dst_device != y.dst_device ||
          a.extra->pinned_ends != b.extra->pinned_ends)
        return "copies between other memories (the copy's kind, devices or pinned ends differ)";
      return {};
    }
    case task_kind::collective: {
      const collective_desc* x = a.collective();
      const collective_desc* y = b.collective();
      const auto same_call = [](const collective_call& p, const collective_call& q) {
        return p.op == q.op && p.red == q.red && p.type == q.type && p.count == q.count && p.root == q.root &&
               p.send_counts == q.send_counts && p.send_displs == q.send_displs && p.recv_counts == q.recv_counts &&
               p.recv_displs == q.recv_displs;
      };
      if (!x || !y || x->comm != y->comm || x->rank != y->rank || x->calls.size() != y->calls.size() ||
          !std::equal(x->calls.begin(), x->calls.end(), y->calls.begin(), same_call))
        return "is another collective call (communicator, operation, type, count or root)";
      return {};
    }
    case task_kind::value_write:
    case task_kind::value_wait:
      // The word's address, the value and the condition may change; not its device.
      return a.extra->copy.dst_device == b.extra->copy.dst_device ? std::string{}
                                                                  : "reads or writes a word of another device";
    case task_kind::kernel:
    case task_kind::host_callback: return {};
  }
  return {};
}
}  // namespace sched_detail

NPURT_DECL void scheduler::update_graph(std::uint64_t id, std::uint64_t from, std::error_code& ec, std::string& why) {
  graph_state& g = graphs_.at(id);
  graph_state& f = graphs_.at(from);
  ec = make_error_code(errc::graph_update_mismatch);
  if (f.device != g.device) {
    why = "the graph is of device " + std::to_string(g.device) + ", the update of device " + std::to_string(f.device);
    return;
  }
  if (g.has_memory() || f.has_memory()) {
    why =
        "graph memory (a pool allocation captured in either graph) cannot be updated, as CUDA's memory nodes "
        "cannot";
    return;
  }
  if (f.nodes.size() != g.nodes.size() || f.lane_count != g.lane_count) {
    why = "the graph has " + std::to_string(g.nodes.size()) + " nodes on " + std::to_string(g.lane_count) +
          " streams, the update " + std::to_string(f.nodes.size()) + " on " + std::to_string(f.lane_count);
    return;
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (std::string d = sched_detail::node_difference(*g.nodes[i], g.lanes[i], *f.nodes[i], f.lanes[i]); !d.empty()) {
      why = "node " + std::to_string(i) + " (" + std::string(g.nodes[i]->name) + ") " + d;
      return;
    }
  ec.clear();
  // The same shape: the update's nodes replace the graph's. Launches already made run their own
  // clones; the graph keeps its streams (and their priorities) and its identity.
  drop_nodes(g.nodes, g.events);
  g.nodes = std::exchange(f.nodes, {});
  g.events = std::exchange(f.events, {});
  g.collectives = f.collectives;
}

NPURT_DECL void scheduler::drop_task_groups(std::vector<std::uint64_t>& ids) noexcept {
  for (const std::uint64_t id : ids) task_groups_.erase(id);
  ids.clear();
}

NPURT_DECL void scheduler::begin_task_group(stream_state& s, std::error_code& ec, std::string& why) {
  capture_state* c = s.capture.get();
  if (!c) {
    ec = make_error_code(errc::stream_not_captured);
    why = "no capture is open on it (a task group marks work of a capture: begin_capture first)";
  } else if (c->updating) {
    ec = make_error_code(errc::stream_captured);
    why = "it is in a task update, which replaces a group's tasks and marks none of its own";
  } else if (std::any_of(c->open_groups.begin(), c->open_groups.end(),
                         [&](const auto& lg) { return lg.first == s.capture_lane; })) {
    ec = make_error_code(errc::invalid_argument);
    why = "a task group is open on it already (end_task_group first)";
  } else {
    const std::uint64_t id = next_task_group_++;
    task_group_state& tg = task_groups_[id];
    tg.capture = c;
    tg.lane = s.capture_lane;
    c->groups.push_back(id);
    c->open_groups.emplace_back(s.capture_lane, id);
  }
}

NPURT_DECL std::uint64_t scheduler::end_task_group(stream_state& s, std::error_code& ec, std::string& why) {
  capture_state* c = s.capture.get();
  if (!c) {
    ec = make_error_code(errc::stream_not_captured);
    why = "no capture is open on it (begin_capture, then begin_task_group)";
    return 0;
  }
  const auto it = std::find_if(c->open_groups.begin(), c->open_groups.end(),
                               [&](const auto& lg) { return lg.first == s.capture_lane; });
  if (it == c->open_groups.end()) {
    ec = make_error_code(errc::invalid_argument);
    why = "no task group is open on it (begin_task_group first)";
    return 0;
  }
  const std::uint64_t id = it->second;
  c->open_groups.erase(it);
  return id;
}

NPURT_DECL void scheduler::begin_task_update(stream_state& s, std::uint64_t group, std::error_code& ec,
                                             std::string& why) {
  const auto it = task_groups_.find(group);
  const graph_state* g = it == task_groups_.end() ? nullptr : find_graph(it->second.graph);
  if (s.capture) {
    ec = make_error_code(errc::stream_captured);
    why = s.capture->updating ? "a task update is open on it already (end_task_update first)"
                              : "a capture is open on it (a task update runs on a stream outside any capture)";
  } else if (it != task_groups_.end() && it->second.capture) {
    ec = make_error_code(errc::invalid_argument);
    why = "the task group's capture is still open (end_capture first: a group is updated in its graph)";
  } else if (!g || g->lost) {
    ec = make_error_code(errc::invalid_graph);
    why = !g ? "the task group's graph was destroyed (or its capture failed)"
             : "the task group's graph was lost with its device's reset";
  } else if (g->device != s.device) {
    ec = make_error_code(errc::stream_device_mismatch);
    why = "the task group's graph is of device " + std::to_string(g->device) + ", the stream of device " +
          std::to_string(s.device);
  } else if (g->has_memory()) {
    ec = make_error_code(errc::graph_update_mismatch);
    why =
        "the task group's graph has graph memory (a pool allocation captured in it), which cannot be updated, as "
        "CUDA's memory nodes cannot";
  } else {
    begin_capture(s, true);
    s.capture->updating = group;
  }
}

NPURT_DECL void scheduler::end_task_update(stream_state& s, std::error_code& ec, std::string& why) {
  const std::shared_ptr<capture_state> c = s.capture;
  if (!c) {
    ec = make_error_code(errc::stream_not_captured);
    why = "no task update is open on it (begin_task_update first)";
    return;
  }
  if (!c->updating) {
    ec = make_error_code(errc::capture_unmatched);
    why = "a capture is open on it, not a task update: end it with end_capture";
    return;
  }
  leave_capture(*c);
  // Whatever ends it, the update's nodes go unless they take the group's place.
  struct dropper {
    scheduler& self;
    capture_state& c;
    ~dropper() { self.drop_nodes(c.nodes, c.events); }
  } const drop{*this, *c};
  if (c->invalidated) {
    ec = make_error_code(errc::capture_invalidated);
    why = std::move(c->why);
    return;
  }
  const auto it = task_groups_.find(c->updating);
  graph_state* g = nullptr;
  if (it != task_groups_.end())
    if (const auto gi = graphs_.find(it->second.graph); gi != graphs_.end() && !gi->second.lost) g = &gi->second;
  if (!g) {
    ec = make_error_code(errc::invalid_graph);
    why = "the task group's graph was destroyed, or lost with its device's reset, during the update";
    return;
  }
  const task_group_state& tg = it->second;
  ec = make_error_code(errc::graph_update_mismatch);
  if (c->nodes.size() != tg.nodes.size()) {
    const auto tasks = [](std::size_t k) { return std::to_string(k) + (k == 1 ? " task" : " tasks"); };
    why = "the task group has " + tasks(tg.nodes.size()) + ", the update " + tasks(c->nodes.size()) +
          " (the update enqueues as many, of the same kinds, in the same order)";
    return;
  }
  for (std::size_t i = 0; i < tg.nodes.size(); ++i) {
    const std::size_t n = tg.nodes[i];
    // The update runs on one stream, which stands for the group's.
    if (std::string d = sched_detail::node_difference(*g->nodes[n], tg.lane, *c->nodes[i], tg.lane); !d.empty()) {
      why = "task " + std::to_string(i) + " of the group (node " + std::to_string(n) + ", " +
            std::string(g->nodes[n]->name) + ") " + d;
      return;
    }
  }
  ec.clear();
  // Launches made already run their clones; the next launch clones the new nodes.
  for (std::size_t i = 0; i < tg.nodes.size(); ++i) {
    free_task(std::exchange(g->nodes[tg.nodes[i]], c->nodes[i]));
    --held_nodes_;
  }
  c->nodes.clear();
}

NPURT_DECL void* scheduler::capture_malloc(stream_state& s, std::size_t bytes, std::error_code& ec, std::string& why) {
  if (s.capture->updating) {
    ec = make_error_code(errc::capture_unsupported);
    why = std::string(task_update_memory);
    invalidate_capture(s, ec, "npurt::mem_pool::malloc_async: " + why);
    return nullptr;
  }
  void* p = parts_.memory_.device_malloc(s.device, bytes, ec);
  if (ec) {
    why = "a graph allocation of " + std::to_string(bytes) + " bytes on the capturing stream " + std::to_string(s.id) +
          " was refused (" + ec.message() + ")";
    invalidate_capture(s, ec, "npurt::mem_pool::malloc_async: " + why);
    return nullptr;
  }
  const auto a = reinterpret_cast<std::uint64_t>(p);
  graph_allocation& m = graph_memory_[a];
  m.capture = s.capture.get();
  m.device = s.device;
  m.bytes = bytes;
  s.capture->allocs.push_back(a);
  return p;
}

NPURT_DECL void scheduler::capture_free(stream_state& s, void* p, std::error_code& ec, std::string& why) {
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    why = "the pointer is null";
    return;
  }
  capture_state& c = *s.capture;
  const auto a = reinterpret_cast<std::uint64_t>(p);
  const auto it = graph_memory_.find(a);
  std::ostringstream os;
  os << p;
  if (c.updating) {
    ec = make_error_code(errc::capture_unsupported);
    os << ": " << task_update_memory;
  } else if (it == graph_memory_.end()) {
    ec = make_error_code(errc::capture_unsupported);
    os << " is not memory this capture allocated, and a capture frees only its own allocations (free other "
          "memory before begin_capture or after end_capture)";
  } else if (it->second.capture && it->second.capture != &c) {
    ec = make_error_code(errc::capture_unsupported);
    os << " is an allocation of another open capture: free it there, or after its graph's launch";
  } else if (!it->second.capture) {
    // Another graph's allocation (or one its destroyed graph left outstanding): a free node of
    // this graph, which each launch ends as the program's free would, as CUDA lets a graph free
    // memory another graph allocated.
    const graph_allocation& m = it->second;
    if (m.freed_in_graph) {
      ec = make_error_code(errc::capture_unsupported);
      os << " is freed by its own graph at the end of each launch, and by nothing else";
    } else if (m.device != s.device) {
      ec = make_error_code(errc::capture_unsupported);
      os << " is memory of device " << m.device << ", and the capture is of device " << s.device;
    } else if (std::find(c.frees.begin(), c.frees.end(), a) != c.frees.end()) {
      ec = make_error_code(errc::double_free);
      os << " was freed already in this capture";
    } else {
      c.frees.push_back(a);
      c.freed.push_back(a);
      return;
    }
  } else if (it->second.freed_in_graph) {
    ec = make_error_code(errc::double_free);
    os << " was freed already in this capture";
  } else {
    it->second.freed_in_graph = true;
    c.freed.push_back(a);
    return;
  }
  why = os.str();
  invalidate_capture(s, ec, "npurt::mem_pool::free_async: " + why);
}

NPURT_DECL void scheduler::check_freed(capture_state& c, const task& t) {
  for (const std::uint64_t a : c.freed) {
    const auto m = graph_memory_.find(a);
    if (m == graph_memory_.end()) continue;  // another graph's, released since (its free then fails the launch)
    const std::uint64_t hi = a + m->second.bytes;
    std::string what;
    if (const kernel_desc* k = t.kind == task_kind::kernel ? t.kernel() : nullptr) {
      if (const std::string_view op = memory_registry::operand_touching(*k, a, hi); !op.empty())
        what = "operand " + std::string(op) + " of kernel '" + std::string(k->display_name()) + "'";
    } else if (t.kind == task_kind::memcpy || t.kind == task_kind::memset || t.kind == task_kind::value_write ||
               t.kind == task_kind::value_wait) {
      const copy_desc& cp = t.extra->copy;
      const auto meets = [&](const void* q, std::size_t n) {
        return q && range_meets(reinterpret_cast<std::uint64_t>(q), n, a, hi);
      };
      if (meets(cp.dst, cp.dst_span())) what = "the destination of " + std::string(t.name);
      else if (t.kind == task_kind::memcpy && meets(cp.src, cp.src_span()))
        what = "the source of " + std::string(t.name);
    }
    if (what.empty()) continue;
    if (!c.invalidated) {
      std::ostringstream os;
      os << "npurt::stream: " << what << " is graph memory at " << reinterpret_cast<const void*>(a)
         << " that the capture freed before it (a free node ends it; allocate it again, or free it later)";
      c.invalidated = make_error_code(errc::invalid_pointer);
      c.why = os.str();
    }
    return;
  }
}

NPURT_DECL void scheduler::free_graph_allocation(const void* p, std::uint32_t stream, std::error_code& ec,
                                                 std::string& why) {
  const auto a = reinterpret_cast<std::uint64_t>(p);
  graph_allocation& m = graph_memory_.at(a);
  std::ostringstream os;
  os << p << " (a graph's allocation of " << m.bytes << " bytes)";
  if (m.capture) {
    ec = make_error_code(errc::capture_unsupported);
    os << " belongs to an open capture: free it there (a free node), or after the graph's launch";
  } else if (m.freed_in_graph) {
    ec = make_error_code(errc::invalid_pointer);
    os << " is freed by its own graph at the end of each launch, and by nothing else";
  } else if (!m.outstanding) {
    ec = make_error_code(m.launched ? errc::double_free : errc::invalid_pointer);
    os << (m.launched ? " was freed already since its graph's last launch"
                      : " is not allocated before its graph's first launch");
  } else {
    m.outstanding = false;
    if (m.graph == 0) {
      // Its graph is gone: the memory goes back to the device, after the work enqueued on the stream so far.
      std::vector<std::pair<std::uint32_t, std::uint64_t>> after;
      if (const stream_state* st = stream != 0 ? find_stream(stream) : nullptr)
        after.emplace_back(stream, st->enqueued);
      release_graph_memory(a, after);
    }
    return;
  }
  why = os.str();
}

NPURT_DECL void scheduler::release_graph_memory(
    std::uint64_t addr, const std::vector<std::pair<std::uint32_t, std::uint64_t>>& after) noexcept {
  const auto it = graph_memory_.find(addr);
  if (it == graph_memory_.end()) return;
  const device_id dev = it->second.device;
  graph_memory_.erase(it);
  memory_registry& mem = parts_.memory_;
  sched_detail::release_when_reached::arm(
      *this,
      [&mem, dev, addr] {
        std::error_code ignored;  // a reset of its device has taken it already
        mem.device_free(dev, reinterpret_cast<void*>(addr), ignored);
      },
      after);
}

NPURT_DECL void scheduler::drop_allocations(std::vector<std::uint64_t>& allocs) noexcept {
  for (const std::uint64_t a : allocs) release_graph_memory(a, {});
  allocs.clear();
}

NPURT_HOT_DECL task* scheduler::clone_node(stream_state& s, const task& n) {
  task* t = new_task(s, n.kind);
  t->name = n.name;
  t->engine = n.engine;
  t->block_dim = n.block_dim;
  if (n.has_desc) t->describe(n.desc.kernel, n.desc.ref);
  else t->fixed = n.fixed;
  if (const task_side* x = n.extra) {
    task_side& y = extra(t);
    y.copy = x->copy;
    y.event_id = x->event_id;
    y.pinned_ends = x->pinned_ends;
    y.condition = x->condition;
    y.operand = x->operand;
    if (x->callback) y.callback = own_callback(*x->callback);
  }
  return t;
}

NPURT_DECL std::shared_ptr<const void> scheduler::numbered(const collective_desc& node) {
  auto d = std::make_shared<collective_desc>();
  d->comm = node.comm;
  d->rank = node.rank;
  d->calls = node.calls;
  d->settings = node.settings;
  d->sequence.reserve(node.calls.size());
  for (const collective_call& c : node.calls) d->sequence.push_back(d->comm->take_sequence(d->rank, c));
  return d;
}

NPURT_DECL bool scheduler::graph_memory_refused(const graph_state& g, const stream_state& s, std::error_code& ec,
                                                std::string& why) {
  if (s.capture) {
    ec = make_error_code(errc::capture_unsupported);
    why =
        "a graph that allocates or frees graph memory cannot be launched into a capture (as CUDA refuses "
        "memory nodes in a child graph)";
    return true;
  }
  for (const std::uint64_t a : g.frees) {
    // Its free nodes end what another graph's launch left allocated: there must be one.
    const auto m = graph_memory_.find(a);
    if (m != graph_memory_.end() && m->second.outstanding) continue;
    const bool twice = m != graph_memory_.end() && m->second.launched;
    ec = make_error_code(twice ? errc::double_free : errc::invalid_pointer);
    std::ostringstream os;
    os << "the graph frees the graph allocation at " << reinterpret_cast<const void*>(a) << ", which "
       << (m == graph_memory_.end() ? "is gone (freed for good, or its device was reset)"
           : twice                  ? "was freed already since its graph's last launch"
                                    : "is not allocated before its graph's first launch");
    why = os.str();
    return true;
  }
  for (const std::uint64_t a : g.allocs)
    if (const graph_allocation& m = graph_memory_.at(a); m.outstanding && !g.auto_free) {
      // cudaGraphLaunch's rule: one launch's allocation at a time, at the graph's one address.
      ec = make_error_code(errc::invalid_argument);
      std::ostringstream os;
      os << "the graph's allocation at " << reinterpret_cast<const void*>(a) << " (" << m.bytes
         << " bytes), which its previous launch left allocated, is not freed yet: free it (mem_pool::free_async "
            "or device::free) before launching the graph again";
      why = os.str();
      return true;
    }
  return false;
}

NPURT_DECL void scheduler::graph_memory_launched(graph_state& g, const stream_state& s) {
  for (const std::uint64_t a : g.allocs) {
    graph_allocation& m = graph_memory_.at(a);
    m.launched = true;
    m.outstanding = !m.freed_in_graph;
  }
  std::vector<std::pair<std::uint32_t, std::uint64_t>> ends{{s.id, s.enqueued}};
  for (const std::uint32_t sid : g.lane_streams) ends.emplace_back(sid, find_stream(sid)->enqueued);
  std::erase_if(g.in_flight, [&](const auto& p) { return position_reached(p.first, p.second); });
  g.in_flight.insert(g.in_flight.end(), ends.begin(), ends.end());
  for (const std::uint64_t a : g.frees) {
    graph_allocation& m = graph_memory_.at(a);
    m.outstanding = false;
    // This launch reads the memory until its end: the owner's destruction, or now the loss of
    // the owner, gives it back only after that.
    if (m.graph == 0) {
      release_graph_memory(a, ends);
    } else {
      auto& owner = graphs_.at(m.graph).in_flight;
      owner.insert(owner.end(), ends.begin(), ends.end());
    }
  }
}

NPURT_DECL std::pair<std::uint64_t, std::uint64_t> scheduler::launch_graph(std::uint64_t id, stream_state& s,
                                                                           std::error_code& ec, std::string& why) {
  graph_state& g = graphs_.at(id);
  // Pinned host memory a copy node reads or writes must still be allocated: freed, it could be
  // anyone's by now. Device memory is checked when each copy runs, as for any queued copy.
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const task& n = *g.nodes[i];
    if (n.kind != task_kind::memcpy || n.extra->pinned_ends == 0) continue;
    const copy_desc& c = n.extra->copy;
    const auto gone = [&](const void* p, std::size_t span) {
      const host_allocation* h = parts_.memory_.find_host_allocation(p);
      return !h || span > h->bytes - static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                                              static_cast<const std::byte*>(h->base));
    };
    const bool src_gone = (n.extra->pinned_ends & 1) && gone(c.src, c.src_span());
    if (src_gone || ((n.extra->pinned_ends & 2) && gone(c.dst, c.dst_span()))) {
      ec = make_error_code(errc::invalid_pointer);
      why = "node " + std::to_string(i) + " (" + std::string(n.name) + ") copies " + (src_gone ? "from" : "to") +
            " pinned host memory that was freed after the capture (system::host_free)";
      return {0, 0};
    }
  }
  // Out of line: the launch path stays small enough for its enqueues to be inlined.
  if (g.has_memory()) [[unlikely]]
    if (graph_memory_refused(g, s, ec, why)) return {0, 0};
  if (s.capture && g.lane_count > 1) {
    ec = make_error_code(errc::capture_unsupported);
    why = "a graph of " + std::to_string(g.lane_count) +
          " streams cannot be launched into a capture (a graph of one stream can: its nodes join the capture)";
    return {0, 0};
  }
  // A collective node's communicator must still take calls: a launch after its abort would
  // leave the other ranks' parts waiting for this one.
  for (std::size_t i = 0; g.collectives && i < g.nodes.size(); ++i)
    if (const collective_desc* d = g.nodes[i]->collective(); d && d->comm->aborted) {
      ec = make_error_code(errc::operation_aborted);
      why = "node " + std::to_string(i) + " (" + std::string(g.nodes[i]->name) + ") is a call of communicator '" +
            d->comm->name + "', which was aborted" +
            (d->comm->abort_reason.empty() ? "" : " (" + d->comm->abort_reason + ")");
      return {0, 0};
    }
  // The other lanes run on streams of the graph's own, of the priority and flags their
  // streams had in the capture: a communication lane keeps the priority that orders it before
  // the compute lanes' work.
  while (g.lane_streams.size() + 1 < g.lane_count) {
    // Not stop_on_failure: nobody reads a lane's failure to let it run again (the launching
    // stream reports it).
    const auto& [priority, flags] = g.lane_modes[g.lane_streams.size() + 1];
    g.lane_streams.push_back(create_stream(g.device, priority, flags & ~stop_on_failure_flag));
  }
  // One host call: node i is submitted launch_overhead + i graph_node_overhead after it begins,
  // whichever stream it goes to.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> placed(g.nodes.size());  // (stream, position)
  std::vector<std::uint64_t> ids(g.nodes.size());
  std::pair<std::uint64_t, std::uint64_t> last{0, 0};
  sim_time at = later(std::max(s.host_cursor, now()), parts_.opts_.launch_overhead);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const task& n = *g.nodes[i];
    stream_state& ls = g.lanes[i] == 0 ? s : *find_stream(g.lane_streams[g.lanes[i] - 1]);
    if (i != 0) at = later(at, parts_.opts_.graph_node_overhead);
    ls.host_cursor = std::max(ls.host_cursor, at);
    if (event_state* e = n.kind == task_kind::event_record ? find_event(n.extra->event_id) : nullptr) {
      record_event(ls, *e, picoseconds{0});
      placed[i] = {ls.id, ls.enqueued};
      ids[i] = e->record_task;
    } else {
      // A record whose event is gone (its device was reset) still runs in stream order.
      task* t = clone_node(ls, n);
      if (const collective_desc* d = g.collectives ? n.collective() : nullptr; d && !ls.capture)
        t->desc.ref = numbered(*d);
      if (n.kind == task_kind::event_wait && !ls.capture) {
        // A dependency between lanes: on the position the node waited for took at this launch.
        task_side& x = *t->extra;
        const auto target = static_cast<std::size_t>(n.extra->target_seq);
        x.target_stream = placed[target].first;
        x.target_seq = placed[target].second;
        x.record_task = ids[target];
        note_wait(ls, x.target_stream, x.target_seq);
      }
      ids[i] = t->id;
      placed[i] = {ls.id, enqueue(ls, t, picoseconds{0})};
    }
    if (g.lanes[i] == 0) last = {placed[i].second, ids[i]};
  }
  s.host_cursor = std::max(s.host_cursor, at);
  if (s.capture) return {0, 0};  // the clones are nodes of that capture
  g.last_ids = std::move(ids);
  if (g.has_memory()) [[unlikely]]
    graph_memory_launched(g, s);
  for (const std::uint32_t sid : g.lane_streams) {
    stream_state& ls = *find_stream(sid);
    auto& by = ls.launched_by;
    by.erase(by.begin(), std::find_if(by.begin(), by.end(), [&](const auto& l) { return l.upto > ls.completed; }));
    if (ls.enqueued > ls.completed) by.push_back({ls.enqueued, s.id, last.first});
  }
  return last;
}

}  // namespace npurt::detail
