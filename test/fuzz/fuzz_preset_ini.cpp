// Any text given to the preset INI parser either parses to a preset that check() accepts and that
// reads back to the same INI text, or fails with a typed npurt error; it never crashes.
#include <npurt/error.hpp>
#include <npurt/sim/preset.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::error_code ec;
  std::string what;
  const npurt::sim::preset p = npurt::sim::parse_preset(text, ec, &what);
  if (ec) {
    if (ec.category() != npurt::error_category() || what.empty()) std::abort();
    return 0;
  }
  if (npurt::sim::check(p)) std::abort();
  const std::string ini = npurt::sim::to_ini(p);
  std::error_code ec2;
  const npurt::sim::preset q = npurt::sim::parse_preset(ini, ec2);
  if (ec2 || npurt::sim::to_ini(q) != ini) std::abort();
  return 0;
}
