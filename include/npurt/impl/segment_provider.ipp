// npurt/impl/segment_provider.ipp — the counting provider: device memory as a counter.
#pragma once

#include <npurt/detail/segment_provider.hpp>

#include <algorithm>

namespace npurt::detail {

NPURT_DECL bool counting_provider::take(std::size_t bytes) {
  if (fail_next_ > 0) {
    --fail_next_;
    return false;
  }
  if (bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

NPURT_DECL std::error_code counting_provider::allocate(std::size_t bytes, std::uint64_t& addr) {
  if (bytes == 0) return make_error_code(errc::zero_size);
  if (!take(bytes)) return make_error_code(errc::out_of_memory);
  addr = next_;
  next_ += (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);  // 2 MiB-aligned, never reused
  segments_.emplace(addr, bytes);
  return {};
}

NPURT_DECL void counting_provider::release(std::uint64_t addr, std::size_t bytes) {
  auto it = segments_.find(addr);
  if (it == segments_.end() || it->second != bytes) return;  // not ours: ignore rather than corrupt
  used_ -= bytes;
  segments_.erase(it);
}

NPURT_DECL std::error_code counting_provider::reserve_range(std::size_t bytes, std::uint64_t& addr) {
  if (bytes == 0) return make_error_code(errc::zero_size);
  addr = next_;
  next_ += (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);
  return {};
}

NPURT_DECL void counting_provider::release_range(std::uint64_t, std::size_t) {}

NPURT_DECL std::error_code counting_provider::map(std::uint64_t, std::size_t bytes) {
  return take(bytes) ? std::error_code{} : make_error_code(errc::out_of_memory);
}

NPURT_DECL void counting_provider::unmap(std::uint64_t, std::size_t bytes) { used_ -= std::min(bytes, used_); }

}  // namespace npurt::detail
