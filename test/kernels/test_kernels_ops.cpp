// Reference kernels, vector operations: normalisation, pooling, softmax, reductions,
// transpose, slice, pad, gather, gather_elements, tile, nll_loss, trilu, cast, SGD — against hand-computed values,
// double-precision oracles and finite differences for the backward passes; and determinism. transpose, slice, pad,
// gather, resize, cast, SGD — against hand-computed values, double-precision oracles and finite differences for the
// backward passes; and determinism.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;

namespace {

bool close(double got, double want, double abs_tol, double rel_tol) {
  return std::fabs(got - want) <= abs_tol + rel_tol * std::fabs(want);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---- batchnorm -----------------------------------------------------------------------------

TEST_CASE("batchnorm training normalises with batch statistics and updates running ones", "[kernels][batchnorm]") {
  // x[n,c,0,w]: channel 0 holds 1,2,3,4 (mean 2.5, biased var 1.25, unbiased 5/3);
  // channel 1 holds -1,1,-3,3 (mean 0, biased var 5, unbiased 20/3).
  tensor x({2, 2, 1, 2}), y({2, 2, 1, 2});
  x.assign({1, 2, -1, 1, 3, 4, -3, 3});
  tensor gamma({2}), beta({2}), rm({2}), rv({2}), sm({2}), si({2});
  gamma.assign({2, 0.5});
  beta.assign({1, -1});
  rm.assign({0.5, 1});
  rv.assign({1, 2});
  k::batchnorm op{x.desc, gamma.desc, beta.desc, rm.desc, rv.desc, y.desc, sm.desc, si.desc, true, 0.75f, 0.1f};
  REQUIRE(run(op) == 0);
  const double mean[2] = {2.5, 0}, var[2] = {1.25, 5}, uvar[2] = {5.0 / 3, 20.0 / 3};
  const double g[2] = {2, 0.5}, b[2] = {1, -1};
  const auto xv = x.values();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const std::size_t c = (i / 2) % 2;
    REQUIRE(close(y.get(i), (xv[i] - mean[c]) / std::sqrt(var[c] + 0.75) * g[c] + b[c], 1e-6, 1e-6));
  }
  for (std::size_t c = 0; c < 2; ++c) {
    CHECK(close(sm.get(c), mean[c], 1e-7, 0));
    CHECK(close(si.get(c), 1 / std::sqrt(var[c] + 0.75), 0, 1e-6));
  }
  CHECK(close(rm.get(0), 0.9 * 0.5 + 0.1 * 2.5, 1e-7, 1e-6));
  CHECK(close(rm.get(1), 0.9 * 1, 1e-7, 1e-6));
  CHECK(close(rv.get(0), 0.9 * 1 + 0.1 * uvar[0], 0, 1e-6));
  CHECK(close(rv.get(1), 0.9 * 2 + 0.1 * uvar[1], 0, 1e-6));
}

TEST_CASE("batchnorm inference uses the running statistics and leaves them alone", "[kernels][batchnorm]") {
  tensor x({3, 2, 2, 2}), y({3, 2, 2, 2}), gamma({2}), beta({2}), rm({2}), rv({2});
  x.fill(1, -3, 3, false);
  gamma.assign({1.5, -2});
  beta.assign({0.25, 3});
  rm.assign({0.5, -1});
  rv.assign({4, 0.25});
  k::batchnorm op{x.desc, gamma.desc, beta.desc, rm.desc, rv.desc, y.desc, {}, {}, false, 1e-3f};
  REQUIRE(run(op) == 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / 4) % 2;
    REQUIRE(
        close(y.get(i), (x.get(i) - rm.get(c)) / std::sqrt(rv.get(c) + 1e-3) * gamma.get(c) + beta.get(c), 1e-6, 1e-6));
  }
  CHECK(rm.values() == std::vector<double>{0.5, -1});
  CHECK(rv.values() == std::vector<double>{4, 0.25});
}

TEST_CASE("batchnorm without gamma, beta or running statistics normalises to zero mean, unit variance",
          "[kernels][batchnorm]") {
  tensor x({4, 3}), y({4, 3});  // rank 2: [N, C]
  x.fill(2, -5, 5, false);
  REQUIRE(run(k::batchnorm{x.desc, {}, {}, {}, {}, y.desc, {}, {}, true, 0.0f}) == 0);
  for (std::int64_t c = 0; c < 3; ++c) {
    double s = 0, s2 = 0;
    for (std::int64_t n = 0; n < 4; ++n) {
      const double v = y.get(static_cast<std::size_t>(n * 3 + c));
      s += v;
      s2 += v * v;
    }
    CHECK(std::fabs(s / 4) < 1e-6);
    CHECK(std::fabs(s2 / 4 - 1) < 1e-5);
  }
}

TEST_CASE("batchnorm backward matches finite differences of the training forward pass", "[kernels][batchnorm]") {
  const shape s{3, 2, 2, 3};
  tensor x(s), dy(s), gamma({2}), beta({2});
  x.fill(3, -2, 2, false);
  dy.fill(4, -1, 1, false);
  gamma.assign({1.5, -0.75});
  beta.assign({0.5, 0.25});
  const float eps = 1e-3f;
  // L = sum bn(x; gamma, beta) * dy, evaluated with double accumulation of float outputs.
  auto loss = [&](const tensor& xx, const tensor& gg, const tensor& bb) {
    tensor y(s);
    REQUIRE(run(k::batchnorm{xx.desc, gg.desc, bb.desc, {}, {}, y.desc, {}, {}, true, eps}) == 0);
    return dot(y.values(), dy.values());
  };
  tensor y(s), sm({2}), si({2}), dx(s), dgamma({2}), dbeta({2});
  REQUIRE(run(k::batchnorm{x.desc, gamma.desc, beta.desc, {}, {}, y.desc, sm.desc, si.desc, true, eps}) == 0);
  REQUIRE(run(k::batchnorm_backward{x.desc, dy.desc, gamma.desc, sm.desc, si.desc, dx.desc, dgamma.desc, dbeta.desc}) ==
          0);
  const double h = 1e-2;
  for (std::size_t i = 0; i < x.size(); ++i) {
    tensor xp = x, xm = x;
    xp.set(i, x.get(i) + h);
    xm.set(i, x.get(i) - h);
    const double fd = (loss(xp, gamma, beta) - loss(xm, gamma, beta)) / (2 * h);
    CAPTURE(i, fd, dx.get(i));
    REQUIRE(close(dx.get(i), fd, 2e-3, 1e-2));
  }
  for (std::size_t c = 0; c < 2; ++c) {
    tensor gp = gamma, gm = gamma, bp = beta, bm = beta;
    gp.set(c, gamma.get(c) + h);
    gm.set(c, gamma.get(c) - h);
    bp.set(c, beta.get(c) + h);
    bm.set(c, beta.get(c) - h);
    CHECK(close(dgamma.get(c), (loss(x, gp, beta) - loss(x, gm, beta)) / (2 * h), 2e-3, 1e-2));
    CHECK(close(dbeta.get(c), (loss(x, gamma, bp) - loss(x, gamma, bm)) / (2 * h), 2e-3, 1e-2));
  }
  // dx absent: the same sums, and nothing else written.
  tensor dgamma_only({2}), dbeta_only({2});
  REQUIRE(run(k::batchnorm_backward{
              x.desc, dy.desc, gamma.desc, sm.desc, si.desc, {}, dgamma_only.desc, dbeta_only.desc}) == 0);
  CHECK(dgamma_only.values() == dgamma.values());
  CHECK(dbeta_only.values() == dbeta.values());
}

// ---- layernorm -----------------------------------------------------------------------------

TEST_CASE("layernorm normalises the trailing dimensions from the axis on", "[kernels][layernorm]") {
  const shape s{2, 3, 4};
  for (int axis : {-1, 1, 2, -2, 0}) {
    CAPTURE(axis);
    const std::size_t ax = axis < 0 ? static_cast<std::size_t>(axis + 3) : static_cast<std::size_t>(axis);
    std::int64_t d = 1;
    for (std::size_t i = ax; i < 3; ++i) d *= s[i];
    tensor x(s), y(s), gamma({d}), beta({d});
    x.fill(5, -3, 3, false);
    gamma.fill(6, 0.5, 2, false);
    beta.fill(7, -1, 1, false);
    REQUIRE(run(k::layernorm{x.desc, gamma.desc, beta.desc, y.desc, axis, 1e-5f}) == 0);
    const std::int64_t outer = s.elements() / d;
    for (std::int64_t o = 0; o < outer; ++o) {
      double m = 0, v = 0;
      for (std::int64_t i = 0; i < d; ++i) m += x.get(static_cast<std::size_t>(o * d + i));
      m /= static_cast<double>(d);
      for (std::int64_t i = 0; i < d; ++i) v += std::pow(x.get(static_cast<std::size_t>(o * d + i)) - m, 2);
      v /= static_cast<double>(d);
      for (std::int64_t i = 0; i < d; ++i) {
        const auto j = static_cast<std::size_t>(o * d + i);
        const double want = (x.get(j) - m) / std::sqrt(v + 1e-5) * gamma.get(static_cast<std::size_t>(i)) +
                            beta.get(static_cast<std::size_t>(i));
        REQUIRE(close(y.get(j), want, 2e-6, 2e-6));
      }
    }
  }
}

// ---- pooling -------------------------------------------------------------------------------

TEST_CASE("max and avg pooling give the hand-computed windows", "[kernels][pool]") {
  tensor x({1, 1, 4, 4});
  x.assign({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  tensor y({1, 1, 2, 2});
  REQUIRE(run(k::pool2d{k::pool_mode::max, x.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{6, 8, 14, 16});
  REQUIRE(run(k::pool2d{k::pool_mode::avg, x.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{3.5, 5.5, 11.5, 13.5});
  // Window 3, stride 2, pad 1: padding is excluded from the average's divisor.
  REQUIRE(run(k::pool2d{k::pool_mode::avg, x.desc, y.desc, {3, 3}, {2, 2}, {1, 1}}) == 0);
  CHECK(y.values() == std::vector<double>{3.5, 5, 9.5, 11});
  REQUIRE(run(k::pool2d{k::pool_mode::max, x.desc, y.desc, {3, 3}, {2, 2}, {1, 1}}) == 0);
  CHECK(y.values() == std::vector<double>{6, 8, 14, 16});
  // Negative inputs: padding must not act as a zero in the max.
  tensor neg({1, 1, 2, 2}), one({1, 1, 2, 2});
  neg.assign({-4, -3, -2, -1});
  REQUIRE(run(k::pool2d{k::pool_mode::max, neg.desc, one.desc, {3, 3}, {1, 1}, {1, 1}}) == 0);
  CHECK(one.values() == std::vector<double>{-1, -1, -1, -1});
}

TEST_CASE("global average pooling averages each channel", "[kernels][pool]") {
  tensor x({2, 3, 5, 7}), y({2, 3, 1, 1});
  x.fill(8, -10, 10, true);
  REQUIRE(run(k::pool2d{k::pool_mode::global_avg, x.desc, y.desc}) == 0);
  for (std::size_t p = 0; p < 6; ++p) {
    double s = 0;
    for (std::size_t i = 0; i < 35; ++i) s += x.get(p * 35 + i);
    REQUIRE(close(y.get(p), s / 35, 0, 1e-6));
  }
}

TEST_CASE("pooling gradients match finite differences, with overlapping windows", "[kernels][pool]") {
  const shape xs{2, 2, 5, 6};
  tensor x(xs);
  // Distinct integer values (a permutation) so that the max is unique with a margin of 1.
  std::vector<double> vals(x.size());
  std::iota(vals.begin(), vals.end(), -30.0);
  std::uint64_t rng = 42;
  for (std::size_t i = vals.size(); i > 1; --i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(vals[i - 1], vals[(rng >> 33) % i]);
  }
  x.assign(vals);
  // ceil_mode adds a last column of windows (6 wide: 3 by floor, 4 by ceiling) that starts on the
  // input's last element and reaches past the end pad, where count_include_pad's divisor is 2
  // columns, not 3.
  for (auto mode : {k::pool_mode::max, k::pool_mode::avg, k::pool_mode::global_avg})
    for (const bool ceil : {false, true})
      for (const bool include_pad : {false, true}) {
        if (mode == k::pool_mode::global_avg && (ceil || include_pad)) continue;  // one window: nothing to vary
        CAPTURE(static_cast<int>(mode), ceil, include_pad);
        const std::array<std::int32_t, 2> win{3, 3}, stride{2, 2}, pad{1, 1};
        const shape ys = mode == k::pool_mode::global_avg ? shape{2, 2, 1, 1} : shape{2, 2, 3, ceil ? 4 : 3};
        tensor dy(ys), dx(xs);
        dy.fill(9, -4, 4, true);
        auto loss = [&](const tensor& xx) {
          tensor y(ys);
          k::pool2d f{mode, xx.desc, y.desc, {win[0], win[1]}, {stride[0], stride[1]}, {pad[0], pad[1]}};
          f.ceil_mode = ceil;
          f.count_include_pad = include_pad;
          REQUIRE(run(f) == 0);
          return dot(y.values(), dy.values());
        };
        k::pool2d_backward b{mode, x.desc, dy.desc, dx.desc, win, stride, pad};
        b.ceil_mode = ceil;
        b.count_include_pad = include_pad;
        REQUIRE(run(b) == 0);
        // h is below the margin between values (the argmax never moves) and exact in float; the
        // tolerance covers float rounding of outputs up to ~90 in the loss, divided by 2h.
        const double h = 0.25;
        for (std::size_t i = 0; i < x.size(); ++i) {
          tensor xp = x, xm = x;
          xp.set(i, x.get(i) + h);
          xm.set(i, x.get(i) - h);
          CAPTURE(i, dx.get(i), (loss(xp) - loss(xm)) / (2 * h));
          REQUIRE(close(dx.get(i), (loss(xp) - loss(xm)) / (2 * h), 5e-4, 0));
        }
      }
}

TEST_CASE("max pooling's gradient goes to the first maximum of a tied window", "[kernels][pool]") {
  tensor x({1, 1, 2, 2}), dy({1, 1, 1, 1}), dx({1, 1, 2, 2});
  x.assign({7, 7, 7, 7});
  dy.assign({3});
  REQUIRE(run(k::pool2d_backward{k::pool_mode::max, x.desc, dy.desc, dx.desc}) == 0);
  CHECK(dx.values() == std::vector<double>{3, 0, 0, 0});
  // avg backward needs no x.
  REQUIRE(run(k::pool2d_backward{k::pool_mode::avg, {}, dy.desc, dx.desc}) == 0);
  CHECK(dx.values() == std::vector<double>{0.75, 0.75, 0.75, 0.75});
}

// ---- softmax -------------------------------------------------------------------------------

TEST_CASE("softmax matches exp(x - max) / sum along any axis and never overflows", "[kernels][softmax]") {
  const shape s{3, 4, 5};
  tensor x(s);
  x.fill(10, -8, 8, false);
  x.set(7, 1000.0);  // exp(1000) overflows unless the max is subtracted
  for (int axis : {0, 1, 2, -1}) {
    CAPTURE(axis);
    const std::size_t ax = axis < 0 ? 2 : static_cast<std::size_t>(axis);
    tensor y(s);
    REQUIRE(run(k::softmax{x.desc, y.desc, axis}) == 0);
    std::int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < ax; ++i) outer *= s[i];
    for (std::size_t i = ax + 1; i < 3; ++i) inner *= s[i];
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t in = 0; in < inner; ++in) {
        auto at = [&](std::int64_t q) { return static_cast<std::size_t>((o * s[ax] + q) * inner + in); };
        double m = -1e300, z = 0, total = 0;
        for (std::int64_t q = 0; q < s[ax]; ++q) m = std::max(m, x.get(at(q)));
        for (std::int64_t q = 0; q < s[ax]; ++q) z += std::exp(x.get(at(q)) - m);
        for (std::int64_t q = 0; q < s[ax]; ++q) {
          REQUIRE(close(y.get(at(q)), std::exp(x.get(at(q)) - m) / z, 1e-7, 2e-6));
          total += y.get(at(q));
        }
        REQUIRE(close(total, 1.0, 1e-6, 0));
      }
  }
}

// ---- reductions ----------------------------------------------------------------------------

TEST_CASE("reductions over any set of axes match explicit loops", "[kernels][reduce]") {
  const shape s{2, 3, 4};
  tensor x(s);
  x.fill(11, -50, 50, true);
  for (std::uint32_t mask = 1; mask < 8; ++mask)
    for (bool keep : {false, true})
      for (auto fn : {k::reduce_fn::sum, k::reduce_fn::mean, k::reduce_fn::max}) {
        CAPTURE(mask, keep, static_cast<int>(fn));
        shape ys;
        for (std::size_t i = 0; i < 3; ++i) {
          if (!((mask >> i) & 1u)) ys.push_back(s[i]);
          else if (keep) ys.push_back(1);
        }
        if (ys.rank() == 0) ys.push_back(1);
        tensor y(ys);
        REQUIRE(run(k::reduce{fn, x.desc, y.desc, mask, keep}) == 0);
        // Oracle: for each output cell, scan all of x and keep the elements that map to it.
        std::vector<double> sum(y.size(), 0), mx(y.size(), -1e300), cnt(y.size(), 0);
        for (std::int64_t a = 0; a < s[0]; ++a)
          for (std::int64_t b = 0; b < s[1]; ++b)
            for (std::int64_t c = 0; c < s[2]; ++c) {
              const std::int64_t idx[3] = {a, b, c};
              std::int64_t o = 0;
              for (std::size_t i = 0; i < 3; ++i)
                if (!((mask >> i) & 1u)) o = o * s[i] + idx[i];
              const double v = x.get(static_cast<std::size_t>((a * s[1] + b) * s[2] + c));
              sum[static_cast<std::size_t>(o)] += v;
              mx[static_cast<std::size_t>(o)] = std::max(mx[static_cast<std::size_t>(o)], v);
              cnt[static_cast<std::size_t>(o)] += 1;
            }
        for (std::size_t o = 0; o < y.size(); ++o) {
          if (fn == k::reduce_fn::sum) REQUIRE(y.get(o) == sum[o]);
          if (fn == k::reduce_fn::max) REQUIRE(y.get(o) == mx[o]);
          if (fn == k::reduce_fn::mean) REQUIRE(close(y.get(o), sum[o] / cnt[o], 0, 1e-7));
        }
      }
}

// ---- transpose -----------------------------------------------------------------------------

TEST_CASE("transpose moves every element to its permuted index, for any dtype", "[kernels][transpose]") {
  const shape xs{2, 3, 4, 5};
  const std::array<std::uint8_t, 4> perm{2, 0, 3, 1};
  const shape ys{xs[2], xs[0], xs[3], xs[1]};
  for (auto t : {dtype::f32, dtype::f16, dtype::i8, dtype::i64, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    tensor x(xs, t), y(ys, t);
    x.fill(12, -100, 100, true);
    k::transpose op{x.desc, y.desc};
    std::copy(perm.begin(), perm.end(), op.perm.begin());
    REQUIRE(run(op) == 0);
    for (std::int64_t a = 0; a < ys[0]; ++a)
      for (std::int64_t b = 0; b < ys[1]; ++b)
        for (std::int64_t c = 0; c < ys[2]; ++c)
          for (std::int64_t d = 0; d < ys[3]; ++d) {
            std::int64_t xi[4];
            const std::int64_t yi[4] = {a, b, c, d};
            for (int i = 0; i < 4; ++i) xi[perm[static_cast<std::size_t>(i)]] = yi[i];
            REQUIRE(y.get(at4(ys, a, b, c, d)) == x.get(at4(xs, xi[0], xi[1], xi[2], xi[3])));
          }
  }
  // A 2-D transpose by hand.
  tensor m({2, 3}), mt({3, 2});
  m.assign({1, 2, 3, 4, 5, 6});
  REQUIRE(run(k::transpose{m.desc, mt.desc, {1, 0}}) == 0);
  CHECK(mt.values() == std::vector<double>{1, 4, 2, 5, 3, 6});
}

// ---- slice ---------------------------------------------------------------------------------

TEST_CASE("slice copies its strided window of x, backwards too, for every dtype width", "[kernels][slice]") {
  // Random shapes and windows (a fixed seed), each checked against the index formula itself:
  // y[i] = x[starts + i * steps] in every dimension.
  int_draw next(0x5eed);
  int checked = 0;
  for (int round = 0; round < 60; ++round) {
    for (auto t : {dtype::i8, dtype::f16, dtype::bf16, dtype::f32, dtype::i32, dtype::i64, dtype::u8}) {
      CAPTURE(round, npurt::to_string(t));
      const auto rank = static_cast<std::size_t>(next(1, 5));
      shape xs, ys;
      std::array<std::int64_t, shape::max_rank> starts{}, steps{};
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t dim = next(1, 7);
        xs.push_back(dim);
        std::int64_t step = next(1, 3) * (next(0, 1) ? -1 : 1);
        const std::int64_t start = next(0, dim - 1);
        // The most elements that fit from start in the step's direction, then any count of them.
        const std::int64_t room = step > 0 ? (dim - 1 - start) / step + 1 : start / -step + 1;
        ys.push_back(next(1, room));
        starts[d] = start;
        steps[d] = step;
      }
      tensor x(xs, t), y(ys, t);
      x.fill(static_cast<std::uint64_t>(round) * 7 + 1, -100, 100, true);
      k::slice op{x.desc, y.desc, starts, steps};
      REQUIRE(run(op) == 0);
      // Naive reference: each y index in row-major order, mapped to x's flat index.
      std::vector<std::int64_t> idx(rank, 0);
      for (std::size_t i = 0; i < y.size(); ++i) {
        std::int64_t flat = 0;
        for (std::size_t d = 0; d < rank; ++d) flat = flat * xs[d] + starts[d] + idx[d] * steps[d];
        REQUIRE(std::memcmp(y.bytes.data() + i * npurt::size_of(t),
                            x.bytes.data() + static_cast<std::size_t>(flat) * npurt::size_of(t),
                            npurt::size_of(t)) == 0);
        for (std::size_t d = rank; d-- > 0;) {
          if (++idx[d] < ys[d]) break;
          idx[d] = 0;
        }
      }
      ++checked;
    }
  }
  CHECK(checked == 60 * 7);
  // By hand: rows 2 and 0 of a 3x4 matrix, columns 3 and 1 (ONNX's test_slice_neg_steps form).
  tensor m({3, 4}), w({2, 2});
  m.assign({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  REQUIRE(run(k::slice{m.desc, w.desc, {2, 3}, {-2, -2}}) == 0);
  CHECK(w.values() == std::vector<double>{11, 9, 3, 1});
  // A dimension of one element takes any step, the extremes included: it never moves.
  tensor col({3, 1});
  REQUIRE(run(k::slice{m.desc, col.desc, {0, 2}, {1, std::numeric_limits<std::int64_t>::max()}}) == 0);
  CHECK(col.values() == std::vector<double>{2, 6, 10});
  REQUIRE(run(k::slice{m.desc, col.desc, {0, 3}, {1, std::numeric_limits<std::int64_t>::min()}}) == 0);
  CHECK(col.values() == std::vector<double>{3, 7, 11});
}

TEST_CASE("slice moves bit patterns unchanged, NaN payloads included", "[kernels][slice]") {
  tensor x({4}, dtype::f32), y({2}, dtype::f32);
  const std::uint32_t bits[4] = {0x7fc00001u, 0xff800000u, 0x80000000u, 0x7fa5a5a5u};
  std::memcpy(x.bytes.data(), bits, sizeof bits);
  REQUIRE(run(k::slice{x.desc, y.desc, {3}, {-2}}) == 0);
  std::uint32_t got[2];
  std::memcpy(got, y.bytes.data(), sizeof got);
  CHECK(got[0] == bits[3]);
  CHECK(got[1] == bits[1]);
}

// ---- pad -----------------------------------------------------------------------------------

namespace {
// numpy.pad's index maps, written out case by case from its documentation (the kernel folds them
// into one function): where index i of a padded dimension of n elements reads from, -1 for the
// fill.
std::int64_t numpy_pad_index(k::pad_mode m, std::int64_t i, std::int64_t n) {
  if (i >= 0 && i < n) return i;
  if (m == k::pad_mode::constant) return -1;
  if (m == k::pad_mode::edge) return i < 0 ? 0 : n - 1;
  if (m == k::pad_mode::wrap) {
    while (i < 0) i += n;
    return i % n;
  }
  // reflect: fold the index back into [0, n) at each edge until it lands, never repeating an
  // edge element; one element reflects onto itself.
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
  return i;
}
}  // namespace

TEST_CASE("pad maps every border index as numpy.pad does, in every mode and dtype, crops too", "[kernels][pad]") {
  int_draw next(0x9ad);
  int checked = 0;
  for (int round = 0; round < 40; ++round) {
    for (auto mode : {k::pad_mode::constant, k::pad_mode::reflect, k::pad_mode::edge, k::pad_mode::wrap}) {
      for (auto t : {dtype::i8, dtype::f16, dtype::f32, dtype::i64}) {
        CAPTURE(round, static_cast<int>(mode), npurt::to_string(t));
        const auto rank = static_cast<std::size_t>(next(1, 4));
        shape xs, ys;
        std::array<std::int64_t, shape::max_rank> begins{};
        for (std::size_t d = 0; d < rank; ++d) {
          const std::int64_t dim = next(1, 5);
          // Pads wider than the dimension (reflect and wrap go round more than once) and crops.
          const std::int64_t before = next(-dim + 1, 2 * dim + 1), after = next(-dim + 1, 2 * dim + 1);
          xs.push_back(dim);
          ys.push_back(std::max<std::int64_t>(1, dim + before + after));
          begins[d] = before;
        }
        tensor x(xs, t), y(ys, t);
        x.fill(static_cast<std::uint64_t>(round) * 13 + 5, -100, 100, true);
        const double fill = -7;
        REQUIRE(run(k::pad{x.desc, y.desc, begins, fill, mode}) == 0);
        const auto xv = x.values(), yv = y.values();
        std::vector<std::int64_t> idx(rank, 0);
        for (std::size_t i = 0; i < yv.size(); ++i) {
          std::int64_t flat = 0;
          for (std::size_t d = 0; d < rank && flat >= 0; ++d) {
            const std::int64_t at = numpy_pad_index(mode, idx[d] - begins[d], xs[d]);
            flat = at < 0 ? -1 : flat * xs[d] + at;
          }
          REQUIRE(yv[i] == (flat < 0 ? fill : xv[static_cast<std::size_t>(flat)]));
          for (std::size_t d = rank; d-- > 0;) {
            if (++idx[d] < ys[d]) break;
            idx[d] = 0;
          }
        }
        ++checked;
      }
    }
  }
  CHECK(checked == 40 * 4 * 4);
  // By hand, ONNX's Pad examples (onnx.ai/onnx/operators/onnx__Pad.html): pads [0, 2, 0, 0].
  const auto as_f32 = [](std::vector<double> v) {
    for (auto& e : v) e = static_cast<float>(e);
    return v;
  };
  tensor m({3, 2}), w({3, 4});
  m.assign({1.0, 1.2, 2.3, 3.4, 4.5, 5.7});
  REQUIRE(run(k::pad{m.desc, w.desc, {0, 2}, 0, k::pad_mode::constant}) == 0);
  CHECK(w.values() == as_f32({0, 0, 1.0, 1.2, 0, 0, 2.3, 3.4, 0, 0, 4.5, 5.7}));
  REQUIRE(run(k::pad{m.desc, w.desc, {0, 2}, 0, k::pad_mode::reflect}) == 0);
  CHECK(w.values() == as_f32({1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7}));
  REQUIRE(run(k::pad{m.desc, w.desc, {0, 2}, 0, k::pad_mode::edge}) == 0);
  CHECK(w.values() == as_f32({1.0, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7}));
  // wrap, pads [2, 1, 1, 1] on a 3x2: rows 1, 2, 0, 1, 2, 0; columns 1, 0, 1, 0.
  tensor wr({6, 4});
  REQUIRE(run(k::pad{m.desc, wr.desc, {2, 1}, 0, k::pad_mode::wrap}) == 0);
  CHECK(wr.values() == as_f32({3.4, 2.3, 3.4, 2.3, 5.7, 4.5, 5.7, 4.5, 1.2, 1.0, 1.2, 1.0,
                               3.4, 2.3, 3.4, 2.3, 5.7, 4.5, 5.7, 4.5, 1.2, 1.0, 1.2, 1.0}));
}

TEST_CASE("pad copies bit patterns and writes its fill exactly, NaN and negative zero included", "[kernels][pad]") {
  tensor x({2}, dtype::f32), y({4}, dtype::f32);
  const std::uint32_t bits[2] = {0x7fc00001u, 0x80000000u};
  std::memcpy(x.bytes.data(), bits, sizeof bits);
  REQUIRE(run(k::pad{x.desc, y.desc, {1}, -0.0, k::pad_mode::constant}) == 0);
  std::uint32_t got[4];
  std::memcpy(got, y.bytes.data(), sizeof got);
  CHECK(got[0] == 0x80000000u);  // the fill -0.0, its sign kept
  CHECK(got[1] == bits[0]);
  CHECK(got[2] == bits[1]);
  CHECK(got[3] == 0x80000000u);
  // A fill of int64's extremes that a double holds exactly.
  tensor xi({1}, dtype::i64), yi({3}, dtype::i64);
  xi.assign({5});
  REQUIRE(run(k::pad{xi.desc, yi.desc, {1}, -9223372036854775808.0, k::pad_mode::constant}) == 0);
  std::int64_t iv[3];
  std::memcpy(iv, yi.bytes.data(), sizeof iv);
  CHECK(iv[0] == std::numeric_limits<std::int64_t>::min());
  CHECK(iv[1] == 5);
  CHECK(iv[2] == std::numeric_limits<std::int64_t>::min());
}

// ---- gather --------------------------------------------------------------------------------

namespace {

// ONNX's Gather, straight from its definition (onnx.ai/onnx/operators/onnx__Gather.html): each
// index of y, in row-major order, split into data's leading indices, an index into `indices`
// and data's trailing indices. Returns y's expected bytes.
std::vector<std::byte> gather_reference(const tensor& data, const tensor& indices, std::size_t axis) {
  const shape& ds = data.desc.shape;
  const shape& is = indices.desc.shape;
  const std::size_t q = is.rank(), yr = ds.rank() - 1 + q, es = npurt::size_of(data.desc.type);
  shape ys;
  for (std::size_t d = 0; d < yr; ++d) ys.push_back(d < axis ? ds[d] : d < axis + q ? is[d - axis] : ds[d - q + 1]);
  std::vector<std::byte> out(static_cast<std::size_t>(ys.elements()) * es);
  std::vector<std::int64_t> yi(yr, 0);
  for (std::size_t i = 0; i < static_cast<std::size_t>(ys.elements()); ++i) {
    std::int64_t j = 0;  // flat position in indices
    for (std::size_t d = axis; d < axis + q; ++d) j = j * ys[d] + yi[d];
    std::int64_t pick = static_cast<std::int64_t>(indices.get(static_cast<std::size_t>(j)));
    if (pick < 0) pick += ds[axis];
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < ds.rank(); ++d)
      flat = flat * ds[d] + (d < axis ? yi[d] : d == axis ? pick : yi[d + q - 1]);
    std::memcpy(out.data() + i * es, data.bytes.data() + static_cast<std::size_t>(flat) * es, es);
    for (std::size_t d = yr; d-- > 0;) {
      if (++yi[d] < ys[d]) break;
      yi[d] = 0;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("gather picks ONNX's slices along any axis, scalar, 1-D and 2-D indices, negative ones too",
          "[kernels][gather]") {
  struct layout_case {
    shape data;
    std::size_t axis;
    shape indices;
  };
  const layout_case layouts[] = {
      {{5}, 0, {}},  // a scalar index of a vector: y is a scalar
      {{5}, 0, {7}},  // more indices than rows, repeats
      {{4, 3}, 0, {2, 2}},  // 2-D indices, rows
      {{4, 3}, 1, {}},  // a scalar index on the last axis: a column
      {{4, 3}, 1, {2, 3}},  // 2-D indices on the last axis
      {{2, 3, 4}, 1, {2, 3}},  // a middle axis
      {{2, 3, 4}, 2, {5}},  // the last axis, one element per row
      {{3, 4, 5}, 0, {1}},    {{2, 1, 3, 2}, 3, {2, 1, 2}},  // y of rank 6
  };
  int checked = 0;
  for (const auto& l : layouts)
    for (auto dt : {dtype::f32, dtype::f16, dtype::i64, dtype::u8})
      for (auto it : {dtype::i32, dtype::i64}) {
        CAPTURE(npurt::to_string(dt), npurt::to_string(it), l.axis, l.data.rank(), l.indices.rank());
        tensor data(l.data, dt), indices(l.indices, it);
        data.fill(static_cast<std::uint64_t>(checked) + 3, 0, 120, true);  // u8 holds no negatives
        // Every index in [-s, s - 1]: the negative ones count from the end.
        const double s = static_cast<double>(l.data[l.axis]);
        indices.fill(static_cast<std::uint64_t>(checked) + 11, -s, s - 1, true);
        const auto want = gather_reference(data, indices, l.axis);
        shape ys;
        for (std::size_t d = 0; d < l.axis; ++d) ys.push_back(l.data[d]);
        for (auto d : l.indices) ys.push_back(d);
        for (std::size_t d = l.axis + 1; d < l.data.rank(); ++d) ys.push_back(l.data[d]);
        tensor y(ys, dt);
        REQUIRE(run(k::gather{data.desc, indices.desc, y.desc, static_cast<std::int32_t>(l.axis)}) == 0);
        REQUIRE(y.bytes.size() == want.size());
        CHECK(std::memcmp(y.bytes.data(), want.data(), want.size()) == 0);
        ++checked;
      }
  CHECK(checked == 9 * 4 * 2);
  // By hand, onnx.ai's two examples: rows [[0, 1], [1, 2]] of a 3x2 matrix, and columns [[0, 2]]
  // of a 3x3 one.
  tensor rows({3, 2}), ri({2, 2}, dtype::i64), ry({2, 2, 2});
  rows.assign({1, 2, 3, 4, 5, 6});
  ri.assign({0, 1, 1, 2});
  REQUIRE(run(k::gather{rows.desc, ri.desc, ry.desc, 0}) == 0);
  CHECK(ry.values() == std::vector<double>{1, 2, 3, 4, 3, 4, 5, 6});
  tensor cols({3, 3}), ci({1, 2}, dtype::i32), cy({3, 1, 2});
  cols.assign({10, 12, 19, 23, 34, 39, 45, 57, 59});
  ci.assign({0, -1});  // -1: the last column
  REQUIRE(run(k::gather{cols.desc, ci.desc, cy.desc, 1}) == 0);
  CHECK(cy.values() == std::vector<double>{10, 19, 23, 39, 45, 59});
}

TEST_CASE("gather stages y: it may be the memory of data or of the indices", "[kernels][gather]") {
  // Reversing a vector in place: a gather that wrote y while reading data would read its own
  // output back.
  tensor v({4}), idx({4}, dtype::i64);
  v.assign({1, 2, 3, 4});
  idx.assign({3, 2, 1, 0});
  REQUIRE(run(k::gather{v.desc, idx.desc, v.desc, 0}) == 0);
  CHECK(v.values() == std::vector<double>{4, 3, 2, 1});
  // Indices of int64 data written over themselves.
  tensor table({4}, dtype::i64), ids({4}, dtype::i64);
  table.assign({2, 0, 3, 1});
  ids.assign({0, 1, 2, 3});
  REQUIRE(run(k::gather{table.desc, ids.desc, ids.desc, 0}) == 0);
  CHECK(ids.values() == std::vector<double>{2, 0, 3, 1});
}

TEST_CASE("a gather index outside [-s, s - 1] fails the kernel and y keeps what it held", "[kernels][gather]") {
  constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  for (auto it : {dtype::i32, dtype::i64}) {
    // s = 3 along axis 1; the bad index comes last, after indices that would have been copied.
    for (std::int64_t bad : {std::int64_t{3}, std::int64_t{-4}, std::int64_t{1000}, lo, hi}) {
      if (it == dtype::i32 && (bad == lo || bad == hi)) continue;
      CAPTURE(npurt::to_string(it), bad);
      tensor data({2, 3}), idx({3}, it), y({2, 3});
      data.assign({1, 2, 3, 4, 5, 6});
      idx.assign({0, -3, 2});
      if (it == dtype::i64) std::memcpy(idx.bytes.data() + 16, &bad, sizeof bad);
      else idx.set(2, static_cast<double>(bad));
      y.assign({-7, -7, -7, -7, -7, -7});
      const auto ec = npurt::sim::run_reference(k::gather{data.desc, idx.desc, y.desc, 1});
      CHECK(ec == npurt::errc::invalid_argument);
      CHECK(ec == npurt::error_class::caller);
      CHECK(y.values() == std::vector<double>{-7, -7, -7, -7, -7, -7});
    }
    // The ends of the range are fine.
    tensor data({2, 3}), idx({2}, it), y({2, 2});
    data.assign({1, 2, 3, 4, 5, 6});
    idx.assign({-3, 2});
    REQUIRE(run(k::gather{data.desc, idx.desc, y.desc, 1}) == 0);
    // Past them, the failure says which index, its value, and the range it had to lie in.
    idx.assign({-3, -5});
    std::string why = "untouched";
    CHECK(npurt::sim::run_reference(npurt::kernel_desc{k::gather{data.desc, idx.desc, y.desc, 1}},
                                    npurt::sim::host_memory(), 0, &why) == npurt::errc::invalid_argument);
    CHECK(why == "indices[1] = -5 is outside [-3, 2] (data axis 1 has 3 entries)");
    // A run that succeeds leaves it alone.
    idx.assign({-3, 2});
    why = "untouched";
    CHECK(npurt::sim::run_reference(npurt::kernel_desc{k::gather{data.desc, idx.desc, y.desc, 1}},
                                    npurt::sim::host_memory(), 0, &why)
              .value() == 0);
    CHECK(why == "untouched");
    CHECK(y.values() == std::vector<double>{1, 3, 4, 6});
  }
}

// ---- tile ----------------------------------------------------------------------------------

TEST_CASE("tile repeats x along every dimension, Tile's multiples and Expand's broadcasts alike", "[kernels][tile]") {
  int_draw next(0x711e);
  int checked = 0;
  for (int round = 0; round < 60; ++round) {
    for (auto t : {dtype::u8, dtype::f16, dtype::f32, dtype::i64}) {
      CAPTURE(round, npurt::to_string(t));
      const auto rank = static_cast<std::size_t>(next(1, 5));
      shape xs, ys;
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t dim = next(1, 4);
        xs.push_back(dim);
        // Any extent: a multiple (Tile), the same, a broadcast of 1 (Expand), or neither.
        ys.push_back(next(1, 9));
      }
      tensor x(xs, t), y(ys, t);
      x.fill(static_cast<std::uint64_t>(round) * 3 + 1, -50, 50, true);
      REQUIRE(run(k::tile{x.desc, y.desc}) == 0);
      const auto xv = x.values(), yv = y.values();
      std::vector<std::int64_t> idx(rank, 0);
      for (std::size_t i = 0; i < yv.size(); ++i) {
        std::int64_t flat = 0;
        for (std::size_t d = 0; d < rank; ++d) flat = flat * xs[d] + idx[d] % xs[d];
        REQUIRE(yv[i] == xv[static_cast<std::size_t>(flat)]);
        for (std::size_t d = rank; d-- > 0;) {
          if (++idx[d] < ys[d]) break;
          idx[d] = 0;
        }
      }
      ++checked;
    }
  }
  CHECK(checked == 60 * 4);
  // By hand, onnx.ai's Tile example: [[0, 1], [2, 3]] with repeats [2, 2].
  tensor m({2, 2}), w({4, 4});
  m.assign({0, 1, 2, 3});
  REQUIRE(run(k::tile{m.desc, w.desc}) == 0);
  CHECK(w.values() == std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3});
  // Expand of a column [3, 1] to [3, 4].
  tensor col({3, 1}), e({3, 4});
  col.assign({1, 2, 3});
  REQUIRE(run(k::tile{col.desc, e.desc}) == 0);
  CHECK(e.values() == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
}

// ---- nll_loss --------------------------------------------------------------------------------

TEST_CASE("nll_loss is ONNX's NegativeLogLikelihoodLoss: weights, ignore_index, each reduction", "[kernels][nll]") {
  int_draw next(0x1055);
  int checked = 0;
  for (int round = 0; round < 40; ++round) {
    for (auto red : {k::loss_reduction::none, k::loss_reduction::sum, k::loss_reduction::mean}) {
      CAPTURE(round, static_cast<int>(red));
      // x [N, C, d1..dk], k in 0..2.
      const std::int64_t n = next(1, 3), c = next(2, 5);
      shape xs{n, c}, ts{n};
      for (std::int64_t d = next(0, 2); d > 0; --d) {
        const std::int64_t e = next(1, 3);
        xs.push_back(e);
        ts.push_back(e);
      }
      tensor x(xs), target(ts, next(0, 1) ? dtype::i64 : dtype::i32), weight({c});
      x.fill(static_cast<std::uint64_t>(round) + 1, -4, 0, false);
      weight.fill(static_cast<std::uint64_t>(round) + 7, 0.5, 2, false);
      const bool weighted = next(0, 1) != 0, ignoring = next(0, 1) != 0;
      const std::int64_t ignore = ignoring ? next(0, c - 1) : 0;
      for (std::size_t i = 0; i < target.size(); ++i) target.set(i, static_cast<double>(next(0, c - 1)));
      tensor y(red == k::loss_reduction::none ? ts : shape{1});
      k::nll_loss op{x.desc, target.desc, weighted ? weight.desc : tensor_desc{}, y.desc, ignore, ignoring, red};
      REQUIRE(run(op) == 0);
      // The definition, element by element: -x[n, t, j] * w[t], 0 where t is ignored.
      const std::int64_t inner = static_cast<std::int64_t>(target.size()) / n;
      const auto xv = x.values(), tv = target.values(), wv = weight.values();
      std::vector<double> loss(target.size(), 0.0);
      double sum = 0, wsum = 0;
      for (std::size_t i = 0; i < loss.size(); ++i) {
        const auto t = static_cast<std::int64_t>(tv[i]);
        if (ignoring && t == ignore) continue;
        const std::int64_t b = static_cast<std::int64_t>(i) / inner, j = static_cast<std::int64_t>(i) % inner;
        const double w = weighted ? wv[static_cast<std::size_t>(t)] : 1.0;
        loss[i] = -xv[static_cast<std::size_t>((b * c + t) * inner + j)] * w;
        sum += loss[i];
        wsum += w;
      }
      const auto got = y.values();
      if (red == k::loss_reduction::none) {
        for (std::size_t i = 0; i < loss.size(); ++i)
          REQUIRE(got[i] == static_cast<double>(static_cast<float>(loss[i])));
      } else {
        const double want = red == k::loss_reduction::sum ? sum : sum / wsum;
        if (std::isnan(want)) REQUIRE(std::isnan(got[0]));  // every element ignored: 0 / 0
        else REQUIRE(got[0] == static_cast<double>(static_cast<float>(want)));
      }
      ++checked;
    }
  }
  CHECK(checked == 40 * 3);
}

TEST_CASE("nll_loss with a target outside the classes fails and leaves y unwritten", "[kernels][nll]") {
  tensor x({2, 3}), target({2}, dtype::i64), y({2});
  x.assign({-1, -2, -3, -4, -5, -6});
  y.assign({42, 42});
  for (const double bad : {3.0, -1.0}) {
    target.assign({0, bad});
    CHECK(run(k::nll_loss{x.desc, target.desc, {}, y.desc, 0, false, k::loss_reduction::none}) ==
          static_cast<int>(npurt::errc::invalid_argument));
    CHECK(y.values() == std::vector<double>{42, 42});
  }
  std::string why;
  target.assign({1, 3});
  CHECK(npurt::sim::run_reference(
            npurt::kernel_desc{k::nll_loss{x.desc, target.desc, {}, y.desc, 0, false, k::loss_reduction::none}},
            npurt::sim::host_memory(), 0, &why) == npurt::errc::invalid_argument);
  CHECK(why == "target[1] = 3 is not a class in [0, 3)");
  CHECK(npurt::sim::run_reference(
            npurt::kernel_desc{k::nll_loss{x.desc, target.desc, {}, y.desc, -100, true, k::loss_reduction::none}},
            npurt::sim::host_memory(), 0, &why) == npurt::errc::invalid_argument);
  CHECK(why == "target[1] = 3 is not a class in [0, 3) nor the ignore_index -100");
  // -1 is a class no more when it is the ignore_index: that element's loss is 0.
  target.assign({2, -1});
  REQUIRE(run(k::nll_loss{x.desc, target.desc, {}, y.desc, -1, true, k::loss_reduction::none}) == 0);
  CHECK(y.values() == std::vector<double>{3, 0});
}

// ---- trilu ---------------------------------------------------------------------------------

TEST_CASE("trilu keeps each matrix's triangle and zeroes the rest, any k, any dtype", "[kernels][trilu]") {
  int_draw next(0x7e1);
  for (int round = 0; round < 50; ++round)
    for (auto t : {dtype::i64, dtype::f16, dtype::u8}) {
      const bool upper = next(0, 1) != 0;
      const std::int64_t k = next(-6, 6);
      shape s;
      for (std::int64_t d = next(0, 2); d > 0; --d) s.push_back(next(1, 3));
      const std::int64_t rows = next(1, 5), cols = next(1, 5);
      s.push_back(rows);
      s.push_back(cols);
      CAPTURE(round, npurt::to_string(t), upper, k);
      tensor x(s, t), y(s, t);
      x.fill(static_cast<std::uint64_t>(round) + 3, 1, 100, true);
      REQUIRE(run(k::trilu{x.desc, y.desc, k, upper}) == 0);
      const auto xv = x.values(), yv = y.values();
      for (std::size_t i = 0; i < yv.size(); ++i) {
        const auto j = static_cast<std::int64_t>(i % static_cast<std::size_t>(cols));
        const auto r = static_cast<std::int64_t>(i / static_cast<std::size_t>(cols) % static_cast<std::size_t>(rows));
        const bool keep = upper ? j - r >= k : j - r <= k;
        REQUIRE(yv[i] == (keep ? xv[i] : 0.0));
      }
    }
  // By hand, onnx.ai's triu example with k = 1 on a 4x5 matrix.
  tensor m({4, 5}), u({4, 5});
  m.assign({4, 7, 3, 7, 9, 1, 2, 8, 6, 9, 9, 4, 0, 8, 7, 4, 3, 4, 2, 4});
  REQUIRE(run(k::trilu{m.desc, u.desc, 1, true}) == 0);
  CHECK(u.values() == std::vector<double>{0, 7, 3, 7, 9, 0, 0, 8, 6, 9, 0, 0, 0, 8, 7, 0, 0, 0, 0, 4});
}

// ---- resize --------------------------------------------------------------------------------

namespace {
// ONNX's Resize as its reference implementation (onnx/reference/ops/op_resize.py) computes it,
// transcribed step by step: per dimension, the source coordinate of the coordinate mode, the
// n neighbours nearest it in x padded with its edge elements (ties to the smaller index), their
// coefficients, and the dimensions interpolated from the last to the first. Slow and literal.
struct onnx_resize {
  k::resize_mode mode = k::resize_mode::nearest;
  k::resize_coordinates coordinates = k::resize_coordinates::half_pixel;
  k::nearest_rounding nearest = k::nearest_rounding::round_prefer_floor;
  double a = -0.75;
  bool exclude_outside = false;

  std::vector<double> coeffs(double ratio) const {
    if (mode == k::resize_mode::nearest) {
      if (ratio == std::floor(ratio)) return {0, 1};
      switch (nearest) {
        case k::nearest_rounding::round_prefer_floor: return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
        case k::nearest_rounding::round_prefer_ceil: return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
        case k::nearest_rounding::floor: return {1, 0};
        case k::nearest_rounding::ceil: return {0, 1};
      }
    }
    if (mode == k::resize_mode::linear) return {1 - ratio, ratio};
    // Keys' kernel W(t) at t = 1 + ratio, ratio, 1 - ratio, 2 - ratio.
    const auto w = [&](double t) {
      t = std::fabs(t);
      if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
      if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
      return 0.0;
    };
    return {w(1 + ratio), w(ratio), w(1 - ratio), w(2 - ratio)};
  }

  double source(double x, std::int64_t in, std::int64_t out_int, double scale) const {
    const double out = scale * static_cast<double>(in);
    switch (coordinates) {
      case k::resize_coordinates::half_pixel: return (x + 0.5) / scale - 0.5;
      case k::resize_coordinates::pytorch_half_pixel: return out == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
      case k::resize_coordinates::align_corners: return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out - 1);
      case k::resize_coordinates::asymmetric: return x / scale;
      case k::resize_coordinates::tf_half_pixel_for_nn: return (x + 0.5) / scale;
      case k::resize_coordinates::half_pixel_symmetric: {
        const double adjustment = static_cast<double>(out_int) / out;
        const double center = static_cast<double>(in) / 2;
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
      }
      case k::resize_coordinates::tf_crop_and_resize: break;  // needs a roi: its own reference in the graph tests
    }
    return 0;
  }

  double one_d(const std::vector<double>& data, double scale, std::int64_t out_int, std::int64_t x) const {
    const auto in = static_cast<std::int64_t>(data.size());
    const double x_ori = source(static_cast<double>(x), in, out_int, scale);
    const double ratio = x_ori == std::floor(x_ori) ? 1.0 : x_ori - std::floor(x_ori);
    std::vector<double> c = coeffs(ratio);
    const auto n = static_cast<std::int64_t>(c.size());
    const std::int64_t pad = (n + 1) / 2;
    std::vector<double> padded;
    for (std::int64_t i = -pad; i < in + pad; ++i)
      padded.push_back(data[static_cast<std::size_t>(std::clamp(i, std::int64_t{0}, in - 1))]);
    std::vector<std::int64_t> order(padded.size());
    std::iota(order.begin(), order.end(), 0);
    const double at = x_ori + static_cast<double>(pad);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t p, std::int64_t q) {
      return std::fabs(at - static_cast<double>(p)) < std::fabs(at - static_cast<double>(q));
    });
    order.resize(static_cast<std::size_t>(n));
    std::sort(order.begin(), order.end());
    if (exclude_outside) {
      double sum = 0;
      for (std::size_t i = 0; i < c.size(); ++i) {
        const std::int64_t idx = order[i] - pad;
        if (idx < 0 || idx >= in) c[i] = 0;
        sum += c[i];
      }
      for (auto& v : c) v /= sum;
    }
    double r = 0;
    for (std::size_t i = 0; i < c.size(); ++i) r += c[i] * padded[static_cast<std::size_t>(order[i])];
    return r;
  }

  // y at output index `at` of the dimensions from d on, x a block of those dimensions.
  double nd(const std::vector<double>& x, const shape& xs, const shape& ys, const std::vector<double>& scales,
            const std::vector<std::int64_t>& at, std::size_t d) const {
    std::int64_t inner = 1;
    for (std::size_t e = d + 1; e < xs.rank(); ++e) inner *= xs[e];
    std::vector<double> line;
    for (std::int64_t i = 0; i < xs[d]; ++i) {
      if (d + 1 == xs.rank()) {
        line.push_back(x[static_cast<std::size_t>(i)]);
      } else {
        const auto b = x.begin() + static_cast<std::ptrdiff_t>(i * inner);
        line.push_back(nd(std::vector<double>(b, b + inner), xs, ys, scales, at, d + 1));
      }
    }
    return one_d(line, scales[d], ys[d], at[d]);
  }

  std::vector<double> operator()(const std::vector<double>& x, const shape& xs, const shape& ys,
                                 const std::vector<double>& scales) const {
    std::vector<double> y;
    std::vector<std::int64_t> at(ys.rank(), 0);
    for (std::int64_t e = 0; e < ys.elements(); ++e) {
      y.push_back(nd(x, xs, ys, scales, at, 0));
      for (std::size_t d = ys.rank(); d-- > 0;) {
        if (++at[d] < ys[d]) break;
        at[d] = 0;
      }
    }
    return y;
  }
};

k::resize resize_of(const onnx_resize& o, const tensor& x, const tensor& y, const std::vector<double>& scales) {
  k::resize r{x.desc, y.desc};
  for (std::size_t d = 0; d < scales.size(); ++d) r.scales[d] = scales[d];
  r.mode = o.mode;
  r.coordinates = o.coordinates;
  r.nearest = o.nearest;
  r.cubic_coeff_a = static_cast<float>(o.a);
  r.exclude_outside = o.exclude_outside;
  return r;
}

constexpr k::resize_coordinates all_coordinates[] = {
    k::resize_coordinates::half_pixel,           k::resize_coordinates::pytorch_half_pixel,
    k::resize_coordinates::align_corners,        k::resize_coordinates::asymmetric,
    k::resize_coordinates::tf_half_pixel_for_nn, k::resize_coordinates::half_pixel_symmetric};
}  // namespace

TEST_CASE("resize matches ONNX's reference in every mode, coordinate mode and rounding", "[kernels][resize]") {
  // Upsampling by 2 and 3, non-integer and downsampling scales, with y's extent floor(n * s) as
  // ONNX's Resize computes it, over 1-D, 3-D and 4-D (NCHW, N and C kept) tensors.
  const std::vector<std::pair<shape, std::vector<double>>> cases = {
      {{5}, {2.0}},
      {{7}, {0.6}},
      {{4}, {1.7}},
      {{2, 3, 4}, {1.0, 3.0, 0.5}},
      {{3, 4, 2}, {0.75, 1.5, 2.5}},
      {{1, 2, 3, 4}, {1.0, 1.0, 2.0, 2.0}},
      {{2, 1, 5, 4}, {1.0, 1.0, 0.6, 1.25}},
      {{1, 1, 4, 6}, {1.0, 1.0, 0.5, 0.3333333432674408}},  // 1/3 as a float scale
      {{1, 1, 2, 2}, {1.0, 1.0, 0.5, 0.5}},  // one output element: the one-pixel special cases
  };
  std::vector<onnx_resize> ops;
  for (auto c : all_coordinates) {
    for (auto nr : {k::nearest_rounding::round_prefer_floor, k::nearest_rounding::round_prefer_ceil,
                    k::nearest_rounding::floor, k::nearest_rounding::ceil})
      ops.push_back({k::resize_mode::nearest, c, nr});
    ops.push_back({k::resize_mode::linear, c});
    ops.push_back({k::resize_mode::cubic, c});
    ops.push_back({k::resize_mode::cubic, c, k::nearest_rounding::round_prefer_floor, -0.5, true});
  }
  int checked = 0;
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const auto& [xs, scales] = cases[n];
    shape ys;
    for (std::size_t d = 0; d < xs.rank(); ++d)
      ys.push_back(static_cast<std::int64_t>(std::floor(static_cast<double>(xs[d]) * scales[d])));
    tensor x(xs), y(ys);
    x.fill(static_cast<std::uint64_t>(checked) + 3, -8, 8, false);
    for (const auto& o : ops) {
      CAPTURE(n, static_cast<int>(o.mode), static_cast<int>(o.coordinates), static_cast<int>(o.nearest),
              o.exclude_outside);
      REQUIRE(run(resize_of(o, x, y, scales)) == 0);
      const auto want = o(x.values(), xs, ys, scales);
      const auto got = y.values();
      for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i, got[i], want[i]);
        REQUIRE(close(got[i], want[i], 1e-5, 1e-6));
      }
      ++checked;
    }
  }
  CHECK(checked == 9 * 6 * 7);
}

TEST_CASE("resize reproduces onnx.ai's Resize examples", "[kernels][resize]") {
  // onnx.ai/onnx/operators/onnx__Resize.html, the backend tests' inputs and expected outputs.
  tensor x({1, 1, 2, 2});
  x.assign({1, 2, 3, 4});
  tensor up({1, 1, 4, 4});
  k::resize lin{x.desc, up.desc, {1, 1, 2, 2, 1, 1, 1, 1}, -0.75f, k::resize_mode::linear};
  REQUIRE(run(lin) == 0);
  CHECK(up.values() ==
        std::vector<double>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  tensor near({1, 1, 4, 6});
  REQUIRE(run(k::resize{x.desc, near.desc, {1, 1, 2, 3, 1, 1, 1, 1}}) == 0);
  CHECK(near.values() == std::vector<double>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  // Downsampling with align_corners, scales 0.6 on 2 x 4: x = i * 3 / (2.4 - 1).
  tensor d({1, 1, 2, 4}), dy({1, 1, 1, 2});
  d.assign({1, 2, 3, 4, 5, 6, 7, 8});
  k::resize ac{d.desc,
               dy.desc,
               {1, 1, 0.6000000238418579, 0.6000000238418579, 1, 1, 1, 1},
               -0.75f,
               k::resize_mode::linear,
               k::resize_coordinates::align_corners};
  REQUIRE(run(ac) == 0);
  CHECK(dy.get(0) == 1);
  CHECK(close(dy.get(1), 1 + 3 / (4 * 0.6000000238418579 - 1), 0, 1e-7));
}

TEST_CASE("resize rounds to f16 and bf16 once, from the double sum", "[kernels][resize]") {
  // x = [1, 1 + u] (u one unit in the last place at 1), linear, asymmetric, scale just below 2:
  // y[1] lies a hair past the midpoint between 1 and 1 + u. Rounded once it is 1 + u; rounded
  // to float first it lands on the midpoint exactly, which ties to even: 1.
  for (auto [t, u] : {std::pair{dtype::f16, 0x1p-10}, std::pair{dtype::bf16, 0x1p-7}}) {
    CAPTURE(npurt::to_string(t));
    tensor x({2}, t), y({3}, t);
    x.assign({1, 1 + u});
    const double s = 2 - 0x1p-23;
    REQUIRE(run(k::resize{x.desc,
                          y.desc,
                          {s, 1, 1, 1, 1, 1, 1, 1},
                          -0.75f,
                          k::resize_mode::linear,
                          k::resize_coordinates::asymmetric}) == 0);
    const double exact = 1 + u / s;  // (1 - r) * 1 + r * (1 + u), r = 1 / s
    REQUIRE(static_cast<double>(static_cast<float>(exact)) == 1 + u / 2);  // the trap is set
    CHECK(y.get(0) == 1);
    CHECK(y.get(1) == 1 + u);
    CHECK(y.get(2) == 1 + u);
  }
  // And on random data every f16 result is a nearest f16 of the exact double.
  tensor x({3, 5}, dtype::f16), y({7, 8}, dtype::f16);
  x.fill(11, -4, 4, false);
  const std::vector<double> scales{7.0 / 3, 1.6};
  onnx_resize o{k::resize_mode::cubic};
  REQUIRE(run(resize_of(o, x, y, scales)) == 0);
  const auto want = o(x.values(), x.desc.shape, y.desc.shape, scales);
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, y.bytes.data() + 2 * i, 2);
    const double got = npurt::half::from_bits(bits).to_float();
    const double below = npurt::half::from_bits(static_cast<std::uint16_t>(bits - 1)).to_float();
    const double above = npurt::half::from_bits(static_cast<std::uint16_t>(bits + 1)).to_float();
    CAPTURE(i, got, want[i]);
    CHECK(std::fabs(got - want[i]) <= std::fabs(below - want[i]));
    CHECK(std::fabs(got - want[i]) <= std::fabs(above - want[i]));
  }
}

// ---- gather_elements -----------------------------------------------------------------------

TEST_CASE("gather_elements is NumPy's take_along_axis, negative indices too", "[kernels][gather_elements]") {
  int_draw next(0x9e1);
  for (int round = 0; round < 60; ++round)
    for (auto t : {dtype::f32, dtype::i64, dtype::u8}) {
      const auto rank = static_cast<std::size_t>(next(1, 4));
      const auto axis = static_cast<std::size_t>(next(0, static_cast<std::int64_t>(rank) - 1));
      shape ds, is;
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t e = next(1, 4);
        ds.push_back(e);
        is.push_back(d == axis ? next(1, 5) : next(1, e));  // off the axis, no larger than data's
      }
      CAPTURE(round, npurt::to_string(t), axis);
      tensor data(ds, t), idx(is, next(0, 1) ? dtype::i64 : dtype::i32), y(is, t);
      data.fill(static_cast<std::uint64_t>(round) + 9, 0, 100, true);
      for (std::size_t i = 0; i < idx.size(); ++i) idx.set(i, static_cast<double>(next(-ds[axis], ds[axis] - 1)));
      REQUIRE(run(k::gather_elements{data.desc, idx.desc, y.desc, static_cast<std::int32_t>(axis)}) == 0);
      const auto dv = data.values(), iv = idx.values(), yv = y.values();
      std::vector<std::int64_t> at(rank, 0);
      for (std::size_t i = 0; i < yv.size(); ++i) {
        std::int64_t flat = 0;
        for (std::size_t d = 0; d < rank; ++d) {
          std::int64_t c = at[d];
          if (d == axis)
            c = static_cast<std::int64_t>(iv[i]) < 0 ? static_cast<std::int64_t>(iv[i]) + ds[d]
                                                     : static_cast<std::int64_t>(iv[i]);
          flat = flat * ds[d] + c;
        }
        REQUIRE(yv[i] == dv[static_cast<std::size_t>(flat)]);
        for (std::size_t d = rank; d-- > 0;) {
          if (++at[d] < is[d]) break;
          at[d] = 0;
        }
      }
    }
  // By hand, onnx.ai's example: axis 1 of [[1, 2], [3, 4]] with [[0, 0], [1, 0]].
  tensor m({2, 2}), i2({2, 2}, dtype::i64), o({2, 2});
  m.assign({1, 2, 3, 4});
  i2.assign({0, 0, 1, 0});
  REQUIRE(run(k::gather_elements{m.desc, i2.desc, o.desc, 1}) == 0);
  CHECK(o.values() == std::vector<double>{1, 1, 4, 3});
  // An index past the axis fails, y untouched.
  o.assign({9, 9, 9, 9});
  i2.assign({0, 2, 1, 0});
  CHECK(run(k::gather_elements{m.desc, i2.desc, o.desc, 1}) == static_cast<int>(npurt::errc::invalid_argument));
  CHECK(o.values() == std::vector<double>{9, 9, 9, 9});
}

// ---- cast ----------------------------------------------------------------------------------

TEST_CASE("saturate_int, the cast kernel's and the folded Cast's one integer conversion, clamps into the target",
          "[kernels][cast]") {
  using k::saturate_int;
  // Narrowing clamps at both ends; values in range pass unchanged.
  static_assert(saturate_int(dtype::i64, 300, dtype::i8) == 127);
  static_assert(saturate_int(dtype::i64, -300, dtype::i8) == -128);
  static_assert(saturate_int(dtype::i32, -5, dtype::i16) == -5);
  static_assert(saturate_int(dtype::i64, 70000, dtype::u16) == 65535);
  static_assert(saturate_int(dtype::i64, std::int64_t{1} << 40, dtype::i32) == 2147483647);
  static_assert(saturate_int(dtype::i64, std::int64_t{1} << 40, dtype::u32) == 4294967295);
  // Signed to unsigned never flips a sign: negatives become 0, u64 included.
  static_assert(saturate_int(dtype::i8, -1, dtype::u8) == 0);
  static_assert(saturate_int(dtype::i64, INT64_MIN, dtype::u64) == 0);
  static_assert(saturate_int(dtype::i32, 7, dtype::u64) == 7);
  // A u64 from 2^63 up reads negative as int64 bits, but it is a large positive value: it
  // saturates to the top of a signed target and keeps its bits in a u64 one.
  static_assert(saturate_int(dtype::u64, -1, dtype::i64) == INT64_MAX);
  static_assert(saturate_int(dtype::u64, -1, dtype::u8) == 255);
  static_assert(saturate_int(dtype::u64, INT64_MIN, dtype::i8) == 127);
  static_assert(saturate_int(dtype::u64, -2, dtype::u64) == -2);
  CHECK(saturate_int(dtype::u32, 4294967295, dtype::i16) == 32767);
}

TEST_CASE("cast rounds to nearest even and saturates", "[kernels][cast]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct cast_case {
    dtype from, to;
    std::vector<double> in, out;
  };
  const cast_case cases[] = {
      {dtype::f32,
       dtype::i8,
       {2.5, 3.5, -2.5, -0.5, 1.25, 300, -300, nan, 126.5, 127.5},
       {2, 4, -2, 0, 1, 127, -128, 0, 126, 127}},
      {dtype::f32, dtype::u8, {-5, 255.5, 254.5, 0.5, 1.5}, {0, 255, 254, 0, 2}},
      {dtype::f32, dtype::i32, {3e9, -3e9, 16777216.0, -7.5}, {2147483647, -2147483648.0, 16777216, -8}},
      {dtype::f32,
       dtype::i64,
       {0x1p70, -0x1p63, -inf, nan},
       {9223372036854775807.0, -9223372036854775808.0, -9223372036854775808.0, 0}},
      {dtype::f32,
       dtype::f16,
       {1.0 + 0x1p-11, 1.0 + 3 * 0x1p-11, 65520, 0x1p-27, -0.0},
       {1.0, 1.0 + 0x1p-9, inf, 0, 0}},
      {dtype::f32, dtype::bf16, {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 3.0}, {1.0, 1.0 + 0x1p-6, 3.0}},
      {dtype::f16, dtype::f32, {0x1p-24, 65504, -inf}, {0x1p-24, 65504, -inf}},
      {dtype::bf16, dtype::f16, {0x1p-30, 0x1p17, 1.5}, {0, inf, 1.5}},
      {dtype::i32, dtype::f16, {65519, 65520, -65520, 2049, 2051}, {65504, inf, -inf, 2048, 2052}},
      {dtype::i32, dtype::i8, {200, -200, 5}, {127, -128, 5}},
      {dtype::i8, dtype::u8, {-1, 100}, {0, 100}},
      {dtype::i32, dtype::f32, {16777217, 16777219}, {16777216, 16777220}},
      // 2^24 + 2^16 + 1 lies just above the midpoint of two bfloat16s; rounding through float
      // first would land on the midpoint and tie down: a single rounding must go up.
      {dtype::i32,
       dtype::bf16,
       {16777216 + 65536 + 1, 16777216 + 65536, -(16777216 + 65536 + 1)},
       {16777216 + 131072, 16777216, -(16777216 + 131072)}},
      {dtype::i64, dtype::i32, {1e12, -1e12}, {2147483647, -2147483648.0}},
      // Rounding up carries into the next power of two: 2^25 - 1 -> 2^25.
      {dtype::i32, dtype::bf16, {33554431, -33554431, 255, 257, 511}, {33554432, -33554432, 255, 256, 512}},
  };
  for (const auto& c : cases) {
    CAPTURE(npurt::to_string(c.from), npurt::to_string(c.to));
    const auto n = static_cast<std::int64_t>(c.in.size());
    tensor x({n}, c.from), y({n}, c.to);
    x.assign(c.in);
    for (std::size_t i = 0; i < c.in.size(); ++i) {  // the test inputs themselves must be exact
      CAPTURE(i);
      REQUIRE((std::isnan(c.in[i]) ? std::isnan(x.get(i)) : x.get(i) == c.in[i]));
    }
    REQUIRE(run(k::cast{x.desc, y.desc}) == 0);
    for (std::size_t i = 0; i < c.out.size(); ++i) {
      CAPTURE(i, c.in[i]);
      CHECK(y.get(i) == c.out[i]);
    }
  }
}

TEST_CASE("cast from float to integer rounds as its mode says (Ascend C's RoundMode)", "[kernels][cast]") {
  // Halves of both parities and both signs, a value on each side of zero, NaN and values past
  // the int32 range: the modes differ on each.
  const std::vector<double> in{3.7, -1.5, 2.5, -0.6, 0.4, std::nan(""), 3e9, -3e9};
  struct mode_case {
    k::round_mode mode;
    std::vector<double> out;
  };
  const double hi = 2147483647, lo = -2147483648.0;
  const mode_case cases[] = {
      {k::round_mode::rint, {4, -2, 2, -1, 0, 0, hi, lo}},  // halves to even
      {k::round_mode::floor, {3, -2, 2, -1, 0, 0, hi, lo}},  // toward -inf
      {k::round_mode::ceil, {4, -1, 3, 0, 1, 0, hi, lo}},  // toward +inf
      {k::round_mode::round, {4, -2, 3, -1, 0, 0, hi, lo}},  // halves away from zero
      {k::round_mode::trunc, {3, -1, 2, 0, 0, 0, hi, lo}},  // toward zero (ONNX, C++, NumPy)
  };
  const auto n = static_cast<std::int64_t>(in.size());
  tensor x({n}), y({n}, dtype::i32);
  x.assign(in);
  for (const auto& c : cases) {
    CAPTURE(static_cast<int>(c.mode));
    REQUIRE(run(k::cast{x.desc, y.desc, c.mode}) == 0);
    for (std::size_t i = 0; i < in.size(); ++i) {
      CAPTURE(i, in[i]);
      CHECK(y.get(i) == c.out[i]);
    }
  }
}

TEST_CASE("cast from f32 to f16 and back matches npurt::half on every pattern tried", "[kernels][cast]") {
  tensor x({4096}), h({4096}, dtype::f16), back({4096});
  x.fill(13, -70000, 70000, false);
  REQUIRE(run(k::cast{x.desc, h.desc}) == 0);
  REQUIRE(run(k::cast{h.desc, back.desc}) == 0);
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(back.get(i) == static_cast<double>(npurt::round_to_half(static_cast<float>(x.get(i)))));
}

// ---- sgd -----------------------------------------------------------------------------------

TEST_CASE("sgd_update applies weight decay and momentum", "[kernels][sgd]") {
  tensor p({2}), g({2}), buf({2});
  p.assign({1, 2});
  g.assign({0.5, -1});
  buf.assign({1, 0});
  // d = g + 0.01 p = (0.51, -0.98); buf = 0.9 buf + d = (1.41, -0.98); p -= 0.1 buf.
  REQUIRE(run(k::sgd_update{p.desc, g.desc, buf.desc, 0.1f, 0.9f, 0.01f}) == 0);
  CHECK(close(buf.get(0), 1.41, 1e-6, 0));
  CHECK(close(buf.get(1), -0.98, 1e-6, 0));
  CHECK(close(p.get(0), 0.859, 1e-6, 0));
  CHECK(close(p.get(1), 2.098, 1e-6, 0));
  // Plain SGD on an FP16 parameter with an FP32 gradient.
  tensor ph({3}, dtype::f16), gf({3});
  ph.assign({1, -2, 0.5});
  gf.assign({1, 1, -4});
  REQUIRE(run(k::sgd_update{ph.desc, gf.desc, {}, 0.125f}) == 0);
  CHECK(ph.values() == std::vector<double>{0.875, -2.125, 1.0});
}

// ---- determinism ---------------------------------------------------------------------------

namespace {

// conv -> batchnorm -> relu -> max pool -> matmul -> softmax, returning every output's bytes.
std::vector<std::byte> pipeline(dtype t) {
  tensor x({2, 3, 8, 8}, t), w({4, 3, 3, 3}, t), y({2, 4, 8, 8}, t), bn({2, 4, 8, 8}, t), pool({2, 4, 4, 4}, t);
  tensor logits({2, 4, 5}, t), prob({2, 4, 5}, t), sm({4}), si({4});
  x.fill(21, -1, 1, false);
  w.fill(22, -1, 1, false);
  REQUIRE(run(k::conv2d{x.desc, w.desc, y.desc, {1, 1}, {1, 1}}) == 0);
  REQUIRE(run(k::batchnorm{y.desc, {}, {}, {}, {}, bn.desc, sm.desc, si.desc}) == 0);
  REQUIRE(run(k::elementwise{k::eltwise_fn::relu, bn.desc, {}, bn.desc}) == 0);
  REQUIRE(run(k::pool2d{k::pool_mode::max, bn.desc, pool.desc}) == 0);
  tensor flat = pool;
  flat.desc.shape = shape{2, 4, 16};
  tensor fc2({16, 5}, t);
  fc2.fill(24, -1, 1, false);
  REQUIRE(run(k::matmul{flat.desc, fc2.desc, logits.desc}) == 0);
  REQUIRE(run(k::softmax{logits.desc, prob.desc}) == 0);
  std::vector<std::byte> all;
  for (const tensor* r : {&y, &bn, &pool, &logits, &prob, &sm, &si})
    all.insert(all.end(), r->bytes.begin(), r->bytes.end());
  return all;
}

}  // namespace

TEST_CASE("the same kernels on the same data give the same bits every time", "[kernels][determinism]") {
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    const auto first = pipeline(t);
    const auto second = pipeline(t);
    REQUIRE(first.size() == second.size());
    CHECK(first == second);
  }
}
