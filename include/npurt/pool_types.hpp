// npurt/pool_types.hpp — the device memory pool's public vocabulary: its options, its
// statistics (PyTorch's DeviceStats layout), its usage report and its snapshot.
//
// npurt::mem_pool (memory.hpp) takes mem_pool_options and returns these; the caching allocator
// behind it (detail/caching_allocator.hpp) is their only producer. docs/memory.md describes
// every field with the rule that updates it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace npurt {

enum class allocation_strategy {
  segmented,  ///< PyTorch-like segments and pools (the default)
  compact,    ///< one growable arena per stream, like PyTorch's expandable segments
};

/// Options of a device memory pool. Sizes in bytes.
struct mem_pool_options {
  int device = 0;  ///< set by the runtime to the pool's device
  allocation_strategy strategy = allocation_strategy::segmented;
  bool ascend_pad = false;  ///< torch_npu: add 32 B before rounding to 512 B
  /// Blocks of at least this size are never split, and requests below it never take them.
  /// Unlimited by default; otherwise more than 20 MiB (the large segment size).
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  /// A request >= max_split_size takes a cached block only if block < request + this.
  std::size_t max_non_split_rounding = 20 * 1024 * 1024;
  /// 0 disables; in (0, 1): when reserved exceeds t x limit, free old cached blocks first.
  double garbage_collection_threshold = 0.0;
  /// Upper bound on reserved bytes; 0 means the device's capacity.
  std::size_t pool_size_limit = 0;
  /// false: allocations never take new device memory; memory comes from reserve() (and, in
  /// compact mode, the initial_reserve mapped when a stream's arena is created).
  bool auto_growth = true;
  std::size_t initial_reserve = 0;
  /// Compact mode: mapping granule (a power of two, at least 512), and address space reserved
  /// per arena (0: the limit).
  std::size_t granule = 2 * 1024 * 1024;
  std::size_t arena_address_space = 0;
  /// cudaMemPool / aclrtMemPool attributes 1-4 (5-8 are read from the statistics).
  bool reuse_follow_event_dependencies = true;
  bool reuse_allow_opportunistic = true;
  bool reuse_allow_internal_dependencies = true;
  std::size_t release_threshold = 0;
};

/// PyTorch's Stat: the current value, its peak, and the running totals of increases
/// (`allocated`) and decreases (`freed`); allocated - freed == current.
struct pool_stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;
};

/// Rows of a pool_stat_array: all pools, the small pool (blocks <= 1 MiB), the large pool (and
/// compact arenas).
enum stat_pool : int { stat_all = 0, stat_small = 1, stat_large = 2 };
using pool_stat_array = std::array<pool_stat, 3>;

/// The pool's statistics (PyTorch's DeviceStats). Bytes are rounded block sizes except
/// requested_bytes.
struct allocator_stats {
  pool_stat_array allocation;            ///< blocks handed out
  pool_stat_array segment;               ///< device segments (arenas count one each)
  pool_stat_array active;                ///< allocated blocks plus freed ones waiting for fences
  pool_stat_array inactive_split;        ///< free blocks inside segments that hold live blocks
  pool_stat_array allocated_bytes;
  pool_stat_array reserved_bytes;        ///< bytes taken from the device (mapped, for arenas)
  pool_stat_array active_bytes;
  pool_stat_array inactive_split_bytes;  ///< free but not releasable ("non-releasable memory")
  pool_stat_array requested_bytes;       ///< what callers asked for, before rounding
  pool_stat oversize_allocations, oversize_segments;  ///< blocks/segments >= max_split_size
  /// Allocations attempted again after the retry chain freed cached memory (fitting segments,
  /// garbage collection, or everything after a synchronisation).
  std::uint64_t num_alloc_retries = 0;
  std::uint64_t num_ooms = 0;              ///< allocations that failed after the whole chain
  /// Device-wide synchronisations the pool asked for before giving memory back to the device.
  std::uint64_t num_sync_all_streams = 0;
  std::uint64_t num_device_alloc = 0;      ///< segment allocations and page maps
  std::uint64_t num_device_free = 0;       ///< segment releases and page unmaps
  /// Cached segments (or arena tails) given back to the device by garbage collection or by the
  /// retry chain to satisfy a request (not by empty_cache, trim_to or the release threshold).
  std::uint64_t num_gc_freed_blocks = 0;
  std::uint64_t num_cross_stream_reuse = 0;  ///< blocks reused on another stream than their free's
  std::size_t max_split_size = 0;            ///< the option, as PyTorch reports it
};

/// The seed document's memory_usage(): MiB as doubles. peak_mb is peak allocated.
struct memory_usage_report {
  double allocated_mb = 0;
  double reserved_mb = 0;
  double peak_mb = 0;
};

struct block_snapshot {
  std::uint64_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  std::uint32_t stream = 0;
  bool allocated = false;
  bool pending = false;  ///< freed, waiting for recorded fences
};

struct segment_snapshot {
  std::uint64_t addr = 0;
  std::size_t size = 0;  ///< reserved (mapped, for an arena) bytes
  std::uint32_t stream = 0;
  bool small = false;
  bool arena = false;
  std::vector<block_snapshot> blocks;  ///< in address order, covering the segment
};

/// Every segment and block of the pool (PyTorch's memory_snapshot).
struct memory_snapshot {
  std::vector<segment_snapshot> segments;  ///< by address
  std::size_t total_free = 0;              ///< free bytes inside segments
  std::size_t largest_free = 0;            ///< largest free block
  /// External fragmentation: 1 - largest free / total free (0 when nothing is free).
  [[nodiscard]] double fragmentation() const noexcept {
    return total_free ? 1.0 - static_cast<double>(largest_free) / static_cast<double>(total_free) : 0.0;
  }
};

/// Steps of the out-of-memory retry chain, in the order they run (reported to on_retry_step).
enum class retry_step {
  garbage_collect_preemptive,  ///< usage above the GC threshold, before asking the device
  device_alloc_failed,         ///< the device (or the pool limit) refused
  free_fitting_cached,         ///< freed cached blocks that fit the rule, retried
  garbage_collect,             ///< garbage-collected, retried
  synchronize_and_free_all,    ///< synchronised all streams, freed everything cached, retried
  out_of_memory,               ///< gave up
};

}  // namespace npurt
