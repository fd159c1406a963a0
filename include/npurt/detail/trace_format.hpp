// npurt/detail/trace_format.hpp — number and text formatting shared by the profiler's writers.
// Times are exact: picoseconds printed as microseconds with six decimals, no floating point.
#pragma once

#include <npurt/observer.hpp>
#include <npurt/time.hpp>

#include <cinttypes>
#include <cmath>
#include <cstddef>
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

/// The length of the well-formed UTF-8 sequence that `s` starts with, or 0 when it starts with
/// an ill-formed one (the Unicode Standard's table of well-formed UTF-8 byte sequences, ch. 3:
/// no overlong forms, no surrogates, nothing past U+10FFFF). `s` is not empty.
inline std::size_t utf8_sequence_length(std::string_view s) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c == 0xE0) {
    n = 3;
    lo = 0xA0;  // no overlong form
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    n = 3;
  } else if (c == 0xED) {
    n = 3;
    hi = 0x9F;  // no surrogate
  } else if (c == 0xF0) {
    n = 4;
    lo = 0x90;  // no overlong form
  } else if (c >= 0xF1 && c <= 0xF3) {
    n = 4;
  } else if (c == 0xF4) {
    n = 4;
    hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return n;
}

/// U+FFFD REPLACEMENT CHARACTER, in UTF-8.
inline constexpr std::string_view utf8_replacement = "\xEF\xBF\xBD";

/// Appends the well-formed UTF-8 sequence at s[i], or U+FFFD when the byte there starts none;
/// returns how many bytes of `s` that took (1 for a replaced byte). `i` is inside `s`.
inline std::size_t append_utf8_sequence(std::string& out, std::string_view s, std::size_t i) {
  const std::size_t n = utf8_sequence_length(s.substr(i));
  if (n == 0) {
    out += utf8_replacement;
    return 1;
  }
  out.append(s.data() + i, n);
  return n;
}

/// `s` as well-formed UTF-8, for text outputs: what the JSON and SVG writers do to names,
/// without their escaping.
inline void append_utf8(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) out += s[i++];
    else i += append_utf8_sequence(out, s, i);
  }
}

// Names come from users (kernel names, ONNX node names, file names) and may hold any bytes, but
// JSON text is UTF-8 (RFC 8259) and so is an XML document without an encoding declaration: a
// byte that is no part of a well-formed sequence is written as U+FFFD, so that every reader
// (npurt's own included) takes the file. Well-formed text is copied as it is.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      i += append_utf8_sequence(out, s, i);
      continue;
    }
    ++i;
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
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const std::size_t n = utf8_sequence_length(s.substr(i));
      // XML's Char production also leaves out U+FFFE and U+FFFF (EF BF BE, EF BF BF).
      const bool not_xml = n == 3 && s.substr(i, 2) == "\xEF\xBF" && static_cast<unsigned char>(s[i + 2]) >= 0xBE;
      if (n == 0 || not_xml) out += utf8_replacement;
      else out += s.substr(i, n);
      i += n == 0 ? 1 : n;
      continue;
    }
    ++i;
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
