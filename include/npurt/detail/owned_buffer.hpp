// npurt/detail/owned_buffer.hpp — memory owned by a scope: the one body of device_buffer and
// host_buffer, parameterised by the owner's allocate and free members.
#pragma once

#include <npurt/detail/runtime_ref.hpp>

#include <cstddef>
#include <system_error>
#include <utility>

namespace npurt {
class device;
class system;
}  // namespace npurt

namespace npurt::detail {

// The runtime behind an owner (defined with the owners, in device.hpp and system.hpp).
inline runtime& runtime_of(system& sys) noexcept;
inline runtime& runtime_of(device& dev) noexcept;

/// `Allocate` throws what the owner's allocation throws; `Free` reports through an error_code
/// and is ignored here: a free after a device reset finds the memory gone already.
template <class Owner, void* (Owner::*Allocate)(std::size_t), void (Owner::*Free)(void*, std::error_code&) noexcept>
class owned_buffer {
 public:
  owned_buffer() noexcept = default;
  owned_buffer(Owner& owner, std::size_t bytes)
      : owner_(&owner), data_((owner.*Allocate)(bytes)), bytes_(bytes), rt_(&runtime_of(owner)) {}
  owned_buffer(owned_buffer&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        rt_(std::move(o.rt_)) {}
  owned_buffer& operator=(owned_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      rt_ = std::move(o.rt_);
    }
    return *this;
  }
  owned_buffer(const owned_buffer&) = delete;
  owned_buffer& operator=(const owned_buffer&) = delete;
  ~owned_buffer() { reset(); }

  /// Null once the owner's system is destroyed: the memory went with it.
  [[nodiscard]] void* data() const noexcept { return rt_ ? data_ : nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return rt_ ? bytes_ : 0; }
  explicit operator bool() const noexcept { return data() != nullptr; }
  /// Frees the memory now (nothing for an empty buffer or one whose system is gone).
  void reset() noexcept {
    if (data_ && rt_) {
      std::error_code ec;
      (owner_->*Free)(data_, ec);
    }
    owner_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
    rt_ = nullptr;
  }

 private:
  Owner* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  runtime_ref rt_;  // null once the system is gone (then owner_ dangles and is never used)
};

}  // namespace npurt::detail
