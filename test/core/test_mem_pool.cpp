#include <npurt/memory.hpp>

#include "common.hpp"

#include <boost/asio/as_tuple.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

using namespace npurt_test;
using npurt::sim_time;

namespace {

// A pool whose other streams take a freed block only once the free has completed: no inserted
// waits, no following of event dependencies.
npurt::mem_pool& opportunistic_only(npurt::device& dev) {
  npurt::mem_pool_options o;
  o.reuse_allow_internal_dependencies = false;
  o.reuse_follow_event_dependencies = false;
  return dev.configure_mem_pool(o);
}

npurt::simple_config small_device(std::size_t mib) {
  auto c = simple();
  c.properties.memory_bytes = mib << 20;
  return c;
}

TEST_CASE("co_await async_malloc gives stream-ordered device memory that copies round-trip through", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<int> in(4096), out(4096);
  std::iota(in.begin(), in.end(), 1);
  run_coro(sys, [&]() -> asio::awaitable<void> {
    void* p = co_await dev.async_malloc(in.size() * sizeof(int), s, asio::use_awaitable);
    CHECK(p != nullptr);
    co_await s.async_memcpy(p, 16384, in.data(), 16384, npurt::memcpy_kind::host_to_device, asio::use_awaitable);
    co_await s.async_memcpy(out.data(), 16384, p, 16384, npurt::memcpy_kind::device_to_host, asio::use_awaitable);
    co_await dev.async_free(p, s, asio::use_awaitable);
  }());
  CHECK(out == in);
  const auto usage = dev.memory_usage();
  CHECK(usage.allocated_mb == 0.0);
  CHECK(usage.reserved_mb == 2.0);  // one 2 MiB small-pool segment stays cached
  CHECK(usage.peak_mb > 0.0);
}

TEST_CASE("a freed block is reused at once by its own stream", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* a = pool.malloc_async(1 << 20, s);
  s.launch(fixed(us(100)));  // the block is still in use by queued work when freed
  pool.free_async(a, s);
  void* b = pool.malloc_async(1 << 20, s);
  CHECK(b == a);
  CHECK(pool.stats().num_device_alloc == 1);
}

TEST_CASE("mem_pool::reset_accumulated zeroes the running totals and counters, not the current figures",
          "[core][pool]") {
  // docs/memory.md, Statistics: reset_peak() and reset_accumulated() are the pool's, as
  // torch.cuda.reset_peak_memory_stats and reset_accumulated_memory_stats are.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  pool.free_async(pool.malloc_async(1000, s), s);
  void* p = pool.malloc_async(1000, s);  // 1000 B rounded up to 512 B granules: 1024 B each time
  const auto before = pool.stats();
  REQUIRE(before.allocated_bytes[npurt::stat_all].allocated == 2048);
  REQUIRE(before.allocated_bytes[npurt::stat_all].freed == 1024);
  REQUIRE(before.num_device_alloc == 1);  // one 2 MiB small-pool segment
  pool.reset_accumulated();
  const auto after = pool.stats();
  CHECK(after.allocated_bytes[npurt::stat_all].allocated == 0);
  CHECK(after.allocated_bytes[npurt::stat_all].freed == 0);
  CHECK(after.allocation[npurt::stat_all].allocated == 0);
  CHECK(after.num_device_alloc == 0);
  CHECK(after.allocated_bytes[npurt::stat_all].current == 1024);
  CHECK(after.reserved_bytes[npurt::stat_all].current == 2 << 20);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == 1024);
  pool.free_async(p, s);
}

TEST_CASE("another stream reuses a freed block only when the free's position is reached", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  auto& pool = opportunistic_only(dev);
  // The synchronize below would otherwise give both cached blocks back (a release threshold of 0).
  pool.set_attribute(npurt::mem_pool_attr::release_threshold, std::uint64_t{1} << 40);
  void* a = pool.malloc_async(4 << 20, s1);
  s1.launch(fixed(us(100)));
  pool.free_async(a, s1);
  void* b = pool.malloc_async(4 << 20, s2);
  CHECK(b != a);  // s1's work is still running: reusing a would race with it
  pool.free_async(b, s2);
  s1.synchronize();
  void* c = pool.malloc_async(4 << 20, s2);
  CHECK((c == a || c == b));
}

TEST_CASE("another stream that waits for an event recorded after the free reuses the block at once", "[core][pool]") {
  // cudaMemPoolReuseFollowEventDependencies alone: no inserted wait, no opportunistic reuse.
  // 12 MiB blocks fill their segments: no stream caches a remainder of its own.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream(), s2 = dev.make_stream();
  npurt::mem_pool_options o;
  o.reuse_allow_internal_dependencies = false;
  o.reuse_allow_opportunistic = false;
  auto& pool = dev.configure_mem_pool(o);
  void* a = pool.malloc_async(12 << 20, s1);
  s1.launch(fixed(us(100)));
  pool.free_async(a, s1);
  // s2 does not wait yet: reusing a would race with s1's kernel.
  void* b = pool.malloc_async(12 << 20, s2);  // kept: s2 caches no block of its own
  CHECK(b != a);
  auto freed = dev.make_event();
  s1.record(freed);  // after the free
  s2.wait(freed);
  void* c = pool.malloc_async(12 << 20, s2);
  CHECK(c == a);
  CHECK(pool.stats().num_cross_stream_reuse == 1);
  // A wait for work queued before the last task ahead of the free does not order the free.
  auto s3 = dev.make_stream();
  void* d = pool.malloc_async(12 << 20, s1);
  npurt::event before = s1.launch(fixed(us(100)));
  s1.launch(fixed(us(100)));  // still ahead of the free when `before` completes
  pool.free_async(d, s1);
  s3.wait(before);
  void* e = pool.malloc_async(12 << 20, s3);
  CHECK(e != d);
  // A wait that may time out does not order what follows it either.
  auto s4 = dev.make_stream();
  sys.set_event_wait_timeout(us(1));
  auto later = dev.make_event();
  s1.record(later);
  s4.wait(later);
  void* f = pool.malloc_async(12 << 20, s4);
  CHECK(f != d);
  sys.set_event_wait_timeout(npurt::no_timeout);
}

TEST_CASE("a stream that already waits for the free gets no inserted wait under the default policies", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream(), s2 = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* a = pool.malloc_async(4 << 20, s1);
  s1.launch(fixed(us(100)));
  pool.free_async(a, s1);
  auto freed = dev.make_event();
  s1.record(freed);
  s2.wait(freed);
  const std::uint64_t s2_tasks = s2.launch(fixed(us(1))).task_id();
  void* b = pool.malloc_async(4 << 20, s2);
  CHECK(b == a);
  // The next task of s2 follows the kernel directly: no pool wait was enqueued between them.
  CHECK(s2.launch(fixed(us(1))).task_id() == s2_tasks + 1);
}

TEST_CASE("free_async is stream-ordered: work queued before it, on its stream or a recorded one, runs on the block",
          "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto& pool = dev.mem_pool();
  auto s1 = dev.make_stream(), s2 = dev.make_stream();
  std::vector<unsigned char> in(4096), out(4096, 0), out2(4096, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  // cudaMemcpyAsync(p); cudaFreeAsync(p, s): the copies run before the free, on the block.
  void* p = pool.malloc_async(in.size(), s1);
  s1.memcpy(p, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device);
  s1.memcpy(out.data(), out.size(), p, in.size(), npurt::memcpy_kind::device_to_host);
  pool.free_async(p, s1);
  CHECK_NOTHROW(s1.synchronize());
  CHECK(out == in);
  // Another stream reads it, record_stream orders the reuse after that read, the free is on s1.
  void* q = pool.malloc_async(in.size(), s1);
  s1.memcpy(q, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device);
  auto written = dev.make_event();
  s1.record(written);
  s2.wait(written);
  s2.memcpy(out2.data(), out2.size(), q, in.size(), npurt::memcpy_kind::device_to_host);
  pool.record_stream(q, s2);
  pool.free_async(q, s1);
  CHECK_NOTHROW(s2.synchronize());
  CHECK_NOTHROW(s1.synchronize());
  CHECK(out2 == in);
  // Work queued after the free is still refused at the call.
  std::error_code ec;
  s1.memcpy(q, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
}

TEST_CASE("a pool block cannot be used after its free nor freed with device::free", "[core][pool][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  std::vector<char> host(1024);
  void* p = pool.malloc_async(1024, s);
  std::error_code ec;
  dev.free(p, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  // A copy larger than the block is caught even though the segment around it is larger.
  s.memcpy(p, 4096, host.data(), 2048, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::size_overflow);
  pool.free_async(p, s);
  s.memcpy(p, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  pool.free_async(p, s, ec);
  CHECK(ec == npurt::errc::double_free);
  auto other = sys.device(0).make_stream();
  (void)other;
}

TEST_CASE("pool calls check the stream's device", "[core][pool][error]") {
  npurt::system sys{simple(2)};
  auto s1 = sys.device(1).make_stream();
  std::error_code ec;
  (void)sys.device(0).mem_pool().malloc_async(64, s1, ec);
  CHECK(ec == npurt::errc::stream_device_mismatch);
  npurt::stream none;
  (void)sys.device(0).mem_pool().malloc_async(64, none, ec);
  CHECK(ec == npurt::errc::invalid_stream);
  auto s0 = sys.device(0).make_stream();
  (void)sys.device(0).mem_pool().malloc_async(0, s0, ec);
  CHECK(ec == npurt::errc::zero_size);
}

TEST_CASE("out of memory raises out_of_memory_error with the pool's numbers", "[core][pool][error]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* a = pool.malloc_async(40 << 20, s);
  try {
    (void)pool.malloc_async(40 << 20, s);
    FAIL("no exception");
  } catch (const npurt::out_of_memory_error& e) {
    CHECK(e.requested() == (40u << 20));
    CHECK(e.details().total == (64u << 20));
    CHECK(e.details().allocated == (40u << 20));
    CHECK(std::string(e.what()).find("out of memory") != std::string::npos);
  }
  CHECK(pool.stats().num_ooms == 1);
  pool.free_async(a, s);
  CHECK_NOTHROW(pool.free_async(pool.malloc_async(40 << 20, s), s));
}

// s1 takes 40 MiB, queues a 500 us kernel and frees the block behind it (cached but busy until
// the kernel ends); then s2 asks for 40 MiB inside run(): what it got, and when.
std::pair<npurt::async_error_code, sim_time> second_alloc_behind_busy_free(npurt::system& sys, npurt::stream& s1,
                                                                           npurt::stream& s2) {
  auto& dev = sys.device(0);
  sim_time got_at{};
  npurt::async_error_code got;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    void* a = co_await dev.async_malloc(40 << 20, s1, asio::use_awaitable);
    s1.launch(fixed(us(500)));
    co_await dev.async_free(a, s1, asio::use_awaitable);
    auto [ec, b] = co_await dev.async_malloc(40 << 20, s2, asio::as_tuple(asio::use_awaitable));
    got = ec;
    got_at = sys.now();
    if (!ec) co_await dev.async_free(b, s2, asio::use_awaitable);
  }());
  return {got, got_at};
}

TEST_CASE("async_malloc inside run drains the device and retries before giving up", "[core][pool]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  auto& pool = opportunistic_only(dev);
  const auto [got, got_at] = second_alloc_behind_busy_free(sys, s1, s2);
  CHECK_FALSE(got);
  // It succeeded once s1's kernel had finished, not before.
  CHECK(got_at >= sim_time{us(500)});
  CHECK(pool.stats().num_alloc_retries >= 1);
}

TEST_CASE("async_malloc inside run drains the device and retries at the pool's size limit too", "[core][pool]") {
  // As for a full device: the limit is reached by a cached segment whose free is still ahead,
  // which the retry chain cannot give back inside the loop; once the device drains, it can.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  npurt::mem_pool_options o;
  o.reuse_allow_internal_dependencies = false;
  o.reuse_follow_event_dependencies = false;
  o.pool_size_limit = std::size_t{64} << 20;
  auto& pool = dev.configure_mem_pool(o);
  const auto [got, got_at] = second_alloc_behind_busy_free(sys, s1, s2);
  CHECK_FALSE(got);
  CHECK(got_at >= sim_time{us(500)});
  CHECK(pool.stats().num_alloc_retries >= 1);
}

TEST_CASE("async_malloc of more than the pool's size limit fails at once, without waiting", "[core][pool][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.pool_size_limit = std::size_t{64} << 20;
  dev.configure_mem_pool(o);
  sim_time got_at{us(1)};
  npurt::async_error_code got;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    s.launch(fixed(us(500)));  // the device is busy: waiting for it could not help
    auto [ec, p] = co_await dev.async_malloc(100 << 20, s, asio::as_tuple(asio::use_awaitable));
    got = ec;
    got_at = sys.now();
  }());
  CHECK(got == npurt::errc::pool_limit);
  CHECK(got_at < sim_time{us(500)});
}

TEST_CASE(
    "a pool without auto_growth serves what reserve stocked, keeps it across synchronizes and says why it refuses",
    "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.auto_growth = false;
  auto& pool = dev.configure_mem_pool(o);
  std::error_code ec;
  CHECK(pool.malloc_async(4096, s, ec) == nullptr);
  CHECK(ec == npurt::errc::pool_limit);
  try {
    (void)pool.malloc_async(4096, s);
    FAIL("an empty pool without auto_growth allocated");
  } catch (const npurt::out_of_memory_error& e) {
    const std::string what = e.what();
    CHECK(what.find("auto_growth is off") != std::string::npos);
    CHECK(what.find("The pool's size limit of") == std::string::npos);  // no limit was set, none was reached
  }
  pool.reserve(std::size_t{8} << 20, s);  // one 20 MiB large segment: requests up to 10 MiB
  CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == std::size_t{20} << 20);
  s.synchronize();  // the release threshold (0) does not give the stock back: nothing could replace it
  CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == std::size_t{20} << 20);
  void* p = pool.malloc_async(std::size_t{6} << 20, s);
  CHECK(p != nullptr);
  pool.free_async(p, s);
  pool.reserve(0, s, ec);
  CHECK(ec == npurt::errc::zero_size);
  CHECK_THROWS_AS(pool.reserve(SIZE_MAX, s), npurt::caller_error);
  pool.reserve(SIZE_MAX, s, ec);
  CHECK(ec == npurt::errc::size_overflow);
  // More than the device holds but representable: out of memory, as a malloc of it is.
  const std::size_t too_big = dev.properties().memory_bytes + 1;
  pool.reserve(too_big, s, ec);
  CHECK(ec == npurt::errc::out_of_memory);
  try {
    pool.reserve(too_big, s);
    FAIL("reserve took more than the device holds");
  } catch (const npurt::out_of_memory_error& e) {
    CHECK(e.details().requested == too_big);
    CHECK(e.details().total == dev.properties().memory_bytes);
  }
  npurt::system sys2{simple(2)};
  auto foreign = sys2.device(1).make_stream();
  pool.reserve(4096, foreign, ec);
  CHECK(ec);
  pool.empty_cache();  // asked for: the stock goes
  CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == 0);
}

TEST_CASE("a pool's options are read-only: they change through configure_mem_pool and set_attribute", "[core][pool]") {
  // Written through a mutable reference they skipped validation: a compact pool's granule of 0
  // divided by zero at the next allocation.
  npurt::system sys{simple()};
  auto& pool = sys.device(0).mem_pool();
  STATIC_REQUIRE(std::is_const_v<std::remove_reference_t<decltype(pool.options())>>);
  pool.set_attribute(npurt::mem_pool_attr::release_threshold, 4096);
  CHECK(pool.options().release_threshold == 4096);
}

TEST_CASE("pool attributes mirror aclrtMemPool and cudaMemPool", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  using A = npurt::mem_pool_attr;
  CHECK(pool.get_attribute(A::release_threshold) == 0);
  CHECK(pool.get_attribute(A::reuse_allow_opportunistic) == 1);
  void* p = pool.malloc_async(3 << 20, s);
  CHECK(pool.get_attribute(A::used_mem_current) >= (3u << 20));
  CHECK(pool.get_attribute(A::reserved_mem_current) >= pool.get_attribute(A::used_mem_current));
  pool.free_async(p, s);
  CHECK(pool.get_attribute(A::used_mem_current) == 0);
  CHECK(pool.get_attribute(A::used_mem_high) >= (3u << 20));
  pool.set_attribute(A::used_mem_high, 0);
  CHECK(pool.get_attribute(A::used_mem_high) == 0);
  CHECK_THROWS_AS(pool.set_attribute(A::reserved_mem_current, 5), npurt::caller_error);
  // With the default threshold of 0, a synchronize gives the cached memory back.
  CHECK(pool.get_attribute(A::reserved_mem_current) > 0);
  dev.synchronize();
  CHECK(pool.get_attribute(A::reserved_mem_current) == 0);
  pool.set_attribute(A::release_threshold, 64 << 20);
  void* q = pool.malloc_async(3 << 20, s);
  pool.free_async(q, s);
  dev.synchronize();
  CHECK(pool.get_attribute(A::reserved_mem_current) > 0);
  pool.trim_to(0);
  CHECK(pool.get_attribute(A::reserved_mem_current) == 0);
}

TEST_CASE("the compact strategy keeps one growable arena per stream with working data", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  o.pool_size_limit = 256 << 20;
  auto& pool = dev.configure_mem_pool(o);
  std::vector<std::uint8_t> in(5 << 20), out(5 << 20);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 31);
  void* a = pool.malloc_async(3 << 20, s);
  void* b = pool.malloc_async(5 << 20, s);  // spans mapping granules
  CHECK(reinterpret_cast<std::uintptr_t>(b) > reinterpret_cast<std::uintptr_t>(a));
  s.memcpy(b, in.size(), in.data(), in.size());
  s.memcpy(out.data(), out.size(), b, out.size());
  s.synchronize();
  CHECK(out == in);
  pool.free_async(a, s);
  pool.free_async(b, s);
}

namespace {
// Resident host memory of this process (Linux), or 0 where it cannot be read.
std::size_t resident_bytes() {
  std::size_t pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%zu %zu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * 4096;
}
}  // namespace

TEST_CASE("a functional compact arena takes host memory only for the chunks its work reaches", "[core][pool]") {
  // The arena's address space is the whole 64 GiB device, more than most hosts hold: the host
  // backs only the 2 MiB chunks copies reach, and what was never written reads as zeros.
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto c = simple();
  c.properties.memory_bytes = std::size_t{64} << 30;
  npurt::system sys{c};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  auto& pool = dev.configure_mem_pool(o);
  const std::size_t resident_before = resident_bytes();
  CHECK(dev.memory_info().host_backing == 0);
  auto* p = static_cast<std::uint8_t*>(pool.malloc_async(6 * mib, s));  // three granules mapped
  const auto snap = pool.snapshot();
  REQUIRE(snap.segments.size() == 1);
  REQUIRE(snap.segments[0].addr == reinterpret_cast<std::uint64_t>(p));  // offsets below are the arena's
  CHECK(dev.memory_info().host_backing == 0);  // mapped, but nothing reached it yet

  std::vector<std::uint8_t> in(4096);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 7 + 1);
  s.memcpy(p + 3 * mib, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device);  // chunk 1
  std::vector<std::uint8_t> head(mib, 0xff), back(in.size(), 0);
  s.memcpy(head.data(), head.size(), p, head.size(), npurt::memcpy_kind::device_to_host);  // chunk 0
  s.memcpy(back.data(), back.size(), p + 3 * mib, back.size(), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(back == in);
  CHECK(std::all_of(head.begin(), head.end(), [](std::uint8_t v) { return v == 0; }));
  CHECK(dev.memory_info().host_backing == 4 * mib);  // chunks 0 and 1; chunk 2 never reached
  // A raw allocation is backed whole, in its 512-byte granules.
  void* raw = dev.malloc(1000);
  CHECK(dev.memory_info().host_backing == 4 * mib + 1024);
  dev.free(raw);
  CHECK(dev.memory_info().host_backing == 4 * mib);
  const std::size_t resident_after = resident_bytes();
  if (resident_before && resident_after > resident_before) CHECK(resident_after - resident_before < 256 * mib);

  pool.free_async(p, s);
  s.synchronize();
  dev.configure_mem_pool({});  // the arena's address range goes, and its host store with it
  CHECK(dev.memory_info().host_backing == 0);
}

TEST_CASE("an arena range that is no whole number of chunks counts its last chunk short", "[core][pool]") {
  // A 3 MiB + 4 KiB range: a 2 MiB chunk and one of 1 MiB + 4 KiB. Reading all of it reaches both.
  constexpr std::size_t bytes = (std::size_t{3} << 20) + 4096;
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  o.granule = 4096;
  o.arena_address_space = bytes;
  auto& pool = dev.configure_mem_pool(o);
  void* p = pool.malloc_async(bytes, s);
  std::vector<std::uint8_t> out(bytes, 1);
  s.memcpy(out.data(), out.size(), p, bytes, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(dev.memory_info().host_backing == bytes);
  CHECK(std::all_of(out.begin(), out.end(), [](std::uint8_t v) { return v == 0; }));
  pool.free_async(p, s);
}

TEST_CASE("a functional device backs a large allocation or pool segment only where work reaches it", "[core][pool]") {
  constexpr std::size_t mib = std::size_t{1} << 20;
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  // A raw allocation of 64 MiB: a 4 KiB copy into its 6th chunk and a read of its first MiB.
  auto* raw = static_cast<std::uint8_t*>(dev.malloc(64 * mib));
  CHECK(dev.memory_info().host_backing == 0);
  std::vector<std::uint8_t> in(4096);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 13 + 5);
  s.memcpy(raw + 11 * mib, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device);
  std::vector<std::uint8_t> head(mib, 0xff), back(in.size(), 0);
  s.memcpy(head.data(), head.size(), raw, head.size(), npurt::memcpy_kind::device_to_host);
  s.memcpy(back.data(), back.size(), raw + 11 * mib, back.size(), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(back == in);
  CHECK(std::all_of(head.begin(), head.end(), [](std::uint8_t v) { return v == 0; }));  // never written
  CHECK(dev.memory_info().host_backing == 4 * mib);  // chunks 0 and 5
  dev.free(raw);
  CHECK(dev.memory_info().host_backing == 0);
  // One block of a 30 MiB pool segment (the default strategy), written in one place.
  auto& pool = dev.mem_pool();
  auto* blk = static_cast<std::uint8_t*>(pool.malloc_async(30 * mib, s));
  CHECK(dev.memory_info().host_backing == 0);
  s.memcpy(blk + 20 * mib, in.size(), in.data(), in.size(), npurt::memcpy_kind::host_to_device);
  s.memcpy(back.data(), back.size(), blk + 20 * mib, back.size(), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(back == in);
  CHECK(dev.memory_info().host_backing == 2 * mib);
  pool.free_async(blk, s);
  s.synchronize();
  pool.empty_cache();  // the segment goes back to the device, and its host store with it
  CHECK(dev.memory_info().host_backing == 0);
}

TEST_CASE("a timing-only device holds no host memory behind its device memory", "[core][pool]") {
  auto c = simple();
  c.functional = false;
  npurt::system sys{c};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  auto& pool = dev.configure_mem_pool(o);
  void* p = pool.malloc_async(4 << 20, s);
  void* raw = dev.malloc(1000);
  CHECK(dev.memory_info().host_backing == 0);
  dev.free(raw);
  pool.free_async(p, s);
}

TEST_CASE("the compact strategy gives back no pages whose stream-ordered free is still ahead", "[core][pool]") {
  // A copy queued before the free reads the block when it runs: empty_cache, trim_to and
  // trigger_gc must leave its pages mapped until then, as they leave a busy segment cached.
  enum class release { empty_cache, trim_to, trigger_gc, other_stream_sync };
  for (const release how : {release::empty_cache, release::trim_to, release::trigger_gc, release::other_stream_sync}) {
    INFO("release " << static_cast<int>(how));
    npurt::system sys{simple()};
    auto& dev = sys.device(0);
    auto s = dev.make_stream(), other = dev.make_stream();
    npurt::mem_pool_options o;
    o.strategy = npurt::allocation_strategy::compact;
    auto& pool = dev.configure_mem_pool(o);
    constexpr std::size_t n = std::size_t{4} << 20;  // two 2 MiB granules
    std::vector<std::uint8_t> in(n), out(n, 0);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint8_t>(i * 13 + 5);
    void* p = pool.malloc_async(n, s);
    s.memcpy(p, n, in.data(), n, npurt::memcpy_kind::host_to_device);
    s.launch(fixed(us(100)));
    s.memcpy(out.data(), n, p, n, npurt::memcpy_kind::device_to_host);
    pool.free_async(p, s);
    switch (how) {
      case release::empty_cache: pool.empty_cache(); break;
      case release::trim_to: pool.trim_to(0); break;
      case release::trigger_gc: pool.trigger_gc(); break;
      case release::other_stream_sync: other.synchronize(); break;  // release threshold 0
    }
    CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == n);
    CHECK_NOTHROW(s.synchronize());
    CHECK(out == in);
    // Once the free is behind its stream the pages go.
    pool.empty_cache();
    CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == 0);
    CHECK(pool.allocator().check_consistency().empty());
  }
}

TEST_CASE("configure_mem_pool with invalid options keeps the existing pool", "[core][pool][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* p = pool.malloc_async(4096, s);
  std::vector<char> in(4096, 42), out(4096, 0);
  s.memcpy(p, 4096, in.data(), 4096, npurt::memcpy_kind::host_to_device);
  s.synchronize();
  const auto reserved = pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current);
  REQUIRE(reserved > 0);
  npurt::mem_pool_options bad;
  bad.granule = 3;
  try {
    dev.configure_mem_pool(bad);
    FAIL("no exception");
  } catch (const std::system_error& e) { CHECK(e.code() == npurt::errc::invalid_config); }
  CHECK(dev.mem_pool().get_attribute(npurt::mem_pool_attr::reserved_mem_current) == reserved);
  std::error_code ec;
  s.memcpy(out.data(), out.size(), p, 4096, npurt::memcpy_kind::device_to_host, ec);
  CHECK_FALSE(ec);
  s.synchronize();
  CHECK(out == in);
  dev.mem_pool().free_async(p, s, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a mem_pool reference stays valid across configure_mem_pool and device reset", "[core][pool]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto& pool = dev.mem_pool();
  {
    auto s = dev.make_stream();
    pool.free_async(pool.malloc_async(4096, s), s);
  }
  npurt::mem_pool_options o;
  o.release_threshold = 1 << 20;
  CHECK(&dev.configure_mem_pool(o) == &pool);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::release_threshold) == (1u << 20));
  auto s = dev.make_stream();
  void* p = pool.malloc_async(4096, s);
  dev.reset();
  CHECK(&dev.mem_pool() == &pool);
  // The reset dropped the old blocks and the options with them, as a new default pool would.
  CHECK(pool.get_attribute(npurt::mem_pool_attr::reserved_mem_current) == 0);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::release_threshold) == 0);
  auto s2 = dev.make_stream();
  std::error_code ec;
  pool.free_async(p, s2, ec);
  CHECK(ec);
  CHECK_NOTHROW(pool.free_async(pool.malloc_async(4096, s2), s2));
}

TEST_CASE("an async_malloc waiting to retry uses the pool's new allocator after configure_mem_pool", "[core][pool]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  auto& pool = opportunistic_only(dev);
  npurt::async_error_code got = npurt::make_error_code(npurt::errc::invalid_argument);
  void* b = nullptr;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    void* a = co_await pool.async_malloc(40 << 20, s1, asio::use_awaitable);
    s1.launch(fixed(us(500)));
    co_await pool.async_free(a, s1, asio::use_awaitable);
    // Does not fit beside s1's busy cached block: waits for the device, then retries.
    pool.async_malloc(40 << 20, s2, [&](npurt::async_error_code ec, void* q) {
      got = ec;
      b = q;
    });
    (void)opportunistic_only(dev);  // the same options: drops the old allocator while the retry waits
  }());
  CHECK_FALSE(got);
  REQUIRE(b != nullptr);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == (40u << 20));
  pool.free_async(b, s2);
}

TEST_CASE("a device reset while an async_malloc waits to retry completes it once, with operation_aborted",
          "[core][pool][reset]") {
  // The reset aborts the device work the retry waits for: the waiter hears it (a typed error and
  // no pointer), is not lost, and the pool serves the next request from its fresh allocator.
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  auto& pool = opportunistic_only(dev);
  int calls = 0;
  npurt::async_error_code got;
  void* b = reinterpret_cast<void*>(std::uintptr_t{1});
  run_coro(sys, [&]() -> asio::awaitable<void> {
    void* a = co_await pool.async_malloc(40 << 20, s1, asio::use_awaitable);
    s1.launch(fixed(us(500)));
    co_await pool.async_free(a, s1, asio::use_awaitable);
    pool.async_malloc(40 << 20, s2, [&](npurt::async_error_code ec, void* q) {
      ++calls;
      got = ec;
      b = q;
    });
    dev.reset();
  }());
  CHECK(calls == 1);
  CHECK(got == npurt::errc::operation_aborted);
  CHECK(b == nullptr);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == 0);
  auto s3 = dev.make_stream();
  void* c = pool.malloc_async(40 << 20, s3);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == (40u << 20));
  pool.free_async(c, s3);
}

TEST_CASE("an async_malloc whose pool is reconfigured or reset before its handler runs gets no stale pointer",
          "[core][pool][reset]") {
  // The allocation is made at the call and handed over later (posted): configure_mem_pool or a
  // reset in between releases the allocator's memory. The handler must then hear a typed error,
  // not receive a pointer to memory that is gone; with nothing in between, the pointer is live.
  for (const char* what : {"none", "configure_mem_pool", "reset"}) {
    INFO(what);
    npurt::system sys{simple()};
    auto& dev = sys.device(0);
    auto& pool = dev.mem_pool();
    auto s = dev.make_stream();
    int calls = 0;
    std::error_code got;
    void* p = nullptr;
    const std::string w = what;
    run_coro(sys, [&]() -> asio::awaitable<void> {
      pool.async_malloc(4096, s, [&](npurt::async_error_code ec, void* q) {
        ++calls;
        got = ec;
        p = q;
      });
      if (w == "configure_mem_pool") (void)dev.configure_mem_pool({});
      if (w == "reset") dev.reset();
      co_return;
    }());
    CHECK(calls == 1);
    if (w == "none") {
      REQUIRE_FALSE(got);
      REQUIRE(p != nullptr);
      CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == 4096);
      std::error_code ec;
      pool.free_async(p, s, ec);
      CHECK_FALSE(ec);
    } else {
      CHECK(got == npurt::errc::operation_aborted);
      CHECK(p == nullptr);
      CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == 0);
      CHECK_THAT(sys.recent_error_message(), Catch::Matchers::ContainsSubstring("before the allocation reached"));
    }
  }
}

TEST_CASE("malloc_async of 0 bytes is zero_size and free_async of null is null_pointer, in every form",
          "[core][pool][error]") {
  // docs/memory.md: as device::malloc and aclrtMalloc (and cuMemAlloc, whose reference refuses
  // 0 bytes), a zero size is refused rather than answered with a null or a 512 B block; every
  // success is a non-null pointer, so a null given back is the caller's mistake.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  using Catch::Matchers::ContainsSubstring;
  std::error_code ec;
  CHECK(dev.malloc_async(0, s, ec) == nullptr);
  CHECK(ec == npurt::errc::zero_size);
  // Named after the call the user made (once), not the allocator inside the pool.
  using Catch::Matchers::StartsWith;
  const std::string said = "npurt::mem_pool::malloc_async: 0 bytes requested";
  CHECK_THAT(sys.recent_error_message(), StartsWith(said));
  try {
    (void)dev.malloc_async(0, s);
    FAIL("malloc_async(0) returned");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::zero_size);
    CHECK_THAT(e.what(), StartsWith(said));
  }
  try {
    (void)dev.malloc_async(SIZE_MAX, s);
    FAIL("malloc_async(SIZE_MAX) returned");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::size_overflow);
    CHECK_THAT(e.what(), StartsWith("npurt::mem_pool::malloc_async: " + std::to_string(SIZE_MAX) + " bytes"));
  }
  dev.free_async(nullptr, s, ec);
  CHECK(ec == npurt::errc::null_pointer);
  try {
    dev.free_async(nullptr, s);
    FAIL("free_async(nullptr) returned");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::null_pointer);
    CHECK_THAT(e.what(), ContainsSubstring("npurt::mem_pool::free_async: the pointer is null"));
  }
  npurt::async_error_code a_ec, f_ec;
  void* a_p = reinterpret_cast<void*>(std::uintptr_t{1});
  run_coro(sys, [&]() -> asio::awaitable<void> {
    std::tie(a_ec, a_p) = co_await dev.async_malloc(0, s, asio::as_tuple(asio::use_awaitable));
    std::tie(f_ec) = co_await dev.async_free(nullptr, s, asio::as_tuple(asio::use_awaitable));
  }());
  CHECK(a_ec == npurt::errc::zero_size);
  CHECK(a_p == nullptr);
  CHECK(f_ec == npurt::errc::null_pointer);
  // Nothing was taken from the device or counted.
  CHECK(dev.mem_pool().get_attribute(npurt::mem_pool_attr::reserved_mem_current) == 0);
  CHECK(dev.mem_pool().stats().num_ooms == 0);
}

}  // namespace

TEST_CASE("a memory pool attribute id that names no attribute is unknown, not read-only", "[core][pool][error]") {
  npurt::system sys{simple()};
  auto& pool = sys.device(0).mem_pool();
  using A = npurt::mem_pool_attr;
  using Catch::Matchers::ContainsSubstring;
  for (const int id : {0, 9, -1}) {
    INFO(id);
    try {
      pool.set_attribute(static_cast<A>(id), 0);
      FAIL("set_attribute accepted an unknown id");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::invalid_argument);
      CHECK_THAT(e.what(), ContainsSubstring("unknown memory pool attribute id " + std::to_string(id)));
      CHECK_THAT(e.what(), !ContainsSubstring("read-only"));
    }
    CHECK_THROWS_WITH((void)pool.get_attribute(static_cast<A>(id)),
                      ContainsSubstring("unknown memory pool attribute id " + std::to_string(id)));
  }
  // The current figures are the read-only ones, and say so.
  CHECK_THROWS_WITH(pool.set_attribute(A::used_mem_current, 0), ContainsSubstring("read-only"));
  CHECK_THROWS_WITH(pool.set_attribute(A::reserved_mem_current, 0), ContainsSubstring("read-only"));
  CHECK(pool.get_attribute(A::release_threshold) == 0);  // nothing changed
}

TEST_CASE("free_async of another device's memory is stream_device_mismatch, as device::free says",
          "[core][pool][error]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto& d1 = sys.device(1);
  auto s0 = d0.make_stream();
  auto s1 = d1.make_stream();
  void* raw1 = d1.malloc(4096);
  void* block1 = d1.mem_pool().malloc_async(4096, s1);
  std::error_code ec;
  d0.free(raw1, ec);
  REQUIRE(ec == npurt::errc::stream_device_mismatch);
  for (void* p : {raw1, block1}) {
    d0.mem_pool().free_async(p, s0, ec);
    CHECK(ec == npurt::errc::stream_device_mismatch);
    try {
      d0.mem_pool().free_async(p, s0);
      FAIL("free_async accepted another device's memory");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::stream_device_mismatch);
      CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("is memory of device 1") &&
                               Catch::Matchers::ContainsSubstring("the pool's device is 0"));
    }
    npurt::async_error_code async_ec;
    d0.mem_pool().async_free(p, s0, [&](npurt::async_error_code e) { async_ec = e; });
    sys.run();
    CHECK(async_ec == npurt::errc::stream_device_mismatch);
  }
  // A stream of the other device still names the stream.
  void* block0 = d0.mem_pool().malloc_async(4096, s0);
  CHECK_THROWS_WITH(d0.mem_pool().free_async(block0, s1), Catch::Matchers::ContainsSubstring("stream is of device 1"));
  // Nothing was lost: every block and allocation is still live, and goes back where it belongs.
  d1.mem_pool().free_async(block1, s1);
  d0.mem_pool().free_async(block0, s0);
  d1.free(raw1);
  CHECK(d1.mem_pool().stats().allocated_bytes[0].current == 0);
  CHECK(d0.mem_pool().stats().allocated_bytes[0].current == 0);
}

TEST_CASE("out-of-memory messages say when no release can help, and what the pool holds cached",
          "[core][pool][error]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto what_of = [](auto call) -> std::string {
    try {
      call();
    } catch (const npurt::out_of_memory_error& e) { return e.what(); }
    return "no out_of_memory_error";
  };
  SECTION("a request larger than the device") {
    const std::string m = what_of([&] { (void)dev.mem_pool().malloc_async(65 << 20, s); });
    CHECK_THAT(m, Catch::Matchers::ContainsSubstring("larger than the device's whole capacity"));
    CHECK_THAT(m, !Catch::Matchers::ContainsSubstring("refusal not for lack of memory"));
  }
  SECTION("a request larger than the pool's size limit, with nothing reserved") {
    npurt::mem_pool_options o;
    o.pool_size_limit = 8 << 20;
    auto& pool = dev.configure_mem_pool(o);
    const std::string m = what_of([&] { (void)pool.malloc_async(9 << 20, s); });
    CHECK_THAT(m, Catch::Matchers::ContainsSubstring("The request alone is larger than the limit"));
  }
  SECTION("a device full for real is not called a transient refusal") {
    // 48 MiB held leaves 16 MiB free: the 18 MiB segment an 18 MiB request needs does not fit.
    void* held = dev.mem_pool().malloc_async(48 << 20, s);
    const std::string m = what_of([&] { (void)dev.mem_pool().malloc_async(18 << 20, s); });
    CHECK_THAT(m, Catch::Matchers::ContainsSubstring("Tried to allocate 18.00 MiB"));
    CHECK_THAT(m, !Catch::Matchers::ContainsSubstring("refusal not for lack of memory"));
    CHECK_THAT(m, !Catch::Matchers::ContainsSubstring("larger than the device's whole capacity"));
    dev.mem_pool().free_async(held, s);
  }
  SECTION("a raw malloc refused while the pool caches freed memory names the cached bytes") {
    void* p = dev.mem_pool().malloc_async(40 << 20, s);
    dev.mem_pool().free_async(p, s);  // cached by the pool: reserved, not allocated
    const std::string m = what_of([&] { (void)dev.malloc(32 << 20); });
    CHECK_THAT(m, Catch::Matchers::ContainsSubstring("40.00 MiB already allocated; 40.00 MiB of it cached unused by "
                                                     "the device's memory pool, which mem_pool().empty_cache()"));
    CHECK_THAT(m, !Catch::Matchers::ContainsSubstring("refusal not for lack of memory"));
    dev.mem_pool().empty_cache();
    void* q = dev.malloc(32 << 20);  // what the message said to do makes room
    CHECK(q != nullptr);
    dev.free(q);
  }
}

TEST_CASE("a pool refusal heard as an error_code leaves its report in recent_error_message", "[core][pool][error]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  // The error_code form.
  std::error_code ec;
  void* p = dev.mem_pool().malloc_async(100 << 20, s, ec);
  CHECK(p == nullptr);
  CHECK(ec == npurt::errc::out_of_memory);
  std::string m = sys.recent_error_message();
  CHECK_THAT(m, Catch::Matchers::StartsWith("npurt::mem_pool::malloc_async: NPU out of memory. Tried to allocate "
                                            "100.00 MiB. NPU 0 has a total capacity of 64.00 MiB"));
  CHECK(sys.recent_error_message().empty());  // read once, as aclGetRecentErrMsg
  // An await that hears the code alone.
  std::error_code heard;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    auto [e, q] = co_await dev.async_malloc(100 << 20, s, asio::as_tuple(asio::use_awaitable));
    heard = e;
    CHECK(q == nullptr);
  });
  CHECK(heard == npurt::errc::out_of_memory);
  m = sys.recent_error_message();
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("Tried to allocate 100.00 MiB"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("larger than the device's whole capacity"));
  // A successful allocation leaves nothing behind.
  void* ok = dev.mem_pool().malloc_async(1 << 20, s, ec);
  CHECK(!ec);
  CHECK(sys.recent_error_message().empty());
  dev.mem_pool().free_async(ok, s);
}

TEST_CASE("device::malloc_async and free_async are the default pool's, as cudaMallocAsync and cudaFreeAsync",
          "[core][pool]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<int> in(1024), out(1024, 0);
  std::iota(in.begin(), in.end(), -7);
  void* p = dev.malloc_async(in.size() * sizeof(int), s);
  CHECK(dev.mem_pool().stats().allocated_bytes[npurt::stat_all].current == 4096);
  s.memcpy(p, 4096, in.data(), 4096, npurt::memcpy_kind::host_to_device);
  s.memcpy(out.data(), 4096, p, 4096, npurt::memcpy_kind::device_to_host);
  dev.free_async(p, s);
  CHECK(dev.mem_pool().stats().allocated_bytes[npurt::stat_all].current == 0);
  s.synchronize();
  CHECK(out == in);
  // The error_code forms report what the pool's do.
  std::error_code ec;
  CHECK(dev.malloc_async(100 << 20, s, ec) == nullptr);
  CHECK(ec == npurt::errc::out_of_memory);
  dev.free_async(p, s, ec);  // freed already
  CHECK(ec);
  CHECK_THROWS_AS(dev.free_async(p, s), npurt::caller_error);
}

TEST_CASE("configure_mem_pool refuses another thread and an observer's report, and changes nothing",
          "[core][pool][thread]") {
  // It destroys the pool's allocator: from another thread that races with the loop, and from a
  // report of the allocator's own bookkeeping (on_memory) it would destroy the allocator that is
  // still serving the allocation being reported.
  struct reconfigurer final : npurt::observer {
    npurt::device* dev = nullptr;
    std::error_code ec;
    void on_memory(const npurt::memory_info&) override {
      if (!dev) return;
      try {
        std::exchange(dev, nullptr)->configure_mem_pool({});
      } catch (const npurt::caller_error& e) { ec = e.code(); }
    }
  } obs;
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(), opts};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* live = dev.malloc_async(1024, s);
  std::error_code thread_ec;
  std::thread other([&] {
    try {
      dev.configure_mem_pool({});
    } catch (const npurt::caller_error& e) { thread_ec = e.code(); }
  });
  other.join();
  CHECK(thread_ec == npurt::errc::wrong_thread);
  sys.add_observer(obs);
  obs.dev = &dev;
  void* p = dev.malloc_async(1 << 20, s);
  sys.remove_observer(obs);
  CHECK(obs.ec == npurt::errc::not_supported);
  // Neither call released anything: both blocks are live and usable.
  std::error_code ec;
  s.memset(live, 1024, 0, 1024, ec);
  CHECK_FALSE(ec);
  s.memset(p, 1 << 20, 0, 1 << 20, ec);
  CHECK_FALSE(ec);
  dev.free_async(p, s);
  dev.free_async(live, s);
  s.synchronize();
}

TEST_CASE("an arena address space larger than the device is refused where the pool is made", "[core][pool][error]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  const std::size_t capacity = std::size_t{64} << 20;  // 67108864 bytes
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  o.arena_address_space = capacity + 1;
  const auto names_the_option = [](const std::string& what) {
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("arena_address_space of 67108865 bytes"));
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("capacity of 67108864 bytes"));
  };
  bool made_before = false;
  SECTION("the device's first pool: none is made") {}
  SECTION("a configured pool: its options stay") {
    npurt::mem_pool_options kept;
    kept.release_threshold = 4096;
    dev.configure_mem_pool(kept);
    made_before = true;
  }
  SECTION("throwing form") {
    try {
      dev.configure_mem_pool(o);
      FAIL("accepted an arena larger than the device");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::invalid_config);
      names_the_option(e.what());
    }
  }
  std::error_code ec;
  CHECK(dev.configure_mem_pool(o, ec) == nullptr);
  CHECK(ec == npurt::errc::invalid_config);
  names_the_option(sys.recent_error_message());
  // Nothing was taken from the device, and the pool is the one there was (or a default one).
  CHECK(dev.memory_info().free == capacity);
  CHECK(dev.mem_pool().options().arena_address_space == 0);
  CHECK(dev.mem_pool().options().strategy == npurt::allocation_strategy::segmented);
  CHECK(dev.mem_pool().options().release_threshold == (made_before ? 4096U : 0U));
}

TEST_CASE("an arena address space equal to the device's capacity is accepted", "[core][pool]") {
  npurt::system sys{small_device(64)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::mem_pool_options o;
  o.strategy = npurt::allocation_strategy::compact;
  o.arena_address_space = std::size_t{64} << 20;
  std::error_code ec;
  npurt::mem_pool* pool = dev.configure_mem_pool(o, ec);
  REQUIRE(!ec);
  REQUIRE(pool == &dev.mem_pool());
  CHECK(pool->options().arena_address_space == o.arena_address_space);
  void* p = pool->malloc_async(1 << 20, s);
  CHECK(p != nullptr);
  pool->free_async(p, s);
  CHECK_NOTHROW(dev.configure_mem_pool(o));
}
