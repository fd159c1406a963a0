// GridSample (onnx.ai/onnx/operators/onnx__GridSample.html) through compiled runs: every mode,
// padding mode and align_corners in opset 16's and opset 20's spellings against the spec's
// formulas, the N-D form, the typed errors, a grid value with no position failing session::run,
// the grid kept float in an fp16 session, and a timing-only run.
#include <npurt/graph/session.hpp>
#include <npurt/numeric.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;
using test::near;

struct grid_args {
  std::string mode = "bilinear";
  std::string padding = "zeros";
  std::int64_t align = 0;
};

// The weight of each of x's n elements along one dimension for normalised coordinate g, from
// onnx.ai's formulas: g denormalised (-1 and 1 the edge centres with align_corners, the outer
// edges without), rounded half to even for nearest, a coordinate outside [lo, hi] clamped
// (border) or mirrored off the nearer border until inside (reflection); then the neighbours'
// weights, each neighbour read as zero, clamped or mirrored the same way.
std::vector<double> grid_weights(const grid_args& a, double g, std::int64_t n) {
  std::vector<double> w(static_cast<std::size_t>(n));
  const auto len = static_cast<double>(n);
  double c = a.align ? (g + 1) * (len - 1) / 2 : ((g + 1) * len - 1) / 2;
  const double lo = a.align ? 0 : -0.5, hi = a.align ? len - 1 : len - 0.5;
  const auto mirror = [&](double v) {
    if (hi == lo) return lo;
    while (v < lo || v > hi) v = v < lo ? 2 * lo - v : 2 * hi - v;
    return v;
  };
  const bool nearest = a.mode == "nearest";
  if (nearest) c = std::rint(c);
  if (c < lo || c > hi) {
    if (a.padding == "border") c = std::clamp(c, 0.0, len - 1);
    if (a.padding == "reflection") c = mirror(c);
  }
  const auto add = [&](std::int64_t i, double v) {
    if (a.padding == "zeros" && (i < 0 || i >= n)) return;
    if (a.padding == "border") i = std::clamp<std::int64_t>(i, 0, n - 1);
    if (a.padding == "reflection") i = static_cast<std::int64_t>(mirror(static_cast<double>(i)));
    w[static_cast<std::size_t>(i)] += v;
  };
  const double f = std::floor(c), t = c - f;
  const auto fi = static_cast<std::int64_t>(f);
  if (nearest) {
    add(static_cast<std::int64_t>(c), 1);
  } else if (a.mode == "bilinear" || a.mode == "linear") {
    add(fi, 1 - t);
    add(fi + 1, t);
  } else {
    const double k = -0.75;  // Keys' coefficient GridSample fixes
    const auto keys = [&](double d) {
      d = std::fabs(d);
      if (d <= 1) return ((k + 2) * d - (k + 3)) * d * d + 1;
      if (d < 2) return ((k * d - 5 * k) * d + 8 * k) * d - 4 * k;
      return 0.0;
    };
    for (std::int64_t j = -1; j <= 2; ++j) add(fi + j, keys(t - static_cast<double>(j)));
  }
  return w;
}

// y[n, c, o] = sum over x's spatial elements of x times the product of every dimension's weight,
// the grid's coordinates read in x's spatial order reversed.
std::vector<double> grid_expected(const std::vector<double>& x, const shape& xs, const std::vector<double>& grid,
                                  const shape& gs, const grid_args& a) {
  const std::size_t r = xs.rank() - 2;
  std::size_t block = 1, outs = 1;
  for (std::size_t d = 2; d < xs.rank(); ++d) block *= static_cast<std::size_t>(xs[d]);
  for (std::size_t d = 1; d <= r; ++d) outs *= static_cast<std::size_t>(gs[d]);
  std::vector<double> y;
  for (std::int64_t n = 0; n < xs[0]; ++n)
    for (std::int64_t c = 0; c < xs[1]; ++c)
      for (std::size_t o = 0; o < outs; ++o) {
        std::vector<std::vector<double>> w;
        for (std::size_t d = 0; d < r; ++d)
          w.push_back(grid_weights(a, grid[(static_cast<std::size_t>(n) * outs + o) * r + (r - 1 - d)], xs[d + 2]));
        double sum = 0;
        for (std::size_t e = 0; e < block; ++e) {
          double p = x[static_cast<std::size_t>(n * xs[1] + c) * block + e];
          std::size_t rest = e;
          for (std::size_t d = r; d-- > 0;) {
            const auto extent = static_cast<std::size_t>(xs[d + 2]);
            p *= w[d][rest % extent];
            rest /= extent;
          }
          sum += p;
        }
        y.push_back(sum);
      }
  return y;
}

graph grid_graph(const shape& xs, const shape& gs, const attributes& attrs, dtype grid_type = dtype::f32) {
  graph g("grid");
  auto x = g.add_input("x", xs, dtype::f32);
  auto grid = g.add_input("grid", gs, grid_type);
  g.set_output(g.add_op("GridSample", {x, grid}, attrs, "gs"));
  return g;
}

// Grid values in and a little outside [-1, 1], with the borders themselves and far coordinates.
std::vector<double> grid_values(std::int64_t count, std::uint64_t seed) {
  std::vector<double> v = test::values(count, seed, 1.4);
  const double special[] = {-1, 1, 0, 0.5, -3.3, 7.9};
  for (std::size_t i = 0; i < v.size(); i += 3) v[i] = special[(i / 3) % std::size(special)];
  return v;
}

}  // namespace

TEST_CASE("GridSample in every mode and padding matches onnx.ai's formulas", "[graph][grid_sample]") {
  const shape xs{2, 3, 5, 4}, gs{2, 3, 6, 2};
  const std::vector<double> x = test::values(xs.elements(), 11, 4.0);
  const std::vector<double> grid = grid_values(gs.elements(), 5);
  int checked = 0;
  for (const std::string mode : {"bilinear", "linear", "nearest", "bicubic", "cubic"})
    for (const std::string padding : {"zeros", "border", "reflection"})
      for (std::int64_t align : {0, 1}) {
        CAPTURE(mode, padding, align);
        const grid_args a{mode, padding, align};
        graph g = grid_graph(xs, gs, {{"mode", mode}, {"padding_mode", padding}, {"align_corners", align}});
        CHECK(g.value("gs").shape == shape{2, 3, 3, 6});
        CHECK(g.value("gs").type == dtype::f32);
        auto sys = test::make_system();
        session s{sys};
        const auto got = s.run(s.compile(g, {.optimization_level = align == 0 ? 0 : 2}),
                               {{"x", tensor(xs, dtype::f32, x)}, {"grid", tensor(gs, dtype::f32, grid)}})
                             .outputs.at("gs")
                             .to_vector();
        CHECK(near(got, grid_expected(x, xs, grid, gs, a)));
        ++checked;
      }
  CHECK(checked == 30);
  // The defaults: bilinear, zeros, align_corners 0.
  graph d = grid_graph(xs, gs, {});
  auto sys = test::make_system();
  session s{sys};
  CHECK(near(s.run(s.compile(d), {{"x", tensor(xs, dtype::f32, x)}, {"grid", tensor(gs, dtype::f32, grid)}})
                 .outputs.at("gs")
                 .to_vector(),
             grid_expected(x, xs, grid, gs, {})));
}

TEST_CASE("GridSample's N-D form (opset 20): 1-D and 3-D sampling, an f16 grid", "[graph][grid_sample]") {
  for (const auto& [xs, gs] :
       {std::pair{shape{1, 2, 7}, shape{1, 5, 1}}, std::pair{shape{2, 1, 3, 4, 2}, shape{2, 2, 3, 2, 3}}}) {
    for (const std::string mode : {"linear", "nearest", "cubic"}) {
      CAPTURE(xs, mode);
      const grid_args a{mode, "reflection", 0};
      graph g = grid_graph(xs, gs, {{"mode", mode}, {"padding_mode", a.padding}}, dtype::f16);
      shape ys{xs[0], xs[1]};
      for (std::size_t d = 1; d + 1 < gs.rank(); ++d) ys.push_back(gs[d]);
      CHECK(g.value("gs").shape == ys);
      const std::vector<double> x = test::values(xs.elements(), 3, 2.0);
      const tensor grid(gs, dtype::f16, grid_values(gs.elements(), 9));
      auto sys = test::make_system();
      session s{sys};
      const auto got =
          s.run(s.compile(g), {{"x", tensor(xs, dtype::f32, x)}, {"grid", grid}}).outputs.at("gs").to_vector();
      CHECK(near(got, grid_expected(x, xs, grid.to_vector(), gs, a)));
    }
  }
}

TEST_CASE("GridSample refuses what it cannot compute, with typed errors naming the tensor", "[graph][grid_sample]") {
  const auto build = [](const shape& xs, const shape& gs, const attributes& attrs = {}, dtype xt = dtype::f32,
                        dtype gt = dtype::f32) {
    graph g("bad");
    auto x = g.add_input("x", xs, xt);
    auto grid = g.add_input("grid", gs, gt);
    g.add_op("GridSample", {x, grid}, attrs, "gs");
  };
  const shape xs{1, 2, 4, 4}, gs{1, 3, 3, 2};
  expect_graph_error([&] { build(xs, gs, {}, dtype::i32); }, errc::not_supported, "gs", "x");
  expect_graph_error([&] { build(xs, gs, {}, dtype::f32, dtype::i64); }, errc::invalid_dtype, "gs", "grid");
  expect_graph_error([&] { build({1, 4}, {1, 4}); }, errc::invalid_shape, "gs", "x");
  expect_graph_error([&] { build(xs, {1, 3, 3, 3}); }, errc::invalid_shape, "gs", "grid");
  expect_graph_error([&] { build(xs, {2, 3, 3, 2}); }, errc::invalid_shape, "gs", "grid");
  expect_graph_error([&] { build(xs, {1, 9, 2}); }, errc::invalid_shape, "gs", "grid");
  expect_graph_error([&] { build(xs, gs, {{"mode", std::string("area")}}); }, errc::invalid_argument, "gs", "x");
  expect_graph_error([&] { build(xs, gs, {{"padding_mode", std::string("wrap")}}); }, errc::invalid_argument, "gs",
                     "x");
  expect_graph_error([&] { build(xs, gs, {{"align_corners", std::int64_t{2}}}); }, errc::invalid_argument, "gs", "x");
  expect_graph_error([&] { build(xs, gs, {{"antialias", std::int64_t{1}}}); }, errc::not_supported, "gs", "");
  CHECK(is_supported_op("GridSample"));
}

TEST_CASE("a GridSample grid value with no position fails session::run naming it", "[graph][grid_sample][errors]") {
  graph g = grid_graph({1, 1, 2, 2}, {1, 1, 2, 2}, {{"padding_mode", std::string("reflection")}});
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  const tensor x({1, 1, 2, 2}, dtype::f32, {1, 2, 3, 4});
  try {
    (void)s.run(c, {{"x", x}, {"grid", tensor({1, 1, 2, 2}, dtype::f32, {0, 0, 0.5, HUGE_VAL})}});
    FAIL("an infinite coordinate under reflection padding was sampled");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::StartsWith("npurt::session::run: node 'gs' (GridSample): "));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("grid[3] = inf is no finite sampling position"));
  }
  // The same session goes on: the centre of x averages it.
  const auto r = s.run(c, {{"x", x}, {"grid", tensor({1, 1, 2, 2}, dtype::f32, {0, 0, -1, -1})}});
  CHECK(r.outputs.at("gs").to_vector() == std::vector<double>{2.5, 1});
}

TEST_CASE("GridSample reads a float grid as it is in an fp16 session", "[graph][grid_sample][precision]") {
  // Nearest on a row of 64: g = 0.2813125 denormalises to 32 g + 31.5 = 40.502, element 41; its
  // f16 rounding (0.28125) lands on 40.5, which rounds half to even to 40.
  const double g = 0.2813125;
  REQUIRE(std::rint(32 * static_cast<double>(static_cast<float>(g)) + 31.5) == 41);
  REQUIRE(std::rint(32 * static_cast<double>(npurt::half(static_cast<float>(g)).to_float()) + 31.5) == 40);
  const shape xs{1, 1, 1, 64}, gs{1, 1, 1, 2};
  const tensor x(xs, dtype::f32, test::iota(64));
  const tensor grid(gs, dtype::f32, {g, 0});
  const attributes nearest{{"mode", std::string("nearest")}};
  auto sys = test::make_system();
  session s{sys, {.precision = precision::fp16}};
  graph fed = grid_graph(xs, gs, nearest);
  CHECK(s.run(s.compile(fed), {{"x", x}, {"grid", grid}}).outputs.at("gs").to_vector() == std::vector<double>{41});
  // A grid the session computes is computed in f16 and read there.
  graph computed("computed");
  auto xi = computed.add_input("x", xs, dtype::f32);
  auto gi = computed.add_input("grid", gs, dtype::f32);
  auto twice = computed.add_op("Add", {gi, gi}, {}, "twice");
  auto half_of = computed.add_op("Mul", {twice, computed.add_constant("h", tensor({1}, dtype::f32, {0.5}))}, {}, "g");
  computed.set_output(computed.add_op("GridSample", {xi, half_of}, nearest, "gs"));
  CHECK(s.run(s.compile(computed), {{"x", x}, {"grid", grid}}).outputs.at("gs").to_vector() == std::vector<double>{40});
}

TEST_CASE("GridSample lowers to one grid_sample kernel in a timing-only run", "[graph][grid_sample][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {4, 64, 80, 80}, dtype::f16);
  auto grid = g.add_constant("grid", tensor::timing_only({4, 40, 40, 2}, dtype::f16));
  g.set_output(g.add_op("GridSample", {x, grid}, {}, "gs"));
  // No faster than its traffic: four gathered neighbours per output, the grid, y written.
  const double y_bytes = 4.0 * 64 * 40 * 40 * 2;
  test::check_timing_only_movement(g, {4, 64, 80, 80}, dtype::f16, "gs", {4, 64, 40, 40},
                                   4 * y_bytes + 4.0 * 40 * 40 * 2 * 2 + y_bytes);
}
