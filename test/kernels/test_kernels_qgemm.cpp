// Reference kernels: integer_matmul and integer_conv2d (ONNX's MatMulInteger and ConvInteger) and
// requantize (the end of QLinearMatMul and QLinearConv), against references written here from the
// ONNX spec and onnx/reference's NumPy arithmetic: the operands widened to int32 before the zero
// points are subtracted, products summed in int32 with wrap-around, the padding of a convolution
// adding nothing; requantize as np.rint(int32 * float32 scale + zero point) in float64, clipped.
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

// Deterministic operands covering the whole of the dtype's range.
void fill_q(tensor& t, std::uint64_t seed) {
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  const bool u8 = t.desc.type == dtype::u8;
  for (std::size_t i = 0; i < t.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto byte = static_cast<int>((s >> 33) & 0xff);
    t.set(i, u8 ? byte : byte - 128);
  }
}

// NumPy's matmul of int32 operands, [M,K] x [K,N], summed in int64 and wrapped to int32 the way
// int32 addition wraps (the sums here stay far below 2^63).
std::int32_t wrap32(std::int64_t v) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(v)); }

}  // namespace

TEST_CASE("integer_matmul subtracts zero points in int32 and sums exactly, every mix of int8 and uint8",
          "[kernels][integer]") {
  const std::int64_t m = 3, kk = 5, n = 4;
  for (const dtype ta : {dtype::u8, dtype::i8})
    for (const dtype tb : {dtype::u8, dtype::i8})
      for (int zps = 0; zps < 3; ++zps) {
        CAPTURE(npurt::to_string(ta), npurt::to_string(tb), zps);
        tensor a({m, kk}, ta), b({kk, n}, tb), y({m, n}, dtype::i32);
        fill_q(a, 1);
        fill_q(b, 2);
        // zps 0: none; 1: one value each; 2: per row of A, per column of B.
        tensor za(zps == 2 ? shape{m, 1} : shape{1}, ta), zb(zps == 2 ? shape{n} : shape{1}, tb);
        fill_q(za, 3);
        fill_q(zb, 4);
        k::integer_matmul op{a.desc, b.desc, zps ? za.desc : tensor_desc{}, zps ? zb.desc : tensor_desc{}, y.desc};
        REQUIRE(run(op) == 0);
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            std::int64_t acc = 0;
            for (std::int64_t q = 0; q < kk; ++q) {
              const double zav = zps == 0 ? 0 : za.get(zps == 2 ? static_cast<std::size_t>(i) : 0);
              const double zbv = zps == 0 ? 0 : zb.get(zps == 2 ? static_cast<std::size_t>(j) : 0);
              acc += static_cast<std::int64_t>(a.get(static_cast<std::size_t>(i * kk + q)) - zav) *
                     static_cast<std::int64_t>(b.get(static_cast<std::size_t>(q * n + j)) - zbv);
            }
            CHECK(y.get(static_cast<std::size_t>(i * n + j)) == wrap32(acc));
          }
      }
  // onnx.ai's MatMulInteger example: A uint8 [4,3], B uint8 [3,2], a_zero_point 12, b_zero_point 0.
  tensor a({4, 3}, dtype::u8), b({3, 2}, dtype::u8), za({1}, dtype::u8), y({4, 2}, dtype::i32);
  a.assign({11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0});
  b.assign({1, 4, 2, 5, 3, 6});
  za.set(0, 12);
  REQUIRE(run(k::integer_matmul{a.desc, b.desc, za.desc, {}, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{-38, -83, -44, -98, -50, -113, -56, -128});
}

TEST_CASE("integer_matmul broadcasts batch dimensions and wraps its int32 sums", "[kernels][integer]") {
  // a [2,1,2,3] x b [3,3,2] -> y [2,3,2,2]: a's batch entry i0, b's i1.
  tensor a({2, 1, 2, 3}, dtype::i8), b({3, 3, 2}, dtype::u8), y({2, 3, 2, 2}, dtype::i32);
  fill_q(a, 7);
  fill_q(b, 8);
  REQUIRE(run(k::integer_matmul{a.desc, b.desc, {}, {}, y.desc}) == 0);
  for (std::int64_t i0 = 0; i0 < 2; ++i0)
    for (std::int64_t i1 = 0; i1 < 3; ++i1)
      for (std::int64_t r = 0; r < 2; ++r)
        for (std::int64_t c = 0; c < 2; ++c) {
          std::int64_t acc = 0;
          for (std::int64_t q = 0; q < 3; ++q)
            acc += static_cast<std::int64_t>(a.get(static_cast<std::size_t>(i0 * 6 + r * 3 + q))) *
                   static_cast<std::int64_t>(b.get(static_cast<std::size_t>(i1 * 6 + q * 2 + c)));
          CHECK(y.get(static_cast<std::size_t>(((i0 * 3 + i1) * 2 + r) * 2 + c)) == wrap32(acc));
        }
  // 255 * 255 summed 33,100 times passes 2^31: int32 wraps as NumPy's int32 matmul does.
  const std::int64_t big = 33100;
  tensor p({1, big}, dtype::u8), q({big, 1}, dtype::u8), s({1, 1}, dtype::i32);
  for (std::int64_t i = 0; i < big; ++i) {
    p.set(static_cast<std::size_t>(i), 255);
    q.set(static_cast<std::size_t>(i), 255);
  }
  REQUIRE(run(k::integer_matmul{p.desc, q.desc, {}, {}, s.desc}) == 0);
  CHECK(s.get(0) == wrap32(big * 255 * 255));
  CHECK(s.get(0) < 0);
}

TEST_CASE("integer_conv2d subtracts zero points before padding, per output channel for w", "[kernels][integer]") {
  // x [1,2,4,5], w [4,1,3,2] in 2 groups, stride (2,1), pad (1,1), dilation (1,2).
  const shape xs{1, 2, 4, 5}, ws{4, 1, 3, 2};
  const std::int64_t sh = 2, sw = 1, ph = 1, pw = 1, dh = 1, dw = 2, groups = 2;
  const std::int64_t ho = (4 + 2 * ph - (dh * 2 + 1)) / sh + 1, wo = (5 + 2 * pw - (dw * 1 + 1)) / sw + 1;
  for (const dtype tx : {dtype::u8, dtype::i8})
    for (const dtype tw : {dtype::u8, dtype::i8}) {
      CAPTURE(npurt::to_string(tx), npurt::to_string(tw));
      tensor x(xs, tx), w(ws, tw), zx({1}, tx), zw({4}, tw), y({1, 4, ho, wo}, dtype::i32);
      fill_q(x, 11);
      fill_q(w, 12);
      fill_q(zx, 13);
      fill_q(zw, 14);
      k::integer_conv2d op{x.desc, w.desc, zx.desc, zw.desc, y.desc};
      op.stride = {2, 1};
      op.pad = {1, 1};
      op.dilation = {1, 2};
      op.groups = 2;
      REQUIRE(run(op) == 0);
      for (std::int64_t o = 0; o < 4; ++o)
        for (std::int64_t r = 0; r < ho; ++r)
          for (std::int64_t c = 0; c < wo; ++c) {
            std::int64_t acc = 0;
            const std::int64_t ch = o / (4 / groups);  // one input channel per group
            for (std::int64_t u = 0; u < 3; ++u)
              for (std::int64_t v = 0; v < 2; ++v) {
                const std::int64_t yy = r * sh - ph + u * dh, xx = c * sw - pw + v * dw;
                // The reference pads X - x_zero_point with zeros.
                if (yy < 0 || yy >= 4 || xx < 0 || xx >= 5) continue;
                const double xv = x.get(at4(xs, 0, ch, yy, xx)) - zx.get(0);
                const double wv = w.get(at4(ws, o, 0, u, v)) - zw.get(static_cast<std::size_t>(o));
                acc += static_cast<std::int64_t>(xv) * static_cast<std::int64_t>(wv);
              }
            CHECK(y.get(at4(y.desc.shape, 0, o, r, c)) == wrap32(acc));
          }
    }
  // onnx.ai's ConvInteger example (test_basic_convinteger): x 2..10 as uint8 [1,1,3,3], x_zero_point
  // 1, w all ones [1,1,2,2]: y = [[12, 16], [24, 28]].
  tensor x({1, 1, 3, 3}, dtype::u8), w({1, 1, 2, 2}, dtype::u8), zx({1}, dtype::u8), y({1, 1, 2, 2}, dtype::i32);
  x.assign({2, 3, 4, 5, 6, 7, 8, 9, 10});
  w.assign({1, 1, 1, 1});
  zx.set(0, 1);
  REQUIRE(run(k::integer_conv2d{x.desc, w.desc, zx.desc, {}, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{12, 16, 24, 28});
}

TEST_CASE("requantize rounds x * scale + zero_point half to even in double and saturates", "[kernels][integer]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  const std::vector<double> xs{0, 1, 3, 5, -1, -3, -5, 1000, -1000, 2147483647, -2147483648.0, 7};
  for (const dtype t : {dtype::u8, dtype::i8})
    for (const double zp : {0.0, 5.0}) {
      CAPTURE(npurt::to_string(t), zp);
      tensor x({static_cast<std::int64_t>(xs.size())}, dtype::i32), scale({1}), z({1}, t), y(x.desc.shape, t);
      x.assign(xs);
      scale.set(0, 0.5);
      z.set(0, zp);
      REQUIRE(run(k::quantize{k::quantize_fn::requantize, x.desc, scale.desc, z.desc, y.desc}) == 0);
      const double lo = t == dtype::u8 ? 0 : -128, hi = t == dtype::u8 ? 255 : 127;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        CAPTURE(xs[i]);
        CHECK(y.get(i) == std::clamp(std::nearbyint(xs[i] * 0.5 + zp), lo, hi));
      }
      // Hand-checked: the zero point is added before the rounding, as the reference adds it to
      // the float64 product. zp 0: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -1.5 -> -2; zp 5: 5.5 -> 6,
      // 6.5 -> 6, 7.5 -> 8, 3.5 -> 4 (and uint8 clips -1.5 to 0).
      const std::vector<double> ties = zp == 0 ? std::vector<double>{0, 2, 2, -2} : std::vector<double>{6, 6, 8, 4};
      CHECK(y.get(1) == std::clamp(ties[0], lo, hi));
      CHECK(y.get(2) == std::clamp(ties[1], lo, hi));
      CHECK(y.get(3) == std::clamp(ties[2], lo, hi));
      CHECK(y.get(5) == std::clamp(ties[3], lo, hi));
    }
  // In double, as NumPy's int32 * float32: x = 2^24 + 1 at a scale of 2.5 * 2^-24 is 2.5 + 2.5 * 2^-24,
  // which rounds to 3; in float x would be 2^24 and the product the tie 2.5, which rounds to 2.
  tensor x({1}, dtype::i32), scale({1}), y({1}, dtype::u8);
  x.set(0, 16777217);
  scale.set(0, std::ldexp(2.5, -24));
  REQUIRE(run(k::quantize{k::quantize_fn::requantize, x.desc, scale.desc, {}, y.desc}) == 0);
  CHECK(y.get(0) == 3);
  // Per axis: one scale per index of axis 1.
  tensor xa({2, 3}, dtype::i32), sa({3}), ya({2, 3}, dtype::i8);
  xa.assign({10, 10, 10, -7, -7, -7});
  sa.assign({0.25, 0.5, 1.0});
  k::quantize pa{k::quantize_fn::requantize, xa.desc, sa.desc, {}, ya.desc, 1};
  REQUIRE(run(pa) == 0);
  CHECK(ya.values() == std::vector<double>{2, 5, 10, -2, -4, -7});
}

TEST_CASE("integer_matmul, integer_conv2d and requantize descriptors are checked", "[kernels][integer]") {
  auto t = [](shape s, dtype d) { return shape_only(s, d); };
  const auto u8 = dtype::u8, i8 = dtype::i8, i32 = dtype::i32;
  using npurt::sim::validate;
  CHECK(!validate(k::integer_matmul{t({2, 3}, u8), t({3, 4}, i8), t({2, 1}, u8), t({4}, i8), t({2, 4}, i32)}));
  CHECK(!validate(k::integer_matmul{t({5, 2, 3}, u8), t({3, 4}, u8), {}, {}, t({5, 2, 4}, i32)}));
  // Operand and output dtypes.
  CHECK(validate(k::integer_matmul{t({2, 3}, i32), t({3, 4}, i8), {}, {}, t({2, 4}, i32)}) == errc::invalid_dtype);
  CHECK(validate(k::integer_matmul{t({2, 3}, u8), t({3, 4}, i8), {}, {}, t({2, 4}, dtype::i64)}) ==
        errc::invalid_dtype);
  CHECK(validate(k::integer_matmul{t({2, 3}, u8), t({3, 4}, i8), t({1}, i8), {}, t({2, 4}, i32)}) ==
        errc::invalid_dtype);
  // Inner dimensions, y's shape, batch broadcasting, a zero point that does not broadcast.
  CHECK(validate(k::integer_matmul{t({2, 3}, u8), t({4, 4}, u8), {}, {}, t({2, 4}, i32)}) == errc::invalid_shape);
  CHECK(validate(k::integer_matmul{t({2, 3}, u8), t({3, 4}, u8), {}, {}, t({2, 5}, i32)}) == errc::invalid_shape);
  CHECK(validate(k::integer_matmul{t({2, 2, 3}, u8), t({3, 3, 4}, u8), {}, {}, t({3, 2, 4}, i32)}) ==
        errc::invalid_shape);
  CHECK(validate(k::integer_matmul{t({2, 3}, u8), t({3, 4}, u8), t({2}, u8), {}, t({2, 4}, i32)}) ==
        errc::invalid_shape);
  CHECK(validate(k::integer_conv2d{t({1, 2, 4, 4}, u8), t({3, 2, 2, 2}, i8), t({1}, u8), t({3}, i8),
                                   t({1, 3, 3, 3}, i32)}) == std::error_code{});
  CHECK(validate(k::integer_conv2d{t({1, 2, 4, 4}, u8), t({3, 2, 2, 2}, i8), t({2}, u8), {}, t({1, 3, 3, 3}, i32)}) ==
        errc::invalid_shape);
  CHECK(validate(k::integer_conv2d{t({1, 2, 4, 4}, u8), t({3, 2, 2, 2}, i8), {}, t({2}, i8), t({1, 3, 3, 3}, i32)}) ==
        errc::invalid_shape);
  CHECK(validate(k::integer_conv2d{t({1, 2, 4, 4}, u8), t({3, 2, 2, 2}, i8), {}, {}, t({1, 3, 3, 3}, dtype::f32)}) ==
        errc::invalid_dtype);
  CHECK(validate(k::integer_conv2d{t({1, 2, 4, 4}, u8), t({3, 2, 2, 2}, i8), {}, {}, t({1, 3, 2, 3}, i32)}) ==
        errc::invalid_shape);
  const auto R = k::quantize_fn::requantize;
  CHECK(!validate(k::quantize{R, t({2, 3}, i32), t({3}, dtype::f32), t({1}, u8), t({2, 3}, u8), 1}));
  CHECK(validate(k::quantize{R, t({2, 3}, i8), t({1}, dtype::f32), {}, t({2, 3}, u8)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{R, t({2, 3}, i32), t({1}, dtype::f32), {}, t({2, 3}, i32)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{R, t({2, 3}, i32), t({1}, dtype::f32), t({1}, i8), t({2, 3}, u8)}) == errc::invalid_dtype);
  CHECK(validate(k::quantize{R, t({2, 3}, i32), t({1}, dtype::f32), t({3}, u8), t({2, 3}, u8)}) == errc::invalid_shape);
  CHECK(validate(k::quantize{R, t({2, 3}, i32), t({2}, dtype::f32), {}, t({2, 3}, u8), 1}) == errc::invalid_shape);
  CHECK(npurt::sim::operands(k::integer_matmul{t({2, 3}, u8), t({3, 4}, u8), {}, t({4}, u8), t({2, 4}, i32)}).size() ==
        4);
  std::string why;
  CHECK(validate(npurt::kernel_desc{k::integer_matmul{t({2, 3}, u8), t({4, 4}, u8), {}, {}, t({2, 4}, i32)}}, &why) ==
        errc::invalid_shape);
  CHECK(why.find("integer_matmul") != std::string::npos);
  CHECK(sizeof(npurt::kernel_desc) <= 752);
}
