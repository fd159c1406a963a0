// npurt/detail/caching_allocator.hpp — the device caching allocator, modelled on the PyTorch /
// torch_npu caching allocator (c10/cuda/CUDACachingAllocator.cpp, NPUCachingAllocator.cpp),
// decoupled from the runtime.
//
// It manages one device's address space through a segment_provider (the device layer) and asks
// the runtime about stream progress through callbacks, so the runtime can plug it in under
// device::malloc and under the stream-ordered pool without the allocator knowing either.
//
// Model, in short:
// - sizes round to 512 B (Ascend-compat mode adds 32 B first); requests <= 1 MiB use the small
//   pool (2 MiB segments), larger ones the large pool (20 MiB segments below 10 MiB, else the
//   request rounded to 2 MiB);
// - best fit on (stream, size, address); split and coalesce inside a segment only; PyTorch's
//   split rules, max_split_size and max_non_split_rounding;
// - a freed block is reused on its own stream at once; on another stream only after the fences
//   recorded with record_stream() completed, or (stream-ordered pool semantics) when one of the
//   three cudaMemPool/aclrtMemPool reuse policies allows it;
// - "compact" strategy: one growable arena per stream (reserve address space, map pages on
//   demand, lowest-address best fit), the analogue of PyTorch's expandable segments;
// - out of memory runs the retry chain: free cached blocks that fit the rule -> garbage-collect
//   -> synchronise all streams and free everything cached -> (a small request) take a free
//   block of a large segment -> out_of_memory_error.
//
// Not thread-safe: the runtime calls it from the device's strand (or under its own lock).
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/addr_map.hpp>
#include <npurt/detail/segment_provider.hpp>
#include <npurt/error.hpp>
#include <npurt/pool_types.hpp>

#include <mimalloc.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <vector>

namespace npurt::detail {

// The pool's public vocabulary (pool_types.hpp) under the names the allocator always used.
using caching_allocator_options = npurt::mem_pool_options;
using allocation_strategy = npurt::allocation_strategy;
using stat = npurt::pool_stat;
using stat_array = npurt::pool_stat_array;
using stat_pool = npurt::stat_pool;
using npurt::stat_all;
using npurt::stat_large;
using npurt::stat_small;
using allocator_stats = npurt::allocator_stats;
using memory_usage_report = npurt::memory_usage_report;
using block_snapshot = npurt::block_snapshot;
using segment_snapshot = npurt::segment_snapshot;
using memory_snapshot = npurt::memory_snapshot;
using retry_step = npurt::retry_step;

/// How the allocator learns about stream progress. Streams are plain ids; fences are opaque
/// ids the runtime hands out (an event recorded on a stream). 0 is never a valid fence.
struct stream_callbacks {
  /// Has the work behind this fence completed? Required for record_stream() and cross-stream
  /// reuse; without it such blocks wait for synchronize_all.
  std::function<bool(std::uint64_t fence)> fence_done;
  /// Block the host until every stream of the device is idle (the retry chain's last resort).
  std::function<void()> synchronize_all;
  /// Optional: record a fence at the current end of `stream`. With it, frees remember where they
  /// happened, so other streams may reuse the memory under the pool's reuse policies, and
  /// record_stream() without a fence records one at free time (as PyTorch does).
  std::function<std::uint64_t(std::uint32_t stream)> record_fence;
  /// Optional (reuse_follow_event_dependencies): does `stream` already wait for `fence`?
  std::function<bool(std::uint32_t stream, std::uint64_t fence)> stream_waits_on;
  /// Optional (reuse_allow_internal_dependencies): make `stream` wait for `fence`.
  std::function<void(std::uint32_t stream, std::uint64_t fence)> insert_wait;
};

class caching_allocator {
 public:
  static constexpr std::size_t min_block_size = 512;
  static constexpr std::size_t small_size = 1 * mib;
  static constexpr std::size_t small_buffer = 2 * mib;
  static constexpr std::size_t large_buffer = 20 * mib;
  static constexpr std::size_t min_large_alloc = 10 * mib;
  static constexpr std::size_t round_large = 2 * mib;
  static constexpr std::size_t ascend_pad_size = 32;

  NPURT_DECL caching_allocator(segment_provider& provider, caching_allocator_options opts = {},
                               stream_callbacks callbacks = {});
  NPURT_DECL ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// Returns a device address for `size` bytes usable on `stream`. Errors: zero_size,
  /// size_overflow (rounding the size up to the block granularity would overflow size_t),
  /// out_of_memory (more than the device holds, at once; otherwise after the retry chain) or
  /// pool_limit.
  NPURT_DECL std::uint64_t allocate(std::size_t size, std::uint32_t stream, std::error_code& ec);
  /// Throws caller_error for bad input and out_of_memory_error (with PyTorch's fields) for OOM.
  NPURT_DECL std::uint64_t allocate(std::size_t size, std::uint32_t stream);
  /// The exception allocate(size, stream) raises for the error `ec` it refused `size` with, for a
  /// caller that reports the refusal later (an awaited allocation): built now, so that its
  /// figures are those of the refusal.
  [[nodiscard]] NPURT_DECL std::exception_ptr allocate_error(std::error_code ec, std::size_t size);

  /// Frees `addr`, in the order of `stream` (the stream-of-free). If that is not the stream it
  /// was allocated on, the block moves to the freeing stream. `device` (if >= 0) is the device
  /// the caller believes the pointer is on. Errors: null_pointer, invalid_pointer, double_free,
  /// stream_device_mismatch; on error nothing changes.
  NPURT_DECL void deallocate(std::uint64_t addr, std::uint32_t stream, std::error_code& ec, int device = -1);
  NPURT_DECL void deallocate(std::uint64_t addr, std::uint32_t stream, int device = -1);
  /// Frees on the stream the block was allocated on (PyTorch's free()).
  NPURT_DECL void deallocate(std::uint64_t addr, std::error_code& ec);
  NPURT_DECL void deallocate(std::uint64_t addr);

  /// `other_stream` uses the block: once freed, it is not reused until fence_done(fence). With
  /// fence == 0 the fence is taken at free time through callbacks.record_fence (PyTorch style).
  NPURT_DECL void record_stream(std::uint64_t addr, std::uint32_t other_stream, std::uint64_t fence,
                                std::error_code& ec);
  NPURT_DECL void record_stream(std::uint64_t addr, std::uint32_t other_stream, std::uint64_t fence = 0);

  /// Takes `bytes` of device memory for `stream` into the cache now (a segment, or arena pages).
  /// The way to stock a pool that has auto_growth off.
  NPURT_DECL void reserve(std::size_t bytes, std::uint32_t stream, std::error_code& ec);
  /// Throws what allocate throws: out_of_memory_error with its report (pool_limit as its code),
  /// caller_error otherwise.
  NPURT_DECL void reserve(std::size_t bytes, std::uint32_t stream);

  /// Returns every cached block that can be returned (whole free segments; free arena tails).
  NPURT_DECL void empty_cache();
  /// Runs garbage collection now: frees cached blocks that have not been reused for longer than
  /// average, down to the threshold (or, with threshold 0, one round of old blocks).
  NPURT_DECL void trigger_gc();
  /// Releases cached memory until reserved <= keep_bytes (cudaMemPoolTrimTo).
  NPURT_DECL void trim_to(std::size_t keep_bytes);
  /// The runtime calls this after a stream, event or device synchronisation: completed fences
  /// are reaped and, as cudaMemPool does, reserved memory above release_threshold is released.
  /// all_streams: every stream of the device is idle, so every recorded use is over.
  NPURT_DECL void on_synchronize(bool all_streams = false);
  /// Reaps blocks whose recorded fences completed.
  NPURT_DECL void process_events();

  NPURT_DECL void reset_peak();
  NPURT_DECL void reset_accumulated();
  /// The statistics as of this call (a later call refreshes the same object).
  [[nodiscard]] const allocator_stats& stats() const noexcept {
    sync_rows();
    fill_allocated();
    return stats_;
  }
  [[nodiscard]] NPURT_DECL memory_usage_report memory_usage() const noexcept;
  [[nodiscard]] NPURT_DECL memory_snapshot snapshot() const;

  // cudaMemPool-style attributes. The used/reserved marks are allocated/reserved bytes.
  [[nodiscard]] std::size_t reserved_current() const noexcept {
    return static_cast<std::size_t>(stats_.reserved_bytes[0].current);
  }
  [[nodiscard]] std::size_t reserved_high() const noexcept {
    return static_cast<std::size_t>(stats_.reserved_bytes[0].peak);
  }
  [[nodiscard]] std::size_t used_current() const noexcept {
    return static_cast<std::size_t>(stats().allocated_bytes[0].current);
  }
  [[nodiscard]] std::size_t used_high() const noexcept {
    return static_cast<std::size_t>(stats().allocated_bytes[0].peak);
  }
  NPURT_DECL void reset_reserved_high() noexcept;
  NPURT_DECL void reset_used_high() noexcept;

  [[nodiscard]] caching_allocator_options& options() noexcept { return opts_; }
  [[nodiscard]] const caching_allocator_options& options() const noexcept { return opts_; }
  [[nodiscard]] stream_callbacks& callbacks() noexcept { return cb_; }
  /// Called with each retry-chain step, for logs and tests.
  std::function<void(retry_step)> on_retry_step;

  /// The rounded size a request becomes (512 B granules, plus the pad in Ascend-compat mode).
  [[nodiscard]] NPURT_DECL std::size_t round_size(std::size_t size) const noexcept;
  /// The segment size the segmented strategy asks the device for, for a rounded size.
  [[nodiscard]] static NPURT_DECL std::size_t allocation_size(std::size_t rounded) noexcept;
  /// Size of the block at addr (the allocated, rounded size); 0 if addr is not a live block.
  [[nodiscard]] NPURT_DECL std::size_t block_size(std::uint64_t addr) const noexcept;
  /// Consistency check of every internal structure (tests call it after each step).
  [[nodiscard]] NPURT_DECL std::string check_consistency() const;

  /// PyTorch-like message for an out-of-memory error with these fields; limit_detail follows the
  /// sentence on a reached limit.
  [[nodiscard]] static NPURT_DECL std::string oom_message(const out_of_memory_error::info& i, bool pool_limit,
                                                          std::size_t limit, const std::string& limit_detail = {});

 private:
  struct segment;
  struct block;
  // The free index orders by (stream, size, address), PyTorch's BlockComparatorSize. The key
  // lives in the node, so a tree descent never touches block memory: hi packs the stream and
  // the size in 512 B units (sizes < 2 TiB), lo is the address.
  struct free_key {
    std::uint64_t hi;
    std::uint64_t lo;
    block* b;
    bool operator<(const free_key& o) const noexcept { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  };
  static std::uint64_t key_hi(std::uint32_t stream, std::size_t size) noexcept {
    return (static_cast<std::uint64_t>(stream) << 32) | static_cast<std::uint64_t>(size >> 9);
  }
  using free_set = std::set<free_key, std::less<free_key>, mi_stl_allocator<free_key>>;
  enum pool_id : std::uint8_t { small_pool = 0, large_pool = 1, arena_pool = 2 };
  // The small pool's free index (the large and arena pools keep free_set): per stream, one bin
  // per block size (512 B classes up to the 2 MiB segment) and a two-level bitmap of the
  // non-empty bins. Best fit is the first non-empty bin at or above the request's class (two
  // ctz) and its lowest address: the same (stream, size, address) order as the set, without a
  // tree descent and a node per cached block. A bin of fewer than sorted_max blocks is an array
  // sorted by descending address: taking the best fit is a pop_back, and caching a block a
  // search without data-dependent branches and a short move, with no per-block position to
  // keep (a heap's sifts write the slots of the blocks they move, and their loops mispredict on
  // random addresses). Larger bins are 4-ary min-heaps on address (each cached block knows its
  // slot, for O(log n) erasure) until they shrink to sorted_min. A stream's bins live while it
  // caches small blocks (recycle_empty_bins), so many short-lived streams cost nothing.
  static constexpr std::size_t small_classes = small_buffer / min_block_size;  // 4096 = 64 x 64 bits
  static constexpr std::size_t size_class(std::size_t size) noexcept { return (size >> 9) - 1; }
  struct bin_entry {
    std::uint64_t addr;
    block* b;
  };
  using bin_heap = std::vector<bin_entry, mi_stl_allocator<bin_entry>>;
  struct small_bins {
    // A sorted bin holds fewer than sorted_max blocks (caching one more makes it a heap, whose
    // insertions move O(log n) entries rather than O(n)); a heap that shrinks to sorted_min
    // becomes sorted again. The gap keeps a bin near the limit from switching back and forth.
    static constexpr std::size_t sorted_max = 256;
    static constexpr std::size_t sorted_min = 128;
    std::uint32_t stream = 0;
    std::size_t count = 0;
    std::uint64_t summary = 0;                 // bit w: words[w] != 0
    std::array<std::uint64_t, 64> words{};     // bit c % 64 of words[c / 64]: heaps[c] not empty
    std::array<std::uint64_t, 64> heap_form{}; // bit c % 64 of heap_form[c / 64]: heaps[c] is a heap
    std::array<bin_heap, small_classes> heaps;
    [[nodiscard]] bool is_heap(std::size_t c) const noexcept { return (heap_form[c >> 6] >> (c & 63)) & 1; }
    /// The entry of lowest address in a non-empty bin.
    [[nodiscard]] const bin_entry& min_entry(std::size_t c) const noexcept {
      return is_heap(c) ? heaps[c].front() : heaps[c].back();
    }
    /// In a sorted bin of n entries: how many have an address above addr (where addr belongs).
    /// Best fit hands out the lowest addresses first, so the blocks cached again are mostly
    /// among the lowest of their bin: the last rank_tail entries are counted before any search.
    static constexpr std::size_t rank_tail = 4;
    [[nodiscard, gnu::always_inline]] static std::size_t sorted_rank(const bin_entry* d, std::size_t n,
                                                                     std::uint64_t addr) noexcept {
      if (n > rank_tail && d[n - rank_tail - 1].addr > addr) {
        const bin_entry* t = d + (n - rank_tail);
        return n - rank_tail + static_cast<std::size_t>(t[0].addr > addr) + static_cast<std::size_t>(t[1].addr > addr) +
               static_cast<std::size_t>(t[2].addr > addr) + static_cast<std::size_t>(t[3].addr > addr);
      }
      return sorted_search(d, n > rank_tail ? n - rank_tail - 1 : n, addr);
    }
    /// sorted_rank's search. Branch-free steps (Khuong and Morin, "Array Layouts for
    /// Comparison-Based Searching"): on random addresses each branch of a plain binary search
    /// is a coin toss.
    [[nodiscard]] static std::size_t sorted_search(const bin_entry* d, std::size_t n, std::uint64_t addr) noexcept {
      static constexpr bin_entry none{0, nullptr};  // an empty bin reads as one entry below every address
      const bin_entry* e = n ? d : &none;
      std::size_t lo = 0;
      while (n > 1) {
        const std::size_t half = n / 2;
        lo += half & (std::size_t{0} - static_cast<std::size_t>(e[lo + half - 1].addr > addr));
        n -= half;
      }
      return lo + static_cast<std::size_t>(e[lo].addr > addr);
    }
    /// First non-empty class >= c, or -1.
    [[nodiscard, gnu::always_inline]] int find_from(std::size_t c) const noexcept {
      std::size_t w = c >> 6;
      if (const std::uint64_t m = words[w] & (~std::uint64_t{0} << (c & 63)))
        return static_cast<int>((w << 6) | static_cast<std::size_t>(__builtin_ctzll(m)));
      const std::uint64_t s = summary & (~std::uint64_t{1} << w);  // words above w
      if (!s) return -1;
      w = static_cast<std::size_t>(__builtin_ctzll(s));
      return static_cast<int>((w << 6) | static_cast<std::size_t>(__builtin_ctzll(words[w])));
    }
    void push(std::size_t c, block* b);
    /// push's other cases: the bin has no room (it grows first), or is or becomes a heap.
    [[gnu::cold]] NPURT_DECL void push_grow(std::size_t c, block* b);
    /// Caches b in bin c, sorted and with room for one more entry.
    void insert_sorted(std::size_t c, block* b);
    /// Removes b, which is cached in bin c.
    NPURT_DECL void erase(std::size_t c, const block* b) noexcept;
    /// Removes and returns the lowest-address block of a non-empty bin.
    block* pop_min(std::size_t c) noexcept;
    /// Removes the entry at pos of a heap bin (and sorts the bin once it is small).
    NPURT_DECL void heap_erase(std::size_t c, std::uint32_t pos) noexcept;
    /// Bin c has just become empty: clear its bits.
    NPURT_DECL void emptied(std::size_t c) noexcept;
  };
  // 128 bytes with LP64 libstdc++: aligned, a block spans two cache lines rather than three.
  struct alignas(64) block {
    std::uint64_t addr = 0;
    std::size_t size = 0;
    std::size_t requested = 0;
    std::uint32_t stream = 0;
    std::uint32_t heap_pos = 0;    // small pool, while cached in a heap bin: its index there
    pool_id pool = small_pool;
    bool allocated = false;
    bool pending = false;
    bool has_uses = false;         // uses may be non-empty: the hot paths need not read it
    block* prev = nullptr;
    block* next = nullptr;
    segment* seg = nullptr;
    // The second cache line: what only garbage collection, fences, the large pools and
    // record_stream need. The hot paths leave it untouched while those are unused (see
    // fences_seen_ and free_search_count_).
    std::uint64_t gc_base = 0;
    std::uint64_t free_fence = 0;  // where the free happened in stream order (0: unknown)
    free_set::iterator where;      // position in the free set while cached: O(1) erase
    // Streams that used the block (record_stream) and their fences (0: record at free time).
    std::vector<std::pair<std::uint32_t, std::uint64_t>> uses;
  };
  struct segment {
    std::uint64_t addr = 0;
    std::size_t size = 0;        // reserved bytes (mapped bytes for an arena)
    std::size_t va_size = 0;     // arena: reserved address space
    std::uint32_t stream = 0;
    pool_id pool = small_pool;
    block* first = nullptr;
    block* last = nullptr;
    std::size_t live = 0;        // blocks allocated or pending
  };
  struct alloc_params {
    std::size_t requested = 0;
    std::size_t size = 0;        // rounded
    std::size_t alloc_size = 0;  // segment size to ask for
    std::uint32_t stream = 0;
    pool_id pool = small_pool;
    bool pool_limited = false;   // the last refusal came from the pool limit, not the device
  };

  // allocate/deallocate with a plain error value: the throwing overloads (the common path) then
  // construct no std::error_code, whose constructor and clear() are out-of-line calls. Both are
  // inline (see take_block), compiled into each public overload.
  std::uint64_t allocate_impl(std::size_t size, std::uint32_t stream, errc& e);
  /// allocate_impl when its stream caches no block that fits: other streams' blocks, new device
  /// memory, the out-of-memory retry chain. Null with e set on failure.
  NPURT_DECL block* allocate_uncached(alloc_params& p, errc& e);
  /// A request above the device's capacity, as cudaMalloc answers it: a size that cannot even be
  /// rounded up is a bad argument (size_overflow); one that is representable but more than the
  /// device holds is out_of_memory, with no retry that could help.
  [[nodiscard]] errc beyond_capacity(std::size_t size) const noexcept {
    const std::size_t pad = opts_.ascend_pad ? ascend_pad_size : 0;
    return size > std::numeric_limits<std::size_t>::max() - pad - (min_block_size - 1) ? errc::size_overflow
                                                                                       : errc::out_of_memory;
  }
  // The throwing overloads' errors, out of their hot paths.
  [[noreturn, gnu::cold]] NPURT_DECL void throw_allocate_error(errc e, std::size_t size);
  [[noreturn, gnu::cold]] NPURT_DECL void throw_deallocate_error(errc e, std::uint64_t addr);
  // The exact-size fast path. A small-pool free whose block would not merge with its previous
  // neighbour is held back: its statistics are applied at once, exactly as free_block and
  // coalescing would apply them, but the block (and the free next neighbour it would absorb)
  // stay where they are. If the next call is an allocation of the same rounded size on the same
  // stream, and best fit over the coalesced free blocks would pick that block at that address
  // (the common free-then-allocate-again pattern), it is handed out again with the statistics
  // of the merge-split-take the slow path would do: same address, same statistics, same peaks.
  // Every other call settles first, i.e. does the structural merge and caches the block.
  bool defer_free(block* b) noexcept;
  NPURT_DECL bool take_deferred(std::size_t requested) noexcept;
  void settle() {
    if (deferred_) settle_deferred();
  }
  /// Settling changes no observable state, so the const observers may do it too (an allocator
  /// with a deferred free is never a const object: only non-const calls defer).
  void settle() const { const_cast<caching_allocator*>(this)->settle(); }
  NPURT_DECL void settle_deferred();
  /// settle_deferred's body, inline on allocate_impl's path.
  void cache_deferred();
  errc deallocate_impl(std::uint64_t addr, std::uint32_t stream, int device);
  /// deallocate_impl's error for an address that is no live block's start.
  [[gnu::cold]] NPURT_DECL errc bad_free(std::uint64_t addr) const;
  /// A freed block that other streams used: drops the uses the free orders and, if others
  /// remain, makes the block pending and returns true.
  [[gnu::cold]] NPURT_DECL bool hold_for_uses(block* b, std::uint32_t stream);
  NPURT_DECL block* new_block();
  void delete_block(block* b) noexcept;
  static void clear_uses(block* b) noexcept {
    if (b->has_uses) {
      b->uses.clear();
      b->has_uses = false;
    }
  }
  static constexpr int stat_index(pool_id p) noexcept { return p == small_pool ? stat_small : stat_large; }
  NPURT_DECL void stat_add(stat_array& s, pool_id p, std::int64_t n) noexcept;
  // The statistics that change on every call (allocation, active, allocated, requested and
  // inactive-split counts and bytes): until a large-pool or arena block takes part their
  // all-pools row equals the small pool's, so only that row is kept and sync_rows() copies it
  // before the all-pools row is read. Same numbers, half the updates on the small-pool path.
  struct stat_rows {
    std::size_t row;  // the pool's
    bool all;         // and the all-pools row
  };
  [[gnu::always_inline]] stat_rows rows_of(pool_id p) noexcept {
    const auto row = static_cast<std::size_t>(stat_index(p));
    if (row != stat_small && !dual_rows_) start_dual_rows();
    return {row, dual_rows_};
  }
  static void stat_up(stat_array& s, stat_rows r, std::int64_t n) noexcept;
  static void stat_down(stat_array& s, stat_rows r, std::int64_t n) noexcept;
  void sync_rows() const noexcept {
    if (!dual_rows_) copy_small_rows();
    if (!active_rows_) copy_active_rows();
  }
  NPURT_DECL void copy_small_rows() const noexcept;
  NPURT_DECL void start_dual_rows() noexcept;
  // Each statistic's `allocated` is its `freed` plus its `current` less its `current` at the last
  // reset_accumulated(): increases leave it, and stats() fills it in. Same numbers, one update
  // fewer for each increase on the hot paths.
  NPURT_DECL void fill_allocated() const noexcept;
  // The active counts and bytes equal the allocation counts and allocated bytes, field for
  // field, until a freed block waits for other streams' uses (record_stream) or the used-memory
  // high mark is reset on its own: until then only the allocation rows are kept and sync_rows()
  // copies them. Same numbers, two updates fewer on each allocation and each free.
  NPURT_DECL void copy_active_rows() const noexcept;
  NPURT_DECL void start_active_rows() noexcept;
  [[gnu::always_inline]] void active_up(stat_rows r, std::int64_t bytes) noexcept {
    if (!active_rows_) return;
    stat_up(stats_.active, r, 1);
    stat_up(stats_.active_bytes, r, bytes);
  }
  [[gnu::always_inline]] void active_down(stat_rows r, std::int64_t bytes) noexcept {
    if (!active_rows_) return;
    stat_down(stats_.active, r, 1);
    stat_down(stats_.active_bytes, r, bytes);
  }
  // The statistics that move together, each group with one test of r.all rather than one per
  // statistic.
  /// An allocation of `bytes` (rounded) for `requested` bytes: the allocation, allocated, active
  /// and requested rows.
  void allocation_up(stat_rows r, std::int64_t bytes, std::int64_t requested) noexcept;
  /// A free: the allocation, allocated and requested rows (active ones move when it is cached).
  void allocation_down(stat_rows r, std::int64_t bytes, std::int64_t requested) noexcept;
  /// A split block of `bytes` is cached (up) or leaves the cache (down): the inactive-split rows.
  void inactive_split_up(stat_rows r, std::int64_t bytes) noexcept;
  void inactive_split_down(stat_rows r, std::int64_t bytes) noexcept;
  NPURT_DECL block* get_free_block(alloc_params& p);
  /// get_free_block's small-pool search, without the gc age count.
  block* get_small_block(const alloc_params& p);
  NPURT_DECL block* get_cross_stream_block(alloc_params& p);
  /// The retry chain's last step for a small request: a cached large-pool block that holds it.
  NPURT_DECL block* lend_large_block(alloc_params& p);
  NPURT_DECL bool block_fits(const block* b, const alloc_params& p) const noexcept;
  NPURT_DECL block* alloc_segment(alloc_params& p);
  NPURT_DECL block* grow_arena(alloc_params& p);
  NPURT_DECL block* extend_arena(segment* a, std::size_t bytes, std::uint32_t stream);
  NPURT_DECL segment* arena_for(std::uint32_t stream, std::error_code& ec);
  // take_block and the helpers below are the hot paths' own: defined inline in the .ipp files
  // (the library is position-independent code, where a function that could be interposed is
  // never inlined), so they compile into allocate_impl and deallocate_impl.
  std::uint64_t take_block(block* b, alloc_params& p);
  /// take_block's split: b keeps `size` bytes, the rest becomes a free block after it.
  NPURT_DECL void split_block(block* b, std::size_t size);
  NPURT_DECL void free_block(block* b);
  NPURT_DECL void coalesce_and_cache(block* b);
  NPURT_DECL void release_segment(segment* s);
  /// assume_quiet: a synchronize just happened, so no free is still ahead in any stream.
  NPURT_DECL bool release_arena_tail(segment* s, bool assume_quiet = false);
  /// Whether an arena's top block is free but its stream-ordered free still ahead: a release
  /// must synchronise first, as a segment's does.
  [[nodiscard]] NPURT_DECL bool arena_tail_busy() const;
  /// Each returns how many segments (or arena tails) went back to the device.
  NPURT_DECL std::size_t release_fitting_cached(const alloc_params& p);
  /// assume_quiet: a synchronize just happened, so no free is still ahead in any stream.
  NPURT_DECL std::size_t release_all_cached(std::size_t keep = 0, bool assume_quiet = false);
  /// Counts and runs callbacks.synchronize_all.
  NPURT_DECL void synchronize_all_streams();
  /// Is the block's stream-ordered free behind every stream (or unknown)?
  [[nodiscard]] NPURT_DECL bool free_is_behind(const block* b) const;
  NPURT_DECL void garbage_collect(bool forced);
  NPURT_DECL std::size_t gc_limit() const noexcept;
  NPURT_DECL void step(retry_step s);
  bool should_split(const block* b, std::size_t size) const noexcept;
  NPURT_DECL free_set& set_of(pool_id p) noexcept;
  NPURT_DECL void erase_free(block* b) noexcept;
  NPURT_DECL void insert_free(block* b);
  small_bins* find_bins(std::uint32_t stream) const noexcept {
    return last_bins_ && last_bins_->stream == stream ? last_bins_ : find_bins_slow(stream);
  }
  NPURT_DECL small_bins* find_bins_slow(std::uint32_t stream) const noexcept;
  small_bins* bins_for(std::uint32_t stream) {
    return last_bins_ && last_bins_->stream == stream ? last_bins_ : new_bins(stream);
  }
  /// bins_for's slow path: the stream's bins, created if it has none.
  NPURT_DECL small_bins* new_bins(std::uint32_t stream);
  NPURT_DECL void recycle_empty_bins() noexcept;
  /// Calls f(block*) on a stream's cached small blocks of class >= c in (size, address) order
  /// while it returns true, at most `limit` blocks.
  template <class F>
  void for_each_small(const small_bins& sb, std::size_t c, std::size_t limit, F&& f) const;
  [[nodiscard]] NPURT_DECL std::size_t small_free_count() const noexcept;

  segment_provider& provider_;
  const std::size_t capacity_;  // the device's memory, which does not change while it lives
  caching_allocator_options opts_;
  stream_callbacks cb_;
  mutable allocator_stats stats_;  // mutable: sync_rows() completes it for readers
  allocator_stats reset_base_;     // current of each statistic at the last reset_accumulated()
  bool dual_rows_ = false;         // the all-pools row of the per-call statistics is kept
  bool active_rows_ = false;       // the active rows are kept apart from the allocation rows
  std::array<free_set, 3> free_;                   // [small_pool] unused: bins_ index that pool
  std::vector<std::unique_ptr<small_bins>> bins_;  // by stream, ascending
  std::vector<std::unique_ptr<small_bins>> spare_bins_;
  mutable small_bins* last_bins_ = nullptr;        // the stream looked up last (a cache)
  addr_map<block> blocks_;                         // every block, by start address
  std::map<std::uint64_t, segment*> segments_;     // by base address
  std::map<std::uint32_t, segment*> arenas_;       // compact: one per stream
  std::vector<block*> pending_;                    // freed, waiting for fences
  std::vector<std::unique_ptr<block[]>> block_chunks_;
  std::vector<block*> spare_blocks_;
  std::vector<free_set::node_type> spare_nodes_;  // recycled set nodes: no allocation per cache/uncache
  // gc ages count searches, as PyTorch does. It only grows, so while it is 0 every block's
  // gc_base is 0 too and need not be written.
  std::uint64_t free_search_count_ = 0;
  // Has a free recorded a non-zero fence? Until then every free_fence is 0 and need not be
  // read or written.
  bool fences_seen_ = false;
  // The device refused memory for a reason other than its capacity (it is lost, say): the
  // allocation fails with that error, without the out-of-memory retry chain.
  errc device_fault_{};
  /// Keeps a provider's failure when it is the device's (error_class::device); true if it was.
  NPURT_DECL bool note_provider_error(std::error_code ec) noexcept;
  block* deferred_ = nullptr;                      // the held-back free (see defer_free)
  block* deferred_next_ = nullptr;                 // its free next neighbour, merged when settling
  // What std::error_code::clear() assigns, looked up once: the error_code overloads clear their
  // argument on every call, and std::system_category() is an out-of-line call.
  const std::error_category* system_category_ = &std::system_category();
};

namespace ca_detail {

// allocated is not kept here: see caching_allocator::fill_allocated.
inline void stat_inc(stat& s, std::int64_t n) noexcept {
  s.current += n;
  // A branch, not a max: peaks rarely move in a steady state, so this skips a store.
  if (s.current > s.peak) s.peak = s.current;
}
inline void stat_dec(stat& s, std::int64_t n) noexcept {
  s.current -= n;
  s.freed += n;
}
inline void stat_apply(stat& s, std::int64_t n) noexcept {
  if (n >= 0) stat_inc(s, n);
  else stat_dec(s, -n);
}

inline std::size_t round_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

}  // namespace ca_detail

[[gnu::always_inline]] inline void caching_allocator::stat_up(stat_array& s, stat_rows r, std::int64_t n) noexcept {
  ca_detail::stat_inc(s[r.row], n);
  if (r.all) ca_detail::stat_inc(s[stat_all], n);
}
[[gnu::always_inline]] inline void caching_allocator::stat_down(stat_array& s, stat_rows r, std::int64_t n) noexcept {
  ca_detail::stat_dec(s[r.row], n);
  if (r.all) ca_detail::stat_dec(s[stat_all], n);
}

[[gnu::always_inline]] inline void caching_allocator::allocation_up(stat_rows r, std::int64_t bytes,
                                                                    std::int64_t requested) noexcept {
  ca_detail::stat_inc(stats_.allocation[r.row], 1);
  ca_detail::stat_inc(stats_.allocated_bytes[r.row], bytes);
  ca_detail::stat_inc(stats_.requested_bytes[r.row], requested);
  if (r.all) {
    ca_detail::stat_inc(stats_.allocation[stat_all], 1);
    ca_detail::stat_inc(stats_.allocated_bytes[stat_all], bytes);
    ca_detail::stat_inc(stats_.requested_bytes[stat_all], requested);
  }
  active_up(r, bytes);
}
[[gnu::always_inline]] inline void caching_allocator::allocation_down(stat_rows r, std::int64_t bytes,
                                                                      std::int64_t requested) noexcept {
  ca_detail::stat_dec(stats_.allocation[r.row], 1);
  ca_detail::stat_dec(stats_.allocated_bytes[r.row], bytes);
  ca_detail::stat_dec(stats_.requested_bytes[r.row], requested);
  if (r.all) {
    ca_detail::stat_dec(stats_.allocation[stat_all], 1);
    ca_detail::stat_dec(stats_.allocated_bytes[stat_all], bytes);
    ca_detail::stat_dec(stats_.requested_bytes[stat_all], requested);
  }
}
[[gnu::always_inline]] inline void caching_allocator::inactive_split_up(stat_rows r, std::int64_t bytes) noexcept {
  ca_detail::stat_inc(stats_.inactive_split[r.row], 1);
  ca_detail::stat_inc(stats_.inactive_split_bytes[r.row], bytes);
  if (r.all) {
    ca_detail::stat_inc(stats_.inactive_split[stat_all], 1);
    ca_detail::stat_inc(stats_.inactive_split_bytes[stat_all], bytes);
  }
}
[[gnu::always_inline]] inline void caching_allocator::inactive_split_down(stat_rows r, std::int64_t bytes) noexcept {
  ca_detail::stat_dec(stats_.inactive_split[r.row], 1);
  ca_detail::stat_dec(stats_.inactive_split_bytes[r.row], bytes);
  if (r.all) {
    ca_detail::stat_dec(stats_.inactive_split[stat_all], 1);
    ca_detail::stat_dec(stats_.inactive_split_bytes[stat_all], bytes);
  }
}

}  // namespace npurt::detail

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/allocator_arena.ipp>
#include <npurt/impl/allocator_free_index.ipp>
#include <npurt/impl/allocator_release.ipp>
#include <npurt/impl/allocator_stats.ipp>
#include <npurt/impl/caching_allocator.ipp>
#endif
