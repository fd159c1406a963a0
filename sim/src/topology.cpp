// The interconnect of a preset as the collective engine sees it.
#include <npurt/sim/topology.hpp>

#include <algorithm>
#include <bit>
#include <map>

namespace npurt::sim {

copy_path peer_path(const preset& p, device_id a, device_id b) {
  copy_desc c;
  c.kind = memcpy_kind::device_to_device;
  c.src_device = a;
  c.dst_device = b;
  return path_of(p, task_kind::memcpy, c, engine_kind::copy_d2d);
}

bool full_mesh(const preset& p, std::span<const device_id> devices) {
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = i + 1; j < devices.size(); ++j)
      if (peer_path(p, devices[i], devices[j]).link != "hccs") return false;
  return devices.size() > 1;
}

double reduce_seconds_per_byte(const preset& p) noexcept {
  const double cores = p.separated_cores ? p.vector_core_count : p.ai_core_count;
  const double vector = cores * 256.0 * p.clock_hz;
  const double hbm = p.hbm_bandwidth / 3.0;
  return 1.0 / std::min(vector, hbm);
}

server_layout layout_of(const preset& p, std::span<const device_id> devices) {
  std::map<std::uint32_t, std::uint32_t> count;
  for (device_id d : devices) ++count[server_of(p, d)];
  server_layout l;
  l.servers = static_cast<std::uint32_t>(count.size());
  l.per_server = count.empty() ? 0 : count.begin()->second;
  for (auto& [s, c] : count)
    if (c != l.per_server) l.per_server = 0;
  // Ranks of one server must be consecutive for the hierarchical split.
  for (std::size_t i = 1; i < devices.size() && l.per_server != 0; ++i)
    if (i % l.per_server != 0 && server_of(p, devices[i]) != server_of(p, devices[i - 1])) l.per_server = 0;
  return l;
}

collective_algorithm choose_algorithm(const preset& p, std::span<const device_id> devices, collective_op op,
                                      std::size_t bytes) {
  const std::size_t n = devices.size();
  if (n <= 1 || op == collective_op::send || op == collective_op::recv) return collective_algorithm::ring;
  if (full_mesh(p, devices)) return collective_algorithm::mesh;
  const server_layout l = layout_of(p, devices);
  if (l.servers > 1 && l.per_server > 1) {
    if (op == collective_op::all_reduce) return collective_algorithm::hierarchical;
    // The other two-level schemes win outright when a server is one HCCS mesh (one intra step
    // instead of lg L or L-1). Inside a ring of HCCS groups joined over PCIe: all-gather and
    // reduce-scatter move the same bytes across servers as the flat recursive halving-doubling
    // (power-of-two p) in fewer steps there, but fewer steps than the flat ring (other p);
    // broadcast moves n/L instead of n across servers, worth its extra intra-server steps once
    // the message is bandwidth-bound.
    const bool mesh_inside = full_mesh(p, devices.first(l.per_server));
    if ((op == collective_op::all_gather || op == collective_op::reduce_scatter) &&
        (mesh_inside || !std::has_single_bit(n)))
      return collective_algorithm::hierarchical;
    if (op == collective_op::broadcast && (mesh_inside || bytes > 64 * 1024)) return collective_algorithm::hierarchical;
  }
  if (op == collective_op::all_to_all || op == collective_op::all_to_allv) return collective_algorithm::ring;
  const bool pow2 = std::has_single_bit(n);
  // Latency-bound messages take the log-step algorithm whatever the rank count.
  if (pow2 || bytes <= 64 * 1024) {
    if (pow2 || op == collective_op::all_reduce || op == collective_op::reduce || op == collective_op::broadcast ||
        op == collective_op::barrier)
      return collective_algorithm::rhd;
  }
  return collective_algorithm::ring;
}

}  // namespace npurt::sim
