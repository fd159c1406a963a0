// Empty tensors (a dimension of 0) end to end through a session: what numpy gives for each
// operator family (elementwise, data movement, reductions over an empty axis, MatMul and Gemm with
// an inner dimension of 0, Concat with an empty input), written from numpy's and onnx.ai's
// definitions, and the typed errors where neither defines a value.
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
using test::ints_tensor;
using test::iota;

// Runs g at optimization levels 0 and 2 with these feeds; each run's outputs go to check.
template <class Check>
void run_levels(graph& g, const std::vector<std::pair<std::string, const tensor*>>& feeds, Check check) {
  for (int level : {0, 2}) {
    CAPTURE(level);
    auto sys = test::make_system();
    session s{sys};
    std::vector<feed> f;
    for (const auto& [name, t] : feeds) f.push_back({name, *t});
    auto r = s.run(s.compile(g, {.optimization_level = level}), f);
    check(r);
  }
}

// Every element of t equals v (NaN matching NaN).
bool all_equal(const tensor& t, double v) {
  for (const double e : t.to_vector())
    if (!(e == v || (std::isnan(e) && std::isnan(v)))) return false;
  return true;
}

}  // namespace

TEST_CASE("an elementwise chain, Transpose, Reshape and Slice of an empty tensor give empty tensors, no kernel",
          "[graph][empty]") {
  graph g("empty_movement");
  auto x = g.add_input("x", {3, 0, 5}, dtype::f32);
  auto b = g.add_input("b", {1, 1, 5}, dtype::f32);
  auto s = g.add_op("Add", {x, b}, {}, "sum");
  auto r = g.add_op("Relu", {s}, {}, "relu");
  auto t = g.add_op("Transpose", {r}, {{"perm", ints{2, 0, 1}}}, "t");
  auto m = g.add_op("Reshape", {t, g.add_constant("shape", ints_tensor({0, -1}))}, {}, "m");
  g.add_op("Slice",
           {m, g.add_constant("starts", ints_tensor({1})), g.add_constant("ends", ints_tensor({3})),
            g.add_constant("axes", ints_tensor({0}))},
           {}, "y");
  g.set_output("relu");
  g.set_output("y");
  // numpy: (x + b) is [3, 0, 5]; its transpose (2, 0, 1) is [5, 3, 0]; reshape(0, -1) keeps 5
  // and infers 0; rows 1..3 of it are [2, 0].
  CHECK(g.value("t").shape == shape{5, 3, 0});
  CHECK(g.value("m").shape == shape{5, 0});
  CHECK(g.value("y").shape == shape{2, 0});
  const tensor xv({3, 0, 5}, dtype::f32);
  const tensor bv({1, 1, 5}, dtype::f32, iota(5));
  run_levels(g, {{"x", &xv}, {"b", &bv}}, [](const run_result& res) {
    CHECK(res.outputs.at("relu").shape() == shape{3, 0, 5});
    CHECK(res.outputs.at("y").shape() == shape{2, 0});
    CHECK(res.outputs.at("y").elements() == 0);
    // Nothing to compute: no operator spends time on a kernel.
    for (const auto& op : res.ops) CHECK(op.busy.count() == 0);
  });
}

TEST_CASE("Concat leaves an empty input out; Split gives an empty piece", "[graph][empty]") {
  graph g("empty_concat");
  auto a = g.add_input("a", {2, 0}, dtype::f32);
  auto b = g.add_input("b", {2, 3}, dtype::f32);
  auto c = g.add_op("Concat", {a, b, a}, {{"axis", std::int64_t{1}}}, "c");
  g.add_node("Split", "split", {c, g.add_constant("sizes", ints_tensor({2, 0, 1}))}, {"p0", "p1", "p2"},
             {{"axis", std::int64_t{1}}});
  g.set_output(c);
  for (const char* o : {"p0", "p1", "p2"}) g.set_output(o);
  CHECK(g.value("p1").shape == shape{2, 0});
  const tensor av({2, 0}, dtype::f32);
  const tensor bv({2, 3}, dtype::f32, {1, 2, 3, 4, 5, 6});
  run_levels(g, {{"a", &av}, {"b", &bv}}, [](const run_result& r) {
    // numpy.concatenate([a, b, a], axis=1) is b.
    CHECK(r.outputs.at("c").to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
    CHECK(r.outputs.at("p0").to_vector() == std::vector<double>{1, 2, 4, 5});
    CHECK(r.outputs.at("p1").shape() == shape{2, 0});
    CHECK(r.outputs.at("p2").to_vector() == std::vector<double>{3, 6});
  });
}

TEST_CASE("a reduction over an empty axis gives its identity; over another axis an empty tensor", "[graph][empty]") {
  constexpr double inf = std::numeric_limits<double>::infinity();
  struct reduce_case {
    const char* op;
    dtype type;
    double want;  // onnx.ai: Sum 0, Prod 1, Max the least value, Min the greatest, Mean NaN (0 / 0)
  };
  const std::vector<reduce_case> cases{
      {"ReduceSum", dtype::f32, 0.0},
      {"ReduceProd", dtype::f32, 1.0},
      {"ReduceMax", dtype::f32, -inf},
      {"ReduceMin", dtype::f32, inf},
      {"ReduceMean", dtype::f32, std::numeric_limits<double>::quiet_NaN()},
      {"ReduceSum", dtype::i32, 0.0},
      {"ReduceProd", dtype::i64, 1.0},
      {"ReduceMax", dtype::i32, static_cast<double>(std::numeric_limits<std::int32_t>::min())},
      {"ReduceMin", dtype::i8, 127.0},
      {"ReduceMax", dtype::f16, -inf},
  };
  for (const auto& c : cases)
    for (const std::int64_t keep : {0, 1}) {
      CAPTURE(c.op, to_string(c.type), keep);
      graph g("empty_reduce");
      auto x = g.add_input("x", {2, 0, 3}, c.type);
      g.add_op(c.op, {x}, {{"axes", ints{1}}, {"keepdims", keep}}, "y");
      // Over axis 2 (extent 3) the result keeps the empty axis: [2, 0] or [2, 0, 1].
      g.add_op(c.op, {x}, {{"axes", ints{2}}, {"keepdims", keep}}, "z");
      g.set_output("y");
      g.set_output("z");
      const tensor xv({2, 0, 3}, c.type);
      run_levels(g, {{"x", &xv}}, [&](const run_result& r) {
        const tensor& y = r.outputs.at("y");
        CHECK(y.shape() == (keep ? shape{2, 1, 3} : shape{2, 3}));
        CHECK(y.type() == c.type);
        CHECK(all_equal(y, c.want));
        CHECK(r.outputs.at("z").shape() == (keep ? shape{2, 0, 1} : shape{2, 0}));
      });
    }
  // Every axis (no axes given) of an empty tensor: one identity.
  graph g("empty_reduce_all");
  g.add_op("ReduceSum", {g.add_input("x", {0, 4}, dtype::f32)}, {{"keepdims", std::int64_t{0}}}, "y");
  g.set_output("y");
  const tensor xv({0, 4}, dtype::f32);
  run_levels(g, {{"x", &xv}},
             [](const run_result& r) { CHECK(r.outputs.at("y").to_vector() == std::vector<double>{0}); });
}

TEST_CASE("MatMul and Gemm with an inner dimension of 0 give zeros, Gemm's C added", "[graph][empty]") {
  graph g("empty_matmul");
  auto a = g.add_input("a", {2, 0}, dtype::f32);
  auto b = g.add_input("b", {0, 3}, dtype::f32);
  auto c = g.add_input("c", {3}, dtype::f32);
  g.add_op("MatMul", {a, b}, {}, "mm");
  g.add_op("Gemm", {a, b, c}, {{"beta", 2.0}}, "gemm");
  g.add_op("Gemm", {a, b}, {}, "gemm_no_c");
  for (const char* o : {"mm", "gemm", "gemm_no_c"}) g.set_output(o);
  const tensor av({2, 0}, dtype::f32);
  const tensor bv({0, 3}, dtype::f32);
  const tensor cv({3}, dtype::f32, {1, -2, 5});
  run_levels(g, {{"a", &av}, {"b", &bv}, {"c", &cv}}, [](const run_result& r) {
    // numpy.matmul of [2, 0] and [0, 3]: a [2, 3] of empty sums.
    CHECK(r.outputs.at("mm").shape() == shape{2, 3});
    CHECK(all_equal(r.outputs.at("mm"), 0.0));
    CHECK(all_equal(r.outputs.at("gemm_no_c"), 0.0));
    // alpha * A B + beta * C = 2 * C on every row.
    CHECK(r.outputs.at("gemm").to_vector() == std::vector<double>{2, -4, 10, 2, -4, 10});
  });
}

TEST_CASE("a constant Pad of an empty tensor is its fill; an edge Pad and ArgMax have no value", "[graph][empty]") {
  graph g("empty_pad");
  auto x = g.add_input("x", {0, 2}, dtype::f32);
  g.add_op("Pad",
           {x, g.add_constant("pads", ints_tensor({1, 0, 2, 1})), g.add_constant("v", tensor({}, dtype::f32, {7}))}, {},
           "y");
  g.set_output("y");
  const tensor xv({0, 2}, dtype::f32);
  run_levels(g, {{"x", &xv}}, [](const run_result& r) {
    CHECK(r.outputs.at("y").shape() == shape{3, 3});
    CHECK(all_equal(r.outputs.at("y"), 7.0));
  });
  const auto refused = [](const std::string& op, dtype t, attributes attrs, std::vector<std::int64_t> pads, errc code) {
    CAPTURE(op);
    graph h("refused");
    auto in = h.add_input("x", {0, 2}, t);
    std::vector<std::string> ins{in};
    if (!pads.empty()) ins.push_back(h.add_constant("pads", ints_tensor(pads)));
    h.add_op(op, ins, std::move(attrs), "y");
    h.set_output("y");
    auto sys = test::make_system();
    session s{sys};
    expect_graph_error([&] { (void)s.compile(h); }, code, "y", "x");
  };
  refused("Pad", dtype::f32, {{"mode", std::string("edge")}}, {1, 0, 1, 0}, errc::invalid_argument);
  refused("ArgMax", dtype::f32, {{"axis", std::int64_t{0}}}, {}, errc::invalid_argument);
}

TEST_CASE("Reshape's allowzero=1 makes a 0 an empty dimension; without it a 0 copies the input's", "[graph][empty]") {
  const auto reshape = [](const shape& xs, std::vector<std::int64_t> to, std::int64_t allowzero) {
    graph g("allowzero");
    auto x = g.add_input("x", xs, dtype::f32);
    g.add_op("Reshape", {x, g.add_constant("shape", ints_tensor(to))}, {{"allowzero", allowzero}}, "y");
    g.set_output("y");
    return g;
  };
  // onnx.ai's reshape_allowzero_reordered: [0, 3, 4] to [3, 4, 0].
  graph g = reshape({0, 3, 4}, {3, 4, 0}, 1);
  CHECK(g.value("y").shape == shape{3, 4, 0});
  const tensor xv({0, 3, 4}, dtype::f32);
  run_levels(g, {{"x", &xv}}, [](const run_result& r) { CHECK(r.outputs.at("y").shape() == shape{3, 4, 0}); });
  // allowzero=0: the 0 copies x's dimension 2 (4), and [3, 4, 4] does not hold x's 0 elements.
  expect_graph_error([&] { (void)reshape({0, 3, 4}, {3, 4, 0}, 0); }, errc::invalid_shape, "y", "shape");
  CHECK(reshape({2, 3}, {0, 3}, 0).value("y").shape == shape{2, 3});
  // A 0 and a -1 together leave the -1 no unique size.
  expect_graph_error([&] { (void)reshape({0, 3, 4}, {0, -1}, 1); }, errc::invalid_shape, "y", "shape");
}
