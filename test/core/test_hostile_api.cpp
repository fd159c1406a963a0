// The public API under hostile input: handles that outlive their system, times and sizes at the
// ends of their ranges, cost models fed absurd shapes, and events of another system. Every case
// gets a typed error naming what was wrong (or a correct result), never undefined behaviour, and
// fire-and-forget failures surface at the next synchronize. Run under ASan+UBSan too: a wrong
// implementation here is a use-after-free or a signed overflow before it is a wrong value.
#include <npurt/npurt.hpp>
#include <npurt/sim/preset.hpp>

#include "common.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr picoseconds max_ps = picoseconds::max();

// Completes an async operation on a private io_context, so that it can run after the system is
// gone, and returns its error.
template <class Start>
npurt::async_error_code complete_on_own_context(Start start) {
  asio::io_context ioc;
  npurt::async_error_code got;
  bool done = false;
  start(asio::bind_executor(ioc, [&](npurt::async_error_code ec) {
    got = ec;
    done = true;
  }));
  CHECK_FALSE(done);  // never inside the call
  ioc.run();
  CHECK(done);
  return got;
}

TEST_CASE("a stream that outlives its system is a null handle: every call is invalid_stream",
          "[core][hostile][lifetime]") {
  std::optional<npurt::system> sys{std::in_place, simple()};
  auto s = sys->device(0).make_stream();
  npurt::stream moved = sys->device(0).make_stream();
  s.launch(fixed(us(5)));  // still queued when the system dies
  REQUIRE(s.valid());
  sys.reset();

  CHECK_FALSE(s.valid());
  CHECK_FALSE(moved.valid());
  std::error_code ec;
  s.launch(fixed(us(1)), ec);
  CHECK(ec == npurt::errc::invalid_stream);
  CHECK_THROWS_AS(s.launch(fixed(us(1))), npurt::caller_error);
  CHECK_FALSE(s.query(ec));
  CHECK(ec == npurt::errc::invalid_stream);
  s.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::invalid_stream);
  std::vector<char> a(16), b(16);
  s.memcpy(a.data(), a.size(), b.data(), b.size(), npurt::memcpy_kind::host_to_host, ec);
  CHECK(ec == npurt::errc::invalid_stream);
  CHECK_THROWS_AS(s.priority(), npurt::caller_error);
  CHECK(complete_on_own_context([&](auto h) { s.async_launch(fixed(us(1)), std::move(h)); }) ==
        npurt::errc::invalid_stream);
  CHECK(complete_on_own_context([&](auto h) { s.async_synchronize(std::move(h)); }) == npurt::errc::invalid_stream);
  // Moving and destroying stale handles touches nothing.
  npurt::stream t = std::move(moved);
  t = std::move(s);
  CHECK_FALSE(t.valid());
}

TEST_CASE("events that outlive their system are null handles: every call is invalid_event",
          "[core][hostile][lifetime]") {
  std::optional<npurt::system> sys{std::in_place, simple()};
  auto& dev = sys->device(0);
  auto s = dev.make_stream();
  auto start = dev.make_event();
  auto end = dev.make_event();
  s.record(start);
  npurt::event task = s.launch(fixed(us(3)));
  s.record(end);
  s.synchronize();
  REQUIRE(npurt::elapsed_time(start, end) > 0);
  const npurt::event copy_before = end;  // a const copy becomes null as well
  sys.reset();

  const npurt::event* const stale[] = {&start, &end, &task, &copy_before};
  for (const npurt::event* e : stale) {
    CHECK_FALSE(e->valid());
    std::error_code ec;
    CHECK_FALSE(e->query(ec));
    CHECK(ec == npurt::errc::invalid_event);
    e->synchronize(npurt::no_timeout, ec);
    CHECK(ec == npurt::errc::invalid_event);
    CHECK_FALSE(e->completion_time().has_value());
    CHECK(complete_on_own_context([&](auto h) { e->async_wait(std::move(h)); }) == npurt::errc::invalid_event);
  }
  std::error_code ec;
  CHECK(npurt::elapsed_time(start, end, ec) == 0);
  CHECK(ec == npurt::errc::invalid_event);
  CHECK_THROWS_AS(npurt::elapsed_time(start, end), npurt::caller_error);
  npurt::event copy_after = task;  // copies of stale handles are stale too
  CHECK_FALSE(copy_after.valid());
}

TEST_CASE("moved event handles keep their tie to the system: every one becomes null when it dies",
          "[core][hostile][lifetime]") {
  std::optional<npurt::system> sys{std::in_place, simple()};
  auto& dev = sys->device(0);
  auto s = dev.make_stream();
  npurt::event a = dev.make_event();
  npurt::event b = std::move(a);  // constructed from a move
  CHECK_FALSE(a.valid());
  REQUIRE(b.valid());
  npurt::event c = dev.make_event();
  c = std::move(b);  // assigned over a live user event, which this handle gives up
  CHECK_FALSE(b.valid());
  auto& self = c;
  c = std::move(self);  // self-move keeps the handle
  REQUIRE(c.valid());
  s.record(c);
  std::vector<npurt::event> many;  // reallocation moves every element again
  for (int i = 0; i < 100; ++i) many.push_back(s.launch(fixed(us(1))));
  many.push_back(c);
  s.synchronize();
  CHECK(c.query());
  CHECK(many.back().query());
  sys.reset();

  CHECK_FALSE(c.valid());
  for (const auto& e : many) CHECK_FALSE(e.valid());
  std::error_code ec;
  CHECK_FALSE(c.query(ec));
  CHECK(ec == npurt::errc::invalid_event);
}

TEST_CASE("device and host buffers that outlive their system are empty and free nothing", "[core][hostile][lifetime]") {
  std::optional<npurt::system> sys{std::in_place, simple()};
  npurt::device_buffer d(sys->device(0), 4096);
  npurt::host_buffer h(*sys, 4096);
  npurt::device_buffer moved_from(sys->device(0), 512);
  npurt::device_buffer moved = std::move(moved_from);
  REQUIRE(d);
  REQUIRE(h);
  REQUIRE(moved);
  sys.reset();
  CHECK_FALSE(d);
  CHECK(d.data() == nullptr);
  CHECK(d.size() == 0);
  CHECK_FALSE(h);
  CHECK(h.data() == nullptr);
  CHECK_FALSE(moved);
  d.reset();  // nothing to free: the memory went with the system
  npurt::host_buffer h2 = std::move(h);
  CHECK_FALSE(h2);
}

TEST_CASE("a communicator that outlives its system reports invalid and fails every call", "[core][hostile][lifetime]") {
  std::optional<npurt::system> sys{std::in_place, simple(2)};
  auto comm = npurt::communicator::init_all(*sys);
  auto s = sys->device(0).make_stream();
  REQUIRE(comm.valid());
  sys.reset();
  CHECK_FALSE(comm.valid());
  std::error_code ec;
  comm.barrier(s, ec);
  CHECK(ec);
  CHECK(ec == npurt::error_class::caller);
  const int colors[2] = {0, 1};
  CHECK_THROWS_AS(comm.split(colors), npurt::caller_error);
  CHECK_THROWS_AS(comm.abort(), npurt::caller_error);  // never a call into a dead system
  npurt::communicator copy = comm;
  CHECK_FALSE(copy.valid());
}

TEST_CASE("a negative fixed duration is rejected at launch, naming the duration", "[core][hostile][time]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::error_code ec;
  s.launch(fixed(picoseconds{-1}), ec);
  CHECK(ec == npurt::errc::invalid_argument);
  try {
    s.launch(fixed(picoseconds{-5}));
    FAIL("a negative duration was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("negative") && ContainsSubstring("-5"));
  }
  npurt::async_error_code async_ec;
  s.async_launch(fixed(picoseconds{-1}), [&](npurt::async_error_code c) { async_ec = c; });
  sys.run();
  CHECK(async_ec == npurt::errc::invalid_argument);
  // Nothing was enqueued: no launch overhead was charged and the clock did not move.
  CHECK(s.query());
  CHECK(sys.now() == npurt::sim_time{});
}

TEST_CASE("kernels that would end past the end of virtual time fail with time_overflow at the next synchronize",
          "[core][hostile][time]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  const picoseconds four_e18{4'000'000'000'000'000'000};
  s.launch(fixed(four_e18, "first"));
  s.launch(fixed(four_e18, "second"));
  s.launch(fixed(four_e18, "third"));  // 1.2e19 ps > 2^63 - 1
  try {
    s.synchronize();
    FAIL("synchronize returned normally after the clock would have overflowed");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::time_overflow);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("third"));
  }
  // The clock stopped where the two kernels that fit ended: not wrapped, not saturated.
  const auto overhead = sys.options().launch_overhead;
  CHECK(sys.now() == npurt::sim_time{overhead + four_e18 + four_e18});
  // Reported once; the stream keeps working at the end of what time can count.
  CHECK(s.query());
  std::error_code ec;
  s.launch(fixed(max_ps, "longest"), ec);  // accepted: only its end is out of range
  CHECK(!ec);
  s.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::time_overflow);
  CHECK(sys.now().time_since_epoch() > picoseconds{0});
}

TEST_CASE("a launch latency plus a duration past the end of time fails instead of wrapping", "[core][hostile][time]") {
  npurt::system sys{simple(1, picoseconds{1'000})};
  auto s = sys.device(0).make_stream();
  auto e = s.launch(fixed(max_ps - picoseconds{10}, "almost forever"));
  std::error_code ec;
  e.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::time_overflow);
  CHECK(sys.now().time_since_epoch() >= picoseconds{0});
}

TEST_CASE("timeouts near the end of virtual time wait as long as it takes", "[core][hostile][time]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  s.launch(fixed(us(10)));
  s.synchronize();
  const auto t0 = sys.now();
  REQUIRE(t0.time_since_epoch() > picoseconds{0});  // now + max would overflow

  auto e = s.launch(fixed(us(10)));
  std::error_code ec;
  e.synchronize(max_ps, ec);
  CHECK(!ec);
  s.launch(fixed(us(10)));
  s.synchronize(max_ps, ec);
  CHECK(!ec);
  s.launch(fixed(us(10)));
  dev.synchronize(max_ps, ec);
  CHECK(!ec);
  const auto overhead = sys.options().launch_overhead;
  CHECK(sys.now() == t0 + 3 * (overhead + us(10)));

  npurt::async_error_code sync_ec = npurt::errc::not_supported, wait_ec = npurt::errc::not_supported;
  auto last = s.launch(fixed(us(10)));
  s.async_synchronize(max_ps, [&](npurt::async_error_code c) { sync_ec = c; });
  last.async_wait(max_ps - picoseconds{1}, [&](npurt::async_error_code c) { wait_ec = c; });
  sys.run();
  CHECK(!sync_ec);
  CHECK(!wait_ec);
  // No timer at the end of time was left behind to drag the clock there.
  CHECK(sys.now() == t0 + 4 * (overhead + us(10)));
}

// An enormous overhead put the host lane, and with it the clock, at the end of virtual time
// after a launch or two, silently: sys.now() read 2^63 - 1 ps.
TEST_CASE("a launch overhead above max_launch_overhead is refused when the system is built", "[core][hostile][time]") {
  const picoseconds one_second{1'000'000'000'000};  // npurt::max_launch_overhead
  for (const picoseconds bad : {picoseconds::max(), one_second + picoseconds{1}}) {
    npurt::system_options opts;
    opts.launch_overhead = bad;
    try {
      npurt::system sys{simple(), opts};
      FAIL("a launch overhead of " << bad.count() << " ps was accepted");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::invalid_config);
      CHECK_THAT(std::string(e.what()), ContainsSubstring("system_options::launch_overhead of " +
                                                          std::to_string(bad.count()) + " ps is more than"));
    }
  }
  // The bound itself is taken, and costs what it says: 1 s of host time, then the 1 us kernel.
  npurt::system_options opts;
  opts.launch_overhead = one_second;
  npurt::system sys{simple(), opts};
  auto s = sys.device(0).make_stream();
  s.launch(fixed(us(1)));
  sys.run();
  CHECK(sys.now() == npurt::sim_time{picoseconds{1'000'000'000'000 + 1'000'000}});
}

TEST_CASE("out-of-range times in the configuration are rejected when the system is built", "[core][hostile][time]") {
  npurt::system_options opts;
  opts.launch_overhead = picoseconds{-1};
  try {
    npurt::system sys{simple(), opts};
    FAIL("a negative launch overhead was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_config);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("launch_overhead"));
  }
  auto cfg = simple(1, picoseconds{-1});
  CHECK_THROWS_AS(npurt::system{cfg}, npurt::caller_error);
  cfg = simple();
  cfg.host_copy_bandwidth = std::numeric_limits<double>::quiet_NaN();
  try {
    npurt::system sys{cfg};
    FAIL("a NaN bandwidth was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_config);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("host_copy_bandwidth"));
  }
  cfg = simple();
  cfg.properties.hbm_bandwidth = 0;
  CHECK_THROWS_AS(npurt::system{cfg}, npurt::caller_error);
}

TEST_CASE("elapsed_time of events of two different systems is an error, not 0", "[core][hostile][event]") {
  npurt::system a{simple()};
  npurt::system b{simple()};
  auto sa = a.device(0).make_stream();
  auto sb = b.device(0).make_stream();
  auto ea = a.device(0).make_event();
  auto eb = b.device(0).make_event();
  sa.record(ea);
  sb.launch(fixed(us(7)));
  sb.record(eb);
  sa.synchronize();
  sb.synchronize();
  std::error_code ec;
  CHECK(npurt::elapsed_time(ea, eb, ec) == 0);
  CHECK(ec == npurt::errc::invalid_event);
  try {
    (void)npurt::elapsed_time(ea, eb);
    FAIL("elapsed_time across systems returned a value");
  } catch (const npurt::caller_error& e) { CHECK_THAT(std::string(e.what()), ContainsSubstring("different systems")); }
  // Nor may a stream record or wait on another system's event (same ids, other system).
  sa.record(eb, ec);
  CHECK(ec == npurt::errc::invalid_event);
  sa.wait(eb, ec);
  CHECK(ec == npurt::errc::invalid_event);
}

TEST_CASE("copies and allocations of sizes that cannot fit are rejected before anything runs",
          "[core][hostile][size]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<std::byte> small(64), other(64);
  constexpr std::size_t half = std::numeric_limits<std::size_t>::max() / 2;
  std::error_code ec;
  // Pageable memory: npurt cannot know its size, but no object reaches past the address space.
  s.memcpy(other.data(), half, small.data(), half, npurt::memcpy_kind::host_to_host, ec);
  CHECK(ec == npurt::errc::size_overflow);
  s.memcpy(other.data(), SIZE_MAX, small.data(), SIZE_MAX - 8, npurt::memcpy_kind::host_to_host, ec);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK(complete_on_own_context([&](auto h) {
          s.async_memcpy(other.data(), half, small.data(), half, npurt::memcpy_kind::host_to_host, std::move(h));
        }) == npurt::errc::size_overflow);
  CHECK_THROWS_AS(s.memcpy(other.data(), half, small.data(), half, npurt::memcpy_kind::host_to_host),
                  npurt::caller_error);
  // Device and pinned memory: their sizes are known exactly.
  npurt::device_buffer d(dev, 4096);
  npurt::host_buffer h(sys, 4096);
  s.memcpy(h.data(), half, d.data(), half, npurt::memcpy_kind::device_to_host, ec);
  CHECK(ec == npurt::errc::size_overflow);
  s.memcpy(d.data(), d.size(), h.data(), 4097, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::size_overflow);
  s.memset(d.data(), SIZE_MAX, 0, SIZE_MAX, ec);
  CHECK(ec == npurt::errc::size_overflow);
  // Allocations: rounding SIZE_MAX up to the granule must not wrap to a tiny block. Such a size
  // is a bad argument for the raw and the pool allocation alike; one that is representable but
  // more than the device holds is out of memory for both.
  auto& pool = dev.mem_pool();
  CHECK(dev.malloc(SIZE_MAX, ec) == nullptr);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK(dev.malloc(SIZE_MAX - 100, ec) == nullptr);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK(pool.malloc_async(SIZE_MAX, s, ec) == nullptr);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK(pool.malloc_async(SIZE_MAX - 100, s, ec) == nullptr);
  CHECK(ec == npurt::errc::size_overflow);
  try {
    (void)dev.malloc(SIZE_MAX);
    FAIL("malloc(SIZE_MAX) returned");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::size_overflow);
    CHECK(std::string(e.what()).find("overflowing size_t") != std::string::npos);
  }
  try {
    (void)pool.malloc_async(SIZE_MAX, s);
    FAIL("malloc_async(SIZE_MAX) returned");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::size_overflow);
    CHECK(std::string(e.what()).find("overflowing size_t") != std::string::npos);
  }
  const std::size_t too_big = dev.properties().memory_bytes * 2;
  CHECK(dev.malloc(too_big, ec) == nullptr);
  CHECK(ec == npurt::errc::out_of_memory);
  CHECK(pool.malloc_async(too_big, s, ec) == nullptr);
  CHECK(ec == npurt::errc::out_of_memory);
  for (auto alloc :
       {+[](npurt::device& d, npurt::stream&, std::size_t n) { return d.malloc(n); },
        +[](npurt::device& d, npurt::stream& st, std::size_t n) { return d.mem_pool().malloc_async(n, st); }}) {
    try {
      (void)alloc(dev, s, too_big);
      FAIL("an allocation larger than the device returned");
    } catch (const npurt::out_of_memory_error& e) {
      CHECK(e.code() == npurt::errc::out_of_memory);
      CHECK(e.requested() == too_big);
      CHECK(e.details().total == dev.properties().memory_bytes);
    }
  }
  CHECK(pool.stats().allocated_bytes[0].current == 0);
  CHECK(sys.host_malloc(SIZE_MAX, ec) == nullptr);
  CHECK(ec);
  try {
    (void)sys.host_malloc(SIZE_MAX);
    FAIL("host_malloc(SIZE_MAX) returned");
  } catch (const npurt::error& e) {
    CHECK(e.code() == npurt::errc::out_of_memory);
    CHECK(std::string(e.what()).find("pinned host memory") != std::string::npos);
  }
  // Nothing above was enqueued, and a right copy still runs.
  CHECK(s.query());
  CHECK(sys.now() == npurt::sim_time{});
  s.memcpy(other.data(), other.size(), small.data(), small.size(), npurt::memcpy_kind::host_to_host);
  s.synchronize();
}

TEST_CASE("a timing-only matmul too large for the cost model's counters is rejected at launch",
          "[core][hostile][kernel]") {
  npurt::sim::sim_options timing_only;
  timing_only.functional = false;
  npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(1), timing_only)};
  auto s = sys.device(0).make_stream();
  const std::int64_t n = std::int64_t{1} << 21;
  auto mm = [](std::int64_t m, std::int64_t k, std::int64_t nn) {
    return npurt::kernel_desc{npurt::kernels::matmul{{nullptr, npurt::shape{m, k}, npurt::dtype::f16},
                                                     {nullptr, npurt::shape{k, nn}, npurt::dtype::f16},
                                                     {nullptr, npurt::shape{m, nn}, npurt::dtype::f16}}};
  };
  std::error_code ec;
  s.launch(mm(n, n, n), ec);  // 2^63 multiply-accumulates
  CHECK(ec == npurt::errc::invalid_shape);
  CHECK(s.query());
  // A large accepted size still gives a cost that is a positive, representable time.
  auto e = s.launch(mm(std::int64_t{1} << 19, std::int64_t{1} << 19, std::int64_t{1} << 19), ec);
  REQUIRE(!ec);
  e.synchronize();
  CHECK(sys.now().time_since_epoch() > picoseconds{0});
}

// Work counts the cost model computes from a kernel's dimensions (multiply-accumulates, window
// reads) are bounded at 2^60 and counted with overflow checks: each tensor below is a valid size
// on its own (at most 2^52 elements), only the product of their dimensions is too large.
namespace work_bound {

using npurt::dtype;
using npurt::shape;
using npurt::tensor_desc;

constexpr std::int64_t p2(int e) { return std::int64_t{1} << e; }
tensor_desc t(shape s) { return {nullptr, std::move(s), dtype::f16}; }

npurt::system timing_only_system() {
  npurt::sim::sim_options o;
  o.functional = false;
  return npurt::system{npurt::sim::make_backend(npurt::sim::presets::ascend910(1), o)};
}

// A stream of a timing-only Ascend 910, where shapes cost nothing to describe.
struct timing_only_stream {
  npurt::system sys = timing_only_system();
  npurt::stream s = sys.device(0).make_stream();
  std::error_code ec;
};

npurt::kernel_desc conv(std::int64_t co, std::int64_t hw, std::int64_t k) {
  // x [1, 2^20, hw + k - 1, hw + k - 1] * w [co, 2^20, k, k] -> y [1, co, hw, hw]
  const std::int64_t c = p2(20), in = hw + k - 1;
  return {npurt::kernels::conv2d{t({1, c, in, in}), t({co, c, k, k}), t({1, co, hw, hw})}};
}

}  // namespace work_bound

TEST_CASE("convolutions of more than 2^60 multiply-accumulates are invalid_shape naming the dimensions",
          "[core][hostile][kernel]") {
  using namespace work_bound;
  timing_only_stream w;
  auto& [sys, s, ec] = w;
  // N * Co * Ho * Wo * C * kh * kw: 1 * 2^20 * 2^10 * 2^10 * 2^20 = 2^60 is the largest accepted.
  (void)s.launch(conv(p2(20), p2(10), 1), ec);
  CHECK_FALSE(ec);
  s.launch(conv(p2(21), p2(10), 1), ec);  // 2^61
  CHECK(ec == npurt::errc::invalid_shape);
  // 2^15 * 2^15 outputs of a 2^15 x 2^15 window over 2^20 channels: 2^80, which wraps 64 bits.
  s.launch(conv(1, p2(15), p2(15)), ec);
  CHECK(ec == npurt::errc::invalid_shape);
  CHECK_THROWS_WITH(s.launch(conv(1, p2(15), p2(15))),
                    ContainsSubstring("conv2d") && ContainsSubstring("Ho 32768") && ContainsSubstring("kh 32768") &&
                        ContainsSubstring("C/groups 1048576") && ContainsSubstring("2^60 multiply-accumulates"));
  // The gradients run the same multiply-accumulates.
  const auto big = conv(1, p2(15), p2(15));
  const auto& f = std::get<npurt::kernels::conv2d>(big.op);
  s.launch({npurt::kernels::conv2d_backward_data{f.y, f.w, f.x}}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  s.launch({npurt::kernels::conv2d_backward_weight{f.x, f.y, f.w}}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  CHECK_THROWS_WITH(s.launch({npurt::kernels::conv2d_backward_weight{f.x, f.y, f.w}}),
                    ContainsSubstring("conv2d_backward_weight") && ContainsSubstring("kw 32768"));
  // A dilation of 2^31 - 1 over a 2^33-tap kernel: the dilated extent passes 2^63, the input
  // is far smaller than it.
  npurt::kernels::conv2d dil{t({1, 1, 4, 1}), t({1, 1, p2(33), 1}), t({1, 1, 1, 1})};
  dil.dilation = {INT32_MAX, 1};
  s.launch({dil}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  // Nothing was enqueued but the accepted convolution.
  CHECK(sys.now() == npurt::sim_time{});
}

TEST_CASE("batched matmuls and pooling windows past 2^60 are invalid_shape; a pad of 2^31 - 1 is invalid_argument",
          "[core][hostile][kernel]") {
  using namespace work_bound;
  timing_only_stream w;
  auto& [sys, s, ec] = w;
  auto bmm = [](std::int64_t b) {  // [b, 2^16, 2^16] x [b, 2^16, 2^16]: b * 2^48 multiply-accumulates
    const shape sh{b, p2(16), p2(16)};
    return npurt::kernel_desc{npurt::kernels::matmul{t(sh), t(sh), t(sh)}};
  };
  (void)s.launch(bmm(p2(12)), ec);
  CHECK_FALSE(ec);
  s.launch(bmm(p2(13)), ec);
  CHECK(ec == npurt::errc::invalid_shape);
  s.launch(bmm(p2(20)), ec);  // 2^68: wraps 64 bits
  CHECK(ec == npurt::errc::invalid_shape);
  CHECK_THROWS_WITH(s.launch(bmm(p2(20))), ContainsSubstring("batch 1048576") && ContainsSubstring("2^60"));

  // A window of (2^31 - 1)^2 over one padded pixel: 2^62 reads for one output.
  npurt::kernels::pool2d pool{npurt::kernels::pool_mode::avg, t({1, 1, 1, 1}), t({1, 1, 1, 1})};
  pool.window = {INT32_MAX, INT32_MAX};
  pool.stride = {1, 1};
  pool.pad = {(1 << 30) - 1, (1 << 30) - 1};
  s.launch({pool}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  CHECK_THROWS_WITH(s.launch({pool}), ContainsSubstring("window[0] 2147483647") && ContainsSubstring("window reads"));
  npurt::kernels::pool2d_backward back{npurt::kernels::pool_mode::avg, {}, pool.y, pool.x};
  back.window = {pool.window[0], pool.window[1]};
  back.stride = {pool.stride[0], pool.stride[1]};
  back.pad = {pool.pad[0], pool.pad[1]};
  s.launch({back}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  // 2 * pad must not overflow while the gradient compares it with the window.
  back.pad = {INT32_MAX, 0};
  s.launch({back}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  // The forward pass takes pads past the window (ONNX sets no bound): pads of 2^31 - 1 on both
  // sides give an output extent of 2^31 without overflow, which y's 1 is not.
  pool.pad = {INT32_MAX, 0};
  s.launch({pool}, ec);
  CHECK(ec == npurt::errc::invalid_shape);
  // A small window is still fine.
  pool.window = {1, 1};
  pool.pad = {0, 0};
  (void)s.launch({pool}, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a device pointer of another system is invalid_pointer in copies, memsets, frees and pools, naming it",
          "[core][hostile][memory]") {
  npurt::system a{simple()}, b{simple()};
  auto& da = a.device(0);
  auto& db = b.device(0);
  void* pa = da.malloc(4096);
  void* pb = db.malloc(4096);
  // Both are the first allocation of device 0 of their system: only the system tells them apart.
  REQUIRE(pa != pb);
  auto s = da.make_stream();
  std::vector<char> h(4096);
  std::error_code ec;
  s.memcpy(h.data(), h.size(), pb, 4096, npurt::memcpy_kind::device_to_host, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  s.memcpy(pb, 4096, h.data(), h.size(), npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK_THROWS_WITH(s.memcpy(pa, 4096, pb, 4096, npurt::memcpy_kind::device_to_device),
                    ContainsSubstring("npurt::stream::memcpy") && ContainsSubstring("another system"));
  s.memset(pb, 4096, 0, 16, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK_THROWS_WITH(s.memset(pb, 4096, 0, 16), ContainsSubstring("another system"));
  da.free(pb, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK_THROWS_WITH(da.free(pb), ContainsSubstring("npurt::device::free") && ContainsSubstring("another system"));
  // Pool blocks: freeing the other system's block must not free ours at the same offset.
  auto sb = db.make_stream();
  void* qa = da.mem_pool().malloc_async(512, s);
  void* qb = db.mem_pool().malloc_async(512, sb);
  REQUIRE(qa != qb);
  da.mem_pool().free_async(qb, s, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  // Nothing of either system was touched: each frees its own memory.
  s.memcpy(h.data(), h.size(), pa, 4096, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  da.mem_pool().free_async(qa, s);
  db.mem_pool().free_async(qb, sb);
  da.free(pa);
  db.free(pb);
  CHECK(a.now() > npurt::sim_time{});
}

TEST_CASE("kernels and collectives given another system's device memory are invalid_pointer naming the operand",
          "[core][hostile][memory]") {
  npurt::sim::sim_options o;
  o.functional = false;
  npurt::system a{npurt::sim::make_backend(npurt::sim::presets::ascend910(2), o)};
  npurt::system b{npurt::sim::make_backend(npurt::sim::presets::ascend910(2), o)};
  void* mine = a.device(0).malloc(4096);
  void* theirs = b.device(0).malloc(4096);
  auto s = a.device(0).make_stream();
  using npurt::dtype;
  const npurt::kernel_desc relu{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::relu,
                                                            {theirs, npurt::shape{1024}, dtype::f32},
                                                            {},
                                                            {mine, npurt::shape{1024}, dtype::f32}}};
  std::error_code ec;
  s.launch(relu, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK_THROWS_WITH(s.launch(relu), ContainsSubstring("another system"));
  auto comm = npurt::communicator::init_all(a);
  CHECK_THROWS_WITH(comm.all_reduce(theirs, mine, 16, dtype::f32, npurt::reduce_op::sum, s),
                    ContainsSubstring("all_reduce") && ContainsSubstring("another system"));
  comm.all_reduce(mine, theirs, 16, dtype::f32, npurt::reduce_op::sum, s, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK(s.query());  // nothing was enqueued
}

TEST_CASE("traces show the same device addresses for every system a program makes", "[core][hostile][determinism]") {
  auto run = [] {
    npurt::system sys{simple(2)};
    std::ostringstream trace;
    auto& prof = sys.profiler();
    void* p = sys.device(1).malloc(1000);
    auto s = sys.device(1).make_stream();
    void* q = sys.device(1).mem_pool().malloc_async(512, s);
    s.memset(p, 1000, 1, 1000);
    sys.device(1).mem_pool().free_async(q, s);
    s.synchronize();
    sys.device(1).free(p);
    prof.write_chrome_trace(trace);
    return std::pair{trace.str(), p};
  };
  const auto [first, p1] = run();
  const auto [second, p2] = run();
  CHECK(p1 != p2);  // two systems: two address spaces
  CHECK(first == second);
  // Device 1's first allocation, as every run reports it: bit 62, the device in bits 44 and up,
  // and the first 64 KiB left unused.
  const std::uint64_t portable = (std::uint64_t{1} << 62) | (std::uint64_t{1} << 44) | 0x10000;
  CHECK_THAT(first, ContainsSubstring("\"address\":" + std::to_string(portable)));
}

TEST_CASE("pinned memory freed while a copy into it is queued stays allocated until the copy is done",
          "[core][hostile][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::size_t n = 4096;
  void* d = dev.malloc(n);
  void* pinned = sys.host_malloc(n);
  s.memset(d, n, 7, n);
  s.memcpy(pinned, n, d, n, npurt::memcpy_kind::device_to_host);  // queued: writes `pinned` later
  s.memcpy(d, n, pinned, n, npurt::memcpy_kind::host_to_device);  // and reads it
  sys.host_free(pinned);
  // The block is no longer the caller's, but the heap must not hand it out again while the copies
  // may write it: new pinned blocks are other memory, and the copies do not reach them.
  std::vector<void*> fresh;
  for (int i = 0; i < 64; ++i) fresh.push_back(sys.host_malloc(n));
  for (void* q : fresh) CHECK(q != pinned);
  s.synchronize();
  for (void* q : fresh) {
    const auto* b = static_cast<const unsigned char*>(q);
    CHECK(std::all_of(b, b + n, [](unsigned char c) { return c == 0; }));
    sys.host_free(q);
  }
  // A second free is still an error, and a block freed with copies queued is released when the
  // system dies before they ran.
  std::error_code ec;
  sys.host_free(pinned, ec);
  CHECK(ec == npurt::errc::double_free);
  void* again = sys.host_malloc(n);
  s.memcpy(again, n, d, n, npurt::memcpy_kind::device_to_host);
  sys.host_free(again);
  dev.free(d, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a synchronize that reports a deadlock reads it: the stream's next failure is reported",
          "[core][hostile][deadlock]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto never = dev.make_event({.wait_for_record = true});
  s.wait(never);
  CHECK_THROWS_AS(s.synchronize(), npurt::deadlock_error);
  s.launch_callback([] { throw std::runtime_error("after the deadlock"); });
  try {
    s.synchronize();
    FAIL("the callback's failure was lost");
  } catch (const std::runtime_error& e) { CHECK(std::string(e.what()) == "after the deadlock"); }
  CHECK_NOTHROW(s.synchronize());
  // The device's synchronize reads its deadlock the same way.
  auto t = dev.make_stream();
  t.wait(never);
  CHECK_THROWS_AS(dev.synchronize(), npurt::deadlock_error);
  t.launch(fixed(us(1)));
  CHECK_NOTHROW(dev.synchronize());
}

TEST_CASE("refusals say what is wrong once, about the memory they concern", "[core][hostile][messages]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const auto what_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const npurt::error& e) { return e.what(); }
    return "no error";
  };
  // A fixed kernel asking for more AI cores than the device has.
  const std::string cores = what_of([&] { s.launch(npurt::kernel_desc{npurt::kernels::fixed{us(1)}, "k", 1000}); });
  CHECK_THAT(cores, ContainsSubstring("block_dim 1000"));
  // A null stream: the code's text once, not twice.
  npurt::stream null_stream;
  const std::string null_what = what_of([&] { null_stream.launch(fixed(us(1))); });
  const std::string text = make_error_code(npurt::errc::invalid_stream).message();
  REQUIRE(null_what.find(text) != std::string::npos);
  CHECK(null_what.find(text, null_what.find(text) + 1) == std::string::npos);
  // device::free of a pointer inside an allocation names the allocation.
  auto* base = static_cast<std::byte*>(dev.malloc(4096));
  const std::string inside = what_of([&] { dev.free(base + 64); });
  CHECK_THAT(inside, ContainsSubstring("inside the allocation at"));
  dev.free(base);
  // host_free: pinned host memory, not device memory; a second free is a double free.
  void* pinned = sys.host_malloc(64);
  sys.host_free(pinned);
  std::error_code ec;
  sys.host_free(pinned, ec);
  CHECK(ec == npurt::errc::double_free);
  int local = 0;
  const std::string foreign = what_of([&] { sys.host_free(&local); });
  CHECK_THAT(foreign, ContainsSubstring("pinned memory from host_malloc"));
}

TEST_CASE("a pool's limit is pool_limit in every form, and a NaN gc threshold is refused", "[core][hostile][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.configure_mem_pool({.pool_size_limit = std::size_t{4} << 20});
  std::error_code ec;
  CHECK(pool.malloc_async(std::size_t{8} << 20, s, ec) == nullptr);
  CHECK(ec == npurt::errc::pool_limit);
  try {
    (void)pool.malloc_async(std::size_t{8} << 20, s);
    FAIL("no error");
  } catch (const npurt::out_of_memory_error& e) {
    CHECK(e.code() == npurt::errc::pool_limit);
    CHECK(e.requested() == std::size_t{8} << 20);
  }
  CHECK_THROWS_AS(dev.configure_mem_pool({.garbage_collection_threshold = std::numeric_limits<double>::quiet_NaN()}),
                  npurt::caller_error);
  CHECK(dev.mem_pool().options().pool_size_limit == std::size_t{4} << 20);  // unchanged
}

TEST_CASE("a wait on a record that a device reset dropped fails instead of passing", "[core][hostile][reset]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto s = d0.make_stream();
  auto t = sys.device(1).make_stream();
  auto ev = d0.make_event();
  s.launch(fixed(us(100)));
  s.record(ev);
  t.wait(ev);  // fire-and-forget, across devices
  d0.reset();  // drops the kernel and the record
  std::error_code ec;
  t.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::operation_aborted);
  // Records made after the reset are waited for as usual.
  auto s2 = d0.make_stream();
  auto ev2 = d0.make_event();
  s2.launch(fixed(us(10)));
  s2.record(ev2);
  t.wait(ev2);
  t.synchronize(npurt::no_timeout, ec);
  CHECK_FALSE(ec);
}

}  // namespace
