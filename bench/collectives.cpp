// bench/collectives — an nccl-tests style table of every collective and algorithm on 8 and 64
// simulated devices (size, time, algorithm bandwidth, bus bandwidth, the HCCL alpha-beta-gamma
// formula's time and the error), plus the scale row: one all-reduce of ResNet-50's gradients
// on 1024 devices (128 servers), timing-only, with the wall time it took to simulate.
//
// The formula is computed here from the preset's link parameters (per step: the link the
// step's transfers cross; a step of several links costs its slowest), not from the engine.
#include "bench_common.hpp"

#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

using namespace npurt;

namespace {

struct row {
  std::string preset;
  int ranks;
  std::string op, algo;
  std::size_t bytes;
  double time_us, algbw, busbw, formula_us, error_pct;
};

struct link_ab {
  double a, b;  // seconds, seconds per byte
};

link_ab ab(const sim::preset& p, device_id x, device_id y) {
  const auto path = sim::peer_path(p, x, y);
  return {static_cast<double>(path.latency.count()) * 1e-12, 1.0 / path.bandwidth};
}

// One step of `bytes` over the pairs (r, partner(r)): its slowest link.
template <class Partner>
double step(const sim::preset& p, int n, double bytes, Partner partner) {
  double worst = 0;
  for (int r = 0; r < n; ++r) {
    const int q = partner(r);
    if (q < 0 || q == r) continue;
    const link_ab l = ab(p, r, q);
    worst = std::max(worst, l.a + bytes * l.b);
  }
  return worst;
}

double gamma_of(const sim::preset& p) {
  const double cores = p.separated_cores ? p.vector_core_count : p.ai_core_count;
  return 1.0 / std::min(cores * 256.0 * p.clock_hz, p.hbm_bandwidth / 3.0);
}

// HCCL's formulas, step by step (hicann/hccl docs/user_guide/coll_algo_intro).
double formula(const sim::preset& pr, collective_op op, collective_algorithm a, int p, double n) {
  const double g = gamma_of(pr);
  const double f = (p - 1.0) / p;
  auto ring = [&](double b) { return step(pr, p, b, [&](int r) { return (r + 1) % p; }); };
  auto mesh = [&](double b) {
    double w = 0;
    for (int s = 1; s < p; ++s) w = std::max(w, step(pr, p, b, [&](int r) { return (r + s) % p; }));
    return w;
  };
  auto halving = [&](double nn, bool red) {  // p a power of two
    double t = 0;
    for (int d = p / 2; d >= 1; d /= 2) {
      const double b = nn * d / p;
      t += step(pr, p, b, [&](int r) { return r ^ d; }) + (red ? b * g : 0);
    }
    return t;
  };
  auto doubling = [&](double nn) {
    double t = 0;
    for (int d = 1; d < p; d *= 2) t += step(pr, p, nn * d / p, [&](int r) { return r ^ d; });
    return t;
  };
  switch (op) {
    case collective_op::all_reduce:
      if (a == collective_algorithm::ring) return 2 * (p - 1) * ring(n / p) + f * n * g;
      if (a == collective_algorithm::mesh) return 2 * mesh(n / p) + f * n * g;
      if (a == collective_algorithm::rhd) return halving(n, true) + doubling(n);
      return 0;
    case collective_op::reduce_scatter:
      if (a == collective_algorithm::ring) return (p - 1) * ring(n / p) + f * n * g;
      if (a == collective_algorithm::mesh) return mesh(n / p) + f * n * g;
      return halving(n, true);
    case collective_op::all_gather:
      if (a == collective_algorithm::ring) return (p - 1) * ring(n / p);
      if (a == collective_algorithm::mesh) return mesh(n / p);
      return doubling(n);
    case collective_op::all_to_all:
      if (a == collective_algorithm::mesh) return mesh(n / p);
      {
        double t = 0;
        for (int s = 1; s < p; ++s) t += step(pr, p, n / p, [&](int r) { return (r + s) % p; });
        return t;
      }
    default: return 0;
  }
}

// HCCL's two-level schemes, stage by stage (the inter-server stage RHD when the server count is
// a power of two, else ring): all-reduce = intra mesh reduce-scatter, inter all-reduce of the
// n/L shard, intra mesh all-gather; reduce-scatter = inter RS of n, intra RS of n/S;
// all-gather = intra AG of n/S, inter AG of n.
double hierarchical(const sim::preset& pr, collective_op op, int p, double n) {
  const int L = static_cast<int>(pr.server_size), S = p / L;
  sim::preset intra = pr;
  intra.device_count = static_cast<std::uint32_t>(L);
  intra.hccs_groups.assign(1, {});
  for (int d = 0; d < L; ++d) intra.hccs_groups[0].push_back(d);
  sim::preset inter = pr;
  inter.device_count = static_cast<std::uint32_t>(S);
  inter.server_size = 1;
  inter.hccs_groups.clear();
  const auto ia =
      std::has_single_bit(static_cast<unsigned>(S)) ? collective_algorithm::rhd : collective_algorithm::ring;
  const auto mesh = collective_algorithm::mesh;
  switch (op) {
    case collective_op::reduce_scatter: return formula(inter, op, ia, S, n) + formula(intra, op, mesh, L, n / S);
    case collective_op::all_gather: return formula(intra, op, mesh, L, n / S) + formula(inter, op, ia, S, n);
    default:
      return formula(intra, collective_op::reduce_scatter, mesh, L, n) +
             formula(inter, collective_op::all_reduce, ia, S, n / L) +
             formula(intra, collective_op::all_gather, mesh, L, n);
  }
}

double bus_factor(collective_op op, int p) {
  switch (op) {
    case collective_op::all_reduce: return 2.0 * (p - 1) / p;
    case collective_op::broadcast:
    case collective_op::reduce: return 1.0;
    default: return (p - 1.0) / p;
  }
}

// Simulated seconds of one operation on every rank (all arrive together), and the algorithm
// the engine used.
double simulate(const sim::preset& pr, collective_op op, collective_algorithm a, std::size_t bytes,
                collective_algorithm* used = nullptr) {
  sim::sim_options o;
  o.functional = false;
  npurt::system sys{sim::make_backend(pr, o)};
  communicator_options co;
  co.algorithm = a;
  co.keep_records = true;
  auto comm = communicator::init_all(sys, co);
  const int p = static_cast<int>(sys.device_count());
  std::vector<stream> ss;
  for (auto& d : sys.devices()) ss.push_back(d.make_stream());
  for (int r = 0; r < p; ++r) {
    collective_call c;
    c.op = op;
    c.type = dtype::i8;
    c.count = (op == collective_op::all_reduce || op == collective_op::broadcast || op == collective_op::reduce)
                  ? bytes
                  : bytes / static_cast<std::size_t>(p);
    comm.enqueue(c, ss[static_cast<std::size_t>(r)]);
  }
  sys.run();
  const auto& rec = comm.records().at(0);
  if (used) *used = rec.algorithm;
  return static_cast<double>((rec.end - rec.start).count()) * 1e-12;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, no_scale = false;
  npurt_bench::command_line cl{
      "collectives: nccl-tests style table of simulated HCCL collectives\n"
      "  (ascend910b presets: 8 = one 8-device HCCS mesh, 64 = 8 such servers over RoCE)"};
  cl.app().add_flag("--quick", quick, "three message sizes instead of seven");
  cl.app().add_flag("--no-scale", no_scale, "skip the 1024-device ResNet-50 all-reduce");
  if (auto rc = cl.parse(argc, argv)) return *rc;
  std::vector<std::size_t> sizes =
      quick ? std::vector<std::size_t>{8, 64 << 10, 16 << 20}
            : std::vector<std::size_t>{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, std::size_t{1} << 30};
  std::vector<row> rows;
  for (int p : {8, 64}) {
    const auto pr = sim::presets::ascend910b(p);
    struct combo {
      collective_op op;
      collective_algorithm a;
    };
    std::vector<combo> combos;
    for (auto op : {collective_op::all_reduce, collective_op::reduce_scatter, collective_op::all_gather,
                    collective_op::all_to_all})
      for (auto a : {collective_algorithm::ring, collective_algorithm::mesh, collective_algorithm::rhd})
        if (!(op == collective_op::all_to_all && a == collective_algorithm::rhd) &&
            !(p == 64 && a == collective_algorithm::mesh))
          combos.push_back({op, a});
    if (p == 64)
      for (auto op : {collective_op::all_reduce, collective_op::reduce_scatter, collective_op::all_gather})
        combos.push_back({op, collective_algorithm::hierarchical});
    std::printf("\n# ascend910b, %d devices%s\n", p,
                p == 8 ? " (one HCCS full mesh)" : " (8 servers x 8, RoCE between)");
    std::printf("%-15s %-12s %12s %12s %10s %10s %12s %8s\n", "op", "algorithm", "size(B)", "time(us)", "algbw",
                "busbw", "formula(us)", "err(%)");
    for (const auto& c : combos)
      for (std::size_t s : sizes) {
        const std::size_t bytes =
            std::max<std::size_t>(s / static_cast<std::size_t>(p), 1) * static_cast<std::size_t>(p);
        const double t = simulate(pr, c.op, c.a, bytes);
        const double chunks = std::ceil(static_cast<double>(bytes) / 200e6);
        const double one = c.a == collective_algorithm::hierarchical
                               ? hierarchical(pr, c.op, p, static_cast<double>(bytes) / chunks)
                               : formula(pr, c.op, c.a, p, static_cast<double>(bytes) / chunks);
        const double want = chunks * one;
        const double algbw = static_cast<double>(bytes) / t / 1e9;
        row r{"ascend910b",
              p,
              std::string(to_string(c.op)),
              std::string(to_string(c.a)),
              bytes,
              t * 1e6,
              algbw,
              algbw * bus_factor(c.op, p),
              want * 1e6,
              100.0 * (t - want) / want};
        std::printf("%-15s %-12s %12zu %12.2f %10.3f %10.3f %12.2f %8.4f\n", r.op.c_str(), r.algo.c_str(), r.bytes,
                    r.time_us, r.algbw, r.busbw, r.formula_us, r.error_pct);
        rows.push_back(r);
      }
  }
  // Scale: ResNet-50's gradients (25,557,032 parameters) over 1024 devices, 128 servers.
  std::vector<std::pair<std::string, double>> scale;
  if (!no_scale) {
    std::printf("\n# scale: ResNet-50 gradient all-reduce, ascend910 x 1024 (128 servers), timing-only\n");
    for (std::size_t es : {std::size_t{2}, std::size_t{4}}) {
      const std::size_t bytes = 25'557'032 * es;
      const auto pr = sim::presets::ascend910(1024);
      const auto t0 = std::chrono::steady_clock::now();
      collective_algorithm used{};
      const double t = simulate(pr, collective_op::all_reduce, collective_algorithm::automatic, bytes, &used);
      const double wall = npurt_bench::seconds_since(t0);
      std::printf("%s  %s  %zu B  simulated %.3f ms  wall %.3f s\n", es == 2 ? "fp16" : "fp32",
                  std::string(to_string(used)).c_str(), bytes, t * 1e3, wall);
      scale.push_back({std::string("resnet50_1024_") + (es == 2 ? "fp16" : "fp32") + "_simulated_ms", t * 1e3});
      scale.push_back({std::string("resnet50_1024_") + (es == 2 ? "fp16" : "fp32") + "_wall_s", wall});
    }
  }
  const std::string path = cl.json_path();
  if (!path.empty()) {
    errno = 0;
    std::ofstream os(path);
    os << "{\n  \"benchmark\": \"collectives\",\n  \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const row& r = rows[i];
      os << (i ? ",\n" : "\n") << "    {\"preset\": \"" << r.preset << "\", \"ranks\": " << r.ranks << ", \"op\": \""
         << r.op << "\", \"algorithm\": \"" << r.algo << "\", \"bytes\": " << r.bytes << ", \"time_us\": " << r.time_us
         << ", \"algbw_GBps\": " << r.algbw << ", \"busbw_GBps\": " << r.busbw << ", \"formula_us\": " << r.formula_us
         << ", \"error_pct\": " << r.error_pct << "}";
    }
    os << "\n  ]";
    for (auto& [k, v] : scale) os << ",\n  \"" << k << "\": " << v;
    os << "\n}\n";
    os.close();
    if (!os) {
      const int e = errno;
      std::fprintf(stderr, "collectives: cannot write %s%s\n", path.c_str(),
                   e != 0 ? (": " + std::generic_category().message(e)).c_str() : "");
      return 1;
    }
  }
  return npurt_bench::checked_stdout("collectives", 0);
}
