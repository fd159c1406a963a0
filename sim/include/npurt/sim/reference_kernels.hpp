// npurt/sim/reference_kernels.hpp — the functional half of the kernel library: the checks a
// kernel descriptor must pass before anything runs, and plain reference implementations that
// compute every operation of kernel_ops.hpp on host memory.
//
// Supported (validate() enforces it; the backend may narrow it per preset):
//  - dtypes: FP32 and FP16 everywhere; BF16 everywhere too (the 910B-class cube and vector
//    units have it; the 910A does not, so an `ascend910` backend may reject BF16 itself);
//    INT8 for matmul and conv2d forward, with an INT32 output; cast between all dtypes;
//    transpose, slice, pad, gather and tile move any dtype; bool (one byte, 0 or 1, any
//    nonzero byte read as true) for compare's output, where's condition and logical; quantize
//    writes and dequantize reads INT8 and UINT8 (dequantize INT32 too) beside a float side.
//    FP64 wherever FP32 goes but quantize and dequantize; INT16, UINT16, UINT32 and UINT64
//    wherever INT32 and INT64 go (integer elementwise, compare, cumsum, top_k, scatter
//    reductions, BitShift on the unsigned ones).
//  - layouts: nd and nchw (same thing for the rank-4 operations); nhwc and nc1hwc0 are
//    errc::invalid_layout.
//  - a tensor is "absent" when its shape has rank 0 and its data is null; optional operands
//    (listed below) may be absent. Every other tensor needs rank 1..8 and positive dimensions,
//    but gather's indices, and its y then, may be scalars (rank 0, one element).
//  - either every present operand has data (functional) or none has (timing-only); a mix is
//    errc::invalid_argument.
//
// Numerics (what a test may expect):
//  - FP16/BF16 inputs are widened to float, every sum is accumulated in float (FP32, as the
//    cube's L0C and the vector unit do; never double but in resize and grid_sample), and each result is rounded once to
//    the output dtype, round to nearest even. FP32 runs the same float loops. So an FP32 result equals a
//    straightforward float loop with the same summation order, bit for bit.
//  - A launch with an FP64 operand runs the same loops in double (every other float operand
//    widened exactly, each result rounded once to its dtype): an FP64 result equals a
//    straightforward double loop, NumPy's float64 result for the same order.
//  - Summation order is fixed: matmul over k ascending; conv over (input channel, kh, kw)
//    ascending; reductions, batchnorm and layernorm statistics in row-major order of the input.
//    No threads. The same descriptor and data always give the same bits.
//  - INT8 matmul/conv accumulate exactly in int32 (wrapping on overflow, as the hardware's
//    32-bit accumulator). With alpha == 1 and beta == 0 the result is that sum; otherwise
//    alpha*acc + beta*c is computed in double and rounded to nearest even, saturating.
//  - gelu is the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
//  - avg pooling divides by the number of window elements inside the unpadded input, or with
//    count_include_pad inside the padded one (a ceil_mode window's part past the end pad not
//    counted, as PyTorch and onnxruntime do); a window with no input element is NaN without
//    count_include_pad. max pooling (exact on integers) keeps the first maximum of the window in
//    row-major scan order, or the first NaN; a window with no input element is -inf (an integer
//    dtype's minimum) and its index -1. Its gradient goes to that first maximum.
//  - batchnorm (training) normalises with the biased batch variance, stores saved_invstd =
//    1/sqrt(var + eps), and updates running_var with the unbiased variance (PyTorch's rule).
//  - slice copies bytes: every element of its window exactly, whatever the dtype (NaN payloads
//    included); a step of 0 or a window index outside x is refused, never read.
//  - pad copies bytes as slice does and maps a border index as numpy.pad does (reflect never
//    repeats the edge; a border wider than x mirrors or wraps again); its constant fill must be
//    exact in the dtype, or the launch is refused.
//  - gather copies bytes too, one row of data per index (ONNX's Gather); an index outside
//    [-s, s - 1] fails the kernel with errc::invalid_argument when it runs (the values are data,
//    not descriptor), every index checked before y is written, so y keeps its old contents.
//  - resize follows ONNX's reference implementation (onnx/reference/ops/op_resize.py): the
//    neighbours nearest each source coordinate, edge-clamped, weighted per dimension; the sum is
//    taken in double (as its float64 dot products are) and rounded to y's dtype once. A
//    neighbour of weight 0 is not read.
//  - elementwise computes integer dtypes (i8, i32, i64, u8) exactly for the functions
//    kernels::integers_ok names (relu is max(x, 0)): add, sub, mul, neg, pow wrap modulo 2^n; div truncates toward
//    zero, INT_MIN / -1 wrapping to INT_MIN; a zero divisor (div, mod, fmod) or a negative
//    integer exponent fails the kernel with errc::invalid_argument when it runs, y unwritten.
//  - cumsum adds along its axis sequentially: f32 in float, f16/bf16 with the running sum
//    rounded to the dtype at every step, integers exactly with wrap-around.
//  - reduce prod multiplies in float in row-major order of the input, as sum adds. On integers
//    sum, prod, max and min are exact in the dtype, sum and prod wrapping modulo 2^n.
//  - quantize (ONNX's QuantizeLinear) divides x by scale in float (the quotient rounded to x's
//    dtype when scale has it, as NumPy divides), rounds half to even, adds the zero point and
//    saturates, NaN giving the zero point; dequantize takes (x - zero_point) * scale in double
//    from x rounded to float, rounded to y's dtype once (NumPy's float32 result for int8 and
//    uint8, its float64 promotion for int32); requantize (the end of ONNX's QLinearMatMul and
//    QLinearConv) takes int32 x * scale + zero_point in double, rounds half to even, saturates.
//  - integer_matmul and integer_conv2d (ONNX's MatMulInteger and ConvInteger) subtract the zero
//    points from int8 or uint8 operands in int32 and accumulate exactly in int32, wrapping on
//    overflow (NumPy's int32 matmul); a convolution's padding adds nothing.
//  - dft (ONNX's DFT and STFT) sums every term directly in double, each angle from j*k mod n,
//    and rounds each output once to y's dtype: any length, a power of two or not.
//  - grid_sample follows ONNX's reference implementation (onnx/reference/ops/op_grid_sample.py):
//    coordinates denormalised, rounded half to even in nearest mode, clamped or reflected when
//    outside the borders, each neighbour padded (zero, clamped, reflected); summed in double and
//    rounded to y's dtype once. A coordinate not finite after padding fails the kernel with
//    errc::invalid_argument when it runs, y unwritten.
//  - recurrent (ONNX's RNN, GRU, LSTM) computes every step in float, gate sums as
//    x_t W^T + H R^T + (Wb + Rb), carries the state in float from step to step and rounds y, y_h
//    and y_c once to their dtype; steps past a sequence length leave y zero and the state as it
//    was. A length outside [0, seq] fails the kernel with errc::invalid_argument, nothing written.
//  - det factorises each matrix with partial pivoting in double (numpy.linalg.det's method) and
//    rounds the determinant once to y's dtype.
//  - reverse_sequence copies bytes; a length outside [0, steps] fails it with
//    errc::invalid_argument naming the entry, y unwritten.
//  - roi_align follows ONNX's reference implementation (onnx/reference/ops/op_roi_align.py):
//    sample coordinates and bilinear weights in double, a sample more than one element outside x
//    weighing nothing, max mode the largest weighted neighbour (the reference's form); rounded to
//    y's dtype once. A ROI coordinate that is not finite, a batch index outside [0, N) or an
//    adaptive grid of more than 2^26 samples fails the kernel with errc::invalid_argument.
//  - cast rounds to nearest even and saturates into integer ranges; NaN casts to integer 0.
//    To bool is x != 0 (NaN is true, as NumPy's astype(bool)); from bool is 0 or 1.
//  - scatter_nd and scatter_elements copy data to y, then apply the updates in row-major order
//    of the indices (onnx/reference/ops/op_scatternd.py's loop): under reduction none a
//    duplicate index's last update wins (ONNX leaves it undefined); add and mul compute floats
//    in float rounded once to the dtype and integers wrapping modulo 2^n; max and min return a
//    NaN operand (numpy.maximum). gather_nd copies bytes, one slice per index tuple. An index
//    outside [-s, s - 1] of its axis fails either with errc::invalid_argument, y unwritten.
//  - top_k orders as ONNX's reference (a lexsort): equal values lower index first, NaN above
//    every number (first when largest, last when smallest), always sorted; values copied as
//    bytes, integers compared exactly.
//  - compare is exact in the operands' type: integers as int64 (never through double, which
//    rounds above 2^53), floats as IEEE values (NaN compares false, equal too; -0 == +0).
//    where copies bytes, as slice does; logical and compare write 0 or 1.
//
// Optional operands: matmul none; conv2d_backward_data relu_y (no mask); elementwise b (unary functions ignore it);
// batchnorm gamma, beta (1 and 0 when absent), running_mean/running_var (training only: no update when absent),
// saved_mean/saved_invstd (training: not written when absent; inference ignores them);
// batchnorm_backward gamma (1), dx, dgamma, dbeta (not written when absent; one of them given); layernorm gamma, beta;
// pool2d_backward x (needed for max only); sgd_update momentum_buffer (needed when momentum != 0);
// logical b (not_ ignores it); recurrent b, sequence_lens, y, y_h, y_c (y_h and y_c also read
// as the initial states with the initial_h / initial_c options); quantize zero_point;
// integer_matmul a_zero_point, b_zero_point and integer_conv2d x_zero_point, w_zero_point (0);
// dft window (ones).
#pragma once

#include <npurt/backend.hpp>
#include <npurt/kernel.hpp>

#include <string>

#include <array>
#include <cstddef>
#include <cstdint>
#include <system_error>

namespace npurt::sim {

/// How an operation uses one of its tensors.
enum class access : std::uint8_t { read = 1, write = 2, read_write = 3 };

struct operand {
  const tensor_desc* tensor = nullptr;
  access mode = access::read;
  [[nodiscard]] bool reads() const noexcept { return (static_cast<unsigned>(mode) & 1u) != 0; }
  [[nodiscard]] bool writes() const noexcept { return (static_cast<unsigned>(mode) & 2u) != 0; }
};

/// The tensors an operation reads or writes, in descriptor order, without unused or absent
/// ones (the bytes a cost model moves, the pointers a backend translates).
struct operand_list {
  std::array<operand, 8> items{};
  std::size_t count = 0;
  [[nodiscard]] const operand* begin() const noexcept { return items.data(); }
  [[nodiscard]] const operand* end() const noexcept { return items.data() + count; }
  [[nodiscard]] std::size_t size() const noexcept { return count; }
};

/// The operands of `op` (empty for kernels::fixed). Does not validate.
[[nodiscard]] operand_list operands(const kernel_op& op) noexcept;

/// True when at least one operand has a data pointer (functional mode).
[[nodiscard]] bool has_data(const kernel_desc& k) noexcept;

/// Every check a kernel needs before it runs: shapes, dtypes, layouts, ranks, parameters, and
/// the all-or-none rule for data pointers. errc::invalid_shape / invalid_dtype /
/// invalid_layout / invalid_argument; {} when the kernel can run. kernels::fixed is always valid.
[[nodiscard]] std::error_code validate(const kernel_desc& k);
/// As validate, and on failure says in *what which tensor and dimension (or which parameter)
/// is wrong, e.g. "conv2d tensor 'w' [64,3,0,7]: dimension 2 is 0 (must be positive)". The words
/// leave out the code's message (ec.message()), which a std::system_error built from them appends.
[[nodiscard]] std::error_code validate(const kernel_desc& k, std::string* what);

/// Validates, then computes the kernel's result with reference loops. Every operand's pointer
/// is translated with mem.translate(dev, ptr, bytes); a null translation is
/// errc::invalid_pointer and nothing is written; so is a gather, gather_elements, gather_nd,
/// scatter_nd or scatter_elements index out of range, or an integer division by zero
/// (errc::invalid_argument). Timing-only descriptors (no data) and
/// kernels::fixed do nothing and succeed. Inputs are read in full before any output is
/// written, so outputs may alias inputs (in-place elementwise, sgd_update).
[[nodiscard]] std::error_code run_reference(const kernel_desc& k, memory_view& mem, device_id dev);
/// As run_reference, and when the kernel's data is what is wrong (an index out of range) says
/// in *why which value, where, and what range it had to lie in, e.g. "indices[3] = 7 is outside
/// [-5, 4] (data axis 0 has 5 entries)". *why is left as it was on success.
[[nodiscard]] std::error_code run_reference(const kernel_desc& k, memory_view& mem, device_id dev, std::string* why);

/// A memory_view over host memory: translate returns the address unchanged (null stays null).
/// Lets tests and users run kernels on host vectors.
class identity_memory final : public memory_view {
 public:
  std::byte* translate(device_id, const void* addr, std::size_t) noexcept override {
    return static_cast<std::byte*>(const_cast<void*>(addr));
  }
};

/// A shared identity_memory (stateless).
[[nodiscard]] inline identity_memory& host_memory() noexcept {
  static identity_memory m;
  return m;
}

/// run_reference on host pointers.
[[nodiscard]] inline std::error_code run_reference(const kernel_desc& k) { return run_reference(k, host_memory(), 0); }

}  // namespace npurt::sim
