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
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace npurt::detail {

/// Whether the `bytes` bytes at `at` meet [lo, hi), without forming at + bytes: a size may be
/// anything where this is asked.
constexpr bool range_meets(std::uint64_t at, std::size_t bytes, std::uint64_t lo, std::uint64_t hi) noexcept {
  return at < hi && (at >= lo || lo - at < bytes);
}

/// The host store behind a reserved range (a compact pool arena), or an allocation of a chunk or
/// more, in functional mode: address space for the whole of it, whose pages the host's kernel
/// provides when they are first written, and which counts the chunks that copies, kernels and
/// collectives have reached. A range as large as the device, or a pool segment far larger than
/// its blocks, then costs the host only what its work touches.
struct range_backing {
  /// Backing bytes are counted in chunks of this size: the transparent huge page size of
  /// x86-64 Linux, so the count bounds what the host holds however it backs the pages.
  static constexpr int chunk_shift = 21;
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  std::vector<std::uint64_t> reached;  // bit c: chunk c was handed to work
  std::size_t counted = 0;              // the reached chunks' bytes
  /// Marks [off, off + n) as reached; returns the bytes of host backing that adds.
  NPURT_DECL std::size_t reach(std::size_t off, std::size_t n) noexcept;
};

/// One live device allocation. Device addresses are non-canonical on x86-64 (bit 62 set), so a
/// device pointer dereferenced on the host faults instead of reading host memory.
struct allocation {
  std::uint64_t address = 0;
  std::size_t bytes = 0;
  device_id device = 0;
  std::byte* backing = nullptr;   // host storage in functional mode
  bool pool = false;              // a memory pool's segment or reserved range: users see its blocks
  std::size_t mapped = 0;         // reserved ranges: bytes mapped (counted as used)
  range_backing* lazy = nullptr;  // functional, a chunk or more: backing is touched on demand
};

struct host_allocation {
  const void* base = nullptr;
  std::size_t bytes = 0;
};

// A device address is bit 62, an address space (18 bits) and an offset in it (44 bits: 16 TiB,
// never reused). Every system takes one space per device from a process-wide counter, so two
// systems never hand out the same address, and a pointer of another system is told from ours by
// its space alone. What the runtime reports (traces, memory events) is the portable address,
// with the system's first space taken away: bit 62, the device id, the offset, the same in every
// run of the program whatever systems it made before.
inline constexpr std::uint64_t device_address_base = 0x4000'0000'0000'0000ULL;
inline constexpr int device_address_shift = 44;
inline constexpr std::uint64_t address_space_bytes = std::uint64_t{1} << device_address_shift;
inline constexpr std::uint32_t address_spaces = 1u << 18;

inline bool is_device_address(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & device_address_base) != 0;
}
inline std::uint32_t address_space_of(std::uint64_t addr) noexcept {
  return static_cast<std::uint32_t>((addr >> device_address_shift) & (address_spaces - 1));
}

/// The first of `n` consecutive address spaces for a new system: the next ones in creation order,
/// from the first space again when they would run past the last (a program that has made 2^18
/// devices' worth of systems reuses the spaces of its oldest ones).
NPURT_DECL std::uint32_t take_address_spaces(std::size_t n) noexcept;

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
  /// A device address of another system (or of none): outside this system's address spaces.
  [[nodiscard]] bool foreign(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uint64_t>(p);
    return is_device_address(p) && address_space_of(a) - first_space_ >= next_address_.size();
  }
  /// What a report shows of one of this system's device addresses: the same in every run.
  [[nodiscard]] std::uint64_t portable(std::uint64_t addr) const noexcept {
    return addr - (std::uint64_t{first_space_} << device_address_shift);
  }
  /// Why p is not live memory for a copy, memset, free or kernel ("0x... is device memory of
  /// another system", "... was freed", ...), or empty when it is live.
  [[nodiscard]] NPURT_DECL std::string why_not_live(const void* p) const;
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
  /// Host memory behind a device's memory in functional mode (0 when timing-only): allocations
  /// under a chunk whole, larger ones and reserved ranges by the chunks work has reached.
  [[nodiscard]] NPURT_DECL std::size_t host_backing(device_id dev) const noexcept;

  NPURT_DECL void* host_malloc(std::size_t bytes, std::error_code& ec);
  NPURT_DECL void host_free(void* p, std::error_code& ec);
  /// As host_free of a live block start, but its memory stays allocated until release_host(p):
  /// queued copies still read or write it.
  NPURT_DECL void retire_host(void* p) noexcept;
  NPURT_DECL void release_host(void* p) noexcept;
  [[nodiscard]] NPURT_DECL const host_allocation* find_host_allocation(const void* p) const noexcept;

  /// Every operand of a kernel must be live device memory of device `dev` holding the whole
  /// tensor, as for copies. `what` names the operand and the problem.
  [[nodiscard]] NPURT_DECL std::error_code check_operands(device_id dev, const kernel_desc& k, std::string& what) const;
  /// The name of the first operand of `k` whose memory meets [lo, hi), or empty.
  [[nodiscard]] NPURT_DECL static std::string_view operand_touching(const kernel_desc& k, std::uint64_t lo,
                                                                    std::uint64_t hi);

 private:
  npurt::backend& backend_;
  const timer_queue& clock_;
  observer* const& trace_;
  std::map<std::uint64_t, allocation> allocations_;     // by address
  std::map<std::uint64_t, allocation> pool_blocks_;     // by address: blocks inside pool segments
  std::unordered_set<std::uint64_t> freed_;             // addresses freed, to tell double frees
  std::vector<std::uint64_t> next_address_;             // per device: bump pointer (never reused)
  std::uint32_t first_space_ = 0;                       // device d's addresses are in space first_space_ + d
  std::vector<std::size_t> used_;                       // per device: bytes allocated
  std::vector<std::size_t> host_backing_;               // per device: see host_backing()
  std::map<std::uint64_t, std::unique_ptr<range_backing>> ranges_;  // by range address (functional)
  std::map<const void*, host_allocation> host_allocations_;
  std::unordered_set<void*> retired_host_;  // freed by the caller, still used by queued copies
  // Host addresses the caller freed, to tell double frees; one leaves when the heap hands its
  // address out again.
  std::unordered_set<const void*> freed_host_;

  // `bytes` of fresh addresses of the device's space; false when the space is used up.
  NPURT_DECL bool take_addresses(device_id dev, std::size_t bytes, std::uint64_t& addr) noexcept;
  // Gives `a` a host store of address space that work backs as it reaches it (range_backing).
  NPURT_DECL std::error_code back_lazily(allocation& a);
  // Gives an allocation's host storage back and takes it off the device's host_backing count.
  NPURT_DECL void free_backing(allocation& a) noexcept;
};

}  // namespace npurt::detail

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/memory_registry.ipp>
#endif
