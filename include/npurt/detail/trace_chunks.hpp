// npurt/detail/trace_chunks.hpp — append-only storage for the profiler's hot path.
//
// A vector that doubles copies everything it holds and touches fresh pages twice; on a million
// tasks that cost more than the runtime itself. Records go instead into 2 MiB chunks that never
// move, marked for transparent huge pages on Linux so that filling one takes one page fault
// instead of 512. Records are variable-length byte strings built in place (the common one is
// small, rare fields follow it only when present), so the chunks know nothing of their layout:
// the writer asks for room(), constructs a record there and commit()s its size; the reader walks
// each chunk's used bytes.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace npurt::detail {

class trace_chunks {
 public:
  static constexpr std::size_t chunk_bytes = std::size_t{2} << 20;
  /// The most a record may take: room() always leaves at least this much.
  static constexpr std::size_t max_record = 256;
  /// Records are kept at this alignment (a record's size must be a multiple of it).
  static constexpr std::size_t alignment = 8;

  struct span {
    const std::byte* begin;
    const std::byte* end;
  };

  trace_chunks() = default;
  trace_chunks(const trace_chunks&) = delete;
  trace_chunks& operator=(const trace_chunks&) = delete;
  trace_chunks(trace_chunks&& o) noexcept
      : chunks_(std::move(o.chunks_)),
        spare_(std::move(o.spare_)),
        cur_(std::exchange(o.cur_, nullptr)),
        end_(std::exchange(o.end_, nullptr)),
        limit_(std::exchange(o.limit_, nullptr)),
        seen_chunk_(std::exchange(o.seen_chunk_, 0)),
        seen_(std::exchange(o.seen_, nullptr)) {}
  ~trace_chunks() { release(); }

  /// Where the next record goes: at least max_record bytes, aligned to `alignment`.
  [[nodiscard]] std::byte* room() {
    if (!has_room()) grow();
    return cur_;
  }
  /// Whether room() would take no allocation; then cursor() is room().
  [[nodiscard]] bool has_room() const noexcept { return cur_ < limit_; }
  [[nodiscard]] std::byte* cursor() const noexcept { return cur_; }
  /// The record built at room() took `bytes`.
  void commit(std::size_t bytes) noexcept { cur_ += bytes; }

  /// Bytes committed.
  [[nodiscard]] std::size_t used_bytes() const noexcept {
    std::size_t n = 0;
    for_each_span([&](span s) { n += static_cast<std::size_t>(s.end - s.begin); });
    return n;
  }
  [[nodiscard]] bool empty() const noexcept {
    return chunks_.empty() || (chunks_.size() == 1 && cur_ == chunks_[0].begin);
  }

  /// Calls f(span) for each chunk's used bytes, oldest first.
  template <class F>
  void for_each_span(F&& f) const {
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const std::byte* e = c + 1 == chunks_.size() ? cur_ : chunks_[c].end;
      f(span{chunks_[c].begin, e});
    }
  }

  /// Calls f(span) for the bytes committed since the last call (all of them the first time, or
  /// after clear()), oldest first.
  template <class F>
  void for_each_new_span(F&& f) {
    for (std::size_t c = seen_chunk_; c < chunks_.size(); ++c) {
      const std::byte* b = c == seen_chunk_ && seen_ != nullptr ? seen_ : chunks_[c].begin;
      const std::byte* e = c + 1 == chunks_.size() ? cur_ : chunks_[c].end;
      f(span{b, e});
    }
    if (!chunks_.empty()) {
      seen_chunk_ = chunks_.size() - 1;
      seen_ = cur_;
    }
  }

  void clear() noexcept { release(); }

  /// Allocates and touches room for `bytes` more bytes of records now, so that appending them
  /// later takes no page faults (the cost moves out of the run being measured).
  void reserve(std::size_t bytes) {
    const std::size_t usable = chunk_bytes - max_record;
    std::size_t room = (cur_ == nullptr || static_cast<std::size_t>(end_ - cur_) < max_record
                            ? 0
                            : static_cast<std::size_t>(end_ - cur_) - max_record) +
                       spare_.size() * usable;
    while (room < bytes) {
      std::byte* c = allocate();
      for (std::size_t off = 0; off < chunk_bytes; off += 4096) reinterpret_cast<volatile char*>(c)[off] = 0;
      spare_.push_back(c);
      room += usable;
    }
  }

 private:
  struct chunk {
    std::byte* begin;
    std::byte* end;  // used bytes end here (kept for every chunk but the current one)
  };

  void grow() {
    std::byte* c = nullptr;
    if (!spare_.empty()) {
      c = spare_.back();
      spare_.pop_back();
    } else {
      c = allocate();
    }
    try {
      chunks_.push_back(chunk{c, c});
    } catch (...) {
      std::free(c);
      throw;
    }
    if (chunks_.size() > 1) chunks_[chunks_.size() - 2].end = cur_;
    cur_ = c;
    end_ = c + chunk_bytes;
    limit_ = end_ - max_record + 1;
  }

  static std::byte* allocate() {
    void* p = nullptr;
#if defined(__linux__)
    p = std::aligned_alloc(chunk_bytes, chunk_bytes);
    if (p != nullptr) (void)::madvise(p, chunk_bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
#else
    p = std::malloc(chunk_bytes);
#endif
    if (p == nullptr) throw std::bad_alloc{};
    return static_cast<std::byte*>(p);
  }

  void release() noexcept {
    for (const chunk& c : chunks_) std::free(c.begin);
    for (std::byte* c : spare_) std::free(c);
    chunks_.clear();
    spare_.clear();
    cur_ = nullptr;
    end_ = nullptr;
    limit_ = nullptr;
    seen_chunk_ = 0;
    seen_ = nullptr;
  }

  std::vector<chunk> chunks_;
  std::vector<std::byte*> spare_;  // reserved, not yet used
  std::byte* cur_ = nullptr;
  std::byte* end_ = nullptr;
  std::byte* limit_ = nullptr;  // room for a record starts below this
  std::size_t seen_chunk_ = 0;  // for_each_new_span() has read up to here
  const std::byte* seen_ = nullptr;
};

}  // namespace npurt::detail
