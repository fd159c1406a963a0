// The reference kernels on float64 and the 16-, 32- and 64-bit integer dtypes that came with it.
// f64 results are checked against double arithmetic written out here (IEEE binary64, which is
// what NumPy's float64 computes), on values whose float and double results differ, so that a
// kernel that computed in float and widened would fail. The integer expectations are worked out
// by hand modulo 2^n (NumPy's in-dtype arithmetic), never read back from the kernels.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;

namespace {

// A tensor of f64 values, bit for bit.
tensor f64k_of(shape s, const std::vector<double>& v) {
  tensor t(s, dtype::f64);
  for (std::size_t i = 0; i < v.size(); ++i) std::memcpy(t.bytes.data() + 8 * i, &v[i], 8);
  return t;
}

// A tensor of integers of dtype t given as their bits (T is the dtype's C++ type).
template <class T>
tensor f64k_ints(shape s, dtype t, const std::vector<T>& v) {
  tensor x(s, t);
  std::memcpy(x.bytes.data(), v.data(), v.size() * sizeof(T));
  return x;
}

template <class T>
std::vector<T> f64k_read(const tensor& x) {
  std::vector<T> v(x.size());
  std::memcpy(v.data(), x.bytes.data(), v.size() * sizeof(T));
  return v;
}

int f64k_binary(k::eltwise_fn f, const tensor& a, const tensor& b, tensor& y) {
  return run(k::elementwise{f, a.desc, b.desc, y.desc});
}

constexpr int bad_dtype = static_cast<int>(npurt::errc::invalid_dtype);

}  // namespace

TEST_CASE("f64 elementwise computes in double: 0.1 + 0.2 is 0.30000000000000004", "[kernels][f64]") {
  // 0.1, 0.2 and their sum each round differently in float; the double sum is 0x3FD3333333333334.
  const tensor a = f64k_of({3}, {0.1, 1.0, 1e300}), b = f64k_of({3}, {0.2, 0x1p-40, 1e10});
  tensor y({3}, dtype::f64);
  REQUIRE(f64k_binary(k::eltwise_fn::add, a, b, y) == 0);
  CHECK(y.at<double>(0) == 0.30000000000000004);
  CHECK(y.at<double>(1) == 1.0 + 0x1p-40);  // float would drop the 2^-40
  CHECK(y.at<double>(2) == 1e300 + 1e10);   // past float's range entirely
  REQUIRE(f64k_binary(k::eltwise_fn::mul, a, b, y) == 0);
  CHECK(y.at<double>(0) == 0.1 * 0.2);
  CHECK(std::isinf(y.at<double>(2)));  // 1e310 overflows double too
  REQUIRE(f64k_binary(k::eltwise_fn::div, a, b, y) == 0);
  CHECK(y.at<double>(0) == 0.1 / 0.2);
  CHECK(y.at<double>(1) == 1.0 / 0x1p-40);
  // A unary transcendental: within a few ulps of libm's double result, far from float's.
  const tensor x = f64k_of({2}, {0.5, 1.0 + 0x1p-40});
  tensor e({2}, dtype::f64);
  REQUIRE(run(k::elementwise{k::eltwise_fn::exp, x.desc, {}, e.desc}) == 0);
  CHECK(std::fabs(e.at<double>(0) - std::exp(0.5)) <= 4 * std::numeric_limits<double>::epsilon());
  CHECK(e.at<double>(1) > std::exp(1.0));  // the 2^-40 survives, as it could not in float
  REQUIRE(run(k::elementwise{k::eltwise_fn::sqrt, x.desc, {}, e.desc}) == 0);
  CHECK(e.at<double>(0) == std::sqrt(0.5));  // sqrt is correctly rounded in IEEE arithmetic
}

TEST_CASE("f64 matmul, reduce, softmax and cumsum accumulate in double", "[kernels][f64]") {
  // [1, 2^-30] x [[1], [2^-30]] = 1 + 2^-60: float's sum would be 1.
  const tensor a = f64k_of({1, 2}, {1.0, 0x1p-30}), b = f64k_of({2, 1}, {1.0, 0x1p-30});
  tensor c({1, 1}, dtype::f64);
  REQUIRE(run(k::matmul{a.desc, b.desc, c.desc}) == 0);
  CHECK(c.at<double>(0) == 1.0 + 0x1p-60);
  // f64 inputs write f64 only: no f32 accumulator output.
  tensor c32({1, 1});
  CHECK(run(k::matmul{a.desc, b.desc, c32.desc}) == bad_dtype);

  std::vector<double> tenth(10, 0.1);
  const tensor x = f64k_of({10}, tenth);
  tensor s({1}, dtype::f64), cs({10}, dtype::f64);
  REQUIRE(run(k::reduce{k::reduce_fn::sum, x.desc, s.desc, 1u}) == 0);
  double want = 0;
  for (double v : tenth) want += v;  // ascending order, as the kernel sums
  CHECK(s.at<double>(0) == want);
  CHECK(want != 1.0);  // 0.9999999999999999: the value tells double from float apart
  REQUIRE(run(k::cumsum{x.desc, cs.desc, 0}) == 0);
  double run_sum = 0;
  for (std::size_t i = 0; i < tenth.size(); ++i) {
    run_sum += tenth[i];
    CHECK(cs.at<double>(i) == run_sum);
  }
  // Softmax of [0, 2^-40]: e^(-2^-40) / (1 + e^(-2^-40)) etc., distinguishable from 0.5 only in double.
  const tensor sx = f64k_of({2}, {0.0, 0x1p-40});
  tensor sy({2}, dtype::f64);
  REQUIRE(run(k::softmax{sx.desc, sy.desc, -1}) == 0);
  CHECK(sy.at<double>(0) < 0.5);
  CHECK(sy.at<double>(1) > 0.5);
  CHECK(std::fabs(sy.at<double>(0) + sy.at<double>(1) - 1.0) <= 2 * std::numeric_limits<double>::epsilon());
}

TEST_CASE("f64 compares, moves and classifies as double", "[kernels][f64]") {
  // 0.1 + 0.2 > 0.3 in double; in float both are 0.3f and equal.
  const tensor a = f64k_of({2}, {0.1 + 0.2, std::nan("")}), b = f64k_of({2}, {0.3, 0.3});
  tensor y({2}, dtype::boolean);
  REQUIRE(run(k::compare{k::compare_fn::greater, a.desc, b.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{1, 0});
  // Transpose moves the 8-byte elements whole.
  const tensor m = f64k_of({2, 2}, {0.1, 0.2, 0.3, 1e300});
  tensor t({2, 2}, dtype::f64);
  k::transpose tr{m.desc, t.desc};
  tr.perm = {1, 0};
  REQUIRE(run(tr) == 0);
  CHECK(f64k_read<double>(t) == std::vector<double>{0.1, 0.3, 0.2, 1e300});
  tensor isinf({2, 2}, dtype::boolean);
  k::float_class fc{k::float_class_fn::is_inf, m.desc, isinf.desc};
  REQUIRE(run(fc) == 0);
  CHECK(isinf.values() == std::vector<double>{0, 0, 0, 0});  // 1e300 is finite in double, not in float
}

TEST_CASE("casts from and to f64 round once", "[kernels][f64][cast]") {
  // 1 + 2^-11 + 2^-40 lies just above f16's tie between 1 and 1 + 2^-10: correctly rounded it is
  // 1 + 2^-10; through float (which drops the 2^-40) it would tie to 1.
  const tensor x = f64k_of({4}, {1.0 + 0x1p-11 + 0x1p-40, 0.1, 1e300, -2.5});
  tensor h({4}, dtype::f16), f({4}), bf({4}, dtype::bf16);
  REQUIRE(run(k::cast{x.desc, h.desc}) == 0);
  CHECK(h.get(0) == 1.0 + 0x1p-10);
  CHECK(std::isinf(h.get(2)));
  REQUIRE(run(k::cast{x.desc, f.desc}) == 0);
  CHECK(f.get(1) == static_cast<double>(0.1f));
  // bf16: 1 + 2^-8 + 2^-40 is above bf16's tie between 1 and 1 + 2^-7.
  const tensor xb = f64k_of({1}, {1.0 + 0x1p-8 + 0x1p-40});
  tensor b1({1}, dtype::bf16);
  REQUIRE(run(k::cast{xb.desc, b1.desc}) == 0);
  CHECK(b1.get(0) == 1.0 + 0x1p-7);
  // To integers: rint by default, saturating, NaN to 0 (as the f32 casts do).
  const tensor xi = f64k_of({4}, {-2.5, 1e300, -1e300, std::nan("")});
  tensor i16({4}, dtype::i16), u64({4}, dtype::u64), u32({4}, dtype::u32);
  REQUIRE(run(k::cast{xi.desc, i16.desc}) == 0);
  CHECK(f64k_read<std::int16_t>(i16) == std::vector<std::int16_t>{-2, 32767, -32768, 0});
  REQUIRE(run(k::cast{xi.desc, u64.desc}) == 0);
  CHECK(f64k_read<std::uint64_t>(u64) == std::vector<std::uint64_t>{0, UINT64_MAX, 0, 0});
  REQUIRE(run(k::cast{xi.desc, u32.desc}) == 0);
  CHECK(f64k_read<std::uint32_t>(u32) == std::vector<std::uint32_t>{0, UINT32_MAX, 0, 0});
  // A double past 2^63 into u64 is exact: 2^63 + 2^11 is a double.
  const tensor big = f64k_of({1}, {0x1p63 + 0x1p11});
  tensor ub({1}, dtype::u64);
  REQUIRE(run(k::cast{big.desc, ub.desc}) == 0);
  CHECK(ub.at<std::uint64_t>(0) == (std::uint64_t{1} << 63) + 2048);
  // From integers: i64 2^53 + 1 rounds once to 2^53 in double (ties to even); u64's maximum is
  // 2^64 in double and in float.
  const tensor i64 = f64k_ints<std::int64_t>({2}, dtype::i64, {(std::int64_t{1} << 53) + 1, -3});
  tensor d({2}, dtype::f64);
  REQUIRE(run(k::cast{i64.desc, d.desc}) == 0);
  CHECK(f64k_read<double>(d) == std::vector<double>{0x1p53, -3.0});
  const tensor um = f64k_ints<std::uint64_t>({1}, dtype::u64, {UINT64_MAX});
  tensor umd({1}, dtype::f64), umf({1}), umi({1}, dtype::i64), umb({1}, dtype::bf16);
  REQUIRE(run(k::cast{um.desc, umd.desc}) == 0);
  CHECK(umd.at<double>(0) == 0x1p64);
  REQUIRE(run(k::cast{um.desc, umf.desc}) == 0);
  CHECK(umf.get(0) == 0x1p64);
  REQUIRE(run(k::cast{um.desc, umb.desc}) == 0);
  CHECK(umb.get(0) == 0x1p64);
  REQUIRE(run(k::cast{um.desc, umi.desc}) == 0);  // saturates: no sign flip
  CHECK(umi.at<std::int64_t>(0) == INT64_MAX);
  // Signed to unsigned saturates at 0; unsigned to narrower saturates at the top.
  const tensor neg = f64k_ints<std::int32_t>({2}, dtype::i32, {-5, 70000});
  tensor nu({2}, dtype::u64), nu16({2}, dtype::u16);
  REQUIRE(run(k::cast{neg.desc, nu.desc}) == 0);
  CHECK(f64k_read<std::uint64_t>(nu) == std::vector<std::uint64_t>{0, 70000});
  REQUIRE(run(k::cast{neg.desc, nu16.desc}) == 0);
  CHECK(f64k_read<std::uint16_t>(nu16) == std::vector<std::uint16_t>{0, 65535});
}

TEST_CASE("int16, uint16, uint32 and uint64 wrap modulo 2^n and divide as NumPy", "[kernels][f64][int]") {
  using F = k::eltwise_fn;
  {
    const tensor a = f64k_ints<std::int16_t>({3}, dtype::i16, {32767, -32768, 300});
    const tensor b = f64k_ints<std::int16_t>({3}, dtype::i16, {1, -1, 300});
    tensor y({3}, dtype::i16);
    REQUIRE(f64k_binary(F::add, a, b, y) == 0);
    CHECK(f64k_read<std::int16_t>(y) == std::vector<std::int16_t>{-32768, 32767, 600});
    REQUIRE(f64k_binary(F::mul, a, b, y) == 0);
    // 300 * 300 = 90000 = 65536 + 24464; -32768 * -1 = 32768 wraps to -32768.
    CHECK(f64k_read<std::int16_t>(y) == std::vector<std::int16_t>{32767, -32768, 24464});
    REQUIRE(f64k_binary(F::div, a, b, y) == 0);
    CHECK(f64k_read<std::int16_t>(y) == std::vector<std::int16_t>{32767, -32768, 1});
  }
  {
    const tensor a = f64k_ints<std::uint16_t>({2}, dtype::u16, {0, 65535});
    const tensor b = f64k_ints<std::uint16_t>({2}, dtype::u16, {1, 65535});
    tensor y({2}, dtype::u16);
    REQUIRE(f64k_binary(F::sub, a, b, y) == 0);
    CHECK(f64k_read<std::uint16_t>(y) == std::vector<std::uint16_t>{65535, 0});
    REQUIRE(f64k_binary(F::mul, a, b, y) == 0);  // 65535^2 = 2^32 - 2^17 + 1: 1 mod 2^16
    CHECK(f64k_read<std::uint16_t>(y) == std::vector<std::uint16_t>{0, 1});
  }
  {
    const tensor a = f64k_ints<std::uint32_t>({2}, dtype::u32, {0, 4000000000u});
    const tensor b = f64k_ints<std::uint32_t>({2}, dtype::u32, {1, 3});
    tensor y({2}, dtype::u32);
    REQUIRE(f64k_binary(F::sub, a, b, y) == 0);
    CHECK(f64k_read<std::uint32_t>(y) == std::vector<std::uint32_t>{UINT32_MAX, 3999999997u});
    REQUIRE(f64k_binary(F::div, a, b, y) == 0);
    CHECK(f64k_read<std::uint32_t>(y) == std::vector<std::uint32_t>{0, 1333333333u});
    REQUIRE(f64k_binary(F::mod, a, b, y) == 0);
    CHECK(f64k_read<std::uint32_t>(y) == std::vector<std::uint32_t>{0, 1});
  }
  {
    // u64 past 2^63: unsigned quotients, remainders and order (as int64 bits they are negative).
    constexpr std::uint64_t top = (std::uint64_t{1} << 63) + 5;
    const tensor a = f64k_ints<std::uint64_t>({4}, dtype::u64, {top, 0, UINT64_MAX, 7});
    const tensor b = f64k_ints<std::uint64_t>({4}, dtype::u64, {2, 1, UINT64_MAX, UINT64_MAX});
    tensor y({4}, dtype::u64);
    REQUIRE(f64k_binary(F::div, a, b, y) == 0);
    CHECK(f64k_read<std::uint64_t>(y) == std::vector<std::uint64_t>{(std::uint64_t{1} << 62) + 2, 0, 1, 0});
    REQUIRE(f64k_binary(F::mod, a, b, y) == 0);
    CHECK(f64k_read<std::uint64_t>(y) == std::vector<std::uint64_t>{1, 0, 0, 7});
    REQUIRE(f64k_binary(F::sub, a, b, y) == 0);
    CHECK(f64k_read<std::uint64_t>(y) == std::vector<std::uint64_t>{top - 2, UINT64_MAX, 0, 8});
    REQUIRE(f64k_binary(F::max, a, b, y) == 0);
    CHECK(f64k_read<std::uint64_t>(y) == std::vector<std::uint64_t>{top, 1, UINT64_MAX, UINT64_MAX});
    tensor gt({4}, dtype::boolean);
    REQUIRE(run(k::compare{k::compare_fn::greater, a.desc, b.desc, gt.desc}) == 0);
    CHECK(gt.values() == std::vector<double>{1, 0, 0, 0});
    // A zero divisor fails the kernel, as for the other integer dtypes.
    const tensor z = f64k_ints<std::uint64_t>({4}, dtype::u64, {1, 1, 0, 1});
    CHECK(f64k_binary(F::div, a, z, y) == static_cast<int>(npurt::errc::invalid_argument));
  }
}

TEST_CASE("BitShift on every unsigned width empties the value at its width", "[kernels][f64][int]") {
  using F = k::eltwise_fn;
  const tensor a = f64k_ints<std::uint16_t>({3}, dtype::u16, {0x8001, 1, 0xffff});
  const tensor b = f64k_ints<std::uint16_t>({3}, dtype::u16, {1, 15, 16});
  tensor y({3}, dtype::u16);
  REQUIRE(f64k_binary(F::shift_left, a, b, y) == 0);
  CHECK(f64k_read<std::uint16_t>(y) == std::vector<std::uint16_t>{2, 0x8000, 0});
  const tensor a64 = f64k_ints<std::uint64_t>({2}, dtype::u64, {UINT64_MAX, 1});
  const tensor b64 = f64k_ints<std::uint64_t>({2}, dtype::u64, {63, UINT64_MAX});
  tensor y64({2}, dtype::u64);
  REQUIRE(f64k_binary(F::shift_right, a64, b64, y64) == 0);
  CHECK(f64k_read<std::uint64_t>(y64) == std::vector<std::uint64_t>{1, 0});
  // Signed dtypes have no BitShift in ONNX.
  const tensor s = f64k_ints<std::int16_t>({1}, dtype::i16, {1});
  tensor sy({1}, dtype::i16);
  CHECK(f64k_binary(F::shift_left, s, s, sy) == bad_dtype);
}

TEST_CASE("cumsum and top_k on the wider integers: wrap and unsigned order", "[kernels][f64][int]") {
  const tensor x = f64k_ints<std::uint32_t>({3}, dtype::u32, {UINT32_MAX, 2, 3});
  tensor y({3}, dtype::u32);
  REQUIRE(run(k::cumsum{x.desc, y.desc, 0}) == 0);
  CHECK(f64k_read<std::uint32_t>(y) == std::vector<std::uint32_t>{UINT32_MAX, 1, 4});
  const tensor u = f64k_ints<std::uint64_t>({4}, dtype::u64, {5, UINT64_MAX, std::uint64_t{1} << 63, 0});
  tensor v({2}, dtype::u64), idx({2}, dtype::i64);
  REQUIRE(run(k::top_k{u.desc, v.desc, idx.desc, 0, 2}) == 0);
  CHECK(f64k_read<std::uint64_t>(v) == std::vector<std::uint64_t>{UINT64_MAX, std::uint64_t{1} << 63});
  CHECK(f64k_read<std::int64_t>(idx) == std::vector<std::int64_t>{1, 2});
  const tensor i = f64k_ints<std::int16_t>({3}, dtype::i16, {32767, 1, -2});
  tensor iy({3}, dtype::i16);
  REQUIRE(run(k::cumsum{i.desc, iy.desc, 0}) == 0);
  CHECK(f64k_read<std::int16_t>(iy) == std::vector<std::int16_t>{32767, -32768, 32766});
}

TEST_CASE("integer reductions on the wider integers: uint64 orders as unsigned, int16 and uint32 wrap",
          "[kernels][f64][int][reduce]") {
  using R = k::reduce_fn;
  const std::uint64_t top = (std::uint64_t{1} << 63) + 5;  // negative as int64 bits
  const tensor u = f64k_ints<std::uint64_t>({2, 3}, dtype::u64, {1, top, 7, UINT64_MAX, 0, 2});
  tensor rows({2}, dtype::u64), all({1}, dtype::u64);
  REQUIRE(run(k::reduce{R::max, u.desc, rows.desc, 2u}) == 0);
  CHECK(f64k_read<std::uint64_t>(rows) == std::vector<std::uint64_t>{top, UINT64_MAX});
  REQUIRE(run(k::reduce{R::min, u.desc, rows.desc, 2u}) == 0);
  CHECK(f64k_read<std::uint64_t>(rows) == std::vector<std::uint64_t>{1, 0});
  REQUIRE(run(k::reduce{R::max, u.desc, all.desc, 3u}) == 0);
  CHECK(f64k_read<std::uint64_t>(all) == std::vector<std::uint64_t>{UINT64_MAX});
  // 1 + (2^63 + 5) + 7 + (2^64 - 1) + 0 + 2 = 2^64 + 2^63 + 14, modulo 2^64.
  REQUIRE(run(k::reduce{R::sum, u.desc, all.desc, 3u}) == 0);
  CHECK(f64k_read<std::uint64_t>(all) == std::vector<std::uint64_t>{(std::uint64_t{1} << 63) + 14});
  const tensor i = f64k_ints<std::int16_t>({3}, dtype::i16, {32767, 1, -40});
  tensor i1({1}, dtype::i16);
  REQUIRE(run(k::reduce{R::sum, i.desc, i1.desc, 1u}) == 0);
  // 32767 + 1 wraps to -32768 and -40 wraps back: 32728 (modulo 2^16, whatever the order).
  CHECK(f64k_read<std::int16_t>(i1) == std::vector<std::int16_t>{32728});
  REQUIRE(run(k::reduce{R::min, i.desc, i1.desc, 1u}) == 0);
  CHECK(f64k_read<std::int16_t>(i1) == std::vector<std::int16_t>{-40});
  const tensor w = f64k_ints<std::uint32_t>({2}, dtype::u32, {65536, 65536});
  tensor w1({1}, dtype::u32);
  REQUIRE(run(k::reduce{R::prod, w.desc, w1.desc, 1u}) == 0);
  CHECK(f64k_read<std::uint32_t>(w1) == std::vector<std::uint32_t>{0});  // 2^32 mod 2^32
}

TEST_CASE("quantize keeps refusing f64; unknown dtype codes are still refused", "[kernels][f64]") {
  const tensor x = f64k_of({2}, {0.5, 1.5}), s = f64k_of({1}, {0.5});
  tensor q({2}, dtype::i8);
  CHECK(run(k::quantize{k::quantize_fn::quantize, x.desc, s.desc, {}, q.desc}) == bad_dtype);
  tensor xf({2}), sf({1});
  CHECK(run(k::quantize{k::quantize_fn::quantize, xf.desc, s.desc, {}, q.desc}) == bad_dtype);
  tensor y({2});
  CHECK(run(k::quantize{k::quantize_fn::dequantize, q.desc, sf.desc, {}, f64k_of({2}, {0, 0}).desc}) == bad_dtype);
  tensor junk({2});
  junk.desc.type = static_cast<dtype>(static_cast<unsigned>(dtype::u64) + 1);
  CHECK(run(k::cast{junk.desc, y.desc}) == bad_dtype);
}
