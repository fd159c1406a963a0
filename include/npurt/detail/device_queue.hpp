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

  /// A task was enqueued on `stream`; `bypass` for streams outside the queue.
  void on_enqueue(const task_info& t, std::uint32_t stream, bool bypass) {
    if (model_ == dispatch_model::shared_fifo && !bypass) level_of(t, true)->push(t.id, stream);
  }
  /// Whether the task, ready at its stream's head, may be dispatched now.
  [[nodiscard]] bool may_dispatch(const task_info& t) const {
    if (model_ != dispatch_model::shared_fifo) return true;
    const level* l = level_of(t);
    // Not queued (a bypassing stream), or the first of its device and level.
    return !l || l->empty() || l->front().id == t.id || !l->contains(t.id);
  }
  /// When `t` is held behind an earlier task of its device and level: that task's id and stream
  /// (what a deadlock report names).
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint32_t>> held_behind(const task_info& t) const {
    if (model_ != dispatch_model::shared_fifo) return std::nullopt;
    const level* l = level_of(t);
    if (!l || l->empty() || l->front().id == t.id || !l->contains(t.id)) return std::nullopt;
    return std::pair{l->front().id, l->front().stream};
  }
  /// Device reset: its tasks not yet dispatched leave the queue (their records are gone).
  void forget(device_id dev) {
    for (std::size_t p = 0; p < levels_per_device; ++p) {
      const std::size_t i = static_cast<std::size_t>(dev) * levels_per_device + p;
      if (dev >= 0 && i < levels_.size()) levels_[i] = level{};
    }
  }
  /// The task was dispatched; returns the stream whose task is now first at its level (0: none).
  std::uint32_t on_dispatch(const task_info& t) {
    if (model_ != dispatch_model::shared_fifo) return 0;
    level* l = level_of(t);
    if (!l || !l->erase(t.id)) return 0;
    return l->empty() ? 0 : l->front().stream;
  }

 private:
  // One FIFO per (device, priority level), in task id order. Task ids grow with every enqueue,
  // so a push is an append and the first task is the front; a task that leaves out of order
  // (an event wait reaching its stream's head) is found by binary search and marked, and marked
  // entries are dropped when they reach the front. Every operation is O(log n) in the level's
  // length and independent of how many devices the system has.
  struct entry {
    std::uint64_t id;
    std::uint32_t stream;
    bool live;
  };
  struct level {
    std::vector<entry> q;
    std::size_t head = 0;  // q[head] is live whenever head < q.size()

    [[nodiscard]] bool empty() const noexcept { return head == q.size(); }
    [[nodiscard]] const entry& front() const noexcept { return q[head]; }
    /// The index of task `id` while it is queued, or q.size().
    [[nodiscard]] std::size_t find(std::uint64_t id) const noexcept {
      const auto it = std::lower_bound(q.begin() + static_cast<std::ptrdiff_t>(head), q.end(), id,
                                       [](const entry& e, std::uint64_t v) { return e.id < v; });
      return it != q.end() && it->id == id && it->live ? static_cast<std::size_t>(it - q.begin()) : q.size();
    }
    [[nodiscard]] bool contains(std::uint64_t id) const noexcept { return find(id) != q.size(); }
    void push(std::uint64_t id, std::uint32_t stream) {
      if (empty()) {
        q.clear();
        head = 0;
      }
      if (q.empty() || q.back().id < id) {
        q.push_back(entry{id, stream, true});
        return;
      }
      // Enqueued after a task created later (ids are taken before enqueue): keep the order.
      const auto it = std::lower_bound(q.begin() + static_cast<std::ptrdiff_t>(head), q.end(), id,
                                       [](const entry& e, std::uint64_t v) { return e.id < v; });
      q.insert(it, entry{id, stream, true});
    }
    bool erase(std::uint64_t id) {
      // Dispatch takes the front almost always: no search then.
      const std::size_t i = !empty() && q[head].id == id ? head : find(id);
      if (i == q.size()) return false;
      q[i].live = false;
      while (head < q.size() && !q[head].live) ++head;
      if (head == q.size()) {
        q.clear();
        head = 0;
      } else if (head >= 1024 && head * 2 >= q.size()) {
        q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(head));  // amortised O(1)
        head = 0;
      }
      return true;
    }
  };
  static constexpr std::size_t levels_per_device = 8;  // stream priorities 0..7

  [[nodiscard]] const level* level_of(const task_info& t) const noexcept {
    const std::size_t i = index(t);
    return t.device >= 0 && t.priority < levels_per_device && i < levels_.size() ? &levels_[i] : nullptr;
  }
  level* level_of(const task_info& t, bool create = false) {
    if (t.device < 0 || t.priority >= levels_per_device) return nullptr;  // never made by the scheduler
    const std::size_t i = index(t);
    if (i >= levels_.size()) {
      if (!create) return nullptr;
      levels_.resize((static_cast<std::size_t>(t.device) + 1) * levels_per_device);
    }
    return &levels_[i];
  }
  static std::size_t index(const task_info& t) noexcept {
    return static_cast<std::size_t>(t.device) * levels_per_device + t.priority;
  }

  dispatch_model model_ = dispatch_model::shared_fifo;
  std::vector<level> levels_;
};

}  // namespace detail
}  // namespace npurt
