// Validation of kernel descriptors: everything that can be wrong with a launch is found here,
// before the kernel is enqueued, so that a bad call leaves nothing half-done.
#include <npurt/numeric.hpp>
#include <npurt/sim/reference_kernels.hpp>

#include "pool_windows.hpp"

#include <boost/pfr.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace npurt::sim {
namespace {

using std::int64_t;

std::error_code fail(errc e) { return make_error_code(e); }

bool absent(const tensor_desc& t) noexcept { return t.shape.rank() == 0 && t.data == nullptr; }

bool known_dtype(dtype t) noexcept { return static_cast<unsigned>(t) <= static_cast<unsigned>(dtype::u64); }

// The accumulator output a cube operation may write for input type `in`: FP32 always (L0C
// holds FP32), the input's own float type, or INT32 for INT8. f64 (computed off the cube, in
// double) writes f64 only.
bool cube_output_ok(dtype in, dtype out) noexcept {
  switch (in) {
    case dtype::f32: return out == dtype::f32;
    case dtype::f64: return out == dtype::f64;
    case dtype::f16:
    case dtype::bf16: return out == in || out == dtype::f32;
    case dtype::i8: return out == dtype::i32;
    default: return false;
  }
}

// Collects an op's operands in order; the access comes first, so that a group of tensors used
// alike is one call.
struct builder {
  operand_list list;
  template <class... T>
  void add(access m, const T&... t) noexcept {
    (one(t, m), ...);
  }
  // As add, leaving out the tensors the caller left absent.
  template <class... T>
  void add_optional(access m, const T&... t) noexcept {
    ((absent(t) ? void() : one(t, m)), ...);
  }

 private:
  void one(const tensor_desc& t, access m) noexcept {
    if (list.count < list.items.size()) list.items[list.count++] = operand{&t, m};
  }
};

// At most 2^60 multiply-accumulates per cube kernel (and window reads per pooling): twice that
// (the FLOPs) and the cube fractals still fit the cost model's 64-bit counters, and such a
// kernel already runs for hours.
constexpr std::uint64_t max_work = std::uint64_t{1} << 60;

// Rank, positive dimensions, no element-count overflow, a layout we compute in. A scalar (rank 0,
// one element) only where the operation takes one (`scalar_ok`). Inlined: validate() runs it on
// every operand of every launch, and describe() calling it too must not move it out of line.
[[gnu::always_inline]] inline std::error_code check_tensor(const tensor_desc& t, bool scalar_ok) {
  if (t.format != layout::nd && t.format != layout::nchw) return fail(errc::invalid_layout);
  if (!known_dtype(t.type)) return fail(errc::invalid_dtype);
  if ((t.shape.rank() == 0 && !scalar_ok) || t.shape.rank() > shape::max_rank) return fail(errc::invalid_shape);
  int64_t n = 1;
  for (auto d : t.shape) {
    if (d <= 0) return fail(errc::invalid_shape);
    if (n > (int64_t{1} << 52) / d) return fail(errc::invalid_shape);  // bytes must fit comfortably
    n *= d;
  }
  return {};
}

bool valid_axis(std::int32_t axis, std::size_t rank) noexcept {
  const auto r = static_cast<std::int64_t>(rank);
  return axis >= -r && axis < r;
}

std::size_t norm_axis(std::int32_t axis, std::size_t rank) noexcept {
  return axis < 0 ? static_cast<std::size_t>(axis + static_cast<std::int32_t>(rank)) : static_cast<std::size_t>(axis);
}

bool finite(float f) noexcept { return std::isfinite(f); }

std::string dims(const shape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.rank(); ++i) os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

// The dims of a shape that may pass shape::max_rank (what a wrong rank would call for).
std::string dims(const std::vector<std::int64_t>& v) {
  std::string r = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(v[i]);
  }
  r += ']';
  return r;
}

std::string num(std::int64_t v) { return std::to_string(v); }

std::string type_name(dtype t) { return std::string(to_string(t)); }

// What is wrong with a descriptor: an error and a sentence naming the operand and what it must
// be, or no error when it can run. An operation whose check() is built on one reports the same
// words through validate(k, &what), so the code and the sentence never disagree. The sentence
// is built only on the way out with an error.
struct fault {
  errc e{};
  std::string what;
  [[nodiscard]] bool failed() const noexcept { return e != errc{}; }
  [[nodiscard]] std::error_code code() const { return failed() ? fail(e) : std::error_code{}; }
};

fault bad(errc e, std::string what) { return fault{e, std::move(what)}; }

// ---- epilogue ----------------------------------------------------------------------------

// `in` broadcasts to `out` NumPy-style (aligned at the trailing dimension).
bool broadcasts_to(const shape& in, const shape& out) noexcept {
  if (in.rank() > out.rank()) return false;
  for (std::size_t i = 0; i < in.rank(); ++i) {
    const int64_t d = in[in.rank() - 1 - i], o = out[out.rank() - 1 - i];
    if (d != 1 && d != o) return false;
  }
  return true;
}

// A cube kernel's epilogue: float output only (an INT32 accumulator has no activation), bias
// and residual of the output's dtype, broadcasting to it. `out_name` is the output's operand name.
fault epilogue_problem(const tensor_desc& out, std::string_view out_name, const tensor_desc& bias,
                       const tensor_desc& residual, kernels::activation act) {
  if (static_cast<unsigned>(act) > static_cast<unsigned>(kernels::activation::tanh))
    return bad(errc::invalid_argument,
               "act " + num(static_cast<unsigned>(act)) + " is not none, relu, gelu, sigmoid or tanh");
  const bool any = act != kernels::activation::none || !absent(bias) || !absent(residual);
  if (!any) return {};
  const std::string o(out_name);
  if (!is_float(out.type))
    return bad(errc::invalid_dtype, o + " is " + type_name(out.type) +
                                        ": a bias, residual or activation needs a float output (no epilogue on an "
                                        "integer accumulator)");
  const std::pair<const char*, const tensor_desc*> extra[] = {{"bias", &bias}, {"residual", &residual}};
  for (const auto& [name, t] : extra) {
    if (absent(*t)) continue;
    if (t->type != out.type)
      return bad(errc::invalid_dtype, std::string(name) + " is " + type_name(t->type) + ", " + o + " " +
                                          type_name(out.type) + ": they must match");
    if (!broadcasts_to(t->shape, out.shape))
      return bad(errc::invalid_shape,
                 std::string(name) + " " + dims(t->shape) + " does not broadcast to " + o + " " + dims(out.shape));
  }
  return {};
}

// ---- matmul ----------------------------------------------------------------------------

// The outputs a cube operation with inputs of type `in` may write, in words.
std::string cube_outputs(dtype in) {
  switch (in) {
    case dtype::f16:
    case dtype::bf16: return type_name(in) + " or f32";
    case dtype::i8: return "i32";
    default: return type_name(in);
  }
}

fault matmul_problem(const kernels::matmul& m) {
  if (m.a.type != m.b.type)
    return bad(errc::invalid_dtype,
               "a is " + type_name(m.a.type) + ", b " + type_name(m.b.type) + ": they must be one dtype");
  if (!is_float(m.a.type) && m.a.type != dtype::i8)
    return bad(errc::invalid_dtype, "a and b are " + type_name(m.a.type) + ": matmul takes f32, f16, bf16, f64 or i8");
  if (!cube_output_ok(m.a.type, m.c.type))
    return bad(errc::invalid_dtype, "c is " + type_name(m.c.type) + ": a " + type_name(m.a.type) + " matmul writes " +
                                        cube_outputs(m.a.type));
  const auto ra = m.a.shape.rank(), rb = m.b.shape.rank(), rc = m.c.shape.rank();
  if (ra < 2 || ra > 3)
    return bad(errc::invalid_shape, "a " + dims(m.a.shape) + " must be of rank 2 ([M,K]) or 3 ([batch,M,K])");
  if (rb < 2 || rb > 3)
    return bad(errc::invalid_shape, "b " + dims(m.b.shape) + " must be of rank 2 ([K,N]) or 3 ([batch,K,N])");
  if (rc != std::max(ra, rb))
    return bad(errc::invalid_shape,
               "c " + dims(m.c.shape) + " must be of rank " + num(std::max(ra, rb)) + ", the larger of a's and b's");
  const auto& a = m.a.shape;
  const auto& b = m.b.shape;
  const auto& c = m.c.shape;
  const int64_t M = m.trans_a ? a[ra - 1] : a[ra - 2];
  const int64_t Ka = m.trans_a ? a[ra - 2] : a[ra - 1];
  const int64_t Kb = m.trans_b ? b[rb - 1] : b[rb - 2];
  const int64_t N = m.trans_b ? b[rb - 2] : b[rb - 1];
  if (Ka != Kb)
    return bad(errc::invalid_shape, "a " + dims(a) + (m.trans_a ? " (trans_a)" : "") + " has K = " + num(Ka) + ", b " +
                                        dims(b) + (m.trans_b ? " (trans_b)" : "") + " has K = " + num(Kb) +
                                        ": they must be equal");
  if (c[rc - 2] != M || c[rc - 1] != N) {
    shape want = c;
    want[rc - 2] = M;
    want[rc - 1] = N;
    return bad(errc::invalid_shape,
               "c " + dims(c) + " must be " + dims(want) + " (M = " + num(M) + ", N = " + num(N) + ")");
  }
  if (rc == 3) {
    const int64_t B = c[0];
    if (ra == 3 && a[0] != B) return bad(errc::invalid_shape, "a's batch " + num(a[0]) + " is not c's batch " + num(B));
    if (rb == 3 && b[0] != B) return bad(errc::invalid_shape, "b's batch " + num(b[0]) + " is not c's batch " + num(B));
  }
  if (!finite(m.alpha) || !finite(m.beta)) return bad(errc::invalid_argument, "alpha and beta must be finite");
  return epilogue_problem(m.c, "c", m.bias, m.residual, m.act);
}

fault problem(const kernels::matmul& m) { return matmul_problem(m); }

// ---- convolution -----------------------------------------------------------------------

struct conv_params {
  std::array<std::int32_t, 2> stride, pad, dilation;
  std::int32_t groups;
};

fault conv_params_problem(const conv_params& p) {
  const auto pair = [](const std::array<std::int32_t, 2>& v) { return "(" + num(v[0]) + ", " + num(v[1]) + ")"; };
  for (int i = 0; i < 2; ++i)
    if (p.stride[i] < 1 || p.dilation[i] < 1 || p.pad[i] < 0)
      return bad(errc::invalid_argument, "stride " + pair(p.stride) + " and dilation " + pair(p.dilation) +
                                             " must be at least 1, pad " + pair(p.pad) + " at least 0");
  if (p.groups < 1) return bad(errc::invalid_argument, "groups " + num(p.groups) + " must be at least 1");
  return {};
}

// Output extent of one spatial dimension, or -1 when the (padded) input is smaller than the
// dilated kernel. in, k >= 1 and d >= 1: the dilated extent d * (k - 1) + 1 is compared with the
// span by division first, since a kernel of 2^33 with a dilation of 2^31 passes 2^63.
int64_t conv_out(int64_t in, int64_t k, std::int32_t s, std::int32_t p, std::int32_t d) {
  const int64_t span = in + 2 * int64_t{p};
  if (k - 1 > (span - 1) / d) return -1;
  const int64_t eff = int64_t{d} * (k - 1) + 1;
  return (span - eff) / s + 1;
}

// The operand names of a convolution's three tensors, as its pass calls them.
struct conv_names {
  const char* x = "x";
  const char* w = "w";
  const char* y = "y";
};

// x [N,C,H,W], w [Co,C/g,kh,kw], y [N,Co,Ho,Wo]: the relation all three passes share.
fault conv_shapes_problem(const shape& x, const shape& w, const shape& y, const conv_params& p, conv_names n = {}) {
  const std::pair<const char*, const shape*> all[] = {{n.x, &x}, {n.w, &w}, {n.y, &y}};
  for (const auto& [name, s] : all)
    if (s->rank() != 4)
      return bad(errc::invalid_shape, std::string(name) + " " + dims(*s) + " must be of rank 4 (" +
                                          (s == &w ? "[Co, C/groups, kh, kw])" : "NCHW)"));
  const int64_t g = p.groups;
  if (x[1] % g != 0)
    return bad(errc::invalid_shape,
               std::string(n.x) + "'s " + num(x[1]) + " channels do not divide into " + num(g) + " groups");
  if (w[0] % g != 0)
    return bad(errc::invalid_shape,
               std::string(n.w) + "'s " + num(w[0]) + " output channels do not divide into " + num(g) + " groups");
  if (w[1] != x[1] / g)
    return bad(errc::invalid_shape, std::string(n.w) + " " + dims(w) + " has " + num(w[1]) +
                                        " input channels per group; " + n.x + " " + dims(x) + " has " + num(x[1]) +
                                        " channels in " + num(g) + " group(s), so it must be " + num(x[1] / g));
  const int64_t ho = conv_out(x[2], w[2], p.stride[0], p.pad[0], p.dilation[0]);
  const int64_t wo = conv_out(x[3], w[3], p.stride[1], p.pad[1], p.dilation[1]);
  if (ho < 1 || wo < 1)
    return bad(errc::invalid_shape, "the dilated " + num(w[2]) + "x" + num(w[3]) + " kernel does not fit in " + n.x +
                                        "'s padded " + num(x[2]) + "x" + num(x[3]) + " plane");
  if (y[0] != x[0] || y[1] != w[0] || y[2] != ho || y[3] != wo)
    return bad(errc::invalid_shape, std::string(n.y) + " " + dims(y) + " must be " + dims(shape{x[0], w[0], ho, wo}));
  return {};
}

fault conv2d_problem(const kernels::conv2d& c) {
  const conv_params p{c.stride, c.pad, c.dilation, c.groups};
  if (auto f = conv_params_problem(p); f.failed()) return f;
  if (c.x.type != c.w.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(c.x.type) + ", w " + type_name(c.w.type) + ": they must be one dtype");
  if (!is_float(c.x.type) && c.x.type != dtype::i8)
    return bad(errc::invalid_dtype, "x and w are " + type_name(c.x.type) + ": conv2d takes f32, f16, bf16, f64 or i8");
  if (!cube_output_ok(c.x.type, c.y.type))
    return bad(errc::invalid_dtype, "y is " + type_name(c.y.type) + ": a " + type_name(c.x.type) +
                                        " convolution writes " + cube_outputs(c.x.type));
  if (auto f = conv_shapes_problem(c.x.shape, c.w.shape, c.y.shape, p); f.failed()) return f;
  return epilogue_problem(c.y, "y", c.bias, c.residual, c.act);
}

fault problem(const kernels::conv2d& c) { return conv2d_problem(c); }

// Gradients are float only (training never runs in INT8). The problems of the kernels a training
// step launches most are inlined into validate()'s dispatch, as their checks were before they
// had words: the words are built only on the way out.
bool grad_types_ok(dtype a, dtype b, dtype out) { return a == b && is_float(a) && (out == a || out == dtype::f32); }

fault grad_types_problem(const char* an, dtype a, const char* bn, dtype b, const char* on, dtype out) {
  if (grad_types_ok(a, b, out)) return {};
  return bad(errc::invalid_dtype, std::string(an) + " is " + type_name(a) + ", " + bn + " " + type_name(b) + ", " + on +
                                      " " + type_name(out) + ": " + an + " and " + bn + " must be one float dtype, " +
                                      on + " that or f32");
}

[[gnu::always_inline]] inline fault problem(const kernels::conv2d_backward_data& c) {
  const conv_params p{c.stride, c.pad, c.dilation, c.groups};
  if (auto f = conv_params_problem(p); f.failed()) return f;
  if (!grad_types_ok(c.dy.type, c.w.type, c.dx.type))
    return grad_types_problem("dy", c.dy.type, "w", c.w.type, "dx", c.dx.type);
  if (!absent(c.relu_y)) {
    if (c.relu_y.type != c.dx.type)
      return bad(errc::invalid_dtype,
                 "relu_y is " + type_name(c.relu_y.type) + ", dx " + type_name(c.dx.type) + ": they must match");
    if (!(c.relu_y.shape == c.dx.shape))
      return bad(errc::invalid_shape, "relu_y " + dims(c.relu_y.shape) + " must be dx's shape " + dims(c.dx.shape));
  }
  return conv_shapes_problem(c.dx.shape, c.w.shape, c.dy.shape, p, {"dx", "w", "dy"});
}

[[gnu::always_inline]] inline fault problem(const kernels::conv2d_backward_weight& c) {
  const conv_params p{c.stride, c.pad, c.dilation, c.groups};
  if (auto f = conv_params_problem(p); f.failed()) return f;
  if (!grad_types_ok(c.x.type, c.dy.type, c.dw.type))
    return grad_types_problem("x", c.x.type, "dy", c.dy.type, "dw", c.dw.type);
  return conv_shapes_problem(c.x.shape, c.dw.shape, c.dy.shape, p, {"x", "dw", "dy"});
}

// ---- integer matmul and convolution (ONNX's MatMulInteger, ConvInteger) ------------------

bool int8_or_uint8(dtype t) noexcept { return t == dtype::i8 || t == dtype::u8; }

// A zero point of its operand's dtype, when given.
fault zero_point_type_problem(const char* zp_name, const tensor_desc& zp, const char* name, const tensor_desc& t) {
  if (absent(zp) || zp.type == t.type) return {};
  return bad(errc::invalid_dtype, std::string(zp_name) + " is " + type_name(zp.type) + ", " + name + " " +
                                      type_name(t.type) + ": they must match");
}

// Integer kernels take i8 or u8 inputs and write i32.
fault integer_types_problem(const char* an, dtype a, const char* bn, dtype b, dtype y) {
  if (int8_or_uint8(a) && int8_or_uint8(b) && y == dtype::i32) return {};
  return bad(errc::invalid_dtype, std::string(an) + " is " + type_name(a) + ", " + bn + " " + type_name(b) + ", y " +
                                      type_name(y) + ": " + an + " and " + bn + " must be i8 or u8, y i32");
}

fault problem(const kernels::integer_matmul& m) {
  if (auto f = integer_types_problem("a", m.a.type, "b", m.b.type, m.y.type); f.failed()) return f;
  if (auto f = zero_point_type_problem("a_zero_point", m.a_zero_point, "a", m.a); f.failed()) return f;
  if (auto f = zero_point_type_problem("b_zero_point", m.b_zero_point, "b", m.b); f.failed()) return f;
  const auto& a = m.a.shape;
  const auto& b = m.b.shape;
  const auto& y = m.y.shape;
  const auto ra = a.rank(), rb = b.rank(), ry = y.rank();
  if (ra < 2 || rb < 2)
    return bad(errc::invalid_shape, "a " + dims(a) + " and b " + dims(b) +
                                        " must be of rank 2 or more ([..., M, K] "
                                        "and [..., K, N])");
  if (ry != std::max(ra, rb))
    return bad(errc::invalid_shape,
               "y " + dims(y) + " must be of rank " + num(std::max(ra, rb)) + ", the larger of a's and b's");
  if (a[ra - 1] != b[rb - 2])
    return bad(errc::invalid_shape, "a " + dims(a) + " has K = " + num(a[ra - 1]) + ", b " + dims(b) +
                                        " has K = " + num(b[rb - 2]) + ": they must be equal");
  if (y[ry - 2] != a[ra - 2] || y[ry - 1] != b[rb - 1])
    return bad(errc::invalid_shape, "y " + dims(y) + " must end in [" + num(a[ra - 2]) + "," + num(b[rb - 1]) +
                                        "] (M = " + num(a[ra - 2]) + ", N = " + num(b[rb - 1]) + ")");
  // The batch dimensions: each of a's and b's is 1 or y's, and y's is the larger.
  for (std::size_t i = 0; i + 2 < ry; ++i) {
    const int64_t da = i + ra >= ry ? a[i + ra - ry] : 1, db = i + rb >= ry ? b[i + rb - ry] : 1;
    if ((da != 1 && da != y[i]) || (db != 1 && db != y[i]) || y[i] != std::max(da, db))
      return bad(errc::invalid_shape, "y " + dims(y) + "'s batch dimension " + num(static_cast<int64_t>(i)) + " is " +
                                          num(y[i]) + ": a's (" + num(da) + ") and b's (" + num(db) +
                                          ") broadcast to " + num(std::max(da, db)) + " (each 1 or the other)");
  }
  const std::pair<const char*, const tensor_desc*> zps[] = {{"a_zero_point", &m.a_zero_point},
                                                            {"b_zero_point", &m.b_zero_point}};
  for (const auto& [name, zp] : zps)
    if (!absent(*zp) && !broadcasts_to(zp->shape, zp == &m.a_zero_point ? a : b))
      return bad(errc::invalid_shape, std::string(name) + " " + dims(zp->shape) + " does not broadcast to " +
                                          (zp == &m.a_zero_point ? "a " + dims(a) : "b " + dims(b)));
  return {};
}

fault problem(const kernels::integer_conv2d& c) {
  const conv_params p{c.stride, c.pad, c.dilation, c.groups};
  if (auto f = conv_params_problem(p); f.failed()) return f;
  if (auto f = integer_types_problem("x", c.x.type, "w", c.w.type, c.y.type); f.failed()) return f;
  if (auto f = zero_point_type_problem("x_zero_point", c.x_zero_point, "x", c.x); f.failed()) return f;
  if (auto f = zero_point_type_problem("w_zero_point", c.w_zero_point, "w", c.w); f.failed()) return f;
  if (auto f = conv_shapes_problem(c.x.shape, c.w.shape, c.y.shape, p); f.failed()) return f;
  if (!absent(c.x_zero_point) && c.x_zero_point.shape.elements() != 1)
    return bad(errc::invalid_shape, "x_zero_point " + dims(c.x_zero_point.shape) + " must hold one value");
  if (!absent(c.w_zero_point) && c.w_zero_point.shape.elements() != 1 &&
      !(c.w_zero_point.shape.rank() == 1 && c.w_zero_point.shape[0] == c.w.shape[0]))
    return bad(errc::invalid_shape, "w_zero_point " + dims(c.w_zero_point.shape) + " must hold one value, or one per " +
                                        "output channel, [" + num(c.w.shape[0]) + "]");
  return {};
}

// ---- dft (ONNX's DFT and STFT) --------------------------------------------------------

// The transform's output extent: n, or n / 2 + 1 onesided.
int64_t dft_bins(const kernels::dft& d) noexcept { return d.onesided ? d.length / 2 + 1 : d.length; }

fault problem(const kernels::dft& d) {
  if (!is_float(d.x.type) || d.y.type != d.x.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(d.x.type) + ", y " + type_name(d.y.type) + ": they must be one float dtype");
  if (!absent(d.window) && d.window.type != d.x.type)
    return bad(errc::invalid_dtype,
               "window is " + type_name(d.window.type) + ", x " + type_name(d.x.type) + ": they must match");
  if (d.length < 1 || d.frame_step < 0)
    return bad(errc::invalid_argument,
               "length " + num(d.length) + " must be at least 1, frame_step " + num(d.frame_step) + " not negative");
  const auto& x = d.x.shape;
  const auto& y = d.y.shape;
  const std::size_t r = x.rank();
  if (r < 2 || (x[r - 1] != 1 && x[r - 1] != 2))
    return bad(errc::invalid_shape, "x " + dims(x) +
                                        " must be of rank 2 or more, its last dimension 1 (real) or 2 "
                                        "(complex)");
  if (d.frame_step == 0) {
    if (!absent(d.window)) return bad(errc::invalid_argument, "a window needs a frame_step (an STFT)");
    if (d.axis < 0 || static_cast<std::size_t>(d.axis) + 1 >= r)
      return bad(errc::invalid_argument,
                 "axis " + num(d.axis) + " is outside [0, " + num(static_cast<int64_t>(r) - 2) + "] for x " + dims(x));
    shape want = x;
    want[static_cast<std::size_t>(d.axis)] = dft_bins(d);
    want[r - 1] = 2;
    if (!(y == want))
      return bad(errc::invalid_shape, "y " + dims(y) + " must be " + dims(want) + ": x's shape with " +
                                          num(dft_bins(d)) + " bins on axis " + num(d.axis) + ", complex");
    return {};
  }
  // STFT: [batch, L, c] framed along axis 1.
  if (r != 3 || d.axis != 1 || d.inverse)
    return bad(errc::invalid_argument, "an STFT (frame_step > 0) takes x of rank 3 framed along axis 1, forward");
  if (x[1] < d.length)
    return bad(errc::invalid_shape, "x " + dims(x) + " has " + num(x[1]) + " samples, fewer than the length " +
                                        num(d.length) + " of a frame");
  if (!absent(d.window) && !(d.window.shape == shape{d.length}))
    return bad(errc::invalid_shape, "window " + dims(d.window.shape) + " must be [" + num(d.length) + "]");
  const int64_t frames = (x[1] - d.length) / d.frame_step + 1;
  if (const shape want{x[0], frames, dft_bins(d), 2}; !(y == want))
    return bad(errc::invalid_shape, "y " + dims(y) + " must be " + dims(want) + " ([batch, frames, bins, 2])");
  return {};
}

// ONNX's RoiAlign: x [N, C, H, W], rois [R, 4] and y [R, C, output_height, output_width] of one
// float dtype (H, W and the output extents at least 1), batch_indices [R] of i32 or i64; a sampling ratio of 0
// (adaptive) or more; a finite spatial scale. The ROIs' values and the batch indices are checked when the kernel runs.
fault problem(const kernels::roi_align& a) {
  if (!is_float(a.x.type) || a.rois.type != a.x.type || a.y.type != a.x.type)
    return bad(errc::invalid_dtype, "x is " + type_name(a.x.type) + ", rois " + type_name(a.rois.type) + ", y " +
                                        type_name(a.y.type) + ": they must be one float dtype");
  if (a.batch_indices.type != dtype::i32 && a.batch_indices.type != dtype::i64)
    return bad(errc::invalid_dtype, "batch_indices is " + type_name(a.batch_indices.type) + ", not i32 or i64");
  const auto& x = a.x.shape;
  const auto& y = a.y.shape;
  if (x.rank() != 4 || a.rois.shape.rank() != 2 || a.rois.shape[1] != 4 || a.batch_indices.shape.rank() != 1 ||
      y.rank() != 4)
    return bad(errc::invalid_shape, "x " + dims(x) + ", rois " + dims(a.rois.shape) + ", batch_indices " +
                                        dims(a.batch_indices.shape) + " and y " + dims(y) +
                                        " must be [N, C, H, W], [R, 4], [R] and [R, C, h, w]");
  const int64_t rois = a.rois.shape[0];
  if (a.batch_indices.shape[0] != rois || y[0] != rois || y[1] != x[1] || y[2] < 1 || y[3] < 1 || x[2] < 1 || x[3] < 1)
    return bad(errc::invalid_shape, "batch_indices " + dims(a.batch_indices.shape) + " and y " + dims(y) +
                                        " must have rois' " + num(rois) + " regions first, and y x's " + num(x[1]) +
                                        " channels second");
  if (a.sampling_ratio < 0 || !finite(a.spatial_scale))
    return bad(errc::invalid_argument,
               "sampling_ratio " + num(a.sampling_ratio) + " must not be negative, spatial_scale finite");
  return {};
}

// ---- elementwise -----------------------------------------------------------------------

bool binary(kernels::eltwise_fn f) noexcept { return kernels::is_binary(f); }

fault elementwise_problem(const kernels::elementwise& e) {
  if (static_cast<unsigned>(e.fn) > static_cast<unsigned>(kernels::last_eltwise_fn))
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(e.fn)) + " is no eltwise_fn");
  const std::string_view fn = kernels::op_name(e);  // words are built only on the way out
  if (!finite(e.alpha) || !finite(e.beta)) return bad(errc::invalid_argument, "alpha and beta must be finite");
  // A second operand the function would not read is a mistake (meant a binary function, or
  // another kernel), never something to ignore.
  if (!binary(e.fn) && !absent(e.b))
    return bad(errc::invalid_argument, std::string(fn) + " is unary: b must be left empty, it is " + dims(e.b.shape) +
                                           " " + type_name(e.b.type));
  // Floats for every function but mod; the integer dtypes for the exact integer ones; bool, no
  // number, for none (the logical kernel computes on it).
  const bool type_ok = is_float(e.a.type)           ? kernels::floats_ok(e.fn)
                       : e.a.type == dtype::boolean ? false
                                                    : kernels::integers_ok(e.fn);
  if (!type_ok)
    return bad(errc::invalid_dtype, std::string(fn) + " does not take " + type_name(e.a.type) + " operands");
  if (e.y.type != e.a.type)
    return bad(errc::invalid_dtype,
               "y is " + type_name(e.y.type) + ", a " + type_name(e.a.type) + ": y must be a's dtype (cast converts)");
  // ONNX's BitShift is defined on unsigned integers only.
  if ((e.fn == kernels::eltwise_fn::shift_left || e.fn == kernels::eltwise_fn::shift_right) && !is_unsigned(e.a.type))
    return bad(errc::invalid_dtype, std::string(fn) + " takes unsigned integers only, a is " + type_name(e.a.type));
  if (!binary(e.fn)) {
    if (e.y.shape == e.a.shape) return {};
    return bad(errc::invalid_shape, "y " + dims(e.y.shape) + " must be a's shape " + dims(e.a.shape));
  }
  if (absent(e.b)) return bad(errc::invalid_shape, std::string(fn) + " is binary: b is missing");
  if (e.b.type != e.a.type)
    return bad(errc::invalid_dtype,
               "b is " + type_name(e.b.type) + ", a " + type_name(e.a.type) + ": they must be one dtype");
  // NumPy: align trailing dimensions; each pair equal or one of them 1.
  const auto& a = e.a.shape;
  const auto& b = e.b.shape;
  const auto& y = e.y.shape;
  const std::size_t r = std::max(a.rank(), b.rank());
  shape want;
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.rank() ? 1 : a[i - (r - a.rank())];
    const int64_t db = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    if (da != db && da != 1 && db != 1)
      return bad(errc::invalid_shape, "a " + dims(a) + " and b " + dims(b) + " do not broadcast (" + num(da) +
                                          " against " + num(db) + ", aligned at the last dimension)");
    want.push_back(std::max(da, db));
  }
  if (!(y == want))
    return bad(errc::invalid_shape, "y " + dims(y) + " must be " + dims(want) + ", a and b broadcast together");
  return {};
}

fault problem(const kernels::elementwise& e) { return elementwise_problem(e); }

fault problem(const kernels::fused_elementwise& f) {
  using F = kernels::fused_elementwise;
  if (f.inputs == 0 || f.inputs > F::max_inputs || f.count == 0 || f.count > F::max_stages)
    return bad(errc::invalid_argument, "inputs " + num(f.inputs) + " must be in [1, " + num(F::max_inputs) +
                                           "], count " + num(f.count) + " in [1, " + num(F::max_stages) + "]");
  for (std::size_t k = 0; k < f.count; ++k) {
    const kernels::eltwise_stage& st = f.stages[k];
    const auto stage = [&] { return "stage " + num(static_cast<int64_t>(k)) + ": "; };
    if (static_cast<unsigned>(st.fn) > static_cast<unsigned>(kernels::last_eltwise_fn))
      return bad(errc::invalid_argument, stage() + "fn " + num(static_cast<unsigned>(st.fn)) + " is no eltwise_fn");
    if (!finite(st.alpha) || !finite(st.beta))
      return bad(errc::invalid_argument, stage() + "alpha and beta must be finite");
    if (!kernels::floats_ok(st.fn))  // the chain computes in float
      return bad(errc::invalid_dtype, stage() + "the chain computes in float, which the function does not take");
    // An operand is an input in range, or the running value after the first stage; every later
    // stage continues the chain (otherwise an earlier stage's result would be dropped).
    auto ok = [&](std::uint8_t o) { return o < f.inputs || (o == F::chain && k > 0); };
    const bool bin = binary(st.fn);
    if (!ok(st.a) || (bin && !ok(st.b)))
      return bad(errc::invalid_argument, stage() + "an operand is neither one of the " + num(f.inputs) +
                                             " inputs nor, after the first stage, the chain");
    if (k > 0 && st.a != F::chain && !(bin && st.b == F::chain))
      return bad(errc::invalid_argument, stage() + "it does not read the chain, which would drop the stages before");
  }
  if (!is_float(f.y.type)) return bad(errc::invalid_dtype, "y is " + type_name(f.y.type) + ": the chain writes floats");
  static constexpr const char* names[] = {"a", "b", "c", "d", "e"};
  for (std::size_t i = 0; i < f.inputs; ++i) {
    if (f.input(i).type != f.y.type)
      return bad(errc::invalid_dtype, std::string(names[i]) + " is " + type_name(f.input(i).type) + ", y " +
                                          type_name(f.y.type) + ": they must match");
    if (!broadcasts_to(f.input(i).shape, f.y.shape))
      return bad(errc::invalid_shape,
                 std::string(names[i]) + " " + dims(f.input(i).shape) + " does not broadcast to y " + dims(f.y.shape));
  }
  return {};
}

// ---- normalisation ---------------------------------------------------------------------

// A per-channel vector, when given: float, [c]. The test alone, for the accepted path.
bool channel_vector_ok(const tensor_desc& t, int64_t c) noexcept {
  return absent(t) || (is_float(t.type) && t.shape.rank() == 1 && t.shape[0] == c);
}

// What channel_vector_ok refused, in words.
fault channel_vector_problem(const char* name, const tensor_desc& t, int64_t c) {
  if (absent(t)) return {};
  if (!is_float(t.type))
    return bad(errc::invalid_dtype, std::string(name) + " is " + type_name(t.type) + ": it must be a float");
  if (t.shape.rank() != 1 || t.shape[0] != c)
    return bad(errc::invalid_shape, std::string(name) + " " + dims(t.shape) + " must be [" + num(c) +
                                        "], one value per channel (x's dimension 1)");
  return {};
}

[[gnu::always_inline]] inline fault problem(const kernels::batchnorm& b) {
  if (!finite(b.eps) || b.eps < 0 || !finite(b.momentum) || b.momentum < 0 || b.momentum > 1)
    return bad(errc::invalid_argument, "eps " + std::to_string(b.eps) + " must be finite and not negative, momentum " +
                                           std::to_string(b.momentum) + " in [0, 1]");
  if (!is_float(b.x.type) || b.y.type != b.x.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(b.x.type) + ", y " + type_name(b.y.type) + ": they must be one float dtype");
  if (b.x.shape.rank() < 2 || !(b.y.shape == b.x.shape))
    return bad(errc::invalid_shape, "x " + dims(b.x.shape) + " must be of rank 2 or more ([N, C, ...]), y " +
                                        dims(b.y.shape) + " its shape");
  const int64_t c = b.x.shape[1];
  const std::pair<const char*, const tensor_desc*> vectors[] = {
      {"gamma", &b.gamma}, {"beta", &b.beta}, {"running_mean", &b.running_mean}, {"running_var", &b.running_var}};
  for (const auto& [name, t] : vectors)
    if (!channel_vector_ok(*t, c)) return channel_vector_problem(name, *t, c);
  if (b.training) {
    for (const auto& [name, t] : {std::pair{"saved_mean", &b.saved_mean}, std::pair{"saved_invstd", &b.saved_invstd}})
      if (!channel_vector_ok(*t, c)) return channel_vector_problem(name, *t, c);
    // The unbiased variance of the running statistics needs two values per channel.
    if (b.x.shape.elements() / c < 2)
      return bad(errc::invalid_shape,
                 "x " + dims(b.x.shape) + " has one value per channel: training's unbiased variance needs two");
  }
  return {};
}

[[gnu::always_inline]] inline fault problem(const kernels::batchnorm_backward& b) {
  // dx is optional as dgamma and dbeta are (a caller wanting only the parameters' gradients
  // skips the pass that writes it), but a kernel writing nothing is a caller's mistake.
  const bool no_dx = absent(b.dx);
  if (no_dx && absent(b.dgamma) && absent(b.dbeta))
    return bad(errc::invalid_argument, "dx, dgamma and dbeta are all absent: the kernel would write nothing");
  if (!is_float(b.x.type) || b.dy.type != b.x.type || (!no_dx && b.dx.type != b.x.type))
    return bad(errc::invalid_dtype, "x is " + type_name(b.x.type) + ", dy " + type_name(b.dy.type) +
                                        (no_dx ? "" : ", dx " + type_name(b.dx.type)) +
                                        ": they must be one float dtype");
  if (b.x.shape.rank() < 2 || !(b.dy.shape == b.x.shape) || (!no_dx && !(b.dx.shape == b.x.shape)))
    return bad(errc::invalid_shape, "x " + dims(b.x.shape) + " must be of rank 2 or more ([N, C, ...]), dy " +
                                        dims(b.dy.shape) + (no_dx ? "" : " and dx " + dims(b.dx.shape)) + " its shape");
  const int64_t c = b.x.shape[1];
  const std::pair<const char*, const tensor_desc*> vectors[] = {{"gamma", &b.gamma},
                                                                {"saved_mean", &b.saved_mean},
                                                                {"saved_invstd", &b.saved_invstd},
                                                                {"dgamma", &b.dgamma},
                                                                {"dbeta", &b.dbeta}};
  for (const auto& [name, t] : vectors)
    if (!channel_vector_ok(*t, c)) return channel_vector_problem(name, *t, c);
  return {};
}

// The problems softmax and layernorm share: an axis of x, float x and y of one dtype and shape.
fault normalisation_problem(const tensor_desc& x, const tensor_desc& y, std::int32_t axis, std::string_view op) {
  if (!valid_axis(axis, x.shape.rank()))
    return bad(errc::invalid_argument, "axis " + num(axis) + " is outside [" +
                                           num(-static_cast<int64_t>(x.shape.rank())) + ", " +
                                           num(static_cast<int64_t>(x.shape.rank()) - 1) + "] for x " + dims(x.shape));
  if (!is_float(x.type)) return bad(errc::invalid_dtype, std::string(op) + " takes floats, x is " + type_name(x.type));
  if (y.type != x.type)
    return bad(errc::invalid_dtype, "y is " + type_name(y.type) + ", x " + type_name(x.type) + ": they must match");
  if (!(y.shape == x.shape))
    return bad(errc::invalid_shape, "y " + dims(y.shape) + " must be x's shape " + dims(x.shape));
  return {};
}

fault layernorm_problem(const kernels::layernorm& l) {
  if (!finite(l.eps) || l.eps < 0)
    return bad(errc::invalid_argument, "eps " + std::to_string(l.eps) + " must be finite and not negative");
  if (auto f = normalisation_problem(l.x, l.y, l.axis, "layernorm"); f.failed()) return f;
  const std::size_t ax = norm_axis(l.axis, l.x.shape.rank());
  const shape trailing(std::span<const int64_t>(l.x.shape.begin() + ax, l.x.shape.end()));
  const std::pair<const char*, const tensor_desc*> affine[] = {{"gamma", &l.gamma}, {"beta", &l.beta}};
  for (const auto& [name, t] : affine) {
    if (absent(*t)) continue;
    if (!is_float(t->type))
      return bad(errc::invalid_dtype, std::string(name) + " is " + type_name(t->type) + ": it must be a float");
    // The trailing shape itself, or the same elements flattened to one dimension.
    const bool flat = t->shape.rank() == 1 && t->shape[0] == trailing.elements();
    if (!(t->shape == trailing) && !flat)
      return bad(errc::invalid_shape, std::string(name) + " " + dims(t->shape) + " must be x's shape from axis " +
                                          num(l.axis) + ", " + dims(trailing) + ", or its " + num(trailing.elements()) +
                                          " elements in one dimension");
  }
  return {};
}

fault problem(const kernels::layernorm& l) { return layernorm_problem(l); }

// ---- pooling ---------------------------------------------------------------------------

// The output extents by the ONNX operator spec (MaxPool, AveragePool): floor, or with ceil_mode
// ceil, of (in + pads - dilated window) / stride + 1, less one when ceil_mode would start the
// last window past the input and its leading pad (onnx/reference/ops/op_pool_common.py). `x_name`
// names the pooled input in the words.
fault pool_output(kernels::pool_mode mode, const shape& x, const pool_windows& p, shape& out, const char* x_name) {
  if (static_cast<unsigned>(mode) > static_cast<unsigned>(kernels::pool_mode::global_avg))
    return bad(errc::invalid_argument, "mode " + num(static_cast<unsigned>(mode)) + " is no pool_mode");
  if (x.rank() != p.rank + 2)
    return bad(errc::invalid_shape, std::string(x_name) + " " + dims(x) + " must be of rank " +
                                        num(static_cast<int64_t>(p.rank) + 2) + " ([N, C] and " +
                                        num(static_cast<int64_t>(p.rank)) + " pooled dimensions)");
  out = shape{x[0], x[1]};
  if (mode == kernels::pool_mode::global_avg) {
    for (std::size_t i = 0; i < p.rank; ++i) out.push_back(1);
    return {};
  }
  for (std::size_t i = 0; i < p.rank; ++i)
    if (p.k[i] < 1 || p.s[i] < 1 || p.d[i] < 1 || p.pb[i] < 0 || p.pe[i] < 0)
      return bad(errc::invalid_argument, "dimension " + num(static_cast<int64_t>(i)) + ": window " + num(p.k[i]) +
                                             ", stride " + num(p.s[i]) + " and dilation " + num(p.d[i]) +
                                             " must be at least 1, pads " + num(p.pb[i]) + " and " + num(p.pe[i]) +
                                             " at least 0");
  for (std::size_t i = 0; i < p.rank; ++i) {
    // Every factor is below 2^31: the dilated window and the padded span fit in 64 bits.
    const int64_t in = x[i + 2], eff = p.d[i] * (p.k[i] - 1) + 1, span = in + p.pb[i] + p.pe[i] - eff;
    if (span < 0)
      return bad(errc::invalid_shape, "the dilated window of " + num(eff) + " does not fit in " + x_name + "'s " +
                                          num(in) + " padded by " + num(p.pb[i]) + " and " + num(p.pe[i]) +
                                          " (dimension " + num(static_cast<int64_t>(i + 2)) + ")");
    int64_t o = (p.ceil ? span + p.s[i] - 1 : span) / p.s[i] + 1;
    if (p.ceil && (o - 1) * p.s[i] >= in + p.pb[i]) --o;
    out.push_back(o);
  }
  return {};
}

fault problem(const kernels::pool2d& p) {
  const bool max = p.mode == kernels::pool_mode::max;
  if (!(is_float(p.x.type) || (max && is_integer(p.x.type))) || p.y.type != p.x.type)
    return bad(errc::invalid_dtype, "x is " + type_name(p.x.type) + ", y " + type_name(p.y.type) +
                                        ": they must be one float dtype (or integer, for max pooling)");
  const std::size_t rank = p.x.shape.rank() < 3 ? 0 : p.x.shape.rank() - 2;
  if (rank < 1 || rank > 3)
    return bad(errc::invalid_shape, "x " + dims(p.x.shape) +
                                        " must be of rank 3 to 5 ([N, C] and 1 to 3 pooled "
                                        "dimensions)");
  shape out;
  if (auto f = pool_output(p.mode, p.x.shape, windows_of(p, rank), out, "x"); f.failed()) return f;
  if (!(p.y.shape == out)) return bad(errc::invalid_shape, "y " + dims(p.y.shape) + " must be " + dims(out));
  if (!absent(p.indices)) {
    if (!max) return bad(errc::invalid_argument, "indices are max pooling's only");
    if (p.indices.type != dtype::i64)
      return bad(errc::invalid_dtype, "indices is " + type_name(p.indices.type) + ", not i64");
    if (!(p.indices.shape == out))
      return bad(errc::invalid_shape, "indices " + dims(p.indices.shape) + " must be y's shape " + dims(out));
  }
  return {};
}

fault problem(const kernels::pool2d_backward& p) {
  if (p.mode == kernels::pool_mode::max && absent(p.x))
    return bad(errc::invalid_argument, "max pooling's gradient needs x, to find each window's maximum");
  if (!is_float(p.dy.type) || p.dx.type != p.dy.type)
    return bad(errc::invalid_dtype,
               "dy is " + type_name(p.dy.type) + ", dx " + type_name(p.dx.type) + ": they must be one float dtype");
  if (!absent(p.x)) {
    if (p.x.type != p.dx.type)
      return bad(errc::invalid_dtype,
                 "x is " + type_name(p.x.type) + ", dx " + type_name(p.dx.type) + ": they must match");
    if (!(p.x.shape == p.dx.shape))
      return bad(errc::invalid_shape, "x " + dims(p.x.shape) + " must be dx's shape " + dims(p.dx.shape));
  }
  // The gradient is 2-D, and every window must cover part of the input (PyTorch's pad <= kernel
  // / 2), so that each output has an input to send its gradient to.
  if (p.mode != kernels::pool_mode::global_avg)
    for (int i = 0; i < 2; ++i)
      if (p.pad[i] < 0 || 2 * int64_t{p.pad[i]} > p.window[i])
        return bad(errc::invalid_argument, "pad " + num(p.pad[i]) + " must be in [0, window / 2] for the window " +
                                               num(p.window[i]) + ", so that every window covers some input");
  shape out;
  if (auto f = pool_output(p.mode, p.dx.shape, windows_of(p), out, "dx"); f.failed()) return f;
  if (!(p.dy.shape == out)) return bad(errc::invalid_shape, "dy " + dims(p.dy.shape) + " must be " + dims(out));
  return {};
}

// ---- the rest --------------------------------------------------------------------------

fault problem(const kernels::softmax& s) { return normalisation_problem(s.x, s.y, s.axis, "softmax"); }

fault problem(const kernels::reduce& r) {
  if (static_cast<unsigned>(r.fn) > static_cast<unsigned>(kernels::reduce_fn::prod))
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(r.fn)) + " is no reduce_fn");
  const std::size_t rank = r.x.shape.rank();
  // An empty mask reduces nothing; that is a bug in the caller more often than an intent.
  if (r.axes_mask == 0 || (rank < 32 && (r.axes_mask >> rank) != 0))
    return bad(errc::invalid_argument, "axes_mask " + num(r.axes_mask) + " must name at least one axis of x " +
                                           dims(r.x.shape) + " and none past it");
  const bool arg = r.fn == kernels::reduce_fn::argmax || r.fn == kernels::reduce_fn::argmin;
  if (arg && (r.axes_mask & (r.axes_mask - 1)) != 0)
    return bad(errc::invalid_argument, "axes_mask " + num(r.axes_mask) + ": argmax and argmin take one axis");
  // Integers take the reductions that are exact in the dtype (sum and prod wrap as numpy's do);
  // mean and the index reductions compute in float.
  const bool int_ok = is_integer(r.x.type) && (r.fn == kernels::reduce_fn::sum || r.fn == kernels::reduce_fn::prod ||
                                               r.fn == kernels::reduce_fn::max || r.fn == kernels::reduce_fn::min);
  if ((!is_float(r.x.type) && !int_ok) || r.y.type != (arg ? dtype::i64 : r.x.type))
    return bad(errc::invalid_dtype, "x is " + type_name(r.x.type) + ", y " + type_name(r.y.type) +
                                        ": x must be a float (an integer for sum, prod, max and min), y " +
                                        (arg ? "i64" : "x's dtype"));
  shape out;
  for (std::size_t i = 0; i < rank; ++i) {
    if ((r.axes_mask >> i) & 1u) {
      if (r.keep_dims) out.push_back(1);
    } else {
      out.push_back(r.x.shape[i]);
    }
  }
  if (out.rank() == 0) out.push_back(1);  // a full reduction gives one element, shape {1}
  if (!(r.y.shape == out))
    return bad(errc::invalid_shape, "y " + dims(r.y.shape) + " must be " + dims(out) + ", x " + dims(r.x.shape) +
                                        " reduced over axes_mask " + num(r.axes_mask) +
                                        (r.keep_dims ? " keeping them" : ""));
  return {};
}

// y must be x's dtype: the kernels that move elements without converting them.
fault same_type_problem(const tensor_desc& x, const tensor_desc& y) {
  if (y.type == x.type) return {};
  return bad(errc::invalid_dtype,
             "y is " + type_name(y.type) + ", x " + type_name(x.type) + ": y must be x's dtype (cast converts)");
}

// y of x's rank.
fault same_rank_problem(const shape& x, const shape& y) {
  if (y.rank() == x.rank()) return {};
  return bad(errc::invalid_shape, "y " + dims(y) + " must be of x's rank " + num(static_cast<int64_t>(x.rank())));
}

fault problem(const kernels::transpose& t) {
  if (auto f = same_type_problem(t.x, t.y); f.failed()) return f;
  const std::size_t rank = t.x.shape.rank();
  if (auto f = same_rank_problem(t.x.shape, t.y.shape); f.failed()) return f;
  unsigned seen = 0;
  for (std::size_t i = 0; i < rank; ++i) {
    const unsigned p = t.perm[i];
    if (p >= rank || ((seen >> p) & 1u))
      return bad(errc::invalid_argument, "perm[" + num(static_cast<int64_t>(i)) + "] = " + num(p) +
                                             ": perm must order x's " + num(static_cast<int64_t>(rank)) +
                                             " axes, each once");
    seen |= 1u << p;
  }
  for (std::size_t i = 0; i < rank; ++i)
    if (t.y.shape[i] != t.x.shape[t.perm[i]]) {
      shape want;
      for (std::size_t j = 0; j < rank; ++j) want.push_back(t.x.shape[t.perm[j]]);
      return bad(errc::invalid_shape,
                 "y " + dims(t.y.shape) + " must be " + dims(want) + ", x " + dims(t.x.shape) + " permuted by perm");
    }
  return {};
}

// Every index of the window must lie inside x: the first (starts) and the last, starts + (y - 1) *
// steps, both computed with overflow checks (a caller's huge step must be an error, not a wrapped
// index that lands inside x).
fault problem(const kernels::slice& s) {
  if (auto f = same_type_problem(s.x, s.y); f.failed()) return f;
  const std::size_t rank = s.x.shape.rank();
  if (auto f = same_rank_problem(s.x.shape, s.y.shape); f.failed()) return f;
  for (std::size_t d = 0; d < rank; ++d) {
    const int64_t start = s.starts[d], step = s.steps[d], dim = s.x.shape[d];
    const auto at = [&] { return "dimension " + num(static_cast<int64_t>(d)) + ": "; };
    if (step == 0) return bad(errc::invalid_argument, at() + "the step is 0");
    if (start < 0 || start >= dim)
      return bad(errc::invalid_argument, at() + "start " + num(start) + " is outside x's [0, " + num(dim - 1) + "]");
    int64_t span = 0, last = 0;
    if (__builtin_mul_overflow(s.y.shape[d] - 1, step, &span) || __builtin_add_overflow(start, span, &last) ||
        last < 0 || last >= dim)
      return bad(errc::invalid_shape, at() + "y's " + num(s.y.shape[d]) + " elements from " + num(start) +
                                          " in steps of " + num(step) + " pass x's [0, " + num(dim - 1) + "]");
  }
  return {};
}

// Whether v is a value of dtype t exactly: a float dtype holds it without rounding (NaN and the
// infinities included), an integer dtype holds it as an integer in its range. A pad's fill that
// would round is refused rather than written as some other number.
bool exact_in(dtype t, double v) noexcept {
  if (std::isnan(v)) return is_float(t);
  switch (t) {
    case dtype::f64: return true;
    case dtype::f32: return static_cast<double>(static_cast<float>(v)) == v;
    case dtype::f16: {
      const auto f = static_cast<float>(v);
      return static_cast<double>(f) == v && numeric::half_bits_to_float(numeric::float_to_half_bits(f)) == f;
    }
    case dtype::bf16: {
      const auto f = static_cast<float>(v);
      return static_cast<double>(f) == v && numeric::bfloat16_bits_to_float(numeric::float_to_bfloat16_bits(f)) == f;
    }
    case dtype::i8: return v == std::trunc(v) && v >= -128.0 && v <= 127.0;
    case dtype::u8: return v == std::trunc(v) && v >= 0.0 && v <= 255.0;
    case dtype::boolean: return v == 0.0 || v == 1.0;
    case dtype::i32: return v == std::trunc(v) && v >= -2147483648.0 && v <= 2147483647.0;
    // 2^63 is the first double past int64's range.
    case dtype::i64: return v == std::trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case dtype::i16: return v == std::trunc(v) && v >= -32768.0 && v <= 32767.0;
    case dtype::u16: return v == std::trunc(v) && v >= 0.0 && v <= 65535.0;
    case dtype::u32: return v == std::trunc(v) && v >= 0.0 && v <= 4294967295.0;
    // The pad kernel writes an integer fill through int64: u64 fills stop below 2^63.
    case dtype::u64: return v == std::trunc(v) && v >= 0.0 && v < 9223372036854775808.0;
  }
  return false;
}

// Every index y reaches, i - begins for i in [0, y), must be computable: begins and the extent
// are checked so that neither end of that range overflows. What lies outside x is the mode's to
// map, so any begin is a valid pad (a crop past the data yields border only, as ONNX's negative
// pads applied after the positive ones do).
fault problem(const kernels::pad& p) {
  if (auto f = same_type_problem(p.x, p.y); f.failed()) return f;
  const std::size_t rank = p.x.shape.rank();
  if (auto f = same_rank_problem(p.x.shape, p.y.shape); f.failed()) return f;
  if (static_cast<unsigned>(p.mode) > static_cast<unsigned>(kernels::pad_mode::wrap))
    return bad(errc::invalid_argument, "mode " + num(static_cast<unsigned>(p.mode)) + " is no pad_mode");
  if (p.mode == kernels::pad_mode::constant && !exact_in(p.x.type, p.value))
    return bad(errc::invalid_argument, "the fill " + std::to_string(p.value) + " is no exact " + type_name(p.x.type));
  for (std::size_t d = 0; d < rank; ++d) {
    int64_t first = 0, last = 0;
    if (__builtin_sub_overflow(int64_t{0}, p.begins[d], &first) ||
        __builtin_sub_overflow(p.y.shape[d] - 1, p.begins[d], &last))
      return bad(errc::invalid_argument, "dimension " + num(static_cast<int64_t>(d)) + ": begins " + num(p.begins[d]) +
                                             " puts y's indices past 64 bits");
  }
  return {};
}

// An index tensor's dtype: i32 or i64.
fault index_type_problem(const char* name, dtype t) {
  if (t == dtype::i32 || t == dtype::i64) return {};
  return bad(errc::invalid_dtype, std::string(name) + " is " + type_name(t) + ", not i32 or i64");
}

// An axis of x in [0, rank).
fault axis_problem(std::int32_t axis, const char* name, const shape& s) {
  if (axis >= 0 && static_cast<std::size_t>(axis) < s.rank()) return {};
  return bad(errc::invalid_argument, "axis " + num(axis) + " is outside [0, " +
                                         num(static_cast<int64_t>(s.rank()) - 1) + "] for " + name + " " + dims(s));
}

// ONNX's Gather (onnx.ai/onnx/operators/onnx__Gather.html): y is data with the axis replaced by
// indices' dimensions. The index values are data, read when the kernel runs: their range is checked
// there.
fault problem(const kernels::gather& g) {
  if (auto f = index_type_problem("indices", g.indices.type); f.failed()) return f;
  if (g.y.type != g.data.type)
    return bad(errc::invalid_dtype,
               "y is " + type_name(g.y.type) + ", data " + type_name(g.data.type) + ": y must be data's dtype");
  const std::size_t rank = g.data.shape.rank(), q = g.indices.shape.rank();
  if (auto f = axis_problem(g.axis, "data", g.data.shape); f.failed()) return f;
  const auto axis = static_cast<std::size_t>(g.axis);
  const auto want = [&] {
    std::vector<int64_t> w;  // of rank up to 15: no shape
    for (std::size_t d = 0; d < rank - 1 + q; ++d)
      w.push_back(d < axis ? g.data.shape[d] : d < axis + q ? g.indices.shape[d - axis] : g.data.shape[d - q + 1]);
    return w;
  };
  const auto wrong = [&] {
    return bad(errc::invalid_shape, "y " + dims(g.y.shape) + " must be " + dims(want()) + ", data " +
                                        dims(g.data.shape) + " with axis " + num(g.axis) + " replaced by indices " +
                                        dims(g.indices.shape));
  };
  if (g.y.shape.rank() != rank - 1 + q) return wrong();
  for (std::size_t d = 0; d < g.y.shape.rank(); ++d) {
    const int64_t w = d < axis ? g.data.shape[d] : d < axis + q ? g.indices.shape[d - axis] : g.data.shape[d - q + 1];
    if (g.y.shape[d] != w) return wrong();
  }
  return {};
}

// Any extents repeat: y's index i reads x's i mod x.shape, which is always inside x.
fault problem(const kernels::tile& t) {
  if (auto f = same_type_problem(t.x, t.y); f.failed()) return f;
  return same_rank_problem(t.x.shape, t.y.shape);
}

// ONNX's NegativeLogLikelihoodLoss: target is x without its class dimension; the class indices
// themselves are data, checked when the kernel runs.
fault problem(const kernels::nll_loss& l) {
  if (!is_float(l.x.type)) return bad(errc::invalid_dtype, "x is " + type_name(l.x.type) + ": it must be a float");
  if (auto f = index_type_problem("target", l.target.type); f.failed()) return f;
  if (l.y.type != l.x.type || (!absent(l.weight) && l.weight.type != l.x.type))
    return bad(errc::invalid_dtype, "y is " + type_name(l.y.type) +
                                        (absent(l.weight) ? std::string() : ", weight " + type_name(l.weight.type)) +
                                        ", x " + type_name(l.x.type) + ": they must match");
  if (static_cast<unsigned>(l.reduction) > static_cast<unsigned>(kernels::loss_reduction::mean))
    return bad(errc::invalid_argument,
               "reduction " + num(static_cast<unsigned>(l.reduction)) + " is no loss_reduction");
  const std::size_t rank = l.x.shape.rank();
  const auto target = [&] {  // x without its class dimension, 1
    shape t;
    for (std::size_t d = 0; d < rank; ++d)
      if (d != 1) t.push_back(l.x.shape[d]);
    return dims(t);
  };
  if (rank < 2) return bad(errc::invalid_shape, "x " + dims(l.x.shape) + " must be of rank 2 or more ([N, C, ...])");
  if (l.target.shape.rank() != rank - 1)
    return bad(errc::invalid_shape, "target " + dims(l.target.shape) + " must be " + target() + ", x " +
                                        dims(l.x.shape) + " without its class dimension");
  for (std::size_t d = 0; d + 1 < rank; ++d)
    if (l.target.shape[d] != l.x.shape[d == 0 ? 0 : d + 1])
      return bad(errc::invalid_shape, "target " + dims(l.target.shape) + " must be " + target() + ", x " +
                                          dims(l.x.shape) + " without its class dimension");
  if (!absent(l.weight) && !(l.weight.shape == shape{l.x.shape[1]}))
    return bad(errc::invalid_shape,
               "weight " + dims(l.weight.shape) + " must be [" + num(l.x.shape[1]) + "], one per class");
  const shape want = l.reduction == kernels::loss_reduction::none ? l.target.shape : shape{1};
  if (!(l.y.shape == want))
    return bad(errc::invalid_shape,
               "y " + dims(l.y.shape) + " must be " + dims(want) +
                   (l.reduction == kernels::loss_reduction::none ? ", target's shape" : ", one reduced value"));
  return {};
}

fault problem(const kernels::trilu& t) {
  if (auto f = same_type_problem(t.x, t.y); f.failed()) return f;
  if (t.x.shape.rank() < 2 || !(t.y.shape == t.x.shape))
    return bad(errc::invalid_shape,
               "x " + dims(t.x.shape) + " must be of rank 2 or more (matrices), y " + dims(t.y.shape) + " its shape");
  return {};
}

// ONNX's Resize (onnx.ai/onnx/operators/onnx__Resize.html): any mode on float data, nearest on
// integer and bool data (each output is a copy of one element; linear and cubic weigh
// neighbours, which an integer cannot hold). A scale is a ratio of extents, so only a finite
// positive one means anything, and a crop box only a finite one; y's extents are the caller's
// (they come from the scales or from the sizes the scales were computed from).
fault problem(const kernels::resize& r) {
  if (r.y.type != r.x.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(r.x.type) + ", y " + type_name(r.y.type) + ": they must be one dtype");
  if (!is_float(r.x.type) && r.mode != kernels::resize_mode::nearest)
    return bad(errc::invalid_dtype, "x is " + type_name(r.x.type) +
                                        ": linear and cubic modes weigh neighbours, so they take float data; "
                                        "integer and bool data take nearest");
  // tf_crop_and_resize writes the extrapolation value: an integer dtype takes only one it holds.
  if (!is_float(r.x.type) && r.coordinates == kernels::resize_coordinates::tf_crop_and_resize &&
      !exact_in(r.x.type, r.extrapolation_value))
    return bad(errc::invalid_argument, "the extrapolation value " + std::to_string(r.extrapolation_value) +
                                           " is no exact " + type_name(r.x.type));
  const std::size_t rank = r.x.shape.rank();
  if (auto f = same_rank_problem(r.x.shape, r.y.shape); f.failed()) return f;
  if (static_cast<unsigned>(r.mode) > static_cast<unsigned>(kernels::resize_mode::cubic) ||
      static_cast<unsigned>(r.coordinates) > static_cast<unsigned>(kernels::resize_coordinates::tf_crop_and_resize) ||
      static_cast<unsigned>(r.nearest) > static_cast<unsigned>(kernels::nearest_rounding::ceil) ||
      !std::isfinite(r.cubic_coeff_a))
    return bad(errc::invalid_argument,
               "mode, coordinates and nearest must be of their enumerations, cubic_coeff_a finite");
  for (std::size_t d = 0; d < rank; ++d)
    if (!std::isfinite(r.scales[d]) || !(r.scales[d] > 0) || !std::isfinite(r.roi_start[d]) ||
        !std::isfinite(r.roi_end[d]))
      return bad(errc::invalid_argument, "dimension " + num(static_cast<int64_t>(d)) +
                                             ": the scale must be finite and positive, the roi finite");
  // Antialiasing widens linear's and cubic's filters; nearest has none (the reference refuses it).
  if (r.antialias && r.mode == kernels::resize_mode::nearest)
    return bad(errc::invalid_argument, "antialias widens linear and cubic filters; nearest has none");
  return {};
}

// GatherElements' and ScatterElements' indices: an axis of data, then data's rank, `same` (y's or
// updates', named `same_name`) shape, and off the axis extents no larger than data's.
fault elements_indices_problem(const tensor_desc& data, const tensor_desc& indices, const shape& same,
                               const char* same_name, std::int32_t axis) {
  const std::size_t rank = data.shape.rank();
  if (auto f = axis_problem(axis, "data", data.shape); f.failed()) return f;
  if (indices.shape.rank() != rank)
    return bad(errc::invalid_shape,
               "indices " + dims(indices.shape) + " must be of data's rank " + num(static_cast<int64_t>(rank)));
  if (!(same == indices.shape))
    return bad(errc::invalid_shape,
               std::string(same_name) + " " + dims(same) + " must be indices' shape " + dims(indices.shape));
  for (std::size_t d = 0; d < rank; ++d)
    if (d != static_cast<std::size_t>(axis) && indices.shape[d] > data.shape[d])
      return bad(errc::invalid_shape, "indices " + dims(indices.shape) + " is longer than data " + dims(data.shape) +
                                          " in dimension " + num(static_cast<int64_t>(d)) + ", off the axis " +
                                          num(axis));
  return {};
}

// ONNX's GatherElements: y has indices' shape; off the axis every index of y must be one of data's.
fault problem(const kernels::gather_elements& g) {
  if (auto f = index_type_problem("indices", g.indices.type); f.failed()) return f;
  if (g.y.type != g.data.type)
    return bad(errc::invalid_dtype,
               "y is " + type_name(g.y.type) + ", data " + type_name(g.data.type) + ": y must be data's dtype");
  return elements_indices_problem(g.data, g.indices, g.y.shape, "y", g.axis);
}

// ONNX's CumSum: one shape and dtype in and out, float or integer (bool is no number to add).
fault problem(const kernels::cumsum& c) {
  if (auto f = same_type_problem(c.x, c.y); f.failed()) return f;
  if (!is_float(c.x.type) && !is_integer(c.x.type))
    return bad(errc::invalid_dtype, "x is " + type_name(c.x.type) + ": cumsum adds floats or integers");
  if (!valid_axis(c.axis, c.x.shape.rank()))
    return bad(errc::invalid_argument,
               "axis " + num(c.axis) + " is outside [" + num(-static_cast<int64_t>(c.x.shape.rank())) + ", " +
                   num(static_cast<int64_t>(c.x.shape.rank()) - 1) + "] for x " + dims(c.x.shape));
  if (!(c.y.shape == c.x.shape))
    return bad(errc::invalid_shape, "y " + dims(c.y.shape) + " must be x's shape " + dims(c.x.shape));
  return {};
}

// ONNX's GridSample (onnx.ai/onnx/operators/onnx__GridSample.html): x [N, C, D1..Dr], grid
// [N, O1..Or, r], y [N, C, O1..Or]; x and y of one float dtype, the grid of any float dtype.
fault problem(const kernels::grid_sample& g) {
  if (!is_float(g.x.type) || g.y.type != g.x.type || !is_float(g.grid.type))
    return bad(errc::invalid_dtype, "x is " + type_name(g.x.type) + ", y " + type_name(g.y.type) + ", grid " +
                                        type_name(g.grid.type) + ": x and y must be one float dtype, grid a float");
  if (static_cast<unsigned>(g.mode) > static_cast<unsigned>(kernels::grid_sample_mode::cubic) ||
      static_cast<unsigned>(g.padding) > static_cast<unsigned>(kernels::grid_padding::reflection))
    return bad(errc::invalid_argument, "mode and padding must be of their enumerations");
  const std::size_t rank = g.x.shape.rank();
  const auto want = [&] {
    return bad(errc::invalid_shape, "x " + dims(g.x.shape) + ", grid " + dims(g.grid.shape) + " and y " +
                                        dims(g.y.shape) + " must be [N, C, D1..Dr], [N, O1..Or, r] and " +
                                        "[N, C, O1..Or], r being x's rank less 2");
  };
  if (rank < 3 || g.grid.shape.rank() != rank || g.y.shape.rank() != rank) return want();
  const auto spatial = static_cast<std::int64_t>(rank - 2);
  if (g.grid.shape[0] != g.x.shape[0] || g.grid.shape[rank - 1] != spatial || g.y.shape[0] != g.x.shape[0] ||
      g.y.shape[1] != g.x.shape[1])
    return want();
  for (std::size_t d = 2; d < rank; ++d)
    if (g.y.shape[d] != g.grid.shape[d - 1]) return want();
  return {};
}

bool is_index(dtype t) noexcept { return t == dtype::i32 || t == dtype::i64; }

// What a scatter reduction or TopK compares and combines: numbers, float or integer.
bool is_number(dtype t) noexcept { return is_float(t) || is_integer(t); }

// Scatter's common rules: y is data (shape and dtype), updates has data's dtype, the reduction is
// one we know, and a reduction computes on numbers only (none moves bytes of any dtype).
fault scatter_problem(const tensor_desc& data, const tensor_desc& indices, const tensor_desc& updates,
                      const tensor_desc& y, kernels::scatter_reduction red) {
  if (static_cast<unsigned>(red) > static_cast<unsigned>(kernels::scatter_reduction::min))
    return bad(errc::invalid_argument, "reduction " + num(static_cast<unsigned>(red)) + " is no scatter_reduction");
  if (auto f = index_type_problem("indices", indices.type); f.failed()) return f;
  if (updates.type != data.type || y.type != data.type)
    return bad(errc::invalid_dtype, "updates is " + type_name(updates.type) + ", y " + type_name(y.type) +
                                        ": both must be data's " + type_name(data.type));
  if (red != kernels::scatter_reduction::none && !is_number(data.type))
    return bad(errc::invalid_dtype, "data is " + type_name(data.type) + ": a reduction combines numbers");
  if (!(y.shape == data.shape))
    return bad(errc::invalid_shape, "y " + dims(y.shape) + " must be data's shape " + dims(data.shape));
  return {};
}

// ONNX's ScatterND: updates.shape = indices.shape[:-1] + data.shape[k:], k = indices.shape[-1]
// in [1, rank(data)].
fault problem(const kernels::scatter_nd& s) {
  if (auto f = scatter_problem(s.data, s.indices, s.updates, s.y, s.reduction); f.failed()) return f;
  const std::size_t r = s.data.shape.rank(), q = s.indices.shape.rank();
  const int64_t k = s.indices.shape[q - 1];
  if (k < 1 || k > static_cast<int64_t>(r))
    return bad(errc::invalid_shape, "indices " + dims(s.indices.shape) + " index " + num(k) +
                                        " dimensions (its last extent), outside [1, " + num(static_cast<int64_t>(r)) +
                                        "] for data " + dims(s.data.shape));
  const auto ku = static_cast<std::size_t>(k);
  const auto wrong = [&] {
    std::vector<int64_t> want;  // of rank up to 14: no shape
    for (std::size_t d = 0; d + 1 < q; ++d) want.push_back(s.indices.shape[d]);
    for (std::size_t d = ku; d < r; ++d) want.push_back(s.data.shape[d]);
    return bad(errc::invalid_shape, "updates " + dims(s.updates.shape) + " must be " + dims(want) +
                                        ", indices' leading dimensions and data's past the first " + num(k));
  };
  if (s.updates.shape.rank() != q - 1 + r - ku) return wrong();
  for (std::size_t d = 0; d + 1 < q; ++d)
    if (s.updates.shape[d] != s.indices.shape[d]) return wrong();
  for (std::size_t d = ku; d < r; ++d)
    if (s.updates.shape[q - 1 + d - ku] != s.data.shape[d]) return wrong();
  return {};
}

// ONNX's ScatterElements: data, indices and updates of one rank, indices and updates of one shape,
// off the axis no larger than data.
fault problem(const kernels::scatter_elements& s) {
  if (auto f = scatter_problem(s.data, s.indices, s.updates, s.y, s.reduction); f.failed()) return f;
  return elements_indices_problem(s.data, s.indices, s.updates.shape, "updates", s.axis);
}

// ONNX's GatherND: b batch dimensions shared by data and indices, k = indices.shape[-1] in
// [1, rank(data) - b], y.shape = indices.shape[:-1] + data.shape[b + k:].
fault problem(const kernels::gather_nd& g) {
  if (auto f = index_type_problem("indices", g.indices.type); f.failed()) return f;
  if (g.y.type != g.data.type)
    return bad(errc::invalid_dtype,
               "y is " + type_name(g.y.type) + ", data " + type_name(g.data.type) + ": y must be data's dtype");
  const std::size_t r = g.data.shape.rank(), q = g.indices.shape.rank();
  if (g.batch_dims < 0 || static_cast<std::size_t>(g.batch_dims) >= std::min(r, q))
    return bad(errc::invalid_argument, "batch_dims " + num(g.batch_dims) + " is outside [0, " +
                                           num(static_cast<int64_t>(std::min(r, q)) - 1) + "]");
  const auto b = static_cast<std::size_t>(g.batch_dims);
  for (std::size_t d = 0; d < b; ++d)
    if (g.indices.shape[d] != g.data.shape[d])
      return bad(errc::invalid_shape, "indices " + dims(g.indices.shape) + " and data " + dims(g.data.shape) +
                                          " must share their first " + num(g.batch_dims) + " (batch) dimensions");
  const int64_t k = g.indices.shape[q - 1];
  if (k < 1 || k > static_cast<int64_t>(r - b))
    return bad(errc::invalid_shape, "indices " + dims(g.indices.shape) + " index " + num(k) +
                                        " dimensions (its last extent), outside [1, " +
                                        num(static_cast<int64_t>(r - b)) + "] for data " + dims(g.data.shape));
  const auto ku = static_cast<std::size_t>(k);
  const auto wrong = [&] {
    std::vector<int64_t> want;  // of rank up to 14: no shape
    for (std::size_t d = 0; d + 1 < q; ++d) want.push_back(g.indices.shape[d]);
    for (std::size_t d = b + ku; d < r; ++d) want.push_back(g.data.shape[d]);
    return bad(errc::invalid_shape, "y " + dims(g.y.shape) + " must be " + dims(want) +
                                        ", indices' leading dimensions and data's past the indexed ones");
  };
  if (g.y.shape.rank() != q - 1 + r - b - ku) return wrong();
  for (std::size_t d = 0; d + 1 < q; ++d)
    if (g.y.shape[d] != g.indices.shape[d]) return wrong();
  for (std::size_t d = b + ku; d < r; ++d)
    if (g.y.shape[q - 1 + d - b - ku] != g.data.shape[d]) return wrong();
  return {};
}

// ONNX's TopK: values and indices are x with the axis k long, k in [1, x.shape[axis]].
fault problem(const kernels::top_k& t) {
  if (!is_number(t.x.type) || t.values.type != t.x.type || !is_index(t.indices.type))
    return bad(errc::invalid_dtype, "x is " + type_name(t.x.type) + ", values " + type_name(t.values.type) +
                                        ", indices " + type_name(t.indices.type) +
                                        ": x a number, values x's dtype, indices i32 or i64");
  const std::size_t rank = t.x.shape.rank();
  if (auto f = axis_problem(t.axis, "x", t.x.shape); f.failed()) return f;
  const auto axis = static_cast<std::size_t>(t.axis);
  if (t.k < 1 || t.k > t.x.shape[axis])
    return bad(errc::invalid_argument,
               "k " + num(t.k) + " is outside [1, " + num(t.x.shape[axis]) + "], x's extent on axis " + num(t.axis));
  const auto wrong = [&] {
    shape want = t.x.shape;
    want[axis] = t.k;
    return bad(errc::invalid_shape, "values " + dims(t.values.shape) + " and indices " + dims(t.indices.shape) +
                                        " must be " + dims(want) + ", x with axis " + num(t.axis) + " k long");
  };
  if (t.values.shape.rank() != rank || !(t.indices.shape == t.values.shape)) return wrong();
  for (std::size_t d = 0; d < rank; ++d)
    if (t.values.shape[d] != (d == axis ? t.k : t.x.shape[d])) return wrong();
  return {};
}

// ---- comparisons, where, logical ---------------------------------------------------------

// NumPy broadcasting of every shape in `in` to `out`: out has the largest rank, and each of its
// dimensions is the one extent other than 1 among the inputs' (aligned at the trailing end), or 1.
bool broadcast_of(std::initializer_list<const shape*> in, const shape& out) noexcept {
  std::size_t r = 0;
  for (const shape* s : in) r = std::max(r, s->rank());
  if (out.rank() != r) return false;
  for (std::size_t i = 0; i < r; ++i) {
    int64_t want = 1;
    for (const shape* s : in) {
      const int64_t d = i < r - s->rank() ? 1 : (*s)[i - (r - s->rank())];
      if (d == 1) continue;
      if (want != 1 && want != d) return false;
      want = d;
    }
    if (out[i] != want) return false;
  }
  return true;
}

// The refusal of broadcast_of: `inputs` names the inputs with their shapes ("a [2,3] and b [4]").
fault broadcast_problem(const std::string& inputs, const char* out_name, const shape& out) {
  return bad(errc::invalid_shape, inputs +
                                      " must broadcast together (NumPy's rule, aligned at the last dimension) "
                                      "to " +
                                      out_name + " " + dims(out));
}

fault problem(const kernels::compare& c) {
  if (static_cast<unsigned>(c.fn) > static_cast<unsigned>(kernels::compare_fn::greater_equal))
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(c.fn)) + " is no compare_fn");
  if (c.a.type != c.b.type || c.y.type != dtype::boolean)
    return bad(errc::invalid_dtype, "a is " + type_name(c.a.type) + ", b " + type_name(c.b.type) + ", y " +
                                        type_name(c.y.type) + ": a and b must be one dtype, y bool");
  // bool has no order in ONNX: only Equal takes it.
  if (c.a.type == dtype::boolean && c.fn != kernels::compare_fn::equal)
    return bad(errc::invalid_dtype, "a and b are bool, which only equal compares (bool has no order)");
  if (!broadcast_of({&c.a.shape, &c.b.shape}, c.y.shape))
    return broadcast_problem("a " + dims(c.a.shape) + " and b " + dims(c.b.shape), "y", c.y.shape);
  return {};
}

fault problem(const kernels::where& w) {
  if (w.cond.type != dtype::boolean || w.x.type != w.y.type || w.out.type != w.x.type)
    return bad(errc::invalid_dtype, "cond is " + type_name(w.cond.type) + ", x " + type_name(w.x.type) + ", y " +
                                        type_name(w.y.type) + ", out " + type_name(w.out.type) +
                                        ": cond must be bool, x, y and out one dtype");
  if (!broadcast_of({&w.cond.shape, &w.x.shape, &w.y.shape}, w.out.shape))
    return broadcast_problem("cond " + dims(w.cond.shape) + ", x " + dims(w.x.shape) + " and y " + dims(w.y.shape),
                             "out", w.out.shape);
  return {};
}

fault problem(const kernels::logical& l) {
  if (static_cast<unsigned>(l.fn) > static_cast<unsigned>(kernels::logical_fn::not_))
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(l.fn)) + " is no logical_fn");
  if (l.a.type != dtype::boolean || l.y.type != dtype::boolean)
    return bad(errc::invalid_dtype,
               "a is " + type_name(l.a.type) + ", y " + type_name(l.y.type) + ": logical functions take bool");
  if (l.fn == kernels::logical_fn::not_) {
    if (l.y.shape == l.a.shape) return {};
    return bad(errc::invalid_shape, "y " + dims(l.y.shape) + " must be a's shape " + dims(l.a.shape));
  }
  if (l.b.type != dtype::boolean)
    return bad(errc::invalid_dtype, "b is " + type_name(l.b.type) + ": logical functions take bool");
  if (!broadcast_of({&l.a.shape, &l.b.shape}, l.y.shape))
    return broadcast_problem("a " + dims(l.a.shape) + " and b " + dims(l.b.shape), "y", l.y.shape);
  return {};
}

fault problem(const kernels::float_class& f) {
  if (static_cast<unsigned>(f.fn) > static_cast<unsigned>(kernels::float_class_fn::is_inf))
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(f.fn)) + " is no float_class_fn");
  if (!is_float(f.x.type) || f.y.type != dtype::boolean)
    return bad(errc::invalid_dtype,
               "x is " + type_name(f.x.type) + ", y " + type_name(f.y.type) + ": x must be a float, y bool");
  if (!(f.y.shape == f.x.shape))
    return bad(errc::invalid_shape, "y " + dims(f.y.shape) + " must be x's shape " + dims(f.x.shape));
  return {};
}

// quantize and dequantize: the integer side (y when quantizing, x when dequantizing) int8 or uint8
// (dequantize int32 too), zero_point of its dtype, the float side no double.
fault quantize_types_problem(const kernels::quantize& q, bool quant) {
  const dtype ints = quant ? q.y.type : q.x.type;
  const dtype floats = quant ? q.x.type : q.y.type;
  const bool int_ok = ints == dtype::i8 || ints == dtype::u8 || (!quant && ints == dtype::i32);
  // ONNX's QuantizeLinear and DequantizeLinear take no double (x, scale and y are float, float16 or
  // bfloat16).
  const bool floats_ok =
      is_float(floats) && floats != dtype::f64 && is_float(q.scale.type) && q.scale.type != dtype::f64;
  if (!int_ok || !floats_ok)
    return bad(errc::invalid_dtype, "x is " + type_name(q.x.type) + ", y " + type_name(q.y.type) + ", scale " +
                                        type_name(q.scale.type) + ": the integer side must be i8 or u8" +
                                        (quant ? "" : " (or i32)") + ", the float side and scale f32, f16 or bf16");
  if (!absent(q.zero_point) && q.zero_point.type != ints)
    return bad(errc::invalid_dtype, "zero_point is " + type_name(q.zero_point.type) + ", the integer side " +
                                        type_name(ints) + ": they must match");
  return {};
}

// requantize: x int32, y int8 or uint8, scale float (no double: ONNX's scales are float32), one
// zero point of y's dtype; scale per tensor or per axis as quantize's.
fault requantize_problem(const kernels::quantize& q) {
  if (q.x.type != dtype::i32 || (q.y.type != dtype::i8 && q.y.type != dtype::u8))
    return bad(errc::invalid_dtype,
               "x is " + type_name(q.x.type) + ", y " + type_name(q.y.type) + ": requantize takes i32 to i8 or u8");
  if (!is_float(q.scale.type) || q.scale.type == dtype::f64)
    return bad(errc::invalid_dtype, "scale is " + type_name(q.scale.type) + ", not f32, f16 or bf16");
  if (!absent(q.zero_point) && q.zero_point.type != q.y.type)
    return bad(errc::invalid_dtype,
               "zero_point is " + type_name(q.zero_point.type) + ", y " + type_name(q.y.type) + ": they must match");
  if (!absent(q.zero_point) && q.zero_point.shape.elements() != 1)
    return bad(errc::invalid_shape, "zero_point " + dims(q.zero_point.shape) + " must hold one value");
  return {};
}

fault problem(const kernels::quantize& q) {
  const bool quant = q.fn == kernels::quantize_fn::quantize;
  const bool requant = q.fn == kernels::quantize_fn::requantize;
  if (!quant && !requant && q.fn != kernels::quantize_fn::dequantize)
    return bad(errc::invalid_argument, "fn " + num(static_cast<unsigned>(q.fn)) + " is no quantize_fn");
  if (auto f = requant ? requantize_problem(q) : quantize_types_problem(q, quant); f.failed()) return f;
  if (!(q.y.shape == q.x.shape))
    return bad(errc::invalid_shape, "y " + dims(q.y.shape) + " must be x's shape " + dims(q.x.shape));
  // One scale (any shape of one element), or a 1-D run of them along axis.
  const auto n = q.scale.shape.elements();
  if (n != 1) {
    if (q.scale.shape.rank() != 1)
      return bad(errc::invalid_shape,
                 "scale " + dims(q.scale.shape) + " must hold one value, or be 1-D with one per element of axis");
    if (auto f = axis_problem(q.axis, "x", q.x.shape); f.failed()) return f;
    if (q.x.shape[static_cast<std::size_t>(q.axis)] != n)
      return bad(errc::invalid_shape, "scale " + dims(q.scale.shape) + " must be [" +
                                          num(q.x.shape[static_cast<std::size_t>(q.axis)]) + "], x " + dims(q.x.shape) +
                                          "'s extent on axis " + num(q.axis));
  }
  if (!requant && !absent(q.zero_point) && !(q.zero_point.shape == q.scale.shape))
    return bad(errc::invalid_shape,
               "zero_point " + dims(q.zero_point.shape) + " must be scale's shape " + dims(q.scale.shape));
  return {};
}

// ONNX's RNN, GRU and LSTM (onnx.ai/onnx/operators/onnx__LSTM.html and its siblings): what is
// wrong with a recurrent descriptor, as an error and a sentence naming the operand and the shape
// it must have; no error when it can run. Every shape follows from x, r and the attributes.
fault recurrent_problem(const kernels::recurrent& k) {
  using kernels::rnn_cell;
  if (static_cast<unsigned>(k.cell) > static_cast<unsigned>(rnn_cell::lstm))
    return bad(errc::invalid_argument,
               "cell " + std::to_string(static_cast<unsigned>(k.cell)) + " is not rnn, gru or lstm");
  if (static_cast<unsigned>(k.direction) > static_cast<unsigned>(kernels::rnn_direction::bidirectional))
    return bad(errc::invalid_argument, "direction " + std::to_string(static_cast<unsigned>(k.direction)) +
                                           " is not forward, reverse or bidirectional");
  if (!(k.clip > 0)) return bad(errc::invalid_argument, "clip " + std::to_string(k.clip) + " must be positive");
  const bool lstm = k.cell == rnn_cell::lstm;
  if (k.options & ~0x1fu) return bad(errc::invalid_argument, "unknown option bits");
  if (k.has(k.activation_params) && absent(k.b))
    return bad(errc::invalid_argument, "activation_params needs b, which carries them");
  if (k.has(k.input_forget) && !lstm) return bad(errc::invalid_argument, "input_forget is an LSTM's option");
  if (k.has(k.linear_before_reset) && k.cell != rnn_cell::gru)
    return bad(errc::invalid_argument, "linear_before_reset is a GRU's option");
  const std::size_t per_dir = k.cell == rnn_cell::rnn ? 1 : k.cell == rnn_cell::gru ? 2 : 3;
  const std::size_t dirs = k.direction == kernels::rnn_direction::bidirectional ? 2 : 1;
  for (std::size_t i = 0; i < per_dir * dirs; ++i)
    if (static_cast<unsigned>(k.activations[i]) > static_cast<unsigned>(kernels::rnn_activation::scaled_tanh))
      return bad(errc::invalid_argument, "activations[" + std::to_string(i) + "] is no known activation");
  if (k.x.type == dtype::f64) return bad(errc::not_supported, "x is f64: recurrent layers compute in float");
  if (!is_float(k.x.type)) return bad(errc::invalid_dtype, "x must be f32, f16 or bf16");
  const std::pair<const char*, const tensor_desc*> same[] = {{"w", &k.w}, {"r", &k.r},     {"b", &k.b},
                                                             {"y", &k.y}, {"y_h", &k.y_h}, {"y_c", &k.y_c}};
  for (const auto& [name, t] : same)
    if (!absent(*t) && t->type != k.x.type)
      return bad(errc::invalid_dtype, std::string(name) + " is " + std::string(to_string(t->type)) + ", x " +
                                          std::string(to_string(k.x.type)) + ": they must match");
  if (!absent(k.sequence_lens) && k.sequence_lens.type != dtype::i32)
    return bad(errc::invalid_dtype, "sequence_lens must be int32");
  if (k.x.shape.rank() != 3)
    return bad(errc::invalid_shape,
               "x " + dims(k.x.shape) + " must be " + (k.batch_major ? "[batch, seq, input]" : "[seq, batch, input]"));
  if (k.r.shape.rank() != 3)
    return bad(errc::invalid_shape, "r " + dims(k.r.shape) + " must be [dirs, gates * hidden, hidden]");
  const int64_t seq = k.x.shape[k.batch_major ? 1 : 0], batch = k.x.shape[k.batch_major ? 0 : 1];
  const int64_t input = k.x.shape[2], hidden = k.r.shape[2];
  const int64_t gates = k.cell == rnn_cell::rnn ? 1 : k.cell == rnn_cell::gru ? 3 : 4;
  const auto d = static_cast<int64_t>(dirs);
  const auto expect = [&](const char* name, const tensor_desc& t, const shape& want) -> fault {
    if (t.shape == want) return {};
    return bad(errc::invalid_shape, std::string(name) + " " + dims(t.shape) + " must be " + dims(want));
  };
  if (auto f = expect("r", k.r, {d, gates * hidden, hidden}); f.e != errc{}) return f;
  if (auto f = expect("w", k.w, {d, gates * hidden, input}); f.e != errc{}) return f;
  if (!absent(k.b)) {
    const int64_t extra = k.has(k.activation_params) ? kernels::recurrent::param_columns : 0;
    const shape plain{d, 2 * gates * hidden + extra}, peep{d, 2 * gates * hidden + 3 * hidden + extra};
    if (!(k.b.shape == plain) && !(lstm && k.b.shape == peep))
      return bad(errc::invalid_shape, "b " + dims(k.b.shape) + " must be " + dims(plain) +
                                          (lstm ? " (or " + dims(peep) + " with the peepholes)" : std::string()) +
                                          (extra ? " with the activation parameters" : std::string()));
  }
  if (!absent(k.sequence_lens))
    if (auto f = expect("sequence_lens", k.sequence_lens, {batch}); f.e != errc{}) return f;
  const shape state = k.batch_major ? shape{batch, d, hidden} : shape{d, batch, hidden};
  if (!absent(k.y))
    if (auto f = expect("y", k.y, k.batch_major ? shape{batch, seq, d, hidden} : shape{seq, d, batch, hidden});
        f.e != errc{})
      return f;
  if (!absent(k.y_h))
    if (auto f = expect("y_h", k.y_h, state); f.e != errc{}) return f;
  if (!absent(k.y_c)) {
    if (!lstm) return bad(errc::invalid_argument, "y_c is an LSTM's cell state");
    if (auto f = expect("y_c", k.y_c, state); f.e != errc{}) return f;
  }
  if (k.has(k.initial_h) && absent(k.y_h)) return bad(errc::invalid_argument, "initial_h is read from y_h, absent");
  if (k.has(k.initial_c) && (!lstm || absent(k.y_c)))
    return bad(errc::invalid_argument, "initial_c is read from y_c, absent or not an LSTM's");
  return {};
}

// ONNX's LRN: a float x of rank 2 or more (N, C, ...), y the same; a window of one channel or
// more; finite parameters.
fault problem(const kernels::lrn& l) {
  if (!is_float(l.x.type) || l.y.type != l.x.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(l.x.type) + ", y " + type_name(l.y.type) + ": they must be one float dtype");
  if (l.x.shape.rank() < 2 || !(l.y.shape == l.x.shape))
    return bad(errc::invalid_shape, "x " + dims(l.x.shape) + " must be of rank 2 or more ([N, C, ...]), y " +
                                        dims(l.y.shape) + " its shape");
  if (l.size < 1 || !finite(l.alpha) || !finite(l.beta) || !finite(l.bias))
    return bad(errc::invalid_argument, "size " + num(l.size) + " must be at least 1, alpha, beta and bias finite");
  return {};
}

fault problem(const kernels::recurrent& k) { return recurrent_problem(k); }

fault problem(const kernels::cast& c) {
  if (!(c.y.shape == c.x.shape))
    return bad(errc::invalid_shape, "y " + dims(c.y.shape) + " must be x's shape " + dims(c.x.shape));
  if (static_cast<unsigned>(c.mode) > static_cast<unsigned>(kernels::round_mode::trunc))
    return bad(errc::invalid_argument, "mode " + num(static_cast<unsigned>(c.mode)) + " is no round_mode");
  return {};
}

[[gnu::always_inline]] inline fault problem(const kernels::sgd_update& s) {
  if (!finite(s.lr) || !finite(s.momentum) || !finite(s.weight_decay))
    return bad(errc::invalid_argument, "lr, momentum and weight_decay must be finite");
  if (s.momentum != 0.0f && absent(s.momentum_buffer))
    return bad(errc::invalid_argument, "a momentum needs momentum_buffer");
  if (!is_float(s.param.type) || !is_float(s.grad.type) ||
      (!absent(s.momentum_buffer) && !is_float(s.momentum_buffer.type)))
    return bad(
        errc::invalid_dtype,
        "param is " + type_name(s.param.type) + ", grad " + type_name(s.grad.type) +
            (absent(s.momentum_buffer) ? std::string() : ", momentum_buffer " + type_name(s.momentum_buffer.type)) +
            ": they must be floats");
  if (!(s.grad.shape == s.param.shape))
    return bad(errc::invalid_shape, "grad " + dims(s.grad.shape) + " must be param's shape " + dims(s.param.shape));
  if (!absent(s.momentum_buffer) && !(s.momentum_buffer.shape == s.param.shape))
    return bad(errc::invalid_shape,
               "momentum_buffer " + dims(s.momentum_buffer.shape) + " must be param's shape " + dims(s.param.shape));
  return {};
}

// ONNX's Det: x [*, m, m] of a float dtype, y x's leading dimensions (rank 0 for a matrix) of
// its dtype.
fault problem(const kernels::det& d) {
  if (!is_float(d.x.type) || d.y.type != d.x.type)
    return bad(errc::invalid_dtype,
               "x is " + type_name(d.x.type) + ", y " + type_name(d.y.type) + ": they must be one float dtype");
  const std::size_t r = d.x.shape.rank();
  if (r < 2 || d.x.shape[r - 1] != d.x.shape[r - 2])
    return bad(errc::invalid_shape, "x " + dims(d.x.shape) + " must end in a square matrix ([..., m, m])");
  const auto wrong = [&] {
    const shape lead(std::span<const int64_t>(d.x.shape.begin(), d.x.shape.end() - 2));
    return bad(errc::invalid_shape, "y " + dims(d.y.shape) + " must be " + dims(lead) + ", x's leading dimensions");
  };
  if (d.y.shape.rank() != r - 2) return wrong();
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (d.y.shape[i] != d.x.shape[i]) return wrong();
  return {};
}

// ONNX's ReverseSequence: batch_axis and time_axis are 0 and 1 in either order, sequence_lens
// int64 [batch], y x's shape and dtype.
fault problem(const kernels::reverse_sequence& s) {
  if (auto f = same_type_problem(s.x, s.y); f.failed()) return f;
  if (s.sequence_lens.type != dtype::i64)
    return bad(errc::invalid_dtype, "sequence_lens is " + type_name(s.sequence_lens.type) + ", not i64");
  const bool axes_ok = (s.batch_axis == 0 && s.time_axis == 1) || (s.batch_axis == 1 && s.time_axis == 0);
  if (!axes_ok)
    return bad(errc::invalid_argument, "batch_axis " + num(s.batch_axis) + " and time_axis " + num(s.time_axis) +
                                           " must be 0 and 1, in either order");
  if (s.x.shape.rank() < 2 || !(s.y.shape == s.x.shape))
    return bad(errc::invalid_shape,
               "x " + dims(s.x.shape) + " must be of rank 2 or more, y " + dims(s.y.shape) + " its shape");
  if (!(s.sequence_lens.shape == shape{s.x.shape[static_cast<std::size_t>(s.batch_axis)]}))
    return bad(errc::invalid_shape, "sequence_lens " + dims(s.sequence_lens.shape) + " must be [" +
                                        num(s.x.shape[static_cast<std::size_t>(s.batch_axis)]) +
                                        "], one length per batch entry");
  return {};
}

fault problem(const kernels::fixed&) { return {}; }

// The code of an operation's problem: what validate() asks of every launch. Only a refused
// descriptor builds words.
template <class K>
std::error_code check(const K& k) {
  return problem(k).code();
}

// ---- work bounds -----------------------------------------------------------------------

// The work whose count is a product of the caller's dimensions: the multiply-accumulates of a
// cube kernel, the window reads of a pooling. Counted exactly in 64-bit integers with overflow
// checks and bounded by max_work, so that a shape whose count wraps (or runs for centuries) is
// an error at launch, never a wrapped count in the cost model. The shapes are valid already:
// every factor is positive.
struct work {
  const char* unit = nullptr;  // null: no bound applies to this kernel
  std::array<std::pair<const char*, int64_t>, 8> factors{};
  std::size_t count = 0;
  void add(const char* name, int64_t v) noexcept { factors[count++] = {name, v}; }
  [[nodiscard]] bool within() const noexcept {
    std::uint64_t p = 1;
    for (std::size_t i = 0; i < count; ++i)
      if (__builtin_mul_overflow(p, static_cast<std::uint64_t>(factors[i].second), &p) || p > max_work) return false;
    return true;
  }
};

void conv_work(work& w, const shape& x, const shape& wt, const shape& y) {
  w.unit = "multiply-accumulates";
  w.add("N", x[0]);
  w.add("Co", wt[0]);
  w.add("Ho", y[2]);
  w.add("Wo", y[3]);
  w.add("C/groups", wt[1]);
  w.add("kh", wt[2]);
  w.add("kw", wt[3]);
}

work work_of(const kernel_op& op) noexcept {
  work w;
  std::visit(
      [&](const auto& o) {
        using T = std::remove_cvref_t<decltype(o)>;
        if constexpr (std::is_same_v<T, kernels::matmul>) {
          const auto& a = o.a.shape;
          const auto ra = a.rank();
          w.unit = "multiply-accumulates";
          w.add("batch", o.c.shape.rank() == 3 ? o.c.shape[0] : 1);
          w.add("M", o.trans_a ? a[ra - 1] : a[ra - 2]);
          w.add("N", o.c.shape[o.c.shape.rank() - 1]);
          w.add("K", o.trans_a ? a[ra - 2] : a[ra - 1]);
        } else if constexpr (std::is_same_v<T, kernels::integer_matmul>) {
          // Every batch entry of y, M x N outputs of K products each.
          const auto& y = o.y.shape;
          const auto ry = y.rank();
          if (ry < 2 || o.a.shape.rank() < 2) return;
          w.unit = "multiply-accumulates";
          w.add("batch", y.elements() / (y[ry - 2] * y[ry - 1]));
          w.add("M", y[ry - 2]);
          w.add("N", y[ry - 1]);
          w.add("K", o.a.shape[o.a.shape.rank() - 1]);
        } else if constexpr (std::is_same_v<T, kernels::dft>) {
          // Every complex output sums `length` terms.
          if (o.y.shape.rank() < 1) return;
          w.unit = "complex multiply-accumulates";
          w.add("outputs", o.y.shape.elements() / 2);
          w.add("length", o.length);
        } else if constexpr (std::is_same_v<T, kernels::conv2d> || std::is_same_v<T, kernels::integer_conv2d>) {
          if (o.x.shape.rank() != 4 || o.w.shape.rank() != 4 || o.y.shape.rank() != 4) return;
          conv_work(w, o.x.shape, o.w.shape, o.y.shape);
        } else if constexpr (std::is_same_v<T, kernels::conv2d_backward_data>) {
          conv_work(w, o.dx.shape, o.w.shape, o.dy.shape);
        } else if constexpr (std::is_same_v<T, kernels::conv2d_backward_weight>) {
          conv_work(w, o.x.shape, o.dw.shape, o.dy.shape);
        } else if constexpr (std::is_same_v<T, kernels::recurrent>) {
          // Every step's gate products: [batch, input + hidden] x [input + hidden, gates * hidden].
          if (o.x.shape.rank() != 3 || o.r.shape.rank() != 3) return;
          w.unit = "multiply-accumulates";
          w.add("dirs", o.direction == kernels::rnn_direction::bidirectional ? 2 : 1);
          w.add("seq", o.x.shape[o.batch_major ? 1 : 0]);
          w.add("batch", o.x.shape[o.batch_major ? 0 : 1]);
          w.add("gates*hidden", o.r.shape[1]);
          w.add("input+hidden", o.x.shape[2] + o.r.shape[2]);
        } else if constexpr (std::is_same_v<T, kernels::pool2d> || std::is_same_v<T, kernels::pool2d_backward>) {
          if (o.mode == kernels::pool_mode::global_avg) return;  // one read per input element
          const shape& y = [&]() -> const shape& {
            if constexpr (std::is_same_v<T, kernels::pool2d>) return o.y.shape;
            else return o.dy.shape;
          }();
          // A window's reads are its volume (every tap is visited, in the input or not).
          static constexpr const char* out_names[] = {"O1", "O2", "O3"};
          static constexpr const char* window_names[] = {"window[0]", "window[1]", "window[2]"};
          w.unit = "window reads";
          w.add("N", y[0]);
          w.add("C", y[1]);
          for (std::size_t i = 2; i < y.rank(); ++i) w.add(out_names[i - 2], y[i]);
          for (std::size_t i = 2; i < y.rank(); ++i) w.add(window_names[i - 2], o.window[i - 2]);
        }
      },
      op);
  return w;
}

// Gather's indices may be one scalar index, and its y then a scalar when data has rank 1; every
// other operand has rank 1 or more.
bool scalar_allowed(const kernel_op& op, const tensor_desc& t) noexcept {
  if (const auto* g = std::get_if<kernels::gather>(&op)) return &t == &g->indices || &t == &g->y;
  // ScatterND's updates and GatherND's y are one element when an index tuple addresses one.
  if (const auto* s = std::get_if<kernels::scatter_nd>(&op)) return &t == &s->updates;
  if (const auto* g = std::get_if<kernels::gather_nd>(&op)) return &t == &g->y;
  // Det's y is one scalar determinant for a rank-2 x.
  if (const auto* d = std::get_if<kernels::det>(&op)) return &t == &d->y;
  return false;
}

}  // namespace

operand_list operands(const kernel_op& op) noexcept {
  builder b;
  constexpr auto r = access::read;
  constexpr auto w = access::write;
  constexpr auto rw = access::read_write;
  std::visit(
      [&](const auto& o) {
        using T = std::remove_cvref_t<decltype(o)>;
        if constexpr (std::is_same_v<T, kernels::matmul>) {
          b.add(r, o.a, o.b);
          b.add(o.beta != 0.0f ? rw : w, o.c);
          b.add_optional(r, o.bias, o.residual);
        } else if constexpr (std::is_same_v<T, kernels::conv2d>) {
          b.add(r, o.x, o.w);
          b.add(w, o.y);
          b.add_optional(r, o.bias, o.residual);
        } else if constexpr (std::is_same_v<T, kernels::conv2d_backward_data>) {
          b.add(r, o.dy, o.w);
          b.add_optional(r, o.relu_y);
          b.add(w, o.dx);
        } else if constexpr (std::is_same_v<T, kernels::conv2d_backward_weight>) {
          b.add(r, o.x, o.dy);
          b.add(w, o.dw);
        } else if constexpr (std::is_same_v<T, kernels::elementwise>) {
          b.add(r, o.a);
          if (binary(o.fn)) b.add(r, o.b);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::batchnorm>) {
          b.add(r, o.x);
          b.add_optional(r, o.gamma, o.beta);
          if (o.training) b.add_optional(rw, o.running_mean, o.running_var);
          else b.add(r, o.running_mean, o.running_var);
          b.add(w, o.y);
          if (o.training) b.add_optional(w, o.saved_mean, o.saved_invstd);
        } else if constexpr (std::is_same_v<T, kernels::batchnorm_backward>) {
          b.add(r, o.x, o.dy);
          b.add_optional(r, o.gamma);
          b.add(r, o.saved_mean, o.saved_invstd);
          b.add_optional(w, o.dx, o.dgamma, o.dbeta);
        } else if constexpr (std::is_same_v<T, kernels::layernorm>) {
          b.add(r, o.x);
          b.add_optional(r, o.gamma, o.beta);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::pool2d>) {
          b.add(r, o.x);
          b.add(w, o.y);
          b.add_optional(w, o.indices);
        } else if constexpr (std::is_same_v<T, kernels::pool2d_backward>) {
          b.add_optional(r, o.x);  // needed for max: check() reports its absence
          b.add(r, o.dy);
          b.add(w, o.dx);
        } else if constexpr (std::is_same_v<T, kernels::softmax> || std::is_same_v<T, kernels::reduce> ||
                             std::is_same_v<T, kernels::transpose> || std::is_same_v<T, kernels::cast> ||
                             std::is_same_v<T, kernels::slice> || std::is_same_v<T, kernels::pad> ||
                             std::is_same_v<T, kernels::tile> || std::is_same_v<T, kernels::trilu> ||
                             std::is_same_v<T, kernels::resize> || std::is_same_v<T, kernels::cumsum> ||
                             std::is_same_v<T, kernels::det>) {
          b.add(r, o.x);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::nll_loss>) {
          b.add(r, o.x);
          b.add(r, o.target);
          b.add_optional(r, o.weight);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::gather> || std::is_same_v<T, kernels::gather_elements> ||
                             std::is_same_v<T, kernels::gather_nd>) {
          b.add(r, o.data, o.indices);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::grid_sample>) {
          b.add(r, o.x, o.grid);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::scatter_nd> || std::is_same_v<T, kernels::scatter_elements>) {
          b.add(r, o.data, o.indices, o.updates);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::top_k>) {
          b.add(r, o.x);
          b.add(w, o.values, o.indices);
        } else if constexpr (std::is_same_v<T, kernels::compare>) {
          b.add(r, o.a, o.b);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::where>) {
          b.add(r, o.cond, o.x, o.y);
          b.add(w, o.out);
        } else if constexpr (std::is_same_v<T, kernels::logical>) {
          b.add(r, o.a);
          if (o.fn != kernels::logical_fn::not_) b.add(r, o.b);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::float_class>) {
          b.add(r, o.x);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::quantize>) {
          b.add(r, o.x, o.scale);
          b.add_optional(r, o.zero_point);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::integer_matmul>) {
          b.add(r, o.a, o.b);
          b.add_optional(r, o.a_zero_point, o.b_zero_point);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::integer_conv2d>) {
          b.add(r, o.x, o.w);
          b.add_optional(r, o.x_zero_point, o.w_zero_point);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::dft>) {
          b.add(r, o.x);
          b.add_optional(r, o.window);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::roi_align>) {
          b.add(r, o.x, o.rois, o.batch_indices);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::recurrent>) {
          b.add(r, o.x, o.w, o.r);
          b.add_optional(r, o.b, o.sequence_lens);
          b.add_optional(w, o.y);
          // The states are read when they carry the initial ones, written always.
          b.add_optional(o.has(o.initial_h) ? rw : w, o.y_h);
          b.add_optional(o.has(o.initial_c) ? rw : w, o.y_c);
        } else if constexpr (std::is_same_v<T, kernels::reverse_sequence>) {
          b.add(r, o.x, o.sequence_lens);
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::sgd_update>) {
          b.add(rw, o.param);
          b.add(r, o.grad);
          b.add_optional(rw, o.momentum_buffer);
        } else if constexpr (std::is_same_v<T, kernels::fused_elementwise>) {
          // A count past the limit names no operand: check() reports the count itself.
          if (o.inputs <= T::max_inputs)
            for (std::size_t i = 0; i < o.inputs; ++i) b.add(r, o.input(i));
          b.add(w, o.y);
        } else if constexpr (std::is_same_v<T, kernels::lrn>) {
          b.add(r, o.x);
          b.add(w, o.y);
        }
      },
      op);
  return b.list;
}

bool has_data(const kernel_desc& k) noexcept {
  for (const auto& o : operands(k.op))
    if (o.tensor->data != nullptr) return true;
  return false;
}

std::error_code validate(const kernel_desc& k) {
  const operand_list ops = operands(k.op);
  std::size_t with_data = 0;
  for (const auto& o : ops) {
    if (auto ec = check_tensor(*o.tensor, scalar_allowed(k.op, *o.tensor))) return ec;
    if (o.tensor->data != nullptr) ++with_data;
  }
  if (with_data != 0 && with_data != ops.size()) return fail(errc::invalid_argument);
  if (auto ec = std::visit([](const auto& o) { return check(o); }, k.op)) return ec;
  if (!work_of(k.op).within()) return fail(errc::invalid_shape);
  return {};
}

namespace {

// The sentence of the operation's problem: which operand or parameter breaks which rule.
fault problem_of(const kernel_op& op) {
  return std::visit([](const auto& o) { return problem(o); }, op);
}

// Says which tensor (and dimension) made validate() fail: one tensor's own rank or dimension,
// or, when each tensor is fine alone, the shapes and types that do not fit together. Without the
// code's own words: whoever raises the error (a std::system_error) appends those.
std::string describe(const kernel_desc& k, std::error_code ec) {
  std::string op;
  std::visit([&](const auto& o) { op = std::string(kernels::op_name(o)); }, k.op);
  struct named {
    std::string_view name;
    const tensor_desc* t;
  };
  std::vector<named> tensors;
  std::visit(
      [&](const auto& o) {
        using op_t = std::remove_cvref_t<decltype(o)>;
        if constexpr (!std::is_same_v<op_t, kernels::fixed>) {
          std::size_t i = 0;
          boost::pfr::for_each_field(o, [&](const auto& f) {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(f)>, tensor_desc>) {
              tensors.push_back({tensor_name(k.op, i), &f});
              ++i;
            }
          });
        }
      },
      k.op);
  // A scalar gather index without data is no absent operand.
  const auto listed = [&](const tensor_desc& t) { return !absent(t) || scalar_allowed(k.op, t); };
  // An operand the operation reads, left empty: said when the operation has no words of its own
  // for it (elementwise says a binary function's b is missing).
  std::string first_missing;
  const operand_list ops = operands(k.op);
  const auto is_operand = [&](const tensor_desc* t) {
    return std::any_of(ops.begin(), ops.end(), [&](const operand& o) { return o.tensor == t; });
  };
  for (const auto& [name, t] : tensors) {
    // An operand the operation reads, left empty, was checked as a tensor of rank 0.
    const bool missing = absent(*t) && !scalar_allowed(k.op, *t) && is_operand(t);
    if (missing && ec == errc::invalid_shape && first_missing.empty())
      first_missing = op + " tensor '" + std::string(name) + "' is missing (the operation reads it)";
    if (!listed(*t)) continue;
    std::ostringstream which;
    which << op << " tensor '" << name << "' " << dims(t->shape);
    if (ec == errc::invalid_shape) {
      if ((t->shape.rank() == 0 && !scalar_allowed(k.op, *t)) || t->shape.rank() > shape::max_rank) {
        which << ": rank " << t->shape.rank() << " (must be 1.." << shape::max_rank << ")";
        return which.str();
      }
      for (std::size_t d = 0; d < t->shape.rank(); ++d)
        if (t->shape[d] <= 0) {
          which << ": dimension " << d << " is " << t->shape[d] << " (must be positive)";
          return which.str();
        }
      if (t->shape.elements() < 0 || t->shape.elements() > (int64_t{1} << 52)) {
        which << ": more than 2^52 elements";
        return which.str();
      }
    }
    if (ec == errc::invalid_dtype && !known_dtype(t->type)) {
      which << ": dtype " << static_cast<unsigned>(t->type) << " is no npurt::dtype";
      return which.str();
    }
    if (ec == errc::invalid_layout && t->format != layout::nd && t->format != layout::nchw) {
      which << ": layout must be nd or nchw";
      return which.str();
    }
  }
  // Operands with data and operands without: a launch is functional or timing-only as a whole.
  if (ec == errc::invalid_argument) {
    std::string with, without;
    const auto append = [](std::string& list, std::string_view name) {
      list += (list.empty() ? "" : ", ") + std::string(name);
    };
    for (const auto& o : operands(k.op))
      for (const auto& [name, t] : tensors)
        if (t == o.tensor) append(t->data != nullptr ? with : without, name);
    if (!with.empty() && !without.empty())
      return op + ": data pointers on " + with + " but none on " + without +
             " (give every operand device memory, or none for a timing-only launch)";
  }
  // Which operand breaks which rule of the operation. The rules read its operands' dimensions: only once each operand
  // passed as a tensor (elementwise, which says a binary function's b is missing, reads none it lacks).
  bool tensors_ok = true;
  for (const auto& o : ops)
    if (check_tensor(*o.tensor, scalar_allowed(k.op, *o.tensor))) tensors_ok = false;
  if (tensors_ok || std::holds_alternative<kernels::elementwise>(k.op))
    if (const fault f = problem_of(k.op); f.failed() && make_error_code(f.e) == ec && !f.what.empty())
      return op + ": " + f.what;
  if (!first_missing.empty()) return first_missing;
  // Each tensor is fine, and so is their relation: the work is what is too large.
  if (ec == errc::invalid_shape && tensors_ok && !std::visit([](const auto& o) { return check(o); }, k.op)) {
    const work w = work_of(k.op);
    if (w.unit && !w.within()) {
      std::ostringstream out;
      out << op << ": ";
      for (std::size_t i = 0; i < w.count; ++i)
        out << (i ? " x " : "") << w.factors[i].first << ' ' << w.factors[i].second;
      out << " is more than 2^60 " << w.unit << " (the simulator's bound)";
      return out.str();
    }
  }
  std::ostringstream out;
  out << op << " with";
  const char* sep = " ";
  for (const auto& [name, t] : tensors) {
    if (!listed(*t)) continue;
    out << sep << name << ' ' << dims(t->shape) << ' ' << to_string(t->type);
    sep = ", ";
  }
  if (ec == errc::invalid_argument) out << " (a parameter is not valid)";
  return out.str();
}

}  // namespace

std::error_code validate(const kernel_desc& k, std::string* what) {
  const std::error_code ec = validate(k);
  if (ec && what) *what = describe(k, ec);
  return ec;
}

}  // namespace npurt::sim
