// compile_options::capture_graph: the first run captures the operators as a stream_graph and
// every run launches it. Outputs are those of runs made call by call, bit for bit; the host pays
// graph_node_overhead per kernel instead of launch_overhead; parallel streams, all-reduces,
// refits and run-time failures behave as without it.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace npurt;

namespace {

// x[4,16] through `layers` Gemm + Relu pairs of 16x16: small kernels, so a run made call by
// call is bound by the host's launch cost.
graph deep_narrow(int layers) {
  graph g("deep_narrow");
  auto h = g.add_input("x", {4, 16}, dtype::f32);
  for (int l = 0; l < layers; ++l) {
    const std::string n = std::to_string(l);
    auto w = g.add_constant("w" + n, test::random_tensor({16, 16}, static_cast<std::uint32_t>(100 + l), 0.3));
    h = g.add_op("Relu", {g.add_op("Gemm", {h, w}, {}, "fc" + n)}, {}, "relu" + n);
  }
  g.set_output(h);
  return g;
}

// The diamond of the schedule tests: op2 (cube) and op3 (vector) may run side by side.
graph captured_diamond() {
  graph g("diamond");
  auto x = g.add_input("x", {1024, 256}, dtype::f32);
  auto w = g.add_constant("w", test::random_tensor({256, 256}, 5, 0.1));
  auto a = g.add_op("MatMul", {x, w}, {}, "op1");
  auto b = g.add_op("MatMul", {a, w}, {}, "op2");
  auto c = g.add_op("Tanh", {a}, {}, "op3");
  g.set_output(g.add_op("Add", {b, c}, {}, "op4"));
  return g;
}

const op_timing& op_named(const run_result& r, const std::string& n) {
  for (const auto& o : r.ops)
    if (o.name == n) return o;
  FAIL("no op " << n);
  return r.ops.front();
}

}  // namespace

TEST_CASE("a captured run computes what a run made call by call computes, and launches as one graph",
          "[graph][run][capture]") {
  // The host's cost per call as a framework's eager dispatch makes it (a small kernel's device
  // time is about the runtime's own 2.5 us launch cost: at that, both runs are device-bound).
  system_options opts;
  opts.launch_overhead = picoseconds{10'000'000};
  npurt::system sys{sim::make_backend(sim::presets::ascend910(1)), opts};
  session s{sys};
  graph g = deep_narrow(12);
  auto eager = s.compile(g);
  auto captured = s.compile(g, {.capture_graph = true});
  CHECK_FALSE(eager.report().graph);
  CHECK(captured.report().graph);
  const std::size_t kernels = captured.report().kernels;
  REQUIRE(kernels >= 24);
  const picoseconds launch = sys.options().launch_overhead;
  for (int k = 0; k < 3; ++k) {
    CAPTURE(k);
    const tensor x = test::random_tensor({4, 16}, static_cast<std::uint32_t>(7 + k));
    const run_result a = s.run(eager, {{"x", x}});
    const run_result b = s.run(captured, {{"x", x}});
    CHECK(a.outputs.begin()->second.to_vector() == b.outputs.begin()->second.to_vector());
    // Call by call the host bounds the run: every kernel's launch costs launch_overhead. As a
    // graph each kernel after the first costs graph_node_overhead, and the device bounds it.
    CHECK(a.latency >= launch * static_cast<std::int64_t>(kernels));
    CHECK(b.latency < launch * static_cast<std::int64_t>(kernels));
    // What is left is the device's: its 2 us launch latency per kernel, and the kernels.
    CHECK(b.latency * 3 < a.latency);
    // The same operators report their times, in the same order.
    REQUIRE(a.ops.size() == b.ops.size());
    for (std::size_t i = 0; i < a.ops.size(); ++i) {
      CHECK(a.ops[i].name == b.ops[i].name);
      CHECK(b.ops[i].end > b.ops[i].start);
    }
  }
  // Batches launch the graph one after the other.
  const tensor x0 = test::random_tensor({4, 16}, 70), x1 = test::random_tensor({4, 16}, 71);
  const batches_result bs = s.run_batches(captured, {{{"x", x0}}, {{"x", x1}}});
  REQUIRE(bs.outputs.size() == 2);
  CHECK(bs.outputs[0].begin()->second.to_vector() == s.run(eager, {{"x", x0}}).outputs.begin()->second.to_vector());
  CHECK(bs.outputs[1].begin()->second.to_vector() == s.run(eager, {{"x", x1}}).outputs.begin()->second.to_vector());
}

TEST_CASE("a captured parallel schedule runs its branches side by side on the graph's own streams",
          "[graph][run][capture][schedule]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = captured_diamond();
  const tensor x = test::random_tensor({1024, 256}, 21);
  auto seq = s.compile(g, {.schedule = schedule::sequential});
  auto par = s.compile(g, {.schedule = schedule::parallel, .max_parallelism = 2, .capture_graph = true});
  REQUIRE(par.report().streams == 2);
  const auto want = s.run(seq, {{"x", x}}).outputs.at("op4").to_vector();
  for (int k = 0; k < 2; ++k) {
    const run_result r = s.run(par, {{"x", x}});
    CHECK(r.outputs.at("op4").to_vector() == want);
    const op_timing &op2 = op_named(r, "op2"), &op3 = op_named(r, "op3"), &op4 = op_named(r, "op4");
    CHECK(op2.stream != op3.stream);
    CHECK(op2.start < op3.end);  // the two intervals intersect
    CHECK(op3.start < op2.end);
    CHECK(op4.start >= std::max(op2.end, op3.end));  // the join kept
  }
}

TEST_CASE("capture_graph is refused with a pipeline", "[graph][capture][errors]") {
  auto sys = test::make_system();
  session s{sys};
  graph g = deep_narrow(2);
  try {
    (void)s.compile(g, {.schedule = schedule::pipeline, .pipeline_stages = 2, .capture_graph = true});
    FAIL("a pipelined capture_graph compiled");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("pipelined"));
  }
}

TEST_CASE("captured runs with overlap: a graph per slot, its copies beside the other slot's graph",
          "[graph][run][capture]") {
  auto sys = test::make_system();
  graph g = captured_diamond();
  std::vector<std::vector<feed>> batches;
  for (std::uint32_t b = 0; b < 4; ++b) batches.push_back({{"x", test::random_tensor({1024, 256}, 40 + b)}});
  session plain{sys};
  auto eager = plain.compile(g);
  auto one_slot = plain.compile(g, {.capture_graph = true});
  session overlapped{sys};
  overlapped.enable_overlap();
  auto captured = overlapped.compile(g, {.capture_graph = true});
  CHECK(captured.report().graph);
  CHECK(captured.report().overlap);
  const batches_result want = plain.run_batches(eager, batches);
  const batches_result serial = plain.run_batches(one_slot, batches);
  for (int round = 0; round < 2; ++round) {  // the first captures each slot's graph, the second reuses them
    CAPTURE(round);
    const batches_result got = overlapped.run_batches(captured, batches);
    REQUIRE(got.outputs.size() == batches.size());
    for (std::size_t b = 0; b < batches.size(); ++b)
      CHECK(got.outputs[b].at("op4").to_vector() == want.outputs[b].at("op4").to_vector());
    // A batch's 1 MiB copies in and out run beside the other slot's graph: faster than one slot.
    CHECK(got.latency < serial.latency);
  }
  // Single runs too, alternating nothing: the slot-0 graph again.
  const run_result one = overlapped.run(captured, {batches[1][0]});
  CHECK(one.outputs.at("op4").to_vector() == want.outputs[1].at("op4").to_vector());
}

TEST_CASE("a captured graph reads refitted constants and reports a run-time failure as a run does",
          "[graph][capture][errors]") {
  auto sys = test::make_system();
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    session s{sys};
    s.enable_overlap(overlap);
    graph g = test::embedding_lookup("lookup");
    auto c = s.compile(g, {.capture_graph = true});
    CHECK(s.run(c, {{"ids", tensor({2}, dtype::i64, {2, 0})}}).outputs.at("emb").to_vector() ==
          std::vector<double>{5, 6, 1, 2});
    s.set_constant(c, "w", tensor({3, 2}, dtype::f32, {10, 20, 30, 40, 50, 60}));
    CHECK(s.run(c, {{"ids", tensor({2}, dtype::i64, {1, 2})}}).outputs.at("emb").to_vector() ==
          std::vector<double>{30, 40, 50, 60});
    try {
      (void)s.run(c, {{"ids", tensor({2}, dtype::i64, {0, 3})}});
      FAIL("a gather of row 3 of 3 succeeded");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Matchers::StartsWith("npurt::session::run: node 'emb' (Gather): "));
      CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("indices[1] = 3 is outside [-3, 2]"));
    }
    CHECK(s.run(c, {{"ids", tensor({2}, dtype::i64, {0, 0})}}).outputs.at("emb").to_vector() ==
          std::vector<double>{10, 20, 10, 20});
  }
}

TEST_CASE("captured runs all-reduce their outputs across ranks and report the all-reduces",
          "[graph][capture][collective]") {
  npurt::system sys{sim::presets::ascend910(2)};
  auto comm = communicator::init_all(sys);
  std::vector<std::unique_ptr<session>> ss;
  std::vector<compiled_graph> cs;
  for (int r = 0; r < 2; ++r) {
    ss.push_back(std::make_unique<session>(sys, session_config{.device_id = r}));
    graph g("double");
    auto x = g.add_input("x", {4}, dtype::f32);
    auto two = g.add_constant("two", tensor({1}, dtype::f32, {2}));
    g.set_output(g.add_op("Mul", {x, two}, {}, "grad"));
    cs.push_back(ss[static_cast<std::size_t>(r)]->compile(
        g, {.all_reduce = output_all_reduce{.comm = comm, .outputs = {"grad"}}, .capture_graph = true}));
  }
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    std::vector<run_result> rs(2);
    int completed = 0;
    for (int r = 0; r < 2; ++r) {
      const double base = 10.0 * step + r;
      ss[static_cast<std::size_t>(r)]->async_run(cs[static_cast<std::size_t>(r)],
                                                 {{"x", tensor({4}, dtype::f32, {base, base + 1, base + 2, base + 3})}},
                                                 [&, r](async_error_code ec, run_result res) {
                                                   CHECK_FALSE(ec);
                                                   rs[static_cast<std::size_t>(r)] = std::move(res);
                                                   ++completed;
                                                 });
    }
    sys.run();
    REQUIRE(completed == 2);
    // 2 (10 step + i) + 2 (10 step + 1 + i) on both ranks.
    const double b = 40.0 * step + 2;
    for (const auto& r : rs) {
      CHECK(r.outputs.at("grad").to_vector() == std::vector<double>{b, b + 4, b + 8, b + 12});
      const op_timing& ar = op_named(r, "all_reduce(grad)");
      CHECK(ar.type == "AllReduce");
      CHECK(ar.end > ar.start);
      CHECK(ar.start >= op_named(r, "grad").end);
    }
  }
  REQUIRE_FALSE(comm.async_error());
}
