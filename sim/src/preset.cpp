// Hardware presets: the built-ins, and the INI reader/writer driven by one key table so that
// parsing, writing, listing and get/set can never disagree about a key.
#include <npurt/sim/preset.hpp>

#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>

namespace npurt::sim {

namespace {

// Presets are a few kilobytes; anything far larger is not one.
constexpr std::size_t max_preset_bytes = 1 << 20;

std::vector<std::vector<device_id>> chunked_groups(int devices, int group) {
  std::vector<std::vector<device_id>> g;
  for (int d = 0; d < devices; d += group) {
    std::vector<device_id> one;
    for (int i = d; i < std::min(devices, d + group); ++i) one.push_back(i);
    g.push_back(std::move(one));
  }
  return g;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::string fmt_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back exactly
  return std::string(buf, r.ptr);
}

bool parse_double(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty()) return false;
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  s = trim(s);
  if (s.empty()) return false;
  std::uint64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size()) return false;
  out = v;
  return true;
}

std::string fmt_groups(const std::vector<std::vector<device_id>>& groups) {
  std::string s;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (g) s += ';';
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      if (i) s += ',';
      s += std::to_string(groups[g][i]);
    }
  }
  return s;
}

// "0,1,2,3;4-7" -> {{0,1,2,3},{4,5,6,7}}. Empty text: no groups.
bool parse_groups(std::string_view s, std::vector<std::vector<device_id>>& out) {
  std::vector<std::vector<device_id>> groups;
  std::uint64_t total = 0;
  s = trim(s);
  if (s.empty()) {
    out.clear();
    return true;
  }
  while (true) {
    auto semi = s.find(';');
    std::string_view g = trim(s.substr(0, semi));
    std::vector<device_id> one;
    while (!g.empty()) {
      auto comma = g.find(',');
      std::string_view item = trim(g.substr(0, comma));
      auto dash = item.find('-');
      std::uint64_t a = 0, b = 0;
      if (dash == std::string_view::npos) {
        if (!parse_u64(item, a)) return false;
        b = a;
      } else if (!parse_u64(item.substr(0, dash), a) || !parse_u64(item.substr(dash + 1), b) || b < a) {
        return false;
      }
      // Device ids stay below max_device_count, and the lists of all groups together hold at
      // most that many entries: a huge range is refused before anything is allocated.
      if (b >= max_device_count || total + (b - a + 1) > max_device_count) return false;
      total += b - a + 1;
      for (auto d = a; d <= b; ++d) one.push_back(static_cast<device_id>(d));
      if (comma == std::string_view::npos) break;
      g.remove_prefix(comma + 1);
    }
    if (one.empty()) return false;
    groups.push_back(std::move(one));
    if (semi == std::string_view::npos) break;
    s.remove_prefix(semi + 1);
  }
  out = std::move(groups);
  return true;
}

// One row of the key table: how to print and parse one field, and for numbers the value in
// the file's unit (check() compares it with info.min and info.max).
struct key_entry {
  preset_key info;
  std::function<std::string(const preset&)> get;
  std::function<bool(preset&, std::string_view)> set;  // false: bad value text
  std::function<double(const preset&)> number;          // null for text, bool and lists
};

preset_key numeric(std::string_view sec, std::string_view key, std::string_view unit, std::string_view desc, double min,
                   double max) {
  preset_key k{sec, key, unit, desc};
  k.numeric = true;
  k.min = min;
  k.max = max;
  return k;
}

template <class T>
key_entry str_key(std::string_view sec, std::string_view key, std::string_view desc, T preset::* m) {
  return {{sec, key, "text", desc},
          [m](const preset& p) { return std::string(p.*m); },
          [m](preset& p, std::string_view v) {
            v = trim(v);
            if (v.empty() || v.find('\0') != std::string_view::npos) return false;  // see check()
            p.*m = std::string(v);
            return true;
          },
          {}};
}

key_entry bool_key(std::string_view sec, std::string_view key, std::string_view desc, bool preset::* m) {
  return {{sec, key, "bool", desc},
          [m](const preset& p) { return std::string(p.*m ? "true" : "false"); },
          [m](preset& p, std::string_view v) {
            v = trim(v);
            if (v == "true" || v == "1") p.*m = true;
            else if (v == "false" || v == "0") p.*m = false;
            else return false;
            return true;
          },
          {}};
}

template <class T>
key_entry int_key(std::string_view sec, std::string_view key, std::string_view unit, std::string_view desc,
                  T preset::* m, double min, double max) {
  return {numeric(sec, key, unit, desc, min, max), [m](const preset& p) { return std::to_string(p.*m); },
          [m](preset& p, std::string_view v) {
            std::uint64_t x = 0;
            if (!parse_u64(v, x) || x > std::numeric_limits<T>::max()) return false;
            p.*m = static_cast<T>(x);
            return true;
          },
          [m](const preset& p) { return static_cast<double>(p.*m); }};
}

// A double stored in SI, written in the file divided by `scale` (MHz, GB/s); min and max are in
// the file's unit.
key_entry real_key(std::string_view sec, std::string_view key, std::string_view unit, std::string_view desc,
                   double preset::* m, double scale, double min, double max) {
  return {numeric(sec, key, unit, desc, min, max), [m, scale](const preset& p) { return fmt_double(p.*m / scale); },
          [m, scale](preset& p, std::string_view v) {
            double x = 0;
            if (!parse_double(v, x)) return false;
            p.*m = x * scale;
            return true;
          },
          [m, scale](const preset& p) { return p.*m / scale; }};
}

// Picoseconds, written in ns: 0, or from 1 ps (0.001 ns) to `max_ns` (1 s unless told). A
// smaller positive value (a denormal, say) would round to 0 silently, so it is a bad value rather
// than 0.
key_entry ns_key(std::string_view sec, std::string_view key, std::string_view desc, picoseconds preset::* m,
                 double max_ns = 1e9) {
  return {numeric(sec, key, "ns", desc, 0, max_ns),
          [m](const preset& p) { return fmt_double(static_cast<double>((p.*m).count()) / 1000.0); },
          [m, max_ns](preset& p, std::string_view v) {
            double x = 0;
            if (!parse_double(v, x) || x < 0 || (x > 0 && x < 1e-3) || x > max_ns) return false;
            p.*m = picoseconds{static_cast<std::int64_t>(std::llround(x * 1000.0))};
            return true;
          },
          [m](const preset& p) { return static_cast<double>((p.*m).count()) / 1000.0; }};
}

const std::vector<key_entry>& table() {
  static const std::vector<key_entry> t = [] {
    std::vector<key_entry> v;
    const double mhz = 1e6, gbs = 1e9, gib = 1 << 30;
    v.push_back(str_key("SoCInfo", "name", "short preset name", &preset::name));
    v.push_back(str_key("SoCInfo", "soc_version", "CANN SoC version", &preset::soc_version));
    v.push_back(int_key("SoCInfo", "ai_core_cnt", "cores", "cores with a cube unit (AIC when separated)",
                        &preset::ai_core_count, 1, max_core_count));
    v.push_back(int_key("SoCInfo", "vector_core_cnt", "cores", "cores with a vector unit (AIV when separated)",
                        &preset::vector_core_count, 1, 2 * max_core_count));
    v.push_back(bool_key("SoCInfo", "separated_cores",
                         "true: cube kernels run on AIC, vector kernels on AIV (910B); false: coupled (910)",
                         &preset::separated_cores));
    v.push_back(bool_key("SoCInfo", "bf16_supported", "cube and vector units accept BF16", &preset::supports_bf16));
    v.push_back(
        int_key("SoCInfo", "memory_size", "bytes", "HBM capacity", &preset::memory_bytes, 1 << 20, max_memory_bytes));
    v.push_back(int_key("SoCInfo", "l2_size", "bytes", "shared L2 cache", &preset::l2_bytes, 0, max_memory_bytes));
    v.push_back(real_key("AICoreSpec", "cube_freq", "MHz", "AI core clock", &preset::clock_hz, mhz, 1, 1e5));
    v.push_back(int_key("AICoreSpec", "cube_m_size", "elements", "cube fractal M", &preset::cube_m, 1, 256));
    v.push_back(int_key("AICoreSpec", "cube_n_size", "elements", "cube fractal N", &preset::cube_n, 1, 256));
    v.push_back(int_key("AICoreSpec", "cube_k_size", "elements", "cube fractal K for FP16/BF16 (one fractal per cycle)",
                        &preset::cube_k, 1, 256));
    v.push_back(
        int_key("AICoreSpec", "cube_k_size_int8", "elements", "cube fractal K for INT8", &preset::cube_k_int8, 1, 512));
    v.push_back(
        int_key("AICoreSpec", "cube_k_size_fp32", "elements", "cube fractal K for FP32", &preset::cube_k_fp32, 1, 256));
    v.push_back(int_key("AICoreSpec", "vec_calc_size", "elements/cycle", "FP16 vector lanes (FP32 half, INT8 double)",
                        &preset::vector_lanes, 2, 65536));
    v.push_back(int_key("AICoreSpec", "l0_a_size", "bytes", "L0A buffer per core", &preset::l0a_bytes, 1, gib));
    v.push_back(int_key("AICoreSpec", "l0_b_size", "bytes", "L0B buffer per core", &preset::l0b_bytes, 1, gib));
    v.push_back(int_key("AICoreSpec", "l0_c_size", "bytes", "L0C buffer per core (FP32 accumulators)",
                        &preset::l0c_bytes, 1, gib));
    v.push_back(int_key("AICoreSpec", "l1_size", "bytes", "L1 buffer per core", &preset::l1_bytes, 1, gib));
    v.push_back(
        int_key("AICoreSpec", "ub_size", "bytes", "unified buffer per (vector) core", &preset::ub_bytes, 1, gib));
    v.push_back(real_key("AICoreMemoryRates", "ddr_rate", "bytes/cycle",
                         "per-core GM port (MTE2 reads, MTE3 writes) to HBM", &preset::ddr_rate, 1, 1e-3, 1e6));
    v.push_back(real_key("AICoreMemoryRates", "l2_rate", "bytes/cycle", "per-core GM reads that hit L2",
                         &preset::l2_rate, 1, 1e-3, 1e6));
    v.push_back(real_key("AICoreMemoryRates", "l1_to_l0_a_rate", "bytes/cycle", "MTE1 L1 -> L0A",
                         &preset::l1_to_l0a_rate, 1, 1e-3, 1e6));
    v.push_back(real_key("AICoreMemoryRates", "l1_to_l0_b_rate", "bytes/cycle", "MTE1 L1 -> L0B",
                         &preset::l1_to_l0b_rate, 1, 1e-3, 1e6));
    v.push_back(real_key("AICoreMemoryRates", "l0_c_to_out_rate", "bytes/cycle",
                         "L0C -> output (via UB on 910, FixPipe on 910B)", &preset::l0c_to_out_rate, 1, 1e-3, 1e6));
    v.push_back(real_key("AICoreMemoryRates", "ub_to_gm_rate", "bytes/cycle", "MTE3 UB -> GM", &preset::ub_to_gm_rate,
                         1, 1e-3, 1e6));
    v.push_back(real_key("Memory", "hbm_bandwidth", "GB/s",
                         "HBM bandwidth of the chip, shared by all kernels and on-device copies",
                         &preset::hbm_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(real_key("Memory", "d2d_bandwidth", "GB/s",
                         "on-device copy rate (each byte is read and written: 2 bytes of HBM traffic)",
                         &preset::d2d_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(ns_key("Memory", "d2d_latency", "on-device DMA setup per copy or memset", &preset::d2d_latency));
    v.push_back(real_key("Memory", "host_memcpy_bandwidth", "GB/s", "host-to-host copy rate",
                         &preset::host_memcpy_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(ns_key("Memory", "host_memcpy_latency", "host-to-host copy setup", &preset::host_memcpy_latency));
    v.push_back(int_key("Interconnect", "device_count", "devices", "devices in the system", &preset::device_count, 1,
                        max_device_count));
    v.push_back(int_key("Interconnect", "server_size", "devices", "devices per server (servers are joined by RoCE)",
                        &preset::server_size, 1, max_device_count));
    v.push_back(real_key("Interconnect", "pcie_bandwidth", "GB/s", "host link bandwidth per direction",
                         &preset::pcie_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(ns_key("Interconnect", "pcie_latency", "host link latency per transfer", &preset::pcie_latency));
    v.push_back(real_key("Interconnect", "hccs_bandwidth", "GB/s", "HCCS bandwidth per link per direction",
                         &preset::hccs_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(ns_key("Interconnect", "hccs_latency", "HCCS latency per transfer", &preset::hccs_latency));
    {
      key_entry groups{{"Interconnect", "hccs_groups", "device lists",
                        "HCCS full-mesh groups: ';' between groups, ',' or a-b inside"},
                       [](const preset& p) { return fmt_groups(p.hccs_groups); },
                       [](preset& p, std::string_view s) { return parse_groups(s, p.hccs_groups); },
                       {}};
      v.push_back(std::move(groups));
    }
    v.push_back(real_key("Interconnect", "roce_bandwidth", "GB/s", "RoCE port bandwidth per direction per device",
                         &preset::roce_bandwidth, gbs, 1e-3, 1e6));
    v.push_back(ns_key("Interconnect", "roce_latency", "RoCE latency per transfer", &preset::roce_latency));
    v.push_back(ns_key("Interconnect", "hccl_connect_timeout",
                       "a communicator's default connect timeout (HCCL_CONNECT_TIMEOUT), 0 = never",
                       &preset::hccl_connect_timeout, 7200e9));
    v.push_back(ns_key("Interconnect", "hccl_exec_timeout",
                       "a communicator's default execution timeout (HCCL_EXEC_TIMEOUT), 0 = never",
                       &preset::hccl_exec_timeout, 17340e9));
    v.push_back(ns_key("Runtime", "kernel_launch_latency",
                       "on-device kernel launch: task scheduler dispatch to cores running",
                       &preset::kernel_launch_latency));
    v.push_back(int_key("Runtime", "pipeline_fill_cycles", "cycles",
                        "per kernel per core: scalar setup and instruction fetch before the first tile",
                        &preset::pipeline_fill_cycles, 0, 1e9));
    v.push_back(int_key("Runtime", "instr_issue_cycles", "cycles",
                        "issue latency of each instruction the scalar unit dispatches", &preset::instr_issue_cycles, 0,
                        1e6));
    v.push_back(int_key("Runtime", "copy_engine_channels", "copies",
                        "concurrent copies per copy engine (H2D, D2H, D2D)", &preset::copy_engine_channels, 1, 1024));
    v.push_back(ns_key("Runtime", "op_execute_timeout",
                       "per-task watchdog of kernels and copies (aclrtSetOpExecuteTimeOut), 0 = never",
                       &preset::op_execute_timeout, 17340e9));
    return v;
  }();
  return t;
}

const key_entry* find_key(std::string_view name) {
  const key_entry* found = nullptr;
  int matches = 0;
  for (const auto& e : table()) {
    if (e.info.path() == name) return &e;
    if (e.info.key == name) {
      found = &e;
      ++matches;
    }
  }
  return matches == 1 ? found : nullptr;
}

// Where `key` sits in `text` (1-based line), for messages; the section header's line when the
// key is absent; 0 when neither is there.
std::size_t line_of(std::string_view text, std::string_view section, std::string_view key) {
  std::size_t line = 0, section_line = 0;
  std::string_view current;
  while (!text.empty()) {
    ++line;
    auto nl = text.find('\n');
    std::string_view l = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (l.empty() || l.front() == ';' || l.front() == '#') continue;
    if (l.front() == '[') {
      auto close = l.find(']');
      current = trim(l.substr(1, close == std::string_view::npos ? l.size() - 1 : close - 1));
      if (current == section && section_line == 0) section_line = line;
      continue;
    }
    auto eq = l.find('=');
    if (current == section && !key.empty() && trim(l.substr(0, eq)) == key) return line;
  }
  return section_line;
}

// Text from the file in a message: at most a 64-byte prefix, so a huge name stays readable.
std::string shown(std::string_view v) {
  // Control bytes (a NUL above all) are written as \xNN: a message is text, and a NUL in it
  // would end it early wherever it becomes a C string.
  std::string out;
  for (const char c : v.substr(0, 64)) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f) {
      out += c;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(b));
    out += buf;
  }
  return out + (v.size() > 64 ? "..." : "");
}

// "bad value 'x' for Section.key (unit, from min to max)": at most a prefix of the value.
std::string bad_value(const key_entry& e, std::string_view v) {
  v = trim(v);
  std::string m = "bad value '" + shown(v) + "' for " + e.info.path() + " (" + std::string(e.info.unit);
  if (e.info.numeric) {
    m += ", from " + fmt_double(e.info.min) + " to " + fmt_double(e.info.max);
    if (e.info.min == 0 && e.info.unit == "ns") m += "; 0 or at least 0.001";
  }
  if (e.info.unit == "text" && v.find('\0') != std::string_view::npos) m += "; a NUL byte is not text";
  return m + ")";
}

// Boost's reader says "duplicate key name" without the name: read it from the line.
std::string duplicate_name(std::string_view text, std::size_t line_no, const std::string& message) {
  if (message.find("duplicate") == std::string::npos || line_no == 0) return {};
  std::string_view current, l;
  for (std::size_t n = 1; n <= line_no && !text.empty(); ++n) {
    const auto nl = text.find('\n');
    l = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (n < line_no && !l.empty() && l.front() == '[') {
      const auto close = l.find(']');
      current = trim(l.substr(1, close == std::string_view::npos ? l.size() - 1 : close - 1));
    }
  }
  if (!l.empty() && l.front() == '[') {
    const auto close = l.find(']');
    return " [" + shown(trim(l.substr(1, close == std::string_view::npos ? l.size() - 1 : close - 1))) + "]";
  }
  return " " + shown(current) + "." + shown(trim(l.substr(0, l.find('='))));
}

std::string at_line(std::size_t line) { return line ? " (line " + std::to_string(line) + ")" : ""; }

}  // namespace

device_properties preset::properties() const {
  device_properties d;
  d.name = name;
  d.soc = soc_version;
  d.ai_core_count = ai_core_count;
  d.vector_core_count = vector_core_count;
  d.separated_cores = separated_cores;
  d.clock_hz = clock_hz;
  d.memory_bytes = static_cast<std::size_t>(memory_bytes);
  d.hbm_bandwidth = hbm_bandwidth;
  d.l2_bytes = static_cast<std::size_t>(l2_bytes);
  d.host_link_bandwidth = pcie_bandwidth;
  d.host_link_latency = pcie_latency;
  d.peer_link_bandwidth = hccs_bandwidth;
  d.peer_link_latency = hccs_latency;
  d.cube_flops_per_cycle = cube_flops_per_cycle();
  d.peak_fp16_flops = peak_fp16_flops();
  d.bf16_supported = supports_bf16;
  d.hccl_connect_timeout = hccl_connect_timeout;
  d.hccl_exec_timeout = hccl_exec_timeout;
  d.op_execute_timeout = op_execute_timeout;
  return d;
}

std::error_code check(const preset& p, std::string* what) {
  auto bad = [&](std::string_view key, std::string_view why) {
    if (what) *what = "preset '" + shown(p.name) + "': " + std::string(key) + " " + std::string(why);
    return make_error_code(errc::invalid_config);
  };
  // Ranges first: everything below (and the simulator) may then compute with the values.
  for (const auto& e : table()) {
    if (!e.number) continue;
    const double v = e.number(p);
    if (!(v >= e.info.min && v <= e.info.max))  // false for NaN too
      return bad(e.info.path(), "must be in [" + fmt_double(e.info.min) + ", " + fmt_double(e.info.max) + "] " +
                                    std::string(e.info.unit) + ", got " + fmt_double(v));
  }
  // Names end up in C strings (device_properties::name, as aclrtGetSocName returns it), trace
  // files and messages: a NUL byte would cut each of them short somewhere else.
  for (const auto& e : table())
    if (e.info.unit == "text")
      if (const std::size_t at = e.get(p).find('\0'); at != std::string::npos)
        return bad(e.info.path(), "holds a NUL byte (at byte " + std::to_string(at) + ")");
  if (!p.separated_cores && p.vector_core_count != p.ai_core_count)
    return bad("SoCInfo.vector_core_cnt", std::to_string(p.vector_core_count) + " must equal SoCInfo.ai_core_cnt " +
                                              std::to_string(p.ai_core_count) +
                                              " when cores are coupled (SoCInfo.separated_cores = false)");
  // The least step of the cube's pipeline, double buffered: two A fractals (cube_m x k) in L0A,
  // two B fractals (k x cube_n) in L0B, both pairs staged in L1, for the K (and element size) of
  // every dtype the cube takes. A preset without room for it could run no GEMM at all.
  struct cube_type {
    const char* name;
    const char* k_key;
    std::uint64_t k, bytes;
  };
  const cube_type types[] = {{"FP16", "cube_k_size", p.cube_k, 2},
                             {"FP32", "cube_k_size_fp32", p.cube_k_fp32, 4},
                             {"INT8", "cube_k_size_int8", p.cube_k_int8, 1}};
  for (const auto& t : types) {
    const std::uint64_t a = t.k * t.bytes * p.cube_m, b = t.k * t.bytes * p.cube_n;
    const std::string per_k =
        " x " + std::string(t.k_key) + " " + std::to_string(t.k) + " x " + std::to_string(t.bytes) + " bytes = ";
    if (p.l0a_bytes < 2 * a)
      return bad("AICoreSpec.l0_a_size", "must hold two " + std::string(t.name) + " fractals: 2 x cube_m_size " +
                                             std::to_string(p.cube_m) + per_k + std::to_string(2 * a) + " bytes");
    if (p.l0b_bytes < 2 * b)
      return bad("AICoreSpec.l0_b_size", "must hold two " + std::string(t.name) + " fractals: 2 x cube_n_size " +
                                             std::to_string(p.cube_n) + per_k + std::to_string(2 * b) + " bytes");
    if (p.l1_bytes < 2 * (a + b))
      return bad("AICoreSpec.l1_size", "must hold two " + std::string(t.name) +
                                           " fractals of A and two of B: 2 x (cube_m_size " + std::to_string(p.cube_m) +
                                           " + cube_n_size " + std::to_string(p.cube_n) + ")" + per_k +
                                           std::to_string(2 * (a + b)) + " bytes");
  }
  if (p.l0c_bytes < 2ull * p.cube_m * p.cube_n * 4) return bad("AICoreSpec.l0_c_size", "must hold two FP32 fractals");
  if (p.l1_bytes < p.l0a_bytes) return bad("AICoreSpec.l1_size", "must be >= l0_a_size");
  if (p.ub_bytes < 4096) return bad("AICoreSpec.ub_size", "must be >= 4096");
  std::set<device_id> seen;
  for (const auto& g : p.hccs_groups) {
    if (g.empty()) return bad("Interconnect.hccs_groups", "has an empty group");
    for (auto d : g) {
      if (d < 0 || static_cast<std::uint32_t>(d) >= p.device_count)
        return bad("Interconnect.hccs_groups", "names device " + std::to_string(d) + " outside device_count");
      if (!seen.insert(d).second)
        return bad("Interconnect.hccs_groups", "lists device " + std::to_string(d) + " twice");
      if (static_cast<std::uint32_t>(d) / p.server_size != static_cast<std::uint32_t>(g.front()) / p.server_size)
        return bad("Interconnect.hccs_groups", "joins devices of different servers");
    }
  }
  return {};
}

namespace presets {

preset ascend910(int devices) {
  if (devices < 1 || static_cast<std::uint64_t>(devices) > max_device_count)
    throw_error(make_error_code(errc::invalid_config), "preset: " + std::to_string(devices) +
                                                           " devices; the simulator supports 1 to " +
                                                           std::to_string(max_device_count));
  preset p;
  p.name = "ascend910";
  p.soc_version = "Ascend910A";
  p.ai_core_count = 32;
  p.vector_core_count = 32;
  p.separated_cores = false;
  p.supports_bf16 = false;
  p.memory_bytes = 32ull << 30;
  p.l2_bytes = 32ull << 20;
  p.clock_hz = 1000e6;
  p.cube_m = p.cube_n = p.cube_k = 16;
  p.cube_k_int8 = 32;
  p.cube_k_fp32 = 8;
  p.vector_lanes = 128;
  p.l0a_bytes = 64 << 10;
  p.l0b_bytes = 64 << 10;
  p.l0c_bytes = 256 << 10;
  p.l1_bytes = 1 << 20;
  p.ub_bytes = 256 << 10;
  // One core's GM port moves 64 B/cycle; 32 of them (2 TB/s) out-pull the 1.2 TB/s HBM, so a
  // streaming kernel on all cores is bound by HBM, as on the real part.
  p.ddr_rate = 64;
  p.l2_rate = 128;
  p.l1_to_l0a_rate = 512;  // one 16x16 FP16 fractal per cycle: what the cube consumes
  p.l1_to_l0b_rate = 256;
  p.l0c_to_out_rate = 256;
  p.ub_to_gm_rate = 64;
  p.hbm_bandwidth = 1200e9;
  p.d2d_bandwidth = 600e9;  // half of HBM: each byte is read and written
  p.d2d_latency = picoseconds{1'000'000};
  p.host_memcpy_bandwidth = 10e9;
  p.host_memcpy_latency = picoseconds{1'000'000};
  p.device_count = static_cast<std::uint32_t>(devices);
  p.server_size = 8;
  p.pcie_bandwidth = 25e9;  // PCIe 4.0 x16: 32 GB/s raw, ~25 GB/s after protocol overhead
  p.pcie_latency = picoseconds{2'000'000};
  p.hccs_bandwidth = 30e9;  // 240 Gbps per HCCS port
  p.hccs_latency = picoseconds{1'000'000};
  // Two 4-device full-mesh groups per 8-device server.
  p.hccs_groups = chunked_groups(static_cast<int>(p.device_count), 4);
  p.roce_bandwidth = 12.5e9;  // 100GbE
  p.roce_latency = picoseconds{3'000'000};
  p.kernel_launch_latency = picoseconds{2'000'000};
  p.pipeline_fill_cycles = 200;
  p.instr_issue_cycles = 2;
  p.copy_engine_channels = 1;
  return p;
}

preset ascend910b(int devices) {
  preset p = ascend910(devices);
  p.name = "ascend910b";
  p.soc_version = "Ascend910B2";
  p.ai_core_count = 24;
  p.vector_core_count = 48;
  p.separated_cores = true;
  p.supports_bf16 = true;
  p.memory_bytes = 64ull << 30;
  p.l2_bytes = 192ull << 20;
  p.clock_hz = 1800e6;
  p.l0c_bytes = 128 << 10;
  p.l1_bytes = 512 << 10;
  p.ub_bytes = 192 << 10;
  p.ddr_rate = 32;  // CANN's Ascend910B ini value
  p.l2_rate = 128;
  p.hbm_bandwidth = 1600e9;
  p.d2d_bandwidth = 800e9;
  p.pcie_bandwidth = 50e9;  // PCIe 5.0 x16
  p.hccs_bandwidth = 56e9;
  p.hccs_groups = chunked_groups(static_cast<int>(p.device_count), 8);
  p.roce_bandwidth = 25e9;  // 200GE
  p.op_execute_timeout = picoseconds{1091LL * 1'000'000'000'000LL};  // CANN's A2/A3 default
  return p;
}

preset by_name(std::string_view name, int devices) {
  if (name == "ascend910") return ascend910(devices);
  if (name == "ascend910b") return ascend910b(devices);
  throw_error(make_error_code(errc::invalid_config),
              "unknown preset '" + std::string(name) + "' (known: ascend910, ascend910b)");
}

}  // namespace presets

const std::vector<preset_key>& preset_keys() {
  static const std::vector<preset_key> keys = [] {
    std::vector<preset_key> k;
    for (const auto& e : table()) k.push_back(e.info);
    return k;
  }();
  return keys;
}

std::string get_value(const preset& p, std::string_view key) {
  const key_entry* e = find_key(key);
  if (!e) throw_error(make_error_code(errc::invalid_config), "unknown preset key '" + shown(key) + "'");
  return e->get(p);
}

std::error_code set_value(preset& p, std::string_view key, std::string_view value, std::string* what) {
  const key_entry* e = find_key(key);
  if (!e) {
    if (what) *what = "unknown preset key '" + shown(key) + "'";
    return make_error_code(errc::invalid_config);
  }
  preset copy = p;
  if (!e->set(copy, value)) {
    if (what) *what = bad_value(*e, value);
    return make_error_code(errc::parse_error);
  }
  p = std::move(copy);
  return {};
}

preset parse_preset(std::string_view text, std::error_code& ec, std::string* what) {
  namespace pt = boost::property_tree;
  ec.clear();
  auto fail = [&](errc e, std::string msg) {
    ec = make_error_code(e);
    if (what) *what = std::move(msg);
    return preset{};
  };
  if (text.size() > max_preset_bytes)
    return fail(errc::parse_error, "preset INI: " + std::to_string(text.size()) + " bytes; a preset file is at most " +
                                       std::to_string(max_preset_bytes));
  pt::ptree tree;
  try {
    std::istringstream in{std::string(text)};
    pt::ini_parser::read_ini(in, tree);
  } catch (const pt::ini_parser_error& e) {
    return fail(errc::parse_error,
                "preset INI: " + e.message() + duplicate_name(text, e.line(), e.message()) + at_line(e.line()));
  }
  preset p;
  bool have_base = false;
  if (auto soc = tree.get_child_optional("SoCInfo")) {
    if (auto base = soc->get_optional<std::string>("base")) {
      const std::string b{trim(*base)};
      if (b != "ascend910" && b != "ascend910b")
        return fail(errc::invalid_config, "preset INI: unknown base '" + shown(b) + "' for SoCInfo.base" +
                                              at_line(line_of(text, "SoCInfo", "base")));
      // The base's device count (and groups) follow device_count below when it is given.
      // Bounded before the base builds its groups: those take memory per device.
      std::uint64_t devices = 1;
      if (auto dc = tree.get_optional<std::string>("Interconnect.device_count");
          dc && parse_u64(*dc, devices) && (devices < 1 || devices > max_device_count))
        return fail(errc::invalid_config, "preset INI: Interconnect.device_count must be in [1, " +
                                              std::to_string(max_device_count) + "] devices, got " +
                                              std::to_string(devices) +
                                              at_line(line_of(text, "Interconnect", "device_count")));
      p = presets::by_name(b, static_cast<int>(std::clamp<std::uint64_t>(devices, 1, max_device_count)));
      have_base = true;
    }
  }
  // Unknown sections and keys are errors: a typo must not silently keep a default.
  for (const auto& [section, sub] : tree) {
    if (!sub.data().empty()) {
      return fail(errc::invalid_config,
                  "preset INI: key '" + shown(section) + "' outside any section" + at_line(line_of(text, "", section)));
    }
    for (const auto& [key, value] : sub) {
      if (section == "SoCInfo" && key == "base") continue;
      if (!find_key(section + "." + key))
        return fail(errc::invalid_config, "preset INI: unknown key " + shown(section) + "." + shown(key) +
                                              at_line(line_of(text, section, key)));
    }
  }
  for (const auto& e : table()) {
    const std::string path = e.info.path();
    auto v = tree.get_optional<std::string>(pt::ptree::path_type(path, '.'));
    if (!v) {
      if (have_base) continue;
      return fail(errc::invalid_config, "preset INI: missing key " + path + at_line(line_of(text, e.info.section, "")) +
                                            " (add it, or start from a built-in with [SoCInfo] base = ascend910)");
    }
    if (!e.set(p, *v))
      return fail(errc::parse_error,
                  "preset INI: " + bad_value(e, *v) + at_line(line_of(text, e.info.section, e.info.key)));
  }
  std::string why;
  if (auto c = check(p, &why)) {
    // Name the line of a key the message names, preferring one the file sets: a relation between
    // two keys (coupled cores) is best fixed where the file changed one of them, not at the
    // section of the other, which came from the base.
    std::size_t line = 0;
    for (const auto& e : table())
      if (why.find(e.info.path() + " ") != std::string::npos) {  // cube_k_size must not match cube_k_size_int8
        const std::size_t at = line_of(text, e.info.section, e.info.key);
        if (line == 0) line = at;
        if (at != line_of(text, e.info.section, "")) {  // the key itself, not its section's header
          line = at;
          break;
        }
      }
    return fail(errc::invalid_config, "preset INI: " + why + at_line(line));
  }
  return p;
}

preset parse_preset(std::string_view text) {
  std::error_code ec;
  std::string what;
  preset p = parse_preset(text, ec, &what);
  if (ec) throw_error(ec, what);
  return p;
}

preset load_preset(const std::filesystem::path& file, std::error_code& ec, std::string* what) {
  // The system's reason (missing, no permission, a directory) tells the user what to fix.
  const auto reason = [](int e) { return e != 0 ? ": " + std::generic_category().message(e) : std::string(); };
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    ec = make_error_code(errc::invalid_config);
    if (what) *what = "cannot open preset file " + file.string() + reason(errno);
    return preset{};
  }
  // At most one byte past the limit: a larger file, a device like /dev/zero or a pipe that never
  // ends is refused without being read whole.
  std::string text(max_preset_bytes + 1, '\0');
  errno = 0;
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    ec = make_error_code(errc::invalid_config);
    if (what) *what = "cannot read preset file " + file.string() + reason(errno);
    return preset{};
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_preset_bytes) {
    ec = make_error_code(errc::parse_error);
    if (what)
      *what = file.string() + ": preset INI: larger than " + std::to_string(max_preset_bytes) +
              " bytes, the most a preset file may hold";
    return preset{};
  }
  std::string msg;
  preset p = parse_preset(text, ec, &msg);
  if (ec && what) *what = file.string() + ": " + msg;
  return p;
}

preset load_preset(const std::filesystem::path& file) {
  std::error_code ec;
  std::string what;
  preset p = load_preset(file, ec, &what);
  if (ec) throw_error(ec, what);
  return p;
}

std::string to_ini(const preset& p) {
  std::string out = "; npurt hardware preset '" + p.name + "' (layout after CANN platform_config/<SoC>.ini)\n";
  std::string_view section;
  for (const auto& e : table()) {
    if (e.info.section != section) {
      section = e.info.section;
      out += "\n[" + std::string(section) + "]\n";
    }
    out += "; " + std::string(e.info.description) + " [" + std::string(e.info.unit) + "]\n";
    out += std::string(e.info.key) + " = " + e.get(p) + "\n";
  }
  return out;
}

}  // namespace npurt::sim
