// Reference kernels on integers and the operators HF exports compute index math with: integer
// elementwise (wrap-around, truncating division, ONNX's Mod in both modes, a zero divisor failing
// the run), cumsum and reduce prod. The expected values come from 128-bit arithmetic reduced modulo
// 2^n by hand, and from numpy's definitions (floor division for Python's %), never from the
// kernels' own integer paths.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;

namespace {

__extension__ typedef __int128 i128;  // exact products of two 64-bit values

int intk_bits(dtype t) { return t == dtype::i64 ? 64 : t == dtype::i32 ? 32 : 8; }
bool intk_signed(dtype t) { return t != dtype::u8; }

// v reduced modulo 2^n into the dtype's range: what two's complement wrap-around gives.
i128 intk_wrap(dtype t, i128 v) {
  const i128 m = i128{1} << intk_bits(t);
  i128 r = v % m;
  if (r < 0) r += m;
  if (intk_signed(t) && r >= m / 2) r -= m;
  return r;
}

// Exact integer elements, i64 ones to their extremes (a double is not exact past 2^53).
void intk_set(tensor& x, std::size_t i, std::int64_t v) {
  switch (x.desc.type) {
    case dtype::i64: std::memcpy(x.bytes.data() + 8 * i, &v, 8); break;
    case dtype::i32: {
      const auto b = static_cast<std::int32_t>(v);
      std::memcpy(x.bytes.data() + 4 * i, &b, 4);
      break;
    }
    default: x.set(i, static_cast<double>(v)); break;
  }
}
std::int64_t intk_get(const tensor& x, std::size_t i) {
  if (x.desc.type == dtype::i64) {
    std::int64_t v;
    std::memcpy(&v, x.bytes.data() + 8 * i, 8);
    return v;
  }
  return static_cast<std::int64_t>(x.get(i));
}

// The reference of one binary function, or false where the run must fail (a zero divisor).
bool intk_ref(k::eltwise_fn f, dtype t, i128 a, i128 b, i128& out) {
  using F = k::eltwise_fn;
  switch (f) {
    case F::add: out = intk_wrap(t, a + b); return true;
    case F::sub: out = intk_wrap(t, a - b); return true;
    case F::mul: out = intk_wrap(t, a * b); return true;
    case F::max: out = a > b ? a : b; return true;
    case F::min: out = a < b ? a : b; return true;
    case F::div:
      if (b == 0) return false;
      out = intk_wrap(t, a / b);  // C and 128-bit division truncate toward zero
      return true;
    case F::fmod:
      if (b == 0) return false;
      out = a - b * (a / b);  // C's fmod: the dividend's sign
      return true;
    case F::mod: {
      if (b == 0) return false;
      // numpy.mod / Python's %: a - b * floor(a / b).
      i128 q = a / b;
      if (q * b != a && ((a < 0) != (b < 0))) q -= 1;
      out = a - b * q;
      return true;
    }
    default: return false;
  }
}

// A value anywhere in the dtype's range: 64 random bits (int_draw gives 31 at a time, so four
// 16-bit pieces) reduced into the dtype, extremes included now and then.
std::int64_t intk_draw(int_draw& next, dtype t) {
  const std::int64_t pick = next(0, 15);
  const i128 top = i128{1} << (intk_bits(t) - (intk_signed(t) ? 1 : 0));
  if (pick == 0) return static_cast<std::int64_t>(top - 1);                      // the largest value
  if (pick == 1) return intk_signed(t) ? static_cast<std::int64_t>(-top) : 0;  // the smallest
  std::uint64_t u = 0;
  for (int k = 0; k < 4; ++k) u = (u << 16) | static_cast<std::uint64_t>(next(0, 0xffff));
  return static_cast<std::int64_t>(intk_wrap(t, static_cast<i128>(static_cast<std::int64_t>(u))));
}

// The shape a reduction of s over the axes in mask gives (ONNX's keepdims): a full reduction
// without keepdims is one element, as the kernel holds it.
shape intk_reduced(const shape& s, std::uint32_t mask, bool keep) {
  shape ys;
  for (std::size_t d = 0; d < s.rank(); ++d)
    if (!((mask >> d) & 1u)) ys.push_back(s[d]);
    else if (keep) ys.push_back(1);
  if (ys.rank() == 0) ys.push_back(1);
  return ys;
}

int intk_run_binary(k::eltwise_fn f, const tensor& a, const tensor& b, tensor& y) {
  return run(k::elementwise{f, a.desc, b.desc, y.desc});
}

}  // namespace

TEST_CASE("integer add, sub, mul wrap modulo 2^n at the extremes", "[kernels][int]") {
  constexpr auto mx = std::numeric_limits<std::int64_t>::max(), mn = std::numeric_limits<std::int64_t>::min();
  tensor a({4}, dtype::i64), b({4}, dtype::i64), y({4}, dtype::i64);
  const std::int64_t av[] = {mx, mn, mx, mn}, bv[] = {1, -1, 2, -1};
  for (std::size_t i = 0; i < 4; ++i) {
    intk_set(a, i, av[i]);
    intk_set(b, i, bv[i]);
  }
  REQUIRE(intk_run_binary(k::eltwise_fn::add, a, b, y) == 0);
  CHECK(intk_get(y, 0) == mn);  // MAX + 1
  CHECK(intk_get(y, 1) == mx);  // MIN + -1
  REQUIRE(intk_run_binary(k::eltwise_fn::sub, a, b, y) == 0);
  CHECK(intk_get(y, 0) == mx - 1);
  CHECK(intk_get(y, 1) == mn + 1);
  CHECK(intk_get(y, 2) == mx - 2);
  REQUIRE(intk_run_binary(k::eltwise_fn::mul, a, b, y) == 0);
  CHECK(intk_get(y, 0) == mx);
  CHECK(intk_get(y, 1) == mn);  // -MIN wraps to MIN
  CHECK(intk_get(y, 2) == -2);  // 2 * MAX = 2^64 - 2
  CHECK(intk_get(y, 3) == mn);
  // Division: MIN / -1 wraps to MIN as numpy's does; the others are exact.
  REQUIRE(intk_run_binary(k::eltwise_fn::div, a, b, y) == 0);
  CHECK(intk_get(y, 0) == mx);
  CHECK(intk_get(y, 1) == mn);
  CHECK(intk_get(y, 2) == mx / 2);
  // int8: 127 + 1 = -128, -128 / -1 = -128, 100 * 3 = 300 - 256 = 44; uint8: 0 - 1 = 255.
  tensor a8({3}, dtype::i8), b8({3}, dtype::i8), y8({3}, dtype::i8);
  a8.assign({127, -128, 100});
  b8.assign({1, -1, 3});
  REQUIRE(intk_run_binary(k::eltwise_fn::add, a8, b8, y8) == 0);
  CHECK(y8.values()[0] == -128);
  REQUIRE(intk_run_binary(k::eltwise_fn::div, a8, b8, y8) == 0);
  CHECK(y8.values()[1] == -128);
  REQUIRE(intk_run_binary(k::eltwise_fn::mul, a8, b8, y8) == 0);
  CHECK(y8.values()[2] == 44);
  tensor au({1}, dtype::u8), bu({1}, dtype::u8), yu({1}, dtype::u8);
  au.assign({0});
  bu.assign({1});
  REQUIRE(intk_run_binary(k::eltwise_fn::sub, au, bu, yu) == 0);
  CHECK(yu.values()[0] == 255);
}

TEST_CASE("integer division truncates toward zero; Mod takes the divisor's sign, fmod the dividend's",
          "[kernels][int]") {
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64}) {
    CAPTURE(npurt::to_string(t));
    tensor a({4}, t), b({4}, t), y({4}, t);
    a.assign({-7, 7, -7, 7});
    b.assign({2, -2, -2, 2});
    REQUIRE(intk_run_binary(k::eltwise_fn::div, a, b, y) == 0);
    CHECK(y.values() == std::vector<double>{-3, -3, 3, 3});
    b.assign({3, -3, -3, 3});
    REQUIRE(intk_run_binary(k::eltwise_fn::mod, a, b, y) == 0);
    CHECK(y.values() == std::vector<double>{2, -2, -1, 1});  // Python: -7 % 3 == 2, 7 % -3 == -2
    REQUIRE(intk_run_binary(k::eltwise_fn::fmod, a, b, y) == 0);
    CHECK(y.values() == std::vector<double>{-1, 1, -1, 1});  // C: fmod(-7, 3) == -1
  }
  // INT64_MIN mod -1 is 0 in both modes (the quotient that overflows is never formed).
  tensor a({1}, dtype::i64), b({1}, dtype::i64), y({1}, dtype::i64);
  intk_set(a, 0, std::numeric_limits<std::int64_t>::min());
  intk_set(b, 0, -1);
  REQUIRE(intk_run_binary(k::eltwise_fn::mod, a, b, y) == 0);
  CHECK(intk_get(y, 0) == 0);
  REQUIRE(intk_run_binary(k::eltwise_fn::fmod, a, b, y) == 0);
  CHECK(intk_get(y, 0) == 0);
  // Float fmod is C's fmod; a zero divisor gives NaN as numpy.fmod does. Float mod is refused:
  // ONNX's Mod takes floats with fmod = 1 only.
  tensor fa({3}), fb({3}), fy({3});
  fa.assign({-7.5, 7.5, 1});
  fb.assign({2, -2, 0});
  REQUIRE(intk_run_binary(k::eltwise_fn::fmod, fa, fb, fy) == 0);
  CHECK(fy.get(0) == -1.5);
  CHECK(fy.get(1) == 1.5);
  CHECK(std::isnan(fy.get(2)));
  CHECK(intk_run_binary(k::eltwise_fn::mod, fa, fb, fy) == static_cast<int>(npurt::errc::invalid_dtype));
}

TEST_CASE("integer binary functions match 128-bit references on every dtype, broadcast", "[kernels][int]") {
  using F = k::eltwise_fn;
  int_draw next(0x1a7);
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64, dtype::u8})
    for (F f : {F::add, F::sub, F::mul, F::div, F::max, F::min, F::mod, F::fmod}) {
      CAPTURE(npurt::to_string(t), k::op_name(k::elementwise{f}));
      tensor a({3, 4}, t), b({4}, t), y({3, 4}, t);
      for (std::size_t i = 0; i < a.size(); ++i) intk_set(a, i, intk_draw(next, t));
      for (std::size_t i = 0; i < b.size(); ++i) {
        std::int64_t v = 0;
        while (v == 0) v = intk_draw(next, t);
        // Small divisors too, so that quotients and remainders are not all 0 and a.
        if (i % 2 == 1) v = t == dtype::u8 ? next(1, 9) : next(1, 9) * (next(0, 1) ? 1 : -1);
        intk_set(b, i, v);
      }
      REQUIRE(intk_run_binary(f, a, b, y) == 0);
      for (std::size_t i = 0; i < y.size(); ++i) {
        i128 want = 0;
        REQUIRE(intk_ref(f, t, intk_get(a, i), intk_get(b, i % 4), want));
        CAPTURE(i, intk_get(a, i), intk_get(b, i % 4));
        REQUIRE(static_cast<i128>(intk_get(y, i)) == want);
      }
    }
}

TEST_CASE("an integer division or Mod by zero fails the run and leaves y as it was", "[kernels][int]") {
  using F = k::eltwise_fn;
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64, dtype::u8})
    for (F f : {F::div, F::mod, F::fmod}) {
      CAPTURE(npurt::to_string(t), k::op_name(k::elementwise{f}));
      tensor a({2, 3}, t), b({3}, t), y({2, 3}, t);
      a.assign({1, 2, 3, 4, 5, 6});
      b.assign({1, 2, 0});  // the zero is met in the first row already
      y.assign({9, 9, 9, 9, 9, 9});
      CHECK(intk_run_binary(f, a, b, y) == static_cast<int>(npurt::errc::invalid_argument));
      CHECK(y.values() == std::vector<double>(6, 9));
      // The failure says which divisor, by its place in b.
      std::string why;
      CHECK(npurt::sim::run_reference(npurt::kernel_desc{k::elementwise{f, a.desc, b.desc, y.desc}},
                                      npurt::sim::host_memory(), 0, &why) == npurt::errc::invalid_argument);
      CHECK(why == "divisor b[2] is 0 (an integer has no quotient or remainder by 0)");
    }
  // Floats divide by zero as IEEE says: an infinity, no failure.
  tensor a({1}), b({1}), y({1});
  a.assign({1});
  b.assign({0});
  REQUIRE(intk_run_binary(F::div, a, b, y) == 0);
  CHECK(std::isinf(y.get(0)));
}

TEST_CASE("integer neg, abs, sign and pow; float-only functions refuse integers", "[kernels][int]") {
  using F = k::eltwise_fn;
  constexpr auto mn = std::numeric_limits<std::int64_t>::min();
  tensor x({4}, dtype::i64), y({4}, dtype::i64);
  for (std::size_t i = 0; i < 4; ++i) intk_set(x, i, std::vector<std::int64_t>{mn, -5, 0, 7}[i]);
  REQUIRE(run(k::elementwise{F::neg, x.desc, {}, y.desc}) == 0);
  CHECK(intk_get(y, 0) == mn);  // numpy: -MIN wraps to MIN
  CHECK(intk_get(y, 1) == 5);
  CHECK(intk_get(y, 3) == -7);
  REQUIRE(run(k::elementwise{F::abs, x.desc, {}, y.desc}) == 0);
  CHECK(intk_get(y, 0) == mn);  // numpy.abs(MIN) is MIN
  CHECK(intk_get(y, 1) == 5);
  REQUIRE(run(k::elementwise{F::sign, x.desc, {}, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{-1, -1, 0, 1});
  tensor u({2}, dtype::u8), uy({2}, dtype::u8);
  u.assign({0, 3});
  REQUIRE(run(k::elementwise{F::neg, u.desc, {}, uy.desc}) == 0);
  CHECK(uy.values() == std::vector<double>{0, 253});

  // pow: 3^5, (-2)^3, 2^63 (wraps to MIN), 2^64 (wraps to 0), x^0 = 1.
  tensor pa({5}, dtype::i64), pb({5}, dtype::i64), py({5}, dtype::i64);
  pa.assign({3, -2, 2, 2, -9});
  pb.assign({5, 3, 63, 64, 0});
  REQUIRE(intk_run_binary(F::pow, pa, pb, py) == 0);
  CHECK(intk_get(py, 0) == 243);
  CHECK(intk_get(py, 1) == -8);
  CHECK(intk_get(py, 2) == mn);
  CHECK(intk_get(py, 3) == 0);
  CHECK(intk_get(py, 4) == 1);
  // numpy refuses integers to negative integer powers: the run fails, y untouched.
  pb.assign({5, 3, -1, 64, 0});
  CHECK(intk_run_binary(F::pow, pa, pb, py) == static_cast<int>(npurt::errc::invalid_argument));
  CHECK(intk_get(py, 0) == 243);
  std::string why;
  CHECK(npurt::sim::run_reference(npurt::kernel_desc{k::elementwise{F::pow, pa.desc, pb.desc, py.desc}},
                                  npurt::sim::host_memory(), 0, &why) == npurt::errc::invalid_argument);
  CHECK(why == "exponent b[2] = -1 is negative (an integer has no negative power)");

  for (F f : {F::exp, F::sigmoid, F::sqrt, F::floor, F::clip}) {
    CAPTURE(k::op_name(k::elementwise{f}));
    CHECK(run(k::elementwise{f, x.desc, {}, y.desc}) == static_cast<int>(npurt::errc::invalid_dtype));
  }
  CHECK(intk_run_binary(F::relu_backward, x, x, y) == static_cast<int>(npurt::errc::invalid_dtype));
  // Mixed dtypes stay refused.
  tensor x32({4}, dtype::i32);
  CHECK(intk_run_binary(F::add, x, x32, y) == static_cast<int>(npurt::errc::invalid_dtype));
}

// ---- cumsum --------------------------------------------------------------------------------

TEST_CASE("cumsum matches ONNX's definition on every axis, exclusive and reverse", "[kernels][cumsum]") {
  int_draw next(0xc5);
  for (int round = 0; round < 40; ++round)
    for (dtype t : {dtype::f32, dtype::i64, dtype::i32, dtype::i8, dtype::u8}) {
      const auto rank = static_cast<std::size_t>(next(1, 4));
      shape s;
      for (std::size_t d = 0; d < rank; ++d) s.push_back(next(1, 5));
      const auto axis =
          static_cast<std::int32_t>(next(-static_cast<std::int64_t>(rank), static_cast<std::int64_t>(rank) - 1));
      const bool exclusive = next(0, 1) != 0, reverse = next(0, 1) != 0;
      CAPTURE(round, npurt::to_string(t), axis, exclusive, reverse);
      tensor x(s, t), y(s, t);
      // Small integers: float sums are exact, so f32 must match exactly too; int8 and uint8
      // ranges are crossed, so wrap-around is exercised.
      for (std::size_t i = 0; i < x.size(); ++i) intk_set(x, i, t == dtype::u8 ? next(0, 255) : next(-100, 100));
      REQUIRE(run(k::cumsum{x.desc, y.desc, axis, exclusive, reverse}) == 0);
      const std::size_t ax =
          axis < 0 ? static_cast<std::size_t>(axis + static_cast<std::int32_t>(rank)) : static_cast<std::size_t>(axis);
      std::int64_t inner = 1;
      for (std::size_t d = ax + 1; d < rank; ++d) inner *= s[d];
      const std::int64_t len = s[ax];
      for (std::size_t i = 0; i < y.size(); ++i) {
        // i's position along the axis, and the sum over the positions ONNX's definition names.
        const auto ii = static_cast<std::int64_t>(i);
        const std::int64_t pos = (ii / inner) % len, base = ii - pos * inner;
        i128 sum = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const bool in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
          if (in) sum += intk_get(x, static_cast<std::size_t>(base + j * inner));  // f32: small integers, exact
        }
        const i128 want = t == dtype::f32 ? sum : intk_wrap(t, sum);
        CAPTURE(i);
        REQUIRE(static_cast<i128>(intk_get(y, i)) == want);
      }
    }
}

TEST_CASE("cumsum by hand: onnx.ai's examples, int64 wrap-around, f16 rounding per step, in place",
          "[kernels][cumsum]") {
  // onnx.ai: [1, 2, 3] -> [1, 3, 6]; exclusive [0, 1, 3]; reverse [6, 5, 3]; both [5, 3, 0].
  tensor x({3}, dtype::i64), y({3}, dtype::i64);
  x.assign({1, 2, 3});
  const std::vector<std::vector<double>> want{{1, 3, 6}, {0, 1, 3}, {6, 5, 3}, {5, 3, 0}};
  for (int m = 0; m < 4; ++m) {
    REQUIRE(run(k::cumsum{x.desc, y.desc, 0, (m & 1) != 0, (m & 2) != 0}) == 0);
    CHECK(y.values() == want[static_cast<std::size_t>(m)]);
  }
  // Axis 1 of [[1, 2, 3], [4, 5, 6]] is [[1, 3, 6], [4, 9, 15]]; axis 0 is [[1, 2, 3], [5, 7, 9]].
  tensor m({2, 3}), my({2, 3});
  m.assign({1, 2, 3, 4, 5, 6});
  REQUIRE(run(k::cumsum{m.desc, my.desc, 1}) == 0);
  CHECK(my.values() == std::vector<double>{1, 3, 6, 4, 9, 15});
  REQUIRE(run(k::cumsum{m.desc, my.desc, -2}) == 0);
  CHECK(my.values() == std::vector<double>{1, 2, 3, 5, 7, 9});
  // int64 past MAX wraps to MIN, as numpy's cumsum in int64 does.
  tensor w({2}, dtype::i64), wy({2}, dtype::i64);
  intk_set(w, 0, std::numeric_limits<std::int64_t>::max());
  intk_set(w, 1, 1);
  REQUIRE(run(k::cumsum{w.desc, wy.desc, 0}) == 0);
  CHECK(intk_get(wy, 1) == std::numeric_limits<std::int64_t>::min());
  // f16: 2048 + 1 rounds to 2048 (ties to even; f16's spacing there is 2), and so does every
  // later + 1; a sum kept in float would reach 2050.
  tensor h({3}, dtype::f16), hy({3}, dtype::f16);
  h.assign({2048, 1, 1});
  REQUIRE(run(k::cumsum{h.desc, hy.desc, 0}) == 0);
  CHECK(hy.values() == std::vector<double>{2048, 2048, 2048});
  // In place: y is x.
  REQUIRE(run(k::cumsum{m.desc, m.desc, 1, false, true}) == 0);
  CHECK(m.values() == std::vector<double>{6, 5, 3, 15, 11, 6});
}

TEST_CASE("cumsum refuses a bad axis, mismatched dtypes or shapes", "[kernels][cumsum][validate]") {
  tensor x({2, 3}, dtype::i64), y({2, 3}, dtype::i64), yf({2, 3}), y3({3, 2}, dtype::i64);
  CHECK(run(k::cumsum{x.desc, y.desc, 2}) == static_cast<int>(npurt::errc::invalid_argument));
  CHECK(run(k::cumsum{x.desc, y.desc, -3}) == static_cast<int>(npurt::errc::invalid_argument));
  CHECK(run(k::cumsum{x.desc, yf.desc, 0}) == static_cast<int>(npurt::errc::invalid_dtype));
  CHECK(run(k::cumsum{x.desc, y3.desc, 0}) == static_cast<int>(npurt::errc::invalid_shape));
  std::string what;
  CHECK(npurt::sim::validate(k::cumsum{x.desc, yf.desc, 0}, &what) == npurt::errc::invalid_dtype);
  CHECK(what.find("cumsum") != std::string::npos);
}

// ---- reduce prod ---------------------------------------------------------------------------

TEST_CASE("reduce prod multiplies over the masked axes", "[kernels][reduce]") {
  int_draw next(0x9d);
  for (int round = 0; round < 30; ++round) {
    const auto rank = static_cast<std::size_t>(next(1, 4));
    shape s;
    for (std::size_t d = 0; d < rank; ++d) s.push_back(next(1, 4));
    auto mask = static_cast<std::uint32_t>(next(1, (1 << rank) - 1));
    const bool keep = next(0, 1) != 0;
    const shape ys = intk_reduced(s, mask, keep);
    CAPTURE(round, mask, keep);
    tensor x(s), y(ys);
    x.fill(static_cast<std::uint64_t>(round) + 3, 0.5, 1.5, false);
    k::reduce r{k::reduce_fn::prod, x.desc, y.desc, mask, keep};
    REQUIRE(run(r) == 0);
    // The reference: for each y element, the product in double over x's elements that map to it.
    std::vector<double> want(y.size(), 1.0);
    std::vector<std::int64_t> idx(rank, 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::int64_t o = 0;
      for (std::size_t d = 0; d < rank; ++d)
        if (!((mask >> d) & 1u)) o = o * s[d] + idx[d];
      want[static_cast<std::size_t>(o)] *= x.get(i);
      for (std::size_t d = rank; d-- > 0;) {
        if (++idx[d] < s[d]) break;
        idx[d] = 0;
      }
    }
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(std::fabs(y.get(i) - want[i]) <= 1e-5 * std::fabs(want[i]));
  }
  // By hand: rows of [[1, 2], [3, 4]] -> [2, 12]; everything -> 24; a zero zeroes its row.
  tensor m({2, 2}), r2({2}), r1({1});
  m.assign({1, 2, 3, 4});
  REQUIRE(run(k::reduce{k::reduce_fn::prod, m.desc, r2.desc, 2u}) == 0);
  CHECK(r2.values() == std::vector<double>{2, 12});
  REQUIRE(run(k::reduce{k::reduce_fn::prod, m.desc, r1.desc, 3u}) == 0);
  CHECK(r1.values() == std::vector<double>{24});
  m.assign({1, 2, 0, 4});
  REQUIRE(run(k::reduce{k::reduce_fn::prod, m.desc, r2.desc, 2u}) == 0);
  CHECK(r2.values() == std::vector<double>{2, 0});
}

// ---- integer relu and reductions -----------------------------------------------------------

TEST_CASE("integer relu is max(x, 0) at the extremes of every dtype", "[kernels][int]") {
  int_draw next(0x3e1);
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64, dtype::u8}) {
    CAPTURE(npurt::to_string(t));
    tensor x({16}, t), y({16}, t);
    for (std::size_t i = 0; i < x.size(); ++i) intk_set(x, i, intk_draw(next, t));
    intk_set(x, 0, 0);
    REQUIRE(run(k::elementwise{k::eltwise_fn::relu, x.desc, {}, y.desc}) == 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::int64_t v = intk_get(x, i);
      CAPTURE(i, v);
      CHECK(intk_get(y, i) == (v > 0 ? v : 0));
    }
  }
}

TEST_CASE("integer reduce sum, prod, max, min are exact; sum and prod wrap modulo 2^n", "[kernels][reduce][int]") {
  using R = k::reduce_fn;
  int_draw next(0x51d);
  for (dtype t : {dtype::i8, dtype::i32, dtype::i64, dtype::u8})
    for (R f : {R::sum, R::prod, R::max, R::min})
      for (int round = 0; round < 12; ++round) {
        const auto rank = static_cast<std::size_t>(next(1, 3));
        shape s;
        for (std::size_t d = 0; d < rank; ++d) s.push_back(next(1, 4));
        const auto mask = static_cast<std::uint32_t>(next(1, (1 << rank) - 1));
        const bool keep = next(0, 1) != 0;
        const shape ys = intk_reduced(s, mask, keep);
        CAPTURE(npurt::to_string(t), k::op_name(k::reduce{f}), round, mask, keep);
        tensor x(s, t), y(ys, t);
        // Full-range values overflow sum and prod at once; small ones keep some products exact.
        for (std::size_t i = 0; i < x.size(); ++i)
          intk_set(x, i, round % 2 ? intk_draw(next, t) : next(t == dtype::u8 ? 0 : -3, 3));
        REQUIRE(run(k::reduce{f, x.desc, y.desc, mask, keep}) == 0);
        // The reference: each y element from x's elements mapping to it, in 128-bit arithmetic
        // (no overflow for these sizes) reduced modulo 2^n once at the end, which is what
        // wrapping at every step gives.
        std::vector<i128> want(y.size());
        std::vector<bool> seen(y.size(), false);
        std::vector<std::int64_t> idx(rank, 0);
        for (std::size_t i = 0; i < x.size(); ++i) {
          std::int64_t o = 0;
          for (std::size_t d = 0; d < rank; ++d)
            if (!((mask >> d) & 1u)) o = o * s[d] + idx[d];
          const auto oi = static_cast<std::size_t>(o);
          const i128 v = intk_get(x, i);
          if (!seen[oi]) want[oi] = v;
          else if (f == R::sum) want[oi] = intk_wrap(t, want[oi] + v);
          else if (f == R::prod) want[oi] = intk_wrap(t, want[oi] * v);
          else if (f == R::max) want[oi] = v > want[oi] ? v : want[oi];
          else want[oi] = v < want[oi] ? v : want[oi];
          seen[oi] = true;
          for (std::size_t d = rank; d-- > 0;) {
            if (++idx[d] < s[d]) break;
            idx[d] = 0;
          }
        }
        for (std::size_t i = 0; i < y.size(); ++i) {
          CAPTURE(i);
          REQUIRE(static_cast<i128>(intk_get(y, i)) == want[i]);
        }
      }
  // By hand: int8 [100, 100] sums to -56 (200 - 256) and multiplies to 16 (10000 mod 256);
  // int64 MAX + 1 wraps to MIN.
  tensor b({2}, dtype::i8), b1({1}, dtype::i8);
  b.assign({100, 100});
  REQUIRE(run(k::reduce{R::sum, b.desc, b1.desc, 1u}) == 0);
  CHECK(b1.values() == std::vector<double>{-56});
  REQUIRE(run(k::reduce{R::prod, b.desc, b1.desc, 1u}) == 0);
  CHECK(b1.values() == std::vector<double>{16});
  tensor l({2}, dtype::i64), l1({1}, dtype::i64);
  intk_set(l, 0, std::numeric_limits<std::int64_t>::max());
  intk_set(l, 1, 1);
  REQUIRE(run(k::reduce{R::sum, l.desc, l1.desc, 1u}) == 0);
  CHECK(intk_get(l1, 0) == std::numeric_limits<std::int64_t>::min());
  // Mean and the index reductions stay float-only.
  for (R f : {R::mean, R::argmax}) {
    tensor yi({1}, dtype::i64);
    CHECK(run(k::reduce{f, l.desc, yi.desc, 1u}) == static_cast<int>(npurt::errc::invalid_dtype));
  }
}
