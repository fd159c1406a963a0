// npurt/detail/segment_provider.hpp — the device layer under the caching allocator: who hands
// out device memory (whole segments, or address ranges mapped on demand), and a provider that
// only counts, for timing-only devices, tests and benchmarks.
#pragma once

#include <npurt/config.hpp>
#include <npurt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <system_error>

namespace npurt::detail {

inline constexpr std::size_t kib = 1024, mib = 1024 * 1024;

/// The device layer under the allocator: hands out and takes back device memory.
///
/// allocate/release are whole segments (cudaMalloc / aclrtMalloc). The four address-range calls
/// back the "compact" strategy (cuMemAddressReserve / cuMemMap, AclrtReserveMemAddress /
/// AclrtMapMem): reserve_range takes address space without memory, map/unmap back part of it
/// with memory. A provider that cannot do that leaves the defaults; "compact" then reports
/// errc::not_supported.
class segment_provider {
 public:
  virtual ~segment_provider() = default;
  virtual std::error_code allocate(std::size_t bytes, std::uint64_t& addr) = 0;
  virtual void release(std::uint64_t addr, std::size_t bytes) = 0;
  [[nodiscard]] virtual std::size_t capacity() const = 0;
  [[nodiscard]] virtual std::size_t free_bytes() const = 0;

  virtual std::error_code reserve_range(std::size_t /*bytes*/, std::uint64_t& /*addr*/) {
    return make_error_code(errc::not_supported);
  }
  virtual void release_range(std::uint64_t /*addr*/, std::size_t /*bytes*/) {}
  virtual std::error_code map(std::uint64_t /*addr*/, std::size_t /*bytes*/) {
    return make_error_code(errc::not_supported);
  }
  virtual void unmap(std::uint64_t /*addr*/, std::size_t /*bytes*/) {}
};

/// A provider with no backing store: a device of `capacity` bytes whose addresses start at
/// `base`. Physical memory is a counter (segments plus mapped pages), so a 32 GB device costs no
/// host RAM; addresses are handed out by a bump pointer and never reused, so a stale pointer can
/// never alias a newer allocation. Good for timing-only mode, tests and benchmarks; a functional
/// device wraps it and attaches host storage.
class counting_provider : public segment_provider {
 public:
  explicit counting_provider(std::size_t capacity, std::uint64_t base = 0x100000000ull)
      : capacity_(capacity), next_(base) {}
  std::error_code allocate(std::size_t bytes, std::uint64_t& addr) override;
  void release(std::uint64_t addr, std::size_t bytes) override;
  [[nodiscard]] std::size_t capacity() const override { return capacity_; }
  [[nodiscard]] std::size_t free_bytes() const override { return capacity_ - used_; }
  std::error_code reserve_range(std::size_t bytes, std::uint64_t& addr) override;
  void release_range(std::uint64_t addr, std::size_t bytes) override;
  std::error_code map(std::uint64_t addr, std::size_t bytes) override;
  void unmap(std::uint64_t addr, std::size_t bytes) override;

  /// Fails the next `n` allocate/map calls with out_of_memory (fault injection for tests).
  void fail_next(int n) { fail_next_ = n; }
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  [[nodiscard]] std::size_t live_segments() const noexcept { return segments_.size(); }

 private:
  bool take(std::size_t bytes);
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::uint64_t next_;
  int fail_next_ = 0;
  std::map<std::uint64_t, std::size_t> segments_;  // allocate()d, to catch provider misuse
};

}  // namespace npurt::detail

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/segment_provider.ipp>
#endif
