// npurt/detail/addr_map.hpp — an open-addressing map from device address to a pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace npurt::detail {

/// Open-addressing map from device address to a pointer (linear probing, backward-shift
/// deletion): the allocator's address lookup is on every free, and node-based maps cost an
/// allocation per insert. Key 0 marks an empty slot (0 is never a device address here).
template <class V>
class addr_map {
 public:
  addr_map() { rehash(64); }
  [[nodiscard]] V* find(std::uint64_t key) const noexcept {
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      if (t_[i].key == key) return t_[i].value;
      if (t_[i].key == 0) return nullptr;
    }
  }
  void assign(std::uint64_t key, V* value) {
    // At most half full: a lookup then rarely probes a second slot, and on a free the address
    // is random, so every extra probe is also a mispredicted loop exit.
    if ((size_ + 1) * 2 > t_.size()) rehash(t_.size() * 2);
    std::size_t i = slot(key);
    for (; t_[i].key != 0 && t_[i].key != key; i = (i + 1) & mask_) {}
    if (t_[i].key == 0) ++size_;
    t_[i] = {key, value};
  }
  void emplace(std::uint64_t key, V* value) { assign(key, value); }
  void erase(std::uint64_t key) noexcept {
    std::size_t i = slot(key);
    for (; t_[i].key != key; i = (i + 1) & mask_)
      if (t_[i].key == 0) return;
    // Shift later entries of the probe run back so lookups never need tombstones.
    for (std::size_t j = (i + 1) & mask_; t_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t home = slot(t_[j].key);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        t_[i] = t_[j];
        i = j;
      }
    }
    t_[i] = {0, nullptr};
    --size_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct entry {
    std::uint64_t key;
    V* value;
  };
  [[nodiscard]] std::size_t slot(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>(((key >> 9) * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  void rehash(std::size_t n) {
    std::vector<entry> old(n, entry{0, nullptr});
    old.swap(t_);
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(n));
    size_ = 0;
    for (const auto& e : old)
      if (e.key) assign(e.key, e.value);
  }
  std::vector<entry> t_;
  std::size_t mask_ = 0, size_ = 0;
  unsigned shift_ = 0;
};

}  // namespace npurt::detail
