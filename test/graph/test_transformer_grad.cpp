// The transformer layers' gradient operators (SoftmaxGrad, GeluGrad, LayerNormalizationGrad),
// checked against central differences of a scalar loss sum(r * f(x)) computed in double, and
// their refusals.
#include <npurt/graph/session.hpp>
#include <npurt/models/graphs.hpp>
#include <npurt/numeric.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>

using namespace npurt;

namespace {

using vec = std::vector<double>;

double weighted_sum(const vec& a, const vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Row-major strides of a shape: element (outer, k, inner) of axis `axis` with extent n.
struct axis_view {
  std::int64_t outer = 1, n = 1, inner = 1;
  axis_view(const shape& s, std::size_t axis) {
    for (std::size_t d = 0; d < s.rank(); ++d) (d < axis ? outer : d == axis ? n : inner) *= s[d];
  }
  [[nodiscard]] std::size_t at(std::int64_t o, std::int64_t k, std::int64_t i) const {
    return static_cast<std::size_t>((o * n + k) * inner + i);
  }
};

// softmax(x) along one axis, in double.
vec ref_softmax(const vec& x, const shape& s, std::size_t axis) {
  const axis_view v(s, axis);
  vec y(x.size());
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      double m = -1e300, sum = 0;
      for (std::int64_t k = 0; k < v.n; ++k) m = std::max(m, x[v.at(o, k, i)]);
      for (std::int64_t k = 0; k < v.n; ++k) sum += std::exp(x[v.at(o, k, i)] - m);
      for (std::int64_t k = 0; k < v.n; ++k) y[v.at(o, k, i)] = std::exp(x[v.at(o, k, i)] - m) / sum;
    }
  return y;
}

double ref_gelu(double x, bool tanh_form) {
  if (!tanh_form) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  const double k = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// ONNX's LayerNormalization in double: over the axes from `axis` on, the population variance,
// then scale and bias (X's trailing shape, flat).
vec ref_layer_norm(const vec& x, const vec& scale, const vec& bias, std::int64_t rows, double eps) {
  const auto d = static_cast<std::int64_t>(scale.size());
  vec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t k = 0; k < d; ++k) mean += x[static_cast<std::size_t>(r * d + k)];
    mean /= static_cast<double>(d);
    for (std::int64_t k = 0; k < d; ++k) {
      const double c = x[static_cast<std::size_t>(r * d + k)] - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    for (std::int64_t k = 0; k < d; ++k) {
      const auto i = static_cast<std::size_t>(r * d + k);
      y[i] =
          (x[i] - mean) / std::sqrt(var + eps) * scale[static_cast<std::size_t>(k)] + bias[static_cast<std::size_t>(k)];
    }
  }
  return y;
}

tensor f32_tensor(const shape& s, const vec& v) { return tensor(s, dtype::f32, v); }

// A 16-bit float (numeric::half or numeric::bfloat16) as an integer that counts ulps: adjacent
// values differ by one, -0 and +0 are both 0.
template <class T>
std::int32_t ulp_index(T v) {
  const std::uint16_t b = v.bits();
  return b & 0x8000u ? -static_cast<std::int32_t>(b & 0x7fffu) : static_cast<std::int32_t>(b);
}

template <class T>
T from_ulp_index(std::int32_t i) {
  return T::from_bits(
      static_cast<std::uint16_t>(i < 0 ? 0x8000u | static_cast<std::uint32_t>(-i) : static_cast<std::uint32_t>(i)));
}

// r rounded once to T, to nearest with ties to even. Through float it would be rounded twice;
// that lands within one ulp of the answer, which is then the nearest of it and its neighbours.
template <class T>
T round_once(double r) {
  const std::int32_t near = ulp_index(T(static_cast<float>(r)));
  T best = from_ulp_index<T>(near);
  for (const std::int32_t i : {near - 1, near + 1}) {
    const T c = from_ulp_index<T>(i);
    const double dc = std::abs(static_cast<double>(c.to_float()) - r),
                 db = std::abs(static_cast<double>(best.to_float()) - r);
    if (dc < db || (dc == db && (c.bits() & 1u) == 0)) best = c;
  }
  return best;
}

// The largest distance in T's ulps between `got` (T's values, read back as double) and `want`
// (double) rounded once to T.
template <class T>
std::int32_t max_ulps_in(const vec& got, const vec& want) {
  std::int32_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(ulp_index(T(static_cast<float>(got[i]))) - ulp_index(round_once<T>(want[i]))));
  return worst;
}

// v rounded to dtype t (f16 or bf16) and read back: the values a tensor of t holds.
vec rounded_to(dtype t, vec v) {
  for (auto& e : v)
    e = t == dtype::f16 ? round_to_half(static_cast<float>(e)) : round_to_bfloat16(static_cast<float>(e));
  return v;
}

std::int32_t max_ulps(dtype t, const vec& got, const vec& want) {
  return t == dtype::f16 ? max_ulps_in<half>(got, want) : max_ulps_in<bfloat16>(got, want);
}

}  // namespace

TEST_CASE("SoftmaxGrad equals central differences of sum(r * Softmax(x)) along every axis",
          "[graph][training][softmax_grad]") {
  const shape xs{2, 3, 4};
  auto sys = test::make_system();
  session s{sys};
  for (const std::int64_t axis : {-1, 1, 0}) {
    INFO("axis " << axis);
    const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    vec xv = test::values(xs.elements(), 11, 2.0);
    const vec rv = test::values(xs.elements(), 12);
    graph g("softmax_grad");
    const auto x = g.add_input("x", xs, dtype::f32);
    const auto r = g.add_input("r", xs, dtype::f32);
    const attributes a{{"axis", axis}};
    const auto y = g.add_op("Softmax", {x}, a, "y");
    g.set_output(g.add_op("SoftmaxGrad", {r, y}, a, "dx"));
    CHECK(g.value("dx").shape == xs);
    const vec dx =
        s.run(s.compile(g), {{"x", f32_tensor(xs, xv)}, {"r", f32_tensor(xs, rv)}}).outputs.at("dx").to_vector();
    test::check_differences("dx", xv, dx, 1e-4, 1e-4, [&] { return weighted_sum(rv, ref_softmax(xv, xs, ax)); });
  }
}

TEST_CASE("GeluGrad equals central differences of sum(r * Gelu(x)), exact and tanh forms",
          "[graph][training][gelu_grad]") {
  const shape xs{3, 7};
  auto sys = test::make_system();
  session s{sys};
  for (const bool tanh_form : {false, true}) {
    INFO((tanh_form ? "tanh" : "none"));
    // Past |x| = 4 both slopes are 0 or 1 to float's precision; the values cover the bend.
    vec xv = test::values(xs.elements(), 21, 4.0);
    const vec rv = test::values(xs.elements(), 22);
    graph g("gelu_grad");
    const auto x = g.add_input("x", xs, dtype::f32);
    const auto r = g.add_input("r", xs, dtype::f32);
    attributes a;
    if (tanh_form) a = {{"approximate", std::string("tanh")}};
    g.set_output(g.add_op("GeluGrad", {r, x}, a, "dx"));
    const vec dx =
        s.run(s.compile(g), {{"x", f32_tensor(xs, xv)}, {"r", f32_tensor(xs, rv)}}).outputs.at("dx").to_vector();
    test::check_differences("dx", xv, dx, 1e-4, 1e-4, [&] {
      double l = 0;
      for (std::size_t i = 0; i < xv.size(); ++i) l += rv[i] * ref_gelu(xv[i], tanh_form);
      return l;
    });
  }
}

TEST_CASE("SoftmaxGrad of float16 and bfloat16 sums in float: within one ulp of the double result rounded once",
          "[graph][training][softmax_grad]") {
  // dY near 1 along a long axis: Σ dY ⊙ Y is near 1 too and dY − Σ cancels to the spread of dY. A
  // sum rounded to the half type is off by up to half its ulp at 1, many ulps of the difference;
  // in float the difference keeps every bit the half type can hold.
  const std::int64_t rows = 4, n = 1024;
  const shape xs{rows, n};
  npurt::system sys{sim::presets::ascend910b(1)};  // it has bf16
  session s{sys};
  for (const dtype t : {dtype::f16, dtype::bf16}) {
    INFO(to_string(t));
    const vec y = rounded_to(t, ref_softmax(test::values(xs.elements(), 51), xs, 1));
    vec dy = test::values(xs.elements(), 52, t == dtype::f16 ? 0.05 : 0.25);
    for (auto& v : dy) v += 1;
    dy = rounded_to(t, dy);
    vec want(y.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto at = [&](std::int64_t k) { return static_cast<std::size_t>(r * n + k); };
      double dot = 0;
      for (std::int64_t k = 0; k < n; ++k) dot += dy[at(k)] * y[at(k)];
      for (std::int64_t k = 0; k < n; ++k) want[at(k)] = y[at(k)] * (dy[at(k)] - dot);
    }
    const std::vector<feed> feeds{{"dy", tensor(xs, t, dy)}, {"y", tensor(xs, t, y)}};
    graph g("softmax_grad_half");
    g.add_input("dy", xs, t);
    g.add_input("y", xs, t);
    g.set_output(g.add_op("SoftmaxGrad", {"dy", "y"}, {}, "dx"));
    const auto run = s.run(s.compile(g), feeds);
    const tensor& dx = run.outputs.at("dx");
    CHECK(dx.type() == t);
    CHECK(max_ulps(t, dx.to_vector(), want) <= 1);
    // The same steps in the half type, as the chain computed them before: far outside the bound
    // on these values, so the check above tells the two apart.
    graph h("softmax_grad_in_half");
    h.add_input("dy", xs, t);
    h.add_input("y", xs, t);
    const auto dot = h.add_op("ReduceSum", {h.add_op("Mul", {"dy", "y"}, {}, "dy_y")},
                              {{"axes", ints{-1}}, {"keepdims", std::int64_t{1}}}, "dot");
    h.set_output(h.add_op("Mul", {"y", h.add_op("Sub", {"dy", dot}, {}, "centred")}, {}, "dx"));
    CHECK(max_ulps(t, s.run(s.compile(h), feeds).outputs.at("dx").to_vector(), want) > 4);
  }
}

TEST_CASE("GeluGrad of float16 and bfloat16 computes in float: within one ulp of the double result rounded once",
          "[graph][training][gelu_grad]") {
  // Near x = −0.75 the slope Φ(x) + x·φ(x) (and its tanh form) is a difference of two terms near
  // 0.23 that cancels to nearly 0: each term rounded to the half type is off by far more than the
  // slope's own ulp. x covers [−4, 4] and, densely, that bend.
  npurt::system sys{sim::presets::ascend910b(1)};  // it has bf16
  session s{sys};
  for (const dtype t : {dtype::f16, dtype::bf16})
    for (const bool tanh_form : {false, true}) {
      INFO(to_string(t) << (tanh_form ? ", tanh" : ", exact"));
      vec x;
      for (int i = 0; i <= 400; ++i) x.push_back(-4 + 0.02 * i);
      for (int i = 0; i <= 400; ++i) x.push_back(-0.9 + 0.001 * i);
      x = rounded_to(t, x);
      const shape xs{static_cast<std::int64_t>(x.size())};
      const vec dy = rounded_to(t, test::values(xs.elements(), 61, 2.0));
      const double k = std::sqrt(2.0 / std::acos(-1.0)), c = 0.044715;
      vec want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        double slope = 0;
        if (tanh_form) {
          const double th = std::tanh(k * (v + c * v * v * v));
          slope = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * c * v * v);
        } else {
          slope = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) * k / 2;
        }
        want[i] = dy[i] * slope;
      }
      graph g("gelu_grad_half");
      g.add_input("dy", xs, t);
      g.add_input("x", xs, t);
      attributes a;
      if (tanh_form) a = {{"approximate", std::string("tanh")}};
      g.set_output(g.add_op("GeluGrad", {"dy", "x"}, a, "dx"));
      const auto run = s.run(s.compile(g), {{"dy", tensor(xs, t, dy)}, {"x", tensor(xs, t, x)}});
      const tensor& dx = run.outputs.at("dx");
      CHECK(dx.type() == t);
      CHECK(max_ulps(t, dx.to_vector(), want) <= 1);
    }
}

TEST_CASE("LayerNormalizationGrad equals central differences for dX, dScale and dBias",
          "[graph][training][layer_norm_grad]") {
  // Over the last axis and over the last two (axis 1 of rank 3), Scale as X's trailing shape and
  // flat, with the forward's Mean and InvStdDev and recomputing them.
  const shape xs{2, 3, 4};
  const double eps = 1e-3;
  auto sys = test::make_system();
  session s{sys};
  for (const std::int64_t axis : {-1, 1})
    for (const bool flat : {false, true})
      for (const bool saved : {true, false}) {
        INFO("axis " << axis << (flat ? ", flat Scale" : ", trailing Scale") << (saved ? ", saved" : ", recomputed"));
        const shape trailing = axis == -1 ? shape{4} : shape{3, 4};
        const std::int64_t d = trailing.elements(), rows = xs.elements() / d;
        const shape ps = flat ? shape{d} : trailing;
        vec xv = test::values(xs.elements(), 31, 2.0), sv = test::values(d, 32), bv = test::values(d, 33);
        const vec rv = test::values(xs.elements(), 34);
        graph g("layer_norm_grad");
        const auto x = g.add_input("x", xs, dtype::f32);
        const auto r = g.add_input("r", xs, dtype::f32);
        const auto sc = g.add_input("scale", ps, dtype::f32);
        const auto b = g.add_input("bias", ps, dtype::f32);
        const attributes a{{"axis", axis}, {"epsilon", eps}};
        std::vector<std::string> in{r, x, sc};
        if (saved) {
          g.add_node("LayerNormalization", "ln", {x, sc, b}, {"y", "mean", "inv_std"}, a);
          in.insert(in.end(), {"mean", "inv_std"});
        }
        g.add_node("LayerNormalizationGrad", "ln_grad", in, {"dx", "dscale", "dbias"}, a);
        for (const char* o : {"dx", "dscale", "dbias"}) g.set_output(o);
        CHECK(g.value("dx").shape == xs);
        CHECK(g.value("dscale").shape == ps);
        CHECK(g.value("dbias").shape == ps);
        const auto out = s.run(s.compile(g), {{"x", f32_tensor(xs, xv)},
                                              {"r", f32_tensor(xs, rv)},
                                              {"scale", f32_tensor(ps, sv)},
                                              {"bias", f32_tensor(ps, bv)}})
                             .outputs;
        const auto loss = [&] { return weighted_sum(rv, ref_layer_norm(xv, sv, bv, rows, eps)); };
        test::check_differences("dx", xv, out.at("dx").to_vector(), 1e-4, 1e-3, loss);
        test::check_differences("dscale", sv, out.at("dscale").to_vector(), 1e-4, 1e-4, loss);
        test::check_differences("dbias", bv, out.at("dbias").to_vector(), 1e-4, 1e-4, loss);
      }
}

TEST_CASE("LayerNormalizationGrad leaves out what is not wanted and computes half precision in float",
          "[graph][training][layer_norm_grad]") {
  const shape xs{4, 8};
  const vec xv = test::values(xs.elements(), 41, 2.0), sv = test::values(8, 42), rv = test::values(xs.elements(), 43);
  auto sys = test::make_system();
  session s{sys};
  const auto build = [&](dtype t, std::vector<std::string> outs) {
    graph g("ln_grad");
    const auto x = g.add_input("x", xs, t);
    const auto r = g.add_input("r", xs, t);
    const auto sc = g.add_input("scale", {8}, t);
    g.add_node("LayerNormalizationGrad", "ln_grad", {r, x, sc}, outs, {});
    for (const auto& o : outs)
      if (!o.empty()) g.set_output(o);
    return g;
  };
  const auto feeds = [&](dtype t) {
    return std::vector<feed>{{"x", tensor(xs, t, xv)}, {"r", tensor(xs, t, rv)}, {"scale", tensor({8}, t, sv)}};
  };
  graph all = build(dtype::f32, {"dx", "dscale", "dbias"});
  const auto full = s.run(s.compile(all), feeds(dtype::f32)).outputs;
  // dX alone and the parameters alone: the same values, and fewer kernels than all three.
  graph only_dx = build(dtype::f32, {"dx"}), params = build(dtype::f32, {"", "dscale", "dbias"});
  CHECK(params.find("dx") == nullptr);
  const auto ca = s.compile(all), cx = s.compile(only_dx), cp = s.compile(params);
  CHECK(cx.report().kernels < ca.report().kernels);
  CHECK(cp.report().kernels < ca.report().kernels);
  CHECK(s.run(cx, feeds(dtype::f32)).outputs.at("dx").to_vector() == full.at("dx").to_vector());
  const auto po = s.run(cp, feeds(dtype::f32)).outputs;
  CHECK(po.size() == 2);
  CHECK(po.at("dscale").to_vector() == full.at("dscale").to_vector());
  CHECK(po.at("dbias").to_vector() == full.at("dbias").to_vector());
  // float16: the statistics and the sums in float (stash_type 1), the outputs cast back; within
  // float16's rounding of the inputs and outputs of the float result.
  graph half = build(dtype::f16, {"dx", "dscale", "dbias"});
  const auto ho = s.run(s.compile(half), feeds(dtype::f16)).outputs;
  for (const char* o : {"dx", "dscale", "dbias"}) {
    INFO(o);
    CHECK(ho.at(o).type() == dtype::f16);
    const vec got = ho.at(o).to_vector(), want = full.at(o).to_vector();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-2 * (1 + std::abs(want[i])));
  }
}

TEST_CASE("the transformer gradient operators refuse bad operands and attributes, naming the operator",
          "[graph][training][errors]") {
  graph g("bad");
  const auto x = g.add_input("x", {2, 3, 4}, dtype::f32);
  const auto dy = g.add_input("dy", {2, 3, 4}, dtype::f32);
  const auto other = g.add_input("other", {2, 3, 5}, dtype::f32);
  const auto half = g.add_input("half", {2, 3, 4}, dtype::f16);
  const auto integers = g.add_input("ints", {2, 3, 4}, dtype::i32);
  const auto scalar = g.add_input("scalar", {}, dtype::f32);
  const auto scale = g.add_input("scale", {4}, dtype::f32);
  const auto bad_scale = g.add_input("bad_scale", {3}, dtype::f32);
  const auto mean = g.add_input("mean", {2, 3, 1}, dtype::f32);
  const auto bad_mean = g.add_input("bad_mean", {2, 3}, dtype::f32);
  const auto half_mean = g.add_input("half_mean", {2, 3, 1}, dtype::f16);
  const std::size_t nodes = g.nodes().size();
  const auto refused = [&](std::string_view type, std::vector<std::string> in, std::vector<std::string> out,
                           attributes a, errc code, const std::string& tensor, const std::string& words) {
    INFO(type << ": " << words);
    try {
      g.add_node(type, "n", std::move(in), std::move(out), std::move(a));
      FAIL("accepted");
    } catch (const graph_error& e) {
      INFO(e.what());
      CHECK(e.code() == code);
      CHECK(e.op() == "n");
      CHECK(e.tensor() == tensor);
      CHECK(std::string(e.what()).find(type) != std::string::npos);
      CHECK(std::string(e.what()).find(words) != std::string::npos);
    }
    CHECK(g.nodes().size() == nodes);  // nothing of the chain stays
  };
  using a = attributes;
  // SoftmaxGrad(dY, Y).
  refused("SoftmaxGrad", {dy, other}, {"o"}, {}, errc::invalid_shape, dy, "is not Y's shape");
  refused("SoftmaxGrad", {half, x}, {"o"}, {}, errc::invalid_dtype, half, "dY is f16");
  refused("SoftmaxGrad", {integers, integers}, {"o"}, {}, errc::invalid_dtype, integers, "Y must be floating");
  refused("SoftmaxGrad", {dy, x}, {"o"}, a{{"axis", std::int64_t{3}}}, errc::invalid_argument, x, "axis 3 is outside");
  refused("SoftmaxGrad", {scalar, scalar}, {"o"}, {}, errc::invalid_shape, scalar, "has no axis");
  refused("SoftmaxGrad", {dy}, {"o"}, {}, errc::invalid_argument, "", "takes the inputs dY and Y");
  refused("SoftmaxGrad", {dy, x}, {"o", "p"}, {}, errc::invalid_argument, "", "one output");
  refused("SoftmaxGrad", {dy, x}, {"o"}, a{{"axes", npurt::ints{1}}}, errc::not_supported, "",
          "has no attribute 'axes'");
  // GeluGrad(dY, X).
  refused("GeluGrad", {dy, x}, {"o"}, a{{"approximate", std::string("erf")}}, errc::invalid_argument, x,
          "approximate is \"none\" or \"tanh\"");
  refused("GeluGrad", {other, x}, {"o"}, {}, errc::invalid_shape, other, "is not X's shape");
  refused("GeluGrad", {integers, integers}, {"o"}, {}, errc::invalid_dtype, integers, "X must be floating");
  refused("GeluGrad", {dy, x}, {"o"}, a{{"alpha", 1.0}}, errc::not_supported, "", "has no attribute 'alpha'");
  // LayerNormalizationGrad(dY, X, Scale[, Mean, InvStdDev]).
  const std::vector<std::string> three{"dx", "ds", "db"};
  refused("LayerNormalizationGrad", {other, x, scale}, three, {}, errc::invalid_shape, other, "is not X's shape");
  refused("LayerNormalizationGrad", {integers, integers, scale}, three, {}, errc::invalid_dtype, integers,
          "X must be float");
  refused("LayerNormalizationGrad", {dy, x, bad_scale}, three, {}, errc::invalid_shape, bad_scale, "Scale must be [4]");
  refused("LayerNormalizationGrad", {dy, x, scale}, three, a{{"axis", std::int64_t{-4}}}, errc::invalid_argument, x,
          "axis -4 is outside");
  refused("LayerNormalizationGrad", {dy, x, scale, mean}, three, {}, errc::invalid_argument, mean,
          "Mean and InvStdDev together");
  refused("LayerNormalizationGrad", {dy, x, scale, bad_mean, mean}, three, {}, errc::invalid_shape, bad_mean,
          "Mean must be [2,3,1]");
  refused("LayerNormalizationGrad", {dy, x, scale, mean, half_mean}, three, {}, errc::invalid_dtype, half_mean,
          "InvStdDev must be f32");
  refused("LayerNormalizationGrad", {dy, x, scale}, three, a{{"epsilon", -1.0}}, errc::invalid_argument, x,
          "epsilon must not be negative");
  refused("LayerNormalizationGrad", {dy, x, scale}, three, a{{"stash_type", std::int64_t{10}}}, errc::not_supported, "",
          "stash_type 10");
  refused("LayerNormalizationGrad", {dy, x, scale}, {"", "", ""}, {}, errc::invalid_argument, "",
          "one of them named at least");
  refused("LayerNormalizationGrad", {dy, x, scale}, {"a", "b", "c", "d"}, {}, errc::invalid_argument, "",
          "has the outputs dX, dScale and dBias");
  refused("LayerNormalizationGrad", {dy, x}, three, {}, errc::invalid_argument, "", "takes the inputs dY, X, Scale");
  refused("LayerNormalizationGrad", {dy, x, scale}, three, a{{"momentum", 0.9}}, errc::not_supported, "",
          "has no attribute 'momentum'");
}

TEST_CASE("bert_training_step_graph's gradients equal finite differences of its loss, and its updates apply them",
          "[graph][training][bert]") {
  // A tiny encoder (one block, hidden 8 in 2 heads, FFN 16, vocabulary 7, 2 sequences of 4) with
  // real data: every kind of parameter the full step has. The oracle is the loss itself: central
  // differences of the step's "loss" output, each from a graph whose constant is moved by +-h,
  // against the step's own gradient (the loss is smooth: softmax, tanh GELU, LayerNorm). The step
  // computes in f32: a loss near 2 rounds by about 2.4e-7, which the 2h of a difference turns
  // into about 1.2e-4, inside the absolute bound.
  const models::bert_step_config bc{
      .batch = 2, .seq = 4, .hidden = 8, .heads = 2, .ffn = 16, .vocab = 7, .layers = 1, .lr = 0.5};
  std::vector<std::string> grads;
  graph g = models::bert_training_step_graph(bc, true, 5, &grads);
  // 4 of the embeddings, 16 per block (query, key, value, attention output, intermediate and
  // output dense layers' weight and bias, two LayerNorms' scale and bias), 2 of the classifier.
  REQUIRE(grads.size() == 4 + 16 + 2);
  CHECK(grads.front() == "cls.weight.grad");
  CHECK(grads.back() == "embeddings.word_embeddings.weight.grad");
  const std::vector<std::string> probe{"cls.weight",
                                       "cls.bias",
                                       "encoder.layer.0.output.LayerNorm.weight",
                                       "encoder.layer.0.output.dense.bias",
                                       "encoder.layer.0.intermediate.dense.weight",
                                       "encoder.layer.0.attention.output.LayerNorm.bias",
                                       "encoder.layer.0.attention.output.dense.weight",
                                       "encoder.layer.0.attention.self.value.bias",
                                       "encoder.layer.0.attention.self.key.weight",
                                       "encoder.layer.0.attention.self.query.weight",
                                       "embeddings.LayerNorm.weight",
                                       "embeddings.position_embeddings.weight",
                                       "embeddings.word_embeddings.weight"};
  test::output_gradients(g, grads, probe);
  tensor ids({2, 4}, dtype::i64, {3, 0, 6, 3, 1, 5, 2, 3});
  vec onehot(8 * 7, 0.0);
  for (const std::size_t pos : {0, 1, 2, 3, 4, 5, 6, 7}) onehot[pos * 7 + (pos * 3 + 1) % 7] = 1;
  tensor labels({8, 7}, dtype::f32, onehot);
  auto sys = test::make_system();
  session s{sys};
  const std::vector<feed> in{{"input_ids", ids}, {"labels", labels}};
  const auto out = s.run(s.compile(g), in).outputs;
  const double loss = out.at("loss").to_vector().at(0);
  CHECK(std::isfinite(loss));
  CHECK(loss > 0);
  test::check_sgd_updates(g, out, probe, bc.lr);
  // Word 4 is in no sequence: its embedding's gradient is 0.
  const vec dword = out.at("embeddings.word_embeddings.weight.grad").to_vector();
  for (std::size_t i = 4 * 8; i < 5 * 8; ++i) CHECK(dword[i] == 0.0);
  const auto loss_with = [&](const std::string& name, std::size_t i, double delta) {
    return test::loss_with(s, in, [&] { return models::bert_training_step_graph(bc, true, 5); }, name, i, delta);
  };
  int checked = 0;
  for (const auto& p : probe) {
    const vec d = out.at(p + ".grad").to_vector();
    // The first, the last and a middle entry of each; word 3 (three positions) for the words.
    std::vector<std::size_t> at{0, d.size() / 2, d.size() - 1};
    if (p == "embeddings.word_embeddings.weight") at = {3 * 8, 3 * 8 + 5, 6 * 8 + 7};
    for (const std::size_t i : at) {
      const double h = 1e-3;
      const double fd = (loss_with(p, i, h) - loss_with(p, i, -h)) / (2 * h);
      INFO(p << "[" << i << "]: gradient " << d[i] << ", central difference " << fd);
      CHECK(std::abs(d[i] - fd) <= 4e-4 + 1e-2 * std::abs(fd));
      ++checked;
    }
  }
  CHECK(checked == 3 * static_cast<int>(probe.size()));
}

TEST_CASE("bert_training_step_graph runs timing-only at BERT-Large's width and refuses bad sizes",
          "[graph][training][bert]") {
  graph g = models::bert_training_step_graph({.batch = 2, .seq = 128, .layers = 2});
  npurt::system sys{sim::presets::ascend910(1)};
  session s(sys, session_config{.precision = precision::fp16});
  const auto r = s.run(s.compile(g), {{"input_ids", tensor::timing_only({2, 128}, dtype::i64)},
                                      {"labels", tensor::timing_only({256, 30522}, dtype::f32)}});
  CHECK(r.latency > picoseconds{0});
  CHECK_THROWS_AS(models::bert_training_step_graph({.layers = 0}), caller_error);
  CHECK_THROWS_AS(models::bert_training_step_graph({.vocab = 0}), caller_error);
  CHECK_THROWS_AS(models::bert_training_step_graph({.hidden = 100, .heads = 16}), caller_error);
}

TEST_CASE(
    "bert_training_step_graph's masked language model: every position in order is the unmasked step, and "
    "masked positions with token types match finite differences",
    "[graph][training][bert]") {
  const models::bert_step_config base{
      .batch = 2, .seq = 4, .hidden = 8, .heads = 2, .ffn = 16, .vocab = 7, .layers = 1, .lr = 0.5};
  const tensor ids({2, 4}, dtype::i64, {3, 0, 6, 3, 1, 5, 2, 3});
  const auto one_hot = [](std::size_t rows, std::size_t classes, std::uint64_t seed) {
    vec v(rows * classes, 0.0);
    for (std::size_t r = 0; r < rows; ++r) v[r * classes + (r * 3 + seed) % classes] = 1;
    return tensor({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(classes)}, dtype::f32, v);
  };
  auto sys = test::make_system();
  session s{sys};
  const std::vector<std::string> probe{"cls.weight", "encoder.layer.0.attention.self.query.weight",
                                       "embeddings.position_embeddings.weight", "embeddings.word_embeddings.weight"};
  const auto run = [&](const models::bert_step_config& bc, const std::vector<feed>& in) {
    graph g = models::bert_training_step_graph(bc, true, 5);
    for (const auto& p : probe) g.set_output(p + ".grad");
    return s.run(s.compile(g), in).outputs;
  };

  SECTION("all positions of each sequence, in order, gather and scatter every row: the unmasked step, bit for bit") {
    models::bert_step_config all = base;
    all.masked = 4;
    const tensor labels = one_hot(8, 7, 1);
    const auto plain = run(base, {{"input_ids", ids}, {"labels", labels}});
    const auto masked = run(all, {{"input_ids", ids},
                                  {"labels", labels},
                                  {"masked_lm_positions", tensor({2, 4}, dtype::i64, {0, 1, 2, 3, 0, 1, 2, 3})}});
    CHECK(masked.at("loss").to_vector() == plain.at("loss").to_vector());
    for (const auto& p : probe) {
      INFO(p);
      CHECK(masked.at(p + ".grad").to_vector() == plain.at(p + ".grad").to_vector());
    }
  }

  SECTION("two masked positions per sequence and two token types") {
    models::bert_step_config bc = base;
    bc.masked = 2;
    bc.type_vocab = 2;
    std::vector<std::string> grads;
    graph g = models::bert_training_step_graph(bc, true, 5, &grads);
    // The unmasked step's 22 gradients and the token types' table; the words' still last.
    REQUIRE(grads.size() == 23);
    CHECK(grads.back() == "embeddings.word_embeddings.weight.grad");
    const std::vector<std::string> checked_params{"cls.weight",
                                                  "cls.bias",
                                                  "encoder.layer.0.attention.self.key.weight",
                                                  "encoder.layer.0.output.dense.bias",
                                                  "embeddings.token_type_embeddings.weight",
                                                  "embeddings.position_embeddings.weight",
                                                  "embeddings.word_embeddings.weight"};
    test::output_gradients(g, grads, checked_params);
    // A feed holds a reference: every tensor it names outlives it.
    const tensor labels = one_hot(4, 7, 2), positions({2, 2}, dtype::i64, {1, 3, 0, 2}),
                 types({2, 4}, dtype::i64, {0, 0, 1, 1, 0, 1, 1, 1});
    const std::vector<feed> in{
        {"input_ids", ids}, {"labels", labels}, {"masked_lm_positions", positions}, {"token_type_ids", types}};
    const auto out = s.run(s.compile(g), in).outputs;
    CHECK(std::isfinite(out.at("loss").to_vector().at(0)));
    test::check_sgd_updates(g, out, checked_params, bc.lr);
    // Word 4 is in no sequence: its embedding's gradient is 0.
    const vec dword = out.at("embeddings.word_embeddings.weight.grad").to_vector();
    for (std::size_t i = 4 * 8; i < 5 * 8; ++i) CHECK(dword[i] == 0.0);
    for (const auto& p : checked_params) {
      const vec d = out.at(p + ".grad").to_vector();
      for (const std::size_t i : {std::size_t{0}, d.size() / 2, d.size() - 1}) {
        const double h = 1e-3;
        const auto loss_with = [&](double delta) {
          return test::loss_with(s, in, [&] { return models::bert_training_step_graph(bc, true, 5); }, p, i, delta);
        };
        const double fd = (loss_with(h) - loss_with(-h)) / (2 * h);
        INFO(p << "[" << i << "]: gradient " << d[i] << ", central difference " << fd);
        CHECK(std::abs(d[i] - fd) <= 4e-4 + 1e-2 * std::abs(fd));
      }
    }
    // A position past the sequence fails the run naming the gather; the next run is fine.
    const tensor past({2, 2}, dtype::i64, {1, 4, 0, 2});
    const std::vector<feed> bad{in[0], in[1], {"masked_lm_positions", past}, in[3]};
    const auto c = s.compile(g);
    try {
      (void)s.run(c, bad);
      FAIL("a masked position of 4 in sequences of 4 was accepted");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::ContainsSubstring("node 'mlm.gather' (GatherND)"));
    }
    CHECK(s.run(c, in).outputs.at("loss").to_vector() == out.at("loss").to_vector());
  }
}

TEST_CASE(
    "bert_training_step_graph predicting BERT's 20 masked positions costs less than every position, and "
    "refuses a masked count or token type vocabulary out of range",
    "[graph][training][bert]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s(sys, session_config{.precision = precision::fp16});
  const auto latency = [&](std::int64_t masked) {
    graph g = models::bert_training_step_graph(
        {.batch = 2, .seq = 128, .vocab = 30522, .layers = 1, .masked = masked, .type_vocab = 2});
    const tensor ids = tensor::timing_only({2, 128}, dtype::i64), types = tensor::timing_only({2, 128}, dtype::i64),
                 labels = tensor::timing_only({masked > 0 ? 2 * masked : 256, 30522}, dtype::f32),
                 positions = tensor::timing_only({2, std::max<std::int64_t>(masked, 1)}, dtype::i64);
    std::vector<feed> in{{"input_ids", ids}, {"token_type_ids", types}, {"labels", labels}};
    if (masked > 0) in.push_back({"masked_lm_positions", positions});
    return s.run(s.compile(g), in).latency;
  };
  // The classifier over 30,522 words, its softmax and its gradients run on 40 rows instead of 256.
  CHECK(latency(20) < latency(0));
  CHECK_THROWS_AS(models::bert_training_step_graph({.seq = 4, .masked = 5}), caller_error);
  CHECK_THROWS_AS(models::bert_training_step_graph({.masked = -1}), caller_error);
  CHECK_THROWS_AS(models::bert_training_step_graph({.type_vocab = -1}), caller_error);
  CHECK_NOTHROW(models::bert_training_step_graph({.seq = 4, .layers = 1, .masked = 4}));
}
