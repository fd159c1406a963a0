// The oracle: on an uncontended network every algorithm's simulated time equals its HCCL
// alpha-beta-gamma formula (hicann/hccl docs/user_guide/coll_algo_intro; Thakur, Rabenseifner &
// Gropp 2005), for 2..64 ranks and 8 B..1 GiB, within 0.1%. The formulas are written out here
// from the preset's parameters, independently of the engine's phase lists.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <bit>
#include <cmath>
#include <map>

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

// The record of one operation whose ranks all arrive together (timing-only), rooted at `root`.
collective_record simulate_record(const sim::preset& pr, collective_op op, collective_algorithm a, std::size_t bytes,
                                  int root = 0, std::size_t buffer = 200'000'000) {
  npurt::system sys{sim::make_backend(pr, coll_test::timing_only())};
  auto comm = communicator::init_all(sys, {.algorithm = a, .buffer_size = buffer, .keep_records = true});
  const std::size_t p = sys.device_count();
  std::vector<stream> ss;
  for (auto& d : sys.devices()) ss.push_back(d.make_stream());
  for (std::size_t r = 0; r < p; ++r) {
    collective_call c;
    c.op = op;
    c.type = dtype::i8;
    c.root = root;
    c.count = (op == collective_op::all_gather || op == collective_op::reduce_scatter) ? bytes / p : bytes;
    comm.enqueue(c, ss[r]);
  }
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  return comm.records().at(0);
}

double seconds(const collective_record& r) { return static_cast<double>((r.end - r.start).count()) * 1e-12; }

// Simulated seconds of one operation whose ranks all arrive together.
double simulate(const sim::preset& pr, collective_op op, collective_algorithm a, std::size_t bytes,
                std::size_t buffer = 200'000'000) {
  return seconds(simulate_record(pr, op, a, bytes, 0, buffer));
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
  const int p = GENERATE(2, 3, 4, 8, 16, 64);
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

TEST_CASE("hierarchical reduce_scatter, all_gather and broadcast take the sum of their stages' formulas",
          "[collective][formula]") {
  const int servers = GENERATE(2, 3, 8);
  const int per = GENERATE(4, 8);
  const std::size_t p = static_cast<std::size_t>(servers * per);
  // A whole multiple of p (reduce-scatter and all-gather split the vector in p shards), from
  // latency-bound to bandwidth-bound (up to 192 MiB: two chunks of the 200 MB buffer at p = 64).
  const std::size_t n = GENERATE(std::size_t{64}, std::size_t{3} << 20) * p;
  const auto pr = coll_test::cluster_preset(servers, per);
  const net intra = link(pr.hccs_latency, pr.hccs_bandwidth, pr);
  const net inter = link(pr.roce_latency, pr.roce_bandwidth, pr);
  const auto inter_algo =
      std::has_single_bit(static_cast<unsigned>(servers)) ? collective_algorithm::rhd : collective_algorithm::ring;
  const double chunks = std::ceil(static_cast<double>(n) / 200e6);
  const double d = static_cast<double>(n) / chunks, S = servers, L = per;
  using enum collective_op;
  const auto mesh = collective_algorithm::mesh;
  SECTION("reduce_scatter: inter-server reduce-scatter of the whole vector, then intra-server of the server's share") {
    const double want =
        chunks * (formula(reduce_scatter, inter_algo, S, d, inter) + formula(reduce_scatter, mesh, L, d / S, intra));
    const auto rec = simulate_record(pr, reduce_scatter, collective_algorithm::automatic, n);
    CAPTURE(servers, per, n, seconds(rec), want);
    CHECK(rec.algorithm == collective_algorithm::hierarchical);
    CHECK(std::abs(seconds(rec) - want) <= 1e-3 * want);
  }
  SECTION("all_gather: intra-server all-gather of the server's share, then inter-server of the whole vector") {
    const double want =
        chunks * (formula(all_gather, mesh, L, d / S, intra) + formula(all_gather, inter_algo, S, d, inter));
    const auto rec = simulate_record(pr, all_gather, collective_algorithm::automatic, n);
    CAPTURE(servers, per, n, seconds(rec), want);
    CHECK(rec.algorithm == collective_algorithm::hierarchical);
    CHECK(std::abs(seconds(rec) - want) <= 1e-3 * want);
  }
  SECTION("broadcast: intra scatter from the root, inter broadcast of the shards, intra all-gather") {
    const int root = GENERATE_COPY(0, servers * per - 3);  // on the first server and on the last
    const double scatter = intra.alpha + d / L * intra.beta;  // HCCL's mesh Scatter: alpha + n/p beta
    const double want =
        chunks * (scatter + formula(broadcast, inter_algo, S, d / L, inter) + formula(all_gather, mesh, L, d, intra));
    const auto rec = simulate_record(pr, broadcast, collective_algorithm::automatic, n, root);
    CAPTURE(servers, per, n, root, seconds(rec), want);
    CHECK(rec.algorithm == collective_algorithm::hierarchical);
    CHECK(std::abs(seconds(rec) - want) <= 1e-3 * want);
    // And it beats the flat algorithm whenever bandwidth matters.
    if (n > (std::size_t{1} << 20)) CHECK(seconds(rec) < seconds(simulate_record(pr, broadcast, inter_algo, n, root)));
  }
}

TEST_CASE(
    "without a full mesh inside a server, the choice between the two-level and the flat schemes is the faster "
    "one, by rank count and size",
    "[collective][formula]") {
  // ascend910 servers: two HCCS groups of four joined over PCIe; servers over RoCE.
  const int devices = GENERATE(16, 24);
  const auto pr = sim::presets::ascend910(devices);
  REQUIRE(pr.server_size == 8);
  const bool pow2 = std::has_single_bit(static_cast<unsigned>(devices));
  for (auto op : {collective_op::broadcast, collective_op::all_gather, collective_op::reduce_scatter}) {
    for (std::size_t n : {std::size_t{64} * 24 * 16, std::size_t{24 * 16} << 16}) {  // 24 KiB and 24 MiB
      const auto chosen = simulate_record(pr, op, collective_algorithm::automatic, n);
      const bool large = n > 64 * 1024;
      const bool want_hier = op == collective_op::broadcast ? large : !pow2;
      CAPTURE(devices, to_string(op), n, to_string(chosen.algorithm));
      CHECK((chosen.algorithm == collective_algorithm::hierarchical) == want_hier);
      // The flat alternative: recursive halving-doubling at powers of two and for small
      // broadcasts, ring otherwise.
      const auto flat =
          pow2 || (op == collective_op::broadcast && !large) ? collective_algorithm::rhd : collective_algorithm::ring;
      const auto other = simulate_record(pr, op, want_hier ? flat : collective_algorithm::hierarchical, n);
      CAPTURE(seconds(chosen), seconds(other));
      CHECK(seconds(chosen) <= seconds(other));
    }
  }
}

namespace {

/// Bytes each device received over the links during a run.
struct bytes_received_by_device final : observer {
  std::map<device_id, double> bytes;
  void on_link_transfer(const link_transfer_info& l) override { bytes[l.dst] += static_cast<double>(l.bytes); }
};

}  // namespace

TEST_CASE("a broadcast moves the whole vector to every rank but the root, whatever its algorithm",
          "[collective][formula]") {
  // A rank can only end up holding the root's n bytes if n bytes reached it. The mesh broadcast
  // (scatter, then all-gather) once left the root's own block out of its all-gather: every rank
  // received n - n/p bytes, and on two ranks the broadcast took a + n/2 b, half of what one link
  // can carry.
  const int p = GENERATE(2, 3, 4, 8);
  const std::size_t n = 3 << 20;
  const auto pr = coll_test::mesh_preset(p);
  for (auto a : {collective_algorithm::mesh, collective_algorithm::ring, collective_algorithm::rhd}) {
    const int root = p - 1;
    npurt::system sys{sim::make_backend(pr, coll_test::timing_only())};
    bytes_received_by_device seen;
    sys.add_observer(seen);
    auto comm = communicator::init_all(sys, {.algorithm = a});
    std::vector<stream> ss;
    for (auto& d : sys.devices()) ss.push_back(d.make_stream());
    for (int r = 0; r < p; ++r) comm.broadcast(nullptr, n, dtype::i8, root, ss[static_cast<std::size_t>(r)]);
    sys.run();
    REQUIRE_FALSE(comm.async_error());
    sys.remove_observer(seen);
    for (int r = 0; r < p; ++r) {
      CAPTURE(p, to_string(a), r);
      CHECK(seen.bytes[r] == (r == root ? 0.0 : static_cast<double>(n)));
    }
  }
}
