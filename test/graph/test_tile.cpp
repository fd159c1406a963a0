// Tile, Expand and Trilu (onnx.ai/onnx/operators/onnx__Tile.html, onnx__Expand.html, onnx__Trilu.html): output shapes,
// values through compiled runs against the index formula y[i] = x[i mod x's extents], the typed
// errors, and a timing-only run.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::ints_tensor;
using test::iota;

// y[i] = x[i mod x's extents], x (holding 0, 1, 2, ...) aligned to y's rank by leading 1s.
std::vector<double> repeated(const shape& given, const shape& ys) {
  shape xs;
  for (std::size_t d = given.rank(); d < ys.rank(); ++d) xs.push_back(1);
  for (const std::int64_t d : given) xs.push_back(d);
  std::vector<double> y(static_cast<std::size_t>(ys.elements()));
  std::vector<std::int64_t> idx(ys.rank(), 0);
  for (auto& e : y) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < ys.rank(); ++d) flat = flat * xs[d] + idx[d] % xs[d];
    e = static_cast<double>(flat);
    for (std::size_t d = ys.rank(); d-- > 0;) {
      if (++idx[d] < ys[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

// One Tile or Expand of a fed x with its constant second input; the output's shape and values.
std::vector<double> run_op(const std::string& op, const shape& xs, const std::vector<std::int64_t>& by, shape& out,
                           dtype t = dtype::f32, int level = 0) {
  graph g("rep");
  auto x = g.add_input("x", xs, t);
  g.set_output(g.add_op(op, {x, g.add_constant("by", ints_tensor(by))}, {}, "y"));
  out = g.value("y").shape;
  auto sys = test::make_system();
  session s{sys};
  const tensor xv(xs, t, iota(xs.elements()));
  return s.run(s.compile(g, {.optimization_level = level}), {{"x", xv}}).outputs.at("y").to_vector();
}

using test::expect_graph_error;

// An input shape, the constant second input (repeats or target shape) and the output shape.
struct rep_case {
  shape xs;
  std::vector<std::int64_t> by;
  shape want;
};

}  // namespace

TEST_CASE("Tile repeats its input by the constant repeats", "[graph][tile]") {
  const std::vector<rep_case> cases{
      {{2, 2}, {2, 2}, {4, 4}},  // onnx.ai's example
      {{3}, {4}, {12}},
      {{2, 3, 1}, {1, 2, 5}, {2, 6, 5}},
      {{1, 4}, {3, 1}, {3, 4}},
  };
  for (const auto& c : cases)
    for (int level : {0, 2})
      for (dtype t : {dtype::f32, dtype::i64}) {
        CAPTURE(c.xs, c.by, level, to_string(t));
        shape out;
        const auto y = run_op("Tile", c.xs, c.by, out, t, level);
        CHECK(out == c.want);
        CHECK(y == repeated(c.xs, c.want));
      }
}

TEST_CASE("Expand broadcasts its input to the constant shape, NumPy's way", "[graph][expand]") {
  const std::vector<rep_case> cases{
      {{3, 1}, {2, 1, 6}, {2, 3, 6}},  // onnx.ai's dim_changed example
      {{3, 1}, {3, 4}, {3, 4}},        // dim_unchanged
      {{4}, {2, 1}, {2, 4}},           // a 1 in the shape keeps x's extent
      {{2, 1, 3}, {1}, {2, 1, 3}},     // a shorter shape: nothing to expand
      {{1}, {5}, {5}},
  };
  for (const auto& c : cases)
    for (int level : {0, 2}) {
      CAPTURE(c.xs, c.by, level);
      shape out;
      const auto y = run_op("Expand", c.xs, c.by, out, dtype::f32, level);
      CHECK(out == c.want);
      CHECK(y == repeated(c.xs, c.want));
    }
}

TEST_CASE("Tile and Expand refuse shapes they cannot produce, with typed errors", "[graph][tile][expand]") {
  const auto build = [](const std::string& op, const shape& xs, const std::vector<std::int64_t>& by) {
    graph g("bad");
    auto x = g.add_input("x", xs, dtype::f32);
    g.add_op(op, {x, g.add_constant("by", ints_tensor(by))}, {}, "y");
  };
  expect_graph_error([&] { build("Tile", {2, 3}, {2}); }, errc::invalid_argument, "y", "by");
  expect_graph_error([&] { build("Tile", {2, 3}, {2, -1}); }, errc::invalid_argument, "y", "by");
  CHECK_NOTHROW(build("Tile", {2, 3}, {2, 0}));  // a repeat of 0: an empty tensor
  expect_graph_error([&] { build("Tile", {2, 3}, {std::numeric_limits<std::int64_t>::max(), 1}); }, errc::size_overflow,
                     "y", "by");
  expect_graph_error([&] { build("Expand", {3, 2}, {3, 4}); }, errc::invalid_shape, "y", "by");
  expect_graph_error([&] { build("Expand", {3, 2}, {-1, 2}); }, errc::invalid_argument, "y", "by");
  expect_graph_error([&] { build("Expand", {2}, {1, 1, 1, 1, 1, 1, 1, 1, 2}); }, errc::not_supported, "y", "by");
  // The second input decides the shape: fed at run time, it cannot be used.
  expect_graph_error(
      [&] {
        graph g("fed");
        auto x = g.add_input("x", {2, 3}, dtype::f32);
        auto r = g.add_input("repeats", {2}, dtype::i64);
        g.add_op("Tile", {x, r}, {}, "y");
      },
      errc::not_supported, "y", "repeats");
  expect_graph_error(
      [&] {
        graph g("dtype");
        auto x = g.add_input("x", {2, 3}, dtype::f32);
        g.add_op("Tile", {x, g.add_constant("by", ints_tensor({1, 2}, dtype::i32))}, {}, "y");
      },
      errc::invalid_dtype, "y", "by");
}

TEST_CASE("Tile and Expand lower to tile kernels in a timing-only run", "[graph][tile][expand][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {64, 1}, dtype::f16);
  auto e = g.add_op("Expand", {x, g.add_constant("to", ints_tensor({64, 512}))}, {}, "e");
  g.set_output(g.add_op("Tile", {e, g.add_constant("reps", ints_tensor({2, 1}))}, {}, "t"));
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g, {.timing_only = true});
  auto r = s.run(c, {{"x", tensor::timing_only({64, 1}, dtype::f16)}});
  REQUIRE(r.ops.size() == 2);
  CHECK(r.outputs.at("t").shape() == shape{128, 512});
  // Each no faster than its bytes (x read, y written) over the preset's HBM bandwidth.
  const double bw = sim::presets::ascend910(1).hbm_bandwidth;
  const double expand_bytes = 2.0 * (64 + 64 * 512), tile_bytes = 2.0 * (64 * 512 + 128 * 512);
  for (const auto& op : r.ops) {
    CAPTURE(op.name);
    const double floor_s = (op.name == "e" ? expand_bytes : tile_bytes) / bw;
    CHECK(static_cast<double>(op.busy.count()) * 1e-12 >= floor_s * (1 - 1e-9));
  }
}

TEST_CASE("Trilu keeps the triangle its constant k and upper attribute name", "[graph][trilu]") {
  for (const bool upper : {true, false})
    for (const std::int64_t k : {-2, 0, 1, 7}) {
      CAPTURE(upper, k);
      graph g("trilu");
      auto x = g.add_input("x", {2, 3, 4}, dtype::f32);
      g.set_output(
          g.add_op("Trilu", {x, g.add_constant("k", ints_tensor({k}))}, {{"upper", std::int64_t{upper}}}, "y"));
      auto sys = test::make_system();
      session s{sys};
      const auto y = s.run(s.compile(g), {{"x", tensor({2, 3, 4}, dtype::f32, iota(24))}}).outputs.at("y").to_vector();
      for (std::size_t i = 0; i < y.size(); ++i) {
        const auto j = static_cast<std::int64_t>(i % 4), r = static_cast<std::int64_t>(i / 4 % 3);
        CHECK(y[i] == ((upper ? j - r >= k : j - r <= k) ? static_cast<double>(i) : 0.0));
      }
    }
  expect_graph_error(
      [] {
        graph g("rank");
        g.add_op("Trilu", {g.add_input("x", {4}, dtype::f32)}, {}, "y");
      },
      errc::invalid_shape, "y", "x");
  expect_graph_error(
      [] {
        graph g("k");
        auto x = g.add_input("x", {4, 4}, dtype::f32);
        g.add_op("Trilu", {x, g.add_constant("k", ints_tensor({1, 2}))}, {}, "y");
      },
      errc::invalid_shape, "y", "k");
  expect_graph_error(
      [] {
        graph g("fed");
        auto x = g.add_input("x", {4, 4}, dtype::f32);
        g.add_op("Trilu", {x, g.add_input("k", {1}, dtype::i64)}, {}, "y");
      },
      errc::not_supported, "y", "k");
}
