// npurt/impl/caching_allocator.ipp
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>
#include <cstdio>

namespace npurt::detail {

// ---- counting_provider ---------------------------------------------------------------------

NPURT_DECL bool counting_provider::take(std::size_t bytes) {
  if (fail_next_ > 0) {
    --fail_next_;
    return false;
  }
  if (bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

NPURT_DECL std::error_code counting_provider::allocate(std::size_t bytes, std::uint64_t& addr) {
  if (bytes == 0) return make_error_code(errc::zero_size);
  if (!take(bytes)) return make_error_code(errc::out_of_memory);
  addr = next_;
  next_ += (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);  // 2 MiB-aligned, never reused
  segments_.emplace(addr, bytes);
  return {};
}

NPURT_DECL void counting_provider::release(std::uint64_t addr, std::size_t bytes) {
  auto it = segments_.find(addr);
  if (it == segments_.end() || it->second != bytes) return;  // not ours: ignore rather than corrupt
  used_ -= bytes;
  segments_.erase(it);
}

NPURT_DECL std::error_code counting_provider::reserve_range(std::size_t bytes, std::uint64_t& addr) {
  if (bytes == 0) return make_error_code(errc::zero_size);
  addr = next_;
  next_ += (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);
  return {};
}

NPURT_DECL void counting_provider::release_range(std::uint64_t, std::size_t) {}

NPURT_DECL std::error_code counting_provider::map(std::uint64_t, std::size_t bytes) {
  return take(bytes) ? std::error_code{} : make_error_code(errc::out_of_memory);
}

NPURT_DECL void counting_provider::unmap(std::uint64_t, std::size_t bytes) { used_ -= std::min(bytes, used_); }

// ---- caching_allocator ---------------------------------------------------------------------

namespace ca_detail {

inline void stat_inc(stat& s, std::int64_t n) noexcept {
  s.current += n;
  s.peak = std::max(s.peak, s.current);
  s.allocated += n;
}
inline void stat_dec(stat& s, std::int64_t n) noexcept {
  s.current -= n;
  s.freed += n;
}
inline void stat_apply(stat& s, std::int64_t n) noexcept {
  if (n >= 0) stat_inc(s, n);
  else stat_dec(s, -n);
}
// The hot paths' stat_add with the sign known and the pool's row computed once.
inline void stat_up(stat_array& s, std::size_t row, std::int64_t n) noexcept {
  stat_inc(s[stat_all], n);
  stat_inc(s[row], n);
}
inline void stat_down(stat_array& s, std::size_t row, std::int64_t n) noexcept {
  stat_dec(s[stat_all], n);
  stat_dec(s[row], n);
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

inline std::size_t round_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

}  // namespace ca_detail

NPURT_DECL caching_allocator::caching_allocator(segment_provider& provider, caching_allocator_options opts,
                                                stream_callbacks callbacks)
    : provider_(provider), opts_(opts), cb_(std::move(callbacks)) {
  if (opts_.granule == 0 || (opts_.granule & (opts_.granule - 1)) != 0 || opts_.granule % min_block_size != 0)
    throw_error(make_error_code(errc::invalid_config), "caching_allocator: granule must be a power of two >= 512");
  if (opts_.garbage_collection_threshold < 0.0 || opts_.garbage_collection_threshold >= 1.0)
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: garbage_collection_threshold must be in [0, 1)");
  if (opts_.max_split_size < large_buffer && opts_.max_split_size != std::numeric_limits<std::size_t>::max())
    throw_error(make_error_code(errc::invalid_config),
                "caching_allocator: max_split_size must exceed 20 MiB (the large segment size)");
  if (provider_.capacity() >= (std::size_t{1} << 41))
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
  b->gc_base = b->free_fence = 0;
  b->where = {};
  return b;
}

NPURT_DECL void caching_allocator::delete_block(block* b) noexcept {
  b->uses.clear();
  spare_blocks_.push_back(b);
}

NPURT_DECL int caching_allocator::stat_index(pool_id p) const noexcept { return p == small_pool ? stat_small : stat_large; }

NPURT_DECL void caching_allocator::stat_add(stat_array& s, pool_id p, std::int64_t n) noexcept {
  ca_detail::stat_apply(s[stat_all], n);
  ca_detail::stat_apply(s[static_cast<std::size_t>(stat_index(p))], n);
}

NPURT_DECL caching_allocator::free_set& caching_allocator::set_of(pool_id p) noexcept { return free_[p]; }

// ---- small-pool bins: 4-ary min-heaps on address (half the levels of a binary heap: fewer
// moves, each of which updates the moved block); each cached block knows its heap slot ----

NPURT_DECL void caching_allocator::small_bins::push(std::size_t c, block* b) {
  auto& h = heaps[c];
  if (h.empty()) {
    words[c >> 6] |= std::uint64_t{1} << (c & 63);
    summary |= std::uint64_t{1} << (c >> 6);
  }
  h.push_back({b->addr, b});
  auto i = static_cast<std::uint32_t>(h.size() - 1);
  while (i > 0) {
    const std::uint32_t parent = (i - 1) / 4;
    if (h[parent].addr < b->addr) break;
    h[i] = h[parent];
    h[i].b->heap_pos = i;
    i = parent;
  }
  h[i] = {b->addr, b};
  b->heap_pos = i;
  ++count;
}

NPURT_DECL void caching_allocator::small_bins::erase(std::size_t c, std::uint32_t pos) noexcept {
  auto& h = heaps[c];
  const bin_entry last = h.back();
  h.pop_back();
  --count;
  const auto n = static_cast<std::uint32_t>(h.size());
  if (n == 0) {
    words[c >> 6] &= ~(std::uint64_t{1} << (c & 63));
    if (!words[c >> 6]) summary &= ~(std::uint64_t{1} << (c >> 6));
    return;
  }
  if (pos == n) return;  // it was the last slot
  std::uint32_t i = pos;
  if (i > 0 && h[(i - 1) / 4].addr > last.addr) {
    do {
      const std::uint32_t parent = (i - 1) / 4;
      if (h[parent].addr < last.addr) break;
      h[i] = h[parent];
      h[i].b->heap_pos = i;
      i = parent;
    } while (i > 0);
  } else {
    for (;;) {
      const std::uint32_t first = 4 * i + 1;
      if (first >= n) break;
      std::uint32_t child = first;
      const std::uint32_t end = std::min(first + 4, n);
      for (std::uint32_t k = first + 1; k < end; ++k)
        if (h[k].addr < h[child].addr) child = k;
      if (last.addr < h[child].addr) break;
      h[i] = h[child];
      h[i].b->heap_pos = i;
      i = child;
    }
  }
  h[i] = last;
  last.b->heap_pos = i;
}

NPURT_DECL caching_allocator::small_bins* caching_allocator::find_bins_slow(std::uint32_t stream) const noexcept {
  auto it = std::lower_bound(bins_.begin(), bins_.end(), stream,
                             [](const std::unique_ptr<small_bins>& x, std::uint32_t s) { return x->stream < s; });
  if (it == bins_.end() || (*it)->stream != stream) return nullptr;
  return last_bins_ = it->get();
}

NPURT_DECL caching_allocator::small_bins* caching_allocator::bins_for(std::uint32_t stream) {
  if (small_bins* sb = find_bins(stream)) return sb;
  std::unique_ptr<small_bins> sb;
  if (!spare_bins_.empty()) {
    sb = std::move(spare_bins_.back());
    spare_bins_.pop_back();
  } else {
    sb = std::make_unique<small_bins>();
  }
  sb->stream = stream;
  auto it = std::lower_bound(bins_.begin(), bins_.end(), stream,
                             [](const std::unique_ptr<small_bins>& x, std::uint32_t s) { return x->stream < s; });
  return last_bins_ = bins_.insert(it, std::move(sb))->get();
}

// Called when segments go back to the device: a stream's empty bins are worth keeping only
// while it caches small blocks, and a device may see many short-lived streams.
NPURT_DECL void caching_allocator::recycle_empty_bins() noexcept {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < bins_.size(); ++i) {
    if (bins_[i]->count) {
      bins_[keep++] = std::move(bins_[i]);
      continue;
    }
    if (bins_[i].get() == last_bins_) last_bins_ = nullptr;
    if (spare_bins_.size() < 2) spare_bins_.push_back(std::move(bins_[i]));  // heaps keep capacity
    else bins_[i].reset();
  }
  bins_.resize(keep);
}

template <class F>
void caching_allocator::for_each_small(const small_bins& sb, std::size_t c, std::size_t limit, F&& f) const {
  std::array<bin_entry, 8> buf;
  std::vector<bin_entry> big;
  for (int k = sb.find_from(c); k >= 0 && limit > 0;) {
    const auto& h = sb.heaps[static_cast<std::size_t>(k)];
    const std::size_t n = std::min(limit, h.size());
    bin_entry* out = buf.data();
    if (n > buf.size()) {
      big.resize(n);
      out = big.data();
    }
    std::partial_sort_copy(h.begin(), h.end(), out, out + n,
                           [](const bin_entry& x, const bin_entry& y) { return x.addr < y.addr; });
    for (std::size_t i = 0; i < n; ++i)
      if (!f(out[i].b)) return;
    limit -= n;
    if (static_cast<std::size_t>(k) + 1 >= small_classes) break;
    k = sb.find_from(static_cast<std::size_t>(k) + 1);
  }
}

NPURT_DECL std::size_t caching_allocator::small_free_count() const noexcept {
  std::size_t n = 0;
  for (const auto& sb : bins_) n += sb->count;
  return n;
}

NPURT_DECL void caching_allocator::insert_free(block* b) {
  b->gc_base = free_search_count_;
  if (b->pool == small_pool) {
    bins_for(b->stream)->push(size_class(b->size), b);
    if (b->prev || b->next) {
      ca_detail::stat_up(stats_.inactive_split, stat_small, 1);
      ca_detail::stat_up(stats_.inactive_split_bytes, stat_small, static_cast<std::int64_t>(b->size));
    }
    return;
  }
  auto& set = free_[b->pool];
  const free_key key{key_hi(b->stream, b->size), b->addr, b};
  if (!spare_nodes_.empty()) {
    auto nh = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    nh.value() = key;
    b->where = set.insert(std::move(nh)).position;
  } else {
    b->where = set.insert(key).first;
  }
  if (b->prev || b->next) {
    stat_add(stats_.inactive_split, b->pool, 1);
    stat_add(stats_.inactive_split_bytes, b->pool, static_cast<std::int64_t>(b->size));
  }
}

NPURT_DECL void caching_allocator::erase_free(block* b) noexcept {
  if (b->pool == small_pool) {
    find_bins(b->stream)->erase(size_class(b->size), b->heap_pos);
  } else {
    spare_nodes_.push_back(free_[b->pool].extract(b->where));
  }
  // A free block's neighbours cannot change while it is cached (freeing a neighbour merges it
  // away first), so the split test here matches the one made at insertion.
  if (b->prev || b->next) {
    const auto row = static_cast<std::size_t>(stat_index(b->pool));
    ca_detail::stat_down(stats_.inactive_split, row, 1);
    ca_detail::stat_down(stats_.inactive_split_bytes, row, static_cast<std::int64_t>(b->size));
  }
}

NPURT_DECL std::size_t caching_allocator::round_size(std::size_t size) const noexcept {
  if (opts_.ascend_pad) size += ascend_pad_size;
  if (size < min_block_size) return min_block_size;
  return ca_detail::round_up(size, min_block_size);
}

NPURT_DECL std::size_t caching_allocator::allocation_size(std::size_t rounded) noexcept {
  if (rounded <= small_size) return small_buffer;
  if (rounded < min_large_alloc) return large_buffer;
  return ca_detail::round_up(rounded, round_large);
}

NPURT_DECL std::size_t caching_allocator::gc_limit() const noexcept {
  return opts_.pool_size_limit ? std::min(opts_.pool_size_limit, provider_.capacity()) : provider_.capacity();
}

NPURT_DECL void caching_allocator::step(retry_step s) {
  if (on_retry_step) on_retry_step(s);
}

NPURT_DECL bool caching_allocator::should_split(const block* b, std::size_t size) const noexcept {
  const std::size_t remaining = b->size - size;
  if (b->pool == large_pool) return size < opts_.max_split_size && remaining > small_size;
  return remaining >= min_block_size;
}

NPURT_DECL bool caching_allocator::block_fits(const block* b, const alloc_params& p) const noexcept {
  if (b->size < p.size) return false;
  if (b->pool != large_pool) return true;
  // Do not hand an oversize block to a small request; an oversize request takes a cached
  // oversize block only if little is wasted (max_non_split_rounding).
  if (p.size < opts_.max_split_size && b->size >= opts_.max_split_size) return false;
  if (p.size >= opts_.max_split_size && b->size >= p.size + opts_.max_non_split_rounding) return false;
  return true;
}

NPURT_DECL caching_allocator::block* caching_allocator::get_free_block(alloc_params& p) {
  if (opts_.garbage_collection_threshold > 0.0) ++free_search_count_;
  if (p.pool == small_pool) {
    small_bins* sb = find_bins(p.stream);
    if (!sb) return nullptr;
    const int c = sb->find_from(size_class(p.size));
    if (c < 0) return nullptr;
    block* b = sb->heaps[static_cast<std::size_t>(c)].front().b;
    if (!block_fits(b, p)) return nullptr;
    erase_free(b);
    return b;
  }
  auto& set = set_of(p.pool);
  auto it = set.lower_bound(free_key{key_hi(p.stream, p.size), 0, nullptr});
  if (it == set.end() || (it->hi >> 32) != p.stream) return nullptr;
  block* b = it->b;
  if (!block_fits(b, p)) return nullptr;
  erase_free(b);
  return b;
}

NPURT_DECL caching_allocator::block* caching_allocator::get_cross_stream_block(alloc_params& p) {
  const bool follow = opts_.reuse_follow_event_dependencies && cb_.stream_waits_on;
  const bool opportunistic = opts_.reuse_allow_opportunistic && cb_.fence_done;
  const bool internal = opts_.reuse_allow_internal_dependencies && cb_.insert_wait;
  if (!follow && !opportunistic && !internal) return nullptr;
  block* best = nullptr;
  bool best_needs_wait = false;
  // One candidate of another stream, in (size, address) order; false stops that stream's scan.
  auto consider = [&](block* b) {
    if (!block_fits(b, p)) return false;  // larger blocks break the oversize rules too
    if (best && b->size > best->size) return false;
    if (b->free_fence == 0) return true;  // freed without a fence: only its own stream may reuse it
    bool ok = (follow && cb_.stream_waits_on(p.stream, b->free_fence)) ||
              (opportunistic && cb_.fence_done(b->free_fence));
    bool needs_wait = false;
    if (!ok && internal) ok = needs_wait = true;
    if (!ok) return true;
    if (!best || b->size < best->size || (b->size == best->size && best_needs_wait && !needs_wait)) {
      best = b;
      best_needs_wait = needs_wait;
    }
    return false;
  };
  // Best fit first; a few more (8 in all) in case the best one's free is not yet usable.
  constexpr std::size_t look = 8;
  if (p.pool == small_pool) {
    for (const auto& sb : bins_)
      if (sb->count && sb->stream != p.stream) for_each_small(*sb, size_class(p.size), look, consider);
  } else {
    auto& set = set_of(p.pool);
    auto it = set.begin();
    while (it != set.end()) {
      const auto s = static_cast<std::uint32_t>(it->hi >> 32);
      if (s != p.stream) {
        std::size_t looked = 0;
        for (auto jt = set.lower_bound(free_key{key_hi(s, p.size), 0, nullptr});
             jt != set.end() && (jt->hi >> 32) == s && looked < look; ++jt, ++looked)
          if (!consider(jt->b)) break;
      }
      if (s == std::numeric_limits<std::uint32_t>::max()) break;
      it = set.lower_bound(free_key{key_hi(s + 1, 0), 0, nullptr});
    }
  }
  if (!best) return nullptr;
  if (best_needs_wait) cb_.insert_wait(p.stream, best->free_fence);
  erase_free(best);
  best->stream = p.stream;
  ++stats_.num_cross_stream_reuse;
  return best;
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
  if (provider_.allocate(p.alloc_size, addr)) return nullptr;
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

NPURT_DECL caching_allocator::segment* caching_allocator::arena_for(std::uint32_t stream, std::error_code& ec) {
  if (auto it = arenas_.find(stream); it != arenas_.end()) return it->second;
  const std::size_t va = ca_detail::round_up(opts_.arena_address_space ? opts_.arena_address_space : gc_limit(),
                                             opts_.granule);
  std::uint64_t addr = 0;
  if ((ec = provider_.reserve_range(va, addr))) return nullptr;
  auto* s = new segment;
  s->addr = addr;
  s->va_size = va;
  s->stream = stream;
  s->pool = arena_pool;
  arenas_.emplace(stream, s);
  segments_.emplace(addr, s);
  stat_add(stats_.segment, arena_pool, 1);
  if (opts_.initial_reserve) {
    const std::size_t bytes = std::min(va, ca_detail::round_up(opts_.initial_reserve, opts_.granule));
    if (block* b = extend_arena(s, bytes, stream)) insert_free(b);
  }
  return s;
}

// Maps `bytes` more at the top of the arena. Returns the (not cached) free top block holding the
// new pages, or null if the limit, the address space or the device refuses.
NPURT_DECL caching_allocator::block* caching_allocator::extend_arena(segment* a, std::size_t bytes,
                                                                     std::uint32_t stream) {
  if (a->size + bytes > a->va_size ||
      static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) + bytes > gc_limit())
    return nullptr;
  if (provider_.map(a->addr + a->size, bytes)) return nullptr;
  ++stats_.num_device_alloc;
  stat_add(stats_.reserved_bytes, arena_pool, static_cast<std::int64_t>(bytes));
  block* last = a->last;
  block* b;
  if (last && !last->allocated && !last->pending && last->stream == stream) {
    erase_free(last);
    last->size += bytes;
    b = last;
  } else {
    // A cached neighbour's split status changes when it gains a successor: take it out of the
    // free index (and its inactive-split count) while relinking, then put it back.
    const bool cached_neighbour = last && !last->allocated && !last->pending;
    if (cached_neighbour) erase_free(last);
    b = new_block();
    b->addr = a->addr + a->size;
    b->size = bytes;
    b->stream = stream;
    b->pool = arena_pool;
    b->seg = a;
    b->prev = last;
    if (last) last->next = b;
    else a->first = b;
    a->last = b;
    blocks_.emplace(b->addr, b);
    if (cached_neighbour) insert_free(last);
  }
  a->size += bytes;
  return b;
}

NPURT_DECL caching_allocator::block* caching_allocator::grow_arena(alloc_params& p) {
  p.pool_limited = false;
  std::error_code ec;
  const bool existed = arenas_.count(p.stream) != 0;
  segment* a = arena_for(p.stream, ec);
  if (!a) return nullptr;
  if (!existed && a->first) {
    // The initial reservation may already hold the request.
    if (block* b = get_free_block(p)) return b;
  }
  if (!opts_.auto_growth) {
    p.pool_limited = true;
    return nullptr;
  }
  block* last = a->last;
  const bool top_free = last && !last->allocated && !last->pending && last->stream == p.stream;
  const std::size_t have = top_free ? last->size : 0;
  const std::size_t need = ca_detail::round_up(p.size - std::min(have, p.size), opts_.granule);
  block* b = extend_arena(a, need, p.stream);
  if (!b) p.pool_limited = opts_.pool_size_limit != 0 && provider_.free_bytes() >= need;
  return b;
}

NPURT_DECL std::uint64_t caching_allocator::take_block(block* b, alloc_params& p) {
  b->allocated = true;  // before splitting, so the remainder cannot merge back into it
  b->stream = p.stream;
  if (should_split(b, p.size)) {
    block* r = new_block();
    r->addr = b->addr + p.size;
    r->size = b->size - p.size;
    r->stream = b->stream;
    r->pool = b->pool;
    r->seg = b->seg;
    r->free_fence = b->free_fence;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    else b->seg->last = r;
    b->next = r;
    b->size = p.size;
    blocks_.emplace(r->addr, r);
    // After a cross-stream reuse the remainder takes the new stream, whose free block may
    // follow it.
    coalesce_and_cache(r);
  }
  b->allocated = true;
  b->requested = p.requested;
  b->stream = p.stream;
  b->free_fence = 0;
  ++b->seg->live;
  const auto sz = static_cast<std::int64_t>(b->size);
  const auto row = static_cast<std::size_t>(stat_index(b->pool));
  ca_detail::stat_up(stats_.allocation, row, 1);
  ca_detail::stat_up(stats_.allocated_bytes, row, sz);
  ca_detail::stat_up(stats_.active, row, 1);
  ca_detail::stat_up(stats_.active_bytes, row, sz);
  ca_detail::stat_up(stats_.requested_bytes, row, static_cast<std::int64_t>(p.requested));
  if (b->size >= opts_.max_split_size) ca_detail::stat_inc(stats_.oversize_allocations, 1);
  return b->addr;
}

NPURT_DECL std::uint64_t caching_allocator::allocate_impl(std::size_t size, std::uint32_t stream, errc& e) {
  if (size == 0) {
    e = errc::zero_size;
    return 0;
  }
  if (size > provider_.capacity()) {
    e = errc::size_overflow;
    return 0;
  }
  if (!pending_.empty()) process_events();
  alloc_params p;
  p.requested = size;
  p.size = round_size(size);
  p.stream = stream;
  if (opts_.strategy == allocation_strategy::compact) {
    p.pool = arena_pool;
    p.alloc_size = ca_detail::round_up(p.size, opts_.granule);
  } else {
    p.pool = p.size <= small_size ? small_pool : large_pool;
    p.alloc_size = allocation_size(p.size);
  }
  block* b = get_free_block(p);
  if (!b) b = get_cross_stream_block(p);
  if (!b) {
    auto alloc_new = [&]() -> block* {
      return p.pool == arena_pool ? grow_arena(p) : alloc_segment(p);
    };
    const double thr = opts_.garbage_collection_threshold;
    if (thr > 0.0 && opts_.auto_growth &&
        static_cast<double>(stats_.reserved_bytes[stat_all].current) > thr * static_cast<double>(gc_limit())) {
      step(retry_step::garbage_collect_preemptive);
      garbage_collect(false);
    }
    b = alloc_new();
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
          for (block* x : pending_) x->uses.clear();
        process_events();
        if (opts_.auto_growth) stats_.num_gc_freed_blocks += release_all_cached();
        b = get_free_block(p);
        if (!b) b = get_cross_stream_block(p);
        if (!b) b = alloc_new();
      }
      if (!b) {
        step(retry_step::out_of_memory);
        ++stats_.num_ooms;
        e = p.pool_limited ? errc::pool_limit : errc::out_of_memory;
        return 0;
      }
    }
  }
  return take_block(b, p);
}

NPURT_DECL std::uint64_t caching_allocator::allocate(std::size_t size, std::uint32_t stream, std::error_code& ec) {
  ec.clear();
  errc e{};
  const auto addr = allocate_impl(size, stream, e);
  if (e != errc{}) ec = make_error_code(e);
  return addr;
}

NPURT_DECL std::string caching_allocator::oom_message(const out_of_memory_error::info& i, bool pool_limit,
                                                      std::size_t limit) {
  using ca_detail::format_size;
  std::string m = "NPU out of memory. Tried to allocate " + format_size(i.requested) + ". NPU " +
                  std::to_string(i.device) + " has a total capacity of " + format_size(i.total) + " of which " +
                  format_size(i.free) + " is free.";
  if (pool_limit) m += " The pool's size limit of " + format_size(limit) + " is reached.";
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
  if (e == errc{}) return addr;
  const std::error_code ec = make_error_code(e);
  if (ec == errc::out_of_memory || ec == errc::pool_limit) {
    out_of_memory_error::info i;
    i.requested = size;
    i.device = opts_.device;
    i.total = provider_.capacity();
    i.free = provider_.free_bytes();
    i.allocated = static_cast<std::size_t>(stats_.allocated_bytes[stat_all].current);
    i.reserved = static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current);
    throw out_of_memory_error(i, oom_message(i, ec == errc::pool_limit, gc_limit()));
  }
  if (ec == errc::size_overflow)
    throw_error(ec, "allocate: " + std::to_string(size) + " bytes exceed the device capacity of " +
                        std::to_string(provider_.capacity()) + " bytes");
  throw_error(ec, "allocate: size must be positive");
}

NPURT_DECL void caching_allocator::free_block(block* b) {
  b->allocated = false;
  b->pending = false;
  b->uses.clear();
  --b->seg->live;
  const auto row = static_cast<std::size_t>(stat_index(b->pool));
  ca_detail::stat_down(stats_.active, row, 1);
  ca_detail::stat_down(stats_.active_bytes, row, static_cast<std::int64_t>(b->size));
  coalesce_and_cache(b);
}

// Merges a free block with free neighbours of the same stream, then caches it. Blocks of
// different streams stay apart: one's free is not ordered before the other stream's work.
NPURT_DECL void caching_allocator::coalesce_and_cache(block* b) {
  segment* s = b->seg;
  for (block* n : {b->prev, b->next}) {
    if (!n || n->allocated || n->pending || n->stream != b->stream) continue;
    erase_free(n);
    if (n == b->prev) {
      blocks_.erase(b->addr);
      b->addr = n->addr;
      b->prev = n->prev;
      if (n->prev) n->prev->next = b;
      else s->first = b;
      blocks_.assign(b->addr, b);  // takes over n's entry
    } else {
      b->next = n->next;
      if (n->next) n->next->prev = b;
      else s->last = b;
      blocks_.erase(n->addr);
    }
    b->size += n->size;
    b->free_fence = std::max(b->free_fence, n->free_fence);  // fences increase along a stream
    delete_block(n);
  }
  insert_free(b);
}

NPURT_DECL errc caching_allocator::deallocate_impl(std::uint64_t addr, std::uint32_t stream, int device) {
  if (addr == 0) {
    return errc::null_pointer;
  }
  if (device >= 0 && device != opts_.device) {
    return errc::stream_device_mismatch;
  }
  block* found = blocks_.find(addr);
  if (!found || !found->allocated) {
    if (found) return errc::double_free;
    // Not a block start: inside cached (freed) memory is a stale pointer; anything else was
    // never handed out by this pool.
    auto st = segments_.upper_bound(addr);
    if (st == segments_.begin()) return errc::invalid_pointer;
    segment* s = std::prev(st)->second;
    if (addr >= s->addr + std::max(s->size, s->va_size)) return errc::invalid_pointer;
    for (block* b = s->first; b; b = b->next)
      if (addr >= b->addr && addr < b->addr + b->size) return b->allocated ? errc::invalid_pointer : errc::double_free;
    return errc::invalid_pointer;
  }
  block* b = found;
  const auto sz = static_cast<std::int64_t>(b->size);
  const auto row = static_cast<std::size_t>(stat_index(b->pool));
  ca_detail::stat_down(stats_.allocation, row, 1);
  ca_detail::stat_down(stats_.allocated_bytes, row, sz);
  ca_detail::stat_down(stats_.requested_bytes, row, static_cast<std::int64_t>(b->requested));
  if (b->size >= opts_.max_split_size) ca_detail::stat_dec(stats_.oversize_allocations, 1);
  b->allocated = false;
  b->requested = 0;
  b->stream = stream;
  b->free_fence = cb_.record_fence ? cb_.record_fence(stream) : 0;
  // Uses on the freeing stream are ordered before the free; others must complete first.
  auto& uses = b->uses;
  if (!uses.empty())
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
    return {};
  }
  free_block(b);
  return {};
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr, std::uint32_t stream, std::error_code& ec,
                                              int device) {
  ec.clear();
  if (const errc e = deallocate_impl(addr, stream, device); e != errc{}) ec = make_error_code(e);
}

NPURT_DECL void caching_allocator::deallocate(std::uint64_t addr, std::uint32_t stream, int device) {
  if (const errc e = deallocate_impl(addr, stream, device); e != errc{}) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(addr));
    throw_error(make_error_code(e), std::string("deallocate(") + buf + ")");
  }
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
  for (auto& u : b->uses)
    if (u.first == other_stream) {
      u.second = fence == 0 || u.second == 0 ? 0 : std::max(u.second, fence);
      return;
    }
  b->uses.emplace_back(other_stream, fence);
}

NPURT_DECL void caching_allocator::record_stream(std::uint64_t addr, std::uint32_t other_stream, std::uint64_t fence) {
  std::error_code ec;
  record_stream(addr, other_stream, fence, ec);
  throw_if(ec, "record_stream");
}

NPURT_DECL void caching_allocator::process_events() {
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

// Releases a segment none of whose blocks is live. Its free blocks may belong to different
// streams (stream-ordered frees re-tag blocks), so there may be several.
NPURT_DECL void caching_allocator::release_segment(segment* s) {
  for (block* b = s->first; b;) {
    block* next = b->next;
    erase_free(b);
    blocks_.erase(b->addr);
    delete_block(b);
    b = next;
  }
  provider_.release(s->addr, s->size);
  ++stats_.num_device_free;
  stat_add(stats_.reserved_bytes, s->pool, -static_cast<std::int64_t>(s->size));
  stat_add(stats_.segment, s->pool, -1);
  if (s->size >= opts_.max_split_size) ca_detail::stat_dec(stats_.oversize_segments, 1);
  segments_.erase(s->addr);
  const bool small = s->pool == small_pool;
  delete s;
  if (small) recycle_empty_bins();
}

// Unmaps the free pages at the top of an arena (several free blocks if stream-ordered frees left
// blocks of different streams there); releases the arena once nothing is mapped.
NPURT_DECL bool caching_allocator::release_arena_tail(segment* a) {
  bool released = false;
  auto is_free = [](const block* b) { return !b->allocated && !b->pending; };
  block* last = a->last;
  if (last && is_free(last)) {
    block* run = last;
    while (run->prev && is_free(run->prev)) run = run->prev;
    const std::size_t cut = ca_detail::round_up(run->addr - a->addr, opts_.granule);
    if (cut < a->size) {
      const std::uint64_t cut_addr = a->addr + cut;
      // Uncache first: the inactive_split accounting needs the links as they were.
      std::vector<block*> above;
      for (block* b = last; b && b->addr + b->size > cut_addr; b = b->prev) above.push_back(b);
      for (block* b : above) erase_free(b);
      // The cached block just below the cut loses its successor: its split status changes too.
      block* below = above.empty() ? nullptr : above.back()->prev;
      if (below && is_free(below)) erase_free(below);
      else below = nullptr;
      block* straddler = nullptr;
      for (block* b : above) {
        if (b->addr >= cut_addr) {
          if (b->prev) b->prev->next = nullptr;
          else a->first = nullptr;
          a->last = b->prev;
          blocks_.erase(b->addr);
          delete_block(b);
        } else {
          b->size = static_cast<std::size_t>(cut_addr - b->addr);
          straddler = b;
          a->last = b;
        }
      }
      if (straddler) insert_free(straddler);
      if (below) insert_free(below);
      const std::size_t len = a->size - cut;
      provider_.unmap(cut_addr, len);
      ++stats_.num_device_free;
      stat_add(stats_.reserved_bytes, arena_pool, -static_cast<std::int64_t>(len));
      a->size = cut;
      released = true;
    }
  }
  if (!a->first) {
    provider_.release_range(a->addr, a->va_size);
    stat_add(stats_.segment, arena_pool, -1);
    arenas_.erase(a->stream);
    segments_.erase(a->addr);
    delete a;
  }
  return released;
}

NPURT_DECL std::size_t caching_allocator::release_fitting_cached(const alloc_params& p) {
  if (p.pool == arena_pool) {
    std::size_t n = 0;
    std::vector<segment*> arenas;
    for (auto& [s, a] : arenas_) arenas.push_back(a);
    for (segment* a : arenas) n += release_arena_tail(a) ? 1 : 0;
    return n;
  }
  // Whole cached segments of this stream and pool; with max_split_size set only oversize ones
  // (PyTorch's release_available_cached_blocks). One that alone covers the need is preferred.
  std::vector<block*> cand;
  auto fits_rule = [&](const block* b) {
    return b->stream == p.stream && !b->prev && !b->next && !b->pending &&
           (opts_.max_split_size == std::numeric_limits<std::size_t>::max() || b->size >= opts_.max_split_size);
  };
  if (p.pool == small_pool) {
    if (small_bins* sb = find_bins(p.stream))
      for_each_small(*sb, 0, sb->count, [&](block* b) {
        if (fits_rule(b)) cand.push_back(b);
        return true;
      });
  } else {
    for (const auto& k : set_of(p.pool))
      if (fits_rule(k.b)) cand.push_back(k.b);
  }
  if (cand.empty()) return 0;
  // Giving memory back to the device synchronises it (cudaFree, aclrtFree); a runtime that
  // cannot block here leaves the segments whose stream-ordered free is still ahead cached.
  synchronize_all_streams();
  cand.erase(std::remove_if(cand.begin(), cand.end(), [&](const block* b) { return !free_is_behind(b); }),
             cand.end());
  if (cand.empty()) return 0;
  std::sort(cand.begin(), cand.end(), [](const block* a, const block* b) { return a->size > b->size; });
  auto one = std::find_if(cand.rbegin(), cand.rend(), [&](const block* b) { return b->size >= p.alloc_size; });
  if (one != cand.rend()) {
    release_segment((*one)->seg);
    return 1;
  }
  std::size_t freed = 0, n = 0;
  for (block* b : cand) {
    freed += b->size;
    release_segment(b->seg);
    ++n;
    if (freed >= p.alloc_size) break;
  }
  return n;
}

NPURT_DECL void caching_allocator::synchronize_all_streams() {
  ++stats_.num_sync_all_streams;
  if (cb_.synchronize_all) cb_.synchronize_all();
}

NPURT_DECL bool caching_allocator::free_is_behind(const block* b) const {
  return b->free_fence == 0 || !cb_.fence_done || cb_.fence_done(b->free_fence);
}

NPURT_DECL std::size_t caching_allocator::release_all_cached(std::size_t keep, bool assume_quiet) {
  std::size_t n = 0;
  std::vector<segment*> arenas;
  for (auto& [s, a] : arenas_) arenas.push_back(a);
  for (segment* a : arenas) {
    if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) <= keep) return n;
    n += release_arena_tail(a) ? 1 : 0;
  }
  std::vector<segment*> cand;
  auto quiet = [this, assume_quiet](const segment* sg) {
    if (assume_quiet || !cb_.fence_done) return true;
    for (const block* b = sg->first; b; b = b->next)
      if (!free_is_behind(b)) return false;
    return true;
  };
  for (auto& [addr, sg] : segments_)
    if (sg->pool != arena_pool && sg->live == 0 && quiet(sg)) cand.push_back(sg);
  // Largest first, so a trim releases as few segments as it can.
  std::stable_sort(cand.begin(), cand.end(), [](const segment* a, const segment* b) { return a->size > b->size; });
  for (segment* sg : cand) {
    if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) <= keep) break;
    release_segment(sg);
    ++n;
  }
  return n;
}

NPURT_DECL void caching_allocator::garbage_collect(bool forced) {
  if (opts_.strategy == allocation_strategy::compact) {
    std::vector<segment*> arenas;
    for (auto& [s, a] : arenas_) arenas.push_back(a);
    for (segment* a : arenas)
      if (release_arena_tail(a)) ++stats_.num_gc_freed_blocks;
    return;
  }
  const double thr = opts_.garbage_collection_threshold;
  const auto reserved = static_cast<double>(stats_.reserved_bytes[stat_all].current);
  const double threshold_bytes = thr * static_cast<double>(gc_limit());
  const double target = thr > 0.0 ? reserved - threshold_bytes : 0.0;
  if (target <= 0.0 && !forced) return;
  double freed = 0;
  // PyTorch's rule: only whole cached large-pool segments, and among them those at least as old
  // (free-block searches since their last use) as the average, until enough is reclaimed.
  for (;;) {
    std::vector<block*> cand;
    for (const auto& k : set_of(large_pool))
      if (!k.b->prev && !k.b->next) cand.push_back(k.b);
    if (cand.empty()) return;
    double total_age = 0;
    for (block* b : cand) total_age += static_cast<double>(free_search_count_ - b->gc_base);
    const double avg = total_age / static_cast<double>(cand.size());
    std::sort(cand.begin(), cand.end(), [](const block* a, const block* b) { return a->addr < b->addr; });
    bool done = false;
    for (block* b : cand) {
      if (static_cast<double>(free_search_count_ - b->gc_base) < avg) continue;
      freed += static_cast<double>(b->size);
      ++stats_.num_gc_freed_blocks;
      release_segment(b->seg);
      if (target > 0.0 && freed >= target) {
        done = true;
        break;
      }
    }
    if (done || target <= 0.0) return;
  }
}

NPURT_DECL void caching_allocator::empty_cache() {
  process_events();
  release_all_cached(0);
}

NPURT_DECL void caching_allocator::trigger_gc() {
  process_events();
  garbage_collect(true);
}

NPURT_DECL void caching_allocator::trim_to(std::size_t keep_bytes) {
  process_events();
  release_all_cached(keep_bytes);
}

NPURT_DECL void caching_allocator::on_synchronize(bool all_streams) {
  if (all_streams)
    for (block* x : pending_) x->uses.clear();
  process_events();
  if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) > opts_.release_threshold)
    release_all_cached(opts_.release_threshold, all_streams);
}

NPURT_DECL void caching_allocator::reserve(std::size_t bytes, std::uint32_t stream, std::error_code& ec) {
  ec.clear();
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return;
  }
  if (bytes > provider_.capacity()) {
    ec = make_error_code(errc::size_overflow);
    return;
  }
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
      else ec = make_error_code(errc::out_of_memory);
    }
  } else {
    p.pool = p.size <= small_size ? small_pool : large_pool;
    p.alloc_size = allocation_size(p.size);
    b = alloc_segment(p);
    if (b) insert_free(b);
    else ec = make_error_code(p.pool_limited ? errc::pool_limit : errc::out_of_memory);
  }
  opts_.auto_growth = growth;
}

NPURT_DECL void caching_allocator::reset_peak() {
  for (stat_array* a : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                        &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (auto& s : *a) s.peak = s.current;
  stats_.oversize_allocations.peak = stats_.oversize_allocations.current;
  stats_.oversize_segments.peak = stats_.oversize_segments.current;
}

NPURT_DECL void caching_allocator::reset_accumulated() {
  for (stat_array* a : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                        &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (auto& s : *a) s.allocated = s.freed = 0;
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = stats_.num_device_free = 0;
}

NPURT_DECL void caching_allocator::reset_reserved_high() noexcept {
  for (auto& s : stats_.reserved_bytes) s.peak = s.current;
}

NPURT_DECL void caching_allocator::reset_used_high() noexcept {
  for (auto& s : stats_.allocated_bytes) s.peak = s.current;
}

NPURT_DECL memory_usage_report caching_allocator::memory_usage() const noexcept {
  const double m = static_cast<double>(mib);
  return {static_cast<double>(stats_.allocated_bytes[stat_all].current) / m,
          static_cast<double>(stats_.reserved_bytes[stat_all].current) / m,
          static_cast<double>(stats_.allocated_bytes[stat_all].peak) / m};
}

NPURT_DECL memory_snapshot caching_allocator::snapshot() const {
  memory_snapshot snap;
  for (const auto& [addr, s] : segments_) {
    segment_snapshot ss;
    ss.addr = s->addr;
    ss.size = s->size;
    ss.stream = s->stream;
    ss.small = s->pool == small_pool;
    ss.arena = s->pool == arena_pool;
    for (const block* b = s->first; b; b = b->next) {
      ss.blocks.push_back({b->addr, b->size, b->requested, b->stream, b->allocated, b->pending});
      if (!b->allocated && !b->pending) {
        snap.total_free += b->size;
        snap.largest_free = std::max(snap.largest_free, b->size);
      }
    }
    snap.segments.push_back(std::move(ss));
  }
  return snap;
}

NPURT_DECL std::size_t caching_allocator::block_size(std::uint64_t addr) const noexcept {
  const block* b = blocks_.find(addr);
  return b && b->allocated ? b->size : 0;
}

NPURT_DECL std::string caching_allocator::check_consistency() const {
  std::size_t nblocks = 0, nfree = 0;
  std::int64_t allocated = 0, active = 0, reserved = 0, requested = 0, inactive = 0;
  for (const auto& [addr, s] : segments_) {
    if (addr != s->addr) return "segment key mismatch";
    reserved += static_cast<std::int64_t>(s->size);
    std::uint64_t expect = s->addr;
    std::size_t live = 0;
    const block* prev = nullptr;
    for (const block* b = s->first; b; b = b->next) {
      ++nblocks;
      if (b->seg != s) return "block points to the wrong segment";
      if (b->prev != prev) return "broken prev link";
      if (b->addr != expect) return "blocks of a segment are not contiguous";
      if (b->size == 0 || b->size % min_block_size) return "block size is not a positive multiple of 512";
      if (blocks_.find(b->addr) != b) return "block missing from the address map";
      bool in_free;
      if (b->pool == small_pool) {
        const small_bins* sb = find_bins(b->stream);
        const bin_heap* h = sb ? &sb->heaps[size_class(b->size)] : nullptr;
        in_free = h && b->heap_pos < h->size() && (*h)[b->heap_pos].b == b && (*h)[b->heap_pos].addr == b->addr;
        if (in_free && b->heap_pos > 0 && (*h)[(b->heap_pos - 1) / 4].addr > b->addr) return "small bin heap order broken";
      } else {
        const auto fk = free_[b->pool].find(free_key{key_hi(b->stream, b->size), b->addr, nullptr});
        in_free = fk != free_[b->pool].end() && fk->b == b;
      }
      const bool is_free = !b->allocated && !b->pending;
      if (in_free != is_free) return "free set disagrees with block state";
      if (is_free) {
        ++nfree;
        if (b->prev || b->next) inactive += static_cast<std::int64_t>(b->size);
        if (prev && !prev->allocated && !prev->pending && prev->stream == b->stream)
          return "two adjacent free blocks of one stream were not coalesced";
      } else {
        ++live;
        active += static_cast<std::int64_t>(b->size);
      }
      if (b->allocated) {
        allocated += static_cast<std::int64_t>(b->size);
        requested += static_cast<std::int64_t>(b->requested);
        if (b->requested > b->size) return "requested exceeds block size";
      }
      expect = b->addr + b->size;
      prev = b;
    }
    if (expect != s->addr + s->size) return "blocks do not cover the segment";
    if (s->last != prev) return "segment's last block is wrong";
    if (live != s->live) return "segment live count is wrong";
  }
  if (nblocks != blocks_.size()) return "address map holds blocks that are in no segment";
  if (nfree != small_free_count() + free_[1].size() + free_[2].size()) return "free sets hold stale blocks";
  for (std::size_t i = 0; i < bins_.size(); ++i) {
    const small_bins& sb = *bins_[i];
    if (i > 0 && bins_[i - 1]->stream >= sb.stream) return "small bins are not ordered by stream";
    std::size_t n = 0;
    for (std::size_t c = 0; c < small_classes; ++c) {
      n += sb.heaps[c].size();
      if (((sb.words[c >> 6] >> (c & 63)) & 1) != !sb.heaps[c].empty()) return "small bin bitmap is wrong";
    }
    for (std::size_t w = 0; w < 64; ++w)
      if (((sb.summary >> w) & 1) != (sb.words[w] != 0)) return "small bin summary bitmap is wrong";
    if (n != sb.count) return "small bins' count is wrong";
  }
  if (allocated != stats_.allocated_bytes[stat_all].current) return "allocated_bytes stat is wrong";
  if (active != stats_.active_bytes[stat_all].current) return "active_bytes stat is wrong";
  if (reserved != stats_.reserved_bytes[stat_all].current) return "reserved_bytes stat is wrong";
  if (requested != stats_.requested_bytes[stat_all].current) return "requested_bytes stat is wrong";
  if (inactive != stats_.inactive_split_bytes[stat_all].current) return "inactive_split_bytes stat is wrong";
  return {};
}

}  // namespace npurt::detail
