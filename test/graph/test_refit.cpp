// session::set_constant: refitting a compiled graph's constants without compiling it again.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace npurt;

namespace {

// y = x[1,2] . w[2,2]: small integers, exact in fp16 too.
graph matmul_graph() {
  graph g("mm");
  auto x = g.add_input("x", {1, 2}, dtype::f32);
  auto w = g.add_constant("w", tensor({2, 2}, dtype::f32, {1, 2, 3, 4}));
  g.set_output(g.add_op("MatMul", {x, w}, {}, "y"));
  return g;
}

tensor x12() { return tensor({1, 2}, dtype::f32, {1, 2}); }
tensor w5678() { return tensor({2, 2}, dtype::f32, {5, 6, 7, 8}); }

// x[8,16] -> Gemm(w1, b1, beta 0.5) -> Relu -> Gemm(w2) -> Tanh; random weights, so the fp16
// casts of the constants round.
graph mlp() {
  graph g("mlp");
  auto x = g.add_input("x", {8, 16}, dtype::f32);
  auto w1 = g.add_constant("w1", test::random_tensor({16, 32}, 1, 0.3));
  auto b1 = g.add_constant("b1", test::random_tensor({32}, 2, 0.1));
  auto w2 = g.add_constant("w2", test::random_tensor({32, 4}, 3, 0.3));
  auto h = g.add_op("Gemm", {x, w1, b1}, {{"beta", 0.5}}, "fc1");
  auto r = g.add_op("Relu", {h}, {}, "relu1");
  auto y = g.add_op("Gemm", {r, w2}, {}, "fc2");
  g.set_output(g.add_op("Tanh", {y}, {}, "out"));
  return g;
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && a.type() == b.type() && a.bytes() == b.bytes() &&
         std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Runs f, expects an error of this code whose words contain `words`.
template <class F>
void expect_refusal(F f, errc code, const std::string& words) {
  try {
    f();
    FAIL("no error");
  } catch (const error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).find("npurt::session::set_constant: ") == 0);
    CHECK(std::string(e.what()).find(words) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("set_constant: the next run reads the new value, a run queued before reads the old one",
          "[graph][run][refit]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = matmul_graph();
  const auto c = s.compile(g);
  // [1 2] . [[1 2] [3 4]] = [7 10]; with [[5 6] [7 8]]: [19 22].
  CHECK(s.run(c, {{"x", x12()}}).outputs.at("y").to_vector() == std::vector<double>{7, 10});
  std::vector<double> before, after;
  s.async_run(c, {{"x", x12()}}, [&](async_error_code ec, run_result r) {
    REQUIRE_FALSE(ec);
    before = r.outputs.at("y").to_vector();
  });
  s.set_constant(c, "w", w5678());
  s.async_run(c, {{"x", x12()}}, [&](async_error_code ec, run_result r) {
    REQUIRE_FALSE(ec);
    after = r.outputs.at("y").to_vector();
  });
  CHECK(s.run(c, {{"x", x12()}}).outputs.at("y").to_vector() == std::vector<double>{19, 22});
  sys.run();
  CHECK(before == std::vector<double>{7, 10});
  CHECK(after == std::vector<double>{19, 22});
  // The graph the session compiled from is the user's: it keeps its own value.
  CHECK(g.constant("w")->to_vector() == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("set_constant waits for a run in flight whose reader runs on another stream", "[graph][run][refit]") {
  // Pipeline stages of two steps each: `w` is read by the last step, on the second stage's
  // stream, after a long MatMul there; the copy is queued on the copy-in stream.
  constexpr std::int64_t n = 512;
  graph g("stages");
  auto x = g.add_input("x", {n, n}, dtype::f32);
  tensor eye({n, n}, dtype::f32);
  for (std::int64_t i = 0; i < n; ++i) eye.set(i * n + i, 1.0);
  auto i1 = g.add_constant("i1", eye.clone());
  auto i2 = g.add_constant("i2", eye.clone());
  auto w = g.add_constant("w", tensor({n, 1}, dtype::f32, std::vector<double>(n, 1.0)));
  auto h1 = g.add_op("MatMul", {x, i1}, {}, "h1");
  auto h2 = g.add_op("Relu", {h1}, {}, "h2");
  auto h3 = g.add_op("MatMul", {h2, i2}, {}, "h3");
  g.set_output(g.add_op("MatMul", {h3, w}, {}, "y"));
  for (const schedule sc : {schedule::sequential, schedule::pipeline}) {
    INFO("schedule " << to_string(sc));
    auto sys = test::make_system();
    session s{sys};
    const auto c = s.compile(g, {.schedule = sc, .pipeline_stages = 2});
    const tensor in({n, n}, dtype::f32, std::vector<double>(static_cast<std::size_t>(n * n), 1.0));
    // Each row of ones . I . I sums w's column: n ones give n; n twos 2n.
    std::vector<double> before;
    s.async_run(c, {{"x", in}}, [&](async_error_code ec, run_result r) {
      REQUIRE_FALSE(ec);
      before = r.outputs.at("y").to_vector();
    });
    s.set_constant(c, "w", tensor({n, 1}, dtype::f32, std::vector<double>(n, 2.0)));
    const auto after = s.run(c, {{"x", in}}).outputs.at("y").to_vector();
    sys.run();
    CHECK(before == std::vector<double>(n, static_cast<double>(n)));
    CHECK(after == std::vector<double>(n, 2.0 * n));
  }
}

TEST_CASE("set_constant equals a fresh compile with the new constant, bit for bit", "[graph][run][refit]") {
  const tensor x = test::random_tensor({8, 16}, 9);
  for (const precision p : {precision::fp32, precision::fp16, precision::mixed}) {
    for (const int level : {0, 2}) {
      INFO("precision " << to_string(p) << ", level " << level);
      auto sys = test::make_system();
      session s{sys, {.precision = p}};
      graph g = mlp();
      const auto c = s.compile(g, {.optimization_level = level});
      const tensor old_out = s.run(c, {{"x", x}}).outputs.at("out").clone();
      s.set_constant(c, "w1", test::random_tensor({16, 32}, 21, 0.3));
      s.set_constant(c, "b1", test::random_tensor({32}, 22, 0.1));  // scaled by Gemm's beta
      s.set_constant(c, "w2", test::random_tensor({32, 4}, 23, 0.3));
      const auto refitted = s.run(c, {{"x", x}});
      g.set_constant("w1", test::random_tensor({16, 32}, 21, 0.3));
      g.set_constant("b1", test::random_tensor({32}, 22, 0.1));
      g.set_constant("w2", test::random_tensor({32, 4}, 23, 0.3));
      const auto fresh = s.run(s.compile(g, {.optimization_level = level}), {{"x", x}});
      CHECK(same_bytes(refitted.outputs.at("out"), fresh.outputs.at("out")));
      CHECK_FALSE(same_bytes(refitted.outputs.at("out"), old_out));
    }
  }
}

TEST_CASE("set_constant of a parameter read when a run is lowered (Clip's bound) takes effect", "[graph][run][refit]") {
  for (const precision p : {precision::fp32, precision::fp16}) {
    auto sys = test::make_system();
    session s{sys, {.precision = p}};
    graph g("clip");
    auto x = g.add_input("x", {4}, dtype::f32);
    auto lo = g.add_constant("lo", tensor(shape{}, dtype::f32, {0.0}));
    auto hi = g.add_constant("hi", tensor(shape{}, dtype::f32, {6.0}));
    g.set_output(g.add_op("Clip", {x, lo, hi}, {}, "y"));
    const auto c = s.compile(g);
    const tensor in({4}, dtype::f32, {-2, 0.5, 3, 8});
    CHECK(s.run(c, {{"x", in}}).outputs.at("y").to_vector() == std::vector<double>{0, 0.5, 3, 6});
    s.set_constant(c, "hi", tensor(shape{}, dtype::f32, {1.0}));
    CHECK(s.run(c, {{"x", in}}).outputs.at("y").to_vector() == std::vector<double>{0, 0.5, 1, 1});
  }
}

TEST_CASE("set_constant refuses what it cannot set and changes nothing", "[graph][errors][refit]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = matmul_graph();
  const auto c = s.compile(g);
  const auto unchanged = [&] {
    CHECK(s.run(c, {{"x", x12()}}).outputs.at("y").to_vector() == std::vector<double>{7, 10});
  };
  test::expect_graph_error([&] { s.set_constant(c, "v", w5678()); }, errc::invalid_argument, "", "v");
  expect_refusal([&] { s.set_constant(c, "v", w5678()); }, errc::invalid_argument, "not a constant");
  expect_refusal([&] { s.set_constant(c, "x", w5678()); }, errc::invalid_argument, "an input of the graph");
  expect_refusal([&] { s.set_constant(c, "y", w5678()); }, errc::invalid_argument, "an activation");
  test::expect_graph_error([&] { s.set_constant(c, "w", tensor({4}, dtype::f32, {5, 6, 7, 8})); }, errc::invalid_shape,
                           "", "w");
  expect_refusal([&] { s.set_constant(c, "w", tensor({4}, dtype::f32, {5, 6, 7, 8})); }, errc::invalid_shape,
                 "is [2,2], given [4]");
  expect_refusal([&] { s.set_constant(c, "w", tensor({2, 2}, dtype::f16, {5, 6, 7, 8})); }, errc::invalid_dtype,
                 "is f32, given f16");
  expect_refusal([&] { s.set_constant(c, "w", tensor::timing_only({2, 2}, dtype::f32)); }, errc::invalid_argument,
                 "timing-only tensor");
  expect_refusal([&] { s.set_constant(c, "w", tensor::on_device(s.device(), {2, 2}, dtype::f32)); },
                 errc::invalid_argument, "device tensor");
  unchanged();
  // The error_code form: the same refusal, its words left for recent_error_message.
  std::error_code ec;
  s.set_constant(c, "w", tensor({4}, dtype::f32, {5, 6, 7, 8}), ec);
  CHECK(ec == errc::invalid_shape);
  CHECK(sys.recent_error_message().find("npurt::session::set_constant: constant 'w' is [2,2]") != std::string::npos);
  s.set_constant(c, "w", w5678(), ec);
  CHECK_FALSE(ec);
  CHECK(s.run(c, {{"x", x12()}}).outputs.at("y").to_vector() == std::vector<double>{19, 22});
  // An empty compiled graph, and one of another session.
  expect_refusal([&] { s.set_constant(compiled_graph{}, "w", w5678()); }, errc::invalid_argument, "empty");
  session other{sys};
  expect_refusal([&] { other.set_constant(c, "w", w5678()); }, errc::invalid_argument, "another session");
}

TEST_CASE("set_constant refuses a graph compiled timing-only", "[graph][errors][refit]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = matmul_graph();
  const auto c = s.compile(g, {.timing_only = true});
  expect_refusal([&] { s.set_constant(c, "w", w5678()); }, errc::not_supported, "timing-only");
}

TEST_CASE("set_constant refuses a constant folded with a BatchNormalization, and sets it at level 1",
          "[graph][errors][refit]") {
  graph g("cbn");
  auto x = g.add_input("x", {1, 1, 2, 2}, dtype::f32);
  auto w = g.add_constant("w", tensor({1, 1, 1, 1}, dtype::f32, {2.0}));
  auto scale = g.add_constant("scale", tensor({1}, dtype::f32, {3.0}));
  auto bias = g.add_constant("bias", tensor({1}, dtype::f32, {1.0}));
  auto mean = g.add_constant("mean", tensor({1}, dtype::f32, {0.0}));
  auto var = g.add_constant("var", tensor({1}, dtype::f32, {1.0}));
  auto conv = g.add_op("Conv", {x, w}, {}, "conv");
  g.set_output(g.add_op("BatchNormalization", {conv, scale, bias, mean, var}, {{"epsilon", 0.0}}, "bn"));
  const tensor in({1, 1, 2, 2}, dtype::f32, {1, 2, 3, 4});
  auto sys = test::make_system();
  session s{sys};
  const auto folded = s.compile(g, {.optimization_level = 2});
  REQUIRE(folded.report().fused == 1);
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    INFO(name);
    expect_refusal([&] { s.set_constant(folded, name, tensor({1}, dtype::f32, {2.0})); }, errc::not_supported,
                   "compile at level 1 to set it");
  }
  expect_refusal([&] { s.set_constant(folded, "w", tensor({1, 1, 1, 1}, dtype::f32, {4.0})); }, errc::not_supported,
                 "folded with BatchNormalization 'bn' into Conv 'conv'");
  // y = (x * w - mean) / sqrt(var) * scale + bias: with w 2, x * 6 + 1; with w 4, x * 12 + 1.
  CHECK(s.run(folded, {{"x", in}}).outputs.at("bn").to_vector() == std::vector<double>{7, 13, 19, 25});
  const auto unfolded = s.compile(g, {.optimization_level = 1});
  s.set_constant(unfolded, "w", tensor({1, 1, 1, 1}, dtype::f32, {4.0}));
  CHECK(s.run(unfolded, {{"x", in}}).outputs.at("bn").to_vector() == std::vector<double>{13, 25, 37, 49});
}

TEST_CASE("set_constant refuses a value that changes an output's shape", "[graph][errors][refit]") {
  graph g("reshape");
  auto x = g.add_input("x", {4, 4}, dtype::f32);
  auto sh = g.add_constant("shape", test::ints_tensor({2, 8}));
  g.set_output(g.add_op("Reshape", {x, sh}, {}, "y"));
  auto sys = test::make_system();
  session s{sys};
  const auto c = s.compile(g);
  test::expect_graph_error([&] { s.set_constant(c, "shape", test::ints_tensor({8, 2})); }, errc::not_supported, "y",
                           "shape");
  expect_refusal([&] { s.set_constant(c, "shape", test::ints_tensor({8, 2})); }, errc::not_supported,
                 "[2,8] f32 as compiled, [8,2] f32 with the new value");
  // The same shape again is no change at all.
  CHECK_NOTHROW(s.set_constant(c, "shape", test::ints_tensor({2, 8})));
  const auto r = s.run(c, {{"x", tensor({4, 4}, dtype::f32, test::iota(16))}});
  CHECK(r.outputs.at("y").shape() == shape{2, 8});
  CHECK(r.outputs.at("y").to_vector() == test::iota(16));
}

TEST_CASE("set_constant on a session whose device was reset says to make a new one", "[graph][errors][refit]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = matmul_graph();
  const auto c = s.compile(g);
  s.device().reset();
  expect_refusal([&] { s.set_constant(c, "w", w5678()); }, errc::invalid_stream, "make a new session");
}

TEST_CASE("async_set_constant completes once the value is on the device, or with the refusal's code",
          "[graph][run][refit]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = matmul_graph();
  const auto c = s.compile(g);
  int calls = 0;
  std::error_code refused;
  s.async_set_constant(c, "w", tensor({3}, dtype::f32), [&](async_error_code ec) {
    ++calls;
    refused = ec;
  });
  bool done = false;
  s.async_set_constant(c, "w", w5678(), [&](async_error_code ec) {
    ++calls;
    CHECK_FALSE(ec);
    done = true;
  });
  sys.run();
  CHECK(calls == 2);
  CHECK(refused == errc::invalid_shape);
  CHECK(sys.recent_error_message().starts_with("npurt::session::async_set_constant: constant 'w' is [2,2], given [3]"));
  CHECK(done);
  CHECK(s.run(c, {{"x", x12()}}).outputs.at("y").to_vector() == std::vector<double>{19, 22});
}
