// Asin, Acos and Atan
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
