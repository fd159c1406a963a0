// npurt/impl/allocator_free_index.ipp — where cached blocks wait for reuse: the small pool's
// size-class bins (per stream, one 4-ary heap per 512 B class, a two-level bitmap of non-empty
// classes), the large and arena pools' (stream, size, address) sets, best-fit lookup and
// cross-stream reuse under the pool's reuse policies.
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

namespace npurt::detail {

NPURT_DECL caching_allocator::free_set& caching_allocator::set_of(pool_id p) noexcept { return free_[p]; }

// ---- small-pool bins: arrays sorted by descending address while small (the best fit is the
// last entry), else 4-ary min-heaps on address (half the levels of a binary heap: fewer moves,
// each of which updates the moved block); each block cached in a heap knows its heap slot ----

NPURT_DECL void caching_allocator::small_bins::emptied(std::size_t c) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << (c & 63);
  heap_form[c >> 6] &= ~bit;
  words[c >> 6] &= ~bit;
  if (!words[c >> 6]) summary &= ~(std::uint64_t{1} << (c >> 6));
}

namespace ca_detail {
inline constexpr std::size_t short_move = 4;
/// A sorted insert counts the last tail_count entries of its bin (all of them in a smaller bin)
/// without a branch and, when the new block belongs among them (the common case: best fit
/// hands out the lowest addresses, so the blocks cached again are mostly among the lowest of
/// their bin), moves tail_count entries whatever its rank: no search, no data-dependent branch.
/// push keeps tail_count entries of room past the end for it.
inline constexpr std::size_t tail_count = 2 * short_move;
/// short_move bin entries (16 bytes each) held in vector registers: a copy through them is
/// four loads and four stores, where a memmove of a variable length is a library call that
/// branches on the length.
struct entry_run {
  using lane = std::uint64_t __attribute__((vector_size(16)));
  lane a, b, c, d;
  [[gnu::always_inline]] void load(const void* p) noexcept {
    const auto* s = static_cast<const unsigned char*>(p);
    std::memcpy(&a, s, 16);
    std::memcpy(&b, s + 16, 16);
    std::memcpy(&c, s + 32, 16);
    std::memcpy(&d, s + 48, 16);
  }
  [[gnu::always_inline]] void store(void* p) const noexcept {
    auto* s = static_cast<unsigned char*>(p);
    std::memcpy(s, &a, 16);
    std::memcpy(s + 16, &b, 16);
    std::memcpy(s + 32, &c, 16);
    std::memcpy(s + 48, &d, 16);
  }
};
}  // namespace ca_detail

[[gnu::always_inline]] inline void caching_allocator::small_bins::insert_sorted(std::size_t c, block* b) {
  auto& h = heaps[c];
  const std::size_t n = h.size();
  ++count;
  words[c >> 6] |= std::uint64_t{1} << (c & 63);
  summary |= std::uint64_t{1} << (c >> 6);
  const std::uint64_t addr = b->addr;
  h.emplace_back();
  bin_entry* d = h.data();
  static_assert(sizeof(bin_entry) == 16);
  // The tail: the last tail_count entries, or the first tail_count slots of a smaller bin. The
  // room past the end first gets entries above every address, so that such a bin's slots past
  // its end count as above the new one without a test per slot (whole entries: the moves below
  // then read what was stored whole, which the store buffer forwards).
  ca_detail::entry_run room;
  room.a = room.b = room.c = room.d = ca_detail::entry_run::lane{std::numeric_limits<std::uint64_t>::max(), 0};
  room.store(d + n);
  room.store(d + n + ca_detail::short_move);
  const std::size_t first = n > ca_detail::tail_count ? n - ca_detail::tail_count : 0;
  std::size_t below = 0;
  for (std::size_t i = 0; i < ca_detail::tail_count; ++i) {
    std::uint64_t a;
    std::memcpy(&a, reinterpret_cast<const unsigned char*>(d + first + i) + offsetof(bin_entry, addr), sizeof a);
    below += static_cast<std::size_t>(a < addr);
  }
  std::size_t at = n - below;
  if (below < ca_detail::tail_count) [[likely]] {
    ca_detail::entry_run lo, hi;
    lo.load(d + at);
    hi.load(d + at + ca_detail::short_move);
    lo.store(d + at + 1);
    hi.store(d + at + 1 + ca_detail::short_move);
    d[at] = {addr, b};
    return;
  }
  at = sorted_search(d, n - ca_detail::tail_count, addr);  // every entry of the tail is below addr
  // The lower addresses move up one, in runs of short_move entries copied through registers:
  // a memmove of the exact length is a library call that branches on the length. The bottom
  // run is read first and stored last, the others move from the top down; the bottom run's
  // store may overlap the lowest of them, with the same values.
  ca_detail::entry_run bottom;
  bottom.load(d + at);
  for (std::size_t j = n; j - at > ca_detail::short_move;) {
    j -= ca_detail::short_move;
    ca_detail::entry_run r;
    r.load(d + j);
    r.store(d + j + 1);
  }
  bottom.store(d + at + 1);
  d[at] = {addr, b};
}

[[gnu::always_inline]] inline void caching_allocator::small_bins::push(std::size_t c, block* b) {
  auto& h = heaps[c];
  const std::size_t n = h.size();
  const std::uint64_t bit = std::uint64_t{1} << (c & 63);
  // The common case, a sorted bin with room, on its own: inlined into its two callers, without
  // the registers and stack the growth and heap paths need (a call here costs more than the
  // insertion it makes).
  if ((heap_form[c >> 6] & bit) || n + 1 >= sorted_max || n + 1 + ca_detail::tail_count > h.capacity()) [[unlikely]] {
    push_grow(c, b);
    return;
  }
  insert_sorted(c, b);
}

NPURT_DECL void caching_allocator::small_bins::push_grow(std::size_t c, block* b) {
  auto& h = heaps[c];
  // Grow first: what follows cannot throw, so a refused allocation leaves the bin as it was.
  // A sorted insert wants tail_count entries of room past the new one (insert_sorted).
  if (h.size() + 1 + ca_detail::tail_count > h.capacity())
    h.reserve(std::max(h.size() + 1 + ca_detail::tail_count, 2 * h.capacity()));
  const std::uint64_t bit = std::uint64_t{1} << (c & 63);
  if (!(heap_form[c >> 6] & bit)) {
    if (h.size() + 1 < sorted_max) {
      insert_sorted(c, b);  // a sorted bin that had no room: it has now
      return;
    }
    // Ascending order is a valid min-heap.
    std::reverse(h.begin(), h.end());
    for (std::uint32_t i = 0; i < h.size(); ++i) h[i].b->heap_pos = i;
    heap_form[c >> 6] |= bit;
  }
  ++count;
  words[c >> 6] |= bit;
  summary |= std::uint64_t{1} << (c >> 6);
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
}

// Inline: best fit calls it on every allocation that is not an exact reuse.
[[gnu::always_inline]] inline caching_allocator::block* caching_allocator::small_bins::pop_min(std::size_t c) noexcept {
  auto& h = heaps[c];
  if (is_heap(c)) {
    block* b = h.front().b;
    heap_erase(c, 0);
    return b;
  }
  block* b = h.back().b;
  h.pop_back();
  --count;
  // Without branches: whether the bin empties is as random as the request sizes.
  const std::size_t w = c >> 6;
  words[w] &= ~(static_cast<std::uint64_t>(h.empty()) << (c & 63));
  summary &= ~(static_cast<std::uint64_t>(words[w] == 0) << w);
  return b;
}

NPURT_DECL void caching_allocator::small_bins::erase(std::size_t c, const block* b) noexcept {
  if (is_heap(c)) {
    heap_erase(c, b->heap_pos);
    return;
  }
  auto& h = heaps[c];
  h.erase(h.begin() + static_cast<std::ptrdiff_t>(sorted_rank(h.data(), h.size(), b->addr)));
  --count;
  if (h.empty()) emptied(c);
}

NPURT_DECL void caching_allocator::small_bins::heap_erase(std::size_t c, std::uint32_t pos) noexcept {
  auto& h = heaps[c];
  const bin_entry last = h.back();
  h.pop_back();
  --count;
  const auto n = static_cast<std::uint32_t>(h.size());
  if (n <= sorted_min) {
    if (pos < n) h[pos] = last;
    std::sort(h.begin(), h.end(), [](const bin_entry& x, const bin_entry& y) { return x.addr > y.addr; });
    heap_form[c >> 6] &= ~(std::uint64_t{1} << (c & 63));
    if (n == 0) emptied(c);
    return;
  }
  if (pos == n) return;  // it was the last slot
  // Floyd's deletion: the hole goes down to a leaf along the smaller children, then `last`
  // rises from there (it may rise above pos). Choosing among four children with selects
  // rather than branches matters: on random addresses each such branch is a coin toss.
  bin_entry* d = h.data();
  std::uint32_t i = pos;
  // A missing child reads as the last entry, which is then a child too: the minimum is the same.
  const std::uint32_t m = n - 1;
  const auto pick = [](bool take_a, std::uint32_t a, std::uint32_t b) {
    return b ^ ((a ^ b) & (0u - static_cast<std::uint32_t>(take_a)));
  };
  for (std::uint32_t first = 4 * i + 1; first < n; first = 4 * i + 1) {
    const std::uint32_t k1 = std::min(first + 1, m), k2 = std::min(first + 2, m), k3 = std::min(first + 3, m);
    const std::uint32_t x = pick(d[k1].addr < d[first].addr, k1, first);
    const std::uint32_t y = pick(d[k3].addr < d[k2].addr, k3, k2);
    const std::uint32_t child = pick(d[y].addr < d[x].addr, y, x);
    d[i] = d[child];
    d[i].b->heap_pos = i;
    i = child;
  }
  while (i > 0) {
    const std::uint32_t parent = (i - 1) / 4;
    if (d[parent].addr < last.addr) break;
    d[i] = d[parent];
    d[i].b->heap_pos = i;
    i = parent;
  }
  d[i] = last;
  last.b->heap_pos = i;
}

NPURT_DECL caching_allocator::small_bins* caching_allocator::find_bins_slow(std::uint32_t stream) const noexcept {
  auto it = std::lower_bound(bins_.begin(), bins_.end(), stream,
                             [](const std::unique_ptr<small_bins>& x, std::uint32_t s) { return x->stream < s; });
  if (it == bins_.end() || (*it)->stream != stream) return nullptr;
  return last_bins_ = it->get();
}

NPURT_DECL caching_allocator::small_bins* caching_allocator::new_bins(std::uint32_t stream) {
  if (small_bins* sb = find_bins_slow(stream)) return sb;
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
  if (free_search_count_) b->gc_base = free_search_count_;
  if (b->pool == small_pool) {
    bins_for(b->stream)->push(size_class(b->size), b);
    if (b->prev || b->next) {
      const stat_rows small = rows_of(small_pool);
      inactive_split_up(small, static_cast<std::int64_t>(b->size));
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
    const stat_rows row = rows_of(b->pool);
    inactive_split_up(row, static_cast<std::int64_t>(b->size));
  }
}

NPURT_DECL void caching_allocator::erase_free(block* b) noexcept {
  if (b->pool == small_pool) {
    find_bins(b->stream)->erase(size_class(b->size), b);
  } else {
    spare_nodes_.push_back(free_[b->pool].extract(b->where));
  }
  // A free block's neighbours cannot change while it is cached (freeing a neighbour merges it
  // away first), so the split test here matches the one made at insertion.
  if (b->prev || b->next) {
    const stat_rows row = rows_of(b->pool);
    inactive_split_down(row, static_cast<std::int64_t>(b->size));
  }
}

NPURT_DECL bool caching_allocator::block_fits(const block* b, const alloc_params& p) const noexcept {
  if (b->size < p.size) return false;
  if (b->pool != large_pool) return true;
  // Do not hand an oversize block to a small request; an oversize request takes a cached
  // oversize block only if little is wasted (max_non_split_rounding).
  if (p.size < opts_.max_split_size && b->size >= opts_.max_split_size) return false;
  // The waste, not request + rounding: that sum wraps for a rounding near SIZE_MAX ("any waste").
  if (p.size >= opts_.max_split_size && b->size - p.size >= opts_.max_non_split_rounding) return false;
  return true;
}

[[gnu::always_inline]] inline caching_allocator::block* caching_allocator::get_small_block(const alloc_params& p) {
  small_bins* sb = find_bins(p.stream);
  if (!sb) return nullptr;
  const int c = sb->find_from(size_class(p.size));
  if (c < 0) return nullptr;
  // Any block of a class at or above the request's fits: no block_fits, and erase_free's
  // work with the bins and the slot (the top) already known.
  block* b = sb->pop_min(static_cast<std::size_t>(c));
  if (b->prev || b->next) {
    const stat_rows small = rows_of(small_pool);
    inactive_split_down(small, static_cast<std::int64_t>(b->size));
  }
  return b;
}

NPURT_DECL caching_allocator::block* caching_allocator::get_free_block(alloc_params& p) {
  if (opts_.garbage_collection_threshold > 0.0) ++free_search_count_;
  if (p.pool == small_pool) return get_small_block(p);
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
    bool ok =
        (follow && cb_.stream_waits_on(p.stream, b->free_fence)) || (opportunistic && cb_.fence_done(b->free_fence));
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

}  // namespace npurt::detail
