// npurt/impl/summary.ipp — summarize(): busy time, gaps and their causes, top kernels, critical
// path.
#pragma once

#include <npurt/detail/trace_format.hpp>
#include <npurt/profiler/summary.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace npurt {
namespace detail {

using interval = std::pair<std::int64_t, std::int64_t>;
using stream_key = std::pair<device_id, std::uint32_t>;

/// Sorts and merges intervals in place; empty ones are dropped.
inline void merge_intervals(std::vector<interval>& v) {
  std::erase_if(v, [](const interval& i) { return i.second <= i.first; });
  std::sort(v.begin(), v.end());
  std::size_t out = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (out > 0 && v[i].first <= v[out - 1].second) {
      v[out - 1].second = std::max(v[out - 1].second, v[i].second);
    } else {
      v[out++] = v[i];
    }
  }
  v.resize(out);
}

inline std::int64_t measure(const std::vector<interval>& merged) {
  std::int64_t sum = 0;
  for (const auto& i : merged) sum += i.second - i.first;
  return sum;
}

inline std::int64_t intersection(const std::vector<interval>& a, const std::vector<interval>& b) {
  std::int64_t sum = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const auto lo = std::max(a[i].first, b[j].first);
    const auto hi = std::min(a[i].second, b[j].second);
    if (hi > lo) sum += hi - lo;
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return sum;
}

inline bool is_communication(const trace_task& t) noexcept {
  if (t.engine == engine_kind::collective || t.kind == task_kind::collective) return true;
  return t.engine == engine_kind::copy_d2d && t.src_device >= 0 && t.dst_device >= 0 && t.src_device != t.dst_device;
}

inline double ratio(std::int64_t a, std::int64_t b) noexcept {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

/// The first position whose value is at least a bound, in O(log n): a max segment tree. Gap
/// causes ask "the first task of the stream (in id order) that starts at or after t" once per
/// gap, which a scan would make quadratic.
class first_at_least {
 public:
  explicit first_at_least(const std::vector<std::int64_t>& values) {
    while (size_ < values.size()) size_ *= 2;
    max_.assign(2 * size_, std::numeric_limits<std::int64_t>::min());
    std::copy(values.begin(), values.end(), max_.begin() + static_cast<std::ptrdiff_t>(size_));
    for (std::size_t i = size_ - 1; i > 0; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  /// The smallest position with value >= bound, or npos.
  [[nodiscard]] std::size_t find(std::int64_t bound) const noexcept {
    if (max_[1] < bound) return npos;
    std::size_t i = 1;
    while (i < size_) i = max_[2 * i] >= bound ? 2 * i : 2 * i + 1;
    return i - size_;
  }
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

 private:
  std::size_t size_ = 1;
  std::vector<std::int64_t> max_;
};

/// Tasks in a stable order that does not depend on the order they were reported in.
inline std::vector<std::size_t> task_order(const std::vector<trace_task>& tasks) {
  std::vector<std::size_t> order(tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(tasks[a].id, tasks[a].device, tasks[a].stream) <
           std::tie(tasks[b].id, tasks[b].device, tasks[b].stream);
  });
  return order;
}

inline void summarize_span(const std::vector<trace_task>& tasks, profile_summary& s) {
  s.tasks = tasks.size();
  if (tasks.empty()) return;
  std::int64_t lo = ps(tasks.front().start), hi = ps(tasks.front().end);
  for (const auto& t : tasks) {
    lo = std::min(lo, ps(t.start));
    hi = std::max(hi, ps(t.end));
  }
  s.begin = sim_time{picoseconds{lo}};
  s.end = sim_time{picoseconds{hi}};
  s.span = s.end - s.begin;
}

inline profile_summary::device_stats device_summary(const trace_data& data, device_id dev,
                                                    const std::vector<std::size_t>& idx, std::int64_t span) {
  const auto& tasks = data.tasks;
  profile_summary::device_stats d;
  d.device = dev;
  d.tasks = idx.size();
  std::vector<interval> all, compute, comm;
  std::map<engine_kind, std::pair<std::uint64_t, std::vector<interval>>> engines;
  for (auto i : idx) {
    const auto& t = tasks[i];
    if (t.engine == engine_kind::none) continue;
    const interval iv{ps(t.start), ps(t.end)};
    all.push_back(iv);
    auto& e = engines[t.engine];
    ++e.first;
    e.second.push_back(iv);
    if (t.engine == engine_kind::ai_core) compute.push_back(iv);
    if (is_communication(t)) comm.push_back(iv);
  }
  merge_intervals(all);
  merge_intervals(compute);
  merge_intervals(comm);
  d.busy = picoseconds{measure(all)};
  d.utilisation = ratio(d.busy.count(), span);
  d.compute = picoseconds{measure(compute)};
  d.communication = picoseconds{measure(comm)};
  d.overlap = picoseconds{intersection(compute, comm)};
  d.overlap_fraction = ratio(d.overlap.count(), d.communication.count());
  for (auto& [kind, e] : engines) {
    merge_intervals(e.second);
    profile_summary::engine_stats es;
    es.engine = kind;
    es.tasks = e.first;
    es.busy = picoseconds{measure(e.second)};
    es.utilisation = ratio(es.busy.count(), span);
    d.engines.push_back(es);
  }
  return d;
}

inline void summarize_devices(const trace_data& data, const std::vector<std::size_t>& order, std::int64_t span,
                              profile_summary& s) {
  std::map<device_id, std::vector<std::size_t>> by_device;
  for (auto i : order) by_device[data.tasks[i].device].push_back(i);
  std::map<device_id, std::size_t> peak;
  for (const auto& m : data.memory) {
    if (m.device >= 0) by_device.try_emplace(m.device);
    auto& p = peak[m.device];
    p = std::max(p, m.in_use);
  }
  for (const auto& st : data.streams) by_device.try_emplace(st.device);
  for (const auto& [dev, idx] : by_device) {
    auto d = device_summary(data, dev, idx, span);
    if (auto p = peak.find(dev); p != peak.end()) d.peak_memory = p->second;
    s.devices.push_back(std::move(d));
  }
}

/// What a stream's gaps are checked against: the waits that blocked it (those that took time,
/// by when they began) and the stream-ordered allocations made on it (by time).
struct stream_context {
  std::vector<const event_wait_info*> waits;
  std::vector<std::int64_t> allocs;
};

/// The waits that blocked across a gap, found as gaps go by in time order: among the waits that
/// began before the gap ended, the one satisfied last (then the highest task id, then the first
/// reported) blocked the gap if it was satisfied after the gap began.
class blocking_waits {
 public:
  explicit blocking_waits(const std::vector<const event_wait_info*>& waits) : waits_(waits) {
    std::stable_sort(waits_.begin(), waits_.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  }
  const event_wait_info* at(std::int64_t a, std::int64_t b) {
    for (; next_ < waits_.size() && ps(waits_[next_]->begin) < b; ++next_) {
      const auto* w = waits_[next_];
      if (best_ == nullptr || std::tie(w->satisfied, w->task) > std::tie(best_->satisfied, best_->task) ||
          (std::tie(w->satisfied, w->task) == std::tie(best_->satisfied, best_->task) && w < best_))
        best_ = w;
    }
    return best_ != nullptr && ps(best_->satisfied) > a ? best_ : nullptr;
  }

 private:
  std::vector<const event_wait_info*> waits_;
  std::size_t next_ = 0;
  const event_wait_info* best_ = nullptr;
};

/// The ranks' waits for their peers, as the collective engine traced them ("wait" steps): per
/// collective task, when its data began to move. Traced collectives are busy from then on, and
/// [arrival, data start] is a gap whose cause is a peer; a collective without steps (a trace of
/// another source) is busy from its start, and the gap before it is taken as a peer wait.
struct peer_waits {
  std::unordered_map<std::uint64_t, std::int64_t> data_start;  // by task id
  std::unordered_set<std::uint64_t> traced;                    // collectives with steps
  [[nodiscard]] std::int64_t start_of(const trace_task& t) const {
    const auto it = data_start.find(t.id);
    return it == data_start.end() ? ps(t.start) : std::max(ps(t.start), it->second);
  }
};

inline peer_waits peer_waits_of(const trace_data& data) {
  peer_waits w;
  for (const auto& st : data.steps) {
    w.traced.insert(st.collective);
    if (data.str(st.algorithm) == "wait") {
      auto [it, fresh] = w.data_start.try_emplace(st.collective, ps(st.end));
      if (!fresh) it->second = std::max(it->second, ps(st.end));
    }
  }
  return w;
}

/// Under dispatch_model::shared_fifo a task of a device and priority level is dispatched only
/// after every task of that level submitted before it; held behind one, it is dispatched in the
/// same instant as the task it waited for. Every task by (device, level, dispatch time, id).
struct dispatch_fronts {
  struct entry {
    device_id device;
    std::uint8_t priority;
    std::int64_t ready;
    std::uint64_t id;
    [[nodiscard]] auto key() const noexcept { return std::tie(device, priority, ready, id); }
  };
  std::vector<entry> by_dispatch;  // sorted by (device, level, dispatch time, id)
  /// Whether t was dispatched together with an earlier task of its device and level: what holds
  /// a ready task in the device's execution queue.
  [[nodiscard]] bool held_behind_earlier(const trace_task& t) const {
    const entry probe{t.device, t.priority, ps(t.ready), 0};
    const auto it = std::lower_bound(by_dispatch.begin(), by_dispatch.end(), probe,
                                     [](const entry& x, const entry& y) { return x.key() < y.key(); });
    return it != by_dispatch.end() && it->device == t.device && it->priority == t.priority &&
           it->ready == ps(t.ready) && it->id < t.id;
  }
  /// The task submitted just before t among those of its device and level dispatched in the
  /// same instant: the one t waited behind in the execution queue. 0 when there is none.
  [[nodiscard]] std::uint64_t held_behind(const trace_task& t) const {
    const entry probe{t.device, t.priority, ps(t.ready), t.id};
    const auto it = std::lower_bound(by_dispatch.begin(), by_dispatch.end(), probe,
                                     [](const entry& x, const entry& y) { return x.key() < y.key(); });
    if (it == by_dispatch.begin()) return 0;
    const entry& q = *(it - 1);
    return q.device == t.device && q.priority == t.priority && q.ready == ps(t.ready) && q.id < t.id ? q.id : 0;
  }
};

inline dispatch_fronts dispatch_fronts_of(const trace_data& data) {
  dispatch_fronts d;
  d.by_dispatch.reserve(data.tasks.size());
  for (const auto& t : data.tasks) d.by_dispatch.push_back({t.device, t.priority, ps(t.ready), t.id});
  std::sort(d.by_dispatch.begin(), d.by_dispatch.end(), [](const auto& x, const auto& y) { return x.key() < y.key(); });
  return d;
}

inline bool is_collective(const trace_task& t) noexcept {
  return t.kind == task_kind::collective || t.engine == engine_kind::collective;
}

inline gap_cause cause_of(const trace_task* next, const event_wait_info* blocking, bool alloc_ended, std::int64_t a,
                          const peer_waits& peers, const dispatch_fronts& fronts) {
  if (blocking != nullptr) return gap_cause::event;
  if (next != nullptr && is_collective(*next) && !peers.traced.contains(next->id)) return gap_cause::peer;
  if (alloc_ended) return gap_cause::memory;
  if (next != nullptr && ps(next->submitted) > a) return gap_cause::host;
  // Submitted before the gap began, yet dispatched only at its end, with an earlier task of the
  // device: it waited in the execution queue.
  if (next != nullptr && ps(next->ready) > a && fronts.held_behind_earlier(*next)) return gap_cause::queue;
  if (next != nullptr && next->start > next->ready) return gap_cause::engine;
  return gap_cause::other;
}

/// The idle stretches inside a stream's window (first start to last end) and why each happened.
inline void stream_gaps(const trace_data& data, const std::vector<std::size_t>& idx, const std::vector<interval>& busy,
                        const stream_context& ctx, const peer_waits& peers, const dispatch_fronts& fronts,
                        profile_summary::stream_stats& st) {
  const auto& tasks = data.tasks;
  std::int64_t w0 = ps(tasks[idx.front()].start), w1 = ps(tasks[idx.front()].end);
  std::vector<std::int64_t> engine_start(idx.size()), end(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const auto& t = tasks[idx[k]];
    w0 = std::min(w0, ps(t.start));
    w1 = std::max(w1, ps(t.end));
    engine_start[k] = t.engine != engine_kind::none ? peers.start_of(t) : std::numeric_limits<std::int64_t>::min();
    end[k] = ps(t.end);
  }
  std::vector<interval> gaps;
  std::int64_t cursor = w0;
  for (const auto& b : busy) {
    if (b.first > cursor) gaps.push_back({cursor, b.first});
    cursor = std::max(cursor, b.second);
  }
  if (w1 > cursor) gaps.push_back({cursor, w1});
  const first_at_least first_start(engine_start), first_end(end);
  blocking_waits blocking(ctx.waits);
  for (auto [a, b] : gaps) {
    profile_summary::gap g;
    g.begin = sim_time{picoseconds{a}};
    g.end = sim_time{picoseconds{b}};
    // The task that ended the gap: the first engine task starting at its end, else the first
    // task still running at its end (a trailing wait).
    std::size_t k = first_start.find(b);
    if (k == first_at_least::npos) k = first_end.find(b);
    const trace_task* next = k == first_at_least::npos ? nullptr : &tasks[idx[k]];
    if (next != nullptr) g.next_task = next->id;
    // A traced collective that waited for its peers ends the gap: the stretch from its arrival
    // is that wait, and what came before its arrival is a gap of its own, with its own cause.
    if (next != nullptr && is_collective(*next) && peers.data_start.contains(next->id)) {
      const std::int64_t arrival = std::max(a, ps(next->start));
      profile_summary::gap w;
      w.begin = sim_time{picoseconds{arrival}};
      w.end = g.end;
      w.cause = gap_cause::peer;
      w.next_task = next->id;
      if (arrival > a) {
        g.end = w.begin;
        b = arrival;
      } else {
        st.idle += w.duration();
        st.gaps.push_back(w);
        continue;
      }
      const auto* ev = blocking.at(a, b);
      const auto alloc = std::upper_bound(ctx.allocs.begin(), ctx.allocs.end(), a);
      g.cause = cause_of(next, ev, alloc != ctx.allocs.end() && *alloc <= b, a, peers, fronts);
      if (ev != nullptr) g.event = ev->event;
      st.idle += g.duration() + w.duration();
      st.gaps.push_back(g);
      st.gaps.push_back(w);
      continue;
    }
    const auto* w = blocking.at(a, b);
    const auto alloc = std::upper_bound(ctx.allocs.begin(), ctx.allocs.end(), a);
    g.cause = cause_of(next, w, alloc != ctx.allocs.end() && *alloc <= b, a, peers, fronts);
    if (w != nullptr) g.event = w->event;
    st.idle += g.duration();
    st.gaps.push_back(g);
  }
}

inline std::map<stream_key, stream_context> stream_contexts(const trace_data& data) {
  std::map<stream_key, stream_context> out;
  for (const auto& w : data.waits)
    if (w.satisfied > w.begin) out[{w.device, w.stream}].waits.push_back(&w);
  for (const auto& m : data.memory)
    if (m.op == memory_op::alloc && m.stream != 0) out[{m.device, m.stream}].allocs.push_back(ps(m.time));
  for (auto& [key, c] : out) std::sort(c.allocs.begin(), c.allocs.end());
  return out;
}

/// Task indices per stream in id order.
inline std::map<stream_key, std::vector<std::size_t>> tasks_by_stream(const trace_data& data,
                                                                      const std::vector<std::size_t>& order) {
  std::map<stream_key, std::vector<std::size_t>> by_stream;
  for (const auto& st : data.streams) by_stream.try_emplace({st.device, st.stream});
  for (auto i : order) by_stream[{data.tasks[i].device, data.tasks[i].stream}].push_back(i);
  return by_stream;
}

inline void summarize_streams(const trace_data& data, const std::vector<std::size_t>& order,
                              const std::map<stream_key, std::vector<std::size_t>>& by_stream, std::int64_t span,
                              const dispatch_fronts& fronts, profile_summary& s) {
  const auto& tasks = data.tasks;
  std::map<stream_key, std::uint8_t> priorities;
  for (const auto& st : data.streams) priorities.try_emplace({st.device, st.stream}, st.priority);
  for (auto i : order) priorities.try_emplace({tasks[i].device, tasks[i].stream}, tasks[i].priority);
  const auto contexts = stream_contexts(data);
  const auto peers = peer_waits_of(data);
  const stream_context none;
  for (const auto& [key, idx] : by_stream) {
    profile_summary::stream_stats st;
    st.device = key.first;
    st.stream = key.second;
    st.priority = priorities[key];
    st.tasks = idx.size();
    std::vector<interval> busy;
    for (auto i : idx)
      if (tasks[i].engine != engine_kind::none) busy.push_back({peers.start_of(tasks[i]), ps(tasks[i].end)});
    merge_intervals(busy);
    st.busy = picoseconds{measure(busy)};
    st.utilisation = ratio(st.busy.count(), span);
    if (!idx.empty()) {
      const auto c = contexts.find(key);
      stream_gaps(data, idx, busy, c != contexts.end() ? c->second : none, peers, fronts, st);
    }
    s.streams.push_back(std::move(st));
  }
}

inline void summarize_kernels(const trace_data& data, std::size_t top_kernels, profile_summary& s) {
  std::map<std::string_view, profile_summary::kernel_stats> kernels;
  for (const auto& t : data.tasks) {
    if (t.kind != task_kind::kernel) continue;
    auto& k = kernels[data.str(t.name)];
    ++k.count;
    k.total += t.duration();
    k.max = std::max(k.max, t.duration());
    k.flops += t.flops;
    k.bytes += t.bytes;
  }
  for (auto& [name, k] : kernels) {
    k.name = std::string{name};
    s.top_kernels.push_back(std::move(k));
  }
  std::stable_sort(s.top_kernels.begin(), s.top_kernels.end(),
                   [](const auto& a, const auto& b) { return a.total > b.total; });
  if (s.top_kernels.size() > top_kernels) s.top_kernels.resize(top_kernels);
}

/// Each task's predecessor through an event it waited on: the record task that ended last.
/// `by_id`: each task id's first record in the summary's order.
inline std::unordered_map<std::uint64_t, std::size_t> event_predecessors(
    const trace_data& data, const std::unordered_map<std::uint64_t, std::size_t>& by_id) {
  const auto& tasks = data.tasks;
  std::unordered_map<std::uint64_t, std::size_t> event_prev;  // wait task id -> record task
  std::vector<const event_wait_info*> waits;
  for (const auto& w : data.waits) waits.push_back(&w);
  std::sort(waits.begin(), waits.end(), [](auto* a, auto* b) {
    return std::tie(a->task, a->record_task, a->event) < std::tie(b->task, b->record_task, b->event);
  });
  for (const auto* w : waits) {
    if (w->record_task == 0) continue;
    auto r = by_id.find(w->record_task);
    if (r == by_id.end()) continue;
    auto [it, fresh] = event_prev.try_emplace(w->task, r->second);
    if (!fresh && tasks[r->second].end > tasks[it->second].end) it->second = r->second;
  }
  return event_prev;
}

inline void critical_path(const trace_data& data, const std::vector<std::size_t>& order,
                          const std::map<stream_key, std::vector<std::size_t>>& by_stream,
                          const dispatch_fronts& fronts, profile_summary& s) {
  const auto& tasks = data.tasks;
  std::unordered_map<std::uint64_t, std::size_t> stream_prev;  // task id -> previous on its stream
  for (const auto& [key, idx] : by_stream)
    for (std::size_t k = 1; k < idx.size(); ++k) stream_prev[tasks[idx[k]].id] = idx[k - 1];
  std::unordered_map<std::uint64_t, std::size_t> by_id;  // task id -> its first record
  for (auto i : order) by_id.try_emplace(tasks[i].id, i);
  const auto event_prev = event_predecessors(data, by_id);
  std::size_t cur = order.front();
  for (auto i : order)
    if (std::tie(tasks[i].end, tasks[i].id) > std::tie(tasks[cur].end, tasks[cur].id)) cur = i;
  // A collective part that waited for its peers: the rank that arrived last (its wait step's
  // peer) and when the data began to move. The part of that rank is found by its arrival: it
  // started as the data began to move.
  struct peer_wait {
    device_id peer;
    sim_time data_start;
  };
  std::unordered_map<std::uint64_t, peer_wait> waited_for_peer;  // by task id
  for (const auto& st : data.steps) {
    if (data.str(st.algorithm) != "wait" || st.end <= st.start) continue;
    auto [it, fresh] = waited_for_peer.try_emplace(st.collective, peer_wait{st.peer, st.end});
    if (!fresh && st.end > it->second.data_start) it->second = {st.peer, st.end};
  }
  std::map<std::pair<device_id, sim_time>, std::size_t> collective_at;  // (device, start) -> task
  if (!waited_for_peer.empty())
    for (auto i : order)
      if (tasks[i].kind == task_kind::collective) collective_at.try_emplace({tasks[i].device, tasks[i].start}, i);
  // Tasks by end, for the host edge below. Most steps never look for that edge (a device
  // predecessor ended after the host's submission), so the O(n log n) sort is paid only on the
  // first step that does.
  std::vector<std::size_t> by_end;
  bool by_end_built = false;
  // Over by_end, the smallest task id under each node of a binary tree: the host can only have
  // waited for work it had already enqueued (a smaller id), and the last such task to end by a
  // given time is found in O(log n) instead of a scan back past later-enqueued tasks.
  std::vector<std::uint64_t> min_id;
  std::size_t leaves = 1;
  const auto last_enqueued_before = [&](std::size_t pos, std::uint64_t id) {
    // The rightmost position below `pos` whose task id is below `id`, or pos when there is none.
    std::size_t node = 1, lo = 0, width = leaves;
    std::vector<std::pair<std::size_t, std::size_t>> pending;  // (node, lo) of left halves to try
    while (true) {
      if (lo < pos && min_id[node] < id) {
        if (width == 1) return lo;
        width /= 2;
        pending.emplace_back(2 * node, lo);
        node = 2 * node + 1;
        lo += width;
        continue;
      }
      // Go back up to the most recent left half not tried yet.
      if (pending.empty()) return pos;
      std::tie(node, lo) = pending.back();
      pending.pop_back();
      width = std::size_t{1} << (std::bit_width(leaves) - std::bit_width(node));
    }
  };
  // A trace with repeated ids or a dependency cycle must not make the path revisit a task.
  std::vector<bool> visited(tasks.size(), false);
  constexpr std::size_t no_task = std::numeric_limits<std::size_t>::max();
  // The task that ended last by `t`'s submission among those enqueued before it, or no_task
  // (none, or one the path already visited: the path ends there, as at a cycle). One search per
  // step: the summary stays O(n log n) on a hostile trace.
  const auto host_predecessor = [&](const trace_task& t) -> std::size_t {
    if (!by_end_built) {
      by_end = order;
      std::sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
        return std::tie(tasks[a].end, tasks[a].id) < std::tie(tasks[b].end, tasks[b].id);
      });
      by_end_built = true;
      while (leaves < by_end.size()) leaves *= 2;
      min_id.assign(2 * leaves, std::numeric_limits<std::uint64_t>::max());
      for (std::size_t i = 0; i < by_end.size(); ++i) min_id[leaves + i] = tasks[by_end[i]].id;
      for (std::size_t k = leaves - 1; k >= 1; --k) min_id[k] = std::min(min_id[2 * k], min_id[2 * k + 1]);
    }
    const sim_time by = std::min(t.submitted, t.start);
    const auto it = std::upper_bound(by_end.begin(), by_end.end(), by,
                                     [&](sim_time at, std::size_t i) { return at < tasks[i].end; });
    const auto pos = static_cast<std::size_t>(it - by_end.begin());
    const std::size_t found = last_enqueued_before(pos, t.id);
    return found == pos || visited[by_end[found]] ? no_task : by_end[found];
  };
  std::vector<profile_summary::path_task> rev;
  bool via_event = false, via_host = false, via_peer = false, via_queue = false;
  while (!visited[cur]) {
    visited[cur] = true;
    const auto& t = tasks[cur];
    rev.push_back({t.id, std::string{data.str(t.name)}, t.device, t.stream, t.kind, t.engine, t.start, t.end, via_event,
                   via_host, via_peer, via_queue});
    via_peer = false;
    via_queue = false;
    if (const auto w = waited_for_peer.find(t.id); w != waited_for_peer.end()) {
      // Its data could not move before the last rank arrived, later than anything of its own
      // stream: the path goes on through that rank's part, as NCCL's straggler analysis does.
      const auto q = collective_at.find({w->second.peer, w->second.data_start});
      if (q != collective_at.end() && !visited[q->second]) {
        via_event = via_host = false;
        via_peer = true;
        cur = q->second;
        continue;
      }
    }
    auto p = stream_prev.find(t.id);
    auto e = event_prev.find(t.id);
    const bool has_p = p != stream_prev.end(), has_e = e != event_prev.end();
    via_host = false;
    // Held in its device's execution queue (dispatch_model::shared_fifo): dispatched after its
    // submission and after everything it depended on had ended, in the same instant as an earlier
    // task of its device and level. The task it waited behind made it late, so the path goes on
    // through it (an all-reduce queued behind the backward pass's kernels: the kernels are on the
    // path, not only the all-reduce).
    std::int64_t deps_end = ps(t.submitted);
    if (has_p) deps_end = std::max(deps_end, ps(tasks[p->second].end));
    if (has_e) deps_end = std::max(deps_end, ps(tasks[e->second].end));
    if (ps(t.ready) > deps_end) {
      const auto q = by_id.find(fronts.held_behind(t));
      if (q != by_id.end() && !visited[q->second]) {
        via_event = false;
        via_queue = true;
        cur = q->second;
        continue;
      }
    }
    // The host enqueued it, and virtual host time only moves while the host waits, so what it
    // waited for ended by the task's submission. The task that ended last by then, among those
    // enqueued before it, stands for it, as a CPU-GPU dependency does on Nsight Systems' critical
    // path. That edge is taken when the task has no device predecessor (the first task of its
    // stream, a blocking copy's), and when the host's submission came after every device
    // predecessor had ended and what the host waited for ended later than they did (a launch
    // after a synchronize on another stream): there the device predecessors did not hold it back.
    if (!has_p && !has_e) {
      const std::size_t found = host_predecessor(t);
      if (found == no_task) break;
      via_event = false;
      via_host = true;
      cur = found;
      continue;
    }
    std::int64_t device_end = std::numeric_limits<std::int64_t>::min();
    if (has_p) device_end = ps(tasks[p->second].end);
    if (has_e) device_end = std::max(device_end, ps(tasks[e->second].end));
    if (ps(t.submitted) > device_end) {
      if (const std::size_t found = host_predecessor(t); found != no_task && ps(tasks[found].end) > device_end) {
        via_event = false;
        via_host = true;
        cur = found;
        continue;
      }
    }
    // Ties go to the stream predecessor: stream order is the dependency that always exists.
    via_event = has_e && (!has_p || tasks[e->second].end > tasks[p->second].end);
    cur = via_event ? e->second : p->second;
  }
  // The flags were recorded on the task reached through the edge; move them to the task the
  // edge leaves from, which is the one that waited.
  for (std::size_t k = 0; k + 1 < rev.size(); ++k) {
    rev[k].via_event = rev[k + 1].via_event;
    rev[k].via_host = rev[k + 1].via_host;
    rev[k].via_peer = rev[k + 1].via_peer;
    rev[k].via_queue = rev[k + 1].via_queue;
  }
  if (!rev.empty()) rev.back().via_event = rev.back().via_host = rev.back().via_peer = rev.back().via_queue = false;
  std::reverse(rev.begin(), rev.end());
  s.critical_path = std::move(rev);
  const auto first = ps(s.critical_path.front().start), last = ps(s.critical_path.back().end);
  s.critical_path_length = picoseconds{last - first};
  // The union of the path's engine time inside the path: the same as the sum of durations on a
  // real trace (a path's tasks follow one another), and never more than the length on any other.
  std::vector<interval> busy;
  for (const auto& p : s.critical_path)
    if (p.engine != engine_kind::none) busy.push_back({std::max(ps(p.start), first), std::min(ps(p.end), last)});
  merge_intervals(busy);
  s.critical_path_busy = picoseconds{measure(busy)};
}

}  // namespace detail

NPURT_DECL profile_summary summarize(const trace_data& data, std::size_t top_kernels) {
  profile_summary s;
  detail::summarize_span(data.tasks, s);
  s.failed_tasks = data.errors.size();
  s.tasks_before_attach = data.tasks_before_attach;
  const std::int64_t span = s.span.count();
  const auto order = detail::task_order(data.tasks);
  detail::summarize_devices(data, order, span, s);
  const auto by_stream = detail::tasks_by_stream(data, order);
  // Which tasks were dispatched behind which in their device's queue: the stream gaps and the
  // critical path both read it.
  const auto fronts = detail::dispatch_fronts_of(data);
  detail::summarize_streams(data, order, by_stream, span, fronts, s);
  detail::summarize_kernels(data, top_kernels, s);
  if (!data.tasks.empty()) detail::critical_path(data, order, by_stream, fronts, s);
  return s;
}

}  // namespace npurt
