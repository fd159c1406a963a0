// The elementwise functions beyond the arithmetic four: each against its definition (ONNX's
// operator documentation) evaluated in double.
#include "helpers.hpp"

#include <npurt/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <functional>
#include <limits>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

TEST_CASE("unary elementwise functions follow their definitions", "[kernels][eltwise]") {
  struct fn_case {
    k::eltwise_fn fn;
    float alpha, beta;
    std::function<double(double)> ref;
    double lo, hi;  // input range where the function is defined
  };
  const double sa = 1.67326319217681884765625, sg = 1.05070102214813232421875;
  const fn_case cases[] = {
      {k::eltwise_fn::exp, 0, 0, [](double x) { return std::exp(x); }, -5, 5},
      {k::eltwise_fn::log, 0, 0, [](double x) { return std::log(x); }, 0.01, 10},
      {k::eltwise_fn::sqrt, 0, 0, [](double x) { return std::sqrt(x); }, 0, 10},
      {k::eltwise_fn::abs, 0, 0, [](double x) { return std::abs(x); }, -5, 5},
      {k::eltwise_fn::neg, 0, 0, [](double x) { return -x; }, -5, 5},
      {k::eltwise_fn::reciprocal, 0, 0, [](double x) { return 1 / x; }, 0.1, 5},
      {k::eltwise_fn::floor, 0, 0, [](double x) { return std::floor(x); }, -5, 5},
      {k::eltwise_fn::round, 0, 0, [](double x) { return std::nearbyint(x); }, -5, 5},
      {k::eltwise_fn::ceil, 0, 0, [](double x) { return std::ceil(x); }, -5, 5},
      {k::eltwise_fn::erf, 0, 0, [](double x) { return std::erf(x); }, -3, 3},
      {k::eltwise_fn::sin, 0, 0, [](double x) { return std::sin(x); }, -3, 3},
      {k::eltwise_fn::cos, 0, 0, [](double x) { return std::cos(x); }, -3, 3},
      {k::eltwise_fn::softplus, 0, 0, [](double x) { return std::log(1 + std::exp(x)); }, -5, 5},
      {k::eltwise_fn::softsign, 0, 0, [](double x) { return x / (1 + std::abs(x)); }, -5, 5},
      {k::eltwise_fn::sign, 0, 0, [](double x) { return x > 0   ? 1.0
                                                        : x < 0 ? -1.0
                                                                : 0.0; }, -5, 5},
      {k::eltwise_fn::leaky_relu, 0.1f, 0, [](double x) { return x < 0 ? 0.1f * x : x; }, -5, 5},
      {k::eltwise_fn::elu, 2.0f, 0, [](double x) { return x < 0 ? 2.0 * (std::exp(x) - 1) : x; }, -5, 5},
      {k::eltwise_fn::selu, static_cast<float>(sa), static_cast<float>(sg),
       [&](double x) { return x <= 0 ? sg * (sa * std::exp(x) - sa) : sg * x; }, -5, 5},
      {k::eltwise_fn::hard_sigmoid, 0.2f, 0.5f, [](double x) { return std::clamp(0.2f * x + 0.5, 0.0, 1.0); }, -5, 5},
      {k::eltwise_fn::thresholded_relu, 1.0f, 0, [](double x) { return x > 1 ? x : 0.0; }, -5, 5},
      {k::eltwise_fn::celu, 1.5f, 0,
       [](double x) { return std::max(0.0, x) + std::min(0.0, 1.5 * (std::exp(x / 1.5) - 1)); }, -5, 5},
      {k::eltwise_fn::hard_swish, 0, 0, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5},
      {k::eltwise_fn::clip, -1.0f, 2.0f, [](double x) { return std::clamp(x, -1.0, 2.0); }, -5, 5},
  };
  for (const auto& c : cases) {
    CAPTURE(k::op_name(k::elementwise{c.fn}));
    tensor x({257}), y({257});
    x.fill(7, c.lo, c.hi, false);
    REQUIRE(run(k::elementwise{c.fn, x.desc, {}, y.desc, c.alpha, c.beta}) == 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = c.ref(x.get(i));
      REQUIRE(std::abs(y.get(i) - want) <= 2e-6 * (1 + std::abs(want)));
    }
  }
}

TEST_CASE("binary max, min, pow and relu_backward broadcast and follow their definitions", "[kernels][eltwise]") {
  tensor a({3, 4}), b({4}), y({3, 4});
  a.fill(1, -3, 3, false);
  b.fill(2, -3, 3, false);
  for (auto fn : {k::eltwise_fn::max, k::eltwise_fn::min, k::eltwise_fn::relu_backward}) {
    REQUIRE(run(k::elementwise{fn, a.desc, b.desc, y.desc}) == 0);
    for (std::size_t i = 0; i < 12; ++i) {
      const double av = a.get(i), bv = b.get(i % 4);
      const double want = fn == k::eltwise_fn::max   ? std::max(av, bv)
                          : fn == k::eltwise_fn::min ? std::min(av, bv)
                                                     : (bv > 0 ? av : 0.0);
      REQUIRE(y.get(i) == want);
    }
  }
  tensor base({5}), ex({5}), p({5});
  base.assign({2, 3, 0.5, 9, 4});
  ex.assign({3, 2, -1, 0.5, 0});
  REQUIRE(run(k::elementwise{k::eltwise_fn::pow, base.desc, ex.desc, p.desc}) == 0);
  CHECK(p.values() == std::vector<double>{8, 9, 2, 3, 1});  // by hand
}

TEST_CASE("an elementwise function outside the list or a non-finite parameter is refused",
          "[kernels][eltwise][validate]") {
  tensor x({4}), y({4});
  k::elementwise e{k::eltwise_fn::clip, x.desc, {}, y.desc, 0.0f, std::numeric_limits<float>::infinity()};
  CHECK(run(e) == static_cast<int>(errc::invalid_argument));
  e.beta = 1.0f;
  CHECK(run(e) == 0);
  e.fn = static_cast<k::eltwise_fn>(static_cast<int>(k::last_eltwise_fn) + 1);
  CHECK(run(e) == static_cast<int>(errc::invalid_argument));
}

TEST_CASE("reduce min, argmax and argmin pick the extreme along one axis, first or last on ties", "[kernels][reduce]") {
  tensor x({2, 4});
  x.assign({3, 7, 7, -1, 5, 5, 2, 5});
  tensor mn({2}), am({2}, dtype::i64), an({2}, dtype::i64), last({2}, dtype::i64);
  REQUIRE(run(k::reduce{k::reduce_fn::min, x.desc, mn.desc, 2u}) == 0);
  CHECK(mn.values() == std::vector<double>{-1, 2});
  REQUIRE(run(k::reduce{k::reduce_fn::argmax, x.desc, am.desc, 2u}) == 0);
  CHECK(am.values() == std::vector<double>{1, 0});  // first of the ties
  k::reduce l{k::reduce_fn::argmax, x.desc, last.desc, 2u};
  l.select_last = true;
  REQUIRE(run(l) == 0);
  CHECK(last.values() == std::vector<double>{2, 3});
  REQUIRE(run(k::reduce{k::reduce_fn::argmin, x.desc, an.desc, 2u}) == 0);
  CHECK(an.values() == std::vector<double>{3, 2});
  // Over axis 0 with keep_dims: [1, 4].
  tensor a0({1, 4}, dtype::i64);
  REQUIRE(run(k::reduce{k::reduce_fn::argmax, x.desc, a0.desc, 1u, true}) == 0);
  CHECK(a0.values() == std::vector<double>{1, 0, 0, 1});
  // An index output must be int64, and an arg reduction has one axis.
  tensor bad({2});
  CHECK(run(k::reduce{k::reduce_fn::argmax, x.desc, bad.desc, 2u}) == static_cast<int>(errc::invalid_dtype));
  tensor one({1}, dtype::i64);
  CHECK(run(k::reduce{k::reduce_fn::argmax, x.desc, one.desc, 3u}) == static_cast<int>(errc::invalid_argument));
}

// ONNX defines these functions with NumPy's maximum, minimum and clip, which return NaN for a
// NaN operand; std::max and std::min return their first argument instead and would turn NaN
// into a number. thresholded_relu is left out: its definition selects 0 when x > alpha is false.
TEST_CASE("unary elementwise functions return NaN for NaN", "[kernels][eltwise]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int f = 0; f <= static_cast<int>(k::last_eltwise_fn); ++f) {
    const auto fn = static_cast<k::eltwise_fn>(f);
    if (k::is_binary(fn) || fn == k::eltwise_fn::thresholded_relu) continue;
    for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
      CAPTURE(k::op_name(k::elementwise{fn}), npurt::to_string(t));
      tensor x({1}, t), y({1}, t);
      x.set(0, nan);
      REQUIRE(run(k::elementwise{fn, x.desc, {}, y.desc, 0.5f, 0.5f}) == 0);
      CHECK(std::isnan(y.get(0)));
    }
  }
}

// log(1 + e^x) is about x once e^x no longer fits a float, and its result still does.
TEST_CASE("softplus of a large input is about the input and not infinity", "[kernels][eltwise]") {
  tensor x({6}), y({6});
  x.assign({20, 88, 89, 100, 1e4, 3e38});
  REQUIRE(run(k::elementwise{k::eltwise_fn::softplus, x.desc, {}, y.desc}) == 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x.get(i), want = v + std::log1p(std::exp(-v));
    CAPTURE(v, y.get(i));
    CHECK(std::abs(y.get(i) - want) <= 2e-7 * want);
  }
  tensor h({1}, dtype::f16), hy({1}, dtype::f16);
  h.set(0, 1000);
  REQUIRE(run(k::elementwise{k::eltwise_fn::softplus, h.desc, {}, hy.desc}) == 0);
  CHECK(hy.get(0) == 1000);
}
