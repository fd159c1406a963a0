// npurt/detail/host_heap.hpp — host memory for pinned-host buffers and runtime internals, from
// mimalloc heaps.
//
// mimalloc 2.0.9 (Debian bookworm) lets a heap allocate only on the thread that created it, so
// each thread gets its own heap, made on first use; mi_free releases a block from any thread.
// When a thread exits its heap is deleted with mi_heap_delete, which hands still-live blocks to
// the default heap instead of freeing them, so a buffer may outlive the thread that made it.
#pragma once

#include <mimalloc.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace npurt::detail {

class host_heap {
 public:
  static constexpr std::size_t default_alignment = 64;  // a cache line, TFLite's tensor alignment

  /// The calling thread's heap.
  [[nodiscard]] static mi_heap_t* this_thread() noexcept { return local().heap; }

  /// `size` bytes aligned to `alignment` from this thread's heap; nullptr if out of memory.
  /// size 0 returns a unique minimal block, as malloc(0) may.
  [[nodiscard]] static void* allocate(std::size_t size, std::size_t alignment = default_alignment) noexcept {
    auto& l = local();
    void* p = mi_heap_malloc_aligned(l.heap, size, alignment);  // size before alignment (mimalloc order)
    if (p) ++l.allocations;
    return p;
  }
  [[nodiscard]] static void* allocate_zeroed(std::size_t size, std::size_t alignment = default_alignment) noexcept {
    auto& l = local();
    void* p = mi_heap_zalloc_aligned(l.heap, size, alignment);
    if (p) ++l.allocations;
    return p;
  }
  /// Frees a block from any thread's heap. nullptr is ignored.
  static void deallocate(void* p) noexcept { mi_free(p); }

  /// Bytes in use in the calling thread's heap (sum over its areas of used blocks x block size).
  /// Walks the heap: for statistics, not for hot paths.
  [[nodiscard]] static std::size_t used_bytes() noexcept {
    std::size_t total = 0;
    mi_heap_visit_blocks(
        local().heap, false,
        [](const mi_heap_t*, const mi_heap_area_t* area, void*, std::size_t, void* arg) {
          *static_cast<std::size_t*>(arg) += area->used * area->block_size;
          return true;
        },
        &total);
    return total;
  }
  /// Allocations made from the calling thread's heap so far.
  [[nodiscard]] static std::uint64_t allocations() noexcept { return local().allocations; }
  /// Does the calling thread's heap hold p?
  [[nodiscard]] static bool owns(const void* p) noexcept { return mi_heap_check_owned(local().heap, p); }
  /// Returns freed pages of this thread's heap to the OS.
  static void collect(bool force = false) noexcept { mi_heap_collect(local().heap, force); }

  /// Process-wide resident and committed memory (mimalloc 2 keeps no per-heap totals).
  struct process_info {
    std::size_t current_rss = 0, peak_rss = 0, current_commit = 0, peak_commit = 0;
  };
  [[nodiscard]] static process_info process() noexcept {
    process_info i;
    std::size_t elapsed = 0, user = 0, sys = 0, faults = 0;
    mi_process_info(&elapsed, &user, &sys, &i.current_rss, &i.peak_rss, &i.current_commit, &i.peak_commit, &faults);
    return i;
  }

 private:
  struct thread_heap {
    mi_heap_t* heap = mi_heap_new();
    std::uint64_t allocations = 0;
    thread_heap() {
      if (!heap) heap = mi_heap_get_default();
    }
    ~thread_heap() {
      if (heap && heap != mi_heap_get_default() && heap != mi_heap_get_backing()) mi_heap_delete(heap);
    }
    thread_heap(const thread_heap&) = delete;
    thread_heap& operator=(const thread_heap&) = delete;
  };
  static thread_heap& local() noexcept {
    thread_local thread_heap h;
    return h;
  }
};

/// Frees a host_heap block: host_bytes owns a byte buffer from host_heap::allocate.
struct host_heap_deleter {
  void operator()(void* p) const noexcept { host_heap::deallocate(p); }
};
using host_bytes = std::unique_ptr<std::byte[], host_heap_deleter>;

/// Standard allocator over host_heap, for containers in runtime internals. Stateless: any
/// instance frees what any other allocated, on any thread.
template <class T>
struct host_allocator {
  using value_type = T;
  host_allocator() noexcept = default;
  template <class U>
  host_allocator(const host_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t a = alignof(T) > host_heap::default_alignment ? alignof(T) : host_heap::default_alignment;
    void* p = host_heap::allocate(n * sizeof(T), a);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { host_heap::deallocate(p); }
  template <class U>
  bool operator==(const host_allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace npurt::detail
