// hello_stream — the smallest npurt program: copy two vectors to a simulated Ascend 910, add
// them with a kernel, copy the sum back, all with co_await; print the result and the simulated
// time each step took.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <vector>

namespace asio = boost::asio;

asio::awaitable<void> hello(npurt::system& sys) {
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  constexpr std::int64_t n = 1 << 20;
  constexpr std::size_t bytes = n * sizeof(float);

  std::vector<float> a(n), b(n), sum(n);
  for (std::int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f;
  }
  // Device memory owned by this scope: freed on every way out, exceptions included.
  npurt::device_buffer a_dev(dev, bytes), b_dev(dev, bytes), c_dev(dev, bytes);
  void* da = a_dev.data();
  void* db = b_dev.data();
  void* dc = c_dev.data();

  const auto t0 = sys.now();
  co_await s.async_memcpy(da, bytes, a.data(), bytes, npurt::memcpy_kind::host_to_device, asio::use_awaitable);
  co_await s.async_memcpy(db, bytes, b.data(), bytes, npurt::memcpy_kind::host_to_device, asio::use_awaitable);
  const auto t1 = sys.now();

  const npurt::shape shp{n};
  npurt::kernels::elementwise add{npurt::kernels::eltwise_fn::add,
                                  {da, shp, npurt::dtype::f32},
                                  {db, shp, npurt::dtype::f32},
                                  {dc, shp, npurt::dtype::f32}};
  co_await s.async_launch(add, asio::use_awaitable);
  const auto t2 = sys.now();

  co_await s.async_memcpy(sum.data(), bytes, dc, bytes, npurt::memcpy_kind::device_to_host, asio::use_awaitable);
  const auto t3 = sys.now();

  std::printf("sum[0] = %.1f, sum[%lld] = %.1f\n", sum[0], static_cast<long long>(n - 1), sum[n - 1]);
  std::printf("H2D 2 x %zu KiB : %8.2f us\n", bytes / 1024, npurt::to_us(t1 - t0));
  std::printf("add kernel      : %8.2f us\n", npurt::to_us(t2 - t1));
  std::printf("D2H %zu KiB     : %8.2f us\n", bytes / 1024, npurt::to_us(t3 - t2));
  std::printf("simulated total : %8.2f us on %s\n", npurt::to_us(t3 - t0), dev.properties().name.c_str());
}

int main() {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  asio::co_spawn(sys.get_executor(), hello(sys), asio::detached);
  sys.run();
  return 0;
}
