// multi_stream_events — two streams joined by an event: a copy stream uploads the input while a
// compute stream waits on the upload's event, then computes; the host measures the exact
// elapsed time between two events, as aclrtEventElapsedTime would.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <vector>

namespace asio = boost::asio;

asio::awaitable<void> pipeline(npurt::system& sys) {
  npurt::device& dev = sys.device(0);
  npurt::stream copy = dev.make_stream();
  npurt::stream compute = dev.make_stream({.priority = npurt::priority::high});

  constexpr std::int64_t m = 1024, k = 1024, n = 1024;
  const std::size_t a_bytes = m * k * sizeof(float);
  const std::size_t b_bytes = k * n * sizeof(float);
  std::vector<float> a(m * k, 1.0f), b(k * n, 2.0f), c(m * n);
  npurt::device_buffer a_dev(dev, a_bytes), b_dev(dev, b_bytes), c_dev(dev, m * n * sizeof(float));
  void* da = a_dev.data();
  void* db = b_dev.data();
  void* dc = c_dev.data();

  npurt::event uploaded = dev.make_event();
  npurt::event start = dev.make_event();
  npurt::event stop = dev.make_event();

  copy.memcpy(da, a_bytes, a.data(), a_bytes);
  copy.memcpy(db, b_bytes, b.data(), b_bytes);
  copy.record(uploaded);

  compute.wait(uploaded);  // the cross-stream dependency
  compute.record(start);
  compute.launch(npurt::kernels::matmul{
      {da, {m, k}, npurt::dtype::f32}, {db, {k, n}, npurt::dtype::f32}, {dc, {m, n}, npurt::dtype::f32}});
  compute.record(stop);
  co_await compute.async_memcpy(c.data(), c.size() * sizeof(float), dc, c.size() * sizeof(float),
                                npurt::memcpy_kind::device_to_host, asio::use_awaitable);

  std::printf("c[0] = %.1f (expect %.1f)\n", c[0], 2.0 * k);
  std::printf("upload done at   %10.2f us\n", npurt::to_us(uploaded.completion_time()->time_since_epoch()));
  std::printf("matmul started   %10.2f us\n", npurt::to_us(start.completion_time()->time_since_epoch()));
  std::printf("matmul elapsed   %10.4f ms (event elapsed time)\n", npurt::elapsed_time(start, stop));
}

int main() {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  asio::co_spawn(sys.get_executor(), pipeline(sys), asio::detached);
  sys.run();
  return 0;
}
