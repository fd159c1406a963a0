// reduce_op::avg (NCCL's ncclAvg): the sum over the ranks, then one division by the rank count in
// the element type. Expected values are worked by hand in the comments.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace coll_avg_test {

using Catch::Matchers::ContainsSubstring;
using coll_test::mesh_preset;
using npurt::dtype;
using npurt::errc;
using npurt::reduce_op;

enum class kind { all_reduce, reduce, reduce_scatter, grouped_all_reduce };

const char* name_of(kind k) {
  switch (k) {
    case kind::all_reduce: return "all_reduce";
    case kind::reduce: return "reduce";
    case kind::reduce_scatter: return "reduce_scatter";
    case kind::grouped_all_reduce: return "grouped all_reduce";
  }
  return "?";
}

// The values of element i of rank d's vector, in double (each is exact in every dtype used).
//   0: d + 1                      sum n(n+1)/2
//   1: 1 on rank 0, else 0        sum 1
//   2: 2048 on rank 0, else 1     (f16 only; see below)
//   3: -(d + 1)                   sum -n(n+1)/2
//   4: 7 on rank 0, else 0        (i32 only)
//   5: -7 on rank 0, else 0       (i32 only)
//   6: INT32_MAX                  (i32 only) sum n (2^31 - 1), wrapped modulo 2^32
std::vector<double> rank_values(dtype t, int d) {
  std::vector<double> v{double(d + 1), d == 0 ? 1.0 : 0.0};
  if (t == dtype::f16) v.push_back(d == 0 ? 2048.0 : 1.0);
  v.push_back(-double(d + 1));
  if (t == dtype::i32) {
    v.push_back(d == 0 ? 7.0 : 0.0);
    v.push_back(d == 0 ? -7.0 : 0.0);
    v.push_back(double(std::numeric_limits<std::int32_t>::max()));
  }
  return v;
}

// The average of those values over n ranks, worked by hand:
//  f32: (n+1)/2, 1/n (n = 3: 1/3 rounded once to f32), -(n+1)/2.
//  f16: the same, 1/3 rounded to f16: 0x3555 = 1365/4096 = 0.333251953125. Element 2 shows the
//       sum rounding at every step as the sum path does: 2048 + 1 = 2049 lies halfway between the
//       f16 neighbours 2048 and 2050 and rounds to the even 2048, so the sum stays 2048 and the
//       average is 2048/n: 1024, 682.67 -> 682.5 (f16's step is 0.5 in [512, 1024)), 256. The
//       exact sum 2050 / 3 would have rounded to 683.5.
//  i32: truncated toward zero: 3/2 = 1, 6/3 = 2, 36/8 = 4; -3/2 = -1, -36/8 = -4 (not -2 and
//       -5, as a floor would give); 7/n = 3, 2, 0 and -7/n = -3, -2, 0; n INT32_MAX wraps to
//       2^32 - 2 = -2 (n = 2), 2^31 - 3 (n = 3), 2^32 - 8 = -8 (n = 8), divided: -1, 715827881, -1.
std::vector<double> expected_avg(dtype t, int n) {
  static const std::map<int, std::vector<double>> f32{
      {2, {1.5, 0.5, -1.5}}, {3, {2.0, double(1.0f / 3.0f), -2.0}}, {8, {4.5, 0.125, -4.5}}};
  static const std::map<int, std::vector<double>> f16{
      {2, {1.5, 0.5, 1024.0, -1.5}}, {3, {2.0, 0.333251953125, 682.5, -2.0}}, {8, {4.5, 0.125, 256.0, -4.5}}};
  static const std::map<int, std::vector<double>> i32{
      {2, {1, 0, -1, 3, -3, -1}}, {3, {2, 0, -2, 2, -2, 715827881}}, {8, {4, 0, -4, 0, 0, -1}}};
  return (t == dtype::f32 ? f32 : t == dtype::f16 ? f16 : i32).at(n);
}

std::vector<std::byte> encode(dtype t, const std::vector<double>& v) {
  const std::size_t es = npurt::size_of(t);
  std::vector<std::byte> out(v.size() * es);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == dtype::f32) {
      const auto f = static_cast<float>(v[i]);
      std::memcpy(&out[i * es], &f, es);
    } else if (t == dtype::f16) {
      const std::uint16_t h = npurt::numeric::float_to_half_bits(static_cast<float>(v[i]));
      std::memcpy(&out[i * es], &h, es);
    } else {
      const auto x = static_cast<std::int32_t>(v[i]);
      std::memcpy(&out[i * es], &x, es);
    }
  }
  return out;
}

std::vector<double> decode(dtype t, const std::vector<std::byte>& b) {
  const std::size_t es = npurt::size_of(t);
  std::vector<double> out(b.size() / es);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t == dtype::f32) {
      float f;
      std::memcpy(&f, &b[i * es], es);
      out[i] = f;
    } else if (t == dtype::f16) {
      std::uint16_t h;
      std::memcpy(&h, &b[i * es], es);
      out[i] = npurt::numeric::half_bits_to_float(h);
    } else {
      std::int32_t x;
      std::memcpy(&x, &b[i * es], es);
      out[i] = x;
    }
  }
  return out;
}

// Runs one averaging operation of `k` on n ranks and returns what each rank's output holds
// (reduce: rank n-1 is the root; the others' outputs keep the 0x5a bytes they started with).
// reduce_scatter's shard j of every rank holds the rank's values with 10 j added to element 0,
// so that a shard delivered to the wrong rank shows.
std::vector<std::vector<std::byte>> run_avg(kind k, dtype t, int n) {
  npurt::system sys{mesh_preset(n)};
  auto comm = npurt::communicator::init_all(sys);
  const std::size_t count = rank_values(t, 0).size(), bytes = count * npurt::size_of(t);
  const bool scatter = k == kind::reduce_scatter;
  const std::size_t in_bytes = scatter ? bytes * static_cast<std::size_t>(n) : bytes;
  std::vector<npurt::stream> s;
  std::vector<void*> src, dst;
  const std::vector<std::byte> fill(bytes, std::byte{0x5a});
  for (int d = 0; d < n; ++d) {
    auto& dev = sys.device(d);
    s.push_back(dev.make_stream());
    std::vector<std::byte> in;
    for (int j = 0; j < (scatter ? n : 1); ++j) {
      auto v = rank_values(t, d);
      v[0] += 10.0 * j;
      const auto e = encode(t, v);
      in.insert(in.end(), e.begin(), e.end());
    }
    src.push_back(dev.malloc(in_bytes));
    dst.push_back(dev.malloc(bytes));
    dev.memcpy(src.back(), in_bytes, in.data(), in_bytes, npurt::memcpy_kind::host_to_device);
    dev.memcpy(dst.back(), bytes, fill.data(), bytes, npurt::memcpy_kind::host_to_device);
  }
  if (k == kind::grouped_all_reduce) comm.group_start();
  for (int d = 0; d < n; ++d) {
    auto& st = s[static_cast<std::size_t>(d)];
    if (k == kind::reduce) comm.reduce(src[d], dst[d], count, t, reduce_op::avg, n - 1, st);
    else if (scatter) comm.reduce_scatter(src[d], dst[d], count, t, reduce_op::avg, st);
    else comm.all_reduce(src[d], dst[d], count, t, reduce_op::avg, st);
  }
  if (k == kind::grouped_all_reduce) comm.group_end();
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  std::vector<std::vector<std::byte>> out;
  for (int d = 0; d < n; ++d) {
    out.emplace_back(bytes);
    sys.device(d).memcpy(out.back().data(), bytes, dst[d], bytes, npurt::memcpy_kind::device_to_host);
  }
  return out;
}

TEST_CASE("avg is the ranks' sum divided once by their count, in the element type", "[collective][functional][avg]") {
  const kind k = GENERATE(kind::all_reduce, kind::reduce, kind::reduce_scatter, kind::grouped_all_reduce);
  const dtype t = GENERATE(dtype::f32, dtype::i32, dtype::f16);
  const int n = GENERATE(2, 3, 8);
  CAPTURE(name_of(k), npurt::to_string(t), n);
  const auto out = run_avg(k, t, n);
  for (int d = 0; d < n; ++d) {
    CAPTURE(d);
    std::vector<double> want = expected_avg(t, n);
    if (k == kind::reduce_scatter) want[0] += 10.0 * d;  // (n+1)/2 + 10 d: exact, or truncated + 10 d
    if (k == kind::reduce && d != n - 1) CHECK(out[d] == std::vector<std::byte>(out[d].size(), std::byte{0x5a}));
    else CHECK(decode(t, out[d]) == want);
  }
}

TEST_CASE("avg costs what sum costs: the simulator's reductions do not depend on the operator",
          "[collective][timing][avg]") {
  // The cost model charges a phase's reduction by its bytes (gamma per byte) whatever the
  // operator, so the average's division adds no time and an averaging step times as a summing one.
  const int n = GENERATE(2, 3, 8);
  auto end_of = [n](reduce_op r, npurt::dtype t) {
    npurt::system sys{npurt::sim::make_backend(mesh_preset(n), coll_test::timing_only())};
    auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
    std::vector<npurt::stream> s;
    for (int d = 0; d < n; ++d) s.push_back(sys.device(d).make_stream());
    for (int d = 0; d < n; ++d) comm.all_reduce(nullptr, nullptr, 1 << 20, t, r, s[static_cast<std::size_t>(d)]);
    for (int d = 0; d < n; ++d) comm.reduce_scatter(nullptr, nullptr, 1 << 18, t, r, s[static_cast<std::size_t>(d)]);
    sys.run();
    REQUIRE(comm.records().size() == 2);
    return std::vector<npurt::sim_time>{comm.records()[0].end, comm.records()[1].end};
  };
  for (const dtype t : {dtype::f32, dtype::f16}) {
    const auto sum = end_of(reduce_op::sum, t);
    CHECK(sum[0] > npurt::sim_time{});
    CHECK(end_of(reduce_op::avg, t) == sum);
  }
}

TEST_CASE("avg and sum of one call are a mismatch between ranks", "[collective][errors][avg]") {
  npurt::system sys{mesh_preset(2)};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  std::vector<void*> b;
  for (int d = 0; d < 2; ++d) {
    s.push_back(sys.device(d).make_stream());
    b.push_back(sys.device(d).malloc(64));
  }
  comm.all_reduce(b[0], b[0], 4, dtype::f32, reduce_op::avg, s[0]);
  comm.all_reduce(b[1], b[1], 4, dtype::f32, reduce_op::sum, s[1]);
  sys.run();
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::collective_mismatch);
  CHECK_THAT(msg, ContainsSubstring("all_reduce(count=4, f32, avg)") && ContainsSubstring("reduction op"));
}

TEST_CASE("a reduce operator past avg, and avg of booleans, are refused at the call", "[collective][args][avg]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  auto s = sys.device(0).make_stream();
  void* b = sys.device(0).malloc(64);
  std::error_code ec;
  for (const auto bad : {static_cast<reduce_op>(5), static_cast<reduce_op>(99)}) {
    CAPTURE(static_cast<unsigned>(bad));
    comm.all_reduce(b, b, 4, dtype::f32, bad, s, ec);
    CHECK(ec == errc::invalid_argument);
    comm.reduce(b, b, 4, dtype::f32, bad, 0, s, ec);
    CHECK(ec == errc::invalid_argument);
    comm.reduce_scatter(b, b, 2, dtype::f32, bad, s, ec);
    CHECK(ec == errc::invalid_argument);
  }
  CHECK_THAT(coll_test::caller_words([&] { comm.all_reduce(b, b, 4, dtype::f32, static_cast<reduce_op>(99), s); }),
             ContainsSubstring("reduce operator 99 is not a reduce_op"));
  // A boolean's sum is an or (0 or 1): divided by the rank count it would read 0.
  comm.all_reduce(b, b, 4, dtype::boolean, reduce_op::avg, s, ec);
  CHECK(ec == errc::invalid_dtype);
  CHECK_THAT(coll_test::caller_words([&] { comm.reduce_scatter(b, b, 2, dtype::boolean, reduce_op::avg, s); }),
             ContainsSubstring("avg") && ContainsSubstring("boolean"));
  // avg itself is a reduce_op (the call waits for rank 1, which the abort below releases).
  comm.all_reduce(b, b, 4, dtype::f32, reduce_op::avg, s, ec);
  CHECK_FALSE(ec);
  CHECK(npurt::to_string(reduce_op::avg) == "avg");
  comm.abort();  // rank 1 never calls: nothing waits for it
}

}  // namespace coll_avg_test
