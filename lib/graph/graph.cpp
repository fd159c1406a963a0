// Graph construction, validation and shape inference (see graph/graph.hpp).
#include <npurt/graph/graph.hpp>

#include <npurt/graph/detail/composite.hpp>

#include "conv_transpose.hpp"
#include "eltwise.hpp"
#include "window.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <set>

namespace npurt {

namespace {

constexpr std::array<std::string_view, 115> ops_table{"Add",
                                                      "AveragePool",
                                                      "BatchNormalization",
                                                      "Cast",
                                                      "Concat",
                                                      "Conv",
                                                      "ConvTranspose",
                                                      "Div",
                                                      "Flatten",
                                                      "Gelu",
                                                      "Gemm",
                                                      "GlobalAveragePool",
                                                      "Identity",
                                                      "LayerNormalization",
                                                      "MatMul",
                                                      "MaxPool",
                                                      "Mul",
                                                      "Relu",
                                                      "Reshape",
                                                      "Sigmoid",
                                                      "Softmax",
                                                      "Sub",
                                                      "Tanh",
                                                      "Transpose",
                                                      "ReduceMean",
                                                      "ReduceSum",
                                                      "Pow",
                                                      "Max",
                                                      "Min",
                                                      "ReluGrad",
                                                      "Exp",
                                                      "Log",
                                                      "Sqrt",
                                                      "Abs",
                                                      "Neg",
                                                      "Reciprocal",
                                                      "Floor",
                                                      "Ceil",
                                                      "Erf",
                                                      "Sin",
                                                      "Cos",
                                                      "Softplus",
                                                      "Softsign",
                                                      "Sign",
                                                      "LeakyRelu",
                                                      "Elu",
                                                      "Selu",
                                                      "HardSigmoid",
                                                      "ThresholdedRelu",
                                                      "Celu",
                                                      "HardSwish",
                                                      "Clip",
                                                      "LogSoftmax",
                                                      "ReduceMax",
                                                      "SGDUpdate",
                                                      "ReduceMin",
                                                      "ArgMax",
                                                      "ArgMin",
                                                      "CastLike",
                                                      "Dropout",
                                                      "ConvGrad",
                                                      "BatchNormInternal",
                                                      "BatchNormalizationGrad",
                                                      "MaxPoolGrad",
                                                      "AveragePoolGrad",
                                                      "GlobalAveragePoolGrad",
                                                      "Slice",
                                                      "Split",
                                                      "Pad",
                                                      "Gather",
                                                      "Tile",
                                                      "Expand",
                                                      "NegativeLogLikelihoodLoss",
                                                      "Trilu",
                                                      "Resize",
                                                      "Upsample",
                                                      "GatherElements",
                                                      "Mod",
                                                      "CumSum",
                                                      "ReduceProd",
                                                      "GridSample",
                                                      "ScatterND",
                                                      "ScatterElements",
                                                      "Scatter",
                                                      "GatherND",
                                                      "TopK",
                                                      "Equal",
                                                      "Less",
                                                      "LessOrEqual",
                                                      "Greater",
                                                      "GreaterOrEqual",
                                                      "Where",
                                                      "And",
                                                      "Or",
                                                      "Xor",
                                                      "Not",
                                                      "IsNaN",
                                                      "IsInf",
                                                      "QuantizeLinear",
                                                      "DequantizeLinear",
                                                      "Round",
                                                      "BitShift",
                                                      "Recurrent",
                                                      "Asin",
                                                      "Acos",
                                                      "Atan",
                                                      "Det",
                                                      "ReverseSequence",
                                                      "LRN",
                                                      "MatMulInteger",
                                                      "ConvInteger",
                                                      "Requantize",
                                                      "DFT",
                                                      "STFT",
                                                      "RoiAlign"};

[[noreturn]] void fail(errc e, const node& n, std::string_view tensor, const std::string& what) {
  throw graph_error(make_error_code(e), n.name, std::string(tensor),
                    n.type + " '" + n.name + "'" +
                        (tensor.empty() ? std::string() : " (tensor '" + std::string(tensor) + "')") + ": " + what);
}

}  // namespace

std::string shape_string(const shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.rank(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  return r + "]";
}

namespace {

const value_info& need(const node& n, std::span<const value_info* const> in, std::size_t i) {
  if (i >= in.size() || !in[i]) fail(errc::invalid_argument, n, {}, "input " + std::to_string(i) + " is required");
  return *in[i];
}

void need_float(const node& n, const value_info& v) {
  if (!is_float(v.type))
    fail(errc::not_supported, n, v.name, "needs a floating-point tensor, got " + std::string(to_string(v.type)));
}

// A float or an integer of a dtype the kernels compute on.
void need_float_or_integer(const node& n, const value_info& v) {
  if (!is_float(v.type) && !is_integer(v.type))
    fail(errc::not_supported, n, v.name,
         "needs a floating-point or integer tensor, got " + std::string(to_string(v.type)));
}

// A number the kernel computes f on: a float, or an integer where f is exact on integers (Add,
// Sub, Mul, Div, Pow, Max, Min, Abs, Neg, Sign, Relu, Mod; see kernels::integers_ok).
void need_number(const node& n, const value_info& v, kernels::eltwise_fn f) {
  if (is_integer(v.type) && kernels::integers_ok(f)) return;
  if (is_integer(v.type))
    fail(errc::not_supported, n, v.name, "needs a floating-point tensor, got " + std::string(to_string(v.type)));
  need_float_or_integer(n, v);
}

void same_type(const node& n, const value_info& a, const value_info& b) {
  if (a.type != b.type)
    fail(errc::invalid_dtype, n, b.name,
         "dtype " + std::string(to_string(b.type)) + " does not match '" + a.name + "' (" +
             std::string(to_string(a.type)) + ")");
}

std::int64_t norm_axis(const node& n, std::int64_t axis, std::size_t rank, std::string_view tensor,
                       bool inclusive = false) {
  const auto r = static_cast<std::int64_t>(rank);
  const std::int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a > r - (inclusive ? 0 : 1))
    fail(errc::invalid_argument, n, tensor,
         "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

shape broadcast(const node& n, const value_info& a, const value_info& b) {
  const std::size_t r = std::max(a.shape.rank(), b.shape.rank());
  shape out;
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.shape.rank() >= r ? a.shape[i + a.shape.rank() - r] : 1;
    const std::int64_t db = i + b.shape.rank() >= r ? b.shape[i + b.shape.rank() - r] : 1;
    if (da != db && da != 1 && db != 1)
      fail(
          errc::invalid_shape, n, b.name,
          "shapes " + shape_string(a.shape) + " ('" + a.name + "') and " + shape_string(b.shape) + " do not broadcast");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

struct spatial {
  std::array<std::int64_t, 2> kernel{1, 1}, stride{1, 1}, pad{0, 0}, dilation{1, 1};
};

// Reads kernel_shape/strides/pads/dilations/auto_pad; the kernels take one pad per side pair, so
// asymmetric pads are not supported.
spatial read_spatial(const node& n, const value_info& x, std::array<std::int64_t, 2> kernel) {
  spatial s;
  s.kernel = kernel;
  auto two = [&](std::string_view attr, std::array<std::int64_t, 2> def) {
    const ints v = n.attrs.get_ints(attr, {def[0], def[1]});
    if (v.size() != 2) fail(errc::not_supported, n, x.name, std::string(attr) + " must have 2 values (2-D only)");
    return std::array<std::int64_t, 2>{v[0], v[1]};
  };
  s.stride = two("strides", {1, 1});
  s.dilation = two("dilations", {1, 1});
  // Before auto_pad divides by the strides; the kernels take 32-bit windows.
  constexpr std::int64_t window_max = std::numeric_limits<std::int32_t>::max();
  for (int i = 0; i < 2; ++i)
    if (s.stride[i] < 1 || s.dilation[i] < 1 || s.kernel[i] < 1 || s.stride[i] > window_max ||
        s.dilation[i] > window_max || s.kernel[i] > window_max)
      fail(errc::invalid_argument, n, x.name, "strides, dilations and kernel must be positive 32-bit values");
  const std::string auto_pad = n.attrs.get_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    const ints p = n.attrs.get_ints("pads", {0, 0, 0, 0});
    if (p.size() != 4) fail(errc::not_supported, n, x.name, "pads must have 4 values (2-D only)");
    if (p[0] != p[2] || p[1] != p[3]) fail(errc::not_supported, n, x.name, "asymmetric pads are not supported");
    s.pad = {p[0], p[1]};
  } else if (auto_pad == "VALID") {
    s.pad = {0, 0};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int i = 0; i < 2; ++i) {
      const std::int64_t in = x.shape[2 + static_cast<std::size_t>(i)];
      const std::int64_t out = (in + s.stride[i] - 1) / s.stride[i];
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * s.stride[i] + s.dilation[i] * (s.kernel[i] - 1) + 1 - in);
      if (total % 2) fail(errc::not_supported, n, x.name, "auto_pad " + auto_pad + " needs asymmetric pads here");
      s.pad[i] = total / 2;
    }
  } else {
    fail(errc::not_supported, n, x.name, "auto_pad " + auto_pad);
  }
  for (int i = 0; i < 2; ++i)
    if (s.stride[i] < 1 || s.dilation[i] < 1 || s.pad[i] < 0 || s.kernel[i] < 1)
      fail(errc::invalid_argument, n, x.name, "strides, dilations and kernel must be positive, pads not negative");
  // The kernels take 32-bit pads, and the output extent adds two of them to the input's.
  for (int i = 0; i < 2; ++i)
    if (s.pad[i] > window_max)
      fail(errc::invalid_argument, n, x.name, "pad " + std::to_string(s.pad[i]) + " is past 2^31 - 1");
  return s;
}

std::int64_t window_out(const node& n, const value_info& x, std::int64_t in, std::int64_t k, std::int64_t s,
                        std::int64_t p, std::int64_t d) {
  const std::int64_t eff = d * (k - 1) + 1;
  if (in + 2 * p < eff)
    fail(errc::invalid_shape, n, x.name, "input " + shape_string(x.shape) + " is smaller than the window");
  return (in + 2 * p - eff) / s + 1;
}

}  // namespace

// ---- attributes ----

std::int64_t attributes::get_int(std::string_view name, std::int64_t fallback) const {
  auto it = map_.find(name);
  if (it == map_.end()) return fallback;
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) return *v;
  throw_error(make_error_code(errc::invalid_argument), "attribute '" + std::string(name) + "' is not an INT");
}

double attributes::get_float(std::string_view name, double fallback) const {
  auto it = map_.find(name);
  if (it == map_.end()) return fallback;
  if (const auto* v = std::get_if<double>(&it->second)) return *v;
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*v);
  throw_error(make_error_code(errc::invalid_argument), "attribute '" + std::string(name) + "' is not a FLOAT");
}

ints attributes::get_ints(std::string_view name, ints fallback) const {
  auto it = map_.find(name);
  if (it == map_.end()) return fallback;
  if (const auto* v = std::get_if<ints>(&it->second)) return *v;
  throw_error(make_error_code(errc::invalid_argument), "attribute '" + std::string(name) + "' is not INTS");
}

std::string attributes::get_string(std::string_view name, std::string fallback) const {
  auto it = map_.find(name);
  if (it == map_.end()) return fallback;
  if (const auto* v = std::get_if<std::string>(&it->second)) return *v;
  throw_error(make_error_code(errc::invalid_argument), "attribute '" + std::string(name) + "' is not a STRING");
}

std::span<const std::string_view> supported_ops() noexcept {
  static const auto sorted = [] {
    std::vector<std::string_view> s(ops_table.begin(), ops_table.end());
    const auto chains = detail::composite_ops();
    s.insert(s.end(), chains.begin(), chains.end());
    std::sort(s.begin(), s.end());
    return s;
  }();
  return sorted;
}

namespace {

// The attributes ONNX defines for each operator npurt takes (onnx.ai/onnx/operators), the ones it
// reads and the ones whose defaults it follows alike. A name outside this list is refused, so a
// misspelt attribute ("stride" for "strides") is an error rather than a silent default. npurt's own
// training operators (ConvGrad, SGDUpdate, ...) are made by its model builders and not listed.
struct op_attributes {
  std::string_view op;
  std::initializer_list<std::string_view> names;
};
const op_attributes onnx_attributes[] = {
    {"AveragePool", {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}},
    {"MaxPool", {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}},
    {"Conv", {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
    {"ConvTranspose",
     {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"}},
    {"BatchNormalization", {"epsilon", "momentum", "training_mode"}},
    {"LayerNormalization", {"axis", "epsilon", "stash_type"}},
    {"Cast", {"to", "saturate"}},
    {"CastLike", {"saturate"}},
    {"Concat", {"axis"}},
    {"Flatten", {"axis"}},
    {"Softmax", {"axis"}},
    {"LogSoftmax", {"axis"}},
    {"Gelu", {"approximate"}},
    {"Gemm", {"alpha", "beta", "transA", "transB"}},
    {"Reshape", {"allowzero"}},
    {"Transpose", {"perm"}},
    {"ReduceMean", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceSum", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceMax", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceMin", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceSumSquare", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL1", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL2", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceLogSum", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceLogSumExp", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"InstanceNormalization", {"epsilon"}},
    {"MeanVarianceNormalization", {"axes"}},
    {"Shrink", {"bias", "lambd"}},
    {"DepthToSpace", {"blocksize", "mode"}},
    {"SpaceToDepth", {"blocksize"}},
    {"Hardmax", {"axis"}},
    {"Squeeze", {"axes"}},
    {"Unsqueeze", {"axes"}},
    {"ArgMax", {"axis", "keepdims", "select_last_index"}},
    {"ArgMin", {"axis", "keepdims", "select_last_index"}},
    {"LeakyRelu", {"alpha"}},
    {"Elu", {"alpha"}},
    {"Celu", {"alpha"}},
    {"ThresholdedRelu", {"alpha"}},
    {"Selu", {"alpha", "gamma"}},
    {"HardSigmoid", {"alpha", "beta"}},
    {"Clip", {"min", "max"}},
    {"Dropout", {"seed", "ratio"}},  // ratio: opsets before 12
    {"Slice", {}},  // opset 10 on: starts, ends, axes and steps are inputs
    {"Split", {"axis", "num_outputs", "split"}},  // split: opsets before 13
    {"Pad", {"mode", "pads", "value"}},           // pads and value: opsets before 11
    {"Gather", {"axis"}},
    {"GatherElements", {"axis"}},
    {"Tile", {}},    // opset 6 on: repeats is an input
    {"Expand", {}},  // the target shape is an input
    {"NegativeLogLikelihoodLoss", {"ignore_index", "reduction"}},
    {"SoftmaxCrossEntropyLoss", {"ignore_index", "reduction"}},
    {"Trilu", {"upper"}},
    {"Resize",
     {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
      "extrapolation_value", "antialias", "keep_aspect_ratio_policy", "axes"}},
    {"Upsample", {"mode", "scales"}},  // scales: opset 7 (an input from 9)
    {"Mod", {"fmod"}},
    {"CumSum", {"exclusive", "reverse"}},
    {"ReduceProd", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"GridSample", {"mode", "padding_mode", "align_corners"}},
    {"ScatterND", {"reduction"}},                 // reduction: opset 16 on
    {"ScatterElements", {"axis", "reduction"}},  // reduction: opset 16 on
    {"Scatter", {"axis"}},                        // opsets 9 and 10: ScatterElements without reduction
    {"GatherND", {"batch_dims"}},                 // batch_dims: opset 12 on
    {"TopK", {"axis", "k", "largest", "sorted"}},  // k: opset 1 (an input from 10)
    {"IsInf", {"detect_negative", "detect_positive"}},
    // saturate concerns float8 outputs only; block_size must be 0 (blocked quantization is refused).
    {"QuantizeLinear", {"axis", "saturate", "block_size", "output_dtype", "precision"}},
    {"DequantizeLinear", {"axis", "block_size", "output_dtype"}},
    {"EyeLike", {"dtype", "k"}},
    {"OneHot", {"axis"}},
    {"BitShift", {"direction"}},
    {"Einsum", {"equation"}},
    {"RNN", {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"}},
    {"GRU",
     {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout",
      "linear_before_reset"}},
    {"LSTM",
     {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget",
      "layout"}},
    {"Adagrad", {"decay_factor", "epsilon", "norm_coefficient"}},
    {"Adam", {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"}},
    {"Momentum", {"alpha", "beta", "mode", "norm_coefficient"}},
    {"ReverseSequence", {"batch_axis", "time_axis"}},
    {"MaxUnpool", {"kernel_shape", "pads", "strides"}},
    {"LRN", {"alpha", "beta", "bias", "size"}},
    {"MatMulInteger", {}},
    {"ConvInteger", {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
    {"QLinearMatMul", {}},
    {"QLinearConv", {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
    {"DFT", {"axis", "inverse", "onesided"}},  // axis: opset 17 (an input from 20)
    {"STFT", {"onesided"}},
    {"RoiAlign",
     {"coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"}},
};
constexpr std::string_view own_ops[] = {"ReluGrad",
                                        "SGDUpdate",
                                        "ConvGrad",
                                        "BatchNormInternal",
                                        "BatchNormalizationGrad",
                                        "MaxPoolGrad",
                                        "AveragePoolGrad",
                                        "GlobalAveragePoolGrad",
                                        "Recurrent",
                                        "Requantize"};

// Operators whose outputs may each be left out with an empty name, as ONNX's optional outputs
// are: a gradient operator's caller often wants only some of its gradients (a network's first
// convolution has no use for the gradient of the image, a frozen normalisation none for its
// scale's and bias's). Any other output needs a name.
bool omits_outputs(std::string_view type) noexcept { return type == "ConvGrad" || type == "BatchNormalizationGrad"; }

/// The attribute of `attrs` that `type` does not have, or null.
/// The operator whose attributes `type` takes: a gradient operator takes its forward operator's.
std::string_view attributes_of(std::string_view type) noexcept {
  if (type == "ConvGrad" || type == "MaxPoolGrad" || type == "AveragePoolGrad" || type == "GlobalAveragePoolGrad" ||
      type == "SoftmaxGrad" || type == "GeluGrad" || type == "LayerNormalizationGrad")
    type.remove_suffix(4);
  return type;
}

const std::string* unknown_attribute(std::string_view type, const npurt::attributes& attrs) {
  type = attributes_of(type);
  if (attrs.items().empty() || std::find(std::begin(own_ops), std::end(own_ops), type) != std::end(own_ops))
    return nullptr;
  std::initializer_list<std::string_view> names{};
  for (const auto& o : onnx_attributes)
    if (o.op == type) names = o.names;
  for (const auto& [name, value] : attrs.items())
    if (std::find(names.begin(), names.end(), name) == names.end()) return &name;
  return nullptr;
}

/// The float attribute of `attrs` that the kernels cannot take, or null: every float attribute
/// becomes a kernel's scalar, which must be finite, but Clip's bounds may be infinite (no bound).
const std::string* non_finite_attribute(std::string_view type, const npurt::attributes& attrs) {
  for (const auto& [name, value] : attrs.items()) {
    const bool ok_inf = type == "Clip";
    const auto bad = [&](double v) { return std::isnan(v) || (!ok_inf && std::isinf(v)); };
    if (const double* d = std::get_if<double>(&value); d && bad(*d)) return &name;
    if (const auto* f = std::get_if<npurt::floats>(&value); f && std::any_of(f->begin(), f->end(), bad)) return &name;
  }
  return nullptr;
}

std::string attribute_list(std::string_view type) {
  type = attributes_of(type);
  std::string out;
  for (const auto& o : onnx_attributes)
    if (o.op == type)
      for (std::string_view n : o.names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out.empty() ? "none" : out;
}

}  // namespace

bool is_supported_op(std::string_view type) noexcept {
  return std::find(ops_table.begin(), ops_table.end(), type) != ops_table.end() || detail::is_composite_op(type);
}

std::optional<dtype> dtype_from_onnx(std::int64_t code) noexcept {
  switch (code) {
    case 1: return dtype::f32;
    case 2: return dtype::u8;
    case 3: return dtype::i8;
    case 6: return dtype::i32;
    case 7: return dtype::i64;
    case 9: return dtype::boolean;
    case 10: return dtype::f16;
    case 16: return dtype::bf16;
    case 11: return dtype::f64;
    case 5: return dtype::i16;
    case 4: return dtype::u16;
    case 12: return dtype::u32;
    case 13: return dtype::u64;
    default: return std::nullopt;
  }
}

std::int64_t onnx_dtype_code(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return 1;
    case dtype::u8: return 2;
    case dtype::i8: return 3;
    case dtype::i32: return 6;
    case dtype::i64: return 7;
    case dtype::f16: return 10;
    case dtype::bf16: return 16;
    case dtype::boolean: return 9;
    case dtype::f64: return 11;
    case dtype::i16: return 5;
    case dtype::u16: return 4;
    case dtype::u32: return 12;
    case dtype::u64: return 13;
  }
  return 0;
}

// ---- Slice and Split windows ----

namespace {

// A recurrence over an empty sequence (or batch) is not computed: Y_h would be the initial state
// copied, a case no kernel launch covers. Every other operator takes empty tensors (see the
// empty-tensor rewrite in compile.cpp).
void need_nonempty(const node& n, std::string_view output, const shape& s) {
  for (auto d : s)
    if (d == 0)
      fail(errc::not_supported, n, output,
           "output " + shape_string(s) + ": a recurrence over an empty sequence or batch is not computed");
}

// The values of an index input (Slice's starts, ends, axes, steps; Split's split): a constant
// 1-D tensor of one of `types`, or nothing when the optional input is omitted.
std::optional<ints> index_input(const node& n, std::span<const value_info* const> in,
                                std::span<const tensor* const> constants, std::size_t i, std::string_view what,
                                std::initializer_list<dtype> types) {
  if (i >= in.size() || !in[i]) return std::nullopt;
  const value_info& v = *in[i];
  const tensor* c = constants.size() > i ? constants[i] : nullptr;
  if (!c || !c->is_host())
    fail(errc::not_supported, n, v.name, std::string(what) + " must be a constant with data (it decides the shape)");
  if (std::find(types.begin(), types.end(), v.type) == types.end())
    fail(errc::invalid_dtype, n, v.name,
         std::string(what) + " must be " + (types.size() > 1 ? "int32 or int64" : "int64") + ", got " +
             std::string(to_string(v.type)));
  if (v.shape.rank() > 1)
    fail(errc::invalid_shape, n, v.name, std::string(what) + " must be 1-D, got " + shape_string(v.shape));
  ints out;
  for (std::int64_t k = 0; k < c->elements(); ++k) out.push_back(c->get_int(k));
  return out;
}

}  // namespace

namespace graph_ops {

window slice_window(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants) {
  const value_info& x = need(n, in, 0);
  need(n, in, 1);
  need(n, in, 2);
  const std::initializer_list<dtype> tind{dtype::i32, dtype::i64};
  const ints starts = *index_input(n, in, constants, 1, "starts", tind);
  const ints ends = *index_input(n, in, constants, 2, "ends", tind);
  const std::size_t count = starts.size();
  if (ends.size() != count)
    fail(errc::invalid_argument, n, in[2]->name,
         "ends has " + std::to_string(ends.size()) + " values, starts " + std::to_string(count));
  ints axes(count), steps(count, 1);
  for (std::size_t i = 0; i < count; ++i) axes[i] = static_cast<std::int64_t>(i);
  if (auto a = index_input(n, in, constants, 3, "axes", tind)) axes = *a;
  if (auto s = index_input(n, in, constants, 4, "steps", tind)) steps = *s;
  if (axes.size() != count || steps.size() != count)
    fail(errc::invalid_argument, n, in[axes.size() != count ? 3 : 4]->name,
         std::string(axes.size() != count ? "axes" : "steps") + " has " +
             std::to_string(axes.size() != count ? axes.size() : steps.size()) + " values, starts " +
             std::to_string(count));
  window w;
  w.dims = x.shape;
  std::uint32_t seen = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto a =
        static_cast<std::size_t>(norm_axis(n, axes[i], x.shape.rank(), in.size() > 3 && in[3] ? in[3]->name : x.name));
    // ONNX's shape inference refuses an axis named twice (-1 and rank-1 included).
    if ((seen >> a) & 1u)
      fail(errc::invalid_argument, n, in.size() > 3 && in[3] ? in[3]->name : x.name,
           "axis " + std::to_string(axes[i]) + " is named twice");
    seen |= 1u << a;
    const std::int64_t step = steps[i], dim = x.shape[a];
    if (step == 0) fail(errc::invalid_argument, n, in[4]->name, "a step is 0");
    if (dim == 0) {
      w.dims[a] = 0;
      continue;
    }
    // onnx.ai/onnx/operators/onnx__Slice.html: a negative start or end counts from the end;
    // then starts clamp to [0, dim] ([0, dim - 1] stepping backwards) and ends to [0, dim]
    // ([-1, dim - 1] backwards), so INT64_MAX and INT64_MIN mean "to the end".
    std::int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    start = std::clamp<std::int64_t>(start, 0, step < 0 ? dim - 1 : dim);
    end = std::clamp<std::int64_t>(end, step < 0 ? -1 : 0, step < 0 ? dim - 1 : dim);
    // ceil(distance / |step|) elements, in unsigned arithmetic: |INT64_MIN| has no int64.
    const auto distance = static_cast<std::uint64_t>(step > 0 ? end - start : start - end);
    const std::uint64_t stride = step > 0 ? static_cast<std::uint64_t>(step) : 0 - static_cast<std::uint64_t>(step);
    const bool any = step > 0 ? end > start : start > end;
    w.dims[a] = any ? static_cast<std::int64_t>((distance - 1) / stride + 1) : 0;
    w.starts[a] = start;
    // One element reads no second index: its step is the plain 1 (a contiguous window).
    w.steps[a] = w.dims[a] > 1 ? step : 1;
  }
  return w;
}

std::vector<window> split_windows(const node& n, std::span<const value_info* const> in,
                                  std::span<const tensor* const> constants) {
  const value_info& x = need(n, in, 0);
  const auto axis = static_cast<std::size_t>(norm_axis(n, n.attrs.get_int("axis", 0), x.shape.rank(), x.name));
  const std::int64_t dim = x.shape[axis];
  const auto outputs = static_cast<std::int64_t>(n.outputs.size());
  const bool by_input = in.size() > 1 && in[1];
  const ints attr = n.attrs.get_ints("split");
  if (by_input && !attr.empty())
    fail(errc::invalid_argument, n, in[1]->name, "has both the split input and the split attribute");
  if ((by_input || !attr.empty()) && n.attrs.has("num_outputs"))
    fail(errc::invalid_argument, n, x.name, "has both split and num_outputs (onnx.ai: one or the other)");
  ints sizes;
  if (by_input || !attr.empty()) {
    sizes = by_input ? *index_input(n, in, constants, 1, "split", {dtype::i64}) : attr;
    if (static_cast<std::int64_t>(sizes.size()) != outputs)
      fail(errc::invalid_argument, n, by_input ? in[1]->name : x.name,
           "split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(outputs) + " outputs");
  } else if (n.attrs.has("num_outputs")) {
    // Opset 18: ceil(dim / num_outputs) each, the last chunk what remains.
    const std::int64_t parts = n.attrs.get_int("num_outputs", 1);
    if (parts != outputs)
      fail(errc::invalid_argument, n, x.name,
           "num_outputs is " + std::to_string(parts) + ", with " + std::to_string(outputs) + " outputs named");
    const std::int64_t chunk = dim / parts + (dim % parts != 0 ? 1 : 0);
    sizes.assign(static_cast<std::size_t>(parts), chunk);
    sizes.back() = dim - chunk * (parts - 1);
  } else {
    // Before opset 18, no sizes means equal parts, one per output.
    if (dim % outputs != 0)
      fail(errc::invalid_shape, n, x.name,
           "dimension " + std::to_string(axis) + " of " + shape_string(x.shape) + " does not split into " +
               std::to_string(outputs) + " equal parts");
    sizes.assign(static_cast<std::size_t>(outputs), dim / outputs);
  }
  std::int64_t total = 0;
  for (auto s : sizes)
    if (s < 0 || __builtin_add_overflow(total, s, &total)) {
      total = -1;
      break;
    }
  if (total != dim) {
    std::string list;
    for (auto s : sizes) list += (list.empty() ? "" : ", ") + std::to_string(s);
    fail(errc::invalid_shape, n, x.name,
         "split sizes [" + list + "] do not add up to dimension " + std::to_string(axis) + " of " +
             shape_string(x.shape) + " (" + std::to_string(dim) + ")");
  }
  std::vector<window> out;
  std::int64_t at = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    window w;
    w.dims = x.shape;
    w.dims[axis] = sizes[k];
    w.starts[axis] = at;
    at += sizes[k];
    out.push_back(w);
  }
  return out;
}

padding pad_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants) {
  const value_info& x = need(n, in, 0);
  padding p;
  const std::string mode = n.attrs.get_string("mode", "constant");
  if (mode == "constant") p.mode = kernels::pad_mode::constant;
  else if (mode == "reflect") p.mode = kernels::pad_mode::reflect;
  else if (mode == "edge") p.mode = kernels::pad_mode::edge;
  else if (mode == "wrap") p.mode = kernels::pad_mode::wrap;
  else fail(errc::invalid_argument, n, x.name, "mode '" + mode + "' is not constant, reflect, edge or wrap");
  // Before opset 11 the pads and the fill are attributes; from 11 on, inputs (axes from 18).
  ints pads;
  std::optional<ints> axes;
  std::string_view pads_name = x.name;
  std::optional<double> fill;
  if (n.attrs.has("pads")) {
    if (in.size() > 1 && in[1])
      fail(errc::invalid_argument, n, in[1]->name, "has both the pads input and the pads attribute");
    pads = n.attrs.get_ints("pads");
    fill = n.attrs.get_float("value", 0.0);
  } else {
    pads = *index_input(n, in, constants, 1, "pads", {dtype::i64});
    pads_name = need(n, in, 1).name;
    if (in.size() > 2 && in[2]) {
      const value_info& v = *in[2];
      const tensor* c = constants.size() > 2 ? constants[2] : nullptr;
      if (!c || !c->is_host()) fail(errc::not_supported, n, v.name, "constant_value must be a constant with data");
      same_type(n, x, v);
      if (c->elements() != 1)
        fail(errc::invalid_shape, n, v.name, "constant_value must be one value, got " + shape_string(v.shape));
      if (is_float(v.type)) {
        fill = c->get(0);
      } else {
        const std::int64_t i = c->get_int(0);
        if (static_cast<std::int64_t>(static_cast<double>(i)) != i || i == INT64_MAX)
          fail(errc::not_supported, n, v.name, "an integer fill beyond 2^53 (" + std::to_string(i) + ")");
        fill = static_cast<double>(i);
      }
    }
    axes = index_input(n, in, constants, 3, "axes", {dtype::i32, dtype::i64});
  }
  const std::size_t rank = x.shape.rank();
  const std::size_t count = axes ? axes->size() : rank;
  if (pads.size() != 2 * count)
    fail(errc::invalid_argument, n, pads_name,
         "pads has " + std::to_string(pads.size()) + " values for " + std::to_string(count) + " axes (2 per axis)");
  p.dims = x.shape;
  std::uint32_t seen = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const std::string_view axes_name = in.size() > 3 && in[3] ? std::string_view(in[3]->name) : x.name;
    const auto a =
        static_cast<std::size_t>(axes ? norm_axis(n, (*axes)[k], rank, axes_name) : static_cast<std::int64_t>(k));
    if ((seen >> a) & 1u) fail(errc::invalid_argument, n, axes_name, "axis " + std::to_string(a) + " is named twice");
    seen |= 1u << a;
    const std::int64_t before = pads[k], after = pads[k + count];
    std::int64_t dim = 0;
    if (__builtin_add_overflow(x.shape[a], before, &dim) || __builtin_add_overflow(dim, after, &dim))
      fail(errc::size_overflow, n, pads_name, "pads overflow dimension " + std::to_string(a));
    if (dim < 0)
      fail(errc::invalid_argument, n, pads_name,
           "pads " + std::to_string(before) + " and " + std::to_string(after) + " crop dimension " + std::to_string(a) +
               " of " + shape_string(x.shape) + " to " + std::to_string(dim) + " elements");
    p.dims[a] = dim;
    p.begins[a] = before;
  }
  if (fill && p.mode == kernels::pad_mode::constant) {
    // ONNX's reference pads with numpy.pad, which casts the fill to the data's dtype: a float
    // dtype rounds it. An integer dtype takes only a value it holds: numpy's float-to-integer
    // cast of anything else is not one defined answer.
    tensor probe(shape{1}, x.type);
    probe.set(0, *fill);
    const double held = probe.get(0);
    if (!is_float(x.type) && held != *fill)
      fail(errc::invalid_argument, n, x.name,
           "the fill " + std::to_string(*fill) + " is not a " + std::string(to_string(x.type)) + " value");
    p.value = held;
  }
  return p;
}

shape repeated_shape(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants) {
  const value_info& x = need(n, in, 0);
  const value_info& by = need(n, in, 1);
  const bool tile = n.type == "Tile";
  const ints v = *index_input(n, in, constants, 1, tile ? "repeats" : "shape", {dtype::i64});
  shape out;
  if (tile) {
    // onnx.ai: one non-negative repeat per dimension of the input.
    if (v.size() != x.shape.rank())
      fail(errc::invalid_argument, n, by.name,
           "repeats has " + std::to_string(v.size()) + " values for the rank " + std::to_string(x.shape.rank()) +
               " input");
    for (std::size_t d = 0; d < v.size(); ++d) {
      std::int64_t dim = 0;
      if (v[d] < 0) fail(errc::invalid_argument, n, by.name, "repeat " + std::to_string(v[d]) + " is negative");
      if (__builtin_mul_overflow(x.shape[d], v[d], &dim))
        fail(errc::size_overflow, n, by.name, "dimension " + std::to_string(d) + " times its repeat overflows");
      out.push_back(dim);
    }
  } else {
    // Expand broadcasts x and the shape NumPy's way; the result is the larger of the two ranks.
    if (v.size() > shape::max_rank)
      fail(errc::not_supported, n, by.name, "a shape of rank " + std::to_string(v.size()) + " (at most 8)");
    value_info target{by.name, {}, x.type};
    for (const std::int64_t d : v) {
      if (d < 0) fail(errc::invalid_argument, n, by.name, "dimension " + std::to_string(d) + " is negative");
      target.shape.push_back(d);
    }
    out = broadcast(n, x, target);
  }
  return out;
}

kernels::loss_reduction loss_reduction_of(const node& n) {
  const std::string r = n.attrs.get_string("reduction", "mean");
  if (r == "none") return kernels::loss_reduction::none;
  if (r == "sum") return kernels::loss_reduction::sum;
  if (r == "mean") return kernels::loss_reduction::mean;
  fail(errc::invalid_argument, n, {}, "reduction '" + r + "' is not none, sum or mean");
}

kernels::scatter_reduction scatter_reduction_of(const node& n) {
  const std::string r = n.attrs.get_string("reduction", "none");
  if (r == "none") return kernels::scatter_reduction::none;
  if (r == "add") return kernels::scatter_reduction::add;
  if (r == "mul") return kernels::scatter_reduction::mul;
  if (r == "max") return kernels::scatter_reduction::max;
  if (r == "min") return kernels::scatter_reduction::min;
  fail(errc::invalid_argument, n, {}, "reduction '" + r + "' is not none, add, mul, max or min");
}

kernels::top_k top_k_spec(const node& n, std::span<const value_info* const> in,
                          std::span<const tensor* const> constants) {
  const auto& x = need(n, in, 0);
  if (x.shape.rank() == 0) fail(errc::invalid_shape, n, x.name, "x must have rank 1 or more, got a scalar");
  kernels::top_k op{};
  const auto axis = static_cast<std::size_t>(norm_axis(n, n.attrs.get_int("axis", -1), x.shape.rank(), x.name));
  op.axis = static_cast<std::int32_t>(axis);
  std::string_view k_name;
  if (in.size() > 1 && in[1]) {
    // Opset 10 on: k is an input, a one-element int64 tensor. The kernel's work and its outputs'
    // shapes depend on it, so it must be known when the graph is built.
    const value_info& kin = *in[1];
    k_name = kin.name;
    if (kin.type != dtype::i64)
      fail(errc::invalid_dtype, n, kin.name, "k must be int64, got " + std::string(to_string(kin.type)));
    if (kin.shape.elements() != 1 || kin.shape.rank() > 1)
      fail(errc::invalid_shape, n, kin.name, "k must be one value, got " + shape_string(kin.shape));
    const tensor* c = constants.size() > 1 ? constants[1] : nullptr;
    if (!c || !c->is_host())
      fail(errc::not_supported, n, kin.name,
           "k is known only at run time, and TopK's outputs are k long on the axis: npurt's graph has static "
           "shapes, so k must be a constant (an initializer, or computed from constants and static shapes, "
           "which the ONNX importer folds: Shape, Gather, Min, ...)");
    op.k = c->get_int(0);
  } else if (n.attrs.has("k")) {
    op.k = n.attrs.get_int("k", 0);  // opset 1
  } else {
    fail(errc::invalid_argument, n, {}, "k is required (input 1; the attribute k before opset 10)");
  }
  const std::int64_t dim = x.shape[axis];
  if (op.k < 1 || op.k > dim)
    fail(errc::invalid_argument, n, k_name,
         "k = " + std::to_string(op.k) + " is outside [1, " + std::to_string(dim) + "] (axis " + std::to_string(axis) +
             " of " + shape_string(x.shape) + ")");
  for (const char* a : {"largest", "sorted"})
    if (const std::int64_t v = n.attrs.get_int(a, 1); v != 0 && v != 1)
      fail(errc::invalid_argument, n, {}, std::string(a) + " must be 0 or 1, got " + std::to_string(v));
  op.largest = n.attrs.get_int("largest", 1) != 0;
  op.sorted = n.attrs.get_int("sorted", 1) != 0;
  return op;
}

std::int64_t trilu_k(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants) {
  const auto k = index_input(n, in, constants, 1, "k", {dtype::i64});
  if (!k) return 0;
  if (k->size() != 1)
    fail(errc::invalid_shape, n, in[1]->name, "k must be one value, got " + std::to_string(k->size()));
  return k->front();
}

}  // namespace graph_ops

namespace {

// Whether Resize's optional input i is given: ONNX leaves one out by an empty name or, in opsets
// 11 and 12 where roi and scales must be listed, by an empty tensor.
bool given(std::span<const value_info* const> in, std::size_t i) {
  return i < in.size() && in[i] && !(in[i]->shape.rank() == 1 && in[i]->shape[0] == 0);
}

// One of the names an ONNX attribute takes: its index in `names`, or invalid_argument listing them.
template <std::size_t N>
std::size_t pick(const node& n, std::string_view tensor, std::string_view attr, const std::string& value,
                 const std::array<std::string_view, N>& names) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == value) return i;
  std::string list;
  for (auto v : names) list += (list.empty() ? "" : ", ") + std::string(v);
  fail(errc::invalid_argument, n, tensor, std::string(attr) + " '" + value + "' is not one of " + list);
}

}  // namespace

namespace graph_ops {

resampling resize_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants) {
  const value_info& x = need(n, in, 0);
  if (!is_float(x.type) && !is_integer(x.type) && x.type != dtype::boolean)
    fail(errc::not_supported, n, x.name,
         "needs a float, integer or bool tensor, got " + std::string(to_string(x.type)));
  const std::size_t rank = x.shape.rank();
  if (rank == 0) fail(errc::invalid_shape, n, x.name, "X must have rank 1 or more, got a scalar");
  resampling r;
  kernels::resize& k = r.op;
  const bool upsample = n.type == "Upsample";
  // Upsample and Resize-10 take (X, scales); from opset 11 Resize takes (X, roi, scales, sizes).
  const bool two_inputs = upsample || in.size() == 2;
  const std::size_t scales_at = two_inputs ? 1 : 2, sizes_at = 3;
  constexpr std::array<std::string_view, 3> modes{"nearest", "linear", "cubic"};
  std::string mode = n.attrs.get_string("mode", "nearest");
  if (upsample && mode == "bilinear") mode = "linear";  // Upsample-1's name for it
  k.mode = static_cast<kernels::resize_mode>(pick(n, x.name, "mode", mode, modes));
  if (upsample && k.mode == kernels::resize_mode::cubic)
    fail(errc::invalid_argument, n, x.name, "Upsample's mode is nearest or linear, got cubic");
  // Upsample and Resize-10 sample as asymmetric does and floor to the nearest neighbour (the
  // index x / scale that numpy.repeat and Upsample's example give); opset 11 named the modes.
  constexpr std::array<std::string_view, 7> coordinates{
      "half_pixel",           "pytorch_half_pixel",   "align_corners",     "asymmetric",
      "tf_half_pixel_for_nn", "half_pixel_symmetric", "tf_crop_and_resize"};
  const std::string coord =
      n.attrs.get_string("coordinate_transformation_mode", two_inputs ? "asymmetric" : "half_pixel");
  const std::size_t c = pick(n, x.name, "coordinate_transformation_mode", coord, coordinates);
  k.coordinates = static_cast<kernels::resize_coordinates>(c);
  const double extrapolation = n.attrs.get_float("extrapolation_value", 0.0);
  k.extrapolation_value = static_cast<float>(extrapolation);
  if (!is_float(x.type)) {
    // Nearest copies elements; linear and cubic weigh neighbours, which integers cannot hold
    // (ONNX's reference would truncate the weighted sums).
    if (k.mode != kernels::resize_mode::nearest)
      fail(errc::not_supported, n, x.name,
           "mode " + mode + " on " + std::string(to_string(x.type)) + " data: integer and bool data take nearest");
    if (k.coordinates == kernels::resize_coordinates::tf_crop_and_resize) {
      // Written where the crop box leaves x: only a value of x's dtype, as numpy would store it.
      tensor probe(shape{1}, x.type);
      probe.set(0, static_cast<double>(k.extrapolation_value));
      if (probe.get(0) != static_cast<double>(k.extrapolation_value))
        fail(errc::invalid_argument, n, x.name,
             "extrapolation_value " + std::to_string(extrapolation) + " is not a " + std::string(to_string(x.type)) +
                 " value");
    }
  }
  constexpr std::array<std::string_view, 4> roundings{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  k.nearest = static_cast<kernels::nearest_rounding>(
      pick(n, x.name, "nearest_mode", n.attrs.get_string("nearest_mode", two_inputs ? "floor" : "round_prefer_floor"),
           roundings));
  k.cubic_coeff_a = static_cast<float>(n.attrs.get_float("cubic_coeff_a", -0.75));
  const std::int64_t exclude = n.attrs.get_int("exclude_outside", 0);
  if (exclude != 0 && exclude != 1)
    fail(errc::invalid_argument, n, x.name, "exclude_outside must be 0 or 1, got " + std::to_string(exclude));
  k.exclude_outside = exclude == 1;
  // opset 18: antialias widens linear's and cubic's filters when downsampling; the reference
  // refuses it for nearest.
  const std::int64_t antialias = n.attrs.get_int("antialias", 0);
  if (antialias != 0 && antialias != 1)
    fail(errc::invalid_argument, n, x.name, "antialias must be 0 or 1, got " + std::to_string(antialias));
  if (antialias == 1 && k.mode == kernels::resize_mode::nearest)
    fail(errc::invalid_argument, n, x.name, "antialias applies to linear and cubic modes, not nearest");
  k.antialias = antialias == 1;
  constexpr std::array<std::string_view, 3> policies{"stretch", "not_larger", "not_smaller"};
  const std::size_t policy =
      pick(n, x.name, "keep_aspect_ratio_policy", n.attrs.get_string("keep_aspect_ratio_policy", "stretch"), policies);

  // The axes the scales or sizes name (opset 18), each once; every other keeps its extent.
  ints axes;
  if (n.attrs.has("axes")) {
    std::uint32_t seen = 0;
    for (std::int64_t a : n.attrs.get_ints("axes")) {
      const auto d = norm_axis(n, a, rank, x.name);
      if ((seen >> d) & 1u) fail(errc::invalid_argument, n, x.name, "axis " + std::to_string(d) + " is named twice");
      seen |= 1u << d;
      axes.push_back(d);
    }
  } else {
    for (std::size_t d = 0; d < rank; ++d) axes.push_back(static_cast<std::int64_t>(d));
  }
  // tf_crop_and_resize's box: roi holds the starts then the ends, one per axis named (every axis
  // without axes), in x's normalised coordinates; it must be known here. Other modes ignore roi.
  if (k.coordinates == kernels::resize_coordinates::tf_crop_and_resize) {
    if (two_inputs || !given(in, 1))
      fail(errc::invalid_argument, n, x.name, "coordinate_transformation_mode tf_crop_and_resize needs the roi input");
    const value_info& v = *in[1];
    const tensor* t = constants.size() > 1 ? constants[1] : nullptr;
    if (!t || !t->is_host())
      fail(errc::not_supported, n, v.name, "roi must be a constant with data for tf_crop_and_resize");
    if (!is_float(v.type))
      fail(errc::invalid_dtype, n, v.name, "roi must be float, got " + std::string(to_string(v.type)));
    if (v.shape.rank() != 1 || t->elements() != static_cast<std::int64_t>(2 * axes.size()))
      fail(errc::invalid_shape, n, v.name,
           "roi must be 1-D with 2 values per axis (" + std::to_string(2 * axes.size()) + "), got " +
               shape_string(v.shape));
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const double start = t->get(static_cast<std::int64_t>(i));
      const double end = t->get(static_cast<std::int64_t>(i + axes.size()));
      if (!std::isfinite(start) || !std::isfinite(end))
        fail(errc::invalid_argument, n, v.name, "roi of axis " + std::to_string(axes[i]) + " is not finite");
      k.roi_start[static_cast<std::size_t>(axes[i])] = start;
      k.roi_end[static_cast<std::size_t>(axes[i])] = end;
    }
  }
  r.dims = x.shape;
  const bool by_scales = upsample && n.attrs.has("scales") ? true : given(in, scales_at);
  const bool by_sizes = !two_inputs && given(in, sizes_at);
  if (by_scales == by_sizes)
    fail(errc::invalid_argument, n, by_sizes ? in[sizes_at]->name : x.name,
         by_sizes ? "has both scales and sizes (one decides the output shape)" : "needs scales or sizes");
  const auto count_of = [&](std::string_view what, std::string_view name, std::size_t count) {
    if (count != axes.size())
      fail(errc::invalid_argument, n, name,
           std::string(what) + " has " + std::to_string(count) + " values for " + std::to_string(axes.size()) +
               " axes of " + shape_string(x.shape));
  };
  if (by_scales) {
    floats scales;
    std::string_view name = x.name;
    if (upsample && n.attrs.has("scales")) {
      if (given(in, 1)) fail(errc::invalid_argument, n, in[1]->name, "has both the scales input and attribute");
      if (const auto* f = std::get_if<floats>(&n.attrs.items().find("scales")->second)) scales = *f;
      else fail(errc::invalid_argument, n, x.name, "the scales attribute must be a list of floats");
    } else {
      const value_info& v = *in[scales_at];
      name = v.name;
      const tensor* t = constants.size() > scales_at ? constants[scales_at] : nullptr;
      if (!t || !t->is_host())
        fail(errc::not_supported, n, v.name, "scales must be a constant with data (it decides the shape)");
      if (!is_float(v.type))
        fail(errc::invalid_dtype, n, v.name, "scales must be float, got " + std::string(to_string(v.type)));
      if (v.shape.rank() != 1) fail(errc::invalid_shape, n, v.name, "scales must be 1-D, got " + shape_string(v.shape));
      for (std::int64_t i = 0; i < t->elements(); ++i) scales.push_back(t->get(i));
    }
    count_of("scales", name, scales.size());
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const double s = scales[i];
      const auto d = static_cast<std::size_t>(axes[i]);
      if (!std::isfinite(s) || !(s > 0))
        fail(errc::invalid_argument, n, name,
             "scale " + std::to_string(s) + " of axis " + std::to_string(d) + " is not a finite positive number");
      // onnx.ai: output_dimension = floor(input_dimension * scale).
      const double extent = std::floor(static_cast<double>(x.shape[d]) * s);
      if (!(extent < 0x1p62))
        fail(errc::size_overflow, n, name,
             "scale " + std::to_string(s) + " makes axis " + std::to_string(d) + " of " + shape_string(x.shape) +
                 " too large");
      r.dims[d] = static_cast<std::int64_t>(extent);
      k.scales[d] = s;
    }
  } else {
    const ints sizes = *index_input(n, in, constants, sizes_at, "sizes", {dtype::i64});
    const std::string_view name = in[sizes_at]->name;
    count_of("sizes", name, sizes.size());
    for (std::size_t i = 0; i < axes.size(); ++i)
      if (sizes[i] < 0)
        fail(errc::invalid_argument, n, name,
             "size " + std::to_string(sizes[i]) + " of axis " + std::to_string(axes[i]) + " is negative");
    // onnx.ai: scale = size / input extent; not_larger and not_smaller keep one scale for every
    // axis named (the smallest or the largest) and round the extents it gives half up.
    double common = policy == 1 ? HUGE_VAL : 0;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const double s = static_cast<double>(sizes[i]) / static_cast<double>(x.shape[static_cast<std::size_t>(axes[i])]);
      common = policy == 1 ? std::min(common, s) : std::max(common, s);
    }
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto d = static_cast<std::size_t>(axes[i]);
      const auto in_d = static_cast<double>(x.shape[d]);
      if (policy == 0) {
        r.dims[d] = sizes[i];
        k.scales[d] = static_cast<double>(sizes[i]) / in_d;
      } else {
        r.dims[d] = static_cast<std::int64_t>(std::floor(common * in_d + 0.5));
        k.scales[d] = common;
      }
      if (!(k.scales[d] > 0))
        fail(errc::not_supported, n, name,
             "size 0 for axis " + std::to_string(d) + ": a scale of 0, which the coordinate transforms divide by");
    }
  }
  if (two_inputs && k.mode == kernels::resize_mode::nearest && !n.attrs.has("nearest_mode"))
    for (std::size_t d = 0; d < rank; ++d)
      if (k.scales[d] < 1)
        fail(errc::not_supported, n, x.name,
             std::string(upsample ? "Upsample" : "Resize-10") + " nearest downsampling (axis " + std::to_string(d) +
                 "): the opset defines no rounding for it");
  return r;
}

kernels::dft dft_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants,
                      shape& out) {
  const bool stft = n.type == "STFT";
  const value_info& x = need(n, in, 0);
  need_float(n, x);
  const std::size_t r = x.shape.rank();
  if (r < (stft ? 3u : 2u) || (stft && r != 3) || (x.shape[r - 1] != 1 && x.shape[r - 1] != 2))
    fail(errc::invalid_shape, n, x.name,
         std::string(stft ? "signal must be [batch, length, 1 or 2]"
                          : "input must end in 1 (real) or 2 (complex) values") +
             ", got " + shape_string(x.shape));
  // A scalar integer input that decides the shape: a constant, or not_supported saying why.
  const auto scalar = [&](std::size_t i, std::string_view what) -> std::optional<std::int64_t> {
    if (!given(in, i)) return std::nullopt;
    const value_info& v = *in[i];
    if (v.type != dtype::i32 && v.type != dtype::i64)
      fail(errc::invalid_dtype, n, v.name,
           std::string(what) + " must be int32 or int64, got " + std::string(to_string(v.type)));
    if (v.shape.elements() != 1 || v.shape.rank() > 1)
      fail(errc::invalid_shape, n, v.name, std::string(what) + " must be a scalar, got " + shape_string(v.shape));
    const tensor* c = constants.size() > i ? constants[i] : nullptr;
    if (!c || !c->is_host())
      fail(errc::not_supported, n, v.name,
           std::string(what) +
               " is known only at run time, and it decides the output's shape (npurt's shapes are static)");
    return c->get_int(0);
  };
  const auto flag = [&](std::string_view name, std::int64_t fallback) {
    const std::int64_t v = n.attrs.get_int(name, fallback);
    if (v != 0 && v != 1)
      fail(errc::invalid_argument, n, x.name, std::string(name) + " must be 0 or 1, got " + std::to_string(v));
    return v == 1;
  };
  kernels::dft k{};
  // onesided defaults to 1 in STFT, 0 in DFT (onnx.ai).
  k.onesided = flag("onesided", stft ? 1 : 0);
  if (stft) {
    const std::int64_t step = scalar(1, "frame_step").value_or(0);
    if (!given(in, 1)) fail(errc::invalid_argument, n, x.name, "frame_step is required");
    if (step < 1)
      fail(errc::invalid_argument, n, in[1]->name, "frame_step " + std::to_string(step) + " must be positive");
    std::optional<std::int64_t> length = scalar(3, "frame_length");
    if (given(in, 2)) {
      const value_info& w = *in[2];
      same_type(n, x, w);
      if (w.shape.rank() != 1 || (length && w.shape[0] != *length))
        fail(errc::invalid_shape, n, w.name,
             "window must be 1-D" + (length ? " of frame_length " + std::to_string(*length) : std::string()) +
                 ", got " + shape_string(w.shape));
      length = w.shape[0];
    }
    const std::int64_t len = length.value_or(x.shape[1]);
    if (len < 1 || len > x.shape[1])
      fail(errc::invalid_argument, n, given(in, 3) ? in[3]->name : x.name,
           "frame_length " + std::to_string(len) + " must be in [1, " + std::to_string(x.shape[1]) +
               "], the signal's length");
    k.length = len;
    k.frame_step = step;
    k.axis = 1;
    out = shape{x.shape[0], (x.shape[1] - len) / step + 1, k.onesided ? len / 2 + 1 : len, 2};
    return k;
  }
  // The axis: opset 20's input, else opset 17's attribute (the importer sets opset 20's default).
  std::int64_t axis = n.attrs.get_int("axis", 1);
  if (auto a = scalar(2, "axis")) {
    if (n.attrs.has("axis"))
      fail(errc::invalid_argument, n, in[2]->name, "has both the axis input and the axis attribute");
    axis = *a;
  }
  const auto rank = static_cast<std::int64_t>(r);
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank - 2 || axis == -1)
    fail(errc::invalid_argument, n, given(in, 2) ? in[2]->name : x.name,
         "axis " + std::to_string(axis) + " is not a signal axis of " + shape_string(x.shape) + " ([-" +
             std::to_string(rank) + ", -2] or [0, " + std::to_string(rank - 2) + "])");
  const std::int64_t len = scalar(1, "dft_length").value_or(x.shape[static_cast<std::size_t>(a)]);
  if (len < 1) fail(errc::invalid_argument, n, in[1]->name, "dft_length " + std::to_string(len) + " must be positive");
  k.length = len;
  k.axis = static_cast<std::int32_t>(a);
  k.inverse = flag("inverse", 0);
  out = x.shape;
  out[static_cast<std::size_t>(a)] = k.onesided ? len / 2 + 1 : len;
  out[r - 1] = 2;
  return k;
}

kernels::grid_sample grid_sample_spec(const node& n, std::span<const value_info* const> in, shape& out) {
  const value_info& x = need(n, in, 0);
  const value_info& grid = need(n, in, 1);
  need_float(n, x);
  if (!is_float(grid.type))
    fail(errc::invalid_dtype, n, grid.name, "grid must be float, got " + std::string(to_string(grid.type)));
  const std::size_t rank = x.shape.rank();
  if (rank < 3)
    fail(errc::invalid_shape, n, x.name,
         "X must be [N, C, D1, ...] with a spatial dimension or more, got " + shape_string(x.shape));
  // onnx.ai: grid [N, D1_out, ..., Dr_out, r] for X [N, C, D1, ..., Dr]; Y [N, C, D1_out, ..., Dr_out].
  const auto r = static_cast<std::int64_t>(rank - 2);
  if (grid.shape.rank() != rank || grid.shape[0] != x.shape[0] || grid.shape[rank - 1] != r)
    fail(errc::invalid_shape, n, grid.name,
         "grid must be [N, ..., " + std::to_string(r) + "] of rank " + std::to_string(rank) + " with N = " +
             std::to_string(x.shape[0]) + " for X " + shape_string(x.shape) + ", got " + shape_string(grid.shape));
  out = shape{x.shape[0], x.shape[1]};
  for (std::size_t d = 1; d + 1 < rank; ++d) out.push_back(grid.shape[d]);
  // Opset 16 spells linear and cubic bilinear and bicubic; opset 20 renamed them for N-D.
  constexpr std::array<std::string_view, 5> modes{"bilinear", "linear", "nearest", "bicubic", "cubic"};
  constexpr kernels::grid_sample_mode mode_of[] = {kernels::grid_sample_mode::linear, kernels::grid_sample_mode::linear,
                                                   kernels::grid_sample_mode::nearest, kernels::grid_sample_mode::cubic,
                                                   kernels::grid_sample_mode::cubic};
  constexpr std::array<std::string_view, 3> paddings{"zeros", "border", "reflection"};
  kernels::grid_sample k{};
  k.mode = mode_of[pick(n, x.name, "mode", n.attrs.get_string("mode", "bilinear"), modes)];
  k.padding = static_cast<kernels::grid_padding>(
      pick(n, x.name, "padding_mode", n.attrs.get_string("padding_mode", "zeros"), paddings));
  const std::int64_t align = n.attrs.get_int("align_corners", 0);
  if (align != 0 && align != 1)
    fail(errc::invalid_argument, n, x.name, "align_corners must be 0 or 1, got " + std::to_string(align));
  k.align_corners = align == 1;
  return k;
}

kernels::roi_align roi_align_spec(const node& n, std::span<const value_info* const> in, shape& out) {
  // onnx.ai RoiAlign: X [N, C, H, W], rois [num_rois, 4] of X's float type, batch_indices
  // [num_rois] int64; Y [num_rois, C, output_height, output_width].
  const value_info& x = need(n, in, 0);
  const value_info& rois = need(n, in, 1);
  const value_info& batch = need(n, in, 2);
  need_float(n, x);
  if (rois.type != x.type)
    fail(errc::invalid_dtype, n, rois.name,
         "rois must be X's " + std::string(to_string(x.type)) + ", got " + std::string(to_string(rois.type)));
  if (batch.type != dtype::i64 && batch.type != dtype::i32)
    fail(errc::invalid_dtype, n, batch.name, "batch_indices must be int64, got " + std::string(to_string(batch.type)));
  if (x.shape.rank() != 4 || x.shape[2] < 1 || x.shape[3] < 1)
    fail(errc::invalid_shape, n, x.name, "X must be [N, C, H, W] with H, W >= 1, got " + shape_string(x.shape));
  if (rois.shape.rank() != 2 || rois.shape[1] != 4)
    fail(errc::invalid_shape, n, rois.name, "rois must be [num_rois, 4], got " + shape_string(rois.shape));
  if (batch.shape.rank() != 1 || batch.shape[0] != rois.shape[0])
    fail(errc::invalid_shape, n, batch.name,
         "batch_indices must be [" + std::to_string(rois.shape[0]) + "] (one per ROI), got " +
             shape_string(batch.shape));
  constexpr std::int64_t i32_max = std::numeric_limits<std::int32_t>::max();
  const auto positive = [&](const char* attr) {
    const std::int64_t v = n.attrs.get_int(attr, 1);
    if (v < 1 || v > i32_max)
      fail(errc::invalid_argument, n, x.name,
           std::string(attr) + " must be in [1, 2^31 - 1], got " + std::to_string(v));
    return v;
  };
  const std::int64_t oh = positive("output_height"), ow = positive("output_width");
  std::int64_t elements = rois.shape[0];
  for (const std::int64_t d : {x.shape[1], oh, ow})
    if (__builtin_mul_overflow(elements, d, &elements))
      fail(errc::size_overflow, n, x.name, "Y's element count (num_rois x C x output_height x output_width) overflows");
  out = shape{rois.shape[0], x.shape[1], oh, ow};
  kernels::roi_align k{};
  const std::int64_t ratio = n.attrs.get_int("sampling_ratio", 0);
  if (ratio < 0 || ratio > i32_max)
    fail(errc::invalid_argument, n, x.name,
         "sampling_ratio must be in [0, 2^31 - 1] (0: adaptive), got " + std::to_string(ratio));
  k.sampling_ratio = static_cast<std::int32_t>(ratio);
  const double scale = n.attrs.get_float("spatial_scale", 1.0);
  if (!std::isfinite(scale) || !std::isfinite(static_cast<float>(scale)))
    fail(errc::invalid_argument, n, x.name, "spatial_scale must be finite, got " + std::to_string(scale));
  k.spatial_scale = static_cast<float>(scale);
  constexpr std::array<std::string_view, 2> modes{"avg", "max"};
  k.max_mode = pick(n, x.name, "mode", n.attrs.get_string("mode", "avg"), modes) == 1;
  // Opset 16's default; the importer sets output_half_pixel for opset 10, which had no attribute
  // and behaved so.
  constexpr std::array<std::string_view, 2> transforms{"half_pixel", "output_half_pixel"};
  k.half_pixel = pick(n, x.name, "coordinate_transformation_mode",
                      n.attrs.get_string("coordinate_transformation_mode", "half_pixel"), transforms) == 0;
  return k;
}

kernels::pool2d pool_spec(const node& n, std::span<const value_info* const> in, shape& out) {
  const value_info& x = need(n, in, 0);
  const std::string& t = n.type;
  const bool max = t == "MaxPool";
  // onnx.ai: MaxPool takes int8 and uint8 too (opset 12 on); AveragePool floats only.
  if (!(is_float(x.type) || (max && (x.type == dtype::i8 || x.type == dtype::u8))))
    fail(errc::not_supported, n, x.name,
         "needs a floating-point" + std::string(max ? ", int8 or uint8" : "") + " tensor, got " +
             std::string(to_string(x.type)));
  const std::size_t rank = x.shape.rank();
  if (rank < 3)
    fail(errc::invalid_shape, n, x.name,
         "X must be [N, C, D1, ...] with a spatial dimension, got " + shape_string(x.shape));
  if (rank > 5) fail(errc::not_supported, n, x.name, "only 1-, 2- and 3-D pooling, got X " + shape_string(x.shape));
  const std::size_t r = rank - 2;
  constexpr std::int64_t i32_max = std::numeric_limits<std::int32_t>::max();
  kernels::pool2d k{};
  k.mode = max ? kernels::pool_mode::max : kernels::pool_mode::avg;
  out = shape{x.shape[0], x.shape[1]};
  if (t == "GlobalAveragePool") {
    k.mode = kernels::pool_mode::global_avg;
    for (std::size_t i = 0; i < r; ++i) out.push_back(1);
    return k;
  }
  // One value per spatial dimension (pads: two), each in [lo, 2^31 - 1].
  const auto per_dim = [&](std::string_view attr, std::size_t count, std::int64_t def, std::int64_t lo) {
    const ints v = n.attrs.has(attr) ? n.attrs.get_ints(attr) : ints(count, def);
    if (v.size() != count)
      fail(errc::invalid_argument, n, x.name,
           std::string(attr) + " must have " + std::to_string(count) + " values for X " + shape_string(x.shape) +
               ", got " + std::to_string(v.size()));
    for (const std::int64_t e : v)
      if (e < lo || e > i32_max)
        fail(errc::invalid_argument, n, x.name,
             std::string(attr) + " must be in [" + std::to_string(lo) + ", 2^31 - 1], got " + std::to_string(e));
    return v;
  };
  if (!n.attrs.has("kernel_shape")) fail(errc::invalid_argument, n, x.name, "kernel_shape is required");
  const ints ks = per_dim("kernel_shape", r, 1, 1);
  const ints st = per_dim("strides", r, 1, 1);
  const ints dil = per_dim("dilations", r, 1, 1);
  const auto flag = [&](std::string_view attr) {
    const std::int64_t v = n.attrs.get_int(attr, 0);
    if (v != 0 && v != 1)
      fail(errc::invalid_argument, n, x.name, std::string(attr) + " must be 0 or 1, got " + std::to_string(v));
    return v == 1;
  };
  k.ceil_mode = flag("ceil_mode");
  if (t == "AveragePool") k.count_include_pad = flag("count_include_pad");
  if (t == "MaxPool") k.column_major = flag("storage_order");
  const std::string auto_pad = n.attrs.get_string("auto_pad", "NOTSET");
  ints pads(2 * r, 0);
  if (auto_pad == "NOTSET") {
    pads = per_dim("pads", 2 * r, 0, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // The output is ceil(in / stride); the pads that take, odd totals with the extra one at the
    // end (SAME_UPPER) or the beginning (SAME_LOWER); onnx.ai MaxPool, auto_pad.
    for (std::size_t i = 0; i < r; ++i) {
      const std::int64_t in_d = x.shape[i + 2], o = (in_d + st[i] - 1) / st[i];
      const std::int64_t total = std::max<std::int64_t>(0, (o - 1) * st[i] + dil[i] * (ks[i] - 1) + 1 - in_d);
      const std::int64_t small = total / 2, large = total - small;
      pads[i] = auto_pad == "SAME_UPPER" ? small : large;
      pads[i + r] = auto_pad == "SAME_UPPER" ? large : small;
    }
    k.ceil_mode = false;  // the output extent is ceil(in / stride) already
  } else if (auto_pad == "VALID") {
    k.ceil_mode = false;
  } else {
    fail(errc::invalid_argument, n, x.name,
         "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + auto_pad + "'");
  }
  for (std::size_t i = 0; i < r; ++i) {
    if (pads[i] > i32_max || pads[i + r] > i32_max) fail(errc::not_supported, n, x.name, "a pad above 2^31 - 1");
    k.window[i] = static_cast<std::int32_t>(ks[i]);
    k.stride[i] = static_cast<std::int32_t>(st[i]);
    k.dilation[i] = static_cast<std::int32_t>(dil[i]);
    k.pad[i] = static_cast<std::int32_t>(pads[i]);
    k.pad_end[i] = static_cast<std::int32_t>(pads[i + r]);
    // onnx.ai MaxPool: floor (or ceil) of (in + pads - dilation * (kernel - 1) - 1) / stride + 1,
    // the last window starting inside the input or its leading pad.
    const std::int64_t in_d = x.shape[i + 2], eff = dil[i] * (ks[i] - 1) + 1;
    const std::int64_t span = in_d + pads[i] + pads[i + r] - eff;
    if (span < 0)
      fail(errc::invalid_shape, n, x.name,
           "input " + shape_string(x.shape) + " with its pads is smaller than the window (" + std::to_string(eff) +
               " along spatial dimension " + std::to_string(i) + ")");
    std::int64_t o = (k.ceil_mode ? span + st[i] - 1 : span) / st[i] + 1;
    if (k.ceil_mode && (o - 1) * st[i] >= in_d + pads[i]) --o;
    out.push_back(o);
  }
  return k;
}

kernels::pool2d_backward pool_backward_spec(const node& n, std::span<const value_info* const> in, shape& y) {
  const value_info& dy = need(n, in, 0);
  const value_info& x = need(n, in, 1);
  // The forward operator's geometry, from X with the same attributes.
  node fwd = n;
  fwd.type = n.type.substr(0, n.type.size() - 4);  // MaxPool, AveragePool, GlobalAveragePool
  fwd.inputs = {n.inputs[1]};
  const std::array<const value_info*, 1> fin{&x};
  const kernels::pool2d f = pool_spec(fwd, fin, y);
  if (!(y == dy.shape))
    fail(errc::invalid_shape, n, dy.name,
         "dY " + shape_string(dy.shape) + " is not the shape of " + fwd.type + "'s output " + shape_string(y));
  if (!is_float(x.type))
    fail(errc::not_supported, n, x.name, "needs a floating-point X, got " + std::string(to_string(x.type)));
  // The gradient kernel is 2-D, undilated, with the same pad at both ends of a dimension, each
  // at most half the window (PyTorch's limit: every window covers part of the input). ceil_mode
  // and count_include_pad are the forward's, as PyTorch's avg_pool2d and max_pool2d backward
  // take them: the kernel divides by the forward's divisor.
  const auto refuse = [&](const std::string& what) {
    fail(errc::not_supported, n, x.name, what + " (the gradient kernel pools 2-D only)");
  };
  if (x.shape.rank() != 4) refuse("X " + shape_string(x.shape) + " is not [N, C, H, W]");
  kernels::pool2d_backward k{};
  k.mode = f.mode;
  if (f.mode == kernels::pool_mode::global_avg) return k;
  for (std::size_t i = 0; i < 2; ++i) {
    if (f.dilation[i] != 1) refuse("dilations other than 1");
    if (end_pad(f, i) != f.pad[i]) refuse("different pads before and after a dimension");
    if (2 * std::int64_t{f.pad[i]} > f.window[i]) refuse("a pad above half the window");
  }
  if (f.column_major) refuse("storage_order 1");
  k.ceil_mode = f.ceil_mode;
  k.count_include_pad = f.count_include_pad;
  for (std::size_t i = 0; i < 2; ++i) {
    k.window[i] = f.window[i];
    k.stride[i] = f.stride[i];
    k.pad[i] = f.pad[i];
  }
  return k;
}

kernels::quantize quantize_spec(const node& n, std::span<const value_info* const> in) {
  const bool quant = n.type == "QuantizeLinear";
  const value_info& x = need(n, in, 0);
  const value_info& scale = need(n, in, 1);
  const value_info* zp = given(in, 2) ? in[2] : nullptr;
  kernels::quantize k{};
  k.fn = quant ? kernels::quantize_fn::quantize : kernels::quantize_fn::dequantize;
  auto type_name = [](dtype d) { return std::string(to_string(d)); };
  if (quant && !is_float(x.type))
    fail(errc::not_supported, n, x.name, "x must be float, float16 or bfloat16, got " + type_name(x.type));
  if (!quant && x.type != dtype::i8 && x.type != dtype::u8 && x.type != dtype::i32)
    fail(errc::not_supported, n, x.name, "x must be int8, uint8 or int32, got " + type_name(x.type));
  if (!is_float(scale.type))
    fail(errc::invalid_dtype, n, scale.name, "scale must be float, got " + type_name(scale.type));
  if (n.attrs.get_int("block_size", 0) != 0)
    fail(errc::not_supported, n, scale.name,
         "blocked quantization (block_size " + std::to_string(n.attrs.get_int("block_size", 0)) + ") is not supported");
  if (n.attrs.get_int("precision", 0) != 0)
    fail(errc::not_supported, n, x.name, "precision (a division type other than x's) is not supported");
  // The integer type: zero_point's, else output_dtype (opset 21), else uint8 (onnx.ai).
  dtype ints = quant ? dtype::u8 : x.type;
  const std::int64_t out_code = n.attrs.get_int("output_dtype", 0);
  if (quant && out_code != 0) {
    const auto d = dtype_from_onnx(out_code);
    if (!d || (*d != dtype::i8 && *d != dtype::u8))
      fail(errc::not_supported, n, n.outputs.empty() ? std::string() : n.outputs[0],
           "output_dtype " + std::to_string(out_code) + " is not int8 or uint8");
    ints = *d;
  }
  if (zp) {
    if (zp->type != dtype::i8 && zp->type != dtype::u8 && (quant || zp->type != dtype::i32))
      fail(errc::not_supported, n, zp->name,
           "zero_point must be int8 or uint8" + std::string(quant ? "" : " or int32") + ", got " + type_name(zp->type));
    if (zp->type != ints && (!quant || out_code != 0))
      fail(errc::invalid_dtype, n, zp->name,
           "zero_point's dtype " + type_name(zp->type) + " does not match " + (quant ? "output_dtype (" : "x's (") +
               type_name(ints) + ")");
    ints = zp->type;
  }
  // Per tensor: one value (a scalar or any shape of one element); per axis: 1-D along axis.
  const std::int64_t count = scale.shape.elements();
  if (count != 1) {
    if (scale.shape.rank() != 1)
      fail(errc::not_supported, n, scale.name,
           "scale must be a scalar or 1-D (per axis), got " + shape_string(scale.shape));
    const std::int64_t axis = norm_axis(n, n.attrs.get_int("axis", 1), x.shape.rank(), x.name);
    if (x.shape[static_cast<std::size_t>(axis)] != count)
      fail(errc::invalid_shape, n, scale.name,
           "scale has " + std::to_string(count) + " values for axis " + std::to_string(axis) + " of x " +
               shape_string(x.shape));
    k.axis = static_cast<std::int32_t>(axis);
  }
  if (zp && !(zp->shape == scale.shape))
    fail(errc::invalid_shape, n, zp->name,
         "zero_point " + shape_string(zp->shape) + " must have scale's shape " + shape_string(scale.shape));
  k.y.type = quant ? ints : scale.type;
  return k;
}

// A recurrent node's activation functions (f, g, h per direction) and their parameters.
struct recurrent_functions {
  std::array<kernels::rnn_activation, 6> fn{};
  std::vector<double> params;  // 6 per direction; empty when the node gives no parameters
};

recurrent_functions recurrent_functions_of(const node& n, kernels::rnn_cell c, std::int64_t dirs) {
  using kernels::rnn_activation;
  using kernels::rnn_cell;
  const std::string_view x_name = n.inputs.empty() ? std::string_view{} : std::string_view(n.inputs[0]);
  const std::string cell = c == rnn_cell::rnn ? "RNN" : c == rnn_cell::gru ? "GRU" : "LSTM";
  recurrent_functions out;
  // activations: ONNX's STRINGS, held as one string of comma-separated names (the graph's
  // attributes have no list of strings); names compare without case, as onnxruntime's do.
  const std::size_t per_dir = c == rnn_cell::rnn ? 1 : c == rnn_cell::gru ? 2 : 3;
  std::vector<std::string> names;
  const std::string list = n.attrs.get_string("activations", "");
  for (std::size_t at = 0; !list.empty() && at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    names.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (names.empty())
    for (std::int64_t d = 0; d < dirs; ++d) {
      if (c == rnn_cell::rnn) names.emplace_back("Tanh");
      else names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
      if (c == rnn_cell::gru) names.pop_back();
    }
  if (names.size() != per_dir * static_cast<std::size_t>(dirs))
    fail(errc::invalid_argument, n, x_name,
         "activations lists " + std::to_string(names.size()) + " functions; a " + cell + " takes " +
             std::to_string(per_dir) + " per direction, " + std::to_string(per_dir * static_cast<std::size_t>(dirs)) +
             " here");
  struct known {
    std::string_view name;
    rnn_activation fn;
    double alpha, beta;  // the ONNX operator's defaults (the kernel's when no parameters are given)
  };
  // onnx.ai's RNN page lists the functions and their formulas; Affine (alpha * x + beta) and
  // ScaledTanh (alpha * tanh(beta * x)) default to the identity and tanh, as the experimental
  // operators of those names did. Functions without parameters ignore theirs.
  const known table[] = {{"sigmoid", rnn_activation::sigmoid, 1, 1},
                         {"tanh", rnn_activation::tanh, 1, 1},
                         {"relu", rnn_activation::relu, 1, 1},
                         {"softsign", rnn_activation::softsign, 1, 1},
                         {"softplus", rnn_activation::softplus, 1, 1},
                         {"leakyrelu", rnn_activation::leaky_relu, 0.01, 0},
                         {"thresholdedrelu", rnn_activation::thresholded_relu, 1.0, 1},
                         {"hardsigmoid", rnn_activation::hard_sigmoid, 0.2, 0.5},
                         {"elu", rnn_activation::elu, 1.0, 1},
                         {"affine", rnn_activation::affine, 1.0, 0.0},
                         {"scaledtanh", rnn_activation::scaled_tanh, 1.0, 1.0}};
  const auto params = [&](const char* attr) {
    const auto it = n.attrs.items().find(attr);
    if (it == n.attrs.items().end()) return floats{};
    if (const auto* f = std::get_if<floats>(&it->second)) return *f;
    if (const auto* d = std::get_if<double>(&it->second)) return floats{*d};
    fail(errc::invalid_argument, n, x_name, std::string(attr) + " must be a list of floats");
  };
  const floats alphas = params("activation_alpha"), betas = params("activation_beta");
  for (const auto& [given, attr] : {std::pair{&alphas, "activation_alpha"}, std::pair{&betas, "activation_beta"}}) {
    if (given->size() > names.size())
      fail(errc::invalid_argument, n, x_name,
           std::string(attr) + " has " + std::to_string(given->size()) + " values for " + std::to_string(names.size()) +
               " activation functions");
    for (const double v : *given)
      if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v)))
        fail(errc::invalid_argument, n, x_name, std::string(attr) + " holds " + std::to_string(v) + ": not finite");
  }
  const bool with_params = n.attrs.has("activation_alpha") || n.attrs.has("activation_beta");
  if (with_params) out.params.assign(static_cast<std::size_t>(dirs) * 6, 0.0);
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string lower = names[i];
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const known* f = nullptr;
    for (const auto& e : table)
      if (e.name == lower) f = &e;
    if (!f)
      fail(errc::invalid_argument, n, x_name,
           "activation '" + names[i] +
               "' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
               "Softsign, Softplus");
    out.fn[i] = f->fn;
    // The reference (onnx/reference/ops/op_rnn.py) consumes activation_alpha[i] and
    // activation_beta[i] for function i; a shorter list leaves the operator's default.
    if (with_params) {
      const std::size_t d = i / per_dir, slot = i % per_dir;
      out.params[d * 6 + 2 * slot] = i < alphas.size() ? alphas[i] : f->alpha;
      out.params[d * 6 + 2 * slot + 1] = i < betas.size() ? betas[i] : f->beta;
    }
  }
  return out;
}

std::vector<double> recurrent_activation_params(const node& n, std::int64_t dirs) {
  const std::string cell = n.attrs.get_string("cell", "");
  constexpr std::array<std::string_view, 3> cells{"RNN", "GRU", "LSTM"};
  return recurrent_functions_of(n, static_cast<kernels::rnn_cell>(pick(n, {}, "cell", cell, cells)), dirs).params;
}

recurrent_layer recurrent_spec(const node& n, std::span<const value_info* const> in) {
  using kernels::rnn_activation;
  using kernels::rnn_cell;
  recurrent_layer out;
  kernels::recurrent& k = out.op;
  const std::string cell = n.attrs.get_string("cell", "");
  constexpr std::array<std::string_view, 3> cells{"RNN", "GRU", "LSTM"};
  k.cell = static_cast<rnn_cell>(pick(n, {}, "cell", cell, cells));
  const bool lstm = k.cell == rnn_cell::lstm;
  const value_info& x = need(n, in, 0);
  need_float(n, x);
  const value_info& w = need(n, in, 1);
  const value_info& r = need(n, in, 2);
  same_type(n, x, w);
  same_type(n, x, r);
  const std::int64_t layout = n.attrs.get_int("layout", 0);
  if (layout != 0 && layout != 1)
    fail(errc::invalid_argument, n, x.name, "layout must be 0 or 1, got " + std::to_string(layout));
  k.batch_major = layout == 1;
  constexpr std::array<std::string_view, 3> directions{"forward", "reverse", "bidirectional"};
  k.direction = static_cast<kernels::rnn_direction>(
      pick(n, x.name, "direction", n.attrs.get_string("direction", "forward"), directions));
  const std::int64_t dirs = k.direction == kernels::rnn_direction::bidirectional ? 2 : 1;
  if (x.shape.rank() != 3)
    fail(errc::invalid_shape, n, x.name,
         std::string("X must be ") +
             (k.batch_major ? "[batch_size, seq_length, input_size]" : "[seq_length, batch_size, input_size]") +
             ", got " + shape_string(x.shape));
  const std::int64_t seq = x.shape[k.batch_major ? 1 : 0], batch = x.shape[k.batch_major ? 0 : 1], input = x.shape[2];
  const std::int64_t gates = k.cell == rnn_cell::rnn ? 1 : k.cell == rnn_cell::gru ? 3 : 4;
  if (r.shape.rank() != 3)
    fail(errc::invalid_shape, n, r.name,
         "R must be [num_directions, gates * hidden_size, hidden_size], got " + shape_string(r.shape));
  // hidden_size is R's last dimension: compared before any product is formed from it, and
  // bounded so that 11 * hidden (an LSTM's B and P) cannot overflow.
  const std::int64_t hidden = r.shape[2];
  if (const std::int64_t given = n.attrs.get_int("hidden_size", hidden); given != hidden)
    fail(errc::invalid_shape, n, r.name,
         "hidden_size " + std::to_string(given) + " is not R's last dimension, " + std::to_string(hidden));
  if (hidden > (std::int64_t{1} << 32) || input > (std::int64_t{1} << 32))
    fail(errc::invalid_shape, n, r.name, "hidden_size and input_size must be at most 2^32");
  const auto expect = [&](const value_info& v, const char* what, const shape& want) {
    if (!(v.shape == want))
      fail(errc::invalid_shape, n, v.name,
           std::string(what) + " must be " + shape_string(want) + ", got " + shape_string(v.shape));
  };
  expect(r, "R", {dirs, gates * hidden, hidden});
  expect(w, "W", {dirs, gates * hidden, input});
  if (in.size() > 3 && in[3]) {
    const value_info& b = *in[3];
    same_type(n, x, b);
    const std::int64_t extra = n.attrs.get_int("activation_params", 0) == 1 ? kernels::recurrent::param_columns : 0;
    const shape plain{dirs, 2 * gates * hidden + extra};
    if (!(b.shape == plain) && !(lstm && b.shape == shape{dirs, 2 * gates * hidden + 3 * hidden + extra}))
      expect(b, extra ? "B (with the activation parameters after it)" : "B", plain);
  }
  if (in.size() > 4 && in[4]) {
    const value_info& l = *in[4];
    if (l.type != dtype::i32)
      fail(errc::invalid_dtype, n, l.name, "sequence_lens must be int32, got " + std::string(to_string(l.type)));
    expect(l, "sequence_lens", {batch});
  }
  out.state = k.batch_major ? shape{batch, dirs, hidden} : shape{dirs, batch, hidden};
  out.y = k.batch_major ? shape{batch, seq, dirs, hidden} : shape{seq, dirs, batch, hidden};
  if (in.size() > 5 && in[5]) {
    same_type(n, x, *in[5]);
    expect(*in[5], "initial_h", out.state);
    k.options |= kernels::recurrent::initial_h;
  }
  if (in.size() > 6 && in[6]) {
    if (!lstm) fail(errc::invalid_argument, n, in[6]->name, "initial_c is an LSTM's input");
    same_type(n, x, *in[6]);
    expect(*in[6], "initial_c", out.state);
    k.options |= kernels::recurrent::initial_c;
  }
  const double clip = n.attrs.get_float("clip", std::numeric_limits<double>::infinity());
  if (!(clip > 0)) fail(errc::invalid_argument, n, x.name, "clip must be positive, got " + std::to_string(clip));
  k.clip = static_cast<float>(clip);
  const std::int64_t forget = n.attrs.get_int("input_forget", 0), lbr = n.attrs.get_int("linear_before_reset", 0);
  if (forget != 0 && forget != 1)
    fail(errc::invalid_argument, n, x.name, "input_forget must be 0 or 1, got " + std::to_string(forget));
  if (forget && lstm) k.options |= kernels::recurrent::input_forget;
  if (lbr && k.cell == rnn_cell::gru) k.options |= kernels::recurrent::linear_before_reset;
  const recurrent_functions fns = recurrent_functions_of(n, k.cell, dirs);
  k.activations = fns.fn;
  if (n.attrs.get_int("activation_params", 0) == 1) k.options |= kernels::recurrent::activation_params;
  need_nonempty(n, n.outputs.empty() ? std::string_view{} : std::string_view(n.outputs[0]), out.y);
  return out;
}

}  // namespace graph_ops

// ---- shape inference ----

// Conv's and ConvTranspose's input and weight: floating, one dtype, a 2-D (rank-4) input.
void check_conv_operands(const node& n, const value_info& x, const value_info& w, std::string_view what) {
  need_float(n, x);
  same_type(n, x, w);
  if (x.shape.rank() != 4)
    fail(errc::not_supported, n, x.name,
         "only 2-D " + std::string(what) + " (rank-4 input) is supported, got " + shape_string(x.shape));
}

// The optional bias input: one value per output channel, of the input's dtype.
void check_conv_bias(const node& n, std::span<const value_info* const> in, const value_info& x, std::int64_t channels) {
  if (in.size() < 3 || !in[2]) return;
  const auto& b = *in[2];
  same_type(n, x, b);
  if (b.shape.rank() != 1 || b.shape[0] != channels)
    fail(errc::invalid_shape, n, b.name,
         "bias must be [" + std::to_string(channels) + "], got " + shape_string(b.shape));
}

namespace {

// Constant indices (Gather's, GatherElements', the scatters', GatherND's) are checked when the node
// is added; indices fed at run time fail the kernel that reads them. An index tuple of `per_tuple`
// values (ScatterND's and GatherND's last dimension) addresses axes first, first + 1, ...; a
// single index addresses `first`.
void check_constant_indices(const node& n, const value_info& data, const value_info& indices, std::size_t first,
                            std::span<const tensor* const> constants, std::int64_t per_tuple = 1) {
  const tensor* c = constants.size() > 1 ? constants[1] : nullptr;
  if (!c || !c->is_host()) return;
  for (std::int64_t k = 0; k < c->elements(); ++k) {
    const std::size_t axis = first + static_cast<std::size_t>(k % per_tuple);
    const std::int64_t dim = data.shape[axis];
    if (const std::int64_t v = c->get_int(k); v < -dim || v >= dim)
      fail(errc::invalid_argument, n, indices.name,
           "index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) + " of " +
               shape_string(data.shape) + " ([" + std::to_string(-dim) + ", " + std::to_string(dim - 1) + "])");
  }
}

void need_index_dtype(const node& n, const value_info& indices) {
  if (indices.type != dtype::i32 && indices.type != dtype::i64)
    fail(errc::invalid_dtype, n, indices.name,
         "indices must be int32 or int64, got " + std::string(to_string(indices.type)));
}

// GatherElements' and ScatterElements' indices: data's rank and, off the axis, extents no larger
// than data's (onnx.ai).
void need_elements_indices(const node& n, const value_info& data, const value_info& indices, std::size_t axis) {
  bool fits = indices.shape.rank() == data.shape.rank();
  for (std::size_t d = 0; fits && d < data.shape.rank(); ++d) fits = d == axis || indices.shape[d] <= data.shape[d];
  if (!fits)
    fail(errc::invalid_shape, n, indices.name,
         "indices " + shape_string(indices.shape) + " must have data's rank and, off axis " + std::to_string(axis) +
             ", extents no larger than data's " + shape_string(data.shape));
}

// The last dimension of ScatterND's and GatherND's indices: k, in [1, data's rank - batch_dims].
std::int64_t index_depth(const node& n, const value_info& data, const value_info& indices, std::size_t batch) {
  if (indices.shape.rank() == 0)
    fail(errc::invalid_shape, n, indices.name, "indices must have rank 1 or more, got a scalar");
  const std::int64_t k = indices.shape[indices.shape.rank() - 1];
  const auto most = static_cast<std::int64_t>(data.shape.rank() - batch);
  if (k < 1 || k > most)
    fail(errc::invalid_shape, n, indices.name,
         "indices " + shape_string(indices.shape) + ": the last dimension (an index tuple's length) must be in [1, " +
             std::to_string(most) + "] for data " + shape_string(data.shape));
  return k;
}

// Conv's and ConvInteger's output [N, M, Ho, Wo] for x [N, C, H, W] and w [M, C/group, kH, kW],
// the attributes checked.
shape conv_output(const node& n, const value_info& x, const value_info& w) {
  const std::int64_t g = n.attrs.get_int("group", 1);
  // x.shape[1] / g rather than w.shape[1] * g: a hostile group times W's channels can overflow.
  if (g < 1 || x.shape[1] % g || w.shape[0] % g || w.shape[1] != x.shape[1] / g)
    fail(errc::invalid_shape, n, w.name,
         "weight " + shape_string(w.shape) + " does not fit input " + shape_string(x.shape) + " with group " +
             std::to_string(g));
  const ints ks = n.attrs.get_ints("kernel_shape", {w.shape[2], w.shape[3]});
  if (ks.size() != 2 || ks[0] != w.shape[2] || ks[1] != w.shape[3])
    fail(errc::invalid_shape, n, w.name, "kernel_shape does not match the weight " + shape_string(w.shape));
  const spatial s = read_spatial(n, x, {w.shape[2], w.shape[3]});
  return {x.shape[0], w.shape[0], window_out(n, x, x.shape[2], s.kernel[0], s.stride[0], s.pad[0], s.dilation[0]),
          window_out(n, x, x.shape[3], s.kernel[1], s.stride[1], s.pad[1], s.dilation[1])};
}

// MatMulInteger's and ConvInteger's operands: int8 or uint8, each its own (onnx.ai T1, T2).
void need_int8_or_uint8(const node& n, const value_info& v) {
  if (v.type != dtype::i8 && v.type != dtype::u8)
    fail(errc::not_supported, n, v.name, "must be int8 or uint8, got " + std::string(to_string(v.type)));
}

// An optional zero point of MatMulInteger or ConvInteger (input i): of its operand's dtype, and one
// value or a shape `ok` accepts (`what` says which).
void check_zero_point(const node& n, std::span<const value_info* const> in, std::size_t i, const value_info& operand,
                      const std::function<bool(const shape&)>& ok, std::string_view what) {
  if (!given(in, i)) return;
  const value_info& z = *in[i];
  same_type(n, operand, z);
  if (z.shape.elements() != 1 && !ok(z.shape))
    fail(errc::invalid_shape, n, z.name,
         "zero point " + shape_string(z.shape) + " must be one value or " + std::string(what) + " for '" +
             operand.name + "' " + shape_string(operand.shape));
}

}  // namespace

std::vector<inferred_output> infer_op(const node& n, std::span<const value_info* const> in,
                                      std::span<const tensor* const> constants) {
  const std::string& t = n.type;
  auto one = [](shape s, dtype d) { return std::vector<inferred_output>{{s, d}}; };
  if (const auto e = graph_ops::find_eltwise(t); e && !e->binary) {
    const auto& x = need(n, in, 0);
    need_number(n, x, e->fn);
    if (t == "Gelu" && n.attrs.get_string("approximate", "none") != "tanh")
      fail(errc::not_supported, n, x.name, "Gelu is computed with the tanh approximation: set approximate=\"tanh\"");
    // Clip's bounds (opset 11 on) are optional inputs: they must be constant scalars.
    for (std::size_t i = 1; i < in.size(); ++i) {
      if (!in[i]) continue;
      if (t != "Clip") fail(errc::invalid_argument, n, in[i]->name, "takes one input");
      const tensor* c = constants.size() > i ? constants[i] : nullptr;
      if (!c || !c->is_host() || c->elements() != 1)
        fail(errc::not_supported, n, in[i]->name, "a bound must be a constant scalar");
      same_type(n, x, *in[i]);
    }
    return one(x.shape, x.type);
  }
  if (t == "SGDUpdate") {
    // param - lr * grad: the parameter's next value (the update as a graph operator).
    const auto& w = need(n, in, 0);
    const auto& g = need(n, in, 1);
    need_float(n, w);
    same_type(n, w, g);
    if (!(w.shape == g.shape))
      fail(errc::invalid_shape, n, g.name,
           "gradient " + shape_string(g.shape) + " does not match parameter " + shape_string(w.shape));
    if (!std::isfinite(n.attrs.get_float("lr", 0.01))) fail(errc::invalid_argument, n, {}, "lr must be finite");
    return one(w.shape, w.type);
  }
  if (t == "Max" || t == "Min") {
    const auto& a = need(n, in, 0);
    need_number(n, a, kernels::eltwise_fn::max);
    shape s = a.shape;
    for (std::size_t i = 1; i < in.size(); ++i) {
      const auto& b = need(n, in, i);
      same_type(n, a, b);
      value_info acc = a;
      acc.shape = s;
      const shape next = broadcast(n, acc, b);
      // Inputs are folded pairwise into the output: each step must already have its shape.
      if (i > 1 && !(next == s))
        fail(errc::not_supported, n, b.name, "an input after the second that widens the broadcast shape");
      s = next;
    }
    return one(s, a.type);
  }
  if (t == "Identity") {
    const auto& x = need(n, in, 0);
    return one(x.shape, x.type);
  }
  if (const auto e = graph_ops::find_eltwise(t); e && e->binary) {
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    need_number(n, a, e->fn);
    // ONNX's Pow allows an exponent of another type; the kernel computes in one.
    if (t == "Pow" && a.type != b.type)
      fail(errc::not_supported, n, b.name,
           "Pow with an exponent of dtype " + std::string(to_string(b.type)) + " and a base of " +
               std::string(to_string(a.type)));
    same_type(n, a, b);
    if (t == "ReluGrad" && !(a.shape == b.shape))
      fail(errc::invalid_shape, n, b.name,
           "dY " + shape_string(a.shape) + " and X " + shape_string(b.shape) + " must have one shape");
    return one(broadcast(n, a, b), a.type);
  }
  if (const auto f = graph_ops::compare_of(t)) {
    // onnx.ai Equal, Less, ...: A and B of one type, C bool, NumPy broadcasting. bool has no
    // order: only Equal takes it.
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    same_type(n, a, b);
    if (a.type == dtype::boolean && *f != kernels::compare_fn::equal)
      fail(errc::invalid_dtype, n, a.name, t + " does not compare bool tensors (Equal does)");
    return one(broadcast(n, a, b), dtype::boolean);
  }
  if (const auto f = graph_ops::logical_of(t)) {
    // onnx.ai And, Or, Xor, Not: bool in, bool out.
    const auto& a = need(n, in, 0);
    const bool unary = *f == kernels::logical_fn::not_;
    for (std::size_t i = 0; i < (unary ? 1u : 2u); ++i)
      if (const auto& v = need(n, in, i); v.type != dtype::boolean)
        fail(errc::invalid_dtype, n, v.name, "must be bool, got " + std::string(to_string(v.type)));
    if (unary) {
      if (in.size() > 1) fail(errc::invalid_argument, n, in[1] ? in[1]->name : std::string(), "Not takes one input");
      return one(a.shape, dtype::boolean);
    }
    return one(broadcast(n, a, need(n, in, 1)), dtype::boolean);
  }
  if (t == "QuantizeLinear" || t == "DequantizeLinear") {
    // onnx.ai QuantizeLinear, DequantizeLinear: y has x's shape; quantize_spec checks the rest.
    return one(need(n, in, 0).shape, graph_ops::quantize_spec(n, in).y.type);
  }
  if (t == "IsNaN" || t == "IsInf") {
    // onnx.ai IsNaN, IsInf: a float input, a bool output of its shape.
    const auto& x = need(n, in, 0);
    if (!is_float(x.type))
      fail(errc::invalid_dtype, n, x.name, "must be a float tensor, got " + std::string(to_string(x.type)));
    return one(x.shape, dtype::boolean);
  }
  if (t == "Where") {
    // onnx.ai Where: condition bool, X and Y of one type (any), all three broadcast together.
    const auto& c = need(n, in, 0);
    const auto& x = need(n, in, 1);
    const auto& y = need(n, in, 2);
    if (c.type != dtype::boolean)
      fail(errc::invalid_dtype, n, c.name, "the condition must be bool, got " + std::string(to_string(c.type)));
    same_type(n, x, y);
    value_info cx = c;
    cx.shape = broadcast(n, c, x);
    return one(broadcast(n, cx, y), x.type);
  }
  if (t == "Conv") {
    const auto& x = need(n, in, 0);
    const auto& w = need(n, in, 1);
    check_conv_operands(n, x, w, "convolution");
    if (w.shape.rank() != 4)
      fail(errc::invalid_shape, n, w.name, "weight must be [M, C/group, kH, kW], got " + shape_string(w.shape));
    check_conv_bias(n, in, x, w.shape[0]);
    return one(conv_output(n, x, w), x.type);
  }
  if (t == "ConvTranspose") {
    const auto& x = need(n, in, 0);
    const auto& w = need(n, in, 1);
    // 1-D and 3-D (rank 3 and 5) are chains around the 2-D kernel, built when the node is added
    // (detail::added_as_chain) from the operands' shapes.
    if (x.shape.rank() == 3 || x.shape.rank() == 5)
      fail(errc::not_supported, n, x.name,
           "a 1-D or 3-D transposed convolution needs its input's and weight's shapes when it is added");
    if (x.shape.rank() != 4)
      fail(errc::not_supported, n, x.name,
           "transposed convolution takes 1-D to 3-D input (rank 3 to 5), got " + shape_string(x.shape));
    check_conv_operands(n, x, w, "transposed convolution");
    const std::int64_t g = n.attrs.get_int("group", 1);
    if (w.shape.rank() != 4 || g < 1 || x.shape[1] % g || w.shape[0] != x.shape[1])
      fail(errc::invalid_shape, n, w.name,
           "weight must be [C, M/group, kH, kW] for input " + shape_string(x.shape) + " and group " +
               std::to_string(g) + ", got " + shape_string(w.shape));
    const auto geo = graph_ops::conv_transpose_geom(n.attrs, x.shape, w.shape,
                                                    [&](errc e, const std::string& what) { fail(e, n, x.name, what); });
    // A cropped geometry is built as a chain of a ConvTranspose and a Slice when the node is added.
    if (geo.needs_crop())
      fail(errc::not_supported, n, x.name, "an end pad beyond the start pad plus output_padding needs a crop");
    const std::int64_t m = w.shape[1] * g;
    check_conv_bias(n, in, x, m);
    return one({x.shape[0], m, geo.out[0], geo.out[1]}, x.type);
  }
  if (t == "ConvGrad") {
    // onnxruntime's training operator: (dY, X, W) -> (dX, dW[, dB]) of Conv(X, W[, B]) with
    // Conv's attributes.
    const auto& dy = need(n, in, 0);
    const auto& x = need(n, in, 1);
    const auto& w = need(n, in, 2);
    same_type(n, x, dy);
    if (n.outputs.size() < 2 || n.outputs.size() > 3)
      fail(errc::invalid_argument, n, dy.name, "has outputs dX, dW and optionally dB (\"\" for one not wanted)");
    node fwd = n;
    fwd.type = "Conv";
    const std::array<const value_info*, 2> fin{&x, &w};
    const auto y = infer_op(fwd, fin, {});
    if (!(y[0].shape == dy.shape))
      fail(errc::invalid_shape, n, dy.name,
           "dY " + shape_string(dy.shape) + " is not the shape of Conv's output " + shape_string(y[0].shape));
    std::vector<inferred_output> out{{x.shape, x.type}, {w.shape, w.type}};
    if (n.outputs.size() > 2) out.push_back({shape{w.shape[0]}, w.type});
    return out;
  }
  if (t == "MaxPoolGrad" || t == "AveragePoolGrad" || t == "GlobalAveragePoolGrad") {
    // (dY, X) -> dX of the pooling of X with the forward operator's attributes.
    const auto& dy = need(n, in, 0);
    const auto& x = need(n, in, 1);
    same_type(n, x, dy);
    shape y;
    graph_ops::pool_backward_spec(n, in, y);
    return one(x.shape, x.type);
  }
  if (t == "MaxPool" || t == "AveragePool" || t == "GlobalAveragePool") {
    shape out;
    graph_ops::pool_spec(n, in, out);
    std::vector<inferred_output> outs{{out, in[0]->type}};
    if (t == "MaxPool" && n.outputs.size() > 1) outs.push_back({out, dtype::i64});
    return outs;
  }
  if (t == "LRN") {
    // onnx.ai LRN: X [N, C, D1, ...] of a float type; size (required) channels in the window.
    const auto& x = need(n, in, 0);
    need_float(n, x);
    if (x.shape.rank() < 2) fail(errc::invalid_shape, n, x.name, "X must be [N, C, ...], got " + shape_string(x.shape));
    if (!n.attrs.has("size")) fail(errc::invalid_argument, n, x.name, "size is required");
    const std::int64_t size = n.attrs.get_int("size", 1);
    if (size < 1 || size > std::numeric_limits<std::int32_t>::max())
      fail(errc::invalid_argument, n, x.name, "size must be in [1, 2^31 - 1], got " + std::to_string(size));
    return one(x.shape, x.type);
  }
  if (t == "MatMul") {
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    need_float(n, a);
    same_type(n, a, b);
    const auto ra = a.shape.rank(), rb = b.shape.rank();
    if (ra < 2 || rb < 2)
      fail(errc::not_supported, n, ra < 2 ? a.name : b.name, "1-D MatMul operands are not supported");
    if (a.shape[ra - 1] != b.shape[rb - 2])
      fail(errc::invalid_shape, n, b.name,
           "inner dimensions differ: " + shape_string(a.shape) + " x " + shape_string(b.shape));
    shape out;
    if (rb == 2) {
      for (std::size_t i = 0; i + 1 < ra; ++i) out.push_back(a.shape[i]);
    } else {
      if (ra != rb) fail(errc::not_supported, n, b.name, "batched MatMul needs equal ranks");
      for (std::size_t i = 0; i + 2 < ra; ++i) {
        if (a.shape[i] != b.shape[i])
          fail(errc::not_supported, n, b.name,
               "batch dimensions must be equal (no broadcasting): " + shape_string(a.shape) + " x " +
                   shape_string(b.shape));
        out.push_back(a.shape[i]);
      }
      out.push_back(a.shape[ra - 2]);
    }
    out.push_back(b.shape[rb - 1]);
    return one(out, a.type);
  }
  if (t == "Gemm") {
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    need_float(n, a);
    same_type(n, a, b);
    if (a.shape.rank() != 2 || b.shape.rank() != 2) fail(errc::invalid_shape, n, a.name, "Gemm needs rank-2 operands");
    const bool ta = n.attrs.get_int("transA", 0) != 0, tb = n.attrs.get_int("transB", 0) != 0;
    const std::int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
    const std::int64_t Kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
    if (K != Kb)
      fail(errc::invalid_shape, n, b.name,
           "inner dimensions differ: " + shape_string(a.shape) + " x " + shape_string(b.shape));
    if (in.size() > 2 && in[2]) {
      value_info y{.name = n.outputs.empty() ? n.name : n.outputs[0], .shape = {M, N}};
      same_type(n, a, *in[2]);
      if (!(broadcast(n, y, *in[2]) == shape{M, N}))
        fail(errc::invalid_shape, n, in[2]->name, "C " + shape_string(in[2]->shape) + " does not broadcast to [M,N]");
    }
    return one({M, N}, a.type);
  }
  if (t == "BatchNormalization") {
    const auto& x = need(n, in, 0);
    need_float(n, x);
    if (n.attrs.get_int("training_mode", 0) != 0 || n.outputs.size() > 1)
      fail(errc::not_supported, n, x.name, "only inference-mode BatchNormalization is supported");
    if (x.shape.rank() < 2) fail(errc::invalid_shape, n, x.name, "needs rank >= 2");
    for (std::size_t i = 1; i < 5; ++i) {
      const auto& p = need(n, in, i);
      same_type(n, x, p);
      if (p.shape.rank() != 1 || p.shape[0] != x.shape[1])
        fail(errc::invalid_shape, n, p.name,
             "must be [" + std::to_string(x.shape[1]) + "], got " + shape_string(p.shape));
    }
    return one(x.shape, x.type);
  }
  if (t == "BatchNormInternal" || t == "BatchNormalizationGrad") {
    // onnxruntime's training pair. BatchNormInternal(X, scale, B, input_mean, input_var) ->
    // (Y, running_mean, running_var, saved_mean, saved_inv_std) normalises with the batch's
    // statistics; BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) ->
    // (dX, dscale, dbias).
    const bool fwd = t == "BatchNormInternal";
    const auto& x = need(n, in, fwd ? 0 : 1);
    need_float(n, x);
    if (x.shape.rank() < 2) fail(errc::invalid_shape, n, x.name, "needs rank >= 2");
    // The gradient's outputs are optional as ONNX's are: "" or a shorter list leaves one out.
    if (fwd ? n.outputs.size() != 5u : n.outputs.size() > 3u)
      fail(errc::invalid_argument, n, x.name,
           fwd ? "has outputs Y, running_mean, running_var, saved_mean, saved_inv_std"
               : "has outputs dX, dscale and dbias (\"\" for one not wanted)");
    if (fwd) {
      const double m = n.attrs.get_float("momentum", 0.9), eps = n.attrs.get_float("epsilon", 1e-5);
      if (!(m >= 0 && m <= 1) || !(eps >= 0) || !std::isfinite(eps))
        fail(errc::invalid_argument, n, x.name, "momentum must be in [0, 1] and epsilon finite and not negative");
      // The running variance is unbiased (count - 1 in the divisor): two values per channel.
      if (x.shape[1] == 0) fail(errc::invalid_shape, n, x.name, "has no channel");
      if (x.shape.elements() / x.shape[1] < 2)
        fail(errc::invalid_shape, n, x.name, "needs at least two values per channel");
    } else {
      const auto& dy = need(n, in, 0);
      same_type(n, x, dy);
      if (!(dy.shape == x.shape))
        fail(errc::invalid_shape, n, dy.name, "dY " + shape_string(dy.shape) + " is not X's " + shape_string(x.shape));
    }
    const shape c{x.shape[1]};
    for (std::size_t i = 2 - (fwd ? 1 : 0); i < 5; ++i) {
      const auto& p = need(n, in, i);
      same_type(n, x, p);
      if (!(p.shape == c))
        fail(errc::invalid_shape, n, p.name, "must be [" + std::to_string(c[0]) + "], got " + shape_string(p.shape));
    }
    std::vector<inferred_output> out{{x.shape, x.type}};
    for (std::size_t i = 1; i < n.outputs.size(); ++i) out.push_back({c, x.type});
    return out;
  }
  if (t == "LayerNormalization") {
    const auto& x = need(n, in, 0);
    need_float(n, x);
    if (n.outputs.size() > 1) fail(errc::not_supported, n, x.name, "Mean and InvStdDev outputs are not supported");
    const std::int64_t ax = norm_axis(n, n.attrs.get_int("axis", -1), x.shape.rank(), x.name);
    const shape trailing(std::span<const std::int64_t>(x.shape.begin() + ax, x.shape.end()));
    for (std::size_t i = 1; i < 3 && i < in.size(); ++i) {
      if (!in[i]) continue;
      same_type(n, x, *in[i]);
      if (!(in[i]->shape == trailing) && !(in[i]->shape.rank() == 1 && in[i]->shape[0] == trailing.elements()))
        fail(errc::invalid_shape, n, in[i]->name,
             "must be " + shape_string(trailing) + ", got " + shape_string(in[i]->shape));
    }
    need(n, in, 1);
    return one(x.shape, x.type);
  }
  if (t == "Softmax" || t == "LogSoftmax") {
    const auto& x = need(n, in, 0);
    need_float(n, x);
    (void)norm_axis(n, n.attrs.get_int("axis", -1), x.shape.rank(), x.name);
    return one(x.shape, x.type);
  }
  if (t == "Flatten") {
    const auto& x = need(n, in, 0);
    const std::int64_t ax = norm_axis(n, n.attrs.get_int("axis", 1), x.shape.rank(), x.name, true);
    std::int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < x.shape.rank(); ++i) (static_cast<std::int64_t>(i) < ax ? outer : inner) *= x.shape[i];
    return one({outer, inner}, x.type);
  }
  if (t == "Reshape") {
    const auto& x = need(n, in, 0);
    const auto& s = need(n, in, 1);
    const tensor* c = constants.size() > 1 ? constants[1] : nullptr;
    if (!c || !c->is_host()) fail(errc::not_supported, n, s.name, "the target shape must be a constant with data");
    if (s.type != dtype::i64 || s.shape.rank() != 1)
      fail(errc::invalid_dtype, n, s.name, "shape must be a 1-D int64 tensor");
    // onnx.ai Reshape: with allowzero=1 a 0 is an empty dimension, not a copy of the input's; a
    // -1 beside it would have no unique size (the spec leaves that undefined).
    const bool allowzero = n.attrs.get_int("allowzero", 0) != 0;
    shape out;
    int infer_at = -1;
    std::int64_t known = 1;
    for (std::int64_t i = 0; i < c->elements(); ++i) {
      auto d = c->get_int(i);
      if (d == 0 && allowzero) {
        for (std::int64_t j = 0; j < c->elements(); ++j)
          if (c->get_int(j) == -1) fail(errc::invalid_shape, n, s.name, "allowzero=1 with both a 0 and a -1");
      } else if (d == 0) {
        if (static_cast<std::size_t>(i) >= x.shape.rank())
          fail(errc::invalid_shape, n, s.name, "0 copies a dimension the input lacks");
        d = x.shape[static_cast<std::size_t>(i)];
      }
      if (d == -1) {
        if (infer_at >= 0) fail(errc::invalid_shape, n, s.name, "more than one -1");
        infer_at = static_cast<int>(i);
        out.push_back(1);
        continue;
      }
      if (d < 0) fail(errc::invalid_shape, n, s.name, "negative dimension " + std::to_string(d));
      if (__builtin_mul_overflow(known, d, &known))
        fail(errc::invalid_shape, n, s.name, "the target shape's element count overflows");
      out.push_back(d);
    }
    if (infer_at >= 0) {
      if (known == 0 || x.shape.elements() % known)
        fail(errc::invalid_shape, n, s.name, "cannot infer -1 from " + shape_string(x.shape));
      out[static_cast<std::size_t>(infer_at)] = x.shape.elements() / known;
    }
    if (out.elements() != x.shape.elements())
      fail(errc::invalid_shape, n, s.name,
           shape_string(out) + " does not hold the " + std::to_string(x.shape.elements()) + " elements of " +
               shape_string(x.shape));
    return one(out, x.type);
  }
  if (t == "Concat") {
    const auto& x = need(n, in, 0);
    const std::int64_t ax = norm_axis(n, n.attrs.get_int("axis", 0), x.shape.rank(), x.name);
    shape out = x.shape;
    for (std::size_t i = 1; i < in.size(); ++i) {
      const auto& y = need(n, in, i);
      same_type(n, x, y);
      if (y.shape.rank() != x.shape.rank()) fail(errc::invalid_shape, n, y.name, "rank differs from '" + x.name + "'");
      for (std::size_t d = 0; d < x.shape.rank(); ++d)
        if (static_cast<std::int64_t>(d) != ax && y.shape[d] != x.shape[d])
          fail(errc::invalid_shape, n, y.name,
               shape_string(y.shape) + " differs from " + shape_string(x.shape) + " outside the axis");
      out[static_cast<std::size_t>(ax)] += y.shape[static_cast<std::size_t>(ax)];
    }
    return one(out, x.type);
  }
  if (t == "Transpose") {
    const auto& x = need(n, in, 0);
    ints perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (std::size_t i = x.shape.rank(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
    if (perm.size() != x.shape.rank()) fail(errc::invalid_argument, n, x.name, "perm has the wrong length");
    std::vector<bool> seen(perm.size());
    shape out;
    for (auto p : perm) {
      if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) || seen[static_cast<std::size_t>(p)])
        fail(errc::invalid_argument, n, x.name, "perm is not a permutation");
      seen[static_cast<std::size_t>(p)] = true;
      out.push_back(x.shape[static_cast<std::size_t>(p)]);
    }
    return one(out, x.type);
  }
  if (t == "Cast") {
    const auto& x = need(n, in, 0);
    const auto to = dtype_from_onnx(n.attrs.get_int("to", 0));
    if (!to) fail(errc::not_supported, n, x.name, "Cast to ONNX type " + std::to_string(n.attrs.get_int("to", 0)));
    return one(x.shape, *to);
  }
  if (t == "CastLike") {
    const auto& x = need(n, in, 0);
    return one(x.shape, need(n, in, 1).type);
  }
  if (t == "Dropout") {
    // The identity: in inference, and in training mode with a ratio of 0 (ONNX's Dropout drops
    // nothing then). Training with another ratio drops at random and is not computed. The mask
    // output is added as a chain beside this node (an all-true Expand).
    const auto& x = need(n, in, 0);
    if (n.outputs.size() > 1) fail(errc::not_supported, n, n.outputs[1], "Dropout's mask output");
    if (in.size() > 2 && in[2]) {
      const tensor* c = constants.size() > 2 ? constants[2] : nullptr;
      if (!c || !c->is_host() || c->elements() != 1)
        fail(errc::not_supported, n, in[2]->name, "training_mode must be a constant");
      if (c->get(0) != 0) {
        const tensor* r = in.size() > 1 && in[1] && constants.size() > 1 ? constants[1] : nullptr;
        if (!r || !r->is_host() || r->elements() != 1 || r->get(0) != 0)
          fail(errc::not_supported, n, in[2]->name,
               "training mode with a ratio other than a constant 0 drops at random, which is not computed");
      }
    }
    return one(x.shape, x.type);
  }
  if (t == "ArgMax" || t == "ArgMin") {
    const auto& x = need(n, in, 0);
    need_float(n, x);
    const std::size_t axis = norm_axis(n, n.attrs.get_int("axis", 0), x.shape.rank(), x.name);
    shape out;
    for (std::size_t d = 0; d < x.shape.rank(); ++d) {
      if (d != axis) out.push_back(x.shape[d]);
      else if (n.attrs.get_int("keepdims", 1) != 0) out.push_back(1);
    }
    return one(out, dtype::i64);
  }
  if (t == "Mod") {
    // onnx.ai/onnx/operators/onnx__Mod.html: fmod = 0 is Python's % (the divisor's sign), defined
    // for integers only; fmod = 1 is C's fmod (the dividend's sign), for floats and integers.
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    const std::int64_t fmod = n.attrs.get_int("fmod", 0);
    if (fmod != 0 && fmod != 1) fail(errc::invalid_argument, n, {}, "fmod must be 0 or 1, got " + std::to_string(fmod));
    need_number(n, a, kernels::eltwise_fn::fmod);
    same_type(n, a, b);
    if (fmod == 0 && is_float(a.type))
      fail(errc::invalid_argument, n, a.name,
           "fmod=0 (the divisor's sign) is for integers; a " + std::string(to_string(a.type)) +
               " Mod needs fmod=1, as ONNX's specification says");
    return one(broadcast(n, a, b), a.type);
  }
  if (t == "BitShift") {
    // onnx.ai/onnx/operators/onnx__BitShift.html: X and Y of one unsigned type, broadcast;
    // direction LEFT or RIGHT.
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    const std::string dir = n.attrs.get_string("direction", "");
    if (dir != "LEFT" && dir != "RIGHT")
      fail(errc::invalid_argument, n, {}, "direction must be LEFT or RIGHT, got '" + dir + "'");
    if (!is_unsigned(a.type))
      fail(errc::not_supported, n, a.name, "needs an unsigned integer type, got " + std::string(to_string(a.type)));
    same_type(n, a, b);
    return one(broadcast(n, a, b), a.type);
  }
  if (t == "Det") {
    // onnx.ai/onnx/operators/onnx__Det.html: X [*, M, M] of a float type; Y the leading
    // dimensions, a scalar for one matrix.
    const auto& x = need(n, in, 0);
    need_float(n, x);
    const std::size_t r = x.shape.rank();
    if (r < 2 || x.shape[r - 1] != x.shape[r - 2])
      fail(errc::invalid_shape, n, x.name,
           "X must be [*, M, M], square matrices in its last two dimensions, got " + shape_string(x.shape));
    return one(shape(std::span<const std::int64_t>(x.shape.begin(), x.shape.end() - 2)), x.type);
  }
  if (t == "ReverseSequence") {
    // onnx.ai/onnx/operators/onnx__ReverseSequence.html: input of rank 2 or more, any type;
    // batch_axis (default 1) and time_axis (default 0) are 0 and 1 in some order; sequence_lens
    // int64 [batch]. Its values are data: one outside [0, time steps] fails the run.
    const auto& x = need(n, in, 0);
    const auto& lens = need(n, in, 1);
    const std::int64_t ba = n.attrs.get_int("batch_axis", 1), ta = n.attrs.get_int("time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
      fail(errc::invalid_argument, n, {},
           "batch_axis and time_axis must be 0 and 1 in some order, got " + std::to_string(ba) + " and " +
               std::to_string(ta));
    if (x.shape.rank() < 2)
      fail(errc::invalid_shape, n, x.name, "input must have rank 2 or more, got " + shape_string(x.shape));
    if (lens.type != dtype::i64)
      fail(errc::invalid_dtype, n, lens.name, "sequence_lens must be int64, got " + std::string(to_string(lens.type)));
    const shape want{x.shape[static_cast<std::size_t>(ba)]};
    if (!(lens.shape == want))
      fail(errc::invalid_shape, n, lens.name,
           "sequence_lens must be " + shape_string(want) + " (the batch axis " + std::to_string(ba) + " of " +
               shape_string(x.shape) + "), got " + shape_string(lens.shape));
    return one(x.shape, x.type);
  }
  if (t == "CumSum") {
    // onnx.ai/onnx/operators/onnx__CumSum.html: the axis is an input, a 0-D (or, as exporters
    // write it, one-element 1-D) int32 or int64 tensor; it must be known when the graph is built.
    const auto& x = need(n, in, 0);
    const auto& ax = need(n, in, 1);
    need_float_or_integer(n, x);
    if (x.shape.rank() == 0) fail(errc::invalid_shape, n, x.name, "x must have rank 1 or more, got a scalar");
    if (ax.type != dtype::i32 && ax.type != dtype::i64)
      fail(errc::invalid_dtype, n, ax.name, "axis must be int32 or int64, got " + std::string(to_string(ax.type)));
    if (ax.shape.elements() != 1 || ax.shape.rank() > 1)
      fail(errc::invalid_shape, n, ax.name, "axis must be a scalar, got " + shape_string(ax.shape));
    const tensor* c = constants.size() > 1 ? constants[1] : nullptr;
    if (!c || !c->is_host())
      fail(errc::not_supported, n, ax.name, "axis must be a constant (an axis computed at run time is not supported)");
    norm_axis(n, c->get_int(0), x.shape.rank(), ax.name);
    for (const char* a : {"exclusive", "reverse"})
      if (const std::int64_t v = n.attrs.get_int(a, 0); v != 0 && v != 1)
        fail(errc::invalid_argument, n, {}, std::string(a) + " must be 0 or 1, got " + std::to_string(v));
    return one(x.shape, x.type);
  }
  if (t == "ReduceMean" || t == "ReduceSum" || t == "ReduceMax" || t == "ReduceMin" || t == "ReduceProd") {
    const auto& x = need(n, in, 0);
    // Sum, Max, Min and Prod are exact on integers (kernels::reduce_fn); Mean divides, in float.
    if (t == "ReduceMean") need_float(n, x);
    need_float_or_integer(n, x);
    ints axes = n.attrs.get_ints("axes");
    if (in.size() > 1 && in[1]) {
      const tensor* c = constants.size() > 1 ? constants[1] : nullptr;
      if (!c || !c->is_host()) fail(errc::not_supported, n, in[1]->name, "axes must be a constant");
      axes.clear();
      for (std::int64_t i = 0; i < c->elements(); ++i) axes.push_back(c->get_int(i));
    }
    if (axes.empty() && n.attrs.get_int("noop_with_empty_axes", 0) != 0)
      fail(errc::not_supported, n, x.name, "noop_with_empty_axes=1");
    const bool keep = n.attrs.get_int("keepdims", 1) != 0;
    std::uint32_t mask = 0;
    if (axes.empty()) mask = (1u << x.shape.rank()) - 1;
    for (auto a : axes) {
      const auto bit = 1u << norm_axis(n, a, x.shape.rank(), x.name);
      // ONNX's reference refuses an axis named twice (-1 and rank-1 included).
      if (mask & bit) fail(errc::invalid_argument, n, x.name, "axis " + std::to_string(a) + " is named twice");
      mask |= bit;
    }
    shape out;
    for (std::size_t d = 0; d < x.shape.rank(); ++d) {
      if (mask & (1u << d)) {
        if (keep) out.push_back(1);
      } else {
        out.push_back(x.shape[d]);
      }
    }
    return one(out, x.type);
  }
  if (t == "Slice") {
    const auto w = graph_ops::slice_window(n, in, constants);
    return one(w.dims, need(n, in, 0).type);
  }
  if (t == "Gather" || t == "GatherElements") {
    const auto& data = need(n, in, 0);
    const auto& indices = need(n, in, 1);
    if (data.shape.rank() == 0) fail(errc::invalid_shape, n, data.name, "data must have rank 1 or more, got a scalar");
    const auto axis = static_cast<std::size_t>(norm_axis(n, n.attrs.get_int("axis", 0), data.shape.rank(), data.name));
    need_index_dtype(n, indices);
    shape out;
    if (t == "Gather") {
      // onnx.ai: data.shape[:axis] + indices.shape + data.shape[axis+1:].
      if (data.shape.rank() - 1 + indices.shape.rank() > shape::max_rank)
        fail(errc::not_supported, n, indices.name,
             "output rank " + std::to_string(data.shape.rank() - 1 + indices.shape.rank()) + " (data " +
                 shape_string(data.shape) + ", indices " + shape_string(indices.shape) + ") is above 8");
      for (std::size_t d = 0; d < axis; ++d) out.push_back(data.shape[d]);
      for (auto d : indices.shape) out.push_back(d);
      for (std::size_t d = axis + 1; d < data.shape.rank(); ++d) out.push_back(data.shape[d]);
    } else {
      // onnx.ai: data and indices of one rank; y has indices' shape, each element data's along
      // the axis at its index (NumPy's take_along_axis).
      need_elements_indices(n, data, indices, axis);
      out = indices.shape;
    }
    check_constant_indices(n, data, indices, axis, constants);
    return one(out, data.type);
  }
  if (t == "ScatterND" || t == "ScatterElements" || t == "Scatter") {
    // onnx.ai/onnx/operators/onnx__ScatterND.html and onnx__ScatterElements.html: y is data with
    // the updates written (or combined by `reduction`) where the indices point.
    const auto& data = need(n, in, 0);
    const auto& indices = need(n, in, 1);
    const auto& updates = need(n, in, 2);
    if (data.shape.rank() == 0) fail(errc::invalid_shape, n, data.name, "data must have rank 1 or more, got a scalar");
    need_index_dtype(n, indices);
    same_type(n, data, updates);
    if (graph_ops::scatter_reduction_of(n) != kernels::scatter_reduction::none && !is_float(data.type) &&
        !is_integer(data.type))
      fail(errc::not_supported, n, data.name,
           "a reduction needs a floating-point or integer tensor, got " + std::string(to_string(data.type)));
    if (t == "ScatterND") {
      // updates.shape = indices.shape[:-1] + data.shape[k:].
      const std::int64_t k = index_depth(n, data, indices, 0);
      shape want;
      for (std::size_t d = 0; d + 1 < indices.shape.rank(); ++d) want.push_back(indices.shape[d]);
      for (auto d = static_cast<std::size_t>(k); d < data.shape.rank(); ++d) want.push_back(data.shape[d]);
      if (want.rank() > shape::max_rank || !(updates.shape == want))
        fail(errc::invalid_shape, n, updates.name,
             "updates " + shape_string(updates.shape) + " must be indices.shape[:-1] + data.shape[" +
                 std::to_string(k) + ":], " + (want.rank() > shape::max_rank ? "of rank above 8" : shape_string(want)));
      check_constant_indices(n, data, indices, 0, constants, k);
    } else {
      const auto axis =
          static_cast<std::size_t>(norm_axis(n, n.attrs.get_int("axis", 0), data.shape.rank(), data.name));
      need_elements_indices(n, data, indices, axis);
      if (!(updates.shape == indices.shape))
        fail(errc::invalid_shape, n, updates.name,
             "updates " + shape_string(updates.shape) + " must have the indices' shape " + shape_string(indices.shape));
      check_constant_indices(n, data, indices, axis, constants);
    }
    return one(data.shape, data.type);
  }
  if (t == "GatherND") {
    // onnx.ai/onnx/operators/onnx__GatherND.html: y.shape = indices.shape[:-1] +
    // data.shape[batch_dims + k:], the batch_dims leading dimensions shared.
    const auto& data = need(n, in, 0);
    const auto& indices = need(n, in, 1);
    need_index_dtype(n, indices);
    const std::int64_t b = n.attrs.get_int("batch_dims", 0);
    const auto r = static_cast<std::int64_t>(data.shape.rank()), q = static_cast<std::int64_t>(indices.shape.rank());
    if (b < 0 || b >= std::min(r, q))
      fail(errc::invalid_argument, n, indices.name,
           "batch_dims " + std::to_string(b) + " must be in [0, " + std::to_string(std::min(r, q)) + ") for data " +
               shape_string(data.shape) + " and indices " + shape_string(indices.shape));
    const auto bu = static_cast<std::size_t>(b);
    for (std::size_t d = 0; d < bu; ++d)
      if (indices.shape[d] != data.shape[d])
        fail(errc::invalid_shape, n, indices.name,
             "indices " + shape_string(indices.shape) + " and data " + shape_string(data.shape) + " must share their " +
                 std::to_string(b) + " batch dimensions");
    const std::int64_t k = index_depth(n, data, indices, bu);
    shape out;
    if (indices.shape.rank() - 1 + data.shape.rank() - bu - static_cast<std::size_t>(k) > shape::max_rank)
      fail(errc::not_supported, n, indices.name, "the output's rank is above 8");
    for (std::size_t d = 0; d + 1 < indices.shape.rank(); ++d) out.push_back(indices.shape[d]);
    for (std::size_t d = bu + static_cast<std::size_t>(k); d < data.shape.rank(); ++d) out.push_back(data.shape[d]);
    check_constant_indices(n, data, indices, bu, constants, k);
    return one(out, data.type);
  }
  if (t == "TopK") {
    // onnx.ai/onnx/operators/onnx__TopK.html: values and int64 indices, x's shape with the axis k.
    const auto& x = need(n, in, 0);
    need_float_or_integer(n, x);
    if (n.outputs.size() != 2)
      fail(errc::invalid_argument, n, {}, "has two outputs (Values, Indices), got " + std::to_string(n.outputs.size()));
    const kernels::top_k k = graph_ops::top_k_spec(n, in, constants);
    shape out = x.shape;
    out[static_cast<std::size_t>(k.axis)] = k.k;
    return {{out, x.type}, {out, dtype::i64}};
  }
  if (t == "Split") {
    const dtype type = need(n, in, 0).type;
    std::vector<inferred_output> out;
    for (const auto& w : graph_ops::split_windows(n, in, constants)) out.push_back({w.dims, type});
    return out;
  }
  if (t == "Pad") return one(graph_ops::pad_spec(n, in, constants).dims, need(n, in, 0).type);
  if (t == "Tile" || t == "Expand") return one(graph_ops::repeated_shape(n, in, constants), need(n, in, 0).type);
  if (t == "Trilu") {
    const value_info& x = need(n, in, 0);
    if (x.shape.rank() < 2)
      fail(errc::invalid_shape, n, x.name, "needs a matrix (rank 2 or more), got " + shape_string(x.shape));
    (void)graph_ops::trilu_k(n, in, constants);
    return one(x.shape, x.type);
  }
  if (t == "NegativeLogLikelihoodLoss") {
    // onnx.ai: input [N, C, d1..dk], target [N, d1..dk] of class indices, weight [C].
    const value_info& x = need(n, in, 0);
    const value_info& target = need(n, in, 1);
    need_float(n, x);
    if (target.type != dtype::i32 && target.type != dtype::i64)
      fail(errc::invalid_dtype, n, target.name,
           "target must be int32 or int64 class indices, got " + std::string(to_string(target.type)));
    if (x.shape.rank() < 2)
      fail(errc::invalid_shape, n, x.name, "input must be [N, C, d1..dk], got " + shape_string(x.shape));
    shape want{x.shape[0]};
    for (std::size_t d = 2; d < x.shape.rank(); ++d) want.push_back(x.shape[d]);
    if (!(target.shape == want))
      fail(errc::invalid_shape, n, target.name,
           "target must be " + shape_string(want) + " for input " + shape_string(x.shape) + ", got " +
               shape_string(target.shape));
    if (in.size() > 2 && in[2]) {
      same_type(n, x, *in[2]);
      if (!(in[2]->shape == shape{x.shape[1]}))
        fail(errc::invalid_shape, n, in[2]->name,
             "weight must be [C] = [" + std::to_string(x.shape[1]) + "], got " + shape_string(in[2]->shape));
    }
    return one(graph_ops::loss_reduction_of(n) == kernels::loss_reduction::none ? target.shape : shape{}, x.type);
  }
  if (t == "Resize" || t == "Upsample") return one(graph_ops::resize_spec(n, in, constants).dims, need(n, in, 0).type);
  if (t == "Recurrent") {
    const auto layer = graph_ops::recurrent_spec(n, in);
    const dtype type = need(n, in, 0).type;
    std::vector<inferred_output> out{{layer.y, type}, {layer.state, type}};
    if (layer.op.cell == kernels::rnn_cell::lstm) out.push_back({layer.state, type});
    if (n.outputs.size() != out.size())
      fail(errc::invalid_argument, n, {},
           "has the outputs Y, Y_h" + std::string(out.size() == 3 ? " and Y_c" : "") + ", all named");
    return out;
  }
  if (t == "GridSample") {
    shape out;
    graph_ops::grid_sample_spec(n, in, out);
    return one(out, need(n, in, 0).type);
  }
  if (t == "DFT" || t == "STFT") {
    shape out;
    graph_ops::dft_spec(n, in, constants, out);
    return one(out, need(n, in, 0).type);
  }
  if (t == "RoiAlign") {
    shape out;
    graph_ops::roi_align_spec(n, in, out);
    return one(out, need(n, in, 0).type);
  }
  if (t == "MatMulInteger") {
    // onnx.ai MatMulInteger: numpy.matmul of int8 or uint8 operands to int32; a_zero_point one
    // value or per row of A ([M], or [..., M, 1]), b_zero_point one value or per column ([N], or
    // [..., 1, N]).
    const auto& a = need(n, in, 0);
    const auto& b = need(n, in, 1);
    need_int8_or_uint8(n, a);
    need_int8_or_uint8(n, b);
    const auto ra = a.shape.rank(), rb = b.shape.rank();
    if (ra < 2 || rb < 2)
      fail(errc::not_supported, n, ra < 2 ? a.name : b.name, "1-D MatMulInteger operands are not supported");
    if (a.shape[ra - 1] != b.shape[rb - 2])
      fail(errc::invalid_shape, n, b.name,
           "inner dimensions differ: " + shape_string(a.shape) + " x " + shape_string(b.shape));
    // The batch dimensions broadcast NumPy-style.
    value_info ab{a.name, {}, a.type}, bb{b.name, {}, b.type};
    for (std::size_t i = 0; i + 2 < ra; ++i) ab.shape.push_back(a.shape[i]);
    for (std::size_t i = 0; i + 2 < rb; ++i) bb.shape.push_back(b.shape[i]);
    shape out = broadcast(n, ab, bb);
    out.push_back(a.shape[ra - 2]);
    out.push_back(b.shape[rb - 1]);
    const std::int64_t m = a.shape[ra - 2], cols = b.shape[rb - 1];
    check_zero_point(
        n, in, 2, a,
        [&](const shape& z) {
          return (z.rank() == 1 && z[0] == m) || (z.rank() == ra && z[ra - 1] == 1 && z[ra - 2] == m);
        },
        "per row ([" + std::to_string(m) + "] or [..., " + std::to_string(m) + ", 1])");
    check_zero_point(
        n, in, 3, b,
        [&](const shape& z) {
          return (z.rank() == 1 && z[0] == cols) || (z.rank() == rb && z[rb - 2] == 1 && z[rb - 1] == cols);
        },
        "per column ([" + std::to_string(cols) + "] or [..., 1, " + std::to_string(cols) + "])");
    // A zero point of rank ra must broadcast to A (and B's to B): its batch dimensions 1 or A's.
    for (std::size_t i = 2; i < 4; ++i)
      if (given(in, i) && in[i]->shape.rank() > 1) {
        const value_info& op = i == 2 ? a : b;
        if (!(broadcast(n, op, *in[i]) == op.shape))
          fail(errc::invalid_shape, n, in[i]->name,
               "zero point " + shape_string(in[i]->shape) + " does not broadcast to " + shape_string(op.shape));
      }
    return one(out, dtype::i32);
  }
  if (t == "ConvInteger") {
    // onnx.ai ConvInteger: Conv of int8 or uint8 operands to int32; x_zero_point one value,
    // w_zero_point one value or one per output channel.
    const auto& x = need(n, in, 0);
    const auto& w = need(n, in, 1);
    need_int8_or_uint8(n, x);
    need_int8_or_uint8(n, w);
    if (x.shape.rank() != 4)
      fail(errc::not_supported, n, x.name,
           "only 2-D integer convolution (rank-4 input) is supported, got " + shape_string(x.shape));
    if (w.shape.rank() != 4)
      fail(errc::invalid_shape, n, w.name, "weight must be [M, C/group, kH, kW], got " + shape_string(w.shape));
    check_zero_point(n, in, 2, x, [](const shape&) { return false; }, "(x_zero_point is per tensor)");
    const std::int64_t co = w.shape[0];
    check_zero_point(
        n, in, 3, w, [&](const shape& z) { return z.rank() == 1 && z[0] == co; },
        "per output channel ([" + std::to_string(co) + "])");
    return one(conv_output(n, x, w), dtype::i32);
  }
  if (t == "Requantize") {
    // npurt's own: the end of QLinearMatMul and QLinearConv (see kernels::quantize): int32 x,
    // a float scale per tensor or along `axis`, one zero point whose dtype (int8, uint8) y has.
    const auto& x = need(n, in, 0);
    const auto& scale = need(n, in, 1);
    const auto& zp = need(n, in, 2);
    if (x.type != dtype::i32)
      fail(errc::invalid_dtype, n, x.name, "must be int32, got " + std::string(to_string(x.type)));
    if (!is_float(scale.type) || scale.type == dtype::f64)
      fail(errc::invalid_dtype, n, scale.name,
           "scale must be float, float16 or bfloat16, got " + std::string(to_string(scale.type)));
    need_int8_or_uint8(n, zp);
    if (zp.shape.elements() != 1)
      fail(errc::invalid_shape, n, zp.name, "the output zero point must be one value, got " + shape_string(zp.shape));
    if (scale.shape.elements() != 1) {
      const std::int64_t axis = norm_axis(n, n.attrs.get_int("axis", 1), x.shape.rank(), x.name);
      if (scale.shape.rank() != 1 || scale.shape[0] != x.shape[static_cast<std::size_t>(axis)])
        fail(errc::invalid_shape, n, scale.name,
             "scale " + shape_string(scale.shape) + " must be one value or 1-D along axis " + std::to_string(axis) +
                 " of " + shape_string(x.shape));
    }
    return one(x.shape, zp.type);
  }
  fail(errc::not_supported, n, {}, "unknown operator type");
}

// ---- graph ----

void graph::check_new_name(std::string_view name, std::string_view op) const {
  if (name.empty())
    throw graph_error(make_error_code(errc::invalid_argument), std::string(op), {},
                      "graph '" + name_ + "': empty tensor name");
  if (value_index_.count(name))
    throw graph_error(make_error_code(errc::invalid_argument), std::string(op), std::string(name),
                      "graph '" + name_ + "': duplicate tensor name '" + std::string(name) + "'" +
                          (op.empty() ? std::string() : " (written by '" + std::string(op) + "')"));
}

std::string graph::add_input(std::string name, npurt::shape s, npurt::dtype t) {
  check_new_name(name, {});
  for (auto d : s) {
    if (d < 0)
      throw graph_error(make_error_code(errc::invalid_shape), {}, name, "input '" + name + "': negative dimension");
  }
  if (tensor_desc{nullptr, s, t}.bytes() > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()))
    throw graph_error(
        make_error_code(errc::size_overflow), {}, name,
        "input '" + name + "': " + shape_string(s) + " of " + std::string(to_string(t)) + " does not fit in memory");
  value_index_[name] = values_.size();
  values_.push_back({name, s, t, value_kind::input, -1, true});
  inputs_.push_back(name);
  return name;
}

std::string graph::add_constant(std::string name, tensor v) {
  check_new_name(name, {});
  if (v.is_device())
    throw graph_error(make_error_code(errc::invalid_argument), {}, name,
                      "constant '" + name + "' must be a host or timing-only tensor");
  value_index_[name] = values_.size();
  values_.push_back({name, v.shape(), v.type(), value_kind::constant, -1, true});
  constants_.emplace(name, std::move(v));
  return name;
}

void graph::set_constant(std::string_view name, tensor v) {
  auto it = constants_.find(name);
  if (it == constants_.end())
    throw graph_error(make_error_code(errc::invalid_argument), {}, std::string(name),
                      "graph '" + name_ + "': '" + std::string(name) + "' is not a constant");
  if (v.is_device())
    throw graph_error(make_error_code(errc::invalid_argument), {}, std::string(name),
                      "constant '" + std::string(name) + "' must be a host or timing-only tensor");
  if (!(v.shape() == it->second.shape()))
    throw graph_error(make_error_code(errc::invalid_shape), {}, std::string(name),
                      "constant '" + std::string(name) + "' is " + shape_string(it->second.shape()) + ", given " +
                          shape_string(v.shape()));
  if (v.type() != it->second.type())
    throw graph_error(make_error_code(errc::invalid_dtype), {}, std::string(name),
                      "constant '" + std::string(name) + "' is " + std::string(to_string(it->second.type())) +
                          ", given " + std::string(to_string(v.type())));
  it->second = std::move(v);
}

std::string graph::add_op(std::string_view type, std::vector<std::string> inputs, npurt::attributes attrs,
                          std::string name) {
  // The counter moves only when the node is added: a rejected add_op leaves the graph as it was.
  std::size_t next = auto_names_;
  if (name.empty()) {
    do {
      name = std::string(type) + "_" + std::to_string(next++);
    } while (value_index_.count(name) || node_index_.count(name));
  }
  add_node(type, name, std::move(inputs), {name}, std::move(attrs));
  auto_names_ = next;
  return name;
}

void graph::add_node(std::string_view type, std::string name, std::vector<std::string> inputs,
                     std::vector<std::string> outputs, npurt::attributes attrs) {
  if (!is_supported_op(type))
    throw graph_error(make_error_code(errc::not_supported), name, {},
                      "node '" + name + "': unknown operator type '" + std::string(type) + "'");
  if (const std::string* a = unknown_attribute(type, attrs))
    throw graph_error(make_error_code(errc::not_supported), name, {},
                      "node '" + name + "': " + std::string(type) + " has no attribute '" + *a +
                          "' (its attributes: " + attribute_list(type) + ")");
  if (const std::string* a = non_finite_attribute(type, attrs))
    throw graph_error(make_error_code(errc::invalid_argument), name, {},
                      "node '" + name + "': " + std::string(type) + "'s attribute '" + *a +
                          (type == "Clip" ? "' is NaN" : "' must be finite (it holds a NaN or an infinity)"));
  if (node_index_.count(name))
    throw graph_error(make_error_code(errc::invalid_argument), name, {}, "duplicate node name '" + name + "'");
  if (outputs.empty())
    throw graph_error(make_error_code(errc::invalid_argument), name, {}, "node '" + name + "' has no output");
  if (detail::added_as_chain(*this, type, inputs, outputs, attrs)) {
    add_composite(type, std::move(name), inputs, outputs, attrs);
    return;
  }
  const bool omits = omits_outputs(type);
  if (omits && std::all_of(outputs.begin(), outputs.end(), [](const std::string& o) { return o.empty(); }))
    throw graph_error(make_error_code(errc::invalid_argument), name, {},
                      "node '" + name + "': " + std::string(type) +
                          " leaves every output out (\"\"), so it would compute nothing: name one");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (omits && outputs[i].empty()) continue;  // an optional output not wanted, as ONNX writes it
    check_new_name(outputs[i], name);
    if (std::find(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(i), outputs[i]) !=
        outputs.begin() + static_cast<std::ptrdiff_t>(i))
      throw graph_error(make_error_code(errc::invalid_argument), name, outputs[i],
                        "node '" + name + "' names output '" + outputs[i] + "' twice");
  }
  const std::size_t idx = nodes_.size(), values_before = values_.size();
  node_index_[name] = idx;
  for (const auto& o : outputs) {
    if (o.empty()) continue;
    value_index_[o] = values_.size();
    values_.push_back({o, {}, dtype::f32, value_kind::activation, static_cast<int>(idx), false});
  }
  nodes_.push_back(
      {std::string(type), std::move(name), std::move(inputs), std::move(outputs), std::move(attrs), false});
  try {
    try_infer(idx);
  } catch (...) {
    // A rejected node leaves the graph as it was.
    for (const auto& o : nodes_.back().outputs) value_index_.erase(o);
    values_.resize(values_before);
    node_index_.erase(nodes_.back().name);
    nodes_.pop_back();
    throw;
  }
}

const chain_origin* graph::origin(std::string_view node_name) const {
  const auto it = origins_.find(node_name);
  return it == origins_.end() ? nullptr : &it->second;
}

void graph::set_origin(std::size_t first, std::string_view type, std::string_view name) {
  // A chain inside a chain (a Clip step of a composite) is the outer operator's step: the last
  // call, the outer one, wins.
  for (std::size_t i = first; i < nodes_.size(); ++i)
    origins_[nodes_[i].name] = chain_origin{std::string(type), std::string(name)};
}

void graph::add_composite(std::string_view type, std::string name, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const npurt::attributes& attrs) {
  const std::size_t most = type == "LayerNormalization" || type == "DynamicQuantizeLinear" ? 3
                           : type == "SoftmaxCrossEntropyLoss" || type == "Dropout"        ? 2
                                                                                           : 1;
  // RNN, GRU and LSTM check their outputs themselves: any of them may be left out, Y too. So do
  // the training operators (one output per updated tensor), BatchNormalization in training
  // mode (Y, running_mean, running_var) and LayerNormalizationGrad (dX, dScale, dBias).
  const bool recurrent = type == "RNN" || type == "GRU" || type == "LSTM" || type == "Adagrad" || type == "Adam" ||
                         type == "Momentum" || type == "BatchNormalization" || type == "LayerNormalizationGrad";
  if (!recurrent && (outputs.size() > most || outputs.empty() || outputs[0].empty()))
    throw graph_error(
        make_error_code(errc::invalid_argument), name, {},
        "node '" + name + "': " + std::string(type) + " has " +
            (most == 1                         ? std::string("one output")
             : type == "Dropout"               ? std::string("the outputs output and mask")
             : most == 2                       ? std::string("the outputs output and log_prob, output named")
             : type == "DynamicQuantizeLinear" ? std::string("the outputs y, y_scale and y_zero_point, y named")
                                               : "the outputs Y, Mean and InvStdDev, Y named") +
            ", " + std::to_string(outputs.size()) + " named");
  if (inputs.empty() || inputs[0].empty())
    throw graph_error(make_error_code(errc::invalid_argument), name, {},
                      "node '" + name + "': " + std::string(type) + " needs its first input");
  // The chain is built from its inputs' shapes (a rank, a scalar's dtype), so they must be known:
  // unlike a single operator, a chain cannot wait for validate().
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    const value_info* v = find(in);
    if (!v || !v->known)
      throw graph_error(make_error_code(errc::invalid_argument), name, in,
                        "node '" + name + "': " + std::string(type) +
                            " is computed as a chain of npurt's operators, "
                            "built from its inputs' shapes: add input '" +
                            in + "' (with a known shape) first");
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].empty()) continue;  // an optional output nobody reads
    check_new_name(outputs[i], name);
    if (std::find(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(i), outputs[i]) !=
        outputs.begin() + static_cast<std::ptrdiff_t>(i))
      throw graph_error(make_error_code(errc::invalid_argument), name, outputs[i],
                        "node '" + name + "' names output '" + outputs[i] + "' twice");
  }
  const std::size_t nodes_before = nodes_.size(), values_before = values_.size();
  const auto fresh = [this](const std::string& base) {
    std::string r = base;
    for (std::size_t k = 1; value_index_.count(r) || node_index_.count(r); ++k) r = base + "_" + std::to_string(k);
    return r;
  };
  try {
    detail::add_composite(*this, type, name, inputs, outputs, attrs, fresh);
  } catch (...) {
    // A rejected node leaves the graph as it was: the chain's steps and scalars go again.
    for (std::size_t i = nodes_before; i < nodes_.size(); ++i) {
      node_index_.erase(nodes_[i].name);
      origins_.erase(nodes_[i].name);
    }
    for (std::size_t i = values_before; i < values_.size(); ++i) {
      value_index_.erase(values_[i].name);
      constants_.erase(values_[i].name);
    }
    nodes_.resize(nodes_before);
    values_.resize(values_before);
    throw;
  }
}

bool graph::try_infer(std::size_t idx) {
  node& n = nodes_[idx];
  std::vector<const value_info*> in;
  std::vector<const tensor*> consts;
  for (const auto& name : n.inputs) {
    if (name.empty()) {
      in.push_back(nullptr);
      consts.push_back(nullptr);
      continue;
    }
    const value_info* v = find(name);
    if (!v || !v->known) return false;
    in.push_back(v);
    consts.push_back(constant(name));
  }
  std::vector<inferred_output> out;
  try {
    out = infer_op(n, in, consts);
  } catch (const graph_error&) { throw; } catch (const caller_error& e) {
    // An attribute of the wrong type (attributes::get_int and the like): a graph_error too, that
    // names the operator.
    // what() already ends in the code's message, which graph_error appends again.
    std::string why = e.what();
    if (const std::string tail = ": " + e.code().message(); why.ends_with(tail)) why.resize(why.size() - tail.size());
    throw graph_error(e.code(), n.name, {}, "node '" + n.name + "' (" + n.type + "): " + why);
  }
  if (out.size() < n.outputs.size())
    fail(errc::invalid_argument, n, n.outputs[out.size()],
         "produces " + std::to_string(out.size()) + " output" + (out.size() == 1 ? "" : "s") + ", " +
             std::to_string(n.outputs.size()) + " named");
  // An output whose element count or bytes do not fit is refused here, whatever the operator.
  for (const auto& o : out)
    if (tensor_desc{nullptr, o.shape, o.type}.bytes() >
        static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()))
      fail(errc::size_overflow, n, {}, shape_string(o.shape) + " does not fit in memory");
  for (std::size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) continue;  // left out (omits_outputs)
    auto& v = values_[value_index_.find(n.outputs[i])->second];
    v.shape = out[i].shape;
    v.type = out[i].type;
    v.known = true;
  }
  n.inferred = true;
  return true;
}

void graph::set_output(std::string name) {
  if (std::find(outputs_.begin(), outputs_.end(), name) == outputs_.end()) outputs_.push_back(std::move(name));
}

void graph::hint_parallel(std::string a, std::string b) { hints_.emplace_back(std::move(a), std::move(b)); }

const value_info* graph::find(std::string_view name) const {
  auto it = value_index_.find(name);
  return it == value_index_.end() ? nullptr : &values_[it->second];
}

const value_info& graph::value(std::string_view name) const {
  if (const auto* v = find(name)) return *v;
  throw graph_error(make_error_code(errc::invalid_argument), {}, std::string(name),
                    "graph '" + name_ + "' has no tensor '" + std::string(name) + "'");
}

const tensor* graph::constant(std::string_view name) const {
  auto it = constants_.find(name);
  return it == constants_.end() ? nullptr : &it->second;
}

std::size_t graph::node_index(std::string_view name) const {
  auto it = node_index_.find(name);
  if (it != node_index_.end()) return it->second;
  if (const auto* v = find(name); v && v->producer >= 0) return static_cast<std::size_t>(v->producer);
  throw graph_error(make_error_code(errc::invalid_argument), std::string(name), {},
                    "graph '" + name_ + "' has no operator '" + std::string(name) + "'");
}

std::vector<std::size_t> graph::topological_order() const {
  // Kahn's algorithm with the lowest node index first among ready nodes: the order is the order
  // of addition whenever that order is valid.
  std::vector<int> pending(nodes_.size(), 0);
  std::vector<std::vector<std::size_t>> users(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    for (const auto& in : nodes_[i].inputs) {
      if (in.empty()) continue;
      const value_info* v = find(in);
      if (v && v->producer >= 0) {
        ++pending[i];
        users[static_cast<std::size_t>(v->producer)].push_back(i);
      }
    }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (auto u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  return order;
}

std::vector<std::vector<std::size_t>> graph::find_cycles(const std::vector<std::size_t>& order) const {
  // The nodes Kahn's algorithm could not place are on a cycle or downstream of one. Each strongly
  // connected component among them with more than one node, or with an edge to itself, is one
  // cycle: two separate cycles must not read as one long one, nor a node that merely consumes a
  // cycle's output as part of it. Tarjan's algorithm, without recursion: a long cycle must not
  // exhaust the stack.
  const std::size_t n = nodes_.size();
  std::vector<bool> placed(n);
  for (auto i : order) placed[i] = true;
  std::vector<std::vector<std::size_t>> users(n);
  std::vector<bool> self_loop(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (placed[i]) continue;
    for (const auto& in : nodes_[i].inputs) {
      const value_info* v = in.empty() ? nullptr : find(in);
      if (!v || v->producer < 0) continue;
      const auto p = static_cast<std::size_t>(v->producer);
      if (placed[p]) continue;
      if (p == i) self_loop[i] = true;
      users[p].push_back(i);
    }
  }
  constexpr std::size_t unvisited = static_cast<std::size_t>(-1);
  std::vector<std::size_t> index(n, unvisited), low(n, 0);
  std::vector<bool> on_stack(n);
  std::vector<std::size_t> stack;
  std::vector<std::pair<std::size_t, std::size_t>> calls;  // (node, next user to visit)
  std::size_t next_index = 0;
  std::vector<std::vector<std::size_t>> cycles;
  for (std::size_t root = 0; root < n; ++root) {
    if (placed[root] || index[root] != unvisited) continue;
    calls.emplace_back(root, 0);
    while (!calls.empty()) {
      auto& [v, k] = calls.back();
      if (k == 0 && index[v] == unvisited) {
        index[v] = low[v] = next_index++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      if (k < users[v].size()) {
        const std::size_t w = users[v][k++];
        if (index[w] == unvisited) calls.emplace_back(w, 0);
        else if (on_stack[w]) low[v] = std::min(low[v], index[w]);
        continue;
      }
      const std::size_t done = v;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[done]);
      if (low[done] != index[done]) continue;
      std::vector<std::size_t> component;
      std::size_t w = 0;
      do {
        w = stack.back();
        stack.pop_back();
        on_stack[w] = false;
        component.push_back(w);
      } while (w != done);
      if (component.size() > 1 || self_loop[done]) {
        std::sort(component.begin(), component.end());
        cycles.push_back(std::move(component));
      }
    }
  }
  // In the order the graph was built: the first operator added that sits on a cycle comes first.
  std::sort(cycles.begin(), cycles.end());
  return cycles;
}

void graph::validate() {
  // Every input is produced by something.
  for (const auto& n : nodes_)
    for (const auto& in : n.inputs)
      if (!in.empty() && !find(in))
        throw graph_error(
            make_error_code(errc::invalid_argument), n.name, in,
            n.type + " '" + n.name + "': input '" + in + "' is not produced by any operator, input or constant");
  const auto order = topological_order();
  if (order.size() != nodes_.size()) {
    const auto cycles = find_cycles(order);
    std::string what = "graph '" + name_ + "' has ";
    if (cycles.size() == 1) what += "a cycle";
    else what += std::to_string(cycles.size()) + " cycles:";
    for (std::size_t c = 0; c < cycles.size(); ++c) {
      if (cycles.size() > 1) what += c == 0 ? " one" : "; one";
      what += " through the operators ";
      for (std::size_t k = 0; k < cycles[c].size(); ++k) what += (k ? ", " : "") + nodes_[cycles[c][k]].name;
    }
    throw graph_error(make_error_code(errc::invalid_argument), nodes_[cycles.front().front()].name, {}, what);
  }
  for (auto i : order)
    if (!nodes_[i].inferred && !try_infer(i))
      throw graph_error(make_error_code(errc::invalid_argument), nodes_[i].name, {},
                        "cannot infer '" + nodes_[i].name + "'");
  if (outputs_.empty())
    throw graph_error(make_error_code(errc::invalid_argument), {}, {},
                      "graph '" + name_ + "' has no output (call set_output)");
  for (const auto& o : outputs_)
    if (!find(o))
      throw graph_error(make_error_code(errc::invalid_argument), {}, o,
                        "graph '" + name_ + "': output '" + o + "' is not produced by anything");
  for (const auto& [a, b] : hints_) {
    (void)node_index(a);
    (void)node_index(b);
  }
}

std::error_code graph::validate(std::string& message) noexcept {
  try {
    validate();
    message.clear();
    return {};
  } catch (const error& e) {
    message = e.what();
    return e.code();
  } catch (const std::exception& e) {
    message = e.what();
    return make_error_code(errc::invalid_argument);
  }
}

}  // namespace npurt
