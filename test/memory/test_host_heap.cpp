#include <npurt/detail/host_heap.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using npurt::detail::host_allocator;
using npurt::detail::host_heap;

TEST_CASE("host buffers are 64-byte aligned and counted in the calling thread's heap", "[memory][host]") {
  const std::size_t before = host_heap::used_bytes();
  std::vector<void*> p;
  for (int i = 0; i < 100; ++i) {
    void* b = host_heap::allocate(1000 + static_cast<std::size_t>(i));
    REQUIRE(b != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(b) % 64 == 0);
    std::memset(b, 0xab, 1000);
    CHECK(host_heap::owns(b));
    p.push_back(b);
  }
  void* page = host_heap::allocate(10000, 4096);
  CHECK(reinterpret_cast<std::uintptr_t>(page) % 4096 == 0);
  CHECK(host_heap::used_bytes() >= before + 100 * 1000);
  for (void* b : p) host_heap::deallocate(b);
  host_heap::deallocate(page);
  host_heap::deallocate(nullptr);
  CHECK(host_heap::used_bytes() < before + 100 * 1000);
  void* z = host_heap::allocate_zeroed(256);
  CHECK(static_cast<unsigned char*>(z)[255] == 0);
  host_heap::deallocate(z);
}

TEST_CASE("each thread has its own heap, and blocks may be freed on any thread", "[memory][host]") {
  mi_heap_t* mine = host_heap::this_thread();
  mi_heap_t* theirs = nullptr;
  void* made_there = nullptr;
  std::thread t([&] {
    theirs = host_heap::this_thread();
    made_there = host_heap::allocate(4096);
  });
  t.join();
  CHECK(theirs != nullptr);
  CHECK(theirs != mine);
  REQUIRE(made_there != nullptr);
  CHECK_FALSE(host_heap::owns(made_there));
  std::memset(made_there, 1, 4096);  // outlives its thread: the heap handed it on
  host_heap::deallocate(made_there);

  void* made_here = host_heap::allocate(4096);
  std::thread f([&] { host_heap::deallocate(made_here); });
  f.join();
}

TEST_CASE("host_allocator backs standard containers", "[memory][host]") {
  std::vector<int, host_allocator<int>> v;
  for (int i = 0; i < 10000; ++i) v.push_back(i);
  CHECK(v[9999] == 9999);
  CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % 64 == 0);
}
