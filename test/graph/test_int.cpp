// Integer arithmetic at run time (Add, Sub, Mul, Div, Neg, Abs, Sign, Max, Min, Pow, Relu, Clip and
// ReduceSum, ReduceProd, ReduceMax, ReduceMin on int8, int32, int64, uint8), ONNX's Mod in both
// modes, CumSum and ReduceProd: values through compiled
// runs against references written here from ONNX's and numpy's definitions, a zero divisor failing
// session::run, and the typed errors of nodes the kernels cannot compute.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// One binary operator of two fed inputs, run once.
std::vector<double> int_graph_binary(std::string_view op, const tensor& a, const tensor& b, attributes attrs = {}) {
  graph g("int_binary");
  auto x = g.add_input("a", a.shape(), a.type());
  auto y = g.add_input("b", b.shape(), b.type());
  g.set_output(g.add_op(op, {x, y}, std::move(attrs), "y"));
  auto sys = test::make_system();
  session s{sys};
  return s.run(s.compile(g), {{"a", a}, {"b", b}}).outputs.at("y").to_vector();
}

}  // namespace

TEST_CASE("integer Add, Sub, Mul, Div run exactly, wrapping at the int64 extremes", "[graph][int]") {
  constexpr auto mx = std::numeric_limits<std::int64_t>::max(), mn = std::numeric_limits<std::int64_t>::min();
  const tensor a = test::ints_tensor({mx, mn, -7, 7, 1000000007});
  const tensor b = test::ints_tensor({1, -1, 2, -2, 1000000009});
  graph g("int64");
  auto x = g.add_input("a", {5}, dtype::i64);
  auto y = g.add_input("b", {5}, dtype::i64);
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) g.set_output(g.add_op(op, {x, y}, {}, op));
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"a", a}, {"b", b}});
  const auto get = [&](const char* op, std::size_t i) {
    std::int64_t v;
    std::memcpy(&v, static_cast<const std::byte*>(r.outputs.at(op).data()) + i * 8, 8);
    return v;
  };
  CHECK(get("Add", 0) == mn);  // MAX + 1 wraps
  CHECK(get("Sub", 1) == mn + 1);
  CHECK(get("Mul", 1) == mn);  // MIN * -1 wraps to MIN
  CHECK(get("Mul", 4) == 1000000016000000063);  // exact past 2^53
  CHECK(get("Div", 1) == mn);  // MIN / -1 wraps to MIN, as numpy's does
  CHECK(get("Div", 2) == -3);  // truncation toward zero
  CHECK(get("Div", 3) == -3);
  CHECK(get("Div", 4) == 0);
  // int8, int32, uint8 through a broadcast.
  CHECK(int_graph_binary("Add", tensor({2, 2}, dtype::i8, {127, -128, 5, 6}), tensor({2}, dtype::i8, {1, -1})) ==
        std::vector<double>{-128, 127, 6, 5});
  CHECK(int_graph_binary("Sub", tensor({2}, dtype::u8, {0, 7}), tensor({2}, dtype::u8, {1, 3})) ==
        std::vector<double>{255, 4});
  CHECK(int_graph_binary("Div", tensor({4}, dtype::i32, {-9, 9, -9, 9}), tensor({4}, dtype::i32, {4, -4, -4, 4})) ==
        std::vector<double>{-2, -2, 2, 2});
  CHECK(int_graph_binary("Max", tensor({3}, dtype::i32, {-5, 4, 0}), tensor({3}, dtype::i32, {-6, 9, 0})) ==
        std::vector<double>{-5, 9, 0});
  CHECK(int_graph_binary("Min", tensor({3}, dtype::i32, {-5, 4, 0}), tensor({3}, dtype::i32, {-6, 9, 0})) ==
        std::vector<double>{-6, 4, 0});
  CHECK(int_graph_binary("Pow", tensor({3}, dtype::i64, {3, -2, 10}), tensor({3}, dtype::i64, {4, 3, 0})) ==
        std::vector<double>{81, -8, 1});
}

TEST_CASE("integer Neg, Abs, Sign run; the float-only operators refuse integers", "[graph][int]") {
  for (const auto& [op, want] : std::vector<std::pair<const char*, std::vector<double>>>{
           {"Neg", {5, 0, -3}}, {"Abs", {5, 0, 3}}, {"Sign", {-1, 0, 1}}}) {
    CAPTURE(op);
    graph g("unary");
    auto x = g.add_input("x", {3}, dtype::i32);
    g.set_output(g.add_op(op, {x}, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    CHECK(s.run(s.compile(g), {{"x", tensor({3}, dtype::i32, {-5, 0, 3})}}).outputs.at("y").to_vector() == want);
  }
  graph g("refused");
  auto x = g.add_input("x", {3}, dtype::i64);
  expect_graph_error([&] { g.add_op("Exp", {x}, {}, "e"); }, errc::not_supported, "e", "x");
  expect_graph_error([&] { g.add_op("Sigmoid", {x}, {}, "s"); }, errc::not_supported, "s", "x");
  expect_graph_error([&] { g.add_op("ReduceMean", {x}, {}, "p"); }, errc::not_supported, "p", "x");
  auto f = g.add_input("f", {3}, dtype::f32);
  expect_graph_error([&] { g.add_op("Add", {x, f}, {}, "mixed"); }, errc::invalid_dtype, "mixed", "f");
}

TEST_CASE("an integer Div or Mod by zero fails session::run; the next run is fine", "[graph][int][errors]") {
  for (const char* op : {"Div", "Mod"}) {
    CAPTURE(op);
    graph g("div0");
    auto a = g.add_input("a", {3}, dtype::i64);
    auto b = g.add_input("b", {3}, dtype::i64);
    g.set_output(g.add_op(op, {a, b}, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    auto c = s.compile(g);
    try {
      (void)s.run(c, {{"a", tensor({3}, dtype::i64, {1, 2, 3})}, {"b", tensor({3}, dtype::i64, {1, 0, 1})}});
      FAIL(op << " by zero succeeded");
    } catch (const error& e) { CHECK(e.code() == errc::invalid_argument); }
    const auto r = s.run(c, {{"a", tensor({3}, dtype::i64, {7, -7, 6})}, {"b", tensor({3}, dtype::i64, {2, 2, 3})}});
    // Div truncates; Mod (fmod = 0) takes the divisor's sign: -7 % 2 == 1.
    CHECK(r.outputs.at("y").to_vector() ==
          (std::string(op) == "Div" ? std::vector<double>{3, -3, 2} : std::vector<double>{1, 1, 0}));
  }
}

TEST_CASE("Mod: fmod=0 is Python's %, fmod=1 C's fmod; floats need fmod=1", "[graph][mod]") {
  const tensor a({4}, dtype::i32, {-7, 7, -7, 7}), b({4}, dtype::i32, {3, -3, -3, 3});
  CHECK(int_graph_binary("Mod", a, b) == std::vector<double>{2, -2, -1, 1});
  CHECK(int_graph_binary("Mod", a, b, {{"fmod", std::int64_t{1}}}) == std::vector<double>{-1, 1, -1, 1});
  // Broadcast u8.
  CHECK(int_graph_binary("Mod", tensor({2, 2}, dtype::u8, {200, 9, 7, 255}), tensor({2}, dtype::u8, {7, 4})) ==
        std::vector<double>{4, 1, 0, 3});
  const auto f = int_graph_binary("Mod", tensor({3}, dtype::f32, {-4.5, 4.5, 5}), tensor({3}, dtype::f32, {2, -2, 2.5}),
                                  {{"fmod", std::int64_t{1}}});
  CHECK(f == std::vector<double>{-0.5, 0.5, 0});
  graph g("mod");
  auto x = g.add_input("x", {3}, dtype::f32);
  auto i = g.add_input("i", {3}, dtype::i32);
  expect_graph_error([&] { g.add_op("Mod", {x, x}, {}, "m"); }, errc::invalid_argument, "m", "x");
  expect_graph_error([&] { g.add_op("Mod", {i, i}, {{"fmod", std::int64_t{2}}}, "m2"); }, errc::invalid_argument, "m2",
                     "");
  expect_graph_error([&] { g.add_op("Mod", {i, x}, {{"fmod", std::int64_t{1}}}, "m3"); }, errc::invalid_dtype, "m3",
                     "x");
  CHECK(is_supported_op("Mod"));
}

TEST_CASE("CumSum along a constant axis, exclusive and reverse, int64 and float", "[graph][cumsum]") {
  // x = [[1, 2, 3], [4, 5, 6]]; the references are the running sums ONNX's definition names.
  const std::vector<double> xv{1, 2, 3, 4, 5, 6};
  struct want_case {
    std::int64_t axis;
    dtype axis_type;
    bool scalar;  // 0-D, or a one-element 1-D tensor as exporters write it
    std::int64_t exclusive, reverse;
    std::vector<double> y;
  };
  const std::vector<want_case> cases{
      {1, dtype::i64, true, 0, 0, {1, 3, 6, 4, 9, 15}}, {0, dtype::i32, false, 0, 0, {1, 2, 3, 5, 7, 9}},
      {-1, dtype::i64, true, 1, 0, {0, 1, 3, 0, 4, 9}}, {-1, dtype::i64, false, 0, 1, {6, 5, 3, 15, 11, 6}},
      {-2, dtype::i32, true, 1, 1, {4, 5, 6, 0, 0, 0}},
  };
  for (dtype t : {dtype::i64, dtype::f32, dtype::i8})
    for (const auto& c : cases) {
      CAPTURE(to_string(t), c.axis, c.exclusive, c.reverse);
      graph g("cumsum");
      auto x = g.add_input("x", {2, 3}, t);
      auto ax =
          g.add_constant("axis", tensor(c.scalar ? shape{} : shape{1}, c.axis_type, {static_cast<double>(c.axis)}));
      g.set_output(g.add_op("CumSum", {x, ax}, {{"exclusive", c.exclusive}, {"reverse", c.reverse}}, "y"));
      CHECK(g.value("y").shape == shape{2, 3});
      CHECK(g.value("y").type == t);
      auto sys = test::make_system();
      session s{sys};
      CHECK(s.run(s.compile(g), {{"x", tensor({2, 3}, t, xv)}}).outputs.at("y").to_vector() == c.y);
    }
  graph g("bad");
  auto x = g.add_input("x", {2, 3}, dtype::i64);
  auto fed = g.add_input("fed_axis", {}, dtype::i64);
  expect_graph_error([&] { g.add_op("CumSum", {x, fed}, {}, "c1"); }, errc::not_supported, "c1", "fed_axis");
  auto far = g.add_constant("far", tensor({}, dtype::i64, {2}));
  expect_graph_error([&] { g.add_op("CumSum", {x, far}, {}, "c2"); }, errc::invalid_argument, "c2", "far");
  auto two = g.add_constant("two", tensor({2}, dtype::i64, {0, 1}));
  expect_graph_error([&] { g.add_op("CumSum", {x, two}, {}, "c3"); }, errc::invalid_shape, "c3", "two");
  auto fax = g.add_constant("fax", tensor({}, dtype::f32, {0}));
  expect_graph_error([&] { g.add_op("CumSum", {x, fax}, {}, "c4"); }, errc::invalid_dtype, "c4", "fax");
}

TEST_CASE("ReduceProd with axes as an attribute or an input, keepdims or not", "[graph][reduce]") {
  // x [2, 3] = [[1, 2, 3], [4, 5, 6]].
  const tensor xv({2, 3}, dtype::f32, {1, 2, 3, 4, 5, 6});
  const auto run_prod = [&](attributes attrs, const tensor* axes_in, shape want_shape) {
    graph g("prod");
    auto x = g.add_input("x", {2, 3}, dtype::f32);
    std::vector<std::string> ins{x};
    if (axes_in) ins.push_back(g.add_constant("axes", axes_in->clone()));
    g.set_output(g.add_op("ReduceProd", ins, std::move(attrs), "y"));
    CHECK(g.value("y").shape == want_shape);
    auto sys = test::make_system();
    session s{sys};
    return s.run(s.compile(g), {{"x", xv}}).outputs.at("y").to_vector();
  };
  CHECK(run_prod({{"axes", ints{1}}, {"keepdims", std::int64_t{0}}}, nullptr, shape{2}) == std::vector<double>{6, 120});
  CHECK(run_prod({{"axes", ints{0}}}, nullptr, shape{1, 3}) == std::vector<double>{4, 10, 18});
  CHECK(run_prod({}, nullptr, shape{1, 1}) == std::vector<double>{720});
  const tensor last({1}, dtype::i64, {-1});
  CHECK(run_prod({{"keepdims", std::int64_t{0}}}, &last, shape{2}) == std::vector<double>{6, 120});
  // noop_with_empty_axes without axes: the input, unreduced (onnx.ai ReduceProd, opset 18).
  CHECK(run_prod({{"noop_with_empty_axes", std::int64_t{1}}}, nullptr, shape{2, 3}) ==
        std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(is_supported_op("ReduceProd"));
  CHECK(is_supported_op("CumSum"));
}

namespace {

// The int64 elements of a run's output, exact past 2^53.
std::vector<std::int64_t> int_graph_i64(const tensor& t) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(t.elements()));
  std::memcpy(v.data(), t.data(), v.size() * sizeof(std::int64_t));
  return v;
}

}  // namespace

TEST_CASE("integer Relu and Clip run exactly; Clip's bounds constant, fed or absent", "[graph][int][clip]") {
  // numpy.maximum(x, 0) and numpy.clip(x, lo, hi), by hand.
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64}) {
    CAPTURE(to_string(t));
    graph g("relu");
    auto x = g.add_input("x", {4}, t);
    g.set_output(g.add_op("Relu", {x}, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    CHECK(s.run(s.compile(g), {{"x", tensor({4}, t, {-128, -1, 0, 127})}}).outputs.at("y").to_vector() ==
          std::vector<double>{0, 0, 0, 127});
  }
  const auto clip = [](dtype t, const std::vector<double>& xs, std::optional<double> lo, std::optional<double> hi,
                       bool fed) {
    graph g("clip");
    const auto n = static_cast<std::int64_t>(xs.size());
    auto x = g.add_input("x", {n}, t);
    std::vector<std::string> ins{x, {}, {}};
    // The fed tensors outlive the feeds, which refer to them.
    std::vector<tensor> held;
    held.reserve(3);
    held.emplace_back(shape{n}, t, xs);
    std::vector<feed> feeds{{"x", held.back()}};
    for (std::size_t i = 1; i <= 2; ++i) {
      const auto& b = i == 1 ? lo : hi;
      if (!b) continue;
      const std::string name = i == 1 ? "lo" : "hi";
      ins[i] = fed ? g.add_input(name, {}, t) : g.add_constant(name, tensor({}, t, {*b}));
      if (fed) feeds.push_back({name, held.emplace_back(shape{}, t, std::vector<double>{*b})});
    }
    while (!ins.empty() && ins.back().empty()) ins.pop_back();
    g.set_output(g.add_op("Clip", ins, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    return s.run(s.compile(g), feeds).outputs.at("y").to_vector();
  };
  const std::vector<double> xs{-100, -3, 0, 2, 5, 100};
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64})
    for (bool fed : {false, true}) {
      CAPTURE(to_string(t), fed);
      CHECK(clip(t, xs, -3.0, 4.0, fed) == std::vector<double>{-3, -3, 0, 2, 4, 4});
      CHECK(clip(t, xs, std::nullopt, 0.0, fed) == std::vector<double>{-100, -3, 0, 0, 0, 0});
      CHECK(clip(t, xs, 1.0, std::nullopt, fed) == std::vector<double>{1, 1, 1, 2, 5, 100});
      // min > max: every value becomes max, as numpy.clip's minimum(maximum(x, lo), hi) gives.
      CHECK(clip(t, xs, 7.0, 2.0, fed) == std::vector<double>(6, 2));
    }
  CHECK(clip(dtype::u8, {0, 9, 200, 255}, 10.0, 199.0, false) == std::vector<double>{10, 10, 199, 199});
  CHECK(clip(dtype::i32, xs, std::nullopt, std::nullopt, false) == xs);
  // int64 bounds past 2^53, where a float bound could not hold them: exact.
  constexpr std::int64_t big = (std::int64_t{1} << 60) + 1;
  graph g("clip64");
  auto x = g.add_input("x", {3}, dtype::i64);
  auto lo = g.add_constant("lo", test::ints_tensor({big}));
  g.set_output(g.add_op("Clip", {x, lo}, {}, "y"));
  auto sys = test::make_system();
  session s{sys};
  const auto r =
      s.run(s.compile(g), {{"x", test::ints_tensor({big - 1, big + 1, std::numeric_limits<std::int64_t>::max()})}});
  CHECK(int_graph_i64(r.outputs.at("y")) ==
        std::vector<std::int64_t>{big, big + 1, std::numeric_limits<std::int64_t>::max()});
  // A bound of another dtype is refused, naming it.
  auto f = g.add_constant("f", tensor({}, dtype::i32, {0}));
  expect_graph_error([&] { g.add_op("Clip", {x, f}, {}, "c"); }, errc::invalid_dtype, "c", "f");
}

TEST_CASE("integer ReduceSum, ReduceProd, ReduceMax, ReduceMin run exactly and wrap", "[graph][int][reduce]") {
  // x [2, 3] int8 = [[100, 100, -7], [-128, 1, 2]]; references by hand, wrapping as numpy's
  // int8 sum and prod do: 100 + 100 - 7 = 193 -> -63; 100 * 100 * -7 = -70000 -> -112.
  const std::vector<double> xv{100, 100, -7, -128, 1, 2};
  const auto reduce = [&](const char* op, dtype t, attributes attrs, const std::vector<double>& v) {
    graph g("reduce");
    auto x = g.add_input("x", {2, 3}, t);
    g.set_output(g.add_op(op, {x}, std::move(attrs), "y"));
    auto sys = test::make_system();
    session s{sys};
    return s.run(s.compile(g), {{"x", tensor({2, 3}, t, v)}}).outputs.at("y").to_vector();
  };
  const attributes rows{{"axes", ints{1}}, {"keepdims", std::int64_t{0}}};
  CHECK(reduce("ReduceSum", dtype::i8, rows, xv) == std::vector<double>{-63, -125});
  CHECK(reduce("ReduceSum", dtype::i32, rows, xv) == std::vector<double>{193, -125});
  CHECK(reduce("ReduceProd", dtype::i8, rows, xv) == std::vector<double>{-112, 0});  // -128 * 2 = -256 -> 0
  CHECK(reduce("ReduceProd", dtype::i64, rows, xv) == std::vector<double>{-70000, -256});
  CHECK(reduce("ReduceMax", dtype::i8, rows, xv) == std::vector<double>{100, 2});
  CHECK(reduce("ReduceMin", dtype::i32, {{"axes", ints{0}}}, xv) == std::vector<double>{-128, 1, -7});
  CHECK(reduce("ReduceSum", dtype::i64, {}, xv) == std::vector<double>{68});
  // uint8: 100 + 100 + 249 = 449 -> 193; 128 * 1 * 2 = 256 -> 0.
  const std::vector<double> uv{100, 100, 249, 128, 1, 2};
  CHECK(reduce("ReduceSum", dtype::u8, rows, uv) == std::vector<double>{193, 131});
  CHECK(reduce("ReduceProd", dtype::u8, rows, uv) == std::vector<double>{16 * 249 % 256, 0});
  // int64 past 2^53, and its wrap.
  constexpr auto mx = std::numeric_limits<std::int64_t>::max();
  graph g("reduce64");
  auto x = g.add_input("x", {3}, dtype::i64);
  g.set_output(g.add_op("ReduceSum", {x}, {{"keepdims", std::int64_t{0}}}, "s"));
  g.set_output(g.add_op("ReduceMax", {x}, {{"keepdims", std::int64_t{0}}}, "m"));
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"x", test::ints_tensor({mx - 5, 3, 4})}});
  CHECK(int_graph_i64(r.outputs.at("s")) == std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min() + 1});
  CHECK(int_graph_i64(r.outputs.at("m")) == std::vector<std::int64_t>{mx - 5});
}
