// npurt/impl/memory_registry.ipp — bodies of detail::memory_registry.
#pragma once

#include <npurt/detail/memory_registry.hpp>

#include <mimalloc.h>
#include <boost/pfr.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <sstream>
#include <type_traits>
#include <variant>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace npurt::detail {

namespace mr_detail {
inline constexpr std::size_t device_granule = 512;  // aclrtMalloc-style alignment of device allocations
constexpr std::size_t round_up(std::size_t v, std::size_t g) noexcept { return (v + g - 1) / g * g; }
}  // namespace mr_detail
using mr_detail::device_granule;
using mr_detail::round_up;

NPURT_DECL std::size_t range_backing::reach(std::size_t off, std::size_t n) noexcept {
  if (n == 0) return 0;
  constexpr std::size_t chunk = std::size_t{1} << chunk_shift;
  const std::size_t first = off >> chunk_shift, last = (off + n - 1) >> chunk_shift;
  // A range that is not a whole number of chunks ends in a shorter one.
  const std::size_t tail = bytes & (chunk - 1);
  const bool short_end = tail != 0 && last == (bytes - 1) >> chunk_shift && !((reached[last >> 6] >> (last & 63)) & 1);
  std::size_t added = 0;
  for (std::size_t w = first >> 6; w <= last >> 6; ++w) {
    const std::size_t lo = w == first >> 6 ? first & 63 : 0, hi = w == last >> 6 ? last & 63 : 63;
    const std::uint64_t fresh = (~std::uint64_t{0} >> (63 - hi)) & (~std::uint64_t{0} << lo) & ~reached[w];
    reached[w] |= fresh;
    added += static_cast<std::size_t>(std::popcount(fresh)) << chunk_shift;
  }
  if (short_end) added -= chunk - tail;
  counted += added;
  return added;
}

NPURT_DECL std::uint32_t take_address_spaces(std::size_t n) noexcept {
  // Systems may be made on several threads (one system per thread).
  static std::mutex m;
  static std::uint32_t next = 0;
  const std::lock_guard lock(m);
  if (n > address_spaces - next) next = 0;
  const std::uint32_t first = next;
  next += static_cast<std::uint32_t>(n);
  return first;
}

NPURT_DECL memory_registry::memory_registry(npurt::backend& b, const timer_queue& clock, observer* const& trace)
    : backend_(b), clock_(clock), trace_(trace) {
  const std::size_t n = backend_.device_count();
  next_address_.resize(n);
  used_.assign(n, 0);
  host_backing_.assign(n, 0);
  first_space_ = take_address_spaces(n);
  for (std::size_t d = 0; d < n; ++d)
    next_address_[d] = device_address_base | (std::uint64_t{first_space_ + d} << device_address_shift) | 0x10000;
}

NPURT_DECL bool memory_registry::take_addresses(device_id dev, std::size_t bytes, std::uint64_t& addr) noexcept {
  // The space's end: a device whose allocations add up to 16 TiB over its life has no addresses
  // left (they are never reused), rather than running into the next device's.
  const std::uint64_t end = (next_address_[dev] & ~(address_space_bytes - 1)) + address_space_bytes;
  if (bytes > end - next_address_[dev]) return false;
  addr = next_address_[dev];
  next_address_[dev] += bytes;
  return true;
}

NPURT_DECL std::string memory_registry::why_not_live(const void* p) const {
  std::ostringstream os;
  os << p;
  if (!p) return "the pointer is null";
  if (!is_device_address(p)) return os.str() + " is host memory, not device memory";
  if (foreign(p)) return os.str() + " is device memory of another system";
  if (was_freed(p)) return os.str() + " was freed";
  if (!find_allocation(p)) return os.str() + " is not live device memory";
  // Live, but not what device::free takes.
  const auto it = allocations_.find(reinterpret_cast<std::uint64_t>(p));
  if (it != allocations_.end() && it->second.pool) return os.str() + " is a memory pool's segment, not an allocation";
  if (it == allocations_.end()) {
    std::ostringstream base;
    base << reinterpret_cast<const void*>(find_allocation(p)->address);
    return os.str() + " is inside the allocation at " + base.str() +
           " (or a memory pool's block, which free_async gives back), not the start of one";
  }
  return {};
}

NPURT_DECL void memory_registry::free_backing(allocation& a) noexcept {
  if (range_backing* r = a.lazy) {
    host_backing_[a.device] -= r->counted;
#if defined(__linux__)
    ::munmap(r->base, r->bytes);
#else
    mi_free(r->base);
#endif
    ranges_.erase(a.address);
  } else if (a.backing) {
    host_backing_[a.device] -= round_up(a.bytes, device_granule);
    mi_free(a.backing);
  }
  a.lazy = nullptr;
  a.backing = nullptr;
}

NPURT_DECL memory_registry::~memory_registry() {
  for (auto& [addr, a] : allocations_) free_backing(a);
  for (auto& [p, h] : host_allocations_) mi_free(const_cast<void*>(p));
  for (void* p : retired_host_) mi_free(p);
}

NPURT_DECL void* memory_registry::device_malloc(device_id dev, std::size_t bytes, std::error_code& ec, bool pool) {
  ec.clear();
  if (dev < 0 || static_cast<std::size_t>(dev) >= backend_.device_count()) {
    ec = make_error_code(errc::invalid_device);
    return nullptr;
  }
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  const std::size_t capacity = backend_.properties(dev).memory_bytes;
  if (bytes > capacity) {
    // As cudaMalloc: a size that cannot be rounded up to the granule is a bad argument, a
    // representable one that the device cannot hold is out of memory.
    ec = make_error_code(bytes > std::numeric_limits<std::size_t>::max() - (device_granule - 1) ? errc::size_overflow
                                                                                                : errc::out_of_memory);
    return nullptr;
  }
  const std::size_t rounded = round_up(bytes, device_granule);
  if (used_[dev] + rounded > capacity) {
    ec = make_error_code(errc::out_of_memory);
    return nullptr;
  }
  if (const std::error_code refused = backend_.admit_allocation(dev, rounded)) {
    ec = refused;  // an injected fault: a transient shortage or a lost device
    return nullptr;
  }
  std::uint64_t addr = 0;
  if (!take_addresses(dev, round_up(rounded, 4096), addr)) {
    ec = make_error_code(errc::out_of_memory);
    return nullptr;
  }
  // A chunk or more is backed where work reaches it, as an arena is; a smaller one whole.
  const bool lazy = backend_.functional() && rounded >= (std::size_t{1} << range_backing::chunk_shift);
  std::byte* backing = nullptr;
  if (backend_.functional() && !lazy) {
    backing = static_cast<std::byte*>(mi_zalloc_aligned(rounded, 64));
    if (!backing) {
      ec = make_error_code(errc::resource_exhausted);  // the host could not back the device memory
      return nullptr;
    }
  }
  const auto placed = allocations_.emplace(addr, allocation{addr, bytes, dev, backing, pool, 0}).first;
  if (lazy) {
    if (const std::error_code e = back_lazily(placed->second)) {
      allocations_.erase(placed);
      ec = e;  // the host could not reserve the address space
      return nullptr;
    }
  }
  used_[dev] += rounded;
  if (backing) host_backing_[dev] += rounded;
  if (trace_ && !pool)
    trace_->on_memory({dev, memory_op::alloc, portable(addr), rounded, used_[dev], used_[dev], 0, clock_.now()});
  return reinterpret_cast<void*>(addr);
}

NPURT_DECL void memory_registry::device_free(device_id dev, void* p, std::error_code& ec, bool pool) {
  ec.clear();
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  const auto addr = reinterpret_cast<std::uint64_t>(p);
  auto it = allocations_.find(addr);
  if (it == allocations_.end()) {
    ec = make_error_code(freed_.count(addr) ? errc::double_free : errc::invalid_pointer);
    return;
  }
  if (it->second.pool != pool) {
    ec = make_error_code(errc::invalid_pointer);  // pool memory goes back through its pool
    return;
  }
  if (it->second.device != dev) {
    ec = make_error_code(errc::stream_device_mismatch);
    return;
  }
  const std::size_t rounded = round_up(it->second.bytes, device_granule);
  free_backing(it->second);
  used_[dev] -= rounded;
  allocations_.erase(it);
  freed_.insert(addr);
  if (trace_ && !pool)
    trace_->on_memory({dev, memory_op::free, portable(addr), rounded, used_[dev], used_[dev], 0, clock_.now()});
}

NPURT_DECL const allocation* memory_registry::find_allocation(const void* p) const noexcept {
  const auto addr = reinterpret_cast<std::uint64_t>(p);
  auto find_in = [addr](const std::map<std::uint64_t, allocation>& m) -> const allocation* {
    auto it = m.upper_bound(addr);
    if (it == m.begin()) return nullptr;
    --it;
    if (addr >= it->second.address + it->second.bytes) return nullptr;
    return &it->second;
  };
  const allocation* a = find_in(allocations_);
  if (a && a->pool) return find_in(pool_blocks_);
  return a;
}

NPURT_DECL std::uint64_t memory_registry::reserve_range(device_id dev, std::size_t bytes, std::error_code& ec) {
  ec.clear();
  if (dev < 0 || static_cast<std::size_t>(dev) >= backend_.device_count()) {
    ec = make_error_code(errc::invalid_device);
    return 0;
  }
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return 0;
  }
  std::uint64_t addr = 0;
  if (bytes > address_space_bytes || !take_addresses(dev, round_up(bytes, 1 << 21), addr)) {
    ec = make_error_code(errc::out_of_memory);
    return 0;
  }
  allocations_.emplace(addr, allocation{addr, bytes, dev, nullptr, true, 0});
  return addr;
}

NPURT_DECL void memory_registry::release_range(std::uint64_t addr) noexcept {
  auto it = allocations_.find(addr);
  if (it == allocations_.end() || !it->second.pool) return;
  used_[it->second.device] -= it->second.mapped;
  free_backing(it->second);
  freed_.insert(addr);
  allocations_.erase(it);
}

NPURT_DECL std::error_code memory_registry::back_lazily(allocation& a) {
  // Address space only: an arena may span the whole device and a segment may be far larger than
  // the blocks work uses, and the host provides a page when it is first written (a page never
  // written reads as zeros, as a zeroed store does), so memory work never touches costs nothing.
  auto r = std::make_unique<range_backing>();
  r->bytes = a.bytes;
  const std::size_t chunks = ((a.bytes - 1) >> range_backing::chunk_shift) + 1;
  try {
    r->reached.assign((chunks + 63) / 64, 0);
    ranges_.emplace(a.address, nullptr);
  } catch (const std::bad_alloc&) { return make_error_code(errc::resource_exhausted); }
#if defined(__linux__)
  void* p = ::mmap(nullptr, a.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  r->base = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
#else
  // Without a way to reserve pages, the whole store is taken (and counted) at once.
  r->base = static_cast<std::byte*>(mi_zalloc_aligned(a.bytes, 64));
  if (r->base) {
    std::fill(r->reached.begin(), r->reached.end(), ~std::uint64_t{0});
    r->counted = a.bytes;
    host_backing_[a.device] += a.bytes;
  }
#endif
  if (!r->base) {
    ranges_.erase(a.address);
    return make_error_code(errc::resource_exhausted);
  }
  a.backing = r->base;
  a.lazy = r.get();
  ranges_[a.address] = std::move(r);
  return {};
}

NPURT_DECL std::error_code memory_registry::map_range(std::uint64_t range, std::size_t bytes) {
  auto it = allocations_.find(range);
  if (it == allocations_.end() || !it->second.pool) return make_error_code(errc::invalid_pointer);
  allocation& a = it->second;
  if (a.mapped + bytes > a.bytes) return make_error_code(errc::size_overflow);
  if (used_[a.device] + bytes > backend_.properties(a.device).memory_bytes) return make_error_code(errc::out_of_memory);
  if (const std::error_code refused = backend_.admit_allocation(a.device, bytes)) return refused;
  if (backend_.functional() && !a.backing) {
    // One contiguous store for the whole range, so blocks that span mapping granules translate.
    if (const std::error_code e = back_lazily(a)) return e;
  }
  a.mapped += bytes;
  used_[a.device] += bytes;
  return {};
}

NPURT_DECL void memory_registry::unmap_range(std::uint64_t range, std::size_t bytes) noexcept {
  auto it = allocations_.find(range);
  if (it == allocations_.end() || !it->second.pool) return;
  const std::size_t n = std::min(bytes, it->second.mapped);
  it->second.mapped -= n;
  used_[it->second.device] -= n;
}

NPURT_DECL void memory_registry::register_pool_block(device_id dev, std::uint64_t addr, std::size_t bytes) {
  std::byte* backing = nullptr;
  auto it = allocations_.upper_bound(addr);
  if (it != allocations_.begin()) {
    --it;
    if (it->second.backing && addr >= it->second.address && addr < it->second.address + it->second.bytes)
      backing = it->second.backing + (addr - it->second.address);
  }
  pool_blocks_[addr] = allocation{addr, bytes, dev, backing, false, 0};
}

NPURT_DECL void memory_registry::unregister_pool_block(std::uint64_t addr) noexcept { pool_blocks_.erase(addr); }

NPURT_DECL void memory_registry::drop_pool_blocks(device_id dev) noexcept {
  std::erase_if(pool_blocks_, [dev](const auto& kv) { return kv.second.device == dev; });
}

NPURT_DECL std::size_t memory_registry::device_used(device_id dev) const noexcept {
  return dev >= 0 && static_cast<std::size_t>(dev) < used_.size() ? used_[dev] : 0;
}

NPURT_DECL std::byte* memory_registry::translate(device_id dev, const void* addr, std::size_t bytes) noexcept {
  // Queued work reaches memory when it runs. A pool block may be freed after the work was
  // queued (free_async on the same stream, or on another after record_stream): the free is
  // stream-ordered, as cudaFreeAsync's, and the block stays the pool's until its free is behind
  // its streams. So work translates through the pool's segment, not the block; the call that
  // queued it checked the block.
  const auto at = reinterpret_cast<std::uint64_t>(addr);
  auto it = allocations_.upper_bound(at);
  if (it == allocations_.begin()) return nullptr;
  const allocation& a = std::prev(it)->second;
  if (at >= a.address + a.bytes || a.device != dev || !a.backing) return nullptr;
  const auto off = at - a.address;
  if (bytes > a.bytes - off) return nullptr;
  if (a.lazy) host_backing_[dev] += a.lazy->reach(off, bytes);
  return a.backing + off;
}

NPURT_DECL std::size_t memory_registry::host_backing(device_id dev) const noexcept {
  return dev >= 0 && static_cast<std::size_t>(dev) < host_backing_.size() ? host_backing_[dev] : 0;
}

NPURT_DECL void memory_registry::release_device_memory(device_id dev) noexcept {
  drop_pool_blocks(dev);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.device == dev) {
      free_backing(it->second);
      freed_.insert(it->first);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  if (dev >= 0 && static_cast<std::size_t>(dev) < used_.size()) used_[dev] = 0;
}

NPURT_DECL void* memory_registry::host_malloc(std::size_t bytes, std::error_code& ec) {
  ec.clear();
  if (bytes == 0) {
    ec = make_error_code(errc::zero_size);
    return nullptr;
  }
  if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) {
    ec = make_error_code(errc::out_of_memory);  // no object can be that large
    return nullptr;
  }
  void* p = mi_zalloc_aligned(bytes, 64);
  if (!p) {
    ec = make_error_code(errc::out_of_memory);
    return nullptr;
  }
  host_allocations_.emplace(p, host_allocation{p, bytes});
  freed_host_.erase(p);  // the heap gave a freed address out again
  if (trace_)
    trace_->on_memory({-1, memory_op::alloc, reinterpret_cast<std::uint64_t>(p), bytes, 0, 0, 0, clock_.now()});
  return p;
}

NPURT_DECL void memory_registry::host_free(void* p, std::error_code& ec) {
  ec.clear();
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return;
  }
  auto it = host_allocations_.find(p);
  if (it == host_allocations_.end()) {
    // Freed before (whether queued copies still hold it or not): a double free, as device::free
    // says it.
    ec = make_error_code(freed_host_.count(p) ? errc::double_free : errc::invalid_pointer);
    return;
  }
  if (trace_)
    trace_->on_memory(
        {-1, memory_op::free, reinterpret_cast<std::uint64_t>(p), it->second.bytes, 0, 0, 0, clock_.now()});
  host_allocations_.erase(it);
  freed_host_.insert(p);
  mi_free(p);
}

NPURT_DECL void memory_registry::retire_host(void* p) noexcept {
  auto it = host_allocations_.find(p);
  if (it == host_allocations_.end()) return;
  if (trace_)
    trace_->on_memory(
        {-1, memory_op::free, reinterpret_cast<std::uint64_t>(p), it->second.bytes, 0, 0, 0, clock_.now()});
  host_allocations_.erase(it);
  retired_host_.insert(p);
  freed_host_.insert(p);
}

NPURT_DECL void memory_registry::release_host(void* p) noexcept {
  if (retired_host_.erase(p) != 0) mi_free(p);
}

NPURT_DECL const host_allocation* memory_registry::find_host_allocation(const void* p) const noexcept {
  auto it = host_allocations_.upper_bound(p);
  if (it == host_allocations_.begin()) return nullptr;
  --it;
  const auto base = reinterpret_cast<std::uintptr_t>(it->second.base);
  if (reinterpret_cast<std::uintptr_t>(p) >= base + it->second.bytes) return nullptr;
  return &it->second;
}

namespace mr_detail {
// Calls f(operand index, tensor) for each tensor operand of a kernel with memory (timing-only
// operands have none), in the descriptor's order.
template <class F>
void for_each_operand(const kernel_desc& k, F&& f) {
  std::visit(
      [&](const auto& op) {
        using op_t = std::remove_cvref_t<decltype(op)>;
        if constexpr (!std::is_same_v<op_t, kernels::fixed>) {
          std::size_t index = 0;  // the operand's position among the descriptor's tensors
          boost::pfr::for_each_field(op, [&](const auto& field) {
            using field_t = std::remove_cvref_t<decltype(field)>;
            if constexpr (std::is_same_v<field_t, tensor_desc>) {
              const std::size_t i = index++;
              if (field.data) f(i, field);
            }
          });
        }
      },
      k.op);
}
}  // namespace mr_detail

NPURT_DECL std::error_code memory_registry::check_operands(device_id dev, const kernel_desc& k,
                                                           std::string& what) const {
  std::error_code ec;
  mr_detail::for_each_operand(k, [&](std::size_t i, const tensor_desc& field) {
    if (ec) return;
    std::ostringstream os;
    os << "operand " << tensor_name(k.op, i) << " of kernel '" << k.display_name() << "' at " << field.data;
    const std::size_t bytes = field.bytes();
    if (!is_device_address(field.data)) {
      ec = make_error_code(errc::invalid_pointer);
      os << " is host memory; kernels read and write device memory";
    } else if (foreign(field.data)) {
      ec = make_error_code(errc::invalid_pointer);
      os << " is device memory of another system";
    } else if (const allocation* a = find_allocation(field.data); !a) {
      ec = make_error_code(errc::invalid_pointer);
      os << (freed_.count(reinterpret_cast<std::uint64_t>(field.data)) ? " was freed" : " is not live device memory");
    } else if (bytes > a->bytes - (reinterpret_cast<std::uint64_t>(field.data) - a->address)) {
      ec = make_error_code(errc::size_overflow);
      os << " overruns its allocation: " << bytes << " bytes from offset "
         << reinterpret_cast<std::uint64_t>(field.data) - a->address << " of a " << a->bytes << "-byte block";
    } else if (a->device != dev) {
      ec = make_error_code(errc::stream_device_mismatch);
      os << " is memory of device " << a->device << ", the stream's device is " << dev;
    }
    if (ec) what = os.str();
  });
  return ec;
}

NPURT_DECL std::string_view memory_registry::operand_touching(const kernel_desc& k, std::uint64_t lo,
                                                              std::uint64_t hi) {
  std::string_view found;
  mr_detail::for_each_operand(k, [&](std::size_t i, const tensor_desc& field) {
    if (found.empty() && range_meets(reinterpret_cast<std::uint64_t>(field.data), field.bytes(), lo, hi))
      found = tensor_name(k.op, i);
  });
  return found;
}

}  // namespace npurt::detail
