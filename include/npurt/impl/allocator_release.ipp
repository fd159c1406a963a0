// npurt/impl/allocator_release.ipp — when cached memory goes back to the device: the retry
// chain's releases (fitting segments, then everything after a synchronisation), garbage
// collection of old segments above the threshold, empty_cache, trim_to and the release
// threshold applied at synchronisation.
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>
#include <limits>
#include <vector>

namespace npurt::detail {

NPURT_DECL std::size_t caching_allocator::gc_limit() const noexcept {
  return opts_.pool_size_limit ? std::min(opts_.pool_size_limit, provider_.capacity()) : provider_.capacity();
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

NPURT_DECL std::size_t caching_allocator::release_fitting_cached(const alloc_params& p) {
  if (p.pool == arena_pool) {
    // Unmapping pages synchronises the device, as a device free does; a runtime that cannot
    // block leaves the pages whose stream-ordered free is still ahead mapped.
    if (arena_tail_busy()) synchronize_all_streams();
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
  cand.erase(std::remove_if(cand.begin(), cand.end(), [&](const block* b) { return !free_is_behind(b); }), cand.end());
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

NPURT_DECL bool caching_allocator::arena_tail_busy() const {
  for (const auto& [s, a] : arenas_)
    if (const block* b = a->last; b && !b->allocated && !b->pending && !free_is_behind(b)) return true;
  return false;
}

NPURT_DECL std::size_t caching_allocator::release_all_cached(std::size_t keep, bool assume_quiet) {
  std::size_t n = 0;
  std::vector<segment*> arenas;
  for (auto& [s, a] : arenas_) arenas.push_back(a);
  for (segment* a : arenas) {
    if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) <= keep) return n;
    n += release_arena_tail(a, assume_quiet) ? 1 : 0;
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
  // Largest first, so a trim releases as few segments as it can; lowest address on ties (the
  // order cand was built in), without stable_sort's temporary buffer.
  std::sort(cand.begin(), cand.end(), [](const segment* a, const segment* b) {
    return a->size != b->size ? a->size > b->size : a->addr < b->addr;
  });
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
    bool released = false;
    for (block* b : cand) {
      if (static_cast<double>(free_search_count_ - b->gc_base) < avg) continue;
      // Queued work may still use a block whose free is ahead of its stream, so its segment
      // stays until that work is done, as in release_all_cached. It still counts in the
      // average age: skipping it must not change which other segments go.
      if (!free_is_behind(b)) continue;
      released = true;
      freed += static_cast<double>(b->size);
      ++stats_.num_gc_freed_blocks;
      release_segment(b->seg);
      if (target > 0.0 && freed >= target) {
        done = true;
        break;
      }
    }
    if (done || target <= 0.0 || !released) return;
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
    for (block* x : pending_) clear_uses(x);
  process_events();
  // A pool that cannot grow would lose for good what the threshold gives back: its stock stays
  // until empty_cache or trim_to asks for it.
  if (!opts_.auto_growth) return;
  if (static_cast<std::size_t>(stats_.reserved_bytes[stat_all].current) > opts_.release_threshold)
    release_all_cached(opts_.release_threshold, all_streams);
}

}  // namespace npurt::detail
