// Bytes held by operator new, for tests that check memory grows as the input does (linearly,
// not with the number of pairs). Include it in one translation unit of a test program only: it
// replaces the global operator new and delete of the whole program.
#pragma once

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace heap_counter {

inline std::atomic<std::int64_t> now{0}, peak{0};

/// The most bytes operator new held beyond what it held before, while f ran.
template <class F>
std::int64_t peak_during(F&& f) {
  peak = now.load();
  const auto base = now.load();
  f();
  return peak.load() - base;
}

}  // namespace heap_counter

// The replacements pair malloc with free; GCC's mismatch warning does not apply to them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const auto size = static_cast<std::int64_t>(malloc_usable_size(p));
  const auto now = heap_counter::now.fetch_add(size) + size;
  for (auto peak = heap_counter::peak.load(); now > peak && !heap_counter::peak.compare_exchange_weak(peak, now);) {}
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  heap_counter::now.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
// The nothrow forms too (std::stable_sort's buffer takes one): left to a sanitizer's own
// allocator, their blocks would reach the delete above, a mismatch it reports.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) { return nullptr; }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
