// Reference kernels: quantize and dequantize (ONNX's QuantizeLinear and DequantizeLinear) against
// a reference written here from the ONNX spec and NumPy's arithmetic (float32 division, np.rint
// through std::nearbyint, clipping to the integer range; dequantize as NumPy's float32 difference
// and product), at rounding ties, both saturation ends, zero points and per-axis scales, and every
// descriptor error.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

struct quant_range {
  double lo, hi;
};
quant_range quant_range_of(dtype t) { return t == dtype::i8 ? quant_range{-128, 127} : quant_range{0, 255}; }

// onnx.ai QuantizeLinear for float32 x and scale: x / scale in float32, np.rint (to nearest, ties
// to even: nearbyint in the default rounding mode), plus the zero point, clipped.
double quantize_ref(float x, float scale, double zp, dtype t) {
  const float q = x / scale;
  const double r = static_cast<double>(std::nearbyint(q)) + zp;
  const quant_range qr = quant_range_of(t);
  return std::clamp(r, qr.lo, qr.hi);
}

// The scale and zero point index element i of x uses: its coordinate along axis.
std::size_t axis_index(const shape& s, std::size_t axis, std::size_t i) {
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < s.rank(); ++d) inner *= static_cast<std::size_t>(s[d]);
  return (i / inner) % static_cast<std::size_t>(s[axis]);
}

}  // namespace

TEST_CASE("quantize rounds half to even, adds the zero point and saturates at both ends", "[kernels][quantize]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  // x / 0.5: ties at +-0.5, +-1.5, +-2.5 and +-253.5; values past both ends of int8 and uint8; the
  // infinities.
  const std::vector<double> xs{0.25, 0.75, 1.25, -0.25, -0.75,    -1.25,     126.75, -126.75,
                               500,  -500, 1e30, -1e30, INFINITY, -INFINITY, 0.0,    63.4};
  for (const dtype t : {dtype::u8, dtype::i8})
    for (const double zp : {0.0, 3.0, -3.0, 250.0}) {
      if (t == dtype::u8 && zp < 0) continue;
      if (t == dtype::i8 && zp > 127) continue;
      CAPTURE(npurt::to_string(t), zp);
      tensor x({static_cast<std::int64_t>(xs.size())}), scale({1}), z({1}, t), y(x.desc.shape, t);
      x.assign(xs);
      scale.set(0, 0.5);
      z.set(0, zp);
      REQUIRE(run(k::quantize{k::quantize_fn::quantize, x.desc, scale.desc, z.desc, y.desc}) == 0);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        CAPTURE(xs[i]);
        CHECK(y.get(i) == quantize_ref(static_cast<float>(xs[i]), 0.5f, zp, t));
      }
      // Hand-checked: 0.75 / 0.5 = 1.5 -> 2, 1.25 / 0.5 = 2.5 -> 2, -0.75 / 0.5 -> -2.
      const quant_range r = quant_range_of(t);
      CHECK(y.get(1) == std::clamp(2 + zp, r.lo, r.hi));
      CHECK(y.get(2) == std::clamp(2 + zp, r.lo, r.hi));
      CHECK(y.get(4) == std::clamp(-2 + zp, r.lo, r.hi));
      CHECK(y.get(8) == r.hi);
      CHECK(y.get(9) == r.lo);
      CHECK(y.get(12) == r.hi);
      CHECK(y.get(13) == r.lo);
    }
  // No zero point: 0, and y's dtype decides the range.
  tensor x({3}), scale({1}), y({3}, dtype::u8);
  x.assign({-5, 2.5, 1000});
  scale.set(0, 1);
  REQUIRE(run(k::quantize{k::quantize_fn::quantize, x.desc, scale.desc, {}, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{0, 2, 255});
}

TEST_CASE("quantize gives NaN the zero point, per tensor and per axis", "[kernels][quantize]") {
  // NaN / scale is NaN, which no rounding makes a number: the element is the zero point, as
  // docs/simulator.md says (not 0, which would be a value of its own for a nonzero zero point).
  for (const dtype t : {dtype::u8, dtype::i8}) {
    CAPTURE(npurt::to_string(t));
    const double zp = t == dtype::u8 ? 10 : -3;
    tensor x({3}), scale({1}), z({1}, t), y({3}, t);
    x.assign({NAN, 1.0, -NAN});
    scale.set(0, 0.5);
    z.set(0, zp);
    REQUIRE(run(k::quantize{k::quantize_fn::quantize, x.desc, scale.desc, z.desc, y.desc}) == 0);
    CHECK(y.values() == std::vector<double>{zp, 2 + zp, zp});
  }
  // Per axis: each channel's own zero point.
  tensor x({2, 2}), scale({2}), z({2}, dtype::u8), y({2, 2}, dtype::u8);
  x.assign({NAN, 2, 4, NAN});
  scale.assign({1, 2});
  z.assign({7, 200});
  k::quantize q{k::quantize_fn::quantize, x.desc, scale.desc, z.desc, y.desc};
  q.axis = 0;
  REQUIRE(run(q) == 0);
  CHECK(y.values() == std::vector<double>{7, 9, 202, 200});
}

TEST_CASE("quantize and dequantize per axis: each index of axis has its scale and zero point", "[kernels][quantize]") {
  const shape s{2, 3, 4};
  tensor x(s);
  x.fill(7, -20, 20, false);
  for (std::size_t axis = 0; axis < 3; ++axis) {
    CAPTURE(axis);
    const auto n = s[axis];
    tensor scale({n}), z({n}, dtype::i8), q(s, dtype::i8), back(s);
    for (std::int64_t c = 0; c < n; ++c) {
      scale.set(static_cast<std::size_t>(c), 0.1 + 0.07 * static_cast<double>(c));
      z.set(static_cast<std::size_t>(c), static_cast<double>(5 * c - 4));
    }
    REQUIRE(run(k::quantize{k::quantize_fn::quantize, x.desc, scale.desc, z.desc, q.desc,
                            static_cast<std::int32_t>(axis)}) == 0);
    REQUIRE(run(k::quantize{k::quantize_fn::dequantize, q.desc, scale.desc, z.desc, back.desc,
                            static_cast<std::int32_t>(axis)}) == 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t c = axis_index(s, axis, i);
      const auto sc = static_cast<float>(scale.get(c));
      const double zp = z.get(c);
      CAPTURE(i, c);
      CHECK(q.get(i) == quantize_ref(static_cast<float>(x.get(i)), sc, zp, dtype::i8));
      // NumPy: (x.astype(float32) - zero_point) * scale, all float32.
      const float want = (static_cast<float>(q.get(i)) - static_cast<float>(zp)) * sc;
      CHECK(back.get(i) == static_cast<double>(want));
    }
  }
}

TEST_CASE("dequantize int8, uint8 and int32 as NumPy computes them", "[kernels][quantize]") {
  // uint8 at both ends with zero point 128; int8 at both ends with -128 and 127.
  {
    tensor q({4}, dtype::u8), z({1}, dtype::u8), scale({1}), y({4});
    q.assign({0, 255, 128, 1});
    z.set(0, 128);
    scale.set(0, 0.0375);
    REQUIRE(run(k::quantize{k::quantize_fn::dequantize, q.desc, scale.desc, z.desc, y.desc}) == 0);
    const float s = 0.0375f;
    CHECK(y.values() == std::vector<double>{-128 * s, 127 * s, 0, -127 * s});
  }
  {
    tensor q({2}, dtype::i8), z({1}, dtype::i8), scale({1}), y({2});
    q.assign({-128, 127});
    for (const double zp : {-128.0, 127.0}) {
      z.set(0, zp);
      scale.set(0, 3.0);
      REQUIRE(run(k::quantize{k::quantize_fn::dequantize, q.desc, scale.desc, z.desc, y.desc}) == 0);
      CHECK(y.get(0) == (-128 - zp) * 3);
      CHECK(y.get(1) == (127 - zp) * 3);
    }
  }
  {
    // int32 (a bias quantized with scale_x * scale_w): NumPy promotes float32 - int32 to float64,
    // so x is rounded to float32 first (2^24 + 1 -> 2^24) and the rest is double until y.
    tensor q({3}, dtype::i32), z({1}, dtype::i32), scale({1}), y({3});
    q.assign({16777217, -1000, 2147483647});
    z.set(0, 1);
    scale.set(0, 0.001);
    REQUIRE(run(k::quantize{k::quantize_fn::dequantize, q.desc, scale.desc, z.desc, y.desc}) == 0);
    const double s = static_cast<double>(0.001f);
    CHECK(y.get(0) == static_cast<double>(static_cast<float>((16777216.0 - 1) * s)));
    CHECK(y.get(1) == static_cast<double>(static_cast<float>(-1001 * s)));
    CHECK(y.get(2) == static_cast<double>(static_cast<float>((2147483648.0 - 1) * s)));
  }
  {
    // f16 x and scale: NumPy divides half by half in half.
    tensor x({2}, dtype::f16), scale({1}, dtype::f16), y({2}, dtype::u8), back({2}, dtype::f16);
    x.assign({1.0, 37.0});
    scale.set(0, 0.3);
    REQUIRE(run(k::quantize{k::quantize_fn::quantize, x.desc, scale.desc, {}, y.desc}) == 0);
    for (std::size_t i = 0; i < 2; ++i) {
      const float q = npurt::round_to_half(static_cast<float>(x.get(i)) / static_cast<float>(scale.get(0)));
      CHECK(y.get(i) == std::nearbyint(q));
    }
    REQUIRE(run(k::quantize{k::quantize_fn::dequantize, y.desc, scale.desc, {}, back.desc}) == 0);
    for (std::size_t i = 0; i < 2; ++i)
      CHECK(back.get(i) ==
            static_cast<double>(npurt::round_to_half(static_cast<float>(y.get(i)) * static_cast<float>(scale.get(0)))));
  }
}

TEST_CASE("quantize descriptors: dtypes, shapes and axis are checked", "[kernels][quantize]") {
  auto t = [](shape s, dtype d = dtype::f32) { return shape_only(s, d); };
  const auto Q = k::quantize_fn::quantize;
  const auto D = k::quantize_fn::dequantize;
  using npurt::sim::validate;
  CHECK(!validate(k::quantize{Q, t({2, 3}), t({1}), t({1}, dtype::u8), t({2, 3}, dtype::u8)}));
  CHECK(!validate(k::quantize{D, t({2, 3}, dtype::i32), t({3}), {}, t({2, 3}), 1}));
  // y's dtype is no int8 or uint8; int32 is dequantize's only.
  CHECK(validate(k::quantize{Q, t({2, 3}), t({1}), {}, t({2, 3}, dtype::i32)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{Q, t({2, 3}, dtype::i8), t({1}), {}, t({2, 3}, dtype::i8)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{D, t({2, 3}, dtype::i64), t({1}), {}, t({2, 3})}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({1}, dtype::i32), {}, t({2, 3}, dtype::u8)}) == errc::invalid_dtype);
  // A zero point of another dtype than the integer side.
  CHECK(validate(k::quantize{Q, t({2, 3}), t({1}), t({1}, dtype::i8), t({2, 3}, dtype::u8)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{D, t({2, 3}, dtype::u8), t({1}), t({1}, dtype::i8), t({2, 3})}) == errc::invalid_dtype);
  // Shapes: y is x's; scale 1-D of x's extent along axis; zero point scale's shape.
  CHECK(validate(k::quantize{Q, t({2, 3}), t({1}), {}, t({3, 2}, dtype::u8)}) == errc::invalid_shape);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({2}), {}, t({2, 3}, dtype::u8), 1}) == errc::invalid_shape);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({3, 1}), {}, t({2, 3}, dtype::u8), 1}) == errc::invalid_shape);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({3}), t({1}, dtype::u8), t({2, 3}, dtype::u8), 1}) == errc::invalid_shape);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({3}), {}, t({2, 3}, dtype::u8), 2}) == errc::invalid_argument);
  CHECK(validate(k::quantize{Q, t({2, 3}), t({3}), {}, t({2, 3}, dtype::u8), -1}) == errc::invalid_argument);
  CHECK(validate(k::quantize{static_cast<k::quantize_fn>(7), t({2}), t({1}), {}, t({2}, dtype::u8)}) ==
        errc::invalid_argument);
  CHECK(npurt::sim::operands(k::quantize{Q, t({2}), t({1}), {}, t({2}, dtype::u8)}).size() == 3);
  CHECK(npurt::sim::operands(k::quantize{Q, t({2}), t({1}), t({1}, dtype::u8), t({2}, dtype::u8)}).size() == 4);
  CHECK(sizeof(npurt::kernel_desc) <= 752);
}

TEST_CASE("round rounds halves to even in every float dtype, keeping signs, infinities and NaN",
          "[kernels][eltwise][round]") {
  // numpy.round (ONNX's Round): ties to even, so 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2; -0.4
  // gives -0; 2^23 + 1 and larger floats are integers already.
  const std::vector<double> v{0.5,       1.5,       2.5,  -0.5,     -1.5,      -2.5, 0.4999, -0.4,
                              2.5000002, 8388609.0, 1e30, INFINITY, -INFINITY, NAN,  -0.0,   126.5};
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    tensor x({static_cast<std::int64_t>(v.size())}, t), y(x.desc.shape, t);
    x.assign(v);
    REQUIRE(run(k::elementwise{k::eltwise_fn::round, x.desc, {}, y.desc}) == 0);
    const auto held = x.values();
    for (std::size_t i = 0; i < v.size(); ++i) {
      CAPTURE(held[i]);
      const double want = std::nearbyint(held[i]);
      if (std::isnan(want)) {
        CHECK(std::isnan(y.get(i)));
      } else {
        CHECK(y.get(i) == want);
        CHECK(std::signbit(y.get(i)) == std::signbit(want));
      }
    }
    CHECK(y.get(0) == 0);
    CHECK(y.get(1) == 2);
    CHECK(y.get(2) == 2);
    CHECK(y.get(5) == -2);
  }
}

TEST_CASE("shift_left and shift_right on uint8: bits shifted out drop, a shift of 8 or more gives 0",
          "[kernels][eltwise][bitshift]") {
  // numpy.left_shift and right_shift on uint8, broadcast: y = (x << s) mod 256, x >> s, 0 for s >= 8.
  tensor x({2, 3}, dtype::u8), s({3}, dtype::u8), y({2, 3}, dtype::u8);
  x.assign({1, 255, 16, 200, 3, 128});
  s.assign({1, 4, 8});
  for (const auto fn : {k::eltwise_fn::shift_left, k::eltwise_fn::shift_right}) {
    CAPTURE(k::op_name(k::elementwise{fn}));
    REQUIRE(run(k::elementwise{fn, x.desc, s.desc, y.desc}) == 0);
    for (std::size_t i = 0; i < 6; ++i) {
      const auto xv = static_cast<unsigned>(x.get(i)), sv = static_cast<unsigned>(s.get(i % 3));
      const unsigned want = sv >= 8 ? 0u : (fn == k::eltwise_fn::shift_left ? (xv << sv) & 0xFFu : xv >> sv);
      CHECK(y.get(i) == want);
    }
  }
  CHECK(y.get(0) == 0);  // 1 >> 1
  auto t = [](shape sh, dtype d) { return shape_only(sh, d); };
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::shift_left, t({2}, dtype::i8), t({2}, dtype::i8),
                                            t({2}, dtype::i8)}) == errc::invalid_dtype);
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::shift_right, t({2}, dtype::f32), t({2}, dtype::f32),
                                            t({2}, dtype::f32)}) == errc::invalid_dtype);
}
