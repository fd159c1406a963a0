// The elementwise operators of the graph layer and the kernel function each lowers to. Private
// to the graph library: inference (graph.cpp), lowering (lower.cpp) and compile's in-place and
// fusion rules (compile.cpp) read the same table.
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/kernel_ops.hpp>

#include <array>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

namespace npurt::graph_ops {

struct eltwise_op {
  std::string_view name;
  kernels::eltwise_fn fn;
  bool binary;
};

using enum kernels::eltwise_fn;
// Binary ops broadcast NumPy-style; Max and Min take one or more inputs (folded pairwise).
inline constexpr std::array<eltwise_op, 38> eltwise_ops{{
    {"Add", add, true},
    {"Sub", sub, true},
    {"Mul", mul, true},
    {"Div", div, true},
    {"Pow", pow, true},
    {"Max", max, true},
    {"Min", min, true},
    {"ReluGrad", relu_backward, true},
    {"Relu", relu, false},
    {"Gelu", gelu, false},
    {"Sigmoid", sigmoid, false},
    {"Tanh", tanh, false},
    {"Exp", exp, false},
    {"Log", log, false},
    {"Sqrt", sqrt, false},
    {"Abs", abs, false},
    {"Neg", neg, false},
    {"Reciprocal", reciprocal, false},
    {"Floor", floor, false},
    {"Ceil", ceil, false},
    {"Round", round, false},
    {"Erf", erf, false},
    {"Sin", sin, false},
    {"Cos", cos, false},
    {"Softplus", softplus, false},
    {"Softsign", softsign, false},
    {"Sign", sign, false},
    {"LeakyRelu", leaky_relu, false},
    {"Elu", elu, false},
    {"Selu", selu, false},
    {"HardSigmoid", hard_sigmoid, false},
    {"ThresholdedRelu", thresholded_relu, false},
    {"Celu", celu, false},
    {"HardSwish", hard_swish, false},
    {"Clip", clip, false},
    {"Asin", asin, false},
    {"Acos", acos, false},
    {"Atan", atan, false},
}};

inline std::optional<eltwise_op> find_eltwise(std::string_view type) {
  for (const auto& e : eltwise_ops)
    if (e.name == type) return e;
  return std::nullopt;
}

/// alpha and beta of a parametric function, with ONNX's defaults. Clip's bounds from opset 11
/// on are inputs: `lo` and `hi` give them when they are constants.
inline std::pair<float, float> eltwise_params(const node& n, kernels::eltwise_fn f, std::optional<double> lo = {},
                                              std::optional<double> hi = {}) {
  const auto a = [&](double d) { return static_cast<float>(n.attrs.get_float("alpha", d)); };
  switch (f) {
    case leaky_relu: return {a(0.01), 0.0f};
    case elu:
    case celu: return {a(1.0), 0.0f};
    case thresholded_relu: return {a(1.0), 0.0f};
    case selu:
      return {a(1.67326319217681884765625), static_cast<float>(n.attrs.get_float("gamma", 1.05070102214813232421875))};
    case hard_sigmoid: return {a(0.2), static_cast<float>(n.attrs.get_float("beta", 0.5))};
    case clip: {
      const double l = lo.value_or(n.attrs.get_float("min", -std::numeric_limits<float>::max()));
      const double h = hi.value_or(n.attrs.get_float("max", std::numeric_limits<float>::max()));
      return {static_cast<float>(l), static_cast<float>(h)};
    }
    default: return {0.0f, 0.0f};
  }
}

}  // namespace npurt::graph_ops
