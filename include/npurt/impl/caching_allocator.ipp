// npurt/impl/caching_allocator.ipp — the allocator's life cycle and its two hot paths:
// allocate (round, best fit, split, the out-of-memory retry chain) and deallocate (stream-ordered
// free, record_stream fences, coalescing). The free index, the arenas, the release policy and
// the statistics live in the allocator_*.ipp files next to this one.
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace npurt::detail {

namespace ca_detail {

/// round_size's arithmetic, inline for allocate_impl.
[[gnu::always_inline]] inline std::size_t round_request(std::size_t size, bool pad) noexcept {
  if (pad) size += caching_allocator::ascend_pad_size;
  // A select rather than a branch: request sizes on either side of 512 B come in random order.
  return round_up(std::max(size, caching_allocator::min_block_size), caching_allocator::min_block_size);
}

inline std::string format_size(std::size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes <= 1024) std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else if (bytes < mib) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else if (bytes < 1024 * mib) std::snprintf(buf, sizeof buf, "%.2f MiB", b / static_cast<double>(mib));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / static_cast<double>(1024 * mib));
  return buf;
}

}  // namespace ca_detail

NPURT_DECL caching_allocator::caching_allocator(segment_provider& provider, caching_allocator_options opts,
                                                stream_callbacks callbacks)
    : provider_(provider), capacity_(provider.capacity()), opts_(opts), cb_(std::move(callbacks)) {
  if (opts_.granule == 0 || (opts_.granule & (opts_.granule - 1)) != 0 || opts_.granule % min_block_size != 0)
    throw_error(make_error_code(errc::invalid_config), "caching_allocator: granule must be a power of two >= 512");
  // Written so that NaN fails too.
  if (!(opts_.garbage_collection_threshold >= 0.0 && opts_.garbage_collection_threshold < 1.0))
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: garbage_collection_threshold must be in [0, 1)");
  if (opts_.max_split_size < large_buffer && opts_.max_split_size != std::numeric_limits<std::size_t>::max())
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: max_split_size must exceed 20 MiB (the large segment size)");
  // A compact arena's address space is rounded up to the granule: a size that would wrap around
  // size_t to a small one must not become an arena that holds nothing.
  if (opts_.arena_address_space > std::numeric_limits<std::size_t>::max() - (opts_.granule - 1))
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: arena_address_space of " + std::to_string(opts_.arena_address_space) +
                    " bytes cannot be rounded up to the granule of " + std::to_string(opts_.granule) +
                    " bytes without overflowing size_t");
  // An arena's addresses are the device's: a range larger than the device would hand out
  // addresses it does not have.
  if (opts_.arena_address_space > capacity_)
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: arena_address_space of " + std::to_string(opts_.arena_address_space) +
                    " bytes is more than the device's capacity of " + std::to_string(capacity_) + " bytes");
  if (capacity_ >= (std::size_t{1} << 41))
    throw_error(make_error_code(errc::invalid_config), "caching_allocator: devices of 2 TiB or more are not supported");
  stats_.max_split_size = opts_.max_split_size;
}

NPURT_DECL caching_allocator::~caching_allocator() {
  // Everything goes back to the device, live blocks included: the device is being torn down.
  for (auto& [addr, s] : segments_) {
    if (s->pool == arena_pool) {
      if (s->size) provider_.unmap(s->addr, s->size);
      provider_.release_range(s->addr, s->va_size);
    } else {
      provider_.release(s->addr, s->size);
    }
    delete s;
  }
}

NPURT_DECL caching_allocator::block* caching_allocator::new_block() {
  if (spare_blocks_.empty()) {
    constexpr std::size_t chunk = 256;
    block_chunks_.emplace_back(new block[chunk]);
    for (std::size_t i = chunk; i-- > 0;) spare_blocks_.push_back(&block_chunks_.back()[i]);
  }
  block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  // Field by field rather than *b = block{}: that would free the uses vector's buffer.
  b->addr = 0;
  b->size = b->requested = 0;
  b->stream = b->heap_pos = 0;
  b->pool = small_pool;
  b->allocated = b->pending = false;
  b->prev = b->next = nullptr;
  b->seg = nullptr;
  if (free_search_count_) b->gc_base = 0;
  if (fences_seen_) b->free_fence = 0;
  return b;
}

inline void caching_allocator::delete_block(block* b) noexcept {
  clear_uses(b);
  spare_blocks_.push_back(b);
}

NPURT_DECL std::size_t caching_allocator::round_size(std::size_t size) const noexcept {
  return ca_detail::round_request(size, opts_.ascend_pad);
}

NPURT_DECL std::size_t caching_allocator::allocation_size(std::size_t rounded) noexcept {
  if (rounded <= small_size) return small_buffer;
  if (rounded < min_large_alloc) return large_buffer;
  return ca_detail::round_up(rounded, round_large);
}

NPURT_DECL void caching_allocator::step(retry_step s) {
  if (on_retry_step) on_retry_step(s);
}

inline bool caching_allocator::should_split(const block* b, std::size_t size) const noexcept {
  const std::size_t remaining = b->size - size;
  if (b->pool == large_pool) return size < opts_.max_split_size && remaining > small_size;
  return remaining >= min_block_size;
}

NPURT_DECL bool caching_allocator::note_provider_error(std::error_code ec) noexcept {
  if (ec.category() != error_category() || !(ec == error_class::device)) return false;
  device_fault_ = static_cast<errc>(ec.value());
  return true;
}

NPURT_DECL caching_allocator::block* caching_allocator::alloc_segment(alloc_params& p) {
  p.pool_limited = false;
  if (!opts_.auto_growth) {
    p.pool_limited = true;
    return nullptr;
  }
  if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) + p.alloc_size > gc_limit()) {
    p.pool_limited = opts_.pool_size_limit != 0;
    return nullptr;
  }
  std::uint64_t addr = 0;
  if (const std::error_code ec = provider_.allocate(p.alloc_size, addr)) {
    note_provider_error(ec);
    return nullptr;
  }
  ++stats_.num_device_alloc;
  auto* s = new segment;
  s->addr = addr;
  s->size = p.alloc_size;
  s->stream = p.stream;
  s->pool = p.pool;
  block* b = new_block();
  b->addr = addr;
  b->size = p.alloc_size;
  b->stream = p.stream;
  b->pool = p.pool;
  b->seg = s;
  s->first = s->last = b;
  segments_.emplace(addr, s);
  blocks_.emplace(addr, b);
  stat_add(stats_.reserved_bytes, p.pool, static_cast<std::int64_t>(p.alloc_size));
  stat_add(stats_.segment, p.pool, 1);
  if (p.alloc_size >= opts_.max_split_size) ca_detail::stat_inc(stats_.oversize_segments, 1);
  return b;
}

NPURT_DECL void caching_allocator::split_block(block* b, std::size_t size) {
  block* r = new_block();
  r->addr = b->addr + size;
  r->size = b->size - size;
  r->stream = b->stream;
  r->pool = b->pool;
  r->seg = b->seg;
  if (fences_seen_) r->free_fence = b->free_fence;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  else b->seg->last = r;
  b->next = r;
  b->size = size;
  blocks_.emplace(r->addr, r);
  // After a cross-stream reuse the remainder takes the new stream, whose free block may
  // follow it. Its previous neighbour, b, is allocated.
  if (const block* n = r->next; n && !n->allocated && !n->pending && n->stream == r->stream) [[unlikely]]
    coalesce_and_cache(r);
  else insert_free(r);
}

[[gnu::always_inline]] inline std::uint64_t caching_allocator::take_block(block* b, alloc_params& p) {
  b->allocated = true;  // before splitting, so the remainder cannot merge back into it
  b->stream = p.stream;
  if (should_split(b, p.size)) split_block(b, p.size);
  b->requested = p.requested;
  if (fences_seen_) b->free_fence = 0;
  ++b->seg->live;
  const auto sz = static_cast<std::int64_t>(b->size);
  const stat_rows row = rows_of(b->pool);
  allocation_up(row, sz, static_cast<std::int64_t>(p.requested));
  if (b->size >= opts_.max_split_size) ca_detail::stat_inc(stats_.oversize_allocations, 1);
  return b->addr;
}

NPURT_DECL caching_allocator::block* caching_allocator::allocate_uncached(alloc_params& p, errc& e) {
  // Only new segments and the release of cached ones for them need the segment size.
  p.alloc_size = p.pool == arena_pool ? ca_detail::round_up(p.size, opts_.granule) : allocation_size(p.size);
  block* b = get_cross_stream_block(p);
  if (b) return b;
  auto alloc_new = [&]() -> block* { return p.pool == arena_pool ? grow_arena(p) : alloc_segment(p); };
  const double thr = opts_.garbage_collection_threshold;
  if (thr > 0.0 && opts_.auto_growth &&
      static_cast<double>(stats_.reserved_bytes[stat_all].current) > thr * static_cast<double>(gc_limit())) {
    step(retry_step::garbage_collect_preemptive);
    garbage_collect(false);
  }
  b = alloc_new();
  if (!b && device_fault_ != errc{}) [[unlikely]] {
    // A lost device: freeing cache or synchronising cannot help, and it is not out of memory.
    e = std::exchange(device_fault_, errc{});
    return nullptr;
  }
  if (!b) {
    step(retry_step::device_alloc_failed);
    if (opts_.auto_growth) {
      step(retry_step::free_fitting_cached);
      if (const std::size_t n = release_fitting_cached(p)) {
        stats_.num_gc_freed_blocks += n;
        ++stats_.num_alloc_retries;
        b = alloc_new();
      }
      if (!b && thr > 0.0) {
        step(retry_step::garbage_collect);
        const auto before = stats_.num_gc_freed_blocks;
        garbage_collect(true);
        if (stats_.num_gc_freed_blocks != before) {
          ++stats_.num_alloc_retries;
          b = alloc_new();
        }
      }
    }
    if (!b) {
      step(retry_step::synchronize_and_free_all);
      ++stats_.num_alloc_retries;
      synchronize_all_streams();
      // After a full synchronisation every recorded use is over. With fences the allocator asks
      // them instead of assuming: a caller that cannot block (a coroutine inside the event loop)
      // returns from synchronize_all with work still running, and that memory must stay put.
      if (!cb_.fence_done)
        for (block* x : pending_) clear_uses(x);
      process_events();
      if (opts_.auto_growth) stats_.num_gc_freed_blocks += release_all_cached();
      b = get_free_block(p);
      if (!b) b = get_cross_stream_block(p);
      if (!b) b = alloc_new();
      if (!b && p.pool == small_pool && device_fault_ == errc{}) b = lend_large_block(p);
    }
    if (!b && device_fault_ != errc{}) {
      e = std::exchange(device_fault_, errc{});  // the device was lost during the retries
      return nullptr;
    }
    if (!b) {
      step(retry_step::out_of_memory);
      ++stats_.num_ooms;
      e = p.pool_limited ? errc::pool_limit : errc::out_of_memory;
      return nullptr;
    }
  }
  return b;
}

NPURT_DECL caching_allocator::block* caching_allocator::lend_large_block(alloc_params& p) {
  // The last resort before a refusal: nothing cached in the small pool holds the request and
  // the device (or the limit, or the stock without auto_growth) gives no new small segment, but
  // a free block of a large segment that cannot go back (some of it is live) may hold it. The
  // block stays the large pool's, split by that pool's rule, so every statistic counts it there
  // and it goes back to the large pool's free set when freed. Requests that succeed without it
  // are served as before: only an allocation that would be refused changes.
  alloc_params q = p;
  q.pool = large_pool;
  block* b = get_free_block(q);
  if (!b) b = get_cross_stream_block(q);
  return b;
}

[[gnu::always_inline]] inline std::uint64_t caching_allocator::allocate_impl(std::size_t size, std::uint32_t stream,
                                                                             errc& e) {
  if (size == 0) {
    e = errc::zero_size;
    return 0;
  }
  if (size > capacity_) {
    e = beyond_capacity(size);
    if (e == errc::out_of_memory) ++stats_.num_ooms;
    return 0;
  }
  const std::size_t rounded = ca_detail::round_request(size, opts_.ascend_pad);
  if (deferred_) {
    // The size first: the test that usually fails.
    if (rounded == deferred_->size && deferred_->stream == stream && pending_.empty() &&
        opts_.strategy == allocation_strategy::segmented) {
      block* x = deferred_;
      if (take_deferred(size)) return x->addr;
    }
    cache_deferred();
  }
  if (!pending_.empty()) process_events();
  alloc_params p;
  p.requested = size;
  p.size = rounded;
  p.stream = stream;
  if (opts_.strategy == allocation_strategy::compact) p.pool = arena_pool;
  else p.pool = p.size <= small_size ? small_pool : large_pool;
  block* b;
  if (p.pool == small_pool) {  // get_free_block, its small-pool search inlined
    if (opts_.garbage_collection_threshold > 0.0) ++free_search_count_;
    b = get_small_block(p);
  } else {
    b = get_free_block(p);
  }
  if (!b) [[unlikely]] {
    b = allocate_uncached(p, e);
    if (!b) return 0;
  }
  return take_block(b, p);
}

NPURT_DECL std::uint64_t caching_allocator::allocate(std::size_t size, std::uint32_t stream, std::error_code& ec) {
  ec.assign(0, *system_category_);  // ec.clear(), without its out-of-line call
  errc e{};
  const auto addr = allocate_impl(size, stream, e);
  if (e != errc{}) ec = make_error_code(e);
  return addr;
}

NPURT_DECL std::string caching_allocator::oom_message(const out_of_memory_error::info& i, bool pool_limit,
                                                      std::size_t limit, const std::string& limit_detail) {
  using ca_detail::format_size;
  std::string m = "NPU out of memory. Tried to allocate " + format_size(i.requested) + ". NPU " +
                  std::to_string(i.device) + " has a total capacity of " + format_size(i.total) + " of which " +
                  format_size(i.free) + " is free.";
  if (pool_limit) m += " The pool's size limit of " + format_size(limit) + " is reached.";
  m += limit_detail;
  m += " Of the allocated memory " + format_size(i.allocated) + " is allocated by the pool, and " +
       format_size(i.reserved > i.allocated ? i.reserved - i.allocated : 0) +
       " is reserved by the pool but unallocated. If reserved but unallocated memory is large try the "
       "\"compact\" allocation strategy or setting max_split_size to avoid fragmentation; empty_cache() "
       "releases unoccupied cached memory.";
  return m;
}

NPURT_DECL std::uint64_t caching_allocator::allocate(std::size_t size, std::uint32_t stream) {
  errc e{};
  const auto addr = allocate_impl(size, stream, e);
  if (e == errc{}) [[likely]]
    return addr;
  throw_allocate_error(e, size);
}

NPURT_DECL void caching_allocator::throw_allocate_error(errc e, std::size_t size) {
  const std::error_code ec = make_error_code(e);
  if (ec == errc::out_of_memory || ec == errc::pool_limit) {
    out_of_memory_error::info i;
    i.requested = size;
    i.device = opts_.device;
    i.total = provider_.capacity();
    i.free = provider_.free_bytes();
    i.allocated = static_cast<std::size_t>(stats().allocated_bytes[stat_all].current);
    i.reserved = static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current);
    std::string why;
    // The segmented strategy takes a whole segment from the device, which can be what the limit
    // refuses while the request alone would fit: say so, or the limit looks like a wrong count.
    if (ec == errc::pool_limit && opts_.strategy == allocation_strategy::segmented) {
      const std::size_t rounded = round_size(size), seg = allocation_size(rounded);
      if (seg > rounded && i.reserved + rounded <= gc_limit() && i.reserved + seg > gc_limit()) {
        using ca_detail::format_size;
        why = " The request needs a new " + format_size(seg) + " segment (the segmented strategy gives requests " +
              (rounded <= small_size ? "up to " + format_size(small_size) + " " + format_size(small_buffer)
                                     : "from " + format_size(small_size) + " to " + format_size(min_large_alloc) + " " +
                                           format_size(large_buffer)) +
              " segments), which does not fit under the limit; a pool_size of at least " +
              format_size(i.reserved + seg) + ", or the \"compact\" strategy, would hold it.";
      }
    }
    // Refusals that freeing memory cannot cure get a word of their own: without it the message
    // reads as fragmentation, and its hint sends the caller to empty_cache() and max_split_size.
    using ca_detail::format_size;
    const std::size_t rounded = round_size(size);
    if (ec == errc::pool_limit && !opts_.auto_growth) {
      why =
          " auto_growth is off: the pool serves only what reserve() (or initial_reserve) stocked, and no cached "
          "block of it can hold the request.";
    } else if (ec == errc::pool_limit && rounded > gc_limit()) {
      why = " The request alone is larger than the limit: no release can make room for it.";
    } else if (ec == errc::out_of_memory && rounded > i.total) {
      why = " The request is larger than the device's whole capacity: no release or retry can serve it.";
    } else if (ec == errc::out_of_memory && opts_.strategy == allocation_strategy::segmented) {
      // The segment the request needs would fit in what the device has free: the device said no
      // for another reason than a lack of memory.
      const std::size_t seg = allocation_size(rounded);
      if (i.free >= seg)
        why = " The device refused a new " + format_size(seg) + " segment although " + format_size(i.free) +
              " is free: a refusal not for lack of memory (an injected transient_oom, for one), which trying again "
              "may get past.";
    }
    // Without auto_growth no limit was reached: the stock ran out (why says so).
    throw out_of_memory_error(ec, i, oom_message(i, ec == errc::pool_limit && opts_.auto_growth, gc_limit(), why));
  }
  // Named after the public call that reaches here (every pool allocation is a malloc_async),
  // not this class, which callers never see.
  if (ec == errc::size_overflow)
    throw_error(ec, "npurt::mem_pool::malloc_async: " + std::to_string(size) +
                        " bytes cannot be rounded up to the allocation granularity without overflowing size_t");
  if (ec == error_class::device)
    throw_error_on(
        opts_.device, ec,
        "npurt::mem_pool::malloc_async: " + std::to_string(size) + " bytes on device " + std::to_string(opts_.device));
  throw_error(ec, "npurt::mem_pool::malloc_async: 0 bytes requested; an allocation is at least 1 byte");
}

NPURT_DECL std::exception_ptr caching_allocator::allocate_error(std::error_code ec, std::size_t size) {
  try {
    throw_allocate_error(static_cast<errc>(ec.value()), size);
  } catch (...) { return std::current_exception(); }
}

NPURT_DECL void caching_allocator::free_block(block* b) {
  b->allocated = false;
  b->pending = false;
  clear_uses(b);
  --b->seg->live;
  const stat_rows row = rows_of(b->pool);
  active_down(row, static_cast<std::int64_t>(b->size));
  coalesce_and_cache(b);
}

// Merges a free block with free neighbours of the same stream, then caches it. Blocks of
// different streams stay apart: one's free is not ordered before the other stream's work.
NPURT_DECL void caching_allocator::coalesce_and_cache(block* b) {
  segment* s = b->seg;
  const auto mergeable = [&](const block* n) { return n && !n->allocated && !n->pending && n->stream == b->stream; };
  // The lower block absorbs the higher one, so a merge only drops the higher start from the
  // address map: the merged block keeps the lower start and its entry.
  const auto absorb = [&](block* lo, block* hi) {
    lo->next = hi->next;
    if (hi->next) hi->next->prev = lo;
    else s->last = lo;
    blocks_.erase(hi->addr);
    lo->size += hi->size;
    if (fences_seen_) lo->free_fence = std::max(lo->free_fence, hi->free_fence);  // fences increase along a stream
    delete_block(hi);
  };
  if (block* n = b->prev; mergeable(n)) {
    erase_free(n);
    absorb(n, b);
    b = n;
  }
  if (block* n = b->next; mergeable(n)) {
    erase_free(n);
    absorb(b, n);
  }
  insert_free(b);
}

[[gnu::always_inline]] inline errc caching_allocator::deallocate_impl(std::uint64_t addr, std::uint32_t stream,
                                                                      int device) {
  if (addr == 0) { return errc::null_pointer; }
  if (device >= 0 && device != opts_.device) { return errc::stream_device_mismatch; }
  settle();
  block* b = blocks_.find(addr);
  if (!b || !b->allocated) [[unlikely]]
    return b ? errc::double_free : bad_free(addr);
  // A block other streams used may stay active after this free (see active_rows_).
  if (b->has_uses && !active_rows_) [[unlikely]]
    start_active_rows();
  const auto sz = static_cast<std::int64_t>(b->size);
  const stat_rows row = rows_of(b->pool);
  allocation_down(row, sz, static_cast<std::int64_t>(b->requested));
  if (b->size >= opts_.max_split_size) ca_detail::stat_dec(stats_.oversize_allocations, 1);
  b->allocated = false;
  b->requested = 0;
  b->stream = stream;
  // An allocated block's free_fence is 0 (taking a block clears it).
  if (cb_.record_fence) {
    b->free_fence = cb_.record_fence(stream);
    fences_seen_ = true;
  }
  if (b->has_uses && hold_for_uses(b, stream)) [[unlikely]]
    return {};
  if (!defer_free(b)) free_block(b);
  return {};
}

NPURT_DECL errc caching_allocator::bad_free(std::uint64_t addr) const {
  // Not a block start: inside cached (freed) memory is a stale pointer; anything else was
  // never handed out by this pool.
  auto st = segments_.upper_bound(addr);
  if (st == segments_.begin()) return errc::invalid_pointer;
  const segment* s = std::prev(st)->second;
  if (addr >= s->addr + std::max(s->size, s->va_size)) return errc::invalid_pointer;
  for (const block* b = s->first; b; b = b->next)
    if (addr >= b->addr && addr < b->addr + b->size) return b->allocated ? errc::invalid_pointer : errc::double_free;
  return errc::invalid_pointer;
}

NPURT_DECL bool caching_allocator::hold_for_uses(block* b, std::uint32_t stream) {
  // Uses on the freeing stream are ordered before the free; others must complete first.
  auto& uses = b->uses;
  uses.erase(std::remove_if(uses.begin(), uses.end(),
                            [&](auto& u) {
                              if (u.first == stream) return true;
                              if (u.second == 0 && cb_.record_fence) u.second = cb_.record_fence(u.first);
                              return u.second != 0 && cb_.fence_done && cb_.fence_done(u.second);
                            }),
             uses.end());
  if (!uses.empty()) {
    b->pending = true;
    pending_.push_back(b);
    return true;
  }
  b->has_uses = false;
  return false;
}

[[gnu::always_inline]] inline bool caching_allocator::defer_free(block* b) noexcept {
  if (b->pool != small_pool) return false;
  const auto mergeable = [&](const block* n) { return n && !n->allocated && !n->pending && n->stream == b->stream; };
  if (mergeable(b->prev)) return false;  // the merged block would start below b: no exact reuse
  block* n = mergeable(b->next) ? b->next : nullptr;
  // free_block's bookkeeping, then coalesce_and_cache's statistics: erase_free(n) (n has b as
  // its neighbour, so it counts as split) and insert_free(b merged with n).
  b->pending = false;
  --b->seg->live;
  const stat_rows small = rows_of(small_pool);
  active_down(small, static_cast<std::int64_t>(b->size));
  if (n) inactive_split_down(small, static_cast<std::int64_t>(n->size));
  if (b->prev || (n ? n->next : b->next))
    inactive_split_up(small, static_cast<std::int64_t>(b->size + (n ? n->size : 0)));
  if (free_search_count_) b->gc_base = free_search_count_;
  deferred_ = b;
  deferred_next_ = n;
  return true;
}

NPURT_DECL void caching_allocator::settle_deferred() { cache_deferred(); }

[[gnu::always_inline]] inline void caching_allocator::cache_deferred() {
  block* b = deferred_;
  deferred_ = nullptr;
  small_bins* sb = bins_for(b->stream);  // n's too: it merges only with blocks of its stream
  if (block* n = deferred_next_) {
    sb->erase(size_class(n->size), n);
    b->next = n->next;
    if (n->next) n->next->prev = b;
    else b->seg->last = b;
    blocks_.erase(n->addr);
    b->size += n->size;
    if (fences_seen_) b->free_fence = std::max(b->free_fence, n->free_fence);
    delete_block(n);
  }
  // No search ran since the free (every allocation settles or takes the block first), so this
  // is the age insert_free would have given it then.
  sb->push(size_class(b->size), b);
}

NPURT_DECL bool caching_allocator::take_deferred(std::size_t requested) noexcept {
  block* x = deferred_;
  block* n = deferred_next_;
  const std::size_t merged = x->size + (n ? n->size : 0);
  const auto cm = static_cast<int>(size_class(merged));
  // Best fit over the coalesced free blocks: the first non-empty class at or above the
  // request's, lowest address first. n would be gone (merged), so its class does not count if
  // it holds n alone; any other block below the merged block's class, or in that class at a
  // lower address, is the best fit instead.
  if (const small_bins* sb = find_bins(x->stream)) {
    int k = sb->find_from(size_class(x->size));
    if (n && k == static_cast<int>(size_class(n->size)) && sb->heaps[static_cast<std::size_t>(k)].size() == 1)
      k = static_cast<std::size_t>(k) + 1 < small_classes ? sb->find_from(static_cast<std::size_t>(k) + 1) : -1;
    if (k >= 0 && (k < cm || (k == cm && sb->min_entry(static_cast<std::size_t>(k)).addr < x->addr))) return false;
  }
  if (opts_.garbage_collection_threshold > 0.0) ++free_search_count_;
  deferred_ = nullptr;
  const stat_rows small = rows_of(small_pool);
  // erase_free(merged), then take_block: the split gives back n's range as a new free block at
  // n's address (its next neighbour cannot be a free block of this stream: n was coalesced).
  if (x->prev || (n ? n->next : x->next)) inactive_split_down(small, static_cast<std::int64_t>(merged));
  if (n) {
    if (fences_seen_) n->free_fence = std::max(x->free_fence, n->free_fence);
    if (free_search_count_) n->gc_base = free_search_count_;
    inactive_split_up(small, static_cast<std::int64_t>(n->size));
  }
  x->allocated = true;
  x->requested = requested;
  if (fences_seen_) x->free_fence = 0;
  ++x->seg->live;
  const auto sz = static_cast<std::int64_t>(x->size);
  allocation_up(small, sz, static_cast<std::int64_t>(requested));
  return true;
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr, std::uint32_t stream, std::error_code& ec,
                                              int device) {
  ec.assign(0, *system_category_);
  if (const errc e = deallocate_impl(addr, stream, device); e != errc{}) ec = make_error_code(e);
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr, std::uint32_t stream, int device) {
  if (const errc e = deallocate_impl(addr, stream, device); e != errc{}) [[unlikely]]
    throw_deallocate_error(e, addr);
}

NPURT_DECL void caching_allocator::throw_deallocate_error(errc e, std::uint64_t addr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(addr));
  throw_error(make_error_code(e), std::string("deallocate(") + buf + ")");
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr, std::error_code& ec) {
  const block* b = blocks_.find(addr);
  deallocate(addr, b ? b->stream : 0, ec);
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr) {
  const block* b = blocks_.find(addr);
  deallocate(addr, b ? b->stream : 0);
}

NPURT_DECL void caching_allocator::record_stream(std::uint64_t addr, std::uint32_t other_stream, std::uint64_t fence,
                                                 std::error_code& ec) {
  ec.clear();
  settle();
  if (addr == 0) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  block* b = blocks_.find(addr);
  if (!b || !b->allocated) {
    ec = make_error_code(!b ? errc::invalid_pointer : errc::double_free);
    return;
  }
  if (other_stream == b->stream) return;
  // Kept in stream order (frees filter it in place, which keeps the order): a block shared by
  // every stream of a session is recorded once per stream, so finding a stream must not scan.
  auto& uses = b->uses;
  const auto at = std::lower_bound(uses.begin(), uses.end(), other_stream,
                                   [](const auto& u, std::uint32_t s) { return u.first < s; });
  if (at != uses.end() && at->first == other_stream) {
    at->second = fence == 0 || at->second == 0 ? 0 : std::max(at->second, fence);
    return;
  }
  uses.emplace(at, other_stream, fence);
  b->has_uses = true;
}

NPURT_DECL void caching_allocator::record_stream(std::uint64_t addr, std::uint32_t other_stream, std::uint64_t fence) {
  std::error_code ec;
  record_stream(addr, other_stream, fence, ec);
  throw_if(ec, "record_stream");
}

NPURT_DECL void caching_allocator::process_events() {
  settle();
  std::size_t keep = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    block* b = pending_[i];
    auto& uses = b->uses;
    uses.erase(std::remove_if(uses.begin(), uses.end(),
                              [&](auto& u) { return u.second != 0 && cb_.fence_done && cb_.fence_done(u.second); }),
               uses.end());
    if (uses.empty()) {
      free_block(b);
    } else {
      pending_[keep++] = b;
    }
  }
  pending_.resize(keep);
}

NPURT_DECL void caching_allocator::reserve(std::size_t bytes, std::uint32_t stream, std::error_code& ec) {
  ec.clear();
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return;
  }
  if (bytes > provider_.capacity()) {
    ec = make_error_code(beyond_capacity(bytes));
    return;
  }
  settle();
  const bool growth = opts_.auto_growth;
  opts_.auto_growth = true;
  alloc_params p;
  p.requested = bytes;
  p.size = round_size(bytes);
  p.stream = stream;
  block* b = nullptr;
  if (opts_.strategy == allocation_strategy::compact) {
    segment* a = arena_for(stream, ec);
    if (a) {
      if (block* g = extend_arena(a, ca_detail::round_up(p.size, opts_.granule), stream)) insert_free(g);
      else if (device_fault_ != errc{}) ec = make_error_code(std::exchange(device_fault_, errc{}));
      else ec = make_error_code(errc::out_of_memory);
    }
  } else {
    p.pool = p.size <= small_size ? small_pool : large_pool;
    p.alloc_size = allocation_size(p.size);
    b = alloc_segment(p);
    if (b) insert_free(b);
    else if (device_fault_ != errc{}) ec = make_error_code(std::exchange(device_fault_, errc{}));
    else ec = make_error_code(p.pool_limited ? errc::pool_limit : errc::out_of_memory);
  }
  opts_.auto_growth = growth;
}

NPURT_DECL void caching_allocator::reserve(std::size_t bytes, std::uint32_t stream) {
  std::error_code ec;
  reserve(bytes, stream, ec);
  if (ec == errc::out_of_memory || ec == errc::pool_limit) throw_allocate_error(static_cast<errc>(ec.value()), bytes);
  throw_if(ec, "npurt::mem_pool::reserve: " + std::to_string(bytes) + " bytes");
}

}  // namespace npurt::detail
