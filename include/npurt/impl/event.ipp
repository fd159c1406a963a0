// npurt/impl/event.ipp
#pragma once

#include <npurt/event.hpp>

namespace npurt {

NPURT_DECL event event::user_event(detail::runtime& rt, std::uint64_t id) {
  event e;
  e.rt_ = &rt;
  e.id_ = id;
  rt.retain_event(id);  // the first handle
  return e;
}

NPURT_DECL event::event(const event& o) noexcept
    : rt_(o.rt_), id_(o.id_), stream_(o.stream_), seq_(o.seq_), task_(o.task_) {
  if (rt_ && id_) rt_->retain_event(id_);
}

NPURT_DECL event& event::operator=(const event& o) noexcept {
  if (this != &o) {
    event tmp(o);
    *this = std::move(tmp);
  }
  return *this;
}

NPURT_DECL event& event::operator=(event&& o) noexcept {
  if (this != &o) {
    release();
    rt_ = std::move(o.rt_);
    id_ = o.id_;
    stream_ = o.stream_;
    seq_ = o.seq_;
    task_ = o.task_;
  }
  return *this;
}

NPURT_DECL event::~event() { release(); }

NPURT_DECL bool event::valid() const noexcept {
  if (!rt_) return false;
  // The same tests as position(): a reset drops a user event's state, and marks the streams
  // whose task events it made meaningless.
  return id_ != 0 ? rt_->find_event(id_) != nullptr : !rt_->stream_was_reset(stream_);
}

NPURT_DECL void event::release() noexcept {
  if (rt_ && id_) rt_->release_event(id_);
}

NPURT_DECL bool event::position(std::uint32_t& stream, std::uint64_t& seq, std::error_code& ec) const noexcept {
  ec.clear();
  if (!rt_) {
    ec = make_error_code(errc::invalid_event);
    return false;
  }
  if (id_ == 0) {
    // A reset aborted the stream's pending work: "completed" would be a wrong answer.
    if (rt_->stream_was_reset(stream_)) {
      ec = make_error_code(errc::invalid_event);
      return false;
    }
    stream = stream_;
    seq = seq_;
    return true;
  }
  const detail::event_state* st = rt_->find_event(id_);
  if (!st) {
    ec = make_error_code(errc::invalid_event);
    return false;
  }
  if (st->records == 0) {
    ec = make_error_code(errc::event_not_recorded);
    return false;
  }
  stream = st->stream;
  seq = st->seq;
  return true;
}

NPURT_DECL device_id event::device_or_none() const noexcept {
  if (!rt_) return -1;
  if (id_ != 0) {
    const detail::event_state* st = rt_->find_event(id_);
    return st ? st->device : -1;
  }
  // A task event knows only its stream, whose state goes once its handle is gone and its work
  // has drained.
  const detail::stream_state* s = rt_->find_stream(stream_);
  return s ? s->device : -1;
}

namespace detail {
// The unread failure of the stream at or before position q, or null.
inline const detail::failure* failure_before(detail::runtime& rt, std::uint32_t s, std::uint64_t q) noexcept {
  const detail::failure* f = rt.peek_stream_failure(s);
  return f && f->seq <= q ? f : nullptr;
}
}  // namespace detail

NPURT_DECL bool event::query(std::error_code& ec) const noexcept {
  // The thread first: the event's state is the loop thread's to read, too.
  if (rt_ && (ec = rt_->check_thread())) return false;
  std::uint32_t s = 0;
  std::uint64_t q = 0;
  if (!position(s, q, ec)) return false;
  if (const detail::failure* f = detail::failure_before(*rt_, s, q)) {
    ec = f->ec;
    return false;
  }
  if (rt_->position_aborted(s, q)) [[unlikely]] {
    ec = make_error_code(errc::operation_aborted);  // dropped by an abort: it never completed
    return false;
  }
  return rt_->position_reached(s, q);
}

NPURT_DECL std::error_code event::status() const noexcept {
  std::error_code ec;
  (void)query(ec);
  return ec;
}

NPURT_DECL bool event::query() const {
  std::error_code ec;
  const bool r = query(ec);
  std::uint32_t s = 0;
  std::uint64_t q = 0;
  std::error_code pos_ec;
  if (ec && ec != errc::wrong_thread && position(s, q, pos_ec))
    if (const detail::failure* f = detail::failure_before(*rt_, s, q))
      detail::throw_failure(*f, "npurt::event::query: " + f->describe());
  if (ec == errc::operation_aborted)
    throw_error_on(device_or_none(), ec, "npurt::event::query: " + wait_problem(ec, {}));
  throw_if(ec, "npurt::event::query");
  return r;
}

NPURT_DECL void event::synchronize(std::optional<picoseconds> timeout, std::error_code& ec) const {
  if (rt_ && (ec = rt_->check_thread())) return;
  std::uint32_t s = 0;
  std::uint64_t q = 0;
  if (!position(s, q, ec)) return;
  if ((ec = detail::check_timeout(timeout))) return;
  const sim_time deadline = timeout ? later(rt_->now(), *timeout) : end_of_time;
  detail::runtime& rt = *rt_;
  detail::wait_blocking(rt, [&] { return rt.position_reached(s, q); }, deadline, ec);
  if (ec) return;
  rt.device_synchronized(device_or_none(), /*all_streams=*/false);
  if (const detail::failure* f = detail::failure_before(rt, s, q)) ec = f->ec;
  else if (rt.position_aborted(s, q)) ec = make_error_code(errc::operation_aborted);
}

NPURT_DECL std::string event::wait_problem(std::error_code ec, std::optional<picoseconds> timeout) const {
  if (ec == errc::invalid_argument && timeout && timeout->count() < 0) return detail::timeout_problem(*timeout);
  if (ec == errc::event_not_recorded)
    return "the event was never recorded: a host wait waits for its latest record, so record it on a stream first";
  if (ec == errc::operation_aborted)
    return "the work the event stands for was dropped by an abort (stream::abort, device::abort_tasks) before it "
           "completed";
  if (ec != errc::invalid_event) return {};
  if (!rt_)
    return "the event is null (default-constructed, moved from, or it outlived its system): make one with "
           "device::make_event()";
  if (id_ == 0) return "the event's device was reset after the event was made";
  return "the event was destroyed or its device was reset";
}

NPURT_DECL void event::synchronize(std::optional<picoseconds> timeout) const {
  std::error_code ec;
  synchronize(timeout, ec);
  std::uint32_t s = 0;
  std::uint64_t q = 0;
  std::error_code pos_ec;
  if (ec && ec != errc::wrong_thread && rt_ && position(s, q, pos_ec))
    if (const detail::failure* f = detail::failure_before(*rt_, s, q); f && f->ec == ec)
      detail::throw_failure(*f, "npurt::event::synchronize: " + f->describe());
  // Refused before waiting: the same words as async_wait's refusal.
  if (std::string why = ec ? wait_problem(ec, timeout) : std::string(); !why.empty())
    throw_error_on(device_or_none(), ec, "npurt::event::synchronize: " + why);
  detail::throw_if_sync_error(rt_.get(), ec, "npurt::event::synchronize", timeout, -1,
                              "co_await e.async_wait(asio::use_awaitable)");
}

NPURT_DECL std::optional<sim_time> event::completion_time() const noexcept {
  if (!rt_ || id_ == 0) return std::nullopt;
  const detail::event_state* st = rt_->find_event(id_);
  if (!st || !st->has_time || !rt_->position_reached(st->stream, st->seq) || rt_->position_aborted(st->stream, st->seq))
    return std::nullopt;
  return st->time;
}

NPURT_DECL double elapsed_time(const event& start, const event& end, std::error_code& ec) noexcept {
  ec.clear();
  if (!start.valid() || !end.valid() || start.is_task_event() || end.is_task_event()) {
    ec = make_error_code(errc::invalid_event);  // only recorded user events carry timestamps
    return 0;
  }
  if (start.rt_ != end.rt_) {
    ec = make_error_code(errc::invalid_event);  // two systems' clocks have nothing in common
    return 0;
  }
  for (const event* e : {&start, &end}) {
    std::uint32_t s = 0;
    std::uint64_t q = 0;
    if (!e->position(s, q, ec)) return 0;
  }
  const auto t0 = start.completion_time();
  const auto t1 = end.completion_time();
  if (!t0 || !t1) {
    // Never recorded (position() said so above) differs from not reached yet, as in CUDA.
    ec = make_error_code(errc::event_not_complete);
    return 0;
  }
  return to_ms(*t1 - *t0);
}

NPURT_DECL double elapsed_time(const event& start, const event& end) {
  std::error_code ec;
  const double ms = elapsed_time(start, end, ec);
  if (ec && start.valid() && end.valid() && start.rt_ != end.rt_)
    throw_error(ec, "npurt::elapsed_time: the events belong to different systems");
  if (ec && (start.is_task_event() || end.is_task_event()))
    throw_error(ec,
                "npurt::elapsed_time: needs user events recorded with stream::record (the event a launch returns "
                "carries no timestamp, as cudaEventElapsedTime needs recorded events)");
  throw_if(ec, "npurt::elapsed_time");
  return ms;
}

}  // namespace npurt
