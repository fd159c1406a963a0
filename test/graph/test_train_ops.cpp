// Asin, Acos, Atan; Pow with an exponent of another dtype
// (onnx.ai/onnx/operators): compiled runs against references written here from ONNX's
// definitions and NumPy's semantics, and the typed errors.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

// Whether got is within rel of want, element by element (NaN matching NaN).
bool tr_close(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (!(std::fabs(got[i] - want[i]) <= rel * (1 + std::fabs(want[i])))) return false;
  }
  return true;
}

// Runs g on one system, fp32, with these feeds.
run_result tr_run(graph& g, const std::vector<feed>& feeds) {
  auto sys = test::make_system();
  session s{sys};
  return s.run(s.compile(g), feeds);
}

}  // namespace

TEST_CASE("Asin, Acos and Atan run in float32 and float64, NaN outside [-1, 1]; integers are refused",
          "[graph][trig]") {
  const std::vector<double> xv{-1, -0.5, 0, 0.25, 0.9, 1, 2, -3};
  for (const dtype t : {dtype::f32, dtype::f64}) {
    CAPTURE(to_string(t));
    graph g("trig");
    auto x = g.add_input("x", {8}, t);
    for (const char* op : {"Asin", "Acos", "Atan"}) g.set_output(g.add_op(op, {x}, {}, op));
    const auto r = tr_run(g, {{"x", tensor({8}, t, xv)}});
    std::vector<double> as, ac, at;
    for (const double v : xv) {
      // numpy.arcsin and arccos: NaN beyond [-1, 1].
      as.push_back(std::fabs(v) > 1 ? NAN : std::asin(v));
      ac.push_back(std::fabs(v) > 1 ? NAN : std::acos(v));
      at.push_back(std::atan(v));
    }
    const double rel = t == dtype::f64 ? 1e-15 : 1e-6;
    CHECK(tr_close(r.outputs.at("Asin").to_vector(), as, rel));
    CHECK(tr_close(r.outputs.at("Acos").to_vector(), ac, rel));
    CHECK(tr_close(r.outputs.at("Atan").to_vector(), at, rel));
    CHECK(r.outputs.at("Atan").type() == t);
  }
  expect_graph_error(
      [] {
        graph h("int asin");
        h.add_op("Asin", {h.add_input("x", {4}, dtype::i32)}, {}, "y");
      },
      errc::not_supported, "y", "x");
}

TEST_CASE("Pow with an exponent of another dtype computes as np.power(a, b).astype(a.dtype)", "[graph][pow]") {
  SECTION("a float32 base, int64 and float16 exponents: float64, rounded to float32") {
    graph g("pow f32 i64");
    auto a = g.add_input("a", {4}, dtype::f32);
    auto b = g.add_input("b", {4}, dtype::i64);
    auto h = g.add_input("h", {4}, dtype::f16);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    g.set_output(g.add_op("Pow", {a, h}, {}, "w"));
    const std::vector<double> av{1.5, -2, 0.1, 3}, bv{3, 5, -2, 0}, hv{0.5, 2, 1.5, -1};
    const auto r = tr_run(g, {{"a", tensor({4}, dtype::f32, av)},
                              {"b", test::ints_tensor({3, 5, -2, 0})},
                              {"h", tensor({4}, dtype::f16, hv)}});
    REQUIRE(r.outputs.at("z").type() == dtype::f32);
    REQUIRE(r.outputs.at("w").type() == dtype::f32);
    for (std::size_t i = 0; i < 4; ++i) {
      const double base = static_cast<float>(av[i]);
      CHECK(r.outputs.at("z").get(static_cast<std::int64_t>(i)) == static_cast<float>(std::pow(base, bv[i])));
      CHECK(r.outputs.at("w").get(static_cast<std::int64_t>(i)) == static_cast<float>(std::pow(base, hv[i])));
    }
  }
  SECTION("an int32 base and a float32 exponent: the float64 power truncated toward zero") {
    graph g("pow i32 f32");
    auto a = g.add_input("a", {5}, dtype::i32);
    auto b = g.add_input("b", {5}, dtype::f32);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const auto r = tr_run(
        g, {{"a", tensor({5}, dtype::i32, {3, 2, 10, -2, 7})}, {"b", tensor({5}, dtype::f32, {0.5, 2.5, -1, 3, 1.9})}});
    REQUIRE(r.outputs.at("z").type() == dtype::i32);
    // sqrt(3) = 1.73 -> 1 (astype truncates, it does not round); 2^2.5 = 5.66 -> 5; 10^-1 -> 0;
    // (-2)^3 = -8; 7^1.9 = 40.3 (1.9 rounded to float first) -> 40.
    std::vector<std::int64_t> want;
    const double as[] = {3, 2, 10, -2, 7}, bs[] = {0.5, 2.5, -1, 3, 1.9};
    for (std::size_t i = 0; i < 5; ++i)
      want.push_back(
          static_cast<std::int64_t>(std::trunc(std::pow(as[i], static_cast<double>(static_cast<float>(bs[i]))))));
    for (std::size_t i = 0; i < 5; ++i) CHECK(r.outputs.at("z").get_int(static_cast<std::int64_t>(i)) == want[i]);
    CHECK(want == std::vector<std::int64_t>{1, 5, 0, -8, 40});
  }
  SECTION("an int32 base and an int64 exponent: the int64 power wrapped to int32 as astype wraps it") {
    graph g("pow i32 i64");
    auto a = g.add_input("a", {4}, dtype::i32);
    auto b = g.add_input("b", {4}, dtype::i64);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const std::vector<std::int64_t> as{2, 3, -3, 2}, bs{40, 25, 21, 31};
    const auto r = tr_run(g, {{"a", tensor({4}, dtype::i32, {2, 3, -3, 2})}, {"b", test::ints_tensor(bs)}});
    REQUIRE(r.outputs.at("z").type() == dtype::i32);
    for (std::size_t i = 0; i < 4; ++i) {
      // The product modulo 2^64 (int64's wrap), then its low 32 bits as a signed value.
      std::uint64_t p = 1;
      for (std::int64_t k = 0; k < bs[i]; ++k) p *= static_cast<std::uint64_t>(as[i]);
      const auto low = static_cast<std::int32_t>(static_cast<std::uint32_t>(p));
      CHECK(r.outputs.at("z").get_int(static_cast<std::int64_t>(i)) == low);
    }
    CHECK(r.outputs.at("z").get_int(0) == 0);               // 2^40 keeps no low bits
    CHECK(r.outputs.at("z").get_int(3) == -2147483647 - 1);  // 2^31 wraps to INT32_MIN
  }
  SECTION("an int64 base and a uint64 exponent promote to float64, as NumPy does") {
    graph g("pow i64 u64");
    auto a = g.add_input("a", {3}, dtype::i64);
    auto b = g.add_input("b", {3}, dtype::u64);
    g.set_output(g.add_op("Pow", {a, b}, {}, "z"));
    const auto r = tr_run(g, {{"a", test::ints_tensor({3, -2, 10})}, {"b", tensor({3}, dtype::u64, {4, 3, 15})}});
    REQUIRE(r.outputs.at("z").type() == dtype::i64);
    CHECK(r.outputs.at("z").get_int(0) == 81);
    CHECK(r.outputs.at("z").get_int(1) == -8);
    CHECK(r.outputs.at("z").get_int(2) == 1000000000000000);
  }
  expect_graph_error(
      [] {
        graph h("u8 base");
        h.add_op("Pow", {h.add_input("a", {2}, dtype::u8), h.add_input("b", {2}, dtype::f32)}, {}, "z");
      },
      errc::invalid_dtype, "z", "a");
}
