#include <npurt/graph/session.hpp>
#include <npurt/memplan.hpp>
#include <npurt/task.hpp>

#include "../../tools/run_inputs.hpp"
#include "helpers.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string_view>

using namespace npurt;

namespace {

// x[8,16] -> Gemm(16->32)+bias -> Relu -> Gemm(32->4) -> Softmax.
struct mlp {
  graph g{"mlp"};
  std::vector<double> w1 = test::values(16 * 32, 1, 0.3), b1 = test::values(32, 2, 0.1),
                      w2 = test::values(32 * 4, 3, 0.3);
  mlp() {
    auto x = g.add_input("x", {8, 16}, dtype::f32);
    auto W1 = g.add_constant("w1", tensor({16, 32}, dtype::f32, w1));
    auto B1 = g.add_constant("b1", tensor({32}, dtype::f32, b1));
    auto W2 = g.add_constant("w2", tensor({32, 4}, dtype::f32, w2));
    auto h = g.add_op("Gemm", {x, W1, B1}, {}, "fc1");
    auto r = g.add_op("Relu", {h}, {}, "relu1");
    auto y = g.add_op("Gemm", {r, W2}, {}, "fc2");
    g.set_output(g.add_op("Softmax", {y}, {{"axis", std::int64_t{1}}}, "prob"));
  }
  std::vector<double> reference(const std::vector<double>& x) const {
    auto h = test::ref_matmul(x, w1, 8, 16, 32, &b1);
    test::ref_relu(h);
    auto y = test::ref_matmul(h, w2, 8, 32, 4);
    for (int m = 0; m < 8; ++m) {
      double mx = -1e300, s = 0;
      for (int n = 0; n < 4; ++n) mx = std::max(mx, y[static_cast<std::size_t>(m * 4 + n)]);
      for (int n = 0; n < 4; ++n) s += std::exp(y[static_cast<std::size_t>(m * 4 + n)] - mx);
      for (int n = 0; n < 4; ++n)
        y[static_cast<std::size_t>(m * 4 + n)] = std::exp(y[static_cast<std::size_t>(m * 4 + n)] - mx) / s;
    }
    return y;
  }
};

// The seed's diamond: op1 feeds op2 and op3, op4 joins them. The input is large enough that
// its copy in outlasts the host's enqueueing, so op2 (cube) and op3 (vector) become ready at once.
graph diamond(std::int64_t rows = 2048, std::int64_t n = 256) {
  graph g("diamond");
  auto x = g.add_input("x", {rows, n}, dtype::f32);
  auto w = g.add_constant("w", test::random_tensor({n, n}, 5, 0.1));
  auto a = g.add_op("MatMul", {x, w}, {}, "op1");
  auto b = g.add_op("MatMul", {a, w}, {}, "op2");
  auto c = g.add_op("Tanh", {a}, {}, "op3");
  g.set_output(g.add_op("Add", {b, c}, {}, "op4"));
  return g;
}

}  // namespace

TEST_CASE("an MLP runs functionally and equals a plain reference at every optimisation level", "[graph][run]") {
  auto sys = test::make_system();
  session s{sys};
  mlp m;
  const auto xv = test::values(8 * 16, 9);
  tensor x({8, 16}, dtype::f32, xv);
  const auto ref = m.reference(xv);
  for (int level = 0; level <= 3; ++level) {
    auto c = s.compile(m.g, {.optimization_level = level});
    auto r = s.run(c, {{"x", x}});
    INFO("level " << level);
    REQUIRE(r.outputs.count("prob"));
    CHECK(test::max_abs_diff(r.outputs.at("prob").to_vector(), ref) < 1e-5);
    CHECK(r.latency > picoseconds{0});
    CHECK(r.ops.size() == c.report().operators);
    for (const auto& op : r.ops) {
      CHECK(op.start >= picoseconds{0});
      CHECK(op.end > op.start);
      CHECK(op.end <= r.latency);
    }
  }
  // Level 2 fuses the Relu into the first Gemm.
  CHECK(s.compile(m.g, {.optimization_level = 2}).report().fused == 1);
  CHECK(s.compile(m.g, {.optimization_level = 0}).report().fused == 0);
}

TEST_CASE("a run fed the wrong shape or dtype names the input", "[graph][run][errors]") {
  auto sys = test::make_system();
  session s{sys};
  mlp m;
  auto c = s.compile(m.g);
  tensor bad({8, 15}, dtype::f32);
  try {
    (void)s.run(c, {{"x", bad}});
    FAIL("no error");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(e.tensor() == "x");
  }
  tensor half({8, 16}, dtype::f16);
  CHECK_THROWS_AS(s.run(c, {{"x", half}}), graph_error);
  tensor ok({8, 16}, dtype::f32);
  CHECK_THROWS_AS(s.run(c, {{"y", ok}}), graph_error);
  CHECK_THROWS_AS(s.run(c, {}), graph_error);
}

TEST_CASE("Conv + BatchNormalization + Relu fused at level 2 equals the unfused graph", "[graph][run][fusion]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("cbr");
  auto x = g.add_input("x", {2, 3, 8, 8}, dtype::f32);
  auto w = g.add_constant("w", test::random_tensor({4, 3, 3, 3}, 11, 0.5));
  auto scale = g.add_constant("scale", tensor({4}, dtype::f32, {1.5, 0.5, 2.0, 1.0}));
  auto bias = g.add_constant("bias", tensor({4}, dtype::f32, {0.1, -0.2, 0.3, 0.0}));
  auto mean = g.add_constant("mean", tensor({4}, dtype::f32, {0.05, -0.1, 0.2, 0.0}));
  auto var = g.add_constant("var", tensor({4}, dtype::f32, {1.0, 0.25, 4.0, 0.5}));
  auto c = g.add_op("Conv", {x, w}, {{"pads", ints{1, 1, 1, 1}}}, "conv");
  auto bn = g.add_op("BatchNormalization", {c, scale, bias, mean, var}, {{"epsilon", 1e-5}}, "bn");
  g.set_output(g.add_op("Relu", {bn}, {}, "relu"));
  tensor in = test::random_tensor({2, 3, 8, 8}, 12);
  auto c0 = s.compile(g, {.optimization_level = 0});
  auto c2 = s.compile(g, {.optimization_level = 2});
  CHECK(c2.report().fused == 2);  // the BN folded, the Relu applied in the conv's kernel sequence
  CHECK(c2.report().operators == 1);
  CHECK(c0.report().operators == 3);
  auto r0 = s.run(c0, {{"x", in}});
  auto r2 = s.run(c2, {{"x", in}});
  const auto y0 = r0.outputs.at("relu").to_vector(), y2 = r2.outputs.at("relu").to_vector();
  CHECK(test::max_abs_diff(y0, y2) < 1e-4);
  double nonzero = 0;
  for (double v : y0) nonzero += v != 0;
  CHECK(nonzero > 0);
}

TEST_CASE("the parallel schedule overlaps the diamond's branches and equals the sequential run bit for bit",
          "[graph][run][schedule]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = diamond();
  tensor x = test::random_tensor({2048, 256}, 21);
  auto cs = s.compile(g, {.schedule = schedule::sequential});
  auto cp = s.compile(g, {.schedule = schedule::parallel, .max_parallelism = 2});
  CHECK(cs.report().streams == 1);
  CHECK(cp.report().streams == 2);
  auto rs = s.run(cs, {{"x", x}});
  auto rp = s.run(cp, {{"x", x}});
  CHECK(rs.outputs.at("op4").to_vector() == rp.outputs.at("op4").to_vector());
  auto find = [](const run_result& r, const std::string& n) {
    for (const auto& o : r.ops)
      if (o.name == n) return o;
    FAIL("no op " << n);
    return op_timing{};
  };
  const auto op2 = find(rp, "op2"), op3 = find(rp, "op3");
  CHECK(op2.stream != op3.stream);
  CHECK(op2.start < op3.end);  // the two intervals intersect
  CHECK(op3.start < op2.end);
  const auto s2 = find(rs, "op2"), s3 = find(rs, "op3");
  CHECK((s2.end <= s3.start || s3.end <= s2.start));  // one stream: no overlap
}

TEST_CASE("an execution hint keeps two operators on different streams", "[graph][run][schedule]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("hinted");
  auto x = g.add_input("x", {16}, dtype::f32);
  auto t = g.add_op("Abs", {x}, {}, "t");
  auto a = g.add_op("Relu", {t}, {}, "a");
  auto u = g.add_op("Neg", {x}, {}, "u");
  // With two streams taken, b goes to the one idle longest, a's, unless the hint keeps it apart.
  auto b = g.add_op("Sigmoid", {t}, {}, "b");
  g.set_output(g.add_op("Add", {g.add_op("Add", {a, b}), u}, {}, "c"));
  auto streams = [&] {
    std::map<std::string, std::uint32_t> st;
    for (auto& [n, k] : s.compile(g, {.schedule = schedule::parallel, .max_parallelism = 2}).schedule_order())
      st[n] = k;
    return st;
  };
  REQUIRE(streams()["a"] == streams()["b"]);
  g.hint_parallel("a", "b");
  CHECK(streams()["a"] != streams()["b"]);
}

TEST_CASE("the pipeline schedule raises throughput over a stream of batches with the same outputs",
          "[graph][run][schedule]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("wide_mlp");
  auto x = g.add_input("x", {512, 256}, dtype::f32);
  auto w1 = g.add_constant("w1", test::random_tensor({256, 256}, 1, 0.1));
  auto b1 = g.add_constant("b1", test::random_tensor({256}, 2, 0.1));
  auto w2 = g.add_constant("w2", test::random_tensor({256, 16}, 3, 0.1));
  auto h = g.add_op("Relu", {g.add_op("Gemm", {x, w1, b1})});
  g.set_output(g.add_op("Softmax", {g.add_op("Gemm", {h, w2})}, {}, "prob"));
  std::vector<tensor> xs;
  for (int b = 0; b < 6; ++b) xs.push_back(test::random_tensor({512, 256}, 100 + static_cast<std::uint64_t>(b)));
  std::vector<std::vector<feed>> batches;
  for (auto& t : xs) batches.push_back({{"x", t}});
  auto cs = s.compile(g, {.schedule = schedule::sequential});
  auto cp = s.compile(g, {.schedule = schedule::pipeline, .pipeline_stages = 2});
  CHECK(cp.report().streams == 3);  // two stages and the copy-in stream
  auto rs = s.run_batches(cs, batches);
  auto rp = s.run_batches(cp, batches);
  REQUIRE(rp.outputs.size() == 6);
  for (std::size_t b = 0; b < 6; ++b)
    CHECK(rs.outputs[b].at("prob").to_vector() == rp.outputs[b].at("prob").to_vector());
  // Two stages over six batches: batch k+1's first stage runs beside batch k's second, so the
  // pipeline approaches twice the sequential rate (under the shared execution queue, stages that
  // waited in one queue would give about 1.05).
  CHECK(rp.batches_per_second > 1.4 * rs.batches_per_second);
}

TEST_CASE("memory reuse shrinks the activation arena of a chain to its lower bound", "[graph][memory]") {
  graph g("chain");
  auto x = g.add_input("x", {64, 64}, dtype::f32);
  auto w = g.add_constant("w", tensor::timing_only({64, 64}, dtype::f32));
  std::string h = x;
  for (int i = 0; i < 8; ++i) h = g.add_op("MatMul", {h, w});
  g.set_output(h);
  const auto off = plan_memory(g, {.memory_reuse = false, .optimization_level = 0});
  const auto on = plan_memory(g, {.memory_reuse = true, .optimization_level = 0});
  CHECK(off.activation_bytes == 8 * 64 * 64 * 4);
  CHECK(on.activation_bytes == on.activation_lower_bound);
  CHECK(on.activation_bytes == 2 * 64 * 64 * 4);  // a producer and its consumer overlap at one step
  CHECK(on.timing_only);
}

TEST_CASE("in-place activations save memory and keep results", "[graph][memory]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("eltwise");
  auto x = g.add_input("x", {256}, dtype::f32);
  auto a = g.add_op("Sigmoid", {x});
  auto b = g.add_op("Tanh", {a});
  auto c = g.add_op("Relu", {b});
  g.set_output(g.add_op("Mul", {c, c}, {}, "out"));
  tensor in = test::random_tensor({256}, 3);
  auto c0 = s.compile(g, {.memory_reuse = false, .optimization_level = 0});
  auto c1 = s.compile(g, {.memory_reuse = false, .optimization_level = 1});
  CHECK(c1.report().in_place == 2);  // Tanh and Relu; Mul reads c twice and writes the output
  CHECK(c1.report().activation_bytes < c0.report().activation_bytes);
  auto y0 = s.run(c0, {{"x", in}}).outputs.at("out").to_vector();
  auto y1 = s.run(c1, {{"x", in}}).outputs.at("out").to_vector();
  CHECK(y0 == y1);
  for (std::size_t i = 0; i < y0.size(); ++i) {
    const double r = std::max(0.0, std::tanh(1.0 / (1.0 + std::exp(-in.get(static_cast<std::int64_t>(i))))));
    CHECK(std::abs(y0[i] - r * r) < 1e-5);
  }
}

TEST_CASE("fp16 and mixed precision insert casts and stay close to fp32", "[graph][precision]") {
  auto sys = test::make_system();
  mlp m;
  tensor x = test::random_tensor({8, 16}, 9);
  session s32{sys};
  const auto y32 = s32.run(s32.compile(m.g), {{"x", x}}).outputs.at("prob").to_vector();
  for (auto p : {precision::fp16, precision::mixed}) {
    session s{sys, {.precision = p}};
    auto c = s.compile(m.g);
    CHECK(c.report().casts_inserted > 0);
    auto r = s.run(c, {{"x", x}});
    CHECK(r.outputs.at("prob").type() == dtype::f32);
    const auto y = r.outputs.at("prob").to_vector();
    CHECK(test::max_abs_diff(y, y32) < 5e-3);
    CHECK(test::max_abs_diff(y, y32) > 0);  // really computed in half
  }
}

namespace {
npurt::task<void> run_in_task(session& s, const compiled_graph& c, std::vector<feed> in, run_result& got) {
  run_result r = co_await s.async_run(c, in, npurt::use_task);
  got = std::move(r);
}
}  // namespace

TEST_CASE("async_run completes through a coroutine with the same result as run, with either token",
          "[graph][run][task]") {
  auto sys = test::make_system();
  session s{sys};
  mlp m;
  tensor x = test::random_tensor({8, 16}, 9);
  auto c = s.compile(m.g);
  const auto expected = s.run(c, {{"x", x}});
  run_result got, got_task;
  boost::asio::co_spawn(
      sys.get_executor(),
      [&]() -> boost::asio::awaitable<void> {
        const std::vector<feed> in{{"x", x}};
        auto r = co_await s.async_run(c, in, boost::asio::use_awaitable);
        got = std::move(r);
      },
      boost::asio::detached);
  sys.run();
  bool ended = false;
  npurt::spawn(sys, run_in_task(s, c, {{"x", x}}, got_task), [&](std::exception_ptr e) { ended = !e; });
  sys.run();
  CHECK(ended);
  for (const run_result* r : {&got, &got_task}) {
    REQUIRE(r->outputs.count("prob"));
    CHECK(r->outputs.at("prob").to_vector() == expected.outputs.at("prob").to_vector());
    CHECK(r->latency == expected.latency);
  }
}

TEST_CASE("a feed made from a temporary keeps its tensor: vectors of feeds and async runs outlive it",
          "[graph][run][lifetime]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("g");
  g.set_output(g.add_op("Relu", {g.add_input("x", {2, 3}, dtype::f32)}, {}, "y"));
  auto c = s.compile(g);
  const std::vector<double> xs{-1, 2, -3, 4, -5, 6}, relu{0, 2, 0, 4, 0, 6};
  // The statement that made the temporaries is over when the run reads them: a feed that only
  // referred to its tensor would read a destroyed one here.
  const std::vector<feed> in{{"x", tensor({2, 3}, dtype::f32, xs)}};
  CHECK(in[0].value.shape() == shape{2, 3});
  CHECK(s.run(c, in).outputs.at("y").to_vector() == relu);
  // A copy of the vector shares the tensor (run_batches copies its batches).
  const std::vector<std::vector<feed>> batches(2, in);
  CHECK(s.run_batches(c, batches).outputs.at(1).at("y").to_vector() == relu);
  // A lvalue is still referred to, not copied: the caller's later writes are what a run sees.
  tensor named({2, 3}, dtype::f32, xs);
  const std::vector<feed> by_ref{{"x", named}};
  CHECK(&by_ref[0].value == &named);
  // A device tensor moved into an async run's feed, whose vector is gone before the run ends:
  // the run keeps it until it completes.
  run_result got;
  bool ended = false;
  {
    tensor dev_x = tensor::on_device(sys.device(0), {2, 3}, dtype::f32);
    dev_x.copy_from(tensor({2, 3}, dtype::f32, xs), s.stream(0));
    std::vector<feed> moved;
    moved.emplace_back("x", std::move(dev_x));
    s.async_run(c, moved, [&](npurt::async_error_code ec, run_result r) {
      ended = !ec;
      got = std::move(r);
    });
  }
  sys.run();
  CHECK(ended);
  CHECK(got.outputs.at("y").to_vector() == relu);
}

TEST_CASE("async_run awaited with use_awaitable leaves a bad feed's message in recent_error_message",
          "[graph][run][errors]") {
  // use_awaitable throws the code alone; the words the blocking run throws (naming the feed)
  // must still be readable, as runtime.md says of every awaited failure.
  auto sys = test::make_system();
  session s{sys};
  graph g("g");
  g.set_output(g.add_op("Relu", {g.add_input("x", {2, 3}, dtype::f32)}, {}, "y"));
  auto c = s.compile(g);
  const tensor wrong_shape({3, 2}, dtype::f32, std::vector<double>(6, 1.0));
  const tensor wrong_dtype({2, 3}, dtype::i32, std::vector<double>(6, 1.0));
  const tensor good({2, 3}, dtype::f32, std::vector<double>(6, 1.0));
  struct bad {
    const char* what;
    std::vector<feed> in;
    const char* names;  // what the message must name
  };
  const bad cases[] = {{"wrong shape", {{"x", wrong_shape}}, "'x'"},
                       {"wrong dtype", {{"x", wrong_dtype}}, "'x'"},
                       {"unknown name", {{"x", good}, {"z", good}}, "'z'"}};
  for (const auto& b : cases) {
    INFO(b.what);
    std::string blocking;
    std::error_code blocking_ec;
    try {
      (void)s.run(c, b.in);
      FAIL("the blocking run accepted a feed with " << b.what);
    } catch (const npurt::error& e) {
      blocking = e.what();
      blocking_ec = e.code();
    }
    CHECK(blocking.find(b.names) != std::string::npos);
    (void)sys.recent_error_message();  // whatever came before is not this call's
    std::error_code got;
    bool completed = false;
    boost::asio::co_spawn(
        sys.get_executor(),
        [&]() -> boost::asio::awaitable<void> {
          const std::vector<feed> in = b.in;
          try {
            (void)co_await s.async_run(c, in, boost::asio::use_awaitable);
          } catch (const boost::system::system_error& e) { got = e.code(); }
          completed = true;
        },
        boost::asio::detached);
    sys.run();
    REQUIRE(completed);
    CHECK(got == blocking_ec);
    // The blocking run's words, under async_run's own name.
    constexpr std::string_view run_call = "npurt::session::run: ";
    REQUIRE(blocking.starts_with(run_call));
    CHECK(sys.recent_error_message() == "npurt::session::async_run: " + blocking.substr(run_call.size()));
    CHECK(sys.recent_error_message().empty());  // read once, as aclGetRecentErrMsg
  }
}

namespace {
npurt::task<void> run_expecting_failure(session& s, const compiled_graph& c, std::vector<feed> in, std::string& what,
                                        std::error_code& code, bool& caller) {
  try {
    (void)co_await s.async_run(c, in, npurt::use_task);
  } catch (const npurt::error& e) {
    what = e.what();
    code = e.code();
    caller = dynamic_cast<const caller_error*>(&e) != nullptr;
  }
}
}  // namespace

TEST_CASE("async_run awaited with use_task throws what the blocking run throws, naming the node or feed",
          "[graph][run][errors][task]") {
  // runtime.md: an awaited task's failure goes to its awaiter in the same words; a run's words
  // name the operator whose kernel failed (here an index out of range fed at run time) or the
  // feed that was refused, which the error code alone cannot say.
  auto sys = test::make_system();
  session s{sys};
  graph g = test::embedding_lookup("embedding");
  auto c = s.compile(g);
  struct bad {
    const char* what;
    std::vector<feed> in;
    std::vector<const char*> names;  // what both messages must say
    errc code;
  };
  const bad cases[] = {{"an index out of range",
                        {{"ids", tensor({2}, dtype::i64, {0, 3})}},
                        {"node 'emb' (Gather)", "indices[1] = 3 is outside [-3, 2]"},
                        errc::invalid_argument},
                       {"a feed of the wrong shape",
                        {{"ids", tensor({3}, dtype::i64, {0, 1, 2})}},
                        {"input 'ids' expects shape [2], fed [3]"},
                        errc::invalid_shape}};
  for (const auto& b : cases) {
    INFO(b.what);
    std::string blocking;
    std::error_code blocking_code;
    try {
      (void)s.run(c, b.in);
      FAIL("the blocking run accepted " << b.what);
    } catch (const npurt::error& e) {
      blocking = e.what();
      blocking_code = e.code();
    }
    CHECK(blocking_code == b.code);
    std::string awaited;
    std::error_code code;
    bool caller = false;
    npurt::spawn(sys, run_expecting_failure(s, c, b.in, awaited, code, caller));
    sys.run();
    for (const char* n : b.names) {
      CHECK(blocking.find(n) != std::string::npos);
      CHECK(awaited.find(n) != std::string::npos);
    }
    CHECK(code == b.code);
    CHECK(caller);  // the blocking run's class too: caller_error, graph_error for the feed
    (void)sys.recent_error_message();
  }
  // The session goes on: a good run after the failures.
  run_result ok;
  npurt::spawn(sys, run_in_task(s, c, {{"ids", tensor({2}, dtype::i64, {2, 0})}}, ok));
  sys.run();
  CHECK(ok.outputs.at("emb").to_vector() == std::vector<double>{5, 6, 1, 2});
}

TEST_CASE("npurt-run's inputs are in range for their dtype: small signed, unsigned and boolean values",
          "[graph][tool]") {
  // What docs/graph.md promises: floats in [-1, 1), signed integers -4 .. 3, unsigned 0 .. 7,
  // bools 0 or 1, each value of the set drawn (4096 draws of 8 values leave none out).
  const shape sh{64, 64};
  struct want {
    dtype type;
    double lo, hi;  // floats: [lo, hi); integers: every whole value in [lo, hi]
  };
  const want cases[] = {{dtype::f32, -1, 1}, {dtype::f64, -1, 1}, {dtype::i8, -4, 3},    {dtype::i16, -4, 3},
                        {dtype::i32, -4, 3}, {dtype::i64, -4, 3}, {dtype::u8, 0, 7},     {dtype::u16, 0, 7},
                        {dtype::u32, 0, 7},  {dtype::u64, 0, 7},  {dtype::boolean, 0, 1}};
  for (const auto& w : cases) {
    INFO(to_string(w.type));
    const tensor t = npurt_run::make_input(sh, w.type, false, 1, 0);
    REQUIRE(t.type() == w.type);
    const auto v = t.to_vector();
    REQUIRE(v.size() == 64u * 64u);
    if (is_float(w.type)) {
      CHECK(std::all_of(v.begin(), v.end(), [&](double x) { return x >= w.lo && x < w.hi; }));
      CHECK(std::any_of(v.begin(), v.end(), [](double x) { return x < 0; }));
      continue;
    }
    std::set<double> seen(v.begin(), v.end());
    std::set<double> all;
    for (double x = w.lo; x <= w.hi; ++x) all.insert(x);
    CHECK(seen == all);
  }
  // Deterministic in the seed and the input's position, and different across both.
  const auto a = npurt_run::make_input(sh, dtype::i8, false, 7, 2).to_vector();
  CHECK(a == npurt_run::make_input(sh, dtype::i8, false, 7, 2).to_vector());
  CHECK(a != npurt_run::make_input(sh, dtype::i8, false, 8, 2).to_vector());
  CHECK(a != npurt_run::make_input(sh, dtype::i8, false, 7, 3).to_vector());
  // Timing-only: no data at all.
  CHECK_FALSE(npurt_run::make_input(sh, dtype::i8, true, 1, 0).has_storage());
}

TEST_CASE("each memory suggestion, applied, saves what it estimated", "[graph][memory][optimizer]") {
  auto sys = test::make_system();
  mlp m;
  const auto sugg = graph_optimizer(m.g).memory_suggestions();
  REQUIRE(sugg.size() >= 2);
  for (const auto& sg : sugg) {
    INFO(sg.description);
    CHECK(sg.saving_mb > 0);
    if (sg.rewritten) continue;  // recomputation: measured against its own plan (test_training.cpp)
    session base{sys};
    auto cb = base.compile(m.g, {.schedule = schedule::sequential, .memory_reuse = false, .optimization_level = 0});
    const double before = base.memory_usage().allocated_mb;
    session applied{sys, {.precision = sg.precision.value_or(precision::fp32)}};
    auto ca = applied.compile(m.g, sg.options);
    const double after = applied.memory_usage().allocated_mb;
    CHECK(std::abs((before - after) - sg.saving_mb) < 1e-9);
  }
}

TEST_CASE("a run is deterministic: same outputs, latency and per-op times twice", "[graph][run][determinism]") {
  auto once = [] {
    auto sys = test::make_system();
    session s{sys};
    graph g = diamond();
    tensor x = test::random_tensor({2048, 256}, 21);
    auto c = s.compile(g, {.schedule = schedule::parallel});
    return s.run(c, {{"x", x}});
  };
  auto a = once(), b = once();
  CHECK(a.latency == b.latency);
  CHECK(a.outputs.at("op4").to_vector() == b.outputs.at("op4").to_vector());
  REQUIRE(a.ops.size() == b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    CHECK(a.ops[i].name == b.ops[i].name);
    CHECK(a.ops[i].start == b.ops[i].start);
    CHECK(a.ops[i].end == b.ops[i].end);
  }
}

TEST_CASE("a session destroyed inside system::run with an async_run in flight completes it as aborted",
          "[graph][session][lifetime]") {
  // Inside run the destructor cannot wait for the run it queued: the run's completion comes
  // later and must not reach into the destroyed session (it did: a use after free under ASan).
  auto sys = test::make_system();
  const std::size_t free_before = sys.device(0).memory_info().free;
  auto s = std::make_unique<session>(sys);
  graph g("g");
  g.set_output(g.add_op("Relu", {g.add_input("x", {2, 3}, dtype::f32)}, {}, "y"));
  auto c = s->compile(g);
  const std::vector<feed> in{{"x", tensor({2, 3}, dtype::f32, {-1, 2, -3, 4, -5, 6})}};
  std::error_code got;
  std::string error;
  int completions = 0;
  boost::asio::post(sys.get_executor(), [&] {
    s->async_run(c, in, [&](async_error_code ec, run_result r) {
      got = ec;
      error = r.error;
      ++completions;
    });
    s.reset();
    c = {};
  });
  sys.run();
  CHECK(completions == 1);
  CHECK(got == errc::operation_aborted);
  CHECK(error.find("the session was destroyed before the run completed") != std::string::npos);
  CHECK(sys.recent_error_message() == error);
  // The run's queued work still ran on live memory (the pool went after it), and then every
  // byte went back to the device.
  std::error_code dev_ec;
  sys.device(0).synchronize(npurt::no_timeout, dev_ec);
  CHECK(!dev_ec);
  CHECK(sys.device(0).memory_info().free == free_before);

  // Awaited with use_task, the same words are thrown; a new session works.
  auto s2 = std::make_unique<session>(sys);
  auto c2 = s2->compile(g);
  std::string thrown;
  npurt::spawn(sys, [&]() -> npurt::task<void> {
    std::vector<feed> feeds{{"x", tensor({2, 3}, dtype::f32, {-1, 2, -3, 4, -5, 6})}};
    // Runs after this task has started the run and suspended in it.
    boost::asio::post(sys.get_executor(), [&] {
      s2.reset();
      c2 = {};
    });
    try {
      (void)co_await s2->async_run(c2, feeds, npurt::use_task);
    } catch (const npurt::error& e) {
      CHECK(e.code() == errc::operation_aborted);
      thrown = e.what();
    }
  });
  sys.run();
  CHECK(thrown.find("the session was destroyed before the run completed") != std::string::npos);
  session s3{sys};
  CHECK(s3.run(s3.compile(g), in).outputs.at("y").to_vector() == std::vector<double>{0, 2, 0, 4, 0, 6});
}

TEST_CASE("a session that outlives its system fails every call with invalid_argument", "[graph][session][lifetime]") {
  auto sys = std::make_unique<npurt::system>(sim::presets::ascend910(1));
  auto s = std::make_unique<session>(*sys);
  graph g("g");
  auto x = g.add_input("x", {2}, dtype::f32);
  g.set_output(g.add_op("Relu", {x}, {}, "y"));
  auto c = s->compile(g);
  tensor h({2}, dtype::f32, {1, -1});
  REQUIRE(s->run(c, {{"x", h}}).outputs.at("y").get(1) == 0);
  sys.reset();
  try {
    (void)s->run(c, {{"x", h}});
    FAIL("run after the system was destroyed");
  } catch (const caller_error& e) { CHECK(e.code() == errc::invalid_argument); }
  CHECK_THROWS_AS(s->compile(g), caller_error);
  CHECK(s->memory_usage().reserved_mb == 0);
  c = compiled_graph{};  // a compiled graph dying after the system gives nothing back
  s.reset();             // and the session's destructor touches nothing of the system
}

TEST_CASE("Gemm's beta scales a C fed at run time as it scales a constant one", "[graph][run]") {
  auto sys = test::make_system();
  session s{sys};
  graph g("gemm_beta");
  auto a = g.add_input("a", {2, 3}, dtype::f32);
  auto c = g.add_input("c", {3}, dtype::f32);
  auto b = g.add_constant("b", tensor({3, 3}, dtype::f32, {1, 0, 0, 0, 1, 0, 0, 0, 1}));
  g.set_output(g.add_op("Gemm", {a, b, c}, {{"alpha", 2.0}, {"beta", -0.5}, {"transB", std::int64_t{1}}}, "y"));
  const std::vector<double> av{1, 2, 3, -1, 0, 4}, cv{4, -2, 8};
  for (int level : {0, 2}) {
    auto r = s.run(s.compile(g, {.optimization_level = level}),
                   {{"a", tensor({2, 3}, dtype::f32, av)}, {"c", tensor({3}, dtype::f32, cv)}});
    // B is the identity: y = 2 a - 0.5 c, row by row.
    std::vector<double> want;
    for (std::size_t i = 0; i < av.size(); ++i) want.push_back(2 * av[i] - 0.5 * cv[i % 3]);
    CHECK(r.outputs.at("y").to_vector() == want);
  }
}
