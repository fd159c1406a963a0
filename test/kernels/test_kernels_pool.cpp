// Pooling as ONNX's MaxPool and AveragePool define it (onnx.ai/onnx/operators/onnx__MaxPool.html,
// onnx__AveragePool.html): 1-, 2- and 3-D, asymmetric pads, dilations, ceil_mode,
// count_include_pad, integer max and the Indices output; and LRN (onnx__LRN.html), the channel
// window's normalisation; against references written here from the specs in double.
#include "helpers.hpp"

#include <npurt/kernel.hpp>

#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace k = npurt::kernels;
using namespace kt;
using npurt::errc;

namespace {

// One pooling: r spatial dimensions and their window, stride, pads before and after, dilation.
struct pool_setup {
  shape xs;
  std::size_t r = 2;
  std::array<std::int64_t, 3> k{1, 1, 1}, s{1, 1, 1}, pb{}, pe{}, d{1, 1, 1};
  bool ceil = false, include_pad = false, column_major = false;
  k::pool_mode mode = k::pool_mode::max;
};

// The output extent of spatial dimension i by the spec: floor or ceil of
// (in + pads - ((k - 1) * d + 1)) / s + 1, the last window dropped by ceil_mode when it would
// start past the input and its leading pad. -1 when the padded input is smaller than the window.
std::int64_t pool_ref_extent(const pool_setup& p, std::size_t i) {
  const auto in = static_cast<double>(p.xs[i + 2]);
  const double span = in + static_cast<double>(p.pb[i] + p.pe[i]) - static_cast<double>((p.k[i] - 1) * p.d[i] + 1);
  if (span < 0) return -1;
  const double q = span / static_cast<double>(p.s[i]) + 1;
  auto o = static_cast<std::int64_t>(p.ceil ? std::ceil(q) : std::floor(q));
  if (p.ceil && static_cast<double>((o - 1) * p.s[i]) >= in + static_cast<double>(p.pb[i])) --o;
  return o;
}

struct pool_ref_result {
  shape ys;
  std::vector<double> y;
  std::vector<std::int64_t> indices;
};

// Nested loops over (n, c, output position, window tap), in double. A tap counts for the average
// when it lies in x, or with count_include_pad in x's padded extent [-pb, in + pe). Max keeps the
// first greatest input element; a window with none is -inf with index -1 (max) or NaN (avg
// without count_include_pad: 0 / 0).
pool_ref_result pool_reference(const pool_setup& p, const std::vector<double>& x) {
  pool_ref_result res;
  res.ys = shape{p.xs[0], p.xs[1]};
  for (std::size_t i = 0; i < p.r; ++i) res.ys.push_back(pool_ref_extent(p, i));
  std::int64_t in_plane = 1, out_plane = 1;
  for (std::size_t i = 0; i < p.r; ++i) {
    in_plane *= p.xs[i + 2];
    out_plane *= res.ys[i + 2];
  }
  for (std::int64_t plane = 0; plane < p.xs[0] * p.xs[1]; ++plane)
    for (std::int64_t oflat = 0; oflat < out_plane; ++oflat) {
      std::array<std::int64_t, 3> o{};
      for (std::size_t i = p.r; i-- > 0;) {
        o[i] = oflat;
        for (std::size_t j = i + 1; j < p.r; ++j) o[i] /= res.ys[j + 2];
        o[i] %= res.ys[i + 2];
      }
      std::int64_t taps = 1;
      for (std::size_t i = 0; i < p.r; ++i) taps *= p.k[i];
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      std::int64_t best_at = -1, count = 0;
      for (std::int64_t t = 0; t < taps; ++t) {
        // Tap t of the window in row-major order of its kernel offsets.
        bool inside = true, padded = true;
        std::int64_t row = 0, col = 0, col_scale = 1;
        std::int64_t rem = t;
        std::array<std::int64_t, 3> j{};
        for (std::size_t i = p.r; i-- > 0;) {
          j[i] = rem % p.k[i];
          rem /= p.k[i];
        }
        for (std::size_t i = 0; i < p.r; ++i) {
          const std::int64_t pos = o[i] * p.s[i] - p.pb[i] + j[i] * p.d[i], in = p.xs[i + 2];
          inside = inside && pos >= 0 && pos < in;
          padded = padded && pos >= -p.pb[i] && pos < in + p.pe[i];
          row = row * in + pos;
        }
        for (std::size_t i = 0; i < p.r; ++i) {
          col += (o[i] * p.s[i] - p.pb[i] + j[i] * p.d[i]) * col_scale;
          col_scale *= p.xs[i + 2];
        }
        if (p.include_pad && padded) ++count;
        if (!inside) continue;
        const double v = x[static_cast<std::size_t>(plane * in_plane + row)];
        if (!p.include_pad) ++count;
        sum += v;
        if (best_at < 0 || v > best) {
          best = v;
          best_at = plane * in_plane + (p.column_major ? col : row);
        }
      }
      if (p.mode == k::pool_mode::max) {
        res.y.push_back(best);
        res.indices.push_back(best_at);
      } else {
        res.y.push_back(count == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(count));
      }
    }
  return res;
}

k::pool2d pool_kernel(const pool_setup& p, const tensor& x, const tensor& y) {
  k::pool2d op{p.mode, x.desc, y.desc};
  for (std::size_t i = 0; i < 3; ++i) {
    op.window[i] = static_cast<std::int32_t>(p.k[i]);
    op.stride[i] = static_cast<std::int32_t>(p.s[i]);
    op.pad[i] = static_cast<std::int32_t>(p.pb[i]);
    op.pad_end[i] = static_cast<std::int32_t>(p.pe[i]);
    op.dilation[i] = static_cast<std::int32_t>(p.d[i]);
  }
  op.ceil_mode = p.ceil;
  op.count_include_pad = p.include_pad;
  op.column_major = p.column_major;
  return op;
}

bool pool_same(double got, double want, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

}  // namespace

TEST_CASE("pooling matches the ONNX spec in every attribute combination, 1-, 2- and 3-D", "[kernels][pool]") {
  int_draw draw(2026);
  int checked = 0, ceil_cases = 0, asymmetric = 0, empty_windows = 0;
  for (int trial = 0; trial < 600; ++trial) {
    pool_setup p;
    p.r = static_cast<std::size_t>(draw(1, 3));
    p.xs = shape{draw(1, 2), draw(1, 3)};
    for (std::size_t i = 0; i < p.r; ++i) {
      p.xs.push_back(draw(1, p.r == 3 ? 6 : 9));
      p.k[i] = draw(1, 4);
      p.s[i] = draw(1, 3);
      p.d[i] = draw(1, 3);
      // Pads up to past the whole window: windows may lie entirely in padding.
      p.pb[i] = draw(0, 4);
      p.pe[i] = draw(0, 4);
    }
    p.ceil = draw(0, 1) == 1;
    p.include_pad = draw(0, 1) == 1;
    p.column_major = draw(0, 1) == 1;
    p.mode = draw(0, 1) == 0 ? k::pool_mode::max : k::pool_mode::avg;
    const dtype t = draw(0, 2) == 0 ? dtype::f16 : dtype::f32;
    bool fits = true;
    for (std::size_t i = 0; i < p.r; ++i) fits = fits && pool_ref_extent(p, i) >= 1;
    if (!fits) continue;
    CAPTURE(trial, p.r, p.xs, p.k, p.s, p.pb, p.pe, p.d, p.ceil, p.include_pad, p.column_major,
            static_cast<int>(p.mode), static_cast<int>(t));
    tensor x(p.xs, t);
    x.fill(static_cast<std::uint64_t>(trial), -50, 50, true);  // exact in f16
    const pool_ref_result want = pool_reference(p, x.values());
    tensor y(want.ys, t), idx(want.ys, dtype::i64);
    k::pool2d op = pool_kernel(p, x, y);
    if (p.mode == k::pool_mode::max) op.indices = idx.desc;
    REQUIRE(run(op) == 0);
    // Max is exact; the average of integers is one rounding of the exact quotient in float, then
    // in f16 (the float quotient rounded again: within an f16 ulp).
    const double rel = p.mode == k::pool_mode::max ? 0 : t == dtype::f16 ? 1e-3 : 1e-6;
    for (std::size_t i = 0; i < want.y.size(); ++i) {
      CAPTURE(i, y.get(i), want.y[i]);
      REQUIRE(pool_same(y.get(i), want.y[i], rel));
      if (p.mode == k::pool_mode::max) REQUIRE(idx.at<std::int64_t>(i) == want.indices[i]);
      if (std::isnan(want.y[i]) || std::isinf(want.y[i])) ++empty_windows;
    }
    ++checked;
    pool_setup floor = p;
    floor.ceil = false;
    ceil_cases += p.ceil && pool_ref_extent(p, 0) != pool_ref_extent(floor, 0);
    for (std::size_t i = 0; i < p.r; ++i) asymmetric += p.pb[i] != p.pe[i];
  }
  // The draws reached what they are meant to.
  CHECK(checked > 300);
  CHECK(ceil_cases > 20);
  CHECK(asymmetric > 100);
  CHECK(empty_windows > 10);
}

TEST_CASE("pooling's hand-worked ONNX cases: ceil_mode, SAME_UPPER pads, count_include_pad, dilation",
          "[kernels][pool]") {
  // onnx.ai MaxPool example maxpool_2d_ceil: 4x4 input 1..16, kernel 3, stride 2, ceil_mode: 2x2.
  tensor x({1, 1, 4, 4});
  x.assign({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  tensor y({1, 1, 2, 2});
  k::pool2d op{k::pool_mode::max, x.desc, y.desc, {3, 3}, {2, 2}, {0, 0}};
  op.ceil_mode = true;
  REQUIRE(run(op) == 0);
  CHECK(y.values() == std::vector<double>{11, 12, 15, 16});
  // Without ceil_mode the 2x2 output is refused: the floor gives 1x1.
  op.ceil_mode = false;
  CHECK(run(op) == static_cast<int>(errc::invalid_shape));
  // maxpool_2d_dilations: kernel 2, dilation 2, stride 1 on the same input: 2x2 of
  // max(x[i][j], x[i][j+2], x[i+2][j], x[i+2][j+2]).
  k::pool2d dil{k::pool_mode::max, x.desc, y.desc, {2, 2}, {1, 1}, {0, 0}};
  dil.dilation = {2, 2, 1};
  REQUIRE(run(dil) == 0);
  CHECK(y.values() == std::vector<double>{11, 12, 15, 16});
  // averagepool_2d_pads_count_include_pad in miniature: 2x2 ones, kernel 2, pads 1 on every side,
  // stride 1: every window has 4 taps in the padded input, 1, 2 or 4 of them ones.
  tensor ones({1, 1, 2, 2}), avg({1, 1, 3, 3});
  ones.assign({1, 1, 1, 1});
  k::pool2d cip{k::pool_mode::avg, ones.desc, avg.desc, {2, 2}, {1, 1}, {1, 1}};
  cip.count_include_pad = true;
  REQUIRE(run(cip) == 0);
  CHECK(avg.values() == std::vector<double>{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  cip.count_include_pad = false;
  REQUIRE(run(cip) == 0);
  CHECK(avg.values() == std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 1});
  // SAME_UPPER with kernel 2, stride 1 on 4 wide: one pad, after. The last column averages x[3]
  // alone; a SAME_LOWER pad before instead makes the first column x[0] alone.
  tensor row({1, 1, 4}), out({1, 1, 4});
  row.assign({2, 4, 6, 8});
  k::pool2d upper{k::pool_mode::avg, row.desc, out.desc, {2}, {1}, {0}};
  upper.pad_end = {1, 0, 0};
  REQUIRE(run(upper) == 0);
  CHECK(out.values() == std::vector<double>{3, 5, 7, 8});
  k::pool2d lower{k::pool_mode::avg, row.desc, out.desc, {2}, {1}, {1}};
  lower.pad_end = {0, 0, 0};
  REQUIRE(run(lower) == 0);
  CHECK(out.values() == std::vector<double>{2, 3, 5, 7});
}

TEST_CASE("max pooling on integers is exact and its indices follow storage_order", "[kernels][pool]") {
  // int8 extremes a float path would keep too, but uint8 above 127 and the order of equal values
  // show the integer path compares exactly and keeps the first maximum.
  tensor x({1, 2, 2, 3}, dtype::u8), y({1, 2, 1, 2}, dtype::u8), idx({1, 2, 1, 2}, dtype::i64);
  x.assign({255, 3, 255, 200, 254, 1, /* channel 1 */ 0, 0, 0, 0, 0, 7});
  k::pool2d op{k::pool_mode::max, x.desc, y.desc, {2, 2}, {1, 1}, {0, 0}};
  op.indices = idx.desc;
  REQUIRE(run(op) == 0);
  CHECK(y.values() == std::vector<double>{255, 255, 0, 7});
  // Row-major flat indices into x [1, 2, 2, 3]: the first 255 (0), then x[0][2] (2); channel 1
  // starts at 6: its first zero (6) and the 7 at (1, 2) (6 + 5).
  CHECK(idx.values() == std::vector<double>{0, 2, 6, 11});
  // storage_order 1: the spatial offset column-major, h + w * H.
  op.column_major = true;
  REQUIRE(run(op) == 0);
  CHECK(idx.values() == std::vector<double>{0, 4, 6, 6 + 1 + 2 * 2});
  tensor xi({1, 1, 3}, dtype::i8), yi({1, 1, 2}, dtype::i8);
  xi.assign({-128, -127, 127});
  REQUIRE(run(k::pool2d{k::pool_mode::max, xi.desc, yi.desc, {2}, {1}, {0}}) == 0);
  CHECK(yi.values() == std::vector<double>{-127, 127});
  // Window 1, stride 2, pads 2 and 1: windows at -2 (entirely in padding: the dtype's minimum and
  // index -1), 0 and 2.
  tensor pad_y({1, 1, 3}, dtype::i8), pad_idx({1, 1, 3}, dtype::i64);
  k::pool2d far{k::pool_mode::max, xi.desc, pad_y.desc, {1}, {2}, {2}};
  far.pad_end = {1, 0, 0};
  far.indices = pad_idx.desc;
  REQUIRE(run(far) == 0);
  CHECK(pad_y.values() == std::vector<double>{-128, -128, 127});
  CHECK(pad_idx.values() == std::vector<double>{-1, 0, 2});
  // Average on integers is not exact in the dtype: refused.
  tensor ai({1, 1, 2}, dtype::i8);
  CHECK(run(k::pool2d{k::pool_mode::avg, xi.desc, ai.desc, {2}, {1}, {0}}) == static_cast<int>(errc::invalid_dtype));
}

TEST_CASE("pooling refuses malformed windows, ranks and indices", "[kernels][pool][errors]") {
  const tensor_desc x3 = shape_only({1, 2, 5}), x5 = shape_only({1, 2, 4, 4, 4});
  k::pool2d ok{k::pool_mode::max, x3, shape_only({1, 2, 2})};
  REQUIRE(npurt::sim::validate(npurt::kernel_desc{ok}).value() == 0);
  const auto code = [](const k::pool2d& p) { return npurt::sim::validate(npurt::kernel_desc{p}); };
  k::pool2d bad = ok;
  bad.dilation = {0, 1, 1};
  CHECK(code(bad) == errc::invalid_argument);
  bad = ok;
  bad.pad_end = {-2, 0, 0};
  CHECK(code(bad) == errc::invalid_argument);
  bad = ok;
  bad.window = {7, 1, 1};  // 7 > 5 with no pads
  bad.y = shape_only({1, 2, 1});
  CHECK(code(bad) == errc::invalid_shape);
  // A 3-D pooling uses a third window entry: 0 there is refused.
  k::pool2d vol{k::pool_mode::avg, x5, shape_only({1, 2, 2, 2, 2}), {2, 2, 0}};
  CHECK(code(vol) == errc::invalid_argument);
  vol.window = {2, 2, 2};
  REQUIRE(code(vol).value() == 0);
  CHECK(code(k::pool2d{k::pool_mode::max, shape_only({2, 5}), shape_only({2, 2})}) == errc::invalid_shape);
  CHECK(code(k::pool2d{k::pool_mode::max, shape_only({1, 1, 2, 2, 2, 2}), shape_only({1, 1, 1, 1, 1, 1})}) ==
        errc::invalid_shape);
  // ceil_mode changes the extent the output must have: 5 wide, window 2, stride 2 gives 2 or 3.
  k::pool2d ceil = ok;
  ceil.ceil_mode = true;
  CHECK(code(ceil) == errc::invalid_shape);
  ceil.y = shape_only({1, 2, 3});
  CHECK(code(ceil).value() == 0);
  // The last window must start inside the input or its leading pad: 4 wide, window 1, stride 3,
  // ceil((4 - 1) / 3 + 1) = 2 and the second window starts at 3, inside: 2. With a pad of 2 after,
  // ceil((6 - 1) / 3 + 1) = 3, but the third would start at 6, past 4: still 2.
  k::pool2d last{k::pool_mode::max, shape_only({1, 1, 4}), shape_only({1, 1, 2}), {1}, {3}, {0}};
  last.pad_end = {2, 0, 0};
  last.ceil_mode = true;
  CHECK(code(last).value() == 0);
  // Indices: max only, int64, y's shape.
  tensor_desc idx = shape_only({1, 2, 2}, dtype::i64);
  k::pool2d with = ok;
  with.indices = idx;
  CHECK(code(with).value() == 0);
  with.mode = k::pool_mode::avg;
  CHECK(code(with) == errc::invalid_argument);
  with.mode = k::pool_mode::max;
  with.indices = shape_only({1, 2, 2}, dtype::i32);
  CHECK(code(with) == errc::invalid_dtype);
  with.indices = shape_only({1, 2, 3}, dtype::i64);
  CHECK(code(with) == errc::invalid_shape);
}

namespace {

// onnx.ai LRN in double: square_sum over channels [c - floor((size - 1) / 2), c + ceil((size -
// 1) / 2)] inside [0, C), y = x / (bias + alpha / size * square_sum)^beta.
std::vector<double> lrn_reference(const std::vector<double>& x, const shape& s, int size, double alpha, double beta,
                                  double bias) {
  const std::int64_t n = s[0], c = s[1], inner = s.elements() / (n * c);
  const std::int64_t before = (size - 1) / 2, after = size / 2;  // floor and ceil of (size - 1) / 2
  std::vector<double> y(x.size());
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < inner; ++i) {
        double sq = 0;
        for (std::int64_t k = ch - before; k <= ch + after; ++k)
          if (k >= 0 && k < c) sq += std::pow(x[static_cast<std::size_t>((b * c + k) * inner + i)], 2);
        const auto at = static_cast<std::size_t>((b * c + ch) * inner + i);
        y[at] = x[at] / std::pow(bias + alpha / size * sq, beta);
      }
  return y;
}

}  // namespace

TEST_CASE("lrn matches ONNX's formula over every channel window", "[kernels][lrn]") {
  for (const shape& s : {shape{2, 7, 3, 4}, shape{3, 5}, shape{1, 4, 2, 2, 3}})
    for (int size : {1, 2, 3, 5, 8})
      for (dtype t : {dtype::f32, dtype::f16, dtype::f64}) {
        CAPTURE(s, size, static_cast<int>(t));
        tensor x(s, t), y(s, t);
        x.fill(static_cast<std::uint64_t>(size), -3, 3, false);
        const double alpha = 0.37, beta = 0.75, bias = 1.5;
        REQUIRE(run(k::lrn{x.desc, y.desc, size, static_cast<float>(alpha), static_cast<float>(beta),
                           static_cast<float>(bias)}) == 0);
        // alpha's float is what the kernel is given: the reference takes the same value.
        const auto want = lrn_reference(x.values(), s, size, static_cast<float>(alpha), beta, bias);
        // float's rounding in f32; one f16 rounding of a float result; double's in f64.
        const double rel = t == dtype::f16 ? 1e-3 : t == dtype::f32 ? 2e-6 : 1e-12;
        for (std::size_t i = 0; i < want.size(); ++i) {
          CAPTURE(i, y.get(i), want[i]);
          REQUIRE(std::fabs(y.get(i) - want[i]) <= rel * std::max(1.0, std::fabs(want[i])));
        }
      }
}

TEST_CASE("lrn refuses a window of no channel, integers and mismatched shapes", "[kernels][lrn][errors]") {
  const auto code = [](const k::lrn& l) { return npurt::sim::validate(npurt::kernel_desc{l}); };
  const tensor_desc x = shape_only({1, 3, 2, 2});
  CHECK(code(k::lrn{x, x, 3}).value() == 0);
  CHECK(code(k::lrn{x, x, 0}) == errc::invalid_argument);
  CHECK(code(k::lrn{x, x, 3, std::numeric_limits<float>::quiet_NaN()}) == errc::invalid_argument);
  CHECK(code(k::lrn{x, shape_only({1, 3, 2, 1}), 3}) == errc::invalid_shape);
  CHECK(code(k::lrn{shape_only({4}), shape_only({4}), 1}) == errc::invalid_shape);
  const tensor_desc i8 = shape_only({1, 3, 2, 2}, dtype::i8);
  CHECK(code(k::lrn{i8, i8, 3}) == errc::invalid_dtype);
  CHECK(code(k::lrn{x, shape_only({1, 3, 2, 2}, dtype::f16), 3}) == errc::invalid_dtype);
}
