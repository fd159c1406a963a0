// Shared by the collective tests: presets with a known interconnect, and a driver.
#pragma once

#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <string>
#include <vector>

namespace coll_test {

/// Every device its own server: every peer transfer crosses RoCE (one port per device).
inline npurt::sim::preset roce_preset(int devices) {
  auto p = npurt::sim::presets::ascend910(devices);
  p.server_size = 1;
  p.hccs_groups.clear();
  return p;
}

/// One server whose devices form one HCCS full mesh.
inline npurt::sim::preset mesh_preset(int devices) {
  auto p = npurt::sim::presets::ascend910(devices);
  p.server_size = static_cast<std::uint32_t>(devices);
  p.hccs_groups.assign(1, {});
  for (int d = 0; d < devices; ++d) p.hccs_groups[0].push_back(d);
  return p;
}

/// Servers of `per_server` devices in one HCCS full mesh each, joined over RoCE.
inline npurt::sim::preset cluster_preset(int servers, int per_server) {
  auto p = npurt::sim::presets::ascend910(servers * per_server);
  p.server_size = static_cast<std::uint32_t>(per_server);
  p.hccs_groups.clear();
  for (int s = 0; s < servers; ++s) {
    p.hccs_groups.emplace_back();
    for (int d = 0; d < per_server; ++d) p.hccs_groups.back().push_back(s * per_server + d);
  }
  return p;
}

inline npurt::sim::sim_options timing_only() {
  npurt::sim::sim_options o;
  o.functional = false;
  return o;
}

/// The words of the caller_error `f` throws, or "no error".
template <class F>
std::string caller_words(F&& f) {
  try {
    f();
  } catch (const npurt::caller_error& e) { return e.what(); }
  return "no error";
}

}  // namespace coll_test
