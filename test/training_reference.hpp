// A reference for ONNX's Adam (onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html)
// written from the spec's formulas in double, one optimized tensor at a time, as
// onnx/reference/ops/aionnxpreviewtraining/op_adam.py computes them. Shared by the graph and
// ONNX tests; it knows nothing of the graph's chain.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace training_ref {

struct adam_params {
  double alpha = 0.9, beta = 0.999, epsilon = 1e-6, norm_coefficient = 0, norm_coefficient_post = 0;
};

struct adam_result {
  std::vector<double> x, v, h;
};

/// X_new, V_new and H_new of one tensor after an update with learning rate r at count t.
inline adam_result adam(double r, std::int64_t t, const std::vector<double>& x, const std::vector<double>& g,
                        const std::vector<double>& v, const std::vector<double>& h, const adam_params& p) {
  // Bias correction once t > 0: r * sqrt(1 - beta^t) / (1 - alpha^t).
  const auto td = static_cast<double>(t);
  const double rate = t > 0 ? r * std::sqrt(1 - std::pow(p.beta, td)) / (1 - std::pow(p.alpha, td)) : r;
  adam_result out;
  for (std::size_t e = 0; e < x.size(); ++e) {
    const double gr = p.norm_coefficient * x[e] + g[e];
    const double vn = p.alpha * v[e] + (1 - p.alpha) * gr;
    const double hn = p.beta * h[e] + (1 - p.beta) * gr * gr;
    out.v.push_back(vn);
    out.h.push_back(hn);
    out.x.push_back((1 - p.norm_coefficient_post) * (x[e] - rate * vn / (std::sqrt(hn) + p.epsilon)));
  }
  return out;
}

}  // namespace training_ref
