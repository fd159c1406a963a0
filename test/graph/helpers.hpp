// Helpers for the graph tests: deterministic data and plain reference operators.
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/graph/session.hpp>
#include <npurt/sim/sim.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace npurt::test {

/// Checks grad against central differences of loss() in each element of p (perturbed in place
/// and restored): |grad - fd| <= tol * (1 + |fd|).
template <class Loss>
void check_differences(const char* name, std::vector<double>& p, const std::vector<double>& grad, double h, double tol,
                       Loss loss) {
  INFO(name);
  REQUIRE(grad.size() == p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const double up = loss();
    p[i] = keep - h;
    const double down = loss();
    p[i] = keep;
    const double fd = (up - down) / (2 * h);
    INFO(name << "[" << i << "]: " << grad[i] << " against " << fd);
    CHECK(std::abs(grad[i] - fd) <= tol * (1 + std::abs(fd)));
  }
}

/// A training step's updates are SGD's: "<p>.next" = p - lr * "<p>.grad" for each probed parameter.
inline void check_sgd_updates(const graph& g, const std::map<std::string, tensor>& out,
                              const std::vector<std::string>& probe, double lr) {
  for (const auto& p : probe) {
    const auto w = g.constant(p)->to_vector(), d = out.at(p + ".grad").to_vector(), n = out.at(p + ".next").to_vector();
    for (std::size_t i = 0; i < w.size(); ++i)
      CHECK(std::abs(n[i] - (w[i] - lr * d[i])) <= 1e-6 * (1 + std::abs(w[i])));
  }
}

/// Makes each probed parameter's gradient an output of a training step, after checking that
/// backward (whose gradients are `grads`) produces it.
inline void output_gradients(graph& g, const std::vector<std::string>& grads, const std::vector<std::string>& probe) {
  for (const auto& p : probe) {
    INFO(p);
    REQUIRE(std::find(grads.begin(), grads.end(), p + ".grad") != grads.end());
    g.set_output(p + ".grad");
  }
}

/// The "loss" output of a step built by make(), run with entry i of constant `name` moved by delta.
template <class Make>
double loss_with(session& s, const std::vector<feed>& in, Make make, const std::string& name, std::size_t i,
                 double delta) {
  graph h = make();
  tensor v = h.constant(name)->clone();
  v.set(static_cast<std::int64_t>(i), v.get(static_cast<std::int64_t>(i)) + delta);
  h.set_constant(name, std::move(v));
  return s.run(s.compile(h), in).outputs.at("loss").to_vector().at(0);
}

/// Deterministic pseudo-random values in [-scale, scale) (a 64-bit LCG).
inline std::vector<double> values(std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = scale * (static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return v;
}

inline tensor random_tensor(shape s, std::uint64_t seed, double scale = 1.0, dtype t = dtype::f32) {
  return tensor(s, t, values(s.elements(), seed, scale));
}

/// y[m][n] = sum_k a[m][k] b[k][n] (+ bias[n]).
inline std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, std::int64_t M,
                                      std::int64_t K, std::int64_t N, const std::vector<double>* bias = nullptr) {
  std::vector<double> y(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[static_cast<std::size_t>(n)] : 0.0;
      for (std::int64_t k = 0; k < K; ++k)
        s += a[static_cast<std::size_t>(m * K + k)] * b[static_cast<std::size_t>(k * N + n)];
      y[static_cast<std::size_t>(m * N + n)] = s;
    }
  return y;
}

inline void ref_relu(std::vector<double>& v) {
  for (auto& e : v) e = e > 0 ? e : 0;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? m : 1e300;
}

/// Runs f, expects a graph_error with this code naming this op and tensor.
template <class F>
void expect_graph_error(F f, errc code, const std::string& op, const std::string& tensor) {
  try {
    f();
    FAIL("no graph_error");
  } catch (const graph_error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    CHECK(e.op() == op);
    CHECK(e.tensor() == tensor);
    if (!op.empty()) CHECK(std::string(e.what()).find(op) != std::string::npos);
    if (!tensor.empty()) CHECK(std::string(e.what()).find(tensor) != std::string::npos);
  }
}

/// 0, 1, 2, ... n - 1.
inline std::vector<double> iota(std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return v;
}

/// A 1-D integer tensor of these values (int64 ones exact to their extremes).
inline tensor ints_tensor(const std::vector<std::int64_t>& v, dtype t = dtype::i64) {
  std::vector<double> d(v.begin(), v.end());
  tensor r({static_cast<std::int64_t>(v.size())}, t);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == dtype::i64) {
      // Past 2^53 a double is not exact: INT64_MAX and INT64_MIN go in as their own bits.
      std::int64_t x = v[i];
      std::memcpy(static_cast<std::byte*>(r.data()) + i * sizeof x, &x, sizeof x);
    } else {
      r.set(static_cast<std::int64_t>(i), d[i]);
    }
  }
  return r;
}

/// Whether two results agree within 1e-5 plus 1e-6 of the expected value, element by element.
inline bool near(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > 1e-5 + 1e-6 * std::abs(want[i])) return false;
  return true;
}

/// Rows of w[3,2] = {1..6} gathered by two int64 ids fed at run time ("ids" into "emb"): a run
/// fails when an id is out of range.
inline graph embedding_lookup(std::string name) {
  graph g(std::move(name));
  auto w = g.add_constant("w", tensor({3, 2}, dtype::f32, {1, 2, 3, 4, 5, 6}));
  g.set_output(g.add_op("Gather", {w, g.add_input("ids", {2}, dtype::i64)}, {}, "emb"));
  return g;
}

inline npurt::system make_system() { return npurt::system{sim::presets::ascend910(1)}; }

/// Compiles g timing-only and runs it on a timing-only x: it must launch one kernel, give
/// `output` the shape `want`, and take no less than `bytes` over the preset's HBM bandwidth (a
/// data-movement operator cannot beat its traffic).
inline void check_timing_only_movement(graph& g, const shape& xs, dtype t, const std::string& output, const shape& want,
                                       double bytes) {
  auto sys = make_system();
  session s{sys};
  auto c = s.compile(g, {.timing_only = true});
  CHECK(c.report().timing_only);
  auto r = s.run(c, {{"x", tensor::timing_only(xs, t)}});
  REQUIRE(r.ops.size() == 1);
  CHECK(r.outputs.at(output).shape() == want);
  const double floor_s = bytes / sim::presets::ascend910(1).hbm_bandwidth;
  CHECK(static_cast<double>(r.ops[0].busy.count()) * 1e-12 >= floor_s * (1 - 1e-9));
}

}  // namespace npurt::test
