// Resize (onnx.ai/onnx/operators/onnx__Resize.html) and Upsample through compiled runs: the
// scales and sizes forms, opset 18's axes, keep_aspect_ratio_policy and antialias,
// tf_crop_and_resize's box and extrapolation, each interpolation mode against the spec's
// formulas, the typed errors, an fp16 session and a timing-only run.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace npurt;

namespace {

using test::near;

using test::expect_graph_error;
using test::ints_tensor;

struct resize_args {
  std::string mode = "nearest";
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double a = -0.75;
};

// The weight of x's element j in y's element i along one dimension of n elements resized to
// `out` by `scale`, from onnx.ai's formulas: the source coordinate c of the coordinate mode, then
// nearest's rounding of c, linear's two neighbours with weights 1 - |c - j|, or Keys' cubic
// kernel on the four around c; an index past an edge takes the edge element.
std::vector<std::vector<double>> weights(const resize_args& r, std::int64_t n, std::int64_t out, double scale) {
  std::vector<std::vector<double>> w(static_cast<std::size_t>(out), std::vector<double>(static_cast<std::size_t>(n)));
  const double len = scale * static_cast<double>(n);
  const auto edge = [&](std::int64_t j) { return static_cast<std::size_t>(std::clamp<std::int64_t>(j, 0, n - 1)); };
  for (std::int64_t i = 0; i < out; ++i) {
    const double x = static_cast<double>(i);
    double c = (x + 0.5) / scale - 0.5;
    if (r.coordinates == "asymmetric") c = x / scale;
    if (r.coordinates == "align_corners") c = len == 1 ? 0 : x * static_cast<double>(n - 1) / (len - 1);
    if (r.coordinates == "pytorch_half_pixel" && len == 1) c = -0.5;
    auto& row = w[static_cast<std::size_t>(i)];
    const double f = std::floor(c), t = c - f;
    if (r.mode == "nearest") {
      double k = c;
      if (t != 0) {
        if (r.nearest == "floor") k = f;
        else if (r.nearest == "ceil") k = f + 1;
        else if (r.nearest == "round_prefer_ceil") k = t >= 0.5 ? f + 1 : f;
        else k = t > 0.5 ? f + 1 : f;
      }
      row[edge(static_cast<std::int64_t>(k))] += 1;
    } else if (r.mode == "linear") {
      row[edge(static_cast<std::int64_t>(f))] += 1 - t;
      row[edge(static_cast<std::int64_t>(f) + 1)] += t;
    } else {
      const double a = r.a;
      const auto keys = [&](double d) {
        d = std::fabs(d);
        if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
        if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
        return 0.0;
      };
      for (std::int64_t k = -1; k <= 2; ++k)
        row[edge(static_cast<std::int64_t>(f) + k)] += keys(c - (f + static_cast<double>(k)));
    }
  }
  return w;
}

// y = x resampled dimension by dimension: y[i] = sum over j of x[j] times the product of the
// per-dimension weights.
std::vector<double> expected(const std::vector<double>& x, const shape& xs, const shape& ys,
                             const std::vector<double>& scales, const resize_args& r) {
  std::vector<std::vector<std::vector<double>>> w;
  for (std::size_t d = 0; d < xs.rank(); ++d) w.push_back(weights(r, xs[d], ys[d], scales[d]));
  std::vector<double> y(static_cast<std::size_t>(ys.elements()));
  for (std::size_t yi = 0; yi < y.size(); ++yi) {
    for (std::size_t xi = 0; xi < x.size(); ++xi) {
      double p = x[xi];
      std::size_t yr = yi, xr = xi;
      for (std::size_t d = xs.rank(); d-- > 0 && p != 0;) {
        const auto yd = static_cast<std::size_t>(ys[d]), xd = static_cast<std::size_t>(xs[d]);
        p *= w[d][yr % yd][xr % xd];
        yr /= yd;
        xr /= xd;
      }
      y[yi] += p;
    }
  }
  return y;
}

// Resize in its opset 13 form: X, roi (omitted), and constant scales or sizes.
std::string add_resize(graph& g, const std::string& x, const resize_args& r, const std::vector<double>& scales,
                       const std::vector<std::int64_t>& sizes, const std::string& name) {
  std::vector<std::string> ins{x, ""};
  if (!scales.empty())
    ins.push_back(
        g.add_constant(name + "/scales", tensor({static_cast<std::int64_t>(scales.size())}, dtype::f32, scales)));
  else ins.push_back("");
  if (!sizes.empty()) ins.push_back(g.add_constant(name + "/sizes", ints_tensor(sizes)));
  attributes attrs{{"mode", r.mode},
                   {"coordinate_transformation_mode", r.coordinates},
                   {"nearest_mode", r.nearest},
                   {"cubic_coeff_a", r.a}};
  return g.add_op("Resize", ins, attrs, name);
}

std::vector<double> run_graph(graph& g, const shape& xs, const std::vector<double>& x, int level,
                              precision p = precision::fp32) {
  auto sys = test::make_system();
  session s{sys, {.precision = p}};
  return s.run(s.compile(g, {.optimization_level = level}), {{"x", tensor(xs, dtype::f32, x)}})
      .outputs.at("r")
      .to_vector();
}

}  // namespace

TEST_CASE("Resize by its scales, in every mode, matches onnx.ai's formulas at levels 0 and 2", "[graph][resize]") {
  const shape xs{1, 2, 3, 4};
  const std::vector<double> x = test::values(xs.elements(), 7, 4.0);
  const std::vector<std::vector<double>> all_scales{{1, 1, 2, 2}, {1, 1, 1.5, 0.5}, {1, 1, 0.6000000238418579, 2.5}};
  const std::vector<resize_args> modes{{"nearest"},
                                       {"nearest", "asymmetric", "floor"},
                                       {"nearest", "align_corners", "round_prefer_ceil"},
                                       {"nearest", "half_pixel", "ceil"},
                                       {"linear"},
                                       {"linear", "align_corners"},
                                       {"linear", "pytorch_half_pixel"},
                                       {"linear", "asymmetric"},
                                       {"cubic"},
                                       {"cubic", "align_corners", "round_prefer_floor", -0.5}};
  for (const auto& scales : all_scales) {
    shape ys;
    for (std::size_t d = 0; d < xs.rank(); ++d)
      ys.push_back(static_cast<std::int64_t>(std::floor(static_cast<double>(xs[d]) * scales[d])));
    for (const auto& m : modes) {
      for (int level : {0, 2}) {
        CAPTURE(scales, m.mode, m.coordinates, m.nearest, level);
        graph g("resize");
        g.set_output(add_resize(g, g.add_input("x", xs, dtype::f32), m, scales, {}, "r"));
        CHECK(g.value("r").shape == ys);
        const auto got = run_graph(g, xs, x, level);
        const auto want = expected(x, xs, ys, scales, m);
        CHECK(near(got, want));
      }
    }
  }
}

TEST_CASE("Resize by its sizes takes scale = size / extent; opset 18's axes and aspect policies", "[graph][resize]") {
  const shape xs{1, 1, 3, 4};
  const std::vector<double> x = test::values(xs.elements(), 3, 2.0);
  for (const resize_args& m : {resize_args{"linear", "align_corners"}, resize_args{"cubic", "pytorch_half_pixel"},
                               resize_args{"nearest", "asymmetric", "round_prefer_ceil"}}) {
    CAPTURE(m.mode);
    graph g("sizes");
    g.set_output(add_resize(g, g.add_input("x", xs, dtype::f32), m, {}, {1, 1, 7, 3}, "r"));
    CHECK(g.value("r").shape == shape{1, 1, 7, 3});
    CHECK(near(run_graph(g, xs, x, 0), expected(x, xs, {1, 1, 7, 3}, {1, 1, 7.0 / 3, 3.0 / 4}, m)));
  }
  // axes [-1, 2] with sizes [8, 9] on 3 x 4: not_larger keeps one scale, min(8/4, 9/3) = 2, and
  // rounds the extents it gives; not_smaller takes 3.
  for (const auto& [policy, scale] :
       {std::pair{std::string("not_larger"), 2.0}, std::pair{std::string("not_smaller"), 3.0}}) {
    CAPTURE(policy);
    graph g("axes");
    auto x_in = g.add_input("x", xs, dtype::f32);
    g.set_output(
        g.add_op("Resize", {x_in, "", "", g.add_constant("sizes", ints_tensor({8, 9}))},
                 {{"mode", std::string("linear")}, {"axes", ints{-1, 2}}, {"keep_aspect_ratio_policy", policy}}, "r"));
    const shape ys{1, 1, static_cast<std::int64_t>(3 * scale), static_cast<std::int64_t>(4 * scale)};
    CHECK(g.value("r").shape == ys);
    CHECK(near(run_graph(g, xs, x, 2), expected(x, xs, ys, {1, 1, scale, scale}, {"linear"})));
  }
}

TEST_CASE("Resize-10 and Upsample sample asymmetrically and floor to the nearest", "[graph][resize]") {
  const shape xs{1, 1, 2, 2};
  const std::vector<double> x{1, 2, 3, 4};
  // Upsample's example on onnx.ai: nearest by [1, 1, 2, 3].
  graph g("upsample");
  auto x_in = g.add_input("x", xs, dtype::f32);
  g.set_output(g.add_op("Upsample", {x_in, g.add_constant("s", tensor({4}, dtype::f32, {1, 1, 2, 3}))},
                        {{"mode", std::string("nearest")}}, "r"));
  CHECK(run_graph(g, xs, x, 0) ==
        std::vector<double>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  // Resize-10 (X, scales), linear by 2: asymmetric, so the last row and column repeat the edge.
  graph r("resize10");
  auto xr = r.add_input("x", xs, dtype::f32);
  r.set_output(r.add_op("Resize", {xr, r.add_constant("s", tensor({4}, dtype::f32, {1, 1, 2, 2}))},
                        {{"mode", std::string("linear")}}, "r"));
  CHECK(run_graph(r, xs, x, 0) == std::vector<double>{1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4});
}

TEST_CASE("Resize keeps its scales in an fp16 session: the output shape does not move", "[graph][resize][precision]") {
  const shape xs{1, 1, 5, 5};
  const std::vector<double> x = test::iota(25);
  graph g("fp16");
  // 2.60009765625 (exact in float) makes 5 columns 13; rounded to f16 (2.599609375) it would
  // make 12.
  g.set_output(
      add_resize(g, g.add_input("x", xs, dtype::f32), {"linear"}, {1, 1, 0.6000000238418579, 2.60009765625}, {}, "r"));
  CHECK(g.value("r").shape == shape{1, 1, 3, 13});
  const auto got = run_graph(g, xs, x, 0, precision::fp16);
  REQUIRE(got.size() == 39);
  const auto want = expected(x, xs, {1, 1, 3, 13}, {1, 1, 0.6000000238418579, 2.60009765625}, {"linear"});
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 0.02);  // f16's rounding
}

TEST_CASE("Resize refuses what it cannot compute, with typed errors naming the tensor", "[graph][resize]") {
  const auto build = [](const std::vector<double>& scales, const std::vector<std::int64_t>& sizes,
                        const attributes& attrs = {}) {
    graph g("bad");
    auto x = g.add_input("x", {1, 1, 2, 3}, dtype::f32);
    std::vector<std::string> ins{x, ""};
    ins.push_back(scales.empty() ? std::string()
                                 : g.add_constant("scales", tensor({static_cast<std::int64_t>(scales.size())},
                                                                   dtype::f32, scales)));
    if (!sizes.empty()) ins.push_back(g.add_constant("sizes", ints_tensor(sizes)));
    g.add_op("Resize", ins, attrs, "r");
  };
  expect_graph_error([&] { build({1, 1, 2}, {}); }, errc::invalid_argument, "r", "scales");
  expect_graph_error([&] { build({1, 1, 0, 2}, {}); }, errc::invalid_argument, "r", "scales");
  expect_graph_error([&] { build({1, 1, -2, 2}, {}); }, errc::invalid_argument, "r", "scales");
  expect_graph_error([&] { build({1, 1, 2, 2}, {1, 1, 4, 6}); }, errc::invalid_argument, "r", "sizes");
  expect_graph_error([&] { build({}, {}); }, errc::invalid_argument, "r", "x");
  expect_graph_error([&] { build({}, {1, 1, -4, 6}); }, errc::invalid_argument, "r", "sizes");
  expect_graph_error([&] { build({}, {1, 1, 0, 6}); }, errc::not_supported, "r", "sizes");
  CHECK_NOTHROW(build({1, 1, 0.25, 1}, {}));  // floor(2 / 4) = 0: an empty output
  expect_graph_error([&] { build({1, 1, 1e30, 1}, {}); }, errc::size_overflow, "r", "scales");
  expect_graph_error([&] { build({1, 1, 2, 2}, {}, {{"mode", std::string("area")}}); }, errc::invalid_argument, "r",
                     "x");
  expect_graph_error([&] { build({1, 1, 2, 2}, {}, {{"nearest_mode", std::string("round")}}); }, errc::invalid_argument,
                     "r", "x");
  // tf_crop_and_resize samples the roi box: without a roi there is none.
  expect_graph_error(
      [&] { build({1, 1, 2, 2}, {}, {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}); },
      errc::invalid_argument, "r", "x");
  // antialias widens linear's and cubic's filters; nearest (the default mode) has none.
  expect_graph_error([&] { build({1, 1, 2, 2}, {}, {{"antialias", std::int64_t{1}}}); }, errc::invalid_argument, "r",
                     "x");
  expect_graph_error(
      [&] { build({1, 1, 2, 2}, {}, {{"mode", std::string("linear")}, {"antialias", std::int64_t{2}}}); },
      errc::invalid_argument, "r", "x");
  expect_graph_error([&] { build({1, 1, 2, 2}, {}, {{"axes", ints{2, -2}}}); }, errc::invalid_argument, "r", "x");
  // The scales decide the shape: fed at run time they cannot be used.
  expect_graph_error(
      [&] {
        graph g("fed");
        auto x = g.add_input("x", {1, 1, 2, 3}, dtype::f32);
        g.add_op("Resize", {x, "", g.add_input("scales", {4}, dtype::f32)}, {}, "r");
      },
      errc::not_supported, "r", "scales");
  // Integer data in a mode that weighs neighbours, and scales that are no float.
  expect_graph_error(
      [&] {
        graph g("int");
        auto x = g.add_input("x", {1, 1, 2, 3}, dtype::i32);
        g.add_op("Resize", {x, "", g.add_constant("scales", tensor({4}, dtype::f32, {1, 1, 2, 2}))},
                 {{"mode", std::string("linear")}}, "r");
      },
      errc::not_supported, "r", "x");
  expect_graph_error(
      [&] {
        graph g("ints");
        auto x = g.add_input("x", {1, 1, 2, 3}, dtype::f32);
        g.add_op("Resize", {x, "", g.add_constant("scales", ints_tensor({1, 1, 2, 2}))}, {}, "r");
      },
      errc::invalid_dtype, "r", "scales");
}

TEST_CASE("Resize lowers to one resize kernel in a timing-only run, costed as data movement",
          "[graph][resize][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {8, 256, 64, 64}, dtype::f16);
  g.set_output(g.add_op("Resize", {x, "", g.add_constant("scales", tensor({4}, dtype::f32, {1, 1, 2, 2}))},
                        {{"mode", std::string("linear")}}, "r"));
  // No faster than its bytes (x read, y written) over the preset's HBM bandwidth.
  test::check_timing_only_movement(g, {8, 256, 64, 64}, dtype::f16, "r", {8, 256, 128, 128},
                                   2.0 * 8 * 256 * (64 * 64 + 128 * 128));
}

namespace {

// Opset 18's antialias along one dimension downsampled by `scale` < 1, from onnx.ai's words: the
// interpolation filter stretched by 1 / scale, so every element j with |j - c| < support / scale
// (c the half_pixel source coordinate; support 1 for linear, 2 for cubic) weighs K((j - c) scale),
// the weights normalised to sum 1 and an index past an edge taking the edge element.
std::vector<std::vector<double>> antialias_weights_ref(const std::string& mode, std::int64_t n, std::int64_t out,
                                                       double scale, double a = -0.75) {
  std::vector<std::vector<double>> w(static_cast<std::size_t>(out), std::vector<double>(static_cast<std::size_t>(n)));
  const double support = mode == "linear" ? 1 : 2;
  const auto kernel = [&](double t) {
    t = std::fabs(t);
    if (mode == "linear") return std::max(0.0, 1 - t);
    if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0.0;
  };
  for (std::int64_t i = 0; i < out; ++i) {
    const double c = (static_cast<double>(i) + 0.5) / scale - 0.5;
    double sum = 0;
    std::vector<std::pair<std::int64_t, double>> taps;
    for (auto j = static_cast<std::int64_t>(std::floor(c - support / scale)) - 1;
         j <= static_cast<std::int64_t>(std::ceil(c + support / scale)) + 1; ++j) {
      const double v = kernel((static_cast<double>(j) - c) * scale);
      if (v == 0) continue;
      taps.emplace_back(std::clamp<std::int64_t>(j, 0, n - 1), v);
      sum += v;
    }
    for (const auto& [j, v] : taps) w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] += v / sum;
  }
  return w;
}

}  // namespace

TEST_CASE("Resize with antialias widens linear and cubic filters when downsampling, as onnx.ai defines it",
          "[graph][resize]") {
  // x [1, 1, 9, 11] to sizes [1, 1, 4, 3] (scales 4/9 and 3/11) and [1, 1, 5, 6]; an upsampled
  // axis (15/11) keeps the ordinary filter.
  const shape xs{1, 1, 9, 11};
  const std::vector<double> x = test::values(xs.elements(), 17, 3.0);
  for (const std::string mode : {"linear", "cubic"})
    for (const shape& ys : {shape{1, 1, 4, 3}, shape{1, 1, 5, 6}, shape{1, 1, 3, 15}}) {
      CAPTURE(mode, ys);
      graph g("antialias");
      auto xi = g.add_input("x", xs, dtype::f32);
      g.set_output(g.add_op("Resize", {xi, "", "", g.add_constant("sizes", ints_tensor({1, 1, ys[2], ys[3]}))},
                            {{"mode", mode}, {"antialias", std::int64_t{1}}}, "r"));
      CHECK(g.value("r").shape == ys);
      std::vector<std::vector<std::vector<double>>> w;
      for (std::size_t d = 0; d < 4; ++d) {
        const double scale = static_cast<double>(ys[d]) / static_cast<double>(xs[d]);
        w.push_back(scale < 1 ? antialias_weights_ref(mode, xs[d], ys[d], scale)
                              : weights({mode}, xs[d], ys[d], scale));
      }
      std::vector<double> want(static_cast<std::size_t>(ys.elements()));
      for (std::int64_t i = 0; i < ys[2]; ++i)
        for (std::int64_t j = 0; j < ys[3]; ++j)
          for (std::int64_t r = 0; r < xs[2]; ++r)
            for (std::int64_t c = 0; c < xs[3]; ++c)
              want[static_cast<std::size_t>(i * ys[3] + j)] +=
                  x[static_cast<std::size_t>(r * xs[3] + c)] *
                  w[2][static_cast<std::size_t>(i)][static_cast<std::size_t>(r)] *
                  w[3][static_cast<std::size_t>(j)][static_cast<std::size_t>(c)];
      CHECK(near(run_graph(g, xs, x, 0), want));
    }
}

TEST_CASE("Resize's tf_crop_and_resize samples the roi box and extrapolates outside x", "[graph][resize]") {
  // onnx.ai's formula per axis: c = start (n - 1) + i (end - start) (n - 1) / (m - 1), m the
  // resized extent; an output whose c is outside [0, n - 1] on any axis is extrapolation_value.
  // x = 5 r + col on [1, 1, 4, 5] is linear in (r, col), so linear sampling inside is exact.
  const shape xs{1, 1, 4, 5};
  std::vector<double> x;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) x.push_back(5.0 * r + c);
  struct crop {
    std::vector<double> roi;  // starts, then ends, per axis named
    std::vector<std::int64_t> sizes;
    ints axes;
  };
  for (const crop& k : {crop{{0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8}, {1, 1, 3, 3}, {}},
                        crop{{0, 0, -0.5, 0.25, 1, 1, 1.5, 1.25}, {1, 1, 5, 6}, {}},
                        crop{{0.2, -0.1, 0.9, 0.5}, {7, 4}, {2, 3}}, crop{{0.5, 0.25, 0.5, 0.75}, {1, 3}, {2, 3}}}) {
    CAPTURE(k.roi, k.sizes);
    graph g("crop");
    auto xi = g.add_input("x", xs, dtype::f32);
    attributes attrs{{"mode", std::string("linear")},
                     {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                     {"extrapolation_value", 100.5}};
    if (!k.axes.empty()) attrs.set("axes", k.axes);
    g.set_output(
        g.add_op("Resize",
                 {xi, g.add_constant("roi", tensor({static_cast<std::int64_t>(k.roi.size())}, dtype::f32, k.roi)), "",
                  g.add_constant("sizes", ints_tensor(k.sizes))},
                 attrs, "r"));
    const std::int64_t oh = k.sizes[k.sizes.size() - 2], ow = k.sizes.back();
    CHECK(g.value("r").shape == shape{1, 1, oh, ow});
    const std::size_t half = k.roi.size() / 2;
    const auto source = [&](std::size_t axis, std::int64_t i, std::int64_t n, std::int64_t m) {
      const double start = static_cast<double>(static_cast<float>(k.roi[half - 2 + axis]));
      const double end = static_cast<double>(static_cast<float>(k.roi[2 * half - 2 + axis]));
      const auto last = static_cast<double>(n - 1);
      return m == 1 ? (start + end) / 2 * last
                    : start * last + static_cast<double>(i) * (end - start) * last / static_cast<double>(m - 1);
    };
    std::vector<double> want;
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        const double r = source(0, i, 4, oh), c = source(1, j, 5, ow);
        const bool out = r < 0 || r > 3 || c < 0 || c > 4;
        want.push_back(out ? 100.5 : 5 * r + c);
      }
    CHECK(near(run_graph(g, xs, x, 0), want));
  }
}

TEST_CASE("Resize in nearest mode copies integer and bool elements exactly", "[graph][resize]") {
  // x [1, 1, 2, 3] of int64 values past 2^53 (a float or double pass would round them), resized
  // by [1, 1, 2, 1.5] in each rounding: y takes x at the one index the spec's nearest weights
  // pick along each axis.
  const shape xs{1, 1, 2, 3};
  const std::vector<double> scales{1, 1, 2, 1.5};
  const shape ys{1, 1, 4, 4};
  std::vector<std::int64_t> x;
  for (std::int64_t k = 0; k < 6; ++k) x.push_back((std::int64_t{1} << 62) + 2 * k + 1);
  const auto input = [&] {
    tensor xt(xs, dtype::i64);
    std::memcpy(xt.data(), x.data(), x.size() * sizeof(std::int64_t));
    return xt;
  };
  for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
    for (const char* coordinates : {"half_pixel", "asymmetric", "align_corners"}) {
      CAPTURE(rounding, coordinates);
      const resize_args r{"nearest", coordinates, rounding};
      graph g("int64 nearest");
      g.set_output(add_resize(g, g.add_input("x", xs, dtype::i64), r, scales, {}, "r"));
      auto sys = test::make_system();
      session sess{sys};
      const tensor y = std::move(sess.run(sess.compile(g), {{"x", input()}}).outputs.at("r"));
      REQUIRE(y.type() == dtype::i64);
      REQUIRE(y.shape() == ys);
      const auto rows = weights(r, 2, 4, 2), cols = weights(r, 3, 4, 1.5);
      const auto pick = [](const std::vector<double>& w) {
        return static_cast<std::int64_t>(std::find(w.begin(), w.end(), 1.0) - w.begin());
      };
      const auto* got = static_cast<const std::int64_t*>(y.data());
      for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t j = 0; j < 4; ++j) {
          const std::int64_t want = x[static_cast<std::size_t>(pick(rows[static_cast<std::size_t>(i)]) * 3 +
                                                               pick(cols[static_cast<std::size_t>(j)]))];
          CAPTURE(i, j);
          CHECK(got[i * 4 + j] == want);
        }
    }
  }
  SECTION("uint8 and bool with tf_crop_and_resize: outside the box, the extrapolation value") {
    // roi [-1, 2] along the last axis of 3 elements, 4 outputs: c = -2 + i * 6 / 3 = -2, 0, 2, 4,
    // so the first and last are outside x.
    for (const dtype t : {dtype::u8, dtype::boolean}) {
      CAPTURE(to_string(t));
      graph g("crop");
      auto xi = g.add_input("x", {1, 3}, t);
      g.set_output(g.add_op(
          "Resize",
          {xi, g.add_constant("roi", tensor({4}, dtype::f32, {0, -1, 1, 2})), "",
           g.add_constant("sizes", ints_tensor({1, 4}))},
          {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}, {"extrapolation_value", 1.0}}, "r"));
      auto sys = test::make_system();
      session sess{sys};
      const std::vector<double> in = t == dtype::u8 ? std::vector<double>{10, 20, 30} : std::vector<double>{0, 0, 0};
      const auto y = sess.run(sess.compile(g), {{"x", tensor({1, 3}, t, in)}}).outputs.at("r").to_vector();
      CHECK(y == std::vector<double>{1, in[0], in[2], 1});
    }
    expect_graph_error(
        [&] {
          graph g("fill out of range");
          g.add_op(
              "Resize",
              {g.add_input("x", {1, 3}, dtype::u8), g.add_constant("roi", tensor({4}, dtype::f32, {0, -1, 1, 2})), "",
               g.add_constant("sizes", ints_tensor({1, 4}))},
              {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}, {"extrapolation_value", 300.0}},
              "r");
        },
        errc::invalid_argument, "r", "x");
  }
}
