// Fusion into the cube kernels' epilogue: a Conv/Gemm/MatMul with its bias, a residual Add and
// a Relu runs as one kernel, computes what the unfused graph computes bit for bit, and saves
// the elementwise passes' time (each of which streams its tensors through HBM).
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

using namespace npurt;

namespace {

// A ResNet basic block without BatchNormalization (so fusion changes no arithmetic):
// x -> Conv(+bias) -> Relu -> Conv(+bias) -> Add(x) -> Relu.
graph residual_block(std::int64_t n, std::int64_t c, std::int64_t hw, bool with_data) {
  graph g("block");
  auto x = g.add_input("x", {n, c, hw, hw}, dtype::f32);
  auto param = [&](const char* name, shape s, std::uint64_t seed, double scale) {
    return g.add_constant(name, with_data ? test::random_tensor(s, seed, scale) : tensor::timing_only(s, dtype::f32));
  };
  auto w1 = param("w1", {c, c, 3, 3}, 21, 0.2), b1 = param("b1", {c}, 22, 0.1);
  auto w2 = param("w2", {c, c, 3, 3}, 23, 0.2), b2 = param("b2", {c}, 24, 0.1);
  const attributes conv{{"pads", ints{1, 1, 1, 1}}, {"kernel_shape", ints{3, 3}}};
  auto h = g.add_op("Relu", {g.add_op("Conv", {x, w1, b1}, conv, "conv1")}, {}, "relu1");
  auto y = g.add_op("Add", {g.add_op("Conv", {h, w2, b2}, conv, "conv2"), x}, {}, "add");
  g.set_output(g.add_op("Relu", {y}, {}, "out"));
  return g;
}

}  // namespace

TEST_CASE("a residual block fused into conv epilogues equals the unfused graph bit for bit",
          "[graph][run][fusion][epilogue]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = residual_block(2, 8, 6, true);
  auto c1 = s.compile(g, {.optimization_level = 1});
  auto c2 = s.compile(g, {.optimization_level = 2});
  // Level 2 absorbs relu1, the Add and the final Relu: two operators, two kernels fewer per
  // absorbed elementwise op.
  CHECK(c2.report().fused == 3);
  CHECK(c2.report().operators == 2);
  CHECK(c1.report().operators == 5);
  CHECK(c1.report().kernels - c2.report().kernels == 3);
  tensor in = test::random_tensor({2, 8, 6, 6}, 25);
  const auto y1 = s.run(c1, {{"x", in}}).outputs.at("out").to_vector();
  const auto y2 = s.run(c2, {{"x", in}}).outputs.at("out").to_vector();
  REQUIRE(y1.size() == y2.size());
  CHECK(y1 == y2);  // the same float operations in the same order
  std::size_t zeros = 0, positive = 0;
  for (double v : y2) (v == 0 ? zeros : positive) += 1;
  CHECK(zeros > 0);  // the Relu did something ...
  CHECK(positive > 0);  // ... and not everything
}

TEST_CASE("fusion into the epilogue saves at least the HBM time of the passes it removes",
          "[graph][run][fusion][epilogue]") {
  auto sys = test::make_system();
  session s{sys};
  // A ResNet-50 stage-1 shape at batch 32, timing-only.
  const std::int64_t n = 32, c = 64, hw = 56;
  graph g = residual_block(n, c, hw, false);
  auto c1 = s.compile(g, {.optimization_level = 1});
  auto c2 = s.compile(g, {.optimization_level = 2});
  const tensor in = tensor::timing_only({n, c, hw, hw}, dtype::f32);
  const auto r1 = s.run(c1, {{"x", in}});
  const auto r2 = s.run(c2, {{"x", in}});
  // The removed kernels: relu1 (reads and writes y), the Add (reads two, writes one), the final
  // Relu: 7 passes of y through HBM; the fused epilogue reads the residual once more.
  const double y_bytes = static_cast<double>(n * c * hw * hw * 4);
  const double bw = sim::presets::ascend910(1).hbm_bandwidth;
  const double saved_s = to_us(r1.latency - r2.latency) * 1e-6;
  CHECK(saved_s >= 5.0 * y_bytes / bw);
  // And level 2 runs exactly two operators, each one kernel.
  REQUIRE(r2.ops.size() == 2);
  CHECK(r2.ops[0].name == "conv1");
  CHECK(r2.ops[1].name == "conv2");
}

TEST_CASE("ResNet-50 at level 2 folds every BatchNormalization and absorbs every Relu and residual Add",
          "[graph][fusion][epilogue][models]") {
  graph g = models::resnet50_graph(1);
  const compile_report r0 = plan_memory(g, {.optimization_level = 1});
  const compile_report r2 = plan_memory(g, {.optimization_level = 2});
  // 53 convolutions each with a BatchNormalization; 16 bottlenecks with 3 Relus and one Add
  // each, plus the stem's Relu.
  CHECK(r2.fused == 53 + 16 * 3 + 1 + 16);
  CHECK(r0.operators - r2.operators == r2.fused);
}
