// npurt/impl/runtime.ipp — bodies of detail::runtime.
#pragma once

#include <npurt/detail/runtime.hpp>
#include <npurt/impl/deadlock_detector.ipp>
#include <npurt/impl/scheduler.ipp>

#include <mimalloc.h>

#include <boost/pfr.hpp>

#include <algorithm>
#include <coroutine>
#include <cstring>
#include <sstream>
#include <utility>

namespace npurt::detail {

namespace rt_detail {
inline std::unique_ptr<npurt::backend> checked(std::unique_ptr<npurt::backend> b) {
  if (!b) throw_error(make_error_code(errc::invalid_argument), "npurt::system: null backend");
  return b;
}
}  // namespace rt_detail

NPURT_DECL std::exception_ptr refusal_exception(std::int32_t device, std::string_view call, std::error_code ec,
                                                std::string_view why) {
  std::string what(call);
  if (!why.empty()) what.append(": ").append(why);
  try {
    throw_error_on(device, ec, what);
  } catch (...) { return std::current_exception(); }
}

NPURT_DECL std::exception_ptr note_refusal(runtime& rt, std::int32_t device, std::string_view call, std::error_code ec,
                                           std::string_view why) {
  std::exception_ptr e = refusal_exception(device, call, ec, why);
  // Another thread's refusal is its caller's: the recent error belongs to the loop's thread.
  if (rt.wrong_thread()) return e;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) { rt.note_recent_error(x.what()); }
  return e;
}

NPURT_DECL std::string timeout_problem(picoseconds timeout) {
  return "the timeout of " + std::to_string(timeout.count()) +
         " ps is negative (npurt::no_timeout, the default, waits without one)";
}

NPURT_DECL runtime::runtime(std::unique_ptr<npurt::backend> b, const system_options& opts)
    : loop_parts(rt_detail::checked(std::move(b)), opts), scheduler(static_cast<loop_parts&>(*this)) {
#ifndef NDEBUG
  check_thread_ = true;
#else
  check_thread_ = opts.check_thread;
#endif
  backend_->attach(*this);
}

NPURT_DECL runtime::~runtime() {
  // Whoever still waits is told the system is going away; the io_context then destroys the
  // posted handlers (and with them any suspended coroutine frames) without running them.
  abort_all();
  // Spawned tasks that have not ended (never started, or suspended on work just aborted) die
  // here, with their frames' handles null first, as the Asio coroutines' are when the io_context
  // destroys them: what the frames hold then touches nothing of the system.
  handles_.detach_all();
  auto frames = std::move(frames_);
  frames_.clear();
  ++frame_teardown;
  for (const auto& [id, frame] : frames) std::coroutine_handle<>::from_address(frame).destroy();
  --frame_teardown;
  // Observers that outlive the system must not call back into it when they are destroyed.
  for (observer* o : fanout_.list())
    if (o != nullptr) std::erase(o->hosts_, static_cast<observer_host*>(this));
}

// ---------------------------------------------------------------------------------------------
// Timed actions and the loop

NPURT_DECL bool runtime::run_now() {
  // Host first: handlers posted by completions resume at the virtual time they were posted.
  if (posts_ != 0) {
    posts_ = 0;
    // poll() runs until no handler is ready, including those posted while it runs, so
    // afterwards only device-side completions (counted in posts_) can make more ready.
    const std::size_t n = ioc_.poll();
    if (ioc_.stopped()) ioc_.restart();
    if (n != 0) return true;
  }
  return clock_.run_due();
}

NPURT_DECL bool runtime::step() {
  if (run_now()) return true;
  if (flush_pending_ && !clock_.timed_due_now()) {
    // The end of this instant: the backend now knows every task that became ready at it.
    flush_pending_ = false;
    backend_->flush();
    return true;
  }
  if (clock_.advance()) {
    // The action just run is often the only one of its instant: when nothing else is runnable
    // at it, end the instant now, exactly as the next step would.
    if (flush_pending_ && posts_ == 0 && !clock_.has_due() && !clock_.timed_due_now()) {
      flush_pending_ = false;
      backend_->flush();
    }
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
  if ((ec = check_thread())) return;
  // What a handler threw while a destructor drove the loop leaves through this call instead.
  if (deferred_exception_) std::rethrow_exception(std::exchange(deferred_exception_, nullptr));
  running_ = true;
  posts_ = 1;  // handlers posted before run() (co_spawn) have not been counted
  bool deadlocked = false;
  const std::uint64_t reports_before = deadlocks_.reports();
  struct reset_flag {
    bool& f;
    ~reset_flag() { f = false; }
  } guard{running_};
  for (;;) {
    if (pred && pred()) {
      // What the caller waited for is done: let its completion handlers run before returning,
      // at this instant (settle never moves the clock).
      settle();
      break;
    }
    if (step()) continue;
    if (live_tasks() == 0 && host_waits_ == 0) break;
    deadlocked = true;
    if (!resolve_deadlock(false)) break;
  }
  if (deadlocked || deadlocks_.reports() != reports_before) ec = make_error_code(errc::deadlock);
  if (!ec && pred && !pred()) ec = make_error_code(errc::deadlock);
}

NPURT_DECL void runtime::settle() {
  for (;;) {
    if (run_now()) continue;
    if (flush_pending_) {
      flush_pending_ = false;
      backend_->flush();
      continue;
    }
    // Handlers posted from outside our accounting (a completion run straight onto a strand).
    const std::size_t n = ioc_.poll();
    if (ioc_.stopped()) ioc_.restart();
    if (n == 0) return;
  }
}

NPURT_DECL std::error_code runtime::check_thread() const noexcept {
  if (check_thread_ && std::this_thread::get_id() != owner_thread_) return make_error_code(errc::wrong_thread);
  return {};
}

NPURT_DECL void runtime::run(std::error_code& ec) {
  // The last report stays readable after this run unless a deadlock of this run replaces it.
  if (!in_run()) deadlocks_.start_new();  // a re-entered run is refused and starts nothing
  run_until({}, ec);
}

// ---------------------------------------------------------------------------------------------
// Deadlock detection

NPURT_DECL bool runtime::resolve_deadlock(bool only_cycles) {
  // Every blocked wait is reported; those on a cycle (or all of them, when nothing at all can
  // run) are failed with errc::deadlock so that awaiting code resumes with the error.
  const std::vector<stream_state*> blocked = deadlocks_.blocked(only_cycles);
  // Collectives waiting for peers are named when nothing at all can run (a wait cycle alone
  // does not implicate them).
  const bool name_backend = blocked.empty() || !only_cycles;
  deadlocks_.report(now(), blocked, host_waits_, name_backend ? backend_->describe_waits() : std::string{});
  if (blocked.empty()) return false;
  for (auto* s : blocked) fail_blocked_wait(*s, make_error_code(errc::deadlock));
  return true;
}

NPURT_DECL void runtime::wait_blocked(stream_state& s) {
  if (deadlocks_.closes_cycle(s)) resolve_deadlock(true);
}

// ---------------------------------------------------------------------------------------------
// Memory

NPURT_DECL void runtime::trace_memory(device_id dev, memory_op op, std::uint64_t addr, std::size_t bytes,
                                      std::size_t in_use, std::size_t reserved, std::uint32_t stream) {
  if (trace_)
    trace_->on_memory({dev, op, dev >= 0 ? memory_.portable(addr) : addr, bytes, in_use, reserved, stream, now()});
}

// ---------------------------------------------------------------------------------------------
// Observers

NPURT_DECL void runtime::add_observer(observer& o) {
  o.hosts_.reserve(o.hosts_.size() + 1);  // so that nothing below can throw after the list changed
  if (fanout_.add(o)) o.hosts_.push_back(this);
  trace_ = &fanout_;
}

NPURT_DECL void runtime::remove_observer(observer& o) {
  if (fanout_.remove(o)) std::erase(o.hosts_, static_cast<observer_host*>(this));
  trace_ = fanout_.empty() ? nullptr : &fanout_;
}

NPURT_DECL void runtime::observer_destroyed(observer& o) noexcept {
  fanout_.remove(o);  // o is walking its own list of hosts: leave it alone
  trace_ = fanout_.empty() ? nullptr : &fanout_;
}

NPURT_DECL void throw_if_sync_error(const runtime* rt, std::error_code ec, std::string_view what,
                                    std::optional<picoseconds> timeout, std::int32_t device,
                                    std::string_view async_form) {
  if (!ec) return;
  if (ec == errc::not_supported && rt && rt->in_run())
    throw_error(ec, std::string(what) +
                        " blocks, which is not possible inside system::run (in a coroutine or handler); use " +
                        std::string(async_form));
  if (ec == errc::wait_timeout) throw_error_on(device, ec, what, timeout.value_or(picoseconds{0}).count());
  if (ec == errc::invalid_argument && timeout && timeout->count() < 0)
    throw_error_on(device, ec, std::string(what) + ": " + timeout_problem(*timeout));
  // What waits on what, as system::run says it.
  if (ec == errc::operation_aborted)
    throw_error_on(device, ec,
                   std::string(what) +
                       ": work it waited for was dropped by an abort (stream::abort, device::abort_tasks) before it "
                       "completed");
  if (ec == errc::deadlock && rt && !rt->last_deadlock_report().empty())
    throw_error_on(device, ec, std::string(what) + ": " + rt->last_deadlock_report());
  throw_error_on(device, ec, what);
}

}  // namespace npurt::detail
