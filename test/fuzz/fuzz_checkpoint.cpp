// libFuzzer target for the checkpoint loader: whatever the bytes, parse() must return a typed
// error or a checkpoint, never crash, read out of bounds or allocate more than the input holds
// (ASan and UBSan watch). A checkpoint that loads must serialize back to the same bytes: the
// format has one encoding per checkpoint.
//
// Random mutations almost never keep a CRC valid, so each input is also tried with its header
// and manifest checksums recomputed: that lets mutations of the manifest reach the checks that
// sit behind the checksums (counts, lengths, shapes, offsets, names).
#include <npurt/checkpoint.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace {

void check_one(std::span<const std::byte> in) {
  std::error_code ec;
  const npurt::checkpoint ck = npurt::checkpoint::parse(in, ec);
  if (ec) {
    // An error must leave nothing behind and carry npurt's category.
    if (!ck.tensors().empty() || !ck.metadata().empty() || ec.category() != npurt::error_category()) __builtin_trap();
    return;
  }
  const std::vector<std::byte> again = ck.serialize();
  if (again.size() != in.size() || !std::equal(again.begin(), again.end(), in.begin())) __builtin_trap();
}

std::uint64_t le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
void put32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  check_one(in);
  if (size >= 64) {
    std::vector<std::byte> sealed(in.begin(), in.end());
    const std::uint64_t manifest = std::min<std::uint64_t>(le64(sealed.data() + 32), size - 64);
    put32(sealed.data() + 56, npurt::detail::crc32c({sealed.data() + 64, static_cast<std::size_t>(manifest)}));
    put32(sealed.data() + 60, npurt::detail::crc32c({sealed.data(), 60}));
    check_one(sealed);
  }
  return 0;
}
