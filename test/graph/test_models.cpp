#include <npurt/models/graphs.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>

using namespace npurt;

namespace {

std::vector<double> values_of(const graph& g, const std::string& name) { return g.constant(name)->to_vector(); }

// Plain reference of one post-LayerNorm encoder block, in double.
std::vector<double> ref_encoder(const graph& g, const models::transformer_config& c, const std::vector<double>& x) {
  const std::int64_t B = c.batch, S = c.seq, H = c.hidden, h = c.heads, d = H / h, F = c.ffn, T = B * S;
  auto lin = [&](const std::vector<double>& in, const std::string& n, std::int64_t fin, std::int64_t fout) {
    auto b = values_of(g, "block." + n + ".bias");
    return test::ref_matmul(in, values_of(g, "block." + n + ".weight"), T, fin, fout, &b);
  };
  auto ln = [&](std::vector<double> v, const std::string& n) {
    auto gm = values_of(g, "block." + n + ".weight"), bt = values_of(g, "block." + n + ".bias");
    for (std::int64_t t = 0; t < T; ++t) {
      double mean = 0, var = 0;
      for (std::int64_t i = 0; i < H; ++i) mean += v[static_cast<std::size_t>(t * H + i)];
      mean /= static_cast<double>(H);
      for (std::int64_t i = 0; i < H; ++i) var += std::pow(v[static_cast<std::size_t>(t * H + i)] - mean, 2);
      var /= static_cast<double>(H);
      for (std::int64_t i = 0; i < H; ++i) {
        auto& e = v[static_cast<std::size_t>(t * H + i)];
        e = (e - mean) / std::sqrt(var + 1e-5) * gm[static_cast<std::size_t>(i)] + bt[static_cast<std::size_t>(i)];
      }
    }
    return v;
  };
  const auto q = lin(x, "query", H, H), k = lin(x, "key", H, H), v = lin(x, "value", H, H);
  std::vector<double> ctx(static_cast<std::size_t>(T * H));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> p(static_cast<std::size_t>(S));
        double mx = -1e300, sum = 0;
        for (std::int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e)
            s += q[static_cast<std::size_t>((b * S + i) * H + hh * d + e)] *
                 k[static_cast<std::size_t>((b * S + j) * H + hh * d + e)];
          p[static_cast<std::size_t>(j)] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, p[static_cast<std::size_t>(j)]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (std::int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < S; ++j)
            acc += p[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((b * S + j) * H + hh * d + e)];
          ctx[static_cast<std::size_t>((b * S + i) * H + hh * d + e)] = acc;
        }
      }
  auto a = lin(ctx, "attention.output", H, H);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += x[i];
  a = ln(a, "ln1");
  auto f = lin(a, "intermediate", H, F);
  for (auto& e : f) e = 0.5 * e * (1 + std::tanh(0.7978845608028654 * (e + 0.044715 * e * e * e)));
  auto o = lin(f, "output", F, H);
  for (std::size_t i = 0; i < o.size(); ++i) o[i] += a[i];
  return ln(o, "ln2");
}

}  // namespace

TEST_CASE("the MLP builder runs functionally and equals a plain reference", "[graph][models]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = models::mlp(4, {8, 16, 3});
  const auto xv = test::values(32, 4);
  tensor x({4, 8}, dtype::f32, xv);
  auto y = s.run(s.compile(g), {{"x", x}}).outputs.at("prob").to_vector();
  auto b1 = values_of(g, "fc1.bias"), b2 = values_of(g, "fc2.bias");
  auto h = test::ref_matmul(xv, values_of(g, "fc1.weight"), 4, 8, 16, &b1);
  test::ref_relu(h);
  auto z = test::ref_matmul(h, values_of(g, "fc2.weight"), 4, 16, 3, &b2);
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int c = 0; c < 3; ++c) sum += std::exp(z[static_cast<std::size_t>(r * 3 + c)]);
    for (int c = 0; c < 3; ++c)
      CHECK(std::abs(y[static_cast<std::size_t>(r * 3 + c)] - std::exp(z[static_cast<std::size_t>(r * 3 + c)]) / sum) <
            1e-5);
  }
}

TEST_CASE("a Transformer encoder block equals a plain reference at small size", "[graph][models]") {
  auto sys = test::make_system();
  session s{sys};
  const models::transformer_config c{2, 4, 8, 2, 16, dtype::f32};
  graph g = models::transformer_encoder(c);
  const auto xv = test::values(2 * 4 * 8, 17);
  tensor x({2, 4, 8}, dtype::f32, xv);
  for (int level : {0, 2}) {
    auto y = s.run(s.compile(g, {.optimization_level = level}), {{"x", x}}).outputs.at("y").to_vector();
    CHECK(test::max_abs_diff(y, ref_encoder(g, c, xv)) < 1e-4);
  }
}

TEST_CASE("the ResNet-50 graph has the layer table's parameters and runs timing-only at full size", "[graph][models]") {
  graph g = models::resnet50_graph(1, 224);
  std::uint64_t params = 0;
  std::size_t convs = 0;
  for (const auto& n : g.nodes()) {
    convs += n.type == "Conv";
    for (std::size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.type == "BatchNormalization" && i > 2) continue;  // running statistics are buffers
      if (const tensor* t = g.constant(n.inputs[i])) params += static_cast<std::uint64_t>(t->elements());
    }
  }
  CHECK(convs == 53);
  CHECK(params == 25'557'032);
  CHECK(g.value("logits").shape == shape{1, 1000});
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g, {.optimization_level = 2});
  CHECK(c.report().timing_only);
  // Every BN folded; every Relu and every residual Add in a convolution's epilogue.
  CHECK(c.report().fused == 53 + 49 + 16);
  tensor in = tensor::timing_only({1, 3, 224, 224}, dtype::f32);
  auto r = s.run(c, {{"input", in}});
  CHECK(r.latency > picoseconds{0});
  CHECK(r.ops.size() == c.report().operators);
}

TEST_CASE("ResNet-50 at a small image computes the same logits fused and unfused", "[graph][models][fusion]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = models::resnet50_graph(1, 32, true);
  tensor in = test::random_tensor({1, 3, 32, 32}, 3);
  auto y0 = s.run(s.compile(g, {.optimization_level = 0}), {{"input", in}}).outputs.at("logits").to_vector();
  auto y3 = s.run(s.compile(g, {.schedule = schedule::parallel, .optimization_level = 3}), {{"input", in}})
                .outputs.at("logits")
                .to_vector();
  double scale = 0;
  for (double v : y0) scale = std::max(scale, std::abs(v));
  CHECK(scale > 0);
  CHECK(test::max_abs_diff(y0, y3) < 1e-3 * std::max(1.0, scale));
}

TEST_CASE("BERT-Large builds 24 blocks and runs timing-only", "[graph][models]") {
  graph g = models::bert_large(1, 128);
  std::size_t matmuls = 0;
  for (const auto& n : g.nodes()) matmuls += n.type == "MatMul";
  CHECK(matmuls == 24 * 8);  // q, k, v, scores, context, output, two FFN
  auto sys = test::make_system();
  session s{sys, {.precision = precision::fp16}};
  auto c = s.compile(g);
  tensor x = tensor::timing_only({1, 128, 1024}, dtype::f32);
  CHECK(s.run(c, {{"x", x}}).latency > picoseconds{0});
}
