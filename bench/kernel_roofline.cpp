// kernel_roofline: what the cost model says about GEMMs and every distinct ResNet-50 convolution
// on one device: simulated time, achieved TFLOP/s, % of the cube peak, the cube floor
// (ceil(M/16)*ceil(N/16)*ceil(K/16) cycles over the cores) and the roofline
// (max(FLOPs / peak, bytes / HBM bandwidth)), and the unit that bounds the kernel.
//
//   kernel_roofline [--preset ascend910|ascend910b] [--batch 256] [--json PATH]
#include <npurt/models/resnet50.hpp>
#include <npurt/sim/sim.hpp>

#include "bench_common.hpp"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

namespace {

struct row {
  std::string name;
  std::int64_t m, n, k;
  double us, tflops, pct_peak, floor_us, roof_us, floor_ratio;
  std::string bound;
};

row measure(const npurt::sim::preset& p, const npurt::kernel_desc& k, std::string name) {
  const auto c = npurt::sim::estimate(p, k);
  const auto g = c.gemm.value_or(npurt::sim::gemm_shape{});
  const double s = npurt::to_us(c.total) * 1e-6;
  const double floor_us = static_cast<double>(c.cube_floor_cycles) / p.clock_hz * 1e6;
  return {std::move(name),
          g.m * g.batch,
          g.n,
          g.k,
          s * 1e6,
          c.flops / s / 1e12,
          100 * c.flops / s / p.peak_fp16_flops(),
          floor_us,
          npurt::to_us(c.roofline),
          s * 1e6 / floor_us,
          std::string(to_string(c.bound))};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace npurt;
  std::string preset_name = "ascend910";
  std::int64_t batch = 256;
  npurt_bench::command_line cl{"kernel_roofline: the cost model against the cube floor and the roofline"};
  cl.add_preset(preset_name);
  cl.app().add_option("--batch", batch, "ResNet-50 batch size")->capture_default_str()->check(CLI::Range(1, 65'536));
  if (auto rc = cl.parse(argc, argv)) return *rc;
  const sim::preset p = sim::presets::by_name(preset_name);
  std::vector<row> rows;

  auto gemm = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return kernel_desc{kernels::matmul{
        {nullptr, shape{m, k}, dtype::f16}, {nullptr, shape{k, n}, dtype::f16}, {nullptr, shape{m, n}, dtype::f16}}};
  };
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> gemms{
      {256, 256, 256},    {512, 512, 512},      {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
      {8192, 8192, 8192}, {16384, 16384, 4096}, {256, 1000, 2048},  {2048, 1000, 256},  {64, 4096, 4096},
      {4096, 64, 4096},   {4096, 4096, 64},     {1, 4096, 4096},    {8192, 1024, 8192}, {100, 100, 100}};
  for (auto [m, n, k] : gemms)
    rows.push_back(
        measure(p, gemm(m, n, k), "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k)));

  // Every distinct convolution of ResNet-50 at this batch: forward, input and weight gradients.
  const models::resnet50 model{batch};
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  for (std::size_t i = 0; i < model.training_step().size(); ++i) {
    const kernel_desc& k = model.training_step()[i];
    if (!sim::uses_cube(k) || std::holds_alternative<kernels::matmul>(k.op)) continue;
    const kernels::conv2d* c = std::get_if<kernels::conv2d>(&k.op);
    if (!c) continue;
    auto key = std::make_tuple(c->x.shape[1], c->w.shape[0], c->w.shape[2], static_cast<std::int64_t>(c->stride[0]),
                               c->x.shape[2]);
    if (!seen.insert(key).second) continue;
    const std::string tag = std::to_string(c->x.shape[1]) + "->" + std::to_string(c->w.shape[0]) + " " +
                            std::to_string(c->w.shape[2]) + "x" + std::to_string(c->w.shape[3]) + "/" +
                            std::to_string(c->stride[0]) + " @" + std::to_string(c->x.shape[2]);
    rows.push_back(measure(p, k, "conv " + tag));
    rows.push_back(
        measure(p, kernel_desc{kernels::conv2d_backward_data{c->y, c->w, c->x, c->stride, c->pad}}, "  dgrad " + tag));
    rows.push_back(measure(p, kernel_desc{kernels::conv2d_backward_weight{c->x, c->y, c->w, c->stride, c->pad}},
                           "  wgrad " + tag));
  }

  std::printf("kernel_roofline on %s (%u cores, %.1f TFLOP/s FP16, %.0f GB/s HBM), ResNet-50 batch %lld\n",
              p.name.c_str(), p.ai_core_count, p.peak_fp16_flops() / 1e12, p.hbm_bandwidth / 1e9,
              static_cast<long long>(batch));
  std::printf("%-34s %8s %6s %6s %11s %8s %6s %11s %11s %6s %s\n", "kernel", "M", "N", "K", "time us", "TFLOP/s",
              "%peak", "floor us", "roofline us", "/floor", "bound");
  for (const auto& r : rows)
    std::printf("%-34s %8lld %6lld %6lld %11.1f %8.1f %6.1f %11.1f %11.1f %6.2f %s\n", r.name.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), r.us, r.tflops,
                r.pct_peak, r.floor_us, r.roof_us, r.floor_ratio, r.bound.c_str());
  const std::string& path = cl.json_path();
  if (!path.empty()) {
    errno = 0;
    std::ofstream os(path);
    os << "{\n  \"benchmark\": \"kernel_roofline\",\n  \"preset\": \"" << p.name << "\",\n  \"batch\": " << batch
       << ",\n  \"peak_tflops\": " << p.peak_fp16_flops() / 1e12 << ",\n  \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      os << (i ? ",\n" : "\n") << "    {\"kernel\": \"" << r.name << "\", \"m\": " << r.m << ", \"n\": " << r.n
         << ", \"k\": " << r.k << ", \"time_us\": " << r.us << ", \"tflops\": " << r.tflops
         << ", \"pct_peak\": " << r.pct_peak << ", \"cube_floor_us\": " << r.floor_us
         << ", \"roofline_us\": " << r.roof_us << ", \"bound\": \"" << r.bound << "\"}";
    }
    os << "\n  ]\n}\n";
    os.close();
    if (!os) {
      const int e = errno;
      std::fprintf(stderr, "kernel_roofline: cannot write %s%s\n", path.c_str(),
                   e != 0 ? (": " + std::generic_category().message(e)).c_str() : "");
      return 1;
    }
  }
  return npurt_bench::checked_stdout("kernel_roofline", 0);
}
