// npurt/detail/trace_layout.hpp — which process and track every record of a trace goes on. The
// Chrome trace writer, the SVG writer and the reader agree on it.
//
// A process per device (pid = device + 1) and one for the host (pid 0). Track ids (tids) encode
// what a track is, so they sort into a readable order and never collide:
//   1 + stream                       a stream (global stream id)
//   1'000'000 + engine * 1000 + lane an engine; lanes keep concurrent slices from overlapping
//   2'000'000 + lane                 collective steps
//   3'000'000 + link * 1000 + lane   a link (name, src, dst) of this process
//   4'000'000                        memory (instants and the in-use counter)
//   1 + lane (pid 0)                 a host annotation lane
#pragma once

#include <npurt/profiler/trace_data.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

namespace npurt::detail {

enum class track_kind : std::uint8_t { stream, engine, step, link, memory, host };

/// Greedy interval colouring: each item goes to the lowest lane free at its start (a lane is free
/// once its last item has ended). `order` must be sorted by start. Returns the lane per position
/// in `order`. Heaps of busy and free lanes keep it O(n log n) however many items overlap.
template <class Start, class End>
std::vector<std::uint32_t> assign_lanes(const std::vector<std::size_t>& order, Start start, End end) {
  std::vector<std::uint32_t> lanes(order.size());
  using busy_lane = std::pair<sim_time, std::uint32_t>;
  std::priority_queue<busy_lane, std::vector<busy_lane>, std::greater<>> busy;
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free;
  std::uint32_t used = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto s = start(order[k]);
    for (; !busy.empty() && busy.top().first <= s; busy.pop()) free.push(busy.top().second);
    std::uint32_t lane = used;
    if (free.empty()) {
      ++used;
    } else {
      lane = free.top();
      free.pop();
    }
    busy.push({end(order[k]), lane});
    lanes[k] = std::min<std::uint32_t>(lane, 999);
  }
  return lanes;
}

struct trace_layout {
  struct track {
    int tid = 0;
    track_kind kind = track_kind::stream;
    std::string name;
    std::uint32_t stream = 0;
    std::uint8_t priority = 4;
  };
  struct process {
    int pid = 0;
    std::string name;
    std::vector<track> tracks;  // by tid
  };

  static constexpr int memory_tid = 4'000'000;
  static constexpr int stream_tid(std::uint32_t s) noexcept {
    return 1 + static_cast<int>(std::min<std::uint32_t>(s, 999'998));
  }
  static constexpr int host_tid(std::uint32_t lane) noexcept {
    return 1 + static_cast<int>(std::min<std::uint32_t>(lane, 999'998));
  }
  static constexpr int engine_tid(engine_kind e, std::uint32_t lane) noexcept {
    return 1'000'000 + static_cast<int>(e) * 1000 + static_cast<int>(lane);
  }

  std::vector<process> processes;  // by pid
  std::vector<int> task_tid;       // per task: its engine lane's tid (0: no engine)
  std::vector<std::size_t> step_order;
  std::vector<int> step_tid;  // per step
  std::vector<std::size_t> link_order;
  std::vector<std::size_t> link_key;  // per link transfer: index into link_names
  std::vector<int> link_pid, link_tid;
  std::vector<std::string> link_names;  // "hccs 0->1"
  std::vector<int> link_base_tid;

  explicit trace_layout(const trace_data& data) {
    add_streams(data);
    add_engines(data);
    add_steps(data);
    add_links(data);
    add_memory_and_host(data);
    for (auto& [pid, ts] : tracks_) {
      process p;
      p.pid = pid;
      p.name = pid == 0 ? std::string{"host"} : "device " + std::to_string(pid - 1);
      for (auto& [tid, t] : ts) p.tracks.push_back(std::move(t));
      processes.push_back(std::move(p));
    }
    tracks_.clear();
  }

 private:
  std::map<int, std::map<int, track>> tracks_;  // pid -> tid -> track, while building

  void add(int pid, track t) { tracks_[pid].try_emplace(t.tid, std::move(t)); }

  /// Streams, with the priority they were created with (else their first task's).
  void add_streams(const trace_data& data) {
    std::map<std::pair<device_id, std::uint32_t>, std::uint8_t> streams;
    for (const auto& s : data.streams) streams.try_emplace({s.device, s.stream}, s.priority);
    for (const auto& t : data.tasks) streams.try_emplace({t.device, t.stream}, t.priority);
    for (const auto& w : data.waits) {
      streams.try_emplace({w.device, w.stream}, 4);
      if (w.record_task != 0) streams.try_emplace({w.record_device, w.record_stream}, 4);
    }
    for (const auto& r : data.records) streams.try_emplace({r.device, r.stream}, 4);
    for (const auto& [key, prio] : streams) {
      track t;
      t.tid = stream_tid(key.second);
      t.kind = track_kind::stream;
      t.name = "stream " + std::to_string(key.second) + " (prio " + std::to_string(prio) + ")";
      t.stream = key.second;
      t.priority = prio;
      add(key.first + 1, std::move(t));
    }
  }

  /// Engines: per (device, engine), tasks in time order coloured into lanes.
  void add_engines(const trace_data& data) {
    task_tid.assign(data.tasks.size(), 0);
    std::map<std::pair<device_id, engine_kind>, std::vector<std::size_t>> engines;
    for (std::size_t i = 0; i < data.tasks.size(); ++i)
      if (data.tasks[i].engine != engine_kind::none) engines[{data.tasks[i].device, data.tasks[i].engine}].push_back(i);
    for (auto& [key, idx] : engines) {
      std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        const auto& x = data.tasks[a];
        const auto& y = data.tasks[b];
        return std::tie(x.start, x.end, x.stream, x.id) < std::tie(y.start, y.end, y.stream, y.id);
      });
      const auto lanes = assign_lanes(
          idx, [&](std::size_t i) { return data.tasks[i].start; }, [&](std::size_t i) { return data.tasks[i].end; });
      for (std::size_t k = 0; k < idx.size(); ++k) {
        const int tid = engine_tid(key.second, lanes[k]);
        task_tid[idx[k]] = tid;
        track t;
        t.tid = tid;
        t.kind = track_kind::engine;
        t.name = std::string{to_string(key.second)} + (lanes[k] > 0 ? " #" + std::to_string(lanes[k] + 1) : "");
        add(key.first + 1, std::move(t));
      }
    }
  }

  /// Collective steps, per device.
  void add_steps(const trace_data& data) {
    step_order.resize(data.steps.size());
    step_tid.assign(data.steps.size(), 0);
    for (std::size_t i = 0; i < step_order.size(); ++i) step_order[i] = i;
    std::sort(step_order.begin(), step_order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = data.steps[a];
      const auto& y = data.steps[b];
      return std::tie(x.device, x.start, x.end, x.collective, x.step, x.peer) <
             std::tie(y.device, y.start, y.end, y.collective, y.step, y.peer);
    });
    for (std::size_t k = 0; k < step_order.size();) {
      std::size_t e = k;
      const device_id dev = data.steps[step_order[k]].device;
      while (e < step_order.size() && data.steps[step_order[e]].device == dev) ++e;
      std::vector<std::size_t> part(step_order.begin() + static_cast<std::ptrdiff_t>(k),
                                    step_order.begin() + static_cast<std::ptrdiff_t>(e));
      const auto lanes = assign_lanes(
          part, [&](std::size_t i) { return data.steps[i].start; }, [&](std::size_t i) { return data.steps[i].end; });
      for (std::size_t j = 0; j < part.size(); ++j) {
        const int tid = 2'000'000 + static_cast<int>(lanes[j]);
        step_tid[part[j]] = tid;
        track t;
        t.tid = tid;
        t.kind = track_kind::step;
        t.name = "collective steps" + (lanes[j] > 0 ? " #" + std::to_string(lanes[j] + 1) : std::string{});
        add(dev + 1, std::move(t));
      }
      k = e;
    }
  }

  /// Links: a link belongs to the process of its sending device (or receiving one, from host).
  void add_links(const trace_data& data) {
    using link_id = std::tuple<int, std::string_view, device_id, device_id>;
    std::map<link_id, std::vector<std::size_t>> links;
    for (std::size_t i = 0; i < data.links.size(); ++i) {
      const auto& l = data.links[i];
      const int pid = l.src >= 0 ? l.src + 1 : (l.dst >= 0 ? l.dst + 1 : 0);
      links[{pid, data.str(l.link), l.src, l.dst}].push_back(i);
    }
    link_key.assign(data.links.size(), 0);
    link_pid.assign(data.links.size(), 0);
    link_tid.assign(data.links.size(), 0);
    std::map<int, int> per_pid;
    for (auto& [key, idx] : links) {
      const auto& [pid, name, src, dst] = key;
      const std::size_t k = link_names.size();
      // Past 999 links on one process, tracks share the last base rather than run into memory's.
      const int base = 3'000'000 + 1000 * std::min(per_pid[pid]++, 999);
      const auto end_name = [](device_id d) { return d < 0 ? std::string{"host"} : std::to_string(d); };
      link_names.push_back(std::string{name} + " " + end_name(src) + "->" + end_name(dst));
      link_base_tid.push_back(base);
      std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        const auto& x = data.links[a];
        const auto& y = data.links[b];
        return std::tie(x.start, x.end, x.bytes, a) < std::tie(y.start, y.end, y.bytes, b);
      });
      const auto lanes = assign_lanes(
          idx, [&](std::size_t i) { return data.links[i].start; }, [&](std::size_t i) { return data.links[i].end; });
      for (std::size_t j = 0; j < idx.size(); ++j) {
        link_key[idx[j]] = k;
        link_pid[idx[j]] = pid;
        link_tid[idx[j]] = base + static_cast<int>(lanes[j]);
        link_order.push_back(idx[j]);
        track t;
        t.tid = base + static_cast<int>(lanes[j]);
        t.kind = track_kind::link;
        t.name = link_names[k] + (lanes[j] > 0 ? " #" + std::to_string(lanes[j] + 1) : std::string{});
        add(pid, std::move(t));
      }
    }
  }

  void add_memory_and_host(const trace_data& data) {
    for (const auto& m : data.memory) {
      track t;
      t.tid = memory_tid;
      t.kind = track_kind::memory;
      t.name = "memory";
      add(m.device < 0 ? 0 : m.device + 1, std::move(t));
    }
    for (const auto& r : data.ranges) {
      track t;
      t.tid = host_tid(r.lane);
      t.kind = track_kind::host;
      t.name = "host lane " + std::to_string(r.lane);
      add(0, std::move(t));
    }
  }
};

}  // namespace npurt::detail
