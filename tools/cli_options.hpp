// Command-line option checks shared by the tools and the benchmarks (header-only, CLI11).
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

namespace npurt_cli {

/// A decimal unsigned 64-bit integer and nothing else, for an option such as a seed that has no
/// range to check: CLI11's own conversion takes "-1" as 2^64 - 1.
inline CLI::Validator whole_number_u64() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || err != std::errc{} || end != s.data() + s.size())
          return "expected a whole number from 0 to 18446744073709551615, got '" + s.substr(0, 40) + "'";
        return {};
      },
      "UINT64");
}

}  // namespace npurt_cli
