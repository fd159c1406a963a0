// Backward operators in graphs: an MLP training step (forward, MSE loss, backward, SGD update)
// checked against a plain double-precision reference and finite differences; optimize().
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>

using namespace npurt;

namespace {

using vec = std::vector<double>;

struct mlp_ref {
  std::int64_t B, I, H, O;
  vec w1, b1, w2, b2;
  // Forward: z1 = x w1 + b1, h = relu(z1), y = h w2 + b2; loss = mean((y - t)^2).
  double loss(const vec& x, const vec& t, vec* z1 = nullptr, vec* h = nullptr, vec* y = nullptr) const {
    vec Z = test::ref_matmul(x, w1, B, I, H, &b1), Hh = Z;
    test::ref_relu(Hh);
    vec Y = test::ref_matmul(Hh, w2, B, H, O, &b2);
    double l = 0;
    for (std::size_t i = 0; i < Y.size(); ++i) l += (Y[i] - t[i]) * (Y[i] - t[i]);
    if (z1) *z1 = Z;
    if (h) *h = Hh;
    if (y) *y = Y;
    return l / static_cast<double>(Y.size());
  }
  // Backward by hand (the chain rule on the lines above).
  void grads(const vec& x, const vec& t, vec& dw1, vec& db1, vec& dw2, vec& db2) const {
    vec z1, h, y;
    loss(x, t, &z1, &h, &y);
    vec dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) dy[i] = 2.0 * (y[i] - t[i]) / static_cast<double>(y.size());
    dw2.assign(static_cast<std::size_t>(H * O), 0);
    db2.assign(static_cast<std::size_t>(O), 0);
    vec dz1(static_cast<std::size_t>(B * H), 0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t o = 0; o < O; ++o) {
        const double g = dy[static_cast<std::size_t>(b * O + o)];
        db2[static_cast<std::size_t>(o)] += g;
        for (std::int64_t k = 0; k < H; ++k) {
          dw2[static_cast<std::size_t>(k * O + o)] += h[static_cast<std::size_t>(b * H + k)] * g;
          dz1[static_cast<std::size_t>(b * H + k)] += g * w2[static_cast<std::size_t>(k * O + o)];
        }
      }
    for (std::size_t i = 0; i < dz1.size(); ++i) dz1[i] = z1[i] > 0 ? dz1[i] : 0.0;
    dw1.assign(static_cast<std::size_t>(I * H), 0);
    db1.assign(static_cast<std::size_t>(H), 0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t k = 0; k < H; ++k) {
        const double g = dz1[static_cast<std::size_t>(b * H + k)];
        db1[static_cast<std::size_t>(k)] += g;
        for (std::int64_t i = 0; i < I; ++i)
          dw1[static_cast<std::size_t>(i * H + k)] += x[static_cast<std::size_t>(b * I + i)] * g;
      }
  }
};

double max_rel(const vec& got, const vec& want) {
  double m = 0;
  for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(got[i] - want[i]) / (1e-3 + std::abs(want[i])));
  return got.size() == want.size() ? m : 1e300;
}

}  // namespace

TEST_CASE("an MLP training step graph computes the reference gradients and SGD update", "[graph][training][backward]") {
  const std::int64_t B = 8, I = 12, H = 16, O = 5;
  const double lr = 0.05;
  graph g = models::mlp_training_step(B, {I, H, O}, lr);
  for (const char* gname : {"fc1.weight.grad", "fc1.bias.grad", "fc2.weight.grad", "fc2.bias.grad"})
    g.set_output(gname);
  mlp_ref ref{B,
              I,
              H,
              O,
              g.constant("fc1.weight")->to_vector(),
              g.constant("fc1.bias")->to_vector(),
              g.constant("fc2.weight")->to_vector(),
              g.constant("fc2.bias")->to_vector()};
  const vec xv = test::values(B * I, 51), tv = test::values(B * O, 52);
  const tensor x({B, I}, dtype::f32, xv), t({B, O}, dtype::f32, tv);
  vec dw1, db1, dw2, db2;
  ref.grads(xv, tv, dw1, db1, dw2, db2);
  auto sys = test::make_system();
  session s{sys};
  std::vector<std::vector<double>> first;
  for (int level : {0, 2}) {
    INFO("level " << level);
    auto c = s.compile(g, {.optimization_level = level});
    const auto r = s.run(c, {{"x", x}, {"target", t}});
    const auto out = [&](const char* n) { return r.outputs.at(n).to_vector(); };
    CHECK(std::abs(out("loss")[0] - ref.loss(xv, tv)) < 1e-5 * (1 + ref.loss(xv, tv)));
    CHECK(max_rel(out("fc1.weight.grad"), dw1) < 1e-4);
    CHECK(max_rel(out("fc1.bias.grad"), db1) < 1e-4);
    CHECK(max_rel(out("fc2.weight.grad"), dw2) < 1e-4);
    CHECK(max_rel(out("fc2.bias.grad"), db2) < 1e-4);
    // The update: w - lr * dw, element by element.
    vec w1n = ref.w1;
    for (std::size_t i = 0; i < w1n.size(); ++i) w1n[i] -= lr * dw1[i];
    CHECK(max_rel(out("fc1.weight.next"), w1n) < 1e-5);
    vec b2n = ref.b2;
    for (std::size_t i = 0; i < b2n.size(); ++i) b2n[i] -= lr * db2[i];
    CHECK(max_rel(out("fc2.bias.next"), b2n) < 1e-5);
    // Fusion (the Relu into its Gemm's epilogue) changes no result.
    std::vector<std::vector<double>> all;
    for (const auto& [name, v] : r.outputs) all.push_back(v.to_vector());
    if (first.empty()) first = all;
    else CHECK(all == first);
  }
}

TEST_CASE("the training step's gradients agree with central finite differences of the loss",
          "[graph][training][backward]") {
  const std::int64_t B = 4, I = 6, H = 7, O = 3;
  graph g = models::mlp_training_step(B, {I, H, O}, 0.1);
  g.set_output("fc1.weight.grad");
  g.set_output("fc2.bias.grad");
  mlp_ref ref{B,
              I,
              H,
              O,
              g.constant("fc1.weight")->to_vector(),
              g.constant("fc1.bias")->to_vector(),
              g.constant("fc2.weight")->to_vector(),
              g.constant("fc2.bias")->to_vector()};
  const vec xv = test::values(B * I, 61), tv = test::values(B * O, 62);
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  const auto r = s.run(c, {{"x", tensor({B, I}, dtype::f32, xv)}, {"target", tensor({B, O}, dtype::f32, tv)}});
  const vec gw1 = r.outputs.at("fc1.weight.grad").to_vector(), gb2 = r.outputs.at("fc2.bias.grad").to_vector();
  const double eps = 1e-6;
  int checked = 0;
  for (std::size_t k = 0; k < ref.w1.size(); k += 5) {
    mlp_ref p = ref, m = ref;
    p.w1[k] += eps;
    m.w1[k] -= eps;
    const double fd = (p.loss(xv, tv) - m.loss(xv, tv)) / (2 * eps);
    INFO("w1[" << k << "]");
    CHECK(std::abs(gw1[k] - fd) < 1e-4 * (1 + std::abs(fd)));
    ++checked;
  }
  for (std::size_t k = 0; k < ref.b2.size(); ++k) {
    mlp_ref p = ref, m = ref;
    p.b2[k] += eps;
    m.b2[k] -= eps;
    const double fd = (p.loss(xv, tv) - m.loss(xv, tv)) / (2 * eps);
    CHECK(std::abs(gb2[k] - fd) < 1e-4 * (1 + std::abs(fd)));
    CHECK(std::abs(fd) > 1e-6);  // a gradient that is really there
  }
  CHECK(checked > 5);
}

TEST_CASE("repeated training steps fed their own updated parameters lower the loss", "[graph][training][backward]") {
  const std::int64_t B = 16, I = 8, H = 32, O = 4;
  graph g = models::mlp_training_step(B, {I, H, O}, 0.1);
  const tensor x = test::random_tensor({B, I}, 71), t = test::random_tensor({B, O}, 72, 0.5);
  auto sys = test::make_system();
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    session s{sys};
    auto c = s.compile(g, {.optimization_level = 2});
    auto r = s.run(c, {{"x", x}, {"target", t}});
    last = r.outputs.at("loss").get(0);
    if (step == 0) first = last;
    // The next step's graph carries the updated parameters as its constants.
    for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
      g.set_constant(p, r.outputs.at(std::string(p) + ".next").clone());
  }
  CHECK(last < first * 0.9);
  // A replacement of another shape or dtype is refused, naming the constant.
  CHECK_THROWS_AS(g.set_constant("fc1.bias", tensor({3}, dtype::f32)), graph_error);
  CHECK_THROWS_AS(g.set_constant("fc1.bias", tensor({H}, dtype::f16)), graph_error);
  CHECK_THROWS_AS(g.set_constant("x", tensor({B, I}, dtype::f32)), graph_error);
}

TEST_CASE("the training step runs under the parallel schedule with the sequential results",
          "[graph][training][schedule]") {
  const std::int64_t B = 8, I = 12, H = 16, O = 5;
  graph g = models::mlp_training_step(B, {I, H, O}, 0.05);
  const tensor x = test::random_tensor({B, I}, 81), t = test::random_tensor({B, O}, 82);
  auto sys = test::make_system();
  session s{sys};
  auto cs = s.compile(g, {.schedule = schedule::sequential});
  auto cp = s.compile(g, {.schedule = schedule::parallel, .max_parallelism = 3});
  CHECK(cp.report().streams > 1);  // weight and input gradients are independent branches
  const auto rs = s.run(cs, {{"x", x}, {"target", t}});
  const auto rp = s.run(cp, {{"x", x}, {"target", t}});
  for (const auto& [name, v] : rs.outputs) CHECK(v.to_vector() == rp.outputs.at(name).to_vector());
}

TEST_CASE("optimize() applies reuse, level 3 and overlap and measures a faster, smaller run", "[graph][optimizer]") {
  auto sys = test::make_system();
  session s{sys};
  // Two independent branches over one input, joined: reuse, fusion and the parallel schedule all
  // have something to do.
  graph g("branches");
  auto x = g.add_input("x", {512, 256}, dtype::f32);
  auto w1 = g.add_constant("w1", test::random_tensor({256, 256}, 91, 0.05));
  auto w2 = g.add_constant("w2", test::random_tensor({256, 256}, 92, 0.05));
  auto h = g.add_op("MatMul", {x, w1});
  auto a = g.add_op("Relu", {g.add_op("MatMul", {g.add_op("Relu", {g.add_op("MatMul", {h, w1})}), w1})});
  auto b = g.add_op("Tanh", {g.add_op("MatMul", {g.add_op("Sigmoid", {g.add_op("MatMul", {h, w2})}), w2})});
  g.set_output(g.add_op("Add", {a, b}, {}, "y"));
  const tensor in = test::random_tensor({512, 256}, 93);
  const compile_report base =
      plan_memory(g, {.schedule = schedule::sequential, .memory_reuse = false, .optimization_level = 0});
  const optimizer_report rep = s.optimize(g, {{"x", in}});
  CHECK(rep.compiled.optimization_level == 3);
  CHECK(rep.compiled.memory_reuse);
  CHECK(rep.compiled.schedule == schedule::parallel);  // level 3 found the branches
  CHECK(rep.compiled.fused >= 2);                      // the two Relus after MatMuls
  CHECK(s.optimization_level() == 3);
  CHECK(s.get_memory_config().reuse);
  CHECK(s.overlap());
  CHECK(rep.peak_bytes_before == base.peak_bytes());
  CHECK(rep.peak_bytes_after < rep.peak_bytes_before);
  CHECK(rep.latency_after < rep.latency_before);
  CHECK(rep.memory_efficiency > 0);
  CHECK(rep.memory_efficiency <= 1.0);
  CHECK(rep.memory_efficiency >
        static_cast<double>(base.activation_lower_bound) / static_cast<double>(base.activation_bytes));
  CHECK(rep.compute_efficiency > 0);
  CHECK(rep.compute_efficiency <= 1.0);
}

TEST_CASE("the recomputation suggestion saves what it estimates and changes no result",
          "[graph][training][optimizer][recompute]") {
  // Activations dominate (a large batch, narrow layers): keeping every hidden layer from the
  // forward to the backward pass is what sets the peak.
  const std::int64_t B = 512;
  graph g = models::mlp_training_step(B, {32, 256, 256, 256, 8}, 0.05);
  const auto sugg = graph_optimizer(g).memory_suggestions();
  const memory_suggestion* rc = nullptr;
  for (const auto& s : sugg)
    if (s.what == memory_suggestion::kind::recomputation) rc = &s;
  REQUIRE(rc != nullptr);
  INFO(rc->description);
  REQUIRE(rc->rewritten != nullptr);
  CHECK(rc->saving_mb > 0);
  auto sys = test::make_system();
  session a{sys}, b{sys};
  auto ca = a.compile(g, rc->options);
  auto cb = b.compile(*rc->rewritten, rc->options);
  // Measured: what each session holds on the device.
  CHECK(std::abs((a.memory_usage().allocated_mb - b.memory_usage().allocated_mb) - rc->saving_mb) < 1e-9);
  // The price: the recomputed operators run again.
  CHECK(cb.report().operators > ca.report().operators);
  const tensor x = test::random_tensor({B, 32}, 101), t = test::random_tensor({B, 8}, 102);
  const auto ra = a.run(ca, {{"x", x}, {"target", t}});
  const auto rb = b.run(cb, {{"x", x}, {"target", t}});
  CHECK(rb.latency > ra.latency);
  REQUIRE(ra.outputs.size() == rb.outputs.size());
  for (const auto& [name, v] : ra.outputs) CHECK(v.to_vector() == rb.outputs.at(name).to_vector());
}
