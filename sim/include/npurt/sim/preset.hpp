// npurt/sim/preset.hpp — the hardware a simulated device is: every parameter the device model
// and the cost model read, as plain data.
//
// A preset is data, not code. The two built-ins (ascend910, ascend910b) are also shipped as INI
// files (sim/presets/*.ini) laid out like CANN's platform_config/<SoC>.ini: [SoCInfo],
// [AICoreSpec], [AICoreMemoryRates], [Memory], [Interconnect], [Runtime]. load_preset() reads
// such a file with Boost.PropertyTree, to_ini() writes one, preset_keys() lists what a preset
// holds, and get_value()/set_value() read and change one parameter by its "Section.key" name.
//
// Units in the struct are SI (bytes, bytes per second, picoseconds, Hz); units in the INI file
// are the ones a datasheet uses (MHz, GB/s = 1e9 bytes/s, ns), named in each key's description.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/error.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace npurt::sim {

/// What the simulator supports: presets beyond these are rejected before anything is allocated.
inline constexpr std::uint32_t max_device_count = 65536;          ///< devices in one system
inline constexpr std::uint32_t max_core_count = 1024;             ///< AI cores per device (vector: twice)
inline constexpr std::uint64_t max_memory_bytes = 1ull << 40;     ///< HBM per device (1 TiB)

/// Every hardware parameter of one server of identical simulated devices.
struct preset {
  // [SoCInfo]
  std::string name = "custom";          // short name, e.g. "ascend910"
  std::string soc_version = "custom";   // CANN SoC version, e.g. "Ascend910A"
  std::uint32_t ai_core_count = 1;      // cores with a cube unit (AIC on separated parts)
  std::uint32_t vector_core_count = 1;  // cores with a vector unit (== ai_core_count when coupled)
  bool separated_cores = false;         // 910B-style: cube kernels run on AIC, vector kernels on AIV
  bool supports_bf16 = false;           // cube and vector accept BF16
  std::uint64_t memory_bytes = 0;       // HBM capacity
  std::uint64_t l2_bytes = 0;           // shared L2 (caches HBM for all cores)

  // [AICoreSpec]
  double clock_hz = 1e9;                // AI core clock
  std::uint32_t cube_m = 16;            // cube fractal M x N x K for FP16/BF16: one fractal per cycle
  std::uint32_t cube_n = 16;
  std::uint32_t cube_k = 16;
  std::uint32_t cube_k_int8 = 32;       // K of one INT8 fractal (16x32x16: twice the FP16 MACs)
  std::uint32_t cube_k_fp32 = 8;        // K of one FP32 fractal (16x8x16: half the FP16 MACs)
  std::uint32_t vector_lanes = 128;     // FP16 elements per vector cycle (FP32: half, INT8: twice)
  std::uint64_t l0a_bytes = 0;
  std::uint64_t l0b_bytes = 0;
  std::uint64_t l0c_bytes = 0;
  std::uint64_t l1_bytes = 0;
  std::uint64_t ub_bytes = 0;

  // [AICoreMemoryRates]: bytes per core cycle, per core
  double ddr_rate = 0;                  // GM (HBM) <-> core through MTE2/MTE3, the core's port
  double l2_rate = 0;                   // GM reads that hit L2
  double l1_to_l0a_rate = 0;            // MTE1 L1 -> L0A (img2col included)
  double l1_to_l0b_rate = 0;            // MTE1 L1 -> L0B
  double l0c_to_out_rate = 0;           // L0C -> out (910: via UB; 910B: FixPipe)
  double ub_to_gm_rate = 0;             // MTE3 UB -> GM

  // [Memory]
  double hbm_bandwidth = 0;             // bytes/s, whole chip, shared by every consumer
  double d2d_bandwidth = 0;             // bytes/s of an on-device copy (reads and writes HBM)
  picoseconds d2d_latency{0};           // on-device DMA setup (copies and memsets)
  double host_memcpy_bandwidth = 0;     // bytes/s of a host-to-host copy
  picoseconds host_memcpy_latency{0};

  // [Interconnect]
  std::uint32_t device_count = 1;
  std::uint32_t server_size = 8;        // devices per server; servers talk over RoCE
  double pcie_bandwidth = 0;            // bytes/s per direction, device <-> host
  picoseconds pcie_latency{0};
  double hccs_bandwidth = 0;            // bytes/s per direction per HCCS link
  picoseconds hccs_latency{0};
  /// HCCS full-mesh groups: devices in one group have a direct link to each other; devices of a
  /// server in different groups talk through the PCIe switch. Empty: no HCCS.
  std::vector<std::vector<device_id>> hccs_groups;
  double roce_bandwidth = 0;            // bytes/s per direction of each device's RoCE port
  picoseconds roce_latency{0};
  // HCCL's documented defaults for a communicator's timeouts (HCCL_CONNECT_TIMEOUT,
  // HCCL_EXEC_TIMEOUT; 1836 s is 27 x 68 s, the Atlas training granularity).
  picoseconds hccl_connect_timeout{120LL * 1'000'000'000'000LL};
  picoseconds hccl_exec_timeout{1836LL * 1'000'000'000'000LL};

  // [Runtime]
  picoseconds kernel_launch_latency{0}; // on-device: task scheduler picks a kernel -> cores start
  std::uint32_t pipeline_fill_cycles = 0;  // per kernel per core: scalar setup, icache, first sync
  std::uint32_t instr_issue_cycles = 0;    // per instruction the scalar unit issues to a unit queue
  std::uint32_t copy_engine_channels = 1;  // concurrent copies per copy engine (H2D, D2H, D2D)
  // The per-task watchdog of kernels and copies (aclrtSetOpExecuteTimeOut); 0 = never. CANN's
  // defaults: 68 s for AI cores on Atlas training (910), 1091 s on A2/A3.
  picoseconds op_execute_timeout{68LL * 1'000'000'000'000LL};

  friend bool operator==(const preset&, const preset&) = default;

  /// FP16 cube FLOP per cycle per core (2 * M * N * K).
  [[nodiscard]] double cube_flops_per_cycle() const noexcept { return 2.0 * cube_m * cube_n * cube_k; }
  /// Whole-chip FP16 peak, FLOP/s.
  [[nodiscard]] double peak_fp16_flops() const noexcept { return cube_flops_per_cycle() * ai_core_count * clock_hz; }
  /// The device properties the runtime shows for this preset.
  [[nodiscard]] device_properties properties() const;
};

/// Checks that a preset is usable: every numeric key inside its documented range
/// (preset_keys(): min..max in the file's unit; NaN, infinities and denormals are outside), the
/// relations between keys (coupled cores, L0 holds two fractals, L1 >= L0A), and the HCCS
/// groups (inside the device count, no device twice, one server per group).
/// errc::invalid_config; `what` names the key.
[[nodiscard]] std::error_code check(const preset& p, std::string* what = nullptr);

namespace presets {
/// Ascend 910 (910A): 32 coupled Da Vinci cores at 1 GHz, 32 GB HBM at 1.2 TB/s; a server of
/// two 4-device HCCS full-mesh groups joined over PCIe. `devices` from 1 to max_device_count
/// (npurt::caller_error, errc::invalid_config, otherwise).
[[nodiscard]] preset ascend910(int devices = 1);
/// Ascend 910B (910B2): 24 AIC + 48 AIV at 1.8 GHz, 64 GB HBM; an 8-device HCCS full mesh.
[[nodiscard]] preset ascend910b(int devices = 1);
/// A built-in preset by name ("ascend910", "ascend910b"); errc::invalid_config otherwise.
[[nodiscard]] preset by_name(std::string_view name, int devices = 1);
}  // namespace presets

/// One parameter of a preset as the INI file names it.
struct preset_key {
  std::string_view section;      // "AICoreSpec"
  std::string_view key;          // "l0_c_size"
  std::string_view unit;         // "bytes", "MHz", "GB/s", "ns", ...
  std::string_view description;
  /// Numbers only: the valid range, inclusive, in `unit` (latencies also accept 0).
  bool numeric = false;
  double min = 0;
  double max = 0;
  [[nodiscard]] std::string path() const { return std::string(section) + "." + std::string(key); }
};

/// Every parameter, in file order.
[[nodiscard]] const std::vector<preset_key>& preset_keys();
/// The value of "Section.key" (or just "key" when unambiguous) as the INI file writes it.
[[nodiscard]] std::string get_value(const preset& p, std::string_view key);
/// Sets "Section.key" from its INI text. errc::invalid_config (unknown key) or
/// errc::parse_error (bad value); `what` explains. The preset is unchanged on error.
std::error_code set_value(preset& p, std::string_view key, std::string_view value, std::string* what = nullptr);

/// Parses INI text (at most 1 MiB). Every key must be present unless [SoCInfo] has `base = <built-in name>`,
/// in which case missing keys keep the base's values; unknown keys are errors. Errors are
/// errc::parse_error (syntax, bad value) or errc::invalid_config (missing/unknown key, a value
/// out of range); `what` names the key and the line.
[[nodiscard]] preset parse_preset(std::string_view ini_text, std::error_code& ec, std::string* what = nullptr);
/// Throwing overload: npurt::caller_error with the message.
[[nodiscard]] preset parse_preset(std::string_view ini_text);
[[nodiscard]] preset load_preset(const std::filesystem::path& file, std::error_code& ec, std::string* what = nullptr);
[[nodiscard]] preset load_preset(const std::filesystem::path& file);
/// The preset as an INI file that parse_preset reads back to an equal preset.
[[nodiscard]] std::string to_ini(const preset& p);

/// Options of the simulator backend.
struct sim_options {
  /// Kernels with data compute real results (reference implementations) when they start.
  bool functional = true;
  /// explain() remembers a finished kernel until this many later task ids have been issued.
  std::size_t explain_history = 1u << 14;
};

/// The simulator as an npurt::backend; npurt::system's constructor finds it by ADL from a
/// preset. The returned object is a npurt::sim::sim_backend (see sim/backend.hpp).
[[nodiscard]] std::unique_ptr<npurt::backend> make_backend(const preset& p, const sim_options& opts = {});

}  // namespace npurt::sim
