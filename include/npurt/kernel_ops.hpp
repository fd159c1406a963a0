// npurt/kernel_ops.hpp — the kernel library's operation descriptors.
//
// Each operation is a plain aggregate of tensor descriptors and parameters, listed in
// NPURT_KERNEL_OP_LIST so that kernel_desc's variant holds it. Tensors are NCHW (or ND) device
// tensors; a tensor whose data is null means timing-only. The reference implementation and the
// cost model of every operation live in the simulator (sim/).
#pragma once

#include <npurt/tensor.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

// Every operand has an initializer: an aggregate that leaves trailing operands out (they are
// optional for some operations) then compiles cleanly under -Wextra.
namespace npurt::kernels {

/// The activation a cube kernel's epilogue applies as its results leave the accumulator (gelu:
/// the tanh approximation, as eltwise_fn::gelu).
enum class activation : std::uint8_t { none, relu, gelu, sigmoid, tanh };

/// C = act(alpha * op(A) * op(B) + beta * C + bias + residual). Rank 2 ([M,K] x [K,N]) or
/// batched rank 3 ([B,M,K]).
///
/// The epilogue (bias, residual, act) is applied to each output tile on its way from L0C to
/// global memory, as fused GEMM epilogues are on Da Vinci and CUTLASS: the output is written
/// once and never read back. bias and residual are optional (absent: rank 0, no data) and
/// broadcast to C NumPy-style; each stage rounds to C's dtype, so a fused kernel's result is
/// bit-identical to the separate matmul, add and activation kernels it replaces.
struct matmul {
  tensor_desc a{}, b{}, c{};
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  tensor_desc bias{}, residual{};
  kernels::activation act = activation::none;
};

/// 2-D convolution, NCHW. x: [N,C,H,W], w: [Co, C/groups, kh, kw], y: [N,Co,Ho,Wo].
/// y = act(conv(x, w) + bias + residual) with the same epilogue as matmul (bias typically
/// [1,Co,1,1], residual y's shape).
struct conv2d {
  tensor_desc x{}, w{}, y{};
  std::array<std::int32_t, 2> stride{1, 1};
  std::array<std::int32_t, 2> pad{0, 0};
  std::array<std::int32_t, 2> dilation{1, 1};
  std::int32_t groups = 1;
  tensor_desc bias{}, residual{};
  kernels::activation act = activation::none;
};

/// dx = conv2d_transpose(dy, w): the input gradient of conv2d (same parameters as the forward).
/// With relu_y, the output (or input: only its sign is read) of a ReLU that produced the
/// convolution's input, dx is masked by relu_y > 0 as it leaves the cube: the ReLU's gradient
/// in the epilogue, bit for bit what relu_backward after this kernel gives, without writing the
/// unmasked gradient and reading it back (the dgrad + dReLU fusion of cuDNN's graph API).
struct conv2d_backward_data {
  tensor_desc dy{}, w{}, dx{};
  std::array<std::int32_t, 2> stride{1, 1};
  std::array<std::int32_t, 2> pad{0, 0};
  std::array<std::int32_t, 2> dilation{1, 1};
  std::int32_t groups = 1;
  tensor_desc relu_y{};  ///< optional: dx's shape and dtype
};

/// dw = correlation of x and dy: the weight gradient of conv2d.
struct conv2d_backward_weight {
  tensor_desc x{}, dy{}, dw{};
  std::array<std::int32_t, 2> stride{1, 1};
  std::array<std::int32_t, 2> pad{0, 0};
  std::array<std::int32_t, 2> dilation{1, 1};
  std::int32_t groups = 1;
};

/// Elementwise functions. Binary: add .. div, relu_backward (y = b > 0 ? a : 0, the gradient
/// of Relu: a = dy, b = the Relu's input or output), pow, max, min, mod and fmod. Unary (ONNX's
/// meanings): the rest; alpha and beta are their parameters (leaky_relu, elu, celu,
/// thresholded_relu: alpha; selu: alpha, gamma = beta; hard_sigmoid: alpha, beta; clip: min =
/// alpha, max = beta).
///
/// gelu is the tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): ONNX's Gelu
/// with approximate = "tanh" (onnx.ai/onnx/operators/onnx__Gelu.html) and PyTorch's
/// gelu(approximate='tanh'), not ONNX's default erf form, from which it differs by up to about
/// 5e-4 (the graph layer computes that form as a chain of erf kernels).
///
/// mod and fmod are ONNX's Mod (onnx.ai/onnx/operators/onnx__Mod.html): mod is its fmod = 0, the
/// remainder with the divisor's sign (Python's %, numpy.mod), integers only; fmod is its fmod = 1,
/// the remainder with the dividend's sign (C's fmod and %), floats and integers.
///
/// round is ONNX's Round (onnx.ai/onnx/operators/onnx__Round.html): to the nearest integer,
/// halves to even (numpy.round), on floats.
///
/// asin, acos and atan are ONNX's Asin, Acos and Atan (onnx.ai/onnx/operators/onnx__Asin.html
/// and its siblings), on floats: outside [-1, 1] asin and acos give NaN, as numpy.arcsin and
/// numpy.arccos do.
///
/// shift_left and shift_right are ONNX's BitShift (onnx.ai/onnx/operators/onnx__BitShift.html)
/// on the unsigned dtypes only (u8, u16, u32, u64): a shift by the width or more gives 0, as
/// numpy's left_shift and right_shift do on unsigned integers; bits shifted out are dropped.
///
/// Integer tensors (i8, i16, i32, i64, u8, u16, u32, u64) take the functions integers_ok() names, computed exactly in
/// the dtype: add, sub, mul, neg and pow wrap modulo 2^n as two's complement (numpy and ONNX
/// Runtime do); div truncates toward zero (C, and ONNX's reference, which divides then casts);
/// the one quotient that does not fit, INT_MIN / -1, wraps to INT_MIN as numpy's does, and
/// abs(INT_MIN) is INT_MIN as in numpy; INT_MIN mod or fmod -1 is 0; relu is max(x, 0) (ONNX's
/// Relu takes int8, int32 and int64 from opset 14). A zero divisor of div, mod or
/// fmod, or a negative exponent of pow (numpy refuses integers to negative powers), is data,
/// known only when the kernel runs, which then fails with errc::invalid_argument and leaves y
/// unwritten.
enum class eltwise_fn : std::uint8_t {
  add,
  sub,
  mul,
  div,
  relu,
  gelu,
  sigmoid,
  tanh,
  relu_backward,
  pow,
  max,
  min,
  exp,
  log,
  sqrt,
  abs,
  neg,
  reciprocal,
  floor,
  ceil,
  erf,
  sin,
  cos,
  softplus,
  softsign,
  sign,
  leaky_relu,
  elu,
  selu,
  hard_sigmoid,
  thresholded_relu,
  celu,
  hard_swish,
  clip,
  mod,
  fmod,
  round,
  shift_left,
  shift_right,
  asin,
  acos,
  atan,
};
inline constexpr eltwise_fn last_eltwise_fn = eltwise_fn::atan;

constexpr bool is_binary(eltwise_fn f) noexcept {
  return f <= eltwise_fn::div || (f >= eltwise_fn::relu_backward && f <= eltwise_fn::min) || f == eltwise_fn::mod ||
         f == eltwise_fn::fmod || f == eltwise_fn::shift_left || f == eltwise_fn::shift_right;
}

/// Whether f computes on integer dtypes (exact integer arithmetic; see eltwise_fn).
constexpr bool integers_ok(eltwise_fn f) noexcept {
  switch (f) {
    case eltwise_fn::add:
    case eltwise_fn::sub:
    case eltwise_fn::mul:
    case eltwise_fn::div:
    case eltwise_fn::pow:
    case eltwise_fn::max:
    case eltwise_fn::min:
    case eltwise_fn::relu:
    case eltwise_fn::abs:
    case eltwise_fn::neg:
    case eltwise_fn::sign:
    case eltwise_fn::mod:
    case eltwise_fn::fmod:
    case eltwise_fn::shift_left:
    case eltwise_fn::shift_right: return true;
    default: return false;
  }
}

/// Whether f computes on float dtypes: all but mod (ONNX's Mod takes floats with fmod = 1 only).
constexpr bool floats_ok(eltwise_fn f) noexcept {
  return f != eltwise_fn::mod && f != eltwise_fn::shift_left && f != eltwise_fn::shift_right;
}

/// y = fn(a, b) with NumPy broadcasting, or y = fn(a) for the unary functions, whose b stays
/// empty (`{}`): a unary function given a b is refused with errc::invalid_argument.
struct elementwise {
  eltwise_fn fn = eltwise_fn::add;
  tensor_desc a{}, b{}, y{};
  float alpha = 0.0f;
  float beta = 0.0f;
};

/// One function of a fused elementwise chain. `a` and `b` name its operands: an input of the
/// chain (0..4 for fused_elementwise::a..e) or `fused_elementwise::chain`, the previous stage's
/// result. Unary functions read `a` only.
struct eltwise_stage {
  eltwise_fn fn = eltwise_fn::relu;
  std::uint8_t a = 0, b = 0;
  float alpha = 0.0f;
  float beta = 0.0f;
};

/// A chain of elementwise functions computed in one pass over memory, as a compiler's loop
/// fusion emits it (XLA's and TVM's elementwise fusion): every element of y is computed from the
/// inputs' elements (each broadcast to y's shape NumPy-style) through all stages, so each input
/// is read once and y written once, and no intermediate tensor exists. Each stage's result is
/// rounded to y's dtype as a separate kernel's store would round it, so the chain computes
/// exactly what its stages computed as separate elementwise kernels. Stage 0 reads inputs only;
/// every later stage reads the previous result (`chain`) as one operand.
struct fused_elementwise {
  static constexpr std::size_t max_inputs = 5;
  static constexpr std::size_t max_stages = 4;
  static constexpr std::uint8_t chain = 0xff;
  tensor_desc a{}, b{}, c{}, d{}, e{}, y{};
  std::array<eltwise_stage, max_stages> stages{};
  std::uint8_t inputs = 0;  ///< a.. used
  std::uint8_t count = 0;   ///< stages used

  [[nodiscard]] constexpr const tensor_desc& input(std::size_t i) const noexcept {
    const tensor_desc* all[] = {&a, &b, &c, &d, &e};
    return *all[i < max_inputs ? i : 0];
  }
  [[nodiscard]] constexpr tensor_desc& input(std::size_t i) noexcept {
    tensor_desc* all[] = {&a, &b, &c, &d, &e};
    return *all[i < max_inputs ? i : 0];
  }
};

/// Batch normalisation over N,H,W per channel of an NCHW tensor. In training it uses batch
/// statistics, writes saved_mean / saved_invstd and updates running_mean / running_var; in
/// inference it uses the running statistics.
struct batchnorm {
  tensor_desc x{}, gamma{}, beta{}, running_mean{}, running_var{}, y{}, saved_mean{}, saved_invstd{};
  bool training = true;
  float eps = 1e-5f;
  float momentum = 0.1f;
};

/// Gradients of training-mode batchnorm.
struct batchnorm_backward {
  tensor_desc x{}, dy{}, gamma{}, saved_mean{}, saved_invstd{}, dx{}, dgamma{}, dbeta{};
};

/// Layer normalisation over the trailing dimensions from `axis` on.
struct layernorm {
  tensor_desc x{}, gamma{}, beta{}, y{};
  std::int32_t axis = -1;
  float eps = 1e-5f;
};

enum class pool_mode : std::uint8_t { max, avg, global_avg };

/// Pooling over the trailing 1, 2 or 3 dimensions of x [N, C, D1..Dr] (rank 3, 4 or 5; the name
/// is from when it was 2-D only): ONNX's MaxPool and AveragePool. Entry i of window, stride, pad,
/// pad_end and dilation belongs to spatial dimension i (entries past r are ignored). global_avg
/// averages each whole plane and ignores them.
///
/// Output extents follow the ONNX operator spec: (D + pad + pad_end - dilation * (window - 1) - 1)
/// / stride + 1, rounded down, or up with ceil_mode, where a window that would start past the
/// input and its leading pad is dropped. Avg divides by the window's elements inside the input,
/// or with count_include_pad by those inside the padded input (a ceil_mode window's part past the
/// end pad not counted, as PyTorch and onnxruntime do). A window with no input element (pads may
/// exceed half the window) is max's identity, -inf (an integer dtype's minimum), with index -1
/// as onnxruntime gives it, and NaN for avg without count_include_pad (the ONNX reference's 0/0).
/// Max also takes the integer dtypes, exactly. indices (optional, i64, y's shape) is MaxPool's
/// second output: the flat index into x of each maximum (the first one in row-major window order,
/// or the first NaN), with the spatial dimensions in column-major order when column_major
/// (storage_order = 1).
struct pool2d {
  pool_mode mode = pool_mode::max;
  tensor_desc x{}, y{};
  std::array<std::int32_t, 3> window{2, 2, 2};
  std::array<std::int32_t, 3> stride{2, 2, 2};
  std::array<std::int32_t, 3> pad{0, 0, 0};          ///< before each spatial dimension
  std::array<std::int32_t, 3> pad_end{-1, -1, -1};   ///< after it; -1: the same as pad
  std::array<std::int32_t, 3> dilation{1, 1, 1};
  bool ceil_mode = false;
  bool count_include_pad = false;
  bool column_major = false;
  tensor_desc indices{};
};

/// The pad after spatial dimension i of a pooling: pad_end[i], or pad[i] when that is -1.
constexpr std::int32_t end_pad(const pool2d& p, std::size_t i) noexcept {
  return p.pad_end[i] == -1 ? p.pad[i] : p.pad_end[i];
}

/// Gradient of pool2d: dx from dy (x is needed for max).
/// ceil_mode and count_include_pad are pool2d's: dy has the forward's output extents (rounded up
/// with ceil_mode) and an average's share divides by the forward's divisor, so dx is the adjoint
/// of the pool2d with the same parameters (PyTorch's avg_pool2d backward).
struct pool2d_backward {
  pool_mode mode = pool_mode::max;
  tensor_desc x{}, dy{}, dx{};
  std::array<std::int32_t, 2> window{2, 2};
  std::array<std::int32_t, 2> stride{2, 2};
  std::array<std::int32_t, 2> pad{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = false;
};

struct softmax {
  tensor_desc x{}, y{};
  std::int32_t axis = -1;
};

/// argmax / argmin reduce one axis to the int64 index of the largest / smallest element (the
/// first one on ties, the last with select_last); NaN is never selected unless all are NaN. prod
/// multiplies (ONNX's ReduceProd), in float in row-major order as sum adds. On the integer dtypes
/// (i8, i32, i64, u8) sum, prod, max and min are exact in the dtype, sum and prod wrapping modulo
/// 2^n as numpy's integer reductions do; mean, argmax and argmin take floats only.
enum class reduce_fn : std::uint8_t { sum, mean, max, min, argmax, argmin, prod };

/// Reduction over the axes whose bit is set in axes_mask (bit i = dimension i).
struct reduce {
  reduce_fn fn = reduce_fn::sum;
  tensor_desc x{}, y{};
  std::uint32_t axes_mask = 0;
  bool keep_dims = false;
  bool select_last = false;
};

/// y = x permuted: y.shape[i] = x.shape[perm[i]].
struct transpose {
  tensor_desc x{}, y{};
  std::array<std::uint8_t, shape::max_rank> perm{0, 1, 2, 3, 4, 5, 6, 7};
};

/// y = a strided window of x, for any dtype: y[i0..ik] = x[starts[0] + i0 * steps[0], ...,
/// starts[k] + ik * steps[k]] over every dimension of y (x and y have one rank). A step may be
/// negative (the window walks x backwards, as NumPy's and ONNX's Slice do) but never 0; every
/// index the window reaches must lie inside x. Entries past the rank are ignored.
struct slice {
  tensor_desc x{}, y{};
  std::array<std::int64_t, shape::max_rank> starts{};
  std::array<std::int64_t, shape::max_rank> steps{1, 1, 1, 1, 1, 1, 1, 1};
};

/// How pad fills what lies outside x: ONNX's Pad modes, which are numpy.pad's constant, reflect
/// (mirrored without repeating the edge element), edge (the nearest element) and wrap (periodic).
enum class pad_mode : std::uint8_t { constant, reflect, edge, wrap };

/// y = x with a border, for any dtype: y[i] = x[i - begins] in every dimension where that index
/// lies inside x; elsewhere `value` (constant mode) or the element the mode maps the index to, as
/// if x were padded without end. A negative begin crops (ONNX's negative pads); the end pad of a
/// dimension is what y's extent leaves. `value` must be exact in the dtype (an integer dtype takes
/// an integral value in its range). Entries past the rank are ignored.
struct pad {
  tensor_desc x{}, y{};
  std::array<std::int64_t, shape::max_rank> begins{};
  double value = 0;
  pad_mode mode = pad_mode::constant;
};

/// y = the slices of `data` that `indices` pick along `axis`, ONNX's Gather
/// (onnx.ai/onnx/operators/onnx__Gather.html): with a = axis,
/// y[i_0..i_(a-1), j_0..j_(q-1), k...] = data[i_0..i_(a-1), indices[j_0..j_(q-1)], k...], so
/// y.shape = data.shape[:a] + indices.shape + data.shape[a+1:] and y has data's dtype (any).
/// indices are int32 or int64 of any rank, rank 0 (a scalar) too, which drops the axis; y may be
/// rank 0 then. axis is in [0, data's rank): the caller normalises a negative one. An index
/// counts from the end when negative; one outside [-s, s - 1] (s = data.shape[a]) is known only
/// when the kernel runs, which then fails with errc::invalid_argument and leaves y unwritten.
struct gather {
  tensor_desc data{}, indices{}, y{};
  std::int32_t axis = 0;
};

/// y = x repeated along every dimension: y[i] = x[i mod x.shape] in each dimension (x and y have
/// one rank), for any dtype. ONNX's Tile (y's extent a multiple of x's) and Expand (x's extent 1
/// or y's, NumPy broadcasting once x's shape is aligned to y's rank) are both this.
struct tile {
  tensor_desc x{}, y{};
};

/// ONNX's Trilu (onnx.ai/onnx/operators/onnx__Trilu.html): y = x with the elements of each matrix
/// (the last two dimensions) outside a triangle set to zero, for any dtype. upper keeps column j of
/// row i where j - i >= k, lower where j - i <= k; k may be any value (a triangle past the matrix
/// keeps all or none of it). x and y have one shape, of rank 2 or more.
struct trilu {
  tensor_desc x{}, y{};
  std::int64_t k = 0;
  bool upper = true;
};

/// ONNX's GatherElements (onnx.ai/onnx/operators/onnx__GatherElements.html), NumPy's
/// take_along_axis: y has indices' shape and y[i] = data[i with its `axis` coordinate replaced by
/// indices[i]], for any dtype. data and indices have one rank; off the axis, indices' extents are
/// at most data's. indices are int32 or int64, negative ones counting from the end; one outside
/// [-s, s - 1] (s = data.shape[axis]) is known only when the kernel runs, which then fails with
/// errc::invalid_argument and leaves y unwritten.
struct gather_elements {
  tensor_desc data{}, indices{}, y{};
  std::int32_t axis = 0;
};

/// How a loss is reduced over its elements: ONNX's `reduction` attribute.
enum class loss_reduction : std::uint8_t { none, sum, mean };

/// ONNX's NegativeLogLikelihoodLoss (onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html):
/// x [N, C, d1..dk] (log-probabilities, float), target [N, d1..dk] of class indices (int32 or
/// int64), weight [C] optional (x's dtype). Each element's loss is -x[n, t, d] * weight[t] (weight 1
/// when absent), 0 where t is ignore_index (when has_ignore_index). reduction none: y has target's
/// shape; sum: y = [1] holding the sum; mean: the sum over the sum of the weights of the elements
/// not ignored (their count without weights; 0 / 0 is NaN). A target outside [0, C) that is not
/// ignored is known only when the kernel runs, which then fails with errc::invalid_argument and
/// leaves y unwritten. Computed in double, rounded to y's dtype once.
struct nll_loss {
  tensor_desc x{}, target{}, weight{}, y{};
  std::int64_t ignore_index = 0;
  bool has_ignore_index = false;
  loss_reduction reduction = loss_reduction::mean;
};

/// How resize interpolates: ONNX's Resize modes (onnx.ai/onnx/operators/onnx__Resize.html). linear is
/// N-linear over every dimension, cubic Keys' convolution kernel (IEEE Trans. ASSP 29(6), 1981)
/// with coefficient `cubic_coeff_a`.
enum class resize_mode : std::uint8_t { nearest, linear, cubic };

/// Where output index i of a dimension samples x (ONNX's coordinate_transformation_mode, with s
/// the scale, n x's extent and m = s * n before flooring): half_pixel (i + 0.5) / s - 0.5;
/// pytorch_half_pixel the same, -0.5 when m is 1; align_corners i * (n - 1) / (m - 1), 0 when m
/// is 1; asymmetric i / s; tf_half_pixel_for_nn (i + 0.5) / s; half_pixel_symmetric half_pixel
/// shifted so that the centres of x and y meet when y's extent is not m; tf_crop_and_resize
/// start (n - 1) + i (end - start) (n - 1) / (m - 1) (the middle of the box when m is 1) for the
/// dimension's box [start, end] in x's normalised coordinates, an output whose coordinate falls
/// outside [0, n - 1] in any dimension being the extrapolation value.
enum class resize_coordinates : std::uint8_t {
  half_pixel,
  pytorch_half_pixel,
  align_corners,
  asymmetric,
  tf_half_pixel_for_nn,
  half_pixel_symmetric,
  tf_crop_and_resize
};

/// Which neighbour nearest mode takes when the source coordinate falls between two: ONNX's
/// nearest_mode. An integral coordinate is itself in every mode.
enum class nearest_rounding : std::uint8_t { round_prefer_floor, round_prefer_ceil, floor, ceil };

/// y = x resampled in every dimension, ONNX's Resize without its crop: y[i] interpolates the
/// elements of x around the source coordinate `coordinates` maps i to (per dimension, with its
/// scale), neighbours past an edge clamped to it; N-linear and cubic are separable products of
/// the 1-D weights. x and y share a dtype and a rank: a float one in any mode, an integer or bool
/// one in nearest mode (each element copied; a crop's extrapolation value must be one of the
/// dtype's values); y's extents are the caller's (ONNX:
/// floor(n * scale), or the sizes the scales came from). exclude_outside drops the neighbours
/// outside x from linear and cubic and renormalises the rest. antialias (ONNX opset 18) widens
/// linear's and cubic's filter by 1 / scale when a dimension is downsampled (scale < 1), its
/// weights normalised to sum 1, as onnx/reference/ops/op_resize.py computes them. roi_start and
/// roi_end are tf_crop_and_resize's box per dimension. Computed in double, rounded to y's dtype
/// once. Scales and boxes past the rank are ignored.
struct resize {
  tensor_desc x{}, y{};
  std::array<double, shape::max_rank> scales{1, 1, 1, 1, 1, 1, 1, 1};
  float cubic_coeff_a = -0.75f;
  resize_mode mode = resize_mode::nearest;
  resize_coordinates coordinates = resize_coordinates::half_pixel;
  nearest_rounding nearest = nearest_rounding::round_prefer_floor;
  bool exclude_outside = false;
  bool antialias = false;
  float extrapolation_value = 0.0f;
  std::array<double, shape::max_rank> roi_start{};
  std::array<double, shape::max_rank> roi_end{1, 1, 1, 1, 1, 1, 1, 1};
};

/// ONNX's CumSum (onnx.ai/onnx/operators/onnx__CumSum.html): y[.., i, ..] = the sum of x[.., j, ..]
/// along `axis` over j <= i (j < i when exclusive; j >= i, or j > i, when reverse), x and y of one
/// shape and dtype. axis is in [-rank, rank), negative counting from the end. Floats are added in
/// float in the order a sequential scan adds them, each partial sum rounded to the dtype as it is
/// stored (f32: a plain float running sum; f16 and bf16: the running sum rounded to the dtype at
/// every step, as a scan that keeps it in y does). Integers (i8, i32, i64, u8) add exactly,
/// wrapping modulo 2^n as numpy's cumsum in the dtype does.
struct cumsum {
  tensor_desc x{}, y{};
  std::int32_t axis = 0;
  bool exclusive = false;
  bool reverse = false;
};

/// How grid_sample interpolates: ONNX's GridSample modes (onnx.ai/onnx/operators/onnx__GridSample.html;
/// opset 16 spells linear and cubic "bilinear" and "bicubic"). nearest rounds each coordinate
/// half to even, linear is N-linear, cubic Keys' kernel with a = -0.75 (IEEE Trans. ASSP 29(6),
/// 1981), each over the 2 or 4 neighbours of every spatial dimension.
enum class grid_sample_mode : std::uint8_t { linear, nearest, cubic };

/// What grid_sample reads outside x: ONNX's padding_mode. zeros reads 0, border clamps the
/// coordinate (and each neighbour) to the edge, reflection reflects it off the borders (-0.5 and
/// n - 0.5, or 0 and n - 1 with align_corners) until it lies between them.
enum class grid_padding : std::uint8_t { zeros, border, reflection };

/// ONNX's GridSample: x [N, C, D1..Dr], grid [N, O1..Or, r], y [N, C, O1..Or]. grid[n, o] holds
/// the r normalised coordinates of output o in x's spatial order reversed ((x, y) for 2-D), -1
/// and 1 the centres of the edge elements with align_corners, their outer edges without; each
/// is denormalised, padded by `padding` and interpolated by `mode` as ONNX's reference
/// implementation does (onnx/reference/ops/op_grid_sample.py). x and y share a float dtype, the
/// grid is any float dtype; computed in double, rounded to y's dtype once. A grid value is data:
/// a coordinate that is still not finite after padding (NaN anywhere, an infinity but under
/// border padding) fails the kernel with errc::invalid_argument when it runs, y unwritten.
struct grid_sample {
  tensor_desc x{}, grid{}, y{};
  grid_sample_mode mode = grid_sample_mode::linear;
  grid_padding padding = grid_padding::zeros;
  bool align_corners = false;
};

/// How ScatterND and ScatterElements combine an update with the element it lands on: ONNX's
/// `reduction` attribute (onnx.ai/onnx/operators/onnx__ScatterND.html, opset 16 added add and mul,
/// opset 18 max and min). none replaces it.
enum class scatter_reduction : std::uint8_t { none, add, mul, max, min };

/// ONNX's ScatterND (onnx.ai/onnx/operators/onnx__ScatterND.html): y = a copy of data in which,
/// for every index tuple indices[i] (i over indices.shape[:-1], row-major), the slice
/// data[indices[i]] (data.shape[k:] elements, k = indices.shape[-1]) is combined with updates[i]
/// by `reduction`. updates.shape = indices.shape[:-1] + data.shape[k:] (a scalar when that is
/// empty); data, updates and y have one dtype (any for none; float or integer for a reduction:
/// floats combine in float rounded to the dtype, integers exactly, add and mul wrapping modulo 2^n
/// as numpy's do; max and min propagate NaN as numpy.maximum does). Indices are int32 or int64 of
/// rank 1 or more with 1 <= k <= data's rank. ONNX leaves duplicate indices under none undefined;
/// here updates apply in index order, so the last one wins. An index outside [-s, s - 1] of its
/// axis is known only when the kernel runs, which then fails with errc::invalid_argument naming
/// it, y unwritten. y may be data's own buffer (an in-place cache update).
struct scatter_nd {
  tensor_desc data{}, indices{}, updates{}, y{};
  scatter_reduction reduction = scatter_reduction::none;
};

/// ONNX's ScatterElements (onnx.ai/onnx/operators/onnx__ScatterElements.html), the inverse of
/// GatherElements: y = a copy of data in which, for every position j of indices (row-major),
/// the element at j with its `axis` coordinate replaced by indices[j] is combined with
/// updates[j] by `reduction` (as scatter_nd's). data, indices and updates have one rank; indices
/// and updates one shape, off the axis no larger than data's. axis is in [0, rank): the caller
/// normalises a negative one. Duplicates under none: the last in index order wins. An index
/// outside [-s, s - 1] fails the kernel when it runs with errc::invalid_argument, y unwritten.
struct scatter_elements {
  tensor_desc data{}, indices{}, updates{}, y{};
  std::int32_t axis = 0;
  scatter_reduction reduction = scatter_reduction::none;
};

/// ONNX's GatherND (onnx.ai/onnx/operators/onnx__GatherND.html): with b = batch_dims and
/// k = indices.shape[-1], y[j..., i...] = data[j..., indices[j..., :], i...] for the b leading
/// (batch) dimensions j that data and indices share, so y.shape = indices.shape[:-1] +
/// data.shape[b + k:] (a scalar when that is empty), data's dtype (any). indices are int32 or
/// int64 with 0 <= b < min(rank(data), rank(indices)) and 1 <= k <= rank(data) - b. An index
/// outside [-s, s - 1] fails the kernel when it runs with errc::invalid_argument, y unwritten.
struct gather_nd {
  tensor_desc data{}, indices{}, y{};
  std::int32_t batch_dims = 0;
};

/// ONNX's TopK (onnx.ai/onnx/operators/onnx__TopK.html): along `axis`, the k largest (or
/// smallest) elements of x in values and their positions in indices (int64 or int32), both of
/// x's shape with the axis k long; values has x's dtype (float or integer), copied exactly. The
/// order is always sorted (largest first, or smallest first), also when `sorted` is false, where
/// ONNX leaves it open; equal values keep the lower index first, as ONNX specifies. NaN orders as
/// ONNX's reference (a lexsort, which puts NaN after every number) does: above every number, so
/// first when largest and last when smallest, NaNs among themselves by index. axis is in
/// [0, rank): the caller normalises a negative one; 1 <= k <= x.shape[axis].
struct top_k {
  tensor_desc x{}, values{}, indices{};
  std::int32_t axis = 0;
  std::int64_t k = 1;
  bool largest = true;
  bool sorted = true;
};

/// Comparisons: ONNX's Equal, Less, LessOrEqual, Greater and GreaterOrEqual
/// (onnx.ai/onnx/operators/onnx__Equal.html and its neighbours).
enum class compare_fn : std::uint8_t { equal, less, less_equal, greater, greater_equal };

/// y = fn(a, b) with NumPy broadcasting: y is bool, a and b share one dtype, any numeric one (bool
/// too for equal). The comparison is exact in the operands' own type: integers compare as integers
/// (i64 values above 2^53, which a double would round together, stay apart), floats as IEEE
/// values, so NaN compares false, equal included, and -0 equals +0.
struct compare {
  compare_fn fn = compare_fn::equal;
  tensor_desc a{}, b{}, y{};
};

/// out = cond ? x : y elementwise, ONNX's Where (onnx.ai/onnx/operators/onnx__Where.html), with
/// cond, x and y broadcast NumPy-style to out's shape. cond is bool (any nonzero byte is true); x,
/// y and out share one dtype, any. Elements are copied as bytes: NaN payloads pass unchanged.
struct where {
  tensor_desc cond{}, x{}, y{}, out{};
};

/// Logical functions: ONNX's And, Or, Xor (binary) and Not (unary).
enum class logical_fn : std::uint8_t { and_, or_, xor_, not_ };

/// y = fn(a, b) with NumPy broadcasting, or y = !a for not_ (b unused): a, b and y are bool; any
/// nonzero byte reads as true, and y is written 0 or 1.
struct logical {
  logical_fn fn = logical_fn::and_;
  tensor_desc a{}, b{}, y{};
};

/// What float_class finds: ONNX's IsNaN and IsInf.
enum class float_class_fn : std::uint8_t { is_nan, is_inf };

/// y = whether each element of x is NaN (is_nan) or an infinity (is_inf, of the signs that
/// detect_negative and detect_positive, IsInf's attributes, select), ONNX's IsNaN and IsInf
/// (onnx.ai/onnx/operators/onnx__IsNaN.html, onnx__IsInf.html). x has a float dtype, y is bool of
/// x's shape.
struct float_class {
  float_class_fn fn = float_class_fn::is_nan;
  tensor_desc x{}, y{};
  bool detect_negative = true;
  bool detect_positive = true;
};

/// Which way quantize converts: ONNX's QuantizeLinear or DequantizeLinear, or requantize, the
/// last step of ONNX's QLinearMatMul and QLinearConv.
enum class quantize_fn : std::uint8_t { quantize, dequantize, requantize };

/// ONNX's QuantizeLinear and DequantizeLinear (onnx.ai/onnx/operators/onnx__QuantizeLinear.html,
/// onnx__DequantizeLinear.html; the arithmetic of onnx/reference/ops/op_quantize_linear.py and
/// op_dequantize_linear.py). quantize: y = saturate(round_half_even(x / scale) + zero_point), x
/// float, y i8 or u8 (zero_point's dtype when present). dequantize: y = (x - zero_point) * scale,
/// x i8, u8 or i32, y float. scale (float) and zero_point (absent: 0) hold one value (per tensor)
/// or, 1-D, one per index of x's `axis` (per axis; `axis` in [0, rank)).
///
/// requantize is what onnx/reference/ops/op_qlinear_matmul.py and op_qlinear_conv.py do with the
/// int32 accumulator: y = saturate(round_half_even(x * scale + zero_point)), x int32, scale float
/// (the caller's a_scale * b_scale / y_scale, per tensor or per axis as above), zero_point one
/// value (absent: 0) of y's dtype, i8 or u8. The product and the sum are taken in double, as
/// NumPy promotes int32 times float32 to float64, and rounded once.
struct quantize {
  quantize_fn fn = quantize_fn::quantize;
  tensor_desc x{}, scale{}, zero_point{}, y{};
  std::int32_t axis = 1;
};

/// The cell a recurrent kernel runs: ONNX's RNN, GRU and LSTM (onnx.ai/onnx/operators/onnx__RNN.html,
/// onnx__GRU.html, onnx__LSTM.html), with 1, 3 and 4 gates of hidden_size rows each in W, R and B,
/// in ONNX's orders: GRU z, r, h; LSTM i, o, f, c.
enum class rnn_cell : std::uint8_t { rnn, gru, lstm };

/// ONNX's direction attribute: forward runs t = 0 .. seq - 1, reverse the other way, bidirectional
/// both, the forward pass as direction 0.
enum class rnn_direction : std::uint8_t { forward, reverse, bidirectional };

/// The activations a recurrent cell applies, as the ONNX spec's list defines them: without
/// recurrent::activation_params each takes its ONNX operator's default parameters (LeakyRelu
/// alpha 0.01, ThresholdedRelu alpha 1, HardSigmoid alpha 0.2 and beta 0.5, Elu alpha 1; Affine
/// alpha 1 and beta 0, ScaledTanh alpha 1 and beta 1, which the ONNX spec defines as alpha * x +
/// beta and alpha * tanh(beta * x)).
enum class rnn_activation : std::uint8_t {
  sigmoid,
  tanh,
  relu,
  softsign,
  softplus,
  leaky_relu,
  thresholded_relu,
  hard_sigmoid,
  elu,
  affine,
  scaled_tanh
};

/// ONNX's RNN, GRU and LSTM over a whole sequence, as the spec's equations define them and ONNX's
/// reference implementations compute them (onnx/reference/ops/op_rnn.py, op_gru.py, op_lstm.py).
/// x [seq, batch, input] (batch_major: [batch, seq, input]), w [dirs, gates * hidden, input],
/// r [dirs, gates * hidden, hidden]; hidden is r's last dimension, dirs 2 when bidirectional.
/// b (optional, zeros when absent) is ONNX's B [dirs, 2 * gates * hidden], for an LSTM with its
/// peepholes P appended on the last axis ([dirs, 8 * hidden + 3 * hidden], P's order i, o, f).
/// sequence_lens (optional, int32 [batch]) holds each batch entry's length in [0, seq]: steps past
/// it leave y zero and the state as it was, as the reference's mask does.
///
/// y (optional) [seq, dirs, batch, hidden] (batch_major: [batch, seq, dirs, hidden]). y_h and y_c
/// (optional; y_c LSTM only) [dirs, batch, hidden] (batch_major: [batch, dirs, hidden]) are
/// read-write: they hold the initial state on entry when initial_h / initial_c is set (zeros
/// otherwise) and the state after each direction's last step on exit. Eight operands are all a
/// descriptor can carry, so ONNX's initial_h, initial_c and P ride in y_h, y_c and b (the graph
/// copies and concatenates them there).
///
/// activations holds each direction's f (and g, h: GRU 2, LSTM 3) in ONNX's order, the forward
/// direction's first; clip bounds every activation's input to [-clip, clip] (infinity: none).
/// With activation_params, b (then required) ends in 6 more values per direction, after B and
/// P: the (alpha, beta) of that direction's f, g and h (unused pairs ignored). The descriptor
/// has no room for 12 floats, and b is read once per launch anyway; the graph appends them.
/// input_forget couples an LSTM's forget gate to its input gate (f = 1 - i); linear_before_reset
/// applies a GRU's reset gate after R's product. Computed in float, the state carried in float
/// from step to step, every output rounded once to its dtype.
struct recurrent {
  tensor_desc x{}, w{}, r{}, b{}, sequence_lens{}, y{}, y_h{}, y_c{};
  float clip = std::numeric_limits<float>::infinity();
  rnn_cell cell = rnn_cell::lstm;
  rnn_direction direction = rnn_direction::forward;
  bool batch_major = false;  // ONNX's layout = 1
  std::uint8_t options = 0;  // the bits below
  std::array<rnn_activation, 6> activations{rnn_activation::sigmoid, rnn_activation::tanh, rnn_activation::tanh,
                                            rnn_activation::sigmoid, rnn_activation::tanh, rnn_activation::tanh};
  static constexpr std::uint8_t initial_h = 1;            // y_h holds the initial hidden state
  static constexpr std::uint8_t initial_c = 2;            // y_c holds the initial cell state
  static constexpr std::uint8_t input_forget = 4;         // LSTM
  static constexpr std::uint8_t linear_before_reset = 8;  // GRU
  static constexpr std::uint8_t activation_params = 16;   // b ends in (alpha, beta) x 3 per direction
  static constexpr std::int64_t param_columns = 6;
  [[nodiscard]] constexpr bool has(std::uint8_t bit) const noexcept { return (options & bit) != 0; }
};

/// ONNX's Det (onnx.ai/onnx/operators/onnx__Det.html): y[i] = the determinant of the square
/// matrix x[i, :, :] for every index i of x's leading dimensions. x is [*, m, m], m >= 1, and y
/// is x's shape without its last two dimensions (a scalar, rank 0, for a rank-2 x), of x's float
/// dtype. Computed by LU factorisation with partial pivoting in double (numpy.linalg.det's
/// method, LAPACK's getrf), rounded once to y's dtype; a singular matrix gives 0 (or -0).
struct det {
  tensor_desc x{}, y{};
};

/// ONNX's ReverseSequence (onnx.ai/onnx/operators/onnx__ReverseSequence.html): y = x with the
/// first sequence_lens[b] elements along time_axis of each batch entry b (along batch_axis)
/// reversed, the rest copied, for any dtype. x and y have one shape of rank 2 or more;
/// batch_axis and time_axis are two different axes among the first two; sequence_lens is int64
/// [x.shape[batch_axis]]. A length outside [0, x.shape[time_axis]] is data, known only when the
/// kernel runs, which then fails with errc::invalid_argument naming the entry, y unwritten.
struct reverse_sequence {
  tensor_desc x{}, sequence_lens{}, y{};
  std::int32_t batch_axis = 1, time_axis = 0;
};

/// ONNX's MatMulInteger (onnx.ai/onnx/operators/onnx__MatMulInteger.html; the arithmetic of
/// onnx/reference/ops/op_matmul_integer.py): y = numpy.matmul(a - a_zero_point, b - b_zero_point)
/// with the differences in int32 and the sums in int32, wrapping modulo 2^32 as NumPy's int32
/// matmul does. a and b are int8 or uint8, each its own; a [..., M, K] and b [..., K, N] have rank
/// 2 or more and their leading (batch) dimensions broadcast NumPy-style to y's [..., M, N]; y is
/// int32. A zero point (absent: 0) has its operand's dtype and broadcasts NumPy-style to the
/// operand: one value, or per row a_zero_point [..., M, 1], per column b_zero_point [..., 1, N].
struct integer_matmul {
  tensor_desc a{}, b{}, a_zero_point{}, b_zero_point{}, y{};
};

/// ONNX's ConvInteger (onnx.ai/onnx/operators/onnx__ConvInteger.html; the arithmetic of
/// onnx/reference/ops/op_conv_integer.py): y = conv2d(x - x_zero_point, w - w_zero_point) in int32,
/// wrapping as integer_matmul does. The reference subtracts, then pads: a padded position adds 0.
/// x [N,C,H,W] and w [Co, C/groups, kh, kw] are int8 or uint8, each its own; y [N,Co,Ho,Wo] int32.
/// x_zero_point is one value of x's dtype (absent: 0); w_zero_point one value or [Co], one per
/// output channel, of w's dtype.
struct integer_conv2d {
  tensor_desc x{}, w{}, x_zero_point{}, w_zero_point{}, y{};
  std::array<std::int32_t, 2> stride{1, 1};
  std::array<std::int32_t, 2> pad{0, 0};
  std::array<std::int32_t, 2> dilation{1, 1};
  std::int32_t groups = 1;
};

/// ONNX's DFT and STFT (onnx.ai/onnx/operators/onnx__DFT.html, onnx__STFT.html; the arithmetic of
/// onnx/reference/ops/op_dft.py and op_stft.py, numpy.fft underneath). x holds real (last
/// dimension 1) or complex (last dimension 2: real, imaginary) values; y is complex, last
/// dimension 2, of x's float dtype.
///
/// DFT (frame_step 0): along `axis` (in [0, rank - 1)), x's extent L is cut or zero-padded to
/// `length` n, and y[k] = sum_j x[j] e^(-2 pi i j k / n) (inverse: e^(+2 pi i j k / n) / n) for k in
/// [0, n), or [0, n / 2 + 1) with onesided, as the reference keeps the first half of the full
/// transform, inverse or not. y has x's shape with the axis's extent so replaced. window is absent.
///
/// STFT (frame_step > 0): x [batch, L, 1 or 2], axis 1; frame f is x[f * frame_step ..
/// f * frame_step + n) times window ([n], optional: ones), transformed forward as above; y
/// [batch, frames, n or n / 2 + 1, 2] with frames = (L - n) / frame_step + 1.
///
/// Computed directly (O(n^2) per transform, any n, a power of two or not) in double, each angle
/// from (j k mod n), and rounded once to y's dtype.
struct dft {
  tensor_desc x{}, window{}, y{};
  std::int64_t length = 1;
  std::int64_t frame_step = 0;
  std::int32_t axis = 1;
  bool onesided = false;
  bool inverse = false;
};

/// One element of dequantize as the kernel computes it, before the store to y's dtype: x rounded
/// to float (NumPy's astype(float32): exact for int8 and uint8), the difference with the zero
/// point and the product with the scale in double (NumPy promotes an int32 difference to
/// float64), rounded to float. The ONNX importer folds a constant weight's DequantizeLinear with
/// this same function, so that the folded weight is the kernel's output bit for bit.
constexpr float dequantize_element(std::int64_t x, std::int64_t zero_point, float scale) noexcept {
  const double d = static_cast<double>(static_cast<float>(x)) - static_cast<double>(zero_point);
  return static_cast<float>(d * static_cast<double>(scale));
}

/// One integer of dtype `from` converted to the integer dtype `to` (not bool, which is x != 0) as
/// the cast kernel computes it: saturated into `to`'s range, never wrapped (NumPy's astype would
/// wrap; npurt's casts never change a value's sign). `bits` is the value as read into an int64
/// (a u64 from 2^63 up reads negative, so `from` says how to take it); the result is `to`'s value
/// in the same form, so a u64 result's bits are the unsigned value. The ONNX importer folds a
/// constant integer Cast with this same function, so that the folded tensor is the kernel's
/// output bit for bit.
constexpr std::int64_t saturate_int(dtype from, std::int64_t bits, dtype to) noexcept {
  const bool negative = from != dtype::u64 && bits < 0;
  if (to == dtype::u64) return negative ? 0 : bits;
  // Non-negative from here unless negative; a u64 past INT64_MAX clamps to it first.
  const std::int64_t v = negative || bits >= 0 ? bits : INT64_MAX;
  std::int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (to) {
    case dtype::i8: lo = INT8_MIN, hi = INT8_MAX; break;
    case dtype::u8: lo = 0, hi = UINT8_MAX; break;
    case dtype::i16: lo = INT16_MIN, hi = INT16_MAX; break;
    case dtype::u16: lo = 0, hi = UINT16_MAX; break;
    case dtype::i32: lo = INT32_MIN, hi = INT32_MAX; break;
    case dtype::u32: lo = 0, hi = UINT32_MAX; break;
    default: break;
  }
  return v < lo ? lo : v > hi ? hi : v;
}

/// How a float becomes an integer: Ascend C's RoundMode (CAST_RINT, CAST_FLOOR, CAST_CEIL,
/// CAST_ROUND, CAST_TRUNC). ONNX's Cast truncates, as C++ and NumPy do.
enum class round_mode : std::uint8_t { rint, floor, ceil, round, trunc };

/// y = x converted to y's dtype: float to float to nearest even; float to integer by `mode`,
/// saturating (NaN becomes 0); to bool x != 0 (NaN is true, as NumPy's astype(bool)); from bool 0
/// or 1.
struct cast {
  tensor_desc x{}, y{};
  round_mode mode = round_mode::rint;
};

/// param -= lr * (grad + weight_decay * param), with momentum when a buffer is given.
struct sgd_update {
  tensor_desc param{}, grad{}, momentum_buffer{};
  float lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

/// ONNX's LRN (onnx.ai/onnx/operators/onnx__LRN.html): local response normalisation across the
/// channels of x [N, C, ...] (rank 2 or more), y of x's shape and dtype:
/// y = x / (bias + alpha / size * square_sum)^beta, square_sum at channel c the sum of x^2 over
/// the channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] inside [0, C), in ascending
/// order. Float types only, computed in float (double for f64) and rounded to y's dtype once.
struct lrn {
  tensor_desc x{}, y{};
  std::int32_t size = 1;
  float alpha = 1e-4f;
  float beta = 0.75f;
  float bias = 1.0f;
};

/// ONNX's RoiAlign (onnx.ai/onnx/operators/onnx__RoiAlign.html), as its reference computes it
/// (onnx/reference/ops/op_roi_align.py): x [N, C, H, W], rois [R, 4] of (x1, y1, x2, y2) in x's
/// coordinates before spatial_scale, batch_indices [R] (i32 or i64, each in [0, N)), y [R, C,
/// output_height, output_width]. Each output bin pools a grid of sampling_ratio^2 bilinear
/// samples (0: ceil(roi extent / output extent) per dimension), averaged (avg) or the largest
/// (max). half_pixel shifts the scaled ROI by -0.5 (opset 16's default); output_half_pixel
/// (opset 10's only behaviour) does not and makes a ROI at least 1 x 1. x, rois and y share a
/// float dtype; computed in double and rounded to y's dtype once.
struct roi_align {
  tensor_desc x{}, rois{}, batch_indices{}, y{};
  float spatial_scale = 1.0f;
  std::int32_t sampling_ratio = 0;
  bool max_mode = false;
  bool half_pixel = true;
};

constexpr std::string_view op_name(const matmul&) noexcept { return "matmul"; }
constexpr std::string_view op_name(const conv2d&) noexcept { return "conv2d"; }
constexpr std::string_view op_name(const conv2d_backward_data&) noexcept { return "conv2d_backward_data"; }
constexpr std::string_view op_name(const conv2d_backward_weight&) noexcept { return "conv2d_backward_weight"; }
constexpr std::string_view op_name(const elementwise& e) noexcept {
  switch (e.fn) {
    case eltwise_fn::add: return "add";
    case eltwise_fn::sub: return "sub";
    case eltwise_fn::mul: return "mul";
    case eltwise_fn::div: return "div";
    case eltwise_fn::relu: return "relu";
    case eltwise_fn::gelu: return "gelu";
    case eltwise_fn::sigmoid: return "sigmoid";
    case eltwise_fn::tanh: return "tanh";
    case eltwise_fn::relu_backward: return "relu_backward";
    case eltwise_fn::pow: return "pow";
    case eltwise_fn::max: return "max";
    case eltwise_fn::min: return "min";
    case eltwise_fn::exp: return "exp";
    case eltwise_fn::log: return "log";
    case eltwise_fn::sqrt: return "sqrt";
    case eltwise_fn::abs: return "abs";
    case eltwise_fn::neg: return "neg";
    case eltwise_fn::reciprocal: return "reciprocal";
    case eltwise_fn::floor: return "floor";
    case eltwise_fn::ceil: return "ceil";
    case eltwise_fn::erf: return "erf";
    case eltwise_fn::sin: return "sin";
    case eltwise_fn::cos: return "cos";
    case eltwise_fn::softplus: return "softplus";
    case eltwise_fn::softsign: return "softsign";
    case eltwise_fn::sign: return "sign";
    case eltwise_fn::leaky_relu: return "leaky_relu";
    case eltwise_fn::elu: return "elu";
    case eltwise_fn::selu: return "selu";
    case eltwise_fn::hard_sigmoid: return "hard_sigmoid";
    case eltwise_fn::thresholded_relu: return "thresholded_relu";
    case eltwise_fn::celu: return "celu";
    case eltwise_fn::hard_swish: return "hard_swish";
    case eltwise_fn::clip: return "clip";
    case eltwise_fn::mod: return "mod";
    case eltwise_fn::fmod: return "fmod";
    case eltwise_fn::round: return "round";
    case eltwise_fn::shift_left: return "shift_left";
    case eltwise_fn::shift_right: return "shift_right";
    case eltwise_fn::asin: return "asin";
    case eltwise_fn::acos: return "acos";
    case eltwise_fn::atan: return "atan";
  }
  return "elementwise";
}
constexpr std::string_view op_name(const batchnorm&) noexcept { return "batchnorm"; }
constexpr std::string_view op_name(const batchnorm_backward&) noexcept { return "batchnorm_backward"; }
constexpr std::string_view op_name(const layernorm&) noexcept { return "layernorm"; }
constexpr std::string_view op_name(const pool2d& p) noexcept {
  return p.mode == pool_mode::max ? "max_pool2d" : p.mode == pool_mode::avg ? "avg_pool2d" : "global_avg_pool2d";
}
constexpr std::string_view op_name(const pool2d_backward&) noexcept { return "pool2d_backward"; }
constexpr std::string_view op_name(const softmax&) noexcept { return "softmax"; }
constexpr std::string_view op_name(const reduce& r) noexcept {
  switch (r.fn) {
    case reduce_fn::sum: return "reduce_sum";
    case reduce_fn::mean: return "reduce_mean";
    case reduce_fn::max: return "reduce_max";
    case reduce_fn::min: return "reduce_min";
    case reduce_fn::argmax: return "argmax";
    case reduce_fn::argmin: return "argmin";
    case reduce_fn::prod: return "reduce_prod";
  }
  return "reduce";
}
constexpr std::string_view op_name(const transpose&) noexcept { return "transpose"; }
constexpr std::string_view op_name(const cast&) noexcept { return "cast"; }
constexpr std::string_view op_name(const sgd_update&) noexcept { return "sgd_update"; }
constexpr std::string_view op_name(const fused_elementwise&) noexcept { return "fused_elementwise"; }
constexpr std::string_view op_name(const slice&) noexcept { return "slice"; }
constexpr std::string_view op_name(const pad&) noexcept { return "pad"; }
constexpr std::string_view op_name(const gather&) noexcept { return "gather"; }
constexpr std::string_view op_name(const tile&) noexcept { return "tile"; }
constexpr std::string_view op_name(const nll_loss&) noexcept { return "nll_loss"; }
constexpr std::string_view op_name(const trilu&) noexcept { return "trilu"; }
constexpr std::string_view op_name(const gather_elements&) noexcept { return "gather_elements"; }
constexpr std::string_view op_name(const resize&) noexcept { return "resize"; }
constexpr std::string_view op_name(const cumsum&) noexcept { return "cumsum"; }
constexpr std::string_view op_name(const grid_sample&) noexcept { return "grid_sample"; }
constexpr std::string_view op_name(const scatter_nd&) noexcept { return "scatter_nd"; }
constexpr std::string_view op_name(const scatter_elements&) noexcept { return "scatter_elements"; }
constexpr std::string_view op_name(const gather_nd&) noexcept { return "gather_nd"; }
constexpr std::string_view op_name(const top_k&) noexcept { return "top_k"; }
constexpr std::string_view op_name(const compare& c) noexcept {
  switch (c.fn) {
    case compare_fn::equal: return "equal";
    case compare_fn::less: return "less";
    case compare_fn::less_equal: return "less_equal";
    case compare_fn::greater: return "greater";
    case compare_fn::greater_equal: return "greater_equal";
  }
  return "compare";
}
constexpr std::string_view op_name(const where&) noexcept { return "where"; }
constexpr std::string_view op_name(const logical& l) noexcept {
  switch (l.fn) {
    case logical_fn::and_: return "logical_and";
    case logical_fn::or_: return "logical_or";
    case logical_fn::xor_: return "logical_xor";
    case logical_fn::not_: return "logical_not";
  }
  return "logical";
}
constexpr std::string_view op_name(const float_class& f) noexcept {
  return f.fn == float_class_fn::is_nan ? "is_nan" : "is_inf";
}
constexpr std::string_view op_name(const quantize& q) noexcept {
  switch (q.fn) {
    case quantize_fn::quantize: return "quantize";
    case quantize_fn::dequantize: return "dequantize";
    case quantize_fn::requantize: return "requantize";
  }
  return "quantize";
}
constexpr std::string_view op_name(const det&) noexcept { return "det"; }
constexpr std::string_view op_name(const reverse_sequence&) noexcept { return "reverse_sequence"; }
constexpr std::string_view op_name(const recurrent& r) noexcept {
  switch (r.cell) {
    case rnn_cell::rnn: return "rnn";
    case rnn_cell::gru: return "gru";
    case rnn_cell::lstm: return "lstm";
  }
  return "recurrent";
}
constexpr std::string_view op_name(const lrn&) noexcept { return "lrn"; }
constexpr std::string_view op_name(const integer_matmul&) noexcept { return "integer_matmul"; }
constexpr std::string_view op_name(const integer_conv2d&) noexcept { return "integer_conv2d"; }
constexpr std::string_view op_name(const dft& d) noexcept { return d.frame_step > 0 ? "stft" : "dft"; }
constexpr std::string_view op_name(const roi_align&) noexcept { return "roi_align"; }

}  // namespace npurt::kernels

/// Comma-led list of the operation types above, spliced into kernel_op.
#define NPURT_KERNEL_OP_LIST                                                                                           \
  , kernels::matmul, kernels::conv2d, kernels::conv2d_backward_data, kernels::conv2d_backward_weight,                  \
      kernels::elementwise, kernels::batchnorm, kernels::batchnorm_backward, kernels::layernorm, kernels::pool2d,      \
      kernels::pool2d_backward, kernels::softmax, kernels::reduce, kernels::transpose, kernels::cast,                  \
      kernels::sgd_update, kernels::fused_elementwise, kernels::slice, kernels::pad, kernels::gather, kernels::tile,   \
      kernels::nll_loss, kernels::trilu, kernels::resize, kernels::gather_elements, kernels::cumsum,                   \
      kernels::grid_sample, kernels::scatter_nd, kernels::scatter_elements, kernels::gather_nd, kernels::top_k,        \
      kernels::compare, kernels::where, kernels::logical, kernels::float_class, kernels::quantize, kernels::recurrent, \
      kernels::det, kernels::reverse_sequence, kernels::lrn, kernels::integer_matmul, kernels::integer_conv2d,         \
      kernels::dft, kernels::roi_align
