// sim_speed: how fast the simulator runs a ResNet-50 v1.5 training step (batch 256, FP16,
// timing-only) through the runtime, on 1 device and on 8 devices (8 independent replicas, one
// stream each), and on 64, 256 and 1,024 devices (one step each by default) as data-parallel
// training: every device launches the step's kernels and, between the backward pass and the
// optimizer, an AllReduce of its gradients (one fused FP16 bucket of every parameter, as DDP
// and Horovod fuse them) over a communicator of all devices. Kernels are launched from the
// model's shared descriptors (one per layer, referenced by every device's queued task).
// Reports the simulated step time, simulated images/s, the wall-clock time the simulation took
// per device-step (target: at most 2 ms) and per step, first run and best of three.
//
//   sim_speed [--steps 5] [--cluster-steps 1] [--max-devices 1024] [--preset ascend910|ascend910b]
//             [--json PATH]
#include <npurt/collective.hpp>
#include <npurt/models/resnet50.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>
#include <npurt/stream.hpp>
#include <npurt/system.hpp>

#include "bench_common.hpp"

#include <mimalloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace {

struct result {
  double step_ms = 0;      // simulated, per step
  double wall_s = 0;       // best run, all devices, all steps
  double wall_ms_per_device_step = 0;
  double first_wall_s = 0;  // the first run (cold process heaps)
};

result run(const npurt::sim::preset& base, int devices, int steps, const npurt::models::resnet50& model, int repeats,
           bool all_reduce) {
  result best;
  const auto& kernels = model.shared_training_step();
  // The optimizer's kernels come last: the gradients are reduced before the first of them.
  const std::size_t first_update = model.first_update_kernel();
  for (int r = 0; r < repeats; ++r) {
    // The previous run's system is gone: hand its pages back, so that the process's peak
    // resident set is the largest single run's rather than the sum of what mimalloc kept.
    mi_collect(true);
    const auto t0 = std::chrono::steady_clock::now();
    npurt::sim::sim_options timing_only;
    timing_only.functional = false;  // the gradient buffers have no data: null in timing-only mode
    npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::by_name(base.name, devices), timing_only)};
    npurt::communicator comm;
    if (all_reduce) comm = npurt::communicator::init_all(sys);
    std::vector<npurt::stream> streams;
    for (int d = 0; d < devices; ++d) streams.push_back(sys.device(d).make_stream());
    for (int s = 0; s < steps; ++s)
      for (auto& st : streams)
        for (std::size_t i = 0; i < kernels.size(); ++i) {
          if (all_reduce && i == first_update)
            (void)comm.all_reduce(nullptr, nullptr, model.parameter_count(), npurt::dtype::f16, npurt::reduce_op::sum,
                                  st);
          (void)st.launch(kernels[i]);
        }
    sys.run();
    const double wall = npurt_bench::seconds_since(t0);
    const double step_ms = npurt::to_ms(sys.now().time_since_epoch()) / steps;
    if (r == 0 || wall < best.wall_s) best = {step_ms, wall, wall * 1e3 / (devices * steps), best.first_wall_s};
    if (r == 0) best.first_wall_s = wall;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  std::string preset_name = "ascend910";
  npurt_bench::command_line cl{"sim_speed: wall-clock cost of simulating ResNet-50 training steps"};
  int cluster_steps = 1;
  int max_devices = 1024;
  cl.app().add_option("--steps", steps, "training steps per run")->capture_default_str()->check(CLI::Range(1, 10'000));
  cl.app()
      .add_option("--cluster-steps", cluster_steps, "training steps per run at 64 devices and more")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000));
  cl.app()
      .add_option("--max-devices", max_devices, "largest system of the 1, 8, 64, 256, 1024 device runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cl.add_preset(preset_name);
  if (auto rc = cl.parse(argc, argv)) return *rc;
  const npurt::sim::preset p = npurt::sim::presets::by_name(preset_name);
  const npurt::models::resnet50 model{256};
  npurt_bench::report rep("sim_speed: ResNet-50 v1.5 training step, batch 256, FP16, timing-only, " + p.name + ", " +
                          std::to_string(model.training_step().size()) + " kernels per step");
  for (int devices : {1, 8, 64, 256, 1024}) {
    if (devices > max_devices) break;
    // Cluster sizes queue every kernel of a step up front (619 per device): one step by default.
    const int n = devices >= 64 ? cluster_steps : steps;
    const result r = run(p, devices, n, model, 3, devices >= 64);
    const std::string pre = std::to_string(devices) + "dev.";
    rep.add(pre + "simulated_step_ms", r.step_ms, "ms", "virtual time per step");
    rep.add(pre + "simulated_images_per_s", devices * 256.0 / (r.step_ms / 1000), "img/s", "all devices");
    rep.add(pre + "wall_s", r.wall_s, "s", std::to_string(n) + " steps, best of 3");
    rep.add(pre + "first_wall_s", r.first_wall_s, "s", std::to_string(n) + " steps, first run");
    rep.add(pre + "wall_ms_per_device_step", r.wall_ms_per_device_step, "ms", "target <= 2");
    if (devices >= 64)
      rep.add(pre + "wall_s_per_step", r.wall_s / n, "s", "with the gradient AllReduce, best of 3; target < 1 at 1024");
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  rep.add("peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024, "MB",
          "whole process (the largest system run); target <= 256 with 1,024 devices");
  return cl.finish(rep);
}
