// The inverse trigonometric functions, det and reverse_sequence: each against a reference
// written from ONNX's operator documentation (and NumPy's functions it names), evaluated in
// double or long double, never from the kernels' own output.
#include "helpers.hpp"

#include <npurt/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

// The relative error a result rounded once to t may carry, with a little room for libm.
double trig_tolerance(dtype t) {
  switch (t) {
    case dtype::f64: return 8 * std::numeric_limits<double>::epsilon();
    case dtype::f32: return 4e-7;
    case dtype::f16: return 1e-3;
    default: return 8e-3;  // bf16
  }
}

// The determinant by Laplace expansion along the first row, in long double: another method than
// the kernel's elimination, exact for the small integer matrices below.
long double laplace_det(const std::vector<long double>& a, std::size_t m) {
  if (m == 1) return a[0];
  long double sum = 0;
  for (std::size_t j = 0; j < m; ++j) {
    std::vector<long double> minor;
    for (std::size_t r = 1; r < m; ++r)
      for (std::size_t c = 0; c < m; ++c)
        if (c != j) minor.push_back(a[r * m + c]);
    const long double term = a[j] * laplace_det(minor, m - 1);
    sum += j % 2 == 0 ? term : -term;
  }
  return sum;
}

}  // namespace

TEST_CASE("asin, acos and atan follow numpy.arcsin, arccos and arctan in every float dtype, NaN outside the domain",
          "[kernels][eltwise][trig]") {
  // In and beyond [-1, 1], the ends, signed zeros and the infinities.
  const std::vector<double> v{-1.0, -0.999, -0.75, -0.5, -0.1, -0.0, 0.0,      0.1,       0.3, 0.5,
                              0.75, 0.999,  1.0,   1.5,  -1.5, 3.0,  INFINITY, -INFINITY, NAN};
  const double half_pi = std::numbers::pi / 2;
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::f64}) {
    CAPTURE(npurt::to_string(t));
    tensor x({static_cast<std::int64_t>(v.size())}, t), y(x.desc.shape, t);
    x.assign(v);
    const auto held = x.values();
    for (const auto fn : {k::eltwise_fn::asin, k::eltwise_fn::acos, k::eltwise_fn::atan}) {
      CAPTURE(k::op_name(k::elementwise{fn}));
      REQUIRE(run(k::elementwise{fn, x.desc, {}, y.desc}) == 0);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const double in = held[i];
        CAPTURE(in);
        const bool outside = std::isnan(in) || (fn != k::eltwise_fn::atan && std::fabs(in) > 1);
        if (outside) {
          CHECK(std::isnan(y.get(i)));
          continue;
        }
        // arctan(+-inf) = +-pi/2; otherwise the functions' values in double.
        const double want = fn == k::eltwise_fn::asin   ? std::asin(in)
                            : fn == k::eltwise_fn::acos ? std::acos(in)
                            : std::isinf(in)            ? std::copysign(half_pi, in)
                                                        : std::atan(in);
        CHECK(std::fabs(y.get(i) - want) <= trig_tolerance(t) * std::fabs(want) + 1e-300);
        // Odd functions keep the sign of zero; acos(0) is pi/2.
        if (in == 0 && fn != k::eltwise_fn::acos) CHECK(std::signbit(y.get(i)) == std::signbit(in));
      }
    }
    if (t == dtype::f32) {
      CHECK(y.get(0) == static_cast<float>(-std::atan(1.0)));  // atan(-1) = -pi/4, rounded once
    }
  }
}

TEST_CASE("det computes each matrix's determinant in every float dtype, pivoting past zeros", "[kernels][det]") {
  // Three 3x3 matrices: one that needs a row swap (a zero first pivot), a singular one (two equal
  // rows) and one with a swap that flips the sign; small integers, exact in every dtype.
  const std::vector<double> mats{0, 2, 1, 3, -1, 4, 5, 6, -2,  //
                                 1, 2, 3, 4, 5,  6, 1, 2, 3,   //
                                 2, 7, 1, 8, 2,  8, 1, 8, 2};
  for (const dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    tensor x({3, 3, 3}, t), y({3}, t);
    x.assign(mats);
    REQUIRE(run(k::det{x.desc, y.desc}) == 0);
    for (std::size_t b = 0; b < 3; ++b) {
      std::vector<long double> a(mats.begin() + static_cast<std::ptrdiff_t>(9 * b),
                                 mats.begin() + static_cast<std::ptrdiff_t>(9 * b + 9));
      // Elimination divides, so a double result may sit an ulp or two off the integer; every
      // narrower dtype rounds it back onto the integer.
      const auto want = static_cast<double>(laplace_det(a, 3));
      if (t == dtype::f64) CHECK(std::fabs(y.get(b) - want) <= 1e-13 * std::fabs(want));
      else CHECK(y.get(b) == want);
    }
  }
  // The values: 0*(2+24) - 2*(-6-20) + 1*(18+5) = 75; 0; 2*(4-64) - 7*(16-8) + 1*(64-2) = -114.
  tensor x({3, 3, 3}, dtype::f32), y({3}, dtype::f32);
  x.assign(mats);
  REQUIRE(run(k::det{x.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{75, 0, -114});
}

TEST_CASE("det of random matrices agrees with a Laplace expansion; one matrix gives a scalar", "[kernels][det]") {
  for (const std::int64_t m : {1, 2, 4, 5}) {
    CAPTURE(m);
    tensor x({2, m, m}, dtype::f64), y({2}, dtype::f64);
    x.fill(static_cast<std::uint64_t>(m) + 40, -2, 2, false);
    REQUIRE(run(k::det{x.desc, y.desc}) == 0);
    const auto held = x.values();
    for (std::size_t b = 0; b < 2; ++b) {
      const auto mm = static_cast<std::size_t>(m * m);
      std::vector<long double> a(held.begin() + static_cast<std::ptrdiff_t>(b * mm),
                                 held.begin() + static_cast<std::ptrdiff_t>((b + 1) * mm));
      const auto want = static_cast<double>(laplace_det(a, static_cast<std::size_t>(m)));
      CHECK(std::fabs(y.get(b) - want) <= 1e-12 * (1 + std::fabs(want)));
    }
  }
  // A rank-2 x: y is a scalar (rank 0, one element).
  tensor x({2, 2}, dtype::f32), y(shape{}, dtype::f32);
  x.assign({3, 8, 4, 6});
  REQUIRE(run(k::det{x.desc, y.desc}) == 0);
  CHECK(y.get(0) == 3 * 6 - 8 * 4);
}

TEST_CASE("det refuses integer, non-square and misshapen operands", "[kernels][det][validate]") {
  const auto code = [](const k::det& d) { return npurt::sim::validate(d).value(); };
  CHECK(code(k::det{shape_only({2, 3, 3}, dtype::i32), shape_only({2}, dtype::i32)}) ==
        static_cast<int>(errc::invalid_dtype));
  CHECK(code(k::det{shape_only({2, 3, 3}), shape_only({2}, dtype::f16)}) == static_cast<int>(errc::invalid_dtype));
  CHECK(code(k::det{shape_only({2, 3, 4}), shape_only({2})}) == static_cast<int>(errc::invalid_shape));
  CHECK(code(k::det{shape_only({2, 3, 3}), shape_only({3})}) == static_cast<int>(errc::invalid_shape));
  CHECK(code(k::det{shape_only({3}), shape_only({1})}) == static_cast<int>(errc::invalid_shape));
  CHECK(code(k::det{shape_only({4, 2, 3, 3}), shape_only({4, 2})}) == 0);
}

TEST_CASE("reverse_sequence reverses each batch entry's first sequence_lens steps, either axis order",
          "[kernels][reverse_sequence]") {
  // x [T=4, B=3, 2] (time_axis 0, batch_axis 1) and its transpose [B=3, T=4, 2] (batch_axis 0).
  constexpr std::int64_t T = 4, B = 3, I = 2;
  const std::vector<std::int64_t> lens{4, 0, 3};
  for (const bool batch_first : {false, true}) {
    CAPTURE(batch_first);
    const shape s = batch_first ? shape{B, T, I} : shape{T, B, I};
    for (const dtype t : {dtype::f32, dtype::i64, dtype::u8}) {
      CAPTURE(npurt::to_string(t));
      tensor x(s, t), y(s, t), l({B}, dtype::i64);
      std::vector<double> xv(static_cast<std::size_t>(s.elements()));
      for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>(i + 1);
      x.assign(xv);
      for (std::size_t b = 0; b < lens.size(); ++b) l.set(b, static_cast<double>(lens[b]));
      k::reverse_sequence op{x.desc, l.desc, y.desc, batch_first ? 0 : 1, batch_first ? 1 : 0};
      REQUIRE(run(op) == 0);
      // onnx.ai ReverseSequence: y[b, t] = x[b, len_b - 1 - t] for t < len_b, else x[b, t].
      const auto at = [&](std::int64_t b, std::int64_t tt, std::int64_t i) {
        return static_cast<std::size_t>(batch_first ? (b * T + tt) * I + i : (tt * B + b) * I + i);
      };
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t tt = 0; tt < T; ++tt)
          for (std::int64_t i = 0; i < I; ++i) {
            const std::int64_t len = lens[static_cast<std::size_t>(b)];
            const std::int64_t from = tt < len ? len - 1 - tt : tt;
            CHECK(y.get(at(b, tt, i)) == xv[at(b, from, i)]);
          }
    }
  }
}

TEST_CASE("reverse_sequence: a length outside [0, steps] fails naming it, y unwritten; bad descriptors refused",
          "[kernels][reverse_sequence][validate]") {
  tensor x({3, 2}), y({3, 2}), l({2}, dtype::i64);
  x.assign({1, 2, 3, 4, 5, 6});
  y.assign({9, 9, 9, 9, 9, 9});
  for (const double bad : {4.0, -1.0}) {
    l.assign({2, bad});
    std::error_code ec;
    const std::string why = run_why(k::reverse_sequence{x.desc, l.desc, y.desc, 1, 0}, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK(why.find("sequence_lens[1]") != std::string::npos);
    CHECK(why.find("[0, 3]") != std::string::npos);
    CHECK(y.values() == std::vector<double>(6, 9.0));
  }
  const auto code = [](const k::reverse_sequence& r) { return npurt::sim::validate(r).value(); };
  CHECK(code({shape_only({3, 2}), shape_only({2}, dtype::i32), shape_only({3, 2}), 1, 0}) ==
        static_cast<int>(errc::invalid_dtype));
  CHECK(code({shape_only({3, 2}), shape_only({2}, dtype::i64), shape_only({3, 2}), 1, 1}) ==
        static_cast<int>(errc::invalid_argument));
  CHECK(code({shape_only({3, 2, 2}), shape_only({2}, dtype::i64), shape_only({3, 2, 2}), 2, 0}) ==
        static_cast<int>(errc::invalid_argument));
  CHECK(code({shape_only({3, 2}), shape_only({3}, dtype::i64), shape_only({3, 2}), 1, 0}) ==
        static_cast<int>(errc::invalid_shape));
  CHECK(code({shape_only({3}), shape_only({3}, dtype::i64), shape_only({3}), 1, 0}) ==
        static_cast<int>(errc::invalid_shape));
  CHECK(code({shape_only({3, 2}), shape_only({2}, dtype::i64), shape_only({3, 2}, dtype::f16), 1, 0}) ==
        static_cast<int>(errc::invalid_dtype));
}
