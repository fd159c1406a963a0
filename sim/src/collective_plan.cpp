// The phases of HCCL's collective algorithms (ring, mesh, recursive halving-doubling with the
// non-power-of-two fold, hierarchical), as lists of transfers and reductions. Sources: HCCL's
// algorithm notes (hicann/hccl docs/user_guide/coll_algo_intro) and Thakur, Rabenseifner &
// Gropp, "Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005).
#include <npurt/sim/collective_engine.hpp>
#include <npurt/sim/topology.hpp>

#include <algorithm>
#include <bit>

namespace npurt::sim {

namespace {

using ranks_t = std::vector<std::uint32_t>;

struct builder {
  std::vector<coll_phase>& ph;
  void add(std::size_t at, std::uint32_t s, std::uint32_t d, double b) {
    if (ph.size() <= at) ph.resize(at + 1);
    ph[at].transfers.push_back({s, d, b});
  }
  void reduce(std::size_t at, double b) {
    if (ph.size() <= at) ph.resize(at + 1);
    ph[at].reduce_bytes = std::max(ph[at].reduce_bytes, b);
  }
  void touch(std::size_t at) {
    if (ph.size() <= at) ph.resize(at + 1);
  }

  // Ring reduce-scatter / all-gather: p-1 steps of n/p to the next rank.
  std::size_t ring(std::size_t base, const ranks_t& r, double n, bool red) {
    const std::size_t p = r.size();
    for (std::size_t s = 0; s + 1 < p; ++s) {
      for (std::size_t i = 0; i < p; ++i) add(base + s, r[i], r[(i + 1) % p], n / static_cast<double>(p));
      if (red) reduce(base + s, n / static_cast<double>(p));
    }
    return base + (p > 1 ? p - 1 : 0);
  }
  // Mesh reduce-scatter / all-gather: one step, n/p to every other rank at once.
  std::size_t mesh(std::size_t base, const ranks_t& r, double n, bool red) {
    const std::size_t p = r.size();
    if (p < 2) return base;
    for (std::size_t i = 0; i < p; ++i)
      for (std::size_t j = 0; j < p; ++j)
        if (i != j) add(base, r[i], r[j], n / static_cast<double>(p));
    if (red) reduce(base, n * static_cast<double>(p - 1) / static_cast<double>(p));
    else touch(base);
    return base + 1;
  }
  // Recursive halving (reduce-scatter), p a power of two: lg p steps, n/2, n/4, ...
  std::size_t halving(std::size_t base, const ranks_t& r, double n, bool red) {
    const std::size_t p = r.size();
    std::size_t s = 0;
    for (std::size_t d = p / 2; d >= 1; d /= 2, ++s) {
      const double b = n * static_cast<double>(d) / static_cast<double>(p);
      for (std::size_t i = 0; i < p; ++i) add(base + s, r[i], r[i ^ d], b);
      if (red) reduce(base + s, b);
    }
    return base + s;
  }
  // Recursive doubling (all-gather), p a power of two: lg p steps, n/p, 2n/p, ...
  std::size_t doubling(std::size_t base, const ranks_t& r, double n) {
    const std::size_t p = r.size();
    std::size_t s = 0;
    for (std::size_t d = 1; d < p; d *= 2, ++s) {
      const double b = n * static_cast<double>(d) / static_cast<double>(p);
      for (std::size_t i = 0; i < p; ++i) add(base + s, r[i], r[i ^ d], b);
    }
    return base + s;
  }
  // The fold of a non-power-of-two rank count: rank p'+i hands its data to rank i (and back).
  std::size_t fold_in(std::size_t base, const ranks_t& r, std::size_t pp, double n, bool red) {
    if (pp == r.size()) return base;
    for (std::size_t i = pp; i < r.size(); ++i) add(base, r[i], r[i - pp], n);
    if (red) reduce(base, n);
    return base + 1;
  }
  std::size_t fold_out(std::size_t base, const ranks_t& r, std::size_t pp, double n) {
    if (pp == r.size()) return base;
    for (std::size_t i = pp; i < r.size(); ++i) add(base, r[i - pp], r[i], n);
    return base + 1;
  }

  // Reduce-scatter / all-gather of an n-byte vector over r by one algorithm (rhd: p a power of two).
  std::size_t reduce_scatter(std::size_t base, const ranks_t& r, double n, collective_algorithm a) {
    if (a == collective_algorithm::mesh) return mesh(base, r, n, true);
    if (a == collective_algorithm::rhd) return halving(base, r, n, true);
    return ring(base, r, n, true);
  }
  std::size_t all_gather(std::size_t base, const ranks_t& r, double n, collective_algorithm a) {
    if (a == collective_algorithm::mesh) return mesh(base, r, n, false);
    if (a == collective_algorithm::rhd) return doubling(base, r, n);
    return ring(base, r, n, false);
  }
  // Scatter of an n-byte vector from r[0]: mesh, one step of n/p to each rank; otherwise along
  // the ring, each step forwarding one block of n/p one hop further.
  std::size_t scatter(std::size_t base, const ranks_t& r, double n, bool mesh_links) {
    const std::size_t p = r.size();
    if (p < 2) return base;
    const double blk = n / static_cast<double>(p);
    if (mesh_links) {
      for (std::size_t i = 1; i < p; ++i) add(base, r[0], r[i], blk);
      return base + 1;
    }
    for (std::size_t s = 0; s + 1 < p; ++s)
      for (std::size_t i = 0; i <= s; ++i) add(base + s, r[i], r[i + 1], blk);
    return base + p - 1;
  }
  // Broadcast of n bytes from r[0]: rhd, a binomial tree; otherwise a chain.
  std::size_t broadcast(std::size_t base, const ranks_t& r, double n, collective_algorithm a) {
    const std::size_t p = r.size();
    if (p < 2) return base;
    if (a == collective_algorithm::rhd) {
      std::size_t s = 0;
      for (std::size_t d = 1; d < p; d *= 2, ++s)
        for (std::size_t i = 0; i < d && i + d < p; ++i) add(base + s, r[i], r[i + d], n);
      return base + s;
    }
    for (std::size_t i = 0; i + 1 < p; ++i) add(base + i, r[i], r[i + 1], n);
    return base + p - 1;
  }

  std::size_t all_reduce(std::size_t base, const ranks_t& r, double n, collective_algorithm a) {
    const std::size_t p = r.size();
    if (p < 2) return base;
    switch (a) {
      case collective_algorithm::mesh: return mesh(mesh(base, r, n, true), r, n, false);
      case collective_algorithm::rhd: {
        const std::size_t pp = std::bit_floor(p);
        const ranks_t core(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(pp));
        std::size_t b = fold_in(base, r, pp, n, true);
        b = doubling(halving(b, core, n, true), core, n);
        return fold_out(b, r, pp, n);
      }
      default: return ring(ring(base, r, n, true), r, n, false);
    }
  }
};

ranks_t iota(std::size_t p) {
  ranks_t r(p);
  for (std::size_t i = 0; i < p; ++i) r[i] = static_cast<std::uint32_t>(i);
  return r;
}

// Ranks renumbered so that the root comes first (trees and chains start or end there).
ranks_t rooted(std::size_t p, std::uint32_t root) {
  ranks_t r(p);
  for (std::size_t i = 0; i < p; ++i) r[i] = static_cast<std::uint32_t>((root + i) % p);
  return r;
}

}  // namespace

std::vector<coll_phase> plan_phases(const preset& pr, collective_op op, collective_algorithm algo,
                                    const std::vector<device_id>& devices, double n, std::uint32_t root,
                                    const std::vector<std::vector<double>>* block_bytes) {
  std::vector<coll_phase> ph;
  builder b{ph};
  const std::size_t p = devices.size();
  if (op == collective_op::send || op == collective_op::recv) {
    b.add(0, 0, 1, n);
    return ph;
  }
  if (p < 2) return ph;
  const ranks_t all = iota(p);
  const bool pow2 = std::has_single_bit(p);
  const bool has_hierarchical = op == collective_op::all_reduce || op == collective_op::barrier ||
                                op == collective_op::all_gather || op == collective_op::reduce_scatter ||
                                op == collective_op::broadcast;
  if (algo == collective_algorithm::hierarchical && !has_hierarchical)
    algo = pow2 ? collective_algorithm::rhd : collective_algorithm::ring;
  // HCCL's two-level schemes (coll_algo_intro): ReduceScatter = inter-server RS, then intra RS;
  // AllGather = intra AG, then inter AG; Broadcast = intra Scatter from the root, inter Bcast of
  // the root server's shards, intra AG. Servers hold L consecutive ranks; rank s*L + j is rank j
  // of server s, and the inter-server stages run over the L "columns" at once.
  if (algo == collective_algorithm::hierarchical && op != collective_op::all_reduce && op != collective_op::barrier) {
    const server_layout l = layout_of(pr, devices);
    if (l.servers < 2 || l.per_server < 2) {
      algo = pow2 ? collective_algorithm::rhd : collective_algorithm::ring;
    } else {
      const std::size_t L = l.per_server, S = l.servers;
      const std::vector<device_id> first(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(L));
      const auto intra = full_mesh(pr, first) ? collective_algorithm::mesh : collective_algorithm::ring;
      const auto inter = std::has_single_bit(S) ? collective_algorithm::rhd : collective_algorithm::ring;
      const auto server = [&](std::size_t s) {
        ranks_t g(L);
        for (std::size_t j = 0; j < L; ++j) g[j] = static_cast<std::uint32_t>(s * L + j);
        return g;
      };
      const auto column = [&](std::size_t j, std::size_t first_server) {
        ranks_t g(S);
        for (std::size_t s = 0; s < S; ++s) g[s] = static_cast<std::uint32_t>(((first_server + s) % S) * L + j);
        return g;
      };
      const double dL = static_cast<double>(L), dS = static_cast<double>(S);
      std::size_t end = 0;
      if (op == collective_op::reduce_scatter) {
        for (std::size_t j = 0; j < L; ++j) end = b.reduce_scatter(0, column(j, 0), n, inter);
        for (std::size_t s = 0; s < S; ++s) (void)b.reduce_scatter(end, server(s), n / dS, intra);
      } else if (op == collective_op::all_gather) {
        for (std::size_t s = 0; s < S; ++s) end = b.all_gather(0, server(s), n / dS, intra);
        for (std::size_t j = 0; j < L; ++j) (void)b.all_gather(end, column(j, 0), n, inter);
      } else {  // broadcast
        const std::size_t s0 = root / L, j0 = root % L;
        ranks_t g(L);  // the root's server, root first
        for (std::size_t j = 0; j < L; ++j) g[j] = static_cast<std::uint32_t>(s0 * L + (j0 + j) % L);
        end = b.scatter(0, g, n, intra == collective_algorithm::mesh);
        std::size_t end2 = end;
        for (std::size_t j = 0; j < L; ++j) end2 = b.broadcast(end, column(j, s0), n / dL, inter);
        for (std::size_t s = 0; s < S; ++s) (void)b.all_gather(end2, server(s), n, intra);
      }
      return ph;
    }
  }
  switch (op) {
    case collective_op::barrier:
    case collective_op::all_reduce: {
      if (algo == collective_algorithm::hierarchical) {
        const server_layout l = layout_of(pr, devices);
        if (l.servers < 2 || l.per_server < 2) {
          b.all_reduce(0, all, n, pow2 ? collective_algorithm::rhd : collective_algorithm::ring);
          break;
        }
        const std::size_t L = l.per_server, S = l.servers;
        const std::vector<device_id> first(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(L));
        const bool mesh_inside = full_mesh(pr, first);
        const auto inter = std::has_single_bit(S) ? collective_algorithm::rhd : collective_algorithm::ring;
        std::size_t end1 = 0, end2 = 0, end3 = 0;
        for (std::size_t s = 0; s < S; ++s) {
          ranks_t g(L);
          for (std::size_t j = 0; j < L; ++j) g[j] = static_cast<std::uint32_t>(s * L + j);
          end1 = mesh_inside ? b.mesh(0, g, n, true) : b.ring(0, g, n, true);
        }
        for (std::size_t j = 0; j < L; ++j) {
          ranks_t g(S);
          for (std::size_t s = 0; s < S; ++s) g[s] = static_cast<std::uint32_t>(s * L + j);
          end2 = b.all_reduce(end1, g, n / static_cast<double>(L), inter);
        }
        for (std::size_t s = 0; s < S; ++s) {
          ranks_t g(L);
          for (std::size_t j = 0; j < L; ++j) g[j] = static_cast<std::uint32_t>(s * L + j);
          end3 = mesh_inside ? b.mesh(end2, g, n, false) : b.ring(end2, g, n, false);
        }
        (void)end3;
        break;
      }
      b.all_reduce(0, all, n, algo);
      break;
    }
    case collective_op::reduce_scatter:
      if (algo == collective_algorithm::mesh) b.mesh(0, all, n, true);
      else if (algo == collective_algorithm::rhd) {
        const std::size_t pp = std::bit_floor(p);
        const ranks_t core(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(pp));
        std::size_t x = b.fold_in(0, all, pp, n, true);
        x = b.halving(x, core, n, true);
        b.fold_out(x, all, pp, n / static_cast<double>(p));
      } else b.ring(0, all, n, true);
      break;
    case collective_op::all_gather:
      if (algo == collective_algorithm::mesh) b.mesh(0, all, n, false);
      else if (algo == collective_algorithm::rhd) {
        const std::size_t pp = std::bit_floor(p);
        const ranks_t core(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(pp));
        std::size_t x = b.fold_in(0, all, pp, n / static_cast<double>(p), false);
        x = b.doubling(x, core, n);
        b.fold_out(x, all, pp, n);
      } else b.ring(0, all, n, false);
      break;
    case collective_op::broadcast: {
      const ranks_t r = rooted(p, root);
      if (algo == collective_algorithm::mesh) {
        // Scatter, then all-gather: every rank but the root still lacks p - 1 blocks after the
        // scatter, the root's own block among them, so the root sends it in the second step too
        // (without it, two ranks would move half the vector: faster than one link allows).
        for (std::size_t i = 1; i < p; ++i) b.add(0, r[0], r[i], n / static_cast<double>(p));
        for (std::size_t i = 0; i < p; ++i)
          for (std::size_t j = 1; j < p; ++j)
            if (i != j) b.add(1, r[i], r[j], n / static_cast<double>(p));
      } else {
        b.broadcast(0, r, n, algo);  // rhd: binomial tree; ring: chain
      }
      break;
    }
    case collective_op::reduce: {
      const ranks_t r = rooted(p, root);
      if (algo == collective_algorithm::mesh) {
        const std::size_t x = b.mesh(0, r, n, true);
        for (std::size_t i = 1; i < p; ++i) b.add(x, r[i], r[0], n / static_cast<double>(p));
      } else if (algo == collective_algorithm::rhd) {
        const std::size_t pp = std::bit_floor(p);
        const ranks_t core(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(pp));
        std::size_t x = b.fold_in(0, r, pp, n, true);
        x = b.halving(x, core, n, true);
        // Binomial gather of the shards to the root.
        for (std::size_t d = 1; d < pp; d *= 2, ++x)
          for (std::size_t i = d; i < pp; i += 2 * d)
            b.add(x, core[i], core[i - d], n * static_cast<double>(d) / static_cast<double>(pp));
      } else {  // chain ending at the root
        for (std::size_t i = 0; i + 1 < p; ++i) {
          b.add(i, r[p - 1 - i], r[(p - 2 - i)], n);
          b.reduce(i, n);
        }
      }
      break;
    }
    case collective_op::all_to_all:
    case collective_op::all_to_allv: {
      auto block = [&](std::size_t s, std::size_t d) {
        return block_bytes ? (*block_bytes)[s][d] : n / static_cast<double>(p);
      };
      if (algo == collective_algorithm::mesh) {
        for (std::size_t i = 0; i < p; ++i)
          for (std::size_t j = 0; j < p; ++j)
            if (i != j) b.add(0, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j), block(i, j));
      } else {  // pairwise exchange
        for (std::size_t s = 1; s < p; ++s)
          for (std::size_t i = 0; i < p; ++i)
            b.add(s - 1, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>((i + s) % p), block(i, (i + s) % p));
      }
      break;
    }
    default: break;
  }
  return ph;
}

}  // namespace npurt::sim
