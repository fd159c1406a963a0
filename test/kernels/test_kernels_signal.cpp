// Reference kernels: dft (ONNX's DFT and STFT) against a transform written here from the
// definition, X[k] = sum_j x[j] exp(-2 pi i j k / n) (the inverse with +, over n), in long double
// complex arithmetic, for lengths that are powers of two and lengths that are not, real and
// complex input, cut and zero-padded signals, onesided halves, an axis with dimensions on both
// sides, STFT frames with a window; and the descriptor errors.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <numbers>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

using cld = std::complex<long double>;

// The definition, term by term: x holds the signal's values (zero past its end).
std::vector<cld> naive_dft(const std::vector<cld>& x, std::int64_t n, bool inverse) {
  std::vector<cld> out(static_cast<std::size_t>(n));
  const long double pi = std::numbers::pi_v<long double>;
  for (std::int64_t kk = 0; kk < n; ++kk) {
    cld acc = 0;
    for (std::int64_t j = 0; j < n && j < static_cast<std::int64_t>(x.size()); ++j)
      acc += x[static_cast<std::size_t>(j)] *
             std::polar(1.0L, (inverse ? 2 : -2) * pi * static_cast<long double>(j) * static_cast<long double>(kk) /
                                  static_cast<long double>(n));
    out[static_cast<std::size_t>(kk)] = inverse ? acc / static_cast<long double>(n) : acc;
  }
  return out;
}

bool close_to(double got, long double want) {
  return std::abs(static_cast<long double>(got) - want) <= 1e-4L + 1e-5L * std::abs(want);
}

// Sine-like deterministic values in [-1, 1].
void fill_wave(tensor& t, double phase) {
  for (std::size_t i = 0; i < t.size(); ++i) t.set(i, std::sin(0.7 * static_cast<double>(i) + phase) * 0.9);
}

}  // namespace

TEST_CASE("dft computes the definition for any length, real or complex, cut or padded, onesided, inverse",
          "[kernels][dft]") {
  // x [2, L, 3, c]: the transform runs along axis 1, with a batch before it and a lane after it.
  for (const std::int64_t len : {8, 7, 12})
    for (const std::int64_t n : {len, len - 3, len + 5})
      for (const std::int64_t c : {1, 2})
        for (const bool onesided : {false, true})
          for (const bool inverse : {false, true}) {
            CAPTURE(len, n, c, onesided, inverse);
            tensor x({2, len, 3, c});
            fill_wave(x, static_cast<double>(n));
            const std::int64_t bins = onesided ? n / 2 + 1 : n;
            tensor y({2, bins, 3, 2});
            k::dft op{x.desc, {}, y.desc, n, 0, 1, onesided, inverse};
            REQUIRE(run(op) == 0);
            for (std::int64_t b = 0; b < 2; ++b)
              for (std::int64_t lane = 0; lane < 3; ++lane) {
                std::vector<cld> sig;
                for (std::int64_t j = 0; j < len; ++j) {
                  const auto at = static_cast<std::size_t>(((b * len + j) * 3 + lane) * c);
                  sig.emplace_back(x.get(at), c == 2 ? x.get(at + 1) : 0.0);
                }
                const auto want = naive_dft(sig, n, inverse);
                for (std::int64_t kk = 0; kk < bins; ++kk) {
                  const auto at = static_cast<std::size_t>(((b * bins + kk) * 3 + lane) * 2);
                  CHECK(close_to(y.get(at), want[static_cast<std::size_t>(kk)].real()));
                  CHECK(close_to(y.get(at + 1), want[static_cast<std::size_t>(kk)].imag()));
                }
              }
          }
  // Hand-checked: the DFT of [1, 2, 3] is [6, -1.5 + 0.866i, -1.5 - 0.866i].
  tensor x({1, 3, 1}), y({1, 3, 2});
  x.assign({1, 2, 3});
  REQUIRE(run(k::dft{x.desc, {}, y.desc, 3, 0, 1, false, false}) == 0);
  CHECK(std::abs(y.get(0) - 6) < 1e-6);
  CHECK(std::abs(y.get(1)) < 1e-6);
  CHECK(std::abs(y.get(2) + 1.5) < 1e-6);
  CHECK(std::abs(y.get(3) - std::sqrt(3.0) / 2) < 1e-6);
  CHECK(std::abs(y.get(5) + std::sqrt(3.0) / 2) < 1e-6);
}

TEST_CASE("dft as STFT: windowed frames at frame_step, onesided", "[kernels][dft]") {
  const std::int64_t len = 30, n = 9, step = 4, frames = (len - n) / step + 1;
  for (const std::int64_t c : {1, 2})
    for (const bool onesided : {false, true}) {
      CAPTURE(c, onesided);
      tensor x({2, len, c}), window({n});
      fill_wave(x, 0.3);
      for (std::int64_t j = 0; j < n; ++j)  // a Hann window, periodic
        window.set(static_cast<std::size_t>(j),
                   0.5 - 0.5 * std::cos(2 * std::numbers::pi * static_cast<double>(j) / n));
      const std::int64_t bins = onesided ? n / 2 + 1 : n;
      tensor y({2, frames, bins, 2});
      REQUIRE(run(k::dft{x.desc, window.desc, y.desc, n, step, 1, onesided, false}) == 0);
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t f = 0; f < frames; ++f) {
          std::vector<cld> sig;
          for (std::int64_t j = 0; j < n; ++j) {
            const auto at = static_cast<std::size_t>((b * len + f * step + j) * c);
            sig.push_back(cld(x.get(at), c == 2 ? x.get(at + 1) : 0.0) *
                          static_cast<long double>(window.get(static_cast<std::size_t>(j))));
          }
          const auto want = naive_dft(sig, n, false);
          for (std::int64_t kk = 0; kk < bins; ++kk) {
            const auto at = static_cast<std::size_t>(((b * frames + f) * bins + kk) * 2);
            CHECK(close_to(y.get(at), want[static_cast<std::size_t>(kk)].real()));
            CHECK(close_to(y.get(at + 1), want[static_cast<std::size_t>(kk)].imag()));
          }
        }
    }
}

TEST_CASE("dft descriptors are checked", "[kernels][dft]") {
  auto t = [](shape s, dtype d = dtype::f32) { return shape_only(s, d); };
  using npurt::sim::validate;
  CHECK(!validate(k::dft{t({2, 8, 1}), {}, t({2, 5, 2}), 8, 0, 1, true, false}));
  CHECK(!validate(k::dft{t({2, 30, 2}), t({9}), t({2, 6, 9, 2}), 9, 4, 1, false, false}));
  // dtype: float only, y and window of x's.
  CHECK(validate(k::dft{t({2, 8, 1}, dtype::i32), {}, t({2, 8, 2}, dtype::i32), 8, 0, 1}) == errc::invalid_dtype);
  CHECK(validate(k::dft{t({2, 8, 1}), {}, t({2, 8, 2}, dtype::f16), 8, 0, 1}) == errc::invalid_dtype);
  // The last dimension is 1 or 2; y's axis holds n (onesided n / 2 + 1), its last 2.
  CHECK(validate(k::dft{t({2, 8, 3}), {}, t({2, 8, 2}), 8, 0, 1}) == errc::invalid_shape);
  CHECK(validate(k::dft{t({2, 8, 1}), {}, t({2, 8, 2}), 6, 0, 1}) == errc::invalid_shape);
  CHECK(validate(k::dft{t({2, 8, 1}), {}, t({2, 8, 1}), 8, 0, 1}) == errc::invalid_shape);
  // The axis is not the last; the length is positive; a DFT has no window.
  CHECK(validate(k::dft{t({2, 8, 1}), {}, t({2, 8, 2}), 8, 0, 2}) == errc::invalid_argument);
  CHECK(validate(k::dft{t({2, 8, 1}), {}, t({2, 8, 2}), 0, 0, 1}) == errc::invalid_argument);
  CHECK(validate(k::dft{t({2, 8, 1}), t({8}), t({2, 8, 2}), 8, 0, 1}) == errc::invalid_argument);
  // STFT: frames that fit, a window of the frame's length, no inverse.
  CHECK(validate(k::dft{t({2, 30, 2}), t({8}), t({2, 6, 9, 2}), 9, 4, 1}) == errc::invalid_shape);
  CHECK(validate(k::dft{t({2, 30, 2}), {}, t({2, 7, 9, 2}), 9, 4, 1}) == errc::invalid_shape);
  CHECK(validate(k::dft{t({2, 30, 2}), {}, t({2, 6, 9, 2}), 9, 4, 1, false, true}) == errc::invalid_argument);
  CHECK(validate(k::dft{t({2, 8, 2}), {}, t({2, 1, 9, 2}), 9, 4, 1}) == errc::invalid_shape);
  CHECK(sizeof(npurt::kernel_desc) <= 752);
}
