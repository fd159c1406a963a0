// npurt/sim/backend.hpp — the simulator as an npurt::backend.
//
// Costs, so that the runtime's tests can compute expected times from the preset:
//  - kernels::fixed (task_info::kernel == nullptr): fixed.duration + kernel_launch_latency,
//    holding block_dim cores (0 = all) and no HBM bandwidth.
//  - a kernel descriptor: estimate(preset, k, cores).total alone; longer when other kernels or
//    on-device copies share the device's HBM at the same time (see device_model.hpp).
//  - memcpy/memset: copy_time(preset, kind, copy, engine) = latency + ceil(bytes / bandwidth) on
//    an uncontended path (path_of() says which link).
//  - control tasks: zero time (completed at the instant of submission).
//  - collectives: the collective engine (collective_engine.hpp).
#pragma once

#include <npurt/backend.hpp>
#include <npurt/sim/collective_engine.hpp>
#include <npurt/sim/cost_model.hpp>
#include <npurt/sim/device_model.hpp>
#include <npurt/sim/preset.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace npurt::sim {

class sim_backend final : public npurt::backend {
 public:
  explicit sim_backend(const preset& p, const sim_options& opts = {});

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] std::size_t device_count() const noexcept override { return props_.size(); }
  [[nodiscard]] const device_properties& properties(device_id dev) const override;
  /// The preset's interconnect: HCCS within a group of hccs_groups, PCIe between groups of one
  /// server, RoCE between servers (the paths device-to-device copies take).
  [[nodiscard]] link_properties link(device_id a, device_id b) const override;
  void attach(backend_host& host) override { model_.attach(host); }
  [[nodiscard]] std::error_code validate(device_id dev, const kernel_desc& k) const override;
  [[nodiscard]] std::error_code validate_fixed(device_id dev, std::uint32_t block_dim) const override;
  [[nodiscard]] std::string describe_invalid(device_id dev, const kernel_desc& k) const override;
  void submit(task_info& t) override { model_.submit(t); }
  void flush() override { model_.flush(); }
  void abort(device_id dev) override { model_.abort(dev); }
  bool cancel(task_info& t) override { return model_.cancel(t); }
  [[nodiscard]] bool functional() const noexcept override { return opts_.functional; }
  void abort_collectives(std::uint64_t comm) override { model_.collectives().abort(comm); }
  [[nodiscard]] std::string describe_waits() const override { return model_.collectives_describe(); }

  /// The breakdown of a finished kernel (until sim_options::explain_history later task ids), or
  /// nullopt (unknown id, forgotten, not a kernel descriptor, or a kernels::fixed launch).
  [[nodiscard]] std::optional<task_explanation> explain(std::uint64_t task_id) const { return model_.explain(task_id); }
  [[nodiscard]] const preset& config() const noexcept { return model_.config(); }
  [[nodiscard]] const sim_options& options() const noexcept { return opts_; }
  [[nodiscard]] device_model& model() noexcept { return model_; }

 private:
  std::string name_;
  sim_options opts_;
  std::vector<device_properties> props_;
  device_model model_;
  std::error_code ok_;  // a success, made once
};

/// The simulator behind a backend, or null when the backend is another one.
[[nodiscard]] inline sim_backend* as_sim(npurt::backend& b) noexcept { return dynamic_cast<sim_backend*>(&b); }

}  // namespace npurt::sim
