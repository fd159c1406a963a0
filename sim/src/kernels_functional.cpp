// Reference implementations of the kernel library: plain loops, one fixed order of summation,
// float accumulation, double for f64 (see reference_kernels.hpp for the numeric contract). They are written to
// be obviously right, not fast; timing-only runs never reach them.
#include <npurt/numeric.hpp>
#include <npurt/sim/reference_kernels.hpp>

#include "pool_windows.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace npurt::sim {
namespace {

using std::int64_t;
using std::size_t;

// The outcome of a kernel whose input data can be wrong: the error, and in words which value
// was wrong, so that the failure a synchronize reports can name it.
struct data_fault {
  std::error_code ec;
  std::string why;
};

// "indices[3] = 7 is outside [-5, 4] (data axis 0 has 5 entries)": an index of `what` at flat
// position i that does not address one of `dim` entries of data's `axis`.
data_fault index_out_of_range(const char* what, size_t i, int64_t v, int64_t dim, size_t axis) {
  return {make_error_code(errc::invalid_argument),
          std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v) + " is outside [" +
              std::to_string(-dim) + ", " + std::to_string(dim - 1) + "] (data axis " + std::to_string(axis) + " has " +
              std::to_string(dim) + " entries)"};
}

// ---- element conversion ----------------------------------------------------------------

template <class T>
T read_raw(const std::byte* p, size_t i) noexcept {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void write_raw(std::byte* p, size_t i, T v) noexcept {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// f16, bf16 and f32 widen to float exactly; an f64 is rounded to float (the float kernels never see
// one: a launch with an f64 operand computes in double, read_real<double>).
float read_float(dtype t, const std::byte* p, size_t i) noexcept {
  switch (t) {
    case dtype::f32: return read_raw<float>(p, i);
    case dtype::f16: return numeric::half_bits_to_float(read_raw<std::uint16_t>(p, i));
    case dtype::bf16: return numeric::bfloat16_bits_to_float(read_raw<std::uint16_t>(p, i));
    case dtype::f64: return static_cast<float>(read_raw<double>(p, i));
    default: return 0.0f;  // integer tensors never reach the float paths (validated)
  }
}

void write_float(dtype t, std::byte* p, size_t i, float v) noexcept {
  switch (t) {
    case dtype::f32: write_raw<float>(p, i, v); break;
    case dtype::f16: write_raw<std::uint16_t>(p, i, numeric::float_to_half_bits(v)); break;
    case dtype::bf16: write_raw<std::uint16_t>(p, i, numeric::float_to_bfloat16_bits(v)); break;
    case dtype::f64: write_raw<double>(p, i, v); break;
    default: break;
  }
}

// A double rounded to float by round-to-odd: rounding that float once more to f16 or bf16 (at
// most 11 significant bits, float has 24) gives the double correctly rounded, so y's dtype sees
// one rounding (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
// algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).
float to_float_odd(double v) noexcept {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);  // toward zero
  auto bits = std::bit_cast<std::uint32_t>(f);
  bits |= 1u;
  return std::bit_cast<float>(bits);
}

// The float kernels compute in R: float, or double when the launch has an f64 operand (NumPy's
// float64 arithmetic; a detour through float would round every intermediate to 24 bits). Reading
// widens exactly; writing rounds once to the dtype (through round-to-odd for f16 and bf16 from
// double).
template <class R>
R read_real(dtype t, const std::byte* p, size_t i) noexcept {
  if (t == dtype::f64) return static_cast<R>(read_raw<double>(p, i));
  return read_float(t, p, i);
}

template <class R>
void write_real(dtype t, std::byte* p, size_t i, R v) noexcept {
  if (t == dtype::f64) write_raw<double>(p, i, v);
  else if constexpr (std::is_same_v<R, double>)
    write_float(t, p, i, t == dtype::f32 ? static_cast<float>(v) : to_float_odd(v));
  else write_float(t, p, i, v);
}

int64_t read_int(dtype t, const std::byte* p, size_t i) noexcept {
  switch (t) {
    case dtype::i8: return read_raw<std::int8_t>(p, i);
    case dtype::i32: return read_raw<std::int32_t>(p, i);
    case dtype::i64: return read_raw<std::int64_t>(p, i);
    case dtype::u8: return read_raw<std::uint8_t>(p, i);
    case dtype::boolean: return read_raw<std::uint8_t>(p, i) != 0;  // any nonzero byte is true
    case dtype::i16: return read_raw<std::int16_t>(p, i);
    case dtype::u16: return read_raw<std::uint16_t>(p, i);
    case dtype::u32: return read_raw<std::uint32_t>(p, i);
    // The bits of a u64 as an int64: wrapping arithmetic is the same; what orders or divides
    // (order_key, apply_int) or converts (cast_element) treats u64 apart.
    case dtype::u64: return static_cast<int64_t>(read_raw<std::uint64_t>(p, i));
    default: return 0;
  }
}

// An int64 whose signed order is the order of t's values: a u64 read by read_int has its top bit
// flipped (values from 2^63 read as negative), every other integer dtype is itself.
int64_t order_key(dtype t, int64_t v) noexcept {
  return t == dtype::u64 ? static_cast<int64_t>(static_cast<std::uint64_t>(v) ^ (std::uint64_t{1} << 63)) : v;
}

struct int_range {
  int64_t lo, hi;
  double lo_d, hi_excl_d;  // exact doubles: lo and hi + 1
};

int_range range_of(dtype t) noexcept {
  switch (t) {
    case dtype::i8: return {-128, 127, -128.0, 128.0};
    case dtype::i32: return {INT32_MIN, INT32_MAX, -2147483648.0, 2147483648.0};
    case dtype::u8: return {0, 255, 0.0, 256.0};
    case dtype::i16: return {INT16_MIN, INT16_MAX, -32768.0, 32768.0};
    case dtype::u16: return {0, UINT16_MAX, 0.0, 65536.0};
    case dtype::u32: return {0, UINT32_MAX, 0.0, 4294967296.0};
    default: return {INT64_MIN, INT64_MAX, -9223372036854775808.0, 9223372036854775808.0};  // u64: see write_u64
  }
}

// v, already in t's range, stored as t (a u64 as v's bits).
void store_int(dtype t, std::byte* p, size_t i, int64_t v) noexcept {
  switch (t) {
    case dtype::u64: write_raw<std::uint64_t>(p, i, static_cast<std::uint64_t>(v)); break;
    case dtype::i8: write_raw<std::int8_t>(p, i, static_cast<std::int8_t>(v)); break;
    case dtype::i32: write_raw<std::int32_t>(p, i, static_cast<std::int32_t>(v)); break;
    case dtype::i64: write_raw<std::int64_t>(p, i, v); break;
    case dtype::u8: write_raw<std::uint8_t>(p, i, static_cast<std::uint8_t>(v)); break;
    case dtype::i16: write_raw<std::int16_t>(p, i, static_cast<std::int16_t>(v)); break;
    case dtype::u16: write_raw<std::uint16_t>(p, i, static_cast<std::uint16_t>(v)); break;
    case dtype::u32: write_raw<std::uint32_t>(p, i, static_cast<std::uint32_t>(v)); break;
    default: break;
  }
}

// v saturated to t's range. A u64 takes v's bits as they are: its values are the int64 bit
// patterns read_int gives and wrap_to keeps (cast_element saturates into u64 itself).
void write_int(dtype t, std::byte* p, size_t i, int64_t v) noexcept {
  if (t != dtype::u64) {
    const int_range r = range_of(t);
    v = std::clamp(v, r.lo, r.hi);
  }
  store_int(t, p, i, v);
}

// Round half to even without depending on the FP environment's rounding mode.
double round_even(double d) noexcept {
  const double t = std::trunc(d);
  const double frac = d - t;  // exact
  const double one = d < 0 ? -1.0 : 1.0;
  if (std::fabs(frac) > 0.5) return t + one;
  if (std::fabs(frac) == 0.5 && std::fmod(t, 2.0) != 0.0) return t + one;
  return t;
}

int64_t double_to_int(double d, dtype t, kernels::round_mode m = kernels::round_mode::rint) noexcept {
  if (std::isnan(d)) return 0;
  const int_range r = range_of(t);
  double x = 0;
  switch (m) {
    case kernels::round_mode::rint: x = round_even(d); break;
    case kernels::round_mode::floor: x = std::floor(d); break;
    case kernels::round_mode::ceil: x = std::ceil(d); break;
    case kernels::round_mode::round: x = std::round(d); break;  // halves away from zero
    case kernels::round_mode::trunc: x = std::trunc(d); break;
  }
  if (x >= r.hi_excl_d) return r.hi;
  if (x < r.lo_d) return r.lo;
  return static_cast<int64_t>(x);
}

// As double_to_int into u64's range [0, 2^64): NaN is 0, the rest saturates.
std::uint64_t double_to_u64(double d, kernels::round_mode m) noexcept {
  // From 2^63 up every double is an integer already: no rounding mode moves it.
  if (d >= 9223372036854775808.0) return d >= 18446744073709551616.0 ? UINT64_MAX : static_cast<std::uint64_t>(d);
  const int64_t x = double_to_int(d, dtype::i64, m);  // NaN is 0
  return x <= 0 ? 0 : static_cast<std::uint64_t>(x);
}

// An integer (sign and magnitude u) to bfloat16 in one rounding: going through float would round
// twice for values above 2^24 and could land on the wrong side of a tie.
std::uint16_t int_to_bfloat16_bits(bool negative, std::uint64_t u) noexcept {
  if (u == 0) return 0;
  const std::uint16_t sign = negative ? 0x8000u : 0u;
  int p = 63 - std::countl_zero(u);  // index of the leading bit
  if (p <= 7)
    return static_cast<std::uint16_t>(sign | numeric::float_to_bfloat16_bits(static_cast<float>(u)));  // exact
  const int shift = p - 7;
  std::uint64_t q = u >> shift;
  const std::uint64_t rem = u & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t halfway = std::uint64_t{1} << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  if (q == 256) {
    q = 128;
    ++p;
  }
  return static_cast<std::uint16_t>(sign | ((p + 127) << 7) | (q & 0x7fu));
}

// An integer to a float dtype, rounded once: f16 through float (every integer below 65520 is exact
// in float; from 65520 up half rounds to infinity), bf16 directly, f32 and f64 as C++ converts
// (correctly rounded).
void int_to_float(dtype to, std::byte* dst, size_t i, bool negative, std::uint64_t u) noexcept {
  switch (to) {
    case dtype::f32: {
      const auto f = static_cast<float>(u);
      write_raw<float>(dst, i, negative ? -f : f);
      break;
    }
    case dtype::f64: {
      const auto d = static_cast<double>(u);
      write_raw<double>(dst, i, negative ? -d : d);
      break;
    }
    case dtype::f16: {
      const float f = u >= 65520 ? std::numeric_limits<float>::infinity() : static_cast<float>(u);
      write_raw<std::uint16_t>(dst, i, numeric::float_to_half_bits(negative ? -f : f));
      break;
    }
    case dtype::bf16: write_raw<std::uint16_t>(dst, i, int_to_bfloat16_bits(negative, u)); break;
    default: break;
  }
}

// One element of a cast between any two dtypes. Floats go through double (every float dtype
// widens to it exactly) and round once into the target; a float to an integer rounds by m, NaN
// becomes 0 and values past the target's range saturate; an integer to a narrower integer
// saturates too (NumPy's astype would wrap; npurt's casts never change a value's sign or move it
// past the nearest representable one).
void cast_element(dtype from, const std::byte* src, dtype to, std::byte* dst, size_t i,
                  kernels::round_mode m = kernels::round_mode::rint) noexcept {
  // To bool is x != 0, as NumPy's astype(bool): NaN is nonzero, so true. From bool, read_int
  // gives 0 or 1, which every path below converts exactly.
  if (to == dtype::boolean) {
    const bool v = is_float(from) ? read_real<double>(from, src, i) != 0.0 : read_int(from, src, i) != 0;
    write_raw<std::uint8_t>(dst, i, v ? 1 : 0);
    return;
  }
  if (is_float(from)) {
    const double f = read_real<double>(from, src, i);
    if (is_float(to)) write_real<double>(to, dst, i, f);  // one rounding
    else if (to == dtype::u64) write_raw<std::uint64_t>(dst, i, double_to_u64(f, m));
    else write_int(to, dst, i, double_to_int(f, to, m));
    return;
  }
  const int64_t v = read_int(from, src, i);
  const bool negative = from != dtype::u64 && v < 0;
  // The magnitude, for the float targets.
  const std::uint64_t u = negative ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  if (is_float(to)) int_to_float(to, dst, i, negative, u);
  else store_int(to, dst, i, kernels::saturate_int(from, v, to));  // in range: no second clamp
}

// ---- whole tensors -----------------------------------------------------------------------

template <class R>
std::vector<R> load(const tensor_desc& t, const std::byte* p) {
  const auto n = static_cast<size_t>(t.shape.elements());
  std::vector<R> v(n);
  if (size_of(t.type) == sizeof(R) && is_float(t.type)) {  // f32 into float, f64 into double
    std::memcpy(v.data(), p, n * sizeof(R));
  } else {
    for (size_t i = 0; i < n; ++i) v[i] = read_real<R>(t.type, p, i);
  }
  return v;
}

template <class R>
void store(const tensor_desc& t, std::byte* p, const std::vector<R>& v) {
  if (size_of(t.type) == sizeof(R) && is_float(t.type)) {
    std::memcpy(p, v.data(), v.size() * sizeof(R));
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) write_real<R>(t.type, p, i, v[i]);
}

std::vector<std::int32_t> load_i32(const tensor_desc& t, const std::byte* p) {
  const auto n = static_cast<size_t>(t.shape.elements());
  std::vector<std::int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(read_int(t.type, p, i));
  return v;
}

void store_i32(std::byte* p, const std::vector<std::int32_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) write_raw<std::int32_t>(p, i, v[i]);
}

// The host pointers of one launch, found by the operand's address in the descriptor.
class host_ptrs {
 public:
  host_ptrs(const operand_list& ops, const std::array<std::byte*, 8>& ptrs) : ops_(ops), ptrs_(ptrs) {}
  [[nodiscard]] std::byte* operator[](const tensor_desc& t) const noexcept {
    for (size_t i = 0; i < ops_.size(); ++i)
      if (ops_.items[i].tensor == &t) return ptrs_[i];
    return nullptr;
  }
  [[nodiscard]] bool present(const tensor_desc& t) const noexcept { return (*this)[t] != nullptr; }

 private:
  const operand_list& ops_;
  const std::array<std::byte*, 8>& ptrs_;
};

// The same, loading and storing float tensors as R, the launch's compute type (see read_real):
// the kernels that compute on floats are templates on it, deduced from h.
template <class R>
class host_tensors : public host_ptrs {
 public:
  using host_ptrs::host_ptrs;
  /// The same pointers, loading and storing as S.
  template <class S>
  explicit host_tensors(const host_tensors<S>& other) : host_ptrs(other) {}
  [[nodiscard]] std::vector<R> load(const tensor_desc& t) const { return sim::load<R>(t, (*this)[t]); }
  void store(const tensor_desc& t, const std::vector<R>& v) const { sim::store<R>(t, (*this)[t], v); }
};

// ---- epilogue of cube kernels -----------------------------------------------------------

template <class R>
void apply_epilogue(const tensor_desc& y, const tensor_desc& bias, const tensor_desc& residual, kernels::activation act,
                    const host_tensors<R>& h, std::vector<R>& v);

// ---- matmul ------------------------------------------------------------------------------

struct gemm_dims {
  int64_t batch, m, n, k;
  bool a_batched, b_batched;
};

gemm_dims dims_of(const kernels::matmul& op) {
  const auto& a = op.a.shape;
  const auto& b = op.b.shape;
  const auto ra = a.rank(), rb = b.rank();
  gemm_dims d{};
  d.a_batched = ra == 3;
  d.b_batched = rb == 3;
  d.batch = op.c.shape.rank() == 3 ? op.c.shape[0] : 1;
  d.m = op.trans_a ? a[ra - 1] : a[ra - 2];
  d.k = op.trans_a ? a[ra - 2] : a[ra - 1];
  d.n = op.trans_b ? b[rb - 2] : b[rb - 1];
  return d;
}

// Acc is the compute type R for float inputs, uint32 (wrapping int32) for INT8. Operands are first packed
// to [M,K] and [K,N]; then each row of C accumulates k in ascending order, one whole row at a
// time (C[i,:] += A[i,k] * B[k,:]). Every element still sees the same ordered sum as the naive
// triple loop, and the inner loop over j vectorises.
template <class In, class Acc, class Finish>
void gemm_loop(const kernels::matmul& op, const std::vector<In>& a, const std::vector<In>& b, Finish&& finish) {
  const gemm_dims d = dims_of(op);
  const int64_t M = d.m, N = d.n, K = d.k;
  std::vector<In> ap(static_cast<size_t>(M * K)), bp(static_cast<size_t>(K * N));
  std::vector<Acc> row(static_cast<size_t>(N));
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    if (bi == 0 || d.a_batched) {
      const In* A = a.data() + (d.a_batched ? bi * M * K : 0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) ap[static_cast<size_t>(i * K + k)] = op.trans_a ? A[k * M + i] : A[i * K + k];
    }
    if (bi == 0 || d.b_batched) {
      const In* B = b.data() + (d.b_batched ? bi * K * N : 0);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) bp[static_cast<size_t>(k * N + j)] = op.trans_b ? B[j * K + k] : B[k * N + j];
    }
    for (int64_t i = 0; i < M; ++i) {
      std::fill(row.begin(), row.end(), Acc{});
      Acc* r = row.data();
      for (int64_t k = 0; k < K; ++k) {
        const In av = ap[static_cast<size_t>(i * K + k)];
        const In* bk = bp.data() + k * N;
        if constexpr (std::is_floating_point_v<Acc>) {
          for (int64_t j = 0; j < N; ++j) r[j] += av * bk[j];
        } else {
          for (int64_t j = 0; j < N; ++j) r[j] += static_cast<Acc>(av * bk[j]);
        }
      }
      for (int64_t j = 0; j < N; ++j) finish(static_cast<size_t>((bi * M + i) * N + j), row[static_cast<size_t>(j)]);
    }
  }
}

template <class R>
void run(const kernels::matmul& op, const host_tensors<R>& h) {
  if (op.a.type == dtype::i8) {
    const auto a = load_i32(op.a, h[op.a]);
    const auto b = load_i32(op.b, h[op.b]);
    auto c = op.beta != R{0.0} ? load_i32(op.c, h[op.c])
                               : std::vector<std::int32_t>(static_cast<size_t>(op.c.shape.elements()));
    const bool plain = op.alpha == R{1.0} && op.beta == R{0.0};
    gemm_loop<std::int32_t, std::uint32_t>(op, a, b, [&](size_t idx, std::uint32_t acc) {
      const auto s = static_cast<std::int32_t>(acc);
      if (plain) {
        c[idx] = s;
      } else {
        const double v = double{op.alpha} * s + (op.beta != R{0.0} ? double{op.beta} * c[idx] : 0.0);
        c[idx] = static_cast<std::int32_t>(double_to_int(v, dtype::i32));
      }
    });
    store_i32(h[op.c], c);
    return;
  }
  const auto a = h.load(op.a);
  const auto b = h.load(op.b);
  auto c = op.beta != R{0.0} ? h.load(op.c) : std::vector<R>(static_cast<size_t>(op.c.shape.elements()));
  gemm_loop<R, R>(op, a, b, [&](size_t idx, R acc) {
    // beta == 0 ignores C entirely (NaN in C does not leak), as BLAS does.
    c[idx] = op.beta != R{0.0} ? op.alpha * acc + op.beta * c[idx] : op.alpha * acc;
  });
  apply_epilogue(op.c, op.bias, op.residual, op.act, h, c);
  h.store(op.c, c);
}

// ---- convolution -------------------------------------------------------------------------

struct conv_geom {
  int64_t n, c, h, w;      // input
  int64_t co, kh, kw;      // weight [co, c/g, kh, kw]
  int64_t ho, wo;          // output
  int64_t g, cg, cog;      // groups, input and output channels per group
  int64_t sh, sw, ph, pw, dh, dw;
};

// Height and width from a pair parameter (window, stride, pad, dilation), or from the last two
// dimensions of an NCHW shape with first = 2.
template <class Pair>
void hw(const Pair& p, int64_t& h, int64_t& w, size_t first = 0) {
  h = p[first];
  w = p[first + 1];
}

template <class Op>
conv_geom geom(const shape& x, const shape& w, const shape& y, const Op& op) {
  conv_geom g{};
  g.n = x[0];
  g.c = x[1];
  hw(x, g.h, g.w, 2);
  g.co = w[0];
  hw(w, g.kh, g.kw, 2);
  hw(y, g.ho, g.wo, 2);
  g.g = op.groups;
  g.cg = g.c / g.g;
  g.cog = g.co / g.g;
  hw(op.stride, g.sh, g.sw);
  hw(op.pad, g.ph, g.pw);
  hw(op.dilation, g.dh, g.dw);
  return g;
}

// Computes a 4-D float output element by element in row-major order, each as f(i0, i1, i2, i3),
// and stores it: the gradient passes gather, one ordered sum per output element.
template <class R, class F>
void fill_4d(const tensor_desc& out, const host_tensors<R>& h, F f) {
  const shape& s = out.shape;
  std::vector<R> v(static_cast<size_t>(s.elements()));
  size_t k = 0;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) v[k++] = f(a, b, c, d);
  h.store(out, v);
}

// The output columns ow in [lo, hi) whose input column ow * s + off lies inside [0, w).
std::pair<int64_t, int64_t> valid_range(int64_t off, int64_t s, int64_t w, int64_t wo) {
  const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const int64_t hi = off > w - 1 ? 0 : std::min(wo, (w - 1 - off) / s + 1);
  return {lo, std::max(lo, hi)};
}

// One output plane at a time, accumulating (ci, ky, kx) in ascending order into every output
// element: the same ordered sum per element as the direct 7-deep loop, without its branches.
template <class In, class Acc>
std::vector<Acc> conv_forward(const conv_geom& g, const std::vector<In>& x, const std::vector<In>& w) {
  std::vector<Acc> y(static_cast<size_t>(g.n * g.co * g.ho * g.wo));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t co = 0; co < g.co; ++co) {
      const int64_t c0 = (co / g.cog) * g.cg;
      Acc* plane = y.data() + (n * g.co + co) * g.ho * g.wo;
      for (int64_t ci = 0; ci < g.cg; ++ci) {
        const In* xp = x.data() + ((n * g.c + c0 + ci) * g.h) * g.w;
        const In* wp = w.data() + ((co * g.cg + ci) * g.kh) * g.kw;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const auto [oh0, oh1] = valid_range(ky * g.dh - g.ph, g.sh, g.h, g.ho);
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const In wv = wp[ky * g.kw + kx];
            const int64_t offw = kx * g.dw - g.pw;
            const auto [ow0, ow1] = valid_range(offw, g.sw, g.w, g.wo);
            for (int64_t oh = oh0; oh < oh1; ++oh) {
              const int64_t base = (oh * g.sh - g.ph + ky * g.dh) * g.w + offw;  // may be < 0 before ow0
              Acc* yr = plane + oh * g.wo;
              if constexpr (std::is_floating_point_v<Acc>) {
                for (int64_t ow = ow0; ow < ow1; ++ow) yr[ow] += xp[base + ow * g.sw] * wv;
              } else {
                for (int64_t ow = ow0; ow < ow1; ++ow) yr[ow] += static_cast<Acc>(xp[base + ow * g.sw] * wv);
              }
            }
          }
        }
      }
    }
  }
  return y;
}

template <class R>
void run(const kernels::conv2d& op, const host_tensors<R>& h) {
  const conv_geom g = geom(op.x.shape, op.w.shape, op.y.shape, op);
  if (op.x.type == dtype::i8) {
    const auto y = conv_forward<std::int32_t, std::uint32_t>(g, load_i32(op.x, h[op.x]), load_i32(op.w, h[op.w]));
    std::byte* p = h[op.y];
    for (size_t i = 0; i < y.size(); ++i) write_raw<std::int32_t>(p, i, static_cast<std::int32_t>(y[i]));
    return;
  }
  auto y = conv_forward<R, R>(g, h.load(op.x), h.load(op.w));
  apply_epilogue(op.y, op.bias, op.residual, op.act, h, y);
  h.store(op.y, y);
}

// dx[n,c,ih,iw] = sum over the outputs that read it: gathered, so every dx element is one
// ordered float sum (co, ky, kx ascending).
template <class R>
void run(const kernels::conv2d_backward_data& op, const host_tensors<R>& h) {
  const conv_geom g = geom(op.dx.shape, op.w.shape, op.dy.shape, op);
  const auto dy = h.load(op.dy);
  const auto w = h.load(op.w);
  const bool masked = h.present(op.relu_y);
  const auto relu_y = masked ? h.load(op.relu_y) : std::vector<R>{};
  fill_4d(op.dx, h, [&](int64_t n, int64_t c, int64_t ih, int64_t iw) {
    const int64_t grp = c / g.cg, ci = c % g.cg;
    // relu_backward's select: a masked element is the 0 it would store.
    if (masked && !(relu_y[static_cast<size_t>(((n * g.c + c) * g.h + ih) * g.w + iw)] > R(0.0))) return R(0.0);
    R acc = R{0.0};
    for (int64_t co = grp * g.cog; co < (grp + 1) * g.cog; ++co) {
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t th = ih + g.ph - ky * g.dh;
        if (th < 0 || th % g.sh != 0 || th / g.sh >= g.ho) continue;
        const int64_t oh = th / g.sh;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t tw = iw + g.pw - kx * g.dw;
          if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.wo) continue;
          const int64_t ow = tw / g.sw;
          acc += dy[static_cast<size_t>(((n * g.co + co) * g.ho + oh) * g.wo + ow)] *
                 w[static_cast<size_t>(((co * g.cg + ci) * g.kh + ky) * g.kw + kx)];
        }
      }
    }
    return acc;
  });
}

// dw[co,ci,ky,kx] = sum over n, oh, ow (ascending) of x * dy.
template <class R>
void run(const kernels::conv2d_backward_weight& op, const host_tensors<R>& h) {
  const conv_geom g = geom(op.x.shape, op.dw.shape, op.dy.shape, op);
  const auto x = h.load(op.x);
  const auto dy = h.load(op.dy);
  fill_4d(op.dw, h, [&](int64_t co, int64_t ci, int64_t ky, int64_t kx) {
    const int64_t c0 = (co / g.cog) * g.cg;
    R acc = R{0.0};
    // Only the outputs whose input tap lies inside x contribute (padding reads zeros).
    const auto [oh0, oh1] = valid_range(ky * g.dh - g.ph, g.sh, g.h, g.ho);
    const auto [ow0, ow1] = valid_range(kx * g.dw - g.pw, g.sw, g.w, g.wo);
    for (int64_t n = 0; n < g.n; ++n) {
      const R* xp = x.data() + ((n * g.c + c0 + ci) * g.h) * g.w;
      const R* dyp = dy.data() + ((n * g.co + co) * g.ho) * g.wo;
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        const int64_t base = (oh * g.sh - g.ph + ky * g.dh) * g.w + kx * g.dw - g.pw;
        for (int64_t ow = ow0; ow < ow1; ++ow) acc += xp[base + ow * g.sw] * dyp[oh * g.wo + ow];
      }
    }
    return acc;
  });
}

// ---- elementwise -------------------------------------------------------------------------

template <class R>
R apply_unary(kernels::eltwise_fn f, R x) noexcept {
  using enum kernels::eltwise_fn;
  switch (f) {
    case relu: return x > R(0.0) ? x : (std::isnan(x) ? x : R(0.0));
    case gelu: {
      // sqrt(2/pi) and the tanh approximation's 0.044715 in R (in float these equal the literals
      // 0.7978845608028654f and 0.044715f the float kernel has always used).
      constexpr R k = R(0.7978845608028654);
      constexpr R c = R(0.044715);
      return R(0.5) * x * (R(1) + std::tanh(k * (x + c * x * x * x)));
    }
    case sigmoid: return R(1.0) / (R(1.0) + std::exp(-x));
    case tanh: return std::tanh(x);
    default: return x;
  }
}

// The parametric and transcendental unary functions, with ONNX's definitions.
template <class R>
R apply_unary(const kernels::elementwise& op, R x) noexcept {
  using enum kernels::eltwise_fn;
  const R a = op.alpha, b = op.beta;
  switch (op.fn) {
    case exp: return std::exp(x);
    case log: return std::log(x);
    case sqrt: return std::sqrt(x);
    case abs: return std::fabs(x);
    case neg: return -x;
    case reciprocal: return R(1.0) / x;
    case floor: return std::floor(x);
    case ceil: return std::ceil(x);
    case round: return static_cast<R>(round_even(static_cast<double>(x)));
    case erf: return std::erf(x);
    case sin: return std::sin(x);
    case cos: return std::cos(x);
    // std::asin and std::acos return NaN outside [-1, 1] (a domain error), as numpy's do.
    case asin: return std::asin(x);
    case acos: return std::acos(x);
    case atan: return std::atan(x);
    case softplus: {
      // e^x overflows a float from about 88.7 (a double from about 709.8), where log(1 + e^x) is
      // still x to R's precision.
      const R e = std::exp(x);
      return std::isinf(e) ? x : std::log1p(e);
    }
    case softsign: return x / (R(1.0) + std::fabs(x));
    case sign: return x > R(0.0) ? R(1.0) : x < R(0.0) ? -R(1.0) : x;  // keeps 0, -0 and NaN
    case leaky_relu: return x < R(0.0) ? a * x : x;
    case elu: return x < R(0.0) ? a * (std::exp(x) - R(1.0)) : x;
    case selu: return x <= R(0.0) ? b * (a * std::exp(x) - a) : b * x;
    // std::max and std::min return their first argument when the other is NaN: NaN would
    // become a number where ONNX's NumPy definitions keep it.
    case hard_sigmoid: return std::isnan(x) ? x : std::max(R(0.0), std::min(R(1.0), a * x + b));
    case thresholded_relu: return x > a ? x : R(0.0);
    case celu: return std::isnan(x) ? x : std::max(R(0.0), x) + std::min(R(0.0), a * (std::exp(x / a) - R(1.0)));
    case hard_swish: return x * std::max(R(0.0), std::min(R(1.0), x / R(6.0) + R(0.5)));
    case clip: return std::isnan(x) ? x : std::min(b, std::max(a, x));
    default: return apply_unary(op.fn, x);
  }
}

template <class R>
R apply_binary(kernels::eltwise_fn f, R a, R b) noexcept {
  using enum kernels::eltwise_fn;
  switch (f) {
    case add: return a + b;
    case sub: return a - b;
    case mul: return a * b;
    case div: return a / b;
    case relu_backward: return b > R(0.0) ? a : R(0.0);
    case pow: return std::pow(a, b);
    case max: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<R>::quiet_NaN() : std::max(a, b);
    case min: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<R>::quiet_NaN() : std::min(a, b);
    case fmod: return std::fmod(a, b);  // numpy.fmod: NaN for a zero divisor
    default: return a;
  }
}

using index_array = std::array<int64_t, shape::max_rank>;

// Steps the row-major index `idx` over `s` by one element, keeping `off`, an offset that moves by
// step[d] along dimension d, in step with it (back to the start of a dimension that wraps).
void advance(index_array& idx, const shape& s, const index_array& step, int64_t& off) noexcept {
  for (size_t d = s.rank(); d-- > 0;) {
    ++idx[d];
    off += step[d];
    if (idx[d] < s[d]) break;
    off -= step[d] * idx[d];
    idx[d] = 0;
  }
}

// Row-major strides of `s`: how far one step along each dimension moves in its storage.
index_array row_major_strides(const shape& s) noexcept {
  index_array st{};
  int64_t stride = 1;
  for (size_t d = s.rank(); d-- > 0;) {
    st[d] = stride;
    stride *= s[d];
  }
  return st;
}

// Row-major strides of `s` aligned to an output of rank `r`, 0 where s broadcasts.
index_array broadcast_strides(const shape& s, size_t r) {
  index_array st{};
  int64_t stride = 1;
  for (size_t i = s.rank(); i-- > 0;) {
    const size_t o = i + (r - s.rank());
    st[o] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

// ---- integer elementwise -------------------------------------------------------------------

// An integer of dtype t from the low bits of u: two's complement wrap-around into the dtype's
// width (C++20 defines the narrowing conversion as modular).
int64_t wrap_to(dtype t, std::uint64_t u) noexcept {
  switch (t) {
    case dtype::i8: return static_cast<std::int8_t>(u);
    case dtype::i32: return static_cast<std::int32_t>(u);
    case dtype::u8: return static_cast<std::uint8_t>(u);
    case dtype::i16: return static_cast<std::int16_t>(u);
    case dtype::u16: return static_cast<std::uint16_t>(u);
    case dtype::u32: return static_cast<std::uint32_t>(u);
    default: return static_cast<int64_t>(u);  // i64, and u64's bits
  }
}

// The integer functions on u64 values where their bits as int64 would mislead (order, sign,
// quotients): NumPy's uint64 arithmetic. Returns false for a zero divisor.
bool apply_u64(kernels::eltwise_fn f, std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  using enum kernels::eltwise_fn;
  switch (f) {
    case abs: out = a; return true;
    case sign: out = a != 0 ? 1 : 0; return true;
    case max: out = std::max(a, b); return true;
    case min: out = std::min(a, b); return true;
    case div:
    case fmod:
    case mod:
      if (b == 0) return false;
      out = f == div ? a / b : a % b;
      return true;
    default: return false;
  }
}

// The integer functions on values of dtype t (read into int64_t, so every value of the narrower
// dtypes is exact there and only i64 and u64 can overflow), wrapped back into t. add, sub, mul and
// neg go through unsigned arithmetic: its wrap-around is defined, and the low n bits of the result
// are the two's complement result in an n-bit type (for u64 the result itself). Returns false for
// a zero divisor or a negative exponent, which the caller turns into the kernel's failure.
bool apply_int(kernels::eltwise_fn f, dtype t, int64_t a, int64_t b, int64_t& out) noexcept {
  using enum kernels::eltwise_fn;
  const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
  if (t == dtype::u64) {
    switch (f) {
      case abs:
      case sign:
      case max:
      case min:
      case div:
      case fmod:
      case mod: {
        std::uint64_t u = 0;
        if (!apply_u64(f, ua, ub, u)) return false;
        out = static_cast<int64_t>(u);
        return true;
      }
      default: break;
    }
  }
  switch (f) {
    case add: out = wrap_to(t, ua + ub); return true;
    case sub: out = wrap_to(t, ua - ub); return true;
    case mul: out = wrap_to(t, ua * ub); return true;
    case neg: out = wrap_to(t, std::uint64_t{0} - ua); return true;
    case abs: out = wrap_to(t, a < 0 ? std::uint64_t{0} - ua : ua); return true;
    case sign: out = a > 0 ? 1 : a < 0 ? -1 : 0; return true;
    case max: out = std::max(a, b); return true;
    case min: out = std::min(a, b); return true;
    case relu: out = std::max<int64_t>(a, 0); return true;
    case div:
      if (b == 0) return false;
      // Truncating toward zero as C does; -1 negates through unsigned arithmetic, so that
      // INT64_MIN / -1 wraps to INT64_MIN (the narrower dtypes wrap when narrowed).
      out = wrap_to(t, b == -1 ? std::uint64_t{0} - ua : static_cast<std::uint64_t>(a / b));
      return true;
    case fmod:
    case mod: {
      if (b == 0) return false;
      int64_t r = b == -1 ? 0 : a % b;  // INT64_MIN % -1 would trap; every x % -1 is 0
      // Python's %: a remainder of the dividend's sign moves to the divisor's by adding it once.
      if (f == mod && r != 0 && ((r < 0) != (b < 0))) r += b;
      out = r;
      return true;
    }
    case shift_left:
    case shift_right: {
      // Unsigned dtypes only (validated): a shift by the width or more empties the value, as
      // numpy's does (C++ leaves it undefined).
      if (ub >= 8 * size_of(t)) {
        out = 0;
        return true;
      }
      out = wrap_to(t, f == shift_left ? ua << ub : ua >> ub);
      return true;
    }
    case pow: {
      if (b < 0 && t != dtype::u64) return false;
      // Square-and-multiply in unsigned arithmetic: each product's low bits are the wrapped one.
      std::uint64_t result = 1, base = ua;
      for (auto e = static_cast<std::uint64_t>(b); e != 0; e >>= 1) {
        if (e & 1u) result *= base;
        base *= base;
      }
      out = wrap_to(t, result);
      return true;
    }
    default: out = a; return true;
  }
}

// The elementwise kernel on integer tensors: every result is computed before y is written, so a
// zero divisor fails the kernel and leaves y as it was. An integer has no value for x / 0 (C
// leaves it undefined, numpy returns 0 with a warning): failing is the one answer that is not a
// silent wrong one.
data_fault run_int(const kernels::elementwise& op, const host_ptrs& h) {
  const dtype t = op.y.type;
  const auto n = static_cast<size_t>(op.y.shape.elements());
  std::vector<int64_t> y(n);
  const std::byte* pa = h[op.a];
  if (!kernels::is_binary(op.fn)) {
    for (size_t i = 0; i < n; ++i) apply_int(op.fn, t, read_int(t, pa, i), 0, y[i]);
  } else {
    const std::byte* pb = h[op.b];
    const shape& ys = op.y.shape;
    const auto sa = broadcast_strides(op.a.shape, ys.rank());
    const auto sb = broadcast_strides(op.b.shape, ys.rank());
    index_array ia_idx{}, ib_idx{};  // one odometer per operand: advance() steps its own index
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = read_int(t, pa, static_cast<size_t>(ia)), b = read_int(t, pb, static_cast<size_t>(ib));
      if (!apply_int(op.fn, t, a, b, y[i]))
        return {make_error_code(errc::invalid_argument),
                op.fn == kernels::eltwise_fn::pow
                    ? "exponent b[" + std::to_string(ib) + "] = " + std::to_string(b) +
                          " is negative (an integer has no negative power)"
                    : "divisor b[" + std::to_string(ib) + "] is 0 (an integer has no quotient or remainder by 0)"};
      advance(ia_idx, ys, sa, ia);
      advance(ib_idx, ys, sb, ib);
    }
  }
  std::byte* py = h[op.y];
  for (size_t i = 0; i < n; ++i) write_int(t, py, i, y[i]);
  return {};
}

template <class R>
data_fault run(const kernels::elementwise& op, const host_tensors<R>& h) {
  using enum kernels::eltwise_fn;
  if (!is_float(op.y.type)) return run_int(op, h);
  const auto a = h.load(op.a);
  const bool bin = kernels::is_binary(op.fn);
  std::vector<R> y(static_cast<size_t>(op.y.shape.elements()));
  if (!bin) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = apply_unary(op, a[i]);
    h.store(op.y, y);
    return {};
  }
  const auto b = h.load(op.b);
  const shape& ys = op.y.shape;
  const size_t r = ys.rank();
  const auto sa = broadcast_strides(op.a.shape, r);
  const auto sb = broadcast_strides(op.b.shape, r);
  index_array idx{};
  int64_t ia = 0, ib = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = apply_binary(op.fn, a[static_cast<size_t>(ia)], b[static_cast<size_t>(ib)]);
    // Odometer increment of the output index, keeping both input offsets in step.
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      ia += sa[d];
      ib += sb[d];
      if (idx[d] < ys[d]) break;
      ia -= sa[d] * idx[d];
      ib -= sb[d] * idx[d];
      idx[d] = 0;
    }
  }
  h.store(op.y, y);
  return {};
}

template <class R>
R round_to(dtype t, R v) noexcept {
  std::array<std::byte, 8> b{};
  write_real<R>(t, b.data(), 0, v);
  return read_real<R>(t, b.data(), 0);
}

// v = v (op) x with x broadcast to y's shape, each result rounded to y's dtype: exactly what
// the elementwise kernel computes when v was stored and read back.
template <class R>
void add_broadcast(const tensor_desc& y, const tensor_desc& x, const host_tensors<R>& h, std::vector<R>& v) {
  const auto b = h.load(x);
  const shape& ys = y.shape;
  const size_t r = ys.rank();
  const auto sb = broadcast_strides(x.shape, r);
  index_array idx{};
  int64_t ib = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = round_to(y.type, apply_binary(kernels::eltwise_fn::add, v[i], b[static_cast<size_t>(ib)]));
    advance(idx, ys, sb, ib);
  }
}

// The stages in the order of the unfused graph (result, + bias, + residual, activation), each
// rounded to y's dtype as a separate kernel's store would round it.
template <class R>
void apply_epilogue(const tensor_desc& y, const tensor_desc& bias, const tensor_desc& residual, kernels::activation act,
                    const host_tensors<R>& h, std::vector<R>& v) {
  const bool any_input = h.present(bias) || h.present(residual);
  if (act == kernels::activation::none && !any_input) return;
  for (auto& e : v) e = round_to(y.type, e);
  if (h.present(bias)) add_broadcast(y, bias, h, v);
  if (h.present(residual)) add_broadcast(y, residual, h, v);
  using A = kernels::activation;
  using F = kernels::eltwise_fn;
  if (act == A::none) return;
  const F f = act == A::relu ? F::relu : act == A::gelu ? F::gelu : act == A::sigmoid ? F::sigmoid : F::tanh;
  for (auto& e : v) e = apply_unary(f, e);
}

// The chain element by element: each stage's result is rounded to y's dtype, as the store of
// the separate kernel it replaces would round it.
template <class R>
void run(const kernels::fused_elementwise& op, const host_tensors<R>& h) {
  using F = kernels::fused_elementwise;
  const shape& ys = op.y.shape;
  const size_t r = ys.rank();
  std::array<std::vector<R>, F::max_inputs> in;
  std::array<index_array, F::max_inputs> st{};
  std::array<int64_t, F::max_inputs> at{};
  for (size_t i = 0; i < op.inputs; ++i) {
    in[i] = h.load(op.input(i));
    st[i] = broadcast_strides(op.input(i).shape, r);
  }
  std::vector<R> y(static_cast<size_t>(ys.elements()));
  index_array idx{};
  for (size_t i = 0; i < y.size(); ++i) {
    R v = R{0.0};
    auto operand = [&](std::uint8_t o) { return o == F::chain ? v : in[o][static_cast<size_t>(at[o])]; };
    for (size_t k = 0; k < op.count; ++k) {
      const kernels::eltwise_stage& s = op.stages[k];
      const R a = operand(s.a);
      if (kernels::is_binary(s.fn)) {
        v = apply_binary(s.fn, a, operand(s.b));
      } else {
        kernels::elementwise e{};
        e.fn = s.fn;
        e.alpha = s.alpha;
        e.beta = s.beta;
        v = apply_unary(e, a);
      }
      v = round_to(op.y.type, v);
    }
    y[i] = v;
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < op.inputs; ++k) at[k] += st[k][d];
      if (idx[d] < ys[d]) break;
      for (size_t k = 0; k < op.inputs; ++k) at[k] -= st[k][d] * idx[d];
      idx[d] = 0;
    }
  }
  h.store(op.y, y);
}

// ---- normalisation -----------------------------------------------------------------------

// x viewed as [outer = N, C, inner = H*W*...]: channel axis 1.
struct nc_view {
  int64_t n, c, inner;
  explicit nc_view(const shape& s) : n(s[0]), c(s[1]), inner(s.elements() / (s[0] * s[1])) {}
  [[nodiscard]] size_t at(int64_t ni, int64_t ci, int64_t i) const noexcept {
    return static_cast<size_t>((ni * c + ci) * inner + i);
  }
};

template <class R>
std::vector<R> load_or(const host_tensors<R>& h, const tensor_desc& t, int64_t n, R fill) {
  if (h.present(t)) return h.load(t);
  return std::vector<R>(static_cast<size_t>(n), fill);
}

template <class R>
void run(const kernels::batchnorm& op, const host_tensors<R>& h) {
  const nc_view v(op.x.shape);
  const auto x = h.load(op.x);
  const auto gamma = load_or(h, op.gamma, v.c, R{1.0});
  const auto beta = load_or(h, op.beta, v.c, R{0.0});
  std::vector<R> y(x.size());
  if (!op.training) {
    const auto rm = h.load(op.running_mean);
    const auto rv = h.load(op.running_var);
    for (int64_t c = 0; c < v.c; ++c) {
      const R invstd = R{1.0} / std::sqrt(rv[c] + op.eps);
      for (int64_t n = 0; n < v.n; ++n)
        for (int64_t i = 0; i < v.inner; ++i) {
          const size_t k = v.at(n, c, i);
          y[k] = (x[k] - rm[c]) * invstd * gamma[c] + beta[c];
        }
    }
    h.store(op.y, y);
    return;
  }
  const R count = static_cast<R>(v.n * v.inner);
  std::vector<R> mean(static_cast<size_t>(v.c)), invstd(static_cast<size_t>(v.c)),
      var_unbiased(static_cast<size_t>(v.c));
  for (int64_t c = 0; c < v.c; ++c) {
    // Two passes (mean, then squared deviations): no cancellation of E[x^2] - E[x]^2.
    R sum = R{0.0};
    for (int64_t n = 0; n < v.n; ++n)
      for (int64_t i = 0; i < v.inner; ++i) sum += x[v.at(n, c, i)];
    const R m = sum / count;
    R sq = R{0.0};
    for (int64_t n = 0; n < v.n; ++n)
      for (int64_t i = 0; i < v.inner; ++i) {
        const R d = x[v.at(n, c, i)] - m;
        sq += d * d;
      }
    const R var = sq / count;
    mean[c] = m;
    invstd[c] = R{1.0} / std::sqrt(var + op.eps);
    var_unbiased[c] = sq / (count - R{1.0});
    for (int64_t n = 0; n < v.n; ++n)
      for (int64_t i = 0; i < v.inner; ++i) {
        const size_t k = v.at(n, c, i);
        y[k] = (x[k] - m) * invstd[c] * gamma[c] + beta[c];
      }
  }
  // Every input (the running statistics too) is read before the first output is written.
  const R mom = op.momentum;
  std::vector<R> rm = load_or(h, op.running_mean, v.c, R{0.0});
  std::vector<R> rv = load_or(h, op.running_var, v.c, R{0.0});
  for (int64_t c = 0; c < v.c; ++c) {
    rm[c] = (R{1.0} - mom) * rm[c] + mom * mean[c];
    rv[c] = (R{1.0} - mom) * rv[c] + mom * var_unbiased[c];
  }
  h.store(op.y, y);
  if (h.present(op.saved_mean)) h.store(op.saved_mean, mean);
  if (h.present(op.saved_invstd)) h.store(op.saved_invstd, invstd);
  if (h.present(op.running_mean)) h.store(op.running_mean, rm);
  if (h.present(op.running_var)) h.store(op.running_var, rv);
}

// With xhat = (x - mean) * invstd and m values per channel:
// dbeta = sum dy, dgamma = sum dy*xhat, dx = gamma*invstd/m * (m*dy - dbeta - xhat*dgamma).
template <class R>
void run(const kernels::batchnorm_backward& op, const host_tensors<R>& h) {
  const nc_view v(op.x.shape);
  const auto x = h.load(op.x);
  const auto dy = h.load(op.dy);
  const auto gamma = load_or(h, op.gamma, v.c, R{1.0});
  const auto mean = h.load(op.saved_mean);
  const auto invstd = h.load(op.saved_invstd);
  const R m = static_cast<R>(v.n * v.inner);
  std::vector<R> dx(h.present(op.dx) ? x.size() : 0), dgamma(static_cast<size_t>(v.c)), dbeta(static_cast<size_t>(v.c));
  for (int64_t c = 0; c < v.c; ++c) {
    R sdy = R{0.0}, sdyx = R{0.0};
    for (int64_t n = 0; n < v.n; ++n)
      for (int64_t i = 0; i < v.inner; ++i) {
        const size_t k = v.at(n, c, i);
        sdy += dy[k];
        sdyx += dy[k] * ((x[k] - mean[c]) * invstd[c]);
      }
    dbeta[c] = sdy;
    dgamma[c] = sdyx;
    if (!h.present(op.dx)) continue;
    const R scale = gamma[c] * invstd[c] / m;
    for (int64_t n = 0; n < v.n; ++n)
      for (int64_t i = 0; i < v.inner; ++i) {
        const size_t k = v.at(n, c, i);
        const R xhat = (x[k] - mean[c]) * invstd[c];
        dx[k] = scale * (m * dy[k] - sdy - xhat * sdyx);
      }
  }
  if (h.present(op.dx)) h.store(op.dx, dx);
  if (h.present(op.dgamma)) h.store(op.dgamma, dgamma);
  if (h.present(op.dbeta)) h.store(op.dbeta, dbeta);
}

template <class R>
void run(const kernels::layernorm& op, const host_tensors<R>& h) {
  const shape& s = op.x.shape;
  const size_t ax =
      op.axis < 0 ? static_cast<size_t>(op.axis + static_cast<std::int32_t>(s.rank())) : static_cast<size_t>(op.axis);
  int64_t d = 1;
  for (size_t i = ax; i < s.rank(); ++i) d *= s[i];
  const int64_t outer = s.elements() / d;
  const auto x = h.load(op.x);
  const auto gamma = load_or(h, op.gamma, d, R{1.0});
  const auto beta = load_or(h, op.beta, d, R{0.0});
  std::vector<R> y(x.size());
  const R count = static_cast<R>(d);
  for (int64_t o = 0; o < outer; ++o) {
    const R* xp = x.data() + o * d;
    R sum = R{0.0};
    for (int64_t i = 0; i < d; ++i) sum += xp[i];
    const R mean = sum / count;
    R sq = R{0.0};
    for (int64_t i = 0; i < d; ++i) sq += (xp[i] - mean) * (xp[i] - mean);
    const R invstd = R{1.0} / std::sqrt(sq / count + op.eps);
    for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(o * d + i)] = (xp[i] - mean) * invstd * gamma[i] + beta[i];
  }
  h.store(op.y, y);
}

// ---- pooling -----------------------------------------------------------------------------

// A pooling's geometry in three spatial dimensions: one of fewer is padded in front with
// dimensions of extent 1 (window 1, stride 1, no pad), which changes no window and no flat
// offset, row-major or column-major.
struct pool_geom {
  int64_t planes = 1;  // N * C
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, pb{}, pe{}, d{1, 1, 1};
  [[nodiscard]] int64_t in_volume() const noexcept { return in[0] * in[1] * in[2]; }
  [[nodiscard]] int64_t out_volume() const noexcept { return out[0] * out[1] * out[2]; }
};

// x's and y's spatial extents and the windows, aligned to the last dimensions.
template <class Op>
pool_geom pgeom(const Op& op, const shape& x, const shape& y) {
  pool_windows w;
  if constexpr (std::is_same_v<Op, kernels::pool2d>) w = windows_of(op, x.rank() - 2);
  else w = windows_of(op);
  const size_t lead = 3 - w.rank;
  pool_geom g;
  g.planes = x[0] * x[1];
  for (size_t i = 0; i < w.rank; ++i) {
    const size_t a = lead + i;
    g.in[a] = x[i + 2];
    g.out[a] = y[i + 2];
    if (op.mode == kernels::pool_mode::global_avg) {
      g.k[a] = g.in[a];  // one window over the whole plane
      continue;
    }
    g.k[a] = w.k[i];
    g.s[a] = w.s[i];
    g.pb[a] = w.pb[i];
    g.pe[a] = w.pe[i];
    g.d[a] = w.d[i];
  }
  return g;
}

// The taps of one window along one dimension that fall inside the input: positions first,
// first + step, ... (count of them), and how many of all its taps fall inside the padded input
// (count_include_pad's divisor; a ceil_mode window may reach past the end pad).
struct pool_taps {
  int64_t first = 0, count = 0, step = 1, padded = 0;
};

pool_taps taps_of(const pool_geom& g, size_t a, int64_t o) {
  const int64_t st = o * g.s[a] - g.pb[a], d = g.d[a], k = g.k[a], in = g.in[a];
  const int64_t lo = st >= 0 ? 0 : (-st + d - 1) / d;  // the first tap at or past 0
  const int64_t hi = st >= in ? -1 : std::min(k - 1, (in - 1 - st) / d);
  // A window starts inside the input or its leading pad (validated): in + pe - 1 - st >= 0.
  const int64_t padded = std::min(k - 1, (in + g.pe[a] - 1 - st) / d) + 1;
  return {st + lo * d, std::max<int64_t>(0, hi - lo + 1), d, padded};
}

// Calls f(offset) for each input element of output o's window (offsets within a plane), in
// row-major order over the window.
template <class F>
void each_tap(const pool_geom& g, const std::array<int64_t, 3>& o, F&& f) {
  const pool_taps t0 = taps_of(g, 0, o[0]), t1 = taps_of(g, 1, o[1]), t2 = taps_of(g, 2, o[2]);
  for (int64_t i = 0; i < t0.count; ++i)
    for (int64_t j = 0; j < t1.count; ++j) {
      const int64_t row = ((t0.first + i * t0.step) * g.in[1] + t1.first + j * t1.step) * g.in[2];
      for (int64_t l = 0; l < t2.count; ++l) f(row + t2.first + l * t2.step);
    }
}

// Calls f(o, out_index) for every output position of one plane, in row-major order.
template <class F>
void each_output(const pool_geom& g, F&& f) {
  std::array<int64_t, 3> o{};
  int64_t n = 0;
  for (o[0] = 0; o[0] < g.out[0]; ++o[0])
    for (o[1] = 0; o[1] < g.out[1]; ++o[1])
      for (o[2] = 0; o[2] < g.out[2]; ++o[2]) f(o, n++);
}

// A plane offset (row-major) as storage_order = 1 numbers it: the spatial dimensions in
// column-major order, the first one fastest.
int64_t column_major_offset(const pool_geom& g, int64_t off) {
  const int64_t i2 = off % g.in[2], i1 = off / g.in[2] % g.in[1], i0 = off / (g.in[2] * g.in[1]);
  return i0 + g.in[0] * (i1 + g.in[1] * i2);
}

// MaxPool's Indices: the flat index into x of each maximum (-1 for a window with no input).
void store_indices(const kernels::pool2d& op, const pool_geom& g, const host_ptrs& h, const std::vector<int64_t>& at) {
  if (!h.present(op.indices)) return;
  std::byte* p = h[op.indices];
  const int64_t ov = g.out_volume(), iv = g.in_volume();
  for (size_t i = 0; i < at.size(); ++i) {
    const int64_t off = at[i];
    const int64_t plane = static_cast<int64_t>(i) / ov;
    write_raw<int64_t>(p, i, off < 0 ? -1 : plane * iv + (op.column_major ? column_major_offset(g, off) : off));
  }
}

// Max on an integer dtype, exact: compared by order_key, the first maximum kept.
void run_int(const kernels::pool2d& op, const host_ptrs& h) {
  const pool_geom g = pgeom(op, op.x.shape, op.y.shape);
  const dtype t = op.x.type;
  const int64_t lowest = t == dtype::u64 ? 0 : range_of(t).lo;
  const std::byte* px = h[op.x];
  const auto n = static_cast<size_t>(g.planes * g.out_volume());
  std::vector<int64_t> y(n, lowest), at(n, -1);
  for (int64_t p = 0; p < g.planes; ++p) {
    const int64_t base = p * g.in_volume();
    each_output(g, [&](const std::array<int64_t, 3>& o, int64_t i) {
      const auto out = static_cast<size_t>(p * g.out_volume() + i);
      each_tap(g, o, [&](int64_t off) {
        const int64_t v = read_int(t, px, static_cast<size_t>(base + off));
        if (at[out] < 0 || order_key(t, v) > order_key(t, y[out])) {
          y[out] = v;
          at[out] = off;
        }
      });
    });
  }
  std::byte* py = h[op.y];
  for (size_t i = 0; i < n; ++i) write_int(t, py, i, y[i]);
  store_indices(op, g, h, at);
}

template <class R>
void run(const kernels::pool2d& op, const host_tensors<R>& h) {
  if (!is_float(op.x.type)) return run_int(op, h);
  const pool_geom g = pgeom(op, op.x.shape, op.y.shape);
  const auto x = h.load(op.x);
  const auto n = static_cast<size_t>(g.planes * g.out_volume());
  std::vector<R> y(n);
  std::vector<int64_t> at(op.mode == kernels::pool_mode::max ? n : 0, -1);
  for (int64_t p = 0; p < g.planes; ++p) {
    const R* xp = x.data() + p * g.in_volume();
    each_output(g, [&](const std::array<int64_t, 3>& o, int64_t i) {
      const auto out = static_cast<size_t>(p * g.out_volume() + i);
      if (op.mode == kernels::pool_mode::max) {
        // NaN wins (the first one), as numpy.max propagates it.
        R m = -std::numeric_limits<R>::infinity();
        int64_t& arg = at[out];
        each_tap(g, o, [&](int64_t off) {
          const R v = xp[off];
          if (std::isnan(m)) return;
          if (arg < 0 || v > m || std::isnan(v)) {
            m = v;
            arg = off;
          }
        });
        y[out] = m;
        return;
      }
      R s = R{0.0};
      int64_t count = 0;
      each_tap(g, o, [&](int64_t off) {
        s += xp[off];
        ++count;
      });
      if (op.count_include_pad)
        count = taps_of(g, 0, o[0]).padded * taps_of(g, 1, o[1]).padded * taps_of(g, 2, o[2]).padded;
      // A window with no input and nothing to count: 0 / 0, NaN, as the ONNX reference gives.
      y[out] = count == 0 ? std::numeric_limits<R>::quiet_NaN() : s / static_cast<R>(count);
    });
  }
  h.store(op.y, y);
  store_indices(op, g, h, at);
}

// Scattered in output order (p, oh, ow ascending), so overlapping windows add in a fixed order.
// Validation keeps every window on the input (2 * pad <= window): each has a first tap.
template <class R>
void run(const kernels::pool2d_backward& op, const host_tensors<R>& h) {
  const pool_geom g = pgeom(op, op.dx.shape, op.dy.shape);
  const auto dy = h.load(op.dy);
  const std::vector<R> x = op.mode == kernels::pool_mode::max ? h.load(op.x) : std::vector<R>{};
  std::vector<R> dx(static_cast<size_t>(g.planes * g.in_volume()), R{0.0});
  size_t in = 0;
  for (int64_t p = 0; p < g.planes; ++p) {
    R* dxp = dx.data() + p * g.in_volume();
    each_output(g, [&](const std::array<int64_t, 3>& o, int64_t) {
      const R d = dy[in++];
      if (op.mode == kernels::pool_mode::max) {
        const R* xp = x.data() + p * g.in_volume();
        int64_t arg = -1;
        R m = R{0.0};
        each_tap(g, o, [&](int64_t off) {
          const R v = xp[off];
          if (arg >= 0 && std::isnan(m)) return;
          if (arg < 0 || v > m || std::isnan(v)) {
            m = v;
            arg = off;
          }
        });
        dxp[arg] += d;
      } else {
        // The forward's divisor, so that dx is the adjoint of its average.
        int64_t count = 0;
        each_tap(g, o, [&](int64_t) { ++count; });
        if (op.count_include_pad)
          count = taps_of(g, 0, o[0]).padded * taps_of(g, 1, o[1]).padded * taps_of(g, 2, o[2]).padded;
        const R share = d / static_cast<R>(count);
        each_tap(g, o, [&](int64_t off) { dxp[off] += share; });
      }
    });
  }
  h.store(op.dx, dx);
}

// ---- softmax, reduce, transpose, slice, pad, gather, tile, cast, sgd ---------------------------

// A tensor viewed as [outer, len, inner] around one axis (negative counting from the end): the
// lines along the axis that softmax and cumsum walk.
struct axis_lines {
  int64_t outer = 1, len = 1, inner = 1;
  axis_lines(const shape& s, std::int32_t axis) {
    const size_t ax =
        axis < 0 ? static_cast<size_t>(axis + static_cast<std::int32_t>(s.rank())) : static_cast<size_t>(axis);
    for (size_t i = 0; i < ax; ++i) outer *= s[i];
    for (size_t i = ax + 1; i < s.rank(); ++i) inner *= s[i];
    len = s[ax];
  }
};

template <class R>
void run(const kernels::softmax& op, const host_tensors<R>& h) {
  const axis_lines lines(op.x.shape, op.axis);
  const int64_t outer = lines.outer, len = lines.len, inner = lines.inner;
  const auto x = h.load(op.x);
  std::vector<R> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const auto at = [&](int64_t k) { return static_cast<size_t>((o * len + k) * inner + in); };
      R m = -std::numeric_limits<R>::infinity();
      for (int64_t k = 0; k < len; ++k) m = std::max(m, x[at(k)]);
      R sum = R{0.0};
      for (int64_t k = 0; k < len; ++k) {
        const R e = std::exp(x[at(k)] - m);
        y[at(k)] = e;
        sum += e;
      }
      for (int64_t k = 0; k < len; ++k) y[at(k)] /= sum;
    }
  h.store(op.y, y);
}

// Offset of each input index of x in the reduction's output: the output strides, 0 on the
// reduced axes. `count` is how many elements each output combines.
index_array reduce_strides(const kernels::reduce& op, int64_t& count) noexcept {
  const shape& s = op.x.shape;
  index_array ostride{};
  int64_t st = 1;
  count = 1;
  for (size_t i = s.rank(); i-- > 0;) {
    if ((op.axes_mask >> i) & 1u) {
      count *= s[i];
    } else {
      ostride[i] = st;
      st *= s[i];
    }
  }
  return ostride;
}

// sum, prod, max and min on an integer dtype (validated), exactly as numpy's in-dtype reductions:
// sum and prod in unsigned arithmetic, whose wrap-around is defined, so the low n bits of the
// result are the two's complement one of an n-bit type (numpy.sum and numpy.prod of int8 wrap the
// same way); max and min are exact. An empty reduction gives the identity (0, 1) and, for max and
// min, the dtype's lowest and highest value, as numpy's initial= would.
void run_int(const kernels::reduce& op, const host_ptrs& h) {
  using kernels::reduce_fn;
  const dtype t = op.x.type;
  int64_t count = 0;
  const index_array ostride = reduce_strides(op, count);
  // A u64's least and greatest values are the bit patterns 0 and all ones, ordered by order_key.
  const int_range lim = t == dtype::u64 ? int_range{0, -1, 0.0, 0.0} : range_of(t);
  const int64_t init = op.fn == reduce_fn::prod  ? 1
                       : op.fn == reduce_fn::max ? lim.lo
                       : op.fn == reduce_fn::min ? lim.hi
                                                 : 0;
  std::vector<int64_t> y(static_cast<size_t>(op.y.shape.elements()), init);
  const std::byte* px = h[op.x];
  const auto n = static_cast<size_t>(op.x.shape.elements());
  index_array idx{};
  int64_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t& acc = y[static_cast<size_t>(o)];
    const int64_t v = read_int(t, px, i);
    const auto ua = static_cast<std::uint64_t>(acc), uv = static_cast<std::uint64_t>(v);
    switch (op.fn) {
      case reduce_fn::sum: acc = wrap_to(t, ua + uv); break;
      case reduce_fn::prod: acc = wrap_to(t, ua * uv); break;
      case reduce_fn::max: acc = order_key(t, v) > order_key(t, acc) ? v : acc; break;
      default: acc = order_key(t, v) < order_key(t, acc) ? v : acc; break;
    }
    advance(idx, op.x.shape, ostride, o);
  }
  std::byte* py = h[op.y];
  for (size_t i = 0; i < y.size(); ++i) write_int(t, py, i, y[i]);
}

template <class R>
void run(const kernels::reduce& op, const host_tensors<R>& h) {
  if (!is_float(op.x.type)) return run_int(op, h);
  const shape& s = op.x.shape;
  int64_t count = 0;
  const index_array ostride = reduce_strides(op, count);
  const auto x = h.load(op.x);
  using kernels::reduce_fn;
  const bool is_max = op.fn == reduce_fn::max, is_min = op.fn == reduce_fn::min;
  const bool arg = op.fn == reduce_fn::argmax || op.fn == reduce_fn::argmin;
  const R inf = std::numeric_limits<R>::infinity();
  const bool is_prod = op.fn == reduce_fn::prod;
  std::vector<R> y(static_cast<size_t>(op.y.shape.elements()), is_max    ? -inf
                                                               : is_min  ? inf
                                                               : is_prod ? R{1.0}
                                                                         : R{0.0});
  std::vector<int64_t> at(arg ? y.size() : 0, -1);  // argmax/argmin: the index so far
  size_t axis = 0;
  while (arg && !((op.axes_mask >> axis) & 1u)) ++axis;
  index_array idx{};
  int64_t o = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    R& acc = y[static_cast<size_t>(o)];
    if (is_max) {
      if (x[i] > acc || std::isnan(x[i])) acc = std::isnan(acc) ? acc : x[i];
    } else if (is_min) {
      if (x[i] < acc || std::isnan(x[i])) acc = std::isnan(acc) ? acc : x[i];
    } else if (arg) {
      int64_t& best = at[static_cast<size_t>(o)];
      const R v = x[i];
      const bool better = op.fn == reduce_fn::argmax ? v > acc : v < acc;
      const bool tie = v == acc && op.select_last;
      if (!std::isnan(v) && (best < 0 || better || tie)) {
        acc = v;
        best = idx[axis];
      } else if (best < 0 && std::isnan(v) && idx[axis] + 1 == op.x.shape[axis]) {
        best = 0;  // every element NaN
      }
    } else if (is_prod) {
      acc *= x[i];
    } else {
      acc += x[i];
    }
    advance(idx, s, ostride, o);
  }
  if (op.fn == kernels::reduce_fn::mean)
    for (R& v : y) v /= static_cast<R>(count);
  if (arg) {
    std::byte* p = h[op.y];
    for (size_t i = 0; i < at.size(); ++i) write_raw<int64_t>(p, i, std::max<int64_t>(0, at[i]));
    return;
  }
  h.store(op.y, y);
}

// Writes y's elements in row-major order, each copied from where next() points, through a staging
// buffer (y may overlap what it reads): the byte-moving kernels (transpose, slice, pad) differ
// only in where each element comes from, so any dtype and NaN payloads pass unchanged.
template <class Next>
void copy_elements(const host_ptrs& h, const tensor_desc& y, Next&& next) {
  const size_t es = size_of(y.type);
  const auto n = static_cast<size_t>(y.shape.elements());
  std::vector<std::byte> out(n * es);
  for (size_t i = 0; i < n; ++i) std::memcpy(out.data() + i * es, next(), es);
  std::memcpy(h[y], out.data(), out.size());
}

void run(const kernels::transpose& op, const host_ptrs& h) {
  const shape& xs = op.x.shape;
  const size_t r = xs.rank();
  const size_t es = size_of(op.x.type);
  const index_array xstride = row_major_strides(xs);
  // Walking y in row-major order, dimension i of y moves x by xstride[perm[i]].
  index_array ystep{};
  for (size_t i = 0; i < r; ++i) ystep[i] = xstride[op.perm[i]];
  const std::byte* src = h[op.x];
  index_array idx{};
  int64_t off = 0;
  copy_elements(h, op.y, [&] {
    const std::byte* p = src + static_cast<size_t>(off) * es;
    advance(idx, op.y.shape, ystep, off);
    return p;
  });
}

void run(const kernels::slice& op, const host_ptrs& h) {
  const shape& xs = op.x.shape;
  const shape& ys = op.y.shape;
  const size_t es = size_of(op.x.type);
  // Walking y in row-major order, dimension d of y moves x by steps[d] rows of x's dimension d;
  // validate() put every index reached inside x. A dimension of one element never steps (its
  // step may be any size: times x's stride it could overflow).
  index_array ystep{};
  int64_t stride = 1, off = 0;
  for (size_t d = xs.rank(); d-- > 0;) {
    ystep[d] = ys[d] > 1 ? op.steps[d] * stride : 0;
    off += op.starts[d] * stride;
    stride *= xs[d];
  }
  const std::byte* src = h[op.x];
  index_array idx{};
  copy_elements(h, op.y, [&] {
    const std::byte* p = src + static_cast<size_t>(off) * es;
    advance(idx, ys, ystep, off);
    return p;
  });
}

// Where index i of a dimension of n elements reads from, numpy.pad's way (ONNX's reference
// pads with it): inside, itself; outside, -1 in constant mode, else the index the mode maps it
// to, as if x continued without end (reflect repeats with period 2(n - 1) and never repeats an
// edge; a single element reflects onto itself).
int64_t pad_source(kernels::pad_mode m, int64_t i, int64_t n) noexcept {
  if (i >= 0 && i < n) return i;
  switch (m) {
    case kernels::pad_mode::constant: return -1;
    case kernels::pad_mode::edge: return i < 0 ? 0 : n - 1;
    case kernels::pad_mode::wrap: return ((i % n) + n) % n;
    case kernels::pad_mode::reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      const int64_t k = ((i % period) + period) % period;
      return k < n ? k : period - k;
    }
  }
  return -1;
}

void run(const kernels::pad& op, const host_ptrs& h) {
  const shape& xs = op.x.shape;
  const shape& ys = op.y.shape;
  const size_t r = ys.rank();
  const size_t es = size_of(op.y.type);
  // The fill, once, in y's dtype (validate() checked that it is exact there).
  std::array<std::byte, 8> fill{};
  if (is_float(op.y.type)) write_real<double>(op.y.type, fill.data(), 0, op.value);
  else write_int(op.y.type, fill.data(), 0, static_cast<int64_t>(op.value));
  // Per dimension, the x index each y index reads (-1: the fill), times x's stride there.
  std::array<std::vector<int64_t>, shape::max_rank> from;
  int64_t stride = 1;
  for (size_t d = r; d-- > 0;) {
    auto& f = from[d];
    f.resize(static_cast<size_t>(ys[d]));
    for (int64_t i = 0; i < ys[d]; ++i) {
      const int64_t s = pad_source(op.mode, i - op.begins[d], xs[d]);
      f[static_cast<size_t>(i)] = s < 0 ? -1 : s * stride;
    }
    stride *= xs[d];
  }
  const std::byte* src = h[op.x];
  index_array idx{};
  copy_elements(h, op.y, [&] {
    int64_t off = 0;
    for (size_t d = 0; d < r && off >= 0; ++d) {
      const int64_t s = from[d][static_cast<size_t>(idx[d])];
      off = s < 0 ? -1 : off + s;
    }
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < ys[d]) break;
      idx[d] = 0;
    }
    return off < 0 ? fill.data() : src + static_cast<size_t>(off) * es;
  });
}

// ONNX's Gather: each index picks one row of data.shape[axis+1:] elements in every outer slice.
// The indices come from the caller's data, so their range is checked here, all of them before y
// is written: a bad one fails the kernel (onnx.ai: an index outside [-s, s-1] is an error) and
// leaves y as it was.
// Every index of `indices` read and checked against data's `axis` (dim entries), made
// non-negative into `at`, before anything is written.
data_fault read_axis_indices(const tensor_desc& indices, const std::byte* idx, int64_t dim, size_t axis,
                             std::vector<int64_t>& at) {
  at.resize(static_cast<size_t>(indices.shape.elements()));  // 1 for a scalar index
  for (size_t j = 0; j < at.size(); ++j) {
    const int64_t v = read_int(indices.type, idx, j);
    if (v < -dim || v >= dim) return index_out_of_range("indices", j, v, dim, axis);
    at[j] = v < 0 ? v + dim : v;
  }
  return {};
}

data_fault run(const kernels::gather& op, const host_ptrs& h) {
  const shape& ds = op.data.shape;
  const auto axis = static_cast<size_t>(op.axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= ds[d];
  for (size_t d = axis + 1; d < ds.rank(); ++d) inner *= ds[d];
  const int64_t dim = ds[axis];
  std::vector<int64_t> at;
  if (data_fault f = read_axis_indices(op.indices, h[op.indices], dim, axis, at); f.ec) return f;
  const size_t count = at.size();
  const size_t row = static_cast<size_t>(inner) * size_of(op.data.type);
  const std::byte* src = h[op.data];
  std::vector<std::byte> out(op.y.bytes());  // staged: y may overlap data or indices
  std::byte* dst = out.data();
  for (int64_t a = 0; a < outer; ++a)
    for (size_t j = 0; j < count; ++j, dst += row)
      std::memcpy(dst, src + static_cast<size_t>(a * dim + at[j]) * row, row);
  std::memcpy(h[op.y], out.data(), out.size());
  return {};
}

void run(const kernels::tile& op, const host_ptrs& h) {
  const shape& xs = op.x.shape;
  const shape& ys = op.y.shape;
  const size_t r = ys.rank();
  const size_t es = size_of(op.y.type);
  const index_array xstride = row_major_strides(xs);
  // y's index walks row-major; x's is it modulo x's extents.
  const std::byte* src = h[op.x];
  index_array yi{};
  copy_elements(h, op.y, [&] {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += yi[d] % xs[d] * xstride[d];
    for (size_t d = r; d-- > 0;) {
      if (++yi[d] < ys[d]) break;
      yi[d] = 0;
    }
    return src + static_cast<size_t>(off) * es;
  });
}

// A sum taken in double into y's dtype as the float kernels have always rounded it: to float and
// from there to f16 or bf16; an f64 keeps it.
void write_sum(dtype t, std::byte* y, size_t i, double v) noexcept {
  if (t == dtype::f64) write_raw<double>(y, i, v);
  else write_float(t, y, i, static_cast<float>(v));
}

// ONNX's NegativeLogLikelihoodLoss, as its reference implementation computes it: every target
// checked before anything is written, sums in double, one rounding to y's dtype.
data_fault run(const kernels::nll_loss& op, const host_ptrs& h) {
  const shape& xs = op.x.shape;
  const int64_t n = xs[0], c = xs[1];
  int64_t inner = 1;  // d1 * ... * dk
  for (size_t d = 2; d < xs.rank(); ++d) inner *= xs[d];
  const auto count = static_cast<size_t>(n * inner);
  const std::byte* tgt = h[op.target];
  std::vector<int64_t> t(count);
  for (size_t i = 0; i < count; ++i) {
    t[i] = read_int(op.target.type, tgt, i);
    const bool ignored = op.has_ignore_index && t[i] == op.ignore_index;
    if (!ignored && (t[i] < 0 || t[i] >= c))
      return {make_error_code(errc::invalid_argument),
              "target[" + std::to_string(i) + "] = " + std::to_string(t[i]) + " is not a class in [0, " +
                  std::to_string(c) + ")" +
                  (op.has_ignore_index ? " nor the ignore_index " + std::to_string(op.ignore_index) : std::string{})};
  }
  const std::byte* x = h[op.x];
  const bool weighted = h.present(op.weight);
  const std::byte* w = weighted ? h[op.weight] : nullptr;
  std::vector<double> loss(count);
  double sum = 0, weights = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < inner; ++j) {
      const auto i = static_cast<size_t>(b * inner + j);
      if (op.has_ignore_index && t[i] == op.ignore_index) continue;
      const double wt = weighted ? read_real<double>(op.weight.type, w, static_cast<size_t>(t[i])) : 1.0;
      loss[i] = -read_real<double>(op.x.type, x, static_cast<size_t>((b * c + t[i]) * inner + j)) * wt;
      sum += loss[i];
      weights += wt;
    }
  std::byte* y = h[op.y];
  switch (op.reduction) {
    case kernels::loss_reduction::none:
      for (size_t i = 0; i < count; ++i) write_sum(op.y.type, y, i, loss[i]);
      break;
    case kernels::loss_reduction::sum: write_sum(op.y.type, y, 0, sum); break;
    case kernels::loss_reduction::mean: write_sum(op.y.type, y, 0, sum / weights); break;
  }
  return {};
}

void run(const kernels::trilu& op, const host_ptrs& h) {
  const shape& s = op.x.shape;
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
  const size_t es = size_of(op.x.type);
  const std::array<std::byte, 8> zero{};  // 0 in every dtype
  const std::byte* src = h[op.x];
  int64_t at = 0;
  copy_elements(h, op.y, [&] {
    const int64_t col = at % cols, row = at / cols % rows;
    const std::byte* from = src + static_cast<size_t>(at++) * es;
    // j - i against k without overflow: both sides stay within a few dimensions of int64's range.
    const bool keep = op.upper ? col - row >= op.k : col - row <= op.k;
    return keep ? from : zero.data();
  });
}

// ---- resize --------------------------------------------------------------------------------

// The source coordinate of output index i of one dimension (n elements in x, `out` in y), by
// ONNX's coordinate_transformation_mode as its reference implementation evaluates it
// (onnx/reference/ops/op_resize.py): m = scale * n is the resized length before flooring, which
// align_corners and the one-element cases compare, not y's extent.
double resize_source(kernels::resize_coordinates c, int64_t i, int64_t n, int64_t out, double scale, double start,
                     double end) noexcept {
  using enum kernels::resize_coordinates;
  const double x = static_cast<double>(i), m = scale * static_cast<double>(n);
  const auto last = static_cast<double>(n - 1);
  switch (c) {
    case tf_crop_and_resize:
      return (m == 1 ? (end - start) * last / 2 : x * (end - start) * last / (m - 1)) + start * last;
    case half_pixel: return (x + 0.5) / scale - 0.5;
    case pytorch_half_pixel: return m == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    case align_corners: return m == 1 ? 0.0 : x * static_cast<double>(n - 1) / (m - 1);
    case asymmetric: return x / scale;
    case tf_half_pixel_for_nn: return (x + 0.5) / scale;
    case half_pixel_symmetric: {
      const double offset = static_cast<double>(n) / 2 * (1 - static_cast<double>(out) / m);
      return offset + (x + 0.5) / scale - 0.5;
    }
  }
  return 0;
}

// Keys' cubic convolution weights (IEEE Trans. ASSP 29(6), 1981) of the four neighbours
// left - 1 .. left + 2 of a coordinate that lies `ratio` in (0, 1] past `left`, as ONNX writes them.
std::array<double, 4> cubic_weights(double r, double a) noexcept {
  const double s = 1 - r;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * s - (a + 3)) * s * s + 1, ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
}

struct resize_tap {
  int64_t offset;  // into x, in elements: the clamped index times the dimension's stride
  double weight;
};

// The antialiased filter of a downsampled dimension (scale < 1), as onnx/reference/ops/op_resize.py
// builds it (_linear_coeffs_antialias, _cubic_coeffs_antialias): the kernel stretched by 1 /
// scale over the 2 ceil(half / scale) neighbours left + j, j in [1 - count / 2, count / 2] (half
// the kernel's support: 1 for linear, 2 for cubic), the weights normalised to sum 1.
void antialias_weights(const kernels::resize& op, double scale, double ratio, std::vector<double>& w) {
  const bool linear = op.mode == kernels::resize_mode::linear;
  const double a = op.cubic_coeff_a;
  const auto begin = static_cast<int64_t>(std::floor((linear ? -1.0 : -2.0) / scale) + 1);
  const int64_t count = 2 - 2 * begin;
  w.assign(static_cast<size_t>(count), 0.0);
  double sum = 0;
  for (int64_t k = 0; k < count; ++k) {
    const double t = std::fabs(scale * (static_cast<double>(begin + k) - ratio));
    double v = 0;
    if (linear) v = std::clamp(1 - t, 0.0, 1.0);
    else if (t <= 1) v = (a + 2) * t * t * t - (a + 3) * t * t + 1;
    else if (t < 2) v = a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
    w[static_cast<size_t>(k)] = v;
    sum += v;
  }
  for (auto& v : w) v /= sum;
}

// The neighbours output index i of one dimension reads and their weights. ONNX's reference takes
// the neighbours nearest the source coordinate, preferring the left ones, so a coordinate c
// that is an integer lies at ratio 1 past c - 1; neighbours past an edge repeat the edge element
// (its padding is numpy's edge mode). A neighbour of weight 0 is not read. False when the index
// is tf_crop_and_resize's extrapolation (its coordinate outside [0, n - 1]), no taps added.
bool resize_taps(const kernels::resize& op, size_t d, int64_t i, int64_t stride, std::vector<resize_tap>& taps) {
  using kernels::resize_mode;
  const int64_t n = op.x.shape[d];
  double c = resize_source(op.coordinates, i, n, op.y.shape[d], op.scales[d], op.roi_start[d], op.roi_end[d]);
  if (op.coordinates == kernels::resize_coordinates::tf_crop_and_resize && (c < 0 || c > static_cast<double>(n - 1)))
    return false;
  const double scale = op.scales[d];
  const bool widened = op.antialias && scale < 1 && op.mode != resize_mode::nearest;
  // Far outside x every neighbour is an edge: clamping there changes no weight that is read, and
  // keeps the index arithmetic finite (a tiny scale sends c towards infinity). An antialiased
  // filter reaches 2 / scale elements further.
  const double reach = 4 + (widened ? std::ceil(2 / scale) : 0.0);
  const double lo = -reach, hi = static_cast<double>(n) + reach;
  if (!(c >= lo)) c = lo;
  if (c > hi) c = hi;
  const double left_d = std::ceil(c) - 1;
  const double ratio = c - left_d;  // in (0, 1]
  const auto left = static_cast<int64_t>(left_d);
  std::vector<double> w(4, 0.0);
  int64_t first = left, count = 2;
  if (widened) {
    antialias_weights(op, scale, ratio, w);
    count = static_cast<int64_t>(w.size());
    first = left + 1 - count / 2;
  } else {
    switch (op.mode) {
      case resize_mode::nearest: {
        bool right = true;  // an integral coordinate is its own (right) neighbour
        if (ratio != 1) {
          switch (op.nearest) {
            case kernels::nearest_rounding::round_prefer_floor: right = ratio > 0.5; break;
            case kernels::nearest_rounding::round_prefer_ceil: right = ratio >= 0.5; break;
            case kernels::nearest_rounding::floor: right = false; break;
            case kernels::nearest_rounding::ceil: right = true; break;
          }
        }
        first = right ? left + 1 : left;
        count = 1;
        w[0] = 1;
        break;
      }
      case resize_mode::linear:
        w[0] = 1 - ratio;
        w[1] = ratio;
        break;
      case resize_mode::cubic: {
        first = left - 1;
        count = 4;
        const std::array<double, 4> k = cubic_weights(ratio, op.cubic_coeff_a);
        std::copy(k.begin(), k.end(), w.begin());
        break;
      }
    }
  }
  if (op.exclude_outside && op.mode != resize_mode::nearest) {
    double sum = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t at = first + k;
      if (at < 0 || at >= n) w[static_cast<size_t>(k)] = 0;
      sum += w[static_cast<size_t>(k)];
    }
    for (auto& v : w) v /= sum;
  }
  for (int64_t k = 0; k < count; ++k) {
    const double v = w[static_cast<size_t>(k)];
    if (v == 0) continue;
    taps.push_back({std::clamp<int64_t>(first + k, 0, n - 1) * stride, v});
  }
  return true;
}

// A sum taken in double into R for a store to y: double keeps it; to float it is rounded to odd
// when y is narrower than float (`narrow`), so that the store rounds once.
template <class R>
R from_double(bool narrow, double v) noexcept {
  if constexpr (std::is_same_v<R, double>) return v;
  else return narrow ? to_float_odd(v) : static_cast<float>(v);
}

// ONNX's Resize: y[i] = sum over the neighbours' product of per-dimension weights times x there,
// in double (the reference's dot products are float64), rounded to y's dtype once; with
// tf_crop_and_resize an output whose coordinate is outside x in any dimension is the
// extrapolation value.
template <class R>
void run(const kernels::resize& op, const host_tensors<R>& h) {
  const shape& xs = op.x.shape;
  const shape& ys = op.y.shape;
  const size_t r = ys.rank();
  // Per dimension, every output index's neighbours: taps[d][first[d][i] .. first[d][i + 1]).
  std::array<std::vector<resize_tap>, shape::max_rank> taps;
  std::array<std::vector<size_t>, shape::max_rank> first;
  std::array<std::vector<char>, shape::max_rank> outside;
  int64_t stride = 1;
  for (size_t d = r; d-- > 0;) {
    first[d].reserve(static_cast<size_t>(ys[d]) + 1);
    for (int64_t i = 0; i < ys[d]; ++i) {
      first[d].push_back(taps[d].size());
      outside[d].push_back(resize_taps(op, d, i, stride, taps[d]) ? 0 : 1);
    }
    first[d].push_back(taps[d].size());
    stride *= xs[d];
  }
  const auto n = static_cast<size_t>(ys.elements());
  index_array idx{};
  if (!is_float(op.x.type)) {
    // Integer or bool data, nearest (validated): each output is a copy of its one neighbour's
    // bytes, as numpy's indexing in ONNX's reference copies it; no value passes through a float.
    const size_t es = size_of(op.x.type);
    const std::byte* x = h[op.x];
    std::byte* y = h[op.y];
    // The value outside a crop box; validated to be one of x's dtype only where it is used.
    std::array<std::byte, 8> fill{};
    if (op.coordinates == kernels::resize_coordinates::tf_crop_and_resize) {
      if (op.x.type == dtype::boolean) fill[0] = std::byte{op.extrapolation_value != 0};
      else store_int(op.x.type, fill.data(), 0, static_cast<int64_t>(op.extrapolation_value));
    }
    for (size_t e = 0; e < n; ++e) {
      bool extrapolated = false;
      int64_t off = 0;
      for (size_t d = 0; d < r; ++d) {
        const auto i = static_cast<size_t>(idx[d]);
        extrapolated = extrapolated || outside[d][i] != 0;
        if (!extrapolated) off += taps[d][first[d][i]].offset;
      }
      std::memcpy(y + e * es, extrapolated ? fill.data() : x + static_cast<size_t>(off) * es, es);
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < ys[d]) break;
        idx[d] = 0;
      }
    }
    return;
  }
  const auto x = h.load(op.x);
  std::vector<R> y(n);
  const bool narrow = op.y.type != dtype::f32;
  for (size_t e = 0; e < n; ++e) {
    double sum = 0;
    bool extrapolated = false;
    for (size_t d = 0; d < r; ++d) extrapolated = extrapolated || outside[d][static_cast<size_t>(idx[d])] != 0;
    const auto visit = [&](const auto& self, size_t d, int64_t off, double w) -> void {
      if (d == r) {
        sum += w * static_cast<double>(x[static_cast<size_t>(off)]);
        return;
      }
      const auto i = static_cast<size_t>(idx[d]);
      for (size_t k = first[d][i]; k < first[d][i + 1]; ++k)
        self(self, d + 1, off + taps[d][k].offset, w * taps[d][k].weight);
    };
    if (extrapolated) sum = op.extrapolation_value;
    else visit(visit, 0, 0, 1.0);
    y[e] = from_double<R>(narrow, sum);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < ys[d]) break;
      idx[d] = 0;
    }
  }
  h.store(op.y, y);
}

data_fault run(const kernels::gather_elements& op, const host_ptrs& h) {
  const shape& ds = op.data.shape;
  const shape& is = op.indices.shape;
  const auto axis = static_cast<size_t>(op.axis);
  std::vector<int64_t> at;
  if (data_fault f = read_axis_indices(op.indices, h[op.indices], ds[axis], axis, at); f.ec) return f;
  // Walking y (indices' shape) row-major: data's offset from y's coordinates, the axis's taken
  // from the index.
  const index_array stride = row_major_strides(ds);
  const size_t es = size_of(op.data.type);
  const std::byte* src = h[op.data];
  index_array yi{};
  size_t i = 0;
  copy_elements(h, op.y, [&] {
    int64_t off = 0;
    for (size_t d = 0; d < is.rank(); ++d) off += (d == axis ? at[i] : yi[d]) * stride[d];
    ++i;
    for (size_t d = is.rank(); d-- > 0;) {
      if (++yi[d] < is[d]) break;
      yi[d] = 0;
    }
    return src + static_cast<size_t>(off) * es;
  });
  return {};
}

// ONNX's CumSum as a sequential scan along the axis, for each line of x along it: floats in float
// (an f16 or bf16 running sum rounded to the dtype at each step, as a scan that keeps it in y
// would), integers exactly in unsigned arithmetic, whose low bits wrap as the dtype's would. x is
// read whole before y is written, so y may overlap it.
template <class R>
void run(const kernels::cumsum& op, const host_tensors<R>& h) {
  const axis_lines lines(op.x.shape, op.axis);
  const int64_t outer = lines.outer, len = lines.len, inner = lines.inner;
  const dtype t = op.x.type;
  const auto n = static_cast<size_t>(op.x.shape.elements());
  const std::byte* px = h[op.x];
  std::vector<std::byte> out(n * size_of(t));
  const bool flt = is_float(t);
  std::vector<R> xf = flt ? h.load(op.x) : std::vector<R>{};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      R facc = R{0.0};
      std::uint64_t iacc = 0;
      for (int64_t step = 0; step < len; ++step) {
        const int64_t k = op.reverse ? len - 1 - step : step;
        const auto at = static_cast<size_t>((o * len + k) * inner + in);
        if (flt) {
          if (op.exclusive) write_real<R>(t, out.data(), at, facc);
          facc = t == dtype::f32 ? facc + xf[at] : round_to(t, facc + xf[at]);
          if (!op.exclusive) write_real<R>(t, out.data(), at, facc);
        } else {
          if (op.exclusive) write_int(t, out.data(), at, wrap_to(t, iacc));
          iacc += static_cast<std::uint64_t>(read_int(t, px, at));
          if (!op.exclusive) write_int(t, out.data(), at, wrap_to(t, iacc));
        }
      }
    }
  std::memcpy(h[op.y], out.data(), out.size());
}

// ---- grid_sample -------------------------------------------------------------------------

// Reflects c off lo and hi until it lies between them, as ONNX's reference does
// (_gs_reflect in onnx/reference/ops/op_grid_sample.py): an even number of whole ranges past a
// border leaves c that far inside it, an odd number that far inside the other. The parity and the
// remainder come from one fmod by twice the range, exact however far out c lies. With a range of
// 0 (one element, align_corners) every coordinate reflects onto it, as PyTorch's
// reflect_coordinates gives (the reference divides by zero there).
double grid_reflect(double c, double lo, double hi) noexcept {
  const double range = hi - lo;
  if (!(range > 0)) return lo;
  if (c < lo) {
    const double m = std::fmod(lo - c, 2 * range);
    return m < range ? lo + m : hi - (m - range);
  }
  if (c > hi) {
    const double m = std::fmod(c - hi, 2 * range);
    return m < range ? hi - m : lo + (m - range);
  }
  return c;
}

struct grid_tap {
  int64_t offset;  // into x's spatial block, in elements; -1 reads zero padding
  double weight;
};

// The x index a neighbour at integer position i of a spatial dimension of n elements reads under
// the padding mode (the reference's _pixel_at_array): -1 for a zero, else clamped to the edge or
// reflected off the borders lo and hi, its integral part taken as the reference's int() does.
int64_t grid_pixel(kernels::grid_padding p, int64_t i, int64_t n, double lo, double hi) noexcept {
  switch (p) {
    case kernels::grid_padding::zeros: return i >= 0 && i < n ? i : -1;
    case kernels::grid_padding::border: break;
    case kernels::grid_padding::reflection:
      i = static_cast<int64_t>(grid_reflect(static_cast<double>(i), lo, hi));
      break;
  }
  return std::clamp<int64_t>(i, 0, n - 1);
}

// ONNX's GridSample as its reference implementation computes it: each output's r normalised
// coordinates (the grid's last axis, in x's spatial order reversed) denormalised, rounded half
// to even in nearest mode, clamped or reflected when they fall outside the borders, then each
// spatial dimension's 1, 2 or 4 neighbours weighted (a separable product, as the reference's
// dimension-by-dimension recursion computes) and padded. The sum is taken in double and rounded
// to y's dtype once. A coordinate that is not finite after padding has no neighbours (the
// reference raises converting it to an integer): the task fails naming the grid value, y
// unwritten.
template <class R>
data_fault run(const kernels::grid_sample& op, const host_tensors<R>& h) {
  using kernels::grid_padding;
  using kernels::grid_sample_mode;
  const shape& xs = op.x.shape;
  const size_t r = xs.rank() - 2;
  const int64_t batches = xs[0], channels = xs[1];
  int64_t block = 1;  // x's spatial elements per (n, c)
  std::array<int64_t, shape::max_rank> stride{};
  for (size_t d = r; d-- > 0;) {
    stride[d] = block;
    block *= xs[d + 2];
  }
  size_t outputs = 1;  // sampling positions per batch: the grid's O1..Or
  for (size_t d = 1; d <= r; ++d) outputs *= static_cast<size_t>(op.grid.shape[d]);
  const auto x = h.load(op.x);
  const auto grid = h.load(op.grid);
  std::vector<R> y(static_cast<size_t>(op.y.shape.elements()));
  const bool narrow = op.y.type != dtype::f32;
  const size_t per_dim = op.mode == grid_sample_mode::nearest ? 1 : op.mode == grid_sample_mode::linear ? 2 : 4;
  std::array<std::array<grid_tap, 4>, shape::max_rank> taps{};
  for (int64_t b = 0; b < batches; ++b) {
    for (size_t o = 0; o < outputs; ++o) {
      const size_t g0 = (static_cast<size_t>(b) * outputs + o) * r;
      for (size_t k = 0; k < r; ++k) {
        const size_t d = r - 1 - k;  // the grid's k-th coordinate is spatial dimension r - 1 - k
        const int64_t n = xs[d + 2];
        const auto len = static_cast<double>(n);
        const double g = grid[g0 + k];
        // Denormalised: -1 and 1 are the centres of the edge elements with align_corners, their
        // outer edges without.
        double c = op.align_corners ? (g + 1) / 2 * (len - 1) : ((g + 1) * len - 1) / 2;
        if (op.mode == grid_sample_mode::nearest) c = std::nearbyint(c);  // half to even, as numpy.rint
        const double lo = op.align_corners ? 0 : -0.5, hi = op.align_corners ? len - 1 : len - 0.5;
        if (c < lo || c > hi) {
          if (op.padding == grid_padding::border) c = std::clamp(c, 0.0, len - 1);
          else if (op.padding == grid_padding::reflection) c = grid_reflect(c, lo, hi);
        }
        if (!std::isfinite(c)) {
          const char* mode = op.padding == grid_padding::zeros    ? "zeros"
                             : op.padding == grid_padding::border ? "border"
                                                                  : "reflection";
          return {make_error_code(errc::invalid_argument),
                  "grid[" + std::to_string(g0 + k) + "] = " + std::to_string(g) +
                      " is no finite sampling position under " + mode + " padding"};
        }
        // Zero padding leaves c where it is: far outside x every neighbour reads 0, so moving c
        // to a few elements past the edge changes nothing and keeps the integer conversion exact.
        c = std::clamp(c, -8.0, len + 8);
        auto& t = taps[d];
        if (op.mode == grid_sample_mode::nearest) {
          t[0] = {grid_pixel(op.padding, static_cast<int64_t>(c), n, lo, hi), 1.0};
          continue;
        }
        const double fl = std::floor(c);
        const double ratio = c - fl;
        const auto x0 = static_cast<int64_t>(fl);
        if (op.mode == grid_sample_mode::linear) {
          t[0] = {grid_pixel(op.padding, x0, n, lo, hi), 1 - ratio};
          t[1] = {grid_pixel(op.padding, x0 + 1, n, lo, hi), ratio};
        } else {
          const std::array<double, 4> w = cubic_weights(ratio, -0.75);  // GridSample fixes Keys' a
          for (size_t j = 0; j < 4; ++j)
            t[j] = {grid_pixel(op.padding, x0 - 1 + static_cast<int64_t>(j), n, lo, hi), w[j]};
        }
      }
      for (size_t d = 0; d < r; ++d)
        for (size_t j = 0; j < per_dim; ++j)
          if (taps[d][j].offset >= 0) taps[d][j].offset *= stride[d];
      for (int64_t ch = 0; ch < channels; ++ch) {
        const size_t base = static_cast<size_t>((b * channels + ch) * block);
        double sum = 0;
        const auto visit = [&](const auto& self, size_t d, int64_t off, double w) -> void {
          if (d == r) {
            sum += w * static_cast<double>(x[base + static_cast<size_t>(off)]);
            return;
          }
          for (size_t j = 0; j < per_dim; ++j)
            if (taps[d][j].offset >= 0) self(self, d + 1, off + taps[d][j].offset, w * taps[d][j].weight);
        };
        visit(visit, 0, 0, 1.0);
        const size_t at = static_cast<size_t>(b * channels + ch) * outputs + o;
        y[at] = from_double<R>(narrow, sum);
      }
    }
  }
  h.store(op.y, y);
  return {};
}

// ---- scatter_nd, scatter_elements, gather_nd, top_k ------------------------------------------

// The element of dtype t at dst[di] combined with the update at src[si] by ONNX's reduction, as
// numpy computes it in the reference (onnx/reference/ops/op_scatternd.py): none copies the bytes;
// floats combine in double and round once to the dtype (for f32, f16 and bf16 that is their own
// correctly rounded sum or product: double holds either with room for one rounding), max and min return a
// NaN operand as numpy.maximum and numpy.minimum do; integers add and multiply in unsigned
// arithmetic, wrapping modulo 2^n as numpy's in-dtype arithmetic does.
void combine(kernels::scatter_reduction red, dtype t, std::byte* dst, size_t di, const std::byte* src, size_t si) {
  using R = kernels::scatter_reduction;
  const size_t es = size_of(t);
  if (red == R::none) {
    std::memcpy(dst + di * es, src + si * es, es);
    return;
  }
  if (is_float(t)) {
    const double a = read_real<double>(t, dst, di), b = read_real<double>(t, src, si);
    double v = a;
    if (red == R::add) v = a + b;
    else if (red == R::mul) v = a * b;
    else if (std::isnan(a) || std::isnan(b)) v = std::isnan(a) ? a : b;
    else v = red == R::max ? std::max(a, b) : std::min(a, b);
    write_real<double>(t, dst, di, v);
    return;
  }
  const int64_t a = read_int(t, dst, di), b = read_int(t, src, si);
  const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
  int64_t v = a;
  switch (red) {
    case R::add: v = wrap_to(t, ua + ub); break;
    case R::mul: v = wrap_to(t, ua * ub); break;
    case R::max: v = order_key(t, a) < order_key(t, b) ? b : a; break;
    case R::min: v = order_key(t, b) < order_key(t, a) ? b : a; break;
    case R::none: break;
  }
  write_int(t, dst, di, v);
}

// Reads an index tuple tensor whose last dimension (k long) names positions in `dims` of `ds`
// from `first`: every index checked against its axis and made non-negative, all before anything
// is written. The flat element offsets (in elements of the dimensions from `first`, each index
// tuple's start) come back in `at`.
data_fault read_index_tuples(const tensor_desc& indices, const std::byte* idx, const shape& ds, size_t first,
                             std::vector<int64_t>& at) {
  const size_t q = indices.shape.rank();
  const auto k = static_cast<size_t>(indices.shape[q - 1]);
  const auto tuples = static_cast<size_t>(indices.shape.elements()) / k;
  // Strides of data.shape[first:], in elements.
  index_array stride{};
  int64_t st = 1;
  for (size_t d = ds.rank(); d-- > first;) {
    stride[d] = st;
    st *= ds[d];
  }
  at.assign(tuples, 0);
  for (size_t i = 0; i < tuples; ++i)
    for (size_t j = 0; j < k; ++j) {
      const size_t axis = first + j;
      const int64_t dim = ds[axis];
      const int64_t v = read_int(indices.type, idx, i * k + j);
      if (v < -dim || v >= dim) return index_out_of_range("indices", i * k + j, v, dim, axis);
      at[i] += (v < 0 ? v + dim : v) * stride[axis];
    }
  return {};
}

// ONNX's ScatterND: y = data, then each index tuple's slice combined with its updates in index
// order (so under none a duplicate index's last update wins: ONNX leaves it undefined, this is the
// reference's loop). Staged: y may be data's buffer.
data_fault run(const kernels::scatter_nd& op, const host_ptrs& h) {
  const shape& ds = op.data.shape;
  std::vector<int64_t> at;
  if (data_fault f = read_index_tuples(op.indices, h[op.indices], ds, 0, at); f.ec) return f;
  const auto k = static_cast<size_t>(op.indices.shape[op.indices.shape.rank() - 1]);
  size_t slice = 1;
  for (size_t d = k; d < ds.rank(); ++d) slice *= static_cast<size_t>(ds[d]);
  std::vector<std::byte> out(op.data.bytes());
  std::memcpy(out.data(), h[op.data], out.size());
  const std::byte* upd = h[op.updates];
  for (size_t i = 0; i < at.size(); ++i)
    for (size_t e = 0; e < slice; ++e)
      combine(op.reduction, op.data.type, out.data(), static_cast<size_t>(at[i]) + e, upd, i * slice + e);
  std::memcpy(h[op.y], out.data(), out.size());
  return {};
}

// ONNX's ScatterElements: each update lands where its own coordinates, the axis's replaced by its
// index, point in data; in index order, as the reference's loops visit them.
data_fault run(const kernels::scatter_elements& op, const host_ptrs& h) {
  const shape& ds = op.data.shape;
  const shape& is = op.indices.shape;
  const auto axis = static_cast<size_t>(op.axis);
  std::vector<int64_t> at;
  if (data_fault f = read_axis_indices(op.indices, h[op.indices], ds[axis], axis, at); f.ec) return f;
  const size_t count = at.size();
  const index_array stride = row_major_strides(ds);
  std::vector<std::byte> out(op.data.bytes());
  std::memcpy(out.data(), h[op.data], out.size());
  const std::byte* upd = h[op.updates];
  index_array ui{};
  for (size_t i = 0; i < count; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < is.rank(); ++d) off += (d == axis ? at[i] : ui[d]) * stride[d];
    combine(op.reduction, op.data.type, out.data(), static_cast<size_t>(off), upd, i);
    for (size_t d = is.rank(); d-- > 0;) {
      if (++ui[d] < is[d]) break;
      ui[d] = 0;
    }
  }
  std::memcpy(h[op.y], out.data(), out.size());
  return {};
}

// ONNX's GatherND: per batch (the b leading dimensions), each index tuple picks one slice of
// data.shape[b + k:] elements, copied as bytes.
data_fault run(const kernels::gather_nd& op, const host_ptrs& h) {
  const shape& ds = op.data.shape;
  const shape& is = op.indices.shape;
  const auto b = static_cast<size_t>(op.batch_dims);
  const auto k = static_cast<size_t>(is[is.rank() - 1]);
  std::vector<int64_t> at;
  if (data_fault f = read_index_tuples(op.indices, h[op.indices], ds, b, at); f.ec) return f;
  size_t batches = 1, per_batch = 1, slice = 1;
  for (size_t d = 0; d < b; ++d) batches *= static_cast<size_t>(ds[d]);
  for (size_t d = b; d < ds.rank(); ++d) per_batch *= static_cast<size_t>(ds[d]);
  for (size_t d = b + k; d < ds.rank(); ++d) slice *= static_cast<size_t>(ds[d]);
  const size_t tuples = at.size() / batches;  // per batch
  const size_t es = size_of(op.data.type);
  const std::byte* src = h[op.data];
  std::vector<std::byte> out(op.y.bytes());  // staged: y may overlap data or indices
  std::byte* dst = out.data();
  for (size_t bb = 0; bb < batches; ++bb)
    for (size_t i = 0; i < tuples; ++i, dst += slice * es)
      std::memcpy(dst, src + (bb * per_batch + static_cast<size_t>(at[bb * tuples + i])) * es, slice * es);
  std::memcpy(h[op.y], out.data(), out.size());
  return {};
}

// ONNX's TopK as its reference computes it (onnx/reference/ops/op_topk.py, a lexsort on the value
// and then the position): equal values lower index first; NaN above every number (numpy's sort
// puts it last), NaNs among themselves by index. The k first of that order, sorted whatever
// `sorted` says. Values are copied as bytes; integers compare exactly (int64 past 2^53 too).
void run(const kernels::top_k& op, const host_ptrs& h) {
  const axis_lines lines(op.x.shape, op.axis);
  const int64_t outer = lines.outer, len = lines.len, inner = lines.inner, k = op.k;
  const dtype t = op.x.type;
  const size_t es = size_of(t);
  const std::byte* px = h[op.x];
  std::vector<std::byte> vals(op.values.bytes()), idxs(op.indices.bytes());
  std::vector<size_t> order(static_cast<size_t>(len));
  std::vector<double> fkey(is_float(t) ? order.size() : 0);
  std::vector<int64_t> ikey(is_float(t) ? 0 : order.size());
  const auto sort_by = [&](const auto& key) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](size_t a, size_t b) {
      const auto va = key[a], vb = key[b];
      const bool na = va != va, nb = vb != vb;  // NaN: only floats have it
      if (na || nb) return na == nb ? a < b : (op.largest ? na : nb);
      if (va != vb) return op.largest ? va > vb : va < vb;
      return a < b;
    });
  };
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const auto at = [&](int64_t j, int64_t n) { return static_cast<size_t>((o * n + j) * inner + in); };
      for (size_t j = 0; j < order.size(); ++j) {
        order[j] = j;
        if (is_float(t)) fkey[j] = read_real<double>(t, px, at(static_cast<int64_t>(j), len));
        else ikey[j] = order_key(t, read_int(t, px, at(static_cast<int64_t>(j), len)));
      }
      if (is_float(t)) sort_by(fkey);
      else sort_by(ikey);
      for (int64_t r = 0; r < k; ++r) {
        const size_t j = order[static_cast<size_t>(r)];
        std::memcpy(vals.data() + at(r, k) * es, px + at(static_cast<int64_t>(j), len) * es, es);
        write_int(op.indices.type, idxs.data(), at(r, k), static_cast<int64_t>(j));
      }
    }
  std::memcpy(h[op.values], vals.data(), vals.size());
  std::memcpy(h[op.indices], idxs.data(), idxs.size());
}

// ---- comparisons, where, logical ---------------------------------------------------------

// Calls f(i, ia, ib, ic) for every element i of `out` in row-major order, with the offsets of the
// elements of a, b and c (up to three inputs, NumPy-broadcast to out; an unused input is out's own
// shape) that it reads.
template <class F>
void for_broadcast(const shape& out, const shape& a, const shape& b, const shape& c, F&& f) {
  const size_t r = out.rank();
  const auto sa = broadcast_strides(a, r), sb = broadcast_strides(b, r), sc = broadcast_strides(c, r);
  const auto n = static_cast<size_t>(out.elements());
  index_array idx{};
  int64_t ia = 0, ib = 0, ic = 0;
  for (size_t i = 0; i < n; ++i) {
    f(i, static_cast<size_t>(ia), static_cast<size_t>(ib), static_cast<size_t>(ic));
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      ia += sa[d];
      ib += sb[d];
      ic += sc[d];
      if (idx[d] < out[d]) break;
      ia -= sa[d] * idx[d];
      ib -= sb[d] * idx[d];
      ic -= sc[d] * idx[d];
      idx[d] = 0;
    }
  }
}

template <class T>
bool compare_values(kernels::compare_fn f, T a, T b) noexcept {
  // IEEE comparisons: every one with a NaN operand is false (C++'s operators on floats are).
  switch (f) {
    case kernels::compare_fn::equal: return a == b;
    case kernels::compare_fn::less: return a < b;
    case kernels::compare_fn::less_equal: return a <= b;
    case kernels::compare_fn::greater: return a > b;
    case kernels::compare_fn::greater_equal: return a >= b;
  }
  return false;
}

void run(const kernels::compare& op, const host_ptrs& h) {
  const std::byte* a = h[op.a];
  const std::byte* b = h[op.b];
  std::vector<std::uint8_t> y(static_cast<size_t>(op.y.shape.elements()));  // staged: y may overlap a or b
  const dtype t = op.a.type;
  // Floats widen to double exactly; integers compare as int64, which holds every integer dtype
  // exactly (u64 through order_key).
  for_broadcast(op.y.shape, op.a.shape, op.b.shape, op.y.shape, [&](size_t i, size_t ia, size_t ib, size_t) {
    y[i] = is_float(t) ? compare_values(op.fn, read_real<double>(t, a, ia), read_real<double>(t, b, ib))
                       : compare_values(op.fn, order_key(t, read_int(t, a, ia)), order_key(t, read_int(t, b, ib)));
  });
  std::memcpy(h[op.y], y.data(), y.size());
}

void run(const kernels::where& op, const host_ptrs& h) {
  const std::byte* c = h[op.cond];
  const std::byte* x = h[op.x];
  const std::byte* y = h[op.y];
  const size_t es = size_of(op.out.type);
  std::vector<std::byte> out(static_cast<size_t>(op.out.shape.elements()) * es);
  for_broadcast(op.out.shape, op.cond.shape, op.x.shape, op.y.shape, [&](size_t i, size_t ic, size_t ix, size_t iy) {
    const bool pick_x = read_int(dtype::boolean, c, ic) != 0;
    std::memcpy(out.data() + i * es, pick_x ? x + ix * es : y + iy * es, es);
  });
  std::memcpy(h[op.out], out.data(), out.size());
}

void run(const kernels::logical& op, const host_ptrs& h) {
  const std::byte* a = h[op.a];
  std::vector<std::uint8_t> y(static_cast<size_t>(op.y.shape.elements()));
  if (op.fn == kernels::logical_fn::not_) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = read_int(dtype::boolean, a, i) == 0;
  } else {
    const std::byte* b = h[op.b];
    for_broadcast(op.y.shape, op.a.shape, op.b.shape, op.y.shape, [&](size_t i, size_t ia, size_t ib, size_t) {
      const bool p = read_int(dtype::boolean, a, ia) != 0, q = read_int(dtype::boolean, b, ib) != 0;
      y[i] = op.fn == kernels::logical_fn::and_ ? (p && q) : op.fn == kernels::logical_fn::or_ ? (p || q) : (p != q);
    });
  }
  std::memcpy(h[op.y], y.data(), y.size());
}

void run(const kernels::float_class& op, const host_ptrs& h) {
  const std::byte* x = h[op.x];
  std::vector<std::uint8_t> y(static_cast<size_t>(op.y.shape.elements()));
  for (size_t i = 0; i < y.size(); ++i) {
    // Widening to double keeps NaN a NaN and an infinity of either sign an infinity.
    const double v = read_real<double>(op.x.type, x, i);
    y[i] = op.fn == kernels::float_class_fn::is_nan
               ? std::isnan(v)
               : std::isinf(v) && (v < 0 ? op.detect_negative : op.detect_positive);
  }
  std::memcpy(h[op.y], y.data(), y.size());
}

// ONNX's QuantizeLinear and DequantizeLinear as onnx/reference/ops/op_quantize_linear.py and
// op_dequantize_linear.py compute them. Quantize divides in x's dtype (float / float in NumPy is a
// float, rounded to f16 when both are f16), rounds half to even (np.rint), adds the zero point and
// clips to the integer range; a quotient past the range saturates (NumPy's astype(int32) of one
// past int32 is undefined; ONNX's spec says saturate) and NaN becomes the zero point.
// Dequantize: x.astype(float32) - zero_point is exact for int8 and uint8 and, for int32, NumPy
// promotes it to float64: so the difference and the product are taken in double from x rounded to
// float, and rounded once to y's dtype; for int8 and uint8 the double product is exact, so the
// result equals NumPy's float32 product.
void run(const kernels::quantize& op, const host_ptrs& h) {
  const std::byte* x = h[op.x];
  const std::byte* s = h[op.scale];
  const std::byte* zp = op.zero_point.shape.rank() == 0 ? nullptr : h[op.zero_point];
  const auto n = static_cast<size_t>(op.x.shape.elements());
  const bool per_axis = op.scale.shape.elements() != 1;
  size_t inner = 1, dim = 1;
  if (per_axis) {
    const auto a = static_cast<size_t>(op.axis);
    dim = static_cast<size_t>(op.x.shape[a]);
    for (size_t d = a + 1; d < op.x.shape.rank(); ++d) inner *= static_cast<size_t>(op.x.shape[d]);
  }
  const dtype ints = op.fn == kernels::quantize_fn::dequantize ? op.x.type : op.y.type;
  std::vector<std::byte> y(n * size_of(op.y.type));  // staged: y may overlap x
  for (size_t i = 0; i < n; ++i) {
    const size_t c = per_axis ? (i / inner) % dim : 0;
    const float scale = read_float(op.scale.type, s, c);
    if (op.fn == kernels::quantize_fn::requantize) {
      // One zero point for every element; int32 x float32 is float64 in NumPy, exact here.
      const double z = zp ? static_cast<double>(read_int(ints, zp, 0)) : 0.0;
      const double r = static_cast<double>(read_int(dtype::i32, x, i)) * static_cast<double>(scale) + z;
      write_int(op.y.type, y.data(), i, double_to_int(r, op.y.type));
      continue;
    }
    const int64_t z = zp ? read_int(ints, zp, c) : 0;
    if (op.fn == kernels::quantize_fn::quantize) {
      float q = read_float(op.x.type, x, i) / scale;
      if (op.x.type == op.scale.type) q = round_to(op.x.type, q);
      const double r =
          std::isnan(q) ? static_cast<double>(z) : round_even(static_cast<double>(q)) + static_cast<double>(z);
      write_int(op.y.type, y.data(), i, double_to_int(r, op.y.type));
    } else {
      write_float(op.y.type, y.data(), i, kernels::dequantize_element(read_int(ints, x, i), z, scale));
    }
  }
  std::memcpy(h[op.y], y.data(), y.size());
}

// ---- integer matmul and convolution ---------------------------------------------------------

// t - zero_point elementwise as int32 (the reference's astype(int32) then subtraction), the zero
// point (of t's dtype, `z` null when absent) broadcast from zp_shape to t's shape.
std::vector<std::int32_t> minus_zero_point(const tensor_desc& t, const std::byte* src, const shape& zp_shape,
                                           const std::byte* z) {
  std::vector<std::int32_t> out = load_i32(t, src);
  if (z == nullptr) return out;
  for_broadcast(t.shape, t.shape, zp_shape, t.shape, [&](size_t i, size_t, size_t iz, size_t) {
    out[i] -= static_cast<std::int32_t>(read_int(t.type, z, iz));
  });
  return out;
}

// Sums in uint32: two's complement wrap-around, what NumPy's int32 matmul and the cube's 32-bit
// accumulator give, with no signed overflow.
std::int32_t wrap_i32(std::uint32_t u) noexcept { return static_cast<std::int32_t>(u); }

void run(const kernels::integer_matmul& op, const host_ptrs& h) {
  const std::vector<std::int32_t> a = minus_zero_point(op.a, h[op.a], op.a_zero_point.shape, h[op.a_zero_point]);
  const std::vector<std::int32_t> b = minus_zero_point(op.b, h[op.b], op.b_zero_point.shape, h[op.b_zero_point]);
  const shape& ys = op.y.shape;
  const size_t ry = ys.rank(), ra = op.a.shape.rank(), rb = op.b.shape.rank();
  const auto m = static_cast<size_t>(ys[ry - 2]), n = static_cast<size_t>(ys[ry - 1]);
  const auto k = static_cast<size_t>(op.a.shape[ra - 1]);
  // The batch dimensions alone, as shapes, for the matrices' broadcast offsets.
  shape batch, ab, bb;
  for (size_t i = 0; i + 2 < ry; ++i) batch.push_back(ys[i]);
  for (size_t i = 0; i + 2 < ra; ++i) ab.push_back(op.a.shape[i]);
  for (size_t i = 0; i + 2 < rb; ++i) bb.push_back(op.b.shape[i]);
  if (batch.rank() == 0) batch.push_back(1);
  std::vector<std::int32_t> y(static_cast<size_t>(ys.elements()));
  for_broadcast(batch, ab, bb, batch, [&](size_t e, size_t ea, size_t eb, size_t) {
    const std::int32_t* am = a.data() + ea * m * k;
    const std::int32_t* bm = b.data() + eb * k * n;
    std::int32_t* ym = y.data() + e * m * n;
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        std::uint32_t acc = 0;
        for (size_t q = 0; q < k; ++q)
          acc += static_cast<std::uint32_t>(am[i * k + q]) * static_cast<std::uint32_t>(bm[q * n + j]);
        ym[i * n + j] = wrap_i32(acc);
      }
  });
  store_i32(h[op.y], y);
}

void run(const kernels::integer_conv2d& op, const host_ptrs& h) {
  const std::vector<std::int32_t> x = minus_zero_point(op.x, h[op.x], op.x_zero_point.shape, h[op.x_zero_point]);
  // w_zero_point is one value or one per output channel: as [Co, 1, 1, 1] it broadcasts to w.
  const shape& wz = op.w_zero_point.shape;
  const std::vector<std::int32_t> w =
      minus_zero_point(op.w, h[op.w], wz.rank() == 1 ? shape{wz[0], 1, 1, 1} : wz, h[op.w_zero_point]);
  const auto dim = [](const tensor_desc& t, size_t i) { return static_cast<int64_t>(t.shape[i]); };
  const int64_t nb = dim(op.x, 0), ci = dim(op.x, 1), hi = dim(op.x, 2), wi = dim(op.x, 3);
  const int64_t co = dim(op.w, 0), cig = dim(op.w, 1), kh = dim(op.w, 2), kw = dim(op.w, 3);
  const int64_t ho = dim(op.y, 2), wo = dim(op.y, 3), cog = co / op.groups;
  std::vector<std::int32_t> y(static_cast<size_t>(op.y.shape.elements()));
  size_t at = 0;
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t r = 0; r < ho; ++r)
        for (int64_t c = 0; c < wo; ++c) {
          const int64_t g = o / cog;
          std::uint32_t acc = 0;
          for (int64_t i = 0; i < cig; ++i)
            for (int64_t u = 0; u < kh; ++u) {
              const int64_t yy = r * op.stride[0] - op.pad[0] + u * op.dilation[0];
              if (yy < 0 || yy >= hi) continue;  // padding: the difference there is 0
              for (int64_t v = 0; v < kw; ++v) {
                const int64_t xx = c * op.stride[1] - op.pad[1] + v * op.dilation[1];
                if (xx < 0 || xx >= wi) continue;
                const auto xv = x[static_cast<size_t>(((n * ci + g * cig + i) * hi + yy) * wi + xx)];
                const auto wv = w[static_cast<size_t>(((o * cig + i) * kh + u) * kw + v)];
                acc += static_cast<std::uint32_t>(xv) * static_cast<std::uint32_t>(wv);
              }
            }
          y[at++] = wrap_i32(acc);
        }
  store_i32(h[op.y], y);
}

// ---- dft -----------------------------------------------------------------------------------

// ONNX's DFT and STFT computed directly in double: each output k of a transform of length n sums
// x[j] (j < n and inside x; the rest is the zero padding) times e^(-+2 pi i j k / n), the angle
// taken from j k mod n so that it stays exact in the integers and small in radians.
void run(const kernels::dft& op, const host_ptrs& h) {
  const std::vector<double> x = load<double>(op.x, h[op.x]);
  const std::vector<double> win = h.present(op.window) ? load<double>(op.window, h[op.window]) : std::vector<double>{};
  const shape& xs = op.x.shape;
  const size_t r = xs.rank();
  const auto comps = static_cast<size_t>(xs[r - 1]);  // 1 real, 2 complex
  const auto n = static_cast<std::uint64_t>(op.length);
  const bool stft = op.frame_step > 0;
  const auto axis = static_cast<size_t>(op.axis);
  // x as [outer, L, inner] around the axis, inner counting the complex parts.
  size_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= static_cast<size_t>(xs[d]);
  for (size_t d = axis + 1; d < r; ++d) inner *= static_cast<size_t>(xs[d]);
  const auto len = static_cast<size_t>(xs[axis]);
  const size_t lanes = inner / comps;  // transforms side by side per outer index
  const auto bins = static_cast<size_t>(op.onesided ? op.length / 2 + 1 : op.length);
  const size_t frames = stft ? (len - static_cast<size_t>(n)) / static_cast<size_t>(op.frame_step) + 1 : 1;
  const double sign = op.inverse ? 1.0 : -1.0;
  const double scale = op.inverse ? 1.0 / static_cast<double>(n) : 1.0;
  const size_t terms = std::min<size_t>(static_cast<size_t>(n), stft ? static_cast<size_t>(n) : len);
  std::vector<double> y(static_cast<size_t>(op.y.shape.elements()));
  size_t at = 0;
  // y is [outer, frames, bins, lanes, 2] for STFT (lanes 1) and [outer, bins, lanes, 2] for DFT.
  for (size_t o = 0; o < outer; ++o)
    for (size_t f = 0; f < frames; ++f)
      for (size_t k = 0; k < bins; ++k)
        for (size_t l = 0; l < lanes; ++l) {
          double re = 0, im = 0;
          const size_t start = f * static_cast<size_t>(op.frame_step);
          for (size_t j = 0; j < terms; ++j) {
            const size_t xi = (o * len + start + j) * inner + l * comps;
            double xr = x[xi], xim = comps == 2 ? x[xi + 1] : 0.0;
            if (!win.empty()) {
              xr *= win[j];
              xim *= win[j];
            }
            const std::uint64_t jk = (static_cast<std::uint64_t>(j) * k) % n;
            const double angle = sign * 2.0 * std::numbers::pi * static_cast<double>(jk) / static_cast<double>(n);
            const double c = std::cos(angle), s = std::sin(angle);
            re += xr * c - xim * s;
            im += xr * s + xim * c;
          }
          y[at++] = re * scale;
          y[at++] = im * scale;
        }
  store<double>(op.y, h[op.y], y);
}

void run(const kernels::cast& op, const host_ptrs& h) {
  const auto n = static_cast<size_t>(op.x.shape.elements());
  std::vector<std::byte> out(n * size_of(op.y.type));  // staged: x and y may overlap
  const std::byte* src = h[op.x];
  for (size_t i = 0; i < n; ++i) cast_element(op.x.type, src, op.y.type, out.data(), i, op.mode);
  std::memcpy(h[op.y], out.data(), out.size());
}

template <class R>
void run(const kernels::sgd_update& op, const host_tensors<R>& h) {
  auto p = h.load(op.param);
  const auto g = h.load(op.grad);
  const bool buffered = h.present(op.momentum_buffer);
  std::vector<R> buf = buffered ? h.load(op.momentum_buffer) : std::vector<R>{};
  for (size_t i = 0; i < p.size(); ++i) {
    R d = g[i] + op.weight_decay * p[i];
    if (buffered) {
      buf[i] = op.momentum * buf[i] + d;
      d = buf[i];
    }
    p[i] -= op.lr * d;
  }
  h.store(op.param, p);
  if (buffered) h.store(op.momentum_buffer, buf);
}

// ---- recurrent ---------------------------------------------------------------------------

// The ONNX operators' default (alpha, beta) of an activation that takes parameters (the others
// ignore them).
std::pair<float, float> rnn_default_params(kernels::rnn_activation a) noexcept {
  using kernels::rnn_activation;
  switch (a) {
    case rnn_activation::leaky_relu: return {0.01f, 0.0f};
    case rnn_activation::hard_sigmoid: return {0.2f, 0.5f};
    case rnn_activation::affine: return {1.0f, 0.0f};
    default: return {1.0f, 1.0f};  // ThresholdedRelu, Elu, ScaledTanh
  }
}

// The activations of the ONNX RNN spec's list, as the spec defines them with parameters alpha
// and beta (ThresholdedRelu: alpha is the threshold; ScaledTanh: alpha * tanh(beta * v)).
// Softplus is ln(1 + e^v) in the form that does not overflow for large v.
float rnn_activate(kernels::rnn_activation a, float v, float alpha, float beta) noexcept {
  using kernels::rnn_activation;
  switch (a) {
    case rnn_activation::sigmoid: return 1.0f / (1.0f + std::exp(-v));
    case rnn_activation::tanh: return std::tanh(v);
    case rnn_activation::relu: return std::max(v, 0.0f);
    case rnn_activation::softsign: return v / (1.0f + std::fabs(v));
    case rnn_activation::softplus: return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
    case rnn_activation::leaky_relu: return v >= 0 ? v : alpha * v;
    case rnn_activation::thresholded_relu: return v > alpha ? v : 0.0f;
    case rnn_activation::hard_sigmoid: return std::clamp(alpha * v + beta, 0.0f, 1.0f);
    case rnn_activation::elu: return v >= 0 ? v : alpha * std::expm1(v);
    case rnn_activation::affine: return alpha * v + beta;
    case rnn_activation::scaled_tanh: return alpha * std::tanh(beta * v);
  }
  return v;
}

// ONNX's RNN, GRU and LSTM as the spec's equations state them and ONNX's reference
// implementations compute them (onnx/reference/ops/op_rnn.py, op_gru.py, op_lstm.py): each
// step's gates are x_t W^T + H R^T + (Wb + Rb) in that order of additions, each activation's
// input clipped to [-clip, clip]. A batch entry's steps past its sequence length are masked as
// the reference masks them: y stays zero and the state keeps its value, so a reverse pass starts
// at the entry's last valid step. Computed in float, the state carried in float from step to
// step, y, y_h and y_c rounded once to their dtype. A length outside [0, seq] is data: the task
// fails naming it, nothing written.
template <class R>
data_fault run(const kernels::recurrent& op, const host_tensors<R>& launch) {
  // In float whatever the launch computes in: validation admits no f64 operand.
  const host_tensors<float> h{launch};
  using kernels::rnn_cell;
  const bool bm = op.batch_major;
  const auto seq = static_cast<size_t>(op.x.shape[bm ? 1 : 0]), batch = static_cast<size_t>(op.x.shape[bm ? 0 : 1]);
  const auto input = static_cast<size_t>(op.x.shape[2]), hidden = static_cast<size_t>(op.r.shape[2]);
  const size_t gates = op.cell == rnn_cell::rnn ? 1 : op.cell == rnn_cell::gru ? 3 : 4;
  const size_t per_dir = op.cell == rnn_cell::rnn ? 1 : op.cell == rnn_cell::gru ? 2 : 3;
  const size_t dirs = op.direction == kernels::rnn_direction::bidirectional ? 2 : 1;
  const size_t gh = gates * hidden;
  std::vector<std::int32_t> lens(batch, static_cast<std::int32_t>(seq));
  if (h.present(op.sequence_lens)) {
    lens = load_i32(op.sequence_lens, h[op.sequence_lens]);
    for (size_t i = 0; i < batch; ++i)
      if (lens[i] < 0 || static_cast<size_t>(lens[i]) > seq)
        return {make_error_code(errc::invalid_argument), "sequence_lens[" + std::to_string(i) +
                                                             "] = " + std::to_string(lens[i]) + " is outside [0, " +
                                                             std::to_string(seq) + "] (x's sequence length)"};
  }
  const auto x = h.load(op.x), w = h.load(op.w), r = h.load(op.r);
  const std::vector<float> b = h.present(op.b) ? h.load(op.b) : std::vector<float>{};
  const size_t bcols = b.empty() ? 0 : static_cast<size_t>(op.b.shape[1]);
  // The states in [dirs][batch][hidden] order whatever the layout.
  const auto state_at = [&](size_t d, size_t n) { return bm ? (n * dirs + d) * hidden : (d * batch + n) * hidden; };
  const auto initial = [&](const tensor_desc& t, bool given) {
    std::vector<float> s(dirs * batch * hidden, 0.0f);
    if (!given) return s;
    const auto v = h.load(t);
    for (size_t d = 0; d < dirs; ++d)
      for (size_t n = 0; n < batch; ++n)
        std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(state_at(d, n)), hidden,
                    s.begin() + static_cast<std::ptrdiff_t>((d * batch + n) * hidden));
    return s;
  };
  std::vector<float> hs = initial(op.y_h, op.has(op.initial_h)), cs = initial(op.y_c, op.has(op.initial_c));
  std::vector<float> y(seq * dirs * batch * hidden, 0.0f);  // [seq][dirs][batch][hidden]
  const float clip = op.clip;
  std::vector<float> xw(gh), hr(gh), rh(hidden);
  for (size_t d = 0; d < dirs; ++d) {
    const bool backward = op.direction == kernels::rnn_direction::reverse || d == 1;
    const float* wd = w.data() + d * gh * input;
    const float* rd = r.data() + d * gh * hidden;
    const float* wb = b.empty() ? nullptr : b.data() + d * bcols;
    const float* rb = wb ? wb + gh : nullptr;
    const bool with_params = op.has(op.activation_params);
    const size_t extra = with_params ? static_cast<size_t>(kernels::recurrent::param_columns) : 0;
    const float* peep = wb && bcols - extra > 2 * gh ? wb + 2 * gh : nullptr;  // P: i, o, f
    std::array<std::pair<float, float>, 3> params{};
    for (size_t k = 0; k < per_dir; ++k)
      params[k] = with_params ? std::pair{wb[bcols - extra + 2 * k], wb[bcols - extra + 2 * k + 1]}
                              : rnn_default_params(op.activations[d * per_dir + k]);
    const auto act = [&](size_t which, float v) {
      return rnn_activate(op.activations[d * per_dir + which], std::clamp(v, -clip, clip), params[which].first,
                          params[which].second);
    };
    const auto bias = [&](size_t j) { return wb ? wb[j] + rb[j] : 0.0f; };
    for (size_t n = 0; n < batch; ++n) {
      float* hv = hs.data() + (d * batch + n) * hidden;
      float* cv = cs.data() + (d * batch + n) * hidden;
      const auto len = static_cast<size_t>(lens[n]);
      for (size_t step = 0; step < len; ++step) {
        const size_t t = backward ? len - 1 - step : step;
        const float* xt = x.data() + (bm ? n * seq + t : t * batch + n) * input;
        for (size_t j = 0; j < gh; ++j) {
          float a = 0, c = 0;
          for (size_t k = 0; k < input; ++k) a += wd[j * input + k] * xt[k];
          for (size_t k = 0; k < hidden; ++k) c += rd[j * hidden + k] * hv[k];
          xw[j] = a;
          hr[j] = c;
        }
        if (op.cell == rnn_cell::rnn) {
          for (size_t j = 0; j < hidden; ++j) hv[j] = act(0, xw[j] + hr[j] + bias(j));
        } else if (op.cell == rnn_cell::gru) {
          // z, r, h: the reset gate applies to H before R's product, or to the product with its
          // bias (linear_before_reset).
          std::vector<float> z(hidden), rg(hidden);
          for (size_t j = 0; j < hidden; ++j) {
            z[j] = act(0, xw[j] + hr[j] + bias(j));
            rg[j] = act(0, xw[hidden + j] + hr[hidden + j] + bias(hidden + j));
          }
          const bool linear = op.has(op.linear_before_reset);
          if (!linear) {
            for (size_t k = 0; k < hidden; ++k) rh[k] = rg[k] * hv[k];
            for (size_t j = 0; j < hidden; ++j) {
              float c = 0;
              for (size_t k = 0; k < hidden; ++k) c += rd[(2 * hidden + j) * hidden + k] * rh[k];
              hr[2 * hidden + j] = c;
            }
          }
          for (size_t j = 0; j < hidden; ++j) {
            const size_t at = 2 * hidden + j;
            const float wbh = wb ? wb[at] : 0.0f, rbh = wb ? rb[at] : 0.0f;
            const float cand =
                linear ? act(1, xw[at] + rg[j] * (hr[at] + rbh) + wbh) : act(1, xw[at] + hr[at] + rbh + wbh);
            hv[j] = (1 - z[j]) * cand + z[j] * hv[j];
          }
        } else {
          // i, o, f, c; the peepholes see the previous cell state (i, f) and the new one (o).
          for (size_t j = 0; j < hidden; ++j) {
            const auto pre = [&](size_t g) { return xw[g * hidden + j] + hr[g * hidden + j] + bias(g * hidden + j); };
            const float p_i = peep ? peep[j] : 0.0f, p_o = peep ? peep[hidden + j] : 0.0f;
            const float p_f = peep ? peep[2 * hidden + j] : 0.0f;
            const float ig = act(0, pre(0) + p_i * cv[j]);
            const float fg = op.has(op.input_forget) ? 1 - ig : act(0, pre(2) + p_f * cv[j]);
            const float cand = act(1, pre(3));
            const float c = fg * cv[j] + ig * cand;
            const float og = act(0, pre(1) + p_o * c);
            cv[j] = c;
            hv[j] = og * act(2, c);
          }
        }
        std::copy_n(hv, hidden, y.begin() + static_cast<std::ptrdiff_t>(((t * dirs + d) * batch + n) * hidden));
      }
    }
  }
  if (h.present(op.y)) {
    if (!bm) {
      h.store(op.y, y);
    } else {
      std::vector<float> out(y.size());
      for (size_t t = 0; t < seq; ++t)
        for (size_t d = 0; d < dirs; ++d)
          for (size_t n = 0; n < batch; ++n)
            std::copy_n(y.begin() + static_cast<std::ptrdiff_t>(((t * dirs + d) * batch + n) * hidden), hidden,
                        out.begin() + static_cast<std::ptrdiff_t>(((n * seq + t) * dirs + d) * hidden));
      h.store(op.y, out);
    }
  }
  const auto store_state = [&](const tensor_desc& t, const std::vector<float>& s) {
    if (!h.present(t)) return;
    std::vector<float> out(s.size());
    for (size_t d = 0; d < dirs; ++d)
      for (size_t n = 0; n < batch; ++n)
        std::copy_n(s.begin() + static_cast<std::ptrdiff_t>((d * batch + n) * hidden), hidden,
                    out.begin() + static_cast<std::ptrdiff_t>(state_at(d, n)));
    h.store(t, out);
  };
  store_state(op.y_h, hs);
  store_state(op.y_c, cs);
  return {};
}

// ONNX's Det as numpy.linalg.det computes it (LAPACK's getrf): each matrix factorised P A = L U
// by Gaussian elimination with partial pivoting, in double whatever x's dtype, the determinant
// the product of U's diagonal with the sign of the row swaps, rounded once to y's dtype. A zero
// pivot column makes the matrix singular: 0.
void run(const kernels::det& op, const host_ptrs& h) {
  const shape& s = op.x.shape;
  const auto m = static_cast<size_t>(s[s.rank() - 1]);
  const auto count = static_cast<size_t>(op.y.shape.elements());  // 1 for a rank-0 y
  const std::byte* px = h[op.x];
  std::vector<double> a(m * m), dets(count);
  for (size_t b = 0; b < count; ++b) {
    for (size_t i = 0; i < m * m; ++i) a[i] = read_real<double>(op.x.type, px, b * m * m + i);
    double d = 1.0;
    for (size_t c = 0; c < m; ++c) {
      // The row with the largest magnitude in column c at or below the diagonal (the first on a
      // tie); NaN is never larger, so a column of NaN keeps its diagonal row and NaN flows on.
      size_t p = c;
      for (size_t r = c + 1; r < m; ++r)
        if (std::fabs(a[r * m + c]) > std::fabs(a[p * m + c])) p = r;
      if (a[p * m + c] == 0.0) {
        d = 0.0;
        break;
      }
      if (p != c) {
        std::swap_ranges(a.begin() + static_cast<std::ptrdiff_t>(p * m),
                         a.begin() + static_cast<std::ptrdiff_t>(p * m + m),
                         a.begin() + static_cast<std::ptrdiff_t>(c * m));
        d = -d;
      }
      const double pivot = a[c * m + c];
      d *= pivot;
      for (size_t r = c + 1; r < m; ++r) {
        const double f = a[r * m + c] / pivot;
        for (size_t k = c + 1; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
      }
    }
    dets[b] = d;
  }
  std::byte* py = h[op.y];
  for (size_t b = 0; b < count; ++b) write_real<double>(op.y.type, py, b, dets[b]);
}

// ONNX's ReverseSequence (onnx/reference/ops/op_reverse_sequence.py): along time_axis, entry t of
// batch entry b comes from len_b - 1 - t while t < len_b and stays in place after. Every length
// is checked before y is written.
data_fault run(const kernels::reverse_sequence& op, const host_ptrs& h) {
  const shape& s = op.x.shape;
  const auto ba = static_cast<size_t>(op.batch_axis), ta = static_cast<size_t>(op.time_axis);
  const int64_t steps = s[ta];
  const auto batch = static_cast<size_t>(s[ba]);
  std::vector<int64_t> lens(batch);
  for (size_t b = 0; b < batch; ++b) {
    lens[b] = read_int(dtype::i64, h[op.sequence_lens], b);
    if (lens[b] < 0 || lens[b] > steps)
      return {make_error_code(errc::invalid_argument),
              "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(lens[b]) + " is outside [0, " +
                  std::to_string(steps) + "] (x's time axis " + std::to_string(ta) + " has " + std::to_string(steps) +
                  " steps)"};
  }
  // The first two axes are batch and time in some order; the rest are one block of `inner`
  // elements moved whole.
  const int64_t inner = s.elements() / (s[0] * s[1]);
  const size_t es = size_of(op.x.type);
  const std::byte* src = h[op.x];
  int64_t i0 = 0, i1 = 0, k = 0;
  copy_elements(h, op.y, [&] {
    const int64_t b = ba == 0 ? i0 : i1, t = ba == 0 ? i1 : i0;
    const int64_t from = t < lens[static_cast<size_t>(b)] ? lens[static_cast<size_t>(b)] - 1 - t : t;
    const int64_t j0 = ta == 0 ? from : i0, j1 = ta == 0 ? i1 : from;
    const std::byte* p = src + static_cast<size_t>((j0 * s[1] + j1) * inner + k) * es;
    if (++k == inner) {
      k = 0;
      if (++i1 == s[1]) {
        i1 = 0;
        ++i0;
      }
    }
    return p;
  });
  return {};
}

// ONNX's LRN, as its reference computes it (onnx/reference/ops/op_lrn.py): each channel's sum of
// squares over its window, ascending, then x / (bias + alpha / size * sum)^beta, in R.
template <class R>
void run(const kernels::lrn& op, const host_tensors<R>& h) {
  const shape& s = op.x.shape;
  const int64_t n = s[0], c = s[1], inner = s.elements() / (n * c);
  const int64_t before = (op.size - 1) / 2, after = op.size - 1 - before;
  const auto x = h.load(op.x);
  std::vector<R> y(x.size());
  const R scale = static_cast<R>(op.alpha) / static_cast<R>(op.size);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < inner; ++i) {
        R sum = R{0.0};
        for (int64_t k = std::max<int64_t>(0, ch - before); k <= std::min(c - 1, ch + after); ++k) {
          const R v = x[static_cast<size_t>((b * c + k) * inner + i)];
          sum += v * v;
        }
        const auto at = static_cast<size_t>((b * c + ch) * inner + i);
        y[at] = x[at] / std::pow(static_cast<R>(op.bias) + scale * sum, static_cast<R>(op.beta));
      }
  h.store(op.y, y);
}

// ONNX's RoiAlign, as onnx/reference/ops/op_roi_align.py computes it (MaskRCNN's ROIAlign): per
// ROI, every sample's 4 bilinear neighbours and weights (a sample more than one element past an
// edge has weight 0 everywhere; one within clamps to the edge), then per channel and bin the
// samples averaged or, in max mode, the largest of max(w1 * x1, .., w4 * x4) over them. That max
// of weighted neighbours rather than of the interpolated values is the reference's behaviour
// (and onnxruntime's), not bilinear max pooling: it is matched, as the node tests expect it.
// Coordinates and sums in double, rounded to y's dtype once. A ROI coordinate that is not finite,
// a batch index outside [0, N) or a ROI whose adaptive sampling grid is absurdly large fails the
// task, y unwritten.
template <class R>
data_fault run(const kernels::roi_align& op, const host_tensors<R>& h) {
  const shape& xs = op.x.shape;
  const int64_t batches = xs[0], channels = xs[1], height = xs[2], width = xs[3];
  const int64_t out_h = op.y.shape[2], out_w = op.y.shape[3];
  const int64_t rois = op.rois.shape[0];
  const auto x = h.load(op.x);
  const auto roi = h.load(op.rois);
  const std::byte* batch_of = h[op.batch_indices];
  std::vector<R> y(static_cast<size_t>(op.y.shape.elements()));
  const bool narrow = op.y.type != dtype::f32;
  struct sample {
    std::array<int64_t, 4> at;
    std::array<double, 4> w;
  };
  std::vector<sample> samples;
  const double scale = op.spatial_scale;
  const double offset = op.half_pixel ? 0.5 : 0.0;  // not rounded: the reference stresses it
  for (int64_t n = 0; n < rois; ++n) {
    const int64_t b = read_int(op.batch_indices.type, batch_of, static_cast<size_t>(n));
    if (b < 0 || b >= batches)
      return {make_error_code(errc::invalid_argument), "batch_indices[" + std::to_string(n) +
                                                           "] = " + std::to_string(b) + " is not a batch of x in [0, " +
                                                           std::to_string(batches) + ")"};
    std::array<double, 4> c{};
    for (size_t k = 0; k < 4; ++k) {
      c[k] = static_cast<double>(roi[static_cast<size_t>(n) * 4 + k]);
      if (!std::isfinite(c[k]))
        return {make_error_code(errc::invalid_argument), "rois[" + std::to_string(n) + "][" + std::to_string(k) +
                                                             "] = " + std::to_string(c[k]) +
                                                             " is not a finite coordinate"};
    }
    const double start_w = c[0] * scale - offset, start_h = c[1] * scale - offset;
    double roi_w = c[2] * scale - offset - start_w, roi_h = c[3] * scale - offset - start_h;
    if (!op.half_pixel) {  // malformed ROIs forced to 1 x 1
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(out_h), bin_w = roi_w / static_cast<double>(out_w);
    // The reference's int(): toward zero; an empty or inverted ROI has no samples.
    const double grid_hd = op.sampling_ratio > 0 ? op.sampling_ratio : std::max(0.0, std::ceil(bin_h));
    const double grid_wd = op.sampling_ratio > 0 ? op.sampling_ratio : std::max(0.0, std::ceil(bin_w));
    if (!std::isfinite(grid_hd * grid_wd) ||
        grid_hd * grid_wd * static_cast<double>(out_h) * static_cast<double>(out_w) > double{1 << 26})
      return {make_error_code(errc::invalid_argument),
              "ROI " + std::to_string(n) + " samples a grid of " + std::to_string(grid_hd) + " x " +
                  std::to_string(grid_wd) +
                  " per output bin (sampling_ratio 0 takes it from the ROI's extent): "
                  "more than 2^26 samples in all"};
    const auto grid_h = static_cast<int64_t>(grid_hd), grid_w = static_cast<int64_t>(grid_wd);
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
    samples.clear();
    for (int64_t ph = 0; ph < out_h; ++ph)
      for (int64_t pw = 0; pw < out_w; ++pw)
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const double yy = start_h + static_cast<double>(ph) * bin_h +
                            (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            double sx = start_w + static_cast<double>(pw) * bin_w +
                        (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
            double sy = yy;
            if (sy < -1.0 || sy > static_cast<double>(height) || sx < -1.0 || sx > static_cast<double>(width)) {
              samples.push_back({{0, 0, 0, 0}, {0, 0, 0, 0}});
              continue;
            }
            sy = std::max(sy, 0.0);
            sx = std::max(sx, 0.0);
            auto y_low = static_cast<int64_t>(sy), x_low = static_cast<int64_t>(sx);
            int64_t y_high = y_low + 1, x_high = x_low + 1;
            if (y_low >= height - 1) {
              y_high = y_low = height - 1;
              sy = static_cast<double>(y_low);
            }
            if (x_low >= width - 1) {
              x_high = x_low = width - 1;
              sx = static_cast<double>(x_low);
            }
            const double ly = sy - static_cast<double>(y_low), lx = sx - static_cast<double>(x_low);
            const double hy = 1.0 - ly, hx = 1.0 - lx;
            samples.push_back(
                {{y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high},
                 {hy * hx, hy * lx, ly * hx, ly * lx}});
          }
        }
    const auto per_bin = static_cast<size_t>(grid_h * grid_w);
    for (int64_t ch = 0; ch < channels; ++ch) {
      const size_t base = static_cast<size_t>((b * channels + ch) * height * width);
      const auto weighted = [&](const sample& s, size_t k) {
        return s.w[k] * static_cast<double>(x[base + static_cast<size_t>(s.at[k])]);
      };
      for (int64_t bin = 0; bin < out_h * out_w; ++bin) {
        const sample* s = samples.data() + static_cast<size_t>(bin) * per_bin;
        double v = 0;
        if (!op.max_mode) {
          for (size_t i = 0; i < per_bin; ++i)
            v += weighted(s[i], 0) + weighted(s[i], 1) + weighted(s[i], 2) + weighted(s[i], 3);
          v /= count;
        } else {
          for (size_t i = 0; i < per_bin; ++i) {
            const double m = std::max({weighted(s[i], 0), weighted(s[i], 1), weighted(s[i], 2), weighted(s[i], 3)});
            v = i == 0 ? m : std::max(v, m);
          }
        }
        y[static_cast<size_t>((n * channels + ch) * out_h * out_w + bin)] = from_double<R>(narrow, v);
      }
    }
  }
  h.store(op.y, y);
  return {};
}

void run(const kernels::fixed&, const host_ptrs&) {}

}  // namespace

std::error_code run_reference(const kernel_desc& k, memory_view& mem, device_id dev) {
  return run_reference(k, mem, dev, nullptr);
}

std::error_code run_reference(const kernel_desc& k, memory_view& mem, device_id dev, std::string* why) {
  if (auto ec = validate(k)) return ec;
  const operand_list ops = operands(k.op);
  std::array<std::byte*, 8> ptrs{};
  bool any = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const tensor_desc& t = *ops.items[i].tensor;
    if (t.data == nullptr) continue;
    any = true;
    ptrs[i] = mem.translate(dev, t.data, t.bytes());
    if (ptrs[i] == nullptr) return make_error_code(errc::invalid_pointer);
  }
  if (!any) return {};  // timing-only
  // Most kernels cannot fail once validated; one whose input data can be wrong (a gather's
  // indices) returns the error, which fails the task, with what was wrong in words when it can
  // say.
  const auto launch = [&](const auto& h) {
    return std::visit(
        [&](const auto& o) -> std::error_code {
          using result = decltype(run(o, h));
          if constexpr (std::is_same_v<result, data_fault>) {
            data_fault f = run(o, h);
            if (f.ec && why) *why = std::move(f.why);
            return f.ec;
          } else if constexpr (std::is_same_v<result, std::error_code>) {
            return run(o, h);
          } else {
            run(o, h);
            return {};
          }
        },
        k.op);
  };
  // A launch with an f64 operand computes in double throughout, every other one in float.
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops.items[i].tensor->type == dtype::f64) return launch(host_tensors<double>(ops, ptrs));
  return launch(host_tensors<float>(ops, ptrs));
}

}  // namespace npurt::sim
