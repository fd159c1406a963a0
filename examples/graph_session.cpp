// graph_session — build a small graph by name, compile it two ways and run it on a simulated
// Ascend 910: the outputs, the simulated latency and where the time went, per operator.
#include <npurt/graph/session.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdio>

int main() {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::session s{sys, {.device_id = 0, .precision = npurt::precision::fp32}};

  // y = softmax((relu(x W1 + b1) + sigmoid(x Ws)) W2): two branches from x, which the parallel
  // schedule runs on two streams, joined by an Add.
  npurt::graph g = s.make_graph("example");
  auto x = g.add_input("x", {256, 512}, npurt::dtype::f32);
  npurt::tensor w1({512, 512}, npurt::dtype::f32), b1({512}, npurt::dtype::f32), ws({512, 512}, npurt::dtype::f32),
      w2({512, 16}, npurt::dtype::f32);
  w1.fill(0.001);
  b1.fill(0.1);
  ws.fill(-0.001);
  w2.fill(0.01);
  auto h = g.add_op("Gemm", {x, g.add_constant("w1", std::move(w1)), g.add_constant("b1", std::move(b1))}, {}, "fc1");
  auto r = g.add_op("Relu", {h}, {}, "relu");
  auto side =
      g.add_op("Sigmoid", {g.add_op("MatMul", {x, g.add_constant("ws", std::move(ws))}, {}, "fcs")}, {}, "side");
  auto joined = g.add_op("Add", {r, side}, {}, "join");
  auto logits = g.add_op("MatMul", {joined, g.add_constant("w2", std::move(w2))}, {}, "fc2");
  g.set_output(g.add_op("Softmax", {logits}, {{"axis", std::int64_t{1}}}, "prob"));

  npurt::tensor input({256, 512}, npurt::dtype::f32);
  input.fill(1.0);
  for (auto sched : {npurt::schedule::sequential, npurt::schedule::parallel}) {
    auto compiled = s.compile(g, {.schedule = sched, .memory_reuse = true, .optimization_level = 2});
    auto result = s.run(compiled, {{"x", input}});
    std::printf("%s: prob[0] = %.6f, latency %.2f us, activations %.1f KiB on %zu stream(s)\n",
                std::string(npurt::to_string(sched)).c_str(), result.outputs.at("prob").get(0),
                npurt::to_us(result.latency), static_cast<double>(compiled.report().activation_bytes) / 1024.0,
                compiled.report().streams);
    for (const auto& op : result.ops)
      std::printf("  %-10s %-8s stream %u  %8.2f .. %8.2f us\n", op.name.c_str(), op.type.c_str(), op.stream,
                  npurt::to_us(op.start), npurt::to_us(op.end));
  }
  const auto mem = s.memory_usage();
  std::printf("session memory: %.2f MB allocated, %.2f MB peak\n", mem.allocated_mb, mem.peak_mb);
  return 0;
}
