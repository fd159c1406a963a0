// Asin, Acos, Atan; Pow with an exponent of another dtype; the training operators Adagrad, Adam
// and Momentum; BatchNormalization in training mode; Det; ReverseSequence
// (onnx.ai/onnx/operators): compiled runs against references written here from ONNX's
// definitions and NumPy's semantics, and the typed errors.
#include <npurt/graph/session.hpp>

#include "../training_reference.hpp"
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// Whether got is within rel of want, element by element (NaN matching NaN).
bool tr_close(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (!(std::fabs(got[i] - want[i]) <= rel * (1 + std::fabs(want[i])))) return false;
  }
  return true;
}

// Runs g on one system, fp32, with these feeds.
run_result tr_run(graph& g, const std::vector<feed>& feeds) {
  auto sys = test::make_system();
  session s{sys};
  return s.run(s.compile(g), feeds);
}

}  // namespace

TEST_CASE("Asin, Acos and Atan run in float32 and float64, NaN outside [-1, 1]; integers are refused",
          "[graph][trig]") {
  const std::vector<double> xv{-1, -0.5, 0, 0.25, 0.9, 1, 2, -3};
  for (const dtype t : {dtype::f32, dtype::f64}) {
    CAPTURE(to_string(t));
    graph g("trig");
    auto x = g.add_input("x", {8}, t);
    for (const char* op : {"Asin", "Acos", "Atan"}) g.set_output(g.add_op(op, {x}, {}, op));
    const auto r = tr_run(g, {{"x", tensor({8}, t, xv)}});
    std::vector<double> as, ac, at;
    for (const double v : xv) {
      // numpy.arcsin and arccos: NaN beyond [-1, 1].
      as.push_back(std::fabs(v) > 1 ? NAN : std::asin(v));
      ac.push_back(std::fabs(v) > 1 ? NAN : std::acos(v));
      at.push_back(std::atan(v));
    }
    const double rel = t == dtype::f64 ? 1e-15 : 1e-6;
    CHECK(tr_close(r.outputs.at("Asin").to_vector(), as, rel));
    CHECK(tr_close(r.outputs.at("Acos").to_vector(), ac, rel));
    CHECK(tr_close(r.outputs.at("Atan").to_vector(), at, rel));
    CHECK(r.outputs.at("Atan").type() == t);
  }
  expect_graph_error(
      [] {
        graph h("int asin");
        h.add_op("Asin", {h.add_input("x", {4}, dtype::i32)}, {}, "y");
      },
      errc::not_supported, "y", "x");
}

TEST_CASE("Pow with an exponent of another dtype computes as np.power(a, b).astype(a.dtype)", "[graph][pow]") {
  SECTION("a float32 base, int64 and float16 exponents: float64, rounded to float32") {
    graph g("pow f32 i64");
    auto a = g.add_input("a", {4}, dtype::f32);
    auto b = g.add_input("b", {4}, dtype::i64);
    auto h = g.add_input("h", {4}, dtype::f16);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    g.set_output(g.add_op("Pow", {a, h}, {}, "w"));
    const std::vector<double> av{1.5, -2, 0.1, 3}, bv{3, 5, -2, 0}, hv{0.5, 2, 1.5, -1};
    const auto r = tr_run(g, {{"a", tensor({4}, dtype::f32, av)},
                              {"b", test::ints_tensor({3, 5, -2, 0})},
                              {"h", tensor({4}, dtype::f16, hv)}});
    REQUIRE(r.outputs.at("z").type() == dtype::f32);
    REQUIRE(r.outputs.at("w").type() == dtype::f32);
    for (std::size_t i = 0; i < 4; ++i) {
      const double base = static_cast<float>(av[i]);
      CHECK(r.outputs.at("z").get(static_cast<std::int64_t>(i)) == static_cast<float>(std::pow(base, bv[i])));
      CHECK(r.outputs.at("w").get(static_cast<std::int64_t>(i)) == static_cast<float>(std::pow(base, hv[i])));
    }
  }
  SECTION("an int32 base and a float32 exponent: the float64 power truncated toward zero") {
    graph g("pow i32 f32");
    auto a = g.add_input("a", {5}, dtype::i32);
    auto b = g.add_input("b", {5}, dtype::f32);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const auto r = tr_run(
        g, {{"a", tensor({5}, dtype::i32, {3, 2, 10, -2, 7})}, {"b", tensor({5}, dtype::f32, {0.5, 2.5, -1, 3, 1.9})}});
    REQUIRE(r.outputs.at("z").type() == dtype::i32);
    // sqrt(3) = 1.73 -> 1 (astype truncates, it does not round); 2^2.5 = 5.66 -> 5; 10^-1 -> 0;
    // (-2)^3 = -8; 7^1.9 = 40.3 (1.9 rounded to float first) -> 40.
    std::vector<std::int64_t> want;
    const double as[] = {3, 2, 10, -2, 7}, bs[] = {0.5, 2.5, -1, 3, 1.9};
    for (std::size_t i = 0; i < 5; ++i)
      want.push_back(
          static_cast<std::int64_t>(std::trunc(std::pow(as[i], static_cast<double>(static_cast<float>(bs[i]))))));
    for (std::size_t i = 0; i < 5; ++i) CHECK(r.outputs.at("z").get_int(static_cast<std::int64_t>(i)) == want[i]);
    CHECK(want == std::vector<std::int64_t>{1, 5, 0, -8, 40});
  }
  SECTION("an int32 base and an int64 exponent: the int64 power wrapped to int32 as astype wraps it") {
    graph g("pow i32 i64");
    auto a = g.add_input("a", {4}, dtype::i32);
    auto b = g.add_input("b", {4}, dtype::i64);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const std::vector<std::int64_t> as{2, 3, -3, 2}, bs{40, 25, 21, 31};
    const auto r = tr_run(g, {{"a", tensor({4}, dtype::i32, {2, 3, -3, 2})}, {"b", test::ints_tensor(bs)}});
    REQUIRE(r.outputs.at("z").type() == dtype::i32);
    for (std::size_t i = 0; i < 4; ++i) {
      // The product modulo 2^64 (int64's wrap), then its low 32 bits as a signed value.
      std::uint64_t p = 1;
      for (std::int64_t k = 0; k < bs[i]; ++k) p *= static_cast<std::uint64_t>(as[i]);
      const auto low = static_cast<std::int32_t>(static_cast<std::uint32_t>(p));
      CHECK(r.outputs.at("z").get_int(static_cast<std::int64_t>(i)) == low);
    }
    CHECK(r.outputs.at("z").get_int(0) == 0);               // 2^40 keeps no low bits
    CHECK(r.outputs.at("z").get_int(3) == -2147483647 - 1);  // 2^31 wraps to INT32_MIN
  }
  SECTION("an int64 base and a uint64 exponent promote to float64, as NumPy does") {
    graph g("pow i64 u64");
    auto a = g.add_input("a", {3}, dtype::i64);
    auto b = g.add_input("b", {3}, dtype::u64);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const auto r = tr_run(g, {{"a", test::ints_tensor({3, -2, 10})}, {"b", tensor({3}, dtype::u64, {4, 3, 15})}});
    REQUIRE(r.outputs.at("z").type() == dtype::i64);
    CHECK(r.outputs.at("z").get_int(0) == 81);
    CHECK(r.outputs.at("z").get_int(1) == -8);
    CHECK(r.outputs.at("z").get_int(2) == 1000000000000000);
  }
  expect_graph_error(
      [] {
        graph h("u8 base");
        h.add_op("Pow", {h.add_input("a", {2}, dtype::u8), h.add_input("b", {2}, dtype::f32)}, {}, "z");
      },
      errc::invalid_dtype, "z", "a");
}

namespace {

std::vector<double> tr_vec(std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v = test::values(n, seed, scale);
  for (auto& e : v) e = static_cast<float>(e);  // as the float32 inputs hold them
  return v;
}

}  // namespace

TEST_CASE("Adagrad, Adam and Momentum update every tensor they are given by the spec's formulas",
          "[graph][training][optimizer]") {
  // Two optimized tensors of different shapes; R and T fed at run time.
  const std::vector<shape> shapes{{2, 3}, {4}};
  const double r = 0.1, norm = 0.01;
  for (const std::int64_t t : {0, 3}) {
    CAPTURE(t);
    std::map<std::string, tensor> feeds;
    feeds.emplace("R", tensor(shape{}, dtype::f32, {r}));
    feeds.emplace("T", tensor(shape{}, dtype::i64, {static_cast<double>(t)}));
    std::vector<std::vector<double>> xs, gs, vs, hs;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const std::int64_t n = shapes[i].elements();
      xs.push_back(tr_vec(n, 10 + i));
      gs.push_back(tr_vec(n, 20 + i));
      vs.push_back(tr_vec(n, 30 + i));
      hs.push_back(tr_vec(n, 40 + i));
      for (auto& e : hs.back()) e = std::fabs(e);  // a sum of squares
      for (const auto& [name, vals] : {std::pair{"X", &xs.back()}, std::pair{"G", &gs.back()},
                                       std::pair{"V", &vs.back()}, std::pair{"H", &hs.back()}})
        feeds.emplace(name + std::to_string(i), tensor(shapes[i], dtype::f32, *vals));
    }
    const auto build = [&](const char* op, const std::vector<const char*>& lists, const std::vector<const char*>& outs,
                           attributes a) {
      graph g(op);
      std::vector<std::string> ins{g.add_input("R", {}, dtype::f32), g.add_input("T", {}, dtype::i64)};
      for (const char* l : lists)
        for (std::size_t i = 0; i < shapes.size(); ++i)
          ins.push_back(g.add_input(l + std::to_string(i), shapes[i], dtype::f32));
      std::vector<std::string> out_names;
      for (const char* o : outs)
        for (std::size_t i = 0; i < shapes.size(); ++i) out_names.push_back(std::string(o) + std::to_string(i));
      g.add_node(op, "opt", ins, out_names, std::move(a));
      for (const auto& o : out_names) g.set_output(o);
      std::vector<feed> f{{"R", feeds.at("R")}, {"T", feeds.at("T")}};
      for (const char* l : lists)
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          const std::string name = l + std::to_string(i);
          f.push_back({name, feeds.at(name)});
        }
      return tr_run(g, f);
    };
    const double td = static_cast<double>(t);
    {  // Adagrad
      const double decay = 0.5, eps = 1e-6;
      const auto res = build("Adagrad", {"X", "G", "H"}, {"X_new", "H_new"},
                             {{"decay_factor", decay}, {"epsilon", eps}, {"norm_coefficient", norm}});
      // r = R / (1 + T * decay); g = norm * x + g; h' = h + g^2; x' = x - r * g / (sqrt(h') + eps)
      const double rate = static_cast<float>(r) / (1 + td * decay);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        std::vector<double> xw, hw;
        for (std::size_t e = 0; e < xs[i].size(); ++e) {
          const double gr = norm * xs[i][e] + gs[i][e];
          const double hn = hs[i][e] + gr * gr;
          hw.push_back(hn);
          xw.push_back(xs[i][e] - rate * gr / (std::sqrt(hn) + eps));
        }
        CHECK(tr_close(res.outputs.at("X_new" + std::to_string(i)).to_vector(), xw, 1e-5));
        CHECK(tr_close(res.outputs.at("H_new" + std::to_string(i)).to_vector(), hw, 1e-5));
      }
    }
    {  // Adam
      const double alpha = 0.85, beta = 0.95, eps = 1e-4, post = 0.02;
      const auto res = build("Adam", {"X", "G", "V", "H"}, {"X_new", "V_new", "H_new"},
                             {{"alpha", alpha},
                              {"beta", beta},
                              {"epsilon", eps},
                              {"norm_coefficient", norm},
                              {"norm_coefficient_post", post}});
      const training_ref::adam_params ap{alpha, beta, eps, norm, post};
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const auto want = training_ref::adam(static_cast<float>(r), t, xs[i], gs[i], vs[i], hs[i], ap);
        CHECK(tr_close(res.outputs.at("X_new" + std::to_string(i)).to_vector(), want.x, 1e-5));
        CHECK(tr_close(res.outputs.at("V_new" + std::to_string(i)).to_vector(), want.v, 1e-5));
        CHECK(tr_close(res.outputs.at("H_new" + std::to_string(i)).to_vector(), want.h, 1e-5));
      }
    }
    {  // Momentum, standard and nesterov
      for (const char* mode : {"standard", "nesterov"}) {
        CAPTURE(mode);
        const double alpha = 0.9, beta = 0.7;
        const auto res =
            build("Momentum", {"X", "G", "V"}, {"X_new", "V_new"},
                  {{"alpha", alpha}, {"beta", beta}, {"mode", std::string(mode)}, {"norm_coefficient", norm}});
        // The gradient's weight is beta once T > 0 and 1 on the first update.
        const double rf = static_cast<float>(r), b = t > 0 ? beta : 1.0;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          std::vector<double> xw, vw;
          for (std::size_t e = 0; e < xs[i].size(); ++e) {
            const double gr = norm * xs[i][e] + gs[i][e];
            const double vn = alpha * vs[i][e] + b * gr;
            vw.push_back(vn);
            xw.push_back(std::string(mode) == "standard" ? xs[i][e] - rf * vn : xs[i][e] - rf * (gr + alpha * vn));
          }
          CHECK(tr_close(res.outputs.at("X_new" + std::to_string(i)).to_vector(), xw, 1e-5));
          CHECK(tr_close(res.outputs.at("V_new" + std::to_string(i)).to_vector(), vw, 1e-5));
        }
      }
    }
  }
}

TEST_CASE("the training operators refuse mismatched lists, shapes, types and missing attributes",
          "[graph][training][optimizer][errors]") {
  const auto adagrad = [](const std::vector<std::pair<std::string, std::pair<shape, dtype>>>& ins,
                          std::vector<std::string> outs, attributes a = {}) {
    graph g("bad");
    std::vector<std::string> names;
    for (const auto& [n, sd] : ins) names.push_back(g.add_input(n, sd.first, sd.second));
    g.add_node("Adagrad", "opt", names, std::move(outs), std::move(a));
  };
  const std::pair<shape, dtype> f3{{3}, dtype::f32}, r{{}, dtype::f32}, t{{}, dtype::i64};
  // Four tensors after R and T cannot be three lists.
  expect_graph_error([&] { adagrad({{"R", r}, {"T", t}, {"X", f3}, {"G", f3}, {"H", f3}, {"Y", f3}}, {"a", "b"}); },
                     errc::parse_error, "opt", "");
  // Two outputs per tensor.
  expect_graph_error([&] { adagrad({{"R", r}, {"T", t}, {"X", f3}, {"G", f3}, {"H", f3}}, {"a"}); }, errc::parse_error,
                     "opt", "");
  // G of another shape than X, named.
  expect_graph_error([&] { adagrad({{"R", r}, {"T", t}, {"X", f3}, {"G", {{4}, dtype::f32}}, {"H", f3}}, {"a", "b"}); },
                     errc::invalid_shape, "opt", "G");
  // T must be int64, R a float scalar.
  expect_graph_error([&] { adagrad({{"R", r}, {"T", {{}, dtype::i32}}, {"X", f3}, {"G", f3}, {"H", f3}}, {"a", "b"}); },
                     errc::invalid_dtype, "opt", "T");
  expect_graph_error([&] { adagrad({{"R", f3}, {"T", t}, {"X", f3}, {"G", f3}, {"H", f3}}, {"a", "b"}); },
                     errc::invalid_shape, "opt", "R");
  // Momentum's attributes have no defaults; its mode is one of two.
  const auto momentum = [&](attributes a) {
    graph g("bad momentum");
    std::vector<std::string> names{g.add_input("R", {}, dtype::f32), g.add_input("T", {}, dtype::i64)};
    for (const char* n : {"X", "G", "V"}) names.push_back(g.add_input(n, {3}, dtype::f32));
    g.add_node("Momentum", "opt", names, {"x", "v"}, std::move(a));
  };
  expect_graph_error([&] { momentum({{"alpha", 0.9}, {"beta", 1.0}, {"mode", std::string("standard")}}); },
                     errc::invalid_argument, "opt", "");
  expect_graph_error(
      [&] { momentum({{"alpha", 0.9}, {"beta", 1.0}, {"mode", std::string("heavy")}, {"norm_coefficient", 0.0}}); },
      errc::invalid_argument, "opt", "");
}

TEST_CASE("BatchNormalization in training mode normalises with the batch's statistics and updates the running ones",
          "[graph][training][batchnorm]") {
  constexpr std::int64_t N = 2, C = 3, H = 2, W = 2;
  const auto xv = test::values(N * C * H * W, 5, 2.0), sv = test::values(C, 6), bv = test::values(C, 7),
             mv = test::values(C, 8), vv = test::values(C, 9);
  std::vector<double> varv;
  for (const double v : vv) varv.push_back(std::fabs(v) + 0.5);
  const double momentum = 0.8, eps = 1e-3;
  graph g("bn train");
  std::vector<std::string> ins{g.add_input("x", {N, C, H, W}, dtype::f32)};
  for (const char* p : {"scale", "bias", "mean", "var"}) ins.push_back(g.add_input(p, {C}, dtype::f32));
  g.add_node("BatchNormalization", "bn", ins, {"y", "running_mean", "running_var"},
             {{"training_mode", std::int64_t{1}}, {"momentum", momentum}, {"epsilon", eps}});
  for (const char* o : {"y", "running_mean", "running_var"}) g.set_output(o);
  const auto f = [](const std::vector<double>& v) {
    std::vector<double> r;
    for (const double e : v) r.push_back(static_cast<float>(e));
    return r;
  };
  const auto x32 = f(xv), s32 = f(sv), b32 = f(bv), m32 = f(mv), v32 = f(varv);
  const auto r = tr_run(g, {{"x", tensor({N, C, H, W}, dtype::f32, x32)},
                            {"scale", tensor({C}, dtype::f32, s32)},
                            {"bias", tensor({C}, dtype::f32, b32)},
                            {"mean", tensor({C}, dtype::f32, m32)},
                            {"var", tensor({C}, dtype::f32, v32)}});
  // x.mean and x.var (population) over N, H, W per channel; y = s * (x - mean) / sqrt(var + eps) + b.
  std::vector<double> y(x32.size()), rm, rv;
  for (std::int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    const auto at = [&](std::int64_t n, std::int64_t k) { return static_cast<std::size_t>((n * C + c) * H * W + k); };
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < H * W; ++k) sum += x32[at(n, k)];
    const double mean = sum / (N * H * W);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < H * W; ++k) sq += (x32[at(n, k)] - mean) * (x32[at(n, k)] - mean);
    const double var = sq / (N * H * W);
    const auto cc = static_cast<std::size_t>(c);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < H * W; ++k)
        y[at(n, k)] = s32[cc] * (x32[at(n, k)] - mean) / std::sqrt(var + eps) + b32[cc];
    rm.push_back(m32[cc] * momentum + mean * (1 - momentum));
    rv.push_back(v32[cc] * momentum + var * (1 - momentum));
  }
  CHECK(tr_close(r.outputs.at("y").to_vector(), y, 1e-5));
  CHECK(tr_close(r.outputs.at("running_mean").to_vector(), rm, 1e-6));
  CHECK(tr_close(r.outputs.at("running_var").to_vector(), rv, 1e-6));
  // Y alone is a training-mode normalisation too; a parameter of the wrong length is named.
  graph y_only("bn y only");
  std::vector<std::string> yi{y_only.add_input("x", {N, C, H, W}, dtype::f32)};
  for (const char* p : {"scale", "bias", "mean", "var"}) yi.push_back(y_only.add_input(p, {C}, dtype::f32));
  y_only.add_node("BatchNormalization", "bn", yi, {"y"}, {{"training_mode", std::int64_t{1}}, {"epsilon", eps}});
  y_only.set_output("y");
  const auto ry = tr_run(y_only, {{"x", tensor({N, C, H, W}, dtype::f32, x32)},
                                  {"scale", tensor({C}, dtype::f32, s32)},
                                  {"bias", tensor({C}, dtype::f32, b32)},
                                  {"mean", tensor({C}, dtype::f32, m32)},
                                  {"var", tensor({C}, dtype::f32, v32)}});
  CHECK(tr_close(ry.outputs.at("y").to_vector(), y, 1e-5));
  expect_graph_error(
      [&] {
        graph h("bn bad");
        std::vector<std::string> hi{h.add_input("x", {N, C, H, W}, dtype::f32)};
        for (const char* p : {"scale", "bias", "mean"}) hi.push_back(h.add_input(p, {C}, dtype::f32));
        hi.push_back(h.add_input("var", {C + 1}, dtype::f32));
        h.add_node("BatchNormalization", "bn", hi, {"y", "rm", "rv"}, {{"training_mode", std::int64_t{1}}});
      },
      errc::invalid_shape, "bn", "var");
}

TEST_CASE("Det gives each square matrix's determinant, a scalar for one matrix; non-square is refused",
          "[graph][det]") {
  graph g("det");
  auto x = g.add_input("x", {2, 3, 3}, dtype::f32);
  auto m = g.add_input("m", {2, 2}, dtype::f64);
  g.set_output(g.add_op("Det", {x}, {}, "d"));
  g.set_output(g.add_op("Det", {m}, {}, "dm"));
  CHECK(g.value("d").shape == shape{2});
  CHECK(g.value("dm").shape == shape{});
  // A matrix whose first pivot is 0 and a triangular one: 2*(0*1 - 3*4) ... by cofactors below.
  const std::vector<double> xv{0, 1, 2, 3, 4, 5, 6, 7, 9,  //
                               2, 0, 0, 1, 3, 0, 4, 5, -1};
  const auto r =
      tr_run(g, {{"x", tensor({2, 3, 3}, dtype::f32, xv)}, {"m", tensor({2, 2}, dtype::f64, {0.1, 0.2, 0.3, 0.4})}});
  const auto cof = [&](std::size_t o) {
    const double* a = xv.data() + o;
    return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
  };
  CHECK(std::fabs(r.outputs.at("d").get(0) - cof(0)) <= 1e-5);
  CHECK(std::fabs(r.outputs.at("d").get(1) - cof(9)) <= 1e-5);
  CHECK(cof(0) == -3);
  CHECK(cof(9) == -6);
  CHECK(std::fabs(r.outputs.at("dm").get(0) - (0.1 * 0.4 - 0.2 * 0.3)) <= 1e-16);
  expect_graph_error(
      [] {
        graph h("det bad");
        h.add_op("Det", {h.add_input("x", {2, 3, 4}, dtype::f32)}, {}, "d");
      },
      errc::invalid_shape, "d", "x");
  expect_graph_error(
      [] {
        graph h("det int");
        h.add_op("Det", {h.add_input("x", {3, 3}, dtype::i32)}, {}, "d");
      },
      errc::not_supported, "d", "x");
}

TEST_CASE("ReverseSequence reverses each entry's prefix along the time axis; a bad length fails the run naming it",
          "[graph][reverse_sequence]") {
  // [batch 2, time 4] with batch_axis 0, time_axis 1, as ONNX's test_reversesequence_batch.
  graph g("reverse");
  auto x = g.add_input("x", {2, 4}, dtype::f32);
  auto lens = g.add_input("lens", {2}, dtype::i64);
  g.set_output(
      g.add_op("ReverseSequence", {x, lens}, {{"batch_axis", std::int64_t{0}}, {"time_axis", std::int64_t{1}}}, "y"));
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  const tensor xv({2, 4}, dtype::f32, {1, 2, 3, 4, 5, 6, 7, 8});
  const auto r = s.run(c, {{"x", xv}, {"lens", test::ints_tensor({3, 1})}});
  CHECK(r.outputs.at("y").to_vector() == std::vector<double>{3, 2, 1, 4, 5, 6, 7, 8});
  try {
    (void)s.run(c, {{"x", xv}, {"lens", test::ints_tensor({2, 5})}});
    FAIL("a length of 5 over 4 steps succeeded");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("'y'"));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("sequence_lens[1] = 5 is outside [0, 4]"));
  }
  expect_graph_error(
      [] {
        graph h("reverse axes");
        h.add_op("ReverseSequence", {h.add_input("x", {2, 4}, dtype::f32), h.add_input("l", {4}, dtype::i64)},
                 {{"batch_axis", std::int64_t{1}}, {"time_axis", std::int64_t{1}}}, "y");
      },
      errc::invalid_argument, "y", "");
  expect_graph_error(
      [] {
        graph h("reverse lens");
        h.add_op("ReverseSequence", {h.add_input("x", {2, 4}, dtype::f32), h.add_input("l", {2}, dtype::i64)}, {}, "y");
      },
      errc::invalid_shape, "y", "l");
}

TEST_CASE("the new operators compile timing-only and run in fp16 sessions", "[graph][training][fp16]") {
  graph g("mixed");
  auto x = g.add_input("x", {2, 3, 2, 2}, dtype::f32);
  auto m = g.add_input("m", {4, 3, 3}, dtype::f32);
  auto l = g.add_input("l", {3}, dtype::i64);
  auto e = g.add_input("e", {2, 3, 2, 2}, dtype::i64);
  std::vector<std::string> bn{x};
  for (const char* p : {"scale", "bias", "mean", "var"}) bn.push_back(g.add_input(p, {3}, dtype::f32));
  g.add_node("BatchNormalization", "bn", bn, {"y", "rm", "rv"}, {{"training_mode", std::int64_t{1}}});
  g.set_output("y");
  g.set_output("rm");
  g.set_output(g.add_op("Det", {m}, {}, "d"));
  g.set_output(
      g.add_op("ReverseSequence", {x, l}, {{"batch_axis", std::int64_t{1}}, {"time_axis", std::int64_t{0}}}, "rs"));
  g.set_output(g.add_op("Asin", {g.add_op("Tanh", {x}, {}, "t")}, {}, "as"));
  g.set_output(g.add_op("Pow", {x, e}, {}, "pw"));
  {
    auto sys = test::make_system();
    session s{sys};
    auto c = s.compile(g, {.timing_only = true});
    std::vector<tensor> ins;
    for (const char* n : {"x", "m", "l", "e", "scale", "bias", "mean", "var"})
      ins.push_back(tensor::timing_only(g.value(n).shape, g.value(n).type));
    std::vector<feed> f;
    std::size_t k = 0;
    for (const char* n : {"x", "m", "l", "e", "scale", "bias", "mean", "var"}) f.push_back({n, ins[k++]});
    const auto r = s.run(c, f);
    CHECK(r.outputs.at("d").shape() == shape{4});
  }
  auto sys = test::make_system();
  session s{sys, {.precision = precision::fp16}};
  const tensor xv({2, 3, 2, 2}, dtype::f32, test::values(24, 3)), mv({4, 3, 3}, dtype::f32, test::values(36, 4));
  const tensor ev({2, 3, 2, 2}, dtype::i64, std::vector<double>(24, 2.0));
  const tensor ones({3}, dtype::f32, {1, 1, 1}), zeros({3}, dtype::f32, {0, 0, 0});
  const auto r = s.run(s.compile(g), {{"x", xv},
                                      {"m", mv},
                                      {"l", test::ints_tensor({2, 1, 0})},
                                      {"e", ev},
                                      {"scale", ones},
                                      {"bias", zeros},
                                      {"mean", zeros},
                                      {"var", ones}});
  CHECK(r.outputs.at("d").shape() == shape{4});
  const auto pw = r.outputs.at("pw").to_vector();
  const auto xs = xv.to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(std::fabs(pw[i] - xs[i] * xs[i]) <= 2e-3);
}
