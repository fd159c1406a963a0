// A program outside the tree, built against the installed headers via pkg-config.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdio>

int main() {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto s = sys.device(1).make_stream();
  auto done = s.launch(npurt::kernels::fixed{npurt::picoseconds{1'000'000}});
  done.synchronize();
  std::printf("consumer: %zu devices, t = %.3f us\n", sys.device_count(), npurt::to_us(sys.now().time_since_epoch()));
  return done.query() ? 0 : 1;
}
