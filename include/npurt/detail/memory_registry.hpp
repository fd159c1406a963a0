// npurt/detail/memory_registry.hpp — what is a live device pointer.
//
// Owns one invariant: every device address npurt hands out is in exactly one live allocation
// (a raw allocation, a pool block, or a reserved range of a growable pool arena) until it is
// freed, and an address is never handed out twice, so a freed or foreign pointer is always
// recognised. Copies and kernels are checked against it at launch; in functional mode it also
// holds the host storage behind device memory.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/timer_queue.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/observer.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

namespace npurt::detail {

/// One live device allocation. Device addresses are non-canonical on x86-64 (bit 62 set), so a
/// device pointer dereferenced on the host faults instead of reading host memory.
struct allocation {
  std::uint64_t address = 0;
  std::size_t bytes = 0;
  device_id device = 0;
  std::byte* backing = nullptr;   // host storage in functional mode
  bool pool = false;              // a memory pool's segment or reserved range: users see its blocks
  std::size_t mapped = 0;         // reserved ranges: bytes mapped (counted as used)
};

struct host_allocation {
  const void* base = nullptr;
  std::size_t bytes = 0;
};

inline constexpr std::uint64_t device_address_base = 0x4000'0000'0000'0000ULL;
inline constexpr int device_address_shift = 44;  // 16 TiB of address space per device

inline bool is_device_address(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & device_address_base) != 0;
}
inline device_id device_of_address(const void* p) noexcept {
  return static_cast<device_id>((reinterpret_cast<std::uintptr_t>(p) & ~device_address_base) >> device_address_shift);
}

class memory_registry {
 public:
  /// `trace` is where allocations are reported (null: nowhere); `clock` stamps them.
  NPURT_DECL memory_registry(npurt::backend& b, const timer_queue& clock, observer* const& trace);
  NPURT_DECL ~memory_registry();
  memory_registry(const memory_registry&) = delete;
  memory_registry& operator=(const memory_registry&) = delete;

  /// Raw device memory; `pool` marks a memory pool's segment (users cannot free it directly).
  NPURT_DECL void* device_malloc(device_id dev, std::size_t bytes, std::error_code& ec, bool pool = false);
  NPURT_DECL void device_free(device_id dev, void* p, std::error_code& ec, bool pool = false);
  /// The live allocation holding p: a raw allocation, or a pool block (never a pool's segment,
  /// so a pointer into cached pool memory is not live).
  [[nodiscard]] NPURT_DECL const allocation* find_allocation(const void* p) const noexcept;
  [[nodiscard]] bool was_freed(const void* p) const noexcept {
    return freed_.count(reinterpret_cast<std::uint64_t>(p)) != 0;
  }
  // Address ranges for growable pool arenas (expandable segments): reserve address space, then
  // map and unmap physical memory inside it.
  NPURT_DECL std::uint64_t reserve_range(device_id dev, std::size_t bytes, std::error_code& ec);
  NPURT_DECL void release_range(std::uint64_t addr) noexcept;
  NPURT_DECL std::error_code map_range(std::uint64_t range, std::size_t bytes);
  NPURT_DECL void unmap_range(std::uint64_t range, std::size_t bytes) noexcept;
  /// Pool blocks handed to users, so that copies and kernels can check them.
  NPURT_DECL void register_pool_block(device_id dev, std::uint64_t addr, std::size_t bytes);
  NPURT_DECL void unregister_pool_block(std::uint64_t addr) noexcept;
  NPURT_DECL void drop_pool_blocks(device_id dev) noexcept;
  [[nodiscard]] NPURT_DECL std::size_t device_used(device_id dev) const noexcept;
  /// Frees every allocation of a device (device reset).
  NPURT_DECL void release_device_memory(device_id dev) noexcept;
  /// Host storage behind [addr, addr + bytes) of device memory, or null.
  NPURT_DECL std::byte* translate(device_id dev, const void* addr, std::size_t bytes) noexcept;

  NPURT_DECL void* host_malloc(std::size_t bytes, std::error_code& ec);
  NPURT_DECL void host_free(void* p, std::error_code& ec);
  [[nodiscard]] NPURT_DECL const host_allocation* find_host_allocation(const void* p) const noexcept;

  /// Every operand of a kernel must be live device memory of device `dev` holding the whole
  /// tensor, as for copies. `what` names the operand and the problem.
  [[nodiscard]] NPURT_DECL std::error_code check_operands(device_id dev, const kernel_desc& k, std::string& what) const;

 private:
  npurt::backend& backend_;
  const timer_queue& clock_;
  observer* const& trace_;
  std::map<std::uint64_t, allocation> allocations_;     // by address
  std::map<std::uint64_t, allocation> pool_blocks_;     // by address: blocks inside pool segments
  std::unordered_set<std::uint64_t> freed_;             // addresses freed, to tell double frees
  std::vector<std::uint64_t> next_address_;             // per device: bump pointer (never reused)
  std::vector<std::size_t> used_;                       // per device: bytes allocated
  std::map<const void*, host_allocation> host_allocations_;
};

}  // namespace npurt::detail

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/memory_registry.ipp>
#endif
