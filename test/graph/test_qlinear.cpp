// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv in graphs (onnx.ai/onnx/operators/
// onnx__MatMulInteger.html, onnx__ConvInteger.html, onnx__QLinearMatMul.html, onnx__QLinearConv.html)
// against references written here from the spec and onnx/reference's NumPy arithmetic: operands
// widened to int32, zero points subtracted, exact int32 sums; the multiplier a_scale * b_scale /
// y_scale in float32, the int32 result times it in float64, plus y_zero_point, np.rint (ties to
// even), clipped to the output type. And the typed errors naming node and operand.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace npurt;
using test::expect_graph_error;

namespace {

// Deterministic int8 (-128..127) or uint8 (0..255) values.
std::vector<double> q_values(std::int64_t n, std::uint64_t seed, dtype t) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto byte = static_cast<int>((s >> 33) & 0xff);
    x = t == dtype::u8 ? byte : byte - 128;
  }
  return v;
}

// np.clip(np.rint(acc * multiplier + zp), lo, hi) with the product in float64.
double requant_ref(std::int64_t acc, float multiplier, double zp, dtype t) {
  const double lo = t == dtype::i8 ? -128 : 0, hi = t == dtype::i8 ? 127 : 255;
  return std::clamp(std::nearbyint(static_cast<double>(acc) * static_cast<double>(multiplier) + zp), lo, hi);
}

}  // namespace

TEST_CASE("MatMulInteger: batched, per-row and per-column zero points, int32 out", "[graph][qlinear]") {
  // A [2,3,4] uint8 with a_zero_point per row [3]; B [4,5] int8 with b_zero_point per column [5].
  const std::int64_t batch = 2, m = 3, k = 4, n = 5;
  graph g("mmi");
  const auto av = q_values(batch * m * k, 1, dtype::u8), bv = q_values(k * n, 2, dtype::i8);
  const auto zav = q_values(m, 3, dtype::u8), zbv = q_values(n, 4, dtype::i8);
  auto a = g.add_input("a", {batch, m, k}, dtype::u8);
  auto b = g.add_constant("b", tensor({k, n}, dtype::i8, bv));
  auto za = g.add_input("za", {m}, dtype::u8);
  auto zb = g.add_constant("zb", tensor({n}, dtype::i8, zbv));
  g.set_output(g.add_op("MatMulInteger", {a, b, za, zb}, {}, "y"));
  auto sys = test::make_system();
  session s{sys};
  const auto r =
      s.run(s.compile(g), {{"a", tensor({batch, m, k}, dtype::u8, av)}, {"za", tensor({m}, dtype::u8, zav)}});
  const tensor& y = r.outputs.at("y");
  REQUIRE(y.type() == dtype::i32);
  REQUIRE(y.shape() == shape{batch, m, n});
  for (std::int64_t e = 0; e < batch; ++e)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        std::int64_t acc = 0;
        for (std::int64_t q = 0; q < k; ++q)
          acc += static_cast<std::int64_t>(av[static_cast<std::size_t>((e * m + i) * k + q)] -
                                           zav[static_cast<std::size_t>(i)]) *
                 static_cast<std::int64_t>(bv[static_cast<std::size_t>(q * n + j)] - zbv[static_cast<std::size_t>(j)]);
        CHECK(y.get_int((e * m + i) * n + j) == acc);
      }
}

TEST_CASE("QLinearMatMul requantizes with ties to even and saturates, per-column b_scale", "[graph][qlinear]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  const std::int64_t m = 4, k = 6, n = 3;
  for (const dtype out : {dtype::u8, dtype::i8}) {
    CAPTURE(to_string(out));
    graph g("qlmm");
    const auto av = q_values(m * k, 5, dtype::u8), bv = q_values(k * n, 6, dtype::i8);
    const float a_scale = 0.0625f, y_scale = 0.75f;
    const std::vector<double> b_scale{0.03125, 0.5, 0.0078125};
    const double azp = 120, bzp = -3, yzp = out == dtype::u8 ? 128 : -5;
    auto a = g.add_input("a", {m, k}, dtype::u8);
    auto as = g.add_constant("as", tensor({}, dtype::f32, {a_scale}));
    auto az = g.add_constant("az", tensor({}, dtype::u8, {azp}));
    auto b = g.add_input("b", {k, n}, dtype::i8);
    auto bs = g.add_input("bs", {n}, dtype::f32);
    auto bz = g.add_constant("bz", tensor({}, dtype::i8, {bzp}));
    auto ys = g.add_constant("ys", tensor({}, dtype::f32, {y_scale}));
    auto yz = g.add_constant("yz", tensor({}, out, {yzp}));
    g.set_output(g.add_op("QLinearMatMul", {a, as, az, b, bs, bz, ys, yz}, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"a", tensor({m, k}, dtype::u8, av)},
                                        {"b", tensor({k, n}, dtype::i8, bv)},
                                        {"bs", tensor({n}, dtype::f32, b_scale)}});
    const tensor& y = r.outputs.at("y");
    REQUIRE(y.type() == out);
    int low = 0, high = 0;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        std::int64_t acc = 0;
        for (std::int64_t q = 0; q < k; ++q)
          acc += static_cast<std::int64_t>(av[static_cast<std::size_t>(i * k + q)] - azp) *
                 static_cast<std::int64_t>(bv[static_cast<std::size_t>(q * n + j)] - bzp);
        // float32 a_scale * b_scale, then / y_scale, in float32 as NumPy computes float32 arrays.
        const float mult = a_scale * static_cast<float>(b_scale[static_cast<std::size_t>(j)]) / y_scale;
        const double want = requant_ref(acc, mult, yzp, out);
        CAPTURE(i, j, acc);
        CHECK(y.get(i * n + j) == want);
        low += want == (out == dtype::u8 ? 0 : -128);
        high += want == (out == dtype::u8 ? 255 : 127);
      }
    // The data reaches past at least one end of the range: saturation is exercised.
    CHECK(low + high > 0);
  }
}

TEST_CASE("QLinearConv: int32 bias, per-channel w_scale and w_zero_point, pads", "[graph][qlinear]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  const shape xs{1, 2, 5, 5}, ws{3, 2, 3, 3};
  const std::int64_t ho = 5, wo = 5;  // pads 1, stride 1
  graph g("qlconv");
  const auto xv = q_values(xs.elements(), 7, dtype::u8), wv = q_values(ws.elements(), 8, dtype::i8);
  const std::vector<double> w_scale{0.01, 0.02, 0.005}, w_zp{1, -2, 0}, bias{1000, -20000, 7};
  const float x_scale = 0.05f, y_scale = 0.3f;
  const double xzp = 100, yzp = 90;
  auto x = g.add_input("x", xs, dtype::u8);
  auto xsc = g.add_constant("xs", tensor({}, dtype::f32, {x_scale}));
  auto xz = g.add_constant("xz", tensor({}, dtype::u8, {xzp}));
  auto w = g.add_constant("w", tensor(ws, dtype::i8, wv));
  auto wsc = g.add_constant("ws", tensor({3}, dtype::f32, w_scale));
  auto wz = g.add_constant("wz", tensor({3}, dtype::i8, w_zp));
  auto ysc = g.add_constant("ys", tensor({}, dtype::f32, {y_scale}));
  auto yz = g.add_constant("yz", tensor({}, dtype::u8, {yzp}));
  auto bb = g.add_constant("b", tensor({3}, dtype::i32, bias));
  g.set_output(g.add_op("QLinearConv", {x, xsc, xz, w, wsc, wz, ysc, yz, bb},
                        {{"pads", ints{1, 1, 1, 1}}, {"kernel_shape", ints{3, 3}}}, "y"));
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"x", tensor(xs, dtype::u8, xv)}});
  const tensor& y = r.outputs.at("y");
  REQUIRE(y.type() == dtype::u8);
  REQUIRE(y.shape() == shape{1, 3, ho, wo});
  for (std::int64_t o = 0; o < 3; ++o)
    for (std::int64_t i = 0; i < ho; ++i)
      for (std::int64_t j = 0; j < wo; ++j) {
        std::int64_t acc = static_cast<std::int64_t>(bias[static_cast<std::size_t>(o)]);
        for (std::int64_t c = 0; c < 2; ++c)
          for (std::int64_t u = 0; u < 3; ++u)
            for (std::int64_t v = 0; v < 3; ++v) {
              const std::int64_t yy = i - 1 + u, xx = j - 1 + v;
              if (yy < 0 || yy >= 5 || xx < 0 || xx >= 5) continue;  // X - x_zero_point padded with 0
              acc += static_cast<std::int64_t>(xv[static_cast<std::size_t>((c * 5 + yy) * 5 + xx)] - xzp) *
                     static_cast<std::int64_t>(wv[static_cast<std::size_t>(((o * 2 + c) * 3 + u) * 3 + v)] -
                                               w_zp[static_cast<std::size_t>(o)]);
            }
        const float mult = x_scale * static_cast<float>(w_scale[static_cast<std::size_t>(o)]) / y_scale;
        CAPTURE(o, i, j, acc);
        CHECK(y.get((o * ho + i) * wo + j) == requant_ref(acc, mult, yzp, dtype::u8));
      }
}

TEST_CASE("QLinearConv and ConvInteger with unequal pads at the two ends of an axis", "[graph][qlinear]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  // The reference convolution of (x - xzp) and (w - wzp) over [1, 2, 6, 6] and [3, 2, 3, 3], stride
  // 2, with `top`/`left` rows and columns of padding before and the rest after: a padded element
  // is x_zero_point, which contributes nothing.
  const shape xs{1, 2, 6, 6}, ws{3, 2, 3, 3};
  const auto xv = q_values(xs.elements(), 11, dtype::u8), wv = q_values(ws.elements(), 12, dtype::i8);
  const double xzp = 100, wzp = -3;
  const auto conv_ref = [&](std::int64_t o, std::int64_t i, std::int64_t j, std::int64_t top, std::int64_t left) {
    std::int64_t acc = 0;
    for (std::int64_t c = 0; c < 2; ++c)
      for (std::int64_t u = 0; u < 3; ++u)
        for (std::int64_t v = 0; v < 3; ++v) {
          const std::int64_t yy = 2 * i - top + u, xx = 2 * j - left + v;
          if (yy < 0 || yy >= 6 || xx < 0 || xx >= 6) continue;
          acc += static_cast<std::int64_t>(xv[static_cast<std::size_t>((c * 6 + yy) * 6 + xx)] - xzp) *
                 static_cast<std::int64_t>(wv[static_cast<std::size_t>(((o * 2 + c) * 3 + u) * 3 + v)] - wzp);
        }
    return acc;
  };
  SECTION("QLinearConv, auto_pad SAME_UPPER: no pad before, one after each axis") {
    // out = ceil(6 / 2) = 3 per axis; total pad (3 - 1) * 2 + 3 - 6 = 1, the odd one at the end.
    graph g("qlconv same");
    const float x_scale = 0.05f, w_scale = 0.02f, y_scale = 0.4f;
    const double yzp = 120;
    auto x = g.add_input("x", xs, dtype::u8);
    auto xsc = g.add_constant("xs", tensor({}, dtype::f32, {x_scale}));
    auto xz = g.add_constant("xz", tensor({}, dtype::u8, {xzp}));
    auto w = g.add_constant("w", tensor(ws, dtype::i8, wv));
    auto wsc = g.add_constant("ws", tensor({}, dtype::f32, {w_scale}));
    auto wz = g.add_constant("wz", tensor({}, dtype::i8, {wzp}));
    auto ysc = g.add_constant("ys", tensor({}, dtype::f32, {y_scale}));
    auto yz = g.add_constant("yz", tensor({}, dtype::u8, {yzp}));
    g.set_output(g.add_op("QLinearConv", {x, xsc, xz, w, wsc, wz, ysc, yz},
                          {{"auto_pad", std::string("SAME_UPPER")}, {"strides", ints{2, 2}}}, "y"));
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"x", tensor(xs, dtype::u8, xv)}});
    const tensor& y = r.outputs.at("y");
    REQUIRE(y.type() == dtype::u8);
    REQUIRE(y.shape() == shape{1, 3, 3, 3});
    const float mult = x_scale * w_scale / y_scale;
    for (std::int64_t o = 0; o < 3; ++o)
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 3; ++j) {
          const std::int64_t acc = conv_ref(o, i, j, 0, 0);
          CAPTURE(o, i, j, acc);
          CHECK(y.get((o * 3 + i) * 3 + j) == requant_ref(acc, mult, yzp, dtype::u8));
        }
  }
  SECTION("ConvInteger, explicit pads: two rows before, none after; none before, one column after") {
    // Rows: (6 + 2 - 3) / 2 + 1 = 3; columns: (6 + 1 - 3) / 2 + 1 = 3.
    graph g("convinteger pads");
    auto x = g.add_input("x", xs, dtype::u8);
    auto w = g.add_constant("w", tensor(ws, dtype::i8, wv));
    auto xz = g.add_constant("xz", tensor({1}, dtype::u8, {xzp}));
    auto wz = g.add_constant("wz", tensor({}, dtype::i8, {wzp}));
    g.set_output(g.add_op("ConvInteger", {x, w, xz, wz}, {{"pads", ints{2, 0, 0, 1}}, {"strides", ints{2, 2}}}, "y"));
    auto sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"x", tensor(xs, dtype::u8, xv)}});
    const tensor& y = r.outputs.at("y");
    REQUIRE(y.type() == dtype::i32);
    REQUIRE(y.shape() == shape{1, 3, 3, 3});
    for (std::int64_t o = 0; o < 3; ++o)
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 3; ++j) {
          CAPTURE(o, i, j);
          CHECK(y.get_int((o * 3 + i) * 3 + j) == conv_ref(o, i, j, 2, 0));
        }
  }
  SECTION("a fed x_zero_point cannot fill the border: refused, naming it") {
    expect_graph_error(
        [&] {
          graph g("fed zero point");
          g.add_op("ConvInteger",
                   {g.add_input("x", xs, dtype::u8), g.add_input("w", ws, dtype::i8), g.add_input("zx", {}, dtype::u8)},
                   {{"pads", ints{1, 1, 0, 0}}}, "conv");
        },
        errc::not_supported, "conv", "zx");
  }
}

TEST_CASE("MatMulInteger, ConvInteger and the QLinear operators refuse what they cannot compute, naming the operand",
          "[graph][qlinear][errors]") {
  const auto in = [](graph& g, const char* name, shape s, dtype t) { return g.add_input(name, s, t); };
  expect_graph_error(
      [&] {
        graph g("float a");
        g.add_op("MatMulInteger", {in(g, "a", {2, 3}, dtype::f32), in(g, "b", {3, 2}, dtype::u8)}, {}, "mm");
      },
      errc::not_supported, "mm", "a");
  expect_graph_error(
      [&] {
        graph g("zero point dtype");
        g.add_op("MatMulInteger",
                 {in(g, "a", {2, 3}, dtype::u8), in(g, "b", {3, 2}, dtype::u8), in(g, "za", {}, dtype::i8)}, {}, "mm");
      },
      errc::invalid_dtype, "mm", "za");
  expect_graph_error(
      [&] {
        graph g("zero point shape");
        g.add_op("MatMulInteger",
                 {in(g, "a", {2, 3}, dtype::u8), in(g, "b", {3, 2}, dtype::u8), {}, in(g, "zb", {3}, dtype::u8)}, {},
                 "mm");
      },
      errc::invalid_shape, "mm", "zb");
  expect_graph_error(
      [&] {
        graph g("inner");
        g.add_op("MatMulInteger", {in(g, "a", {2, 3}, dtype::u8), in(g, "b", {4, 2}, dtype::u8)}, {}, "mm");
      },
      errc::invalid_shape, "mm", "b");
  expect_graph_error(
      [&] {
        graph g("x zero point per channel");
        g.add_op(
            "ConvInteger",
            {in(g, "x", {1, 2, 4, 4}, dtype::u8), in(g, "w", {3, 2, 2, 2}, dtype::u8), in(g, "zx", {2}, dtype::u8)}, {},
            "conv");
      },
      errc::invalid_shape, "conv", "zx");
  expect_graph_error(
      [&] {
        graph g("3-D conv");
        g.add_op("ConvInteger", {in(g, "x", {1, 2, 4, 4, 4}, dtype::u8), in(g, "w", {3, 2, 2, 2, 2}, dtype::u8)}, {},
                 "conv");
      },
      errc::not_supported, "conv", "x");
  const auto qlmm = [&](graph& g, shape a_scale, shape b_scale) {
    const auto f = [&](const char* name, shape s) { return in(g, name, s, dtype::f32); };
    g.add_op(
        "QLinearMatMul",
        {in(g, "a", {2, 3}, dtype::u8), f("as", a_scale), in(g, "az", {}, dtype::u8), in(g, "b", {3, 4}, dtype::u8),
         f("bs", b_scale), in(g, "bz", {}, dtype::u8), f("ys", {}), in(g, "yz", {}, dtype::u8)},
        {}, "qmm");
  };
  expect_graph_error(
      [&] {
        graph g("per row and per column");
        qlmm(g, {2}, {4});
      },
      errc::not_supported, "qmm", "as");
  expect_graph_error(
      [&] {
        graph g("scale length");
        qlmm(g, {}, {3});
      },
      errc::invalid_shape, "qmm", "bs");
  expect_graph_error(
      [&] {
        graph g("bias dtype");
        const auto f = [&](const char* name, shape s) { return in(g, name, s, dtype::f32); };
        g.add_op("QLinearConv",
                 {in(g, "x", {1, 2, 4, 4}, dtype::u8), f("xs", {}), in(g, "xz", {}, dtype::u8),
                  in(g, "w", {3, 2, 2, 2}, dtype::u8), f("ws", {}), in(g, "wz", {}, dtype::u8), f("ys", {}),
                  in(g, "yz", {}, dtype::u8), f("b", {3})},
                 {}, "qconv");
      },
      errc::invalid_dtype, "qconv", "b");
}

TEST_CASE("Conv and ConvInteger refuse pads past the kernels' 32-bit windows, naming the node", "[graph][qlinear]") {
  // Unequal pads make a Pad step first: a pad of 2^40 must be refused before it, as the node's,
  // not as an internal step's allocation of terabytes.
  for (const char* op : {"Conv", "ConvInteger"}) {
    for (const std::int64_t p : {std::int64_t{1} << 31, std::int64_t{1} << 40, std::int64_t{INT64_MAX}}) {
      CAPTURE(op, p);
      const dtype t = std::string(op) == "Conv" ? dtype::f32 : dtype::u8;
      expect_graph_error(
          [&] {
            graph g("hostile pads");
            g.add_op(op, {g.add_input("x", {1, 1, 4, 4}, t), g.add_input("w", {1, 1, 2, 2}, t)},
                     {{"pads", ints{0, 0, p, 0}}}, "conv");
          },
          errc::invalid_argument, "conv", "x");
    }
  }
  // Equal pads go to the node itself, whose output extent adds two of them (2^62 twice overflows).
  for (const char* op : {"Conv", "ConvInteger", "MaxPool"}) {
    CAPTURE(op);
    const dtype t = std::string(op) == "ConvInteger" ? dtype::u8 : dtype::f32;
    const std::int64_t p = std::int64_t{1} << 62;
    expect_graph_error(
        [&] {
          graph g("hostile equal pads");
          std::vector<std::string> ins{g.add_input("x", {1, 1, 4, 4}, t)};
          if (std::string(op) != "MaxPool") ins.push_back(g.add_input("w", {1, 1, 2, 2}, t));
          g.add_op(op, ins, {{"pads", ints{p, p, p, p}}, {"kernel_shape", ints{2, 2}}}, "conv");
        },
        errc::invalid_argument, "conv", "x");
  }
  // One spatial axis: the chain's own Pad.
  expect_graph_error(
      [] {
        graph g("hostile 1-D pads");
        g.add_op("Conv", {g.add_input("x", {1, 1, 4}, dtype::f32), g.add_input("w", {1, 1, 2}, dtype::f32)},
                 {{"pads", ints{std::int64_t{1} << 40, 0}}}, "conv");
      },
      errc::invalid_argument, "conv", "x");
}
