// tools/run_inputs.hpp — the inputs npurt-run feeds a model that computes real results.
//
// Header-only, so that the test suite checks the very values the tool feeds.
#pragma once

#include <npurt/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <random>

namespace npurt_run {

/// Deterministic inputs, from the seed and the input's position (so adding an input does not
/// change the others'), drawn uniformly per element:
/// - floating types (f64 included): [-1, 1);
/// - signed integers: -4 .. 3, in range for int8 and wider, with negatives as signed data has;
/// - unsigned integers: 0 .. 7, in range for uint8 and wider;
/// - bool: false or true, each as likely.
/// Small integers stay valid indices, counts and shifts for the usual ONNX operators: an index
/// input of a Gather is in range for any axis of at least 8 entries (a negative index counts
/// from the end, as ONNX defines it).
inline npurt::tensor make_input(const npurt::shape& s, npurt::dtype type, bool timing_only, std::uint64_t seed,
                                std::size_t index) {
  if (timing_only) return npurt::tensor::timing_only(s, type);
  npurt::tensor t(s, type);
  // std::mt19937_64's sequence is fixed by the C++ standard: the same on every platform.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
  const bool floating = npurt::is_float(type);
  const bool is_signed = npurt::is_integer(type) && !npurt::is_unsigned(type);
  for (std::int64_t i = 0; i < t.elements(); ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    const auto eighth = static_cast<int>(u * 8);                     // 0 .. 7
    double v = 0;
    if (floating) v = 2 * u - 1;
    else if (type == npurt::dtype::boolean) v = eighth >= 4 ? 1 : 0;
    else if (is_signed) v = eighth - 4;
    else v = eighth;
    t.set(i, v);
  }
  return t;
}

}  // namespace npurt_run
