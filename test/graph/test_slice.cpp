// Slice and Split (onnx.ai/onnx/operators/onnx__Slice.html, onnx__Split.html): inference with
// ONNX's clamping rules, values through compiled runs, the typed errors, and the passes a graph
// goes through (fusion, precision, recomputation, timing-only runs).
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::ints_tensor;
using test::iota;

constexpr std::int64_t int_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int_min = std::numeric_limits<std::int64_t>::min();

struct slice_args {
  std::vector<std::int64_t> starts, ends, axes, steps;
};

// One Slice of x (fed, values 0, 1, 2, ...) with constant index inputs; its output's values.
std::string add_slice(graph& g, const std::string& x, const slice_args& a, const std::string& name,
                      dtype index_type = dtype::i64) {
  std::vector<std::string> ins{x, g.add_constant(name + "/starts", ints_tensor(a.starts, index_type)),
                               g.add_constant(name + "/ends", ints_tensor(a.ends, index_type))};
  ins.push_back(a.axes.empty() ? std::string() : g.add_constant(name + "/axes", ints_tensor(a.axes, index_type)));
  if (!a.steps.empty()) ins.push_back(g.add_constant(name + "/steps", ints_tensor(a.steps, index_type)));
  return g.add_op("Slice", ins, {}, name);
}

std::vector<double> run_slice(const shape& xs, const slice_args& a, shape& out, int level = 0,
                              dtype index_type = dtype::i64) {
  graph g("slice");
  auto x = g.add_input("x", xs, dtype::f32);
  g.set_output(add_slice(g, x, a, "s", index_type));
  out = g.value("s").shape;
  auto sys = test::make_system();
  session s{sys};
  const tensor xv(xs, dtype::f32, iota(xs.elements()));
  return s.run(s.compile(g, {.optimization_level = level}), {{"x", xv}}).outputs.at("s").to_vector();
}

using test::expect_graph_error;

}  // namespace

TEST_CASE("Slice computes ONNX's windows: negative indices, clamped bounds, backward steps", "[graph][slice]") {
  // x is [2,4] holding 0..7 (ONNX's examples use 1..8: each value here is one less).
  struct slice_case {
    std::string what;
    slice_args a;
    shape want_shape;
    std::vector<double> want;
  };
  const slice_case cases[] = {
      {"ONNX's example 1", {{1, 0}, {2, 3}, {0, 1}, {1, 2}}, {1, 2}, {4, 6}},
      {"ONNX's example 2: an end past the dimension clamps", {{0, 1}, {-1, 1000}, {}, {}}, {1, 3}, {1, 2, 3}},
      {"backwards from the end to INT64_MIN", {{-1}, {int_min}, {1}, {-1}}, {2, 4}, {3, 2, 1, 0, 7, 6, 5, 4}},
      {"a start past the end clamps to dim - 1 stepping backwards", {{20}, {-20}, {-1}, {-2}}, {2, 2}, {3, 1, 7, 5}},
      {"a start before 0 clamps to 0", {{-100}, {2}, {1}, {}}, {2, 2}, {0, 1, 4, 5}},
      {"a step past the window's end takes one element", {{2}, {100}, {1}, {3}}, {2, 1}, {2, 6}},
      {"a negative axis and INT64_MAX as the end", {{1}, {int_max}, {-2}, {}}, {1, 4}, {4, 5, 6, 7}},
      {"steps of INT64_MIN take one element", {{0, 3}, {2, 0}, {0, 1}, {1, int_min}}, {2, 1}, {3, 7}},
      // onnx.ai: starts clamp to [0, dim - 1] stepping backwards, so a start before the first
      // element reads that element (NumPy's slice would read nothing).
      {"a start before 0 stepping backwards clamps to 0", {{-100}, {-200}, {1}, {-1}}, {2, 1}, {0, 4}},
      {"both axes backwards", {{1, 3}, {int_min, int_min}, {0, 1}, {-1, -2}}, {2, 2}, {7, 5, 3, 1}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    for (int level : {0, 2}) {
      shape got_shape;
      const auto got = run_slice({2, 4}, c.a, got_shape, level);
      CHECK(got_shape == c.want_shape);
      CHECK(got == c.want);
    }
  }
  // int32 index inputs say the same.
  shape s32;
  CHECK(run_slice({2, 4}, {{1, 0}, {2, 3}, {0, 1}, {1, 2}}, s32, 0, dtype::i32) == std::vector<double>{4, 6});
}

TEST_CASE("Slice of a rank-4 tensor matches the index formula for every dtype", "[graph][slice]") {
  const shape xs{3, 4, 5, 6};
  const slice_args a{{2, -1, 1, 5}, {int_min, 0, 5, -7}, {0, 1, 2, 3}, {-1, -2, 2, -1}};
  // Per axis: 2,1,0 | 3,1 | 1,3 | 5..0.
  const std::vector<std::vector<std::int64_t>> idx{{2, 1, 0}, {3, 1}, {1, 3}, {5, 4, 3, 2, 1, 0}};
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8}) {
    CAPTURE(to_string(t));
    graph g("slice4");
    auto x = g.add_input("x", xs, t);
    g.set_output(add_slice(g, x, a, "s"));
    REQUIRE(g.value("s").shape == shape{3, 2, 2, 6});
    CHECK(g.value("s").type == t);
    npurt::system sys{sim::presets::ascend910b(1)};  // it has bf16
    session s{sys};
    std::vector<double> xv(static_cast<std::size_t>(xs.elements()));
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>(i % 97);  // exact in every dtype
    const tensor xt(xs, t, xv);
    const auto got = s.run(s.compile(g), {{"x", xt}}).outputs.at("s").to_vector();
    std::vector<double> want;
    for (auto i0 : idx[0])
      for (auto i1 : idx[1])
        for (auto i2 : idx[2])
          for (auto i3 : idx[3]) want.push_back(xv[static_cast<std::size_t>(((i0 * 4 + i1) * 5 + i2) * 6 + i3)]);
    CHECK(got == want);
  }
}

TEST_CASE("Split cuts along its axis by the split input, the attribute, num_outputs or equal parts", "[graph][split]") {
  auto sys = test::make_system();
  session s{sys};
  const shape xs{2, 7};
  const tensor xv(xs, dtype::f32, iota(14));
  struct split_case {
    std::string what;
    std::int64_t outputs;
    attributes attrs;
    std::vector<std::int64_t> split_input;  // empty: no input
    std::vector<std::vector<double>> want;
  };
  const split_case cases[] = {
      {"the split input",
       3,
       {{"axis", std::int64_t{1}}},
       {1, 2, 4},
       {{0, 7}, {1, 2, 8, 9}, {3, 4, 5, 6, 10, 11, 12, 13}}},
      {"the split attribute (before opset 13), a negative axis",
       2,
       {{"axis", std::int64_t{-1}}, {"split", ints{5, 2}}},
       {},
       {{0, 1, 2, 3, 4, 7, 8, 9, 10, 11}, {5, 6, 12, 13}}},
      {"num_outputs (opset 18): the last chunk smaller",
       3,
       {{"axis", std::int64_t{1}}, {"num_outputs", std::int64_t{3}}},
       {},
       {{0, 1, 2, 7, 8, 9}, {3, 4, 5, 10, 11, 12}, {6, 13}}},
      {"equal parts along axis 0", 2, {}, {}, {{0, 1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12, 13}}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    graph g("split");
    auto x = g.add_input("x", xs, dtype::f32);
    std::vector<std::string> ins{x};
    if (!c.split_input.empty()) ins.push_back(g.add_constant("sizes", ints_tensor(c.split_input)));
    std::vector<std::string> outs;
    for (std::int64_t k = 0; k < c.outputs; ++k) outs.push_back(std::string(1, 'y').append(std::to_string(k)));
    g.add_node("Split", "split", ins, outs, c.attrs);
    for (const auto& o : outs) g.set_output(o);
    for (int level : {0, 2}) {
      auto r = s.run(s.compile(g, {.optimization_level = level}), {{"x", xv}});
      for (std::size_t k = 0; k < outs.size(); ++k) {
        CAPTURE(k, level);
        CHECK(r.outputs.at(outs[k]).to_vector() == c.want[k]);
      }
      // One slice kernel per output, in one operator.
      if (level == 0) CHECK(r.ops.size() == 1);
    }
  }
}

TEST_CASE("Slice and Split refuse what ONNX refuses, naming the node and the input", "[graph][slice][split][errors]") {
  graph g("errors");
  auto x = g.add_input("x", {4, 6}, dtype::f32);
  auto fed = g.add_input("fed_starts", {1}, dtype::i64);
  auto c = [&](const std::string& name, std::vector<std::int64_t> v, dtype t = dtype::i64) {
    return g.add_constant(name, ints_tensor(v, t));
  };
  auto one = c("one", {1}), two = c("two", {2}), zero = c("zero", {0}), axis0 = c("axis0", {0});
  SECTION("starts fed at run time") {
    expect_graph_error([&] { g.add_op("Slice", {x, fed, two}, {}, "s"); }, errc::not_supported, "s", "fed_starts");
  }
  SECTION("a step of 0") {
    expect_graph_error([&] { g.add_op("Slice", {x, one, two, axis0, zero}, {}, "s"); }, errc::invalid_argument, "s",
                       "zero");
  }
  SECTION("an axis named twice, as -1 and rank - 1") {
    auto st = c("st", {0, 0}), en = c("en", {1, 1}), ax = c("ax", {1, -1});
    expect_graph_error([&] { g.add_op("Slice", {x, st, en, ax}, {}, "s"); }, errc::invalid_argument, "s", "ax");
  }
  SECTION("an axis out of range") {
    auto ax = c("ax", {2});
    expect_graph_error([&] { g.add_op("Slice", {x, one, two, ax}, {}, "s"); }, errc::invalid_argument, "s", "ax");
  }
  SECTION("starts and ends of different lengths") {
    auto en = c("en", {1, 1});
    expect_graph_error([&] { g.add_op("Slice", {x, one, en}, {}, "s"); }, errc::invalid_argument, "s", "en");
  }
  SECTION("float starts") {
    auto st = g.add_constant("fst", tensor({1}, dtype::f32, {1}));
    expect_graph_error([&] { g.add_op("Slice", {x, st, two}, {}, "s"); }, errc::invalid_dtype, "s", "fst");
  }
  SECTION("an empty window is an empty tensor, as numpy's x[2:1]") {
    g.add_op("Slice", {x, two, one}, {}, "s");
    CHECK(g.value("s").shape.elements() == 0);
  }
  SECTION("split sizes that do not add up to the dimension") {
    auto sizes = c("sizes", {2, 3});
    expect_graph_error([&] { g.add_node("Split", "sp", {x, sizes}, {"a", "b"}, {}); }, errc::invalid_shape, "sp", "x");
    expect_graph_error(
        [&] { g.add_node("Split", "sp", {x}, {"a", "b"}, {{"axis", std::int64_t{1}}, {"split", ints{1, 1}}}); },
        errc::invalid_shape, "sp", "x");
  }
  SECTION("a negative split size") {
    auto sizes = c("sizes", {6, -2});
    expect_graph_error([&] { g.add_node("Split", "sp", {x, sizes}, {"a", "b"}, {{"axis", std::int64_t{1}}}); },
                       errc::invalid_shape, "sp", "x");
  }
  SECTION("a split fed at run time") {
    auto sizes = g.add_input("fed_sizes", {2}, dtype::i64);
    expect_graph_error([&] { g.add_node("Split", "sp", {x, sizes}, {"a", "b"}, {}); }, errc::not_supported, "sp",
                       "fed_sizes");
  }
  SECTION("more sizes than outputs") {
    auto sizes = c("sizes", {1, 1, 2});
    expect_graph_error([&] { g.add_node("Split", "sp", {x, sizes}, {"a", "b"}, {}); }, errc::invalid_argument, "sp",
                       "sizes");
  }
  SECTION("split and num_outputs both") {
    auto sizes = c("sizes", {2, 2});
    expect_graph_error([&] { g.add_node("Split", "sp", {x, sizes}, {"a", "b"}, {{"num_outputs", std::int64_t{2}}}); },
                       errc::invalid_argument, "sp", "x");
  }
  SECTION("num_outputs other than the outputs named") {
    expect_graph_error([&] { g.add_node("Split", "sp", {x}, {"a", "b"}, {{"num_outputs", std::int64_t{3}}}); },
                       errc::invalid_argument, "sp", "x");
  }
  SECTION("equal parts that do not divide the dimension") {
    expect_graph_error(
        [&] {
          g.add_node("Split", "sp", {x}, {"a", "b", "c"},
                     {{"axis", std::int64_t{1}}, {"num_outputs", std::int64_t{4}}});
        },
        errc::invalid_argument, "sp", "x");
    expect_graph_error([&] { g.add_node("Split", "sp", {x}, {"a", "b", "c", "d", "e"}, {{"axis", std::int64_t{1}}}); },
                       errc::invalid_shape, "sp", "x");
  }
  SECTION("num_outputs whose last chunk is empty") {
    // ceil(6 / 4) = 2 each: 2, 2, 2 and nothing left for the fourth, an empty tensor.
    g.add_node("Split", "sp", {x}, {"a", "b", "c", "d"}, {{"axis", std::int64_t{1}}, {"num_outputs", std::int64_t{4}}});
    CHECK(g.value("c").shape[1] == 2);
    CHECK(g.value("d").shape[1] == 0);
  }
  SECTION("an attribute Slice does not have (opset 1's starts)") {
    expect_graph_error([&] { g.add_op("Slice", {x, one, two}, {{"starts", ints{1}}}, "s"); }, errc::not_supported, "s",
                       "");
  }
  CHECK(is_supported_op("Slice"));
  CHECK(is_supported_op("Split"));
}

TEST_CASE("Slice and Split between elementwise operators are no chain's stages; fp16 keeps the indices",
          "[graph][slice][split][fusion]") {
  // Relu -> Slice -> Tanh -> Split -> (Sigmoid, Neg): level 2 fuses nothing across the slices,
  // and the results equal level 0's bit for bit; fp16 computes the data and keeps the indices.
  graph g("mixed");
  auto x = g.add_input("x", {4, 8}, dtype::f32);
  auto r = g.add_op("Relu", {x}, {}, "relu");
  auto sl = add_slice(g, r, {{0, 7}, {4, int_min}, {0, 1}, {1, -1}}, "slice");
  auto t = g.add_op("Tanh", {sl}, {}, "tanh");
  g.add_node("Split", "split", {t}, {"a", "b"}, {{"axis", std::int64_t{1}}});
  g.set_output(g.add_op("Sigmoid", {"a"}, {}, "sig"));
  g.set_output(g.add_op("Neg", {"b"}, {}, "neg"));
  CHECK(g.value("sig").shape == shape{4, 4});
  auto sys = test::make_system();
  session s{sys};
  const tensor xv = test::random_tensor({4, 8}, 7);
  auto c0 = s.compile(g, {.optimization_level = 0});
  auto c2 = s.compile(g, {.optimization_level = 2});
  CHECK(c2.report().fused == 0);
  auto r0 = s.run(c0, {{"x", xv}});
  auto r2 = s.run(c2, {{"x", xv}});
  for (const auto& o : {"sig", "neg"}) CHECK(r0.outputs.at(o).to_vector() == r2.outputs.at(o).to_vector());
  // By hand: sig[i][j] = sigmoid(tanh(relu(x[i][7 - j]))).
  const auto xs = xv.to_vector();
  const auto sig = r0.outputs.at("sig").to_vector();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const double v = std::max(0.0, xs[static_cast<std::size_t>(i * 8 + 7 - j)]);
      CHECK(std::abs(sig[static_cast<std::size_t>(i * 4 + j)] - 1 / (1 + std::exp(-std::tanh(v)))) < 1e-6);
    }
  session h{sys, {.precision = precision::fp16}};
  auto rh = h.run(h.compile(g), {{"x", xv}});
  const auto sh = rh.outputs.at("sig").to_vector();
  CHECK(test::max_abs_diff(sh, sig) < 2e-3);
}

TEST_CASE("Slice and Split lower to slice kernels in a timing-only run", "[graph][slice][split][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {64, 256}, dtype::f16);
  auto w = g.add_constant("w", tensor::timing_only({256, 256}, dtype::f16));
  auto m = g.add_op("MatMul", {x, w}, {}, "mm");
  auto sl = add_slice(g, m, {{0}, {int_max}, {1}, {2}}, "slice");
  g.add_node("Split", "split", {sl}, {"a", "b"}, {{"axis", std::int64_t{0}}});
  g.set_output("a");
  g.set_output("b");
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  CHECK(c.report().timing_only);
  auto r = s.run(c, {{"x", tensor::timing_only({64, 256}, dtype::f16)}});
  CHECK(r.ops.size() == 3);
  for (const auto& op : r.ops) {
    CAPTURE(op.name);
    CHECK(op.busy > picoseconds{0});
  }
  CHECK(r.outputs.at("a").shape() == shape{32, 128});
}

TEST_CASE("a recomputed Slice computes what the kept one did", "[graph][slice][recompute]") {
  // s is read at once and again three MatMuls later: recomputing it from the input x (alive
  // anyway) frees its memory in between.
  graph g("recompute");
  auto x = g.add_input("x", {256, 512}, dtype::f32);
  auto w = g.add_constant("w", test::random_tensor({256, 256}, 3, 0.05));
  auto s = add_slice(g, x, {{1}, {int_max}, {1}, {2}}, "s");
  auto a = g.add_op("MatMul", {s, w}, {}, "a");
  auto b = g.add_op("MatMul", {a, w}, {}, "b");
  auto c = g.add_op("MatMul", {b, w}, {}, "c");
  g.set_output(g.add_op("Add", {c, s}, {}, "y"));
  const memory_suggestion* rc = nullptr;
  const auto sugg = graph_optimizer(g).memory_suggestions();
  for (const auto& m : sugg)
    if (m.what == memory_suggestion::kind::recomputation) rc = &m;
  REQUIRE(rc != nullptr);
  REQUIRE(rc->rewritten != nullptr);
  CHECK(rc->description.find("late readers (s)") != std::string::npos);
  auto sys = test::make_system();
  session sa{sys}, sb{sys};
  const tensor xv = test::random_tensor({256, 512}, 5);
  const auto ya = sa.run(sa.compile(g, rc->options), {{"x", xv}}).outputs.at("y").to_vector();
  const auto yb = sb.run(sb.compile(*rc->rewritten, rc->options), {{"x", xv}}).outputs.at("y").to_vector();
  CHECK(ya == yb);
}
