// graph_replay: what launching captured work as a stream_graph saves against launching the same
// kernels call by call, on ResNet-50 v1.5 (FP16, timing-only, one device): the forward pass
// (inference) and the training step, at batch sizes from 1 to 256, and the training step on
// eight devices of one server with its gradient AllReduce captured in each device's graph
// (train_dp8, batch 1 and 32 per device). A call-by-call launch costs
// the host lane system_options::launch_overhead; a graph's node graph_node_overhead. Kernels that
// run for less time than a launch costs leave the device waiting for the host when launched call
// by call; a graph removes that bound and leaves the device's own per-kernel launch latency.
// Two host costs per launch: the runtime's alone (the default, 2.5 us), and 10 us, standing for a
// framework's eager dispatch on top of it (an assumption of this benchmark: eager dispatch to an
// NPU is host-bound in practice, as vLLM-Omni's LocDiT estimator shows on a 910B3, 18.83 ms
// eager against 4.91 ms as an NPUGraph). The simulated times are deterministic; the host CPU per
// kernel (thread CPU, best of the rounds) is this machine's. Last, what changing one kernel of
// the training step's graph costs the host: a whole new capture swapped in, against a task update
// of a task group holding that kernel.
//
//   graph_replay [--steps 5] [--rounds 3] [--preset ascend910|ascend910b] [--json PATH]
#include <npurt/collective.hpp>
#include <npurt/models/resnet50.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct outcome {
  double step_us = 0;     // simulated, per step
  double cpu_ns = 1e300;  // host thread CPU per kernel, best of the rounds
};

// `steps` steps of kernels [0, count) on each of `devices` devices, launched call by call or,
// with `graph`, captured once per device and launched as a graph; the capture itself is outside
// the measurement. With `all_reduce`, each device's step all-reduces its gradients (one fused
// FP16 bucket of every parameter) over a communicator of all devices before the optimizer's
// first kernel, in the graph as a captured collective.
outcome run(const npurt::sim::preset& p, const npurt::system_options& opts, const npurt::models::resnet50& model,
            std::size_t count, bool graph, int steps, int rounds, int devices = 1, bool all_reduce = false) {
  outcome out;
  const auto& kernels = model.shared_training_step();
  const std::size_t first_update = model.first_update_kernel();
  for (int r = 0; r < rounds; ++r) {
    npurt::sim::sim_options timing_only;
    timing_only.functional = false;
    npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::by_name(p.name, devices), timing_only), opts};
    npurt::communicator comm;
    if (all_reduce) comm = npurt::communicator::init_all(sys);
    std::vector<npurt::stream> streams;
    for (auto& d : sys.devices()) streams.push_back(d.make_stream());
    const auto step = [&](npurt::stream& s) {
      for (std::size_t i = 0; i < count; ++i) {
        if (all_reduce && i == first_update)
          (void)comm.all_reduce(nullptr, nullptr, model.parameter_count(), npurt::dtype::f16, npurt::reduce_op::sum, s);
        (void)s.launch(kernels[i]);
      }
    };
    std::vector<npurt::stream_graph> graphs;
    if (graph)
      for (auto& s : streams) {
        s.begin_capture();
        step(s);
        graphs.push_back(s.end_capture());
      }
    const npurt::sim_time t0 = sys.now();
    const double cpu0 = npurt_bench::thread_cpu_seconds();
    for (int k = 0; k < steps; ++k)
      for (std::size_t d = 0; d < streams.size(); ++d) {
        if (graph) (void)graphs[d].launch(streams[d]);
        else step(streams[d]);
      }
    sys.run();
    const double cpu = (npurt_bench::thread_cpu_seconds() - cpu0) * 1e9 /
                       static_cast<double>(count * static_cast<std::size_t>(steps * devices));
    out.step_us = static_cast<double>((sys.now() - t0).count()) / 1e6 / steps;
    out.cpu_ns = std::min(out.cpu_ns, cpu);
  }
  return out;
}

/// Host thread CPU (µs, best of the rounds) to change the first kernel of a captured training
/// step: captured again whole and swapped in with stream_graph::update, or replaced alone by a
/// task update of a task group that holds it (as CANN's task groups do).
struct update_cost {
  double recapture_us = 1e300;
  double task_update_us = 1e300;
  std::size_t nodes = 0;
};
update_cost change_one_kernel(const npurt::sim::preset& p, const npurt::system_options& opts,
                              const npurt::models::resnet50& model, int rounds) {
  constexpr int changes = 20;
  update_cost out;
  const auto& kernels = model.shared_training_step();
  npurt::sim::sim_options timing_only;
  timing_only.functional = false;
  npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::by_name(p.name, 1), timing_only), opts};
  auto s = sys.device(0).make_stream();
  const auto capture = [&](npurt::task_group* group) {
    s.begin_capture();
    if (group) s.begin_task_group();
    (void)s.launch(kernels[0]);
    if (group) *group = s.end_task_group();
    for (std::size_t i = 1; i < kernels.size(); ++i) (void)s.launch(kernels[i]);
    return s.end_capture();
  };
  npurt::task_group first;
  npurt::stream_graph g = capture(&first);
  out.nodes = g.size();
  for (int r = 0; r < rounds; ++r) {
    double cpu0 = npurt_bench::thread_cpu_seconds();
    for (int c = 0; c < changes; ++c) g.update(capture(nullptr));
    out.recapture_us = std::min(out.recapture_us, (npurt_bench::thread_cpu_seconds() - cpu0) * 1e6 / changes);
    g = capture(&first);
    cpu0 = npurt_bench::thread_cpu_seconds();
    for (int c = 0; c < changes; ++c) {
      s.begin_task_update(first);
      (void)s.launch(kernels[0]);
      s.end_task_update();
    }
    out.task_update_us = std::min(out.task_update_us, (npurt_bench::thread_cpu_seconds() - cpu0) * 1e6 / changes);
  }
  (void)g.launch(s);  // the updated graph still runs
  sys.run();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  int rounds = 3;
  std::string preset_name = "ascend910";
  npurt_bench::command_line cl{"graph_replay: ResNet-50 launched call by call against launched as a captured graph"};
  cl.app().add_option("--steps", steps, "steps per run")->capture_default_str()->check(CLI::Range(1, 1000));
  cl.app()
      .add_option("--rounds", rounds, "runs of each, for the host CPU time")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cl.add_preset(preset_name);
  if (auto rc = cl.parse(argc, argv)) return *rc;
  const npurt::sim::preset p = npurt::sim::presets::by_name(preset_name);
  npurt::system_options runtime_only;
  runtime_only.trace_from_env = false;
  npurt::system_options framework = runtime_only;
  framework.launch_overhead = npurt::picoseconds{10'000'000};
  npurt_bench::report rep("graph_replay: ResNet-50 v1.5, FP16, timing-only, " + p.name + ", graph_node_overhead " +
                          std::to_string(runtime_only.graph_node_overhead.count() / 1000) + " ns");
  struct host_cost {
    const char* tag;
    const npurt::system_options* opts;
  };
  for (const host_cost h : {host_cost{"launch2.5us", &runtime_only}, host_cost{"launch10us", &framework}})
    for (const std::int64_t batch : {1, 8, 32, 256}) {
      const npurt::models::resnet50 model{batch};
      struct work {
        const char* name;
        std::size_t count;
      };
      for (const work w : {work{"forward", model.forward_kernels()}, work{"train", model.training_step().size()},
                           work{"train_dp8", model.training_step().size()}}) {
        // train_dp8: eight devices of one server, data parallel, the gradients all-reduced in the step.
        const bool dp = std::string_view(w.name) == "train_dp8";
        if (dp && batch != 1 && batch != 32) continue;
        const int devices = dp ? 8 : 1;
        const outcome eager = run(p, *h.opts, model, w.count, false, steps, rounds, devices, dp);
        const outcome graph = run(p, *h.opts, model, w.count, true, steps, rounds, devices, dp);
        const std::string key = std::string(h.tag) + "_" + w.name + "_b" + std::to_string(batch);
        const std::string kernels =
            std::to_string(w.count) + " kernels" + (dp ? " and an AllReduce of the gradients per device" : "");
        rep.add(key + "_eager_step_us", eager.step_us, "us", "launched call by call, " + kernels);
        rep.add(key + "_graph_step_us", graph.step_us, "us", "launched as a graph (deterministic)");
        rep.add(key + "_speedup", eager.step_us / graph.step_us, "ratio", "call by call over graph");
        rep.add(key + "_eager_cpu_ns_per_kernel", eager.cpu_ns, "ns", "host thread CPU, best of the rounds");
        rep.add(key + "_graph_cpu_ns_per_kernel", graph.cpu_ns, "ns", "host thread CPU, best of the rounds");
      }
    }
  const update_cost u = change_one_kernel(p, runtime_only, npurt::models::resnet50{32}, rounds);
  rep.add("update_recapture_cpu_us", u.recapture_us, "us",
          "changing one kernel of the " + std::to_string(u.nodes) +
              "-node training step (batch 32): a new capture and stream_graph::update");
  rep.add("update_task_group_cpu_us", u.task_update_us, "us", "the same change as a task update of a one-kernel group");
  rep.add("update_recapture_over_task_group", u.recapture_us / u.task_update_us, "ratio", "host CPU");
  return cl.finish(rep);
}
