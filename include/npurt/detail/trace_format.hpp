// npurt/detail/trace_format.hpp — number and text formatting shared by the profiler's writers.
// Times are exact: picoseconds printed as microseconds with six decimals, no floating point.
#pragma once

#include <npurt/observer.hpp>
#include <npurt/time.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace npurt::detail {

inline std::int64_t ps(sim_time t) noexcept { return t.time_since_epoch().count(); }

/// Picoseconds as microseconds with 6 decimals: exact, no floating point.
inline void append_us(std::string& out, std::int64_t v) {
  char buf[48];
  const bool neg = v < 0;
  const std::uint64_t u = neg ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%06" PRIu64, neg ? "-" : "", u / 1000000, u % 1000000);
  out += buf;
}
inline void append_us(std::string& out, sim_time t) { append_us(out, ps(t)); }
inline void append_us(std::string& out, picoseconds d) { append_us(out, d.count()); }

inline void append_int(std::string& out, std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out += buf;
}
inline void append_uint(std::string& out, std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out += buf;
}
inline void append_fixed(std::string& out, double v, int decimals) {
  char buf[64];
  if (std::abs(v) < 0.5 * std::pow(10.0, -decimals)) v = 0;  // no "-0.000000"
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  out += buf;
}

inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline void append_xml(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
}

inline std::string endpoint_name(device_id d) { return d < 0 ? std::string{"host"} : std::to_string(d); }

inline std::string_view to_string(memory_op op) noexcept { return op == memory_op::alloc ? "alloc" : "free"; }

}  // namespace npurt::detail
