// The pool's release threshold (cudaMemPoolAttrReleaseThreshold): cached memory above it goes
// back to the device when a stream, event or device synchronize ends, on that device only, and
// never memory that is allocated or whose stream-ordered free is still ahead.
#include <npurt/memory.hpp>

#include "../core/common.hpp"

#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cstddef>

using namespace npurt_test;

namespace {

// Blocks this large get a segment of their own (no rounding, no sharing), so what a trim keeps
// is a whole number of them.
constexpr std::size_t block_bytes = std::size_t{16} << 20;

npurt::mem_pool& pool_with_threshold(npurt::device& dev, std::size_t threshold) {
  npurt::mem_pool_options o;
  o.release_threshold = threshold;
  return dev.configure_mem_pool(o);
}

std::size_t reserved(const npurt::mem_pool& pool) {
  return pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current);
}

// Three blocks allocated and freed on `s` behind a kernel: three cached segments once it ends.
void cache_three(npurt::mem_pool& pool, npurt::stream& s) {
  std::array<void*, 3> p{};
  for (auto& x : p) x = pool.malloc_async(block_bytes, s);
  (void)s.launch(fixed(us(10)));
  for (void* x : p) pool.free_async(x, s);
}

npurt::task<void> sync_task(npurt::stream& s) { co_await s.async_synchronize(npurt::use_task); }

// One device whose pool has this threshold, and a stream of it.
struct one_device {
  npurt::system sys{simple()};
  npurt::device& dev = sys.device(0);
  npurt::mem_pool& pool;
  npurt::stream s = dev.make_stream();
  explicit one_device(std::size_t threshold) : pool(pool_with_threshold(dev, threshold)) {}
};

}  // namespace

TEST_CASE("a stream synchronize trims the pool to its release threshold", "[pool][release_threshold]") {
  one_device d(2 * block_bytes);
  auto& [sys, dev, pool, s] = d;
  cache_three(pool, s);
  CHECK(reserved(pool) == 3 * block_bytes);
  s.synchronize();
  CHECK(reserved(pool) == 2 * block_bytes);
  // At or below the threshold a synchronize keeps everything.
  s.synchronize();
  CHECK(reserved(pool) == 2 * block_bytes);
}

TEST_CASE("an event synchronize trims the pool of the event's device", "[pool][release_threshold]") {
  one_device d(2 * block_bytes);
  auto& [sys, dev, pool, s] = d;
  cache_three(pool, s);
  SECTION("a task event") {
    npurt::event e = s.launch(fixed(us(1)));
    e.synchronize();
  }
  SECTION("a user event") {
    npurt::event e = dev.make_event();
    s.record(e);
    e.synchronize();
  }
  CHECK(reserved(pool) == 2 * block_bytes);
}

TEST_CASE("the awaited synchronize forms trim as the blocking ones do", "[pool][release_threshold]") {
  one_device d(0);
  auto& [sys, dev, pool, s] = d;
  SECTION("stream::async_synchronize") {
    cache_three(pool, s);
    run_coro(sys, [&]() -> asio::awaitable<void> { co_await s.async_synchronize(asio::use_awaitable); });
  }
  SECTION("event::async_wait") {
    cache_three(pool, s);
    npurt::event e = s.launch(fixed(us(1)));
    run_coro(sys, [&]() -> asio::awaitable<void> { co_await e.async_wait(asio::use_awaitable); });
  }
  SECTION("device::async_synchronize") {
    cache_three(pool, s);
    run_coro(sys, [&]() -> asio::awaitable<void> { co_await dev.async_synchronize(asio::use_awaitable); });
  }
  SECTION("stream::async_synchronize awaited with npurt::use_task") {
    cache_three(pool, s);
    npurt::spawn(sys, sync_task(s));
    sys.run();
  }
  CHECK(reserved(pool) == 0);
}

TEST_CASE("a wait that does not end (a timeout) trims nothing", "[pool][release_threshold]") {
  one_device d(0);
  auto& [sys, dev, pool, s] = d;
  cache_three(pool, s);
  std::error_code ec;
  s.synchronize(us(1), ec);
  CHECK(ec == npurt::errc::wait_timeout);
  CHECK(reserved(pool) == 3 * block_bytes);
  s.synchronize();
  CHECK(reserved(pool) == 0);
}

TEST_CASE("a synchronize on one device leaves another device's pool alone", "[pool][release_threshold]") {
  npurt::system sys{simple(2)};
  auto& dev0 = sys.device(0);
  auto& dev1 = sys.device(1);
  auto& pool0 = pool_with_threshold(dev0, 0);
  auto& pool1 = pool_with_threshold(dev1, 0);
  auto s0 = dev0.make_stream();
  auto s1 = dev1.make_stream();
  cache_three(pool0, s0);
  cache_three(pool1, s1);
  sys.run();  // every stream drained, nothing synchronized
  const std::size_t before = reserved(pool1);
  CHECK(before == 3 * block_bytes);
  SECTION("stream") { s0.synchronize(); }
  SECTION("event") {
    npurt::event e = s0.launch(fixed(us(1)));
    e.synchronize();
  }
  SECTION("device") { dev0.synchronize(); }
  CHECK(reserved(pool0) == 0);
  CHECK(reserved(pool1) == before);
}

TEST_CASE("a synchronize never releases memory in use", "[pool][release_threshold]") {
  one_device d(0);
  auto& [sys, dev, pool, s] = d;
  auto other = dev.make_stream();
  SECTION("allocated blocks stay") {
    void* live1 = pool.malloc_async(block_bytes, s);
    void* live2 = pool.malloc_async(block_bytes, s);
    pool.free_async(pool.malloc_async(block_bytes, s), s);
    s.synchronize();
    CHECK(reserved(pool) == 2 * block_bytes);
    npurt::event e = s.launch(fixed(us(1)));
    e.synchronize();
    CHECK(reserved(pool) == 2 * block_bytes);
    pool.free_async(live1, s);
    pool.free_async(live2, s);
    s.synchronize();
    CHECK(reserved(pool) == 0);
  }
  SECTION("a free still ahead on another stream stays") {
    void* p = pool.malloc_async(block_bytes, other);
    (void)other.launch(fixed(us(100)));
    pool.free_async(p, other);  // ahead of `other`'s host side until its kernel ends
    s.synchronize();             // `s` has nothing to wait for: it ends before that kernel
    CHECK(reserved(pool) == block_bytes);
    npurt::event e = dev.make_event();
    s.record(e);
    e.synchronize();
    CHECK(!other.query());
    CHECK(reserved(pool) == block_bytes);
    other.synchronize();
    CHECK(reserved(pool) == 0);
  }
  SECTION("a use recorded on another stream keeps the block until that use ends") {
    void* p = pool.malloc_async(block_bytes, s);
    (void)other.launch(fixed(us(100)));
    pool.record_stream(p, other);
    pool.free_async(p, s);
    s.synchronize();
    CHECK(reserved(pool) == block_bytes);
    other.synchronize();
    CHECK(reserved(pool) == 0);
  }
}
