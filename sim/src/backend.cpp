// The simulator backend: validation in front of the device model.
#include <npurt/sim/backend.hpp>
#include <npurt/sim/topology.hpp>

#if __has_include(<npurt/sim/reference_kernels.hpp>)
#include <npurt/sim/reference_kernels.hpp>
#define NPURT_SIM_HAVE_REFERENCE 1
#else
#define NPURT_SIM_HAVE_REFERENCE 0
#endif

namespace npurt::sim {

namespace {
preset checked(const preset& p) {
  std::string what;
  if (auto ec = check(p, &what)) throw_error(ec, what);
  return p;
}
}  // namespace

sim_backend::sim_backend(const preset& p, const sim_options& opts)
    : name_("npurt-sim:" + p.name), opts_(opts), model_(checked(p), opts) {
  props_.assign(p.device_count, p.properties());
}

const device_properties& sim_backend::properties(device_id dev) const {
  if (dev < 0 || static_cast<std::size_t>(dev) >= props_.size())
    throw_error(make_error_code(errc::invalid_device), "device " + std::to_string(dev) + " does not exist");
  return props_[static_cast<std::size_t>(dev)];
}

link_properties sim_backend::link(device_id a, device_id b) const {
  const copy_path path = peer_path(config(), a, b);
  link_kind kind = link_kind::pcie;
  if (path.link == "hbm") kind = link_kind::same_device;
  if (path.link == "hccs") kind = link_kind::hccs;
  if (path.link == "roce") kind = link_kind::roce;
  return {kind, path.bandwidth, path.latency};
}

std::error_code sim_backend::validate(device_id dev, const kernel_desc& k) const {
  if (dev < 0 || static_cast<std::size_t>(dev) >= props_.size()) return make_error_code(errc::invalid_device);
#if NPURT_SIM_HAVE_REFERENCE
  if (auto ec = npurt::sim::validate(k)) return ec;
  if (!config().supports_bf16)
    for (const auto& o : operands(k.op))
      if (o.tensor->type == dtype::bf16) return make_error_code(errc::invalid_dtype);
#endif
  if (k.block_dim > core_pool(config(), k)) return make_error_code(errc::invalid_argument);
  return {};
}

std::error_code sim_backend::validate_fixed(device_id dev, std::uint32_t block_dim) const {
  if (dev < 0 || static_cast<std::size_t>(dev) >= props_.size()) return make_error_code(errc::invalid_device);
  // A kernels::fixed launch runs on the AI-core (cube) pool.
  if (block_dim > config().ai_core_count) return make_error_code(errc::invalid_argument);
  return ok_;  // a copy: building error_code{} is an out-of-line call, on every launch
}

std::string sim_backend::describe_invalid(device_id dev, const kernel_desc& k) const {
  if (dev < 0 || static_cast<std::size_t>(dev) >= props_.size())
    return "device " + std::to_string(dev) + " does not exist";
  if (k.block_dim > core_pool(config(), k))
    return "block_dim " + std::to_string(k.block_dim) + " exceeds the " + std::to_string(core_pool(config(), k)) +
           " cores this kernel can use on " + config().name;
#if NPURT_SIM_HAVE_REFERENCE
  std::string what;
  (void)npurt::sim::validate(k, &what);
  if (!what.empty()) return what;
  if (!config().supports_bf16)
    for (const auto& o : operands(k.op))
      if (o.tensor->type == dtype::bf16) return "bf16 operands are not supported by " + config().name;
#endif
  return {};
}

std::unique_ptr<npurt::backend> make_backend(const preset& p, const sim_options& opts) {
  return std::make_unique<sim_backend>(p, opts);
}

}  // namespace npurt::sim
