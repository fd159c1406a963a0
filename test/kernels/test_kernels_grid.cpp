// Reference kernel grid_sample (ONNX's GridSample) against a transcription of ONNX's reference
// implementation (onnx/reference/ops/op_grid_sample.py): every mode, padding mode and
// align_corners over 1-D, 2-D and 3-D sampling, coordinates exactly on the borders, just past
// them and far outside; hand-computed values; f16 and bf16 rounding; non-finite grid values.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;

namespace {

bool gs_close(double got, double want) { return std::fabs(got - want) <= 1e-6 + 1e-5 * std::fabs(want); }

// ONNX's GridSample reference, step by step and slow: the grid's coordinates reversed and
// denormalised, rounded half to even in nearest mode, clamped or reflected when outside the
// borders, then (linear, cubic) every row of each dimension interpolated recursively with each
// neighbour read through the padding, or (nearest) the one element read through it.
struct onnx_grid_sample {
  k::grid_sample_mode mode = k::grid_sample_mode::linear;
  k::grid_padding padding = k::grid_padding::zeros;
  bool align = false;

  // _gs_reflect: whole ranges counted by a truncating division, the rest from what is left.
  static double reflect(double x, double lo, double hi) {
    const double rng = hi - lo;
    if (x < lo) {
      const double dx = lo - x;
      const auto n = static_cast<std::int64_t>(dx / rng);
      const double r = dx - static_cast<double>(n) * rng;
      return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
      const double dx = x - hi;
      const auto n = static_cast<std::int64_t>(dx / rng);
      const double r = dx - static_cast<double>(n) * rng;
      return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
  }

  double lo(std::int64_t) const { return align ? 0.0 : -0.5; }
  double hi(std::int64_t n) const { return align ? static_cast<double>(n) - 1 : static_cast<double>(n) - 0.5; }

  // _pixel_at_array: whether index i reads an element (false: a zero), and which.
  bool pixel(std::int64_t& i, std::int64_t n) const {
    switch (padding) {
      case k::grid_padding::zeros: return i >= 0 && i < n;
      case k::grid_padding::border: i = std::clamp<std::int64_t>(i, 0, n - 1); return true;
      case k::grid_padding::reflection:
        i = static_cast<std::int64_t>(reflect(static_cast<double>(i), lo(n), hi(n)));
        return true;
    }
    return false;
  }

  // Keys' cubic convolution kernel with a = -0.75, piecewise as Keys writes it.
  static double keys(double t) {
    const double a = -0.75;
    t = std::fabs(t);
    if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
    if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
    return 0;
  }

  double one_d(const std::vector<double>& line, double x) const {
    const auto n = static_cast<std::int64_t>(line.size());
    const double x0 = std::floor(x), t = x - x0;
    std::vector<std::pair<std::int64_t, double>> taps;
    if (mode == k::grid_sample_mode::linear) {
      taps = {{static_cast<std::int64_t>(x0), 1 - t}, {static_cast<std::int64_t>(x0) + 1, t}};
    } else {
      for (int j = -1; j <= 2; ++j) taps.emplace_back(static_cast<std::int64_t>(x0) + j, keys(t - j));
    }
    double r = 0;
    for (auto [i, w] : taps)
      if (pixel(i, n)) r += w * line[static_cast<std::size_t>(i)];
    return r;
  }

  // The interpolation of a block of x's dimensions d.. at coordinates x[d..].
  double nd(const std::vector<double>& block, const std::vector<std::int64_t>& dims, const std::vector<double>& x,
            std::size_t d) const {
    if (d + 1 == dims.size()) return one_d(block, x[d]);
    const std::size_t inner = block.size() / static_cast<std::size_t>(dims[d]);
    std::vector<double> rows;
    for (std::int64_t i = 0; i < dims[d]; ++i) {
      const auto b = block.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * inner);
      rows.push_back(nd(std::vector<double>(b, b + static_cast<std::ptrdiff_t>(inner)), dims, x, d + 1));
    }
    return one_d(rows, x[d]);
  }

  static double round_half_even(double v) {
    const double f = std::floor(v), diff = v - f;
    if (diff > 0.5) return f + 1;
    if (diff < 0.5) return f;
    return std::fmod(f, 2) == 0 ? f : f + 1;
  }

  std::vector<double> operator()(const std::vector<double>& xv, const shape& xs, const std::vector<double>& gv,
                                 const shape& gs) const {
    const std::size_t r = xs.rank() - 2;
    std::vector<std::int64_t> dims;
    for (std::size_t d = 2; d < xs.rank(); ++d) dims.push_back(xs[d]);
    std::size_t block = 1, outs = 1;
    for (auto d : dims) block *= static_cast<std::size_t>(d);
    for (std::size_t d = 1; d <= r; ++d) outs *= static_cast<std::size_t>(gs[d]);
    std::vector<double> y;
    for (std::int64_t n = 0; n < xs[0]; ++n)
      for (std::int64_t c = 0; c < xs[1]; ++c) {
        const auto b = xv.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(n * xs[1] + c) * block);
        const std::vector<double> data(b, b + static_cast<std::ptrdiff_t>(block));
        for (std::size_t o = 0; o < outs; ++o) {
          std::vector<double> x(r);
          for (std::size_t i = 0; i < r; ++i) {
            const double g = gv[(static_cast<std::size_t>(n) * outs + o) * r + (r - 1 - i)];
            const auto len = static_cast<double>(dims[i]);
            x[i] = align ? (g + 1) / 2.0 * (len - 1) : ((g + 1) * len - 1) / 2.0;
            if (mode == k::grid_sample_mode::nearest) x[i] = round_half_even(x[i]);
            if (x[i] < lo(dims[i]) || x[i] > hi(dims[i])) {
              if (padding == k::grid_padding::border) x[i] = std::clamp(x[i], 0.0, len - 1);
              if (padding == k::grid_padding::reflection) x[i] = reflect(x[i], lo(dims[i]), hi(dims[i]));
            }
          }
          if (mode != k::grid_sample_mode::nearest) {
            y.push_back(nd(data, dims, x, 0));
            continue;
          }
          // _pixel_at_ndarray: the index truncated, each dimension read through the padding.
          std::size_t off = 0;
          bool zero = false;
          for (std::size_t i = 0; i < r; ++i) {
            auto idx = static_cast<std::int64_t>(x[i]);
            zero = zero || !pixel(idx, dims[i]);
            off = off * static_cast<std::size_t>(dims[i]) + static_cast<std::size_t>(std::max<std::int64_t>(idx, 0));
          }
          y.push_back(zero ? 0.0 : data[off]);
        }
      }
    return y;
  }
};

constexpr k::grid_sample_mode gs_modes[] = {k::grid_sample_mode::linear, k::grid_sample_mode::nearest,
                                            k::grid_sample_mode::cubic};
constexpr k::grid_padding gs_paddings[] = {k::grid_padding::zeros, k::grid_padding::border,
                                           k::grid_padding::reflection};

// Grid values: random ones inside and a little outside [-1, 1], the borders exactly (-1 and 1
// are the outer edges, or the edge centres with align_corners), a hair past them, values whose
// nearest coordinate ties, and coordinates several ranges out, which reflection folds back.
void gs_fill_grid(tensor& g, std::uint64_t seed) {
  const double special[] = {-1, 1, 0, 0.5, -0.5, 0.25, -0.25, 1.0000001, -1.0000001, 3.7, -4.2, 11.3, -9.65, 1.5, -2};
  g.fill(seed, -1.3, 1.3, false);
  std::uint64_t s = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < g.size(); ++i) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    if ((s >> 33) % 2 == 0) g.set(i, special[(s >> 40) % std::size(special)]);
  }
}

}  // namespace

TEST_CASE("grid_sample matches ONNX's reference in every mode, padding and align_corners", "[kernels][grid_sample]") {
  // 2-D (ONNX's GridSample-16 form), 1-D and 3-D (opset 20's N-D form); x's spatial extents
  // even and odd, the grid's output extents unrelated to them.
  const std::vector<std::pair<shape, shape>> cases = {
      {{2, 3, 4, 5}, {2, 3, 4, 2}},
      {{1, 2, 3, 2}, {1, 5, 3, 2}},
      {{1, 2, 6}, {1, 9, 1}},
      {{1, 2, 3, 4, 2}, {1, 2, 3, 2, 3}},
  };
  int checked = 0;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const auto& [xs, gs] = cases[c];
    shape ys{xs[0], xs[1]};
    for (std::size_t d = 1; d + 1 < gs.rank(); ++d) ys.push_back(gs[d]);
    tensor x(xs), grid(gs), y(ys);
    x.fill(c + 17, -8, 8, false);
    gs_fill_grid(grid, c + 5);
    for (auto mode : gs_modes)
      for (auto padding : gs_paddings)
        for (bool align : {false, true}) {
          CAPTURE(c, static_cast<int>(mode), static_cast<int>(padding), align);
          REQUIRE(run(k::grid_sample{x.desc, grid.desc, y.desc, mode, padding, align}) == 0);
          const auto want = onnx_grid_sample{mode, padding, align}(x.values(), xs, grid.values(), gs);
          const auto got = y.values();
          REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            CAPTURE(i, got[i], want[i]);
            REQUIRE(gs_close(got[i], want[i]));
          }
          ++checked;
        }
  }
  CHECK(checked == 4 * 3 * 3 * 2);
}

TEST_CASE("grid_sample by hand: corners, centres, edges and ties", "[kernels][grid_sample]") {
  // x = [[1, 2], [3, 4]], one output per grid point (x, y).
  tensor x({1, 1, 2, 2});
  x.assign({1, 2, 3, 4});
  const auto sample = [&](std::vector<double> points, k::grid_sample_mode mode, k::grid_padding padding, bool align) {
    const auto count = static_cast<std::int64_t>(points.size() / 2);
    tensor grid({1, count, 1, 2}), y({1, 1, count, 1});
    grid.assign(points);
    REQUIRE(run(k::grid_sample{x.desc, grid.desc, y.desc, mode, padding, align}) == 0);
    return y.values();
  };
  using enum k::grid_sample_mode;
  using enum k::grid_padding;
  // align_corners: -1 and 1 are the corner elements' centres; the centre of x averages all four.
  CHECK(sample({-1, -1, 1, -1, -1, 1, 1, 1, 0, 0}, linear, zeros, true) == std::vector<double>{1, 2, 3, 4, 2.5});
  // Without it they are the outer edges: the corner (1, 1) lies at (1.5, 1.5), half a pixel past
  // the last centre, so zero padding keeps a quarter of 4; border padding reads 4.
  CHECK(sample({1, 1, -1, -1}, linear, zeros, false) == std::vector<double>{1, 0.25});
  CHECK(sample({1, 1, -1, -1}, linear, border, false) == std::vector<double>{4, 1});
  // Reflection folds (1.5, 1.5) onto itself (it is on the border): its outside neighbour at 2
  // reflects onto 1, so every tap reads 4.
  CHECK(sample({1, 1}, linear, reflection, false) == std::vector<double>{4});
  // Nearest: 1.5 rounds half to even, to 2, which is outside: zero, or the edge element; 0.5
  // and -0.5 round to 0.
  CHECK(sample({1, 1, 0, 0, -1, -1}, nearest, zeros, false) == std::vector<double>{0, 1, 1});
  CHECK(sample({1, 1, 0, 0}, nearest, border, false) == std::vector<double>{4, 1});
  // A coordinate 1.5 ranges past the border reflects an odd number of times: x = 4 (denormalised
  // 2.5 with align_corners on [0, 1]) comes back at 0.5, the middle of the first row.
  CHECK(sample({4, -1}, linear, reflection, true) == std::vector<double>{1.5});
  // One row with align_corners: every y is that row (the range to reflect in is empty).
  tensor row({1, 1, 1, 3}), grid({1, 1, 2, 2}), y({1, 1, 1, 2});
  row.assign({5, 6, 7});
  grid.assign({0, 0.3, 1, -7});
  for (auto padding : {zeros, border, reflection}) {
    REQUIRE(run(k::grid_sample{row.desc, grid.desc, y.desc, linear, padding, true}) == 0);
    CHECK(y.values() == std::vector<double>{6, 7});
  }
}

TEST_CASE("grid_sample rounds f16 and bf16 results once, any float grid", "[kernels][grid_sample]") {
  for (auto [xt, gt] :
       {std::pair{dtype::f16, dtype::f32}, std::pair{dtype::bf16, dtype::f16}, std::pair{dtype::f32, dtype::bf16}}) {
    CAPTURE(npurt::to_string(xt), npurt::to_string(gt));
    tensor x({1, 2, 5, 4}, xt), grid({1, 3, 3, 2}, gt), y({1, 2, 3, 3}, xt);
    x.fill(23, -4, 4, false);
    grid.fill(29, -1.2, 1.2, false);
    for (auto mode : gs_modes) {
      REQUIRE(run(k::grid_sample{x.desc, grid.desc, y.desc, mode, k::grid_padding::border}) == 0);
      const auto want =
          onnx_grid_sample{mode, k::grid_padding::border}(x.values(), x.desc.shape, grid.values(), grid.desc.shape);
      for (std::size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i, y.get(i), want[i]);
        if (xt == dtype::f32) {
          CHECK(gs_close(y.get(i), want[i]));
          continue;
        }
        // The nearest value of the dtype: no neighbour of the result is closer to the exact one.
        std::uint16_t bits;
        std::memcpy(&bits, y.bytes.data() + 2 * i, 2);
        const auto value = [&](std::uint16_t b) -> double {
          return xt == dtype::f16 ? npurt::half::from_bits(b).to_float() : npurt::bfloat16::from_bits(b).to_float();
        };
        const double got = value(bits);
        CHECK(std::fabs(got - want[i]) <= std::fabs(value(static_cast<std::uint16_t>(bits - 1)) - want[i]));
        CHECK(std::fabs(got - want[i]) <= std::fabs(value(static_cast<std::uint16_t>(bits + 1)) - want[i]));
      }
    }
  }
}

TEST_CASE("grid_sample fails on a grid value that gives no finite position, y untouched", "[kernels][grid_sample]") {
  tensor x({1, 1, 2, 3});
  x.assign({1, 2, 3, 4, 5, 6});
  const double inf = std::numeric_limits<double>::infinity();
  const auto attempt = [&](double bad, k::grid_sample_mode mode, k::grid_padding padding, std::string& why) {
    tensor grid({1, 1, 2, 2}), y({1, 1, 1, 2});
    grid.assign({0, 0, 0, bad});
    y.assign({-7, -7});
    why.clear();
    const auto ec =
        npurt::sim::run_reference(npurt::kernel_desc{k::grid_sample{x.desc, grid.desc, y.desc, mode, padding}},
                                  npurt::sim::host_memory(), 0, &why);
    CHECK((ec ? y.values() == std::vector<double>{-7, -7} : true));
    return std::pair{ec, y.values()};
  };
  std::string why;
  for (auto mode : gs_modes) {
    CAPTURE(static_cast<int>(mode));
    // NaN has no position under any padding; an infinity none under zeros or reflection.
    for (auto padding : gs_paddings) {
      CHECK(attempt(std::nan(""), mode, padding, why).first == npurt::errc::invalid_argument);
      CHECK(why.find("grid[3] = nan") == 0);
    }
    CHECK(attempt(inf, mode, k::grid_padding::zeros, why).first == npurt::errc::invalid_argument);
    CHECK(why == "grid[3] = inf is no finite sampling position under zeros padding");
    CHECK(attempt(-inf, mode, k::grid_padding::reflection, why).first == npurt::errc::invalid_argument);
    CHECK(why == "grid[3] = -inf is no finite sampling position under reflection padding");
    // Border padding clamps an infinity to the edge, as the reference's clamp does: column 1 of
    // rows 0 and 1, exactly (an integral coordinate weighs one element fully in every mode).
    const auto [ec, y] = attempt(-inf, mode, k::grid_padding::border, why);
    CHECK(ec.value() == 0);
    const auto [ec2, y2] = attempt(inf, mode, k::grid_padding::border, why);
    CHECK(ec2.value() == 0);
    CHECK(y[1] == 2);
    CHECK(y2[1] == 5);
    // Far but finite: zero padding reads zeros, reflection folds it back, nothing overflows.
    CHECK(attempt(1e30, mode, k::grid_padding::zeros, why).second[1] == 0);
    CHECK(attempt(-3e38, mode, k::grid_padding::reflection, why).first.value() == 0);
  }
}
