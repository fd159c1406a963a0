// Pad (onnx.ai/onnx/operators/onnx__Pad.html): its four modes through compiled runs against
// numpy.pad's index maps, the opset 2 attribute form and the opset 11/18 inputs, crops, integer
// data, the typed errors, and a timing-only run.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::ints_tensor;
using test::iota;

// numpy.pad's index maps, case by case from its documentation: where index i of a padded
// dimension of n elements reads from, -1 for the fill.
std::int64_t numpy_index(const std::string& mode, std::int64_t i, std::int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return i < 0 ? 0 : n - 1;
  if (mode == "wrap") {
    while (i < 0) i += n;
    return i % n;
  }
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
  return i;
}

// What Pad should give for x = 0, 1, 2, ... of shape xs, pads (ONNX order: every begin, then
// every end) over `axes` (all when empty).
std::vector<double> expected(const shape& xs, const std::vector<std::int64_t>& pads, std::vector<std::int64_t> axes,
                             const std::string& mode, double fill, shape& out) {
  const std::size_t rank = xs.rank();
  if (axes.empty())
    for (std::size_t a = 0; a < rank; ++a) axes.push_back(static_cast<std::int64_t>(a));
  std::vector<std::int64_t> begin(rank, 0);
  out = xs;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<std::size_t>(axes[k] < 0 ? axes[k] + static_cast<std::int64_t>(rank) : axes[k]);
    begin[a] = pads[k];
    out[a] = xs[a] + pads[k] + pads[k + axes.size()];
  }
  std::vector<double> y(static_cast<std::size_t>(out.elements()));
  std::vector<std::int64_t> idx(rank, 0);
  for (auto& e : y) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < rank && flat >= 0; ++d) {
      const std::int64_t at = numpy_index(mode, idx[d] - begin[d], xs[d]);
      flat = at < 0 ? -1 : flat * xs[d] + at;
    }
    e = flat < 0 ? fill : static_cast<double>(flat);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

struct pad_args {
  std::vector<std::int64_t> pads;
  std::string mode = "constant";
  std::vector<std::int64_t> axes{};
  std::optional<double> fill{};
};

// Pad with the opset 11/18 inputs: constant pads, an optional constant_value and axes.
std::string add_pad(graph& g, const std::string& x, const pad_args& a, const std::string& name, dtype type) {
  std::vector<std::string> ins{x, g.add_constant(name + "/pads", ints_tensor(a.pads))};
  ins.push_back(a.fill ? g.add_constant(name + "/value", tensor({}, type, {*a.fill})) : std::string());
  if (!a.axes.empty()) ins.push_back(g.add_constant(name + "/axes", ints_tensor(a.axes)));
  return g.add_op("Pad", ins, {{"mode", a.mode}}, name);
}

std::vector<double> run_pad(const shape& xs, const pad_args& a, shape& out, dtype type = dtype::f32, int level = 0) {
  graph g("pad");
  auto x = g.add_input("x", xs, type);
  g.set_output(add_pad(g, x, a, "p", type));
  out = g.value("p").shape;
  auto sys = test::make_system();
  session s{sys};
  const tensor xv(xs, type, iota(xs.elements()));
  return s.run(s.compile(g, {.optimization_level = level}), {{"x", xv}}).outputs.at("p").to_vector();
}

using test::expect_graph_error;

}  // namespace

TEST_CASE("Pad computes numpy.pad's border in every mode, crops and axes included", "[graph][pad]") {
  struct pad_case {
    shape xs;
    pad_args a;
  };
  const std::vector<pad_case> cases{
      {{3, 2}, {{0, 2, 0, 0}}},                           // ONNX's constant example
      {{3, 2}, {{0, 2, 0, 0}, "reflect"}},                // and its reflect, edge and wrap ones
      {{3, 2}, {{0, 2, 0, 0}, "edge"}},
      {{3, 2}, {{2, 1, 1, 1}, "wrap"}},
      {{2, 3, 4}, {{1, 0, 2, 2, 3, 1}, "constant", {}, 1.5}},
      {{2, 3, 4}, {{1, 4, 2, 2, 5, 1}, "reflect"}},       // wider than the dimension: reflects again
      {{2, 3, 4}, {{3, 0, 9, 1, 7, 0}, "wrap"}},          // wraps more than once
      {{1, 5}, {{2, 2, 2, 2}, "reflect"}},                // one element reflects onto itself
      {{4, 6}, {{-1, 2, 0, -3}, "edge"}},                 // a crop on one side, a pad on the other
      {{4, 6}, {{-2, -1, -1, -4}}},                       // crops only
      {{2, 3, 4}, {{1, 2, 0, 3}, "edge", {-1, 0}}},       // opset 18's axes, one negative
      {{2, 3, 4}, {{2, 1}, "reflect", {1}}},
  };
  for (const auto& c : cases) {
    for (int level : {0, 2}) {
      CAPTURE(c.a.mode, c.a.pads, level);
      shape out, want_shape;
      const auto got = run_pad(c.xs, c.a, out, dtype::f32, level);
      const auto want = expected(c.xs, c.a.pads, c.a.axes, c.a.mode, c.a.fill.value_or(0.0), want_shape);
      CHECK(out == want_shape);
      CHECK(got == want);
    }
  }
}

TEST_CASE("Pad of integer data fills with an integer constant_value exactly", "[graph][pad]") {
  shape out, want_shape;
  const auto got = run_pad({2, 3}, {{1, 1, 1, 1}, "constant", {}, -9}, out, dtype::i64);
  CHECK(got == expected({2, 3}, {1, 1, 1, 1}, {}, "constant", -9, want_shape));
  CHECK(out == shape{4, 5});
  const auto u8 = run_pad({2, 3}, {{0, 2, 0, 0}, "constant", {}, 255}, out, dtype::u8);
  CHECK(u8 == expected({2, 3}, {0, 2, 0, 0}, {}, "constant", 255, want_shape));
}

TEST_CASE("Pad's opset 2 form takes pads and value as attributes", "[graph][pad]") {
  graph g("pad2");
  auto x = g.add_input("x", {2, 2}, dtype::f16);
  g.set_output(
      g.add_op("Pad", {x}, {{"pads", ints{1, 0, 0, 1}}, {"value", 0.5}, {"mode", std::string("constant")}}, "p"));
  auto sys = test::make_system();
  session s{sys};
  const auto y = s.run(s.compile(g), {{"x", tensor({2, 2}, dtype::f16, {1, 2, 3, 4})}}).outputs.at("p").to_vector();
  CHECK(y == std::vector<double>{0.5, 0.5, 0.5, 1, 2, 0.5, 3, 4, 0.5});
}

TEST_CASE("Pad rounds a float fill to the data's dtype, as numpy.pad's cast does", "[graph][pad]") {
  for (const dtype t : {dtype::f16, dtype::f32}) {
    CAPTURE(to_string(t));
    graph g("round");
    auto x = g.add_input("x", {2}, t);
    g.set_output(g.add_op("Pad", {x}, {{"pads", ints{1, 0}}, {"value", 0.1}}, "p"));
    auto sys = test::make_system();
    session s{sys};
    const auto y = s.run(s.compile(g), {{"x", tensor({2}, t, {1, 2})}}).outputs.at("p").to_vector();
    tensor want({1}, t);
    want.set(0, 0.1);  // 0.1 rounded to nearest even in t
    CHECK(y == std::vector<double>{want.get(0), 1, 2});
    CHECK(y[0] != 0.1);
  }
}

TEST_CASE("Pad refuses what it cannot compute exactly, with typed errors naming the tensor", "[graph][pad]") {
  const auto build = [](const std::vector<std::int64_t>& pads, const std::string& mode = "constant",
                        std::vector<std::int64_t> axes = {}) {
    graph g("bad");
    auto x = g.add_input("x", {2, 3}, dtype::f32);
    pad_args a{pads, mode, std::move(axes)};
    add_pad(g, x, a, "p", dtype::f32);
  };
  expect_graph_error([&] { build({1, 1, 1}); }, errc::invalid_argument, "p", "p/pads");
  expect_graph_error([&] { build({-2, 0, -1, 0}); }, errc::invalid_argument, "p", "p/pads");  // 2 - 3 rows
  CHECK_NOTHROW(build({-1, 0, -1, 0}));  // 0 rows: an empty tensor
  expect_graph_error([&] { build({1, 0, 1, 0}, "mirror"); }, errc::invalid_argument, "p", "x");
  expect_graph_error([&] { build({1, 1, 1, 1}, "constant", {0, -2}); }, errc::invalid_argument, "p", "p/axes");
  expect_graph_error([&] { build({1, 1}, "constant", {2}); }, errc::invalid_argument, "p", "p/axes");
  expect_graph_error([&] { build({std::numeric_limits<std::int64_t>::max(), 0, 0, 0}); }, errc::size_overflow, "p",
                     "p/pads");
  // The pads decide the shape: fed at run time they cannot be used.
  expect_graph_error(
      [&] {
        graph g("fed");
        auto x = g.add_input("x", {2, 3}, dtype::f32);
        auto pads = g.add_input("pads", {4}, dtype::i64);
        g.add_op("Pad", {x, pads}, {}, "p");
      },
      errc::not_supported, "p", "pads");
  // constant_value of another dtype than x, or of several values.
  expect_graph_error(
      [&] {
        graph g("value");
        auto x = g.add_input("x", {2, 3}, dtype::f32);
        g.add_op("Pad", {x, g.add_constant("pads", ints_tensor({0, 1, 0, 1})), g.add_constant("v", ints_tensor({0}))},
                 {}, "p");
      },
      errc::invalid_dtype, "p", "v");
  expect_graph_error(
      [&] {
        graph g("value");
        auto x = g.add_input("x", {2, 3}, dtype::f32);
        g.add_op("Pad",
                 {x, g.add_constant("pads", ints_tensor({0, 1, 0, 1})),
                  g.add_constant("v", tensor({2}, dtype::f32, {1, 2}))},
                 {}, "p");
      },
      errc::invalid_shape, "p", "v");
  // A fill an integer dtype does not hold, and both forms of pads at once.
  for (const double bad : {0.5, 128.0, -129.0})
    expect_graph_error(
        [&] {
          graph g("fill");
          auto x = g.add_input("x", {2, 2}, dtype::i8);
          g.add_op("Pad", {x}, {{"pads", ints{1, 0, 0, 0}}, {"value", bad}}, "p");
        },
        errc::invalid_argument, "p", "x");
  expect_graph_error(
      [&] {
        graph g("both");
        auto x = g.add_input("x", {2, 2}, dtype::f32);
        g.add_op("Pad", {x, g.add_constant("pads", ints_tensor({1, 0, 0, 0}))}, {{"pads", ints{1, 0, 0, 0}}}, "p");
      },
      errc::invalid_argument, "p", "pads");
}

TEST_CASE("Pad lowers to one pad kernel in a timing-only run, costed as data movement", "[graph][pad][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {8, 64, 56, 56}, dtype::f16);
  g.set_output(add_pad(g, x, {{0, 0, 1, 1, 0, 0, 1, 1}, "reflect"}, "p", dtype::f16));
  // No faster than its bytes (x read, y written) over the preset's HBM bandwidth.
  test::check_timing_only_movement(g, {8, 64, 56, 56}, dtype::f16, "p", {8, 64, 58, 58},
                                   2.0 * 8 * 64 * (56 * 56 + 58 * 58));
}

TEST_CASE("Pad runs in an fp16 session, its constant_value converted with x", "[graph][pad][precision]") {
  graph g("fp16");
  auto x = g.add_input("x", {2, 3}, dtype::f32);
  g.set_output(add_pad(g, x, {{1, 0, 0, 1}, "constant", {}, 0.1}, "p", dtype::f32));
  auto sys = test::make_system();
  session h{sys, {.precision = precision::fp16}};
  const auto y = h.run(h.compile(g), {{"x", tensor({2, 3}, dtype::f32, iota(6))}}).outputs.at("p").to_vector();
  tensor fill({1}, dtype::f16);
  fill.set(0, 0.1);
  shape out;
  const auto want = expected({2, 3}, {1, 0, 0, 1}, {}, "constant", fill.get(0), out);
  CHECK(y == want);
}
