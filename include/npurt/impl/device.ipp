// npurt/impl/device.ipp
#pragma once

#include <npurt/detail/core_limit_check.hpp>
#include <npurt/device.hpp>
#include <npurt/impl/caching_allocator.ipp>  // format_size, shared with the pool's OOM message

#include <algorithm>
#include <cstdio>
#include <string>

namespace npurt {

// The runtime outlives the devices (the system destroys them first), so it is still there.
NPURT_DECL device::~device() {
  if (pool_) rt_->set_device_pool(id_, nullptr, nullptr);
}

NPURT_DECL void device::register_pool() {
  rt_->set_device_pool(
      id_, [](void* p, bool all_streams) { static_cast<npurt::mem_pool*>(p)->on_synchronize(all_streams); },
      pool_.get());
}

NPURT_DECL npurt::mem_pool& device::mem_pool() {
  if (!pool_) {
    // Made on first use: from another thread that would race with the owner's first use.
    if (const std::error_code ec = rt_->check_thread()) throw_error_on(id_, ec, "npurt::device::mem_pool");
    pool_ = std::make_unique<npurt::mem_pool>(*rt_, id_);
    register_pool();
  }
  return *pool_;
}

NPURT_DECL npurt::mem_pool& device::configure_mem_pool(const mem_pool_options& opts) {
  throw_if_on(id_, rt_->check_thread(), "npurt::device::configure_mem_pool");
  // The old allocator is destroyed: not from inside a report of its own bookkeeping (on_memory
  // of the allocation it is serving).
  if (rt_->in_report())
    throw_error_on(id_, make_error_code(errc::not_supported),
                   "npurt::device::configure_mem_pool: called from an observer's report, while the pool may be "
                   "inside the allocation being reported: configure it from a host callback, a coroutine or "
                   "outside run()");
  // The pool object stays and only its allocator is replaced: a mem_pool& handed out earlier,
  // and an async_malloc waiting to retry, keep pointing at a live pool.
  if (pool_) {
    pool_->reconfigure(opts);
  } else {
    pool_ = std::make_unique<npurt::mem_pool>(*rt_, id_, opts);
    register_pool();
  }
  return *pool_;
}

NPURT_DECL npurt::mem_pool* device::configure_mem_pool(const mem_pool_options& opts, std::error_code& ec) {
  // One body for both forms: the options are checked where the allocator is built, and a
  // refusal is rare (a setup step), so its exception costs nothing that matters.
  ec.clear();
  try {
    return &configure_mem_pool(opts);
  } catch (const npurt::error& e) {
    ec = e.code();
    // Another thread's refusal leaves the loop thread's words alone.
    if (!rt_->wrong_thread()) rt_->note_recent_error(e.what());
  }
  return nullptr;
}

NPURT_DECL stream device::make_stream(const stream_options& opts, std::error_code& ec) {
  ec.clear();
  if ((ec = rt_->check_thread())) return {};
  constexpr auto known = stream_flags::fast_launch | stream_flags::fast_sync | stream_flags::overflow_edge |
                         stream_flags::direct_submit | stream_flags::stop_on_failure;
  // A bit from a newer API or a cast integer would otherwise be kept and silently ignored.
  if ((static_cast<std::uint32_t>(opts.flags) & ~static_cast<std::uint32_t>(known)) != 0) {
    ec = make_error_code(errc::invalid_argument);
    return {};
  }
  return stream(*rt_, rt_->create_stream(id_, opts.priority, static_cast<std::uint32_t>(opts.flags)));
}

NPURT_DECL stream device::make_stream(const stream_options& opts) {
  std::error_code ec;
  stream s = make_stream(opts, ec);
  if (ec == errc::invalid_argument) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%x", static_cast<unsigned>(opts.flags));
    throw_error(ec, std::string("npurt::device::make_stream: unknown stream_flags bits in ") + buf);
  }
  throw_if(ec, "npurt::device::make_stream");
  return s;
}

NPURT_DECL event device::make_event(const event_options& opts, std::error_code& ec) {
  ec.clear();
  if ((ec = rt_->check_thread())) return {};
  return event::user_event(*rt_, rt_->create_event(id_, opts.wait_for_record));
}

NPURT_DECL event device::make_event(const event_options& opts) {
  std::error_code ec;
  event e = make_event(opts, ec);
  throw_if(ec, "npurt::device::make_event");
  return e;
}

NPURT_DECL void* device::malloc(std::size_t bytes, std::error_code& ec) noexcept {
  if ((ec = rt_->check_thread())) return nullptr;
  return rt_->memory().device_malloc(id_, bytes, ec);
}

NPURT_DECL void* device::malloc(std::size_t bytes) {
  std::error_code ec;
  void* p = malloc(bytes, ec);
  if (ec == errc::size_overflow)
    throw_error(ec, "npurt::device::malloc: " + std::to_string(bytes) +
                        " bytes cannot be rounded up to the allocation granule without overflowing size_t");
  if (ec == errc::out_of_memory) {
    out_of_memory_error::info i;
    i.requested = bytes;
    i.device = id_;
    i.total = properties().memory_bytes;
    i.allocated = rt_->memory().device_used(id_);
    i.free = i.total - i.allocated;
    i.reserved = i.allocated;
    // Memory the default pool caches counts as allocated here, though the program freed it with
    // free_async: as with cudaMallocAsync's pools, it goes back to the device only when the pool
    // is trimmed (release threshold, trim_to, empty_cache), which a raw malloc does not do.
    std::string cached;
    if (pool_) {
      const allocator_stats st = pool_->stats();
      const auto idle = st.reserved_bytes[stat_all].current - st.allocated_bytes[stat_all].current;
      if (idle > 0)
        cached = "; " + detail::ca_detail::format_size(static_cast<std::size_t>(idle)) +
                 " of it cached unused by the device's memory pool, which mem_pool().empty_cache() or trim_to() "
                 "gives back";
    }
    throw out_of_memory_error(
        i, "NPU out of memory. Tried to allocate " + detail::ca_detail::format_size(bytes) + " (NPU " +
               std::to_string(id_) + "; " + detail::ca_detail::format_size(i.total) + " total capacity; " +
               detail::ca_detail::format_size(i.allocated) + " already allocated" + cached + "; " +
               detail::ca_detail::format_size(i.free) + " free)" +
               (i.free >= bytes ? ": a refusal not for lack of memory (an injected transient_oom, "
                                  "for one), which trying again may get past"
                                : ""));
  }
  throw_if_on(id_, ec, "npurt::device::malloc");
  return p;
}

NPURT_DECL void device::free(void* p, std::error_code& ec) noexcept {
  std::string why;
  free(p, ec, why);
}

NPURT_DECL void device::free(void* p, std::error_code& ec, std::string& why) noexcept {
  if ((ec = rt_->check_thread())) return;
  // A graph's allocation that a launch left allocated (cudaFree of graph memory).
  if (rt_->is_graph_allocation(p) && rt_->memory().find_allocation(p)->device == id_) {
    try {
      rt_->free_graph_allocation(p, 0, ec, why);
    } catch (const std::bad_alloc&) { ec = make_error_code(errc::resource_exhausted); }
    return;
  }
  rt_->memory().device_free(id_, p, ec);
}

NPURT_DECL void device::free(void* p) {
  std::error_code ec;
  std::string why;
  free(p, ec, why);
  if (!why.empty()) throw_error_on(id_, ec, "npurt::device::free: " + why);
  if (ec == errc::invalid_pointer) throw_error_on(id_, ec, "npurt::device::free: " + rt_->memory().why_not_live(p));
  throw_if_on(id_, ec, "npurt::device::free");
}

NPURT_DECL void device::set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec, std::string& why) {
  if ((ec = rt_->check_thread())) return;
  why = detail::core_limit_problem(properties(), kind, cores);
  if (!why.empty()) {
    ec = make_error_code(errc::invalid_argument);
    return;
  }
  core_limits l = rt_->device_core_limits(id_);
  (kind == core_kind::cube ? l.cube : l.vector) = cores;
  rt_->set_device_core_limits(id_, l);
}

NPURT_DECL void device::set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec) {
  std::string why;
  set_core_limit(kind, cores, ec, why);
}

NPURT_DECL void device::set_core_limit(core_kind kind, std::uint32_t cores) {
  std::error_code ec;
  std::string why;
  set_core_limit(kind, cores, ec, why);
  if (!why.empty()) throw_error_on(id_, ec, "npurt::device::set_core_limit: " + why);
  throw_if_on(id_, ec, "npurt::device::set_core_limit");
}

NPURT_DECL void device::reset_core_limits(std::error_code& ec) {
  if ((ec = rt_->check_thread())) return;
  rt_->set_device_core_limits(id_, {});
}

NPURT_DECL void device::reset_core_limits() {
  std::error_code ec;
  reset_core_limits(ec);
  throw_if_on(id_, ec, "npurt::device::reset_core_limits");
}

NPURT_DECL std::uint32_t device::core_limit(core_kind kind) const {
  if (const std::error_code ec = rt_->check_thread()) throw_error_on(id_, ec, "npurt::device::core_limit");
  const core_limits l = rt_->device_core_limits(id_);
  const std::uint32_t v = kind == core_kind::vector ? l.vector : l.cube;
  return v != 0 ? v : core_count(properties(), kind);
}

NPURT_DECL memory_usage_report device::memory_usage() {
  if (const std::error_code ec = rt_->check_thread()) throw_error_on(id_, ec, "npurt::device::memory_usage");
  return mem_pool().memory_usage();
}

NPURT_DECL mem_info device::memory_info() const {
  // The registry is the loop thread's: another thread would race with allocations.
  if (const std::error_code ec = rt_->check_thread()) throw_error_on(id_, ec, "npurt::device::memory_info");
  const std::size_t total = properties().memory_bytes;
  return {total - rt_->memory().device_used(id_), total, rt_->memory().host_backing(id_)};
}

NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> device::pending_positions() const {
  return rt_->device_positions(id_);
}

NPURT_DECL void device::synchronize(std::optional<picoseconds> timeout, std::error_code& ec, detail::failure* out) {
  ec.clear();
  if ((ec = rt_->check_thread())) return;
  if ((ec = detail::check_timeout(timeout))) return;
  if ((ec = refuse_in_capture("npurt::device::synchronize"))) return;
  const auto positions = pending_positions();
  const sim_time deadline = timeout ? later(rt_->now(), *timeout) : end_of_time;
  detail::runtime& rt = *rt_;
  detail::wait_blocking(
      rt,
      [&] {
        for (const auto& [s, q] : positions)
          if (!rt.position_reached(s, q)) return false;
        return true;
      },
      deadline, ec);
  if (ec == errc::deadlock) rt.read_device_deadlock(id_);  // as stream::synchronize reads its own
  if (ec) return;
  rt.device_synchronized(id_, /*all_streams=*/true);
  detail::failure f = rt.take_device_failure(id_);
  ec = f.ec;
  // Every position was pending at the call: one an abort dropped meanwhile was never reached by
  // running its work (as stream::synchronize).
  if (!ec && std::ranges::any_of(positions, [&](const auto& p) { return rt.position_aborted(p.first, p.second); }))
    ec = make_error_code(errc::operation_aborted);
  if (out) *out = std::move(f);
}

NPURT_DECL void device::synchronize(std::optional<picoseconds> timeout, std::error_code& ec) {
  synchronize(timeout, ec, nullptr);
}

NPURT_DECL std::error_code device::refuse_in_capture(std::string_view call) {
  detail::stream_state* s = rt_->strict_capture(id_);
  if (!s) return {};
  const std::error_code ec = make_error_code(errc::capture_unsupported);
  std::string words = std::string(call) + ": " + capture_words(*s);
  rt_->invalidate_capture(*s, ec, words);
  (void)detail::note_refusal(*rt_, id_, words, ec, {});
  return ec;
}

NPURT_DECL std::string device::capture_words(const detail::stream_state& s) {
  return "stream " + std::to_string(s.id) + " of device " + std::to_string(id_) +
         " is capturing in capture_mode::global, and a device synchronize would wait for the work the capture "
         "holds back (end_capture first, or capture in capture_mode::relaxed)";
}

NPURT_DECL void device::synchronize(std::optional<picoseconds> timeout) {
  std::error_code ec;
  detail::failure f;
  synchronize(timeout, ec, &f);
  if (ec == errc::capture_unsupported)
    if (const detail::stream_state* s = rt_->strict_capture(id_))
      throw_error_on(id_, ec, "npurt::device::synchronize: " + capture_words(*s));
  if (f.exception) std::rethrow_exception(f.exception);
  if (f)
    detail::throw_failure(f, "npurt::device::synchronize: device " + std::to_string(id_) + ": " + f.describe(), id_);
  detail::throw_if_sync_error(rt_, ec, "npurt::device::synchronize", timeout, id_,
                              "co_await dev.async_synchronize(asio::use_awaitable)");
}

NPURT_DECL void device::memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                               std::error_code& ec) {
  memcpy(dst, dst_max, src, count, kind, ec, nullptr);
}

NPURT_DECL void device::memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                               std::error_code& ec, detail::failure* out) {
  copy_blocking({dst, dst_max, count, src, count, count, 1, ""}, kind, ec, out, nullptr);
}

NPURT_DECL void device::copy_blocking(const detail::copy_shape& c, memcpy_kind kind, std::error_code& ec,
                                      detail::failure* out, std::string* what) {
  ec.clear();
  if ((ec = rt_->check_thread())) return;
  if (rt_->in_run()) {
    ec = make_error_code(errc::not_supported);
    return;
  }
  if (!copy_stream_ || !copy_stream_->valid()) copy_stream_ = std::make_unique<stream>(make_stream());
  // Blocking: the source is read before this returns, so it is not staged.
  if (detail::task* t = copy_stream_->make_copy(c, kind, ec, false, what)) {
    copy_stream_->submit(t);
    copy_stream_->synchronize(no_timeout, ec);
  }
  if (ec) return;
  // aclrtMemcpy is a synchronisation point of the device: failed fire-and-forget work of any of
  // its streams is reported (and read) here, as by device::synchronize. When the copy itself
  // failed, that error was reported instead and the device's record stays for the next reader.
  detail::failure f = rt_->take_device_failure(id_);
  ec = f.ec;
  if (out) *out = std::move(f);
}

NPURT_DECL void device::memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind) {
  std::error_code ec;
  detail::failure f;
  memcpy(dst, dst_max, src, count, kind, ec, &f);
  throw_copy_error("npurt::device::memcpy", "co_await s.async_memcpy(..., asio::use_awaitable)", ec, f, dst, src, {});
}

NPURT_DECL void device::memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                 std::size_t width, std::size_t height, memcpy_kind kind, std::error_code& ec) {
  copy_blocking(stream::shape_2d(dst, dst_pitch, src, src_pitch, width, height), kind, ec, nullptr, nullptr);
}

NPURT_DECL void device::memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                 std::size_t width, std::size_t height, memcpy_kind kind) {
  std::error_code ec;
  detail::failure f;
  std::string what;
  copy_blocking(stream::shape_2d(dst, dst_pitch, src, src_pitch, width, height), kind, ec, &f, &what);
  throw_copy_error("npurt::device::memcpy2d", "co_await s.async_memcpy2d(..., asio::use_awaitable)", ec, f, dst, src,
                   what);
}

NPURT_DECL void device::throw_copy_error(const char* call, const char* async_form, std::error_code ec,
                                         detail::failure& f, const void* dst, const void* src,
                                         const std::string& what) {
  if (f.exception) std::rethrow_exception(f.exception);
  if (f) detail::throw_failure(f, std::string(call) + ": device " + std::to_string(id_) + ": " + f.describe(), id_);
  if (ec == errc::not_supported && rt_->in_run())
    throw_error(ec, std::string(call) +
                        " blocks, which is not possible inside system::run (in a coroutine or handler); use " +
                        async_form);
  if (ec && !what.empty()) throw_error_on(id_, ec, std::string(call) + ": " + what);
  // Which pointer, and what is wrong with it (freed, another device's, ...), as stream::memcpy says.
  if (ec && copy_stream_) {
    const std::string why = copy_stream_->pointer_problem(ec, dst, src);
    if (!why.empty()) throw_error_on(id_, ec, std::string(call) + ": " + why);
  }
  throw_if_on(id_, ec, call);
}

NPURT_DECL void device::finish_reset() noexcept {
  ++resets_;
  copy_stream_.reset();
  // A fresh default allocator rather than no pool: a mem_pool& must outlive a reset.
  if (pool_) pool_->reconfigure({});
  rt_->invalidate_device(id_);
  rt_->memory().release_device_memory(id_);
}

NPURT_DECL void device::reset(std::error_code& ec) {
  ec.clear();
  if ((ec = rt_->check_thread())) return;
  // An observer hears a task's end from inside the scheduler's bookkeeping of that task, which a
  // reset would free under it (the task is among the work a reset drops).
  if (rt_->in_report()) {
    ec = make_error_code(errc::not_supported);
    return;
  }
  // aclrtResetDevice does not wait: pending work is aborted, not drained.
  rt_->abort_device(id_);
  finish_reset();
}

NPURT_DECL void device::reset() {
  std::error_code ec;
  reset(ec);
  if (ec == errc::not_supported)
    throw_error_on(id_, ec,
                   "npurt::device::reset: called from an observer's report, which the reset would pull the "
                   "reported work from under: reset from a host callback, a coroutine or after run() returns");
  throw_if_on(id_, ec, "npurt::device::reset");
}

NPURT_DECL void device::abort_tasks(std::error_code& ec) {
  ec.clear();
  if ((ec = rt_->check_thread())) return;
  if (rt_->in_report()) {
    ec = make_error_code(errc::not_supported);
    (void)detail::note_refusal(*rt_, id_, "npurt::device::abort_tasks", ec, detail::abort_in_report);
    return;
  }
  rt_->abort_device_tasks(id_);
}

NPURT_DECL void device::abort_tasks() {
  std::error_code ec;
  abort_tasks(ec);
  if (ec == errc::not_supported)
    throw_error_on(id_, ec, std::string("npurt::device::abort_tasks: ") + std::string(detail::abort_in_report));
  throw_if_on(id_, ec, "npurt::device::abort_tasks");
}

}  // namespace npurt
