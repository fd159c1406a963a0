#include <npurt/graph/graph.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

using namespace npurt;

using test::expect_graph_error;

TEST_CASE("shapes and dtypes are inferred as operators are added, with ONNX attribute meanings", "[graph]") {
  graph g("infer");
  auto x = g.add_input("x", {2, 3, 32, 32}, dtype::f32);
  auto w = g.add_constant("w", tensor::timing_only({8, 3, 3, 3}, dtype::f32));
  auto c = g.add_op("Conv", {x, w}, {{"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}});
  CHECK(g.value(c).shape == shape{2, 8, 16, 16});  // floor((32 + 2 - 3) / 2) + 1
  auto p = g.add_op("MaxPool", {c}, {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}});
  CHECK(g.value(p).shape == shape{2, 8, 7, 7});  // floor((16 - 3) / 2) + 1
  auto f = g.add_op("Flatten", {p}, {{"axis", std::int64_t{1}}});
  CHECK(g.value(f).shape == shape{2, 8 * 49});
  auto gw = g.add_constant("gw", tensor::timing_only({10, 8 * 49}, dtype::f32));
  auto y = g.add_op("Gemm", {f, gw}, {{"transB", std::int64_t{1}}});
  CHECK(g.value(y).shape == shape{2, 10});
  auto t = g.add_op("Transpose", {c}, {{"perm", ints{0, 2, 3, 1}}});
  CHECK(g.value(t).shape == shape{2, 16, 16, 8});
  auto cast = g.add_op("Cast", {y}, {{"to", std::int64_t{10}}});
  CHECK(g.value(cast).type == dtype::f16);
  auto sh = g.add_constant("shape", tensor({3}, dtype::i64, {0, -1, 4}));
  auto r = g.add_op("Reshape", {c, sh});
  CHECK(g.value(r).shape == shape{2, 512, 4});
  auto b = g.add_constant("b", tensor::timing_only({16, 1}, dtype::f32));
  auto sum = g.add_op("Add", {c, b});
  CHECK(g.value(sum).shape == shape{2, 8, 16, 16});  // NumPy broadcasting
  auto cat = g.add_op("Concat", {c, c}, {{"axis", std::int64_t{1}}});
  CHECK(g.value(cat).shape == shape{2, 16, 16, 16});
  g.set_output(y);
  g.validate();
  CHECK(g.topological_order().size() == g.nodes().size());
}

TEST_CASE("an unknown operator type is an error naming the node", "[graph][errors]") {
  graph g;
  auto x = g.add_input("x", {4}, dtype::f32);
  expect_graph_error([&] { g.add_op("Frobnicate", {x}, {}, "f1"); }, errc::not_supported, "f1", "");
  CHECK(g.nodes().empty());  // a rejected node leaves the graph as it was
}

TEST_CASE("a shape mismatch names the operator and the tensor", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4, 5}, dtype::f32);
  auto b = g.add_input("b", {6, 7}, dtype::f32);
  expect_graph_error([&] { g.add_op("MatMul", {a, b}, {}, "mm"); }, errc::invalid_shape, "mm", "b");
  auto c = g.add_input("c", {3, 5}, dtype::f32);
  expect_graph_error([&] { g.add_op("Add", {a, c}, {}, "add"); }, errc::invalid_shape, "add", "c");
}

TEST_CASE("a dtype mismatch names the operator and the tensor", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  auto h = g.add_input("h", {4}, dtype::f16);
  expect_graph_error([&] { g.add_op("Add", {a, h}, {}, "mix"); }, errc::invalid_dtype, "mix", "h");
}

TEST_CASE("an input nothing produces is reported when the graph is validated", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  g.add_op("Add", {a, "ghost"}, {}, "sum");
  g.set_output("sum");
  expect_graph_error([&] { g.validate(); }, errc::invalid_argument, "sum", "ghost");
  std::string msg;
  CHECK(g.validate(msg) == errc::invalid_argument);
  CHECK(msg.find("ghost") != std::string::npos);
}

TEST_CASE("a cycle is reported with the operators on it", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  g.add_node("Add", "n1", {a, "y2"}, {"y1"});
  g.add_node("Relu", "n2", {"y1"}, {"y2"});
  g.set_output("y2");
  try {
    g.validate();
    FAIL("no error");
  } catch (const graph_error& e) {
    const std::string w = e.what();
    CHECK(w.find("cycle") != std::string::npos);
    CHECK(w.find("n1") != std::string::npos);
    CHECK(w.find("n2") != std::string::npos);
  }
}

TEST_CASE("two separate cycles are reported each with its own operators", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  g.add_node("Add", "p1", {a, "q2"}, {"q1"});
  g.add_node("Relu", "p2", {"q1"}, {"q2"});
  g.add_node("Add", "r1", {a, "s3"}, {"s1"});
  g.add_node("Relu", "r2", {"s1"}, {"s2"});
  g.add_node("Relu", "r3", {"s2"}, {"s3"});
  // Downstream of both cycles but on neither.
  g.add_node("Add", "join", {"q2", "s3"}, {"out"});
  g.set_output("out");
  try {
    g.validate();
    FAIL("no error");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.op() == "p1");
    CHECK(std::string(e.what()).find("has 2 cycles: one through the operators p1, p2; one through the operators r1, "
                                     "r2, r3") != std::string::npos);
    CHECK(std::string(e.what()).find("join") == std::string::npos);
  }
  std::string msg;
  CHECK(g.validate(msg) == errc::invalid_argument);
  CHECK(msg.find("p1, p2; one through the operators r1, r2, r3") != std::string::npos);
}

TEST_CASE("an operator that reads its own output is a cycle of one", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  g.add_node("Add", "self", {a, "y"}, {"y"});
  g.add_node("Relu", "after", {"y"}, {"z"});
  g.set_output("z");
  std::string msg;
  CHECK(g.validate(msg) == errc::invalid_argument);
  CHECK(msg.find("has a cycle through the operators self") != std::string::npos);
  CHECK(msg.find("after") == std::string::npos);
}

TEST_CASE("a duplicate name is refused", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  expect_graph_error([&] { g.add_input("a", {4}, dtype::f32); }, errc::invalid_argument, "", "a");
  expect_graph_error([&] { g.add_op("Relu", {a}, {}, "a"); }, errc::invalid_argument, "a", "a");
}

TEST_CASE("a graph without outputs or with an unknown output is refused", "[graph][errors]") {
  graph g;
  auto a = g.add_input("a", {4}, dtype::f32);
  g.add_op("Relu", {a}, {}, "r");
  expect_graph_error([&] { g.validate(); }, errc::invalid_argument, "", "");
  g.set_output("nothing");
  expect_graph_error([&] { g.validate(); }, errc::invalid_argument, "", "nothing");
}

TEST_CASE("nodes may be added before their inputs exist and are inferred on validation", "[graph]") {
  graph g;
  g.add_node("Relu", "late", {"x2"}, {"y"});
  CHECK_FALSE(g.value("y").known);
  auto x = g.add_input("x", {3}, dtype::f32);
  g.add_node("Sigmoid", "early", {x}, {"x2"});
  g.set_output("y");
  g.validate();
  CHECK(g.value("y").known);
  CHECK(g.value("y").shape == shape{3});
  const auto order = g.topological_order();
  REQUIRE(order.size() == 2);
  CHECK(g.nodes()[order[0]].name == "early");
}
