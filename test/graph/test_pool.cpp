// MaxPool and AveragePool as exported models use them (onnx.ai/onnx/operators/onnx__MaxPool.html,
// onnx__AveragePool.html): auto_pad's asymmetric pads, ceil_mode, dilations, count_include_pad,
// pads past half the window, 1- and 3-D, int8 data and MaxPool's Indices, each worked by hand
// from the spec; MaxUnpool and LRN; and the typed errors naming the operand at fault.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;
using test::iota;

struct pooled {
  shape y_shape;
  std::vector<double> y, indices;
};

// op over x (values xv) with attrs; with_indices asks MaxPool for its second output.
pooled run_pool(const std::string& op, const shape& xs, const std::vector<double>& xv, const attributes& attrs,
                dtype type = dtype::f32, bool with_indices = false) {
  graph g("pool");
  auto x = g.add_input("x", xs, type);
  std::vector<std::string> outs{"y"};
  if (with_indices) outs.push_back("i");
  g.add_node(op, "p", {x}, outs, attrs);
  g.set_output("y");
  if (with_indices) g.set_output("i");
  auto sys = test::make_system();
  session s{sys};
  auto r = s.run(s.compile(g), {{"x", tensor(xs, type, xv)}});
  pooled p{g.value("y").shape, r.outputs.at("y").to_vector(), {}};
  if (with_indices) {
    CHECK(g.value("i").type == dtype::i64);
    p.indices = r.outputs.at("i").to_vector();
  }
  return p;
}

// NaN-aware equality: a window with no input averages to NaN.
bool same_values(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::isnan(want[i]) ? !std::isnan(got[i]) : std::abs(got[i] - want[i]) > 1e-6 * (1 + std::abs(want[i])))
      return false;
  return true;
}

}  // namespace

TEST_CASE("auto_pad SAME_UPPER and SAME_LOWER put an odd pad after or before", "[graph][pool]") {
  // 5 wide, kernel 2, stride 1: output ceil(5 / 1) = 5, one pad in all.
  const std::vector<double> x{1, 2, 3, 4, 5};
  auto upper = run_pool("MaxPool", {1, 1, 5}, x, {{"kernel_shape", ints{2}}, {"auto_pad", std::string("SAME_UPPER")}});
  CHECK(upper.y_shape == shape{1, 1, 5});
  CHECK(upper.y == std::vector<double>{2, 3, 4, 5, 5});
  auto lower =
      run_pool("AveragePool", {1, 1, 5}, x, {{"kernel_shape", ints{2}}, {"auto_pad", std::string("SAME_LOWER")}});
  CHECK(lower.y == std::vector<double>{1, 1.5, 2.5, 3.5, 4.5});
  // 4x4, kernel 3, stride 2: output 2x2, (2 - 1) * 2 + 3 - 4 = 1 pad per dimension.
  auto up2 = run_pool("MaxPool", {1, 1, 4, 4}, iota(16),
                      {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}});
  CHECK(up2.y_shape == shape{1, 1, 2, 2});
  CHECK(up2.y == std::vector<double>{10, 11, 14, 15});
  auto low2 =
      run_pool("MaxPool", {1, 1, 4, 4}, iota(16),
               {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}});
  CHECK(low2.y == std::vector<double>{5, 7, 13, 15});
  // Explicit asymmetric pads say the same as SAME_LOWER's.
  auto explicit_pads = run_pool("MaxPool", {1, 1, 4, 4}, iota(16),
                                {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 0, 0}}});
  CHECK(explicit_pads.y == low2.y);
}

TEST_CASE("ceil_mode, dilations and count_include_pad follow the spec", "[graph][pool]") {
  const attributes ceil{{"kernel_shape", ints{2}}, {"strides", ints{2}}, {"ceil_mode", std::int64_t{1}}};
  auto m = run_pool("MaxPool", {1, 1, 5}, iota(5), ceil);
  CHECK(m.y_shape == shape{1, 1, 3});  // ceil((5 - 2) / 2 + 1); the last window holds x[4] alone
  CHECK(m.y == std::vector<double>{1, 3, 4});
  auto a = run_pool("AveragePool", {1, 1, 5}, iota(5), ceil);
  CHECK(a.y == std::vector<double>{0.5, 2.5, 4});
  CHECK(run_pool("MaxPool", {1, 1, 5}, iota(5), {{"kernel_shape", ints{2}}, {"strides", ints{2}}}).y_shape ==
        shape{1, 1, 2});
  // Kernel 2, dilation 2: max(x[i], x[i + 2]).
  auto d = run_pool("MaxPool", {1, 1, 5}, {4, 0, 1, 9, 2}, {{"kernel_shape", ints{2}}, {"dilations", ints{2}}});
  CHECK(d.y == std::vector<double>{4, 9, 2});
  // Kernel 3, pads 1 and 1: the padded taps count with count_include_pad only.
  const attributes pads{{"kernel_shape", ints{3}}, {"pads", ints{1, 1}}};
  CHECK(run_pool("AveragePool", {1, 1, 3}, {1, 2, 3}, pads).y == std::vector<double>{1.5, 2, 2.5});
  attributes cip = pads;
  cip.set("count_include_pad", std::int64_t{1});
  CHECK(same_values(run_pool("AveragePool", {1, 1, 3}, {1, 2, 3}, cip).y, {1, 2, 5.0 / 3}));
}

TEST_CASE("pads past half the window leave windows without input: NaN, or 0 counting the pads", "[graph][pool]") {
  // 2 wide, kernel 2, pads 2 and 2: windows start at -2, -1, 0, 1, 2.
  const attributes a{{"kernel_shape", ints{2}}, {"pads", ints{2, 2}}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto avg = run_pool("AveragePool", {1, 1, 2}, {4, 6}, a);
  CHECK(avg.y_shape == shape{1, 1, 5});
  CHECK(same_values(avg.y, {nan, 4, 5, 6, nan}));
  attributes cip = a;
  cip.set("count_include_pad", std::int64_t{1});
  CHECK(same_values(run_pool("AveragePool", {1, 1, 2}, {4, 6}, cip).y, {0, 2, 5, 3, 0}));
  auto mx = run_pool("MaxPool", {1, 1, 2}, {4, 6}, a, dtype::f32, true);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(mx.y == std::vector<double>{-inf, 4, 6, 6, -inf});
  CHECK(mx.indices == std::vector<double>{-1, 0, 1, 1, -1});
}

TEST_CASE("3-D pooling, int8 MaxPool and MaxPool's Indices in both storage orders", "[graph][pool]") {
  auto v = run_pool("AveragePool", {1, 2, 2, 2, 2}, iota(16), {{"kernel_shape", ints{2, 2, 2}}});
  CHECK(v.y_shape == shape{1, 2, 1, 1, 1});
  CHECK(v.y == std::vector<double>{3.5, 11.5});
  auto vm = run_pool("MaxPool", {1, 2, 2, 2, 2}, iota(16), {{"kernel_shape", ints{2, 2, 2}}}, dtype::f32, true);
  CHECK(vm.y == std::vector<double>{7, 15});
  CHECK(vm.indices == std::vector<double>{7, 15});
  auto i8 = run_pool("MaxPool", {1, 1, 4}, {-100, -128, 127, 5}, {{"kernel_shape", ints{2}}, {"strides", ints{2}}},
                     dtype::i8);
  CHECK(i8.y == std::vector<double>{-100, 127});
  // x [1, 1, 2, 3]: rows {1, 9, 11} and {3, 4, 10}; kernel 2x2: maxima 9 at (0, 1) and 11 at
  // (0, 2). Row-major: 1 and 2; storage_order 1 (column-major, h + w * H): 2 and 4.
  const std::vector<double> x{1, 9, 11, 3, 4, 10};
  auto rm = run_pool("MaxPool", {1, 1, 2, 3}, x, {{"kernel_shape", ints{2, 2}}}, dtype::f32, true);
  CHECK(rm.y == std::vector<double>{9, 11});
  CHECK(rm.indices == std::vector<double>{1, 2});
  auto cm = run_pool("MaxPool", {1, 1, 2, 3}, x, {{"kernel_shape", ints{2, 2}}, {"storage_order", std::int64_t{1}}},
                     dtype::f32, true);
  CHECK(cm.indices == std::vector<double>{2, 4});
}

TEST_CASE("pooling's bad attributes and inputs are typed errors naming X", "[graph][pool][errors]") {
  const auto add = [](const std::string& op, const shape& xs, const attributes& a, dtype t = dtype::f32) {
    graph g;
    auto x = g.add_input("x", xs, t);
    (void)g.add_op(op, {x}, a, "p");
  };
  expect_graph_error([&] { add("MaxPool", {1, 1, 4, 4}, {{"kernel_shape", ints{2}}}); }, errc::invalid_argument, "p",
                     "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4, 4}, {{"kernel_shape", ints{2, 2}}, {"dilations", ints{0, 1}}}); },
                     errc::invalid_argument, "p", "x");
  expect_graph_error([&] { add("AveragePool", {1, 1, 4, 4}, {{"kernel_shape", ints{2, 2}}, {"pads", ints{1, 1}}}); },
                     errc::invalid_argument, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4}, {{"kernel_shape", ints{2}}, {"pads", ints{-1, 0}}}); },
                     errc::invalid_argument, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4}, {{"kernel_shape", ints{2}}, {"ceil_mode", std::int64_t{2}}}); },
                     errc::invalid_argument, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4}, {{"kernel_shape", ints{2}}, {"auto_pad", std::string("SAME")}}); },
                     errc::invalid_argument, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4}, {{"kernel_shape", ints{6}}, {"pads", ints{1, 0}}}); },
                     errc::invalid_shape, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 4}, {{"kernel_shape", ints{2}}}); }, errc::invalid_shape, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 2, 2, 2, 2}, {{"kernel_shape", ints{1, 1, 1, 1}}}); },
                     errc::not_supported, "p", "x");
  expect_graph_error([&] { add("AveragePool", {1, 1, 4}, {{"kernel_shape", ints{2}}}, dtype::i8); },
                     errc::not_supported, "p", "x");
  expect_graph_error([&] { add("MaxPool", {1, 1, 4}, {{"kernel_shape", ints{2}}}, dtype::i32); }, errc::not_supported,
                     "p", "x");
}

TEST_CASE("MaxUnpool puts X at its flat indices, with and without output_shape", "[graph][pool][unpool]") {
  const auto unpool = [](const shape& xs, const std::vector<double>& xv, const std::vector<double>& iv,
                         const attributes& a, const std::vector<std::int64_t>* out_shape = nullptr) {
    graph g("unpool");
    auto x = g.add_input("x", xs, dtype::f32);
    auto i = g.add_input("i", xs, dtype::i64);
    std::vector<std::string> ins{x, i};
    if (out_shape) ins.push_back(g.add_constant("shape", test::ints_tensor(*out_shape)));
    g.add_node("MaxUnpool", "u", ins, {"y"}, a);
    g.set_output("y");
    auto sys = test::make_system();
    session s{sys};
    auto r = s.run(s.compile(g), {{"x", tensor(xs, dtype::f32, xv)}, {"i", tensor(xs, dtype::i64, iv)}});
    return std::make_pair(g.value("y").shape, r.outputs.at("y").to_vector());
  };
  // onnx.ai's example: MaxPool (kernel 2, stride 2) of a 4x4 kept 5, 6, 7, 8 at 5, 7, 13 and 15.
  const attributes a{{"kernel_shape", ints{2, 2}}, {"strides", ints{2, 2}}};
  auto [s4, y4] = unpool({1, 1, 2, 2}, {5, 6, 7, 8}, {5, 7, 13, 15}, a);
  CHECK(s4 == shape{1, 1, 4, 4});
  CHECK(y4 == std::vector<double>{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8});
  // output_shape 5x5: the same 4x4 at its start (the indices address the 4x4 shape).
  const std::vector<std::int64_t> five{1, 1, 5, 5};
  auto [s5, y5] = unpool({1, 1, 2, 2}, {5, 6, 7, 8}, {5, 7, 13, 15}, a, &five);
  CHECK(s5 == shape{1, 1, 5, 5});
  CHECK(y5 == std::vector<double>{0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0});
  // 1-D with pads: (2 - 1) * 2 - 1 + 3 = 4 per channel; the indices are flat over N and C too.
  auto [s1, y1] = unpool({1, 2, 2}, {1, 2, 3, 4}, {1, 2, 4, 7},
                         {{"kernel_shape", ints{3}}, {"strides", ints{2}}, {"pads", ints{0, 1}}});
  CHECK(s1 == shape{1, 2, 4});
  CHECK(y1 == std::vector<double>{0, 1, 2, 0, 3, 0, 0, 4});
}

TEST_CASE("MaxUnpool's bad indices and shapes are typed errors", "[graph][pool][unpool][errors]") {
  const attributes a{{"kernel_shape", ints{2}}, {"strides", ints{2}}};
  const auto add = [&](dtype it, const shape& is, const std::vector<std::int64_t>* out_shape) {
    graph g;
    auto x = g.add_input("x", {1, 1, 2}, dtype::f32);
    auto i = g.add_input("i", is, it);
    std::vector<std::string> ins{x, i};
    if (out_shape) ins.push_back(g.add_constant("shape", test::ints_tensor(*out_shape)));
    g.add_node("MaxUnpool", "u", ins, {"y"}, a);
  };
  expect_graph_error([&] { add(dtype::i32, {1, 1, 2}, nullptr); }, errc::invalid_dtype, "u", "i");
  expect_graph_error([&] { add(dtype::i64, {1, 1, 3}, nullptr); }, errc::invalid_shape, "u", "i");
  const std::vector<std::int64_t> small{1, 1, 3};
  expect_graph_error([&] { add(dtype::i64, {1, 1, 2}, &small); }, errc::invalid_shape, "u", "shape");
  // An index outside the unpooled tensor (4 elements) fails the run, naming the indices.
  graph g;
  auto x = g.add_input("x", {1, 1, 2}, dtype::f32);
  auto i = g.add_input("i", {1, 1, 2}, dtype::i64);
  g.add_node("MaxUnpool", "u", {x, i}, {"y"}, a);
  g.set_output("y");
  auto sys = test::make_system();
  session s{sys};
  const auto c = s.compile(g);
  CHECK_THROWS(s.run(c, {{"x", tensor({1, 1, 2}, dtype::f32, {1, 2})}, {"i", tensor({1, 1, 2}, dtype::i64, {0, 4})}}));
}

TEST_CASE("LRN normalises across channels by ONNX's formula", "[graph][lrn]") {
  graph g("lrn");
  auto x = g.add_input("x", {1, 3, 1, 1}, dtype::f32);
  g.add_node("LRN", "n", {x}, {"y"}, {{"size", std::int64_t{3}}, {"alpha", 3.0}, {"beta", 1.0}, {"bias", 1.0}});
  g.set_output("y");
  auto sys = test::make_system();
  session s{sys};
  const auto y = s.run(s.compile(g), {{"x", tensor({1, 3, 1, 1}, dtype::f32, {1, 2, 3})}}).outputs.at("y").to_vector();
  // alpha / size = 1: channel 0 sums 1 + 4, channel 1 all three, channel 2 4 + 9.
  const std::vector<double> want{1.0 / 6, 2.0 / 15, 3.0 / 14};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::abs(y[i] - want[i]) < 1e-6);
  expect_graph_error(
      [&] {
        graph h;
        (void)h.add_op("LRN", {h.add_input("x", {1, 3, 2}, dtype::f32)}, {}, "n");
      },
      errc::invalid_argument, "n", "x");
  expect_graph_error(
      [&] {
        graph h;
        (void)h.add_op("LRN", {h.add_input("x", {1, 3, 2}, dtype::i32)}, {{"size", std::int64_t{1}}}, "n");
      },
      errc::not_supported, "n", "x");
}
