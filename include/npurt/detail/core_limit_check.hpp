// npurt/detail/core_limit_check.hpp — what makes a core limit acceptable, for the device's and
// the stream's setters alike.
#pragma once

#include <npurt/backend.hpp>

#include <cstdint>
#include <string>

namespace npurt::detail {

/// Why `cores` cannot be a limit of `kind` on a device with properties `p` (errc::invalid_argument),
/// or empty when it can.
inline std::string core_limit_problem(const device_properties& p, core_kind kind, std::uint32_t cores) {
  if (kind != core_kind::cube && kind != core_kind::vector)
    return "unknown core_kind " + std::to_string(static_cast<unsigned>(kind));
  const std::uint32_t n = core_count(p, kind);
  if (cores != 0 && cores <= n) return {};
  return std::to_string(cores) + " " + std::string(to_string(kind)) + " cores, where the device has " +
         std::to_string(n) + " (a limit is 1 core or more, up to the device's count)";
}

}  // namespace npurt::detail
