// npurt/sim/cost_model.hpp — how long a kernel takes on a Da Vinci core array, and why.
//
// A kernel is split into tiles the way a Da Vinci kernel is. Cube kernels (matmul, conv2d and
// its two backward passes, all as GEMMs: conv via img2col with M = N*Ho*Wo, K = ceil(Cin/16)*16
// *kh*kw, N = Cout) give each core blocks of the output that fit L0C; a block walks K in steps
// whose operands fit half of L0A/L0B (double buffering), each step going GM -> L1 (MTE2) ->
// L0A/L0B (MTE1) -> cube -> L0C, and the block leaves L0C -> GM at the end. Vector kernels
// stream GM -> UB (MTE2) -> vector -> GM (MTE3) in tiles of half the UB. Every stage of a tile
// takes its bytes or operations over the unit's rate from the preset, plus the per-instruction
// issue latency; a tile takes as long as its slowest stage (the bounding unit); a pipeline of
// tiles costs its first tile's full latency plus the bounding stage for every later tile.
// On top: pipeline fill per core and the kernel launch latency on the device.
//
// HBM: GM reads either hit the shared L2 (blocks that cores fetch at the same time, operands
// that fit L2) at l2_rate, or come from HBM at the core's share of the kernel's HBM bandwidth
// (never more than its ddr_rate port). The busiest core decides the kernel's time.
//
// Dtypes: FP16/BF16 cube fractals are 16x16x16 (4096 MAC/cycle), INT8 16x32x16 (8192),
// FP32 16x8x16 (2048: half rate, the 910B's float32 DtypeMKN; the 910A runs FP32 matmuls at
// the same modelled rate). Vector lanes: FP16/BF16 vec_calc_size, FP32/INT32 half, INT8 double.
#pragma once

#include <npurt/kernel.hpp>
#include <npurt/sim/preset.hpp>
#include <npurt/time.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace npurt::sim {

/// The hardware units a tile can be bound by.
enum class unit : std::uint8_t { none, cube, vector, mte1, mte2, mte3, hbm, scalar, fixed };

constexpr std::string_view to_string(unit u) noexcept {
  switch (u) {
    case unit::none: return "none";
    case unit::cube: return "cube";
    case unit::vector: return "vector";
    case unit::mte1: return "mte1";
    case unit::mte2: return "mte2";
    case unit::mte3: return "mte3";
    case unit::hbm: return "hbm";
    case unit::scalar: return "scalar";
    case unit::fixed: return "fixed";
  }
  return "?";
}

/// Busy cycles of each unit on the busiest core.
struct unit_cycles {
  double cube = 0, vector = 0, mte1 = 0, mte2 = 0, mte3 = 0, hbm = 0, scalar = 0;
  [[nodiscard]] double of(unit u) const noexcept {
    switch (u) {
      case unit::cube: return cube;
      case unit::vector: return vector;
      case unit::mte1: return mte1;
      case unit::mte2: return mte2;
      case unit::mte3: return mte3;
      case unit::hbm: return hbm;
      case unit::scalar: return scalar;
      default: return 0;
    }
  }
};

/// A GEMM as the cube sees it (batch x [M x K] x [K x N]).
struct gemm_shape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  dtype in = dtype::f16;
  /// ceil(M/16) * ceil(N/16) * ceil(K/k0) * batch: cube cycles on one core, the floor.
  [[nodiscard]] std::uint64_t fractals(const preset& p) const noexcept;
};

/// The breakdown of one kernel's time. Every number comes from preset parameters and the
/// kernel's shapes.
struct kernel_cost {
  std::string_view op;             // operation name
  bool cube_path = false;          // GM->L1->L0->cube (true) or GM->UB->vector (false)
  std::uint32_t cores = 0;         // cores the kernel ran on
  std::uint64_t tiles = 0;         // tiles over all cores (cube: K steps of all blocks)
  std::uint64_t tiles_per_core = 0;  // on the busiest core
  std::uint64_t blocks = 0;        // output blocks (cube) or vector tiles over all cores
  unit bound = unit::none;         // the unit that bounds the steady-state tile
  unit_cycles busy;                // busy cycles per unit, busiest core
  double tile_cycles = 0;          // steady-state cycles per tile (the bounding stage)
  double fill_cycles = 0;          // pipeline fill + first tile's latency + last drain
  double stall_cycles = 0;         // total - busy cycles of the bounding unit
  double total_cycles = 0;         // body: first core cycle to last
  picoseconds launch_latency{0};   // on-device launch, before the body
  picoseconds body{0};             // total_cycles at the clock (rounded up)
  picoseconds total{0};            // launch_latency + body
  std::uint64_t flops = 0;         // useful FLOPs (2 per MAC)
  std::uint64_t hbm_bytes = 0;     // bytes moved to or from HBM (after L2 reuse)
  std::uint64_t gm_bytes = 0;      // bytes the cores moved to or from GM (L2 hits included)
  double hbm_share = 0;            // bytes/s of HBM this estimate assumed
  std::optional<gemm_shape> gemm;  // cube kernels: the GEMM it computes
  std::uint64_t cube_floor_cycles = 0;  // ceil(fractals / cores), cube kernels
  picoseconds roofline{0};         // max(flops / peak, hbm_bytes / hbm_bandwidth): no kernel beats it
};

/// The GEMM a cube kernel computes (matmul, conv2d and its backward passes), or nullopt.
[[nodiscard]] std::optional<gemm_shape> gemm_equivalent(const kernel_desc& k);
/// Whether a kernel runs on cube cores (AIC) rather than vector cores.
[[nodiscard]] bool uses_cube(const kernel_desc& k) noexcept;
/// Cores a kernel may use on this preset: the AIC count for cube kernels, the AIV count for vector
/// kernels (the same on coupled parts).
[[nodiscard]] std::uint32_t core_pool(const preset& p, const kernel_desc& k) noexcept;
/// Cube FLOP per cycle per core for a dtype (FP16: 8192).
[[nodiscard]] double cube_flops_per_cycle(const preset& p, dtype t) noexcept;

/// The cost of `k` on `cores` cores (0: the whole pool) when it may use `hbm_bytes_per_s` of HBM
/// bandwidth (0: the preset's full bandwidth). Pure: the same inputs give the same result.
/// kernels::fixed costs its duration plus the launch latency. `p` is a preset check() accepts,
/// whose buffers hold at least one double-buffered fractal step of every cube dtype; a cube
/// kernel that no tiling of a preset's buffers can run costs the end of time, never nothing.
[[nodiscard]] kernel_cost estimate(const preset& p, const kernel_desc& k, std::uint32_t cores = 0,
                                   double hbm_bytes_per_s = 0);

}  // namespace npurt::sim
