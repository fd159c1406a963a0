// One ResNet-50 v1.5 training step (batch 256, FP16, timing-only) on one simulated Ascend 910,
// launched through the runtime on one stream, compared with the published MindSpore figure
// (2115 img/s per chip, about 121 ms per step), with where the time goes.
//
//   resnet50_step [--batch N] [--preset ascend910|ascend910b|FILE.ini]
//
// Exit status 1 is a command line it cannot use, 2 a preset it cannot load or a batch too large
// to simulate.
#include <npurt/models/resnet50.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>
#include <npurt/stream.hpp>
#include <npurt/system.hpp>

#include <charconv>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

// Collects the finished tasks' breakdowns from the simulator.
class where_time_goes final : public npurt::observer {
 public:
  explicit where_time_goes(npurt::sim::sim_backend& be) : be_(be) {}
  void on_task(const npurt::task_info& t) override {
    if (t.kind != npurt::task_kind::kernel) return;
    if (auto x = be_.explain(t.id)) {
      const double ms = npurt::to_ms(x->end - x->start);
      by_unit[std::string(to_string(x->cost.bound))] += ms;
      if (x->cost.cube_path) {
        cube_kernels_ms += ms;
        flops += static_cast<double>(x->cost.flops);
      }
      ++kernels;
    }
  }
  std::map<std::string, double> by_unit;
  double flops = 0, cube_kernels_ms = 0;
  int kernels = 0;

 private:
  npurt::sim::sim_backend& be_;
};

}  // namespace

int usage(const std::string& why) {
  std::fprintf(stderr, "resnet50_step: %s\nusage: resnet50_step [--batch N] [--preset ascend910|ascend910b|FILE.ini]\n",
               why.c_str());
  return 1;
}

int main(int argc, char** argv) try {
  std::int64_t batch = 256;
  std::string preset_name = "ascend910";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg != "--batch" && arg != "--preset") return usage("unknown option '" + std::string(arg) + "'");
    if (i + 1 == argc) return usage(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--preset") {
      preset_name = value;
      continue;
    }
    // atoll would read "abc" as 0 and "8x" as 8: the whole word must be the number.
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), batch);
    if (ec != std::errc{} || end != value.data() + value.size() || batch < 1)
      return usage("--batch wants a whole number of at least 1, not '" + std::string(value) + "'");
  }
  const npurt::sim::preset hw =
      preset_name.ends_with(".ini") ? npurt::sim::load_preset(preset_name) : npurt::sim::presets::by_name(preset_name);
  const npurt::models::resnet50 model{batch, npurt::dtype::f16};

  npurt::system sys{hw};
  auto* be = npurt::sim::as_sim(sys.get_backend());
  where_time_goes obs{*be};
  sys.add_observer(obs);
  npurt::stream s = sys.device(0).make_stream();
  for (const auto& k : model.training_step()) (void)s.launch(k);
  sys.run();

  const double ms = npurt::to_ms(sys.now().time_since_epoch());
  const double published_ms = 256.0 / 2115 * 1000;
  std::printf("ResNet-50 v1.5 training step, batch %lld, FP16, on one %s (%d kernels)\n", static_cast<long long>(batch),
              hw.name.c_str(), obs.kernels);
  std::printf("  simulated step      %9.2f ms   %8.1f img/s\n", ms, static_cast<double>(batch) / (ms / 1000));
  if (batch == 256 && hw.name == "ascend910")
    std::printf("  MindSpore (910)     %9.2f ms   %8.1f img/s   -> simulated is %+.1f%%\n", published_ms, 2115.0,
                100 * (ms - published_ms) / published_ms);
  std::printf("  cube utilisation    %9.1f %%  (%.1f TFLOP/s of %.1f)\n",
              100 * obs.flops / (ms / 1000) / hw.peak_fp16_flops(), obs.flops / (ms / 1000) / 1e12,
              hw.peak_fp16_flops() / 1e12);
  std::printf("  where the time goes (kernel time by the unit that bounds it):\n");
  for (const auto& [u, t] : obs.by_unit) std::printf("    %-8s %9.2f ms  %5.1f%%\n", u.c_str(), t, 100 * t / ms);
  std::printf("    cube kernels (conv, matmul) %.2f ms, vector kernels %.2f ms\n", obs.cube_kernels_ms,
              ms - obs.cube_kernels_ms);
  return 0;
} catch (const std::exception& e) {
  // An unknown preset, a preset file that is not one, or a batch too large to simulate.
  std::fprintf(stderr, "resnet50_step: %s\n", e.what());
  return 2;
}
