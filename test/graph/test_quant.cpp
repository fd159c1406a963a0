// QuantizeLinear and DequantizeLinear in graphs (onnx.ai/onnx/operators/onnx__QuantizeLinear.html,
// onnx__DequantizeLinear.html): per-tensor and per-axis round trips against references written
// here from the spec (x / scale in float32, ties to even, the zero point, clipping), an fp16
// session that keeps the quantized tensors integer, and the typed errors naming node and operand.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace npurt;
using test::expect_graph_error;

namespace {

// onnx.ai QuantizeLinear to uint8 or int8 of a float32 x: rint(x / scale) + zero_point, clipped.
double qdq_quantize(float x, float scale, double zp, dtype t) {
  const double lo = t == dtype::i8 ? -128 : 0, hi = t == dtype::i8 ? 127 : 255;
  return std::clamp(static_cast<double>(std::nearbyint(x / scale)) + zp, lo, hi);
}

}  // namespace

TEST_CASE("QuantizeLinear and DequantizeLinear round trip per tensor in fp32 and fp16 sessions", "[graph][quant]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  graph g("qdq");
  auto x = g.add_input("x", {2, 3, 4}, dtype::f32);
  auto scale = g.add_constant("scale", tensor({}, dtype::f32, {0.25}));
  auto zp = g.add_constant("zp", tensor({}, dtype::u8, {100}));
  auto q = g.add_op("QuantizeLinear", {x, scale, zp}, {}, "q");
  g.set_output(q);
  g.set_output(g.add_op("DequantizeLinear", {q, scale, zp}, {}, "dq"));
  // Eighths (exact in f16): x / 0.25 hits every tie k + 0.5, and +-40 saturates both ends.
  std::vector<double> xv;
  for (int i = 0; i < 24; ++i) xv.push_back((i - 12) * 0.375 + (i % 2 ? 0.125 : 0.0));
  xv[0] = -40;
  xv[23] = 40;
  for (const precision p : {precision::fp32, precision::fp16}) {
    CAPTURE(to_string(p));
    auto sys = test::make_system();
    session s{sys, {.precision = p}};
    const auto r = s.run(s.compile(g), {{"x", tensor({2, 3, 4}, dtype::f32, xv)}});
    const tensor& qt = r.outputs.at("q");
    const tensor& dq = r.outputs.at("dq");
    REQUIRE(qt.type() == dtype::u8);
    REQUIRE(dq.type() == dtype::f32);
    for (std::size_t i = 0; i < xv.size(); ++i) {
      CAPTURE(i, xv[i]);
      const double want = qdq_quantize(static_cast<float>(xv[i]), 0.25f, 100, dtype::u8);
      CHECK(qt.get_int(static_cast<std::int64_t>(i)) == static_cast<std::int64_t>(want));
      CHECK(dq.get(static_cast<std::int64_t>(i)) == (want - 100) * 0.25);
    }
    CHECK(qt.get_int(0) == 0);
    CHECK(qt.get_int(23) == 255);
  }
}

TEST_CASE("QuantizeLinear and DequantizeLinear per axis with scale and zero point fed at run time", "[graph][quant]") {
  graph g("per axis");
  auto x = g.add_input("x", {2, 3, 2}, dtype::f32);
  auto scale = g.add_input("scale", {3}, dtype::f32);
  auto zp = g.add_input("zp", {3}, dtype::i8);
  auto q = g.add_op("QuantizeLinear", {x, scale, zp}, {{"axis", std::int64_t{-2}}}, "q");
  g.set_output(q);
  g.set_output(g.add_op("DequantizeLinear", {q, scale, zp}, {{"axis", std::int64_t{1}}}, "dq"));
  const std::vector<double> xv = test::values(12, 5, 30.0);
  const std::vector<double> sv{0.5, 0.125, 2.0}, zv{-7, 0, 120};
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"x", tensor({2, 3, 2}, dtype::f32, xv)},
                                      {"scale", tensor({3}, dtype::f32, sv)},
                                      {"zp", tensor({3}, dtype::i8, zv)}});
  const tensor& qt = r.outputs.at("q");
  REQUIRE(qt.type() == dtype::i8);
  for (std::size_t i = 0; i < 12; ++i) {
    const std::size_t c = (i / 2) % 3;
    CAPTURE(i, c, xv[i]);
    const double want = qdq_quantize(static_cast<float>(xv[i]), static_cast<float>(sv[c]), zv[c], dtype::i8);
    CHECK(qt.get_int(static_cast<std::int64_t>(i)) == static_cast<std::int64_t>(want));
    CHECK(r.outputs.at("dq").get(static_cast<std::int64_t>(i)) == (want - zv[c]) * sv[c]);
  }
}

TEST_CASE("QuantizeLinear and DequantizeLinear refuse what they cannot compute, naming the operand",
          "[graph][quant][errors]") {
  const auto f32 = [](graph& g, const char* name, shape s) { return g.add_input(name, s, dtype::f32); };
  expect_graph_error(
      [&] {
        graph g("int x");
        g.add_op("QuantizeLinear", {g.add_input("x", {4}, dtype::i32), f32(g, "s", {})}, {}, "q");
      },
      errc::not_supported, "q", "x");
  expect_graph_error(
      [&] {
        graph g("int64 x");
        g.add_op("DequantizeLinear", {g.add_input("x", {4}, dtype::i64), f32(g, "s", {})}, {}, "dq");
      },
      errc::not_supported, "dq", "x");
  expect_graph_error(
      [&] {
        graph g("zero point type");
        g.add_op("DequantizeLinear",
                 {g.add_input("x", {4}, dtype::u8), f32(g, "s", {}), g.add_input("z", {}, dtype::i8)}, {}, "dq");
      },
      errc::invalid_dtype, "dq", "z");
  expect_graph_error(
      [&] {
        graph g("output_dtype");
        g.add_op("QuantizeLinear", {f32(g, "x", {4}), f32(g, "s", {}), g.add_input("z", {}, dtype::i8)},
                 {{"output_dtype", std::int64_t{2}}}, "q");
      },
      errc::invalid_dtype, "q", "z");
  expect_graph_error(
      [&] {
        graph g("scale type");
        g.add_op("QuantizeLinear", {f32(g, "x", {4}), g.add_input("s", {}, dtype::i32)}, {}, "q");
      },
      errc::invalid_dtype, "q", "s");
  expect_graph_error(
      [&] {
        graph g("scale length");
        g.add_op("QuantizeLinear", {f32(g, "x", {2, 3}), f32(g, "s", {2})}, {}, "q");  // axis 1 has 3
      },
      errc::invalid_shape, "q", "s");
  expect_graph_error(
      [&] {
        graph g("zero point shape");
        g.add_op("QuantizeLinear", {f32(g, "x", {2, 3}), f32(g, "s", {3}), g.add_input("z", {}, dtype::u8)}, {}, "q");
      },
      errc::invalid_shape, "q", "z");
  expect_graph_error(
      [&] {
        graph g("axis");
        g.add_op("QuantizeLinear", {f32(g, "x", {2, 3}), f32(g, "s", {3})}, {{"axis", std::int64_t{2}}}, "q");
      },
      errc::invalid_argument, "q", "x");
  expect_graph_error(
      [&] {
        graph g("blocked");
        g.add_op("QuantizeLinear", {f32(g, "x", {2, 4}), f32(g, "s", {2, 2})}, {{"block_size", std::int64_t{2}}}, "q");
      },
      errc::not_supported, "q", "s");
  expect_graph_error(
      [&] {
        graph g("2-D scale");
        g.add_op("DequantizeLinear", {g.add_input("x", {2, 4}, dtype::i8), f32(g, "s", {2, 4})}, {}, "dq");
      },
      errc::not_supported, "dq", "s");
}

TEST_CASE("QuantizeLinear lowers to one quantize kernel in a timing-only run", "[graph][quant][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {256, 256}, dtype::f32);
  g.set_output(g.add_op("QuantizeLinear", {x, g.add_constant("s", tensor({}, dtype::f32, {0.1}))}, {}, "y"));
  // x read, the uint8 y written.
  test::check_timing_only_movement(g, {256, 256}, dtype::f32, "y", {256, 256}, 256.0 * 256 * (4 + 1));
}

TEST_CASE("Round rounds halves to even; an integer input is not_supported naming it", "[graph][quant][round]") {
  graph g("round");
  auto x = g.add_input("x", {6}, dtype::f32);
  g.set_output(g.add_op("Round", {x}, {}, "y"));
  const std::vector<double> xv{0.5, 1.5, 2.5, -2.5, -0.6, 7.49};
  for (const precision p : {precision::fp32, precision::fp16}) {
    CAPTURE(to_string(p));
    auto sys = test::make_system();
    session s{sys, {.precision = p}};
    const auto r = s.run(s.compile(g), {{"x", tensor({6}, dtype::f32, xv)}});
    CHECK(r.outputs.at("y").to_vector() == std::vector<double>{0, 2, 2, -2, -1, 7});
  }
  expect_graph_error(
      [] {
        graph h("int round");
        h.add_op("Round", {h.add_input("x", {4}, dtype::i32)}, {}, "y");
      },
      errc::not_supported, "y", "x");
}

TEST_CASE("DynamicQuantizeLinear computes scale and zero point from the data's range", "[graph][quant][dynamic]") {
  // onnx.ai DynamicQuantizeLinear: the range [min(0, min x), max(0, max x)], scale = range / 255
  // (1 when every element is 0), zero point = rint(clip(-min / scale, 0, 255)), y as QuantizeLinear.
  const std::vector<std::vector<double>> cases{{0, 2, -3, -2.5, -1.0, -0.5, 1.5, 2.75},
                                               {1, 2.5, 3, 4, 5, 6, 7, 8},
                                               {-1, -2, -3, -4, -5, -6, -7, -8},
                                               {0, 0, 0, 0, 0, 0, 0, 0}};
  for (const auto& xv : cases) {
    graph g("dynamic");
    auto x = g.add_input("x", {2, 4}, dtype::f32);
    g.add_node("DynamicQuantizeLinear", "dq", {x}, {"y", "y_scale", "y_zero_point"});
    for (const char* o : {"y", "y_scale", "y_zero_point"}) g.set_output(o);
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"x", tensor({2, 4}, dtype::f32, xv)}});
    float mx = 0, mn = 0;
    for (const double v : xv) {
      mx = std::max(mx, static_cast<float>(v));
      mn = std::min(mn, static_cast<float>(v));
    }
    const float sc = mx == mn ? 1.0f : (mx - mn) / 255.0f;
    const double zp = std::nearbyint(std::clamp(static_cast<double>(-mn / sc), 0.0, 255.0));
    CAPTURE(xv[1], sc, zp);
    REQUIRE(r.outputs.at("y").type() == dtype::u8);
    REQUIRE(r.outputs.at("y_zero_point").type() == dtype::u8);
    CHECK(r.outputs.at("y_scale").get(0) == static_cast<double>(sc));
    CHECK(r.outputs.at("y_zero_point").get_int(0) == static_cast<std::int64_t>(zp));
    for (std::size_t i = 0; i < xv.size(); ++i)
      CHECK(r.outputs.at("y").get_int(static_cast<std::int64_t>(i)) ==
            static_cast<std::int64_t>(qdq_quantize(static_cast<float>(xv[i]), sc, zp, dtype::u8)));
  }
  expect_graph_error(
      [] {
        graph g("f16 x");
        g.add_node("DynamicQuantizeLinear", "dq", {g.add_input("x", {4}, dtype::f16)}, {"y"});
      },
      errc::not_supported, "dq", "x");
}

TEST_CASE("EyeLike writes ones on diagonal k in the dtype asked for", "[graph][quant][eyelike]") {
  for (const std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-2}, std::int64_t{5}}) {
    graph g("eye");
    auto x = g.add_input("x", {3, 4}, dtype::f32);
    g.set_output(g.add_op("EyeLike", {x}, {{"k", k}, {"dtype", std::int64_t{6}}}, "y"));
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"x", tensor({3, 4}, dtype::f32)}});
    const tensor& y = r.outputs.at("y");
    REQUIRE(y.type() == dtype::i32);
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 4; ++j) CHECK(y.get_int(i * 4 + j) == (j - i == k ? 1 : 0));
  }
  expect_graph_error(
      [] {
        graph g("eye rank");
        g.add_op("EyeLike", {g.add_input("x", {2, 2, 2}, dtype::f32)}, {}, "y");
      },
      errc::invalid_shape, "y", "x");
}

TEST_CASE("OneHot: negative indices wrap once, out-of-range ones give an all-off row", "[graph][quant][onehot]") {
  // onnx.ai OneHot with depth 4: -1 is 3, -4 is 0, 4 and -5 are outside [-4, 3].
  const std::vector<double> iv{0, 3, -1, -4, 4, -5};
  for (const std::int64_t axis : {std::int64_t{-1}, std::int64_t{0}, std::int64_t{1}}) {
    CAPTURE(axis);
    graph g("one hot");
    auto idx = g.add_input("i", {2, 3}, dtype::i64);
    auto depth = g.add_constant("depth", tensor({}, dtype::i64, {4}));
    auto values = g.add_constant("values", tensor({2}, dtype::f32, {-1.5, 7}));
    g.set_output(g.add_op("OneHot", {idx, depth, values}, {{"axis", axis}}, "y"));
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"i", tensor({2, 3}, dtype::i64, iv)}});
    const tensor& y = r.outputs.at("y");
    // Out shape: [2, 3] with 4 inserted at axis; element (a, b, j) in index order.
    const std::int64_t ax = axis < 0 ? axis + 3 : axis;
    shape want_shape{2, 3};
    want_shape = ax == 0 ? shape{4, 2, 3} : ax == 1 ? shape{2, 4, 3} : shape{2, 3, 4};
    REQUIRE(y.shape() == want_shape);
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < 3; ++b)
        for (std::int64_t j = 0; j < 4; ++j) {
          const double v = iv[static_cast<std::size_t>(a * 3 + b)];
          const double wrapped = v < 0 ? v + 4 : v;
          const double want = wrapped == static_cast<double>(j) ? 7 : -1.5;
          const std::int64_t at = ax == 0 ? (j * 2 + a) * 3 + b : ax == 1 ? (a * 4 + j) * 3 + b : (a * 3 + b) * 4 + j;
          CHECK(y.get(at) == want);
        }
  }
  expect_graph_error(
      [] {
        graph g("one hot depth");
        g.add_op("OneHot",
                 {g.add_input("i", {2}, dtype::i64), g.add_input("depth", {}, dtype::i64),
                  g.add_constant("values", tensor({2}, dtype::f32, {0, 1}))},
                 {}, "y");
      },
      errc::not_supported, "y", "depth");
  expect_graph_error(
      [] {
        graph g("one hot indices");
        g.add_op("OneHot",
                 {g.add_input("i", {2}, dtype::boolean), g.add_constant("depth", tensor({}, dtype::i64, {3})),
                  g.add_constant("values", tensor({2}, dtype::f32, {0, 1}))},
                 {}, "y");
      },
      errc::not_supported, "y", "i");
}

TEST_CASE("OneHot: float indices truncate toward zero, float depth too; NaN and infinities are off",
          "[graph][quant][onehot]") {
  // onnx.ai OneHot: indices of a non-integer type are cast to int64 (numpy's astype truncates
  // toward zero), depth likewise; then the integer rule: [-depth, -1] wraps once, anything
  // outside [-depth, depth - 1] is an all-off row. Depth 4.9 is 4.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> iv{0.9, 3.7, -0.5, -1.2, -3.9, -4.5, 4.0, nan, inf, -inf, 2.0, -4.0, 1e30, -5.2};
  const auto hot = [](double v) -> std::int64_t {  // the position lit, or -1 for an all-off row
    if (!std::isfinite(v)) return -1;
    const double t = std::trunc(v);
    if (t < -4 || t > 3) return -1;
    return static_cast<std::int64_t>(t < 0 ? t + 4 : t);
  };
  for (const dtype it : {dtype::f32, dtype::f16, dtype::i8, dtype::i32})
    for (const dtype dt : {dtype::f32, dtype::i64}) {
      CAPTURE(to_string(it), to_string(dt));
      std::vector<double> xs;
      for (double v : iv)  // the integer dtypes hold the values' truncations, NaN and infinities left out
        if (is_float(it) || (std::isfinite(v) && std::fabs(v) < 100)) xs.push_back(is_float(it) ? v : std::trunc(v));
      const auto m = static_cast<std::int64_t>(xs.size());
      graph g("one hot float");
      auto idx = g.add_input("i", {m}, it);
      auto depth = g.add_constant("depth", tensor({}, dt, {dt == dtype::f32 ? 4.9 : 4.0}));
      auto values = g.add_constant("values", tensor({2}, dtype::i32, {5, -2}));
      g.set_output(g.add_op("OneHot", {idx, depth, values}, {{"axis", std::int64_t{0}}}, "y"));
      auto sys = test::make_system();
      session s{sys};
      const auto r = s.run(s.compile(g), {{"i", tensor({m}, it, xs)}});
      const tensor& y = r.outputs.at("y");
      REQUIRE(y.shape() == shape{4, m});
      REQUIRE(y.type() == dtype::i32);
      for (std::int64_t k = 0; k < m; ++k)
        for (std::int64_t j = 0; j < 4; ++j) {
          CAPTURE(k, xs[static_cast<std::size_t>(k)], j);
          CHECK(y.get(j * m + k) == (hot(xs[static_cast<std::size_t>(k)]) == j ? -2 : 5));
        }
    }
}

TEST_CASE("BitShift LEFT and RIGHT on uint8 broadcast; other dtypes and directions are refused",
          "[graph][quant][bitshift]") {
  for (const char* dir : {"LEFT", "RIGHT"}) {
    CAPTURE(dir);
    graph g("shift");
    auto x = g.add_input("x", {4}, dtype::u8);
    auto s = g.add_constant("s", tensor({4}, dtype::u8, {0, 3, 7, 9}));
    g.set_output(g.add_op("BitShift", {x, s}, {{"direction", std::string(dir)}}, "y"));
    auto sys = test::make_system();
    session sess{sys, {.precision = precision::fp16}};
    const std::vector<double> xv{255, 37, 1, 200};
    const auto r = sess.run(sess.compile(g), {{"x", tensor({4}, dtype::u8, xv)}});
    REQUIRE(r.outputs.at("y").type() == dtype::u8);
    const unsigned sh[] = {0, 3, 7, 9};
    for (std::size_t i = 0; i < 4; ++i) {
      const auto v = static_cast<unsigned>(xv[i]);
      const unsigned want = sh[i] >= 8 ? 0u : std::string(dir) == "LEFT" ? (v << sh[i]) & 0xFFu : v >> sh[i];
      CHECK(r.outputs.at("y").get_int(static_cast<std::int64_t>(i)) == want);
    }
  }
  expect_graph_error(
      [] {
        graph g("signed");
        g.add_op("BitShift", {g.add_input("a", {2}, dtype::i32), g.add_input("b", {2}, dtype::i32)},
                 {{"direction", std::string("LEFT")}}, "y");
      },
      errc::not_supported, "y", "a");
  expect_graph_error(
      [] {
        graph g("direction");
        g.add_op("BitShift", {g.add_input("a", {2}, dtype::u8), g.add_input("b", {2}, dtype::u8)},
                 {{"direction", std::string("UP")}}, "y");
      },
      errc::invalid_argument, "y", "");
}

TEST_CASE("fp16 session: a Cast to an integer reads a float input as it is", "[graph][quant][onehot][fp16]") {
  // f16 holds every integer up to 2048 and then only even ones up to 4096: through f16, 3001
  // would be 3000 and 2049 would be 2048. A Cast out of the float types and OneHot's float
  // indices read the fed f32 values as they are, in every precision.
  const std::vector<double> iv{3001, 2049, 4095, -1, 7.9};
  for (const precision p : {precision::fp32, precision::fp16, precision::mixed}) {
    CAPTURE(to_string(p));
    graph g("exact cast");
    auto x = g.add_input("x", {5}, dtype::f32);
    g.set_output(g.add_op("Cast", {x}, {{"to", std::int64_t{7}}}, "ints"));  // INT64
    auto depth = g.add_constant("depth", tensor({}, dtype::i64, {4100}));
    auto values = g.add_constant("values", tensor({2}, dtype::f32, {0, 1}));
    g.set_output(g.add_op("OneHot", {x, depth, values}, {{"axis", std::int64_t{-1}}}, "hot"));
    auto sys = test::make_system();
    session s{sys, {.precision = p}};
    const auto r = s.run(s.compile(g), {{"x", tensor({5}, dtype::f32, iv)}});
    const tensor& ints = r.outputs.at("ints");
    REQUIRE(ints.type() == dtype::i64);
    CHECK(ints.get(0) == 3001);
    CHECK(ints.get(1) == 2049);
    CHECK(ints.get(2) == 4095);
    CHECK(ints.get(3) == -1);
    CHECK(ints.get(4) == 7);  // truncated toward zero
    const tensor& hot = r.outputs.at("hot");
    REQUIRE(hot.shape() == shape{5, 4100});
    const std::int64_t want[] = {3001, 2049, 4095, 4099, 7};  // -1 wraps to depth - 1
    for (std::int64_t row = 0; row < 5; ++row) {
      CAPTURE(row);
      CHECK(hot.get(row * 4100 + want[row]) == 1);
      double lit = 0;
      for (std::int64_t j = 0; j < 4100; ++j) lit += hot.get(row * 4100 + j);
      CHECK(lit == 1);
    }
  }
}
