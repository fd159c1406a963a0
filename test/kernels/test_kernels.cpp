// Reference kernels, cube operations and elementwise: matmul, conv2d (forward and both
// backward passes) and broadcasting elementwise, against independent double-precision loops.
//
// Exactness: inputs that are small integers make every product and partial sum an integer
// below 2^24, so float accumulation is exact in any order and results must match the oracle
// bit for bit. Real-valued FP16/BF16 cases use the error bound stated at each check.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::kernel_desc;

namespace {

// C[b,i,j] = alpha * sum_k op(A)[b,i,k] op(B)[b,k,j] + beta * C0, in double, plus the bound
// sum_k |a b| that float accumulation error scales with.
struct mm_ref {
  std::vector<double> c, mag;
};

mm_ref matmul_oracle(const tensor& a, const tensor& b, const std::vector<double>& c0, const k::matmul& op,
                     std::int64_t B, std::int64_t M, std::int64_t N, std::int64_t K) {
  const bool ab = a.desc.shape.rank() == 3, bb = b.desc.shape.rank() == 3;
  mm_ref r{std::vector<double>(static_cast<std::size_t>(B * M * N)),
           std::vector<double>(static_cast<std::size_t>(B * M * N))};
  for (std::int64_t n = 0; n < B; ++n)
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double s = 0, m = 0;
        for (std::int64_t q = 0; q < K; ++q) {
          // Stored A is [M,K] or, transposed, [K,M]; likewise B is [K,N] or [N,K].
          const std::int64_t ia = (ab ? n * M * K : 0) + (op.trans_a ? q * M + i : i * K + q);
          const std::int64_t ib = (bb ? n * K * N : 0) + (op.trans_b ? j * K + q : q * N + j);
          const double p = a.get(static_cast<std::size_t>(ia)) * b.get(static_cast<std::size_t>(ib));
          s += p;
          m += std::fabs(p);
        }
        const auto o = static_cast<std::size_t>((n * M + i) * N + j);
        r.c[o] = op.alpha * s + (op.beta != 0 ? op.beta * c0[o] : 0.0);
        r.mag[o] = m;
      }
  return r;
}

shape mat(std::int64_t batch, std::int64_t r, std::int64_t c) { return batch > 0 ? shape{batch, r, c} : shape{r, c}; }

// Direct convolution over an explicitly padded and dilated view of x, in double.
std::vector<double> conv_oracle(const tensor& x, const tensor& w, const shape& ys, const k::conv2d& p) {
  const shape& xs = x.desc.shape;
  const shape& ws = w.desc.shape;
  const std::int64_t cg = ws[1], cog = ws[0] / p.groups;
  std::vector<double> y(static_cast<std::size_t>(ys.elements()));
  auto xv = [&](std::int64_t n, std::int64_t c, std::int64_t hh, std::int64_t ww) {
    const std::int64_t h = hh - p.pad[0], wi = ww - p.pad[1];
    if (h < 0 || h >= xs[2] || wi < 0 || wi >= xs[3]) return 0.0;
    return x.get(at4(xs, n, c, h, wi));
  };
  for (std::int64_t n = 0; n < ys[0]; ++n)
    for (std::int64_t co = 0; co < ys[1]; ++co)
      for (std::int64_t oh = 0; oh < ys[2]; ++oh)
        for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
          double s = 0;
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t ky = 0; ky < ws[2]; ++ky)
              for (std::int64_t kx = 0; kx < ws[3]; ++kx)
                s += xv(n, (co / cog) * cg + ci, oh * p.stride[0] + ky * p.dilation[0],
                        ow * p.stride[1] + kx * p.dilation[1]) *
                     w.get(at4(ws, co, ci, ky, kx));
          y[at4(ys, n, co, oh, ow)] = s;
        }
  return y;
}

struct conv_case {
  std::int64_t n, c, h, w, co, kh, kw;
  std::int32_t sh, sw, ph, pw, dh, dw, groups;
};

shape conv_out(const conv_case& t) {
  const auto o = [](std::int64_t in, std::int64_t k, std::int32_t s, std::int32_t p, std::int32_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
  };
  return {t.n, t.co, o(t.h, t.kh, t.sh, t.ph, t.dh), o(t.w, t.kw, t.sw, t.pw, t.dw)};
}

const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // same-padding 3x3
    {1, 4, 9, 8, 6, 3, 2, 2, 3, 1, 0, 1, 1, 2},   // strides, asymmetric kernel, groups
    {2, 2, 8, 8, 2, 3, 3, 1, 2, 2, 1, 2, 2, 1},   // dilation
    {1, 6, 5, 5, 6, 3, 3, 2, 2, 1, 1, 1, 1, 6},   // depthwise, stride 2
    {2, 3, 4, 4, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1},   // 1x1
    {1, 2, 10, 7, 4, 7, 3, 3, 2, 3, 1, 1, 2, 2},  // large kernel and padding
};

k::conv2d conv_op(const conv_case& t) {
  k::conv2d op;
  op.stride = {t.sh, t.sw};
  op.pad = {t.ph, t.pw};
  op.dilation = {t.dh, t.dw};
  op.groups = t.groups;
  return op;
}

/// The case's convolution over x and w into y.
k::conv2d conv_op(const conv_case& t, const tensor& x, const tensor& w, const tensor& y) {
  k::conv2d op = conv_op(t);
  op.x = x.desc;
  op.w = w.desc;
  op.y = y.desc;
  return op;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---- matmul ------------------------------------------------------------------------------

TEST_CASE("matmul matches the reference loops exactly for every transpose and batch form", "[kernels][matmul]") {
  const std::int64_t M = 5, N = 7, K = 9, B = 3;
  // (batch of A, batch of B): rank 2 x rank 2, batched x batched, batched x shared weight.
  const std::pair<std::int64_t, std::int64_t> batches[] = {{0, 0}, {B, B}, {B, 0}, {0, B}};
  for (auto [ba, bb] : batches)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
          CAPTURE(ba, bb, ta, tb, alpha, beta);
          tensor a(ta ? mat(ba, K, M) : mat(ba, M, K));
          tensor b(tb ? mat(bb, N, K) : mat(bb, K, N));
          const std::int64_t bc = std::max(ba, bb);
          tensor c(mat(bc, M, N));
          a.fill(1, -8, 8, true);
          b.fill(2, -8, 8, true);
          c.fill(3, -20, 20, true);
          const auto c0 = c.values();
          k::matmul op{a.desc, b.desc, c.desc, ta, tb, alpha, beta};
          REQUIRE(run(op) == 0);
          const auto ref = matmul_oracle(a, b, c0, op, bc > 0 ? bc : 1, M, N, K);
          for (std::size_t i = 0; i < ref.c.size(); ++i) REQUIRE(c.get(i) == ref.c[i]);
        }
}

TEST_CASE("matmul with beta zero ignores NaN in C and beta non-zero reads it", "[kernels][matmul]") {
  tensor a({2, 2}), b({2, 2}), c({2, 2});
  a.assign({1, 2, 3, 4});
  b.assign({5, 6, 7, 8});
  c.assign({NAN, NAN, NAN, NAN});
  REQUIRE(run(k::matmul{a.desc, b.desc, c.desc}) == 0);
  CHECK(c.values() == std::vector<double>{19, 22, 43, 50});  // by hand
  c.assign({1, 1, 1, 1});
  REQUIRE(run(k::matmul{a.desc, b.desc, c.desc, false, false, 1.0f, 1.0f}) == 0);
  CHECK(c.values() == std::vector<double>{20, 23, 44, 51});
}

TEST_CASE("FP32 matmul equals a float loop that sums k in ascending order, bit for bit", "[kernels][matmul]") {
  const std::int64_t M = 6, N = 5, K = 300;
  tensor a({M, K}), b({K, N}), c({M, N});
  a.fill(11, -1, 1, false);
  b.fill(12, -1, 1, false);
  REQUIRE(run(k::matmul{a.desc, b.desc, c.desc}) == 0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (std::int64_t q = 0; q < K; ++q)
        s += static_cast<float>(a.get(static_cast<std::size_t>(i * K + q))) *
             static_cast<float>(b.get(static_cast<std::size_t>(q * N + j)));
      REQUIRE(c.get(static_cast<std::size_t>(i * N + j)) == static_cast<double>(s));
    }
}

TEST_CASE("FP16 and BF16 matmul stay within output rounding plus float accumulation error", "[kernels][matmul]") {
  const std::int64_t M = 8, N = 12, K = 96, B = 2;
  struct combo {
    dtype in, out;
    double unit;  // unit roundoff of the output type
  };
  for (auto cb : {combo{dtype::f16, dtype::f16, 0x1p-11}, combo{dtype::f16, dtype::f32, 0x1p-24},
                  combo{dtype::bf16, dtype::bf16, 0x1p-8}, combo{dtype::bf16, dtype::f32, 0x1p-24}}) {
    CAPTURE(npurt::to_string(cb.in), npurt::to_string(cb.out));
    tensor a({B, K, M}, cb.in), b({B, K, N}, cb.in), c({B, M, N}, cb.out);
    a.fill(21, -1, 1, false);
    b.fill(22, -1, 1, false);
    k::matmul op{a.desc, b.desc, c.desc, true, false};
    REQUIRE(run(op) == 0);
    const auto ref = matmul_oracle(a, b, {}, op, B, M, N, K);
    for (std::size_t i = 0; i < ref.c.size(); ++i) {
      // |err| <= u_out |ref| + K u_f32 sum|ab| (+ a hair for the rounding of the bound itself).
      const double bound = cb.unit * std::fabs(ref.c[i]) + static_cast<double>(K) * 0x1p-24 * ref.mag[i] + 1e-12;
      REQUIRE(std::fabs(c.get(i) - ref.c[i]) <= bound);
    }
  }
}

TEST_CASE("INT8 matmul accumulates exactly in INT32", "[kernels][matmul]") {
  const std::int64_t M = 4, N = 3, K = 1000;
  tensor a({M, K}, dtype::i8), b({N, K}, dtype::i8), c({M, N}, dtype::i32);
  a.fill(31, -128, 127, true);
  b.fill(32, -128, 127, true);
  // Row 0 x column 0 at the extremes: 1000 * (-128)^2 = 16,384,000, beyond float's 2^24.
  for (std::int64_t q = 0; q < K; ++q) {
    a.set(static_cast<std::size_t>(q), -128);
    b.set(static_cast<std::size_t>(q), -128);
  }
  a.set(1, -127);  // makes the exact sum odd: 16,384,000 - 128
  k::matmul op{a.desc, b.desc, c.desc, false, true};
  REQUIRE(run(op) == 0);
  CHECK(c.get(0) == 16384000.0 - 128.0);
  const auto ref = matmul_oracle(a, b, {}, op, 1, M, N, K);
  for (std::size_t i = 0; i < ref.c.size(); ++i) REQUIRE(c.get(i) == ref.c[i]);
}

// ---- convolution -------------------------------------------------------------------------

TEST_CASE("conv2d forward matches a padded, dilated direct convolution exactly", "[kernels][conv]") {
  for (const auto& t : conv_cases) {
    CAPTURE(t.n, t.c, t.h, t.w, t.co, t.kh, t.kw, t.sh, t.sw, t.ph, t.pw, t.dh, t.dw, t.groups);
    tensor x({t.n, t.c, t.h, t.w}), w({t.co, t.c / t.groups, t.kh, t.kw}), y(conv_out(t));
    x.fill(41, -5, 5, true);
    w.fill(42, -5, 5, true);
    const auto op = conv_op(t, x, w, y);
    REQUIRE(run(op) == 0);
    const auto ref = conv_oracle(x, w, y.desc.shape, op);
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(y.get(i) == ref[i]);
  }
}

TEST_CASE("conv2d of a hand-sized example gives the hand-computed result", "[kernels][conv]") {
  // 1x1x3x3 input 1..9, 2x2 kernel of ones, stride 1, no pad: sums of 2x2 blocks.
  tensor x({1, 1, 3, 3}), w({1, 1, 2, 2}), y({1, 1, 2, 2});
  x.assign({1, 2, 3, 4, 5, 6, 7, 8, 9});
  w.assign({1, 1, 1, 1});
  REQUIRE(run(k::conv2d{x.desc, w.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{12, 16, 24, 28});
  // Pad 1, stride 2: the corners of the padded 5x5 view: 1, 2+3, 4+7, 5+6+8+9.
  tensor y2({1, 1, 2, 2});
  k::conv2d op{x.desc, w.desc, y2.desc, {2, 2}, {1, 1}};
  REQUIRE(run(op) == 0);
  CHECK(y2.values() == std::vector<double>{1, 5, 11, 28});
}

TEST_CASE("INT8 conv2d accumulates exactly into INT32", "[kernels][conv]") {
  const conv_case t{2, 8, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2};
  tensor x({t.n, t.c, t.h, t.w}, dtype::i8), w({t.co, t.c / t.groups, t.kh, t.kw}, dtype::i8),
      y(conv_out(t), dtype::i32);
  x.fill(51, -128, 127, true);
  w.fill(52, -128, 127, true);
  const auto op = conv_op(t, x, w, y);
  REQUIRE(run(op) == 0);
  const auto ref = conv_oracle(x, w, y.desc.shape, op);
  for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(y.get(i) == ref[i]);
}

TEST_CASE("FP16 conv2d stays within output rounding plus float accumulation error", "[kernels][conv]") {
  const conv_case t{2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2};
  tensor x({t.n, t.c, t.h, t.w}, dtype::f16), w({t.co, t.c / t.groups, t.kh, t.kw}, dtype::f16),
      y(conv_out(t), dtype::f16);
  x.fill(61, -1, 1, false);
  w.fill(62, -1, 1, false);
  const auto op = conv_op(t, x, w, y);
  REQUIRE(run(op) == 0);
  const auto ref = conv_oracle(x, w, y.desc.shape, op);
  const double terms = static_cast<double>(t.c / t.groups * t.kh * t.kw);
  for (std::size_t i = 0; i < ref.size(); ++i)  // |x w| <= 1: sum|xw| <= terms
    REQUIRE(std::fabs(y.get(i) - ref[i]) <= 0x1p-11 * std::fabs(ref[i]) + terms * terms * 0x1p-24);
}

TEST_CASE("conv2d backward passes are the adjoints of the forward pass", "[kernels][conv]") {
  // <conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_weight(x, dy)>, exactly, for
  // integer data: a wrong index, stride, pad, dilation or group mapping breaks an equality.
  for (const auto& t : conv_cases) {
    CAPTURE(t.n, t.c, t.h, t.w, t.co, t.kh, t.kw, t.sh, t.sw, t.ph, t.pw, t.dh, t.dw, t.groups);
    tensor x({t.n, t.c, t.h, t.w}), w({t.co, t.c / t.groups, t.kh, t.kw}), y(conv_out(t)), dy(conv_out(t));
    tensor dx(x.desc.shape), dw(w.desc.shape);
    x.fill(71, -4, 4, true);
    w.fill(72, -4, 4, true);
    dy.fill(73, -4, 4, true);
    auto f = conv_op(t);
    f.x = x.desc;
    f.w = w.desc;
    f.y = y.desc;
    REQUIRE(run(f) == 0);
    k::conv2d_backward_data bd{dy.desc, w.desc, dx.desc, f.stride, f.pad, f.dilation, f.groups};
    k::conv2d_backward_weight bw{x.desc, dy.desc, dw.desc, f.stride, f.pad, f.dilation, f.groups};
    REQUIRE(run(bd) == 0);
    REQUIRE(run(bw) == 0);
    const double lhs = dot(y.values(), dy.values());
    CHECK(dot(x.values(), dx.values()) == lhs);
    CHECK(dot(w.values(), dw.values()) == lhs);
  }
}

TEST_CASE("conv2d_backward_data with relu_y equals relu_backward after it, bit for bit", "[kernels][conv]") {
  for (dtype type : {dtype::f32, dtype::f16, dtype::bf16})
    for (const auto& t : conv_cases) {
      CAPTURE(to_string(type), t.n, t.c, t.h, t.w, t.co, t.kh, t.kw, t.sh, t.sw, t.groups);
      tensor w({t.co, t.c / t.groups, t.kh, t.kw}, type), dy(conv_out(t), type), relu_y({t.n, t.c, t.h, t.w}, type);
      w.fill(74, -1, 1, false);
      dy.fill(75, -1, 1, false);
      relu_y.fill(76, -1, 1, false);  // about half masked
      relu_y.set(0, 0.0);             // the boundary: 0 and -0 mask too
      if (relu_y.size() > 1) relu_y.set(1, -0.0);
      const auto f = conv_op(t);
      tensor dx(relu_y.desc.shape, type), masked(relu_y.desc.shape, type), fused(relu_y.desc.shape, type);
      REQUIRE(run(k::conv2d_backward_data{dy.desc, w.desc, dx.desc, f.stride, f.pad, f.dilation, f.groups}) == 0);
      REQUIRE(run(k::elementwise{k::eltwise_fn::relu_backward, dx.desc, relu_y.desc, masked.desc}) == 0);
      REQUIRE(run(k::conv2d_backward_data{dy.desc, w.desc, fused.desc, f.stride, f.pad, f.dilation, f.groups,
                                          relu_y.desc}) == 0);
      CHECK(fused.bytes == masked.bytes);
      CHECK(fused.values() != dx.values());  // the mask did something
    }
}

TEST_CASE("conv2d gradients match central finite differences of the loss", "[kernels][conv]") {
  // L(x, w) = sum conv(x, w) * dy. With integer data and a step of 1 every value stays an
  // exact integer, so the central difference must equal the analytic gradient exactly.
  const conv_case t{2, 4, 6, 5, 4, 3, 2, 2, 1, 1, 1, 1, 2, 2};
  tensor x({t.n, t.c, t.h, t.w}), w({t.co, t.c / t.groups, t.kh, t.kw}), dy(conv_out(t));
  tensor dx(x.desc.shape), dw(w.desc.shape);
  x.fill(81, -3, 3, true);
  w.fill(82, -3, 3, true);
  dy.fill(83, -3, 3, true);
  auto base = conv_op(t);
  auto loss = [&](const tensor& xx, const tensor& ww) {
    tensor y(conv_out(t));
    auto f = base;
    f.x = xx.desc;
    f.w = ww.desc;
    f.y = y.desc;
    REQUIRE(run(f) == 0);
    return dot(y.values(), dy.values());
  };
  REQUIRE(run(k::conv2d_backward_data{dy.desc, w.desc, dx.desc, base.stride, base.pad, base.dilation, base.groups}) ==
          0);
  REQUIRE(run(k::conv2d_backward_weight{x.desc, dy.desc, dw.desc, base.stride, base.pad, base.dilation, base.groups}) ==
          0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    tensor xp = x, xm = x;
    xp.set(i, x.get(i) + 1);
    xm.set(i, x.get(i) - 1);
    REQUIRE((loss(xp, w) - loss(xm, w)) / 2 == dx.get(i));
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    tensor wp = w, wm = w;
    wp.set(i, w.get(i) + 1);
    wm.set(i, w.get(i) - 1);
    REQUIRE((loss(x, wp) - loss(x, wm)) / 2 == dw.get(i));
  }
}

// ---- elementwise -------------------------------------------------------------------------

TEST_CASE("unary elementwise functions match their definitions", "[kernels][elementwise]") {
  tensor a({4, 33});
  a.fill(91, -6, 6, false);
  a.set(0, 0.0);
  a.set(1, -0.5);
  const auto gelu = [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  struct fn_case {
    k::eltwise_fn fn;
    double (*ref)(double);
  };
  const fn_case cases[] = {
      {k::eltwise_fn::relu, [](double x) { return x > 0 ? x : 0.0; }},
      {k::eltwise_fn::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {k::eltwise_fn::tanh, [](double x) { return std::tanh(x); }},
  };
  for (const auto& c : cases) {
    CAPTURE(npurt::kernels::op_name(k::elementwise{c.fn}));
    tensor y(a.desc.shape);
    REQUIRE(run(k::elementwise{c.fn, a.desc, {}, y.desc}) == 0);
    for (std::size_t i = 0; i < a.size(); ++i)
      REQUIRE(std::fabs(y.get(i) - c.ref(a.get(i))) <= 4e-7 * (1 + std::fabs(c.ref(a.get(i)))));
  }
  tensor y(a.desc.shape);
  REQUIRE(run(k::elementwise{k::eltwise_fn::gelu, a.desc, {}, y.desc}) == 0);
  for (std::size_t i = 0; i < a.size(); ++i)
    REQUIRE(std::fabs(y.get(i) - gelu(a.get(i))) <= 1e-6 * (1 + std::fabs(a.get(i))));
  // Fixed points by hand: relu(-0.5) = 0, gelu(0) = 0, sigmoid(0) = 1/2, tanh(0) = 0.
  tensor h({2});
  h.assign({0.0, -0.5});
  for (auto [fn, v0, v1] :
       {std::tuple{k::eltwise_fn::relu, 0.0, 0.0}, std::tuple{k::eltwise_fn::sigmoid, 0.5, 1 / (1 + std::exp(0.5))}}) {
    tensor o({2});
    REQUIRE(run(k::elementwise{fn, h.desc, {}, o.desc}) == 0);
    CHECK(o.get(0) == v0);
    CHECK(std::fabs(o.get(1) - v1) < 1e-7);
  }
}

TEST_CASE("binary elementwise follows NumPy broadcasting", "[kernels][elementwise]") {
  struct bcase {
    shape a, b, y;
  };
  const bcase cases[] = {
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
      {{2, 3, 4}, {4}, {2, 3, 4}},        // trailing vector
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},     // both sides broadcast
      {{1}, {2, 3}, {2, 3}},              // scalar-like
      {{5, 1, 1, 2}, {1, 3, 1}, {5, 1, 3, 2}},
      {{3, 1}, {1, 4}, {3, 4}},
  };
  for (const auto& c : cases) {
    for (auto fn : {k::eltwise_fn::add, k::eltwise_fn::sub, k::eltwise_fn::mul, k::eltwise_fn::div}) {
      tensor a(c.a), b(c.b), y(c.y);
      a.fill(101, -9, 9, true);
      b.fill(102, 1, 9, true);  // positive: no division by zero
      REQUIRE(run(k::elementwise{fn, a.desc, b.desc, y.desc}) == 0);
      // Independent index mapping: unravel the output index, clamp broadcast dimensions.
      const std::size_t r = c.y.rank();
      for (std::int64_t o = 0; o < c.y.elements(); ++o) {
        std::int64_t rem = o, oa = 0, ob = 0, sa = 1, sb = 1;
        for (std::size_t d = r; d-- > 0;) {
          const std::int64_t i = rem % c.y[d];
          rem /= c.y[d];
          const std::size_t off = r - d;  // position from the right
          if (off <= c.a.rank()) {
            const std::int64_t da = c.a[c.a.rank() - off];
            oa += (da == 1 ? 0 : i) * sa;
            sa *= da;
          }
          if (off <= c.b.rank()) {
            const std::int64_t db = c.b[c.b.rank() - off];
            ob += (db == 1 ? 0 : i) * sb;
            sb *= db;
          }
        }
        const double va = a.get(static_cast<std::size_t>(oa)), vb = b.get(static_cast<std::size_t>(ob));
        const double want = fn == k::eltwise_fn::add   ? va + vb
                            : fn == k::eltwise_fn::sub ? va - vb
                            : fn == k::eltwise_fn::mul
                                ? va * vb
                                : static_cast<double>(static_cast<float>(va) / static_cast<float>(vb));
        REQUIRE(y.get(static_cast<std::size_t>(o)) == want);
      }
    }
  }
}

TEST_CASE("elementwise may run in place on its first operand", "[kernels][elementwise]") {
  tensor a({2, 3}), b({3});
  a.assign({1, 2, 3, 4, 5, 6});
  b.assign({10, 20, 30});
  REQUIRE(run(k::elementwise{k::eltwise_fn::add, a.desc, b.desc, a.desc}) == 0);
  CHECK(a.values() == std::vector<double>{11, 22, 33, 14, 25, 36});
}

TEST_CASE("FP16 and BF16 elementwise round each result once to the storage type", "[kernels][elementwise]") {
  for (auto [t, u] : {std::pair{dtype::f16, 0x1p-11}, std::pair{dtype::bf16, 0x1p-8}}) {
    tensor a({64}, t), b({64}, t), y({64}, t), s({64}, t);
    a.fill(111, -4, 4, false);
    b.fill(112, 0.25, 4, false);
    REQUIRE(run(k::elementwise{k::eltwise_fn::div, a.desc, b.desc, y.desc}) == 0);
    REQUIRE(run(k::elementwise{k::eltwise_fn::sigmoid, a.desc, {}, s.desc}) == 0);
    for (std::size_t i = 0; i < 64; ++i) {
      const double q = a.get(i) / b.get(i);
      REQUIRE(std::fabs(y.get(i) - q) <= u * std::fabs(q) * (1 + 1e-3));
      const double sg = 1 / (1 + std::exp(-a.get(i)));
      REQUIRE(std::fabs(s.get(i) - sg) <= u * sg * (1 + 1e-3) + 1e-7);
    }
  }
}
