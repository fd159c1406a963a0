// npurt/detail/object_pool.hpp — fixed-size record pool: tasks are plain records taken from
// here and returned on completion, so a launch allocates nothing once the pool is warm.
#pragma once

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

  template <class... Args>
  T* create(Args&&... args) {
    if (!free_) grow();
    node* n = free_;
    free_ = n->next;
    ++live_;
    return ::new (static_cast<void*>(n->storage)) T(std::forward<Args>(args)...);
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

  void grow() {
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

}  // namespace npurt::detail
