// The windows Slice and Split read from their data input, one strided window per output (the
// parameters of a kernels::slice), the border Pad puts around its input (a kernels::pad), the
// shape Tile and Expand repeat their input to (a kernels::tile), the resampling of Resize (a
// kernels::resize) and GridSample's sampling (a kernels::grid_sample). Private to the graph
// library: inference (graph.cpp) checks them and gives the outputs' shapes, lowering (lower.cpp) launches them, from
// one computation.
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/kernel_ops.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace npurt::graph_ops {

/// One output of Slice or Split: its shape and, per dimension of the data, the first index and
/// the step of its window (a dimension the operator leaves whole starts at 0 with step 1).
struct window {
  npurt::shape dims{};
  std::array<std::int64_t, shape::max_rank> starts{};
  std::array<std::int64_t, shape::max_rank> steps{1, 1, 1, 1, 1, 1, 1, 1};
};

/// Slice's window (ONNX opset 10 on): `in` and `constants` as infer_op's, starts, ends, axes and
/// steps constant. Throws graph_error naming the node and the input at fault.
window slice_window(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants);

/// Split's windows, one per output, along `axis`: sizes from the constant `split` input (opset
/// 13 on), the `split` attribute (before 13), or `num_outputs` (18 on); with none of them, equal
/// parts. Throws graph_error as slice_window.
std::vector<window> split_windows(const node& n, std::span<const value_info* const> in,
                                  std::span<const tensor* const> constants);

/// Pad's output: its shape, the pad before each dimension (negative: a crop), the fill and the
/// mode, as a kernels::pad takes them.
struct padding {
  npurt::shape dims{};
  std::array<std::int64_t, shape::max_rank> begins{};
  double value = 0;
  kernels::pad_mode mode = kernels::pad_mode::constant;
};

/// Pad's border (ONNX opset 2 on): pads and value as attributes before opset 11; from 11 the
/// constant pads input, the optional constant_value (x's dtype, one value) and, from 18, axes.
/// Throws graph_error as slice_window; a fill that x's dtype cannot hold exactly is
/// invalid_argument.
padding pad_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants);

/// The output shape of Tile (x's extents times the constant repeats, one non-negative value per
/// dimension) or Expand (x broadcast with the constant shape, NumPy's way): both lower to a
/// kernels::tile, y[i] = x[i mod x's extents]. Throws graph_error as slice_window.
npurt::shape repeated_shape(const node& n, std::span<const value_info* const> in,
                            std::span<const tensor* const> constants);

/// NegativeLogLikelihoodLoss's `reduction` (none, sum or mean; mean when absent). Throws
/// graph_error (invalid_argument) for any other.
kernels::loss_reduction loss_reduction_of(const node& n);

/// ScatterND's and ScatterElements' `reduction` (none, add, mul, max or min; none when absent).
/// Throws graph_error (invalid_argument) for any other.
kernels::scatter_reduction scatter_reduction_of(const node& n);

/// TopK's kernel parameters, the tensors left for the caller: axis (-1 when absent) normalised, k
/// from its constant one-element int64 input (opset 10 on) or the attribute (opset 1), largest
/// and sorted. Throws graph_error: a k fed at run time is not_supported naming it, one outside
/// [1, x.shape[axis]] invalid_argument.
kernels::top_k top_k_spec(const node& n, std::span<const value_info* const> in,
                          std::span<const tensor* const> constants);

/// Trilu's diagonal offset: its constant int64 input k (one value), 0 when omitted. Throws
/// graph_error as slice_window.
std::int64_t trilu_k(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants);

/// Resize's (and the deprecated Upsample's) output shape and the kernels::resize that computes
/// it, x and y left for the caller to fill in.
struct resampling {
  npurt::shape dims{};
  kernels::resize op{};
};

/// Resize (ONNX opset 10 on: scales as the second input in opset 10; X, roi, scales, sizes from
/// 11; axes and keep_aspect_ratio_policy from 18) and Upsample (opsets 7 to 9). Throws
/// graph_error as slice_window; scales or sizes fed at run time are not_supported, as are
/// tf_crop_and_resize and antialias.
resampling resize_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants);

/// DFT (opset 17's axis attribute, opset 20's axis input) and STFT: the kernels::dft of the node
/// (x, window and y left for the caller to fill in) and its output shape in `out`. dft_length,
/// axis, frame_step and frame_length decide the shape: fed at run time they are not_supported,
/// saying so. A float x of rank 2 or more ending in 1 (real) or 2 (complex) values; an axis
/// outside [-r, -2] or [0, r - 2], a length below 1 or a window of another length
/// invalid_argument or invalid_shape, naming the operand.
kernels::dft dft_spec(const node& n, std::span<const value_info* const> in, std::span<const tensor* const> constants,
                      shape& out);

/// GridSample (ONNX opset 16's 2-D form, opset 20's N-D one): the kernels::grid_sample of its
/// attributes (x, grid and y left for the caller to fill in), its output shape [N, C, O1..Or] in
/// `out`. Throws graph_error as slice_window: integer X is not_supported, a grid that is no float
/// invalid_dtype, shapes that do not fit invalid_shape, unknown attribute values invalid_argument.
kernels::grid_sample grid_sample_spec(const node& n, std::span<const value_info* const> in, shape& out);

/// RoiAlign (ONNX opsets 10 and 16): the kernels::roi_align of its attributes (the tensors left
/// for the caller), its output shape [num_rois, C, output_height, output_width] in `out`. Throws
/// graph_error naming the operand: integer X not_supported, rois of another dtype or batch_indices
/// not integer invalid_dtype, shapes that do not fit invalid_shape, attribute values out of range
/// or unknown invalid_argument.
kernels::roi_align roi_align_spec(const node& n, std::span<const value_info* const> in, shape& out);

/// MaxPool's, AveragePool's or GlobalAveragePool's kernel (onnx.ai, opsets 1 to 22): 1-, 2- or 3-D, explicit pads
/// before and after, auto_pad SAME_UPPER / SAME_LOWER / VALID, dilations, ceil_mode, count_include_pad and
/// storage_order; x, y and indices left for the caller; the output shape in `out`. Throws graph_error naming X: an
/// attribute of the wrong length or value invalid_argument, an input smaller than the window invalid_shape, a rank or
/// dtype the kernel lacks not_supported.
kernels::pool2d pool_spec(const node& n, std::span<const value_info* const> in, shape& out);
/// MaxPoolGrad's, AveragePoolGrad's or GlobalAveragePoolGrad's kernel (dY, X) -> dX: the forward
/// operator's geometry from X and the attributes, `y` its output shape, which dY must have
/// (invalid_shape otherwise). What the gradient kernel cannot do (other than 2-D, dilation,
/// asymmetric pads or pads above half the window, ceil_mode, count_include_pad, storage_order)
/// is not_supported naming it. The tensors are the caller's.
kernels::pool2d_backward pool_backward_spec(const node& n, std::span<const value_info* const> in, shape& y);

/// QuantizeLinear's or DequantizeLinear's kernel: fn, the normalised axis when scale is per axis,
/// and y's dtype (the zero point's, output_dtype's or uint8 when quantizing, scale's when
/// dequantizing); the tensors are the caller's. Throws graph_error naming the operand: a dtype the
/// kernel lacks (int16, int4, float8, int32 x to quantize) or blocked quantization is
/// not_supported, a zero point of another dtype invalid_dtype, a scale or zero point of the wrong
/// length invalid_shape, an axis out of range invalid_argument.
kernels::quantize quantize_spec(const node& n, std::span<const value_info* const> in);

/// A recurrent layer (the graph's Recurrent node, which RNN, GRU and LSTM become; its attribute
/// "cell" says which): the kernels::recurrent of its attributes, the tensors left for the caller
/// (initial_h and initial_c set in options when given), and the shapes of Y and of Y_h / Y_c.
struct recurrent_layer {
  kernels::recurrent op{};
  shape y{}, state{};
};

/// The recurrent layer of `n` (onnx.ai/onnx/operators/onnx__RNN.html, onnx__GRU.html,
/// onnx__LSTM.html): inputs X, W, R, B, sequence_lens, initial_h, initial_c, B holding an LSTM's
/// peepholes after its biases. Throws graph_error naming the operand: a shape that does not fit
/// invalid_shape with the shape it must have, a dtype invalid_dtype, an unknown attribute value
/// invalid_argument. With the node's attribute "activation_params" = 1 (which add_recurrent sets
/// when the model gives activation_alpha or activation_beta) B ends in the table of
/// recurrent_activation_params and the kernel's option says so.
recurrent_layer recurrent_spec(const node& n, std::span<const value_info* const> in);

/// The activation parameters of a Recurrent node `n` as the kernel reads them after B: per
/// direction 6 values, the (alpha, beta) of its f, g and h (0 past the cell's count), each
/// activation_alpha[i] / activation_beta[i] of function i as ONNX's reference consumes them, the
/// ONNX operator's default where the list is shorter. Empty when the node gives neither list.
/// Throws graph_error as recurrent_spec for an unknown function or a list longer than the
/// functions.
std::vector<double> recurrent_activation_params(const node& n, std::int64_t dirs);

/// The comparison an ONNX comparison operator (Equal, Less, LessOrEqual, Greater, GreaterOrEqual)
/// lowers to; nullopt for any other type.
inline std::optional<kernels::compare_fn> compare_of(std::string_view type) noexcept {
  using enum kernels::compare_fn;
  if (type == "Equal") return equal;
  if (type == "Less") return less;
  if (type == "LessOrEqual") return less_equal;
  if (type == "Greater") return greater;
  if (type == "GreaterOrEqual") return greater_equal;
  return std::nullopt;
}

/// The logical function of And, Or, Xor and Not; nullopt for any other type.
inline std::optional<kernels::logical_fn> logical_of(std::string_view type) noexcept {
  using enum kernels::logical_fn;
  if (type == "And") return and_;
  if (type == "Or") return or_;
  if (type == "Xor") return xor_;
  if (type == "Not") return not_;
  return std::nullopt;
}

}  // namespace npurt::graph_ops
