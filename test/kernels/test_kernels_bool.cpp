// Reference kernels on bool: compare, where, logical and cast to and from bool — against a
// reference written here from NumPy's semantics (an element's coordinates mapped to each broadcast
// operand, values compared in their own type), hand-computed cases at the edges (NaN, -0, int64
// above 2^53, nonzero bytes other than 1), and every descriptor error.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

constexpr dtype numeric_types[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8};
constexpr k::compare_fn compare_fns[] = {k::compare_fn::equal, k::compare_fn::less, k::compare_fn::less_equal,
                                         k::compare_fn::greater, k::compare_fn::greater_equal};

// The element of a broadcast operand `in` that element i of `out` reads: out's row-major
// coordinates of i, aligned at the trailing end, with 0 where `in` has extent 1 (NumPy's rule).
std::size_t source_index(const shape& out, const shape& in, std::size_t i) {
  std::vector<std::int64_t> coord(out.rank());
  for (std::size_t d = out.rank(); d-- > 0;) {
    coord[d] = static_cast<std::int64_t>(i % static_cast<std::size_t>(out[d]));
    i /= static_cast<std::size_t>(out[d]);
  }
  std::int64_t off = 0;
  const std::size_t lead = out.rank() - in.rank();
  for (std::size_t d = 0; d < in.rank(); ++d) off = off * in[d] + (in[d] == 1 ? 0 : coord[lead + d]);
  return static_cast<std::size_t>(off);
}

// A shape that broadcasts to `out`: some leading dimensions dropped, some others made 1.
shape broadcast_operand(const shape& out, int_draw& next) {
  const auto drop = static_cast<std::size_t>(next(0, static_cast<std::int64_t>(out.rank())));
  shape s;
  for (std::size_t d = drop; d < out.rank(); ++d) s.push_back(next(0, 2) == 0 ? 1 : out[d]);
  if (s.rank() == 0) s.push_back(1);  // the kernels' scalar is one element of rank 1
  return s;
}

// NumPy's broadcast shape of the operands (each a broadcast_operand of one shape, so they fit).
shape broadcast_all(std::initializer_list<shape> in) {
  std::size_t r = 0;
  for (const auto& s : in) r = std::max(r, s.rank());
  shape out;
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t d = 1;
    for (const auto& s : in)
      if (i >= r - s.rank()) d = std::max(d, s[i - (r - s.rank())]);
    out.push_back(d);
  }
  return out;
}

// An element as the reference compares it: i64 as itself (a double would round above 2^53),
// every other dtype's value exactly as a double.
struct value {
  bool is_i64;
  std::int64_t i;
  double d;
};

value value_at(const tensor& t, std::size_t idx) {
  if (t.desc.type == dtype::i64) {
    std::int64_t v;
    std::memcpy(&v, t.bytes.data() + 8 * idx, 8);
    return {true, v, 0};
  }
  if (t.desc.type == dtype::boolean) return {false, 0, t.get(idx) != 0 ? 1.0 : 0.0};
  return {false, 0, t.get(idx)};
}

bool reference_compare(k::compare_fn f, value a, value b) {
  auto cmp = [f](auto x, auto y) {
    switch (f) {
      case k::compare_fn::equal: return x == y;
      case k::compare_fn::less: return x < y;
      case k::compare_fn::less_equal: return x <= y;
      case k::compare_fn::greater: return x > y;
      case k::compare_fn::greater_equal: return x >= y;
    }
    return false;
  };
  return a.is_i64 ? cmp(a.i, b.i) : cmp(a.d, b.d);
}

void set_i64(tensor& t, std::size_t i, std::int64_t v) { std::memcpy(t.bytes.data() + 8 * i, &v, 8); }

}  // namespace

// ---- compare -------------------------------------------------------------------------------

TEST_CASE("compare matches NumPy's comparisons over broadcast operands of every dtype", "[kernels][compare][bool]") {
  int_draw next(0xb001);
  for (int round = 0; round < 30; ++round)
    for (auto t : numeric_types)
      for (auto f : compare_fns) {
        shape full;
        for (std::int64_t d = next(1, 4); d > 0; --d) full.push_back(next(1, 3));
        const shape as = broadcast_operand(full, next), bs = broadcast_operand(full, next);
        const shape ys = broadcast_all({as, bs});
        CAPTURE(round, npurt::to_string(t), static_cast<int>(f));
        tensor a(as, t), b(bs, t), y(ys, dtype::boolean);
        // Few distinct values, so that equal and unequal pairs both occur; signed dtypes go negative.
        const bool is_unsigned = t == dtype::u8;
        a.fill(static_cast<std::uint64_t>(round) * 7 + 1, is_unsigned ? 0 : -2, 2, true);
        b.fill(static_cast<std::uint64_t>(round) * 7 + 2, is_unsigned ? 0 : -2, 2, true);
        // A NaN in each float operand.
        if (t == dtype::f32 || t == dtype::f16 || t == dtype::bf16) {
          a.set(0, NAN);
          if (b.size() > 1) b.set(1, NAN);
        }
        y.set(0, 7);  // overwritten with 0 or 1
        REQUIRE(run(k::compare{f, a.desc, b.desc, y.desc}) == 0);
        for (std::size_t i = 0; i < y.size(); ++i) {
          const bool want =
              reference_compare(f, value_at(a, source_index(ys, as, i)), value_at(b, source_index(ys, bs, i)));
          REQUIRE(y.get(i) == (want ? 1.0 : 0.0));
        }
      }
}

TEST_CASE("compare is exact for int64 above 2^53, false on NaN, and -0 equals +0", "[kernels][compare][bool]") {
  // 2^53 and 2^53 + 1 are one double: a comparison through double would call them equal.
  const std::int64_t big = std::int64_t{1} << 53;
  tensor a({4}, dtype::i64), b({4}, dtype::i64), y({4}, dtype::boolean);
  const std::int64_t av[] = {big, big + 1, std::numeric_limits<std::int64_t>::max(),
                             std::numeric_limits<std::int64_t>::min()};
  const std::int64_t bv[] = {big + 1, big, std::numeric_limits<std::int64_t>::max() - 1,
                             std::numeric_limits<std::int64_t>::min() + 1};
  for (std::size_t i = 0; i < 4; ++i) {
    set_i64(a, i, av[i]);
    set_i64(b, i, bv[i]);
  }
  REQUIRE(run(k::compare{k::compare_fn::equal, a.desc, b.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{0, 0, 0, 0});
  REQUIRE(run(k::compare{k::compare_fn::less, a.desc, b.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{1, 0, 0, 1});
  REQUIRE(run(k::compare{k::compare_fn::greater_equal, a.desc, b.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{0, 1, 1, 0});

  // NaN compares false, equal to itself included; -0 and +0 are equal (IEEE 754).
  tensor x({4}), z({4}), e({4}, dtype::boolean);
  x.assign({NAN, NAN, -0.0, 1.0});
  z.assign({NAN, 1.0, 0.0, NAN});
  for (auto f : compare_fns) {
    REQUIRE(run(k::compare{f, x.desc, z.desc, e.desc}) == 0);
    const bool zero_pair =
        f == k::compare_fn::equal || f == k::compare_fn::less_equal || f == k::compare_fn::greater_equal;
    CHECK(e.values() == std::vector<double>{0, 0, zero_pair ? 1.0 : 0.0, 0});
  }
  // bool operands (Equal only): any nonzero byte is true, so 2 equals 1.
  tensor p({3}, dtype::boolean), q({3}, dtype::boolean), r({3}, dtype::boolean);
  p.assign({2, 0, 255});
  q.assign({1, 0, 0});
  REQUIRE(run(k::compare{k::compare_fn::equal, p.desc, q.desc, r.desc}) == 0);
  CHECK(r.values() == std::vector<double>{1, 1, 0});
}

// ---- where ---------------------------------------------------------------------------------

TEST_CASE("where picks x where the condition holds, y elsewhere, three-way broadcast, any dtype",
          "[kernels][where][bool]") {
  int_draw next(0x3e4e);
  for (int round = 0; round < 40; ++round)
    for (auto t : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8, dtype::boolean}) {
      shape full;
      for (std::int64_t d = next(1, 4); d > 0; --d) full.push_back(next(1, 3));
      const shape cs = broadcast_operand(full, next), xs = broadcast_operand(full, next),
                  ys = broadcast_operand(full, next);
      const shape os = broadcast_all({cs, xs, ys});
      CAPTURE(round, npurt::to_string(t));
      tensor c(cs, dtype::boolean), x(xs, t), y(ys, t), out(os, t);
      // Condition bytes 0, 1, 2 and 255: every nonzero one is true.
      const std::uint8_t bytes[] = {0, 1, 2, 255};
      for (std::size_t i = 0; i < c.size(); ++i) c.bytes[i] = std::byte{bytes[next(0, 3)]};
      // Distinct random bytes in x and y: the copy is checked byte for byte.
      for (auto& b : x.bytes) b = std::byte{static_cast<std::uint8_t>(next(0, 255))};
      for (auto& b : y.bytes) b = std::byte{static_cast<std::uint8_t>(next(0, 255))};
      REQUIRE(run(k::where{c.desc, x.desc, y.desc, out.desc}) == 0);
      const std::size_t es = npurt::size_of(t);
      for (std::size_t i = 0; i < out.size(); ++i) {
        const bool pick_x = c.bytes[source_index(os, cs, i)] != std::byte{0};
        const std::byte* want =
            pick_x ? x.bytes.data() + source_index(os, xs, i) * es : y.bytes.data() + source_index(os, ys, i) * es;
        REQUIRE(std::memcmp(out.bytes.data() + i * es, want, es) == 0);
      }
    }
  // By hand, a causal mask: where(j <= i, scores, -inf) over [3, 3] with a [3, 1] and a [1, 3] operand.
  tensor mask({3, 3}, dtype::boolean), scores({3, 3}), fill({1}), out({3, 3});
  mask.assign({1, 0, 0, 1, 1, 0, 1, 1, 1});
  scores.assign({1, 2, 3, 4, 5, 6, 7, 8, 9});
  fill.assign({-INFINITY});
  REQUIRE(run(k::where{mask.desc, scores.desc, fill.desc, out.desc}) == 0);
  const double inf = INFINITY;
  CHECK(out.values() == std::vector<double>{1, -inf, -inf, 4, 5, -inf, 7, 8, 9});
}

// ---- logical -------------------------------------------------------------------------------

TEST_CASE("logical and, or, xor and not read any nonzero byte as true and write 0 or 1", "[kernels][logical][bool]") {
  int_draw next(0x10c1);
  const std::uint8_t bytes[] = {0, 1, 3, 255};
  for (int round = 0; round < 40; ++round)
    for (auto f : {k::logical_fn::and_, k::logical_fn::or_, k::logical_fn::xor_, k::logical_fn::not_}) {
      shape full;
      for (std::int64_t d = next(1, 4); d > 0; --d) full.push_back(next(1, 3));
      const bool unary = f == k::logical_fn::not_;
      const shape as = unary ? full : broadcast_operand(full, next), bs = unary ? full : broadcast_operand(full, next);
      const shape ys = broadcast_all({as, bs});
      CAPTURE(round, static_cast<int>(f));
      tensor a(as, dtype::boolean), b(bs, dtype::boolean), y(ys, dtype::boolean);
      for (auto& v : a.bytes) v = std::byte{bytes[next(0, 3)]};
      for (auto& v : b.bytes) v = std::byte{bytes[next(0, 3)]};
      REQUIRE(run(k::logical{f, a.desc, unary ? tensor_desc{} : b.desc, y.desc}) == 0);
      for (std::size_t i = 0; i < y.size(); ++i) {
        const bool p = a.bytes[source_index(ys, as, i)] != std::byte{0};
        const bool q = b.bytes[source_index(ys, bs, i)] != std::byte{0};
        const bool want = f == k::logical_fn::and_   ? p && q
                          : f == k::logical_fn::or_  ? p || q
                          : f == k::logical_fn::xor_ ? p != q
                                                     : !p;
        REQUIRE(y.get(i) == (want ? 1.0 : 0.0));
      }
    }
}

// ---- cast to and from bool ------------------------------------------------------------------

TEST_CASE("cast to bool is x != 0 (NaN true), from bool 0 or 1, for every dtype", "[kernels][cast][bool]") {
  // NumPy: np.array([0, -0., 0.25, nan, -inf, -3]).astype(bool) == [F, F, T, T, T, T].
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    tensor x({6}, t), y({6}, dtype::boolean);
    x.assign({0.0, -0.0, 0.25, NAN, -INFINITY, -3});
    REQUIRE(run(k::cast{x.desc, y.desc}) == 0);
    CHECK(y.values() == std::vector<double>{0, 0, 1, 1, 1, 1});
  }
  for (auto t : {dtype::i8, dtype::i32, dtype::u8}) {
    tensor x({3}, t), y({3}, dtype::boolean);
    x.assign({0, 1, t == dtype::u8 ? 255.0 : -128.0});
    REQUIRE(run(k::cast{x.desc, y.desc}) == 0);
    CHECK(y.values() == std::vector<double>{0, 1, 1});
  }
  // An int64 whose low bits are all zero but which is nonzero: 2^40 is true.
  tensor l({3}, dtype::i64), lb({3}, dtype::boolean);
  set_i64(l, 0, 0);
  set_i64(l, 1, std::int64_t{1} << 40);
  set_i64(l, 2, std::numeric_limits<std::int64_t>::min());
  REQUIRE(run(k::cast{l.desc, lb.desc}) == 0);
  CHECK(lb.values() == std::vector<double>{0, 1, 1});
  // From bool: any nonzero byte becomes 1 in every dtype, bool included.
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8, dtype::boolean}) {
    CAPTURE(npurt::to_string(t));
    tensor x({4}, dtype::boolean), y({4}, t);
    x.assign({0, 1, 2, 255});
    REQUIRE(run(k::cast{x.desc, y.desc}) == 0);
    CHECK(y.values() == std::vector<double>{0, 1, 1, 1});
  }
}

// ---- validation ----------------------------------------------------------------------------

TEST_CASE("compare, where and logical refuse bad descriptors with typed errors", "[kernels][validate][bool]") {
  auto t = [](shape s, dtype d = dtype::f32) { return shape_only(s, d); };
  const tensor_desc b4 = t({4}, dtype::boolean);
  struct bad {
    const char* what;
    npurt::kernel_desc k;
    errc want;
  };
  const bad cases[] = {
      {"compare operand dtypes", k::compare{k::compare_fn::less, t({4}), t({4}, dtype::f16), b4}, errc::invalid_dtype},
      {"compare y not bool", k::compare{k::compare_fn::less, t({4}), t({4}), t({4}, dtype::u8)}, errc::invalid_dtype},
      {"compare order of bools", k::compare{k::compare_fn::less, b4, b4, b4}, errc::invalid_dtype},
      {"compare shapes", k::compare{k::compare_fn::equal, t({4}), t({3}), b4}, errc::invalid_shape},
      {"compare y shape", k::compare{k::compare_fn::equal, t({4}), t({1}), t({2, 4}, dtype::boolean)},
       errc::invalid_shape},
      {"compare fn", k::compare{static_cast<k::compare_fn>(9), t({4}), t({4}), b4}, errc::invalid_argument},
      {"where cond not bool", k::where{t({4}, dtype::u8), t({4}), t({4}), t({4})}, errc::invalid_dtype},
      {"where x and y dtypes", k::where{b4, t({4}), t({4}, dtype::i64), t({4})}, errc::invalid_dtype},
      {"where out dtype", k::where{b4, t({4}), t({4}), t({4}, dtype::f16)}, errc::invalid_dtype},
      {"where shapes", k::where{t({3}, dtype::boolean), t({4}), t({4}), t({4})}, errc::invalid_shape},
      {"where out shape", k::where{b4, t({2, 1}), t({4}), t({2, 2})}, errc::invalid_shape},
      {"logical not bool", k::logical{k::logical_fn::and_, t({4}, dtype::u8), b4, b4}, errc::invalid_dtype},
      {"logical b not bool", k::logical{k::logical_fn::or_, b4, t({4}, dtype::i8), b4}, errc::invalid_dtype},
      {"logical y not bool", k::logical{k::logical_fn::not_, b4, {}, t({4}, dtype::u8)}, errc::invalid_dtype},
      {"logical not shape", k::logical{k::logical_fn::not_, b4, {}, t({2, 2}, dtype::boolean)}, errc::invalid_shape},
      {"logical shapes", k::logical{k::logical_fn::xor_, b4, t({3}, dtype::boolean), b4}, errc::invalid_shape},
      {"logical fn", k::logical{static_cast<k::logical_fn>(7), b4, b4, b4}, errc::invalid_argument},
      // bool is no number: the elementwise kernels, float or integer, refuse it.
      {"add of bools", k::elementwise{k::eltwise_fn::add, b4, b4, b4}, errc::invalid_dtype},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    std::string what;
    CHECK(npurt::sim::validate(c.k, &what) == c.want);
    CHECK(npurt::sim::run_reference(c.k) == c.want);
    // The message names the operation and its operands with their dtypes.
    CHECK(what.find(std::string(c.k.display_name())) != std::string::npos);
  }
  // Well-formed ones validate, bool equal and a three-way broadcast among them.
  const npurt::kernel_desc good[] = {
      k::compare{k::compare_fn::equal, b4, t({1}, dtype::boolean), b4},
      k::compare{k::compare_fn::greater, t({2, 1}, dtype::i64), t({3}, dtype::i64), t({2, 3}, dtype::boolean)},
      k::where{t({2, 1, 1}, dtype::boolean), t({1, 3, 1}, dtype::i8), t({4}, dtype::i8), t({2, 3, 4}, dtype::i8)},
      k::logical{k::logical_fn::not_, b4, {}, b4},
  };
  for (const auto& g : good) {
    CAPTURE(g.display_name());
    CHECK(npurt::sim::validate(g).value() == 0);
  }
  // The operand lists: not_ reads one tensor, where three.
  CHECK(npurt::sim::operands(k::logical{k::logical_fn::not_, b4, {}, b4}).size() == 2);
  CHECK(npurt::sim::operands(k::where{b4, t({4}), t({4}), t({4})}).size() == 4);
}

// ---- float_class ---------------------------------------------------------------------------

TEST_CASE("float_class finds NaN, and infinities of the signs IsInf selects, in every float dtype",
          "[kernels][float_class][bool]") {
  const double inf = INFINITY;
  // A NaN of each sign, both infinities, the largest finite values, zero and a subnormal f32.
  const std::vector<double> v{NAN, -NAN, inf, -inf, 65504, -3.0e38, 0.0, 1e-40};
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16}) {
    CAPTURE(npurt::to_string(t));
    tensor x({static_cast<std::int64_t>(v.size())}, t), y(x.desc.shape, dtype::boolean);
    x.assign(v);
    REQUIRE(run(k::float_class{k::float_class_fn::is_nan, x.desc, y.desc}) == 0);
    // The values as the dtype holds them: -3e38 is infinite in f16, finite in f32 and bf16.
    const auto held = x.values();
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(y.get(i) == (std::isnan(held[i]) ? 1.0 : 0.0));
    for (const bool neg : {false, true})
      for (const bool pos : {false, true}) {
        CAPTURE(neg, pos);
        REQUIRE(run(k::float_class{k::float_class_fn::is_inf, x.desc, y.desc, neg, pos}) == 0);
        for (std::size_t i = 0; i < v.size(); ++i) {
          const bool want = std::isinf(held[i]) && (held[i] < 0 ? neg : pos);
          CHECK(y.get(i) == (want ? 1.0 : 0.0));
        }
      }
  }
  auto t = [](shape s, dtype d = dtype::f32) { return shape_only(s, d); };
  const tensor_desc b4 = t({4}, dtype::boolean);
  CHECK(npurt::sim::validate(k::float_class{k::float_class_fn::is_nan, t({4}, dtype::i32), b4}) == errc::invalid_dtype);
  CHECK(npurt::sim::validate(k::float_class{k::float_class_fn::is_inf, t({4}), t({4}, dtype::u8)}) ==
        errc::invalid_dtype);
  CHECK(npurt::sim::validate(k::float_class{k::float_class_fn::is_nan, t({2, 2}), b4}) == errc::invalid_shape);
  CHECK(npurt::sim::validate(k::float_class{static_cast<k::float_class_fn>(5), t({4}), b4}) == errc::invalid_argument);
}
