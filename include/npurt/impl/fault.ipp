// npurt/impl/fault.ipp
#pragma once

#include <npurt/fault.hpp>

#include <cmath>
#include <string>

namespace npurt {

NPURT_DECL std::error_code validate(const fault_plan& plan, std::size_t device_count, std::string* what) {
  auto bad = [&](std::size_t i, const fault_spec& f, std::string_view why) {
    if (what)
      *what =
          "fault plan: fault " + std::to_string(i) + " (" + std::string(to_string(f.kind)) + "): " + std::string(why);
    return make_error_code(errc::invalid_config);
  };
  for (std::size_t i = 0; i < plan.faults.size(); ++i) {
    const fault_spec& f = plan.faults[i];
    if (f.device < 0 || static_cast<std::size_t>(f.device) >= device_count)
      return bad(i, f, "device " + std::to_string(f.device) + " is not one of the " + std::to_string(device_count));
    if (f.trigger == fault_trigger::random && !(f.rate >= 0 && f.rate <= 1))
      return bad(i, f, "rate must be a probability in [0, 1]");
    if (f.trigger == fault_trigger::at_task && (f.stream == 0 || f.task == 0))
      return bad(i, f, "an at_task trigger needs a stream id and a 1-based task number");
    if (f.trigger == fault_trigger::at_time && f.at.time_since_epoch().count() < 0)
      return bad(i, f, "trigger time is negative");
    if (f.duration.count() < 0) return bad(i, f, "duration is negative");
    if (f.kind == fault_kind::thermal_throttle && !(std::isfinite(f.factor) && f.factor >= 1 && f.factor <= 1e6))
      return bad(i, f, "factor must be a finite slowdown in [1, 1e6]");
    if (f.kind == fault_kind::link_flap && f.period.count() <= 0) return bad(i, f, "a flap needs a positive period");
    if (f.kind == fault_kind::transient_oom && f.count == 0) return bad(i, f, "count must be at least 1");
    if (f.kind == fault_kind::network_interruption && f.server_size == 0)
      return bad(i, f, "server_size must be at least 1");
    if (f.kind == fault_kind::hbm_ecc && f.bytes != 0 && f.address + f.bytes < f.address)
      return bad(i, f, "region wraps around the address space");
  }
  return {};
}

}  // namespace npurt
