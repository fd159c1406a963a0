// npurt/impl/allocator_stats.ipp — what the pool reports: PyTorch-style statistics and their
// resets, memory_usage, the snapshot of segments and blocks, and the consistency check the
// tests run after every step.
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>

namespace npurt::detail {

NPURT_DECL void caching_allocator::stat_add(stat_array& s, pool_id p, std::int64_t n) noexcept {
  ca_detail::stat_apply(s[stat_all], n);
  ca_detail::stat_apply(s[static_cast<std::size_t>(stat_index(p))], n);
}

NPURT_DECL void caching_allocator::copy_small_rows() const noexcept {
  for (stat_array* a : {&stats_.allocation, &stats_.active, &stats_.inactive_split, &stats_.allocated_bytes,
                        &stats_.active_bytes, &stats_.inactive_split_bytes, &stats_.requested_bytes})
    (*a)[stat_all] = (*a)[stat_small];
}

NPURT_DECL void caching_allocator::copy_active_rows() const noexcept {
  stats_.active = stats_.allocation;
  stats_.active_bytes = stats_.allocated_bytes;
}

namespace ca_detail {
inline constexpr stat_array allocator_stats::* stat_rows_of[] = {
    &allocator_stats::allocation,      &allocator_stats::segment,
    &allocator_stats::active,          &allocator_stats::inactive_split,
    &allocator_stats::allocated_bytes, &allocator_stats::reserved_bytes,
    &allocator_stats::active_bytes,    &allocator_stats::inactive_split_bytes,
    &allocator_stats::requested_bytes};
inline constexpr stat allocator_stats::* single_stats[] = {&allocator_stats::oversize_allocations,
                                                           &allocator_stats::oversize_segments};
}  // namespace ca_detail

NPURT_DECL void caching_allocator::fill_allocated() const noexcept {
  const auto fill = [](stat& s, const stat& base) { s.allocated = s.freed + s.current - base.current; };
  for (auto rows : ca_detail::stat_rows_of)
    for (std::size_t r = 0; r < (stats_.*rows).size(); ++r) fill((stats_.*rows)[r], (reset_base_.*rows)[r]);
  for (auto one : ca_detail::single_stats) fill(stats_.*one, reset_base_.*one);
}

NPURT_DECL void caching_allocator::start_active_rows() noexcept {
  sync_rows();
  active_rows_ = true;
}

NPURT_DECL void caching_allocator::start_dual_rows() noexcept {
  copy_small_rows();
  dual_rows_ = true;
}

NPURT_DECL void caching_allocator::reset_peak() {
  sync_rows();
  for (stat_array* a :
       {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split, &stats_.allocated_bytes,
        &stats_.reserved_bytes, &stats_.active_bytes, &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (auto& s : *a) s.peak = s.current;
  stats_.oversize_allocations.peak = stats_.oversize_allocations.current;
  stats_.oversize_segments.peak = stats_.oversize_segments.current;
}

NPURT_DECL void caching_allocator::reset_accumulated() {
  sync_rows();
  for (auto rows : ca_detail::stat_rows_of)
    for (std::size_t r = 0; r < (stats_.*rows).size(); ++r) {
      auto& s = (stats_.*rows)[r];
      s.allocated = s.freed = 0;
      (reset_base_.*rows)[r].current = s.current;
    }
  // The oversize counts' accumulated figures are never reset (as before): their base stays 0.
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = stats_.num_device_free = 0;
}

NPURT_DECL void caching_allocator::reset_reserved_high() noexcept {
  for (auto& s : stats_.reserved_bytes) s.peak = s.current;
}

NPURT_DECL void caching_allocator::reset_used_high() noexcept {
  start_active_rows();  // the active bytes keep their high mark
  for (auto& s : stats_.allocated_bytes) s.peak = s.current;
}

NPURT_DECL memory_usage_report caching_allocator::memory_usage() const noexcept {
  sync_rows();
  const double m = static_cast<double>(mib);
  return {static_cast<double>(stats_.allocated_bytes[stat_all].current) / m,
          static_cast<double>(stats_.reserved_bytes[stat_all].current) / m,
          static_cast<double>(stats_.allocated_bytes[stat_all].peak) / m};
}

NPURT_DECL memory_snapshot caching_allocator::snapshot() const {
  settle();
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
  settle();
  sync_rows();
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
        const std::size_t c = size_class(b->size);
        const bin_heap* h = sb ? &sb->heaps[c] : nullptr;
        if (h && !h->empty() && !sb->is_heap(c)) {
          const std::size_t i = small_bins::sorted_rank(h->data(), h->size(), b->addr);
          in_free = i < h->size() && (*h)[i].b == b && (*h)[i].addr == b->addr;
        } else {
          in_free = h && b->heap_pos < h->size() && (*h)[b->heap_pos].b == b && (*h)[b->heap_pos].addr == b->addr;
          if (in_free && b->heap_pos > 0 && (*h)[(b->heap_pos - 1) / 4].addr > b->addr)
            return "small bin heap order broken";
        }
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
      const bin_heap& h = sb.heaps[c];
      n += h.size();
      if (((sb.words[c >> 6] >> (c & 63)) & 1) != !h.empty()) return "small bin bitmap is wrong";
      if (sb.is_heap(c) ? h.size() <= small_bins::sorted_min : h.size() >= small_bins::sorted_max)
        return "small bin has the wrong form for its size";
      if (!sb.is_heap(c))
        for (std::size_t i = 1; i < h.size(); ++i)
          if (h[i - 1].addr <= h[i].addr) return "sorted small bin out of order";
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
