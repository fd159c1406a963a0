// Backward operators in graphs: an MLP training step (forward, MSE loss, backward, SGD update)
// checked against a plain double-precision reference and finite differences; optimize().
#include <npurt/collective.hpp>
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>
#include <npurt/models/resnet50.hpp>
#include <npurt/task.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
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

TEST_CASE("recomputation clones take free names when the graph already uses the obvious ones",
          "[graph][training][optimizer][recompute]") {
  const std::int64_t B = 512;
  const std::vector<std::int64_t> widths{32, 256, 256, 256, 8};
  // The clone names the rewrite gives this graph...
  std::string clone;
  {
    graph g = models::mlp_training_step(B, widths, 0.05);
    for (const auto& s : graph_optimizer(g).memory_suggestions())
      if (s.what == memory_suggestion::kind::recomputation && s.rewritten)
        for (const auto& n : s.rewritten->nodes())
          if (n.outputs[0].ends_with(".recompute")) clone = n.outputs[0];
  }
  REQUIRE_FALSE(clone.empty());
  // ...are taken by a tensor of the user's own in this one (an input nothing reads).
  graph g = models::mlp_training_step(B, widths, 0.05);
  g.add_input(clone, {1}, dtype::f32);
  std::vector<memory_suggestion> sugg;
  REQUIRE_NOTHROW(sugg = graph_optimizer(g).memory_suggestions());
  const memory_suggestion* rc = nullptr;
  for (const auto& s : sugg)
    if (s.what == memory_suggestion::kind::recomputation) rc = &s;
  REQUIRE(rc != nullptr);
  REQUIRE(rc->rewritten != nullptr);
  const value_info* kept = rc->rewritten->find(clone);
  REQUIRE(kept != nullptr);
  CHECK(kept->kind == value_kind::input);  // the user's tensor, not a clone
  // And the rewrite still computes what the graph does.
  auto sys = test::make_system();
  session a{sys}, b{sys};
  auto ca = a.compile(g, rc->options);
  auto cb = b.compile(*rc->rewritten, rc->options);
  const tensor x = test::random_tensor({B, 32}, 111), t = test::random_tensor({B, 8}, 112), u({1}, dtype::f32);
  const auto ra = a.run(ca, {{"x", x}, {"target", t}, {clone, u}});
  const auto rb = b.run(cb, {{"x", x}, {"target", t}, {clone, u}});
  REQUIRE(ra.outputs.size() == rb.outputs.size());
  for (const auto& [name, v] : ra.outputs) CHECK(v.to_vector() == rb.outputs.at(name).to_vector());
}

namespace {

// A plain grouped 2-D convolution in double: y[n][m][oy][ox] = b[m] + sum over the group's
// channels and the window of x * w, zero outside x.
struct conv_ref {
  std::int64_t N, C, H, W, M, K, stride, pad, groups;
  [[nodiscard]] std::int64_t out(std::int64_t in) const { return (in + 2 * pad - K) / stride + 1; }
  [[nodiscard]] vec y(const vec& x, const vec& w, const vec& b) const {
    const std::int64_t Ho = out(H), Wo = out(W), cg = C / groups, mg = M / groups;
    vec r(static_cast<std::size_t>(N * M * Ho * Wo));
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t oy = 0; oy < Ho; ++oy)
          for (std::int64_t ox = 0; ox < Wo; ++ox) {
            double s = b[static_cast<std::size_t>(m)];
            for (std::int64_t c = 0; c < cg; ++c)
              for (std::int64_t ky = 0; ky < K; ++ky)
                for (std::int64_t kx = 0; kx < K; ++kx) {
                  const std::int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                  const std::int64_t ci = m / mg * cg + c;
                  s += x[static_cast<std::size_t>(((n * C + ci) * H + iy) * W + ix)] *
                       w[static_cast<std::size_t>(((m * cg + c) * K + ky) * K + kx)];
                }
            r[static_cast<std::size_t>(((n * M + m) * Ho + oy) * Wo + ox)] = s;
          }
    return r;
  }
  // The loss whose gradient with respect to y is r: sum(r * y).
  [[nodiscard]] double loss(const vec& x, const vec& w, const vec& b, const vec& r) const {
    const vec yy = y(x, w, b);
    double l = 0;
    for (std::size_t i = 0; i < yy.size(); ++i) l += r[i] * yy[i];
    return l;
  }
};

}  // namespace

TEST_CASE("ConvGrad's dX, dW and dB equal finite differences of the convolution", "[graph][training][conv]") {
  // Strided, padded and grouped, so every index mapping of the backward kernels is exercised.
  const conv_ref cr{2, 4, 7, 7, 6, 3, 2, 1, 2};
  const std::int64_t Ho = cr.out(cr.H), Wo = cr.out(cr.W);
  vec xv = test::values(cr.N * cr.C * cr.H * cr.W, 71), wv = test::values(cr.M * 2 * 9, 72, 0.5),
      bv = test::values(cr.M, 73);
  const vec rv = test::values(cr.N * cr.M * Ho * Wo, 74);
  auto sys = test::make_system();
  session s{sys};
  graph g("conv_grad");
  auto x = g.add_input("x", {cr.N, cr.C, cr.H, cr.W}, dtype::f32);
  auto dy = g.add_input("dy", {cr.N, cr.M, Ho, Wo}, dtype::f32);
  auto w = g.add_constant("w", tensor({cr.M, 2, 3, 3}, dtype::f32, wv));
  const attributes conv{{"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}, {"group", std::int64_t{2}}};
  g.add_node("ConvGrad", "conv_grad", {dy, x, w}, {"dx", "dw", "db"}, conv);
  for (const char* o : {"dx", "dw", "db"}) g.set_output(o);
  CHECK(g.value("dw").shape == shape{cr.M, 2, 3, 3});
  CHECK(g.value("db").shape == shape{cr.M});
  const tensor xt({cr.N, cr.C, cr.H, cr.W}, dtype::f32, xv), rt({cr.N, cr.M, Ho, Wo}, dtype::f32, rv);
  const auto out = s.run(s.compile(g), {{"x", xt}, {"dy", rt}}).outputs;
  // sum(r * conv(x, w, b)) is linear in each of x, w and b: central differences are exact up to
  // rounding, so they are the oracle.
  const double h = 1e-2;
  auto l = [&] { return cr.loss(xv, wv, bv, rv); };
  test::check_differences("dx", xv, out.at("dx").to_vector(), h, 1e-4, l);
  test::check_differences("dw", wv, out.at("dw").to_vector(), h, 1e-4, l);
  test::check_differences("db", bv, out.at("db").to_vector(), h, 1e-4, l);
}

TEST_CASE("ConvGrad rejects a dY that is not the convolution's output shape", "[graph][training][conv][errors]") {
  graph g("bad");
  auto x = g.add_input("x", {1, 2, 5, 5}, dtype::f32);
  auto dy = g.add_input("dy", {1, 3, 4, 4}, dtype::f32);  // Conv's output is [1,3,5,5] with pads 1
  auto w = g.add_constant("w", tensor::timing_only({3, 2, 3, 3}, dtype::f32));
  try {
    g.add_node("ConvGrad", "cg", {dy, x, w}, {"dx", "dw"}, {{"pads", ints{1, 1, 1, 1}}});
    FAIL("accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(e.op() == "cg");
    CHECK(e.tensor() == "dy");
  }
}

TEST_CASE("ConvGrad leaves out an output named \"\" and launches no kernel for it", "[graph][training][conv]") {
  // The same strided, grouped convolution as above: with dX left out, dW and dB are those of the
  // form that computes all three, bit for bit (the same kernels on the same operands), and one
  // conv2d_backward_data fewer runs.
  const conv_ref cr{2, 4, 7, 7, 6, 3, 2, 1, 2};
  const std::int64_t Ho = cr.out(cr.H), Wo = cr.out(cr.W);
  const attributes conv{{"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}, {"group", std::int64_t{2}}};
  const tensor xt({cr.N, cr.C, cr.H, cr.W}, dtype::f32, test::values(cr.N * cr.C * cr.H * cr.W, 71)),
      rt({cr.N, cr.M, Ho, Wo}, dtype::f32, test::values(cr.N * cr.M * Ho * Wo, 74));
  const auto build = [&](std::vector<std::string> outs) {
    graph g("conv_grad");
    auto x = g.add_input("x", {cr.N, cr.C, cr.H, cr.W}, dtype::f32);
    auto dy = g.add_input("dy", {cr.N, cr.M, Ho, Wo}, dtype::f32);
    auto w = g.add_constant("w", tensor({cr.M, 2, 3, 3}, dtype::f32, test::values(cr.M * 2 * 9, 72, 0.5)));
    g.add_node("ConvGrad", "conv_grad", {dy, x, w}, outs, conv);
    for (const auto& o : outs)
      if (!o.empty()) g.set_output(o);
    return g;
  };
  auto sys = test::make_system();
  session s{sys};
  graph all = build({"dx", "dw", "db"}), weights = build({"", "dw", "db"});
  CHECK(weights.find("dx") == nullptr);
  CHECK(weights.value("dw").shape == shape{cr.M, 2, 3, 3});
  const auto ca = s.compile(all), cw = s.compile(weights);
  CHECK(ca.report().kernels == 3);  // backward data, backward weight, the sum for dB
  CHECK(cw.report().kernels == 2);
  const auto ra = s.run(ca, {{"x", xt}, {"dy", rt}}), rw = s.run(cw, {{"x", xt}, {"dy", rt}});
  CHECK(rw.outputs.size() == 2);
  CHECK(rw.outputs.at("dw").to_vector() == ra.outputs.at("dw").to_vector());
  CHECK(rw.outputs.at("db").to_vector() == ra.outputs.at("db").to_vector());
  REQUIRE(ra.ops.size() == 1);
  REQUIRE(rw.ops.size() == 1);
  CHECK(rw.ops[0].busy < ra.ops[0].busy);
  // dW left out too: only dX's kernel (dB not asked for).
  graph data = build({"dx", ""});
  const auto cd = s.compile(data);
  CHECK(cd.report().kernels == 1);
  CHECK(s.run(cd, {{"x", xt}, {"dy", rt}}).outputs.at("dx").to_vector() == ra.outputs.at("dx").to_vector());
  // The precision rewrite carries an output left out through its casts.
  session half{sys, session_config{.precision = precision::fp16}};
  CHECK(half.compile(weights).report().kernels >= 2);
  session mixed{sys, session_config{.precision = precision::mixed}};
  const auto rm = mixed.run(mixed.compile(weights), {{"x", xt}, {"dy", rt}});
  CHECK(rm.outputs.at("dw").type() == dtype::f32);
}

TEST_CASE("ConvGrad refuses every output left out, and a reader of the dX it left out",
          "[graph][training][conv][errors]") {
  graph g("bad");
  auto x = g.add_input("x", {1, 2, 5, 5}, dtype::f32);
  auto dy = g.add_input("dy", {1, 3, 5, 5}, dtype::f32);
  auto w = g.add_constant("w", tensor::timing_only({3, 2, 3, 3}, dtype::f32));
  const attributes pads{{"pads", ints{1, 1, 1, 1}}};
  for (const std::vector<std::string>& outs :
       {std::vector<std::string>{"", ""}, std::vector<std::string>{"", "", ""}}) {
    try {
      g.add_node("ConvGrad", "cg", {dy, x, w}, outs, pads);
      FAIL("accepted");
    } catch (const graph_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK(e.op() == "cg");
      CHECK(std::string(e.what()).find("ConvGrad leaves every output out") != std::string::npos);
    }
    CHECK(g.nodes().empty());  // nothing added
  }
  // Only the operators with optional outputs take an empty name: BatchNormInternal's Y is
  // required.
  auto s = g.add_constant("s", tensor::timing_only({2}, dtype::f32));
  CHECK_THROWS_AS(g.add_node("BatchNormInternal", "bn", {"x", s, s, s, s}, {"", "rm", "rv", "sm", "si"}, {}),
                  graph_error);
  // The dX left out has no name a reader could use: "dx" is produced by nothing, which validate
  // and compile refuse naming it.
  g.add_node("ConvGrad", "cg", {dy, x, w}, {"", "dw"}, pads);
  g.add_op("Relu", {"dx"}, {}, "r");
  g.set_output("r");
  g.set_output("dw");
  try {
    g.validate();
    FAIL("accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.tensor() == "dx");
    CHECK(std::string(e.what()).find("input 'dx' is not produced by any operator") != std::string::npos);
  }
  // Nor can the graph's output be the one left out.
  graph h("bad_output");
  h.add_input("x", {1, 2, 5, 5}, dtype::f32);
  h.add_input("dy", {1, 3, 5, 5}, dtype::f32);
  h.add_constant("w", tensor::timing_only({3, 2, 3, 3}, dtype::f32));
  h.add_node("ConvGrad", "cg", {"dy", "x", "w"}, {"", "dw"}, pads);
  h.set_output("dx");
  CHECK_THROWS_AS(h.validate(), graph_error);
}

TEST_CASE("BatchNormalizationGrad leaves out an output named \"\" and computes only what is kept",
          "[graph][training][batchnorm]") {
  // Every choice of outputs: what is kept equals the full operator's bit for bit (one kernel on the
  // same operands), what is left out has no tensor and no device memory, and without dX the
  // kernel's second pass (dX's) does not run.
  const std::int64_t N = 3, C = 4, H = 5, W = 6;
  const shape xs{N, C, H, W};
  vec inv = test::values(C, 95);
  for (auto& v : inv) v = 0.5 + std::abs(v);
  const std::vector<feed> feeds{{"dy", tensor(xs, dtype::f32, test::values(xs.elements(), 91))},
                                {"x", tensor(xs, dtype::f32, test::values(xs.elements(), 92, 2.0))},
                                {"scale", tensor({C}, dtype::f32, test::values(C, 93))},
                                {"mean", tensor({C}, dtype::f32, test::values(C, 94))},
                                {"inv", tensor({C}, dtype::f32, inv)}};
  const auto build = [&](const std::vector<std::string>& outs) {
    graph g("bn_grad");
    g.add_input("dy", xs, dtype::f32);
    g.add_input("x", xs, dtype::f32);
    for (const char* p : {"scale", "mean", "inv"}) g.add_input(p, {C}, dtype::f32);
    g.add_node("BatchNormalizationGrad", "bn_grad", {"dy", "x", "scale", "mean", "inv"}, outs, {});
    for (const auto& o : outs)
      if (!o.empty()) g.set_output(o);
    return g;
  };
  auto sys = test::make_system();
  session s{sys};
  const std::vector<std::string> names{"dx", "dscale", "dbias"};
  graph all = build(names);
  const auto ca = s.compile(all);
  const auto full = s.run(ca, feeds);
  REQUIRE(full.ops.size() == 1);
  const std::uint64_t bytes[] = {static_cast<std::uint64_t>(xs.elements()) * 4, C * 4, C * 4};
  // Each nonempty proper subset as "" in place, and the shorter lists ONNX allows for trailing
  // outputs left out.
  std::vector<std::vector<std::string>> choices;
  for (unsigned keep = 1; keep < 7; ++keep) {
    std::vector<std::string> outs;
    for (unsigned k = 0; k < 3; ++k) outs.push_back(keep & (1u << k) ? names[k] : "");
    choices.push_back(outs);
  }
  choices.push_back({"dx"});
  choices.push_back({"dx", "dscale"});
  choices.push_back({"", "dscale"});
  for (const auto& outs : choices) {
    INFO((outs.size() > 0 ? outs[0] : "")
         << "," << (outs.size() > 1 ? outs[1] : "") << "," << (outs.size() > 2 ? outs[2] : ""));
    graph g = build(outs);
    const auto c = s.compile(g);
    CHECK(c.report().kernels == 1);
    const auto r = s.run(c, feeds);
    std::uint64_t left_out = 0;
    std::size_t kept = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      if (k < outs.size() && !outs[k].empty()) {
        ++kept;
        CHECK(r.outputs.at(names[k]).to_vector() == full.outputs.at(names[k]).to_vector());
      } else {
        CHECK(g.find(names[k]) == nullptr);
        left_out += bytes[k];
      }
    }
    CHECK(r.outputs.size() == kept);
    // The outputs left out take no device memory: the arena that holds the outputs shrinks by
    // their bytes at least (each block is aligned).
    CHECK(c.report().activation_bytes + left_out <= ca.report().activation_bytes);
    REQUIRE(r.ops.size() == 1);
    // dX needs both sums, so the kernel computes them whatever is kept; without dX it stops there.
    if (outs[0].empty()) CHECK(r.ops[0].busy < full.ops[0].busy);
    else CHECK(r.ops[0].busy == full.ops[0].busy);
  }
}

TEST_CASE("BatchNormalizationGrad refuses every output left out and too many outputs",
          "[graph][training][batchnorm][errors]") {
  graph g("bad");
  g.add_input("x", {2, 3, 4, 4}, dtype::f32);
  g.add_constant("s", tensor::timing_only({3}, dtype::f32));
  const auto refused = [&](const std::vector<std::string>& outs, const std::string& words) {
    INFO(words);
    std::string what;
    test::expect_graph_error(
        [&] {
          try {
            g.add_node("BatchNormalizationGrad", "bng", {"x", "x", "s", "s", "s"}, outs, {});
          } catch (const graph_error& e) {
            what = e.what();
            throw;
          }
        },
        errc::invalid_argument, "bng", outs.size() > 3 ? "x" : "");
    CHECK(what.find(words) != std::string::npos);
    CHECK(g.nodes().empty());  // nothing added
    for (const auto& o : outs)
      if (!o.empty()) CHECK(g.find(o) == nullptr);
  };
  for (const std::vector<std::string>& outs :
       {std::vector<std::string>{""}, std::vector<std::string>{"", ""}, std::vector<std::string>{"", "", ""}})
    refused(outs, "BatchNormalizationGrad leaves every output out");
  refused({"dx", "ds", "db", "extra"}, "has outputs dX, dscale and dbias");
}

namespace {

// A plain 2-D pooling in double (ONNX's MaxPool and AveragePool): each output is the max or the
// mean of its window's taps inside x. ceil rounds the output extent up, dropping a window that
// would start past x and its leading pad; include_pad (count_include_pad) divides by the taps
// inside the padded x, a ceil window's part past the end pad not counted (PyTorch's avg_pool2d).
struct pool_ref {
  std::int64_t N, C, H, W, K, stride, pad;
  bool max, ceil, include_pad;
  [[nodiscard]] std::int64_t out(std::int64_t in) const {
    const std::int64_t span = in + 2 * pad - K;
    std::int64_t o = (ceil ? span + stride - 1 : span) / stride + 1;
    if (ceil && (o - 1) * stride >= in + pad) --o;
    return o;
  }
  [[nodiscard]] vec y(const vec& x) const {
    const std::int64_t Ho = out(H), Wo = out(W);
    vec r;
    for (std::int64_t p = 0; p < N * C; ++p)
      for (std::int64_t oy = 0; oy < Ho; ++oy)
        for (std::int64_t ox = 0; ox < Wo; ++ox) {
          double acc = max ? -1e300 : 0;
          std::int64_t count = 0;
          for (std::int64_t ky = 0; ky < K; ++ky)
            for (std::int64_t kx = 0; kx < K; ++kx) {
              const std::int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              const double v = x[static_cast<std::size_t>((p * H + iy) * W + ix)];
              acc = max ? std::max(acc, v) : acc + v;
              ++count;
            }
          const std::int64_t y0 = oy * stride - pad, x0 = ox * stride - pad;
          if (include_pad) count = (std::min(y0 + K, H + pad) - y0) * (std::min(x0 + K, W + pad) - x0);
          r.push_back(max ? acc : acc / static_cast<double>(count));
        }
    return r;
  }
  [[nodiscard]] double loss(const vec& x, const vec& r) const {
    const vec yv = y(x);
    double l = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) l += r[i] * yv[i];
    return l;
  }
};

}  // namespace

TEST_CASE("MaxPoolGrad, AveragePoolGrad and GlobalAveragePoolGrad equal finite differences of the pooling",
          "[graph][training][pool]") {
  // sum(r * pool(x)) is linear in x for averages, and for max wherever the maxima are unique: x
  // holds distinct integers, so a step of 1/4 never changes which tap is a window's maximum and
  // central differences are exact. ResNet's stem pooling (3x3, stride 2, pad 1) overlaps its
  // windows, so one input receives the gradient of several outputs.
  for (const bool max : {true, false}) {
    INFO((max ? "MaxPoolGrad" : "AveragePoolGrad"));
    const pool_ref pr{2, 3, 7, 6, 3, 2, 1, max, false, false};
    const std::int64_t Ho = pr.out(pr.H), Wo = pr.out(pr.W);
    const std::int64_t n = pr.N * pr.C * pr.H * pr.W;
    vec xv(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) xv[static_cast<std::size_t>(i)] = static_cast<double>((i * 97) % n) - 100;
    const vec rv = test::values(pr.N * pr.C * Ho * Wo, 81);
    auto sys = test::make_system();
    session s{sys};
    graph g("pool_grad");
    auto x = g.add_input("x", {pr.N, pr.C, pr.H, pr.W}, dtype::f32);
    auto dy = g.add_input("dy", {pr.N, pr.C, Ho, Wo}, dtype::f32);
    const attributes a{{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}};
    g.set_output(g.add_op(max ? "MaxPoolGrad" : "AveragePoolGrad", {dy, x}, a, "dx"));
    CHECK(g.value("dx").shape == shape{pr.N, pr.C, pr.H, pr.W});
    const auto out = s.run(s.compile(g), {{"x", tensor({pr.N, pr.C, pr.H, pr.W}, dtype::f32, xv)},
                                          {"dy", tensor({pr.N, pr.C, Ho, Wo}, dtype::f32, rv)}})
                         .outputs;
    test::check_differences("dx", xv, out.at("dx").to_vector(), 0.25, 1e-5, [&] { return pr.loss(xv, rv); });
  }
  // The global average spreads each plane's gradient evenly: dX = dY / (H W).
  auto sys = test::make_system();
  session s{sys};
  graph g("gap_grad");
  auto x = g.add_input("x", {1, 2, 2, 2}, dtype::f32);
  auto dy = g.add_input("dy", {1, 2, 1, 1}, dtype::f32);
  g.set_output(g.add_op("GlobalAveragePoolGrad", {dy, x}, {}, "dx"));
  const auto out =
      s.run(s.compile(g), {{"x", tensor({1, 2, 2, 2}, dtype::f32)}, {"dy", tensor({1, 2, 1, 1}, dtype::f32, {4, -2})}})
          .outputs;
  CHECK(out.at("dx").to_vector() == vec{1, 1, 1, 1, -0.5, -0.5, -0.5, -0.5});
}

TEST_CASE("MaxPoolGrad and AveragePoolGrad with ceil_mode and count_include_pad are the adjoint of the pooling",
          "[graph][training][pool]") {
  // 8 x 6 with 3x3 windows, stride 2, pad 1: ceil_mode adds a last row and column of windows
  // that start on x's last element and reach past the end pad, where count_include_pad's divisor
  // (2 taps along that dimension) is neither the window's 3 nor the 1 inside x. The forward
  // operator must equal the reference, and the gradient its central differences (exact: the
  // average is linear, and x's distinct integers keep each maximum where it is).
  auto sys = test::make_system();
  session s{sys};
  for (const bool max : {true, false})
    for (const bool ceil : {false, true})
      for (const bool include_pad : {false, true}) {
        if (max && include_pad) continue;  // MaxPool has no count_include_pad
        INFO((max ? "MaxPool" : "AveragePool")
             << (ceil ? ", ceil_mode" : "") << (include_pad ? ", count_include_pad" : ""));
        const pool_ref pr{2, 3, 8, 6, 3, 2, 1, max, ceil, include_pad};
        const std::int64_t Ho = pr.out(pr.H), Wo = pr.out(pr.W);
        CHECK(Ho == (ceil ? 5 : 4));
        CHECK(Wo == (ceil ? 4 : 3));
        const std::int64_t n = pr.N * pr.C * pr.H * pr.W;
        vec xv(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) xv[static_cast<std::size_t>(i)] = static_cast<double>((i * 97) % n) - 100;
        const vec rv = test::values(pr.N * pr.C * Ho * Wo, 83);
        attributes a{{"kernel_shape", ints{3, 3}},
                     {"strides", ints{2, 2}},
                     {"pads", ints{1, 1, 1, 1}},
                     {"ceil_mode", std::int64_t{ceil ? 1 : 0}}};
        if (!max) a.set("count_include_pad", std::int64_t{include_pad ? 1 : 0});
        graph g("pool_grad");
        auto x = g.add_input("x", {pr.N, pr.C, pr.H, pr.W}, dtype::f32);
        auto dy = g.add_input("dy", {pr.N, pr.C, Ho, Wo}, dtype::f32);
        g.set_output(g.add_op(max ? "MaxPool" : "AveragePool", {x}, a, "y"));
        g.set_output(g.add_op(max ? "MaxPoolGrad" : "AveragePoolGrad", {dy, x}, a, "dx"));
        const auto out = s.run(s.compile(g), {{"x", tensor({pr.N, pr.C, pr.H, pr.W}, dtype::f32, xv)},
                                              {"dy", tensor({pr.N, pr.C, Ho, Wo}, dtype::f32, rv)}})
                             .outputs;
        CHECK(test::max_abs_diff(out.at("y").to_vector(), pr.y(xv)) <= 1e-4);
        test::check_differences("dx", xv, out.at("dx").to_vector(), 0.25, 1e-5, [&] { return pr.loss(xv, rv); });
      }
}

TEST_CASE("the pooling gradients refuse what their kernel cannot do, naming it", "[graph][training][pool][errors]") {
  struct refusal {
    const char* op;
    shape x, dy;
    attributes a;
    errc code;
    const char* words;
  };
  const attributes k3{{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}};
  const std::vector<refusal> cases{
      {"MaxPoolGrad", {1, 2, 8, 8}, {1, 2, 3, 3}, k3, errc::invalid_shape, "is not the shape of MaxPool's output"},
      {"GlobalAveragePoolGrad", {1, 2, 8, 8}, {1, 2, 2, 2}, {}, errc::invalid_shape, "GlobalAveragePool's output"},
      // ceil_mode's dY is the rounded-up output: the floor's extent is refused.
      {"MaxPoolGrad",
       {1, 2, 8, 8},
       {1, 2, 4, 4},
       {{"kernel_shape", ints{3, 3}},
        {"strides", ints{2, 2}},
        {"pads", ints{1, 1, 1, 1}},
        {"ceil_mode", std::int64_t{1}}},
       errc::invalid_shape,
       "is not the shape of MaxPool's output [1,2,5,5]"},
      {"MaxPoolGrad",
       {1, 2, 8, 8},
       {1, 2, 4, 4},
       {{"kernel_shape", ints{2, 2}}, {"strides", ints{2, 2}}, {"pads", ints{0, 0, 1, 1}}},
       errc::not_supported,
       "different pads before and after"},
      {"MaxPoolGrad",
       {1, 2, 8, 8},
       {1, 2, 6, 6},
       {{"kernel_shape", ints{2, 2}}, {"dilations", ints{2, 2}}},
       errc::not_supported,
       "dilations"},
      {"MaxPoolGrad",
       {1, 2, 8},
       {1, 2, 4},
       {{"kernel_shape", ints{2}}, {"strides", ints{2}}},
       errc::not_supported,
       "is not [N, C, H, W]"},
      {"MaxPoolGrad",
       {1, 2, 8, 8},
       {1, 2, 4, 4},
       {{"kernel_shape", ints{2, 2}}, {"stride", ints{2, 2}}},
       errc::not_supported,
       "MaxPoolGrad has no attribute 'stride' (its attributes: auto_pad, ceil_mode"},
  };
  for (const auto& c : cases) {
    INFO(c.op << ": " << c.words);
    graph g("bad");
    auto x = g.add_input("x", c.x, dtype::f32);
    auto dy = g.add_input("dy", c.dy, dtype::f32);
    try {
      g.add_node(c.op, "pg", {dy, x}, {"dx"}, c.a);
      FAIL("accepted");
    } catch (const graph_error& e) {
      CHECK(e.code() == c.code);
      CHECK(e.op() == "pg");
      CHECK(std::string(e.what()).find(c.words) != std::string::npos);
    }
  }
  // ConvGrad takes Conv's attributes likewise: a misspelt one is refused, not left at its default.
  graph g("bad");
  auto x = g.add_input("x", {1, 2, 5, 5}, dtype::f32);
  auto dy = g.add_input("dy", {1, 3, 3, 3}, dtype::f32);
  auto w = g.add_constant("w", tensor::timing_only({3, 2, 3, 3}, dtype::f32));
  try {
    g.add_node("ConvGrad", "cg", {dy, x, w}, {"dx", "dw"}, {{"stride", ints{2, 2}}});
    FAIL("accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK(std::string(e.what()).find("ConvGrad has no attribute 'stride' (its attributes: auto_pad, dilations") !=
          std::string::npos);
  }
}

TEST_CASE("BatchNormInternal and BatchNormalizationGrad equal a plain reference and finite differences",
          "[graph][training][batchnorm]") {
  const std::int64_t N = 3, C = 2, H = 2, W = 3, per = N * H * W;
  const double eps = 1e-5, momentum = 0.9;
  vec xv = test::values(N * C * H * W, 81, 2.0), gv = test::values(C, 82), bv = test::values(C, 83);
  const vec rv = test::values(N * C * H * W, 84), mean0{0.5, -0.25}, var0{1.5, 0.75};
  auto at = [&](std::int64_t n, std::int64_t c, std::int64_t i) {
    return static_cast<std::size_t>((n * C + c) * H * W + i);
  };
  // Training-mode normalisation with the batch's biased variance, and sum(r * y).
  auto loss = [&](vec* y, vec* mean, vec* var) {
    double l = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      double m = 0, v = 0;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t i = 0; i < H * W; ++i) m += xv[at(n, c, i)];
      m /= static_cast<double>(per);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t i = 0; i < H * W; ++i) v += (xv[at(n, c, i)] - m) * (xv[at(n, c, i)] - m);
      v /= static_cast<double>(per);
      if (mean) mean->push_back(m);
      if (var) var->push_back(v);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t i = 0; i < H * W; ++i) {
          const double yy = gv[static_cast<std::size_t>(c)] * (xv[at(n, c, i)] - m) / std::sqrt(v + eps) +
                            bv[static_cast<std::size_t>(c)];
          if (y) (*y)[at(n, c, i)] = yy;
          l += rv[at(n, c, i)] * yy;
        }
    }
    return l;
  };
  auto sys = test::make_system();
  session s{sys};
  graph g("bn_train");
  auto x = g.add_input("x", {N, C, H, W}, dtype::f32);
  auto r = g.add_input("dy", {N, C, H, W}, dtype::f32);
  auto gamma = g.add_constant("gamma", tensor({C}, dtype::f32, gv));
  auto beta = g.add_constant("beta", tensor({C}, dtype::f32, bv));
  auto m0 = g.add_constant("mean", tensor({C}, dtype::f32, mean0));
  auto v0 = g.add_constant("var", tensor({C}, dtype::f32, var0));
  g.add_node("BatchNormInternal", "bn", {x, gamma, beta, m0, v0}, {"y", "running_mean", "running_var", "sm", "sis"},
             {{"epsilon", eps}, {"momentum", momentum}});
  g.add_node("BatchNormalizationGrad", "bn_grad", {r, x, gamma, "sm", "sis"}, {"dx", "dgamma", "dbeta"}, {});
  for (const char* o : {"y", "running_mean", "running_var", "dx", "dgamma", "dbeta"}) g.set_output(o);
  const auto out =
      s.run(s.compile(g), {{"x", tensor({N, C, H, W}, dtype::f32, xv)}, {"dy", tensor({N, C, H, W}, dtype::f32, rv)}})
          .outputs;
  vec y(xv.size()), mean, var;
  loss(&y, &mean, &var);
  CHECK(test::max_abs_diff(out.at("y").to_vector(), y) <= 1e-5);
  // ONNX's momentum weighs the old statistic; the running variance is the unbiased one.
  const auto rm = out.at("running_mean").to_vector(), rvar = out.at("running_var").to_vector();
  for (std::size_t c = 0; c < 2; ++c) {
    CHECK(std::abs(rm[c] - (momentum * mean0[c] + (1 - momentum) * mean[c])) <= 1e-6);
    const double unbiased = var[c] * static_cast<double>(per) / static_cast<double>(per - 1);
    CHECK(std::abs(rvar[c] - (momentum * var0[c] + (1 - momentum) * unbiased)) <= 1e-5);
  }
  // Central differences of sum(r * y) (second order: h^2 error, far below the tolerance).
  const double h = 1e-4;
  auto l = [&] { return loss(nullptr, nullptr, nullptr); };
  test::check_differences("dx", xv, out.at("dx").to_vector(), h, 2e-4, l);
  test::check_differences("dgamma", gv, out.at("dgamma").to_vector(), h, 2e-4, l);
  test::check_differences("dbeta", bv, out.at("dbeta").to_vector(), h, 2e-4, l);
}

namespace {

// Training-mode batch normalisation in double (biased batch variance), NCHW.
vec bn_train_ref(const vec& x, std::int64_t N, std::int64_t C, std::int64_t HW, const vec& gamma, const vec& beta,
                 double eps) {
  vec y(x.size());
  for (std::int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t i = 0; i < HW; ++i) m += x[static_cast<std::size_t>((n * C + c) * HW + i)];
    m /= static_cast<double>(N * HW);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t i = 0; i < HW; ++i) {
        const double d = x[static_cast<std::size_t>((n * C + c) * HW + i)] - m;
        v += d * d;
      }
    v /= static_cast<double>(N * HW);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t i = 0; i < HW; ++i) {
        const auto k = static_cast<std::size_t>((n * C + c) * HW + i);
        y[k] = gamma[static_cast<std::size_t>(c)] * (x[k] - m) / std::sqrt(v + eps) + beta[static_cast<std::size_t>(c)];
      }
  }
  return y;
}

}  // namespace

TEST_CASE("a residual block's training step as a graph has the gradients of finite differences",
          "[graph][training][conv][batchnorm]") {
  // y = Relu(Conv(Relu(BN(Conv(x, w1))), w2) + x); loss = sum(r * y), so dY = r.
  const std::int64_t N = 2, C = 3, S = 4;
  const conv_ref cr{N, C, S, S, C, 3, 1, 1, 1};
  const vec xv = test::values(N * C * S * S, 91), rv = test::values(N * C * S * S, 92);
  vec w1 = test::values(C * C * 9, 93, 0.4), w2 = test::values(C * C * 9, 94, 0.4), gv = test::values(C, 95),
      bv = test::values(C, 96);
  const vec zero(static_cast<std::size_t>(C), 0.0);
  auto loss = [&] {
    vec h = bn_train_ref(cr.y(xv, w1, zero), N, C, S * S, gv, bv, 1e-5);
    test::ref_relu(h);
    vec y = cr.y(h, w2, zero);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += rv[i] * std::max(0.0, y[i] + xv[i]);
    return l;
  };
  graph g("block_step");
  auto x = g.add_input("x", {N, C, S, S}, dtype::f32);
  auto r = g.add_input("dy", {N, C, S, S}, dtype::f32);
  auto param = [&](const char* name, shape s, const vec& v) { return g.add_constant(name, tensor(s, dtype::f32, v)); };
  auto W1 = param("w1", {C, C, 3, 3}, w1), W2 = param("w2", {C, C, 3, 3}, w2);
  auto G = param("gamma", {C}, gv), B = param("beta", {C}, bv);
  auto M = param("mean", {C}, zero), V = param("var", {C}, vec(static_cast<std::size_t>(C), 1.0));
  const attributes conv{{"pads", ints{1, 1, 1, 1}}};
  auto c1 = g.add_op("Conv", {x, W1}, conv, "c1");
  g.add_node("BatchNormInternal", "bn", {c1, G, B, M, V}, {"a1", "rm", "rv", "sm", "sis"}, {});
  auto h = g.add_op("Relu", {"a1"}, {}, "h");
  auto s = g.add_op("Add", {g.add_op("Conv", {h, W2}, conv, "c2"), x}, {}, "s");
  g.set_output(g.add_op("Relu", {s}, {}, "y"));
  // Backward.
  auto ds = g.add_op("ReluGrad", {r, s}, {}, "ds");
  g.add_node("ConvGrad", "c2_grad", {ds, h, W2}, {"dh", "dw2"}, conv);
  auto da1 = g.add_op("ReluGrad", {"dh", "a1"}, {}, "da1");
  g.add_node("BatchNormalizationGrad", "bn_grad", {da1, c1, G, "sm", "sis"}, {"dc1", "dgamma", "dbeta"}, {});
  g.add_node("ConvGrad", "c1_grad", {"dc1", x, W1}, {"dx1", "dw1"}, conv);
  for (const char* o : {"dw1", "dw2", "dgamma", "dbeta"}) g.set_output(o);
  auto sys = test::make_system();
  session sess{sys};
  const tensor xt({N, C, S, S}, dtype::f32, xv), rt({N, C, S, S}, dtype::f32, rv);
  const auto o1 = sess.run(sess.compile(g, {.optimization_level = 1}), {{"x", xt}, {"dy", rt}}).outputs;
  // Level 2 fuses the residual Add into c2's epilogue; the gradients do not change.
  auto c2l = sess.compile(g, {.optimization_level = 2});
  CHECK(c2l.report().fused >= 1);
  const auto o2 = sess.run(c2l, {{"x", xt}, {"dy", rt}}).outputs;
  for (const char* o : {"dw1", "dw2", "dgamma", "dbeta"}) CHECK(o1.at(o).to_vector() == o2.at(o).to_vector());
  const double step = 1e-4;
  test::check_differences("dw1", w1, o1.at("dw1").to_vector(), step, 1e-3, loss);
  test::check_differences("dw2", w2, o1.at("dw2").to_vector(), step, 1e-3, loss);
  test::check_differences("dgamma", gv, o1.at("dgamma").to_vector(), step, 1e-3, loss);
  test::check_differences("dbeta", bv, o1.at("dbeta").to_vector(), step, 1e-3, loss);
}

TEST_CASE("level 2 masks a ConvGrad's dX with the ReluGrad that reads it, in the convolution's epilogue",
          "[graph][training][conv][fusion]") {
  // Forward y = Conv(Relu(Conv(x, w1)), w2); backward from dY through both convolutions. The
  // ReluGrad of h's gradient reads c2_grad's dX alone: level 2 computes it in c2_grad.
  const std::int64_t N = 2, C = 3, S = 5;
  const attributes conv{{"pads", ints{1, 1, 1, 1}}};
  auto build = [&](dtype t, bool dh_is_output) {
    graph g("dgrad_drelu");
    auto x = g.add_input("x", {N, C, S, S}, t);
    auto r = g.add_input("dy", {N, C, S, S}, t);
    auto W1 = g.add_constant("w1", tensor({C, C, 3, 3}, t, test::values(C * C * 9, 31, 0.5)));
    auto W2 = g.add_constant("w2", tensor({C, C, 3, 3}, t, test::values(C * C * 9, 32, 0.5)));
    auto a = g.add_op("Conv", {x, W1}, conv, "c1");
    auto h = g.add_op("Relu", {a}, {}, "h");
    g.set_output(g.add_op("Conv", {h, W2}, conv, "c2"));
    g.add_node("ConvGrad", "c2_grad", {r, h, W2}, {"dh", "dw2"}, conv);
    auto da = g.add_op("ReluGrad", {"dh", h}, {}, "da");
    g.add_node("ConvGrad", "c1_grad", {da, x, W1}, {"dx", "dw1"}, conv);
    for (const char* o : {"dx", "dw1", "dw2"}) g.set_output(o);
    if (dh_is_output) g.set_output("dh");
    return g;
  };
  for (dtype t : {dtype::f32, dtype::f16}) {
    CAPTURE(to_string(t));
    auto sys = test::make_system();
    session sess{sys};
    const tensor xt({N, C, S, S}, t, test::values(N * C * S * S, 33));
    const tensor rt({N, C, S, S}, t, test::values(N * C * S * S, 34));
    std::size_t fused[2] = {}, ops[2] = {};
    for (bool dh_is_output : {false, true}) {
      CAPTURE(dh_is_output);
      graph g = build(t, dh_is_output);
      auto c1 = sess.compile(g, {.optimization_level = 1});
      auto c2 = sess.compile(g, {.optimization_level = 2});
      const auto r1 = sess.run(c1, {{"x", xt}, {"dy", rt}});
      const auto r2 = sess.run(c2, {{"x", xt}, {"dy", rt}});
      // Bit for bit the unfused gradients.
      for (const char* o : {"dx", "dw1", "dw2"}) CHECK(r1.outputs.at(o).to_vector() == r2.outputs.at(o).to_vector());
      auto ran = [](const run_result& rr, std::string_view name) {
        return std::any_of(rr.ops.begin(), rr.ops.end(), [&](const op_timing& op) { return op.name == name; });
      };
      CHECK(ran(r1, "da"));
      // Fused only when nothing else reads dX: a dh the graph returns keeps its own ReluGrad.
      CHECK(ran(r2, "da") == dh_is_output);
      CHECK(r2.ops.size() + (dh_is_output ? 0 : 1) + 1 == r1.ops.size());  // and Relu h in c1's epilogue
      fused[dh_is_output] = c2.report().fused;
      ops[dh_is_output] = r2.ops.size();
    }
    CHECK(fused[0] == fused[1] + 1);
    CHECK(ops[0] + 1 == ops[1]);
  }
}

namespace {

/// The gradients of models::mlp_training_step with `layers` layers, last layer first: the order
/// backward produces them.
std::vector<std::string> gradients_backward_order(int layers) {
  std::vector<std::string> grads;
  for (int i = layers; i >= 1; --i) {
    grads.push_back("fc" + std::to_string(i) + ".weight.grad");
    grads.push_back("fc" + std::to_string(i) + ".bias.grad");
  }
  return grads;
}

/// Queues a run of cs[r] on every rank's session (every one before any waits: each rank's
/// all-reduce waits for its peers), drives the system and returns the results by rank.
std::vector<run_result> run_every_rank(npurt::system& sys, std::vector<std::unique_ptr<session>>& ss,
                                       const std::vector<compiled_graph>& cs,
                                       const std::vector<std::vector<feed>>& in) {
  std::vector<run_result> out(ss.size());
  for (std::size_t r = 0; r < ss.size(); ++r)
    ss[r]->async_run(cs[r], in[r], [&out, r](async_error_code ec, run_result res) {
      CHECK_FALSE(ec);
      out[r] = std::move(res);
    });
  sys.run();
  return out;
}

/// The one-layer step (2 samples of 2 features, 1 output) with weights [0.5, -1] and bias 0.25,
/// its gradients set as outputs: the ranks' step of the data-parallel tests.
graph one_layer_step() {
  graph g = models::mlp_training_step(2, {2, 1}, 0.1);
  g.set_constant("fc1.weight", tensor({2, 1}, dtype::f32, {0.5, -1}));
  g.set_constant("fc1.bias", tensor({1}, dtype::f32, {0.25}));
  for (const char* n : {"fc1.weight.grad", "fc1.bias.grad"}) g.set_output(n);
  return g;
}

}  // namespace

TEST_CASE("a training step's gradients stay on the device and are all-reduced there across sessions",
          "[graph][training][collective]") {
  // Data parallelism over two sessions, one per device: each rank's step computes its gradients,
  // returned as device tensors (compile_options::outputs_on_device), which an all-reduce sums in
  // place. One Gemm layer, y = x w + b, loss mean((y - t)^2): dz = 2 (y - t) / (batch * outputs)
  // = y - t here, dw = x^T dz, db = sum(dz).
  //   rank 0: x = [[1, 2], [3, 4]], t = [0, 1]: y = [-1.25, -2.25], dz = [-1.25, -3.25],
  //           dw = [-11, -15.5], db = -4.5
  //   rank 1: x = [[-1, 0], [2, 1]], t = [1, 0]: y = [-0.25, 0.25], dz = [-1.25, 0.25],
  //           dw = [1.75, 0.25], db = -1
  //   sums: dw = [-9.25, -15.25], db = -5.5 (every value exact in f32)
  npurt::system sys{sim::presets::ascend910(2)};
  auto comm = communicator::init_all(sys);
  const std::vector<vec> xs{{1, 2, 3, 4}, {-1, 0, 2, 1}}, ts{{0, 1}, {1, 0}};
  const std::vector<vec> dw{{-11, -15.5}, {1.75, 0.25}}, db{{-4.5}, {-1}};
  std::vector<std::unique_ptr<session>> ss;
  std::vector<graph> gs;
  std::vector<compiled_graph> on_device, on_host;
  const std::vector<std::string> grads{"fc1.weight.grad", "fc1.bias.grad"};
  for (int r = 0; r < 2; ++r) {
    ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r}));
    gs.push_back(one_layer_step());
    on_device.push_back(ss[r]->compile(gs[r], {.outputs_on_device = grads}));
    on_host.push_back(ss[r]->compile(gs[r]));
  }
  CHECK(on_device[0].report().outputs_on_device == 2);
  CHECK(on_host[0].report().outputs_on_device == 0);
  std::vector<run_result> rs;
  for (int r = 0; r < 2; ++r) {
    const std::vector<feed> in{{"x", tensor({2, 2}, dtype::f32, xs[r])}, {"target", tensor({2, 1}, dtype::f32, ts[r])}};
    // The host outputs are the rank's own gradients.
    const run_result h = ss[r]->run(on_host[r], in);
    CHECK(h.outputs.at("fc1.weight.grad").to_vector() == dw[r]);
    CHECK(h.outputs.at("fc1.bias.grad").to_vector() == db[r]);
    rs.push_back(ss[r]->run(on_device[r], in));
    for (const auto& n : grads) {
      CHECK(rs[r].outputs.at(n).is_device());
      CHECK(rs[r].outputs.at(n).device() == r);
    }
    CHECK(rs[r].outputs.at("loss").is_host());  // not named: on the host as before
    CHECK(rs[r].outputs.at("fc1.weight.next").is_host());
  }
  for (int r = 0; r < 2; ++r)
    for (const auto& n : grads) {
      tensor& t = rs[r].outputs.at(n);
      comm.all_reduce(t.data(), t.data(), static_cast<std::size_t>(t.elements()), dtype::f32, reduce_op::sum,
                      ss[r]->stream(0));
    }
  for (int r = 0; r < 2; ++r) {
    stream& s = ss[r]->stream(0);
    CHECK(rs[r].outputs.at("fc1.weight.grad").to_host(s).to_vector() == vec{-9.25, -15.25});
    CHECK(rs[r].outputs.at("fc1.bias.grad").to_host(s).to_vector() == vec{-5.5});
  }
  // A device output fed to the next run is copied on the device, as any device feed.
  graph scale("scale");
  scale.set_output(scale.add_op(
      "Mul", {scale.add_input("g", {2, 1}, dtype::f32), scale.add_constant("half", tensor({1}, dtype::f32, {0.5}))}, {},
      "avg"));
  auto cs = ss[1]->compile(scale);
  CHECK(ss[1]->run(cs, {{"g", rs[1].outputs.at("fc1.weight.grad")}}).outputs.at("avg").to_vector() ==
        vec{-4.625, -7.625});
  // A name that is not an output of the graph is refused at compile, naming it.
  try {
    (void)ss[0]->compile(gs[0], {.outputs_on_device = {"fc1.weight"}});
    FAIL("compile accepted a constant as an output to keep on the device");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.tensor() == "fc1.weight");
  }
}

TEST_CASE("compile_options::all_reduce sums the named outputs across ranks inside the run",
          "[graph][training][collective]") {
  // The one-layer step of the test above, two ranks: the same hand-computed sums, now reduced by
  // the run itself (host outputs and device outputs alike). The step's updates read the reduced
  // gradients: w' = [0.5, -1] - 0.1 [-9.25, -15.25] = [1.425, 0.525], b' = 0.25 - 0.1 (-5.5) = 0.8,
  // the same on both ranks. Under fp16 and mixed precision the gradients are computed, and
  // reduced, in fp16 (every value above is exact there) and the updates round to fp16.
  for (const precision prec : {precision::fp32, precision::fp16, precision::mixed}) {
    INFO("precision " << to_string(prec));
    const double tol = prec == precision::fp32 ? 1e-6 : 2e-3;
    npurt::system sys{sim::presets::ascend910(2)};
    auto comm = communicator::init_all(sys);
    const std::vector<vec> xs{{1, 2, 3, 4}, {-1, 0, 2, 1}}, ts{{0, 1}, {1, 0}};
    const std::vector<std::string> grads{"fc1.weight.grad", "fc1.bias.grad"};
    std::vector<std::unique_ptr<session>> ss;
    std::vector<graph> gs;
    std::vector<compiled_graph> cs, on_device;
    for (int r = 0; r < 2; ++r) {
      ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r, .precision = prec}));
      gs.push_back(one_layer_step());
      cs.push_back(ss[r]->compile(gs[r], {.all_reduce = output_all_reduce{.comm = comm, .outputs = grads}}));
      on_device.push_back(ss[r]->compile(gs[r], {.outputs_on_device = {"fc1.bias.grad"},
                                                 .all_reduce = output_all_reduce{.comm = comm, .outputs = grads}}));
    }
    CHECK(cs[0].report().all_reduced == 2);
    CHECK(cs[0].report().streams == 2);  // the compute stream and the communication stream
    std::vector<run_result> rs(2), ds(2);
    int completed = 0;
    for (int r = 0; r < 2; ++r) {
      const std::vector<feed> in{{"x", tensor({2, 2}, dtype::f32, xs[r])},
                                 {"target", tensor({2, 1}, dtype::f32, ts[r])}};
    // Every rank's run is queued before any waits: a blocking run would wait for peers that
    // have not been asked yet.
      ss[r]->async_run(cs[r], in, [&, r](async_error_code ec, run_result res) {
        CHECK_FALSE(ec);
        rs[static_cast<std::size_t>(r)] = std::move(res);
        ++completed;
      });
      ss[r]->async_run(on_device[r], in, [&, r](async_error_code ec, run_result res) {
        CHECK_FALSE(ec);
        ds[static_cast<std::size_t>(r)] = std::move(res);
        ++completed;
      });
    }
    sys.run();
    REQUIRE(completed == 4);
    for (int r = 0; r < 2; ++r) {
      CHECK(rs[r].outputs.at("fc1.weight.grad").to_vector() == vec{-9.25, -15.25});
      CHECK(rs[r].outputs.at("fc1.bias.grad").to_vector() == vec{-5.5});
      CHECK(ds[r].outputs.at("fc1.weight.grad").to_vector() == vec{-9.25, -15.25});
      CHECK(ds[r].outputs.at("fc1.bias.grad").is_device());
      CHECK(ds[r].outputs.at("fc1.bias.grad").to_host(ss[r]->stream(0)).to_vector() == vec{-5.5});
      const vec w = rs[r].outputs.at("fc1.weight.next").to_vector();
      CHECK(std::abs(w[0] - 1.425) < tol);
      CHECK(std::abs(w[1] - 0.525) < tol);
      CHECK(std::abs(rs[r].outputs.at("fc1.bias.next").to_vector()[0] - 0.8) < tol);
      CHECK(w == rs[0].outputs.at("fc1.weight.next").to_vector());
    // The reductions are operators of the run, on the stream after the compute streams.
      int seen = 0;
      for (const auto& op : rs[r].ops)
        if (op.type == "AllReduce") {
          ++seen;
          CHECK((op.name == "all_reduce(fc1.weight.grad)" || op.name == "all_reduce(fc1.bias.grad)"));
          CHECK(op.stream == 1);
          CHECK(op.end > op.start);
        }
      CHECK(seen == 2);
    }
  }
}

TEST_CASE("compile_options::all_reduce with reduce_op::avg applies the ranks' mean gradient",
          "[graph][training][collective]") {
  // Data-parallel SGD with the averaged gradient (NCCL's ncclAvg): the one-layer step of the tests
  // above on 2 and 3 ranks, rank 2 with x = [[0, 1], [1, 0]], t = [0, 0]: y = [-0.75, 0.75],
  // dz = y - t = [-0.75, 0.75], dw = x^T dz = [0.75, -0.75], db = 0.
  //   2 ranks: sums dw = [-9.25, -15.25], db = -5.5; averages [-4.625, -7.625], -2.75 (exact in
  //            f32 and f16); w' = [0.5, -1] - 0.1 [-4.625, -7.625] = [0.9625, -0.2375],
  //            b' = 0.25 - 0.1 (-2.75) = 0.525.
  //   3 ranks: sums dw = [-8.5, -16], db = -5.5; averages (one division of the f32 sum)
  //            [-8.5/3, -16/3], -5.5/3; w' = [0.5 + 0.85/3, -1 + 1.6/3], b' = 0.25 + 0.55/3.
  // Under fp16 the gradients are reduced in fp16, where -8.5/3 and -16/3 round (f16's step is
  // 2^-9 in [2, 4) and 2^-8 in [4, 8)): the tolerance covers that and the fp16 update.
  for (const int n : {2, 3})
    for (const precision prec : {precision::fp32, precision::fp16}) {
      INFO(n << " ranks, precision " << to_string(prec));
      const double tol = prec == precision::fp32 ? 1e-6 : 4e-3;
      npurt::system sys{sim::presets::ascend910(n)};
      auto comm = communicator::init_all(sys);
      const std::vector<vec> xs{{1, 2, 3, 4}, {-1, 0, 2, 1}, {0, 1, 1, 0}}, ts{{0, 1}, {1, 0}, {0, 0}};
      const std::vector<std::string> grads{"fc1.weight.grad", "fc1.bias.grad"};
      std::vector<std::unique_ptr<session>> ss;
      std::vector<graph> gs;
      std::vector<compiled_graph> cs;
      std::vector<std::vector<feed>> in;
      for (int r = 0; r < n; ++r) {
        ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r, .precision = prec}));
        gs.push_back(one_layer_step());
        cs.push_back(ss[r]->compile(
            gs[r], {.all_reduce = output_all_reduce{.comm = comm, .outputs = grads, .op = reduce_op::avg}}));
        in.push_back({{"x", tensor({2, 2}, dtype::f32, xs[r])}, {"target", tensor({2, 1}, dtype::f32, ts[r])}});
      }
      const std::vector<run_result> rs = run_every_rank(sys, ss, cs, in);
      const vec dw = n == 2 ? vec{-4.625, -7.625} : vec{double(-8.5f / 3.0f), double(-16.0f / 3.0f)};
      const double db = n == 2 ? -2.75 : double(-5.5f / 3.0f);
      const vec w_next = n == 2 ? vec{0.9625, -0.2375} : vec{0.5 + 0.85 / 3, -1 + 1.6 / 3};
      const double b_next = n == 2 ? 0.525 : 0.25 + 0.55 / 3;
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        const vec g = rs[r].outputs.at("fc1.weight.grad").to_vector();
        const double gb = rs[r].outputs.at("fc1.bias.grad").to_vector()[0];
        if (prec == precision::fp32) {
          CHECK(g == dw);
          CHECK(gb == db);
        } else {
          CHECK(std::abs(g[0] - dw[0]) < tol);
          CHECK(std::abs(g[1] - dw[1]) < tol);
          CHECK(std::abs(gb - db) < tol);
        }
        const vec w = rs[r].outputs.at("fc1.weight.next").to_vector();
        CHECK(std::abs(w[0] - w_next[0]) < tol);
        CHECK(std::abs(w[1] - w_next[1]) < tol);
        CHECK(std::abs(rs[r].outputs.at("fc1.bias.next").to_vector()[0] - b_next) < tol);
        // Every rank applied the same averaged gradient: the same parameters, bit for bit.
        CHECK(w == rs[0].outputs.at("fc1.weight.next").to_vector());
      }
    }
}

TEST_CASE("compile_options::all_reduce under the parallel schedule equals the sum of the ranks' own gradients",
          "[graph][training][collective]") {
  // Two layers: weight and input gradients run on separate streams, so an output's last access
  // may be on either; the reduction must wait for both. Expected: each rank's own gradients
  // from plain runs, summed on the host (two f32 addends: the sum is exact whichever rank adds).
  npurt::system sys{sim::presets::ascend910(2)};
  auto comm = communicator::init_all(sys);
  const std::vector<std::string> grads = gradients_backward_order(2);
  std::vector<std::unique_ptr<session>> ss;
  std::vector<graph> gs;
  std::vector<compiled_graph> own, summed;
  std::vector<std::vector<feed>> in(2);
  for (int r = 0; r < 2; ++r) {
    ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r}));
    gs.push_back(models::mlp_training_step(4, {3, 5, 2}, 0.1));  // the same seeded weights on both
    for (const auto& n : grads) gs[r].set_output(n);
    own.push_back(ss[r]->compile(gs[r], {.schedule = schedule::parallel}));
    summed.push_back(
        ss[r]->compile(gs[r], {.schedule = schedule::parallel, .all_reduce = output_all_reduce{comm, grads}}));
    CHECK(summed[r].report().schedule == schedule::parallel);
    vec x(12), t(8);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = (r == 0 ? 0.25 : -0.5) * static_cast<double>(i % 5) - 0.5;
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = r == 0 ? 0.125 * static_cast<double>(i) : 1.0;
    in[r].emplace_back("x", tensor({4, 3}, dtype::f32, x));
    in[r].emplace_back("target", tensor({4, 2}, dtype::f32, t));
  }
  CHECK(own[0].report().streams > 1);
  std::vector<run_result> mine(2);
  for (int r = 0; r < 2; ++r) mine[r] = ss[r]->run(own[r], in[r]);
  const std::vector<run_result> both = run_every_rank(sys, ss, summed, in);
  for (const auto& n : grads) {
    const vec a = mine[0].outputs.at(n).to_vector(), b = mine[1].outputs.at(n).to_vector();
    CHECK(a != b);  // the ranks' data differ
    vec sum(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) sum[i] = static_cast<double>(static_cast<float>(a[i] + b[i]));
    for (int r = 0; r < 2; ++r) CHECK(both[r].outputs.at(n).to_vector() == sum);
  }
  // The updates read the reduced gradients: both ranks end with the same parameters, bit for
  // bit, each the rank's own update moved by lr times the other rank's gradient.
  for (int i = 1; i <= 2; ++i)
    for (const std::string kind : {".weight", ".bias"}) {
      const std::string n = "fc" + std::to_string(i) + kind;
      const vec next = both[0].outputs.at(n + ".next").to_vector();
      CHECK(next == both[1].outputs.at(n + ".next").to_vector());
      const vec own = mine[0].outputs.at(n + ".next").to_vector(), other = mine[1].outputs.at(n + ".grad").to_vector();
      for (std::size_t k = 0; k < next.size(); ++k) CHECK(std::abs(next[k] - (own[k] - 0.1 * other[k])) < 1e-5);
    }
}

TEST_CASE("compile_options::all_reduce overlaps the reductions with the rest of the backward pass",
          "[graph][training][collective][timing]") {
  // Four layers, timing only, two ranks. Listed last layer first (the order backward produces
  // them), the first gradient's all-reduce starts while earlier layers' gradients are still being
  // computed (the updates, which read the reduced gradients, wait). Bounds: the run cannot be
  // shorter than the same step without reductions, and overlap makes it shorter than that step
  // followed by every reduction one after another (the durations taken from the same run).
  npurt::system sys{sim::presets::ascend910(2)};
  auto comm = communicator::init_all(sys);
  const std::vector<std::int64_t> widths{512, 1024, 1024, 1024, 512};
  const std::vector<std::string> grads = gradients_backward_order(4);
  std::vector<std::unique_ptr<session>> ss;
  std::vector<graph> gs;
  std::vector<compiled_graph> plain, reduced;
  for (int r = 0; r < 2; ++r) {
    ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r}));
    gs.push_back(models::mlp_training_step(256, widths, 0.1, false));
    for (const auto& n : grads) gs[r].set_output(n);
    plain.push_back(ss[r]->compile(gs[r], {.timing_only = true}));
    reduced.push_back(ss[r]->compile(gs[r], {.timing_only = true, .all_reduce = output_all_reduce{comm, grads}}));
  }
  const std::vector<feed> in{{"x", tensor::timing_only({256, 512}, dtype::f32)},
                             {"target", tensor::timing_only({256, 512}, dtype::f32)}};
  std::vector<run_result> base(2);
  for (int r = 0; r < 2; ++r) base[r] = ss[r]->run(plain[r], in);
  const std::vector<run_result> over = run_every_rank(sys, ss, reduced, {in, in});
  for (int r = 0; r < 2; ++r) {
    picoseconds reductions{0}, first_start = picoseconds::max(), last_compute_end{0};
    for (const auto& op : over[r].ops) {
      if (op.type == "AllReduce") {
        reductions += op.busy;
        first_start = std::min(first_start, op.start);
      } else if (op.type != "SGDUpdate") {
        last_compute_end = std::max(last_compute_end, op.end);
      }
    }
    INFO("rank " << r << ": step " << base[r].latency.count() << " ps, with reductions " << over[r].latency.count()
                 << " ps, reductions " << reductions.count() << " ps, first from " << first_start.count()
                 << " ps, compute to " << last_compute_end.count() << " ps");
    CHECK(first_start < last_compute_end);
    CHECK(over[r].latency >= base[r].latency);
    CHECK(over[r].latency < base[r].latency + reductions);
  }
}

TEST_CASE("compile_options::all_reduce refuses what it cannot do at compile", "[graph][collective][errors]") {
  npurt::system sys{sim::presets::ascend910(2)};
  auto all = communicator::init_all(sys);
  const std::vector<device_id> one{1};
  auto only_1 = communicator::init_all(sys, one);
  session s(sys);
  graph g = models::mlp_training_step(2, {2, 1}, 0.1, false);
  g.set_output("fc1.weight.grad");
  auto code_of = [&](const compile_options& o) {
    try {
      (void)s.compile(g, o);
    } catch (const error& e) { return e.code(); }
    return std::error_code{};
  };
  // A communicator without the session's device, an empty one, a priority out of range.
  CHECK(code_of({.all_reduce = output_all_reduce{only_1, {"fc1.weight.grad"}}}) == errc::invalid_argument);
  CHECK(code_of({.all_reduce = output_all_reduce{communicator{}, {"fc1.weight.grad"}}}) == errc::invalid_argument);
  CHECK(code_of({.all_reduce = output_all_reduce{.comm = all, .outputs = {"fc1.weight.grad"}, .priority = 8}}) ==
        errc::invalid_argument);
  CHECK(code_of({.schedule = schedule::pipeline, .all_reduce = output_all_reduce{all, {"fc1.weight.grad"}}}) ==
        errc::not_supported);
  // A reduce operator cast from an integer past the last one, avg.
  CHECK(code_of({.all_reduce = output_all_reduce{.comm = all,
                                                 .outputs = {"fc1.weight.grad"},
                                                 .op = static_cast<reduce_op>(99)}}) == errc::invalid_argument);
  // An output computed from another reduced output: its reduction would wait for the other's.
  graph chain("chain");
  const std::string a = chain.add_op("Relu", {chain.add_input("x", {2}, dtype::f32)}, {}, "a");
  chain.set_output(a);
  chain.set_output(chain.add_op("Relu", {a}, {}, "b"));
  try {
    (void)s.compile(chain, {.all_reduce = output_all_reduce{all, {"a", "b"}}});
    FAIL("compile accepted all_reduce of an output computed from another");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK(e.tensor() == "b");
  }
  CHECK(s.compile(chain, {.all_reduce = output_all_reduce{all, {"b"}}}).report().all_reduced == 1);
  // A name that is not an output, and one listed twice, are graph errors naming it.
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"fc1.weight"}, std::vector<std::string>{"fc1.weight.grad", "fc1.weight.grad"}}) {
    try {
      (void)s.compile(g, {.all_reduce = output_all_reduce{all, names}});
      FAIL("compile accepted all_reduce of " << names.back());
    } catch (const graph_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK(e.tensor() == names.back());
    }
  }
  CHECK(s.compile(g, {.all_reduce = output_all_reduce{all, {"fc1.weight.grad"}}}).report().all_reduced == 1);
}

TEST_CASE("a rank's all_reduce whose peers never run fails the run naming the output", "[graph][collective][errors]") {
  npurt::system sys{sim::presets::ascend910(2)};
  constexpr picoseconds limit{1'000'000'000};  // 1 ms
  auto comm = communicator::init_all(sys, {.exec_timeout = limit, .connect_timeout = limit});
  session s(sys);
  graph g = one_layer_step();
  auto c = s.compile(g, {.all_reduce = output_all_reduce{comm, {"fc1.bias.grad", "fc1.weight.grad"}}});
  // Rank 1 never runs: the blocking run of rank 0 waits for it until the timeout.
  try {
    (void)s.run(c, {{"x", tensor({2, 2}, dtype::f32, {1, 2, 3, 4})}, {"target", tensor({2, 1}, dtype::f32, {0, 1})}});
    FAIL("a run whose all-reduce has no peer succeeded");
  } catch (const timeout_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("all_reduce of output 'fc1.bias.grad'") != std::string::npos);
    CHECK(what.find("had not arrived") != std::string::npos);
  }
}

TEST_CASE("run_batches reports a failed all_reduce of compile_options::all_reduce, naming the output",
          "[graph][collective][errors]") {
  // The failure is on the communication stream, which no event wait passes on: run_batches must
  // read it there, or the batches would come back with unreduced gradients and the error would be
  // the next run's.
  npurt::system sys{sim::presets::ascend910(2)};
  constexpr picoseconds limit{1'000'000'000};  // 1 ms
  auto comm = communicator::init_all(sys, {.exec_timeout = limit, .connect_timeout = limit});
  session s(sys);
  graph g = one_layer_step();
  auto c = s.compile(g, {.all_reduce = output_all_reduce{comm, {"fc1.bias.grad", "fc1.weight.grad"}}});
  const std::vector<feed> in{{"x", tensor({2, 2}, dtype::f32, {1, 2, 3, 4})},
                             {"target", tensor({2, 1}, dtype::f32, {0, 1})}};
  try {
    (void)s.run_batches(c, {in, in});
    FAIL("run_batches whose all-reduce has no peer succeeded");
  } catch (const timeout_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("npurt::session::run_batches") != std::string::npos);
    CHECK(what.find("all_reduce of output 'fc1.bias.grad'") != std::string::npos);
  }
  // Nothing of the failed call is left for the next one: every stream of the session is clean.
  std::error_code ec;
  CHECK(s.comm_stream().query(ec));
  CHECK_FALSE(ec);
  CHECK(s.stream(0).query(ec));
  CHECK_FALSE(ec);
}

namespace {

// The one-layer step's feeds for the data of rank 0 or 1 of the tests above.
std::vector<feed> step_feeds(int data) {
  const std::vector<vec> xs{{1, 2, 3, 4}, {-1, 0, 2, 1}}, ts{{0, 1}, {1, 0}};
  return {{"x", tensor({2, 2}, dtype::f32, xs[static_cast<std::size_t>(data)])},
          {"target", tensor({2, 1}, dtype::f32, ts[static_cast<std::size_t>(data)])}};
}

}  // namespace

TEST_CASE("async_run_batches queues every batch at the call and completes with run_batches' outputs",
          "[graph][run][async]") {
  // Per batch, the one-layer step's own gradients (hand-computed above): data 0 gives
  // dw = [-11, -15.5], db = -4.5; data 1 gives dw = [1.75, 0.25], db = -1.
  const std::vector<vec> dw{{-11, -15.5}, {1.75, 0.25}}, db{{-4.5}, {-1}};
  const std::vector<int> data{0, 1, 0};
  for (const char* mode : {"one slot", "overlap", "pipeline"}) {
    INFO(mode);
    npurt::system sys{sim::presets::ascend910(1)};
    session s(sys);
    if (std::string_view(mode) == "overlap") s.enable_overlap();
    graph g = one_layer_step();
    auto c = std::string_view(mode) == "pipeline" ? s.compile(g, {.schedule = schedule::pipeline, .pipeline_stages = 2})
                                                  : s.compile(g);
    std::vector<std::vector<feed>> batches;
    for (int d : data) batches.push_back(step_feeds(d));
    const picoseconds blocking = s.run_batches(c, batches).latency;
    batches_result r;
    int calls = 0;
    s.async_run_batches(c, batches, [&](async_error_code ec, batches_result res) {
      CHECK_FALSE(ec);
      r = std::move(res);
      ++calls;
    });
    // Queued at the call, completed later: the session's streams have work, the handler has not run.
    CHECK(calls == 0);
    CHECK_FALSE((std::string_view(mode) == "pipeline" ? s.stage_stream(0) : s.stream(0)).query());
    sys.run();
    REQUIRE(calls == 1);
    CHECK(r.error.empty());
    REQUIRE(r.outputs.size() == data.size());
    for (std::size_t b = 0; b < data.size(); ++b) {
      const auto d = static_cast<std::size_t>(data[b]);
      CHECK(r.outputs[b].at("fc1.weight.grad").to_vector() == dw[d]);
      CHECK(r.outputs[b].at("fc1.bias.grad").to_vector() == db[d]);
    }
    // Batches that take turns in several slots are queued as run_batches queues them.
    CHECK(r.latency > picoseconds{0});
    if (std::string_view(mode) != "one slot") CHECK(r.latency == blocking);
    CHECK(r.batches_per_second > 0);
  }
}

TEST_CASE("async_run_batches lets every rank queue its batches of a data-parallel step from one thread",
          "[graph][training][collective]") {
  // Two ranks, two batches each; the ranks swap their data in the second batch, so both batches
  // reduce to the sums of the test above: dw = [-9.25, -15.25], db = -5.5, and every update is
  // w' = [1.425, 0.525], b' = 0.8 on both ranks (the parameters are the graph's constants).
  // run_batches could not do this: rank 0's call would wait for rank 1's, not yet asked.
  for (const bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    npurt::system sys{sim::presets::ascend910(2)};
    auto comm = communicator::init_all(sys);
    const std::vector<std::string> grads{"fc1.weight.grad", "fc1.bias.grad"};
    std::vector<std::unique_ptr<session>> ss;
    std::vector<graph> gs;
    std::vector<compiled_graph> cs;
    for (int r = 0; r < 2; ++r) {
      ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r}));
      if (overlap) ss.back()->enable_overlap();
      gs.push_back(one_layer_step());
      cs.push_back(ss[r]->compile(gs[r], {.all_reduce = output_all_reduce{.comm = comm, .outputs = grads}}));
    }
    std::vector<batches_result> rs(2);
    int completed = 0;
    for (int r = 0; r < 2; ++r)
      ss[r]->async_run_batches(cs[r], {step_feeds(r), step_feeds(1 - r)},
                               [&, r](async_error_code ec, batches_result res) {
                                 CHECK_FALSE(ec);
                                 rs[static_cast<std::size_t>(r)] = std::move(res);
                                 ++completed;
                               });
    sys.run();
    REQUIRE(completed == 2);
    for (const auto& r : rs) {
      REQUIRE(r.outputs.size() == 2);
      for (const auto& o : r.outputs) {
        CHECK(o.at("fc1.weight.grad").to_vector() == vec{-9.25, -15.25});
        CHECK(o.at("fc1.bias.grad").to_vector() == vec{-5.5});
        const vec w = o.at("fc1.weight.next").to_vector();
        CHECK(std::abs(w[0] - 1.425) < 1e-6);
        CHECK(std::abs(w[1] - 0.525) < 1e-6);
        CHECK(std::abs(o.at("fc1.bias.next").to_vector()[0] - 0.8) < 1e-6);
        CHECK(w == rs[0].outputs[0].at("fc1.weight.next").to_vector());
      }
    }
  }
}

namespace {
npurt::task<void> batches_expecting_timeout(session& s, const compiled_graph& c, std::string& what, bool& timed_out) {
  const std::vector<std::vector<feed>> batches{step_feeds(0), step_feeds(1)};
  try {
    (void)co_await s.async_run_batches(c, batches, npurt::use_task);
  } catch (const timeout_error& e) {
    what = e.what();
    timed_out = true;
  }
}
}  // namespace

TEST_CASE("async_run_batches reports what failed through its completion and refuses bad feeds with nothing queued",
          "[graph][collective][errors]") {
  npurt::system sys{sim::presets::ascend910(2)};
  constexpr picoseconds limit{1'000'000'000};  // 1 ms
  auto comm = communicator::init_all(sys, {.exec_timeout = limit, .connect_timeout = limit});
  session s(sys);
  graph g = one_layer_step();
  auto c = s.compile(g, {.all_reduce = output_all_reduce{comm, {"fc1.bias.grad", "fc1.weight.grad"}}});
  std::error_code got;
  batches_result r;
  int calls = 0;
  auto handler = [&](async_error_code ec, batches_result res) {
    got = ec;
    r = std::move(res);
    ++calls;
  };
  SECTION("a batch's feed of the wrong shape: nothing is queued, the completion says which") {
    const std::vector<feed> bad{{"x", tensor({2, 3}, dtype::f32)}, {"target", tensor({2, 1}, dtype::f32)}};
    s.async_run_batches(c, {step_feeds(0), bad}, handler);
    CHECK(calls == 0);  // never inside the call
    std::error_code ec;
    CHECK(s.stream(0).query(ec));  // nothing queued, not even the first batch
    sys.run();
    REQUIRE(calls == 1);
    CHECK(got == errc::invalid_shape);
    CHECK(r.error.find("input 'x' expects shape") != std::string::npos);
    CHECK(r.outputs.empty());
  }
  SECTION("an all-reduce whose peer never runs: the completion names the output") {
    s.async_run_batches(c, {step_feeds(0), step_feeds(1)}, handler);
    sys.run();
    REQUIRE(calls == 1);
    CHECK(is_timeout(got));
    INFO(r.error);
    CHECK(r.error.find("npurt::session::async_run_batches") != std::string::npos);
    CHECK(r.error.find("all_reduce of output 'fc1.bias.grad'") != std::string::npos);
    CHECK(std::string(sys.recent_error_message()) == r.error);
    CHECK(r.outputs.empty());
    // Read by the completion: not left for the next call.
    std::error_code ec;
    CHECK(s.comm_stream().query(ec));
    CHECK_FALSE(ec);
  }
  SECTION("awaited with use_task: the blocking call's exception, its class and words") {
    std::string what;
    bool timed_out = false;
    npurt::spawn(sys, batches_expecting_timeout(s, c, what, timed_out));
    sys.run();
    CHECK(timed_out);
    CHECK(what.find("npurt::session::async_run_batches: all_reduce of output 'fc1.bias.grad'") != std::string::npos);
  }
}

TEST_CASE("resnet_training_step's gradients equal finite differences of its loss, and its updates apply them",
          "[graph][training][resnet]") {
  // A small bottleneck ResNet (two stages of one block, base width 4, 5 classes, 32x32 images),
  // with real data: every kind of layer the full ResNet-50 step has (the stem, the max pool, a
  // projection and a strided stage, the global pooling, the classifier, softmax cross-entropy).
  // The oracle is the loss itself: central differences of the step's "loss" output, each from a
  // graph whose constant is moved by +-h, against the step's own gradient. The step computes in
  // f32, so the differences carry f32 rounding of the loss divided by 2h; BatchNorm's batch
  // statistics and the max pool make the loss smooth only almost everywhere.
  const models::resnet_config rc{.batch = 2, .image = 32, .blocks = {1, 1}, .width = 4, .classes = 5, .lr = 0.5};
  std::vector<std::string> grads;
  graph g = models::resnet_training_step(rc, true, 7, &grads);
  // Backward's order: the classifier first, the stem last; every parameter once.
  REQUIRE(grads.size() == 2 + 3 * 9);  // fc, and weight, gamma, beta of 9 convolutions
  CHECK(grads.front() == "fc.weight.grad");
  CHECK(grads[1] == "fc.bias.grad");
  CHECK(grads.back() == "conv1.weight.grad");
  const std::vector<std::string> probe{"fc.weight",
                                       "fc.bias",
                                       "layer2.0.bn3.weight",
                                       "layer2.0.downsample.1.bias",
                                       "layer1.0.conv2.weight",
                                       "layer2.0.conv2.weight",
                                       "bn1.weight",
                                       "conv1.weight"};
  test::output_gradients(g, grads, probe);
  tensor img({2, 3, 32, 32}, dtype::f32, test::values(2 * 3 * 32 * 32, 91));
  tensor labels({2, 5}, dtype::f32, {0, 0, 1, 0, 0, 1, 0, 0, 0, 0});
  auto sys = test::make_system();
  session s{sys};
  const std::vector<feed> in{{"input", img}, {"labels", labels}};
  const auto out = s.run(s.compile(g), in).outputs;
  const double loss = out.at("loss").to_vector().at(0);
  CHECK(loss > 0);
  CHECK(std::isfinite(loss));
  // The update: next = param - lr * grad.
  test::check_sgd_updates(g, out, probe, rc.lr);
  const auto loss_with = [&](const std::string& name, std::size_t i, double delta) {
    return test::loss_with(s, in, [&] { return models::resnet_training_step(rc, true, 7); }, name, i, delta);
  };
  int checked = 0;
  for (const auto& p : probe) {
    const vec d = out.at(p + ".grad").to_vector();
    // The first, the last and a middle entry of each.
    for (const std::size_t i : {std::size_t{0}, d.size() / 2, d.size() - 1}) {
      const double h = 1e-3;
      const double fd = (loss_with(p, i, h) - loss_with(p, i, -h)) / (2 * h);
      INFO(p << "[" << i << "]: gradient " << d[i] << ", central difference " << fd);
      CHECK(std::abs(d[i] - fd) <= 2e-3 + 2e-2 * std::abs(fd));
      ++checked;
    }
  }
  CHECK(checked == 3 * static_cast<int>(probe.size()));
}

namespace {

// `src` rebuilt with the stem's ConvGrad computing the image's gradient too, as a framework that
// does not skip it would: every other node, constant, input and output as they are.
graph with_stem_dx(const graph& src) {
  graph g(src.name());
  for (const auto& i : src.inputs()) g.add_input(i, src.value(i).shape, src.value(i).type);
  for (const auto& n : src.nodes())
    for (const auto& in : n.inputs)
      if (const tensor* c = in.empty() ? nullptr : src.constant(in); c && !g.find(in)) g.add_constant(in, c->clone());
  for (const auto& n : src.nodes()) {
    auto outs = n.outputs;
    if (n.name == "conv1.backward") outs[0] = "conv1.input.grad";
    g.add_node(n.type, n.name, n.inputs, outs, n.attrs);
  }
  for (const auto& o : src.outputs()) g.set_output(o);
  return g;
}

}  // namespace

TEST_CASE("resnet_training_step's stem computes no gradient of the image, and every other result is unchanged",
          "[graph][training][resnet]") {
  // The stem's ConvGrad leaves dX out: the step launches one conv2d_backward_data fewer and its
  // results are those of the form that computes the image's gradient, bit for bit (the same
  // kernels on the same operands; the gradients' check against the loss is the test above).
  const models::resnet_config rc{.batch = 2, .image = 32, .blocks = {1, 1}, .width = 4, .classes = 5, .lr = 0.5};
  std::vector<std::string> grads;
  graph g = models::resnet_training_step(rc, true, 7, &grads);
  for (const auto& p : grads) g.set_output(p);
  CHECK(g.find("conv1.input.grad") == nullptr);
  const auto stem =
      std::find_if(g.nodes().begin(), g.nodes().end(), [](const node& n) { return n.name == "conv1.backward"; });
  REQUIRE(stem != g.nodes().end());
  CHECK(stem->type == "ConvGrad");
  CHECK(stem->outputs == std::vector<std::string>{"", "conv1.weight.grad"});
  graph full = with_stem_dx(g);
  REQUIRE(full.find("conv1.input.grad") != nullptr);
  CHECK(full.value("conv1.input.grad").shape == shape{2, 3, 32, 32});
  tensor img({2, 3, 32, 32}, dtype::f32, test::values(2 * 3 * 32 * 32, 91));
  tensor labels({2, 5}, dtype::f32, {0, 0, 1, 0, 0, 1, 0, 0, 0, 0});
  const std::vector<feed> in{{"input", img}, {"labels", labels}};
  auto sys = test::make_system();
  session s{sys};
  const auto cg = s.compile(g), cf = s.compile(full);
  CHECK(cg.report().kernels + 1 == cf.report().kernels);
  const auto rg = s.run(cg, in), rf = s.run(cf, in);
  REQUIRE(rg.outputs.size() == rf.outputs.size());
  for (const auto& [name, v] : rf.outputs) {
    INFO(name);
    CHECK(v.to_vector() == rg.outputs.at(name).to_vector());
  }
  const auto busy = [](const run_result& r) {
    const auto it =
        std::find_if(r.ops.begin(), r.ops.end(), [](const op_timing& o) { return o.name == "conv1.backward"; });
    return it == r.ops.end() ? picoseconds{-1} : it->busy;
  };
  CHECK(busy(rg) > picoseconds{0});
  CHECK(busy(rg) < busy(rf));
  CHECK(rg.ops.size() == rf.ops.size());
}

TEST_CASE("resnet_training_step at ResNet-50's size runs timing-only no faster than its cube floor",
          "[graph][training][resnet]") {
  // Reference §1.3's floor: the forward pass's and both backward passes' multiply-accumulates
  // (dX and dW each as many as the forward) at the cube's fp16 peak on every core.
  const models::resnet_config rc{.batch = 32};
  std::vector<std::string> grads;
  graph g = models::resnet_training_step(rc, false, 1, &grads);
  CHECK(grads.size() == 2 + 3 * 53);  // ResNet-50: 53 convolutions and the classifier
  // torchvision's names, as resnet50_graph's: a projection's BatchNorm is "downsample.1".
  CHECK(g.constant("layer3.0.downsample.1.weight") != nullptr);
  CHECK(models::resnet50_graph(1).constant("layer3.0.downsample.1.weight") != nullptr);
  const models::resnet50 table{1, dtype::f16};
  const double flops = 2.0 * 3.0 * static_cast<double>(table.forward_macs()) * static_cast<double>(rc.batch);
  const sim::preset p = sim::presets::ascend910();
  const double floor_s = flops / p.peak_fp16_flops();
  npurt::system sys{sim::presets::ascend910(1)};
  session s(sys, session_config{.precision = precision::fp16});
  auto c = s.compile(g, {.memory_reuse = true, .optimization_level = 2});
  const run_result r = s.run(c, {{"input", tensor::timing_only({32, 3, 224, 224}, dtype::f32)},
                                 {"labels", tensor::timing_only({32, 1000}, dtype::f32)}});
  INFO("step " << to_us(r.latency) << " us, cube floor " << floor_s * 1e6 << " us");
  CHECK(to_us(r.latency) * 1e-6 >= floor_s);
  // Refusals: an image the stages cannot halve, an empty stage list.
  CHECK_THROWS_AS(models::resnet_training_step({.image = 16}), caller_error);
  CHECK_THROWS_AS(models::resnet_training_step({.blocks = {}}), caller_error);
  CHECK_THROWS_AS(models::resnet_training_step({.blocks = {3, 0}}), caller_error);
}

// Destroyed outside run, a session waits for what it queued, a collective whose peer never comes
// included, until the communicator's execution timeout. It does not abort that collective itself
// (the communicator is the caller's, and abort ends it on every rank for good): a caller who
// knows the peer will not come aborts the communicator, and the destruction returns at once.
TEST_CASE("a session destroyed outside run waits for its stream's collective unless the caller aborts it",
          "[graph][session][collective]") {
  npurt::system sys{sim::presets::ascend910(2)};
  constexpr picoseconds limit{10'000'000'000'000LL};  // 10 s
  auto comm = communicator::init_all(sys, {.exec_timeout = limit, .name = "dp"});
  device_buffer buf(sys.device(0), 64);
  auto sess = std::make_unique<session>(sys, session_config{.device_id = 0});
  comm.all_reduce(buf.data(), buf.data(), 16, dtype::f32, reduce_op::sum, sess->stream(0));  // rank 1 never calls
  const sim_time before = sys.now();
  SECTION("without an abort: until the execution timeout") {
    sess.reset();
    CHECK(sys.now() - before >= limit);
    std::error_code ec;
    sys.device(0).synchronize(ec);
    CHECK(ec == errc::task_timeout);
  }
  SECTION("after comm.abort(): at once") {
    comm.abort();
    sess.reset();
    CHECK(sys.now() - before < limit / 1000);
    std::error_code ec;
    sys.device(0).synchronize(ec);
    CHECK(ec == errc::operation_aborted);
  }
}
