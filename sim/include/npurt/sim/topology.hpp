// npurt/sim/topology.hpp — the interconnect a preset describes, as the collective engine sees
// it: which link joins two devices and what it costs, which devices share a server or an HCCS
// full mesh, the cost of a local reduction, and HCCL's choice of algorithm.
#pragma once

#include <npurt/collective_types.hpp>
#include <npurt/sim/device_model.hpp>
#include <npurt/sim/preset.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace npurt::sim {

/// The link a peer transfer from a to b crosses (path_of for a device-to-device copy).
[[nodiscard]] copy_path peer_path(const preset& p, device_id a, device_id b);
[[nodiscard]] inline std::uint32_t server_of(const preset& p, device_id d) noexcept {
  return static_cast<std::uint32_t>(d) / p.server_size;
}
/// True when every pair of the devices is joined by a direct HCCS link.
[[nodiscard]] bool full_mesh(const preset& p, std::span<const device_id> devices);
/// Seconds per byte of a local reduction on one device (HCCL's gamma): the vector units read
/// two operands and write one, so the rate is the lower of the vector throughput (256 bytes
/// per cycle per vector core) and a third of the HBM bandwidth.
[[nodiscard]] double reduce_seconds_per_byte(const preset& p) noexcept;

/// How the devices of a communicator split into servers: `servers` groups of `per_server`
/// ranks each (ranks in rank order), or per_server == 0 when servers hold unequal counts.
struct server_layout {
  std::uint32_t servers = 0;
  std::uint32_t per_server = 0;
};
[[nodiscard]] server_layout layout_of(const preset& p, std::span<const device_id> devices);

/// The algorithm HCCL would use (docs/collectives.md): a full HCCS mesh -> mesh; several
/// servers with more than one rank each -> hierarchical (all_reduce always; all_gather and
/// reduce_scatter when a server is a full mesh or p is not a power of two; broadcast when a
/// server is a full mesh or the message exceeds 64 KiB); otherwise recursive
/// halving-doubling when the rank count is a power of two (or the message is small), ring
/// otherwise. Point-to-point operations report ring.
[[nodiscard]] collective_algorithm choose_algorithm(const preset& p, std::span<const device_id> devices,
                                                    collective_op op, std::size_t bytes);

}  // namespace npurt::sim
