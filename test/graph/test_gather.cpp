// Gather (onnx.ai/onnx/operators/onnx__Gather.html): inference, values through compiled runs
// with the indices fed at run time or constant and the data fed or constant (an embedding
// table), the typed errors, an index out of range at run time, and timing-only runs.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// ONNX's definition, one element of y at a time: y's index split into data's leading indices,
// the position in `indices`, and data's trailing indices.
std::vector<double> ref_gather(const std::vector<double>& data, const shape& ds, const std::vector<double>& indices,
                               const shape& is, std::size_t axis) {
  const std::size_t q = is.rank(), yr = ds.rank() - 1 + q;
  shape ys;
  for (std::size_t d = 0; d < yr; ++d) ys.push_back(d < axis ? ds[d] : d < axis + q ? is[d - axis] : ds[d - q + 1]);
  std::vector<double> y;
  std::vector<std::int64_t> yi(yr, 0);
  for (std::int64_t i = 0; i < ys.elements(); ++i) {
    std::int64_t j = 0;
    for (std::size_t d = axis; d < axis + q; ++d) j = j * ys[d] + yi[d];
    auto pick = static_cast<std::int64_t>(indices[static_cast<std::size_t>(j)]);
    if (pick < 0) pick += ds[axis];
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < ds.rank(); ++d)
      flat = flat * ds[d] + (d < axis ? yi[d] : d == axis ? pick : yi[d + q - 1]);
    y.push_back(data[static_cast<std::size_t>(flat)]);
    for (std::size_t d = yr; d-- > 0;) {
      if (++yi[d] < ys[d]) break;
      yi[d] = 0;
    }
  }
  return y;
}

}  // namespace

TEST_CASE("Gather picks ONNX's slices: indices fed or constant, data fed or a constant table", "[graph][gather]") {
  auto sys = test::make_system();
  SECTION("an embedding lookup: int64 ids fed at run time into a constant table") {
    const tensor table = test::random_tensor({10, 4}, 21);
    const std::vector<double> ids{3, 0, 9, -1, 3, -10};  // -1 and -10: the last row and the first
    for (int level : {0, 2}) {
      CAPTURE(level);
      graph g("embedding");
      auto w = g.add_constant("w", table.clone());
      auto x = g.add_input("ids", {2, 3}, dtype::i64);
      g.set_output(g.add_op("Gather", {w, x}, {}, "emb"));
      CHECK(g.value("emb").shape == shape{2, 3, 4});
      CHECK(g.value("emb").type == dtype::f32);
      session s{sys};
      const auto r = s.run(s.compile(g, {.optimization_level = level}), {{"ids", tensor({2, 3}, dtype::i64, ids)}});
      CHECK(r.outputs.at("emb").to_vector() == ref_gather(table.to_vector(), {10, 4}, ids, {2, 3}, 0));
    }
  }
  SECTION("int32 indices fed at run time into fed data, a negative axis, 2-D indices") {
    graph g("columns");
    auto x = g.add_input("x", {3, 5}, dtype::f32);
    auto i = g.add_input("i", {2, 2}, dtype::i32);
    g.set_output(g.add_op("Gather", {x, i}, {{"axis", std::int64_t{-1}}}, "cols"));
    CHECK(g.value("cols").shape == shape{3, 2, 2});
    session s{sys};
    const tensor xv = test::random_tensor({3, 5}, 4);
    const std::vector<double> iv{0, -1, 4, 2};
    const auto r = s.run(s.compile(g), {{"x", xv}, {"i", tensor({2, 2}, dtype::i32, iv)}});
    CHECK(r.outputs.at("cols").to_vector() == ref_gather(xv.to_vector(), {3, 5}, iv, {2, 2}, 1));
  }
  SECTION("constant scalar indices drop the axis; of a vector, a scalar") {
    graph g("scalars");
    auto x = g.add_input("x", {3, 4, 2}, dtype::f32);
    auto v = g.add_input("v", {6}, dtype::i64);
    auto one = g.add_constant("one", tensor(shape{}, dtype::i64, {1}));
    auto last = g.add_constant("last", tensor(shape{}, dtype::i32, {-1}));
    g.set_output(g.add_op("Gather", {x, one}, {{"axis", std::int64_t{1}}}, "mid"));
    g.set_output(g.add_op("Gather", {v, last}, {}, "end"));
    CHECK(g.value("mid").shape == shape{3, 2});
    CHECK(g.value("end").shape == shape{});
    CHECK(g.value("end").type == dtype::i64);
    session s{sys};
    const tensor xv = test::random_tensor({3, 4, 2}, 9);
    const std::vector<double> vv{5, -6, 7, 8, 9, 123456789};
    const auto r = s.run(s.compile(g), {{"x", xv}, {"v", tensor({6}, dtype::i64, vv)}});
    CHECK(r.outputs.at("mid").to_vector() == ref_gather(xv.to_vector(), {3, 4, 2}, {1}, {}, 1));
    CHECK(r.outputs.at("end").to_vector() == std::vector<double>{123456789});
  }
  SECTION("Gather feeds the operators after it, in fp16 too") {
    // emb = table[ids]; y = Relu(emb) · w2: fp16 computes the table and the matmul, the ids stay int64.
    graph g("downstream");
    const tensor table = test::random_tensor({8, 16}, 5), w2 = test::random_tensor({16, 3}, 6, 0.25);
    auto w = g.add_constant("table", table.clone());
    auto m = g.add_constant("w2", w2.clone());
    auto ids = g.add_input("ids", {4}, dtype::i64);
    auto e = g.add_op("Gather", {w, ids}, {}, "emb");
    g.set_output(g.add_op("MatMul", {g.add_op("Relu", {e}, {}, "relu"), m}, {}, "y"));
    const std::vector<double> iv{7, 1, 1, -8};
    auto emb = ref_gather(table.to_vector(), {8, 16}, iv, {4}, 0);
    test::ref_relu(emb);
    const auto want = test::ref_matmul(emb, w2.to_vector(), 4, 16, 3);
    session s32{sys}, s16{sys, {.precision = precision::fp16}};
    const tensor idv({4}, dtype::i64, iv);
    const std::vector<feed> feeds{{"ids", idv}};
    CHECK(test::max_abs_diff(s32.run(s32.compile(g), feeds).outputs.at("y").to_vector(), want) < 1e-5);
    CHECK(test::max_abs_diff(s16.run(s16.compile(g), feeds).outputs.at("y").to_vector(), want) < 2e-2);
  }
}

TEST_CASE("Gather refuses what ONNX refuses, naming the node and the tensor", "[graph][gather][errors]") {
  graph g("errors");
  auto x = g.add_input("x", {4, 6}, dtype::f32);
  auto ids = g.add_input("ids", {2}, dtype::i64);
  SECTION("float indices") {
    auto f = g.add_input("f", {2}, dtype::f32);
    expect_graph_error([&] { g.add_op("Gather", {x, f}, {}, "gt"); }, errc::invalid_dtype, "gt", "f");
  }
  SECTION("int8 indices") {
    auto b = g.add_input("b", {2}, dtype::i8);
    expect_graph_error([&] { g.add_op("Gather", {x, b}, {}, "gt"); }, errc::invalid_dtype, "gt", "b");
  }
  SECTION("an axis out of range, either way") {
    expect_graph_error([&] { g.add_op("Gather", {x, ids}, {{"axis", std::int64_t{2}}}, "gt"); }, errc::invalid_argument,
                       "gt", "x");
    expect_graph_error([&] { g.add_op("Gather", {x, ids}, {{"axis", std::int64_t{-3}}}, "gt"); },
                       errc::invalid_argument, "gt", "x");
  }
  SECTION("scalar data") {
    auto sc = g.add_input("sc", {}, dtype::f32);
    expect_graph_error([&] { g.add_op("Gather", {sc, ids}, {}, "gt"); }, errc::invalid_shape, "gt", "sc");
  }
  SECTION("a constant index out of range, past either end") {
    auto past = g.add_constant("past", tensor({2}, dtype::i64, {1, 4}));
    expect_graph_error([&] { g.add_op("Gather", {x, past}, {}, "gt"); }, errc::invalid_argument, "gt", "past");
    auto before = g.add_constant("before", tensor({1}, dtype::i32, {-7}));
    expect_graph_error([&] { g.add_op("Gather", {x, before}, {{"axis", std::int64_t{1}}}, "gt"); },
                       errc::invalid_argument, "gt", "before");
  }
  SECTION("an output above rank 8") {
    auto deep = g.add_input("deep", {1, 1, 1, 1, 1, 1, 1, 2}, dtype::i64);  // y: rank 2 - 1 + 8
    expect_graph_error([&] { g.add_op("Gather", {x, deep}, {}, "gt"); }, errc::not_supported, "gt", "deep");
  }
  SECTION("an attribute Gather does not have") {
    expect_graph_error([&] { g.add_op("Gather", {x, ids}, {{"axes", ints{0}}}, "gt"); }, errc::not_supported, "gt", "");
  }
  SECTION("a missing input") {
    expect_graph_error([&] { g.add_op("Gather", {x}, {}, "gt"); }, errc::invalid_argument, "gt", "");
  }
  CHECK(is_supported_op("Gather"));
}

TEST_CASE("a Gather index out of range at run time fails session::run; the next run is fine",
          "[graph][gather][errors]") {
  graph g("lookup");
  auto w = g.add_constant("w", tensor({3, 2}, dtype::f32, {1, 2, 3, 4, 5, 6}));
  auto ids = g.add_input("ids", {2}, dtype::i64);
  g.set_output(g.add_op("Gather", {w, ids}, {}, "emb"));
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  for (double bad : {3.0, -4.0}) {
    CAPTURE(bad);
    try {
      (void)s.run(c, {{"ids", tensor({2}, dtype::i64, {0, bad})}});
      FAIL("a gather of row " << bad << " of 3 succeeded");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_argument);
      // In the graph's terms: the call, the node and its operator, and the index that was wrong.
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Matchers::StartsWith("npurt::session::run: node 'emb' (Gather): "));
      CHECK_THAT(what, Catch::Matchers::ContainsSubstring("indices[1] = " + std::to_string(static_cast<int>(bad)) +
                                                          " is outside [-3, 2] (data axis 0 has 3 entries)"));
    }
  }
  const auto r = s.run(c, {{"ids", tensor({2}, dtype::i64, {2, -3})}});
  CHECK(r.outputs.at("emb").to_vector() == std::vector<double>{5, 6, 1, 2});
  // run_batches reports the batch that failed in the same terms.
  const tensor good({2}, dtype::i64, {0, 1}), past({2}, dtype::i64, {7, 0});
  try {
    (void)s.run_batches(c, {{{"ids", good}}, {{"ids", past}}});
    FAIL("a batch gathering row 7 of 3 succeeded");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::StartsWith("npurt::session::run_batches: node 'emb' (Gather): "));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("indices[0] = 7 is outside [-3, 2]"));
  }
}

TEST_CASE("Gather lowers to one gather kernel in a timing-only run", "[graph][gather][timing]") {
  graph g("timing");
  auto w = g.add_constant("w", tensor::timing_only({30522, 256}, dtype::f16));
  auto ids = g.add_input("ids", {8, 128}, dtype::i64);
  g.set_output(g.add_op("Gather", {w, ids}, {}, "emb"));
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  CHECK(c.report().timing_only);
  auto r = s.run(c, {{"ids", tensor::timing_only({8, 128}, dtype::i64)}});
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].busy > picoseconds{0});
  CHECK(r.outputs.at("emb").shape() == shape{8, 128, 256});
}

TEST_CASE("GatherElements picks data along its axis at each index, fed or constant", "[graph][gather_elements]") {
  // onnx.ai's second example: axis 0 of a 3x3 with [[1, 2, 0], [2, 0, 0]].
  for (const bool fed : {true, false}) {
    CAPTURE(fed);
    graph g("ge");
    auto data = g.add_input("data", {3, 3}, dtype::f32);
    const tensor iv({2, 3}, dtype::i32, {1, 2, 0, 2, 0, 0});
    auto idx = fed ? g.add_input("idx", {2, 3}, dtype::i32)
                   : g.add_constant("idx", tensor({2, 3}, dtype::i32, {1, 2, 0, 2, 0, 0}));
    g.set_output(g.add_op("GatherElements", {data, idx}, {{"axis", std::int64_t{0}}}, "y"));
    auto sys = npurt::test::make_system();
    session s{sys};
    const tensor dv({3, 3}, dtype::f32, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    std::vector<feed> feeds{{"data", dv}};
    if (fed) feeds.push_back({"idx", iv});
    CHECK(s.run(s.compile(g), feeds).outputs.at("y").to_vector() == std::vector<double>{4, 8, 3, 7, 2, 3});
  }
  const auto bad = [](shape is, dtype t, std::vector<double> v, std::int64_t axis = 0) {
    graph g("bad");
    auto data = g.add_input("data", {3, 3}, dtype::f32);
    g.add_op("GatherElements", {data, g.add_constant("idx", tensor(is, t, v))}, {{"axis", axis}}, "y");
  };
  npurt::test::expect_graph_error([&] { bad({2, 4}, dtype::i64, std::vector<double>(8, 0)); }, errc::invalid_shape, "y",
                                  "idx");
  npurt::test::expect_graph_error([&] { bad({2}, dtype::i64, {0, 0}); }, errc::invalid_shape, "y", "idx");
  npurt::test::expect_graph_error([&] { bad({1, 1}, dtype::f32, {0}); }, errc::invalid_dtype, "y", "idx");
  npurt::test::expect_graph_error([&] { bad({1, 1}, dtype::i64, {3}); }, errc::invalid_argument, "y", "idx");
  npurt::test::expect_graph_error([&] { bad({1, 1}, dtype::i64, {0}, 2); }, errc::invalid_argument, "y", "data");
}
