// npurt/detail/object_pool.hpp — fixed-size record pool: tasks are plain records taken from
// here and returned on completion, so a launch allocates nothing once the pool is warm.
#pragma once

#include <npurt/config.hpp>

#include <mimalloc.h>

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace npurt::detail {

template <class T, std::size_t ChunkSize = 4096>
class object_pool {
 public:
  object_pool() = default;
  object_pool(const object_pool&) = delete;
  object_pool& operator=(const object_pool&) = delete;
  ~object_pool() = default;  // callers destroy live objects first; chunks free raw storage

  // Inlined into every launch; growing, rare, stays out of line so the common path saves no
  // registers for it.
  template <class... Args>
  [[gnu::always_inline]] T* create(Args&&... args) {
    if (!free_) [[unlikely]]
      grow();
    node* n = free_;
    free_ = n->next;
    ++live_;
    // Without arguments, default-initialisation: the members' own initialisers set every field,
    // where value-initialisation would first zero the whole record and then set them again.
    if constexpr (sizeof...(Args) == 0) return ::new (static_cast<void*>(n->storage)) T;
    else return ::new (static_cast<void*>(n->storage)) T(std::forward<Args>(args)...);
  }

  void destroy(T* p) noexcept {
    p->~T();
    node* n = reinterpret_cast<node*>(p);
    n->next = free_;
    free_ = n;
    --live_;
  }

  [[nodiscard]] std::size_t live() const noexcept { return live_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return chunks_.size() * ChunkSize; }

 private:
  union node {
    node* next;
    alignas(T) unsigned char storage[sizeof(T)];
  };
  struct chunk_deleter {
    void operator()(node* p) const noexcept { mi_free(p); }
  };

  [[gnu::noinline, gnu::cold]] void grow() {
    // Chunks come from mimalloc, as every runtime-internal heap does.
    node* c = static_cast<node*>(mi_malloc_aligned(sizeof(node) * ChunkSize, alignof(node) < 16 ? 16 : alignof(node)));
    if (!c) throw std::bad_alloc();
    chunks_.emplace_back(c);
    for (std::size_t i = ChunkSize; i-- > 0;) {
      c[i].next = free_;
      free_ = &c[i];
    }
  }

  node* free_ = nullptr;
  std::size_t live_ = 0;
  std::vector<std::unique_ptr<node, chunk_deleter>> chunks_;
};

/// Size-classed free lists for the records of awaited operations. Each awaited op's record is
/// reused by the next, without competing for Asio's per-thread two-slot cache, which Asio's own
/// posts (the strand's op and its invoker) already fill.
class block_recycler {
 public:
  static constexpr std::size_t granule = 64;
  static constexpr std::size_t classes = 8;  // records up to 512 bytes are kept
  // Under AddressSanitizer every record comes from, and goes back to, the global heap, so a use
  // after free or a double free of a record is reported where it happens instead of corrupting
  // a free list that ASan cannot see into.
  static constexpr bool pass_through = NPURT_ASAN;

  block_recycler() = default;
  block_recycler(const block_recycler&) = delete;
  block_recycler& operator=(const block_recycler&) = delete;
  ~block_recycler() {
    for (node*& head : heads_)
      while (head) mi_free(std::exchange(head, head->next));
  }

  void* allocate(std::size_t n) {
    const std::size_t c = (n + granule - 1) / granule;
    if constexpr (pass_through) return ::operator new(n);
    if (c - 1 < classes && heads_[c - 1]) return std::exchange(heads_[c - 1], heads_[c - 1]->next);
    void* p = mi_malloc_aligned(c - 1 < classes ? c * granule : n, alignof(std::max_align_t));
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t n) noexcept {
    const std::size_t c = (n + granule - 1) / granule;
    if constexpr (pass_through) {
      ::operator delete(p, n);
      return;
    }
    if (c - 1 < classes) {
      heads_[c - 1] = ::new (p) node{heads_[c - 1]};
    } else {
      mi_free(p);
    }
  }

 private:
  struct node {
    node* next;
  };
  node* heads_[classes] = {};
};

/// A standard allocator over a block_recycler.
template <class T>
struct recycler_allocator {
  using value_type = T;
  block_recycler* r;
  explicit recycler_allocator(block_recycler& rec) noexcept : r(&rec) {}
  template <class U>
  recycler_allocator(const recycler_allocator<U>& o) noexcept : r(o.r) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return static_cast<T*>(r->allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { r->deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const recycler_allocator<U>& o) const noexcept {
    return r == o.r;
  }
};

}  // namespace npurt::detail
