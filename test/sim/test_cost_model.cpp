#include <npurt/sim/cost_model.hpp>
#include <npurt/sim/device_model.hpp>

#include <catch2/catch_test_macros.hpp>

#include <array>

#include <cmath>
#include <cstdint>
#include <variant>
#include <vector>

using namespace npurt;
using namespace npurt::sim;

namespace {

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

kernel_desc gemm(std::int64_t m, std::int64_t n, std::int64_t k, dtype t = dtype::f16, dtype out = dtype::f16) {
  return kernel_desc{
      kernels::matmul{{nullptr, shape{m, k}, t}, {nullptr, shape{k, n}, t}, {nullptr, shape{m, n}, out}}};
}

struct conv_case {
  std::int64_t n, cin, h, w, cout, kh, kw, stride, pad;
};

kernel_desc conv(const conv_case& c, int pass) {
  const std::int64_t ho = (c.h + 2 * c.pad - c.kh) / c.stride + 1, wo = (c.w + 2 * c.pad - c.kw) / c.stride + 1;
  const tensor_desc x{nullptr, shape{c.n, c.cin, c.h, c.w}, dtype::f16, layout::nchw};
  const tensor_desc wt{nullptr, shape{c.cout, c.cin, c.kh, c.kw}, dtype::f16, layout::nchw};
  const tensor_desc y{nullptr, shape{c.n, c.cout, ho, wo}, dtype::f16, layout::nchw};
  const std::array<std::int32_t, 2> s{static_cast<std::int32_t>(c.stride), static_cast<std::int32_t>(c.stride)};
  const std::array<std::int32_t, 2> p{static_cast<std::int32_t>(c.pad), static_cast<std::int32_t>(c.pad)};
  if (pass == 0) return kernel_desc{kernels::conv2d{x, wt, y, s, p}};
  if (pass == 1) return kernel_desc{kernels::conv2d_backward_data{y, wt, x, s, p}};
  return kernel_desc{kernels::conv2d_backward_weight{x, y, wt, s, p}};
}

// The oracles of reference §1.3: the cube floor and the roofline, computed here from the shapes.
void check_oracles(const preset& p, const kernel_desc& k, std::int64_t m, std::int64_t n, std::int64_t kk,
                   double useful_flops, double min_bytes, std::uint32_t cores) {
  const kernel_cost c = estimate(p, k, cores);
  const double floor_cycles = static_cast<double>(cdiv(m, 16) * cdiv(n, 16) * cdiv(kk, 16)) / cores;
  INFO("op " << c.op << " M=" << m << " N=" << n << " K=" << kk << " cores=" << cores);
  CHECK(c.total_cycles >= floor_cycles);
  const double roof =
      std::max(useful_flops / (p.cube_flops_per_cycle() * cores * p.clock_hz), min_bytes / p.hbm_bandwidth);
  CHECK(to_us(c.body) * 1e-6 >= roof * (1 - 1e-9));
  CHECK(c.cube_path);
}

}  // namespace

TEST_CASE("no GEMM beats the cube floor or the roofline", "[sim][cost]") {
  const preset p = presets::ascend910();
  const std::vector<std::int64_t> dims{1, 15, 16, 17, 100, 256, 1000, 4096};
  for (std::uint32_t cores : {1u, 7u, 32u})
    for (auto m : dims)
      for (auto n : dims)
        for (auto k : dims) {
          const double bytes = 2.0 * (m * k + k * n + m * n);
          check_oracles(p, gemm(m, n, k), m, n, k, 2.0 * m * n * k, bytes, cores);
        }
}

TEST_CASE("no convolution pass beats the cube floor or the roofline", "[sim][cost]") {
  const preset p = presets::ascend910();
  const std::vector<conv_case> cases{
      {32, 3, 224, 224, 64, 7, 7, 2, 3},  {32, 64, 56, 56, 64, 3, 3, 1, 1},    {32, 256, 56, 56, 128, 1, 1, 1, 0},
      {32, 128, 56, 56, 128, 3, 3, 2, 1}, {32, 512, 28, 28, 1024, 1, 1, 2, 0}, {16, 2048, 7, 7, 512, 1, 1, 1, 0},
      {8, 17, 30, 30, 33, 5, 5, 1, 2},    {1, 512, 7, 7, 512, 3, 3, 1, 1},     {4, 96, 27, 27, 256, 5, 5, 1, 2},
  };
  for (std::uint32_t cores : {1u, 32u})
    for (const auto& c : cases) {
      const std::int64_t ho = (c.h + 2 * c.pad - c.kh) / c.stride + 1, wo = (c.w + 2 * c.pad - c.kw) / c.stride + 1;
      const double macs = static_cast<double>(c.n) * ho * wo * c.cout * c.cin * c.kh * c.kw;
      // A kernel smaller than its stride reads only the pixels it lands on (strided DMA).
      const double x_all = 2.0 * c.n * c.cin * c.h * c.w;
      const double x = c.kh < c.stride ? x_all * c.kh * c.kw / (c.stride * c.stride) : x_all;
      const double w = 2.0 * c.cout * c.cin * c.kh * c.kw, y = 2.0 * c.n * c.cout * ho * wo;
      // img2col GEMMs (reference §1.3): forward M = N*Ho*Wo, K = ceil(Cin/16)*16*kh*kw, N = Cout.
      check_oracles(p, conv(c, 0), c.n * ho * wo, c.cout, cdiv(c.cin, 16) * 16 * c.kh * c.kw, 2 * macs, x + w + y,
                    cores);
      // The backward passes do the same MACs; their floors use the same fractal count.
      const kernel_cost bd = estimate(p, conv(c, 1), cores), bw = estimate(p, conv(c, 2), cores);
      const double fwd_floor =
          static_cast<double>(cdiv(c.n * ho * wo, 16) * cdiv(c.cout, 16) * cdiv(c.cin, 16) * c.kh * c.kw) / cores;
      CHECK(bd.total_cycles >= fwd_floor * 0.999);
      CHECK(bw.total_cycles >= fwd_floor * 0.999);
      for (const kernel_cost* kc : {&bd, &bw}) {
        CHECK(kc->flops == static_cast<std::uint64_t>(2 * macs));
        CHECK(to_us(kc->body) * 1e-6 >= 2 * macs / (p.cube_flops_per_cycle() * cores * p.clock_hz));
        CHECK(to_us(kc->body) * 1e-6 >= (x + w + y) / p.hbm_bandwidth * (1 - 1e-9));
      }
      {
        // The input gradient is written in full, zeros included.
        CHECK(to_us(bd.body) * 1e-6 >= (x_all + y) / p.hbm_bandwidth * (1 - 1e-9));
      }
    }
}

TEST_CASE("every preset check() accepts gives every cube kernel a plan no faster than its cube floor", "[sim][cost]") {
  // Presets at the edge of what check() accepts: buffers that hold exactly one double-buffered
  // fractal step (L1 no larger than L0A, so a longer K step no longer fits it), and fractals
  // smaller than the tiler's usual 16-element blocks.
  std::vector<preset> edge;
  {
    preset p = presets::ascend910();
    p.l0a_bytes = p.l0b_bytes = p.l1_bytes = 2048;
    edge.push_back(p);
  }
  {
    preset p = presets::ascend910();
    p.cube_m = p.cube_n = 8;  // an 8 x 16 FP16 fractal: 256 bytes; two of A and two of B in L1
    p.l0a_bytes = p.l0b_bytes = 512;
    p.l1_bytes = 1024;
    p.l0c_bytes = 2 * 8 * 8 * 4;
    edge.push_back(p);
  }
  {
    preset p = presets::ascend910b();
    p.cube_k_fp32 = 256;  // an FP32 fractal of A: 16 x 256 x 4 = 16384 bytes
    p.l0a_bytes = p.l0b_bytes = p.l1_bytes = 65536;
    edge.push_back(p);
  }
  for (const preset& p : edge) {
    REQUIRE_FALSE(check(p));
    for (dtype t : {dtype::f16, dtype::f32, dtype::i8})
      for (std::int64_t d : {1, 17, 256, 1000}) {
        const kernel_cost c = estimate(p, gemm(d, d, d, t, t == dtype::i8 ? dtype::i32 : t));
        INFO("L0A " << p.l0a_bytes << " L1 " << p.l1_bytes << " cube_m " << p.cube_m << " dtype " << to_string(t)
                    << " M = N = K = " << d);
        REQUIRE(c.gemm);
        CHECK(c.cube_floor_cycles ==
              static_cast<std::uint64_t>(cdiv(static_cast<std::int64_t>(c.gemm->fractals(p)), p.ai_core_count)));
        CHECK(c.cube_floor_cycles > 0);
        CHECK(c.total_cycles >= static_cast<double>(c.cube_floor_cycles));
        CHECK(c.body >= c.roofline);
        CHECK(c.tiles > 0);
      }
  }
}

TEST_CASE("an A shared by every batch entry is read from HBM once, as a shared B is", "[sim][cost]") {
  // [M, K] x [batch, K, N]: A (512 KiB) fits L2, so HBM sees it once; the least traffic and the
  // roofline count it once too.
  const preset p = presets::ascend910();
  const std::int64_t m = 64, k = 4096, n = 64, batch = 8;
  const auto mm = [](shape a, shape b, shape c) {
    return kernel_desc{kernels::matmul{{nullptr, a, dtype::f16}, {nullptr, b, dtype::f16}, {nullptr, c, dtype::f16}}};
  };
  const kernel_cost shared_a = estimate(p, mm({m, k}, {batch, k, n}, {batch, m, n}));
  const kernel_cost shared_b = estimate(p, mm({batch, n, k}, {k, m}, {batch, n, m}));  // its transpose
  const kernel_cost unshared = estimate(p, mm({batch, m, k}, {batch, k, n}, {batch, m, n}));
  const double least = 2.0 * (m * k + batch * k * n + batch * m * n);
  // The same tiling as the unshared GEMM's, less the batch - 1 reads of A.
  CHECK(unshared.hbm_bytes - shared_a.hbm_bytes == static_cast<std::uint64_t>((batch - 1) * m * k * 2));
  CHECK(shared_a.hbm_bytes >= static_cast<std::uint64_t>(least));
  CHECK(shared_a.roofline == picoseconds{static_cast<std::int64_t>(std::floor(least / p.hbm_bandwidth * 1e12))});
  CHECK(shared_a.hbm_bytes == shared_b.hbm_bytes);
  CHECK(shared_a.roofline == shared_b.roofline);
  CHECK(shared_a.body < unshared.body);
  CHECK(shared_a.body >= shared_a.roofline);
}

TEST_CASE("a shared operand too large for L2 streams again for each group of batch entries that fits", "[sim][cost]") {
  // ascend910: L2 32 MiB, half of it (16 MiB) for an operand that stays. B [262144, 64] is
  // 32 MiB: it cannot stay across the batch. Each entry's A [16, 262144] is 8 MiB: two entries'
  // A fit half of L2 together, so B streams past them once per pair: four times for 8 entries.
  // Least HBM traffic: A once (8 x 8 MiB), B 4 x 32 MiB, C once (8 x 16 x 64 FP16).
  const preset p = presets::ascend910();
  REQUIRE(p.l2_bytes == std::size_t{32} << 20);
  const std::int64_t m = 16, k = 262144, n = 64, batch = 8;
  const auto mm = [](shape a, shape b, shape c) {
    return kernel_desc{kernels::matmul{{nullptr, a, dtype::f16}, {nullptr, b, dtype::f16}, {nullptr, c, dtype::f16}}};
  };
  constexpr double mib = 1 << 20;
  const double least = batch * 8 * mib + 4 * 32 * mib + 2.0 * batch * m * n;
  const double per_entry = batch * (8 * mib + 32 * mib);  // B read again for every entry
  const kernel_cost shared_b = estimate(p, mm({batch, m, k}, {k, n}, {batch, m, n}));
  const kernel_cost shared_a = estimate(p, mm({n, k}, {batch, k, m}, {batch, n, m}));  // its transpose
  for (const kernel_cost& c : {shared_b, shared_a}) {
    CHECK(static_cast<double>(c.hbm_bytes) >= least);
    CHECK(static_cast<double>(c.hbm_bytes) < per_entry);
    // No tiling moves those bytes faster than HBM does.
    CHECK(to_us(c.body) * 1e-6 >= least / p.hbm_bandwidth);
  }
  // With half the entries' A in L2 at once the pairs become fours: B streams twice.
  const kernel_cost quads = estimate(p, mm({batch, m / 2, k}, {k, n}, {batch, m / 2, n}));
  CHECK(static_cast<double>(quads.hbm_bytes) >= batch * 4 * mib + 2 * 32 * mib + 2.0 * batch * (m / 2) * n);
  CHECK(static_cast<double>(quads.hbm_bytes) < batch * 4 * mib + 3 * 32 * mib);
}

TEST_CASE("a large FP16 GEMM reaches at least 85% of the cube peak", "[sim][cost]") {
  for (const preset& p : {presets::ascend910(), presets::ascend910b()}) {
    const kernel_cost c = estimate(p, gemm(8192, 8192, 8192));
    const double seconds = to_us(c.total) * 1e-6;
    const double achieved = 2.0 * 8192.0 * 8192 * 8192 / seconds;
    INFO(p.name << ": " << achieved / 1e12 << " TFLOP/s of " << p.peak_fp16_flops() / 1e12 << ", bound by "
                << to_string(c.bound));
    if (p.name == "ascend910") {
      CHECK(achieved >= 0.85 * p.peak_fp16_flops());
      CHECK(c.bound == unit::cube);
    }
    CHECK(achieved <= p.peak_fp16_flops());
  }
}

TEST_CASE("a memory-bound elementwise kernel takes bytes over HBM bandwidth, within 15%", "[sim][cost]") {
  const preset p = presets::ascend910();
  // Large enough that the 2 us launch latency is not most of the time.
  for (std::int64_t elems : {std::int64_t{1} << 24, std::int64_t{1} << 26, std::int64_t{300'000'000}}) {
    for (auto fn : {kernels::eltwise_fn::add, kernels::eltwise_fn::mul, kernels::eltwise_fn::relu}) {
      const tensor_desc t{nullptr, shape{elems}, dtype::f16};
      const kernel_desc k{kernels::elementwise{fn, t, t, t}};
      const bool unary = fn == kernels::eltwise_fn::relu;
      const double bytes = (unary ? 2.0 : 3.0) * elems * 2;
      const double expect = bytes / p.hbm_bandwidth;
      const kernel_cost c = estimate(p, k);
      const double got = to_us(c.total) * 1e-6;
      INFO("elems " << elems << " " << c.op << ": " << got * 1e6 << " us vs " << expect * 1e6 << " us");
      CHECK(got >= expect);
      CHECK(got <= 1.15 * expect);
      CHECK(c.bound == unit::hbm);
      CHECK(c.hbm_bytes == static_cast<std::uint64_t>(bytes));
    }
  }
}

TEST_CASE("half the HBM bandwidth makes a memory-bound kernel twice as slow, a cube-bound one barely slower",
          "[sim][cost]") {
  const preset p = presets::ascend910();
  const tensor_desc t{nullptr, shape{1 << 26}, dtype::f16};
  const kernel_desc add{kernels::elementwise{kernels::eltwise_fn::add, t, t, t}};
  const double full = estimate(p, add, 0, p.hbm_bandwidth).total_cycles;
  const double half = estimate(p, add, 0, p.hbm_bandwidth / 2).total_cycles;
  CHECK(half / full > 1.9);
  const kernel_desc g = gemm(4096, 4096, 4096);
  // The GEMM's L2 misses slow down, its cube work does not.
  CHECK(estimate(p, g, 0, p.hbm_bandwidth / 2).total_cycles / estimate(p, g).total_cycles < 1.25);
}

TEST_CASE("cube rates follow the dtype: INT8 twice FP16, FP32 half", "[sim][cost]") {
  const preset p = presets::ascend910();
  const double f16 = estimate(p, gemm(4096, 4096, 4096, dtype::f16)).busy.cube;
  const double i8 = estimate(p, gemm(4096, 4096, 4096, dtype::i8, dtype::i32)).busy.cube;
  const double f32 = estimate(p, gemm(4096, 4096, 4096, dtype::f32, dtype::f32)).busy.cube;
  CHECK(i8 < f16 * 0.55);
  CHECK(f32 > f16 * 1.9);
}

TEST_CASE("f64 runs on the vector unit at a quarter of the FP32 rate; an f64 GEMM is no cube kernel",
          "[sim][cost][f64]") {
  const preset p = presets::ascend910();
  // Compute-bound elementwise (exp: several vector operations per element), same element count.
  const auto vector_cycles = [&](dtype t) {
    const tensor_desc x{nullptr, shape{1 << 22}, t};
    return estimate(p, kernel_desc{kernels::elementwise{kernels::eltwise_fn::exp, x, {}, x}}).busy.vector;
  };
  const double f32 = vector_cycles(dtype::f32), f64 = vector_cycles(dtype::f64);
  CHECK(f64 > 3.5 * f32);
  CHECK(f64 < 4.5 * f32);
  const kernel_cost g = estimate(p, gemm(512, 512, 512, dtype::f64, dtype::f64));
  CHECK_FALSE(g.cube_path);
  CHECK(g.busy.cube == 0);
  // 2K operations per output at vector_lanes / 8 per cycle, over the cores.
  const double ops = 2.0 * 512 * 512 * 512;
  CHECK(g.busy.vector >= ops / (p.vector_lanes / 8.0) / p.ai_core_count * 0.99);
  CHECK(g.total_cycles > estimate(p, gemm(512, 512, 512, dtype::f32, dtype::f32)).total_cycles * 10);
}

TEST_CASE("an f64 GEMM runs on the vector cores of a part with separate cube and vector cores", "[sim][cost][f64]") {
  const preset p = presets::ascend910b();
  REQUIRE(p.separated_cores);
  REQUIRE(p.vector_core_count != p.ai_core_count);
  const kernel_desc g64 = gemm(256, 256, 256, dtype::f64, dtype::f64);
  const kernel_desc g16 = gemm(256, 256, 256);
  CHECK_FALSE(uses_cube(g64));
  CHECK(uses_cube(g16));
  CHECK(core_pool(p, g64) == p.vector_core_count);
  CHECK(core_pool(p, g16) == p.ai_core_count);
  // Spread over the vector cores: 2K operations per output at vector_lanes / 8 per cycle each.
  const kernel_cost c = estimate(p, g64);
  CHECK(c.cores == p.vector_core_count);
  const double ops = 2.0 * 256 * 256 * 256;
  CHECK(c.busy.vector >= ops / (p.vector_lanes / 8.0) / p.vector_core_count * 0.99);
  CHECK(c.busy.vector <= ops / (p.vector_lanes / 8.0) / p.vector_core_count * 1.5);
}

TEST_CASE("the same kernel always costs the same cycles", "[sim][cost]") {
  const preset p = presets::ascend910b();
  const conv_case c{64, 256, 56, 56, 64, 1, 1, 1, 0};
  for (int pass = 0; pass < 3; ++pass) {
    const kernel_cost a = estimate(p, conv(c, pass)), b = estimate(p, conv(c, pass));
    CHECK(a.total_cycles == b.total_cycles);
    CHECK(a.total == b.total);
    CHECK(a.tiles == b.tiles);
    CHECK(a.bound == b.bound);
    CHECK(a.hbm_bytes == b.hbm_bytes);
  }
}

TEST_CASE("the breakdown adds up", "[sim][cost]") {
  const preset p = presets::ascend910();
  const kernel_cost c = estimate(p, gemm(1024, 1024, 1024));
  CHECK(c.total == c.launch_latency + c.body);
  CHECK(c.launch_latency == p.kernel_launch_latency);
  CHECK(c.body == cycles_to_ps(static_cast<std::uint64_t>(std::ceil(c.total_cycles)), p.clock_hz));
  CHECK(c.stall_cycles == c.total_cycles - c.busy.of(c.bound));
  CHECK(c.busy.of(c.bound) <= c.total_cycles);
  CHECK(c.tiles >= c.tiles_per_core);
  CHECK(c.cube_floor_cycles == static_cast<std::uint64_t>(cdiv(64 * 64 * 64, 32)));
  const kernels::fixed f{picoseconds{12345}};
  const kernel_cost fc = estimate(p, kernel_desc{f});
  CHECK(fc.body == picoseconds{12345});
  CHECK(fc.total == picoseconds{12345} + p.kernel_launch_latency);
  CHECK(fc.bound == unit::fixed);
}

// A fused epilogue (bias, residual, activation) is part of the one pass of a cube kernel: the
// output is written once, so the fused kernel costs no HBM round trip of its output and stays
// within the oracles of the plain kernel.
TEST_CASE("a conv2d or matmul with a fused epilogue costs one pass, not one pass per fused op",
          "[sim][cost][epilogue]") {
  const preset p = presets::ascend910();
  const std::vector<conv_case> cases{{32, 64, 56, 56, 64, 3, 3, 1, 1},
                                     {32, 256, 56, 56, 64, 1, 1, 1, 0},
                                     {32, 64, 56, 56, 256, 1, 1, 1, 0},
                                     {32, 512, 7, 7, 2048, 1, 1, 1, 0}};
  for (const auto& c : cases) {
    CAPTURE(c.cin, c.h, c.cout, c.kh);
    const kernel_desc plain = conv(c, 0);
    const auto& pc = std::get<kernels::conv2d>(plain.op);
    kernels::conv2d f = pc;
    const tensor_desc bias{nullptr, shape{1, pc.y.shape[1], 1, 1}, dtype::f16};
    f.bias = bias;
    f.residual = pc.y;
    f.act = kernels::activation::relu;
    const kernel_cost base = estimate(p, plain), fused = estimate(p, kernel_desc{f});
    const kernel_cost add = estimate(p, kernel_desc{kernels::elementwise{kernels::eltwise_fn::add, pc.y, pc.y, pc.y}});
    const kernel_cost relu = estimate(p, kernel_desc{kernels::elementwise{kernels::eltwise_fn::relu, pc.y, {}, pc.y}});
    const double y_bytes = static_cast<double>(pc.y.bytes());
    // Traffic: the plain kernel's plus the bias and the residual, read once; the output is not
    // written a second time nor read back.
    CHECK(fused.hbm_bytes == base.hbm_bytes + bias.bytes() + pc.y.bytes());
    // Time: within the plain kernel plus streaming the residual in at the HBM rate, i.e. less
    // than any unfused sequence, whose every extra kernel moves the output at least twice.
    const double residual_read_s = y_bytes / p.hbm_bandwidth;
    CHECK(to_us(fused.body) * 1e-6 <= to_us(base.body) * 1e-6 + residual_read_s * 1.05 + 2e-6);
    CHECK(fused.total < base.total + add.total + relu.total);
    CHECK(to_us(fused.body) * 1e-6 < to_us(base.body + add.body + relu.body) * 1e-6 - y_bytes / p.hbm_bandwidth);
    // The oracles: no faster than the cube floor, the roofline with the extra bytes, nor the
    // plain kernel.
    CHECK(fused.total_cycles >= static_cast<double>(fused.cube_floor_cycles));
    CHECK(fused.body >= fused.roofline);
    CHECK(fused.body >= base.body);
  }
  SECTION("a GEMM epilogue of bias and GELU, as in a Transformer's feed-forward layer") {
    const kernel_desc plain = gemm(128 * 32, 4096, 1024);
    kernels::matmul f = std::get<kernels::matmul>(plain.op);
    f.bias = tensor_desc{nullptr, shape{4096}, dtype::f16};
    f.act = kernels::activation::gelu;
    const kernel_cost base = estimate(p, plain), fused = estimate(p, kernel_desc{f});
    CHECK(fused.hbm_bytes == base.hbm_bytes + 4096 * 2);
    CHECK(fused.body >= base.body);
    // Compute-bound: the vector work of the epilogue hides under the cube (within 2%).
    CHECK(to_us(fused.body) <= to_us(base.body) * 1.02);
    CHECK(fused.total_cycles >= static_cast<double>(fused.cube_floor_cycles));
  }
}

TEST_CASE("conv2d_backward_data with a ReLU mask costs one pass, reading the mask beside it", "[sim][cost][epilogue]") {
  const preset p = presets::ascend910();
  for (const conv_case& c : {conv_case{32, 64, 56, 56, 64, 3, 3, 1, 1}, conv_case{32, 64, 56, 56, 256, 1, 1, 1, 0},
                             conv_case{32, 256, 56, 56, 128, 1, 1, 2, 0}}) {
    CAPTURE(c.cin, c.cout, c.kh, c.stride);
    const kernel_desc plain = conv(c, 1);
    kernels::conv2d_backward_data f = std::get<kernels::conv2d_backward_data>(plain.op);
    f.relu_y = f.dx;
    const kernel_cost base = estimate(p, plain), fused = estimate(p, kernel_desc{f});
    const kernel_cost mask =
        estimate(p, kernel_desc{kernels::elementwise{kernels::eltwise_fn::relu_backward, f.dx, f.dx, f.dx}});
    // Traffic: the plain kernel's and the mask, read once; dx is written once, masked.
    CHECK(fused.hbm_bytes == base.hbm_bytes + f.dx.bytes());
    // Less than the unfused pair, whose relu_backward reads dx and the mask and writes dx again;
    // no faster than the plain kernel, the cube floor or the roofline of its bytes.
    CHECK(fused.total < base.total + mask.total);
    CHECK(fused.body >= base.body);
    CHECK(fused.body >= fused.roofline);
    CHECK(fused.total_cycles >= static_cast<double>(fused.cube_floor_cycles));
  }
}

// A slice is data movement, as transpose is: y's bytes read from x and written once. A window
// whose inner dimension is gathered (a step other than 1) costs no less than a transpose that
// moves the inner axis over the same bytes.
TEST_CASE("slice costs its window's bytes, a gathered one no less than a transpose", "[sim][cost][slice]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc x{nullptr, shape{64, 512, 256}, dtype::f16};
  const tensor_desc y{nullptr, shape{64, 256, 128}, dtype::f16};
  const kernels::slice rows{x, y, {0, 1, 0}, {1, 2, 1}};   // every other row: contiguous rows of 128
  const kernels::slice cols{x, y, {0, 0, 255}, {1, 1, -2}};  // every other column, backwards: a gather
  const kernel_cost cr = estimate(p, kernel_desc{rows}), cc = estimate(p, kernel_desc{cols});
  CHECK(cr.op == "slice");
  CHECK(cr.hbm_bytes == 2 * y.bytes());
  CHECK(cc.hbm_bytes == 2 * y.bytes());
  CHECK(cc.total_cycles > cr.total_cycles);
  kernels::transpose tr{y, tensor_desc{nullptr, shape{64, 128, 256}, dtype::f16}};
  tr.perm = {0, 2, 1};
  CHECK(cc.total_cycles >= estimate(p, kernel_desc{tr}).total_cycles);
  // The device model caches costs by every field that decides one: the steps and starts too.
  device_model dm(p, sim_options{});
  const std::uint32_t cores = p.vector_core_count;
  CHECK(dm.cost_of(kernel_desc{rows}, cores).total_cycles == estimate(p, kernel_desc{rows}, cores).total_cycles);
  CHECK(dm.cost_of(kernel_desc{cols}, cores).total_cycles == estimate(p, kernel_desc{cols}, cores).total_cycles);
}

// A pad is data movement: y written once and x's part of it read once, so it takes no less than
// those bytes over HBM's bandwidth. A border that mirrors x is a gather and costs more than a
// constant one of the same shape.
TEST_CASE("pad costs at least its bytes over HBM, a mirrored border more than a constant one", "[sim][cost][pad]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc x{nullptr, shape{32, 64, 224, 224}, dtype::f16};
  const tensor_desc y{nullptr, shape{32, 64, 230, 230}, dtype::f16};
  const kernels::pad constant{x, y, {0, 0, 3, 3}, 0, kernels::pad_mode::constant};
  const kernels::pad reflect{x, y, {0, 0, 3, 3}, 0, kernels::pad_mode::reflect};
  const kernel_cost cc = estimate(p, kernel_desc{constant}), cr = estimate(p, kernel_desc{reflect});
  CHECK(cc.op == "pad");
  const double moved = static_cast<double>(x.bytes() + y.bytes());
  CHECK(cc.hbm_bytes == x.bytes() + y.bytes());
  CHECK(cc.total_cycles / p.clock_hz >= moved / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(cr.total_cycles > cc.total_cycles);
  // A crop reads only what it keeps.
  const kernels::pad crop{y, x, {0, 0, -3, -3}, 0, kernels::pad_mode::constant};
  CHECK(estimate(p, kernel_desc{crop}).hbm_bytes == 2 * x.bytes());
  device_model dm(p, sim_options{});
  const std::uint32_t cores = p.vector_core_count;
  CHECK(dm.cost_of(kernel_desc{reflect}, cores).total_cycles == estimate(p, kernel_desc{reflect}, cores).total_cycles);
  CHECK(dm.cost_of(kernel_desc{constant}, cores).total_cycles ==
        estimate(p, kernel_desc{constant}, cores).total_cycles);
}

// A gather is data movement: y's bytes read where the indices point, the indices read, and y
// written. The oracle is the bytes counted from the shapes here and the preset's HBM bandwidth:
// no kernel moves them faster. A row after the axis shorter than a 32-byte block is gathered
// through the vector unit and costs more than whole rows over the same bytes.
TEST_CASE("gather costs its bytes at no more than HBM's bandwidth; short rows cost more", "[sim][cost][gather]") {
  const preset p = presets::ascend910b(1);
  // An embedding lookup: 8 x 128 token ids into a [30522, 768] f16 table.
  const kernels::gather lookup{{nullptr, shape{30522, 768}, dtype::f16},
                               {nullptr, shape{8, 128}, dtype::i64},
                               {nullptr, shape{8, 128, 768}, dtype::f16},
                               0};
  const std::uint64_t y_bytes = 8ull * 128 * 768 * 2, ids_bytes = 8ull * 128 * 8;
  const kernel_cost c = estimate(p, kernel_desc{lookup});
  CHECK(c.op == "gather");
  CHECK(c.hbm_bytes == 2 * y_bytes + ids_bytes);
  CHECK(static_cast<double>(c.body.count()) >= static_cast<double>(2 * y_bytes + ids_bytes) / p.hbm_bandwidth * 1e12);
  // The same bytes as whole rows of 4096 f16 (axis 0) and as single elements (axis 1, the last).
  const kernels::gather rows{{nullptr, shape{64, 4096}, dtype::f16},
                             {nullptr, shape{32}, dtype::i32},
                             {nullptr, shape{32, 4096}, dtype::f16},
                             0};
  const kernels::gather cols{{nullptr, shape{4096, 64}, dtype::f16},
                             {nullptr, shape{32}, dtype::i32},
                             {nullptr, shape{4096, 32}, dtype::f16},
                             1};
  const kernel_cost cr = estimate(p, kernel_desc{rows}), cc = estimate(p, kernel_desc{cols});
  const std::uint64_t moved = 2ull * 32 * 4096 * 2 + 32 * 4;
  CHECK(cr.hbm_bytes == moved);
  CHECK(cc.hbm_bytes == moved);
  for (const auto* k : {&cr, &cc})
    CHECK(static_cast<double>(k->body.count()) >= static_cast<double>(moved) / p.hbm_bandwidth * 1e12);
  CHECK(cc.total_cycles > cr.total_cycles);
  // A scalar index of a vector: one element read and written, one index read.
  const kernels::gather one{
      {nullptr, shape{5}, dtype::f32}, {nullptr, shape{}, dtype::i64}, {nullptr, shape{}, dtype::f32}, 0};
  CHECK(estimate(p, kernel_desc{one}).hbm_bytes == 4 + 8 + 4);
  // The device model caches costs by every field, the axis too: two gathers that differ in it alone.
  const kernels::gather by_row{
      {nullptr, shape{64, 64}, dtype::f16}, {nullptr, shape{64}, dtype::i32}, {nullptr, shape{64, 64}, dtype::f16}, 0};
  kernels::gather by_col = by_row;
  by_col.axis = 1;
  device_model dm(p, sim_options{});
  const std::uint32_t cores = p.vector_core_count;
  const double row_cycles = dm.cost_of(kernel_desc{by_row}, cores).total_cycles;
  const double col_cycles = dm.cost_of(kernel_desc{by_col}, cores).total_cycles;
  CHECK(row_cycles == estimate(p, kernel_desc{by_row}, cores).total_cycles);
  CHECK(col_cycles == estimate(p, kernel_desc{by_col}, cores).total_cycles);
  CHECK(col_cycles > row_cycles);
}

// A tile is data movement: y written once and x read once, no faster than those bytes over HBM's
// bandwidth. Replicating single elements along the inner dimension (a broadcast of a column)
// costs more than copying whole rows over the same bytes.
TEST_CASE("tile costs at least its bytes over HBM, an inner broadcast more than whole rows", "[sim][cost][tile]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc rows_x{nullptr, shape{1, 4096}, dtype::f16};
  const tensor_desc col_x{nullptr, shape{4096, 1}, dtype::f16};
  const tensor_desc y{nullptr, shape{4096, 4096}, dtype::f16};
  const kernel_cost rows = estimate(p, kernel_desc{kernels::tile{rows_x, y}});
  const kernel_cost cols = estimate(p, kernel_desc{kernels::tile{col_x, y}});
  CHECK(rows.op == "tile");
  CHECK(rows.hbm_bytes == rows_x.bytes() + y.bytes());
  CHECK(rows.total_cycles / p.clock_hz >=
        static_cast<double>(rows_x.bytes() + y.bytes()) / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(cols.total_cycles > rows.total_cycles);
}

// A loss reads one element of x per target (the class it picks) and the targets, and writes y: no
// faster than those bytes over HBM's bandwidth, and far cheaper than reading all of x.
TEST_CASE("nll_loss costs the elements it picks, not the whole input", "[sim][cost][nll]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc x{nullptr, shape{512, 32000}, dtype::f32};
  const tensor_desc target{nullptr, shape{512}, dtype::i64};
  const tensor_desc y{nullptr, shape{1}, dtype::f32};
  const kernel_cost c = estimate(p, kernel_desc{kernels::nll_loss{x, target, {}, y}});
  CHECK(c.op == "nll_loss");
  const double bytes = static_cast<double>(target.bytes() + 512 * 4 + y.bytes());
  CHECK(c.total_cycles / p.clock_hz >= bytes / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(c.total_cycles / p.clock_hz < static_cast<double>(x.bytes()) / p.hbm_bandwidth);
}

// A resize is data movement with arithmetic: y written once and x read once, so it takes no less
// than those bytes over HBM's bandwidth; linear reads more neighbours per output than nearest.
TEST_CASE("resize costs at least its bytes over HBM, linear no less than nearest", "[sim][cost][resize]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc x{nullptr, shape{8, 256, 64, 64}, dtype::f16};
  const tensor_desc y{nullptr, shape{8, 256, 128, 128}, dtype::f16};
  const std::array<double, shape::max_rank> scales{1, 1, 2, 2, 1, 1, 1, 1};
  const kernels::resize nearest{x, y, scales};
  const kernels::resize linear{x, y, scales, -0.75f, kernels::resize_mode::linear};
  const kernel_cost cn = estimate(p, kernel_desc{nearest}), cl = estimate(p, kernel_desc{linear});
  CHECK(cn.op == "resize");
  // 8*256*64*64 f16 elements read, four times as many written.
  const double x_bytes = 8.0 * 256 * 64 * 64 * 2, y_bytes = 4 * x_bytes;
  CHECK(static_cast<double>(cn.hbm_bytes) == x_bytes + y_bytes);
  CHECK(cn.total_cycles / p.clock_hz >= (x_bytes + y_bytes) / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(cl.total_cycles / p.clock_hz >= (x_bytes + y_bytes) / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(cl.total_cycles >= cn.total_cycles);
  // A downsample by 4 in nearest mode reads one neighbour per output: no more than y's bytes.
  const kernels::resize down{
      y, tensor_desc{nullptr, shape{8, 256, 32, 32}, dtype::f16}, {1, 1, 0.25, 0.25, 1, 1, 1, 1}};
  CHECK(static_cast<double>(estimate(p, kernel_desc{down}).hbm_bytes) == 2 * (8.0 * 256 * 32 * 32 * 2));
  device_model dm(p, sim_options{});
  const std::uint32_t cores = p.vector_core_count;
  CHECK(dm.cost_of(kernel_desc{linear}, cores).total_cycles == estimate(p, kernel_desc{linear}, cores).total_cycles);
}

// A grid_sample is a gather: each output fetches its neighbours in x on their own, the grid is
// read once and y written once; bilinear fetches four times what nearest does.
TEST_CASE("grid_sample costs its gathered neighbours, the grid and y", "[sim][cost][grid_sample]") {
  const preset p = presets::ascend910b(1);
  const tensor_desc x{nullptr, shape{4, 64, 80, 80}, dtype::f16};
  const tensor_desc grid{nullptr, shape{4, 40, 40, 2}, dtype::f32};
  const tensor_desc y{nullptr, shape{4, 64, 40, 40}, dtype::f16};
  const kernels::grid_sample nearest{x, grid, y, kernels::grid_sample_mode::nearest};
  const kernels::grid_sample linear{x, grid, y};
  const kernels::grid_sample cubic{x, grid, y, kernels::grid_sample_mode::cubic};
  const kernel_cost cn = estimate(p, kernel_desc{nearest}), cl = estimate(p, kernel_desc{linear}),
                    cc = estimate(p, kernel_desc{cubic});
  CHECK(cn.op == "grid_sample");
  const double y_bytes = 4.0 * 64 * 40 * 40 * 2, grid_bytes = 4.0 * 40 * 40 * 2 * 4;
  CHECK(static_cast<double>(cn.hbm_bytes) == y_bytes + grid_bytes + y_bytes);
  CHECK(static_cast<double>(cl.hbm_bytes) == 4 * y_bytes + grid_bytes + y_bytes);
  CHECK(static_cast<double>(cc.hbm_bytes) == 16 * y_bytes + grid_bytes + y_bytes);
  CHECK(cn.total_cycles / p.clock_hz >= (2 * y_bytes + grid_bytes) / p.hbm_bandwidth * (1 - 1e-9));
  CHECK(cl.total_cycles > cn.total_cycles);
  CHECK(cc.total_cycles > cl.total_cycles);
}

// A recurrent layer costs its unrolled steps: per step and direction the matmul kernel of its gate
// product ([batch, input + hidden] x [input + hidden, gates * hidden]) and a vector pass of the
// gate math, one step after another.
TEST_CASE("recurrent costs what its unrolled gate MatMuls and gate math cost", "[sim][cost][recurrent]") {
  const preset p = presets::ascend910b(1);
  constexpr std::int64_t seq = 16, batch = 8, input = 96, hidden = 64;
  const auto layer = [&](kernels::rnn_cell cell, std::int64_t gates, kernels::rnn_direction dir, std::int64_t steps) {
    const std::int64_t dirs = dir == kernels::rnn_direction::bidirectional ? 2 : 1;
    kernels::recurrent r{tensor_desc{nullptr, shape{steps, batch, input}, dtype::f16},
                         tensor_desc{nullptr, shape{dirs, gates * hidden, input}, dtype::f16},
                         tensor_desc{nullptr, shape{dirs, gates * hidden, hidden}, dtype::f16}};
    r.y = tensor_desc{nullptr, shape{steps, dirs, batch, hidden}, dtype::f16};
    r.cell = cell;
    r.direction = dir;
    if (cell == kernels::rnn_cell::gru)
      r.activations = {kernels::rnn_activation::sigmoid, kernels::rnn_activation::tanh,
                       kernels::rnn_activation::sigmoid, kernels::rnn_activation::tanh};
    return estimate(p, kernel_desc{r});
  };
  const kernel_cost lstm = layer(kernels::rnn_cell::lstm, 4, kernels::rnn_direction::forward, seq);
  CHECK(lstm.op == "lstm");
  CHECK(lstm.cube_path);
  // The step's gate product as the matmul kernel costs it.
  const kernels::matmul step{tensor_desc{nullptr, shape{batch, input + hidden}, dtype::f16},
                             tensor_desc{nullptr, shape{input + hidden, 4 * hidden}, dtype::f16},
                             tensor_desc{nullptr, shape{batch, 4 * hidden}, dtype::f16}};
  const kernel_cost mm = estimate(p, kernel_desc{step});
  CHECK(static_cast<double>(lstm.flops) >= seq * static_cast<double>(mm.flops));
  CHECK(lstm.total_cycles > seq * mm.total_cycles);
  CHECK(lstm.busy.cube == seq * mm.busy.cube);
  // Twice the steps cost twice; a bidirectional layer twice a forward one; a GRU less than an LSTM.
  const kernel_cost longer = layer(kernels::rnn_cell::lstm, 4, kernels::rnn_direction::forward, 2 * seq);
  const kernel_cost both = layer(kernels::rnn_cell::lstm, 4, kernels::rnn_direction::bidirectional, seq);
  CHECK(longer.total_cycles == 2 * lstm.total_cycles);
  CHECK(both.total_cycles == 2 * lstm.total_cycles);
  CHECK(layer(kernels::rnn_cell::gru, 3, kernels::rnn_direction::forward, seq).total_cycles < lstm.total_cycles);
  CHECK(uses_cube(kernel_desc{kernels::recurrent{}}));
}

TEST_CASE("pooling is vector work of the window's volume per output, at any spatial rank", "[sim][cost][pool]") {
  const preset p = presets::ascend910();
  const auto vector_cycles = [&](shape xs, std::array<std::int32_t, 3> window) {
    const tensor_desc x{nullptr, xs, dtype::f16};
    kernels::pool2d op{kernels::pool_mode::max, x, x, window, {1, 1, 1}, {0, 0, 0}};
    for (std::size_t i = 0; i < 3; ++i) op.pad_end[i] = window[i] - 1;  // keeps y x's shape
    const kernel_cost c = estimate(p, kernel_desc{op});
    CHECK_FALSE(c.cube_path);
    return c.busy.vector;
  };
  // The same 2^21 outputs: a 27-tap 3-D window costs about 27 one-tap windows, as a 27-tap 1-D or
  // a 3x9 2-D one does.
  const double one = vector_cycles({8, 16, 16, 32, 32}, {1, 1, 1});
  const double cube = vector_cycles({8, 16, 16, 32, 32}, {3, 3, 3});
  const double line = vector_cycles({8, 16, 16 * 32 * 32}, {27, 1, 1});
  const double plane = vector_cycles({8, 16, 16 * 32, 32}, {3, 9, 1});
  CHECK(cube > 20 * one);
  CHECK(cube < 30 * one);
  CHECK(std::abs(line - cube) < 0.05 * cube);
  CHECK(std::abs(plane - cube) < 0.05 * cube);
}

TEST_CASE("MatMulInteger and ConvInteger cost INT8 cube work, zero points a vector epilogue", "[sim][cost]") {
  const preset p = presets::ascend910();
  const std::int64_t m = 2048, n = 1024, k = 4096;
  const tensor_desc a{nullptr, shape{m, k}, dtype::u8}, b{nullptr, shape{k, n}, dtype::i8};
  const tensor_desc y{nullptr, shape{m, n}, dtype::i32};
  const kernel_cost plain = estimate(p, kernel_desc{kernels::integer_matmul{a, b, {}, {}, y}});
  const kernel_cost i8 = estimate(p, gemm(m, n, k, dtype::i8, dtype::i32));
  const kernel_cost f16 = estimate(p, gemm(m, n, k, dtype::f16, dtype::f16));
  // The INT8 fractal: the same cube cycles as an int8 matmul, about half FP16's.
  CHECK(plain.cube_path);
  CHECK(plain.busy.cube == i8.busy.cube);
  CHECK(plain.busy.cube < f16.busy.cube * 0.55);
  const tensor_desc za{nullptr, shape{1}, dtype::u8}, zb{nullptr, shape{n}, dtype::i8};
  const kernel_cost zp = estimate(p, kernel_desc{kernels::integer_matmul{a, b, za, zb, y}});
  CHECK(zp.busy.cube == plain.busy.cube);
  CHECK(zp.busy.vector > plain.busy.vector);
  // ConvInteger: the forward convolution's INT8 GEMM.
  const tensor_desc x{nullptr, shape{8, 64, 56, 56}, dtype::u8}, w{nullptr, shape{64, 64, 3, 3}, dtype::u8};
  const tensor_desc yc{nullptr, shape{8, 64, 56, 56}, dtype::i32};
  kernels::integer_conv2d ic{x, w, {}, {}, yc};
  ic.pad = {1, 1};
  kernels::conv2d c8{{nullptr, x.shape, dtype::i8}, {nullptr, w.shape, dtype::i8}, yc};
  c8.pad = {1, 1};
  const kernel_cost ci = estimate(p, kernel_desc{ic});
  CHECK(ci.cube_path);
  CHECK(ci.busy.cube == estimate(p, kernel_desc{c8}).busy.cube);
  CHECK(ci.flops == estimate(p, kernel_desc{c8}).flops);
}

TEST_CASE("dft is costed as a direct transform: n^2 per transform on the vector unit, any length", "[sim][cost]") {
  const preset p = presets::ascend910();
  const auto cost = [&](std::int64_t n) {
    const tensor_desc x{nullptr, shape{64, n, 1}, dtype::f32}, y{nullptr, shape{64, n, 2}, dtype::f32};
    return estimate(p, kernel_desc{kernels::dft{x, {}, y, n, 0, 1}});
  };
  const kernel_cost a = cost(512), b = cost(1024), odd = cost(1000);
  CHECK(!a.cube_path);
  // Twice the points, about four times the work (less the fixed costs): no n log n.
  CHECK(b.busy.vector / a.busy.vector > 3.5);
  CHECK(b.busy.vector / a.busy.vector < 4.2);
  // A length that is no power of two costs what its n^2 says.
  const double ratio = odd.busy.vector / b.busy.vector, want = (1000.0 * 1000.0) / (1024.0 * 1024.0);
  CHECK(std::abs(ratio - want) < 0.05);
}
