// npurt/impl/allocator_arena.ipp — the "compact" strategy: one growable arena per stream
// (address space reserved once, pages mapped on demand and unmapped from the top), the analogue
// of PyTorch's expandable segments.
#pragma once

#include <npurt/detail/caching_allocator.hpp>

#include <algorithm>
#include <vector>

namespace npurt::detail {

NPURT_DECL caching_allocator::segment* caching_allocator::arena_for(std::uint32_t stream, std::error_code& ec) {
  if (auto it = arenas_.find(stream); it != arenas_.end()) return it->second;
  const std::size_t va =
      ca_detail::round_up(opts_.arena_address_space ? opts_.arena_address_space : gc_limit(), opts_.granule);
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
    // Clamped before rounding: a reservation near SIZE_MAX ("all of it") would wrap to nothing.
    const std::size_t bytes = ca_detail::round_up(std::min(va, opts_.initial_reserve), opts_.granule);
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
  if (const std::error_code ec = provider_.map(a->addr + a->size, bytes)) {
    note_provider_error(ec);
    return nullptr;
  }
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
  if (!a) {
    note_provider_error(ec);
    return nullptr;
  }
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

// Unmaps the free pages at the top of an arena (several free blocks if stream-ordered frees left
// blocks of different streams there); releases the arena once nothing is mapped. A block whose
// stream-ordered free is still ahead of its stream is not free for this: work queued before the
// free may still read or write it, as with a segment (release_all_cached).
NPURT_DECL bool caching_allocator::release_arena_tail(segment* a, bool assume_quiet) {
  bool released = false;
  auto is_free = [this, assume_quiet](const block* b) {
    return !b->allocated && !b->pending && (assume_quiet || free_is_behind(b));
  };
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
      // Cached is what counts here, whether or not its free is behind: it sits in the free index.
      if (below && !below->allocated && !below->pending) erase_free(below);
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

}  // namespace npurt::detail
