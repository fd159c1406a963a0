// npurt/detail/owned_buffer.hpp — memory owned by a scope: the common body of device_buffer and
// host_buffer. Traits say how the owner allocates and frees.
#pragma once

#include <cstddef>
#include <utility>

namespace npurt::detail {

template <class Owner, class Traits>
class owned_buffer {
 public:
  owned_buffer() noexcept = default;
  owned_buffer(Owner& owner, std::size_t bytes)
      : owner_(&owner), data_(Traits::allocate(owner, bytes)), bytes_(bytes) {}
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
  /// Frees the memory now (nothing for an empty buffer; an error from a free after a device
  /// reset is ignored: the memory is gone already).
  void reset() noexcept {
    if (data_) Traits::release(*owner_, data_);
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
