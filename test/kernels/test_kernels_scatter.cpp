// Reference kernels, the index operators decoder exports use: scatter_nd, scatter_elements,
// gather_nd and top_k, against references written here from ONNX's operator specifications
// (onnx.ai/onnx/operators) and numpy's semantics, onnx.ai's own examples, and the failures an
// index out of range must give.
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
using red = npurt::kernels::scatter_reduction;

namespace {

bool sc_is_float(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }

// An integer wrapped into dtype t's range modulo 2^n, as numpy's in-dtype arithmetic does.
std::int64_t sc_wrap(dtype t, std::int64_t v) {
  switch (t) {
    case dtype::i8: return ((v % 256) + 256 + 128) % 256 - 128;
    case dtype::u8: return ((v % 256) + 256) % 256;
    case dtype::i32: return ((v % 4294967296) + 4294967296 + 2147483648) % 4294967296 - 2147483648;
    default: return v;
  }
}

// One update applied to out[pos] the way ONNX's reference does with numpy: the result of each
// step stored in the dtype (out is a tensor of it, so a float result is rounded on set).
void sc_apply(tensor& out, std::size_t pos, double u, red r) {
  const double a = out.get(pos);
  const bool f = sc_is_float(out.desc.type);
  double v = u;
  switch (r) {
    case red::none: v = u; break;
    case red::add: v = f ? a + u : static_cast<double>(sc_wrap(out.desc.type, static_cast<std::int64_t>(a + u))); break;
    case red::mul: v = f ? a * u : static_cast<double>(sc_wrap(out.desc.type, static_cast<std::int64_t>(a * u))); break;
    case red::max: v = std::isnan(a) || std::isnan(u) ? std::nan("") : (a > u ? a : u); break;
    case red::min: v = std::isnan(a) || std::isnan(u) ? std::nan("") : (a < u ? a : u); break;
  }
  out.set(pos, v);
}

// Row-major flat offset of a multi-index in a shape.
std::int64_t sc_flat(const shape& s, const std::vector<std::int64_t>& at) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < s.rank(); ++d) f = f * s[d] + at[d];
  return f;
}

// The next multi-index of s in row-major order; false past the last.
bool sc_next(const shape& s, std::vector<std::int64_t>& at) {
  for (std::size_t d = s.rank(); d-- > 0;) {
    if (++at[d] < s[d]) return true;
    at[d] = 0;
  }
  return false;
}

std::int64_t sc_norm(double v, std::int64_t dim) {
  const auto i = static_cast<std::int64_t>(v);
  return i < 0 ? i + dim : i;
}

// onnx.ai's ScatterND: output = copy(data); for idx in ndindex(indices.shape[:-1]):
// output[indices[idx]] (op)= updates[idx].
tensor sc_ref_scatter_nd(const tensor& data, const tensor& idx, const tensor& upd, red r) {
  tensor out = data;
  const shape& ds = data.desc.shape;
  const shape& is = idx.desc.shape;
  const auto kk = static_cast<std::size_t>(is[is.rank() - 1]);
  const std::size_t tuples = idx.size() / kk;
  std::size_t slice = 1;
  for (std::size_t d = kk; d < ds.rank(); ++d) slice *= static_cast<std::size_t>(ds[d]);
  for (std::size_t i = 0; i < tuples; ++i) {
    std::vector<std::int64_t> at(ds.rank(), 0);
    for (std::size_t j = 0; j < kk; ++j) at[j] = sc_norm(idx.get(i * kk + j), ds[j]);
    const auto base = static_cast<std::size_t>(sc_flat(ds, at));
    for (std::size_t e = 0; e < slice; ++e) sc_apply(out, base + e, upd.get(i * slice + e), r);
  }
  return out;
}

// onnx.ai's ScatterElements: output[indices[i][j]][j] (op)= updates[i][j] for axis 0, and so on.
tensor sc_ref_scatter_elements(const tensor& data, const tensor& idx, const tensor& upd, std::size_t axis, red r) {
  tensor out = data;
  const shape& ds = data.desc.shape;
  const shape& is = idx.desc.shape;
  std::vector<std::int64_t> at(is.rank(), 0);
  std::size_t i = 0;
  do {
    std::vector<std::int64_t> d = at;
    d[axis] = sc_norm(idx.get(i), ds[axis]);
    sc_apply(out, static_cast<std::size_t>(sc_flat(ds, d)), upd.get(i), r);
    ++i;
  } while (sc_next(is, at));
  return out;
}

// onnx.ai's GatherND: output[b..., o...] = data[b..., indices[b..., o..., :], rest...].
std::vector<double> sc_ref_gather_nd(const tensor& data, const tensor& idx, std::size_t b) {
  const shape& ds = data.desc.shape;
  const shape& is = idx.desc.shape;
  const auto kk = static_cast<std::size_t>(is[is.rank() - 1]);
  std::vector<double> out;
  std::vector<std::int64_t> lead(is.rank() - 1, 0);
  shape ls;
  for (std::size_t d = 0; d + 1 < is.rank(); ++d) ls.push_back(is[d]);
  shape rest;
  for (std::size_t d = b + kk; d < ds.rank(); ++d) rest.push_back(ds[d]);
  bool more = true;
  while (more) {
    std::vector<std::int64_t> at(ds.rank(), 0);
    for (std::size_t d = 0; d < b; ++d) at[d] = lead[d];
    std::vector<std::int64_t> ip = lead;
    ip.push_back(0);
    for (std::size_t j = 0; j < kk; ++j) {
      ip.back() = static_cast<std::int64_t>(j);
      at[b + j] = sc_norm(idx.get(static_cast<std::size_t>(sc_flat(is, ip))), ds[b + j]);
    }
    std::vector<std::int64_t> r(rest.rank(), 0);
    do {
      for (std::size_t d = 0; d < rest.rank(); ++d) at[b + kk + d] = r[d];
      out.push_back(data.get(static_cast<std::size_t>(sc_flat(ds, at))));
    } while (rest.rank() && sc_next(rest, r));
    more = ls.rank() && sc_next(ls, lead);
  }
  return out;
}

// onnx.ai's TopK by selection: k times, the best remaining element of the line, scanning in
// index order and replacing only on a strictly better one, so that equal values keep the lower
// index first. NaN is above every number (numpy sorts it last), and one NaN is no better than
// another.
void sc_ref_top_k(const std::vector<double>& line, std::int64_t kk, bool largest, std::vector<double>& vals,
                  std::vector<std::int64_t>& pos) {
  std::vector<bool> taken(line.size(), false);
  const auto better = [&](double a, double b) {  // a strictly before b
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return largest ? na && !nb : nb && !na;
    return largest ? a > b : a < b;
  };
  for (std::int64_t r = 0; r < kk; ++r) {
    std::size_t best = line.size();
    for (std::size_t j = 0; j < line.size(); ++j)
      if (!taken[j] && (best == line.size() || better(line[j], line[best]))) best = j;
    taken[best] = true;
    vals.push_back(line[best]);
    pos.push_back(static_cast<std::int64_t>(best));
  }
}

bool sc_same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

// ---- scatter_nd ----------------------------------------------------------------------------

TEST_CASE("scatter_nd reproduces onnx.ai's ScatterND examples", "[kernels][scatter_nd]") {
  tensor data({8}), idx({4, 1}, dtype::i64), upd({4}), y({8});
  data.assign({1, 2, 3, 4, 5, 6, 7, 8});
  idx.assign({4, 3, 1, 7});
  upd.assign({9, 10, 11, 12});
  REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{1, 11, 3, 10, 9, 6, 7, 12});
  // Example 2: two whole 4x4 blocks of a 4x4x4 tensor replaced.
  tensor d3({4, 4, 4}), i3({2, 1}, dtype::i32), u3({2, 4, 4}), y3({4, 4, 4});
  std::vector<double> dv, uv, want;
  for (int b = 0; b < 4; ++b)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) dv.push_back(b == 0 || b == 3 ? 1 + r + c : 8 - r - c);
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) uv.push_back(b == 0 ? 5 + r : 1 + r);
  want = dv;
  for (int i = 0; i < 16; ++i) want[static_cast<std::size_t>(i)] = uv[static_cast<std::size_t>(i)];
  for (int i = 0; i < 16; ++i) want[static_cast<std::size_t>(32 + i)] = uv[static_cast<std::size_t>(16 + i)];
  d3.assign(dv);
  u3.assign(uv);
  i3.assign({0, 2});
  REQUIRE(run(k::scatter_nd{d3.desc, i3.desc, u3.desc, y3.desc}) == 0);
  CHECK(y3.values() == want);
  // Opset 16's add example: the update to index 0 applied twice.
  tensor d4 = d3;
  i3.assign({0, 0});
  REQUIRE(run(k::scatter_nd{d3.desc, i3.desc, u3.desc, d4.desc, red::add}) == 0);
  want = dv;
  for (int i = 0; i < 16; ++i)
    want[static_cast<std::size_t>(i)] += uv[static_cast<std::size_t>(i)] + uv[static_cast<std::size_t>(16 + i)];
  CHECK(d4.values() == want);
}

TEST_CASE("scatter_nd matches ONNX's definition for every reduction, dtype and index depth", "[kernels][scatter_nd]") {
  int_draw next(0x5ca7);
  for (int round = 0; round < 80; ++round)
    for (auto t : {dtype::f32, dtype::f16, dtype::i32, dtype::i8, dtype::u8})
      for (auto r : {red::none, red::add, red::mul, red::max, red::min}) {
        const auto rank = static_cast<std::size_t>(next(1, 4));
        shape ds;
        for (std::size_t d = 0; d < rank; ++d) ds.push_back(next(1, 4));
        const auto kk = static_cast<std::size_t>(next(1, static_cast<std::int64_t>(rank)));
        shape is, us;
        const auto lead = static_cast<std::size_t>(next(1, 2));
        for (std::size_t d = 0; d < lead; ++d) is.push_back(next(1, 4));
        us = is;
        is.push_back(static_cast<std::int64_t>(kk));
        for (std::size_t d = kk; d < rank; ++d) us.push_back(ds[d]);
        const dtype it = next(0, 1) ? dtype::i64 : dtype::i32;
        CAPTURE(round, npurt::to_string(t), static_cast<int>(r), rank, kk);
        tensor data(ds, t), idx(is, it), upd(us, t), y(ds, t);
        // Small integers: exact in every dtype; u8 from 0, and the products wrap in i8 and u8.
        const double lo = t == dtype::u8 ? 0 : -4;
        data.fill(static_cast<std::uint64_t>(round) * 7 + 1, lo, 6, true);
        upd.fill(static_cast<std::uint64_t>(round) * 7 + 2, lo, 6, true);
        for (std::size_t i = 0; i < idx.size(); ++i) {
          const std::int64_t dim = ds[i % kk];  // duplicates are likely: the last wins under none
          idx.set(i, static_cast<double>(next(-dim, dim - 1)));
        }
        REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc, r}) == 0);
        CHECK(sc_same(y.values(), sc_ref_scatter_nd(data, idx, upd, r).values()));
      }
}

TEST_CASE("scatter_nd: duplicates under none, last wins; in place; a scalar update", "[kernels][scatter_nd]") {
  tensor data({2, 3}), idx({3, 2}, dtype::i64), upd({3}), y({2, 3});
  data.assign({1, 2, 3, 4, 5, 6});
  idx.assign({1, 2, 0, 0, -1, -1});  // (1, 2) twice: the second, written as (-1, -1), wins
  upd.assign({10, 20, 30});
  REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc}) == 0);
  CHECK(y.values() == std::vector<double>{20, 2, 3, 4, 5, 30});
  // In place, as a KV-cache update writes: y is data's own memory.
  REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, data.desc, red::mul}) == 0);
  CHECK(data.values() == std::vector<double>{20, 2, 3, 4, 5, 6 * 10 * 30});
  // A full index tuple addresses one element: updates is a scalar.
  tensor one({1}, dtype::i32), scalar_upd(shape{}), v({3});
  v.assign({1, 2, 3});
  one.assign({-2});
  scalar_upd.assign({7});
  REQUIRE(run(k::scatter_nd{v.desc, one.desc, scalar_upd.desc, v.desc, red::max}) == 0);
  CHECK(v.values() == std::vector<double>{1, 7, 3});
}

TEST_CASE("scatter_nd moves any dtype's bytes exactly; max and min propagate NaN", "[kernels][scatter_nd]") {
  // int64 values past 2^53 (no double holds them) and a NaN payload survive a replace.
  tensor data({3}, dtype::i64), idx({1, 1}, dtype::i64), upd({1}, dtype::i64), y({3}, dtype::i64);
  const std::int64_t big = (std::int64_t{1} << 62) + 1, other = -(std::int64_t{1} << 60) - 3;
  for (int i = 0; i < 3; ++i) std::memcpy(data.bytes.data() + 8 * i, &other, 8);
  std::memcpy(upd.bytes.data(), &big, 8);
  idx.assign({1});
  REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc}) == 0);
  std::int64_t got[3];
  std::memcpy(got, y.bytes.data(), 24);
  CHECK(got[0] == other);
  CHECK(got[1] == big);
  CHECK(got[2] == other);
  // int64 add wraps modulo 2^64, as numpy's does.
  REQUIRE(run(k::scatter_nd{y.desc, idx.desc, upd.desc, y.desc, red::add}) == 0);
  std::memcpy(got, y.bytes.data(), 24);
  CHECK(got[1] == std::numeric_limits<std::int64_t>::min() + 2);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  tensor f({3}), fi({2, 1}, dtype::i32), fu({2}), fy({3});
  f.assign({1, qnan, 3});
  fi.assign({0, 1});
  fu.assign({qnan, 5});
  for (auto r : {red::max, red::min}) {
    REQUIRE(run(k::scatter_nd{f.desc, fi.desc, fu.desc, fy.desc, r}) == 0);
    CHECK(std::isnan(fy.get(0)));
    CHECK(std::isnan(fy.get(1)));
    CHECK(fy.get(2) == 3);
  }
}

TEST_CASE("a scatter_nd index out of range fails, names the index and leaves y untouched", "[kernels][scatter_nd]") {
  for (auto it : {dtype::i32, dtype::i64}) {
    tensor data({2, 3}), idx({2, 2}, it), upd({2}), y({2, 3});
    data.assign({1, 2, 3, 4, 5, 6});
    upd.assign({9, 9});
    for (double bad : {3.0, -4.0, 1000.0}) {
      CAPTURE(npurt::to_string(it), bad);
      idx.assign({0, 0, 1, bad});  // the second tuple's column, after a tuple that would be written
      y.assign({-7, -7, -7, -7, -7, -7});
      std::error_code ec;
      const std::string why = run_why(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc, red::add}, ec);
      CHECK(ec == npurt::errc::invalid_argument);
      CHECK(why == "indices[3] = " + std::to_string(static_cast<int>(bad)) +
                       " is outside [-3, 2] (data axis 1 has 3 entries)");
      CHECK(y.values() == std::vector<double>{-7, -7, -7, -7, -7, -7});
    }
    // The first component is checked against axis 0.
    idx.assign({2, 0, 0, 0});
    std::error_code ec;
    CHECK(run_why(k::scatter_nd{data.desc, idx.desc, upd.desc, y.desc}, ec) ==
          "indices[0] = 2 is outside [-2, 1] (data axis 0 has 2 entries)");
    CHECK(ec == npurt::errc::invalid_argument);
    // In place, the failure leaves data itself as it was.
    REQUIRE(run(k::scatter_nd{data.desc, idx.desc, upd.desc, data.desc}) ==
            static_cast<int>(npurt::errc::invalid_argument));
    CHECK(data.values() == std::vector<double>{1, 2, 3, 4, 5, 6});
  }
}

// ---- scatter_elements ----------------------------------------------------------------------

TEST_CASE("scatter_elements reproduces onnx.ai's ScatterElements examples", "[kernels][scatter_elements]") {
  tensor data({3, 3}), idx({2, 3}, dtype::i64), upd({2, 3}), y({3, 3});
  data.assign({0, 0, 0, 0, 0, 0, 0, 0, 0});
  idx.assign({1, 0, 2, 0, 2, 1});
  upd.assign({1.0, 1.1, 1.2, 2.0, 2.1, 2.2});
  REQUIRE(run(k::scatter_elements{data.desc, idx.desc, upd.desc, y.desc, 0}) == 0);
  const std::vector<double> want{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(y.get(i) == static_cast<double>(static_cast<float>(want[i])));
  tensor d2({1, 5}), i2({1, 2}, dtype::i32), u2({1, 2}), y2({1, 5});
  d2.assign({1, 2, 3, 4, 5});
  i2.assign({1, 3});
  u2.assign({11, 21});
  REQUIRE(run(k::scatter_elements{d2.desc, i2.desc, u2.desc, y2.desc, 1}) == 0);
  CHECK(y2.values() == std::vector<double>{1, 11, 3, 21, 5});
  // Negative indices, and opset 16's add with a duplicate index: both updates land.
  i2.assign({-4, -4});
  REQUIRE(run(k::scatter_elements{d2.desc, i2.desc, u2.desc, y2.desc, 1, red::add}) == 0);
  CHECK(y2.values() == std::vector<double>{1, 34, 3, 4, 5});
}

TEST_CASE("scatter_elements matches ONNX's definition on random shapes, axes and reductions",
          "[kernels][scatter_elements]") {
  int_draw next(0x5ce1);
  for (int round = 0; round < 60; ++round)
    for (auto t : {dtype::f32, dtype::bf16, dtype::i64, dtype::i8})
      for (auto r : {red::none, red::add, red::mul, red::max, red::min}) {
        const auto rank = static_cast<std::size_t>(next(1, 4));
        const auto axis = static_cast<std::size_t>(next(0, static_cast<std::int64_t>(rank) - 1));
        shape ds, is;
        for (std::size_t d = 0; d < rank; ++d) {
          const std::int64_t e = next(1, 4);
          ds.push_back(e);
          is.push_back(d == axis ? next(1, 5) : next(1, e));
        }
        CAPTURE(round, npurt::to_string(t), static_cast<int>(r), axis);
        tensor data(ds, t), idx(is, next(0, 1) ? dtype::i64 : dtype::i32), upd(is, t), y(ds, t);
        data.fill(static_cast<std::uint64_t>(round) * 5 + 3, -4, 6, true);
        upd.fill(static_cast<std::uint64_t>(round) * 5 + 4, -4, 6, true);
        for (std::size_t i = 0; i < idx.size(); ++i) idx.set(i, static_cast<double>(next(-ds[axis], ds[axis] - 1)));
        REQUIRE(run(k::scatter_elements{data.desc, idx.desc, upd.desc, y.desc, static_cast<std::int32_t>(axis), r}) ==
                0);
        CHECK(sc_same(y.values(), sc_ref_scatter_elements(data, idx, upd, axis, r).values()));
      }
}

TEST_CASE("a scatter_elements index out of range fails, names it, y untouched", "[kernels][scatter_elements]") {
  tensor data({2, 3}), idx({2, 2}, dtype::i64), upd({2, 2}), y({2, 3});
  data.assign({1, 2, 3, 4, 5, 6});
  upd.assign({1, 1, 1, 1});
  idx.assign({0, 1, 2, -4});
  y.assign({0, 0, 0, 0, 0, 0});
  std::error_code ec;
  CHECK(run_why(k::scatter_elements{data.desc, idx.desc, upd.desc, y.desc, 1}, ec) ==
        "indices[3] = -4 is outside [-3, 2] (data axis 1 has 3 entries)");
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK(y.values() == std::vector<double>{0, 0, 0, 0, 0, 0});
}

// ---- gather_nd -----------------------------------------------------------------------------

TEST_CASE("gather_nd reproduces onnx.ai's GatherND examples", "[kernels][gather_nd]") {
  tensor d({2, 2}, dtype::i32), i({2, 2}, dtype::i64), y({2}, dtype::i32);
  d.assign({0, 1, 2, 3});
  i.assign({0, 0, 1, 1});
  REQUIRE(run(k::gather_nd{d.desc, i.desc, y.desc, 0}) == 0);
  CHECK(y.values() == std::vector<double>{0, 3});
  tensor i1({2, 1}, dtype::i64), y1({2, 2}, dtype::i32);
  i1.assign({1, 0});
  REQUIRE(run(k::gather_nd{d.desc, i1.desc, y1.desc, 0}) == 0);
  CHECK(y1.values() == std::vector<double>{2, 3, 0, 1});
  tensor d3({2, 2, 2}), i3({2, 2}, dtype::i64), y3({2, 2});
  d3.assign({0, 1, 2, 3, 4, 5, 6, 7});
  i3.assign({0, 1, 1, 0});
  REQUIRE(run(k::gather_nd{d3.desc, i3.desc, y3.desc, 0}) == 0);
  CHECK(y3.values() == std::vector<double>{2, 3, 4, 5});
  tensor i4({2, 1, 2}, dtype::i64), y4({2, 1, 2});
  i4.assign({0, 1, 1, 0});
  REQUIRE(run(k::gather_nd{d3.desc, i4.desc, y4.desc, 0}) == 0);
  CHECK(y4.values() == std::vector<double>{2, 3, 4, 5});
  // batch_dims = 1: each batch's own index.
  tensor i5({2, 1}, dtype::i64), y5({2, 2});
  i5.assign({1, 0});
  REQUIRE(run(k::gather_nd{d3.desc, i5.desc, y5.desc, 1}) == 0);
  CHECK(y5.values() == std::vector<double>{2, 3, 4, 5});
  // A full index tuple: y is a scalar.
  tensor i6({2}, dtype::i32), y6(shape{}, dtype::i32);
  i6.assign({-1, -2});
  REQUIRE(run(k::gather_nd{d.desc, i6.desc, y6.desc, 0}) == 0);
  CHECK(y6.get(0) == 2);
}

TEST_CASE("gather_nd matches ONNX's definition with batch_dims on random shapes", "[kernels][gather_nd]") {
  int_draw next(0x9a7d);
  for (int round = 0; round < 150; ++round) {
    const auto rank = static_cast<std::size_t>(next(1, 4));
    const auto b = static_cast<std::size_t>(next(0, static_cast<std::int64_t>(rank) - 1));
    const auto kk = static_cast<std::size_t>(next(1, static_cast<std::int64_t>(rank - b)));
    shape ds;
    for (std::size_t d = 0; d < rank; ++d) ds.push_back(next(1, 4));
    shape is, ys;
    for (std::size_t d = 0; d < b; ++d) is.push_back(ds[d]);
    const auto extra = static_cast<std::size_t>(next(0, 2));
    for (std::size_t d = 0; d < extra; ++d) is.push_back(next(1, 3));
    ys = is;
    is.push_back(static_cast<std::int64_t>(kk));
    for (std::size_t d = b + kk; d < rank; ++d) ys.push_back(ds[d]);
    const dtype t = round % 3 == 0 ? dtype::f16 : round % 3 == 1 ? dtype::i64 : dtype::u8;
    CAPTURE(round, rank, b, kk);
    tensor data(ds, t), idx(is, round % 2 ? dtype::i64 : dtype::i32), y(ys, t);
    data.fill(static_cast<std::uint64_t>(round) + 11, 0, 200, true);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const std::int64_t dim = ds[b + i % kk];
      idx.set(i, static_cast<double>(next(-dim, dim - 1)));
    }
    REQUIRE(run(k::gather_nd{data.desc, idx.desc, y.desc, static_cast<std::int32_t>(b)}) == 0);
    CHECK(y.values() == sc_ref_gather_nd(data, idx, b));
  }
}

TEST_CASE("a gather_nd index out of range fails, names it, y untouched", "[kernels][gather_nd]") {
  tensor d({2, 2, 2}), i({2, 1}, dtype::i64), y({2, 2});
  d.assign({0, 1, 2, 3, 4, 5, 6, 7});
  i.assign({1, 2});  // batch_dims 1: the index addresses axis 1
  y.assign({9, 9, 9, 9});
  std::error_code ec;
  CHECK(run_why(k::gather_nd{d.desc, i.desc, y.desc, 1}, ec) ==
        "indices[1] = 2 is outside [-2, 1] (data axis 1 has 2 entries)");
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK(y.values() == std::vector<double>{9, 9, 9, 9});
}

// ---- top_k ---------------------------------------------------------------------------------

TEST_CASE("top_k reproduces onnx.ai's TopK example, largest and smallest", "[kernels][top_k]") {
  tensor x({3, 4}), v({3, 3}), i({3, 3}, dtype::i64);
  x.assign({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, 1, 3}) == 0);
  CHECK(v.values() == std::vector<double>{3, 2, 1, 7, 6, 5, 11, 10, 9});
  CHECK(i.values() == std::vector<double>{3, 2, 1, 3, 2, 1, 3, 2, 1});
  REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, 1, 3, false}) == 0);
  CHECK(v.values() == std::vector<double>{0, 1, 2, 4, 5, 6, 8, 9, 10});
  CHECK(i.values() == std::vector<double>{0, 1, 2, 0, 1, 2, 0, 1, 2});
}

TEST_CASE("top_k breaks ties by the lower index and puts NaN above every number", "[kernels][top_k]") {
  const double nan = std::nan("");
  tensor x({1, 7}), v({1, 7}), i({1, 7}, dtype::i64);
  x.assign({2, nan, 5, 2, nan, 5, -1});
  REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, 1, 7}) == 0);
  CHECK(sc_same(v.values(), {nan, nan, 5, 5, 2, 2, -1}));
  CHECK(i.values() == std::vector<double>{1, 4, 2, 5, 0, 3, 6});
  REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, 1, 7, false}) == 0);
  CHECK(sc_same(v.values(), {-1, 2, 2, 5, 5, nan, nan}));
  CHECK(i.values() == std::vector<double>{6, 0, 3, 2, 5, 1, 4});
  // sorted = false gives the same order (ONNX leaves it open).
  tensor v2({1, 3}), i2({1, 3}, dtype::i32);
  REQUIRE(run(k::top_k{x.desc, v2.desc, i2.desc, 1, 3, true, false}) == 0);
  CHECK(i2.values() == std::vector<double>{1, 4, 2});
}

TEST_CASE("top_k matches a selection reference on random shapes, axes, k and dtypes", "[kernels][top_k]") {
  int_draw next(0x70bc);
  for (int round = 0; round < 120; ++round)
    for (auto t : {dtype::f32, dtype::f16, dtype::i32, dtype::u8}) {
      const auto rank = static_cast<std::size_t>(next(1, 4));
      const auto axis = static_cast<std::size_t>(next(0, static_cast<std::int64_t>(rank) - 1));
      shape xs;
      for (std::size_t d = 0; d < rank; ++d) xs.push_back(next(1, d == axis ? 9 : 3));
      const std::int64_t kk = next(1, xs[axis]);
      const bool largest = next(0, 1) == 1;
      shape ys = xs;
      ys[axis] = kk;
      CAPTURE(round, npurt::to_string(t), axis, kk, largest);
      tensor x(xs, t), v(ys, t), i(ys, dtype::i64);
      x.fill(static_cast<std::uint64_t>(round) + 3, 0, 5, true);  // few values: many ties
      if (sc_is_float(t) && round % 4 == 0)
        x.set(static_cast<std::size_t>(next(0, static_cast<std::int64_t>(x.size()) - 1)), std::nan(""));
      REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, static_cast<std::int32_t>(axis), kk, largest}) == 0);
      // Each line along the axis, in the reference.
      std::vector<std::int64_t> at(rank, 0);
      shape outer = xs;
      outer[axis] = 1;
      do {
        std::vector<double> line;
        for (std::int64_t j = 0; j < xs[axis]; ++j) {
          auto p = at;
          p[axis] = j;
          line.push_back(x.get(static_cast<std::size_t>(sc_flat(xs, p))));
        }
        std::vector<double> wv;
        std::vector<std::int64_t> wi;
        sc_ref_top_k(line, kk, largest, wv, wi);
        for (std::int64_t r = 0; r < kk; ++r) {
          auto p = at;
          p[axis] = r;
          const auto o = static_cast<std::size_t>(sc_flat(ys, p));
          REQUIRE(sc_same({v.get(o)}, {wv[static_cast<std::size_t>(r)]}));
          REQUIRE(i.get(o) == static_cast<double>(wi[static_cast<std::size_t>(r)]));
        }
      } while (sc_next(outer, at));
    }
}

TEST_CASE("top_k compares int64 exactly past 2^53 and copies the values' bits", "[kernels][top_k]") {
  const std::int64_t a = (std::int64_t{1} << 60) + 1, b = (std::int64_t{1} << 60) + 2;  // one double
  tensor x({3}, dtype::i64), v({2}, dtype::i64), i({2}, dtype::i64);
  const std::int64_t xs[3] = {a, b, a};
  std::memcpy(x.bytes.data(), xs, 24);
  REQUIRE(run(k::top_k{x.desc, v.desc, i.desc, 0, 2}) == 0);
  std::int64_t got[2];
  std::memcpy(got, v.bytes.data(), 16);
  CHECK(got[0] == b);
  CHECK(got[1] == a);
  CHECK(i.values() == std::vector<double>{1, 0});
}

TEST_CASE("index kernels refuse descriptors ONNX would reject", "[kernels][scatter_nd][validate]") {
  using npurt::errc;
  const auto code = [](const npurt::kernel_desc& kd) { return npurt::sim::validate(kd); };
  const auto f = [](shape s, dtype t = dtype::f32) { return shape_only(s, t); };
  // ScatterND: k past data's rank; updates of the wrong shape; float indices; y not data.
  CHECK(code(k::scatter_nd{f({2, 3}), f({1, 3}, dtype::i64), f({1}), f({2, 3})}) == errc::invalid_shape);
  CHECK(code(k::scatter_nd{f({2, 3}), f({1, 1}, dtype::i64), f({1, 2}), f({2, 3})}) == errc::invalid_shape);
  CHECK(code(k::scatter_nd{f({2, 3}), f({1, 1}), f({1, 3}), f({2, 3})}) == errc::invalid_dtype);
  CHECK(code(k::scatter_nd{f({2, 3}), f({1, 1}, dtype::i64), f({1, 3}), f({3, 2})}) == errc::invalid_shape);
  CHECK(code(k::scatter_nd{f({2, 3}), f({1, 1}, dtype::i64), f({1, 3}), f({2, 3}), static_cast<red>(9)}) ==
        errc::invalid_argument);
  CHECK(!code(k::scatter_nd{f({2, 3}), f({1, 1}, dtype::i64), f({1, 3}), f({2, 3}), red::min}));
  // ScatterElements: an axis past the rank; updates not indices' shape; indices larger off the axis.
  CHECK(code(k::scatter_elements{f({2, 3}), f({2, 3}, dtype::i64), f({2, 3}), f({2, 3}), 2}) == errc::invalid_argument);
  CHECK(code(k::scatter_elements{f({2, 3}), f({2, 3}, dtype::i64), f({2, 2}), f({2, 3}), 0}) == errc::invalid_shape);
  CHECK(code(k::scatter_elements{f({2, 3}), f({2, 4}, dtype::i64), f({2, 4}), f({2, 3}), 0}) == errc::invalid_shape);
  // GatherND: batch dims that differ, batch_dims past the ranks, y of the wrong shape.
  CHECK(code(k::gather_nd{f({2, 3}), f({3, 1}, dtype::i64), f({3}), 1}) == errc::invalid_shape);
  CHECK(code(k::gather_nd{f({2, 3}), f({2, 1}, dtype::i64), f({2}), 2}) == errc::invalid_argument);
  CHECK(code(k::gather_nd{f({2, 3}), f({2, 1}, dtype::i64), f({2, 2}), 0}) == errc::invalid_shape);
  CHECK(!code(k::gather_nd{f({2, 3}), f({2, 1}, dtype::i64), f({2}), 1}));
  // TopK: k of 0 or past the axis, values of the wrong shape, float indices.
  CHECK(code(k::top_k{f({2, 3}), f({2, 0}), f({2, 0}, dtype::i64), 1, 0}) == errc::invalid_shape);
  CHECK(code(k::top_k{f({2, 3}), f({2, 4}), f({2, 4}, dtype::i64), 1, 4}) == errc::invalid_argument);
  CHECK(code(k::top_k{f({2, 3}), f({2, 2}), f({2, 1}, dtype::i64), 1, 2}) == errc::invalid_shape);
  CHECK(code(k::top_k{f({2, 3}), f({2, 2}), f({2, 2}), 1, 2}) == errc::invalid_dtype);
  CHECK(!code(k::top_k{f({2, 3}), f({2, 2}), f({2, 2}, dtype::i32), 1, 2}));
}
