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

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

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
    if (model_ == dispatch_model::shared_fifo && !bypass) pending_.emplace(key{t.device, t.priority, t.id}, stream);
  }
  /// Whether the task, ready at its stream's head, may be dispatched now.
  [[nodiscard]] bool may_dispatch(const task_info& t) const {
    if (model_ != dispatch_model::shared_fifo) return true;
    const key k{t.device, t.priority, t.id};
    // Not queued (a bypassing stream), or the first of its device and level.
    return !pending_.contains(k) || pending_.lower_bound(key{t.device, t.priority, 0})->first == k;
  }
  /// When `t` is held behind an earlier task of its device and level: that task's id and stream
  /// (what a deadlock report names).
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint32_t>> held_behind(const task_info& t) const {
    if (model_ != dispatch_model::shared_fifo) return std::nullopt;
    const key k{t.device, t.priority, t.id};
    if (!pending_.contains(k)) return std::nullopt;
    const auto first = pending_.lower_bound(key{t.device, t.priority, 0});
    if (first->first == k) return std::nullopt;
    return std::pair{std::get<2>(first->first), first->second};
  }
  /// Device reset: its tasks not yet dispatched leave the queue (their records are gone).
  void forget(device_id dev) {
    pending_.erase(pending_.lower_bound(key{dev, 0, 0}), pending_.lower_bound(key{dev + 1, 0, 0}));
  }
  /// The task was dispatched; returns the stream whose task is now first at its level (0: none).
  std::uint32_t on_dispatch(const task_info& t) {
    if (model_ != dispatch_model::shared_fifo) return 0;
    if (pending_.erase(key{t.device, t.priority, t.id}) == 0) return 0;
    const auto it = pending_.lower_bound(key{t.device, t.priority, 0});
    if (it == pending_.end() || std::get<0>(it->first) != t.device || std::get<1>(it->first) != t.priority) return 0;
    return it->second;
  }

 private:
  using key = std::tuple<device_id, std::uint8_t, std::uint64_t>;
  dispatch_model model_ = dispatch_model::shared_fifo;
  std::map<key, std::uint32_t> pending_;
};

}  // namespace detail
}  // namespace npurt
