// libFuzzer target: the hardware preset parser. Properties, beyond "no crash, no UB, no hang,
// no huge allocation": an error names something and stays short; an accepted preset passes
// check() and survives to_ini() -> parse_preset() unchanged.
#include <npurt/sim/preset.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::error_code ec;
  std::string what;
  const auto p = npurt::sim::parse_preset(text, ec, &what);
  if (ec) {
    if (what.empty() || what.size() > 1000) __builtin_trap();
    return 0;
  }
  if (npurt::sim::check(p)) __builtin_trap();
  std::error_code ec2;
  const auto q = npurt::sim::parse_preset(npurt::sim::to_ini(p), ec2, &what);
  if (ec2 || !(q == p)) __builtin_trap();
  return 0;
}
