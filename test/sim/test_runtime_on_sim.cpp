// The runtime driving the simulator end to end: what a launch carries between the call and
// the moment it starts.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <vector>

#include <catch2/catch_test_macros.hpp>

namespace {

namespace asio = boost::asio;

TEST_CASE("a deferred launch keeps its kernel after the descriptor it was made from is gone",
          "[sim][runtime][asio]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::int64_t n = 4096;
  constexpr std::size_t bytes = n * sizeof(float);
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(i)] = static_cast<float>(i);
    b[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i % 7);
  }
  void* da = dev.malloc(bytes);
  void* db = dev.malloc(bytes);
  void* dc = dev.malloc(bytes);
  s.memcpy(da, bytes, a.data(), bytes, npurt::memcpy_kind::host_to_device);
  s.memcpy(db, bytes, b.data(), bytes, npurt::memcpy_kind::host_to_device);

  auto make_op = [&] {
    // The descriptor is a temporary of this scope; the operation outlives it.
    const npurt::shape shp{n};
    return s.async_launch(npurt::kernel_desc{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add,
                                                                         {da, shp, npurt::dtype::f32},
                                                                         {db, shp, npurt::dtype::f32},
                                                                         {dc, shp, npurt::dtype::f32}}},
                          asio::deferred);
  };
  auto op = make_op();
  // Overwrite the stack the descriptor lived in before the operation starts.
  auto scribble = [] {
    volatile unsigned char junk[2048];
    for (auto& c : junk) c = 0xA5;
  };
  scribble();
  bool done = false;
  asio::co_spawn(s.get_executor(), [&]() -> asio::awaitable<void> {
    co_await std::move(op)(asio::use_awaitable);
    co_await s.async_memcpy(out.data(), bytes, dc, bytes, npurt::memcpy_kind::device_to_host, asio::use_awaitable);
    done = true;
  }, asio::detached);
  sys.run();
  REQUIRE(done);
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == a[i] + b[i]);
  dev.free(da);
  dev.free(db);
  dev.free(dc);
}

TEST_CASE("an awaited launch of an invalid kernel fails when it starts, and the stream goes on",
          "[sim][runtime][asio]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  void* d = dev.malloc(1024);
  const npurt::shape small{16};
  const npurt::shape big{64};
  std::error_code first, second;
  asio::co_spawn(s.get_executor(), [&]() -> asio::awaitable<void> {
    // Shapes that do not broadcast: validation rejects the kernel and nothing is enqueued.
    const npurt::kernel_desc bad{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add,
                                                             {d, small, npurt::dtype::f32},
                                                             {d, big, npurt::dtype::f32},
                                                             {d, small, npurt::dtype::f32}}};
    try {
      co_await s.async_launch(bad, asio::use_awaitable);
    } catch (const boost::system::system_error& e) {
      first = e.code();
    }
    const npurt::kernel_desc good{npurt::kernels::fixed{npurt::picoseconds{1'000'000}}, "ok"};
    try {
      co_await s.async_launch(good, asio::use_awaitable);
    } catch (const boost::system::system_error& e) {
      second = e.code();
    }
  }, asio::detached);
  sys.run();
  CHECK(first == npurt::errc::invalid_shape);
  CHECK(!second);
  CHECK(s.query());
  dev.free(d);
}

}  // namespace
