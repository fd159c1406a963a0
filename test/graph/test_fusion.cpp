// Fusion into the cube kernels' epilogue: a Conv/Gemm/MatMul with its bias, a residual Add and
// a Relu runs as one kernel, computes what the unfused graph computes bit for bit, and saves
// the elementwise passes' time (each of which streams its tensors through HBM). Chains of
// elementwise operators elsewhere fuse into one kernel with the same properties.
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cmath>
#include <string>

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

// ---- elementwise chains outside a cube operator ----

namespace {

// y = Sigmoid(w - (x * s + z)): a per-channel scale s broadcast over x, and a non-commutative
// stage whose running value is the second operand. Optionally r = Relu(x + z) beside it.
graph eltwise_chain(shape xs, dtype t, bool with_data, bool second_chain) {
  graph g("chain");
  auto x = g.add_input("x", xs, t);
  auto z = g.add_input("z", xs, t);
  auto w = g.add_input("w", xs, t);
  const shape ss{1, xs[1], 1, 1};
  auto s = g.add_constant("s", with_data ? test::random_tensor(ss, 51, 2.0, t) : tensor::timing_only(ss, t));
  auto m = g.add_op("Mul", {x, s}, {}, "mul");
  auto a = g.add_op("Add", {m, z}, {}, "add");
  auto d = g.add_op("Sub", {w, a}, {}, "sub");
  g.set_output(g.add_op("Sigmoid", {d}, {}, "y"));
  if (second_chain) g.set_output(g.add_op("Relu", {g.add_op("Add", {x, z}, {}, "add2")}, {}, "r"));
  return g;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("an elementwise chain fuses into one kernel that equals the unfused graph bit for bit",
          "[graph][run][fusion][eltwise]") {
  const dtype t = GENERATE(dtype::f32, dtype::f16);
  INFO(to_string(t));
  auto sys = test::make_system();
  session s{sys};
  const shape xs{2, 4, 3, 5};
  graph g = eltwise_chain(xs, t, true, true);
  auto c1 = s.compile(g, {.optimization_level = 1});
  auto c2 = s.compile(g, {.optimization_level = 2});
  // Mul, Add and Sub join the Sigmoid's kernel; add2 joins the Relu's.
  CHECK(c1.report().operators == 6);
  CHECK(c2.report().operators == 2);
  CHECK(c2.report().fused == 4);
  CHECK(c2.report().kernels == 2);
  const tensor x = test::random_tensor(xs, 52, 1.0, t), z = test::random_tensor(xs, 53, 1.0, t),
               w = test::random_tensor(xs, 54, 1.0, t);
  const auto r1 = s.run(c1, {{"x", x}, {"z", z}, {"w", w}});
  const auto r2 = s.run(c2, {{"x", x}, {"z", z}, {"w", w}});
  // Every stage rounds to the dtype as the separate kernels' stores do: in f16 a fused kernel
  // that kept intermediates in float would differ in the last bit somewhere.
  CHECK(r2.outputs.at("y").to_vector() == r1.outputs.at("y").to_vector());
  CHECK(r2.outputs.at("r").to_vector() == r1.outputs.at("r").to_vector());
  // And both compute the graph's function (a plain double reference, the dtype's tolerance).
  const auto xv = x.to_vector(), zv = z.to_vector(), wv = w.to_vector();
  const auto sv = g.constant("s")->to_vector();
  const auto yv = r2.outputs.at("y").to_vector();
  const double tol = t == dtype::f16 ? 4e-3 : 1e-6;
  const std::int64_t hw = xs[2] * xs[3];
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double scale = sv[static_cast<std::size_t>(static_cast<std::int64_t>(i) / hw % xs[1])];
    CHECK(std::abs(yv[i] - sigmoid(wv[i] - (xv[i] * scale + zv[i]))) <= tol);
  }
  // The run reports the fused kernel under the names of the operators it computes.
  bool named = false;
  for (const auto& op : r2.ops) named = named || op.name == "mul+add+sub+y";
  CHECK(named);
}

TEST_CASE("a fused elementwise chain costs one pass over memory", "[graph][run][fusion][eltwise]") {
  auto sys = test::make_system();
  session s{sys};
  // A ResNet-50 stage-1 activation at batch 32, timing-only.
  const shape xs{32, 64, 56, 56};
  graph g = eltwise_chain(xs, dtype::f32, false, false);
  auto c1 = s.compile(g, {.optimization_level = 1});
  auto c2 = s.compile(g, {.optimization_level = 2});
  const tensor in = tensor::timing_only(xs, dtype::f32);
  const auto r1 = s.run(c1, {{"x", in}, {"z", in}, {"w", in}});
  const auto r2 = s.run(c2, {{"x", in}, {"z", in}, {"w", in}});
  REQUIRE(r1.ops.size() == 4);
  REQUIRE(r2.ops.size() == 1);
  // One pass: x, z and w read once, the scale once (at its own size), y written once.
  const double act = static_cast<double>(xs.elements()) * 4;
  const double oracle_s = (4 * act + 64 * 4) / sim::presets::ascend910(1).hbm_bandwidth;
  const double fused_s = to_us(r2.ops[0].busy) * 1e-6;
  CHECK(fused_s >= oracle_s);
  CHECK(fused_s <= 1.05 * oracle_s);
  // Unfused, the intermediates go through HBM: 10 activation passes instead of 4.
  picoseconds unfused{0};
  for (const auto& op : r1.ops) unfused += op.busy;
  CHECK(to_us(unfused) * 1e-6 >= 2.0 * fused_s);
  CHECK(r2.latency < r1.latency);
}

TEST_CASE("an elementwise chain is cut where an intermediate has another reader or is an output",
          "[graph][fusion][eltwise]") {
  const shape xs{2, 3, 4, 4};
  SECTION("the intermediate is a graph output") {
    graph g("cut");
    auto a = g.add_op("Add", {g.add_input("x", xs, dtype::f32), g.add_input("z", xs, dtype::f32)}, {}, "a");
    g.set_output(g.add_op("Relu", {a}, {}, "r"));
    g.set_output(a);
    const compile_report r = plan_memory(g, {.optimization_level = 2});
    CHECK(r.fused == 0);
    CHECK(r.operators == 2);
  }
  SECTION("the intermediate has a second reader") {
    graph g("cut");
    auto a = g.add_op("Add", {g.add_input("x", xs, dtype::f32), g.add_input("z", xs, dtype::f32)}, {}, "a");
    g.set_output(g.add_op("Relu", {a}, {}, "r"));
    g.set_output(g.add_op("Sigmoid", {a}, {}, "s"));
    const compile_report r = plan_memory(g, {.optimization_level = 2});
    CHECK(r.fused == 0);
    CHECK(r.operators == 3);
  }
  SECTION("the intermediate is smaller than the chain's output") {
    graph g("cut");
    auto a = g.add_op("Add", {g.add_input("b", {1, 3, 1, 1}, dtype::f32), g.add_input("c", {1, 3, 1, 1}, dtype::f32)},
                      {}, "a");
    g.set_output(g.add_op("Mul", {a, g.add_input("x", xs, dtype::f32)}, {}, "m"));
    CHECK(plan_memory(g, {.optimization_level = 2}).fused == 0);
  }
  SECTION("below level 2 nothing fuses") {
    graph g("cut");
    auto a = g.add_op("Add", {g.add_input("x", xs, dtype::f32), g.add_input("z", xs, dtype::f32)}, {}, "a");
    g.set_output(g.add_op("Relu", {a}, {}, "r"));
    CHECK(plan_memory(g, {.optimization_level = 1}).fused == 0);
    CHECK(plan_memory(g, {.optimization_level = 2}).fused == 1);
  }
}

TEST_CASE("a chain longer than the fused kernel's stages runs as several kernels with the same result",
          "[graph][run][fusion][eltwise]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("long");
  std::string v = g.add_input("x", {3, 7}, dtype::f16);
  for (const char* op : {"Neg", "Abs", "Sqrt", "Exp", "Softsign", "Tanh"}) v = g.add_op(op, {v});
  g.set_output(v);
  auto c1 = s.compile(g, {.optimization_level = 1});
  auto c2 = s.compile(g, {.optimization_level = 2});
  // Six stages: a kernel of four and one of two.
  CHECK(c2.report().operators == 2);
  CHECK(c2.report().fused == 4);
  const tensor x = test::random_tensor({3, 7}, 55, 3.0, dtype::f16);
  CHECK(s.run(c2, {{"x", x}}).outputs.at(v).to_vector() == s.run(c1, {{"x", x}}).outputs.at(v).to_vector());
}
