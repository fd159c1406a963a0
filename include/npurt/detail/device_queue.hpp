// npurt/detail/device_queue.hpp — the device's task scheduler as the seed case describes it:
// which stream's ready head may be dispatched to the device next.
//
// Under dispatch_model::shared_fifo every stream of a device feeds one execution queue per
// priority level, in submission order: a task is dispatched only after every task of its device
// and level that was submitted before it has been dispatched (non-preemptive, head-of-line). A
// collective enqueued after a long run of compute kernels therefore starts only when the last of
// them starts — while its peers on other devices may have been waiting for it. Stream priorities
// 0..7 give each level its own queue, so a high-priority communication stream is not held behind
// compute. Streams created with stream_flags::overflow_edge or direct_submit bypass the queue
// (aclrtSetStreamOverFlowEdge, aclrtSubmitTaskWithStream): their tasks dispatch when ready.
// Event waits leave the queue when they reach their stream's head, so a wait never blocks the
// record it waits for.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/system_options.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace npurt {

namespace detail {

class device_queue {
 public:
  /// stream_flags::overflow_edge | stream_flags::direct_submit (stream.hpp checks the values).
  static constexpr std::uint32_t bypass_flags = 0x4 | 0x8;

  void configure(dispatch_model m) noexcept { model_ = m; }
  [[nodiscard]] dispatch_model model() const noexcept { return model_; }

  // A task is named by its device, its stream's priority (its level) and its id.

  /// Task `id` was enqueued on `stream`; `bypass` for streams outside the queue.
  void on_enqueue(device_id dev, std::uint8_t prio, std::uint64_t id, std::uint32_t stream, bool bypass) {
    if (model_ == dispatch_model::shared_fifo && !bypass) level_of(dev, prio).push(id, stream);
  }
  /// Whether the task, ready at its stream's head, may be dispatched now; `bypass` as for
  /// on_enqueue.
  [[nodiscard]] bool may_dispatch(device_id dev, std::uint8_t prio, std::uint64_t id, bool bypass) const {
    if (model_ != dispatch_model::shared_fifo || bypass) return true;
    // A task of a queued stream is in the queue from its enqueue to its dispatch, and the queue
    // is sorted by id: it is first exactly when nothing with a smaller id is queued.
    const fifo* q = find_level(dev, prio);
    return !q || q->empty() || q->front().id >= id;
  }
  /// When the task is held behind an earlier task of its device and level: that task's id and
  /// stream (what a deadlock report names).
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint32_t>> held_behind(device_id dev, std::uint8_t prio,
                                                                                   std::uint64_t id) const {
    if (model_ != dispatch_model::shared_fifo) return std::nullopt;
    const fifo* q = find_level(dev, prio);
    if (!q || q->empty() || q->front().id == id || !q->contains(id)) return std::nullopt;
    return std::pair{q->front().id, q->front().stream};
  }
  /// Device reset: its tasks not yet dispatched leave the queue (their records are gone).
  void forget(device_id dev) {
    for (std::uint8_t p = 0; p < levels; ++p)
      if (fifo* q = find_level(dev, p)) q->clear();
    for (auto& [k, q] : other_)
      if (k.first == dev) q.clear();
  }
  /// The task was dispatched; returns the stream whose task is now first at its level (0: none).
  std::uint32_t on_dispatch(device_id dev, std::uint8_t prio, std::uint64_t id) {
    if (model_ != dispatch_model::shared_fifo) return 0;
    fifo* q = find_level(dev, prio);
    if (!q || !q->erase(id) || q->empty()) return 0;
    return q->front().stream;
  }

 private:
  static constexpr std::uint8_t levels = 8;  // stream priorities 0..7
  struct entry {
    std::uint64_t id;
    std::uint32_t stream;
  };
  // The tasks of one device and level not yet dispatched, by id. Tasks are enqueued in id order
  // almost always and leave from the front (only the first may be dispatched), so a vector with
  // a moving head does both in O(1) without a node per task.
  class fifo {
   public:
    [[nodiscard]] bool empty() const noexcept { return head_ == v_.size(); }
    [[nodiscard]] const entry& front() const noexcept { return v_[head_]; }
    [[nodiscard]] bool contains(std::uint64_t id) const noexcept {
      const auto it = find(id);
      return it != v_.end() && it->id == id;
    }
    void push(std::uint64_t id, std::uint32_t stream) {
      if (empty() || v_.back().id < id) [[likely]] {
        // Dispatched entries are dropped only when the storage would otherwise grow, and only
        // when they are at least half of it (amortised O(1)): a queue that is filled and then
        // drained, as by a launch loop before run, never moves its entries.
        if (head_ != 0 && v_.size() == v_.capacity() && head_ * 2 >= v_.size()) compact();
        v_.push_back({id, stream});
        return;
      }
      const auto it = find(id);
      if (it != v_.end() && it->id == id) return;  // already queued
      v_.insert(it, entry{id, stream});
    }
    /// Removes `id`; false when it was not queued.
    bool erase(std::uint64_t id) {
      if (empty()) return false;
      if (v_[head_].id == id) [[likely]] {
        if (++head_ == v_.size()) clear();
        return true;
      }
      const auto it = find(id);
      if (it == v_.end() || it->id != id) return false;
      v_.erase(it);
      return true;
    }
    void clear() noexcept {
      v_.clear();
      head_ = 0;
    }

   private:
    [[nodiscard]] std::vector<entry>::const_iterator find(std::uint64_t id) const noexcept {
      return std::lower_bound(v_.begin() + static_cast<std::ptrdiff_t>(head_), v_.end(), id,
                              [](const entry& e, std::uint64_t x) { return e.id < x; });
    }
    // Drops the dispatched entries in front of head_.
    void compact() {
      v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    std::vector<entry> v_;
    std::size_t head_ = 0;
  };

  [[nodiscard]] fifo* find_level(device_id dev, std::uint8_t prio) noexcept {
    return const_cast<fifo*>(std::as_const(*this).find_level(dev, prio));
  }
  [[nodiscard]] const fifo* find_level(device_id dev, std::uint8_t prio) const noexcept {
    if (dev >= 0 && prio < levels) [[likely]] {
      const auto i = static_cast<std::size_t>(dev) * levels + prio;
      return i < by_device_.size() ? &by_device_[i] : nullptr;
    }
    const auto it = other_.find({dev, prio});
    return it == other_.end() ? nullptr : &it->second;
  }
  fifo& level_of(device_id dev, std::uint8_t prio) {
    if (dev >= 0 && prio < levels) [[likely]] {
      const auto i = static_cast<std::size_t>(dev) * levels + prio;
      if (i >= by_device_.size()) by_device_.resize((static_cast<std::size_t>(dev) + 1) * levels);
      return by_device_[i];
    }
    return other_[{dev, prio}];
  }

  dispatch_model model_ = dispatch_model::shared_fifo;
  std::vector<fifo> by_device_;  // index = device * levels + priority
  std::map<std::pair<device_id, std::uint8_t>, fifo> other_;  // ids or priorities outside those ranges
};

}  // namespace detail
}  // namespace npurt
