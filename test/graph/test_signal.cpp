// DFT and STFT in graphs (onnx.ai/onnx/operators/onnx__DFT.html, onnx__STFT.html) against the
// definition written here, X[k] = sum_j x[j] exp(-2 pi i j k / n), in long double complex
// arithmetic; the lengths, axes and frame steps that decide the shape must be constants, and
// fed at run time they are refused saying so.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <cmath>
#include <complex>
#include <cstdint>
#include <numbers>
#include <vector>

using namespace npurt;
using test::expect_graph_error;

namespace {

std::complex<long double> signal_term(long double re, long double im, std::int64_t j, std::int64_t k, std::int64_t n,
                                      bool inverse) {
  const long double angle = (inverse ? 2 : -2) * std::numbers::pi_v<long double> * static_cast<long double>(j * k) /
                            static_cast<long double>(n);
  return std::complex<long double>(re, im) * std::polar(1.0L, angle);
}

bool signal_close(double got, long double want) {
  return std::abs(static_cast<long double>(got) - want) <= 1e-4L + 1e-5L * std::abs(want);
}

}  // namespace

TEST_CASE("DFT along a middle axis, length 6 zero-padded to 10, onesided and inverse", "[graph][signal]") {
  // x [3, 6, 2, 1] real; the transform along axis 1.
  for (const bool inverse : {false, true})
    for (const bool onesided : {false, true}) {
      CAPTURE(inverse, onesided);
      graph g("dft");
      auto x = g.add_input("x", {3, 6, 2, 1}, dtype::f32);
      auto len = g.add_constant("n", tensor({}, dtype::i64, {10}));
      g.set_output(g.add_op(
          "DFT", {x, len},
          {{"axis", std::int64_t{1}}, {"inverse", std::int64_t{inverse}}, {"onesided", std::int64_t{onesided}}}, "y"));
      const auto xv = test::values(36, 9);
      auto sys = test::make_system();
      session s{sys};
      const auto r = s.run(s.compile(g), {{"x", tensor({3, 6, 2, 1}, dtype::f32, xv)}});
      const tensor& y = r.outputs.at("y");
      const std::int64_t bins = onesided ? 6 : 10;
      REQUIRE(y.shape() == shape{3, bins, 2, 2});
      for (std::int64_t b = 0; b < 3; ++b)
        for (std::int64_t lane = 0; lane < 2; ++lane)
          for (std::int64_t k = 0; k < bins; ++k) {
            std::complex<long double> acc = 0;
            for (std::int64_t j = 0; j < 6; ++j)
              acc += signal_term(xv[static_cast<std::size_t>((b * 6 + j) * 2 + lane)], 0, j, k, 10, inverse);
            if (inverse) acc /= 10.0L;
            const std::int64_t at = ((b * bins + k) * 2 + lane) * 2;
            CAPTURE(b, lane, k);
            CHECK(signal_close(y.get(at), acc.real()));
            CHECK(signal_close(y.get(at + 1), acc.imag()));
          }
    }
}

TEST_CASE("STFT: complex frames of a Hann window at a frame_step", "[graph][signal]") {
  const std::int64_t len = 20, n = 7, step = 3, frames = (len - n) / step + 1;
  graph g("stft");
  auto x = g.add_input("x", {1, len, 2}, dtype::f32);
  std::vector<double> wv;
  for (std::int64_t j = 0; j < n; ++j)
    wv.push_back(0.5 - 0.5 * std::cos(2 * std::numbers::pi * static_cast<double>(j) / static_cast<double>(n)));
  auto w = g.add_constant("w", tensor({n}, dtype::f32, wv));
  auto fs = g.add_constant("step", tensor({}, dtype::i64, {static_cast<double>(step)}));
  g.set_output(g.add_op("STFT", {x, fs, w}, {{"onesided", std::int64_t{1}}}, "y"));
  const auto xv = test::values(len * 2, 4);
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"x", tensor({1, len, 2}, dtype::f32, xv)}});
  const tensor& y = r.outputs.at("y");
  const std::int64_t bins = n / 2 + 1;
  REQUIRE(y.shape() == shape{1, frames, bins, 2});
  for (std::int64_t f = 0; f < frames; ++f)
    for (std::int64_t k = 0; k < bins; ++k) {
      std::complex<long double> acc = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const auto at = static_cast<std::size_t>((f * step + j) * 2);
        const auto wj = static_cast<long double>(static_cast<float>(wv[static_cast<std::size_t>(j)]));
        acc += signal_term(xv[at] * wj, xv[at + 1] * wj, j, k, n, false);
      }
      CAPTURE(f, k);
      CHECK(signal_close(y.get((f * bins + k) * 2), acc.real()));
      CHECK(signal_close(y.get((f * bins + k) * 2 + 1), acc.imag()));
    }
}

TEST_CASE("DFT and STFT refuse run-time lengths and bad axes, naming the operand", "[graph][signal][errors]") {
  expect_graph_error(
      [] {
        graph g("fed length");
        g.add_op("DFT", {g.add_input("x", {2, 8, 1}, dtype::f32), g.add_input("n", {}, dtype::i64)}, {}, "dft");
      },
      errc::not_supported, "dft", "n");
  expect_graph_error(
      [] {
        graph g("last axis");
        g.add_op("DFT", {g.add_input("x", {2, 8, 1}, dtype::f32)}, {{"axis", std::int64_t{2}}}, "dft");
      },
      errc::invalid_argument, "dft", "x");
  expect_graph_error(
      [] {
        graph g("three values");
        g.add_op("DFT", {g.add_input("x", {2, 8, 3}, dtype::f32)}, {}, "dft");
      },
      errc::invalid_shape, "dft", "x");
  expect_graph_error(
      [] {
        graph g("int input");
        g.add_op("DFT", {g.add_input("x", {2, 8, 1}, dtype::i32)}, {}, "dft");
      },
      errc::not_supported, "dft", "x");
  expect_graph_error(
      [] {
        graph g("fed step");
        g.add_op("STFT", {g.add_input("x", {1, 16, 1}, dtype::f32), g.add_input("step", {}, dtype::i64)}, {}, "stft");
      },
      errc::not_supported, "stft", "step");
  expect_graph_error(
      [] {
        graph g("window length");
        g.add_op("STFT",
                 {g.add_input("x", {1, 16, 1}, dtype::f32), g.add_constant("step", tensor({}, dtype::i64, {2})),
                  g.add_input("w", {5}, dtype::f32), g.add_constant("len", tensor({}, dtype::i64, {4}))},
                 {}, "stft");
      },
      errc::invalid_shape, "stft", "w");
}
