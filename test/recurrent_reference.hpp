// A reference for ONNX's RNN, GRU and LSTM written from the spec's equations
// (onnx.ai/onnx/operators/onnx__RNN.html, onnx__GRU.html, onnx__LSTM.html) in double and in the
// shape of ONNX's reference implementations (onnx/reference/ops/op_rnn.py, op_gru.py,
// op_lstm.py): the whole batch at once, a reverse pass as the forward pass over X flipped in time
// with its mask flipped, steps past a sequence length masked (the state kept, Y zero). Shared by
// the kernel, graph and ONNX tests; it knows nothing of the kernel's code.
#pragma once

#include <npurt/kernel_ops.hpp>
#include <npurt/tensor.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rnn_ref {

namespace k = npurt::kernels;
using npurt::dtype;

using vec = std::vector<double>;

// The spec's activation functions with parameters alpha and beta (onnx.ai's RNN page: Affine
// alpha * x + beta, LeakyRelu, ThresholdedRelu (alpha the threshold), ScaledTanh
// alpha * tanh(beta * x), HardSigmoid min(max(alpha * x + beta, 0), 1), Elu alpha (e^x - 1)).
inline double rec_act(k::rnn_activation a, double x, double alpha, double beta) {
  switch (a) {
    case k::rnn_activation::sigmoid: return 1 / (1 + std::exp(-x));
    case k::rnn_activation::tanh: return std::tanh(x);
    case k::rnn_activation::relu: return x > 0 ? x : 0;
    case k::rnn_activation::softsign: return x / (1 + std::fabs(x));
    case k::rnn_activation::softplus: return std::log(1 + std::exp(x));
    case k::rnn_activation::leaky_relu: return x >= 0 ? x : alpha * x;
    case k::rnn_activation::thresholded_relu: return x > alpha ? x : 0;
    case k::rnn_activation::hard_sigmoid: return std::max(0.0, std::min(1.0, alpha * x + beta));
    case k::rnn_activation::elu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
    case k::rnn_activation::affine: return alpha * x + beta;
    case k::rnn_activation::scaled_tanh: return alpha * std::tanh(beta * x);
  }
  return x;
}

// The ONNX operators' defaults: LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid 0.2 and 0.5, Elu
// 1; Affine 1 and 0 and ScaledTanh 1 and 1 (the identity and tanh).
inline double rec_default_alpha(k::rnn_activation a) {
  return a == k::rnn_activation::leaky_relu ? 0.01 : a == k::rnn_activation::hard_sigmoid ? 0.2 : 1.0;
}
inline double rec_default_beta(k::rnn_activation a) {
  return a == k::rnn_activation::hard_sigmoid ? 0.5 : a == k::rnn_activation::affine ? 0.0 : 1.0;
}

inline double rec_act(k::rnn_activation a, double x) {
  return rec_act(a, x, rec_default_alpha(a), rec_default_beta(a));
}

// One recurrent problem in ONNX's terms, its tensors in layout 0 ([seq, batch, ...]) order.
struct rec_problem {
  k::rnn_cell cell = k::rnn_cell::lstm;
  k::rnn_direction direction = k::rnn_direction::forward;
  bool batch_major = false;
  std::int64_t seq = 3, batch = 2, input = 3, hidden = 2;
  bool bias = true, peepholes = false, lens = false, init_h = false, init_c = false;
  bool input_forget = false, linear_before_reset = false;
  double clip = 0;  // 0: none
  std::array<k::rnn_activation, 6> acts{k::rnn_activation::sigmoid, k::rnn_activation::tanh, k::rnn_activation::tanh,
                                        k::rnn_activation::sigmoid, k::rnn_activation::tanh, k::rnn_activation::tanh};
  dtype type = dtype::f32;
  // activation_alpha and activation_beta: function i (in acts' order) takes element i, its
  // operator's default past the end (ONNX's reference consumes them so).
  std::vector<double> alphas, betas;

  [[nodiscard]] std::int64_t dirs() const { return direction == k::rnn_direction::bidirectional ? 2 : 1; }
  [[nodiscard]] std::int64_t gates() const { return cell == k::rnn_cell::rnn ? 1 : cell == k::rnn_cell::gru ? 3 : 4; }
  [[nodiscard]] std::size_t per_dir() const { return cell == k::rnn_cell::rnn ? 1 : cell == k::rnn_cell::gru ? 2 : 3; }
};

struct rec_result {
  vec y, y_h, y_c;  // [seq][dirs][batch][hidden], [dirs][batch][hidden]
};

// The spec's equations over the batch at once, written as onnx/reference/ops/op_*.py structure
// them. x [seq][batch][input]; w, r, b, p per direction as ONNX lays them out; h0, c0
// [dirs][batch][hidden]; lens per batch entry.
inline rec_result rec_reference(const rec_problem& pb, const vec& x, const vec& w, const vec& r, const vec& b,
                                const vec& p, const vec& h0, const vec& c0, const std::vector<std::int64_t>& lens) {
  const auto S = static_cast<std::size_t>(pb.seq), N = static_cast<std::size_t>(pb.batch);
  const auto I = static_cast<std::size_t>(pb.input), H = static_cast<std::size_t>(pb.hidden);
  const auto G = static_cast<std::size_t>(pb.gates()), D = static_cast<std::size_t>(pb.dirs());
  rec_result out;
  out.y.assign(S * D * N * H, 0.0);
  out.y_h.assign(D * N * H, 0.0);
  out.y_c.assign(D * N * H, 0.0);
  const double clip = pb.clip > 0 ? pb.clip : HUGE_VAL;
  for (std::size_t d = 0; d < D; ++d) {
    const bool flip = pb.direction == k::rnn_direction::reverse || d == 1;
    const auto f = [&](std::size_t j, double v) {
      const std::size_t i = d * pb.per_dir() + j;
      const k::rnn_activation a = pb.acts[i];
      return rec_act(a, std::max(-clip, std::min(clip, v)), i < pb.alphas.size() ? pb.alphas[i] : rec_default_alpha(a),
                     i < pb.betas.size() ? pb.betas[i] : rec_default_beta(a));
    };
    const double* W = w.data() + d * G * H * I;
    const double* R = r.data() + d * G * H * H;
    const double* Wb = b.data() + d * 2 * G * H;
    const double* Rb = Wb + G * H;
    const double* P = p.data() + d * 3 * H;
    vec Ht(h0.begin() + static_cast<std::ptrdiff_t>(d * N * H),
           h0.begin() + static_cast<std::ptrdiff_t>((d + 1) * N * H));
    vec Ct(c0.begin() + static_cast<std::ptrdiff_t>(d * N * H),
           c0.begin() + static_cast<std::ptrdiff_t>((d + 1) * N * H));
    // dot(v, M^T) row j over the n columns of row block `row0` of M.
    const auto dot = [](const double* M, std::size_t row, std::size_t n, const double* v) {
      double s = 0;
      for (std::size_t q = 0; q < n; ++q) s += M[row * n + q] * v[q];
      return s;
    };
    for (std::size_t tt = 0; tt < S; ++tt) {
      const std::size_t t = flip ? S - 1 - tt : tt;  // X flipped in time, and its mask with it
      vec Hn = Ht, Cn = Ct;
      for (std::size_t n = 0; n < N; ++n) {
        if (static_cast<std::int64_t>(t) >= lens[n]) continue;  // masked: the state stays
        const double* xt = x.data() + (t * N + n) * I;
        const double* hp = Ht.data() + n * H;
        const double* cp = Ct.data() + n * H;
        const auto gate = [&](std::size_t g, std::size_t j) {
          const std::size_t row = g * H + j;
          return dot(W, row, I, xt) + dot(R, row, H, hp) + Wb[row] + Rb[row];
        };
        for (std::size_t j = 0; j < H; ++j) {
          if (pb.cell == k::rnn_cell::rnn) {
            Hn[n * H + j] = f(0, gate(0, j));
          } else if (pb.cell == k::rnn_cell::gru) {
            const double z = f(0, gate(0, j));
            const std::size_t row = 2 * H + j;
            double hh;
            if (pb.linear_before_reset) {
              const double rr = f(0, gate(1, j));
              hh = f(1, dot(W, row, I, xt) + rr * (dot(R, row, H, hp) + Rb[row]) + Wb[row]);
            } else {
              vec rh(H);
              for (std::size_t q = 0; q < H; ++q) rh[q] = f(0, gate(1, q)) * hp[q];
              hh = f(1, dot(W, row, I, xt) + dot(R, row, H, rh.data()) + Rb[row] + Wb[row]);
            }
            Hn[n * H + j] = (1 - z) * hh + z * hp[j];
          } else {
            const double i = f(0, gate(0, j) + P[j] * cp[j]);
            const double fg = pb.input_forget ? 1 - i : f(0, gate(2, j) + P[2 * H + j] * cp[j]);
            const double c = f(1, gate(3, j));
            const double C = fg * cp[j] + i * c;
            const double o = f(0, gate(1, j) + P[H + j] * C);
            Cn[n * H + j] = C;
            Hn[n * H + j] = o * f(2, C);
          }
          out.y[((t * D + d) * N + n) * H + j] = Hn[n * H + j];
        }
      }
      Ht = Hn;
      Ct = Cn;
    }
    std::copy(Ht.begin(), Ht.end(), out.y_h.begin() + static_cast<std::ptrdiff_t>(d * N * H));
    std::copy(Ct.begin(), Ct.end(), out.y_c.begin() + static_cast<std::ptrdiff_t>(d * N * H));
  }
  return out;
}

}  // namespace rnn_ref
