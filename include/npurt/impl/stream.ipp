// npurt/impl/stream.ipp
#pragma once

#include <npurt/detail/core_limit_check.hpp>
#include <npurt/stream.hpp>
#include <npurt/stream_graph.hpp>

#include <cstring>
#include <memory>
#include <sstream>
#include <string>

namespace npurt {

NPURT_DECL stream& stream::operator=(stream&& o) noexcept {
  if (this != &o) {
    release();
    rt_ = std::exchange(o.rt_, nullptr);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

NPURT_DECL stream::~stream() { release(); }

NPURT_DECL void stream::release() noexcept {
  if (!rt_) return;
  detail::runtime& rt = *rt_;
  const std::uint32_t id = id_;
  rt_ = nullptr;
  if (!rt.in_run() && !rt.stream_idle(id) && !rt.check_thread()) {
    std::error_code ec;
    try {
      detail::wait_blocking(rt, [&] { return rt.stream_idle(id); }, sim_time::max(), ec);
    } catch (...) {
      // A handler the drain ran threw: not out of a destructor (std::terminate), and not lost.
      rt.defer_exception(std::current_exception());
    }
  }
  rt.release_stream(id);
}

NPURT_DECL detail::stream_state* stream::state(std::error_code& ec) const noexcept {
  ec.clear();
  if (rt_ && rt_->wrong_thread()) [[unlikely]] {
    ec = make_error_code(errc::wrong_thread);
    return nullptr;
  }
  detail::stream_state* s = rt_ ? rt_->find_stream(id_) : nullptr;
  if (!s || s->invalidated || s->destroyed) {
    ec = make_error_code(errc::invalid_stream);
    return nullptr;
  }
  return s;
}

NPURT_DECL bool stream::valid() const noexcept {
  std::error_code ec;
  return state(ec) != nullptr;
}

NPURT_DECL device_id stream::device() const {
  std::error_code ec;
  auto* s = state(ec);
  throw_if(ec, "npurt::stream::device");
  return s->device;
}

NPURT_DECL int stream::priority() const {
  std::error_code ec;
  auto* s = state(ec);
  throw_if(ec, "npurt::stream::priority");
  return s->priority;
}

NPURT_DECL stream::executor_type stream::get_executor() const {
  std::error_code ec;
  auto* s = state(ec);
  throw_if(ec, "npurt::stream::get_executor");
  return s->strand;
}

NPURT_DECL event stream::submit(detail::task* t) {
  const std::uint64_t task = t->id;
  const std::uint64_t seq = rt_->enqueue(*rt_->find_stream(id_), t);
  if (seq == 0) [[unlikely]]
    return {};  // a node of the stream's capture: no place in the stream until a launch
  return event::task_event(*rt_, id_, seq, task);
}

NPURT_HOT_DECL void stream::submit_awaited(detail::task* t) { (void)rt_->enqueue(*rt_->find_stream(id_), t); }

// --- preparation: every check happens here, before anything is enqueued ----------------------

namespace detail {
/// The record of a kernels::fixed launch the backend accepted (the launch path of schedules
/// and benchmarks: no descriptor copy).
[[gnu::always_inline]] inline task* fixed_task(runtime& rt, stream_state& s, const kernels::fixed& f,
                                               std::string_view name, std::uint32_t block_dim) {
  task* t = rt.new_task(s, task_kind::kernel);
  t->engine = engine_kind::ai_core;
  t->block_dim = block_dim;
  t->name = name;
  t->fixed = f;
  return t;
}

/// The stream a kernels::fixed launch goes to when every check passes, else null: the caller's
/// general path then finds and reports what failed (a negative duration, say). No error code is
/// built on the way: even a default std::error_code costs a call to std::system_category().
[[gnu::always_inline]] inline stream_state* accepting_stream(runtime* rt, std::uint32_t id, const kernels::fixed& f,
                                                             std::uint32_t block_dim) {
  if (f.duration.count() < 0 || !rt || rt->wrong_thread()) return nullptr;
  stream_state* s = rt->find_stream(id);
  if (!s || s->invalidated || s->destroyed) return nullptr;
  if (rt->backend().validate_fixed(s->device, block_dim)) [[unlikely]]
    return nullptr;
  return s;
}
}  // namespace detail

NPURT_HOT_DECL detail::task* stream::live_fixed_launch(const kernel_desc& k) {
  const auto* f = std::get_if<kernels::fixed>(&k.op);
  detail::stream_state* s = f ? detail::accepting_stream(rt_, id_, *f, k.block_dim) : nullptr;
  return s ? detail::fixed_task(*rt_, *s, *f, rt_->intern(k.display_name()), k.block_dim) : nullptr;
}

NPURT_DECL detail::task* stream::make_launch(const kernel_desc& k, std::error_code& ec, std::string* what) {
  return make_launch(k, nullptr, ec, what);
}

NPURT_DECL detail::task* stream::make_launch(const kernel_desc& k, const shared_kernel* shared, std::error_code& ec,
                                             std::string* what) {
  if (const auto* f = std::get_if<kernels::fixed>(&k.op)) {
    auto* s = fixed_stream(*f, k.block_dim, ec, what);
    return s ? detail::fixed_task(*rt_, *s, *f, rt_->intern(k.display_name()), k.block_dim) : nullptr;
  }
  auto* s = state(ec);
  if (!s) return nullptr;
  // The backend checks everything about the kernel itself (shapes, types, block_dim); the
  // memory registry checks where its operands point, as it does for copies.
  ec = rt_->backend().validate(s->device, k);
  if (ec) {
    if (what) *what = rt_->backend().describe_invalid(s->device, k);
    return nullptr;
  }
  std::string why;
  ec = rt_->memory().check_operands(s->device, k, why);
  if (ec) {
    if (what) *what = std::move(why);
    return nullptr;
  }
  detail::task* t = rt_->new_task(*s, task_kind::kernel);
  t->engine = engine_kind::ai_core;
  t->block_dim = k.block_dim;
  t->name = rt_->intern(k.display_name());
  if (shared) {
    t->describe(shared->get(), *shared);  // one reference, freed with the task
    return t;
  }
  kernel_desc* copy = rt_->new_kernel(k);
  copy->name = t->name;
  t->describe(copy, nullptr);
  t->owns_kernel = true;
  return t;
}

NPURT_HOT_DECL detail::task* stream::make_launch(const detail::launch_args& a, std::error_code& ec, std::string* what) {
  if (a.full) return make_launch(*a.full, nullptr, ec, what);
  // An awaited launch the checks accept: `ec` is only cleared when it holds an error, as
  // state() would, without the category call clear() makes.
  if (detail::stream_state* s = detail::accepting_stream(rt_, id_, a.fixed, a.block_dim)) [[likely]] {
    if (ec) [[unlikely]]
      ec.clear();
    return detail::fixed_task(*rt_, *s, a.fixed, a.name, a.block_dim);
  }
  return make_fixed_launch(a.fixed, a.name, a.block_dim, ec, what);
}

NPURT_DECL detail::task* stream::make_fixed_launch(const kernels::fixed& f, std::string_view name,
                                                   std::uint32_t block_dim, std::error_code& ec, std::string* what) {
  auto* s = fixed_stream(f, block_dim, ec, what);
  return s ? detail::fixed_task(*rt_, *s, f, name, block_dim) : nullptr;
}

NPURT_DECL detail::stream_state* stream::fixed_stream(const kernels::fixed& f, std::uint32_t block_dim,
                                                      std::error_code& ec, std::string* what) {
  auto* s = state(ec);
  if (!s) return nullptr;
  if (f.duration.count() < 0) {
    ec = make_error_code(errc::invalid_argument);  // a duration before its start
    if (what) *what = "kernels::fixed duration of " + std::to_string(f.duration.count()) + " ps is negative";
    return nullptr;
  }
  if ((ec = rt_->backend().validate_fixed(s->device, block_dim))) {
    if (what && ec == errc::invalid_argument)
      *what = "block_dim " + std::to_string(block_dim) + " is more than device " + std::to_string(s->device) + "'s " +
              std::to_string(rt_->backend().properties(s->device).ai_core_count) +
              " AI cores (a kernels::fixed launch runs on them)";
    return nullptr;
  }
  return s;
}

NPURT_DECL bool stream::lost(device_id dev) const noexcept { return rt_->backend().status(dev) == device_status::lost; }

NPURT_DECL detail::task* stream::make_copy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                                           memcpy_kind kind, std::error_code& ec, bool stage) {
  return make_copy({dst, dst_max, count, src, count, count, 1, "npurt::stream::memcpy"}, kind, ec, stage, nullptr);
}

NPURT_DECL detail::task* stream::make_copy(const detail::copy_shape& c, memcpy_kind kind, std::error_code& ec,
                                           bool stage, std::string* what) {
  auto* s = state(ec);
  if (!s) return nullptr;
  void* const dst = c.dst;
  const void* src = c.src;
  const std::size_t width = c.width;
  const std::size_t height = c.height;
  if (!dst || !src) {
    ec = make_error_code(errc::null_pointer);
    return nullptr;
  }
  if (width == 0 || height == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  if (width > c.dst_max) {
    ec = make_error_code(errc::size_overflow);
    return nullptr;
  }
  // A row wider than its pitch would overlap the next (cudaErrorInvalidPitchValue).
  if (width > c.dst_pitch || width > c.src_pitch) {
    ec = make_error_code(errc::invalid_argument);
    if (what)
      *what = "a row of " + std::to_string(width) + " bytes is wider than its " +
              (width > c.dst_pitch ? "destination pitch (" + std::to_string(c.dst_pitch)
                                   : "source pitch (" + std::to_string(c.src_pitch)) +
              " bytes): each row must fit between one row's start and the next's";
    return nullptr;
  }
  // Each side's extent, from its first byte to the end of its last row; the bytes moved are
  // fewer (width * height <= either extent, so it cannot overflow once they do not).
  std::size_t dst_span = 0;
  std::size_t src_span = 0;
  if (__builtin_mul_overflow(c.dst_pitch, height - 1, &dst_span) ||
      __builtin_add_overflow(dst_span, width, &dst_span) ||
      __builtin_mul_overflow(c.src_pitch, height - 1, &src_span) ||
      __builtin_add_overflow(src_span, width, &src_span)) {
    ec = make_error_code(errc::size_overflow);
    if (what) *what = "the rows' extent (pitch * (height - 1) + width) does not fit in a size_t";
    return nullptr;
  }
  const std::size_t count = width * height;
  const bool dst_dev = detail::is_device_address(dst);
  const bool src_dev = detail::is_device_address(src);
  // Each side must be a live range that holds its extent: device memory always is known;
  // host memory is known when npurt allocated it (pinned), and trusted otherwise (pageable).
  const auto past_end = [&](const void* p, std::size_t extent, std::size_t left) {
    return std::string(p == dst ? "the destination" : "the source") + "'s rows reach " + std::to_string(extent) +
           " bytes past its start, and its allocation holds " + std::to_string(left) + " from there";
  };
  auto check_side = [&](const void* p, std::size_t extent, bool dev, device_id& owner) -> bool {
    owner = -1;
    if (dev) {
      const detail::allocation* a = rt_->memory().find_allocation(p);
      if (!a) {
        ec = make_error_code(errc::invalid_pointer);
        return false;
      }
      if (extent > a->bytes - (reinterpret_cast<std::uint64_t>(p) - a->address)) {
        ec = make_error_code(errc::size_overflow);
        if (what) *what = past_end(p, extent, a->bytes - (reinterpret_cast<std::uint64_t>(p) - a->address));
        return false;
      }
      owner = a->device;
      return true;
    }
    if (const detail::host_allocation* h = rt_->memory().find_host_allocation(p)) {
      const auto off = reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(h->base);
      if (extent > h->bytes - off) {
        ec = make_error_code(errc::size_overflow);
        if (what) *what = past_end(p, extent, h->bytes - off);
        return false;
      }
      return true;
    }
    // Pageable memory is trusted to hold its extent, but no object runs past the end of the
    // user address space (2^56 covers x86-64 with 5-level paging and 52-bit AArch64).
    constexpr std::uint64_t user_space_end = std::uint64_t{1} << 56;
    const auto at = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    if (at >= user_space_end || extent > user_space_end - at) {
      ec = make_error_code(errc::size_overflow);
      return false;
    }
    return true;
  };
  device_id dst_owner = -1;
  device_id src_owner = -1;
  if (!check_side(dst, dst_span, dst_dev, dst_owner) || !check_side(src, src_span, src_dev, src_owner)) return nullptr;
  if (s->capture && !src_dev && !rt_->memory().find_host_allocation(src)) {
    ec = make_error_code(errc::capture_unsupported);
    (void)refuse_in_capture(*s, c.call, ec, detail::pageable_in_capture);
    return nullptr;
  }
  // A lost device takes no work until it is reset, as launches and allocations are refused: a
  // copy fails at the call, not later on the stream.
  if (lost(s->device) || (src_owner >= 0 && lost(src_owner)) || (dst_owner >= 0 && lost(dst_owner))) {
    ec = make_error_code(errc::device_lost);
    return nullptr;
  }

  memcpy_kind actual = memcpy_kind::host_to_host;
  if (src_dev && dst_dev) actual = memcpy_kind::device_to_device;
  else if (dst_dev) actual = memcpy_kind::host_to_device;
  else if (src_dev) actual = memcpy_kind::device_to_host;
  if (kind != memcpy_kind::default_kind && kind != actual) {
    ec = make_error_code(errc::invalid_copy_kind);
    return nullptr;
  }
  // The stream's device must take part in the copy.
  const bool mine =
      (dst_dev && dst_owner == s->device) || (src_dev && src_owner == s->device) || actual == memcpy_kind::host_to_host;
  const bool foreign_end = (actual == memcpy_kind::host_to_device && dst_owner != s->device) ||
                           (actual == memcpy_kind::device_to_host && src_owner != s->device);
  if (!mine || foreign_end) {
    ec = make_error_code(errc::stream_device_mismatch);
    return nullptr;
  }
  // A pageable source is snapshotted now, as cudaMemcpyAsync stages pageable memory before it
  // returns: the caller may reuse or free it at once, where reading it when the copy runs would
  // copy whatever the memory holds by then. Pinned memory is the caller's promise (and npurt
  // keeps it allocated); a timing-only backend reads no host bytes at all.
  detail::host_bytes staged;
  if (stage && !src_dev && rt_->backend().functional() && !rt_->memory().find_host_allocation(src)) {
    staged.reset(static_cast<std::byte*>(detail::host_heap::allocate(count)));
    if (!staged) {
      ec = make_error_code(errc::resource_exhausted);
      return nullptr;
    }
    // A 2-D source's rows are staged packed: the copy then reads them at a pitch of one row.
    for (std::size_t i = 0; i < height; ++i)
      std::memcpy(staged.get() + i * width, static_cast<const std::byte*>(src) + i * c.src_pitch, width);
    src = staged.get();
  }
  detail::task* t = rt_->new_task(*s, task_kind::memcpy);
  detail::task_side& side = rt_->extra(t);
  side.copy = copy_desc{actual, dst, src, count, src_owner, dst_owner, 0};
  if (height > 1) {
    side.copy.rows = height;
    side.copy.dst_pitch = c.dst_pitch;
    side.copy.src_pitch = staged ? width : c.src_pitch;
  }
  side.staged = std::move(staged);
  const bool flat = height == 1;
  switch (actual) {
    case memcpy_kind::host_to_device:
      t->engine = engine_kind::copy_h2d;
      t->name = flat ? "memcpy_h2d" : "memcpy2d_h2d";
      break;
    case memcpy_kind::device_to_host:
      t->engine = engine_kind::copy_d2h;
      t->name = flat ? "memcpy_d2h" : "memcpy2d_d2h";
      break;
    case memcpy_kind::device_to_device:
      t->engine = engine_kind::copy_d2d;
      if (src_owner == dst_owner) t->name = flat ? "memcpy_d2d" : "memcpy2d_d2d";
      else t->name = flat ? "memcpy_peer" : "memcpy2d_peer";
      break;
    default:
      t->engine = engine_kind::host;
      t->name = flat ? "memcpy_h2h" : "memcpy2d_h2h";
      break;
  }
  return t;
}

NPURT_DECL detail::task* stream::make_memset(void* dst, std::size_t dst_max, int value, std::size_t count,
                                             std::error_code& ec) {
  auto* s = state(ec);
  if (!s) return nullptr;
  if (!dst) {
    ec = make_error_code(errc::null_pointer);
    return nullptr;
  }
  if (count == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  if (count > dst_max) {
    ec = make_error_code(errc::size_overflow);
    return nullptr;
  }
  const detail::allocation* a = detail::is_device_address(dst) ? rt_->memory().find_allocation(dst) : nullptr;
  if (!a) {
    ec = make_error_code(errc::invalid_pointer);  // memset fills device memory npurt allocated
    return nullptr;
  }
  if (count > a->bytes - (reinterpret_cast<std::uint64_t>(dst) - a->address)) {
    ec = make_error_code(errc::size_overflow);
    return nullptr;
  }
  if (a->device != s->device) {
    ec = make_error_code(errc::stream_device_mismatch);
    return nullptr;
  }
  if (lost(s->device)) {
    ec = make_error_code(errc::device_lost);
    return nullptr;
  }
  detail::task* t = rt_->new_task(*s, task_kind::memset);
  t->engine = engine_kind::copy_d2d;
  t->name = "memset";
  rt_->extra(t).copy = copy_desc{memcpy_kind::device_to_device, dst, nullptr, count, -1, a->device, value};
  return t;
}

NPURT_DECL detail::task* stream::make_wait(const event& e, std::error_code& ec) {
  auto* s = state(ec);
  if (!s) return nullptr;
  if (e.runtime_ptr() && e.runtime_ptr() != rt_) {
    ec = make_error_code(errc::invalid_event);  // an event of another system
    return nullptr;
  }
  // The capture's rules for a live event; a null or destroyed one is refused as such below.
  const detail::event_state* st = e.is_task_event() ? nullptr : rt_->find_event(e.id());
  const bool live = e.is_task_event() || st;
  if (st && st->captured_in) {
    // Recorded in an open capture: this stream joins it, or waits within it (a node, or nothing
    // within one stream). Nothing to enqueue either way.
    std::string why;
    ec = rt_->capture_wait(*s, *st, why);
    return nullptr;
  }
  if (s->capture && live) {
    ec = make_error_code(errc::capture_dependency);
    (void)refuse_in_capture(*s, "npurt::stream::wait", ec, detail::capture_dependency_words);
    return nullptr;
  }
  std::uint32_t target = 0;
  std::uint64_t seq = 0;
  if (!e.position(target, seq, ec)) {
    // Only events made with wait_for_record may be waited on before their first record.
    if (ec != errc::event_not_recorded || !st || !st->wait_for_record) return nullptr;
    ec.clear();
  }
  detail::task* t = rt_->new_task(*s, task_kind::event_wait);
  detail::task_side& x = rt_->extra(t);
  x.target_stream = target;
  x.target_seq = seq;
  x.event_id = e.id();
  // The record a wait refers to is fixed now (a later record of the event is not waited for), and
  // the trace names it even when the event's last handle is gone by the time the wait ends.
  if (e.is_task_event()) x.record_task = e.task_;
  else if (st && st->records != 0) x.record_task = st->record_task;
  t->name = "event_wait";
  x.wait_limit = rt_->event_wait_timeout();  // the limit in force when the wait is enqueued
  // Only a wait bound to a record and without a time limit orders what follows it: one that
  // times out lets the stream run on before the record.
  if (x.wait_limit <= 0 && (e.is_task_event() || x.record_task != 0)) rt_->note_wait(*s, target, seq);
  return t;
}

NPURT_DECL detail::task* stream::make_callback(std::function<void()> fn, std::error_code& ec) {
  auto* s = state(ec);
  if (!s) return nullptr;
  if (!fn) {
    ec = make_error_code(errc::invalid_argument);
    return nullptr;
  }
  detail::task* t = rt_->new_task(*s, task_kind::host_callback);
  t->engine = engine_kind::host;
  rt_->extra(t).callback = rt_->own_callback(std::move(fn));
  t->name = "host_callback";
  return t;
}

NPURT_DECL void stream::set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec, std::string& why) {
  auto* s = state(ec);
  if (!s) return;
  why = detail::core_limit_problem(rt_->backend().properties(s->device), kind, cores);
  if (!why.empty()) {
    ec = make_error_code(errc::invalid_argument);
    return;
  }
  core_limits own = s->own_limits;
  (kind == core_kind::cube ? own.cube : own.vector) = cores;
  rt_->set_stream_core_limits(*s, own);
}

NPURT_DECL void stream::set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec) {
  std::string why;
  set_core_limit(kind, cores, ec, why);
  if (ec) note_refusal("npurt::stream::set_core_limit", ec, why);
}

NPURT_DECL void stream::set_core_limit(core_kind kind, std::uint32_t cores) {
  std::error_code ec;
  std::string why;
  set_core_limit(kind, cores, ec, why);
  if (ec) throw_error_on(device_or_none(), ec, refusal("npurt::stream::set_core_limit", ec, why));
}

NPURT_DECL void stream::reset_core_limits(std::error_code& ec) {
  if (auto* s = state(ec)) rt_->set_stream_core_limits(*s, {});
}

NPURT_DECL void stream::reset_core_limits() {
  std::error_code ec;
  reset_core_limits(ec);
  if (ec) throw_error_on(device_or_none(), ec, refusal("npurt::stream::reset_core_limits", ec, {}));
}

NPURT_DECL std::uint32_t stream::core_limit(core_kind kind) const {
  std::error_code ec;
  auto* s = state(ec);
  throw_if(ec, "npurt::stream::core_limit");
  const std::uint32_t v = kind == core_kind::vector ? s->limits.vector : s->limits.cube;
  return v != 0 ? v : core_count(rt_->backend().properties(s->device), kind);
}

NPURT_DECL detail::task* stream::make_value_task(task_kind kind, const void* addr, std::uint64_t value,
                                                 wait_condition cond, std::error_code& ec, std::string& why) {
  auto* s = state(ec);
  if (!s) return nullptr;
  const char* what = kind == task_kind::value_write ? "the value write's word" : "the value wait's word";
  if (!addr) {
    ec = make_error_code(errc::null_pointer);
    return nullptr;
  }
  if (static_cast<std::uint8_t>(cond) > static_cast<std::uint8_t>(wait_condition::nor)) {
    ec = make_error_code(errc::invalid_argument);
    why = "unknown wait_condition " + std::to_string(static_cast<unsigned>(cond));
    return nullptr;
  }
  const detail::allocation* a = detail::is_device_address(addr) ? rt_->memory().find_allocation(addr) : nullptr;
  if (!a) {
    // Device memory only: the word is read and written by the device's stream scheduler.
    ec = make_error_code(errc::invalid_pointer);
    why = rt_->memory().why_not_live(addr);
    return nullptr;
  }
  const auto at = reinterpret_cast<std::uint64_t>(addr);
  if (at % sizeof(std::uint64_t) != 0) {
    ec = make_error_code(errc::invalid_argument);
    std::ostringstream os;
    os << what << " at " << addr << " is not 8-byte aligned";
    why = os.str();
    return nullptr;
  }
  // The bytes the allocation asked for, not its rounded size: the rest is no data of the caller's.
  if (sizeof(std::uint64_t) > a->bytes - (at - a->address)) {
    ec = make_error_code(errc::size_overflow);
    why = std::string(what) + " runs past the end of its allocation";
    return nullptr;
  }
  if (lost(s->device) || lost(a->device)) {
    ec = make_error_code(errc::device_lost);
    return nullptr;
  }
  detail::task* t = rt_->new_task(*s, kind);
  detail::task_side& x = rt_->extra(t);
  x.copy = copy_desc{
      memcpy_kind::device_to_device, const_cast<void*>(addr), nullptr, sizeof(std::uint64_t), -1, a->device, 0};
  x.operand = value;
  x.condition = cond;
  if (kind == task_kind::value_wait) {
    t->name = "value_wait";
    x.wait_limit = rt_->event_wait_timeout();  // an event wait's limit: the limit in force at the enqueue
  } else {
    t->name = "value_write";
  }
  return t;
}

NPURT_DECL event stream::write_value(void* dst, std::uint64_t value, std::error_code& ec) {
  std::string why;
  if (detail::task* t = make_value_task(task_kind::value_write, dst, value, wait_condition::geq, ec, why))
    return submit(t);
  note_refusal("npurt::stream::write_value", ec, why);
  return {};
}

NPURT_DECL event stream::write_value(void* dst, std::uint64_t value) {
  std::error_code ec;
  std::string why;
  if (detail::task* t = make_value_task(task_kind::value_write, dst, value, wait_condition::geq, ec, why))
    return submit(t);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::write_value", ec, why));
}

NPURT_DECL void stream::wait_value(const void* addr, std::uint64_t value, wait_condition cond, std::error_code& ec) {
  std::string why;
  if (detail::task* t = make_value_task(task_kind::value_wait, addr, value, cond, ec, why)) submit(t);
  else note_refusal("npurt::stream::wait_value", ec, why);
}

NPURT_DECL void stream::wait_value(const void* addr, std::uint64_t value, wait_condition cond) {
  std::error_code ec;
  std::string why;
  if (detail::task* t = make_value_task(task_kind::value_wait, addr, value, cond, ec, why)) {
    submit(t);
    return;
  }
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::wait_value", ec, why));
}

// --- fire and forget -------------------------------------------------------------------------

NPURT_DECL std::int32_t stream::device_or_none() const noexcept {
  std::error_code ec;
  const detail::stream_state* s = state(ec);
  return s ? s->device : -1;
}

NPURT_DECL event stream::launch(const kernel_desc& k, std::error_code& ec) {
  if (detail::task* t = live_fixed_launch(k)) [[likely]] {
    ec.clear();
    return submit(t);
  }
  std::string what;
  if (detail::task* t = make_launch(k, ec, &what)) return submit(t);
  note_refusal("npurt::stream::launch", ec, what);
  return {};
}

NPURT_DECL event stream::launch(const kernel_desc& k) {
  if (detail::task* t = live_fixed_launch(k)) [[likely]]
    return submit(t);
  std::error_code ec;
  std::string what;
  detail::task* t = make_launch(k, ec, &what);
  if (!t) throw_error_on(device_or_none(), ec, refusal("npurt::stream::launch", ec, what));
  return submit(t);
}

NPURT_DECL event stream::launch(const shared_kernel& k, std::error_code& ec) {
  // The thread before the argument, as every call checks it first.
  if (foreign_thread()) [[unlikely]] {
    ec = make_error_code(errc::wrong_thread);
    return {};
  }
  if (!k) {
    ec = make_error_code(errc::null_pointer);
    note_refusal("npurt::stream::launch", ec, "null shared kernel descriptor");
    return {};
  }
  if (detail::task* t = live_fixed_launch(*k)) {
    ec.clear();
    return submit(t);
  }
  std::string what;
  if (detail::task* t = make_launch(*k, &k, ec, &what)) return submit(t);
  note_refusal("npurt::stream::launch", ec, what);
  return {};
}

NPURT_DECL event stream::launch(const shared_kernel& k) {
  if (!k && foreign_thread()) throw_error(make_error_code(errc::wrong_thread), "npurt::stream::launch");
  if (!k) throw_error(make_error_code(errc::null_pointer), "npurt::stream::launch: null shared kernel descriptor");
  if (detail::task* t = live_fixed_launch(*k)) return submit(t);
  std::error_code ec;
  std::string what;
  detail::task* t = make_launch(*k, &k, ec, &what);
  if (!t) throw_error_on(device_or_none(), ec, refusal("npurt::stream::launch", ec, what));
  return submit(t);
}

NPURT_DECL event stream::memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                                std::error_code& ec) {
  if (detail::task* t = make_copy(dst, dst_max, src, count, kind, ec)) return submit(t);
  note_refusal("npurt::stream::memcpy", ec, pointer_problem(ec, dst, src));
  return {};
}

NPURT_DECL event stream::memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind) {
  std::error_code ec;
  if (detail::task* t = make_copy(dst, dst_max, src, count, kind, ec)) return submit(t);
  const std::string why = pointer_problem(ec, dst, src);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::memcpy", ec, why));
}

NPURT_DECL event stream::memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                  std::size_t width, std::size_t height, memcpy_kind kind, std::error_code& ec) {
  std::string why;
  if (detail::task* t = make_copy(shape_2d(dst, dst_pitch, src, src_pitch, width, height), kind, ec, true, &why))
    return submit(t);
  note_refusal("npurt::stream::memcpy2d", ec, why.empty() ? pointer_problem(ec, dst, src) : why);
  return {};
}

NPURT_DECL event stream::memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                  std::size_t width, std::size_t height, memcpy_kind kind) {
  std::error_code ec;
  std::string why;
  if (detail::task* t = make_copy(shape_2d(dst, dst_pitch, src, src_pitch, width, height), kind, ec, true, &why))
    return submit(t);
  if (why.empty()) why = pointer_problem(ec, dst, src);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::memcpy2d", ec, why));
}

NPURT_DECL void stream::note_refusal(std::string_view call, std::error_code ec, std::string_view why) const {
  // A null handle has no system whose recent_error_message could hold the words, and another
  // thread's refusal leaves the loop thread's words alone.
  if (rt_ && !rt_->wrong_thread()) (void)detail::note_refusal(*rt_, device_or_none(), refusal(call, ec, why), ec, {});
}

NPURT_DECL std::string stream::refusal(std::string_view call, std::error_code ec, std::string_view why) const {
  std::string what(call);
  if (ec == errc::invalid_stream) {
    // The code says "invalid or destroyed stream" for every way a handle stops naming a stream;
    // say which, and what to do.
    const detail::stream_state* s = rt_ ? rt_->find_stream(id_) : nullptr;
    if (!rt_)
      why =
          "the stream is null (default-constructed, moved from, or it outlived its system): make one with "
          "device::make_stream()";
    else if (s && s->invalidated && !s->destroyed)
      why = "the stream's device was reset, which invalidates its streams: make a new stream";
    else why = "the stream was destroyed or its device was reset";
  }
  if (!why.empty()) what.append(": ").append(why);
  return what;
}

namespace detail {
// Which end of a refused copy (or memset: no `src`) is memory of a device other than the
// stream's `mine`, in words: the code alone says "stream, event or memory belongs to another
// device". Built only on the refusal path.
inline std::string device_mismatch(const memory_registry& memory, device_id mine, const void* dst, const void* src) {
  auto owner = [&](const void* p) -> device_id {
    const allocation* a = p && is_device_address(p) ? memory.find_allocation(p) : nullptr;
    return a ? a->device : -1;
  };
  auto text = [](const void* p) {
    std::ostringstream os;
    os << p;
    return os.str();
  };
  const device_id to = owner(dst);
  const device_id from = owner(src);
  const std::string runs_on =
      (src ? ", the copy's stream is of device " : ", the memset's stream is of device ") + std::to_string(mine);
  if (to >= 0 && from >= 0 && to != mine && from != mine)
    return text(dst) + " is memory of device " + std::to_string(to) + " and " + text(src) + " of device " +
           std::to_string(from) + runs_on + " (a copy between devices runs on a stream of one of them)";
  if (to >= 0 && to != mine) return text(dst) + " is memory of device " + std::to_string(to) + runs_on;
  if (from >= 0 && from != mine) return text(src) + " is memory of device " + std::to_string(from) + runs_on;
  return {};
}
}  // namespace detail

NPURT_DECL std::string stream::pointer_problem(std::error_code ec, const void* dst, const void* src) const {
  if (ec == errc::capture_unsupported) return std::string(detail::pageable_in_capture);
  if (ec == errc::stream_device_mismatch && rt_)
    return detail::device_mismatch(rt_->memory(), device_or_none(), dst, src);
  if (ec != errc::invalid_pointer || !rt_) return {};
  std::string why = rt_->memory().why_not_live(dst);
  if (src && (why.empty() || !detail::is_device_address(dst))) why = rt_->memory().why_not_live(src);
  return why;
}

NPURT_DECL event stream::memset(void* dst, std::size_t dst_max, int value, std::size_t count, std::error_code& ec) {
  if (detail::task* t = make_memset(dst, dst_max, value, count, ec)) return submit(t);
  note_refusal("npurt::stream::memset", ec, pointer_problem(ec, dst, nullptr));
  return {};
}

NPURT_DECL event stream::memset(void* dst, std::size_t dst_max, int value, std::size_t count) {
  std::error_code ec;
  if (detail::task* t = make_memset(dst, dst_max, value, count, ec)) return submit(t);
  const std::string why = pointer_problem(ec, dst, nullptr);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::memset", ec, why));
}

NPURT_DECL void stream::record(const event& e, std::error_code& ec) {
  record_event(e, ec);
  if (ec) note_refusal("npurt::stream::record", ec, event_problem(e, ec, true));
}

NPURT_DECL void stream::record_event(const event& e, std::error_code& ec) {
  auto* s = state(ec);
  if (!s) return;
  if (!e.valid() || e.is_task_event() || e.runtime_ptr() != rt_) {
    ec = make_error_code(errc::invalid_event);
    return;
  }
  detail::event_state* st = rt_->find_event(e.id());
  if (!st) {
    ec = make_error_code(errc::invalid_event);
    return;
  }
  if (st->device != s->device) {
    ec = make_error_code(errc::stream_device_mismatch);
    return;
  }
  if (s->capture && s->capture->updating) [[unlikely]] {
    ec = make_error_code(errc::capture_unsupported);
    (void)refuse_in_capture(*s, "npurt::stream::record", ec, detail::record_in_update);
    return;
  }
  rt_->record_event(*s, *st);
}

NPURT_DECL std::string stream::event_problem(const event& e, std::error_code ec, bool record) const {
  if (ec == errc::capture_dependency) return std::string(detail::capture_dependency_words);
  if (ec == errc::capture_unsupported) {
    if (const detail::stream_state* s = record && rt_ ? rt_->find_stream(id_) : nullptr;
        s && s->capture && s->capture->updating)
      return std::string(detail::record_in_update);
    const detail::event_state* st = rt_ && !e.is_task_event() ? rt_->find_event(e.id()) : nullptr;
    return st && st->captured_in && st->captured_in->device != device_or_none()
               ? "the event was recorded in an open capture of another device, which only that device's streams "
                 "can join"
               : "the event was recorded in an open capture, and this stream takes part in another: captures are "
                 "not merged";
  }
  if (ec == errc::stream_device_mismatch)
    return "the event belongs to device " + std::to_string(e.device_or_none()) + ", the stream to device " +
           std::to_string(device_or_none()) + " (record an event of the stream's device)";
  if (ec == errc::event_not_recorded)
    return "the event was never recorded (make it with {.wait_for_record = true} to wait for its first record)";
  if (ec != errc::invalid_event) return {};
  if (!e.runtime_ptr())
    return "the event is null (default-constructed, moved from, or it outlived its system): make one with "
           "device::make_event()";
  if (e.runtime_ptr() != rt_) return "the event belongs to another npurt::system";
  if (e.is_task_event())
    return record ? "the event is a launch's (task) event, which stands for that task alone: record a user event "
                    "made with device::make_event()"
                  : "the event's device was reset after the event was made";
  return "the event was destroyed or its device was reset";
}

NPURT_DECL void stream::record(const event& e) {
  std::error_code ec;
  record_event(e, ec);
  if (!ec) return;
  const std::string why = event_problem(e, ec, true);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::record", ec, why));
}

NPURT_DECL void stream::wait(const event& e, std::error_code& ec) {
  if (detail::task* t = make_wait(e, ec)) submit(t);
  else if (ec) note_refusal("npurt::stream::wait", ec, event_problem(e, ec, false));
}

NPURT_DECL void stream::wait(const event& e) {
  std::error_code ec;
  if (detail::task* t = make_wait(e, ec)) submit(t);
  if (!ec) return;
  const std::string why = event_problem(e, ec, false);
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::wait", ec, why));
}

NPURT_DECL event stream::launch_callback(std::function<void()> fn, std::error_code& ec) {
  if (detail::task* t = make_callback(std::move(fn), ec)) return submit(t);
  note_refusal("npurt::stream::launch_callback", ec, {});
  return {};
}

NPURT_DECL event stream::launch_callback(std::function<void()> fn) {
  std::error_code ec;
  event e;
  if (detail::task* t = make_callback(std::move(fn), ec)) e = submit(t);
  if (ec) throw_error_on(device_or_none(), ec, refusal("npurt::stream::launch_callback", ec, {}));
  return e;
}

// --- host side -------------------------------------------------------------------------------

NPURT_DECL bool stream::query(std::error_code& ec) const noexcept {
  auto* s = state(ec);
  if (!s) return false;
  if (s->capture) [[unlikely]] {
    ec = make_error_code(errc::stream_captured);
    try {
      note_refusal(
          "npurt::stream::query", ec,
          const_cast<stream*>(this)->refuse_in_capture(*s, "npurt::stream::query", ec, detail::sync_in_capture));
    } catch (...) {  // no memory for the words: the code still says it
    }
    return false;
  }
  if ((ec = rt_->take_stream_failure(s->id).ec)) return false;
  return s->head == nullptr;
}

NPURT_DECL bool stream::query() const {
  std::error_code ec;
  auto* s = state(ec);
  throw_if(ec, "npurt::stream::query");
  if (s->capture) [[unlikely]] {
    ec = make_error_code(errc::stream_captured);
    const std::string why =
        const_cast<stream*>(this)->refuse_in_capture(*s, "npurt::stream::query", ec, detail::sync_in_capture);
    throw_error_on(s->device, ec, refusal("npurt::stream::query", ec, why));
  }
  detail::failure f = rt_->take_stream_failure(s->id);
  if (f.exception) std::rethrow_exception(f.exception);
  if (f) detail::throw_failure(f, "npurt::stream::query: " + f.describe(), s->device);
  return s->head == nullptr;
}

NPURT_DECL void stream::synchronize(std::optional<picoseconds> timeout, std::error_code& ec, detail::failure* out) {
  auto* s = state(ec);
  if (!s) return;
  if (s->capture) [[unlikely]] {
    ec = make_error_code(errc::stream_captured);
    note_refusal("npurt::stream::synchronize", ec,
                 refuse_in_capture(*s, "npurt::stream::synchronize", ec, detail::sync_in_capture));
    return;
  }
  if ((ec = detail::check_timeout(timeout))) return;
  detail::runtime& rt = *rt_;
  const std::uint32_t id = s->id;
  const device_id dev = s->device;
  const std::uint64_t target = rt.last_enqueued(id);
  const bool pending = !rt.position_reached(id, target);
  const sim_time deadline = timeout ? later(rt.now(), *timeout) : end_of_time;
  detail::wait_blocking(rt, [&] { return rt.position_reached(id, target); }, deadline, ec);
  // The deadlock was broken by failing this stream's blocked wait; this call reports it, so the
  // failure is read here, or the stream's next real failure would find its slot taken.
  if (ec == errc::deadlock)
    if (const detail::failure* f = rt.peek_stream_failure(id); f && f->ec == errc::deadlock)
      (void)rt.take_stream_failure(id);
  if (ec) return;
  rt.device_synchronized(dev, /*all_streams=*/false);
  detail::failure f = rt.take_stream_failure(id);
  ec = f.ec;
  // Work it waited for was dropped by an abort (a callback's, say) rather than run: as
  // async_synchronize's, and CANN's aclrtSynchronizeStream (ACL_ERROR_RT_STREAM_ABORT), the wait
  // does not end in success.
  if (!ec && pending && rt.position_aborted(id, target)) ec = make_error_code(errc::operation_aborted);
  if (out) *out = std::move(f);
}

NPURT_DECL void stream::synchronize(std::optional<picoseconds> timeout, std::error_code& ec) {
  synchronize(timeout, ec, nullptr);
}

NPURT_DECL void detail::stream_access::synchronize(stream& s, std::error_code& ec, failure* f) {
  s.synchronize(no_timeout, ec, f);
}

NPURT_DECL void stream::synchronize(std::optional<picoseconds> timeout) {
  std::error_code ec;
  detail::failure f;
  synchronize(timeout, ec, &f);
  if (f.exception) std::rethrow_exception(f.exception);
  if (f) detail::throw_failure(f, "npurt::stream::synchronize: " + f.describe(), device_or_none());
  if (ec == errc::invalid_stream) throw_error_on(-1, ec, refusal("npurt::stream::synchronize", ec, {}));
  if (ec == errc::stream_captured)
    throw_error_on(device_or_none(), ec, refusal("npurt::stream::synchronize", ec, detail::sync_in_capture));
  detail::throw_if_sync_error(rt_.get(), ec, "npurt::stream::synchronize", timeout, device_or_none(),
                              "co_await s.async_synchronize(asio::use_awaitable)");
}

NPURT_DECL void stream::abort(std::error_code& ec) {
  auto* s = state(ec);
  if (!s) {
    note_refusal("npurt::stream::abort", ec, {});
    return;
  }
  if (s->capture) [[unlikely]] {
    ec = make_error_code(errc::stream_captured);
    note_refusal("npurt::stream::abort", ec,
                 refuse_in_capture(*s, "npurt::stream::abort", ec, detail::abort_in_capture));
    return;
  }
  // An observer hears a task's end from inside the scheduler's bookkeeping of that task, which
  // an abort would free under it, as a reset would.
  if (rt_->in_report()) [[unlikely]] {
    ec = make_error_code(errc::not_supported);
    note_refusal("npurt::stream::abort", ec, detail::abort_in_report);
    return;
  }
  rt_->abort_stream(*s);
}

NPURT_DECL void stream::abort() {
  std::error_code ec;
  abort(ec);
  if (!ec) return;
  const std::string_view why = ec == errc::stream_captured ? detail::abort_in_capture
                               : ec == errc::not_supported ? detail::abort_in_report
                                                           : std::string_view{};
  throw_error_on(device_or_none(), ec, refusal("npurt::stream::abort", ec, why));
}

// --- capture ---------------------------------------------------------------------------------

NPURT_DECL bool stream::recorded_in_capture(const event& e) const noexcept {
  const detail::event_state* st =
      rt_ && e.runtime_ptr() == rt_ && !e.is_task_event() ? rt_->find_event(e.id()) : nullptr;
  return st && st->captured_in;
}

NPURT_DECL std::string stream::refuse_in_capture(detail::stream_state& s, std::string_view call, std::error_code ec,
                                                 std::string_view why) {
  std::string words = refusal(call, ec, why);
  rt_->invalidate_capture(s, ec, words);
  return std::string(why);
}

NPURT_DECL void stream::begin_capture(capture_mode mode, std::error_code& ec) {
  auto* s = state(ec);
  if (!s) {
    note_refusal("npurt::stream::begin_capture", ec, {});
    return;
  }
  if (s->capture) {
    ec = make_error_code(errc::stream_captured);
    note_refusal("npurt::stream::begin_capture", ec, "a capture is open on it already (end_capture first)");
    return;
  }
  rt_->begin_capture(*s, mode == capture_mode::relaxed);
}

NPURT_DECL void stream::begin_capture(capture_mode mode) {
  std::error_code ec;
  begin_capture(mode, ec);
  if (ec)
    throw_error_on(device_or_none(), ec,
                   refusal("npurt::stream::begin_capture", ec,
                           ec == errc::stream_captured ? "a capture is open on it already (end_capture first)" : ""));
}

NPURT_DECL stream_graph stream::end_capture(graph_flags flags, std::error_code& ec, std::string& words) {
  auto* s = state(ec);
  std::string why;
  if (s && !s->capture) {
    ec = make_error_code(errc::stream_not_captured);
    why = "no capture is open on it (begin_capture first)";
  }
  if (ec) {
    words = refusal("npurt::stream::end_capture", ec, why);
    return {};
  }
  const std::uint64_t id = rt_->end_capture(*s, flags == graph_flags::auto_free_on_launch, ec, why);
  if (ec) {
    // An invalidated capture: the words of the call that broke it.
    words = ec == errc::capture_invalidated ? "npurt::stream::end_capture: the capture was invalidated by " + why
                                            : refusal("npurt::stream::end_capture", ec, why);
    return {};
  }
  return stream_graph(*rt_, id);
}

NPURT_DECL stream_graph stream::end_capture(graph_flags flags, std::error_code& ec) {
  std::string words;
  stream_graph g = end_capture(flags, ec, words);
  if (ec && rt_ && !rt_->wrong_thread()) (void)detail::note_refusal(*rt_, device_or_none(), words, ec, {});
  return g;
}

NPURT_DECL stream_graph stream::end_capture(graph_flags flags) {
  std::error_code ec;
  std::string words;
  stream_graph g = end_capture(flags, ec, words);
  if (ec) throw_error_on(device_or_none(), ec, words);
  return g;
}

NPURT_DECL stream_graph stream::end_capture(std::error_code& ec) { return end_capture(graph_flags::none, ec); }

NPURT_DECL stream_graph stream::end_capture() { return end_capture(graph_flags::none); }

NPURT_DECL capture_status stream::capture_info() const {
  std::error_code ec;
  const auto* s = state(ec);
  throw_if(ec, "npurt::stream::capture_info");
  if (!s->capture) return capture_status::none;
  return s->capture->invalidated ? capture_status::invalidated : capture_status::active;
}

}  // namespace npurt
