// npurt/detail/owned_buffer.hpp — memory owned by a scope: the one body of device_buffer and
// host_buffer, parameterised by the owner's allocate and free members.
#pragma once

#include <cstddef>
#include <system_error>
#include <utility>

namespace npurt::detail {

/// `Allocate` throws what the owner's allocation throws; `Free` reports through an error_code
/// and is ignored here: a free after a device reset finds the memory gone already.
template <class Owner, void* (Owner::*Allocate)(std::size_t), void (Owner::*Free)(void*, std::error_code&) noexcept>
class owned_buffer {
 public:
  owned_buffer() noexcept = default;
  owned_buffer(Owner& owner, std::size_t bytes) : owner_(&owner), data_((owner.*Allocate)(bytes)), bytes_(bytes) {}
  owned_buffer(owned_buffer&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  owned_buffer& operator=(owned_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  owned_buffer(const owned_buffer&) = delete;
  owned_buffer& operator=(const owned_buffer&) = delete;
  ~owned_buffer() { reset(); }

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }
  /// Frees the memory now (nothing for an empty buffer).
  void reset() noexcept {
    if (data_) {
      std::error_code ec;
      (owner_->*Free)(data_, ec);
    }
    owner_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  Owner* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace npurt::detail
