// The cycle-approximate cost model (see cost_model.hpp for the picture).
#include <npurt/sim/cost_model.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <variant>

namespace npurt::sim {

namespace {

// Counts the model computes in double, as integers: saturating, so an absurd shape gives an
// absurd (and then rejected) cost rather than an undefined float-to-integer conversion.
std::uint64_t saturating_u64(double x) noexcept {
  if (!(x < 0x1p64)) return std::numeric_limits<std::uint64_t>::max();
  if (!(x > 0)) return 0;
  return static_cast<std::uint64_t>(x);
}

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }
constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) noexcept { return ceil_div(a, b) * b; }
// min(a * b, cap) for positive a, b, cap, without forming a product that may not fit.
constexpr std::int64_t capped_product(std::int64_t a, std::int64_t b, std::int64_t cap) noexcept {
  return a > cap / b ? cap : std::min(a * b, cap);
}

double es(dtype t) noexcept { return static_cast<double>(size_of(t)); }

std::uint32_t fractal_k(const preset& p, dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16: return p.cube_k;
    case dtype::i8:
    case dtype::u8: return p.cube_k_int8;
    default: return p.cube_k_fp32;
  }
}

// Elements per vector cycle by dtype: lanes of bytes, except f64. Huawei documents no FP64 in
// the Da Vinci vector unit (FP64 runs on the AI CPU), and the presets carry no FP64 rate: npurt
// assumes an FP64 element costs four FP32 ones (a quarter of the FP32 rate, an eighth of the
// FP16 one), an assumption, not a vendor figure.
double lanes_for(const preset& p, dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16:
    case dtype::i16:
    case dtype::u16: return p.vector_lanes;
    case dtype::i8:
    case dtype::u8:
    case dtype::boolean: return 2.0 * p.vector_lanes;
    case dtype::i64:
    case dtype::u64: return p.vector_lanes / 4.0;
    case dtype::f64: return p.vector_lanes / 8.0;
    default: return p.vector_lanes / 2.0;
  }
}

// One GEMM with the facts about its operands the tiler needs.
struct gemm_problem {
  gemm_shape g;
  double out_es = 2;          // bytes per output element
  double a_factor = 1;        // GM bytes of A / bytes of A as the cube sees it (img2col saves)
  double b_factor = 1;
  double c_factor = 1;        // GM bytes written / M*N outputs (a zero-filled input gradient)
  bool a_halo = false;        // A is a conv input walked by output rows: tiles re-read a halo
  std::int64_t halo_wo = 1, halo_kh = 1, halo_sh = 1;
  bool a_shared = false;      // A is the same for every batch entry ([M,K] x [batch,K,N])
  bool b_shared = false;      // B is the same for every batch entry
  bool read_c = false;        // beta != 0
  double useful_macs = 0;
  // The epilogue applied as tiles leave L0C: vector operations per output element, and the
  // GM bytes it reads (bias, residual); the output itself is written once either way.
  double epi_ops = 0;
  double epi_bytes = 0;
  dtype out_type = dtype::f16;
  [[nodiscard]] bool has_epilogue() const noexcept { return epi_ops > 0; }
};

std::int64_t dim(const tensor_desc& t, std::size_t i) noexcept { return i < t.shape.rank() ? t.shape[i] : 1; }

double activation_ops(kernels::activation a) noexcept;

void set_epilogue(gemm_problem& pr, const tensor_desc& out, const tensor_desc& bias, const tensor_desc& residual,
                  kernels::activation act) {
  pr.out_type = out.type;
  const bool b = bias.shape.rank() > 0, r = residual.shape.rank() > 0;
  pr.epi_ops = (b ? 1.0 : 0.0) + (r ? 1.0 : 0.0) + activation_ops(act);
  pr.epi_bytes = (b ? static_cast<double>(bias.bytes()) : 0.0) + (r ? static_cast<double>(residual.bytes()) : 0.0);
}

// A forward convolution as the cube's img2col GEMM: conv2d and integer_conv2d alike, `in` the
// dtype whose rate the cube runs at.
template <class Conv>
void conv_forward_gemm(const Conv& c, dtype in, gemm_problem& pr) {
  const std::int64_t n = dim(c.x, 0), ci = dim(c.x, 1), h = dim(c.x, 2), w = dim(c.x, 3);
  const std::int64_t co = dim(c.w, 0), kh = dim(c.w, 2), kw = dim(c.w, 3);
  const std::int64_t ho = dim(c.y, 2), wo = dim(c.y, 3);
  const std::int64_t g = std::max<std::int32_t>(1, c.groups), cig = ci / g;
  pr.g = {g, n * ho * wo, co / g, round_up(cig, 16) * kh * kw, in};
  pr.out_es = es(c.y.type);
  const double x_bytes = static_cast<double>(n) * round_up(cig, 16) * h * w * es(c.x.type);
  pr.a_factor = std::min(1.0, x_bytes / (static_cast<double>(pr.g.m) * pr.g.k * es(c.x.type)));
  pr.a_halo = kh > c.stride[0];
  pr.halo_wo = wo;
  pr.halo_kh = (kh - 1) * c.dilation[0] + 1;
  pr.halo_sh = c.stride[0];
  pr.useful_macs = static_cast<double>(n) * ho * wo * co * cig * kh * kw;
}

// The zero points' correction of an integer GEMM: one vector operation per output, the zero
// points read once.
void zero_point_epilogue(gemm_problem& pr, const tensor_desc& za, const tensor_desc& zb) {
  const bool a = za.shape.rank() > 0, b = zb.shape.rank() > 0;
  if (!a && !b) return;
  pr.epi_ops = 1;
  pr.epi_bytes = (a ? static_cast<double>(za.bytes()) : 0.0) + (b ? static_cast<double>(zb.bytes()) : 0.0);
}

std::optional<gemm_problem> to_gemm(const kernel_desc& k) {
  using namespace kernels;
  gemm_problem pr;
  if (const auto* mm = std::get_if<matmul>(&k.op)) {
    const auto& a = mm->a.shape;
    const auto& b = mm->b.shape;
    if (a.rank() < 2 || b.rank() < 2) return std::nullopt;
    const std::size_t ra = a.rank(), rb = b.rank();
    pr.g.batch = ra >= 3 ? a[ra - 3] : (rb >= 3 ? b[rb - 3] : 1);
    for (std::size_t i = 0; i + 3 < ra; ++i) pr.g.batch *= a[i];
    pr.g.m = mm->trans_a ? a[ra - 1] : a[ra - 2];
    pr.g.k = mm->trans_a ? a[ra - 2] : a[ra - 1];
    pr.g.n = mm->trans_b ? b[rb - 2] : b[rb - 1];
    pr.g.in = mm->a.type;
    pr.out_es = es(mm->c.type);
    pr.a_shared = ra == 2 && pr.g.batch > 1;
    pr.b_shared = rb == 2 && pr.g.batch > 1;
    pr.read_c = mm->beta != 0.0f;
    pr.useful_macs = static_cast<double>(pr.g.batch) * pr.g.m * pr.g.n * pr.g.k;
    set_epilogue(pr, mm->c, mm->bias, mm->residual, mm->act);
    return pr;
  }
  if (const auto* c = std::get_if<conv2d>(&k.op)) {
    conv_forward_gemm(*c, c->x.type, pr);
    set_epilogue(pr, c->y, c->bias, c->residual, c->act);
    return pr;
  }
  if (const auto* mi = std::get_if<integer_matmul>(&k.op)) {
    // ONNX's MatMulInteger is charged as INT8 cube work whichever of int8 and uint8 each operand
    // is (the presets' cube_k_int8 fractal), with an INT32 result. The
    // zero points are a correction per output element (sum_k a*b - zb*rowsum(a) - za*colsum(b)
    // + K*za*zb, the sums found as the tiles pass): one vector operation per output in the
    // epilogue, reading the zero points.
    const auto& a = mi->a.shape;
    const auto& y = mi->y.shape;
    if (a.rank() < 2 || y.rank() < 2 || mi->b.shape.rank() < 2) return std::nullopt;
    const std::size_t ry = y.rank();
    pr.g.m = y[ry - 2];
    pr.g.n = y[ry - 1];
    pr.g.k = a[a.rank() - 1];
    pr.g.batch = y.elements() / (pr.g.m * pr.g.n);
    pr.g.in = dtype::i8;
    pr.out_es = es(dtype::i32);
    pr.out_type = dtype::i32;
    pr.a_shared = a.rank() == 2 && pr.g.batch > 1;
    pr.b_shared = mi->b.shape.rank() == 2 && pr.g.batch > 1;
    pr.useful_macs = static_cast<double>(pr.g.batch) * pr.g.m * pr.g.n * pr.g.k;
    zero_point_epilogue(pr, mi->a_zero_point, mi->b_zero_point);
    return pr;
  }
  if (const auto* ci = std::get_if<integer_conv2d>(&k.op)) {
    // ONNX's ConvInteger: the convolution's INT8 GEMM, zero points as integer_matmul's.
    conv_forward_gemm(*ci, dtype::i8, pr);
    pr.out_type = dtype::i32;
    zero_point_epilogue(pr, ci->x_zero_point, ci->w_zero_point);
    return pr;
  }
  if (const auto* c = std::get_if<conv2d_backward_data>(&k.op)) {
    // dx = dy (*) rot(w). Each dx pixel gathers ceil(kh*kw / (sh*sw)) taps on average; with a
    // kernel smaller than the stride only the pixels a tap lands on are computed.
    const std::int64_t n = dim(c->dx, 0), ci = dim(c->dx, 1), h = dim(c->dx, 2), w = dim(c->dx, 3);
    const std::int64_t co = dim(c->dy, 1), ho = dim(c->dy, 2), wo = dim(c->dy, 3);
    const std::int64_t kh = dim(c->w, 2), kw = dim(c->w, 3), sh = c->stride[0], sw = c->stride[1];
    const std::int64_t g = std::max<std::int32_t>(1, c->groups), cog = co / g;
    const std::int64_t rows = kh >= sh ? h : capped_product(ho, kh, h), cols = kw >= sw ? w : capped_product(wo, kw, w);
    const std::int64_t taps = (kh >= sh && kw >= sw) ? std::max<std::int64_t>(1, ceil_div(kh * kw, sh * sw)) : 1;
    pr.g = {g, n * rows * cols, ci / g, round_up(cog, 16) * taps, c->dy.type};
    pr.out_es = es(c->dx.type);
    const double dy_bytes = static_cast<double>(n) * round_up(cog, 16) * ho * wo * es(c->dy.type);
    pr.a_factor = std::min(1.0, dy_bytes / (static_cast<double>(pr.g.m) * pr.g.k * es(c->dy.type)));
    pr.c_factor = static_cast<double>(h * w) / static_cast<double>(rows * cols);  // untouched pixels are zeros
    pr.useful_macs = static_cast<double>(n) * ho * wo * co * (ci / g) * kh * kw;
    pr.out_type = c->dx.type;
    if (c->relu_y.shape.rank() > 0) {
      // The ReLU mask: one select per output, the mask read beside the tile it finishes.
      pr.epi_ops = 1;
      pr.epi_bytes = static_cast<double>(c->relu_y.bytes());
    }
    return pr;
  }
  if (const auto* c = std::get_if<conv2d_backward_weight>(&k.op)) {
    // dw[Co, Cin*kh*kw] = dy^T [Co, N*Ho*Wo] x img2col(x) [N*Ho*Wo, Cin*kh*kw].
    const std::int64_t n = dim(c->x, 0), ci = dim(c->x, 1), h = dim(c->x, 2), w = dim(c->x, 3);
    const std::int64_t co = dim(c->dy, 1), ho = dim(c->dy, 2), wo = dim(c->dy, 3);
    const std::int64_t kh = dim(c->dw, 2), kw = dim(c->dw, 3);
    const std::int64_t g = std::max<std::int32_t>(1, c->groups), cig = ci / g;
    pr.g = {g, co / g, round_up(cig, 16) * kh * kw, n * ho * wo, c->x.type};
    pr.out_es = es(c->dw.type);
    const double x_bytes = static_cast<double>(n) * round_up(cig, 16) * h * w * es(c->x.type);
    pr.b_factor = std::min(1.0, x_bytes / (static_cast<double>(pr.g.k) * pr.g.n * es(c->x.type)));
    pr.useful_macs = static_cast<double>(n) * ho * wo * co * cig * kh * kw;
    return pr;
  }
  return std::nullopt;
}

struct stage_times {
  double cube = 0, mte1 = 0, mte2 = 0, hbm = 0, scalar = 0, out = 0, out_hbm = 0, vec = 0;
};

// The tiler's choice for one GEMM and what it costs on the busiest core.
struct gemm_plan {
  std::int64_t mb = 0, nb = 0, kt = 0, ks = 1, kc = 0;
  bool l0c_double = false;
  std::uint64_t blocks = 0, steps_total = 0, q = 0;
  double total = 0, fill = 0, tile = 0;
  unit bound = unit::none;
  unit_cycles busy;
  double hbm_bytes = 0, gm_bytes = 0;
};

void plan_gemm(const preset& p, const gemm_problem& pr, std::uint32_t cores, double hbm_share, std::int64_t mb,
               std::int64_t nb, std::int64_t ks, gemm_plan& best) {
  const auto& g = pr.g;
  const double e = es(g.in);
  const std::int64_t k0 = fractal_k(p, g.in);
  const std::int64_t f16m = p.cube_m, f16n = p.cube_n;
  const bool l0c_double = 2.0 * mb * nb * 4 <= static_cast<double>(p.l0c_bytes);
  if (!l0c_double && static_cast<double>(mb) * nb * 4 > static_cast<double>(p.l0c_bytes)) return;
  const std::int64_t kc = round_up(ceil_div(g.k, ks), k0);
  if (ks > 1 && (ks - 1) * kc >= g.k) return;  // an empty split
  // K step: the largest multiple of k0 whose A and B tiles fit half of L0A / L0B, and whose
  // double-buffered A and B panels fit L1 (a smaller L1 shortens the step rather than rule the
  // block out: check() guarantees one fractal step fits, so every GEMM has a plan).
  std::int64_t kt = std::min({static_cast<std::int64_t>(p.l0a_bytes / 2 / (mb * e)),
                              static_cast<std::int64_t>(p.l0b_bytes / 2 / (nb * e)),
                              static_cast<std::int64_t>(static_cast<double>(p.l1_bytes) / (2.0 * (mb + nb) * e))});
  kt = kt / k0 * k0;
  if (kt < k0) return;
  kt = std::min(kt, kc);

  const double clock = p.clock_hz;
  const double issue = p.instr_issue_cycles;
  const double hbm_core = std::min(p.ddr_rate, hbm_share / cores / clock);

  // Block counts per dimension: full blocks and one remainder.
  const std::int64_t bm_full = g.m / mb, bm_rem = g.m % mb, bn_full = g.n / nb, bn_rem = g.n % nb;
  const std::int64_t nbm = bm_full + (bm_rem ? 1 : 0), nbn = bn_full + (bn_rem ? 1 : 0);
  const std::uint64_t blocks = static_cast<std::uint64_t>(nbm * nbn * g.batch * ks);
  const std::uint64_t q = (blocks + cores - 1) / cores;  // blocks on the busiest core
  const std::uint64_t waves = q;

  // HBM traffic after L2 reuse. An operand that fits half of L2 is fetched from HBM once; else
  // cores fetching the same panels in a wave share them (a wave is an ra x cb rectangle).
  const double a_bytes = pr.a_factor * g.m * g.k * e, b_bytes = pr.b_factor * g.k * g.n * e;
  const double c_out = (ks > 1 ? static_cast<double>(g.m) * g.n * 4 * ks : g.m * g.n * pr.out_es) * pr.c_factor;
  const double half_l2 = p.l2_bytes / 2.0;
  double ab_hbm;
  const double a_all = a_bytes * (pr.a_shared ? 1 : g.batch), b_all = b_bytes * (pr.b_shared ? 1 : g.batch);
  // An operand shared by the batch stays in L2 across the batch only if it fits; one that does
  // not streams past the other operand's panels again for each group of batch entries whose
  // panels fit half of L2 together (all of them at once: it streams once).
  const bool shared = pr.a_shared || pr.b_shared;
  const double shared_bytes = pr.a_shared ? a_bytes : b_bytes, own_bytes = pr.a_shared ? b_bytes : a_bytes;
  if (shared && shared_bytes > half_l2 && own_bytes <= half_l2) {
    const double group = std::max(1.0, std::floor(half_l2 / own_bytes));
    ab_hbm = own_bytes * g.batch + shared_bytes * std::ceil(static_cast<double>(g.batch) / group);
  } else if (b_bytes <= half_l2 || a_bytes <= half_l2) {
    ab_hbm = a_all + b_all;
  } else {
    const std::int64_t per_wave = std::min<std::int64_t>(cores, nbm * nbn);
    std::int64_t best_cost = -1, ra = 1, cb = 1;
    for (std::int64_t r = 1; r <= std::min<std::int64_t>(nbm, per_wave); ++r) {
      const std::int64_t c = std::min<std::int64_t>(nbn, ceil_div(per_wave, r));
      if (r * c < per_wave) continue;
      const std::int64_t cost = r * mb + c * nb;
      if (best_cost < 0 || cost < best_cost) best_cost = cost, ra = r, cb = c;
    }
    const double per = (ra * mb * pr.a_factor + cb * nb * pr.b_factor) * static_cast<double>(g.k) * e;
    const double total_waves = std::ceil(static_cast<double>(nbm * nbn * g.batch) / per_wave);
    ab_hbm = std::max(a_all + b_all, total_waves * per);
  }
  const double c_hbm = (c_out + (pr.read_c ? g.m * g.n * pr.out_es : 0.0)) * g.batch + pr.epi_bytes;
  // Epilogue bytes per output element (bias and residual are read beside the tile they finish).
  const double epi_pe = pr.epi_bytes / (static_cast<double>(g.m) * g.n * g.batch);
  const double epi_lanes = lanes_for(p, pr.out_type);

  // GM bytes the cores load (every block loads its A and B panels).
  auto a_factor_for = [&](std::int64_t m) {
    if (!pr.a_halo) return pr.a_factor;
    const double rows_out = std::max(1.0, static_cast<double>(m) / pr.halo_wo);
    const double halo = (rows_out * pr.halo_sh + pr.halo_kh - pr.halo_sh) / (rows_out * pr.halo_sh);
    return std::min(1.0, pr.a_factor * halo);
  };
  double gm_ab = 0;
  const std::array<std::pair<std::int64_t, std::int64_t>, 2> ms{{{mb, bm_full}, {bm_rem, bm_rem ? 1 : 0}}};
  const std::array<std::pair<std::int64_t, std::int64_t>, 2> ns{{{nb, bn_full}, {bn_rem, bn_rem ? 1 : 0}}};
  for (auto [m, cm] : ms)
    for (auto [n, cn] : ns)
      if (cm && cn) gm_ab += static_cast<double>(cm * cn) * (a_factor_for(m) * m + pr.b_factor * n) * g.k * e;
  gm_ab *= g.batch;
  const double miss = gm_ab > 0 ? std::clamp(ab_hbm / gm_ab, 0.0, 1.0) : 1.0;

  // Average block on the busiest core.
  stage_times sum;  // summed over the block mix, weighted by count
  double block_steps = 0, weight = 0, first_load = 0, out_last = 0, out_extra = 0;
  const double mmads_per_step = 1, instr_per_step = 9;  // 2 MTE2 + 2 MTE1 + 1 mmad + 4 flags
  for (auto [m, cm] : ms)
    for (auto [n, cn] : ns) {
      if (!cm || !cn) continue;
      const double w = static_cast<double>(cm * cn);
      const double steps = static_cast<double>(ceil_div(kc, kt));
      const double kstep = static_cast<double>(kc) / steps;
      const double cube =
          static_cast<double>(ceil_div(m, f16m) * ceil_div(n, f16n)) * std::ceil(kstep / k0) + mmads_per_step * issue;
      const double ld = (a_factor_for(m) * m + pr.b_factor * n) * kstep * e;
      const double mte2 = ld * (1 - miss) / p.l2_rate + 2 * issue, hbm = ld * miss / hbm_core;
      const double mte1 = m * kstep * e / p.l1_to_l0a_rate + kstep * n * e / p.l1_to_l0b_rate + 2 * issue;
      const double scalar = instr_per_step * issue;
      const double oe = ks > 1 ? 4.0 : pr.out_es;
      const double out_bytes = static_cast<double>(m) * n * oe * pr.c_factor;
      // The epilogue runs on the vector unit as the tile passes through UB on its way out:
      // it adds vector work and the bias/residual reads to the drain, not another pass.
      const double epi_in = static_cast<double>(m) * n * epi_pe;
      const double epi_vec = pr.has_epilogue() ? static_cast<double>(m) * n * pr.epi_ops / epi_lanes + issue : 0.0;
      const double out = std::max({static_cast<double>(m) * n * 4 / p.l0c_to_out_rate, out_bytes / p.ub_to_gm_rate,
                                   (out_bytes + epi_in) / hbm_core, epi_vec}) +
                         2 * issue;
      const double step = std::max({cube, mte2 + hbm, mte1, scalar});
      sum.cube += w * steps * cube;
      sum.mte2 += w * steps * (mte2);
      sum.hbm += w * steps * hbm;
      sum.mte1 += w * steps * mte1;
      sum.scalar += w * steps * scalar;
      sum.out += w * out;
      sum.out_hbm += w * (out_bytes + epi_in) / hbm_core;
      sum.vec += w * epi_vec;
      block_steps += w * steps * step;
      out_extra += w * (l0c_double ? std::max(0.0, out - steps * step) : out);
      first_load = std::max(first_load, mte2 + hbm + mte1);
      out_last = std::max(out_last, out);
      weight += w;
    }
  const double per_block = 1.0 / weight;
  const double qd = static_cast<double>(q);
  // Busiest core: fill, first load, q average blocks, the last block's drain.
  double total =
      p.pipeline_fill_cycles + first_load + qd * (block_steps + out_extra) * per_block + (l0c_double ? out_last : 0.0);
  unit_cycles busy;
  busy.cube = qd * sum.cube * per_block;
  busy.mte2 = qd * sum.mte2 * per_block;
  busy.hbm = qd * (sum.hbm + sum.out_hbm) * per_block;
  busy.mte1 = qd * sum.mte1 * per_block;
  busy.scalar = qd * sum.scalar * per_block;
  busy.mte3 = qd * sum.out * per_block;
  busy.vector = qd * sum.vec * per_block;
  // The kernel as a whole never moves its HBM bytes faster than its share.
  const double hbm_total = ab_hbm + c_hbm;
  const double hbm_floor = hbm_total / hbm_share * clock;
  unit bound;
  {
    const std::array<std::pair<unit, double>, 7> u{{{unit::cube, busy.cube},
                                                    {unit::mte2, busy.mte2},
                                                    {unit::hbm, busy.hbm},
                                                    {unit::mte1, busy.mte1},
                                                    {unit::scalar, busy.scalar},
                                                    {unit::mte3, busy.mte3},
                                                    {unit::vector, busy.vector}}};
    bound = std::max_element(u.begin(), u.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  }
  if (hbm_floor > total) {
    total = hbm_floor + p.pipeline_fill_cycles;
    bound = unit::hbm;
    busy.hbm = std::max(busy.hbm, hbm_floor);
  }
  if (best.blocks != 0 && total >= best.total) return;
  best.mb = mb;
  best.nb = nb;
  best.kt = kt;
  best.ks = ks;
  best.kc = kc;
  best.l0c_double = l0c_double;
  best.blocks = blocks;
  best.q = waves;
  best.steps_total = static_cast<std::uint64_t>(ceil_div(kc, kt)) * blocks;
  best.total = total;
  best.fill = p.pipeline_fill_cycles + first_load + out_last;
  best.tile = block_steps / std::max(1.0, weight * static_cast<double>(ceil_div(kc, kt)));
  best.bound = bound;
  best.busy = busy;
  best.hbm_bytes = hbm_total;
  best.gm_bytes = gm_ab + c_hbm;
}

void cost_gemm(const preset& p, const gemm_problem& pr, std::uint32_t cores, double share, kernel_cost& kc) {
  gemm_plan best;
  const std::int64_t mcap = round_up(pr.g.m, p.cube_m), ncap = round_up(pr.g.n, p.cube_n);
  // Block edges to try, ascending: 16 to 512, and one fractal (cube_m or cube_n) when that is
  // not among them, the least block the cube computes, which check() guarantees L0 and L1 hold.
  // A larger edge is tried only while the one before it does not already cover the GEMM.
  const auto edges = [](std::int64_t fractal) {
    static constexpr std::array<std::int64_t, 6> sizes{16, 32, 64, 128, 256, 512};
    std::array<std::int64_t, 7> e{};
    std::size_t n = 0;
    bool placed = false;
    for (const std::int64_t s : sizes) {
      if (!placed && fractal <= s) {
        if (fractal < s) e[n++] = fractal;
        placed = true;
      }
      e[n++] = s;
    }
    if (!placed) e[n++] = fractal;
    return std::pair{e, n};
  };
  const auto [m_edges, m_count] = edges(p.cube_m);
  const auto [n_edges, n_count] = edges(p.cube_n);
  for (std::size_t i = 0; i < m_count; ++i) {
    const std::int64_t mb = m_edges[i];
    if (i > 0 && m_edges[i - 1] >= mcap) break;
    const std::int64_t m = std::min(mb, mcap);
    for (std::size_t j = 0; j < n_count; ++j) {
      const std::int64_t nb = n_edges[j];
      if (j > 0 && n_edges[j - 1] >= ncap) break;
      const std::int64_t n = std::min(nb, ncap);
      const std::uint64_t blocks = static_cast<std::uint64_t>(ceil_div(pr.g.m, m) * ceil_div(pr.g.n, n) * pr.g.batch);
      for (std::int64_t ks = 1; ks <= 64; ks *= 2) {
        if (ks > 1 && blocks * static_cast<std::uint64_t>(ks / 2) >= cores) break;  // split K only to fill idle cores
        // Split-K partial sums are reduced in GM by atomic adds: no tile ever holds the final
        // value an epilogue would need.
        if (ks > 1 && pr.has_epilogue()) break;
        plan_gemm(p, pr, cores, share, m, n, ks, best);
      }
    }
  }
  if (best.blocks == 0) {
    // No tiling fits the buffers, which only a preset that fails check() allows: the kernel
    // cannot run, so it costs the end of time rather than nothing.
    best.total = std::numeric_limits<double>::infinity();
    best.bound = unit::cube;
  }
  const double f = p.clock_hz;
  kc.tiles = best.steps_total;
  kc.blocks = best.blocks;
  kc.tiles_per_core = best.q * static_cast<std::uint64_t>(best.kt ? ceil_div(best.kc, best.kt) : 0);
  kc.bound = best.bound;
  kc.busy = best.busy;
  kc.tile_cycles = best.tile;
  kc.fill_cycles = best.fill;
  kc.total_cycles = best.total;
  kc.hbm_bytes = saturating_u64(best.hbm_bytes);
  kc.gm_bytes = saturating_u64(best.gm_bytes);
  kc.flops = saturating_u64(2.0 * pr.useful_macs);
  kc.gemm = pr.g;
  kc.cube_floor_cycles = (pr.g.fractals(p) + cores - 1) / cores;
  // Roofline: the useful FLOPs at the cores' peak, and the least traffic any tiling moves.
  const double e = es(pr.g.in);
  const double min_bytes =
      ((pr.a_shared ? 0.0 : pr.a_factor * pr.g.m * pr.g.k * e) + pr.g.m * pr.g.n * pr.out_es * pr.c_factor) *
          pr.g.batch +
      (pr.a_shared ? pr.a_factor * pr.g.m * pr.g.k * e : 0.0) +
      pr.b_factor * pr.g.k * pr.g.n * e * (pr.b_shared ? 1 : pr.g.batch) + pr.epi_bytes;
  const double t_flops = kc.flops / (cube_flops_per_cycle(p, pr.g.in) * cores * f);
  const double t_bytes = min_bytes / p.hbm_bandwidth;
  kc.roofline = saturating_ps(std::floor(std::max(t_flops, t_bytes) * 1e12));
}

// One streaming pass of a vector kernel over `elems` elements.
struct vec_phase {
  double elems = 0;
  double in_bytes = 0;  // GM bytes read in this pass
  double out_bytes = 0;  // GM bytes written
  double ops = 1;  // vector operations per element
  dtype type = dtype::f16;
};

struct vec_work {
  std::array<vec_phase, 3> phases{};
  int count = 0;
  void add(double elems, double in, double out, double ops, dtype t) { phases[count++] = {elems, in, out, ops, t}; }
};

double bytes(const tensor_desc& t) noexcept { return t.shape.rank() ? static_cast<double>(t.bytes()) : 0.0; }
double elems(const tensor_desc& t) noexcept { return t.shape.rank() ? static_cast<double>(t.shape.elements()) : 0.0; }

double eltwise_ops(kernels::eltwise_fn f) noexcept {
  using kernels::eltwise_fn;
  switch (f) {
    case eltwise_fn::add:
    case eltwise_fn::sub:
    case eltwise_fn::mul:
    case eltwise_fn::relu: return 1;
    case eltwise_fn::div: return 2;  // reciprocal + multiply
    case eltwise_fn::sigmoid: return 4;  // exp, add, reciprocal, (negate)
    case eltwise_fn::tanh: return 5;
    case eltwise_fn::gelu: return 8;  // the tanh form: cube, fma, tanh, fma, mul
    case eltwise_fn::relu_backward:
    case eltwise_fn::max:
    case eltwise_fn::min:
    case eltwise_fn::abs:
    case eltwise_fn::neg:
    case eltwise_fn::floor:
    case eltwise_fn::ceil:
    case eltwise_fn::round:
    case eltwise_fn::shift_left:
    case eltwise_fn::shift_right:
    case eltwise_fn::sign: return 2;  // compare or round, select
    case eltwise_fn::leaky_relu:
    case eltwise_fn::thresholded_relu:
    case eltwise_fn::clip: return 2;
    case eltwise_fn::exp:
    case eltwise_fn::log:
    case eltwise_fn::sqrt:
    case eltwise_fn::reciprocal: return 2;  // a transcendental estimate and a refinement step
    case eltwise_fn::softsign:
    case eltwise_fn::hard_sigmoid:
    case eltwise_fn::hard_swish: return 4;
    case eltwise_fn::elu:
    case eltwise_fn::selu:
    case eltwise_fn::celu:
    case eltwise_fn::softplus: return 5;  // exp, add or log, select
    case eltwise_fn::pow: return 6;  // exp(b log a) with sign handling
    case eltwise_fn::sin:
    case eltwise_fn::cos:
    case eltwise_fn::asin:
    case eltwise_fn::acos:
    case eltwise_fn::atan:
    case eltwise_fn::erf: return 8;  // range reduction and a polynomial
    case eltwise_fn::fmod: return 4;  // divide, truncate, multiply back, subtract
    case eltwise_fn::mod: return 5;  // fmod's, then a compare and a select of the divisor's sign
  }
  return 1;
}

double activation_ops(kernels::activation a) noexcept {
  using kernels::activation;
  switch (a) {
    case activation::none: return 0;
    case activation::relu: return eltwise_ops(kernels::eltwise_fn::relu);
    case activation::gelu: return eltwise_ops(kernels::eltwise_fn::gelu);
    case activation::sigmoid: return eltwise_ops(kernels::eltwise_fn::sigmoid);
    case activation::tanh: return eltwise_ops(kernels::eltwise_fn::tanh);
  }
  return 0;
}

bool is_unary(kernels::eltwise_fn f) noexcept { return !kernels::is_binary(f); }

std::optional<vec_work> to_vector(const preset& p, const kernel_desc& k) {
  using namespace kernels;
  vec_work w;
  std::visit(
      [&](const auto& op) {
        using T = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<T, elementwise>) {
          const double in = bytes(op.a) + (is_unary(op.fn) ? 0.0 : bytes(op.b));
          w.add(elems(op.y), in, bytes(op.y), eltwise_ops(op.fn), op.y.type);
        } else if constexpr (std::is_same_v<T, batchnorm>) {
          if (op.training) {
            w.add(elems(op.x), bytes(op.x), 0, 2, op.x.type);  // sum and sum of squares
            w.add(elems(op.x), bytes(op.x), bytes(op.y), 2, op.x.type);  // scale and shift
          } else {
            w.add(elems(op.x), bytes(op.x), bytes(op.y), 2, op.x.type);
          }
        } else if constexpr (std::is_same_v<T, batchnorm_backward>) {
          w.add(elems(op.x), bytes(op.x) + bytes(op.dy), 0, 4, op.x.type);  // dbeta, dgamma
          // Without dx (only the parameters' gradients wanted) the second pass is not run.
          if (op.dx.shape.rank()) w.add(elems(op.x), bytes(op.x) + bytes(op.dy), bytes(op.dx), 5, op.x.type);  // dx
        } else if constexpr (std::is_same_v<T, layernorm>) {
          const std::int64_t r = static_cast<std::int64_t>(op.x.shape.rank());
          const std::int64_t axis = op.axis < 0 ? r + op.axis : op.axis;
          double row = 1;
          for (std::int64_t i = std::max<std::int64_t>(axis, 0); i < r; ++i) row *= static_cast<double>(op.x.shape[i]);
          if (row * es(op.x.type) * 4 <= static_cast<double>(p.ub_bytes)) {
            w.add(elems(op.x), bytes(op.x), bytes(op.y), 6, op.x.type);
          } else {
            w.add(elems(op.x), bytes(op.x), 0, 3, op.x.type);
            w.add(elems(op.x), bytes(op.x), bytes(op.y), 3, op.x.type);
          }
        } else if constexpr (std::is_same_v<T, pool2d>) {
          if (op.mode == pool_mode::global_avg) {
            w.add(elems(op.x), bytes(op.x), bytes(op.y), 1, op.x.type);
          } else {
            // Every output visits its window's whole volume (1, 2 or 3 spatial dimensions); the
            // indices, when asked for, are one more i64 write per output.
            double win = 1;
            for (std::size_t i = 2; i < op.x.shape.rank(); ++i) win *= static_cast<double>(op.window[i - 2]);
            w.add(elems(op.y), bytes(op.x), bytes(op.y) + bytes(op.indices), win, op.x.type);
          }
        } else if constexpr (std::is_same_v<T, pool2d_backward>) {
          const double win = static_cast<double>(op.window[0]) * op.window[1];
          const double st = std::max(1.0, static_cast<double>(op.stride[0]) * op.stride[1]);
          if (op.mode == pool_mode::max) {
            w.add(elems(op.dx), bytes(op.x) + bytes(op.dy), bytes(op.dx), std::max(1.0, 2 * win / st), op.dx.type);
          } else if (op.mode == pool_mode::avg) {
            w.add(elems(op.dx), bytes(op.dy), bytes(op.dx), std::max(1.0, win / st), op.dx.type);
          } else {
            w.add(elems(op.dx), bytes(op.dy), bytes(op.dx), 1, op.dx.type);
          }
        } else if constexpr (std::is_same_v<T, softmax>) {
          w.add(elems(op.x), bytes(op.x), bytes(op.y), 5, op.x.type);  // max, sub, exp, sum, mul
        } else if constexpr (std::is_same_v<T, reduce>) {
          w.add(elems(op.x), bytes(op.x), bytes(op.y), 1, op.x.type);
        } else if constexpr (std::is_same_v<T, transpose>) {
          const std::size_t r = op.x.shape.rank();
          const bool inner_moves = r > 0 && op.perm[r - 1] != r - 1;
          w.add(elems(op.x), bytes(op.x), bytes(op.y), inner_moves ? 2 : 1, op.x.type);
        } else if constexpr (std::is_same_v<T, slice>) {
          // Data movement as transpose's: y's bytes gathered from x and written once. A window
          // whose innermost dimension is not read forwards one element after the next is a
          // gather through the vector unit, as a transpose that moves the inner axis is.
          const std::size_t r = op.y.shape.rank();
          const bool gathered = r > 0 && op.y.shape[r - 1] > 1 && op.steps[r - 1] != 1;
          w.add(elems(op.y), bytes(op.y), bytes(op.y), gathered ? 2 : 1, op.y.type);
        } else if constexpr (std::is_same_v<T, pad>) {
          // Data movement as slice's: y written once, x's part of it read once (a crop reads less
          // than x). A border that mirrors, repeats or wraps x is gathered through the vector
          // unit, as a backwards slice is; a constant border is a fill.
          const double read = std::min(bytes(op.x), bytes(op.y));
          w.add(elems(op.y), read, bytes(op.y), op.mode == pad_mode::constant ? 1 : 2, op.y.type);
        } else if constexpr (std::is_same_v<T, gather>) {
          // Data movement as slice's: y's rows read where the indices point, the indices read,
          // y written once. A row (data's dimensions after the axis) shorter than one 32-byte
          // block, the unit an MTE burst moves, cannot be a copy of its own: the vector unit
          // gathers it, as a transpose that moves the inner axis. A scalar index or y is one
          // element: tensor_desc::bytes, not bytes() here, which takes rank 0 for absent.
          double row = es(op.data.type);
          for (std::size_t d = static_cast<std::size_t>(std::max(op.axis, 0)) + 1; d < op.data.shape.rank(); ++d)
            row *= static_cast<double>(op.data.shape[d]);
          const auto y_bytes = static_cast<double>(op.y.bytes());
          w.add(static_cast<double>(op.y.shape.elements()), y_bytes + static_cast<double>(op.indices.bytes()), y_bytes,
                row < 32 ? 2 : 1, op.y.type);
        } else if constexpr (std::is_same_v<T, tile>) {
          // Data movement: y written once, x read once (repeats come from on-chip buffers).
          // Where x's innermost extent is not y's, rows are not copied whole: the vector unit
          // replicates elements, as a slice that gathers does.
          const std::size_t r = op.y.shape.rank();
          const bool whole_rows = r == 0 || op.x.shape[r - 1] == op.y.shape[r - 1];
          w.add(elems(op.y), std::min(bytes(op.x), bytes(op.y)), bytes(op.y), whole_rows ? 1 : 2, op.y.type);
        } else if constexpr (std::is_same_v<T, nll_loss>) {
          // One element of x per target, picked by its class: a gather through the vector unit,
          // then a multiply by the class weight and the reduction.
          const double picked = elems(op.target) * static_cast<double>(size_of(op.x.type));
          w.add(elems(op.target), bytes(op.target) + picked + bytes(op.weight), bytes(op.y), 3, op.x.type);
        } else if constexpr (std::is_same_v<T, trilu>) {
          // One vector pass: x read, y written, a compare and a select per element.
          w.add(elems(op.y), bytes(op.x), bytes(op.y), 2, op.y.type);
        } else if constexpr (std::is_same_v<T, resize>) {
          // Data movement with arithmetic: y written once, x read once (a downsample reads no
          // more of x than its neighbours of y). Each output gathers its neighbours through the
          // vector unit, 1 in nearest mode, 2 per resampled dimension in linear (N-linear: 2^k
          // for k dimensions whose scale is not 1), 4 per dimension in cubic, a multiply-add
          // each plus the index and weight of every dimension. Antialiasing a downsampled
          // dimension widens the filter by 1 / scale: 2 ceil(1 / scale) or 2 ceil(2 / scale).
          double taps = 1;
          double dims = 0;
          const double per_dim = op.mode == resize_mode::nearest ? 1 : op.mode == resize_mode::linear ? 2 : 4;
          const bool crop = op.coordinates == resize_coordinates::tf_crop_and_resize;
          for (std::size_t d = 0; d < op.y.shape.rank(); ++d) {
            if (op.scales[d] == 1 && op.x.shape[d] == op.y.shape[d] &&
                (!crop || (op.roi_start[d] == 0 && op.roi_end[d] == 1)))
              continue;
            taps *= op.antialias && op.scales[d] < 1 ? 2 * std::ceil(per_dim / 2 / op.scales[d]) : per_dim;
            dims += 1;
          }
          const double read = std::min(bytes(op.x), bytes(op.y) * taps);
          w.add(elems(op.y), read, bytes(op.y), 2 * taps + 2 * dims, op.y.type);
        } else if constexpr (std::is_same_v<T, gather_elements>) {
          // Every element fetched on its own through the vector unit: y's bytes gathered, the
          // indices read, y written.
          w.add(elems(op.y), bytes(op.y) + bytes(op.indices), bytes(op.y), 2, op.y.type);
        } else if constexpr (std::is_same_v<T, cumsum>) {
          // One pass: x read, y written, an add per element; the lines along the axis run side by
          // side in the vector lanes (the inner elements), each step carrying the running sum.
          w.add(elems(op.y), bytes(op.x), bytes(op.y), 1, op.y.type);
        } else if constexpr (std::is_same_v<T, grid_sample>) {
          // A gather through the vector unit: each output element fetches its neighbours in x on
          // their own (1 in nearest mode, 2 or 4 per spatial dimension in linear and cubic: 2^r or
          // 4^r), the grid is read once, y written once; a multiply-add per neighbour plus the
          // denormalising, padding and weights of every dimension.
          const double r = static_cast<double>(op.x.shape.rank()) - 2;
          const double taps = op.mode == grid_sample_mode::nearest  ? 1
                              : op.mode == grid_sample_mode::linear ? std::pow(2.0, r)
                                                                    : std::pow(4.0, r);
          const double gathered = elems(op.y) * taps * static_cast<double>(size_of(op.x.type));
          w.add(elems(op.y), gathered + bytes(op.grid), bytes(op.y), 2 * taps + 2 * r, op.y.type);
        } else if constexpr (std::is_same_v<T, scatter_nd> || std::is_same_v<T, scatter_elements>) {
          // Two passes: y = data, one streaming copy; then every update read with its index and written where the index
          // points, through the vector unit, as gather_elements moves its elements. A reduction reads the element it
          // lands on too and computes one operation. A scalar update is one element: tensor_desc::bytes, not bytes(),
          // which takes rank 0 for absent.
          const auto upd = static_cast<double>(op.updates.bytes());
          const auto n = static_cast<double>(op.updates.shape.elements());
          const bool reduces = op.reduction != scatter_reduction::none;
          w.add(elems(op.y), bytes(op.data), bytes(op.y), 1, op.y.type);
          w.add(n, upd * (reduces ? 2 : 1) + bytes(op.indices), upd, reduces ? 3 : 2, op.y.type);
        } else if constexpr (std::is_same_v<T, gather_nd>) {
          // Data movement as gather's: y's bytes read where the index tuples point, the indices
          // read, y written once; the vector unit gathers each slice.
          const auto y_bytes = static_cast<double>(op.y.bytes());
          w.add(static_cast<double>(op.y.shape.elements()), y_bytes + bytes(op.indices), y_bytes, 2, op.y.type);
        } else if constexpr (std::is_same_v<T, top_k>) {
          // A selection along the axis: x read once, a compare and a select per element and per
          // doubling of k (a bitonic merge of the running top k), values and indices written.
          const double passes = 1 + std::ceil(std::log2(static_cast<double>(std::max<std::int64_t>(op.k, 1))));
          w.add(elems(op.x), bytes(op.x), bytes(op.values) + bytes(op.indices), 2 * passes, op.x.type);
        } else if constexpr (std::is_same_v<T, compare>) {
          // One compare per element, at the operands' width; the bool result is written.
          w.add(elems(op.y), bytes(op.a) + bytes(op.b), bytes(op.y), 1, op.a.type);
        } else if constexpr (std::is_same_v<T, where>) {
          // A select per element: the condition and both sources read, out written.
          w.add(elems(op.out), bytes(op.cond) + bytes(op.x) + bytes(op.y), bytes(op.out), 1, op.out.type);
        } else if constexpr (std::is_same_v<T, logical>) {
          const double in = bytes(op.a) + (op.fn == logical_fn::not_ ? 0.0 : bytes(op.b));
          w.add(elems(op.y), in, bytes(op.y), 1, op.y.type);
        } else if constexpr (std::is_same_v<T, float_class>) {
          w.add(elems(op.x), bytes(op.x), bytes(op.y), 1, op.x.type);
        } else if constexpr (std::is_same_v<T, quantize>) {
          // A multiply (or divide), a round and an add per element in the float type; scale and
          // zero point are read once.
          const double params = bytes(op.scale) + bytes(op.zero_point);
          w.add(elems(op.x), bytes(op.x) + params, bytes(op.y), 3,
                op.fn == quantize_fn::dequantize ? op.y.type : op.x.type);
        } else if constexpr (std::is_same_v<T, dft>) {
          // A direct transform, whatever the length (a power of two or not): every complex output
          // sums `length` terms, a complex multiply and add each (8 vector operations; the
          // twiddles come from a table), so n^2 per transform of n points, not an FFT's n log n.
          // x (and the window) read once, y written once.
          const double outputs = elems(op.y) / 2;
          w.add(outputs, bytes(op.x) + bytes(op.window), bytes(op.y), 8.0 * static_cast<double>(op.length), op.y.type);
        } else if constexpr (std::is_same_v<T, roi_align>) {
          // Vector work per bilinear sample: its 4 neighbours gathered from x one by one, 4
          // multiply-adds (a compare each in max mode) and its coordinates and weights (about 10
          // operations). Samples per output: sampling_ratio^2, or for 0 (adaptive, decided by each
          // ROI's extent at run time) those of a ROI covering all of x: ceil(H / out_h) x
          // ceil(W / out_w). rois and batch_indices read once, y written once.
          const auto per_dim = [&](std::int64_t in, std::int64_t out) {
            return op.sampling_ratio > 0 ? static_cast<double>(op.sampling_ratio)
                                         : std::max(1.0, std::ceil(static_cast<double>(in) / static_cast<double>(out)));
          };
          const double samples = op.y.shape.rank() == 4 && op.x.shape.rank() == 4
                                     ? per_dim(op.x.shape[2], op.y.shape[2]) * per_dim(op.x.shape[3], op.y.shape[3])
                                     : 1.0;
          const double gathered = elems(op.y) * samples * 4 * static_cast<double>(size_of(op.x.type));
          w.add(elems(op.y), gathered + bytes(op.rois) + bytes(op.batch_indices), bytes(op.y), samples * 18.0,
                op.y.type);
        } else if constexpr (std::is_same_v<T, cast>) {
          w.add(elems(op.x), bytes(op.x), bytes(op.y), 1,
                size_of(op.x.type) >= size_of(op.y.type) ? op.x.type : op.y.type);
        } else if constexpr (std::is_same_v<T, fused_elementwise>) {
          // One pass: each input read once (a broadcast one at its own size), y written once;
          // the vector unit does every stage's work on each element.
          double in = 0, ops = 0;
          for (std::size_t i = 0; i < op.inputs && i < fused_elementwise::max_inputs; ++i) in += bytes(op.input(i));
          for (std::size_t s = 0; s < op.count && s < fused_elementwise::max_stages; ++s)
            ops += eltwise_ops(op.stages[s].fn);
          w.add(elems(op.y), in, bytes(op.y), ops, op.y.type);
        } else if constexpr (std::is_same_v<T, sgd_update>) {
          const bool mom = op.momentum != 0.0f && op.momentum_buffer.shape.rank() > 0;
          const double in = bytes(op.param) + bytes(op.grad) + (mom ? bytes(op.momentum_buffer) : 0.0);
          const double out = bytes(op.param) + (mom ? bytes(op.momentum_buffer) : 0.0);
          w.add(elems(op.param), in, out, mom ? 5 : 3, op.param.type);
        } else if constexpr (std::is_same_v<T, det>) {
          // Gaussian elimination in double: about m^3 / 3 multiply-adds per m x m matrix, so 2m / 3
          // operations per element, plus a compare per element for the pivot searches; x read once,
          // one value per matrix written (a scalar y: tensor_desc::bytes, not bytes()).
          const std::size_t r = op.x.shape.rank();
          const double m = r >= 2 ? static_cast<double>(op.x.shape[r - 1]) : 1.0;
          w.add(elems(op.x), bytes(op.x), static_cast<double>(op.y.bytes()), 2.0 * m / 3.0 + 1.0, dtype::f64);
        } else if constexpr (std::is_same_v<T, reverse_sequence>) {
          // Data movement as transpose's: x's rows gathered in their new time order, the lengths
          // read, y written once.
          w.add(elems(op.y), bytes(op.x) + bytes(op.sequence_lens), bytes(op.y), 1, op.y.type);
        } else if constexpr (std::is_same_v<T, lrn>) {
          // Per element: size squares and adds over its channel window, then a scale, an add, a
          // power (pow's cost) and a divide.
          w.add(elems(op.x), bytes(op.x), bytes(op.y), 2.0 * op.size + 3 + eltwise_ops(eltwise_fn::pow), op.x.type);
        }
      },
      k.op);
  if (w.count == 0) return std::nullopt;
  return w;
}

void cost_vector(const preset& p, const vec_work& work, std::uint32_t cores, double share, kernel_cost& kc) {
  const double f = p.clock_hz, issue = p.instr_issue_cycles;
  const double hbm_core = std::min(p.ddr_rate, share / cores / f);
  double total = p.pipeline_fill_cycles, fill = p.pipeline_fill_cycles, hbm_bytes = 0, flops = 0;
  unit_cycles busy;
  std::uint64_t tiles_all = 0, tiles_core = 0;
  double steady_sum = 0, steady_tiles = 0;
  for (int i = 0; i < work.count; ++i) {
    const vec_phase& ph = work.phases[i];
    if (ph.elems <= 0) continue;
    const double in_pe = ph.in_bytes / ph.elems, out_pe = ph.out_bytes / ph.elems;
    // Work splits over cores in 32-byte blocks; tiles fill half the UB (double buffering).
    const double per_core = std::ceil(ph.elems / cores);
    const double bpe = std::max(in_pe + out_pe, es(ph.type));
    const double tile_e = std::max(16.0, std::floor(p.ub_bytes / 2.0 / bpe / 16.0) * 16.0);
    const double tiles = std::ceil(per_core / tile_e);
    const double te = per_core / tiles;  // elements per tile on the busiest core
    const double lanes = lanes_for(p, ph.type);
    const double instrs = ph.ops * std::ceil(te / (lanes * 255.0));  // one vector instruction repeats up to 255 times
    const double mte2 = te * in_pe / p.ddr_rate + issue;
    const double vec = te * ph.ops / lanes + instrs * issue;
    const double mte3 = te * out_pe / p.ub_to_gm_rate + issue;
    const double hbm = te * (in_pe + out_pe) / hbm_core;
    const double scalar = (instrs + 4) * issue;
    const double step = std::max({mte2, vec, mte3, hbm, scalar});
    const double first = std::max(mte2, hbm) + vec + mte3;
    total += first + (tiles - 1) * step;
    fill += first - step;
    if (i > 0) total += p.pipeline_fill_cycles, fill += p.pipeline_fill_cycles;  // cross-core sync between passes
    busy.mte2 += tiles * mte2;
    busy.vector += tiles * vec;
    busy.mte3 += tiles * mte3;
    busy.hbm += tiles * hbm;
    busy.scalar += tiles * scalar;
    hbm_bytes += ph.in_bytes + ph.out_bytes;
    flops += ph.elems * ph.ops;
    tiles_all += saturating_u64(tiles) * std::min<std::uint64_t>(cores, saturating_u64(std::ceil(ph.elems / per_core)));
    tiles_core += saturating_u64(tiles);
    steady_sum += tiles * step;
    steady_tiles += tiles;
  }
  const double hbm_floor = hbm_bytes / share * f + p.pipeline_fill_cycles;
  if (hbm_floor > total) total = hbm_floor;
  const std::array<std::pair<unit, double>, 5> u{{{unit::vector, busy.vector},
                                                  {unit::mte2, busy.mte2},
                                                  {unit::mte3, busy.mte3},
                                                  {unit::hbm, busy.hbm},
                                                  {unit::scalar, busy.scalar}}};
  kc.bound = std::max_element(u.begin(), u.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  kc.busy = busy;
  kc.total_cycles = total;
  kc.fill_cycles = fill;
  kc.tiles = tiles_all;
  kc.tiles_per_core = tiles_core;
  kc.blocks = tiles_all;
  kc.tile_cycles = steady_tiles > 0 ? steady_sum / steady_tiles : 0;
  kc.hbm_bytes = saturating_u64(hbm_bytes);
  kc.gm_bytes = kc.hbm_bytes;
  kc.flops = saturating_u64(flops);
  kc.roofline = saturating_ps(std::floor(hbm_bytes / p.hbm_bandwidth * 1e12));
}

// The vector operations of one recurrent activation, as the elementwise kernel of the same
// function costs it.
double rnn_activation_ops(kernels::rnn_activation a) noexcept {
  using kernels::eltwise_fn;
  using kernels::rnn_activation;
  switch (a) {
    case rnn_activation::sigmoid: return eltwise_ops(eltwise_fn::sigmoid);
    case rnn_activation::tanh: return eltwise_ops(eltwise_fn::tanh);
    case rnn_activation::relu: return eltwise_ops(eltwise_fn::relu);
    case rnn_activation::softsign: return eltwise_ops(eltwise_fn::softsign);
    case rnn_activation::softplus: return eltwise_ops(eltwise_fn::softplus);
    case rnn_activation::leaky_relu: return eltwise_ops(eltwise_fn::leaky_relu);
    case rnn_activation::thresholded_relu: return eltwise_ops(eltwise_fn::thresholded_relu);
    case rnn_activation::hard_sigmoid: return eltwise_ops(eltwise_fn::hard_sigmoid);
    case rnn_activation::elu: return eltwise_ops(eltwise_fn::elu);
    case rnn_activation::affine: return 2;  // a multiply and an add
    case rnn_activation::scaled_tanh: return eltwise_ops(eltwise_fn::tanh) + 2;  // and two multiplies
  }
  return 1;
}

// A recurrent layer costs its unrolled steps, one after another (each needs the previous state):
// per step and direction one GEMM on the cube, [batch, input + hidden] x [input + hidden,
// gates * hidden] (x_t and H against W and R side by side), costed as the matmul kernel of that
// shape is, then the gate math on the vector unit as an elementwise pass over the gates: the bias
// add, the clip and the activation of every gate element, and the state update per hidden
// element (GRU: 1 - z, two products and a sum, plus the reset product; LSTM: two products and a
// sum for C, the output activation and product), the gates read from GM and H (LSTM: and C)
// written back.
void cost_recurrent(const preset& p, const kernels::recurrent& op, std::uint32_t cores, double share, kernel_cost& kc) {
  using kernels::rnn_cell;
  const bool bm = op.batch_major;
  const std::int64_t seq = dim(op.x, bm ? 1 : 0), batch = dim(op.x, bm ? 0 : 1), input = dim(op.x, 2);
  const std::int64_t hidden = dim(op.r, 2), gh = dim(op.r, 1);
  const std::int64_t dirs = op.direction == kernels::rnn_direction::bidirectional ? 2 : 1;
  const double steps = static_cast<double>(seq) * static_cast<double>(dirs);
  gemm_problem pr;
  pr.g = {1, batch, gh, input + hidden, op.x.type};
  pr.out_es = es(op.x.type);
  pr.out_type = op.x.type;
  pr.useful_macs = static_cast<double>(batch) * static_cast<double>(gh) * static_cast<double>(input + hidden);
  kernel_cost mm;
  cost_gemm(p, pr, cores, share, mm);
  const std::size_t per_dir = op.cell == rnn_cell::rnn ? 1 : op.cell == rnn_cell::gru ? 2 : 3;
  double act = 0;  // the direction's activations, averaged over the directions
  for (std::int64_t d = 0; d < dirs; ++d)
    for (std::size_t j = 0; j < per_dir; ++j)
      act += rnn_activation_ops(op.activations[static_cast<std::size_t>(d) * per_dir + j]);
  act /= static_cast<double>(dirs * static_cast<std::int64_t>(per_dir));
  const double update = op.cell == rnn_cell::rnn ? 0 : op.cell == rnn_cell::gru ? 5 : 4 + act;
  const double gate_elems = static_cast<double>(batch) * static_cast<double>(gh);
  const double h_elems = static_cast<double>(batch) * static_cast<double>(hidden);
  const double states = op.cell == rnn_cell::lstm ? 2 : 1;
  vec_work vw;
  vw.add(gate_elems, gate_elems * es(op.x.type), h_elems * states * es(op.x.type),
         2 + act + update * h_elems / gate_elems, op.x.type);
  kernel_cost ve;
  cost_vector(p, vw, cores, share, ve);
  kc.cube_path = true;
  kc.total_cycles = steps * (mm.total_cycles + ve.total_cycles);
  kc.fill_cycles = steps * (mm.fill_cycles + ve.fill_cycles);
  kc.tile_cycles = mm.tile_cycles;
  kc.tiles = saturating_u64(steps * static_cast<double>(mm.tiles + ve.tiles));
  kc.tiles_per_core = saturating_u64(steps * static_cast<double>(mm.tiles_per_core + ve.tiles_per_core));
  kc.blocks = saturating_u64(steps * static_cast<double>(mm.blocks + ve.blocks));
  kc.busy.cube = steps * mm.busy.cube;
  kc.busy.vector = steps * (mm.busy.vector + ve.busy.vector);
  kc.busy.mte1 = steps * (mm.busy.mte1 + ve.busy.mte1);
  kc.busy.mte2 = steps * (mm.busy.mte2 + ve.busy.mte2);
  kc.busy.mte3 = steps * (mm.busy.mte3 + ve.busy.mte3);
  kc.busy.hbm = steps * (mm.busy.hbm + ve.busy.hbm);
  kc.busy.scalar = steps * (mm.busy.scalar + ve.busy.scalar);
  const std::array<std::pair<unit, double>, 7> u{{{unit::cube, kc.busy.cube},
                                                  {unit::vector, kc.busy.vector},
                                                  {unit::mte1, kc.busy.mte1},
                                                  {unit::mte2, kc.busy.mte2},
                                                  {unit::mte3, kc.busy.mte3},
                                                  {unit::hbm, kc.busy.hbm},
                                                  {unit::scalar, kc.busy.scalar}}};
  kc.bound = std::max_element(u.begin(), u.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  kc.flops = saturating_u64(steps * static_cast<double>(mm.flops + ve.flops));
  kc.hbm_bytes = saturating_u64(steps * static_cast<double>(mm.hbm_bytes + ve.hbm_bytes));
  kc.gm_bytes = saturating_u64(steps * static_cast<double>(mm.gm_bytes + ve.gm_bytes));
  kc.gemm = gemm_shape{seq * dirs, batch, gh, input + hidden, op.x.type};
  kc.cube_floor_cycles = saturating_u64(steps * static_cast<double>(mm.cube_floor_cycles));
  kc.roofline = saturating_ps(std::floor(steps * static_cast<double>(mm.roofline.count() + ve.roofline.count())));
}

}  // namespace

std::uint64_t gemm_shape::fractals(const preset& p) const noexcept {
  const std::int64_t k0 = fractal_k(p, in);
  return static_cast<std::uint64_t>(batch * ceil_div(m, p.cube_m) * ceil_div(n, p.cube_n) * ceil_div(k, k0));
}

std::optional<gemm_shape> gemm_equivalent(const kernel_desc& k) {
  if (auto pr = to_gemm(k)) return pr->g;
  return std::nullopt;
}

bool uses_cube(const kernel_desc& k) noexcept {
  using namespace kernels;
  // The GEMM's input dtype, as to_gemm reads it: the cube has no FP64, so an f64 GEMM or
  // convolution is vector work (see estimate) and runs on the vector cores.
  const auto gemm_in = [&]() -> std::optional<dtype> {
    if (const auto* mm = std::get_if<matmul>(&k.op)) return mm->a.type;
    if (const auto* c = std::get_if<conv2d>(&k.op)) return c->x.type;
    if (const auto* c = std::get_if<conv2d_backward_data>(&k.op)) return c->dy.type;
    if (const auto* c = std::get_if<conv2d_backward_weight>(&k.op)) return c->x.type;
    return std::nullopt;
  }();
  if (gemm_in) return *gemm_in != dtype::f64;
  return std::holds_alternative<recurrent>(k.op) || std::holds_alternative<integer_matmul>(k.op) ||
         std::holds_alternative<integer_conv2d>(k.op);
}

std::uint32_t core_pool(const preset& p, const kernel_desc& k) noexcept {
  if (!p.separated_cores) return p.ai_core_count;
  if (std::holds_alternative<kernels::fixed>(k.op)) return p.ai_core_count;
  return uses_cube(k) ? p.ai_core_count : p.vector_core_count;
}

double cube_flops_per_cycle(const preset& p, dtype t) noexcept { return 2.0 * p.cube_m * p.cube_n * fractal_k(p, t); }

kernel_cost estimate(const preset& p, const kernel_desc& k, std::uint32_t cores, double share) {
  kernel_cost kc;
  kc.op = k.display_name();
  std::visit([&](const auto& o) { kc.op = kernels::op_name(o); }, k.op);
  const std::uint32_t pool = core_pool(p, k);
  if (cores == 0 || cores > pool) cores = pool;
  if (!(share > 0)) share = p.hbm_bandwidth;
  kc.cores = cores;
  kc.hbm_share = share;
  kc.launch_latency = p.kernel_launch_latency;
  if (const auto* fx = std::get_if<kernels::fixed>(&k.op)) {
    kc.bound = unit::fixed;
    kc.body = fx->duration;
    kc.total = saturating_add(kc.launch_latency, kc.body);
    kc.total_cycles = static_cast<double>(fx->duration.count()) * p.clock_hz / 1e12;
    kc.flops = fx->flops;
    kc.hbm_bytes = fx->bytes;
    return kc;
  }
  if (const auto* rec = std::get_if<kernels::recurrent>(&k.op)) {
    cost_recurrent(p, *rec, cores, share, kc);
  } else if (auto pr = to_gemm(k); pr && pr->g.in == dtype::f64) {
    // The cube has no FP64: an f64 GEMM or convolution is 2K vector operations per output
    // element at the f64 vector rate, reading A and B once.
    const double outs = static_cast<double>(pr->g.batch) * static_cast<double>(pr->g.m) * static_cast<double>(pr->g.n);
    const double kk = static_cast<double>(pr->g.k);
    const double in = (static_cast<double>(pr->g.m) + static_cast<double>(pr->g.n)) * kk *
                      static_cast<double>(pr->g.batch) * es(dtype::f64);
    vec_work w;
    w.add(outs, in, outs * pr->out_es, 2.0 * kk, dtype::f64);
    if (outs > 0 && kk > 0) cost_vector(p, w, cores, share, kc);
  } else if (pr) {
    kc.cube_path = true;
    if (pr->g.m > 0 && pr->g.n > 0 && pr->g.k > 0 && pr->g.batch > 0) cost_gemm(p, *pr, cores, share, kc);
  } else if (auto vw = to_vector(p, k)) {
    cost_vector(p, *vw, cores, share, kc);
  }
  kc.stall_cycles = std::max(0.0, kc.total_cycles - kc.busy.of(kc.bound));
  // Saturating: a cost past the end of virtual time makes the task fail with time_overflow when
  // it would start (the device model's schedule), never a wrapped, plausible-looking time.
  kc.body = cycles_to_ps(saturating_u64(std::ceil(kc.total_cycles)), p.clock_hz);
  kc.total = saturating_add(kc.launch_latency, kc.body);
  return kc;
}

}  // namespace npurt::sim
