// Reference kernels: roi_align (ONNX's RoiAlign) against two references written here. On a plane
// that is a linear function of (row, column), bilinear interpolation is exact and the samples of a
// bin sit symmetrically around its centre, so a bin's average is the function at the bin's centre:
// a check that needs no sampling code at all. Past the edges, in max mode and with adaptive
// sampling, a second reference follows onnx.ai's RoiAlign and its reference implementation
// (onnx/reference/ops/op_roi_align.py) sample by sample in long double. Then the descriptor's and
// the data's errors.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

bool roi_close(double got, long double want, double tol) {
  return std::abs(static_cast<long double>(got) - want) <= tol * (1 + std::abs(want));
}

struct roi_case {
  std::int64_t n, c, h, w, out_h, out_w;
  int ratio;
  float scale;
  bool max_mode, half_pixel;
};

// One ROI's bin (ph, pw) of channel plane `p` (h x w values), from the spec: the ROI's corners
// scaled (minus half a pixel in half_pixel mode, else at least 1 x 1), the bin cut in ratio x
// ratio cells (adaptive: ceil of the bin's extent), a sample at each cell's centre. A sample more
// than one element outside the plane contributes 0; otherwise it is clamped to [0, extent - 1]
// and its four neighbours weighted bilinearly. avg: the mean of the interpolated samples; max:
// the largest weighted neighbour of any sample (the reference's form of max).
long double roi_bin_reference(const std::vector<long double>& p, const roi_case& rc, const std::array<double, 4>& box,
                              std::int64_t ph, std::int64_t pw) {
  const long double off = rc.half_pixel ? 0.5L : 0.0L;
  const long double x0 = box[0] * static_cast<long double>(rc.scale) - off;
  const long double y0 = box[1] * static_cast<long double>(rc.scale) - off;
  long double rw = box[2] * static_cast<long double>(rc.scale) - off - x0;
  long double rh = box[3] * static_cast<long double>(rc.scale) - off - y0;
  if (!rc.half_pixel) {
    rw = std::max(rw, 1.0L);
    rh = std::max(rh, 1.0L);
  }
  const long double bh = rh / static_cast<long double>(rc.out_h), bw = rw / static_cast<long double>(rc.out_w);
  const auto cells = [&](long double bin) {
    return rc.ratio > 0 ? static_cast<std::int64_t>(rc.ratio) : std::max<std::int64_t>(0, std::llround(std::ceil(bin)));
  };
  const std::int64_t gh = cells(bh), gw = cells(bw);
  long double sum = 0, best = 0;
  bool any = false;
  for (std::int64_t iy = 0; iy < gh; ++iy)
    for (std::int64_t ix = 0; ix < gw; ++ix) {
      long double sy = y0 + static_cast<long double>(ph) * bh + (static_cast<long double>(iy) + 0.5L) * bh / gh;
      long double sx = x0 + static_cast<long double>(pw) * bw + (static_cast<long double>(ix) + 0.5L) * bw / gw;
      std::array<long double, 4> wv{0, 0, 0, 0};  // weighted neighbours
      if (!(sy < -1 || sy > rc.h || sx < -1 || sx > rc.w)) {
        sy = std::clamp<long double>(sy, 0, static_cast<long double>(rc.h - 1));
        sx = std::clamp<long double>(sx, 0, static_cast<long double>(rc.w - 1));
        const auto r0 = static_cast<std::int64_t>(std::floor(sy)), c0 = static_cast<std::int64_t>(std::floor(sx));
        const std::int64_t r1 = std::min(r0 + 1, rc.h - 1), c1 = std::min(c0 + 1, rc.w - 1);
        const long double fy = sy - static_cast<long double>(r0), fx = sx - static_cast<long double>(c0);
        const auto v = [&](std::int64_t r, std::int64_t c) { return p[static_cast<std::size_t>(r * rc.w + c)]; };
        wv = {(1 - fy) * (1 - fx) * v(r0, c0), (1 - fy) * fx * v(r0, c1), fy * (1 - fx) * v(r1, c0),
              fy * fx * v(r1, c1)};
      }
      sum += wv[0] + wv[1] + wv[2] + wv[3];
      const long double m = *std::max_element(wv.begin(), wv.end());
      best = any ? std::max(best, m) : m;
      any = true;
    }
  if (rc.max_mode) return best;
  return sum / static_cast<long double>(std::max<std::int64_t>(gh * gw, 1));
}

}  // namespace

TEST_CASE("roi_align averages a linear plane to its value at each bin's centre", "[kernels][roi_align]") {
  // x[n][c][r][col] = a r + b col + d, different per (n, c); ROIs well inside the plane so that
  // no sample is clamped. Every sampling ratio (adaptive too) gives the bin centre's value.
  for (const dtype t : {dtype::f32, dtype::f64, dtype::f16})
    for (const bool half_pixel : {true, false})
      for (const int ratio : {0, 1, 2, 3}) {
        CAPTURE(static_cast<int>(t), half_pixel, ratio);
        const roi_case rc{2, 3, 10, 12, 3, 4, ratio, 0.5f, false, half_pixel};
        tensor x({rc.n, rc.c, rc.h, rc.w}, t);
        const auto plane = [](std::int64_t n, std::int64_t c) {
          return std::array<double, 3>{0.25 + 0.5 * static_cast<double>(c), -0.125 * static_cast<double>(n + 1),
                                       static_cast<double>(n * 3 + c)};
        };
        for (std::int64_t n = 0; n < rc.n; ++n)
          for (std::int64_t c = 0; c < rc.c; ++c)
            for (std::int64_t r = 0; r < rc.h; ++r)
              for (std::int64_t col = 0; col < rc.w; ++col) {
                const auto [a, b, d] = plane(n, c);
                x.set(at4(x.desc.shape, n, c, r, col), a * static_cast<double>(r) + b * static_cast<double>(col) + d);
              }
        // (x1, y1, x2, y2) before the scale of 0.5: inside [2, 20] x [2, 16].
        const std::vector<std::array<double, 4>> boxes{{2, 2, 20, 16}, {4.5, 3, 11, 9.25}, {8, 6, 18, 15}};
        const std::vector<std::int64_t> batch{1, 0, 1};
        tensor rois({3, 4}, t), idx({3}, dtype::i64), y({3, rc.c, rc.out_h, rc.out_w}, t);
        for (std::size_t i = 0; i < boxes.size(); ++i) {
          for (std::size_t j = 0; j < 4; ++j) rois.set(i * 4 + j, boxes[i][j]);
          idx.set(i, static_cast<double>(batch[i]));
        }
        REQUIRE(run(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, rc.scale, ratio, false, half_pixel}) == 0);
        const double tol = t == dtype::f16 ? 4e-3 : 1e-5;
        for (std::size_t i = 0; i < boxes.size(); ++i) {
          const double off = half_pixel ? 0.5 : 0.0;
          const double x0 = boxes[i][0] * 0.5 - off, y0 = boxes[i][1] * 0.5 - off;
          const double bw = (boxes[i][2] - boxes[i][0]) * 0.5 / 4, bh = (boxes[i][3] - boxes[i][1]) * 0.5 / 3;
          for (std::int64_t c = 0; c < rc.c; ++c)
            for (std::int64_t ph = 0; ph < rc.out_h; ++ph)
              for (std::int64_t pw = 0; pw < rc.out_w; ++pw) {
                const auto [a, b, d] = plane(batch[i], c);
                const double cy = y0 + (static_cast<double>(ph) + 0.5) * bh,
                             cx = x0 + (static_cast<double>(pw) + 0.5) * bw;
                CAPTURE(i, c, ph, pw);
                CHECK(roi_close(y.get(at4(y.desc.shape, static_cast<std::int64_t>(i), c, ph, pw)), a * cy + b * cx + d,
                                tol));
              }
        }
      }
}

TEST_CASE("roi_align follows the spec sample by sample past the edges, in max mode and adaptive",
          "[kernels][roi_align]") {
  const std::vector<roi_case> cases{
      {2, 2, 5, 6, 2, 2, 2, 1.0f, false, true}, {2, 2, 5, 6, 3, 2, 0, 1.0f, false, false},
      {1, 3, 7, 4, 2, 3, 0, 0.25f, true, true}, {2, 1, 6, 6, 4, 4, 3, 2.0f, true, false},
      {1, 2, 1, 8, 1, 3, 2, 1.0f, false, true}, {3, 2, 4, 4, 2, 2, 1, 1.0f, true, true},
  };
  // Boxes inside, across every edge, wholly outside, inverted and degenerate (x2 < x1, a point).
  const std::vector<std::array<double, 4>> boxes{{0, 0, 3, 2}, {-2, -1.5, 4.25, 7}, {5.5, 3.25, 9, 8}, {-6, -6, -3, -4},
                                                 {3, 3, 1, 2}, {2, 2, 2, 2},        {0.3, 0.7, 20, 21}};
  for (const roi_case& rc : cases)
    for (const dtype it : {dtype::i64, dtype::i32}) {
      CAPTURE(rc.n, rc.c, rc.h, rc.w, rc.out_h, rc.out_w, rc.ratio, rc.scale, rc.max_mode, rc.half_pixel);
      tensor x({rc.n, rc.c, rc.h, rc.w});
      for (std::size_t i = 0; i < x.size(); ++i) x.set(i, std::sin(1.3 * static_cast<double>(i) + 0.2) * 4 - 1);
      const auto r = static_cast<std::int64_t>(boxes.size());
      tensor rois({r, 4}), idx({r}, it), y({r, rc.c, rc.out_h, rc.out_w});
      for (std::size_t i = 0; i < boxes.size(); ++i) {
        for (std::size_t j = 0; j < 4; ++j) rois.set(i * 4 + j, boxes[i][j]);
        idx.set(i, static_cast<double>(static_cast<std::int64_t>(i) % rc.n));
      }
      REQUIRE(run(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, rc.scale, rc.ratio, rc.max_mode, rc.half_pixel}) ==
              0);
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t c = 0; c < rc.c; ++c) {
          std::vector<long double> p;
          const std::int64_t b = i % rc.n;
          for (std::int64_t e = 0; e < rc.h * rc.w; ++e)
            p.push_back(static_cast<long double>(x.get(static_cast<std::size_t>((b * rc.c + c) * rc.h * rc.w + e))));
          for (std::int64_t ph = 0; ph < rc.out_h; ++ph)
            for (std::int64_t pw = 0; pw < rc.out_w; ++pw) {
              CAPTURE(i, c, ph, pw);
              CHECK(roi_close(y.get(at4(y.desc.shape, i, c, ph, pw)),
                              roi_bin_reference(p, rc, boxes[static_cast<std::size_t>(i)], ph, pw), 1e-5));
            }
        }
    }
  // Worked by hand: x = [[1, 2], [3, 4]], the ROI (0, 0, 1, 1) in output_half_pixel, one bin of
  // one sample at (0.5, 0.5): avg 2.5; max the largest weighted neighbour, 0.25 * 4 = 1.
  tensor x({1, 1, 2, 2}), rois({1, 4}), idx({1}, dtype::i64), y({1, 1, 1, 1});
  for (std::size_t i = 0; i < 4; ++i) x.set(i, static_cast<double>(i + 1));
  rois.set(2, 1);
  rois.set(3, 1);
  REQUIRE(run(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, 1.0f, 1, false, false}) == 0);
  CHECK(y.get(0) == 2.5);
  REQUIRE(run(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, 1.0f, 1, true, false}) == 0);
  CHECK(y.get(0) == 1.0);
}

TEST_CASE("roi_align descriptors and data are checked", "[kernels][roi_align]") {
  auto t = [](shape s, dtype d = dtype::f32) { return shape_only(s, d); };
  using npurt::sim::validate;
  const auto op = [&](shape x, shape rois, shape idx, shape y, dtype xt = dtype::f32, dtype it = dtype::i64) {
    return k::roi_align{t(x, xt), t(rois, xt), t(idx, it), t(y, xt), 1.0f, 0, false, true};
  };
  CHECK(!validate(op({2, 3, 5, 5}, {4, 4}, {4}, {4, 3, 2, 2})));
  CHECK(!validate(op({2, 3, 5, 5}, {4, 4}, {4}, {4, 3, 2, 2}, dtype::f16, dtype::i32)));
  CHECK(validate(op({2, 3, 5, 5}, {4, 4}, {4}, {4, 3, 2, 2}, dtype::i32)) == errc::invalid_dtype);
  CHECK(validate(op({2, 3, 5, 5}, {4, 4}, {4}, {4, 3, 2, 2}, dtype::f32, dtype::f32)) == errc::invalid_dtype);
  CHECK(validate(op({2, 3, 5}, {4, 4}, {4}, {4, 3, 2, 2})) == errc::invalid_shape);
  CHECK(validate(op({2, 3, 5, 5}, {4, 5}, {4}, {4, 3, 2, 2})) == errc::invalid_shape);
  CHECK(validate(op({2, 3, 5, 5}, {4, 4}, {3}, {4, 3, 2, 2})) == errc::invalid_shape);
  CHECK(validate(op({2, 3, 5, 5}, {4, 4}, {4}, {4, 2, 2, 2})) == errc::invalid_shape);
  CHECK(validate(op({2, 3, 0, 5}, {4, 4}, {4}, {4, 3, 2, 2})) == errc::invalid_shape);
  auto neg = op({2, 3, 5, 5}, {4, 4}, {4}, {4, 3, 2, 2});
  neg.sampling_ratio = -1;
  CHECK(validate(neg) == errc::invalid_argument);
  neg.sampling_ratio = 0;
  neg.spatial_scale = std::numeric_limits<float>::infinity();
  CHECK(validate(neg) == errc::invalid_argument);
  CHECK(sizeof(npurt::kernel_desc) <= 752);

  // Data: a batch index outside [0, N), a coordinate that is no number, an adaptive grid of
  // absurd size fail the task naming what is wrong.
  tensor x({2, 1, 3, 3}), rois({1, 4}), idx({1}, dtype::i64), y({1, 1, 1, 1});
  rois.set(2, 2);
  rois.set(3, 2);
  idx.set(0, 2);
  std::error_code ec;
  std::string why = run_why(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, 1.0f, 0, false, true}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(why.find("batch_indices[0] = 2") != std::string::npos);
  idx.set(0, 1);
  rois.set(1, std::nan(""));
  why = run_why(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, 1.0f, 0, false, true}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(why.find("rois[0][1]") != std::string::npos);
  rois.set(1, 0);
  rois.set(2, 1e30);
  rois.set(3, 1e30);
  why = run_why(k::roi_align{x.desc, rois.desc, idx.desc, y.desc, 1.0f, 0, false, true}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(why.find("ROI 0") != std::string::npos);
}
