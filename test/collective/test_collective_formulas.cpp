// The oracle: on an uncontended network every algorithm's simulated time equals its HCCL
// alpha-beta-gamma formula (hicann/hccl docs/user_guide/coll_algo_intro; Thakur, Rabenseifner &
// Gropp 2005), for 2..64 ranks and 8 B..1 GiB, within 0.1%. The formulas are written out here
// from the preset's parameters, independently of the engine's phase lists.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <bit>
#include <cmath>

using namespace npurt;

namespace {

struct net {
  double alpha, beta, gamma;  // seconds, seconds per byte
};

net link(picoseconds latency, double bandwidth, const sim::preset& p) {
  const double cores = p.separated_cores ? p.vector_core_count : p.ai_core_count;
  const double reduce_rate = std::min(cores * 256.0 * p.clock_hz, p.hbm_bandwidth / 3.0);
  return {static_cast<double>(latency.count()) * 1e-12, 1.0 / bandwidth, 1.0 / reduce_rate};
}

double lg(double p) { return std::log2(p); }

// One chunk of n bytes on p ranks.
double formula(collective_op op, collective_algorithm a, double p, double n, const net& x) {
  const double al = x.alpha, b = x.beta, g = x.gamma;
  const double f = (p - 1) / p;
  const bool pow2 = std::has_single_bit(static_cast<unsigned>(p));
  const double pp = std::bit_floor(static_cast<unsigned>(p));
  const double k = lg(pp);
  switch (op) {
    case collective_op::all_reduce:
      if (a == collective_algorithm::ring) return 2 * (p - 1) * al + 2 * f * n * b + f * n * g;
      if (a == collective_algorithm::mesh) return 2 * al + 2 * n / p * b + f * n * g;
      if (pow2) return 2 * lg(p) * al + 2 * f * n * b + f * n * g;
      return (2 * k + 2) * al + (2 * (pp - 1) / pp + 2) * n * b + ((pp - 1) / pp + 1) * n * g;
    case collective_op::reduce_scatter:
      if (a == collective_algorithm::ring) return (p - 1) * al + f * n * (b + g);
      if (a == collective_algorithm::mesh) return al + n / p * b + f * n * g;
      return lg(p) * al + f * n * (b + g);
    case collective_op::all_gather:
      if (a == collective_algorithm::ring) return (p - 1) * al + f * n * b;
      if (a == collective_algorithm::mesh) return al + n / p * b;
      return lg(p) * al + f * n * b;
    case collective_op::broadcast:
      if (a == collective_algorithm::ring) return (p - 1) * (al + n * b);
      if (a == collective_algorithm::mesh) return 2 * al + 2 * n / p * b;
      return std::ceil(lg(p)) * (al + n * b);
    case collective_op::reduce:
      if (a == collective_algorithm::ring) return (p - 1) * (al + n * b + n * g);
      if (a == collective_algorithm::mesh) return 2 * al + 2 * n / p * b + f * n * g;
      if (pow2) return 2 * lg(p) * al + 2 * f * n * b + f * n * g;
      return (2 * k + 1) * al + (2 * (pp - 1) / pp + 1) * n * b + ((pp - 1) / pp + 1) * n * g;
    default: return 0;
  }
}

// Simulated seconds of one operation whose ranks all arrive together (timing-only).
double simulate(const sim::preset& pr, collective_op op, collective_algorithm a, std::size_t bytes,
                std::size_t buffer = 200'000'000) {
  npurt::system sys{sim::make_backend(pr, coll_test::timing_only())};
  auto comm = communicator::init_all(sys, {.algorithm = a, .buffer_size = buffer, .keep_records = true});
  const std::size_t p = sys.device_count();
  std::vector<stream> ss;
  for (auto& d : sys.devices()) ss.push_back(d.make_stream());
  for (std::size_t r = 0; r < p; ++r) {
    collective_call c;
    c.op = op;
    c.type = dtype::i8;
    c.count = (op == collective_op::all_gather || op == collective_op::reduce_scatter) ? bytes / p : bytes;
    comm.enqueue(c, ss[r]);
  }
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  const auto& rec = comm.records().at(0);
  return static_cast<double>((rec.end - rec.start).count()) * 1e-12;
}

}  // namespace

TEST_CASE("ring and recursive halving-doubling over RoCE take exactly their formula time", "[collective][formula]") {
  const int p = GENERATE(2, 3, 5, 8, 16, 64);
  const std::size_t bytes = GENERATE(std::size_t{8}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{1} << 30);
  const auto pr = coll_test::roce_preset(p);
  const net x = link(pr.roce_latency, pr.roce_bandwidth, pr);
  for (auto op : {collective_op::all_reduce, collective_op::reduce_scatter, collective_op::all_gather,
                  collective_op::broadcast, collective_op::reduce}) {
    for (auto a : {collective_algorithm::ring, collective_algorithm::rhd}) {
      // HCCL gives exact RHD formulas for reduce-scatter and all-gather only at powers of two.
      const bool exact = a == collective_algorithm::ring || std::has_single_bit(static_cast<unsigned>(p)) ||
                         op == collective_op::all_reduce || op == collective_op::reduce ||
                         op == collective_op::broadcast;
      if (!exact) continue;
      // (AllGather/ReduceScatter take bytes as the whole vector: a multiple of p.)
      const std::size_t n = (op == collective_op::all_gather || op == collective_op::reduce_scatter)
                                ? std::max<std::size_t>(bytes / p, 1) * p
                                : bytes;
      const double chunks = std::ceil(static_cast<double>(n) / 200e6);
      const double want = chunks * formula(op, a, p, static_cast<double>(n) / chunks, x);
      const double got = simulate(pr, op, a, n);
      CAPTURE(p, n, to_string(op), to_string(a), got, want);
      CHECK(std::abs(got - want) <= 1e-3 * want);
    }
  }
}

TEST_CASE("mesh over one HCCS full mesh takes exactly its formula time", "[collective][formula]") {
  const int p = GENERATE(3, 4, 8, 16, 64);
  const std::size_t bytes = GENERATE(std::size_t{8}, std::size_t{65536}, std::size_t{1} << 30);
  const auto pr = coll_test::mesh_preset(p);
  const net x = link(pr.hccs_latency, pr.hccs_bandwidth, pr);
  for (auto op : {collective_op::all_reduce, collective_op::reduce_scatter, collective_op::all_gather,
                  collective_op::broadcast, collective_op::reduce}) {
    const std::size_t n = (op == collective_op::all_gather || op == collective_op::reduce_scatter)
                              ? std::max<std::size_t>(bytes / p, 1) * p
                              : bytes;
    const double chunks = std::ceil(static_cast<double>(n) / 200e6);
    const double want = chunks * formula(op, collective_algorithm::mesh, p, static_cast<double>(n) / chunks, x);
    const double got = simulate(pr, op, collective_algorithm::mesh, n);
    CAPTURE(p, n, to_string(op), got, want);
    CHECK(std::abs(got - want) <= 1e-3 * want);
  }
}

TEST_CASE("hierarchical all_reduce is intra-server reduce-scatter, inter-server all_reduce, intra all-gather",
          "[collective][formula]") {
  const int servers = GENERATE(2, 3, 8);
  const int per = GENERATE(4, 8);
  const std::size_t n = GENERATE(std::size_t{4096}, std::size_t{102'228'128});  // ResNet-50 FP32 gradients
  const auto pr = coll_test::cluster_preset(servers, per);
  const net intra = link(pr.hccs_latency, pr.hccs_bandwidth, pr);
  const net inter = link(pr.roce_latency, pr.roce_bandwidth, pr);
  const auto inter_algo =
      std::has_single_bit(static_cast<unsigned>(servers)) ? collective_algorithm::rhd : collective_algorithm::ring;
  const double d = static_cast<double>(n);
  const double want = formula(collective_op::reduce_scatter, collective_algorithm::mesh, per, d, intra) +
                      formula(collective_op::all_reduce, inter_algo, servers, d / per, inter) +
                      formula(collective_op::all_gather, collective_algorithm::mesh, per, d, intra);
  const double got = simulate(pr, collective_op::all_reduce, collective_algorithm::automatic, n);
  CAPTURE(servers, per, n, got, want);
  CHECK(std::abs(got - want) <= 1e-3 * want);
}

TEST_CASE("messages larger than the buffer run in chunks, each paying the latency terms again",
          "[collective][formula]") {
  const auto pr = coll_test::roce_preset(4);
  const net x = link(pr.roce_latency, pr.roce_bandwidth, pr);
  const std::size_t n = 10 << 20;
  for (std::size_t buffer : {std::size_t{1} << 20, std::size_t{3} << 20, std::size_t{200'000'000}}) {
    const double chunks = std::ceil(static_cast<double>(n) / static_cast<double>(buffer));
    const double want = chunks * formula(collective_op::all_reduce, collective_algorithm::ring, 4, n / chunks, x);
    const double got = simulate(pr, collective_op::all_reduce, collective_algorithm::ring, n, buffer);
    CAPTURE(buffer, got, want);
    CHECK(std::abs(got - want) <= 1e-3 * want);
  }
}
