// ScatterND, ScatterElements (and the deprecated Scatter), GatherND and TopK
// (onnx.ai/onnx/operators): inference, values through compiled runs against references written
// here from ONNX's definitions, fp16 sessions leaving the integer tensors alone, the typed
// errors, and an index out of range at run time failing session::run with the index named.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// onnx.ai's ScatterND on a row-major vector: each index tuple (k values) names the start of a
// slice of `slice` elements; the updates are written (or added) there in index order.
std::vector<double> gs_scatter_nd(std::vector<double> data, const shape& ds, const std::vector<double>& idx,
                                  std::size_t k, const std::vector<double>& upd, bool add) {
  std::size_t slice = 1;
  for (std::size_t d = k; d < ds.rank(); ++d) slice *= static_cast<std::size_t>(ds[d]);
  for (std::size_t i = 0; i < idx.size() / k; ++i) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < ds.rank(); ++d) {
      std::int64_t c = 0;
      if (d < k) {
        c = static_cast<std::int64_t>(idx[i * k + d]);
        if (c < 0) c += ds[d];
      }
      flat = flat * ds[d] + c;
    }
    for (std::size_t e = 0; e < slice; ++e) {
      double& dst = data[static_cast<std::size_t>(flat) + e];
      dst = add ? dst + upd[i * slice + e] : upd[i * slice + e];
    }
  }
  return data;
}

}  // namespace

TEST_CASE("ScatterND writes slices where its index tuples point, fed or constant, with reductions",
          "[graph][scatter]") {
  auto sys = test::make_system();
  const shape ds{2, 3, 4};
  const std::vector<double> dv = test::iota(24);
  const std::vector<double> iv{1, -1, 0, 0, 1, 2};  // (1, 2) and (0, 0) and (1, 2) again: the last wins
  const std::vector<double> uv{-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12};
  for (const bool fed : {true, false})
    for (const char* red : {"none", "add"})
      for (int level : {0, 2}) {
        CAPTURE(fed, red, level);
        graph g("scatter");
        auto data = g.add_input("data", ds, dtype::f32);
        auto idx = fed ? g.add_input("idx", {3, 2}, dtype::i64) : g.add_constant("idx", tensor({3, 2}, dtype::i64, iv));
        auto upd = g.add_input("upd", {3, 4}, dtype::f32);
        g.set_output(g.add_op("ScatterND", {data, idx, upd}, {{"reduction", std::string(red)}}, "y"));
        CHECK(g.value("y").shape == ds);
        session s{sys};
        const tensor dt(ds, dtype::f32, dv), ut({3, 4}, dtype::f32, uv), it({3, 2}, dtype::i64, iv);
        std::vector<feed> feeds{{"data", dt}, {"upd", ut}};
        if (fed) feeds.push_back({"idx", it});
        const auto r = s.run(s.compile(g, {.optimization_level = level}), feeds);
        CHECK(r.outputs.at("y").to_vector() == gs_scatter_nd(dv, ds, iv, 2, uv, std::string(red) == "add"));
      }
}

TEST_CASE("ScatterElements and Scatter write along their axis; GatherND reads tuples with batch_dims",
          "[graph][scatter]") {
  auto sys = test::make_system();
  // onnx.ai's ScatterElements example 2, with a negative axis and a negative index.
  for (const char* op : {"ScatterElements", "Scatter"}) {
    CAPTURE(op);
    graph g("se");
    auto data = g.add_input("data", {1, 5}, dtype::f32);
    auto idx = g.add_input("idx", {1, 2}, dtype::i32);
    auto upd = g.add_input("upd", {1, 2}, dtype::f32);
    g.set_output(g.add_op(op, {data, idx, upd}, {{"axis", std::int64_t{-1}}}, "y"));
    session s{sys};
    const auto r = s.run(s.compile(g), {{"data", tensor({1, 5}, dtype::f32, {1, 2, 3, 4, 5})},
                                        {"idx", tensor({1, 2}, dtype::i32, {1, -2})},
                                        {"upd", tensor({1, 2}, dtype::f32, {1.5, 2.5})}});
    CHECK(r.outputs.at("y").to_vector() == std::vector<double>{1, 1.5, 3, 2.5, 5});
  }
  {
    // max: opset 18's reduction, int64 data.
    graph g("se_max");
    auto data = g.add_input("data", {3}, dtype::i64);
    auto idx = g.add_constant("idx", tensor({4}, dtype::i64, {0, 0, 2, 1}));
    auto upd = g.add_input("upd", {4}, dtype::i64);
    g.set_output(g.add_op("ScatterElements", {data, idx, upd}, {{"reduction", std::string("max")}}, "y"));
    session s{sys};
    const auto r = s.run(
        s.compile(g), {{"data", tensor({3}, dtype::i64, {5, 5, 5})}, {"upd", tensor({4}, dtype::i64, {7, 9, 1, 6})}});
    CHECK(r.outputs.at("y").to_vector() == std::vector<double>{9, 6, 5});
  }
  {
    // onnx.ai's GatherND example 5: batch_dims 1, a tuple of one index per batch.
    graph g("gnd");
    auto data = g.add_input("data", {2, 2, 2}, dtype::f32);
    auto idx = g.add_input("idx", {2, 1}, dtype::i64);
    g.set_output(g.add_op("GatherND", {data, idx}, {{"batch_dims", std::int64_t{1}}}, "y"));
    CHECK(g.value("y").shape == shape{2, 2});
    // Full tuples: a scalar per tuple.
    auto idx2 = g.add_constant("idx2", tensor({2, 3}, dtype::i64, {1, 1, 1, 0, -1, 0}));
    g.set_output(g.add_op("GatherND", {data, idx2}, {}, "z"));
    CHECK(g.value("z").shape == shape{2});
    session s{sys};
    const auto r = s.run(s.compile(g), {{"data", tensor({2, 2, 2}, dtype::f32, test::iota(8))},
                                        {"idx", tensor({2, 1}, dtype::i64, {1, 0})}});
    CHECK(r.outputs.at("y").to_vector() == std::vector<double>{2, 3, 4, 5});
    CHECK(r.outputs.at("z").to_vector() == std::vector<double>{7, 2});
  }
}

TEST_CASE("TopK gives values and int64 indices along its axis; k must be a constant", "[graph][topk]") {
  auto sys = test::make_system();
  const std::vector<double> xv{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};  // [2, 6]
  const auto run = [&](const attributes& a, std::int64_t k, precision p) {
    graph g("topk");
    auto x = g.add_input("x", {2, 6}, dtype::f32);
    auto kc = g.add_constant("k", tensor({1}, dtype::i64, {static_cast<double>(k)}));
    g.add_node("TopK", "top", {x, kc}, {"values", "indices"}, a);
    g.set_output("values");
    g.set_output("indices");
    CHECK(g.value("indices").type == dtype::i64);
    session s{sys, {.precision = p}};
    return s.run(s.compile(g), {{"x", tensor({2, 6}, dtype::f32, xv)}});
  };
  for (const precision p : {precision::fp32, precision::fp16}) {
    CAPTURE(p == precision::fp16);
    auto r = run({}, 3, p);
    // Largest first along the last axis; the 5s of the second row keep the lower index first.
    CHECK(r.outputs.at("values").type() == dtype::f32);
    CHECK(r.outputs.at("indices").type() == dtype::i64);
    CHECK(r.outputs.at("values").to_vector() == std::vector<double>{9, 5, 4, 8, 6, 5});
    CHECK(r.outputs.at("indices").to_vector() == std::vector<double>{5, 4, 2, 5, 1, 2});
    r = run({{"largest", std::int64_t{0}}, {"axis", std::int64_t{1}}}, 2, p);
    CHECK(r.outputs.at("values").to_vector() == std::vector<double>{1, 1, 2, 3});
    CHECK(r.outputs.at("indices").to_vector() == std::vector<double>{1, 3, 0, 3});
  }
}

TEST_CASE("the index operators refuse what ONNX refuses, naming the node and the tensor", "[graph][scatter][errors]") {
  graph g("errors");
  auto data = g.add_input("data", {4, 6}, dtype::f32);
  auto idx = g.add_input("idx", {2, 1}, dtype::i64);
  auto upd = g.add_input("upd", {2, 6}, dtype::f32);
  SECTION("ScatterND") {
    auto deep = g.add_input("deep", {2, 3}, dtype::i64);
    expect_graph_error([&] { g.add_op("ScatterND", {data, deep, upd}, {}, "sn"); }, errc::invalid_shape, "sn", "deep");
    auto short_upd = g.add_input("short_upd", {2, 5}, dtype::f32);
    expect_graph_error([&] { g.add_op("ScatterND", {data, idx, short_upd}, {}, "sn"); }, errc::invalid_shape, "sn",
                       "short_upd");
    auto fi = g.add_input("fi", {2, 1}, dtype::f32);
    expect_graph_error([&] { g.add_op("ScatterND", {data, fi, upd}, {}, "sn"); }, errc::invalid_dtype, "sn", "fi");
    auto iu = g.add_input("iu", {2, 6}, dtype::i32);
    expect_graph_error([&] { g.add_op("ScatterND", {data, idx, iu}, {}, "sn"); }, errc::invalid_dtype, "sn", "iu");
    expect_graph_error([&] { g.add_op("ScatterND", {data, idx, upd}, {{"reduction", std::string("sum")}}, "sn"); },
                       errc::invalid_argument, "sn", "");
    auto past = g.add_constant("past", tensor({2, 1}, dtype::i64, {0, 4}));
    expect_graph_error([&] { g.add_op("ScatterND", {data, past, upd}, {}, "sn"); }, errc::invalid_argument, "sn",
                       "past");
    expect_graph_error([&] { g.add_op("ScatterND", {data, idx}, {}, "sn"); }, errc::invalid_argument, "sn", "");
  }
  SECTION("ScatterElements") {
    auto wide = g.add_input("wide", {2, 7}, dtype::i64);
    auto wide_upd = g.add_input("wide_upd", {2, 7}, dtype::f32);
    expect_graph_error([&] { g.add_op("ScatterElements", {data, wide, wide_upd}, {}, "se"); }, errc::invalid_shape,
                       "se", "wide");
    auto i2 = g.add_input("i2", {2, 6}, dtype::i64);
    auto u3 = g.add_input("u3", {2, 5}, dtype::f32);
    expect_graph_error([&] { g.add_op("ScatterElements", {data, i2, u3}, {}, "se"); }, errc::invalid_shape, "se", "u3");
    expect_graph_error([&] { g.add_op("ScatterElements", {data, i2, upd}, {{"axis", std::int64_t{2}}}, "se"); },
                       errc::invalid_argument, "se", "data");
    auto neg = g.add_constant("neg", tensor({1, 1}, dtype::i32, {-7}));
    auto u1 = g.add_input("u1", {1, 1}, dtype::f32);
    expect_graph_error([&] { g.add_op("ScatterElements", {data, neg, u1}, {{"axis", std::int64_t{1}}}, "se"); },
                       errc::invalid_argument, "se", "neg");
  }
  SECTION("GatherND") {
    auto b = g.add_input("b", {3, 1}, dtype::i64);
    expect_graph_error([&] { g.add_op("GatherND", {data, b}, {{"batch_dims", std::int64_t{1}}}, "gn"); },
                       errc::invalid_shape, "gn", "b");
    expect_graph_error([&] { g.add_op("GatherND", {data, idx}, {{"batch_dims", std::int64_t{2}}}, "gn"); },
                       errc::invalid_argument, "gn", "idx");
    auto deep = g.add_input("deep", {2, 3}, dtype::i64);
    expect_graph_error([&] { g.add_op("GatherND", {data, deep}, {}, "gn"); }, errc::invalid_shape, "gn", "deep");
    auto past = g.add_constant("past", tensor({1, 2}, dtype::i64, {3, 6}));
    expect_graph_error([&] { g.add_op("GatherND", {data, past}, {}, "gn"); }, errc::invalid_argument, "gn", "past");
  }
  SECTION("TopK") {
    auto fed = g.add_input("kf", {1}, dtype::i64);
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, fed}, {"v", "i"}, {}); }, errc::not_supported, "tk", "kf");
    auto big = g.add_constant("big", tensor({1}, dtype::i64, {7}));
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, big}, {"v", "i"}, {}); }, errc::invalid_argument, "tk",
                       "big");
    auto zero = g.add_constant("zero", tensor({1}, dtype::i64, {0}));
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, zero}, {"v", "i"}, {}); }, errc::invalid_argument, "tk",
                       "zero");
    auto k32 = g.add_constant("k32", tensor({1}, dtype::i32, {2}));
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, k32}, {"v", "i"}, {}); }, errc::invalid_dtype, "tk",
                       "k32");
    auto two = g.add_constant("two", tensor({2}, dtype::i64, {1, 2}));
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, two}, {"v", "i"}, {}); }, errc::invalid_shape, "tk",
                       "two");
    auto k = g.add_constant("k", tensor({1}, dtype::i64, {2}));
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, k}, {"v", "i"}, {{"axis", std::int64_t{2}}}); },
                       errc::invalid_argument, "tk", "data");
    expect_graph_error([&] { g.add_node("TopK", "tk", {data, k}, {"v", "i"}, {{"sorted", std::int64_t{2}}}); },
                       errc::invalid_argument, "tk", "");
  }
  for (const char* op : {"ScatterND", "ScatterElements", "Scatter", "GatherND", "TopK"}) CHECK(is_supported_op(op));
}

TEST_CASE("an index out of range at run time fails session::run naming the node and the index",
          "[graph][scatter][errors]") {
  auto sys = test::make_system();
  graph g("cache");
  auto cache = g.add_input("cache", {1, 2, 4, 3}, dtype::f32);
  auto pos = g.add_input("pos", {1, 2, 1, 3}, dtype::i64);  // (batch, head, position) tuples
  auto kv = g.add_input("kv", {1, 2, 1, 3}, dtype::f32);
  g.set_output(g.add_op("ScatterND", {cache, pos, kv}, {}, "write"));
  session s{sys};
  auto c = s.compile(g);
  const tensor cv({1, 2, 4, 3}, dtype::f32, test::iota(24)), nv({1, 2, 1, 3}, dtype::f32, {-1, -2, -3, -4, -5, -6});
  try {
    (void)s.run(c, {{"cache", cv}, {"pos", tensor({1, 2, 1, 3}, dtype::i64, {0, 0, 3, 0, 1, 4})}, {"kv", nv}});
    FAIL("a write at position 4 of 4 succeeded");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::StartsWith("npurt::session::run: node 'write' (ScatterND): "));
    CHECK_THAT(e.what(),
               Catch::Matchers::ContainsSubstring("indices[5] = 4 is outside [-4, 3] (data axis 2 has 4 entries)"));
  }
  const tensor good({1, 2, 1, 3}, dtype::i64, {0, 0, 3, 0, 1, -1});
  const auto r = s.run(c, {{"cache", cv}, {"pos", good}, {"kv", nv}});
  CHECK(r.outputs.at("write").to_vector() ==
        gs_scatter_nd(test::iota(24), {1, 2, 4, 3}, good.to_vector(), 3, nv.to_vector(), false));
}

TEST_CASE("the index operators lower to one kernel each in a timing-only run", "[graph][scatter][timing]") {
  graph g("timing");
  auto cache = g.add_input("cache", {1, 12, 1024, 64}, dtype::f16);
  auto pos = g.add_input("pos", {1, 12, 1, 3}, dtype::i64);
  auto kv = g.add_input("kv", {1, 12, 1, 64}, dtype::f16);
  auto y = g.add_op("ScatterND", {cache, pos, kv}, {}, "write");
  g.add_node("TopK", "top", {y, g.add_constant("k", tensor({1}, dtype::i64, {50}))}, {"values", "indices"});
  g.set_output("values");
  g.set_output("indices");
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g, {.timing_only = true});
  CHECK(c.report().timing_only);
  auto r = s.run(c, {{"cache", tensor::timing_only({1, 12, 1024, 64}, dtype::f16)},
                     {"pos", tensor::timing_only({1, 12, 1, 3}, dtype::i64)},
                     {"kv", tensor::timing_only({1, 12, 1, 64}, dtype::f16)}});
  REQUIRE(r.ops.size() == 2);
  CHECK(r.ops[0].busy > picoseconds{0});
  CHECK(r.ops[1].busy > picoseconds{0});
  CHECK(r.outputs.at("values").shape() == shape{1, 12, 1024, 50});
  CHECK(r.outputs.at("indices").type() == dtype::i64);
}
