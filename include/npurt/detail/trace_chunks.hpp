// npurt/detail/trace_chunks.hpp — append-only storage for the profiler's hot path.
//
// A vector that doubles copies everything it holds and touches fresh pages twice; on a million
// tasks that cost more than the runtime itself. Records go instead into 2 MiB chunks that never
// move, marked for transparent huge pages on Linux so that filling one takes one page fault
// instead of 512. They are copied into a contiguous vector once, when someone reads them.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace npurt::detail {

template <class T>
class trace_chunks {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  static constexpr std::size_t chunk_bytes = std::size_t{2} << 20;
  static constexpr std::size_t per_chunk = chunk_bytes / sizeof(T);

  trace_chunks() = default;
  trace_chunks(const trace_chunks&) = delete;
  trace_chunks& operator=(const trace_chunks&) = delete;
  trace_chunks(trace_chunks&& o) noexcept
      : chunks_(std::move(o.chunks_)), spare_(std::move(o.spare_)), cur_(std::exchange(o.cur_, nullptr)), fill_(std::exchange(o.fill_, per_chunk)),
        size_(std::exchange(o.size_, 0)) {}
  ~trace_chunks() { release(); }

  void push_back(const T& v) {
    if (fill_ == per_chunk) grow();
    ::new (static_cast<void*>(cur_ + fill_)) T(v);
    ++fill_;
    ++size_;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// Appends everything to `out`, oldest first, and empties this.
  void drain_into(std::vector<T>& out) {
    if (size_ == 0) return;
    out.reserve(out.size() + size_);
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const std::size_t n = c + 1 == chunks_.size() ? fill_ : per_chunk;
      out.insert(out.end(), chunks_[c], chunks_[c] + n);
    }
    release();
  }

  void clear() noexcept { release(); }

  /// Allocates and touches room for `n` more records now, so that appending them later takes no
  /// page faults (the cost moves out of the run being measured).
  void reserve(std::size_t n) {
    std::size_t room = (fill_ == per_chunk ? 0 : per_chunk - fill_) + spare_.size() * per_chunk;
    while (room < n) {
      T* c = allocate();
      for (std::size_t off = 0; off < chunk_bytes; off += 4096) reinterpret_cast<volatile char*>(c)[off] = 0;
      spare_.push_back(c);
      room += per_chunk;
    }
  }

 private:
  void grow() {
    T* c = nullptr;
    if (!spare_.empty()) {
      c = spare_.back();
      spare_.pop_back();
    } else {
      c = allocate();
    }
    try {
      chunks_.push_back(c);
    } catch (...) {
      std::free(c);
      throw;
    }
    cur_ = c;
    fill_ = 0;
  }

  static T* allocate() {
    void* p = nullptr;
#if defined(__linux__)
    p = std::aligned_alloc(chunk_bytes, chunk_bytes);
    if (p != nullptr) (void)::madvise(p, chunk_bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
#else
    p = std::malloc(chunk_bytes);
#endif
    if (p == nullptr) throw std::bad_alloc{};
    return static_cast<T*>(p);
  }

  void release() noexcept {
    for (T* c : chunks_) std::free(c);
    for (T* c : spare_) std::free(c);
    chunks_.clear();
    spare_.clear();
    cur_ = nullptr;
    fill_ = per_chunk;
    size_ = 0;
  }

  std::vector<T*> chunks_;
  std::vector<T*> spare_;  // reserved, not yet used
  T* cur_ = nullptr;
  std::size_t fill_ = per_chunk;
  std::size_t size_ = 0;
};

}  // namespace npurt::detail
