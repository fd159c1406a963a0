// Bad input to the graph layer: every case is a typed error that leaves the graph, the session
// and the caller's memory as they were — never a crash, undefined behaviour or a silent answer.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

using namespace npurt;

namespace {

template <class F>
errc code_of(F f) {
  try {
    f();
  } catch (const error& e) { return static_cast<errc>(e.code().value()); }
  return errc{};
}

// Relu over an f32 input "x" of n elements, as output "y".
graph relu_graph(std::int64_t n) {
  graph g;
  g.set_output(g.add_op("Relu", {g.add_input("x", {n}, dtype::f32)}, {}, "y"));
  return g;
}

}  // namespace

TEST_CASE("a shape refuses a ninth dimension instead of dropping it", "[graph][errors][tensor]") {
  CHECK(code_of([] { (void)shape{1, 1, 1, 1, 1, 1, 1, 2, 3}; }) == errc::invalid_shape);
  const std::vector<std::int64_t> nine(9, 1);
  CHECK(code_of([&] { (void)shape(std::span<const std::int64_t>(nine)); }) == errc::invalid_shape);
  shape s{1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(code_of([&] { s.push_back(9); }) == errc::invalid_shape);
  CHECK(s.rank() == 8);
  graph g;
  CHECK(code_of([&] { (void)g.add_input("x", {1, 1, 1, 1, 1, 1, 1, 2, 3}, dtype::f32); }) == errc::invalid_shape);
  CHECK(g.find("x") == nullptr);
}

TEST_CASE("element counts that overflow are refused, never wrapped", "[graph][errors][tensor]") {
  constexpr std::int64_t big = std::int64_t{1} << 62;
  const shape s{big, 4};
  CHECK(s.checked_elements() == -1);
  CHECK(s.elements() == std::numeric_limits<std::int64_t>::max());
  CHECK(tensor_desc{nullptr, s, dtype::f32}.bytes() == std::numeric_limits<std::size_t>::max());
  CHECK(shape{-1, 4}.checked_elements() == -1);
  CHECK(shape{3, 4}.checked_elements() == 12);
  CHECK(code_of([&] { tensor t(s, dtype::f32); }) == errc::size_overflow);
  CHECK(code_of([&] { (void)tensor::timing_only(s, dtype::f32); }) == errc::size_overflow);
  // Fits in elements, not in bytes.
  CHECK(code_of([] { (void)tensor::timing_only({std::int64_t{1} << 62}, dtype::f32); }) == errc::size_overflow);
  graph g;
  CHECK(code_of([&] { (void)g.add_input("x", {std::int64_t{1} << 40, std::int64_t{1} << 40}, dtype::f32); }) ==
        errc::size_overflow);
  auto x = g.add_input("x", {2, 3}, dtype::f32);
  auto sh =
      g.add_constant("s", tensor({3}, dtype::i64, {double(std::int64_t{1} << 40), double(std::int64_t{1} << 40), -1}));
  CHECK(code_of([&] { (void)g.add_op("Reshape", {x, sh}); }) == errc::invalid_shape);
}

TEST_CASE("a reduction naming an axis twice is refused", "[graph][errors]") {
  graph g;
  auto x = g.add_input("x", {2, 3}, dtype::f32);
  CHECK(code_of([&] { (void)g.add_op("ReduceSum", {x}, {{"axes", ints{0, 0}}}); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)g.add_op("ReduceMean", {x}, {{"axes", ints{1, -1}}}); }) == errc::invalid_argument);
  CHECK(g.value(g.add_op("ReduceSum", {x}, {{"axes", ints{0, 1}}})).shape == shape{1, 1});
}

TEST_CASE("an attribute of the wrong type is a graph_error that says the code once", "[graph][errors]") {
  graph g;
  auto x = g.add_input("x", {4, 4}, dtype::f32);
  try {
    (void)g.add_op("Softmax", {x}, {{"axis", 1.5}});
    FAIL("no error");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("'axis' is not an INT") != std::string::npos);
    CHECK(what.find("invalid argument: invalid argument") == std::string::npos);
  }
}

TEST_CASE("a name with a NUL or control bytes does not cut or garble the message", "[graph][errors]") {
  graph g;
  auto x = g.add_input("x", {4}, dtype::f32);
  const std::string name("a\0b\nc", 5);
  try {
    g.add_node("Frobnicate", name, {x}, {"y"}, {});
    FAIL("no error");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK(e.op() == name);
    const std::string what = e.what();  // as a C string: up to the first NUL
    INFO(what);
    CHECK(what.find("a\\x00b\\x0ac") != std::string::npos);
    CHECK(what.find("unknown operator type 'Frobnicate'") != std::string::npos);
  }
}

TEST_CASE("the graph layer's refusals begin with the qualified name of the call refused", "[graph][errors]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = relu_graph(4);
  const auto c = s.compile(g);
  const tensor wrong({5}, dtype::f32);
  const auto what = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const error& e) { return e.what(); }
    FAIL("accepted");
    return {};
  };
  const auto starts = [](const std::string& s, std::string_view with) {
    INFO(s);
    CHECK(s.starts_with(with));
  };
  starts(what([&] { (void)s.run(c, {{"x", wrong}}); }), "npurt::session::run: input 'x' expects shape [4]");
  starts(what([&] { (void)s.run_batches(c, {{{"x", wrong}}}); }),
         "npurt::session::run_batches: input 'x' expects shape [4]");
  starts(what([&] { (void)s.run(compiled_graph{}, {}); }), "npurt::session::run: the compiled graph is empty");
  std::string async_error;
  s.async_run(c, {{"y", wrong}}, [&](async_error_code, run_result r) { async_error = r.error; });
  sys.run();
  starts(async_error, "npurt::session::async_run: the graph has no input 'y'");
  starts(what([&] { (void)s.compile(g, {.optimization_level = 7}); }), "npurt::session::compile: optimization_level 7");
  starts(what([&] { (void)plan_memory(g, {.optimization_level = 7}); }), "npurt::plan_memory: optimization_level 7");
  starts(what([&] { s.enable_auto_schedule(9); }), "npurt::session::enable_auto_schedule: level 9");
  starts(what([&] { (void)s.io_stream(2); }), "npurt::session::io_stream: index 2");
  starts(what([&] { (void)s.comm_stream(8); }), "npurt::session::comm_stream: priority 8");
  starts(what([&] { (void)s.stream(session::max_streams); }), "npurt::session::stream: index 1024");
  starts(what([&] { (void)compiled_graph{}.report(); }), "npurt::compiled_graph::report: the compiled graph is empty");
  starts(what([&] { (void)tensor({-1}, dtype::f32); }), "npurt::tensor: negative dimension -1");
  starts(what([&] { (void)wrong.get(5); }), "npurt::tensor::get: element 5 of 5");
}

TEST_CASE("a session whose device was reset says to make a new one", "[graph][errors][fault]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = relu_graph(64);
  (void)s.compile(g);
  s.device().reset();
  try {
    (void)s.compile(g);
    FAIL("no error");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_stream);
    CHECK(std::string(e.what()).find("make a new session") != std::string::npos);
  }
  session fresh{sys};
  CHECK_NOTHROW(fresh.compile(g));
}

TEST_CASE("window attributes are checked before auto_pad divides by them", "[graph][errors]") {
  for (const char* op : {"Conv", "MaxPool", "AveragePool"})
    for (const char* pad : {"SAME_UPPER", "SAME_LOWER"}) {
      INFO(op << " " << pad);
      graph g;
      auto x = g.add_input("x", {1, 3, 8, 8}, dtype::f32);
      std::vector<std::string> in{x};
      attributes a{{"auto_pad", std::string(pad)}, {"strides", ints{0, 0}}};
      if (std::string(op) == "Conv") in.push_back(g.add_constant("w", tensor::timing_only({4, 3, 3, 3}, dtype::f32)));
      else a.set("kernel_shape", ints{3, 3});
      CHECK(code_of([&] { (void)g.add_op(op, in, a, "op"); }) == errc::invalid_argument);
      CHECK(g.find("op") == nullptr);
    }
}

TEST_CASE("an input with a dimension of 0 is an empty tensor; a negative dimension is refused, naming it",
          "[graph][errors]") {
  graph g;
  CHECK(g.add_input("x", {0, 3}, dtype::f32) == "x");
  CHECK(g.value("x").shape == shape{0, 3});
  try {
    (void)g.add_input("neg", {-1, 3}, dtype::f32);
    FAIL("a negative dimension was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(e.tensor() == "neg");
  }
  CHECK(g.find("neg") == nullptr);
}

TEST_CASE("batch normalisation over no channel is an error, not a division by zero", "[graph][errors]") {
  graph g;
  auto x = g.add_constant("x", tensor::timing_only({2, 0, 4, 4}, dtype::f32));
  auto sc = g.add_constant("s", tensor::timing_only({0}, dtype::f32));
  auto b = g.add_constant("b", tensor::timing_only({0}, dtype::f32));
  auto m = g.add_constant("m", tensor::timing_only({0}, dtype::f32));
  auto v = g.add_constant("v", tensor::timing_only({0}, dtype::f32));
  CHECK(code_of([&] { g.add_node("BatchNormInternal", "bn", {x, sc, b, m, v}, {"y", "rm", "rv", "sm", "si"}); }) ==
        errc::invalid_shape);
  CHECK(g.find("y") == nullptr);
}

TEST_CASE("an operator given more output names than it produces, or one name twice, is refused", "[graph][errors]") {
  graph g;
  auto x = g.add_input("x", {4}, dtype::f32);
  CHECK(code_of([&] { g.add_node("Relu", "r", {x}, {"a", "b"}); }) == errc::invalid_argument);
  CHECK(code_of([&] { g.add_node("Relu", "r", {x}, {"o", "o"}); }) == errc::invalid_argument);
  // Nothing of either is left behind: the same names can be used now.
  CHECK(g.find("a") == nullptr);
  CHECK(g.find("b") == nullptr);
  CHECK(g.find("o") == nullptr);
  g.add_node("Relu", "r", {x}, {"a"});
  CHECK(g.value("a").shape == shape{4});
}

TEST_CASE("a schedule option out of range is named alone, by compile and by set_schedule_config", "[graph][errors]") {
  // The message names the field that is wrong, with its range; a field that is fine is not
  // offered as a suspect.
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g;
  g.set_output(g.add_op("Relu", {g.add_input("x", {4}, dtype::f32)}, {}, "y"));
  const auto what = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      return e.what();
    }
    FAIL("accepted");
    return {};
  };
  const std::string par = what([&] { (void)s.compile(g, {.max_parallelism = 0}); });
  CHECK(par.find("npurt::session::compile: max_parallelism 0 is out of range (1..1024)") != std::string::npos);
  CHECK(par.find("pipeline_stages") == std::string::npos);
  const std::string stages = what([&] { (void)s.compile(g, {.pipeline_stages = 1024}); });
  CHECK(stages.find("npurt::session::compile: pipeline_stages 1024 is out of range (1..1023)") != std::string::npos);
  CHECK(stages.find("max_parallelism") == std::string::npos);
  const std::string both = what([&] { (void)s.compile(g, {.max_parallelism = -1, .pipeline_stages = 0}); });
  CHECK(both.find("max_parallelism -1 is out of range (1..1024)") != std::string::npos);
  CHECK(both.find("pipeline_stages 0 is out of range (1..1023)") != std::string::npos);
  const std::string set = what([&] { s.set_schedule_config({.max_parallelism = 2000}); });
  CHECK(set.find("npurt::session::set_schedule_config: max_parallelism 2000 is out of range (1..1024)") !=
        std::string::npos);
  CHECK(set.find("pipeline_stages") == std::string::npos);
  const std::string set_stages = what([&] { s.set_schedule_config({.pipeline_stages = -5}); });
  CHECK(set_stages.find("npurt::session::set_schedule_config: pipeline_stages -5 is out of range (1..1023)") !=
        std::string::npos);
  CHECK(set_stages.find("max_parallelism") == std::string::npos);
}

TEST_CASE("compile options that cannot be meant are refused, as set_schedule_config refuses them", "[graph][errors]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g;
  g.set_output(g.add_op("Relu", {g.add_input("x", {4}, dtype::f32)}, {}, "y"));
  CHECK(code_of([&] { (void)s.compile(g, {.max_parallelism = -3}); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)s.compile(g, {.pipeline_stages = 0}); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)s.io_stream(2); }) == errc::invalid_argument);
  // A stream index or count is never trusted blindly: each stream costs memory, so SIZE_MAX
  // would make streams until none is left.
  const std::size_t made = s.stream_count();
  CHECK(code_of([&] { (void)s.stream(SIZE_MAX); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)s.stage_stream(session::max_streams); }) == errc::invalid_argument);
  CHECK(s.stream_count() == made);  // the refused calls made none
  CHECK(code_of([&] { (void)s.compile(g, {.max_parallelism = 1 << 30}); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)s.compile(g, {.pipeline_stages = 1024}); }) == errc::invalid_argument);
  CHECK(code_of([&] { s.set_schedule_config({.max_parallelism = 1 << 30}); }) == errc::invalid_argument);
  CHECK(code_of([&] { s.set_schedule_config({.pipeline_stages = 1 << 30}); }) == errc::invalid_argument);
  // Enumerations cast from integers name nothing: refused, not run as some schedule or precision.
  CHECK(code_of([&] { (void)s.compile(g, {.schedule = static_cast<schedule>(9)}); }) == errc::invalid_argument);
  CHECK(code_of([&] { s.set_schedule_config({.strategy = static_cast<schedule>(9)}); }) == errc::invalid_argument);
  CHECK(s.get_schedule_config().strategy == schedule::sequential);
  CHECK(code_of([&] { session bad{sys, {.precision = static_cast<precision>(9)}}; }) == errc::invalid_argument);
  (void)s.stream(session::max_streams - 1);  // the largest index is taken
  CHECK(s.stream_count() == session::max_streams);
  try {
    (void)s.run(compiled_graph{}, {});
    FAIL("no error");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("empty") != std::string::npos);
  }
}

TEST_CASE("a timing-only feed into a graph that computes real results is refused", "[graph][errors][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g;
  g.set_output(g.add_op("Sigmoid", {g.add_input("x", {4}, dtype::f32)}, {}, "y"));
  auto c = s.compile(g);
  REQUIRE_FALSE(c.report().timing_only);
  try {
    (void)s.run(c, {{"x", tensor::timing_only({4}, dtype::f32)}});
    FAIL("no error");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.tensor() == "x");
  }
  // A timing-only graph takes it, with inputs of different sizes copied from one stable buffer.
  graph t;
  auto a = t.add_input("a", {16}, dtype::f32);
  auto b = t.add_input("b", {4096}, dtype::f32);
  auto w = t.add_constant("w", tensor::timing_only({4096}, dtype::f32));
  t.set_output(
      t.add_op("Add", {t.add_op("Add", {b, w}), t.add_op("ReduceSum", {a}, {{"keepdims", std::int64_t{1}}})}, {}, "z"));
  auto ct = s.compile(t);
  REQUIRE(ct.report().timing_only);
  const auto r = s.run_batches(ct, std::vector<std::vector<feed>>(3, {{"a", tensor::timing_only({16}, dtype::f32)},
                                                                      {"b", tensor::timing_only({4096}, dtype::f32)}}));
  CHECK(r.outputs.size() == 3);
}

TEST_CASE("run_batches checks every batch's feeds before it queues any", "[graph][errors][run]") {
  for (const auto sched : {schedule::pipeline, schedule::sequential}) {
    npurt::system sys{sim::presets::ascend910(1)};
    graph g;
    auto x = g.add_input("x", {64, 64}, dtype::f32);
    g.set_output(g.add_op("Relu", {g.add_op("Sigmoid", {x})}, {}, "y"));
    const tensor good = test::random_tensor({64, 64}, 7), bad({2, 2}, dtype::f32);
    // The reference: one run in a session that never saw a bad batch.
    session fresh{sys};
    const auto c0 = fresh.compile(g, {.schedule = sched});
    const auto want = fresh.run(c0, {{"x", good}});
    session s{sys};
    const auto c = s.compile(g, {.schedule = sched});
    try {
      (void)s.run_batches(c, {{{"x", good}}, {{"x", bad}}});
      FAIL("no error");
    } catch (const graph_error& e) {
      CHECK(e.code() == errc::invalid_shape);
      CHECK(e.tensor() == "x");
    }
    // Nothing of the first batch was left queued: the next run starts on idle streams (as long
    // as the fresh session's) and writes only its own outputs (ASan checks the freed ones).
    const auto got = s.run(c, {{"x", good}});
    CHECK(got.latency == want.latency);
    const tensor& y = got.outputs.at("y");
    const tensor& w = want.outputs.at("y");
    for (std::int64_t i = 0; i < y.elements(); ++i) CHECK(y.get(i) == w.get(i));
  }
}

TEST_CASE("ONNX Cast from float to integer truncates toward zero, as ONNX's reference does", "[graph][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g;
  auto x = g.add_input("x", {4}, dtype::f32);
  g.set_output(g.add_op("Cast", {x}, {{"to", std::int64_t{6}}}, "y"));  // 6: INT32
  const auto r = s.run(s.compile(g), {{"x", tensor({4}, dtype::f32, {3.7, -1.5, 2.5, -0.6})}});
  const tensor& y = r.outputs.at("y");
  REQUIRE(y.type() == dtype::i32);
  CHECK(y.to_vector() == std::vector<double>{3, -1, 2, 0});
}

TEST_CASE("plan_memory refuses a graph whose byte totals do not fit in 64 bits", "[graph][errors][memory]") {
  graph g;
  std::vector<std::string> in;
  // Each input is 2^62 bytes: representable, but four of them are not.
  // The name appended, not "x" + to_string(i): GCC 12 at -O3 reports that as an overlapping memcpy
  // (-Wrestrict, GCC bug 105651).
  for (int i = 0; i < 4; ++i) {
    std::string name = "x";
    name += std::to_string(i);
    in.push_back(g.add_input(name, {std::int64_t{1} << 60}, dtype::f32));
  }
  g.set_output(g.add_op("Add", {g.add_op("Add", {in[0], in[1]}), g.add_op("Add", {in[2], in[3]})}, {}, "y"));
  CHECK(code_of([&] { (void)plan_memory(g, {}); }) == errc::size_overflow);
  CHECK(code_of([&] { (void)plan_memory(g, {.timing_only = true}); }) == errc::size_overflow);
  // Two inputs and an output add up to 3 x 2^62: still representable.
  graph h;
  (void)h.add_input("a", {std::int64_t{1} << 60}, dtype::f32);
  h.set_output(h.add_op("Relu", {h.add_input("b", {std::int64_t{1} << 60}, dtype::f32)}, {}, "y"));
  CHECK(plan_memory(h, {}).io_bytes == std::uint64_t{1} << 63);
}

TEST_CASE("a pool_size below what the session holds reports no free bytes, never a wrapped count",
          "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  constexpr std::size_t mib = std::size_t{1} << 20;
  s.set_comm_buffer_size(mib);
  s.set_memory_config({.pool_size = 4096});
  for (const std::size_t bytes : {std::size_t{512}, std::numeric_limits<std::size_t>::max() - 100}) {
    try {
      (void)s.acquire(bytes);
      FAIL("no error");
    } catch (const out_of_memory_error& e) {
      CHECK(e.details().free == 0);
      CHECK(e.details().allocated == mib);
    }
  }
  CHECK(s.memory_usage().allocated_mb == 1.0);
}

TEST_CASE("a session's pool_size refusal begins with the name of the call that needed the memory",
          "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  s.set_memory_config({.pool_size = 4096});
  const auto words = [](auto f) {
    try {
      f();
    } catch (const out_of_memory_error& e) { return std::string(e.what()); }
    return std::string("no out_of_memory_error");
  };
  // The session holds nothing yet, so the first request over 4096 bytes is refused with 0 held:
  // the graph's 16 KiB f32 input, or its 16 KiB activation, whichever compile asks for first.
  graph g = relu_graph(4096);
  const std::string compiled = words([&] { (void)s.compile(g); });
  INFO(compiled);
  CHECK(compiled.starts_with("npurt::session::compile: session "));
  CHECK(compiled.find(": 16384 bytes exceed the pool_size of 4096 (0 held)") != std::string::npos);
  const std::string comm = words([&] { s.set_comm_buffer_size(8192); });
  INFO(comm);
  CHECK(comm.starts_with("npurt::session::set_comm_buffer_size: session "));
  CHECK(comm.find(": 8192 bytes exceed the pool_size of 4096 (0 held)") != std::string::npos);
  CHECK(words([&] { (void)s.acquire(8192); }).starts_with("npurt::session::acquire: session "));
  CHECK(s.memory_usage().allocated_mb == 0);
}

TEST_CASE("a request the pool limit refuses only for its segment's size says so", "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  constexpr std::size_t mib = std::size_t{1} << 20;
  s.set_memory_config({.pool_size = 8 * mib});
  try {
    (void)s.acquire(4 * mib);  // 4 MiB fits under 8 MiB; its 20 MiB segment does not
    FAIL("no error");
  } catch (const out_of_memory_error& e) {
    const std::string what = e.what();
    INFO(what);
    // The device pool refused (the session's own count allows 4 MiB): its words follow the call's
    // name, once, with the pool's code.
    CHECK(what.starts_with("npurt::session::acquire: "));
    CHECK(what.find("npurt::session::acquire", 1) == std::string::npos);
    CHECK(e.code() == errc::pool_limit);
    CHECK(what.ends_with(": " + e.code().message()));
    CHECK(what.find(e.code().message()) == what.size() - e.code().message().size());
    CHECK(what.find("new 20.00 MiB segment") != std::string::npos);
    CHECK(what.find("pool_size of at least 20.00 MiB") != std::string::npos);
    CHECK(what.find("\"compact\" strategy, would hold it") != std::string::npos);
  }
  // A request the limit refuses by itself gets no such sentence.
  try {
    (void)s.acquire(9 * mib);
    FAIL("no error");
  } catch (const out_of_memory_error& e) { CHECK(std::string(e.what()).find("segment (") == std::string::npos); }
  // Compile's buffers are refused the same way, under compile's name.
  try {
    graph big = relu_graph(1 << 20);  // a 4 MiB f32 input
    (void)s.compile(big);
    FAIL("no error");
  } catch (const out_of_memory_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.starts_with("npurt::session::compile: "));
    CHECK(what.find("new 20.00 MiB segment") != std::string::npos);
  }
  CHECK(s.memory_usage().allocated_mb == 0);
  // As the message says, the compact strategy holds it.
  s.set_allocation_strategy(allocation_strategy::compact);
  void* p = nullptr;
  CHECK_NOTHROW(p = s.acquire(4 * mib));
  s.give_back(p, 4 * mib);
}

TEST_CASE("a comm buffer size that cannot be had keeps the buffer held before", "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  constexpr std::size_t mib = std::size_t{1} << 20;
  s.set_comm_buffer_size(mib);
  CHECK(code_of([&] { s.set_comm_buffer_size(std::numeric_limits<std::size_t>::max()); }) == errc::size_overflow);
  CHECK(s.memory_usage().allocated_mb == 1.0);
  s.set_memory_config({.pool_size = 4 * mib});
  CHECK(code_of([&] { s.set_comm_buffer_size(8 * mib); }) == errc::out_of_memory);
  CHECK(s.memory_usage().allocated_mb == 1.0);
  s.set_comm_buffer_size(0);
  CHECK(s.memory_usage().allocated_mb == 0);
}

TEST_CASE("a pool_size without auto_growth beyond the device's memory is refused", "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  const std::size_t capacity = s.device().properties().memory_bytes;
  CHECK(code_of([&] { s.set_memory_config({.pool_size = capacity + 1, .auto_growth = false}); }) ==
        errc::invalid_argument);
  CHECK(s.get_memory_config().pool_size == 0);
  CHECK(s.memory_usage().reserved_mb == 0);
  s.set_memory_config({.pool_size = capacity, .auto_growth = false});
  CHECK(s.memory_usage().reserved_mb * 1024 * 1024 == static_cast<double>(capacity));
  // As a cap with auto_growth, a size beyond the device only means "the device's capacity".
  s.set_memory_config({.pool_size = std::numeric_limits<std::size_t>::max()});
}

TEST_CASE("a compile refused part way leaves no queued copy reading its freed constants", "[graph][errors][memory]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  s.set_memory_config({.pool_size = std::size_t{3} << 20});
  graph g;
  auto x = g.add_input("x", {1024, 256}, dtype::f32);
  auto w = g.add_constant("w", test::random_tensor({256, 1024}, 3));
  g.set_output(g.add_op("Relu", {g.add_op("MatMul", {x, w})}, {}, "y"));
  // The 1 MiB weight fits the pool_size, the 4 MiB activation after it does not.
  CHECK(code_of([&] { (void)s.compile(g); }) == errc::out_of_memory);
  // The weight's copy, queued before the refusal, has run (ASan checks what it read).
  CHECK(s.stream(0).query());
  CHECK(s.memory_usage().allocated_mb == 0);
}

TEST_CASE("async_run reads host feeds when the call is made, not when its copies run", "[graph][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = relu_graph(64);
  const auto c = s.compile(g);
  tensor x({64}, dtype::f32, std::vector<double>(64, 3.0));
  std::vector<double> got;
  s.async_run(c, {{"x", x}}, [&](async_error_code ec, run_result r) {
    REQUIRE_FALSE(ec);
    got = r.outputs.at("y").to_vector();
  });
  // The caller is free to reuse (or drop) its tensor as soon as the call returns.
  x.fill(-1.0);
  sys.run();
  CHECK(got == std::vector<double>(64, 3.0));
}

TEST_CASE("a failed async_run says what failed, as the blocking run's exception does", "[graph][errors][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = relu_graph(64);
  const auto c = s.compile(g);
  std::string blocking;
  try {
    (void)s.run(c, {});
  } catch (const graph_error& e) { blocking = e.what(); }
  REQUIRE_FALSE(blocking.empty());
  std::error_code got;
  std::string message = "not called";
  s.async_run(c, {}, [&](async_error_code ec, run_result r) {
    got = ec;
    message = r.error;
  });
  sys.run();
  CHECK(got == errc::invalid_argument);
  // The blocking run's words (naming the missing feed "x"), under async_run's own name.
  constexpr std::string_view run_call = "npurt::session::run: ";
  REQUIRE(blocking.starts_with(run_call));
  CHECK(message == "npurt::session::async_run: " + blocking.substr(run_call.size()));
  CHECK(message.find("'x'") != std::string::npos);
  // A run that succeeds has no error text.
  tensor x({64}, dtype::f32, std::vector<double>(64, 1.0));
  s.async_run(c, {{"x", x}}, [&](async_error_code ec, run_result r) {
    got = ec;
    message = r.error;
  });
  sys.run();
  CHECK_FALSE(got);
  CHECK(message.empty());
}

TEST_CASE("an async_run outlives the caller's compiled_graph handle whether it fails or not", "[graph][errors][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = s.make_graph("div");
  g.set_output(g.add_op("Div", {g.add_input("a", {4}, dtype::i32), g.add_input("b", {4}, dtype::i32)}, {}, "q"));
  tensor a({4}, dtype::i32, std::vector<double>{7, 8, 9, -9}), ok({4}, dtype::i32, std::vector<double>{2, 4, 3, 2}),
      zero({4}, dtype::i32, std::vector<double>{2, 0, 3, 2});
  std::vector<std::error_code> codes;
  std::vector<std::string> errors;
  std::vector<double> quotients;
  for (const tensor* b : {&ok, &zero}) {
    compiled_graph c = s.compile(g);
    s.async_run(c, {{"a", a}, {"b", *b}}, [&](async_error_code ec, run_result r) {
      codes.push_back(ec);
      errors.push_back(r.error);
      if (!ec) quotients = r.outputs.at("q").to_vector();
    });
    // The caller's handle goes while the run is queued: the failed run still names its node.
    c = compiled_graph{};
  }
  sys.run();
  REQUIRE(codes.size() == 2);
  CHECK_FALSE(codes[0]);
  CHECK(quotients == std::vector<double>{3, 2, 3, -4});  // truncated toward zero: -9 / 2 = -4
  CHECK(codes[1] == errc::invalid_argument);
  CHECK(errors[1].find("node 'q' (Div)") != std::string::npos);
}

TEST_CASE("an async_run whose kernel fails on any stream fails with the node, and leaves no error behind",
          "[graph][errors][run]") {
  // A Gather with indices fed at run time, on the stream that ends the run (sequential) or on a
  // second stream of the parallel schedule, whose failure no event wait carries to the stream
  // that copies the outputs out. Expected values from numpy.take's rule: an index in [-3, 2].
  for (const bool on_side_stream : {false, true}) {
    INFO("failing kernel on a side stream: " << on_side_stream);
    npurt::system sys{sim::presets::ascend910(1)};
    session s{sys};
    graph g = s.make_graph("g");
    const auto table = g.add_constant("table", tensor({3, 2}, dtype::f32, {1, 2, 3, 4, 5, 6}));
    const auto ids = g.add_input("ids", {2}, dtype::i64);
    const auto x = g.add_input("x", {2, 2}, dtype::f32);
    // The branch added first continues stream 0, which ends the run; the other opens stream 1.
    std::string side, emb;
    if (on_side_stream) {
      side = g.add_op("Relu", {x}, {}, "side");
      emb = g.add_op("Gather", {table, ids}, {}, "emb");
    } else {
      emb = g.add_op("Gather", {table, ids}, {}, "emb");
      side = g.add_op("Relu", {x}, {}, "side");
    }
    g.hint_parallel(emb, side);
    g.set_output(on_side_stream ? g.add_op("Add", {side, emb}, {}, "y") : g.add_op("Add", {emb, side}, {}, "y"));
    const auto c = s.compile(g, {.schedule = schedule::parallel, .optimization_level = 0});
    REQUIRE(c.report().streams == 2);
    std::uint32_t emb_stream = 99;
    for (const auto& [name, stream] : c.schedule_order())
      if (name == "emb") emb_stream = stream;
    REQUIRE((emb_stream != c.final_stream()) == on_side_stream);
    const tensor bad({2}, dtype::i64, {0, 3}), good({2}, dtype::i64, {2, -3});
    const tensor xv({2, 2}, dtype::f32, {-1, 0.5, 2, -4});
    std::vector<std::error_code> codes;
    std::vector<std::string> errors;
    std::vector<std::vector<double>> outputs;
    for (const tensor* in : {&bad, &good}) {
      const std::vector<feed> f{{"ids", *in}, {"x", xv}};
      s.async_run(c, f, [&](async_error_code ec, run_result r) {
        codes.push_back(ec);
        errors.push_back(r.error);
        outputs.push_back(ec ? std::vector<double>{} : r.outputs.at("y").to_vector());
      });
    }
    sys.run();
    REQUIRE(codes.size() == 2);
    CHECK(codes[0] == errc::invalid_argument);
    CHECK(errors[0].find("node 'emb' (Gather)") != std::string::npos);
    CHECK(errors[0].find("indices[1] = 3 is outside [-3, 2]") != std::string::npos);
    // The next run succeeds: table rows 2 and 0 plus relu(x).
    CHECK_FALSE(codes[1]);
    CHECK(errors[1].empty());
    CHECK(outputs[1] == std::vector<double>{5 + 0.0, 6 + 0.5, 1 + 2.0, 2 + 0.0});
    // Nothing of the failed run is left for a later blocking run to report.
    CHECK(s.run(c, {{"ids", good}, {"x", xv}}).outputs.at("y").to_vector() == outputs[1]);
  }
}

TEST_CASE("async_runs of one compiled graph in flight together each get their own outputs", "[graph][run]") {
  // Runs share the graph's arena and input slots; a pipeline or an overlapped graph once let a
  // later run overwrite an earlier one's data while it was still in flight.
  for (const bool overlap : {false, true})
    for (const auto sched : {schedule::sequential, schedule::parallel, schedule::pipeline}) {
      INFO("overlap " << overlap << ", schedule " << to_string(sched));
      npurt::system sys{sim::presets::ascend910(1)};
      session s{sys};
      if (overlap) s.enable_overlap();
      graph g = s.make_graph("g");
      auto x = g.add_input("x", {4}, dtype::f32);
      auto c = g.add_op("Relu", {x}, {}, "c");
      g.set_output(g.add_op("Neg", {c}, {}, "y"));
      const auto cg = s.compile(g, {.schedule = sched});
      constexpr int runs = 5;
      std::vector<std::vector<double>> got(runs);
      for (int k = 0; k < runs; ++k) {
        const tensor in({4}, dtype::f32, {k + 1.0, k + 2.0, k + 3.0, k + 4.0});  // read by the call
        const std::vector<feed> f{{"x", in}};
        s.async_run(cg, f, [&got, k](async_error_code ec, run_result r) {
          CHECK_FALSE(ec);
          got[static_cast<std::size_t>(k)] = r.outputs.at("y").to_vector();
        });
      }
      sys.run();
      for (int k = 0; k < runs; ++k)
        CHECK(got[static_cast<std::size_t>(k)] == std::vector<double>{-(k + 1.0), -(k + 2.0), -(k + 3.0), -(k + 4.0)});
      // A blocking run after them is right too.
      const tensor last({4}, dtype::f32, {9, 8, 7, 6});
      const auto r = s.run(cg, {{"x", last}});
      CHECK(r.outputs.at("y").to_vector() == std::vector<double>{-9, -8, -7, -6});
    }
}

TEST_CASE("a blocking run or compile inside system::run is refused before it queues anything", "[graph][errors][run]") {
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  graph g = relu_graph(64);
  const auto c = s.compile(g);
  const tensor x = test::random_tensor({64}, 5);
  std::vector<errc> codes;
  bool idle = false;
  s.async_run(c, {{"x", x}}, [&](async_error_code ec, run_result) {
    REQUIRE_FALSE(ec);
    codes.push_back(code_of([&] { (void)s.run(c, {{"x", x}}); }));
    codes.push_back(code_of([&] { (void)s.run_batches(c, {{{"x", x}}}); }));
    codes.push_back(code_of([&] { (void)s.compile(g); }));
    // Nothing was left queued to write into the refused runs' outputs after they had gone.
    idle = s.stream(0).query();
  });
  sys.run();
  CHECK(codes == std::vector<errc>(3, errc::not_supported));
  CHECK(idle);
  CHECK(s.run(c, {{"x", x}}).outputs.at("y").get(0) == std::max(0.0, x.get(0)));
}

TEST_CASE("bf16 precision is refused by what the device supports, not by its preset's name", "[graph][errors]") {
  auto no_bf16 = sim::presets::ascend910(1);
  no_bf16.name = "custom910";
  npurt::system a{no_bf16};
  CHECK(code_of([&] { session s(a, {.precision = precision::bf16}); }) == errc::not_supported);
  auto with_bf16 = sim::presets::ascend910b(1);
  with_bf16.name = "ascend910";
  npurt::system b{with_bf16};
  session s{b, {.precision = precision::bf16}};
  graph g = relu_graph(16);
  std::vector<double> v(16, -1.5);
  v[1] = 2.5;  // exact in bf16
  const tensor x({16}, dtype::f32, v);
  const auto r = s.run(s.compile(g), {{"x", x}});
  CHECK(r.outputs.at("y").get(0) == 0);
  CHECK(r.outputs.at("y").get(1) == 2.5);
}

TEST_CASE("an attribute the operator does not have is refused, not ignored", "[graph][hostile][attributes]") {
  graph g("attrs");
  auto x = g.add_input("x", {1, 1, 4, 4}, dtype::f32);
  auto w = g.add_constant("w", tensor({1, 1, 1, 1}, dtype::f32, {1.0}));
  const std::size_t nodes = g.nodes().size();
  try {
    (void)g.add_op("Conv", {x, w}, {{"stride", ints{2, 2}}}, "y");  // "strides", misspelt
    FAIL("a misspelt attribute was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::not_supported);
    CHECK(e.op() == "y");
    CHECK(std::string(e.what()).find("'stride'") != std::string::npos);
    CHECK(std::string(e.what()).find("strides") != std::string::npos);  // the list names the right one
  }
  CHECK(g.nodes().size() == nodes);  // the graph is as it was
  CHECK_THROWS_AS(g.add_op("Relu", {x}, {{"alpha", 0.1}}), graph_error);
  // The operators' own attributes still work.
  const auto y = g.add_op("Conv", {x, w}, {{"strides", ints{2, 2}}}, "y");
  CHECK(g.value(y).shape == shape{1, 1, 2, 2});
  CHECK_NOTHROW(g.add_op("LeakyRelu", {y}, {{"alpha", 0.2}}));
}

TEST_CASE("an attribute of the wrong type is a graph_error naming the operator", "[graph][hostile][attributes]") {
  graph g("attrs");
  auto x = g.add_input("x", {1, 1, 4, 4}, dtype::f32);
  auto w = g.add_constant("w", tensor({1, 1, 1, 1}, dtype::f32, {1.0}));
  try {
    (void)g.add_op("Conv", {x, w}, {{"strides", std::int64_t{2}}}, "conv");  // INT, not INTS
    FAIL("an INT strides was accepted");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.op() == "conv");
    CHECK(std::string(e.what()).find("strides") != std::string::npos);
  }
  // So it is for an operator computed as a chain (1-D and 3-D convolutions), which takes back
  // its steps.
  auto x1 = g.add_input("x1", {1, 1, 4}, dtype::f32);
  auto w1 = g.add_constant("w1", tensor({1, 1, 2}, dtype::f32, {1.0, 2.0}));
  auto x3 = g.add_input("x3", {1, 1, 2, 2, 2}, dtype::f32);
  auto w3 = g.add_constant("w3", tensor({1, 1, 1, 1, 1}, dtype::f32, {1.0}));
  const std::size_t nodes = g.nodes().size();
  for (const auto& [op, in, wt] : {std::tuple{"Conv", x1, w1}, std::tuple{"Conv", x3, w3},
                                   std::tuple{"ConvTranspose", x1, w1}, std::tuple{"ConvTranspose", x3, w3}})
    for (const char* attr : {"strides", "pads", "dilations"}) {
      CAPTURE(op, in, attr);
      try {
        (void)g.add_op(op, {in, wt}, {{attr, std::int64_t{1}}}, "chain");
        FAIL("an INT " << attr << " was accepted");
      } catch (const graph_error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK(e.op() == "chain");
        CHECK(std::string(e.what()).find(attr) != std::string::npos);
      }
      CHECK(g.nodes().size() == nodes);
    }
}

TEST_CASE("a NaN or infinite float attribute is refused at add_op, not at launch", "[graph][hostile][attributes]") {
  graph g("attrs");
  auto a = g.add_input("a", {2, 3}, dtype::f32);
  auto b = g.add_constant("b", tensor({3, 2}, dtype::f32, {1, 2, 3, 4, 5, 6}));
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto& [op, attr, v] : {std::tuple{"Gemm", "alpha", nan}, std::tuple{"Gemm", "beta", -inf},
                                    std::tuple{"LeakyRelu", "alpha", nan}, std::tuple{"Clip", "min", nan}}) {
    const bool unary = std::string_view(op) != "Gemm";
    const std::size_t nodes = g.nodes().size();
    try {
      (void)g.add_op(op, unary ? std::vector<std::string>{a} : std::vector<std::string>{a, b}, {{attr, v}}, "n");
      FAIL(op << " took " << attr << " = " << v);
    } catch (const graph_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK(e.op() == "n");
      CHECK(std::string(e.what()).find(std::string("'") + attr + "'") != std::string::npos);
    }
    CHECK(g.nodes().size() == nodes);
  }
  // Clip's bounds may be infinite: no bound on that side.
  CHECK_NOTHROW(g.add_op("Clip", {a}, {{"min", -inf}, {"max", 6.0}}));
  CHECK_NOTHROW(g.add_op("Gemm", {a, b}, {{"alpha", 0.5}}));
}

TEST_CASE("a rejected add_op leaves the automatic names as they were", "[graph][hostile]") {
  graph g;
  auto x = g.add_input("x", {4}, dtype::f32);
  CHECK_THROWS_AS(g.add_op("Relu", {x, x, x}), graph_error);  // too many inputs
  CHECK(g.add_op("Relu", {x}) == "Relu_0");
}
