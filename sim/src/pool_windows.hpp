// The windows of a pooling descriptor, one entry per spatial dimension: the one reading of
// kernels::pool2d's and pool2d_backward's parameters that validation (kernels_validate.cpp) and
// the reference implementation (kernels_functional.cpp) share. Private to the simulator.
#pragma once

#include <npurt/kernel_ops.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace npurt::sim {

struct pool_windows {
  std::size_t rank = 0;  ///< spatial dimensions
  std::array<std::int64_t, 3> k{1, 1, 1}, s{1, 1, 1}, pb{}, pe{}, d{1, 1, 1};
  bool ceil = false;
};

/// A pool2d's windows over `rank` spatial dimensions (x's rank - 2).
inline pool_windows windows_of(const kernels::pool2d& p, std::size_t rank) noexcept {
  pool_windows w{.rank = rank, .ceil = p.ceil_mode};
  for (std::size_t i = 0; i < rank && i < 3; ++i) {
    w.k[i] = p.window[i];
    w.s[i] = p.stride[i];
    w.pb[i] = p.pad[i];
    w.pe[i] = kernels::end_pad(p, i);
    w.d[i] = p.dilation[i];
  }
  return w;
}

/// A pool2d_backward's: 2-D, the same pad on both sides, no dilation.
inline pool_windows windows_of(const kernels::pool2d_backward& p) noexcept {
  pool_windows w{.rank = 2, .ceil = p.ceil_mode};
  for (std::size_t i = 0; i < 2; ++i) {
    w.k[i] = p.window[i];
    w.s[i] = p.stride[i];
    w.pb[i] = w.pe[i] = p.pad[i];
  }
  return w;
}

}  // namespace npurt::sim
