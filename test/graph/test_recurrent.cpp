// RNN, GRU and LSTM (onnx.ai/onnx/operators/onnx__RNN.html and its siblings) through compiled
// runs against the spec-equation reference in test/recurrent_reference.hpp: every optional input
// given (an LSTM's peepholes ride after B, the initial states in Y_h and Y_c), outputs left out,
// layout 1, non-default activations and activation parameters, an fp16 session, and the typed
// errors naming the operand.
#include <npurt/graph/session.hpp>

#include "../recurrent_reference.hpp"
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// The graph-level data of one problem: ONNX tensors in layout 0, and the node's extras.
struct rec_graph_case {
  rnn_ref::rec_problem pb;
  std::string op = "LSTM";
  std::string activations;  // empty: the defaults
  std::vector<std::int64_t> lens;
};

// Transposes [a][b][rest] to [b][a][rest].
std::vector<double> rec_swap01(const std::vector<double>& v, std::size_t a, std::size_t b, std::size_t rest) {
  std::vector<double> o(v.size());
  for (std::size_t i = 0; i < a; ++i)
    for (std::size_t j = 0; j < b; ++j)
      for (std::size_t q = 0; q < rest; ++q) o[(j * a + i) * rest + q] = v[(i * b + j) * rest + q];
  return o;
}

// Builds the node, runs it in `p` and compares Y, Y_h (and Y_c) with the reference.
void rec_graph_check(const rec_graph_case& c, precision p = precision::fp32, double tol = 2e-5) {
  const auto& pb = c.pb;
  const auto S = static_cast<std::size_t>(pb.seq), N = static_cast<std::size_t>(pb.batch);
  const auto I = static_cast<std::size_t>(pb.input), H = static_cast<std::size_t>(pb.hidden);
  const auto G = static_cast<std::size_t>(pb.gates()), D = static_cast<std::size_t>(pb.dirs());
  const bool lstm = pb.cell == kernels::rnn_cell::lstm;
  const auto x = test::values(pb.seq * pb.batch * pb.input, 1, 1.5);
  const auto w = test::values(static_cast<std::int64_t>(D * G * H * I), 2, 0.8);
  const auto r = test::values(static_cast<std::int64_t>(D * G * H * H), 3, 0.8);
  const auto b = pb.bias ? test::values(static_cast<std::int64_t>(D * 2 * G * H), 4, 0.5)
                         : std::vector<double>(D * 2 * G * H, 0.0);
  const auto pp = test::values(static_cast<std::int64_t>(D * 3 * H), 5, 0.6);
  const auto h0 = test::values(static_cast<std::int64_t>(D * N * H), 6, 0.9);
  const auto c0 = test::values(static_cast<std::int64_t>(D * N * H), 7, 0.9);
  const std::vector<std::int64_t> lens = c.lens.empty() ? std::vector<std::int64_t>(N, pb.seq) : c.lens;
  const std::vector<double> zeros_p(D * 3 * H, 0.0), zeros_c(D * N * H, 0.0);
  const auto want = rnn_ref::rec_reference(pb, x, w, r, b, pb.peepholes ? pp : zeros_p, pb.init_h ? h0 : zeros_c,
                                           pb.init_c ? c0 : zeros_c, lens);
  const auto di = static_cast<std::int64_t>(D), ni = pb.batch, si = pb.seq;
  const bool bm = pb.batch_major;
  graph g("rec");
  std::vector<std::string> ins{
      g.add_input("X", bm ? shape{ni, si, pb.input} : shape{si, ni, pb.input}, dtype::f32),
      g.add_constant("W", tensor(shape{di, pb.gates() * pb.hidden, pb.input}, dtype::f32, w)),
      g.add_constant("R", tensor(shape{di, pb.gates() * pb.hidden, pb.hidden}, dtype::f32, r)),
      pb.bias ? g.add_constant("B", tensor(shape{di, 2 * pb.gates() * pb.hidden}, dtype::f32, b)) : std::string(),
      pb.lens ? g.add_input("lens", {ni}, dtype::i32) : std::string(),
      pb.init_h ? g.add_input("h0", bm ? shape{ni, di, pb.hidden} : shape{di, ni, pb.hidden}, dtype::f32)
                : std::string()};
  if (lstm) {
    ins.push_back(pb.init_c ? g.add_input("c0", bm ? shape{ni, di, pb.hidden} : shape{di, ni, pb.hidden}, dtype::f32)
                            : std::string());
    ins.push_back(pb.peepholes ? g.add_constant("P", tensor(shape{di, 3 * pb.hidden}, dtype::f32, pp)) : std::string());
  }
  attributes a{{"hidden_size", pb.hidden}};
  if (pb.direction == kernels::rnn_direction::reverse) a.set("direction", std::string("reverse"));
  if (pb.direction == kernels::rnn_direction::bidirectional) a.set("direction", std::string("bidirectional"));
  if (bm) a.set("layout", std::int64_t{1});
  if (pb.clip > 0) a.set("clip", pb.clip);
  if (pb.linear_before_reset) a.set("linear_before_reset", std::int64_t{1});
  if (pb.input_forget) a.set("input_forget", std::int64_t{1});
  if (!c.activations.empty()) a.set("activations", c.activations);
  if (!pb.alphas.empty()) a.set("activation_alpha", floats(pb.alphas));
  if (!pb.betas.empty()) a.set("activation_beta", floats(pb.betas));
  std::vector<std::string> outs{"Y", "Y_h"};
  if (lstm) outs.push_back("Y_c");
  g.add_node(c.op, "rec", ins, outs, a);
  for (const auto& o : outs) g.set_output(o);
  const shape ys = bm ? shape{ni, si, di, pb.hidden} : shape{si, di, ni, pb.hidden};
  const shape hs = bm ? shape{ni, di, pb.hidden} : shape{di, ni, pb.hidden};
  CHECK(g.value("Y").shape == ys);
  CHECK(g.value("Y_h").shape == hs);

  const tensor xt(bm ? shape{ni, si, pb.input} : shape{si, ni, pb.input}, dtype::f32, bm ? rec_swap01(x, S, N, I) : x);
  const tensor lt = test::ints_tensor(lens, dtype::i32);
  const tensor ht(hs, dtype::f32, bm ? rec_swap01(h0, D, N, H) : h0),
      ct(hs, dtype::f32, bm ? rec_swap01(c0, D, N, H) : c0);
  std::vector<feed> feeds{{"X", xt}};
  if (pb.lens) feeds.push_back({"lens", lt});
  if (pb.init_h) feeds.push_back({"h0", ht});
  if (pb.init_c) feeds.push_back({"c0", ct});
  auto sys = test::make_system();
  session s{sys, {.precision = p}};
  const auto res = s.run(s.compile(g), feeds);
  // Y's reference is [seq][dirs][batch][hidden]; layout 1 puts batch first.
  std::vector<double> y_want = want.y;
  if (bm)
    for (std::size_t t = 0; t < S; ++t)
      for (std::size_t d = 0; d < D; ++d)
        for (std::size_t n = 0; n < N; ++n)
          for (std::size_t j = 0; j < H; ++j)
            y_want[((n * S + t) * D + d) * H + j] = want.y[((t * D + d) * N + n) * H + j];
  const auto close = [&](const std::vector<double>& got, const std::vector<double>& ref) {
    REQUIRE(got.size() == ref.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": " << got[i] << " vs " << ref[i]);
      CHECK(std::fabs(got[i] - ref[i]) <= tol * (1 + std::fabs(ref[i])));
    }
  };
  close(res.outputs.at("Y").to_vector(), y_want);
  close(res.outputs.at("Y_h").to_vector(), bm ? rec_swap01(want.y_h, D, N, H) : want.y_h);
  if (lstm) close(res.outputs.at("Y_c").to_vector(), bm ? rec_swap01(want.y_c, D, N, H) : want.y_c);
}

}  // namespace

TEST_CASE("LSTM with every input: peepholes, sequence_lens, initial states, bidirectional", "[graph][recurrent]") {
  rec_graph_case c;
  c.pb.direction = kernels::rnn_direction::bidirectional;
  c.pb.seq = 4;
  c.pb.batch = 3;
  c.pb.peepholes = c.pb.lens = c.pb.init_h = c.pb.init_c = true;
  c.lens = {4, 2, 0};
  rec_graph_check(c);
  SECTION("input_forget and clip") {
    c.pb.input_forget = true;
    c.pb.clip = 0.4;
    rec_graph_check(c);
  }
  SECTION("layout 1") {
    c.pb.batch_major = true;
    rec_graph_check(c);
  }
}

namespace {

// A reverse GRU with f and g as given, the reset gate after R's product or before it.
rec_graph_case reverse_gru(kernels::rnn_activation f, kernels::rnn_activation g, bool linear_before_reset) {
  rec_graph_case c;
  c.op = "GRU";
  c.pb.cell = kernels::rnn_cell::gru;
  c.pb.acts[0] = f;
  c.pb.acts[1] = g;
  c.pb.direction = kernels::rnn_direction::reverse;
  c.pb.linear_before_reset = linear_before_reset;
  return c;
}

}  // namespace

TEST_CASE("GRU in both reset forms and RNN with non-default activations", "[graph][recurrent]") {
  for (const bool lbr : {false, true}) {
    rec_graph_case c = reverse_gru(kernels::rnn_activation::sigmoid, kernels::rnn_activation::tanh, lbr);
    c.pb.init_h = c.pb.lens = true;
    c.lens = {1, 3};
    rec_graph_check(c);
  }
  rec_graph_case c;
  c.op = "RNN";
  c.pb.cell = kernels::rnn_cell::rnn;
  c.pb.direction = kernels::rnn_direction::bidirectional;
  c.pb.batch_major = true;
  c.pb.acts[0] = kernels::rnn_activation::relu;
  c.pb.acts[1] = kernels::rnn_activation::softsign;
  c.activations = "Relu,softsign";  // onnxruntime's names compare without case
  c.pb.init_h = true;
  rec_graph_check(c);
}

TEST_CASE("RNN, GRU and LSTM take activation_alpha and activation_beta, Affine and ScaledTanh", "[graph][recurrent]") {
  using kernels::rnn_activation;
  // A bidirectional LSTM, every function with parameters, peepholes after B and the parameters
  // after them; then without B (zeros) and with lists shorter than the functions (defaults).
  rec_graph_case c;
  c.pb.direction = kernels::rnn_direction::bidirectional;
  c.pb.peepholes = c.pb.init_c = true;
  c.pb.acts = {rnn_activation::hard_sigmoid, rnn_activation::scaled_tanh, rnn_activation::affine,
               rnn_activation::hard_sigmoid, rnn_activation::leaky_relu,  rnn_activation::scaled_tanh};
  c.activations = "HardSigmoid,ScaledTanh,Affine,HardSigmoid,LeakyRelu,ScaledTanh";
  c.pb.alphas = {0.3, 0.9, 0.75, 0.15, 0.2, 1.25};
  c.pb.betas = {0.45, 1.4, -0.1, 0.6, 0, 0.7};
  rec_graph_check(c);
  SECTION("no B, and lists shorter than the functions") {
    c.pb.bias = false;
    c.pb.peepholes = false;
    c.pb.alphas = {0.3, 0.9, 0.75, 0.15};
    c.pb.betas = {0.45};
    rec_graph_check(c);
  }
  // GRU: ThresholdedRelu's threshold and Elu's alpha, reverse, linear_before_reset.
  rec_graph_case g = reverse_gru(rnn_activation::hard_sigmoid, rnn_activation::elu, true);
  g.activations = "HardSigmoid,Elu";
  g.pb.alphas = {0.25, 0.5};
  g.pb.betas = {0.55};
  rec_graph_check(g);
  g.pb.acts[1] = rnn_activation::thresholded_relu;
  g.activations = "HardSigmoid,ThresholdedRelu";
  g.pb.alphas = {0.25, 0.1};
  rec_graph_check(g);
  // RNN: Affine with sequence lengths; ScaledTanh with its defaults only is tanh.
  rec_graph_case r;
  r.op = "RNN";
  r.pb.cell = kernels::rnn_cell::rnn;
  r.pb.acts[0] = rnn_activation::affine;
  r.activations = "Affine";
  r.pb.alphas = {0.6};
  r.pb.betas = {-0.2};
  r.pb.lens = true;
  r.lens = {2, 3};
  rec_graph_check(r);
  r.pb.acts[0] = rnn_activation::scaled_tanh;
  r.activations = "ScaledTanh";
  r.pb.alphas.clear();
  r.pb.betas.clear();
  rec_graph_check(r);
}

TEST_CASE("LSTM in an fp16 session keeps sequence_lens integer", "[graph][recurrent]") {
  rec_graph_case c;
  c.pb.direction = kernels::rnn_direction::bidirectional;
  c.pb.peepholes = c.pb.lens = c.pb.init_h = c.pb.init_c = true;
  c.lens = {3, 1};
  rec_graph_check(c, precision::fp16, 1e-2);
}

TEST_CASE("RNN, GRU and LSTM may leave any output out", "[graph][recurrent]") {
  graph g("rec");
  const auto x = g.add_input("X", {3, 2, 4}, dtype::f32);
  const auto w = g.add_constant("W", test::random_tensor({1, 9, 4}, 1));
  const auto r = g.add_constant("R", test::random_tensor({1, 9, 3}, 2));
  g.add_node("GRU", "gru", {x, w, r}, {"", "h"}, {{"hidden_size", std::int64_t{3}}});
  g.set_output("h");
  CHECK(g.value("h").shape == shape{1, 2, 3});
  auto sys = test::make_system();
  session s{sys};
  const auto xs = test::values(24, 9);
  const auto got = s.run(s.compile(g), {{"X", tensor({3, 2, 4}, dtype::f32, xs)}}).outputs.at("h").to_vector();
  rnn_ref::rec_problem pb;
  pb.cell = kernels::rnn_cell::gru;
  pb.acts[1] = kernels::rnn_activation::tanh;
  pb.input = 4;
  pb.hidden = 3;
  const std::vector<double> zb(18, 0.0), zp(9, 0.0), z0(6, 0.0);
  const auto want = rnn_ref::rec_reference(pb, xs, test::random_tensor({1, 9, 4}, 1).to_vector(),
                                           test::random_tensor({1, 9, 3}, 2).to_vector(), zb, zp, z0, z0, {3, 3});
  CHECK(test::max_abs_diff(got, want.y_h) < 1e-5);
}

TEST_CASE("RNN, GRU and LSTM refuse what they cannot compute, naming the operand", "[graph][recurrent]") {
  const auto build = [](const std::string& op, shape ws, attributes a = {}, dtype lens_type = dtype::i32,
                        shape ps = {1, 6}) {
    graph g("bad");
    const std::int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;
    const auto x = g.add_input("X", {3, 2, 4}, dtype::f32);
    const auto w = g.add_input("W", ws, dtype::f32);
    const auto r = g.add_input("R", {1, gates * 2, 2}, dtype::f32);
    const auto lens = g.add_input("lens", {2}, lens_type);
    std::vector<std::string> ins{x, w, r, "", lens};
    if (op == "LSTM") ins.insert(ins.end(), {"", "", g.add_input("P", ps, dtype::f32)});
    g.add_node(op, "rec", ins, {"Y"}, a);
  };
  expect_graph_error([&] { build("LSTM", {1, 8, 5}); }, errc::invalid_shape, "rec", "W");
  expect_graph_error([&] { build("LSTM", {1, 8, 4}, {}, dtype::i32, {1, 5}); }, errc::invalid_shape, "rec", "P");
  expect_graph_error([&] { build("GRU", {1, 6, 4}, {}, dtype::i64); }, errc::invalid_dtype, "rec", "lens");
  expect_graph_error([&] { build("RNN", {1, 2, 4}, {{"activations", std::string("Swish")}}); }, errc::invalid_argument,
                     "rec", "X");
  // One alpha per function at most, each finite.
  expect_graph_error(
      [&] {
        build("RNN", {1, 2, 4}, {{"activations", std::string("LeakyRelu")}, {"activation_alpha", floats{0.2, 1}}});
      },
      errc::invalid_argument, "rec", "X");
  expect_graph_error(
      [&] { build("RNN", {1, 2, 4}, {{"activations", std::string("Affine")}, {"activation_beta", floats{HUGE_VAL}}}); },
      errc::invalid_argument, "rec", "");
  expect_graph_error([&] { build("RNN", {1, 2, 4}, {{"activations", std::string("Tanh,Tanh")}}); },
                     errc::invalid_argument, "rec", "X");
  expect_graph_error([&] { build("GRU", {1, 6, 4}, {{"direction", std::string("sideways")}}); }, errc::invalid_argument,
                     "rec", "X");
  expect_graph_error([&] { build("RNN", {1, 2, 4}, {{"input_forget", std::int64_t{1}}}); }, errc::not_supported, "rec",
                     "");
  expect_graph_error([&] { build("RNN", {1, 2, 4}, {{"hidden_size", std::int64_t{3}}}); }, errc::invalid_shape, "rec",
                     "R");
  build("RNN", {1, 2, 4}, {{"activations", std::string("LeakyRelu")}, {"activation_alpha", floats{0.2}}});
}
