// Operators the graph computes as chains of its own (ReduceL2, PRelu, Mean, ...): available by name
// through add_op, as through ONNX import, all or nothing when refused.
#include <npurt/graph/graph.hpp>
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace npurt;

namespace {

void close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i])));
  }
}

const node* node_named(const graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n.name == name) return &n;
  return nullptr;
}

}  // namespace

TEST_CASE("operators computed as chains are added by name and compute ONNX's definitions", "[graph][composite]") {
  graph g("chains");
  const auto x = g.add_input("x", {2, 3}, dtype::f32);
  const auto lo = g.add_input("lo", {}, dtype::f32);  // a bound fed at run time
  const auto b = g.add_constant("b", tensor({3}, dtype::f32, {1, 2, 3}));
  const auto slope = g.add_constant("slope", tensor({3}, dtype::f32, {0.5, 0.25, 2}));
  g.set_output(g.add_op("ReduceL2", {x}, {{"axes", ints{1}}, {"keepdims", std::int64_t{0}}}, "l2"));
  g.set_output(g.add_op("ReduceLogSumExp", {x}, {{"axes", ints{0}}, {"keepdims", std::int64_t{1}}}, "lse"));
  g.set_output(g.add_op("Sum", {x, x, b}, {}, "sum"));
  g.set_output(g.add_op("Mean", {x, b}, {}, "mean"));
  g.set_output(g.add_op("PRelu", {x, slope}, {}, "prelu"));
  g.set_output(g.add_op("Cosh", {x}, {}, "cosh"));
  g.set_output(g.add_op("Clip", {x, lo}, {}, "clip"));
  // The output is the chain's last step, carrying the node's name.
  REQUIRE(node_named(g, "l2"));
  CHECK(node_named(g, "l2")->type == "Sqrt");
  CHECK(g.value("l2").shape == shape{2});
  CHECK(g.value("lse").shape == shape{1, 3});
  CHECK(node_named(g, "clip")->type == "Max");
  const auto sorted = supported_ops();
  CHECK(std::is_sorted(sorted.begin(), sorted.end()));
  for (std::string_view op : {"ReduceL2", "PRelu", "InstanceNormalization", "Relu"}) {
    CHECK(is_supported_op(op));
    CHECK(std::find(sorted.begin(), sorted.end(), op) != sorted.end());
  }

  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{3, -4, 0.5, -1, 2, -0.25};
  const double lo_v = -0.5;
  auto r = s.run(s.compile(g), {{"x", tensor({2, 3}, dtype::f32, xs)}, {"lo", tensor(shape{}, dtype::f32, {lo_v})}});
  const std::vector<double> bs{1, 2, 3}, sl{0.5, 0.25, 2};
  std::vector<double> l2(2), lse(3), sum(6), mean(6), prelu(6), cosh(6), clip(6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      const double v = xs[static_cast<std::size_t>(i * 3 + j)];
      const auto k = static_cast<std::size_t>(i * 3 + j), c = static_cast<std::size_t>(j);
      l2[static_cast<std::size_t>(i)] += v * v;
      sum[k] = 2 * v + bs[c];
      mean[k] = (v + bs[c]) / 2;
      prelu[k] = v > 0 ? v : sl[c] * v;
      cosh[k] = std::cosh(v);
      clip[k] = std::max(v, lo_v);
    }
  for (auto& v : l2) v = std::sqrt(v);
  for (std::size_t j = 0; j < 3; ++j) lse[j] = std::log(std::exp(xs[j]) + std::exp(xs[3 + j]));
  close(r.outputs.at("l2").to_vector(), l2);
  close(r.outputs.at("lse").to_vector(), lse);
  close(r.outputs.at("sum").to_vector(), sum);
  close(r.outputs.at("mean").to_vector(), mean);
  close(r.outputs.at("prelu").to_vector(), prelu);
  close(r.outputs.at("cosh").to_vector(), cosh);
  close(r.outputs.at("clip").to_vector(), clip);
}

TEST_CASE("a chain refused at add_op leaves the graph as it was", "[graph][composite][errors]") {
  graph g("refused");
  const auto x = g.add_input("x", {1, 2, 3}, dtype::f32);
  const auto wide = g.add_constant("wide", tensor({4, 2, 3}, dtype::f32, std::vector<double>(24, 0.5)));
  const std::size_t nodes = g.nodes().size();
  // The slope widens the output past X: refused, naming the slope.
  try {
    (void)g.add_op("PRelu", {x, wide}, {}, "prelu");
    FAIL("PRelu with a slope wider than X was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(e.tensor() == "wide");
  }
  CHECK(g.nodes().size() == nodes);
  CHECK_FALSE(g.find("prelu"));
  CHECK_FALSE(g.find("prelu/negative"));
  CHECK_FALSE(g.find("prelu/zero"));  // the chain's scalar constant went too
  CHECK_FALSE(g.constant("prelu/zero"));
  // The same names are free again.
  const auto slope = g.add_constant("slope", tensor({2, 1}, dtype::f32, {0.5, 2}));
  CHECK(g.add_op("PRelu", {x, slope}, {}, "prelu") == "prelu");
  CHECK(g.find("prelu/negative"));

  // A chain is built from its inputs' shapes: an input not added yet is refused, naming it.
  try {
    (void)g.add_op("ReduceL2", {"later"}, {}, "l2");
    FAIL("a chain on an input not added yet was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.tensor() == "later");
    CHECK(e.op() == "l2");
  }
  // A misspelt attribute is refused, naming the operator's own.
  try {
    (void)g.add_op("ReduceL2", {x}, {{"axis", std::int64_t{1}}}, "l2");
    FAIL("ReduceL2's misspelt attribute was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK(std::string(e.what()).find("axes") != std::string::npos);
  }
  // The reduction's own errors, through the chain: an axis past the rank.
  try {
    (void)g.add_op("ReduceLogSumExp", {x}, {{"axes", ints{5}}}, "lse");
    FAIL("an axis past the rank was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_argument); }
  CHECK_FALSE(g.find("lse"));
  CHECK_FALSE(g.find("lse/max_kept"));
  // Refused at the chain's second step (the ReduceSum after the squares): the first goes too.
  const std::size_t before_l2 = g.nodes().size();
  try {
    (void)g.add_op("ReduceL2", {x}, {{"axes", ints{5}}}, "l2");
    FAIL("an axis past the rank was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_argument); }
  CHECK(g.nodes().size() == before_l2);
  CHECK_FALSE(g.find("l2/square"));
  // A chain has one output.
  try {
    g.add_node("Tan", "tan", {x}, {"a", "b"});
    FAIL("Tan with two outputs was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_argument); }
  CHECK_FALSE(g.find("a"));
}

TEST_CASE("PRelu's slope that does not broadcast to X is refused naming the node, slope and both shapes",
          "[graph][composite][errors]") {
  // ONNX broadcasts PRelu's slope to X only (unidirectional): per channel of an NCHW X the slope
  // is [C,1,1]; one of another channel count, or one of the right size on the wrong axis, is not.
  graph g("prelu_slope");
  const auto x = g.add_input("x", {1, 3, 4, 4}, dtype::f32);
  struct bad {
    shape slope;
    std::string text;
  };
  for (const auto& [sh, text] : {bad{{5, 1, 1}, "[5,1,1]"}, bad{{3}, "[3]"}, bad{{2, 1, 3, 4, 4}, "[2,1,3,4,4]"}}) {
    INFO(text);
    const auto slope = g.add_constant(
        "slope" + text, tensor(sh, dtype::f32, std::vector<double>(static_cast<std::size_t>(sh.elements()), 0.5)));
    const std::size_t nodes = g.nodes().size();
    try {
      (void)g.add_op("PRelu", {x, slope}, {}, "act");
      FAIL("PRelu with slope " << text << " was accepted");
    } catch (const graph_error& e) {
      CHECK(e.code() == errc::invalid_shape);
      CHECK(e.op() == "act");
      CHECK(e.tensor() == slope);
      const std::string what = e.what();
      CHECK(what.find("PRelu 'act'") != std::string::npos);
      CHECK(what.find("slope '" + slope + "' of shape " + text) != std::string::npos);
      CHECK(what.find("X 'x' of shape [1,3,4,4]") != std::string::npos);
      CHECK(what.find("act/") == std::string::npos);  // no step of the chain
    }
    CHECK(g.nodes().size() == nodes);
  }
  // The shapes ONNX accepts: per channel, a scalar, one per element, one per column.
  for (const shape& sh : {shape{3, 1, 1}, shape{}, shape{1, 3, 4, 4}, shape{4}}) {
    const auto name = "ok" + shape_string(sh);
    const auto slope =
        g.add_constant(name, tensor(sh, dtype::f32, std::vector<double>(static_cast<std::size_t>(sh.elements()), 0.5)));
    CHECK(g.value(g.add_op("PRelu", {x, slope}, {}, "act" + name)).shape == shape{1, 3, 4, 4});
  }
}

TEST_CASE("Sinh, Cosh, Asinh and Acosh stay finite wherever their result is", "[graph][composite]") {
  // Float's largest value is about 3.4e38: cosh(89) is 2.2e38 though e^89 overflows; asinh and
  // acosh of 1e20 are about 46.7 though 1e20² overflows; near the top of the range they are
  // about 89.4.
  graph g("wide");
  const auto x = g.add_input("x", {6}, dtype::f32);
  const auto w = g.add_input("w", {5}, dtype::f32);
  g.set_output(g.add_op("Sinh", {x}, {}, "sinh"));
  g.set_output(g.add_op("Cosh", {x}, {}, "cosh"));
  g.set_output(g.add_op("Asinh", {w}, {}, "asinh"));
  g.set_output(g.add_op("Acosh", {w}, {}, "acosh"));
  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{89, -89, 89.4, 88.8, -5, 0.5};
  const double top = std::numeric_limits<float>::max();
  const std::vector<double> ws{1e20, 3e38, top, 1 + std::ldexp(1.0, -20), 2.5};
  auto r = s.run(s.compile(g), {{"x", tensor({6}, dtype::f32, xs)}, {"w", tensor({5}, dtype::f32, ws)}});
  const auto check = [](const std::vector<double>& got, const std::vector<double>& in, double (*f)(double)) {
    REQUIRE(got.size() == in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double want = f(static_cast<float>(in[i]));
      INFO("of " << in[i] << ": got " << got[i] << ", want " << want);
      CHECK(std::isfinite(got[i]));
      CHECK(std::abs(got[i] - want) <= 4e-6 * std::abs(want));
    }
  };
  check(r.outputs.at("sinh").to_vector(), xs, [](double v) { return std::sinh(v); });
  check(r.outputs.at("cosh").to_vector(), xs, [](double v) { return std::cosh(v); });
  check(r.outputs.at("asinh").to_vector(), ws, [](double v) { return std::asinh(v); });
  check(r.outputs.at("acosh").to_vector(), ws, [](double v) { return std::acosh(v); });
  // Negative and infinite arguments: asinh is odd and infinite at infinity; acosh is NaN below 1.
  graph g2("edges");
  const auto z = g2.add_input("z", {4}, dtype::f32);
  g2.set_output(g2.add_op("Asinh", {z}, {}, "asinh"));
  g2.set_output(g2.add_op("Acosh", {z}, {}, "acosh"));
  const double inf = std::numeric_limits<double>::infinity();
  auto r2 = s.run(s.compile(g2), {{"z", tensor({4}, dtype::f32, {-1e20, -inf, inf, 0.5})}});
  const auto as = r2.outputs.at("asinh").to_vector(), ac = r2.outputs.at("acosh").to_vector();
  CHECK(std::abs(as[0] - std::asinh(static_cast<double>(static_cast<float>(-1e20)))) <= 4e-6 * 47);
  CHECK(as[1] == -inf);
  CHECK(as[2] == inf);
  CHECK(ac[2] == inf);
  CHECK(std::isnan(ac[0]));
  CHECK(std::isnan(ac[3]));
}

TEST_CASE("Sinh, Asinh, Acosh, Atanh and Shrink keep their precision where a naive chain loses it",
          "[graph][composite]") {
  graph g("hyperbolic");
  const auto x = g.add_input("x", {8}, dtype::f32);
  const auto w = g.add_input("w", {4}, dtype::f32);  // acosh's domain, from 1
  g.set_output(g.add_op("Sinh", {x}, {}, "sinh"));
  g.set_output(g.add_op("Asinh", {x}, {}, "asinh"));
  g.set_output(g.add_op("Atanh", {x}, {}, "atanh"));
  g.set_output(g.add_op("Acosh", {w}, {}, "acosh"));
  g.set_output(g.add_op("Shrink", {x}, {{"lambd", 0.25}, {"bias", 0.125}}, "shrink"));
  g.set_output(g.add_op("Shrink", {x}, {}, "hard"));  // lambd 0.5, bias 0
  npurt::system sys = test::make_system();
  session s{sys};
  // 1e-4: exp(x) - exp(-x) in float keeps about two digits of sinh there.
  const std::vector<double> xs{1e-4, -3e-4, 0.3, -0.6, 0.25, -0.9, 1, -1};
  const std::vector<double> ws{1, 1.5, 10, 1000};
  auto r = s.run(s.compile(g), {{"x", tensor({8}, dtype::f32, xs)}, {"w", tensor({4}, dtype::f32, ws)}});
  std::vector<double> sinh, asinh, atanh, acosh, shrink, hard;
  for (double v : xs) {
    const double f = static_cast<float>(v);  // the input as the device holds it
    sinh.push_back(std::sinh(f));
    asinh.push_back(std::asinh(f));
    atanh.push_back(std::atanh(f));
    shrink.push_back(f > 0.25 ? f - 0.125 : f < -0.25 ? f + 0.125 : 0.0);
    hard.push_back(f > 0.5 || f < -0.5 ? f : 0.0);
  }
  for (double v : ws) acosh.push_back(std::acosh(v));
  close(r.outputs.at("sinh").to_vector(), sinh);
  close(r.outputs.at("asinh").to_vector(), asinh);
  // atanh(±1) is ±inf.
  auto atanh_got = r.outputs.at("atanh").to_vector();
  REQUIRE(atanh_got.size() == 8);
  CHECK(atanh_got[6] == std::numeric_limits<double>::infinity());
  CHECK(atanh_got[7] == -std::numeric_limits<double>::infinity());
  atanh_got.resize(6);
  atanh.resize(6);
  close(atanh_got, atanh);
  close(r.outputs.at("acosh").to_vector(), acosh);
  close(r.outputs.at("shrink").to_vector(), shrink);
  close(r.outputs.at("hard").to_vector(), hard);
  // Near 0 the absolute check above says little: each keeps its relative precision there.
  for (const char* out : {"sinh", "asinh", "atanh"}) {
    const auto got = r.outputs.at(out).to_vector();
    const auto& want = std::string(out) == "sinh" ? sinh : std::string(out) == "asinh" ? asinh : atanh;
    for (std::size_t i = 0; i < 2; ++i) {
      INFO(out << " of " << xs[i]);
      CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]));
    }
  }
  // Shrink's attributes are ONNX's: another is refused.
  try {
    (void)g.add_op("Shrink", {x}, {{"lambda", 0.5}}, "typo");
    FAIL("Shrink's misspelt attribute was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::not_supported); }
}

TEST_CASE("LayerNormalization with its Mean and InvStdDev outputs computes ONNX's statistics", "[graph][composite]") {
  // X [2, 2, 3] normalised over the last two axes (axis 1): each batch row's six values.
  const std::vector<double> xs{3, -4, 0.5, -1, 2, -0.25, 10, 11, 12, 13, 14, 15.5};
  const std::vector<double> scale{1, 2, 0.5, -1, 0.25, 3}, bias{0.5, 0, -1, 2, 0, 1};
  const double eps = 1e-3;
  std::vector<double> mean(2), inv(2), y(12);
  for (std::size_t n = 0; n < 2; ++n) {
    double m = 0, v = 0;
    for (std::size_t i = 0; i < 6; ++i) m += xs[n * 6 + i] / 6;
    for (std::size_t i = 0; i < 6; ++i) v += (xs[n * 6 + i] - m) * (xs[n * 6 + i] - m) / 6;
    mean[n] = m;
    inv[n] = 1 / std::sqrt(v + eps);
    for (std::size_t i = 0; i < 6; ++i) y[n * 6 + i] = (xs[n * 6 + i] - m) * inv[n] * scale[i] + bias[i];
  }
  for (const dtype type : {dtype::f32, dtype::f16}) {
    INFO(to_string(type));
    graph g("ln");
    const auto x = g.add_input("x", {2, 2, 3}, type);
    // Scale as X's trailing shape, B flat: both forms ONNX allows.
    const auto sc = g.add_constant("scale", tensor({2, 3}, type, scale));
    const auto b = g.add_constant("b", tensor({6}, type, bias));
    g.add_node("LayerNormalization", "ln", {x, sc, b}, {"y", "mean", "inv"},
               {{"axis", std::int64_t{1}}, {"epsilon", eps}});
    for (const char* o : {"y", "mean", "inv"}) g.set_output(o);
    CHECK(g.value("y").shape == shape{2, 2, 3});
    CHECK(g.value("y").type == type);
    // The statistics keep the reduced axes as 1, in the stash type (float) whatever X's type.
    CHECK(g.value("mean").shape == shape{2, 1, 1});
    CHECK(g.value("inv").shape == shape{2, 1, 1});
    CHECK(g.value("mean").type == dtype::f32);
    CHECK(g.value("inv").type == dtype::f32);
    // The node the user named writes Y.
    REQUIRE(node_named(g, "ln"));
    CHECK(node_named(g, "ln")->outputs == std::vector<std::string>{"y"});

    npurt::system sys = test::make_system();
    session s{sys};
    tensor xin({2, 2, 3}, type, xs);
    auto r = s.run(s.compile(g), {{"x", xin}});
    // Half precision: X, Scale and B are rounded to f16 on the way in and Y on the way out.
    const double tol = type == dtype::f32 ? 1e-5 : 4e-3;
    const auto near = [&](const tensor& got, const std::vector<double>& want) {
      REQUIRE(got.elements() == static_cast<std::int64_t>(want.size()));
      for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("element " << i);
        CHECK(std::abs(got.get(static_cast<std::int64_t>(i)) - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
      }
    };
    near(r.outputs.at("mean"), mean);
    near(r.outputs.at("inv"), inv);
    near(r.outputs.at("y"), y);
  }
}

TEST_CASE("LayerNormalization's statistics outputs are refused with what is wrong, leaving the graph as it was",
          "[graph][composite][errors]") {
  graph g("ln");
  const auto x = g.add_input("x", {2, 3}, dtype::f32);
  const auto sc = g.add_constant("scale", tensor({3}, dtype::f32, {1, 1, 1}));
  const std::size_t nodes = g.nodes().size();
  const auto refused = [&](const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                           const attributes& a) -> std::error_code {
    try {
      g.add_node("LayerNormalization", "ln", ins, outs, a);
    } catch (const graph_error& e) { return e.code(); }
    return {};
  };
  CHECK(refused({x, sc}, {"y", "m", "i", "extra"}, {}) == errc::invalid_argument);
  CHECK(refused({x, sc}, {"y", "m", "m"}, {}) == errc::invalid_argument);
  CHECK(refused({x, sc}, {"", "m"}, {}) == errc::invalid_argument);
  CHECK(refused({x, sc}, {"y", "m"}, {{"axis", std::int64_t{2}}}) == errc::invalid_argument);
  CHECK(refused({x, sc}, {"y", "m"}, {{"stash_type", std::int64_t{11}}}) == errc::not_supported);
  CHECK(refused({x, sc}, {"y", "m"}, {{"axes", ints{1}}}) == errc::not_supported);  // not an attribute of it
  const auto wrong = g.add_constant("wrong", tensor({4}, dtype::f32, {1, 1, 1, 1}));
  CHECK(refused({x, wrong}, {"y", "m"}, {}) == errc::invalid_shape);
  CHECK(g.nodes().size() == nodes);
  CHECK(!g.find("m"));
  CHECK(!g.find("y"));
  // Mean alone (InvStdDev left out) is a chain too, and then the names are free again.
  g.add_node("LayerNormalization", "ln", {x, sc}, {"y", "m"}, {});
  CHECK(g.value("m").shape == shape{2, 1});
}

TEST_CASE("DepthToSpace and SpaceToDepth move blocks as ONNX's index formulas say", "[graph][composite]") {
  constexpr std::int64_t n = 2, c = 8, h = 2, w = 3, b = 2;
  std::vector<double> xs(static_cast<std::size_t>(n * c * h * w));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i) * 0.5 - 7;
  const auto at = [&](std::int64_t in, std::int64_t ic, std::int64_t ih, std::int64_t iw) {
    return xs[static_cast<std::size_t>(((in * c + ic) * h + ih) * w + iw)];
  };
  // y[n, c', h·b + i, w·b + j] = x[n, (i·b + j)·C' + c', h, w] (DCR) or x[n, c'·b² + i·b + j, h, w] (CRD).
  constexpr std::int64_t co = c / (b * b);
  std::vector<double> dcr, crd;
  for (std::int64_t in = 0; in < n; ++in)
    for (std::int64_t oc = 0; oc < co; ++oc)
      for (std::int64_t oh = 0; oh < h * b; ++oh)
        for (std::int64_t ow = 0; ow < w * b; ++ow) {
          const std::int64_t i = oh % b, j = ow % b;
          dcr.push_back(at(in, (i * b + j) * co + oc, oh / b, ow / b));
          crd.push_back(at(in, oc * b * b + i * b + j, oh / b, ow / b));
        }
  graph g("blocks");
  const auto x = g.add_input("x", {n, c, h, w}, dtype::f32);
  const auto d = g.add_op("DepthToSpace", {x}, {{"blocksize", b}}, "dcr");
  g.set_output(d);
  g.set_output(g.add_op("DepthToSpace", {x}, {{"blocksize", b}, {"mode", std::string("CRD")}}, "crd"));
  // SpaceToDepth undoes DepthToSpace in DCR mode.
  g.set_output(g.add_op("SpaceToDepth", {d}, {{"blocksize", b}}, "back"));
  CHECK(g.value("dcr").shape == shape{n, co, h * b, w * b});
  CHECK(g.value("back").shape == shape{n, c, h, w});

  npurt::system sys = test::make_system();
  session s{sys};
  auto r = s.run(s.compile(g), {{"x", tensor({n, c, h, w}, dtype::f32, xs)}});
  CHECK(r.outputs.at("dcr").to_vector() == dcr);
  CHECK(r.outputs.at("crd").to_vector() == crd);
  CHECK(r.outputs.at("back").to_vector() == xs);
}

TEST_CASE("DepthToSpace and SpaceToDepth refuse what does not divide into blocks", "[graph][composite][errors]") {
  graph g("blocks");
  const auto x = g.add_input("x", {1, 8, 2, 3}, dtype::f32);
  const auto flat = g.add_input("flat", {8, 6}, dtype::f32);
  const std::size_t nodes = g.nodes().size();
  const auto code = [&](std::string_view type, const std::string& in, const attributes& a) -> std::error_code {
    try {
      (void)g.add_op(type, {in}, a, "y");
    } catch (const graph_error& e) { return e.code(); }
    return {};
  };
  CHECK(code("DepthToSpace", flat, {{"blocksize", std::int64_t{2}}}) == errc::invalid_shape);  // not 4-D
  CHECK(code("DepthToSpace", x, {{"blocksize", std::int64_t{3}}}) == errc::invalid_shape);     // 8 % 9
  CHECK(code("SpaceToDepth", x, {{"blocksize", std::int64_t{2}}}) == errc::invalid_shape);     // W = 3
  CHECK(code("DepthToSpace", x, {}) == errc::invalid_argument);                                // no blocksize
  CHECK(code("DepthToSpace", x, {{"blocksize", std::int64_t{0}}}) == errc::invalid_argument);
  CHECK(code("DepthToSpace", x, {{"blocksize", std::int64_t{2}}, {"mode", std::string("RDC")}}) ==
        errc::invalid_argument);
  CHECK(code("SpaceToDepth", x, {{"blocksize", std::int64_t{1}}, {"mode", std::string("DCR")}}) ==
        errc::not_supported);  // SpaceToDepth has no mode
  CHECK(g.nodes().size() == nodes);
  CHECK(!g.find("y"));
}

TEST_CASE("Hardmax marks the first largest element along its axis", "[graph][composite]") {
  // Ties (the first wins), negative values and a maximum in each position.
  const std::vector<double> xs{1, 3, 3, 0, -2, -1, -1, -5, 7, 0, 7, 7};
  for (const dtype type : {dtype::f32, dtype::f16}) {
    for (const std::int64_t axis : {std::int64_t{-1}, std::int64_t{0}}) {
      INFO(to_string(type) << " axis " << axis);
      graph g("hm");
      const auto x = g.add_input("x", {3, 4}, type);
      g.set_output(g.add_op("Hardmax", {x}, {{"axis", axis}}, "y"));
      CHECK(g.value("y").type == type);
      npurt::system sys = test::make_system();
      session s{sys};
      const auto got = s.run(s.compile(g), {{"x", tensor({3, 4}, type, xs)}}).outputs.at("y").to_vector();
      std::vector<double> want(12, 0.0);
      if (axis == -1) {
        for (std::size_t r = 0; r < 3; ++r) {
          std::size_t best = 0;
          for (std::size_t c = 1; c < 4; ++c)
            if (xs[r * 4 + c] > xs[r * 4 + best]) best = c;
          want[r * 4 + best] = 1;
        }
      } else {
        for (std::size_t c = 0; c < 4; ++c) {
          std::size_t best = 0;
          for (std::size_t r = 1; r < 3; ++r)
            if (xs[r * 4 + c] > xs[best * 4 + c]) best = r;
          want[best * 4 + c] = 1;
        }
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("Squeeze and Unsqueeze reshape by their axes, from an attribute or a constant input", "[graph][composite]") {
  graph g("sq");
  const auto x = g.add_input("x", {1, 3, 1, 2}, dtype::f32);
  g.set_output(g.add_op("Squeeze", {x}, {}, "all"));  // every dimension of 1
  g.set_output(g.add_op("Squeeze", {x, g.add_constant("ax", tensor({1}, dtype::i64, {-2}))}, {}, "one"));
  g.set_output(g.add_op("Unsqueeze", {x}, {{"axes", ints{5, 0}}}, "wide"));  // unsorted, output axes
  CHECK(g.value("all").shape == shape{3, 2});
  CHECK(g.value("one").shape == shape{1, 3, 2});
  CHECK(g.value("wide").shape == shape{1, 1, 3, 1, 2, 1});
  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{1, 2, 3, 4, 5, 6};
  const auto r = s.run(s.compile(g), {{"x", tensor({1, 3, 1, 2}, dtype::f32, xs)}});
  for (const char* o : {"all", "one", "wide"}) CHECK(r.outputs.at(o).to_vector() == xs);

  const auto code = [&](std::string_view type, const std::vector<std::string>& ins,
                        const attributes& a) -> std::error_code {
    try {
      (void)g.add_op(type, ins, a, "bad");
    } catch (const graph_error& e) { return e.code(); }
    return {};
  };
  const auto fed = g.add_input("fed_axes", {1}, dtype::i64);
  CHECK(code("Squeeze", {x, fed}, {}) == errc::not_supported);  // axes fed at run time
  CHECK(code("Squeeze", {x}, {{"axes", ints{1}}}) == errc::invalid_shape);  // 3 is not 1
  CHECK(code("Squeeze", {x}, {{"axes", ints{4}}}) == errc::invalid_argument);
  CHECK(code("Squeeze", {x}, {{"axes", ints{0, -4}}}) == errc::invalid_argument);  // one axis twice
  CHECK(code("Unsqueeze", {x}, {}) == errc::invalid_argument);                     // no axes
  CHECK(code("Unsqueeze", {x}, {{"axes", ints{0, 1, 2, 3, 4}}}) == errc::not_supported);  // rank 9
  CHECK(code("Unsqueeze", {x, "ax"}, {{"axes", ints{0}}}) == errc::invalid_argument);  // axes given twice
  CHECK(code("Hardmax", {x}, {{"axis", std::int64_t{4}}}) == errc::invalid_argument);
  CHECK(!g.find("bad"));
}

TEST_CASE("Gelu's exact form is 0.5 · x · (1 + erf(x / √2)); the tanh form stays one kernel",
          "[graph][composite][gelu]") {
  graph g("gelu");
  const auto x = g.add_input("x", {7}, dtype::f32);
  g.set_output(g.add_op("Gelu", {x}, {}, "exact"));
  g.set_output(g.add_op("Gelu", {x}, {{"approximate", std::string("tanh")}}, "tanh"));
  CHECK(node_named(g, "exact")->type == "Mul");
  CHECK(node_named(g, "tanh")->type == "Gelu");
  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{-3, -1, -0.25, 0, 0.5, 1.5, 4};
  const auto r = s.run(s.compile(g), {{"x", tensor({7}, dtype::f32, xs)}});
  std::vector<double> exact, tanh_form;
  for (double v : xs) {
    exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    const double k = std::sqrt(2.0 / 3.141592653589793);
    tanh_form.push_back(0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v))));
  }
  close(r.outputs.at("exact").to_vector(), exact);
  close(r.outputs.at("tanh").to_vector(), tanh_form);
  // The two forms differ by more than the tolerance somewhere: the test tells them apart.
  bool differ = false;
  for (std::size_t i = 0; i < xs.size(); ++i) differ = differ || std::abs(exact[i] - tanh_form[i]) > 1e-4;
  CHECK(differ);
  // Other modes and non-float inputs are typed errors; the graph is left as it was.
  const auto n = g.add_input("n", {3}, dtype::i32);
  const std::size_t nodes = g.nodes().size();
  try {
    (void)g.add_op("Gelu", {x}, {{"approximate", std::string("erf")}}, "bad");
    FAIL("approximate=erf was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_argument); }
  try {
    (void)g.add_op("Gelu", {n}, {}, "ints");
    FAIL("an int32 Gelu was accepted");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_dtype); }
  CHECK(g.nodes().size() == nodes);
  CHECK_FALSE(g.find("bad"));
}

TEST_CASE("a reduction with noop_with_empty_axes and no axes returns its input", "[graph][composite][reduce]") {
  // onnx.ai ReduceSum (opset 13) and the others (opset 18): with noop_with_empty_axes = 1 and
  // axes empty or absent, the input is not reduced; without the flag, every axis is.
  graph g("noop");
  const auto x = g.add_input("x", {2, 3}, dtype::f32);
  const auto none = g.add_constant("none", tensor(shape{0}, dtype::i64));
  g.set_output(g.add_op("ReduceSum", {x}, {{"noop_with_empty_axes", std::int64_t{1}}}, "sum_noop"));
  g.set_output(g.add_op("ReduceMax", {x, none}, {{"noop_with_empty_axes", std::int64_t{1}}}, "max_noop"));
  g.set_output(g.add_op("ReduceSum", {x, none}, {{"keepdims", std::int64_t{0}}}, "sum_all"));
  CHECK(node_named(g, "sum_noop")->type == "Identity");
  CHECK(g.value("sum_noop").shape == shape{2, 3});
  CHECK(g.value("max_noop").shape == shape{2, 3});
  CHECK(g.value("sum_all").shape == shape{});
  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{1, -2, 3.5, 4, 0.25, -6};
  const auto r = s.run(s.compile(g), {{"x", tensor({2, 3}, dtype::f32, xs)}});
  CHECK(r.outputs.at("sum_noop").to_vector() == xs);
  CHECK(r.outputs.at("max_noop").to_vector() == xs);
  CHECK(r.outputs.at("sum_all").to_vector() == std::vector<double>{0.75});
}

TEST_CASE("Conv over one spatial axis runs as the 2-D kernel with a height of 1", "[graph][composite][conv]") {
  // x: channel 0 = 1 2 3 4 5, channel 1 = 0 1 0 1 0; the taps of W are (1, -1) on channel 0 and
  // (2, 3) on channel 1; the bias is 10. Each output below is Σ taps · x at the window's positions.
  const std::vector<double> xs{1, 2, 3, 4, 5, 0, 1, 0, 1, 0};
  const auto run = [&](const std::vector<std::int64_t>& w_shape, const attributes& attrs, bool bias) {
    graph g("conv1d");
    const auto x = g.add_input("x", {1, 2, 5}, dtype::f32);
    std::vector<std::string> ins{x, g.add_constant("w", tensor(shape(w_shape), dtype::f32, {1, -1, 2, 3}))};
    if (bias)
      ins.push_back(g.add_constant(
          "b", tensor({w_shape[0]}, dtype::f32, std::vector<double>(static_cast<std::size_t>(w_shape[0]), 10))));
    g.set_output(g.add_op("Conv", ins, attrs, "y"));
    // The chain's last step is the node, named as the output; its steps name the operator.
    REQUIRE(g.origin("y") != nullptr);
    CHECK(g.origin("y")->type == "Conv");
    npurt::system sys = test::make_system();
    session s{sys};
    const auto c = s.compile(g);
    tensor in({1, 2, 5}, dtype::f32, xs);
    const run_result r = s.run(c, {{"x", in}});
    return std::pair{r.outputs.at("y").shape(), r.outputs.at("y").to_vector()};
  };
  // Stride 1, no pads: y[l] = x0[l] − x0[l+1] + 2·x1[l] + 3·x1[l+1] + 10.
  auto [s1, y1] = run({1, 2, 2}, {}, true);
  CHECK(s1 == shape{1, 1, 4});
  CHECK(y1 == std::vector<double>{12, 11, 12, 11});
  // Stride 2, pads 1 and 1, dilation 2: the padded rows are 0 1 2 3 4 5 0 and 0 0 1 0 1 0 0, the
  // taps 2 apart, the windows start at 0, 2 and 4.
  auto [s2, y2] = run({1, 2, 2}, {{"strides", ints{2}}, {"pads", ints{1, 1}}, {"dilations", ints{2}}}, true);
  CHECK(s2 == shape{1, 1, 3});
  CHECK(y2 == std::vector<double>{11, 13, 16});
  // Pads 1 and 0 (unequal: a Pad of L before the kernel): the rows 0 1 2 3 4 5 and 0 0 1 0 1 0.
  auto [s4, y4] = run({1, 2, 2}, {{"pads", ints{1, 0}}}, true);
  CHECK(s4 == shape{1, 1, 5});
  CHECK(y4 == std::vector<double>{9, 12, 11, 12, 11});
  // Two groups: channel 0 with (1, −1), channel 1 with (2, 3), each its own output, no bias.
  auto [s3, y3] = run({2, 1, 2}, {{"group", std::int64_t{2}}, {"kernel_shape", ints{2}}}, false);
  CHECK(s3 == shape{1, 2, 4});
  CHECK(y3 == std::vector<double>{-1, -1, -1, -1, 3, 2, 3, 2});
  // A per-axis attribute of another length than the one spatial axis is refused naming the node.
  graph g("bad");
  const auto x = g.add_input("x", {1, 2, 5}, dtype::f32);
  const auto w = g.add_constant("w", tensor({1, 2, 2}, dtype::f32, {1, -1, 2, 3}));
  test::expect_graph_error([&] { g.add_op("Conv", {x, w}, {{"strides", ints{1, 1}}}, "y"); }, errc::invalid_argument,
                           "y", "x");
  test::expect_graph_error([&] { g.add_op("Conv", {x, w}, {{"pads", ints{-1, 0}}}, "y"); }, errc::invalid_argument, "y",
                           "x");
  const auto w4 = g.add_constant("w4", tensor({1, 2, 1, 2}, dtype::f32, {1, -1, 2, 3}));
  test::expect_graph_error([&] { g.add_op("Conv", {x, w4}, {}, "z"); }, errc::invalid_shape, "z", "w4");
  CHECK(g.nodes().empty());  // a refused chain takes back its steps
}

TEST_CASE("Conv over three spatial axes sums 2-D convolutions over the depth taps", "[graph][composite][conv]") {
  // Along depth x = 1 2 4 and W's taps are 1 and 10, bias 100: y[od] = x[od·s + 0·d] + 10·x[od·s + d] + 100
  // over the depth-padded x.
  const auto run = [](const shape& xs, const std::vector<double>& xv, const shape& ws, const std::vector<double>& wv,
                      const attributes& attrs, bool bias) {
    graph g("conv3d");
    const auto x = g.add_input("x", xs, dtype::f32);
    std::vector<std::string> ins{x, g.add_constant("w", tensor(ws, dtype::f32, wv))};
    if (bias) ins.push_back(g.add_constant("b", tensor({ws[0]}, dtype::f32, {100})));
    g.set_output(g.add_op("Conv", ins, attrs, "y"));
    REQUIRE(g.origin("y") != nullptr);
    CHECK(g.origin("y")->type == "Conv");
    npurt::system sys = test::make_system();
    session s{sys};
    const auto c = s.compile(g);
    tensor in(xs, dtype::f32, xv);
    const run_result r = s.run(c, {{"x", in}});
    return std::pair{r.outputs.at("y").shape(), r.outputs.at("y").to_vector()};
  };
  const shape xs{1, 1, 3, 1, 1}, ws{1, 1, 2, 1, 1};
  const std::vector<double> xv{1, 2, 4}, wv{1, 10};
  auto [s1, y1] = run(xs, xv, ws, wv, {}, true);
  CHECK(s1 == shape{1, 1, 2, 1, 1});
  CHECK(y1 == std::vector<double>{121, 142});
  // Depth pads 1 and 1 (0 1 2 4 0), stride 2, dilation 2: windows at 0 and 2, taps 2 apart.
  auto [s2, y2] =
      run(xs, xv, ws, wv, {{"strides", ints{2, 1, 1}}, {"dilations", ints{2, 1, 1}}, {"pads", ints{1, 0, 0, 1, 0, 0}}},
          true);
  CHECK(s2 == shape{1, 1, 2, 1, 1});
  CHECK(y2 == std::vector<double>{120, 102});
  // SAME_UPPER pads the one missing depth at the end (1 2 4 0), SAME_LOWER at the start (0 1 2 4).
  auto [s3, y3] = run(xs, xv, ws, wv, {{"auto_pad", std::string("SAME_UPPER")}}, true);
  CHECK(s3 == shape{1, 1, 3, 1, 1});
  CHECK(y3 == std::vector<double>{121, 142, 104});
  auto [s4, y4] = run(xs, xv, ws, wv, {{"auto_pad", std::string("SAME_LOWER")}}, true);
  CHECK(y4 == std::vector<double>{110, 121, 142});
  // Two channels of 2 × 2 planes and a kernel of ones over one depth and the whole plane: each
  // output is the sum of one depth of both channels (x = 0 .. 15: 6 + 38 and 22 + 54).
  std::vector<double> iota16(16);
  for (std::size_t i = 0; i < iota16.size(); ++i) iota16[i] = static_cast<double>(i);
  auto [s5, y5] = run({1, 2, 2, 2, 2}, iota16, {1, 2, 1, 2, 2}, std::vector<double>(8, 1.0), {}, false);
  CHECK(s5 == shape{1, 1, 2, 1, 1});
  CHECK(y5 == std::vector<double>{44, 76});
  {
    // Weights fed at run time are sliced per tap by the chain; constant ones are cut at once, so
    // their chain slices only x (one Slice per tap).
    graph fed("fed");
    const auto x = fed.add_input("x", xs, dtype::f32);
    const auto w = fed.add_input("w", ws, dtype::f32);
    fed.set_output(fed.add_op("Conv", {x, w}, {}, "y"));
    npurt::system sys = test::make_system();
    session s{sys};
    const auto c = s.compile(fed);
    tensor xt(xs, dtype::f32, xv), wt(ws, dtype::f32, wv);
    CHECK(s.run(c, {{"x", xt}, {"w", wt}}).outputs.at("y").to_vector() == std::vector<double>{21, 42});
    graph fixed("fixed");
    fixed.set_output(fixed.add_op(
        "Conv", {fixed.add_input("x", xs, dtype::f32), fixed.add_constant("w", tensor(ws, dtype::f32, wv))}, {}, "y"));
    CHECK(std::count_if(fixed.nodes().begin(), fixed.nodes().end(), [](const node& n) { return n.type == "Slice"; }) ==
          2);
  }
  // W of another rank, or a per-axis attribute of another length, is refused naming the node.
  graph g("bad");
  const auto x = g.add_input("x", xs, dtype::f32);
  const auto w4 = g.add_constant("w4", tensor({1, 1, 2, 1}, dtype::f32, {1, 10}));
  test::expect_graph_error([&] { g.add_op("Conv", {x, w4}, {}, "y"); }, errc::invalid_shape, "y", "w4");
  const auto w = g.add_constant("w", tensor(ws, dtype::f32, wv));
  test::expect_graph_error([&] { g.add_op("Conv", {x, w}, {{"strides", ints{1, 1}}}, "y"); }, errc::invalid_argument,
                           "y", "x");
  // Values the depth arithmetic would overflow on are refused, not wrapped.
  test::expect_graph_error([&] { g.add_op("Conv", {x, w}, {{"dilations", ints{std::int64_t{1} << 62, 1, 1}}}, "y"); },
                           errc::invalid_argument, "y", "x");
  test::expect_graph_error(
      [&] { g.add_op("Conv", {x, w}, {{"pads", ints{0, 0, 0, std::int64_t{1} << 62, 0, 0}}}, "y"); },
      errc::invalid_argument, "y", "x");
  const auto deep = g.add_input("deep", {1, 1, std::int64_t{1} << 40, 1, 1}, dtype::f32);
  test::expect_graph_error([&] { g.add_op("Conv", {x, deep}, {}, "y"); }, errc::invalid_shape, "y", "deep");
  CHECK(g.nodes().empty());
}

TEST_CASE("Conv pads that differ at the two ends of an axis are a zero Pad before the kernel",
          "[graph][composite][conv]") {
  // A 1 × 1 × 1 × 5 row x = 1 2 3 4 5 and the taps (1, 10) along W: each output is
  // x[i] + 10·x[i + 1] over the padded row.
  const auto run = [](const shape& xs, const shape& ws, const attributes& attrs) {
    graph g("pads");
    const auto x = g.add_input("x", xs, dtype::f32);
    g.set_output(g.add_op("Conv", {x, g.add_constant("w", tensor(ws, dtype::f32, {1, 10}))}, attrs, "y"));
    npurt::system sys = test::make_system();
    session s{sys};
    const auto c = s.compile(g);
    tensor in(xs, dtype::f32, {1, 2, 3, 4, 5});
    const run_result r = s.run(c, {{"x", in}});
    return std::pair{r.outputs.at("y").shape(), r.outputs.at("y").to_vector()};
  };
  const shape x2{1, 1, 1, 5}, w2{1, 1, 1, 2};
  // Explicit pads 0 before and 1 after W: 1 2 3 4 5 0.
  auto [s1, y1] = run(x2, w2, {{"pads", ints{0, 0, 0, 1}}});
  CHECK(s1 == shape{1, 1, 1, 5});
  CHECK(y1 == std::vector<double>{21, 32, 43, 54, 5});
  // SAME_UPPER needs one pad in total, at the end (1 2 3 4 5 0); SAME_LOWER at the start
  // (0 1 2 3 4 5); with stride 2, ceil(5 / 2) = 3 outputs need a total of 1 as well.
  CHECK(run(x2, w2, {{"auto_pad", std::string("SAME_UPPER")}}).second == std::vector<double>{21, 32, 43, 54, 5});
  CHECK(run(x2, w2, {{"auto_pad", std::string("SAME_LOWER")}}).second == std::vector<double>{10, 21, 32, 43, 54});
  auto [s2, y2] = run(x2, w2, {{"auto_pad", std::string("SAME_UPPER")}, {"strides", ints{1, 2}}});
  CHECK(s2 == shape{1, 1, 1, 3});
  CHECK(y2 == std::vector<double>{21, 43, 5});
  // The same row as 1-D and as 3-D (D = H = 1).
  CHECK(run({1, 1, 5}, {1, 1, 2}, {{"auto_pad", std::string("SAME_UPPER")}}).second ==
        std::vector<double>{21, 32, 43, 54, 5});
  CHECK(run({1, 1, 1, 1, 5}, {1, 1, 1, 1, 2}, {{"pads", ints{0, 0, 1, 0, 0, 0}}}).second ==
        std::vector<double>{10, 21, 32, 43, 54});
  // Equal pads stay the kernel's own: no Pad step.
  graph g("equal");
  g.set_output(g.add_op("Conv",
                        {g.add_input("x", x2, dtype::f32), g.add_constant("w", tensor(w2, dtype::f32, {1, 10}))},
                        {{"pads", ints{0, 1, 0, 1}}}, "y"));
  REQUIRE(g.nodes().size() == 1);
  CHECK(g.nodes()[0].type == "Conv");
}

TEST_CASE("Conv's group check does not overflow on a hostile group", "[graph][composite][conv]") {
  // Zero input channels divide by any group; W's 2^40 channels times a group of 2^62 would
  // overflow int64. The check compares W's channels with C / group instead: 2^40 is not 0.
  test::expect_graph_error(
      [] {
        graph g("hostile group");
        g.add_op("Conv",
                 {g.add_input("x", {1, 0, 4, 4}, dtype::f32),
                  g.add_input("w", {0, std::int64_t{1} << 40, 1, 1}, dtype::f32)},
                 {{"group", std::int64_t{1} << 62}}, "conv");
      },
      errc::invalid_shape, "conv", "w");
}
