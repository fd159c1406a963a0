// Reference kernel recurrent (ONNX's RNN, GRU and LSTM) against a reference written here from
// the ONNX spec's equations (onnx.ai/onnx/operators/onnx__RNN.html, onnx__GRU.html,
// onnx__LSTM.html) in double and in the reference implementation's shape: the whole batch at
// once, a reverse pass as the forward pass over X flipped in time with its mask flipped, steps
// past a sequence length masked (the state kept, Y zero). Every cell and direction, both layouts,
// sequence lengths, clip, initial states, peepholes, input_forget, linear_before_reset both ways,
// non-default activations, f16 and bf16, and the validation errors.
#include "helpers.hpp"

#include "../recurrent_reference.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;

namespace {

using rnn_ref::rec_problem;
using rnn_ref::rec_reference;
using rnn_ref::rec_result;
using rnn_ref::vec;

vec rec_draw(std::size_t n, std::uint64_t seed, double lo, double hi) {
  tensor t(shape{static_cast<std::int64_t>(n)}, dtype::f32);
  t.fill(seed, lo, hi, false);
  return t.values();
}

// Rounds every value to `t` as the kernel's inputs hold them.
vec rec_round(vec v, dtype t) {
  tensor s(shape{static_cast<std::int64_t>(v.size())}, t);
  s.assign(v);
  return s.values();
}

// Runs the kernel on `pb` with drawn data and compares every output with the reference.
void rec_check(const rec_problem& pb, std::uint64_t seed, std::vector<std::int64_t> lens = {}) {
  const auto S = static_cast<std::size_t>(pb.seq), N = static_cast<std::size_t>(pb.batch);
  const auto I = static_cast<std::size_t>(pb.input), H = static_cast<std::size_t>(pb.hidden);
  const auto G = static_cast<std::size_t>(pb.gates()), D = static_cast<std::size_t>(pb.dirs());
  const vec x = rec_round(rec_draw(S * N * I, seed, -1.5, 1.5), pb.type);
  const vec w = rec_round(rec_draw(D * G * H * I, seed + 1, -0.8, 0.8), pb.type);
  const vec r = rec_round(rec_draw(D * G * H * H, seed + 2, -0.8, 0.8), pb.type);
  const vec b = pb.bias ? rec_round(rec_draw(D * 2 * G * H, seed + 3, -0.5, 0.5), pb.type) : vec(D * 2 * G * H, 0.0);
  const vec p = pb.peepholes ? rec_round(rec_draw(D * 3 * H, seed + 4, -0.6, 0.6), pb.type) : vec(D * 3 * H, 0.0);
  const vec h0 = pb.init_h ? rec_round(rec_draw(D * N * H, seed + 5, -0.9, 0.9), pb.type) : vec(D * N * H, 0.0);
  const vec c0 = pb.init_c ? rec_round(rec_draw(D * N * H, seed + 6, -0.9, 0.9), pb.type) : vec(D * N * H, 0.0);
  if (lens.empty()) lens.assign(N, pb.seq);
  const rec_result want = rec_reference(pb, x, w, r, b, p, h0, c0, lens);

  const auto si = static_cast<std::int64_t>(S), ni = static_cast<std::int64_t>(N), di = static_cast<std::int64_t>(D);
  tensor xt(pb.batch_major ? shape{ni, si, pb.input} : shape{si, ni, pb.input}, pb.type);
  for (std::size_t t = 0; t < S; ++t)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t q = 0; q < I; ++q)
        xt.set(((pb.batch_major ? n * S + t : t * N + n) * I) + q, x[(t * N + n) * I + q]);
  tensor wt(shape{di, pb.gates() * pb.hidden, pb.input}, pb.type),
      rt(shape{di, pb.gates() * pb.hidden, pb.hidden}, pb.type);
  wt.assign(w);
  rt.assign(r);
  // With activation parameters b ends in 6 per direction: (alpha, beta) of f, g, h.
  const bool params = !pb.alphas.empty() || !pb.betas.empty();
  const std::int64_t bcols =
      2 * pb.gates() * pb.hidden + (pb.peepholes ? 3 * pb.hidden : 0) + (params ? k::recurrent::param_columns : 0);
  tensor bt(shape{di, bcols}, pb.type);
  for (std::size_t d = 0; d < D; ++d) {
    for (std::size_t j = 0; j < 2 * G * H; ++j) bt.set(d * static_cast<std::size_t>(bcols) + j, b[d * 2 * G * H + j]);
    if (pb.peepholes)
      for (std::size_t j = 0; j < 3 * H; ++j)
        bt.set(d * static_cast<std::size_t>(bcols) + 2 * G * H + j, p[d * 3 * H + j]);
    if (params)
      for (std::size_t q = 0; q < pb.per_dir(); ++q) {
        const std::size_t i = d * pb.per_dir() + q, at = (d + 1) * static_cast<std::size_t>(bcols) - 6 + 2 * q;
        bt.set(at, i < pb.alphas.size() ? pb.alphas[i] : rnn_ref::rec_default_alpha(pb.acts[i]));
        bt.set(at + 1, i < pb.betas.size() ? pb.betas[i] : rnn_ref::rec_default_beta(pb.acts[i]));
      }
  }
  tensor lt(shape{ni}, dtype::i32);
  for (std::size_t n = 0; n < N; ++n) lt.set(n, static_cast<double>(lens[n]));
  tensor yt(pb.batch_major ? shape{ni, si, di, pb.hidden} : shape{si, di, ni, pb.hidden}, pb.type);
  yt.fill(seed + 9, 5, 9, true);  // garbage the kernel must overwrite, masked steps with zeros
  const shape st = pb.batch_major ? shape{ni, di, pb.hidden} : shape{di, ni, pb.hidden};
  const auto state_at = [&](std::size_t d, std::size_t n) {
    return pb.batch_major ? (n * D + d) * H : (d * N + n) * H;
  };
  tensor ht(st, pb.type), ct(st, pb.type);
  ht.fill(seed + 10, 5, 9, true);
  ct.fill(seed + 11, 5, 9, true);
  for (std::size_t d = 0; d < D; ++d)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t j = 0; j < H; ++j) {
        if (pb.init_h) ht.set(state_at(d, n) + j, h0[(d * N + n) * H + j]);
        if (pb.init_c) ct.set(state_at(d, n) + j, c0[(d * N + n) * H + j]);
      }

  k::recurrent op{xt.desc, wt.desc, rt.desc};
  if (pb.bias || pb.peepholes || params) op.b = bt.desc;
  if (params) op.options |= k::recurrent::activation_params;
  if (pb.lens) op.sequence_lens = lt.desc;
  op.y = yt.desc;
  op.y_h = ht.desc;
  if (pb.cell == k::rnn_cell::lstm) op.y_c = ct.desc;
  op.cell = pb.cell;
  op.direction = pb.direction;
  op.batch_major = pb.batch_major;
  op.activations = pb.acts;
  if (pb.clip > 0) op.clip = static_cast<float>(pb.clip);
  if (pb.init_h) op.options |= k::recurrent::initial_h;
  if (pb.init_c) op.options |= k::recurrent::initial_c;
  if (pb.input_forget) op.options |= k::recurrent::input_forget;
  if (pb.linear_before_reset) op.options |= k::recurrent::linear_before_reset;
  std::string what;
  REQUIRE(npurt::sim::validate(op, &what).value() == 0);
  INFO(what);
  REQUIRE(run(op) == 0);

  // f32 computes in float: a few ulps per step. f16 and bf16 round each output once from the
  // float computation, so the reference rounded to the type is within one or two of its steps.
  const double tol = pb.type == dtype::f32 ? 2e-5 : pb.type == dtype::f16 ? 2e-3 : 1.6e-2;
  const auto close = [&](double got, double ref) { return std::fabs(got - ref) <= tol * (1 + std::fabs(ref)); };
  for (std::size_t t = 0; t < S; ++t)
    for (std::size_t d = 0; d < D; ++d)
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t j = 0; j < H; ++j) {
          const std::size_t at = pb.batch_major ? ((n * S + t) * D + d) * H + j : ((t * D + d) * N + n) * H + j;
          const double ref = want.y[((t * D + d) * N + n) * H + j];
          INFO("y t " << t << " dir " << d << " batch " << n << " j " << j << ": " << yt.get(at) << " vs " << ref);
          CHECK(close(yt.get(at), ref));
        }
  for (std::size_t d = 0; d < D; ++d)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t j = 0; j < H; ++j) {
        const double ref_h = want.y_h[(d * N + n) * H + j];
        INFO("y_h dir " << d << " batch " << n << " j " << j << ": " << ht.get(state_at(d, n) + j) << " vs " << ref_h);
        CHECK(close(ht.get(state_at(d, n) + j), ref_h));
        if (pb.cell == k::rnn_cell::lstm) {
          const double ref_c = want.y_c[(d * N + n) * H + j];
          INFO("y_c: " << ct.get(state_at(d, n) + j) << " vs " << ref_c);
          CHECK(close(ct.get(state_at(d, n) + j), ref_c));
        }
      }
}

constexpr std::array<k::rnn_cell, 3> rec_cells{k::rnn_cell::rnn, k::rnn_cell::gru, k::rnn_cell::lstm};
constexpr std::array<k::rnn_direction, 3> rec_dirs{k::rnn_direction::forward, k::rnn_direction::reverse,
                                                   k::rnn_direction::bidirectional};

std::array<k::rnn_activation, 6> rec_defaults(k::rnn_cell c) {
  using a = k::rnn_activation;
  if (c == k::rnn_cell::rnn) return {a::tanh, a::tanh, a::tanh, a::tanh, a::tanh, a::tanh};
  if (c == k::rnn_cell::gru) return {a::sigmoid, a::tanh, a::sigmoid, a::tanh, a::tanh, a::tanh};
  return {a::sigmoid, a::tanh, a::tanh, a::sigmoid, a::tanh, a::tanh};
}

}  // namespace

TEST_CASE("recurrent matches the spec's equations for every cell, direction and layout", "[kernels][recurrent]") {
  std::uint64_t seed = 100;
  for (const auto cell : rec_cells)
    for (const auto dir : rec_dirs)
      for (const bool bm : {false, true})
        for (const bool bias : {false, true}) {
          rec_problem pb;
          pb.cell = cell;
          pb.direction = dir;
          pb.batch_major = bm;
          pb.bias = bias;
          pb.seq = 4;
          pb.batch = 3;
          pb.input = 5;
          pb.hidden = 3;
          pb.acts = rec_defaults(cell);
          INFO("cell " << int(cell) << " direction " << int(dir) << " batch_major " << bm << " bias " << bias);
          rec_check(pb, seed++);
        }
}

TEST_CASE("recurrent masks steps past sequence_lens and starts from the initial states", "[kernels][recurrent]") {
  std::uint64_t seed = 300;
  for (const auto cell : rec_cells)
    for (const auto dir : rec_dirs)
      for (const bool bm : {false, true}) {
        rec_problem pb;
        pb.cell = cell;
        pb.direction = dir;
        pb.batch_major = bm;
        pb.seq = 5;
        pb.batch = 4;
        pb.lens = true;
        pb.init_h = true;
        pb.init_c = cell == k::rnn_cell::lstm;
        pb.acts = rec_defaults(cell);
        INFO("cell " << int(cell) << " direction " << int(dir) << " batch_major " << bm);
        // A full length, a short one, a zero (Y_h is the initial state) and one step.
        rec_check(pb, seed++, {5, 2, 0, 1});
      }
}

TEST_CASE("recurrent: LSTM peepholes and input_forget, GRU linear_before_reset, clip", "[kernels][recurrent]") {
  std::uint64_t seed = 500;
  for (const auto dir : rec_dirs) {
    rec_problem pb;
    pb.direction = dir;
    pb.peepholes = true;
    pb.init_c = true;
    pb.init_h = true;
    SECTION("peepholes") { rec_check(pb, seed++); }
    SECTION("peepholes without B") {
      pb.bias = false;
      rec_check(pb, seed++);
    }
    SECTION("input_forget") {
      pb.input_forget = true;
      rec_check(pb, seed++);
    }
    SECTION("GRU linear_before_reset both ways") {
      pb.cell = k::rnn_cell::gru;
      pb.peepholes = false;
      pb.init_c = false;
      pb.acts = rec_defaults(k::rnn_cell::gru);
      for (const bool lbr : {false, true}) {
        pb.linear_before_reset = lbr;
        rec_check(pb, seed++);
      }
    }
    SECTION("clip") {
      for (const auto cell : rec_cells) {
        rec_problem c = pb;
        c.cell = cell;
        c.peepholes = cell == k::rnn_cell::lstm;
        c.init_c = cell == k::rnn_cell::lstm;
        c.acts = rec_defaults(cell);
        c.clip = 0.3;
        rec_check(c, seed++);
      }
    }
  }
}

TEST_CASE("recurrent reference: the two GRU reset forms differ", "[kernels][recurrent]") {
  // A guard on the reference itself: both GRU forms are exercised and differ on this data.
  rec_problem pb;
  pb.cell = k::rnn_cell::gru;
  pb.acts = rec_defaults(pb.cell);
  pb.init_h = true;
  const vec x = rec_draw(18, 1, -1.5, 1.5), w = rec_draw(18, 2, -0.8, 0.8), r = rec_draw(12, 3, -0.8, 0.8);
  const vec b = rec_draw(12, 4, -0.5, 0.5), p(6, 0.0), h0 = rec_draw(4, 5, -0.9, 0.9), c0(4, 0.0);
  const auto a = rec_reference(pb, x, w, r, b, p, h0, c0, {3, 3});
  pb.linear_before_reset = true;
  const auto l = rec_reference(pb, x, w, r, b, p, h0, c0, {3, 3});
  CHECK(std::fabs(a.y_h[0] - l.y_h[0]) > 1e-4);
}

TEST_CASE("recurrent applies every listed activation, per direction", "[kernels][recurrent]") {
  using a = k::rnn_activation;
  const std::array<std::array<a, 6>, 3> lists{
      {{a::relu, a::softsign, a::softplus, a::leaky_relu, a::elu, a::tanh},
       {a::hard_sigmoid, a::thresholded_relu, a::leaky_relu, a::sigmoid, a::relu, a::softsign},
       {a::softplus, a::elu, a::hard_sigmoid, a::thresholded_relu, a::softsign, a::sigmoid}}};
  std::uint64_t seed = 700;
  for (const auto cell : rec_cells)
    for (const auto& acts : lists) {
      rec_problem pb;
      pb.cell = cell;
      pb.direction = k::rnn_direction::bidirectional;
      pb.acts = acts;
      pb.init_h = true;
      pb.init_c = cell == k::rnn_cell::lstm;
      rec_check(pb, seed++);
    }
}

TEST_CASE("recurrent applies activation_alpha and activation_beta read from the end of b, Affine and ScaledTanh",
          "[kernels][recurrent]") {
  using a = k::rnn_activation;
  std::uint64_t seed = 800;
  for (const auto cell : rec_cells)
    for (const bool peepholes : {false, true}) {
      if (peepholes && cell != k::rnn_cell::lstm) continue;
      rec_problem pb;
      pb.cell = cell;
      pb.direction = k::rnn_direction::bidirectional;
      pb.acts = {a::hard_sigmoid, a::scaled_tanh, a::affine, a::leaky_relu, a::elu, a::thresholded_relu};
      if (cell == k::rnn_cell::gru)
        pb.acts = {a::hard_sigmoid, a::affine, a::hard_sigmoid, a::scaled_tanh, a::tanh, a::tanh};
      if (cell == k::rnn_cell::rnn) pb.acts = {a::scaled_tanh, a::affine, a::tanh, a::tanh, a::tanh, a::tanh};
      // Function i takes alphas[i] and betas[i]; the shorter list leaves the later defaults.
      pb.alphas = {0.3, 0.9, 0.6, 0.15, 0.5, 0.2};
      pb.betas = {0.45, 1.3, -0.2};
      pb.peepholes = peepholes;
      pb.bias = !peepholes;
      pb.init_h = true;
      rec_check(pb, seed++);
    }
  // f16: the parameters are b's dtype.
  rec_problem pb;
  pb.cell = k::rnn_cell::gru;
  pb.type = dtype::f16;
  pb.acts = {a::hard_sigmoid, a::affine, a::sigmoid, a::tanh, a::tanh, a::tanh};
  pb.alphas = {0.25, 0.5};
  pb.betas = {0.5, 0.25};
  rec_check(pb, seed);
}

TEST_CASE("recurrent in f16 and bf16 rounds its outputs from a float computation", "[kernels][recurrent]") {
  std::uint64_t seed = 900;
  for (const dtype t : {dtype::f16, dtype::bf16})
    for (const auto cell : rec_cells) {
      rec_problem pb;
      pb.cell = cell;
      pb.type = t;
      pb.direction = k::rnn_direction::bidirectional;
      pb.lens = true;
      pb.init_h = true;
      pb.acts = rec_defaults(cell);
      rec_check(pb, seed++, {3, 1});
    }
}

TEST_CASE("recurrent refuses a sequence length outside [0, seq] when it runs", "[kernels][recurrent]") {
  for (const std::int32_t bad : {-1, 4}) {
    tensor x(shape{3, 1, 2}), w(shape{1, 2, 2}), r(shape{1, 2, 2}), lens(shape{1}, dtype::i32), y(shape{3, 1, 1, 2});
    x.fill(1, -1, 1, false);
    lens.set(0, bad);
    y.fill(2, 5, 9, true);
    const auto before = y.values();
    k::recurrent op{x.desc, w.desc, r.desc};
    op.cell = k::rnn_cell::rnn;
    op.sequence_lens = lens.desc;
    op.y = y.desc;
    std::string why;
    const auto ec = npurt::sim::run_reference(op, npurt::sim::host_memory(), 0, &why);
    CHECK(ec == npurt::errc::invalid_argument);
    CHECK(why.find("sequence_lens[0] = " + std::to_string(bad)) != std::string::npos);
    CHECK(y.values() == before);
  }
}

TEST_CASE("recurrent validation names the operand and the shape it must have", "[kernels][recurrent][validate]") {
  const auto d = [](shape s, dtype t = dtype::f32) { return shape_only(s, t); };
  k::recurrent ok{d({5, 2, 3}), d({1, 16, 3}), d({1, 16, 4})};
  ok.y = d({5, 1, 2, 4});
  ok.y_h = d({1, 2, 4});
  ok.y_c = d({1, 2, 4});
  ok.b = d({1, 32});
  ok.sequence_lens = d({2}, dtype::i32);
  REQUIRE(npurt::sim::validate(ok).value() == 0);
  const auto fails = [](const k::recurrent& op, npurt::errc e, const std::string& text) {
    std::string what;
    CHECK(npurt::sim::validate(op, &what) == e);
    INFO(what);
    CHECK(what.find(text) != std::string::npos);
  };
  {
    auto op = ok;
    op.w = d({1, 16, 4});
    fails(op, npurt::errc::invalid_shape, "w [1,16,4] must be [1,16,3]");
  }
  {
    auto op = ok;
    op.r = d({1, 12, 4});
    fails(op, npurt::errc::invalid_shape, "r [1,12,4] must be [1,16,4]");
  }
  {
    auto op = ok;
    op.direction = k::rnn_direction::bidirectional;
    fails(op, npurt::errc::invalid_shape, "r [1,16,4] must be [2,16,4]");
  }
  {
    auto op = ok;
    op.b = d({1, 30});
    fails(op, npurt::errc::invalid_shape, "b [1,30] must be [1,32] (or [1,44] with the peepholes)");
  }
  {
    auto op = ok;
    op.y = d({2, 5, 1, 4});
    fails(op, npurt::errc::invalid_shape, "y [2,5,1,4] must be [5,1,2,4]");
  }
  {
    auto op = ok;
    op.batch_major = true;
    op.x = d({2, 5, 3});
    op.y = d({2, 5, 1, 4});
    op.y_h = d({1, 2, 4});
    fails(op, npurt::errc::invalid_shape, "y_h [1,2,4] must be [2,1,4]");
  }
  {
    auto op = ok;
    op.sequence_lens = d({3}, dtype::i32);
    fails(op, npurt::errc::invalid_shape, "sequence_lens [3] must be [2]");
  }
  {
    auto op = ok;
    op.sequence_lens = d({2}, dtype::i64);
    fails(op, npurt::errc::invalid_dtype, "sequence_lens must be int32");
  }
  {
    auto op = ok;
    op.r = d({1, 16, 4}, dtype::f16);
    fails(op, npurt::errc::invalid_dtype, "r is f16");
  }
  {
    auto op = ok;
    op.x = d({5, 2, 3}, dtype::i32);
    fails(op, npurt::errc::invalid_dtype, "x must be f32, f16 or bf16");
  }
  {
    // It computes in float: a float64 layer is refused, not rounded through float.
    auto op = ok;
    op.x = d({5, 2, 3}, dtype::f64);
    fails(op, npurt::errc::not_supported, "x is f64");
  }
  {
    auto op = ok;
    op.cell = k::rnn_cell::gru;
    op.w = d({1, 12, 3});
    op.r = d({1, 12, 4});
    op.b = d({1, 24});
    fails(op, npurt::errc::invalid_argument, "y_c is an LSTM's cell state");
  }
  {
    auto op = ok;
    op.options = k::recurrent::linear_before_reset;
    fails(op, npurt::errc::invalid_argument, "linear_before_reset is a GRU's option");
  }
  {
    auto op = ok;
    op.y_h = {};
    op.options = k::recurrent::initial_h;
    fails(op, npurt::errc::invalid_argument, "initial_h is read from y_h");
  }
  {
    auto op = ok;
    op.clip = 0;
    fails(op, npurt::errc::invalid_argument, "clip");
  }
  {
    auto op = ok;
    op.activations[2] = static_cast<k::rnn_activation>(40);
    fails(op, npurt::errc::invalid_argument, "activations[2]");
  }
  {
    auto op = ok;
    op.x = d({5, 2});
    fails(op, npurt::errc::invalid_shape, "x [5,2] must be [seq, batch, input]");
  }
  {
    // Activation parameters ride at the end of b: 6 more columns, and b is then required.
    auto op = ok;
    op.options = k::recurrent::activation_params;
    fails(op, npurt::errc::invalid_shape, "b [1,32] must be [1,38]");
    op.b = d({1, 38});
    op.activations[1] = k::rnn_activation::scaled_tanh;
    CHECK(npurt::sim::validate(op).value() == 0);
    op.b = {};
    fails(op, npurt::errc::invalid_argument, "activation_params needs b");
  }
}

TEST_CASE("recurrent fits the kernel descriptor", "[kernels][recurrent]") {
  static_assert(sizeof(npurt::kernel_desc) <= 752);
  CHECK(sizeof(k::recurrent) <= sizeof(k::batchnorm));
}
