// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (onnx.ai/onnx/operators): values through
// compiled runs against the definitions computed here in double, the log_prob output, targets
// bad at run time, the typed errors, and a timing-only run.
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
using test::near;

// Scores [N, C, D] = [2, 4, 3] and labels [N, D], one of them the ignore_index -1.
const std::vector<double> label_values{0, 3, -1, 2, 1, 1};

struct loss_graph {
  graph g{"loss"};
  std::string out;
};

// SoftmaxCrossEntropyLoss (or NLL of the scores as given) with class weights, ignore_index -1.
loss_graph build(const std::string& op, const std::string& reduction, bool log_prob = false) {
  loss_graph l;
  auto x = l.g.add_input("scores", {2, 4, 3}, dtype::f32);
  auto t = l.g.add_input("labels", {2, 3}, dtype::i64);
  auto w = l.g.add_constant("w", tensor({4}, dtype::f32, {1.0, 0.5, 2.0, 1.5}));
  const attributes a{{"reduction", reduction}, {"ignore_index", std::int64_t{-1}}};
  std::vector<std::string> outs{"loss"};
  if (log_prob) outs.push_back("log_prob");
  l.g.add_node(op, "l", {x, t, w}, outs, a);
  l.g.set_output("loss");
  if (log_prob) l.g.set_output("log_prob");
  l.out = "loss";
  return l;
}

// The definitions: log_prob = x - log(sum(exp(x))) over the classes; loss = -log_prob[n, t, d] *
// w[t]; mean divides by the weights of the elements not ignored.
std::vector<double> expected(const std::vector<double>& x, bool softmax, const std::string& reduction,
                             std::vector<double>* log_prob = nullptr) {
  const double w[4] = {1.0, 0.5, 2.0, 1.5};
  std::vector<double> lp = x;
  if (softmax)
    for (int n = 0; n < 2; ++n)
      for (int d = 0; d < 3; ++d) {
        double s = 0;
        for (int c = 0; c < 4; ++c) s += std::exp(x[static_cast<std::size_t>((n * 4 + c) * 3 + d)]);
        for (int c = 0; c < 4; ++c) lp[static_cast<std::size_t>((n * 4 + c) * 3 + d)] -= std::log(s);
      }
  if (log_prob) *log_prob = lp;
  std::vector<double> loss(6, 0.0);
  double sum = 0, wsum = 0;
  for (int n = 0; n < 2; ++n)
    for (int d = 0; d < 3; ++d) {
      const auto t = static_cast<int>(label_values[static_cast<std::size_t>(n * 3 + d)]);
      if (t == -1) continue;
      loss[static_cast<std::size_t>(n * 3 + d)] = -lp[static_cast<std::size_t>((n * 4 + t) * 3 + d)] * w[t];
      sum += loss[static_cast<std::size_t>(n * 3 + d)];
      wsum += w[t];
    }
  if (reduction == "none") return loss;
  return {reduction == "sum" ? sum : sum / wsum};
}

}  // namespace

TEST_CASE("NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss compute ONNX's definitions", "[graph][loss]") {
  const tensor x = test::random_tensor({2, 4, 3}, 11, 3.0);
  const tensor labels({2, 3}, dtype::i64, label_values);
  for (const std::string op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
    for (const std::string reduction : {"none", "sum", "mean"})
      for (int level : {0, 2}) {
        CAPTURE(op, reduction, level);
        auto l = build(op, reduction);
        CHECK(l.g.value("loss").shape == (reduction == "none" ? shape{2, 3} : shape{}));
        auto sys = test::make_system();
        session s{sys};
        const auto r = s.run(s.compile(l.g, {.optimization_level = level}), {{"scores", x}, {"labels", labels}});
        CHECK(near(r.outputs.at("loss").to_vector(),
                   expected(x.to_vector(), op == "SoftmaxCrossEntropyLoss", reduction)));
      }
}

TEST_CASE("SoftmaxCrossEntropyLoss gives its log_prob output when it is named", "[graph][loss]") {
  auto l = build("SoftmaxCrossEntropyLoss", "mean", true);
  CHECK(l.g.value("log_prob").shape == shape{2, 4, 3});
  auto sys = test::make_system();
  session s{sys};
  const tensor x = test::random_tensor({2, 4, 3}, 5, 2.0);
  const auto r = s.run(s.compile(l.g), {{"scores", x}, {"labels", tensor({2, 3}, dtype::i64, label_values)}});
  std::vector<double> lp;
  const auto loss = expected(x.to_vector(), true, "mean", &lp);
  CHECK(near(r.outputs.at("loss").to_vector(), loss));
  CHECK(near(r.outputs.at("log_prob").to_vector(), lp));
}

TEST_CASE("a label outside the classes fails the run with invalid_argument", "[graph][loss]") {
  auto l = build("SoftmaxCrossEntropyLoss", "sum");
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(l.g);
  const tensor x = test::random_tensor({2, 4, 3}, 3);
  try {
    (void)s.run(c, {{"scores", x}, {"labels", tensor({2, 3}, dtype::i64, {0, 4, 1, 2, 1, 1})}});
    FAIL("a label of 4 with 4 classes was accepted");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    // The node the user named ('l') and wrote (SoftmaxCrossEntropyLoss), then the step of the
    // chain it expands to that failed.
    CHECK_THAT(e.what(),
               Catch::Matchers::StartsWith(
                   "npurt::session::run: node 'l' (SoftmaxCrossEntropyLoss, step NegativeLogLikelihoodLoss): "));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("target[1] = 4 is not a class in [0, 4)"));
  }
  // The session is still usable, with labels in range.
  const auto r = s.run(c, {{"scores", x}, {"labels", tensor({2, 3}, dtype::i64, label_values)}});
  CHECK(near(r.outputs.at("loss").to_vector(), expected(x.to_vector(), true, "sum")));
}

TEST_CASE("a NegativeLogLikelihoodLoss the user wrote is reported as itself", "[graph][loss]") {
  auto l = build("NegativeLogLikelihoodLoss", "none");
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(l.g);
  try {
    (void)s.run(c, {{"scores", test::random_tensor({2, 4, 3}, 5)},
                    {"labels", tensor({2, 3}, dtype::i64, {0, 1, 1, 2, -3, 1})}});
    FAIL("a label of -3 was accepted");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::StartsWith("npurt::session::run: node 'l' (NegativeLogLikelihoodLoss): "));
  }
  // Not a chain: no origin. The chain's steps, its intermediate LogSoftmax too, have theirs.
  CHECK(l.g.origin("l") == nullptr);
  auto ce = build("SoftmaxCrossEntropyLoss", "none");
  for (const node& n : ce.g.nodes()) {
    CAPTURE(n.name, n.type);
    const chain_origin* o = ce.g.origin(n.name);
    REQUIRE(o != nullptr);
    CHECK(o->type == "SoftmaxCrossEntropyLoss");
    CHECK(o->name == "l");
  }
  CHECK(ce.g.nodes().size() == 2);
}

TEST_CASE("the losses refuse operands ONNX does not define, with typed errors", "[graph][loss]") {
  const auto add = [](shape xs, shape ts, dtype tt, shape ws, const std::string& reduction = "mean") {
    graph g("bad");
    auto x = g.add_input("x", xs, dtype::f32);
    auto t = g.add_input("t", ts, tt);
    std::vector<std::string> ins{x, t};
    if (ws.rank() != 0) ins.push_back(g.add_input("w", ws, dtype::f32));
    g.add_op("NegativeLogLikelihoodLoss", ins, {{"reduction", reduction}}, "l");
  };
  expect_graph_error([&] { add({4, 3}, {4}, dtype::f32, {}); }, errc::invalid_dtype, "l", "t");
  expect_graph_error([&] { add({4, 3, 2}, {4, 3}, dtype::i64, {}); }, errc::invalid_shape, "l", "t");
  expect_graph_error([&] { add({4}, {4}, dtype::i64, {}); }, errc::invalid_shape, "l", "x");
  expect_graph_error([&] { add({4, 3}, {4}, dtype::i64, {4}); }, errc::invalid_shape, "l", "w");
  expect_graph_error([&] { add({4, 3}, {4}, dtype::i64, {}, "average"); }, errc::invalid_argument, "l", "");
  expect_graph_error(
      [&] {
        graph g("outs");
        auto x = g.add_input("x", {4, 3}, dtype::f32);
        auto t = g.add_input("t", {4}, dtype::i64);
        g.add_node("SoftmaxCrossEntropyLoss", "l", {x, t}, {"a", "b", "c"});
      },
      errc::invalid_argument, "l", "");
}

TEST_CASE("SoftmaxCrossEntropyLoss runs timing-only as LogSoftmax and nll_loss", "[graph][loss][timing]") {
  graph g("timing");
  auto x = g.add_input("logits", {512, 32000}, dtype::f16);
  auto t = g.add_input("labels", {512}, dtype::i64);
  g.add_node("SoftmaxCrossEntropyLoss", "ce", {x, t}, {"loss"});
  g.set_output("loss");
  auto sys = test::make_system();
  session s{sys};
  auto r = s.run(s.compile(g, {.timing_only = true}), {{"logits", tensor::timing_only({512, 32000}, dtype::f16)},
                                                       {"labels", tensor::timing_only({512}, dtype::i64)}});
  REQUIRE(r.ops.size() == 2);
  CHECK(r.outputs.at("loss").shape() == shape{});
  for (const auto& op : r.ops) CHECK(op.busy > picoseconds{0});
}
