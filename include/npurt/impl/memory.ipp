// npurt/impl/memory.ipp
#pragma once

#include <npurt/memory.hpp>

#include <map>
#include <sstream>
#include <string>

namespace npurt {
namespace detail {

/// Device memory for a pool, from the runtime: segments are raw device allocations marked as the
/// pool's (backed in functional mode), and compact arenas are reserved address ranges whose pages
/// are mapped on demand.
class pool_provider final : public segment_provider {
 public:
  pool_provider(runtime& rt, device_id dev) : rt_(&rt), dev_(dev) {}

  std::error_code allocate(std::size_t bytes, std::uint64_t& addr) override {
    std::error_code ec;
    void* p = rt_->memory().device_malloc(dev_, bytes, ec, true);
    addr = reinterpret_cast<std::uint64_t>(p);
    return ec;
  }
  // The releases run when a pool dies, which may be after its system (a session's pool): the
  // device memory is gone with the system then, and there is nothing to give back.
  void release(std::uint64_t addr, std::size_t) override {
    if (!rt_) return;
    std::error_code ec;
    rt_->memory().device_free(dev_, reinterpret_cast<void*>(addr), ec, true);
  }
  [[nodiscard]] std::size_t capacity() const override { return rt_->backend().properties(dev_).memory_bytes; }
  [[nodiscard]] std::size_t free_bytes() const override { return capacity() - rt_->memory().device_used(dev_); }

  std::error_code reserve_range(std::size_t bytes, std::uint64_t& addr) override {
    std::error_code ec;
    addr = rt_->memory().reserve_range(dev_, bytes, ec);
    if (!ec) ranges_[addr] = bytes;
    return ec;
  }
  void release_range(std::uint64_t addr, std::size_t) override {
    if (rt_) rt_->memory().release_range(addr);
    ranges_.erase(addr);
  }
  std::error_code map(std::uint64_t addr, std::size_t bytes) override {
    const std::uint64_t base = base_of(addr);
    return base ? rt_->memory().map_range(base, bytes) : make_error_code(errc::invalid_pointer);
  }
  void unmap(std::uint64_t addr, std::size_t bytes) override {
    if (const std::uint64_t base = base_of(addr); base && rt_) rt_->memory().unmap_range(base, bytes);
  }

 private:
  [[nodiscard]] std::uint64_t base_of(std::uint64_t addr) const {
    auto it = ranges_.upper_bound(addr);
    if (it == ranges_.begin()) return 0;
    --it;
    return addr < it->first + it->second ? it->first : 0;
  }

  runtime_ref rt_;  // null once the system is gone
  device_id dev_;
  std::map<std::uint64_t, std::size_t> ranges_;
};

// A fence is a stream position: the stream in the high bits, the task sequence in the low 40.
inline constexpr std::uint64_t fence_of(std::uint32_t stream, std::uint64_t seq) noexcept {
  return (static_cast<std::uint64_t>(stream) << 40) | (seq & ((std::uint64_t{1} << 40) - 1));
}
inline constexpr std::uint32_t fence_stream(std::uint64_t f) noexcept { return static_cast<std::uint32_t>(f >> 40); }
inline constexpr std::uint64_t fence_seq(std::uint64_t f) noexcept { return f & ((std::uint64_t{1} << 40) - 1); }

}  // namespace detail

NPURT_DECL mem_pool::mem_pool(detail::runtime& rt, device_id dev, const mem_pool_options& opts)
    : rt_(&rt), dev_(dev), provider_(std::make_unique<detail::pool_provider>(rt, dev)) {
  alloc_ = make_allocator(opts);
}

NPURT_DECL std::unique_ptr<detail::caching_allocator> mem_pool::make_allocator(const mem_pool_options& opts) const {
  mem_pool_options o = opts;
  o.device = dev_;
  detail::stream_callbacks cb;
  cb.fence_done = [rt_ = rt_.get()](std::uint64_t f) {
    return rt_->position_reached(detail::fence_stream(f), detail::fence_seq(f));
  };
  cb.record_fence = [rt_ = rt_.get()](std::uint32_t stream) {
    return detail::fence_of(stream, rt_->last_enqueued(stream));
  };
  cb.stream_waits_on = [rt_ = rt_.get()](std::uint32_t stream, std::uint64_t f) {
    return rt_->stream_waits_for(stream, detail::fence_stream(f), detail::fence_seq(f));
  };
  cb.insert_wait = [rt_ = rt_.get()](std::uint32_t stream, std::uint64_t f) {
    rt_->enqueue_wait(stream, detail::fence_stream(f), detail::fence_seq(f), "pool_wait");
  };
  cb.synchronize_all = [rt_ = rt_.get(), dev = dev_] {
    // Blocking is only possible outside run(); inside it async_malloc drains the device itself.
    if (rt_->in_run()) return;
    std::error_code ec;
    detail::wait_blocking(*rt_, [&] { return rt_->device_positions(dev).empty(); }, sim_time::max(), ec);
  };
  return std::make_unique<detail::caching_allocator>(*provider_, o, std::move(cb));
}

NPURT_DECL void mem_pool::unregister_blocks() {
  // Only this pool's blocks leave the registry: a device may have several pools (a session's
  // beside the default one), and the others' blocks stay live.
  for (const auto& seg : alloc_->snapshot().segments)
    for (const auto& b : seg.blocks) rt_->memory().unregister_pool_block(b.addr);
}

NPURT_DECL void mem_pool::reconfigure(const mem_pool_options& opts) {
  // The new allocator is built first: its constructor validates the options, and bad ones must
  // leave the pool and its live blocks as they were.
  auto fresh = make_allocator(opts);
  unregister_blocks();
  alloc_ = std::move(fresh);  // the old allocator gives every segment back to the device
  ++generation_;
}

NPURT_DECL mem_pool::~mem_pool() {
  if (rt_) unregister_blocks();  // a pool that outlives its system (a session's) has no registry left
  alloc_.reset();                // gives every segment back to the device, if it is still there
}

NPURT_DECL std::uint32_t mem_pool::stream_id(stream& s, std::error_code& ec, detail::stream_state** capturing) const {
  // Before the stream's own check: valid() is false on a wrong thread too, which would hide
  // the real cause behind invalid_stream.
  if ((ec = rt_->check_thread())) return 0;
  if (!s.valid()) {
    ec = make_error_code(errc::invalid_stream);
    return 0;
  }
  if (s.device() != dev_) {
    ec = make_error_code(errc::stream_device_mismatch);
    return 0;
  }
  if (detail::stream_state* st = rt_->find_stream(s.id()); st && st->capture) {
    if (capturing) {
      *capturing = st;
      return s.id();
    }
    // Only allocations and frees become nodes: a reservation or a stream's use of a block
    // would change the pool now, for work that runs at each launch.
    ec = make_error_code(errc::capture_unsupported);
    const std::string words = "npurt::mem_pool: the capturing stream " + std::to_string(s.id()) +
                              " takes malloc_async and free_async only (graph allocations); reserve, record_stream "
                              "and async_malloc are not captured";
    rt_->note_recent_error(words);
    rt_->invalidate_capture(*st, ec, words);
    return 0;
  }
  return s.id();
}

NPURT_DECL bool mem_pool::device_busy() const { return !rt_->device_positions(dev_).empty(); }

NPURT_DECL bool mem_pool::fits_device(std::size_t bytes) const {
  const std::size_t limit = alloc_->options().pool_size_limit;
  return bytes <= rt_->backend().properties(dev_).memory_bytes && (limit == 0 || bytes <= limit);
}

NPURT_DECL void* mem_pool::do_malloc(std::size_t bytes, std::uint32_t stream, std::error_code& ec) {
  const std::uint64_t addr = alloc_->allocate(bytes, stream, ec);
  if (ec) return nullptr;
  rt_->memory().register_pool_block(dev_, addr, bytes);
  rt_->trace_memory(dev_, memory_op::alloc, addr, alloc_->block_size(addr), alloc_->used_current(),
                    alloc_->reserved_current(), stream);
  return reinterpret_cast<void*>(addr);
}

NPURT_DECL void mem_pool::note_refusal(std::error_code ec, std::size_t bytes) {
  try {
    std::rethrow_exception(alloc_->allocate_error(ec, bytes));
  } catch (const std::exception& e) {
    // Caller errors already name the call; out-of-memory reports read as PyTorch's, unnamed.
    const std::string_view what = e.what();
    constexpr std::string_view call = "npurt::mem_pool::malloc_async: ";
    rt_->note_recent_error(what.starts_with(call) ? std::string(what) : std::string(call) + e.what());
  }
}

NPURT_DECL void* mem_pool::malloc_async(std::size_t bytes, stream& s, std::error_code& ec) {
  detail::stream_state* capturing = nullptr;
  const std::uint32_t sid = stream_id(s, ec, &capturing);
  if (ec) return nullptr;
  if (capturing) {
    std::string why;
    void* p = rt_->capture_malloc(*capturing, bytes, ec, why);
    if (ec) rt_->note_recent_error("npurt::mem_pool::malloc_async: " + why);
    return p;
  }
  void* p = do_malloc(bytes, sid, ec);
  if (ec) [[unlikely]]
    note_refusal(ec, bytes);
  return p;
}

NPURT_DECL void* mem_pool::malloc_async(std::size_t bytes, stream& s) {
  std::error_code ec;
  detail::stream_state* capturing = nullptr;
  const std::uint32_t sid = stream_id(s, ec, &capturing);
  throw_if(ec, "npurt::mem_pool::malloc_async");
  if (capturing) {
    std::string why;
    void* p = rt_->capture_malloc(*capturing, bytes, ec, why);
    throw_if_on(dev_, ec, "npurt::mem_pool::malloc_async: " + why);
    return p;
  }
  // The throwing allocate raises out_of_memory_error with every field of the report.
  const std::uint64_t addr = alloc_->allocate(bytes, sid);
  rt_->memory().register_pool_block(dev_, addr, bytes);
  rt_->trace_memory(dev_, memory_op::alloc, addr, alloc_->block_size(addr), alloc_->used_current(),
                    alloc_->reserved_current(), sid);
  return reinterpret_cast<void*>(addr);
}

NPURT_DECL void mem_pool::free_async(void* p, stream& s, std::error_code& ec) {
  std::string why;
  free_async(p, s, ec, why);
  if (ec && !why.empty()) rt_->note_recent_error("npurt::mem_pool::free_async: " + why);
}

NPURT_DECL void mem_pool::free_async(void* p, stream& s, std::error_code& ec, std::string& why) {
  detail::stream_state* capturing = nullptr;
  const std::uint32_t sid = stream_id(s, ec, &capturing);
  if (ec) return;
  if (capturing) return rt_->capture_free(*capturing, p, ec, why);
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  if (rt_->is_graph_allocation(p)) {
    if (rt_->memory().find_allocation(p)->device != dev_) {
      ec = make_error_code(errc::stream_device_mismatch);
      return;
    }
    return rt_->free_graph_allocation(p, sid, ec, why);
  }
  const auto addr = reinterpret_cast<std::uint64_t>(p);
  const std::size_t size = alloc_->block_size(addr);
  alloc_->deallocate(addr, sid, ec, dev_);
  if (ec) [[unlikely]] {
    // Not this pool's: memory of another device is the caller's device mix-up, as device::free
    // reports it, not a pointer npurt never handed out.
    if (ec == errc::invalid_pointer)
      if (const detail::allocation* a = rt_->memory().find_allocation(p); a && a->device != dev_)
        ec = make_error_code(errc::stream_device_mismatch);
    return;
  }
  rt_->memory().unregister_pool_block(addr);
  rt_->trace_memory(dev_, memory_op::free, addr, size, alloc_->used_current(), alloc_->reserved_current(), sid);
}

NPURT_DECL void mem_pool::free_async(void* p, stream& s) {
  std::error_code ec;
  std::string why;
  free_async(p, s, ec, why);
  if (!why.empty()) throw_error_on(dev_, ec, "npurt::mem_pool::free_async: " + why);
  if (ec == errc::stream_device_mismatch) {
    const std::string pool = "the pool's device is " + std::to_string(dev_);
    if (const detail::allocation* a = rt_->memory().find_allocation(p); a && a->device != dev_) {
      std::ostringstream os;
      os << p;
      throw_error(ec, "npurt::mem_pool::free_async: " + os.str() + " is memory of device " + std::to_string(a->device) +
                          ", " + pool);
    }
    throw_error(ec, "npurt::mem_pool::free_async: the stream is of device " + std::to_string(s.device()) + ", " + pool);
  }
  if (ec == errc::null_pointer)
    throw_error(ec,
                "npurt::mem_pool::free_async: the pointer is null, which no allocation returns (a refused "
                "malloc_async's result is not to be freed)");
  throw_if(ec, "npurt::mem_pool::free_async");
}

NPURT_DECL void mem_pool::reserve(std::size_t bytes, stream& s, std::error_code& ec) {
  const std::uint32_t sid = stream_id(s, ec);
  if (ec) return;
  alloc_->reserve(bytes, sid, ec);
}

NPURT_DECL void mem_pool::reserve(std::size_t bytes, stream& s) {
  std::error_code ec;
  const std::uint32_t sid = stream_id(s, ec);
  throw_if(ec, "npurt::mem_pool::reserve");
  // Refused as malloc_async refuses: out_of_memory_error with the device's figures.
  alloc_->reserve(bytes, sid);
}

NPURT_DECL void mem_pool::record_stream(void* p, stream& s, std::error_code& ec) {
  const std::uint32_t sid = stream_id(s, ec);
  if (ec) return;
  alloc_->record_stream(reinterpret_cast<std::uint64_t>(p), sid, 0, ec);
}

NPURT_DECL void mem_pool::record_stream(void* p, stream& s) {
  std::error_code ec;
  record_stream(p, s, ec);
  throw_if(ec, "npurt::mem_pool::record_stream");
}

NPURT_DECL void mem_pool::check_owner(const char* call) const {
  // The allocator is the owning thread's, as every allocation is: a maintenance call from
  // another thread would race with it.
  if (const std::error_code ec = rt_ ? rt_->check_thread() : std::error_code{})
    throw_error(ec, std::string("npurt::mem_pool::") + call + ": called from a thread that does not own the system");
}

NPURT_DECL void mem_pool::set_attribute(mem_pool_attr a, std::uint64_t value) {
  check_owner("set_attribute");
  auto& o = alloc_->options();
  switch (a) {
    case mem_pool_attr::reuse_follow_event_dependencies: o.reuse_follow_event_dependencies = value != 0; return;
    case mem_pool_attr::reuse_allow_opportunistic: o.reuse_allow_opportunistic = value != 0; return;
    case mem_pool_attr::reuse_allow_internal_dependencies: o.reuse_allow_internal_dependencies = value != 0; return;
    case mem_pool_attr::release_threshold: o.release_threshold = static_cast<std::size_t>(value); return;
    case mem_pool_attr::reserved_mem_high:
      if (value != 0)
        throw_error(make_error_code(errc::invalid_argument),
                    "npurt::mem_pool::set_attribute: reserved_mem_high can only be reset to 0");
      alloc_->reset_reserved_high();
      return;
    case mem_pool_attr::used_mem_high:
      if (value != 0)
        throw_error(make_error_code(errc::invalid_argument),
                    "npurt::mem_pool::set_attribute: used_mem_high can only be reset to 0");
      alloc_->reset_used_high();
      return;
    case mem_pool_attr::reserved_mem_current:
    case mem_pool_attr::used_mem_current:
      throw_error(make_error_code(errc::invalid_argument), "npurt::mem_pool::set_attribute: attribute " +
                                                               std::to_string(static_cast<int>(a)) +
                                                               " (a current figure) is read-only");
  }
  // An id cast from an integer that names no attribute (0 among them) is not a read-only one.
  throw_error(
      make_error_code(errc::invalid_argument),
      "npurt::mem_pool::set_attribute: unknown memory pool attribute id " + std::to_string(static_cast<int>(a)));
}

NPURT_DECL std::uint64_t mem_pool::get_attribute(mem_pool_attr a) const {
  check_owner("get_attribute");
  const auto& o = alloc_->options();
  switch (a) {
    case mem_pool_attr::reuse_follow_event_dependencies: return o.reuse_follow_event_dependencies;
    case mem_pool_attr::reuse_allow_opportunistic: return o.reuse_allow_opportunistic;
    case mem_pool_attr::reuse_allow_internal_dependencies: return o.reuse_allow_internal_dependencies;
    case mem_pool_attr::release_threshold: return o.release_threshold;
    case mem_pool_attr::reserved_mem_current: return alloc_->reserved_current();
    case mem_pool_attr::reserved_mem_high: return alloc_->reserved_high();
    case mem_pool_attr::used_mem_current: return alloc_->used_current();
    case mem_pool_attr::used_mem_high: return alloc_->used_high();
  }
  throw_error(
      make_error_code(errc::invalid_argument),
      "npurt::mem_pool::get_attribute: unknown memory pool attribute id " + std::to_string(static_cast<int>(a)));
}

NPURT_DECL void mem_pool::trim_to(std::size_t keep) {
  check_owner("trim_to");
  alloc_->trim_to(keep);
}
NPURT_DECL void mem_pool::empty_cache() {
  check_owner("empty_cache");
  alloc_->empty_cache();
}
NPURT_DECL void mem_pool::trigger_gc() {
  check_owner("trigger_gc");
  alloc_->trigger_gc();
}
NPURT_DECL void mem_pool::reset_peak() {
  check_owner("reset_peak");
  alloc_->reset_peak();
}
NPURT_DECL void mem_pool::reset_accumulated() {
  check_owner("reset_accumulated");
  alloc_->reset_accumulated();
}
NPURT_DECL memory_snapshot mem_pool::snapshot() const {
  check_owner("snapshot");
  return alloc_->snapshot();
}
NPURT_DECL void mem_pool::on_synchronize(bool all_streams) { alloc_->on_synchronize(all_streams); }

}  // namespace npurt
