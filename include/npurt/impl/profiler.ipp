// npurt/impl/profiler.ipp
#pragma once

#include <npurt/profiler.hpp>
#include <npurt/detail/trace_layout.hpp>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <ostream>
#include <set>
#include <tuple>
#include <utility>

namespace npurt {

// ---------------------------------------------------------------------------------------------
// trace_data

NPURT_DECL std::uint32_t trace_data::intern(std::string_view s) {
  if (s.empty()) return 0;
  if (index_.empty() && strings.size() > 1) {
    // Strings were filled by hand (or the index was lost by a copy): rebuild it once.
    for (std::uint32_t i = 1; i < strings.size(); ++i) index_.emplace(strings[i], i);
  }
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(strings.size());
  strings.emplace_back(s);
  index_.emplace(strings.back(), id);
  return id;
}

NPURT_DECL void trace_data::clear() {
  strings.assign(1, std::string{});
  index_.clear();
  tasks.clear();
  records.clear();
  waits.clear();
  memory.clear();
  links.clear();
  steps.clear();
  ranges.clear();
  streams.clear();
  shutdown.reset();
}

// ---------------------------------------------------------------------------------------------
// profiler: recording

NPURT_DECL profiler::profiler() { reserve(0); }

NPURT_DECL profiler::profiler(clock_type clock) : clock_(std::move(clock)) { reserve(0); }

NPURT_DECL std::unique_ptr<profiler> profiler::from_environment() {
  const char* path = std::getenv("NPURT_TRACE");
  if (path == nullptr || *path == '\0') return nullptr;
  auto p = std::make_unique<profiler>();
  p->set_output(path);
  return p;
}

NPURT_DECL void profiler::reserve(std::size_t tasks) {
  pending_tasks_.reserve(tasks * sizeof(detail::task_head));
  const std::size_t others = std::max<std::size_t>(tasks / 8, 1024);
  data_.records.reserve(data_.records.size() + others);
  data_.waits.reserve(data_.waits.size() + others);
  data_.memory.reserve(data_.memory.size() + 1024);
}

NPURT_DECL void profiler::clear() {
  data_.clear();
  pending_tasks_.clear();
  latest_ = {};
  for (auto& s : name_cache_) s = name_slot{};
}

namespace detail {

/// The first and last bytes of a name (n > 0), read without going past its end: together they
/// hold every character of names up to 16 long.
inline void name_ends(const char* p, std::size_t n, std::uint64_t& head, std::uint64_t& tail) noexcept {
  if (n >= 8) {
    std::memcpy(&head, p, 8);
    std::memcpy(&tail, p + n - 8, 8);
  } else if (n >= 4) {
    std::uint32_t a = 0, b = 0;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    head = a;
    tail = b;
  } else {
    head = static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) |
           static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8 |
           static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16;
    tail = 0;
  }
}

inline std::int64_t ps(sim_time t) noexcept { return t.time_since_epoch().count(); }

/// A task's times as a record keeps them: the end, and the steps back from it to start, ready
/// and submitted, which fit the head when each is under 2^32 ps.
struct task_steps {
  std::int64_t end, start, ready, submitted;
  std::uint64_t run, wait, queue;

  explicit task_steps(const task_info& t) noexcept
      : end(ps(t.end)), start(ps(t.start)), ready(ps(t.ready)), submitted(ps(t.submitted)),
        run(static_cast<std::uint64_t>(end - start)), wait(static_cast<std::uint64_t>(start - ready)),
        queue(static_cast<std::uint64_t>(ready - submitted)) {}
  [[nodiscard]] bool fit() const noexcept { return ((run | wait | queue) >> 32) == 0; }
};

/// Builds the head every task record starts with at `at`.
inline task_head* put_head(void* at, const task_info& t, const task_steps& s, std::uint32_t name,
                           std::uint8_t flags) noexcept {
  auto* h = ::new (at) task_head;
  h->id = t.id;
  h->end = s.end;
  h->run = static_cast<std::uint32_t>(s.run);
  h->wait = static_cast<std::uint32_t>(s.wait);
  h->stream = t.stream;
  h->priority = t.priority;
  h->kind = t.kind;
  h->engine = t.engine;
  h->flags = flags;
  h->queue = static_cast<std::uint32_t>(s.queue);
  h->name = name;
  return h;
}

/// Calls f(head, extra or null, times or null) for each record of a span of a profiler's task
/// chunks, oldest first.
template <class F>
void for_each_task_record(trace_chunks::span sp, F&& f) {
  for (const std::byte* p = sp.begin; p != sp.end;) {
    const auto* h = std::launder(reinterpret_cast<const task_head*>(p));
    p += sizeof(task_head);
    const task_extra* x = nullptr;
    const task_times* tt = nullptr;
    if ((h->flags & task_head::has_extra) != 0) {
      x = std::launder(reinterpret_cast<const task_extra*>(p));
      p += sizeof(task_extra);
    }
    if ((h->flags & task_head::has_times) != 0) {
      tt = std::launder(reinterpret_cast<const task_times*>(p));
      p += sizeof(task_times);
    }
    f(*h, x, tt);
  }
}

}  // namespace detail

NPURT_DECL std::uint32_t profiler::intern_fast(std::string_view s) {
  if (s.empty()) return 0;
  name_slot& slot = slot_of(s.data());
  const std::size_t n = s.size();
  const std::uint32_t size = n <= short_name ? static_cast<std::uint32_t>(n) : long_name | static_cast<std::uint32_t>(n);
  if (slot.data == s.data() && slot.size == size && n < long_name) {
    std::uint64_t head = 0, tail = 0;
    detail::name_ends(s.data(), n, head, tail);
    if (head == slot.head && tail == slot.tail &&
        (n <= short_name || std::memcmp(data_.strings[slot.id].data(), s.data(), n) == 0))
      return slot.id;
  }
  const std::uint32_t id = data_.intern(s);
  if (n < long_name) {
    slot.data = s.data();
    slot.size = size;
    detail::name_ends(s.data(), n, slot.head, slot.tail);
    slot.id = id;
  }
  return id;
}

NPURT_DECL sim_time profiler::now() const {
  if (clock_) return clock_();
  // Tasks leave latest_ alone as they arrive (a compare less per task): catch up with them here.
  pending_tasks_.for_each_new_span([this](detail::trace_chunks::span sp) {
    detail::for_each_task_record(sp, [this](const detail::task_head& h, const detail::task_extra*, const detail::task_times*) {
      seen(sim_time{picoseconds{h.end}});
    });
  });
  return latest_;
}

NPURT_DECL void profiler::on_task(const task_info& t) {
  // The common case takes no call and writes a 40-byte head in place: a kernel with nothing but
  // times to tell (no flops, bytes or block_dim, steps that fit), on a device below 63, whose
  // short name the cache knows. Everything else goes to on_task_slow().
  using detail::task_head;
  if (!pending_tasks_.has_room()) [[unlikely]]
    return on_task_slow(t);
  const char* const np = t.name.data();
  const std::size_t nn = t.name.size();
  const name_slot& slot = slot_of(np);
  // A slot's size is 1 .. short_name or has long_name set: a match is a short name.
  if (slot.data != np || slot.size != nn) [[unlikely]]
    return on_task_slow(t);
  std::uint64_t head = 0, tail = 0;
  detail::name_ends(np, nn, head, tail);
  if (head != slot.head || tail != slot.tail) [[unlikely]]
    return on_task_slow(t);
  static_assert(static_cast<int>(task_kind::kernel) == 0);
  if ((t.flops | t.bytes | t.fixed.flops | t.fixed.bytes | t.block_dim | static_cast<std::uint64_t>(t.kind)) != 0 ||
      static_cast<std::uint32_t>(t.device) >= task_head::device_mask) [[unlikely]]
    return on_task_slow(t);
  const detail::task_steps steps(t);
  if (!steps.fit()) [[unlikely]]
    return on_task_slow(t);
  detail::put_head(pending_tasks_.cursor(), t, steps, slot.id, static_cast<std::uint8_t>(t.device));
  pending_tasks_.commit(sizeof(task_head));
}

NPURT_DECL void profiler::on_task_slow(const task_info& t) {
  using detail::task_head;
  std::string_view name = t.name;
  if (name.empty()) name = t.kernel != nullptr ? t.kernel->display_name() : to_string(t.kind);
  const std::uint32_t name_id = intern_fast(name);
  const std::uint64_t flops = t.flops != 0 ? t.flops : (t.kernel == nullptr ? t.fixed.flops : 0);
  const std::uint64_t bytes =
      t.bytes != 0 ? t.bytes : (t.kind == task_kind::kernel ? (t.kernel == nullptr ? t.fixed.bytes : 0) : t.copy.bytes);
  device_id src = -1, dst = -1;
  if (t.kind == task_kind::memcpy || t.kind == task_kind::memset) {
    src = t.copy.src_device;
    dst = t.copy.dst_device;
  }
  const detail::task_steps steps(t);
  const bool extra = (flops | bytes | t.block_dim) != 0 || src != -1 || dst != -1 ||
                     static_cast<std::uint32_t>(t.device) >= task_head::device_mask;
  std::uint8_t flags = extra ? task_head::has_extra : static_cast<std::uint8_t>(t.device);
  if (!steps.fit()) flags |= task_head::has_times;

  std::byte* const p = pending_tasks_.room();
  detail::put_head(p, t, steps, name_id, flags);
  std::size_t n = sizeof(task_head);
  if (extra) {
    ::new (static_cast<void*>(p + n)) detail::task_extra{flops, bytes, t.block_dim, t.device, src, dst};
    n += sizeof(detail::task_extra);
  }
  if (!steps.fit()) {
    ::new (static_cast<void*>(p + n)) detail::task_times{steps.submitted, steps.ready, steps.start};
    n += sizeof(detail::task_times);
  }
  pending_tasks_.commit(n);
}

NPURT_DECL void profiler::drain() const {
  using detail::task_head;
  static_assert(sizeof(task_head) == 40 && sizeof(detail::task_extra) % detail::trace_chunks::alignment == 0 &&
                sizeof(detail::task_times) % detail::trace_chunks::alignment == 0 &&
                sizeof(task_head) + sizeof(detail::task_extra) + sizeof(detail::task_times) <=
                    detail::trace_chunks::max_record);
  auto& out = data_.tasks;
  out.reserve(out.size() + pending_tasks_.used_bytes() / sizeof(task_head));
  pending_tasks_.for_each_span([&](detail::trace_chunks::span sp) {
    detail::for_each_task_record(sp, [&](const task_head& h, const detail::task_extra* x, const detail::task_times* tt) {
      trace_task r;
      r.id = h.id;
      r.stream = h.stream;
      r.priority = h.priority;
      r.kind = h.kind;
      r.engine = h.engine;
      r.name = h.name;
      r.end = sim_time{picoseconds{h.end}};
      if (tt != nullptr) {
        r.submitted = sim_time{picoseconds{tt->submitted}};
        r.ready = sim_time{picoseconds{tt->ready}};
        r.start = sim_time{picoseconds{tt->start}};
      } else {
        r.start = r.end - picoseconds{h.run};
        r.ready = r.start - picoseconds{h.wait};
        r.submitted = r.ready - picoseconds{h.queue};
      }
      if (x != nullptr) {
        r.device = x->device;
        r.flops = x->flops;
        r.bytes = x->bytes;
        r.block_dim = x->block_dim;
        r.src_device = x->src_device;
        r.dst_device = x->dst_device;
      } else {
        r.device = h.flags & task_head::device_mask;
      }
      seen(r.end);
      out.push_back(r);
    });
  });
  pending_tasks_.clear();
}

NPURT_DECL void profiler::on_event_record(const event_record_info& e) {
  data_.records.push_back(e);
  seen(e.time);
}

NPURT_DECL void profiler::on_event_wait(const event_wait_info& w) {
  data_.waits.push_back(w);
  seen(w.satisfied);
}

NPURT_DECL void profiler::on_memory(const memory_info& m) {
  data_.memory.push_back(m);
  seen(m.time);
}

NPURT_DECL void profiler::on_link_transfer(const link_transfer_info& l) {
  data_.links.push_back({intern_fast(l.link), l.src, l.dst, l.bytes, l.start, l.end});
  seen(l.end);
}

NPURT_DECL void profiler::on_collective_step(const collective_step_info& s) {
  data_.steps.push_back(
      {s.collective, intern_fast(s.op), intern_fast(s.algorithm), s.device, s.peer, s.step, s.bytes, s.start, s.end});
  seen(s.end);
}

NPURT_DECL void profiler::on_host_range(const host_range_info& r) {
  data_.ranges.push_back({r.op, intern_fast(r.name), r.lane, r.time});
  seen(r.time);
}

NPURT_DECL void profiler::on_stream_created(device_id dev, std::uint32_t stream, std::uint8_t priority) {
  data_.streams.push_back({dev, stream, priority});
}

NPURT_DECL void profiler::on_shutdown(sim_time t) {
  data_.shutdown = t;
  if (output_.empty()) return;
  // Shutdown cannot throw to anyone useful: keep the outcome and say it on stderr.
  write_chrome_trace(output_, shutdown_error_);
  if (shutdown_error_)
    std::cerr << "npurt: cannot write trace to " << output_ << ": " << shutdown_error_.message() << '\n';
}

NPURT_DECL void profiler::mark(std::string_view name, std::uint32_t lane) { mark_at(now(), name, lane); }
NPURT_DECL void profiler::push_range(std::string_view name, std::uint32_t lane) { push_range_at(now(), name, lane); }
NPURT_DECL void profiler::pop_range(std::uint32_t lane) { pop_range_at(now(), lane); }

NPURT_DECL void profiler::mark_at(sim_time t, std::string_view name, std::uint32_t lane) {
  on_host_range({host_range_op::mark, name, lane, t});
}
NPURT_DECL void profiler::push_range_at(sim_time t, std::string_view name, std::uint32_t lane) {
  on_host_range({host_range_op::push, name, lane, t});
}
NPURT_DECL void profiler::pop_range_at(sim_time t, std::uint32_t lane) {
  on_host_range({host_range_op::pop, {}, lane, t});
}

NPURT_DECL void profiler::write_chrome_trace(const std::string& path, std::error_code& ec) const {
  ec.clear();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    ec = std::make_error_code(std::errc::no_such_file_or_directory);
    return;
  }
  npurt::write_chrome_trace(out, data());
  out.flush();
  if (!out) ec = std::make_error_code(std::errc::io_error);
}

NPURT_DECL void profiler::write_chrome_trace(const std::string& path) const {
  std::error_code ec;
  write_chrome_trace(path, ec);
  if (ec) throw std::system_error(ec, "npurt: cannot write trace to " + path);
}

// ---------------------------------------------------------------------------------------------
// summary

namespace detail {

using interval = std::pair<std::int64_t, std::int64_t>;

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
    if (a[i].second < b[j].second) ++i; else ++j;
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

}  // namespace detail

NPURT_DECL profile_summary summarize(const trace_data& data, std::size_t top_kernels) {
  using detail::interval;
  using detail::ps;
  profile_summary s;
  const auto& tasks = data.tasks;
  s.tasks = tasks.size();
  if (!tasks.empty()) {
    std::int64_t lo = ps(tasks.front().start), hi = ps(tasks.front().end);
    for (const auto& t : tasks) {
      lo = std::min(lo, ps(t.start));
      hi = std::max(hi, ps(t.end));
    }
    s.begin = sim_time{picoseconds{lo}};
    s.end = sim_time{picoseconds{hi}};
    s.span = s.end - s.begin;
  }
  const std::int64_t span = s.span.count();

  // Tasks in a stable order that does not depend on the order they were reported in.
  std::vector<std::size_t> order(tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(tasks[a].id, tasks[a].device, tasks[a].stream) < std::tie(tasks[b].id, tasks[b].device, tasks[b].stream);
  });

  // --- devices ---
  std::map<device_id, std::vector<std::size_t>> by_device;
  for (auto i : order) by_device[tasks[i].device].push_back(i);
  for (const auto& m : data.memory)
    if (m.device >= 0) by_device.try_emplace(m.device);
  for (const auto& st : data.streams) by_device.try_emplace(st.device);
  for (const auto& [dev, idx] : by_device) {
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
      if (detail::is_communication(t)) comm.push_back(iv);
    }
    detail::merge_intervals(all);
    detail::merge_intervals(compute);
    detail::merge_intervals(comm);
    d.busy = picoseconds{detail::measure(all)};
    d.utilisation = detail::ratio(d.busy.count(), span);
    d.compute = picoseconds{detail::measure(compute)};
    d.communication = picoseconds{detail::measure(comm)};
    d.overlap = picoseconds{detail::intersection(compute, comm)};
    d.overlap_fraction = detail::ratio(d.overlap.count(), d.communication.count());
    for (auto& [kind, e] : engines) {
      detail::merge_intervals(e.second);
      profile_summary::engine_stats es;
      es.engine = kind;
      es.tasks = e.first;
      es.busy = picoseconds{detail::measure(e.second)};
      es.utilisation = detail::ratio(es.busy.count(), span);
      d.engines.push_back(es);
    }
    for (const auto& m : data.memory)
      if (m.device == dev) d.peak_memory = std::max(d.peak_memory, m.in_use);
    s.devices.push_back(std::move(d));
  }

  // --- streams ---
  using stream_key = std::pair<device_id, std::uint32_t>;
  std::map<stream_key, std::vector<std::size_t>> by_stream;  // task indices in stream (id) order
  std::map<stream_key, std::uint8_t> priorities;
  for (const auto& st : data.streams) {
    by_stream.try_emplace({st.device, st.stream});
    priorities.try_emplace({st.device, st.stream}, st.priority);
  }
  for (auto i : order) {
    by_stream[{tasks[i].device, tasks[i].stream}].push_back(i);
    priorities.try_emplace({tasks[i].device, tasks[i].stream}, tasks[i].priority);
  }
  std::map<stream_key, std::vector<const event_wait_info*>> waits_by_stream;
  for (const auto& w : data.waits) waits_by_stream[{w.device, w.stream}].push_back(&w);
  std::map<stream_key, std::vector<std::int64_t>> allocs_by_stream;
  for (const auto& m : data.memory)
    if (m.op == memory_op::alloc && m.stream != 0) allocs_by_stream[{m.device, m.stream}].push_back(ps(m.time));

  for (const auto& [key, idx] : by_stream) {
    profile_summary::stream_stats st;
    st.device = key.first;
    st.stream = key.second;
    st.priority = priorities[key];
    st.tasks = idx.size();
    std::vector<interval> busy;
    for (auto i : idx)
      if (tasks[i].engine != engine_kind::none) busy.push_back({ps(tasks[i].start), ps(tasks[i].end)});
    detail::merge_intervals(busy);
    st.busy = picoseconds{detail::measure(busy)};
    st.utilisation = detail::ratio(st.busy.count(), span);
    if (!idx.empty()) {
      std::int64_t w0 = ps(tasks[idx.front()].start), w1 = ps(tasks[idx.front()].end);
      for (auto i : idx) {
        w0 = std::min(w0, ps(tasks[i].start));
        w1 = std::max(w1, ps(tasks[i].end));
      }
      // The idle stretches inside the stream's window.
      std::vector<interval> gaps;
      std::int64_t cursor = w0;
      for (const auto& b : busy) {
        if (b.first > cursor) gaps.push_back({cursor, b.first});
        cursor = std::max(cursor, b.second);
      }
      if (w1 > cursor) gaps.push_back({cursor, w1});
      const auto& waits = waits_by_stream[key];
      const auto& allocs = allocs_by_stream[key];
      for (const auto& [a, b] : gaps) {
        profile_summary::gap g;
        g.begin = sim_time{picoseconds{a}};
        g.end = sim_time{picoseconds{b}};
        // The task that ended the gap: the first engine task starting at its end, else the
        // first task still running at its end (a trailing wait).
        const trace_task* next = nullptr;
        for (auto i : idx)
          if (tasks[i].engine != engine_kind::none && ps(tasks[i].start) >= b) { next = &tasks[i]; break; }
        if (next == nullptr)
          for (auto i : idx)
            if (ps(tasks[i].end) >= b) { next = &tasks[i]; break; }
        if (next != nullptr) g.next_task = next->id;
        const event_wait_info* blocking = nullptr;
        for (const auto* w : waits)
          if (w->satisfied > w->begin && ps(w->begin) < b && ps(w->satisfied) > a) {
            if (blocking == nullptr || std::tie(w->satisfied, w->task) > std::tie(blocking->satisfied, blocking->task))
              blocking = w;
          }
        const bool alloc_ended =
            std::any_of(allocs.begin(), allocs.end(), [&](std::int64_t t) { return t > a && t <= b; });
        if (blocking != nullptr) {
          g.cause = gap_cause::event;
          g.event = blocking->event;
        } else if (next != nullptr && (next->kind == task_kind::collective || next->engine == engine_kind::collective)) {
          g.cause = gap_cause::peer;
        } else if (alloc_ended) {
          g.cause = gap_cause::memory;
        } else if (next != nullptr && ps(next->submitted) > a) {
          g.cause = gap_cause::host;
        } else if (next != nullptr && next->start > next->ready) {
          g.cause = gap_cause::engine;
        } else {
          g.cause = gap_cause::other;
        }
        st.idle += g.duration();
        st.gaps.push_back(g);
      }
    }
    s.streams.push_back(std::move(st));
  }

  // --- top kernels ---
  std::map<std::string_view, profile_summary::kernel_stats> kernels;
  for (const auto& t : tasks) {
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

  // --- critical path ---
  if (!tasks.empty()) {
    std::unordered_map<std::uint64_t, std::size_t> by_id;
    for (auto i : order) by_id.try_emplace(tasks[i].id, i);
    std::unordered_map<std::uint64_t, std::size_t> stream_prev;  // task id -> previous on its stream
    for (const auto& [key, idx] : by_stream)
      for (std::size_t k = 1; k < idx.size(); ++k) stream_prev[tasks[idx[k]].id] = idx[k - 1];
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
    std::size_t cur = order.front();
    for (auto i : order)
      if (std::tie(tasks[i].end, tasks[i].id) > std::tie(tasks[cur].end, tasks[cur].id)) cur = i;
    std::vector<profile_summary::path_task> rev;
    bool via_event = false;
    for (std::size_t guard = 0; guard <= tasks.size(); ++guard) {
      const auto& t = tasks[cur];
      rev.push_back({t.id, std::string{data.str(t.name)}, t.device, t.stream, t.kind, t.engine, t.start, t.end, via_event});
      auto p = stream_prev.find(t.id);
      auto e = event_prev.find(t.id);
      const bool has_p = p != stream_prev.end(), has_e = e != event_prev.end();
      if (!has_p && !has_e) break;
      // Ties go to the stream predecessor: stream order is the dependency that always exists.
      if (has_e && (!has_p || tasks[e->second].end > tasks[p->second].end)) {
        cur = e->second;
        via_event = true;
      } else {
        cur = p->second;
        via_event = false;
      }
    }
    // via_event was recorded on the task reached through the edge; move it to the task the
    // edge leaves from, which is the one that waited.
    for (std::size_t k = 0; k + 1 < rev.size(); ++k) rev[k].via_event = rev[k + 1].via_event;
    if (!rev.empty()) rev.back().via_event = false;
    std::reverse(rev.begin(), rev.end());
    s.critical_path = std::move(rev);
    s.critical_path_length = s.critical_path.back().end - s.critical_path.front().start;
    for (const auto& p : s.critical_path)
      if (p.engine != engine_kind::none) s.critical_path_busy += p.end - p.start;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// formatting helpers

namespace detail {

/// Picoseconds as microseconds with 6 decimals: exact, no floating point.
inline void append_us(std::string& out, std::int64_t v) {
  char buf[48];
  const bool neg = v < 0;
  const std::uint64_t u = neg ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%06" PRIu64, neg ? "-" : "", u / 1000000, u % 1000000);
  out += buf;
}
inline void append_us(std::string& out, sim_time t) { append_us(out, ps(t)); }
inline void append_us(std::string& out, picoseconds d) { append_us(out, d.count()); }

inline void append_int(std::string& out, std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out += buf;
}
inline void append_uint(std::string& out, std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out += buf;
}
inline void append_fixed(std::string& out, double v, int decimals) {
  char buf[64];
  if (std::abs(v) < 0.5 * std::pow(10.0, -decimals)) v = 0;  // no "-0.000000"
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  out += buf;
}

inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline void append_xml(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
}

inline std::string endpoint_name(device_id d) { return d < 0 ? std::string{"host"} : std::to_string(d); }

inline std::string_view to_string(memory_op op) noexcept { return op == memory_op::alloc ? "alloc" : "free"; }

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Chrome trace

NPURT_DECL void write_chrome_trace(std::ostream& os, const trace_data& data) {
  using detail::append_int;
  using detail::append_json_string;
  using detail::append_uint;
  using detail::append_us;
  using detail::ps;
  const detail::trace_layout lay{data};
  std::string o;
  o.reserve(256 * (data.tasks.size() + data.links.size() + data.steps.size() + data.memory.size() + 64));
  bool first = true;
  auto begin_event = [&](char ph, int pid, int tid) {
    o += first ? "\n{" : ",\n{";
    first = false;
    o += "\"ph\":\"";
    o += ph;
    o += "\",\"pid\":";
    append_int(o, pid);
    o += ",\"tid\":";
    append_int(o, tid);
  };
  auto ts = [&](std::string_view key, sim_time t) {
    o += ",\"";
    o += key;
    o += "\":";
    append_us(o, t);
  };
  auto str = [&](std::string_view key, std::string_view v) {
    o += ",\"";
    o += key;
    o += "\":";
    append_json_string(o, v);
  };
  auto num = [&](std::string_view key, std::int64_t v) {
    o += ",\"";
    o += key;
    o += "\":";
    append_int(o, v);
  };
  auto unum = [&](std::string_view key, std::uint64_t v) {
    o += ",\"";
    o += key;
    o += "\":";
    append_uint(o, v);
  };
  // args objects start with a key of their own, without the leading comma
  auto args_open = [&](std::string_view key) {
    o += ",\"args\":{\"";
    o += key;
    o += "\":";
  };

  o += "{\"traceEvents\":[";

  // Metadata: names and order of processes and tracks.
  for (const auto& p : lay.processes) {
    begin_event('M', p.pid, 0);
    str("name", "process_name");
    args_open("name");
    append_json_string(o, p.name);
    o += "}}";
    begin_event('M', p.pid, 0);
    str("name", "process_sort_index");
    args_open("sort_index");
    append_int(o, p.pid);
    o += "}}";
    for (const auto& t : p.tracks) {
      begin_event('M', p.pid, t.tid);
      str("name", "thread_name");
      args_open("name");
      append_json_string(o, t.name);
      if (t.kind == detail::track_kind::stream) {
        num("device", p.pid - 1);
        num("stream", t.stream);
        num("priority", t.priority);
      }
      o += "}}";
      begin_event('M', p.pid, t.tid);
      str("name", "thread_sort_index");
      args_open("sort_index");
      append_int(o, t.tid);
      o += "}}";
    }
  }

  // Flow arrows: one per wait that names its record task, from the record task to the waiter.
  std::vector<std::size_t> waits(data.waits.size());
  for (std::size_t i = 0; i < waits.size(); ++i) waits[i] = i;
  std::sort(waits.begin(), waits.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = data.waits[a];
    const auto& y = data.waits[b];
    return std::tie(x.task, x.event, x.record_task, x.satisfied) < std::tie(y.task, y.event, y.record_task, y.satisfied);
  });
  std::unordered_map<std::uint64_t, std::size_t> task_by_id;
  for (std::size_t i = 0; i < data.tasks.size(); ++i) task_by_id.try_emplace(data.tasks[i].id, i);
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> flows_out, flows_in;  // task id -> flow numbers
  std::vector<std::size_t> flow_wait;  // flow number - 1 -> wait index
  std::vector<std::size_t> loose_waits;
  for (auto wi : waits) {
    const auto& w = data.waits[wi];
    if (w.record_task == 0) {
      loose_waits.push_back(wi);
      continue;
    }
    flow_wait.push_back(wi);
    flows_out[w.record_task].push_back(flow_wait.size());
    flows_in[w.task].push_back(flow_wait.size());
  }
  std::vector<bool> flow_started(flow_wait.size() + 1, false), flow_ended(flow_wait.size() + 1, false);

  // Event records attach to their record task's slice; records without a task stand alone.
  std::unordered_map<std::uint64_t, const event_record_info*> record_of_task;
  std::vector<const event_record_info*> loose_records;
  for (const auto& r : data.records) {
    if (task_by_id.count(r.task) != 0 && record_of_task.try_emplace(r.task, &r).second) continue;
    loose_records.push_back(&r);
  }

  auto flow_start = [&](std::size_t f, int pid, int tid, sim_time at) {
    const auto& w = data.waits[flow_wait[f - 1]];
    begin_event('s', pid, tid);
    ts("ts", at);
    o += ",\"name\":\"event ";
    append_uint(o, w.event);
    o += "\",\"cat\":\"dependency\"";
    unum("id", f);
    args_open("event");
    append_uint(o, w.event);
    unum("record_task", w.record_task);
    o += "}}";
    flow_started[f] = true;
  };
  auto flow_end = [&](std::size_t f, int pid, int tid, sim_time at) {
    const auto& w = data.waits[flow_wait[f - 1]];
    begin_event('f', pid, tid);
    ts("ts", at);
    o += ",\"name\":\"event ";
    append_uint(o, w.event);
    o += "\",\"cat\":\"dependency\",\"bp\":\"e\"";
    unum("id", f);
    args_open("event");
    append_uint(o, w.event);
    unum("wait_task", w.task);
    num("device", w.device);
    num("stream", w.stream);
    unum("record_task", w.record_task);
    num("record_device", w.record_device);
    num("record_stream", w.record_stream);
    ts("begin", w.begin);
    ts("satisfied", w.satisfied);
    o += "}}";
    flow_ended[f] = true;
  };

  // Tasks on their stream tracks, in time order.
  std::vector<std::size_t> order(data.tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = data.tasks[a];
    const auto& y = data.tasks[b];
    return std::tie(x.start, x.device, x.stream, x.id, x.end) < std::tie(y.start, y.device, y.stream, y.id, y.end);
  });
  for (auto i : order) {
    const auto& t = data.tasks[i];
    const int pid = t.device + 1;
    const int tid = detail::trace_layout::stream_tid(t.stream);
    begin_event('X', pid, tid);
    ts("ts", t.start);
    ts("dur", sim_time{t.end - t.start});
    str("name", data.str(t.name));
    o += ",\"cat\":\"task\"";
    args_open("id");
    append_uint(o, t.id);
    str("kind", to_string(t.kind));
    str("engine", to_string(t.engine));
    num("device", t.device);
    num("stream", t.stream);
    num("priority", t.priority);
    ts("submitted", t.submitted);
    ts("ready", t.ready);
    unum("bytes", t.bytes);
    unum("flops", t.flops);
    if (t.kind == task_kind::kernel) unum("block_dim", t.block_dim);
    if (t.kind == task_kind::memcpy || t.kind == task_kind::memset) {
      num("src_device", t.src_device);
      num("dst_device", t.dst_device);
    }
    if (auto r = record_of_task.find(t.id); r != record_of_task.end()) {
      unum("event", r->second->event);
      ts("event_time", r->second->time);
    }
    o += "}}";
    // A flow binds to the slice enclosing its timestamp on its track: start inside the record
    // task, end at the wait's end (never before the start, or the viewer drops the arrow).
    if (auto f = flows_out.find(t.id); f != flows_out.end())
      for (auto n : f->second) flow_start(n, pid, tid, t.start);
    if (auto f = flows_in.find(t.id); f != flows_in.end())
      for (auto n : f->second) flow_end(n, pid, tid, std::max(t.end, t.start));
  }
  // Flows whose task was not reported still carry the wait.
  for (std::size_t f = 1; f <= flow_wait.size(); ++f) {
    const auto& w = data.waits[flow_wait[f - 1]];
    if (!flow_started[f])
      flow_start(f, w.record_device + 1, detail::trace_layout::stream_tid(w.record_stream), std::min(w.satisfied, w.begin));
    if (!flow_ended[f]) flow_end(f, w.device + 1, detail::trace_layout::stream_tid(w.stream), w.satisfied);
  }
  for (auto wi : loose_waits) {
    const auto& w = data.waits[wi];
    begin_event('i', w.device + 1, detail::trace_layout::stream_tid(w.stream));
    ts("ts", w.satisfied);
    o += ",\"s\":\"t\",\"name\":\"wait event ";
    append_uint(o, w.event);
    o += "\",\"cat\":\"event_wait\"";
    args_open("event");
    append_uint(o, w.event);
    unum("wait_task", w.task);
    num("device", w.device);
    num("stream", w.stream);
    unum("record_task", 0);
    num("record_device", w.record_device);
    num("record_stream", w.record_stream);
    ts("begin", w.begin);
    ts("satisfied", w.satisfied);
    o += "}}";
  }
  for (const auto* r : loose_records) {
    begin_event('i', r->device + 1, detail::trace_layout::stream_tid(r->stream));
    ts("ts", r->time);
    o += ",\"s\":\"t\",\"name\":\"record event ";
    append_uint(o, r->event);
    o += "\",\"cat\":\"event_record\"";
    args_open("event");
    append_uint(o, r->event);
    unum("task", r->task);
    num("device", r->device);
    num("stream", r->stream);
    o += "}}";
  }

  // Engine occupancy: the same tasks again, by engine, lanes keeping slices from overlapping.
  for (auto i : order) {
    const auto& t = data.tasks[i];
    if (t.engine == engine_kind::none) continue;
    begin_event('X', t.device + 1, lay.task_tid[i]);
    ts("ts", t.start);
    ts("dur", sim_time{t.end - t.start});
    str("name", data.str(t.name));
    o += ",\"cat\":\"engine\"";
    args_open("id");
    append_uint(o, t.id);
    o += "}}";
  }

  // Collective steps.
  for (auto i : lay.step_order) {
    const auto& st = data.steps[i];
    begin_event('X', st.device + 1, lay.step_tid[i]);
    ts("ts", st.start);
    ts("dur", sim_time{st.end - st.start});
    o += ",\"name\":";
    append_json_string(o, std::string{data.str(st.op)} + " step " + std::to_string(st.step));
    o += ",\"cat\":\"collective_step\"";
    args_open("collective");
    append_uint(o, st.collective);
    str("op", data.str(st.op));
    str("algorithm", data.str(st.algorithm));
    num("device", st.device);
    num("peer", st.peer);
    unum("step", st.step);
    unum("bytes", st.bytes);
    o += "}}";
  }

  // Link transfers and, per link, a bandwidth counter (GB/s carried at each moment).
  for (auto i : lay.link_order) {
    const auto& l = data.links[i];
    begin_event('X', lay.link_pid[i], lay.link_tid[i]);
    ts("ts", l.start);
    ts("dur", sim_time{l.end - l.start});
    o += ",\"name\":";
    append_json_string(o, lay.link_names[lay.link_key[i]]);
    o += ",\"cat\":\"link\"";
    args_open("link");
    append_json_string(o, data.str(l.link));
    num("src", l.src);
    num("dst", l.dst);
    unum("bytes", l.bytes);
    o += "}}";
  }
  for (std::size_t k = 0; k < lay.link_names.size(); ++k) {
    std::vector<std::pair<std::int64_t, double>> changes;
    int pid = 0, tid = 0;
    for (std::size_t i = 0; i < data.links.size(); ++i) {
      if (lay.link_key[i] != k) continue;
      const auto& l = data.links[i];
      pid = lay.link_pid[i];
      tid = lay.link_base_tid[k];
      const auto d = ps(l.end) - ps(l.start);
      if (d <= 0) continue;
      const double gbps = static_cast<double>(l.bytes) / static_cast<double>(d) * 1e3;  // bytes/ps -> GB/s
      changes.push_back({ps(l.start), gbps});
      changes.push_back({ps(l.end), -gbps});
    }
    std::sort(changes.begin(), changes.end());
    double level = 0;
    for (std::size_t c = 0; c < changes.size();) {
      const auto at = changes[c].first;
      for (; c < changes.size() && changes[c].first == at; ++c) level += changes[c].second;
      if (std::abs(level) < 1e-9) level = 0;
      begin_event('C', pid, tid);
      ts("ts", sim_time{picoseconds{at}});
      o += ",\"name\":";
      append_json_string(o, lay.link_names[k] + " bandwidth");
      o += ",\"args\":{\"GB/s\":";
      detail::append_fixed(o, level, 6);
      o += "}}";
    }
  }

  // Memory: an instant per operation (what the reader loads) and an in-use counter.
  std::vector<std::size_t> mem(data.memory.size());
  for (std::size_t i = 0; i < mem.size(); ++i) mem[i] = i;
  std::stable_sort(mem.begin(), mem.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(data.memory[a].time, data.memory[a].device) < std::tie(data.memory[b].time, data.memory[b].device);
  });
  // Host pointers differ from run to run (ASLR): the trace names host blocks by allocation order.
  std::unordered_map<std::uint64_t, std::uint64_t> host_block;
  std::uint64_t host_blocks = 0;
  for (auto i : mem) {
    const auto& m = data.memory[i];
    const int pid = m.device < 0 ? 0 : m.device + 1;
    std::uint64_t address = m.address;
    if (m.device < 0) {
      auto it = host_block.find(m.address);
      if (m.op == memory_op::alloc || it == host_block.end()) it = host_block.insert_or_assign(m.address, ++host_blocks).first;
      address = it->second;
      if (m.op == memory_op::free) host_block.erase(it);
    }
    begin_event('i', pid, detail::trace_layout::memory_tid);
    ts("ts", m.time);
    o += ",\"s\":\"t\"";
    str("name", detail::to_string(m.op));
    o += ",\"cat\":\"memory\"";
    args_open("device");
    append_int(o, m.device);
    str("op", detail::to_string(m.op));
    unum("address", address);
    unum("bytes", m.bytes);
    unum("in_use", m.in_use);
    unum("reserved", m.reserved);
    num("stream", m.stream);
    o += "}}";
    begin_event('C', pid, detail::trace_layout::memory_tid);
    ts("ts", m.time);
    o += ",\"name\":\"memory\",\"args\":{\"in_use\":";
    append_uint(o, m.in_use);
    unum("reserved", m.reserved);
    o += "}}";
  }

  // Host annotations, in the order the host made them.
  for (const auto& r : data.ranges) {
    const char ph = r.op == host_range_op::push ? 'B' : r.op == host_range_op::pop ? 'E' : 'i';
    begin_event(ph, 0, detail::trace_layout::host_tid(r.lane));
    ts("ts", r.time);
    if (ph == 'i') o += ",\"s\":\"t\"";
    str("name", data.str(r.name));
    o += ",\"cat\":\"range\"";
    args_open("lane");
    append_uint(o, r.lane);
    o += "}}";
  }

  o += "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"generator\":\"npurt ";
  o += std::to_string(NPURT_VERSION_MAJOR) + "." + std::to_string(NPURT_VERSION_MINOR) + "." +
       std::to_string(NPURT_VERSION_PATCH);
  o += "\",\"clock\":\"virtual\"";
  if (data.shutdown) ts("shutdown", *data.shutdown);
  o += "}}\n";
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

// ---------------------------------------------------------------------------------------------
// summary output

NPURT_DECL void write_summary_text(std::ostream& os, const profile_summary& s) {
  using detail::append_fixed;
  using detail::append_us;
  std::string o;
  char buf[256];
  auto us = [](picoseconds d) {
    std::string r;
    append_us(r, d);
    return r;
  };
  auto at = [](sim_time t) {
    std::string r;
    append_us(r, t);
    return r;
  };
  auto pct = [](double v) {
    std::string r;
    append_fixed(r, v * 100.0, 1);
    return r + "%";
  };
  o += "npurt profile: " + std::to_string(s.tasks) + " tasks, span " + us(s.span) + " us (" + at(s.begin) + " .. " +
       at(s.end) + " us)\n\n";

  o += "Devices\n";
  std::snprintf(buf, sizeof buf, "  %-7s %7s %16s %7s %16s %16s %16s %8s %14s\n", "device", "tasks", "busy us", "util",
                "compute us", "comm us", "overlap us", "ovl/comm", "peak memory");
  o += buf;
  for (const auto& d : s.devices) {
    std::snprintf(buf, sizeof buf, "  %-7d %7" PRIu64 " %16s %7s %16s %16s %16s %8s %14zu\n", d.device, d.tasks,
                  us(d.busy).c_str(), pct(d.utilisation).c_str(), us(d.compute).c_str(), us(d.communication).c_str(),
                  us(d.overlap).c_str(), pct(d.overlap_fraction).c_str(), d.peak_memory);
    o += buf;
    for (const auto& e : d.engines) {
      std::snprintf(buf, sizeof buf, "    %-12s %7" PRIu64 " %11s %7s\n", std::string{to_string(e.engine)}.c_str(),
                    e.tasks, us(e.busy).c_str(), pct(e.utilisation).c_str());
      o += buf;
    }
  }

  o += "\nStreams\n";
  std::snprintf(buf, sizeof buf, "  %-7s %-7s %4s %7s %16s %7s %16s %5s\n", "device", "stream", "prio", "tasks", "busy us",
                "util", "idle us", "gaps");
  o += buf;
  for (const auto& st : s.streams) {
    std::snprintf(buf, sizeof buf, "  %-7d %-7u %4u %7" PRIu64 " %16s %7s %16s %5zu\n", st.device, st.stream,
                  unsigned{st.priority}, st.tasks, us(st.busy).c_str(), pct(st.utilisation).c_str(), us(st.idle).c_str(),
                  st.gaps.size());
    o += buf;
  }

  o += "\nIdle gaps (longest 20)\n";
  struct ref {
    const profile_summary::stream_stats* st;
    const profile_summary::gap* g;
  };
  std::vector<ref> gaps;
  for (const auto& st : s.streams)
    for (const auto& g : st.gaps) gaps.push_back({&st, &g});
  std::stable_sort(gaps.begin(), gaps.end(), [](const ref& a, const ref& b) { return a.g->duration() > b.g->duration(); });
  if (gaps.empty()) o += "  none\n";
  for (std::size_t i = 0; i < gaps.size() && i < 20; ++i) {
    const auto& [st, g] = gaps[i];
    std::string cause{to_string(g->cause)};
    if (g->cause == gap_cause::event) cause += " " + std::to_string(g->event);
    std::snprintf(buf, sizeof buf, "  device %d stream %u: %s .. %s us (%s us) %s, before task %" PRIu64 "\n", st->device,
                  st->stream, at(g->begin).c_str(), at(g->end).c_str(), us(g->duration()).c_str(), cause.c_str(),
                  g->next_task);
    o += buf;
  }

  o += "\nTop kernels\n";
  std::snprintf(buf, sizeof buf, "  %-32s %7s %16s %16s %16s\n", "name", "count", "total us", "mean us", "max us");
  o += buf;
  for (const auto& k : s.top_kernels) {
    const picoseconds mean{k.count ? k.total.count() / static_cast<std::int64_t>(k.count) : 0};
    std::snprintf(buf, sizeof buf, "  %-32.32s %7" PRIu64 " %16s %16s %16s\n", k.name.c_str(), k.count,
                  us(k.total).c_str(), us(mean).c_str(), us(k.max).c_str());
    o += buf;
  }

  o += "\nCritical path: " + us(s.critical_path_length) + " us, " + std::to_string(s.critical_path.size()) +
       " tasks, busy " + us(s.critical_path_busy) + " us\n";
  // A long path reads best as its start and its end; the JSON summary keeps every task.
  const std::size_t n = s.critical_path.size(), head = n > 40 ? 10 : n, tail = n > 40 ? 25 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == head && tail != 0) {
      o += "  ... " + std::to_string(n - head - tail) + " more tasks ...\n";
      i = n - tail;
    }
    const auto& p = s.critical_path[i];
    std::snprintf(buf, sizeof buf, "  %14s .. %14s  device %d stream %u  %-13s %s%s\n", at(p.start).c_str(),
                  at(p.end).c_str(), p.device, p.stream, std::string{to_string(p.kind)}.c_str(), p.name.c_str(),
                  p.via_event ? "  (waited on an event)" : "");
    o += buf;
  }
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

NPURT_DECL void write_summary_json(std::ostream& os, const profile_summary& s) {
  using detail::append_fixed;
  using detail::append_json_string;
  using detail::append_us;
  std::string o;
  auto key = [&](std::string_view k) {
    append_json_string(o, k);
    o += ':';
  };
  auto us = [&](std::string_view k, picoseconds d) {
    key(k);
    append_us(o, d);
  };
  auto at = [&](std::string_view k, sim_time t) {
    key(k);
    append_us(o, t);
  };
  auto num = [&](std::string_view k, std::uint64_t v) {
    key(k);
    o += std::to_string(v);
  };
  auto inum = [&](std::string_view k, std::int64_t v) {
    key(k);
    o += std::to_string(v);
  };
  auto dbl = [&](std::string_view k, double v) {
    key(k);
    append_fixed(o, v, 6);
  };
  o += "{\n  ";
  num("tasks", s.tasks);
  o += ", ";
  at("begin_us", s.begin);
  o += ", ";
  at("end_us", s.end);
  o += ", ";
  us("span_us", s.span);
  o += ",\n  \"devices\": [";
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    o += i ? ",\n    {" : "\n    {";
    inum("device", d.device);
    o += ", ";
    num("tasks", d.tasks);
    o += ", ";
    us("busy_us", d.busy);
    o += ", ";
    dbl("utilisation", d.utilisation);
    o += ", ";
    us("compute_us", d.compute);
    o += ", ";
    us("communication_us", d.communication);
    o += ", ";
    us("overlap_us", d.overlap);
    o += ", ";
    dbl("overlap_fraction", d.overlap_fraction);
    o += ", ";
    num("peak_memory", d.peak_memory);
    o += ", \"engines\": [";
    for (std::size_t k = 0; k < d.engines.size(); ++k) {
      const auto& e = d.engines[k];
      o += k ? ", {" : "{";
      key("engine");
      append_json_string(o, to_string(e.engine));
      o += ", ";
      num("tasks", e.tasks);
      o += ", ";
      us("busy_us", e.busy);
      o += ", ";
      dbl("utilisation", e.utilisation);
      o += "}";
    }
    o += "]}";
  }
  o += "\n  ],\n  \"streams\": [";
  for (std::size_t i = 0; i < s.streams.size(); ++i) {
    const auto& st = s.streams[i];
    o += i ? ",\n    {" : "\n    {";
    inum("device", st.device);
    o += ", ";
    num("stream", st.stream);
    o += ", ";
    num("priority", st.priority);
    o += ", ";
    num("tasks", st.tasks);
    o += ", ";
    us("busy_us", st.busy);
    o += ", ";
    dbl("utilisation", st.utilisation);
    o += ", ";
    us("idle_us", st.idle);
    o += ", \"gaps\": [";
    for (std::size_t k = 0; k < st.gaps.size(); ++k) {
      const auto& g = st.gaps[k];
      o += k ? ", {" : "{";
      at("begin_us", g.begin);
      o += ", ";
      at("end_us", g.end);
      o += ", ";
      key("cause");
      append_json_string(o, to_string(g.cause));
      o += ", ";
      num("next_task", g.next_task);
      if (g.cause == gap_cause::event) {
        o += ", ";
        num("event", g.event);
      }
      o += "}";
    }
    o += "]}";
  }
  o += "\n  ],\n  \"top_kernels\": [";
  for (std::size_t i = 0; i < s.top_kernels.size(); ++i) {
    const auto& k = s.top_kernels[i];
    o += i ? ",\n    {" : "\n    {";
    key("name");
    append_json_string(o, k.name);
    o += ", ";
    num("count", k.count);
    o += ", ";
    us("total_us", k.total);
    o += ", ";
    us("max_us", k.max);
    o += ", ";
    num("flops", k.flops);
    o += ", ";
    num("bytes", k.bytes);
    o += "}";
  }
  o += "\n  ],\n  \"critical_path\": {";
  us("length_us", s.critical_path_length);
  o += ", ";
  us("busy_us", s.critical_path_busy);
  o += ", \"tasks\": [";
  for (std::size_t i = 0; i < s.critical_path.size(); ++i) {
    const auto& p = s.critical_path[i];
    o += i ? ",\n    {" : "\n    {";
    num("id", p.id);
    o += ", ";
    key("name");
    append_json_string(o, p.name);
    o += ", ";
    inum("device", p.device);
    o += ", ";
    num("stream", p.stream);
    o += ", ";
    key("kind");
    append_json_string(o, to_string(p.kind));
    o += ", ";
    key("engine");
    append_json_string(o, to_string(p.engine));
    o += ", ";
    at("start_us", p.start);
    o += ", ";
    at("end_us", p.end);
    o += ", \"via_event\": ";
    o += p.via_event ? "true" : "false";
    o += "}";
  }
  o += "\n  ]}\n}\n";
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

// ---------------------------------------------------------------------------------------------
// SVG timeline

namespace detail {

struct bar_style {
  std::string_view label;
  std::string_view fill;
};

inline bar_style task_style(const trace_task& t) noexcept {
  switch (t.kind) {
    case task_kind::kernel: return {"kernel", "#4e79a7"};
    case task_kind::collective: return {"collective", "#e15759"};
    case task_kind::memset: return {"memset", "#9c755f"};
    case task_kind::host_callback: return {"host", "#76b7b2"};
    case task_kind::event_record:
    case task_kind::event_wait: return {"event", "#bab0ac"};
    case task_kind::memcpy:
      switch (t.engine) {
        case engine_kind::copy_h2d: return {"copy H2D", "#59a14f"};
        case engine_kind::copy_d2h: return {"copy D2H", "#f28e2b"};
        case engine_kind::host: return {"host", "#76b7b2"};
        default:
          if (t.src_device >= 0 && t.dst_device >= 0 && t.src_device != t.dst_device) return {"peer copy", "#ff9da7"};
          return {"copy D2D", "#b07aa1"};
      }
  }
  return {"other", "#79706e"};
}

inline std::string svg_num(double v) {
  std::string r;
  append_fixed(r, v, 2);
  return r;
}

/// Tick spacing: 1, 2 or 5 times a power of ten picoseconds, at most ~10 ticks over the span.
inline std::int64_t tick_step(std::int64_t span, int& decimals_exp) {
  std::int64_t mag = 1;
  decimals_exp = 0;
  for (;;) {
    for (std::int64_t m : {1, 2, 5}) {
      if (span / (m * mag) <= 10) return m * mag;
    }
    if (mag > std::numeric_limits<std::int64_t>::max() / 100) return mag * 10;
    mag *= 10;
    ++decimals_exp;
  }
}

inline std::string tick_label(std::int64_t t, int step_exp, std::int64_t span) {
  // The unit the span reads best in, and just enough decimals for the step.
  int span_exp = 0;
  for (std::int64_t v = span; v >= 10; v /= 10) ++span_exp;
  const int unit_exp = span_exp >= 12 ? 12 : span_exp >= 9 ? 9 : span_exp >= 6 ? 6 : span_exp >= 3 ? 3 : 0;
  const char* unit = unit_exp == 12 ? "s" : unit_exp == 9 ? "ms" : unit_exp == 6 ? "\xC2\xB5s" : unit_exp == 3 ? "ns" : "ps";
  const int decimals = std::max(0, unit_exp - step_exp);
  std::string r;
  append_fixed(r, static_cast<double>(t) / std::pow(10.0, unit_exp), decimals);
  return r + " " + unit;
}

}  // namespace detail

NPURT_DECL void write_svg(std::ostream& os, const trace_data& data, const svg_options& opts) {
  using detail::ps;
  using detail::svg_num;
  const detail::trace_layout lay{data};

  // Time window: everything drawn.
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max(), t1 = std::numeric_limits<std::int64_t>::min();
  auto widen = [&](sim_time a, sim_time b) {
    t0 = std::min(t0, ps(a));
    t1 = std::max(t1, ps(b));
  };
  for (const auto& t : data.tasks) widen(t.start, t.end);
  if (opts.links) {
    for (const auto& l : data.links) widen(l.start, l.end);
    for (const auto& st : data.steps) widen(st.start, st.end);
  }
  if (opts.host)
    for (const auto& r : data.ranges) widen(r.time, r.time);
  if (t0 > t1) t0 = t1 = 0;
  if (t1 == t0) t1 = t0 + 1;

  const double left = opts.label_width, right = 20, plot = std::max(100.0, opts.width - left - right);
  const double rh = opts.row_height;
  auto x_of = [&](std::int64_t t) { return left + static_cast<double>(t - t0) * plot / static_cast<double>(t1 - t0); };

  // Rows: host lanes first, then each device's stream, engine, step and link tracks.
  struct row {
    int pid;
    int tid;
    std::string label;
    bool header;
  };
  std::vector<row> rows;
  std::map<std::pair<int, int>, std::size_t> row_of;
  for (const auto& p : lay.processes) {
    if (p.pid == 0 && !opts.host) continue;
    std::vector<const detail::trace_layout::track*> shown;
    for (const auto& t : p.tracks) {
      if (t.kind == detail::track_kind::memory) continue;
      if (t.kind == detail::track_kind::engine && !opts.engines) continue;
      if ((t.kind == detail::track_kind::link || t.kind == detail::track_kind::step) && !opts.links) continue;
      if (t.kind == detail::track_kind::host && p.pid != 0) continue;
      shown.push_back(&t);
    }
    if (shown.empty()) continue;
    rows.push_back({p.pid, -1, p.name, true});
    for (const auto* t : shown) {
      row_of[{p.pid, t->tid}] = rows.size();
      rows.push_back({p.pid, t->tid, t->name, false});
    }
  }

  const double title_h = 48, axis_h = 22;
  const double rows_top = title_h + axis_h;
  const double rows_bottom = rows_top + rh * static_cast<double>(rows.size());
  const double legend_y = rows_bottom + 22;
  const double height = legend_y + 24;
  auto row_y = [&](std::size_t r) { return rows_top + rh * static_cast<double>(r); };

  std::string o;
  o.reserve(200 * (data.tasks.size() * 2 + 64));
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + svg_num(opts.width) + "\" height=\"" + svg_num(height) +
       "\" viewBox=\"0 0 " + svg_num(opts.width) + " " + svg_num(height) + "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  o += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + svg_num(opts.width) + "\" height=\"" + svg_num(height) +
       "\" fill=\"#ffffff\"/>\n";

  // Title and a one-line digest.
  o += "<text class=\"title\" x=\"" + svg_num(left > 10 ? 10 : left) + "\" y=\"20\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">";
  detail::append_xml(o, opts.title);
  o += "</text>\n";
  {
    std::set<device_id> devs;
    std::set<std::pair<device_id, std::uint32_t>> streams;
    for (const auto& t : data.tasks) {
      devs.insert(t.device);
      streams.insert({t.device, t.stream});
    }
    std::string sub = std::to_string(data.tasks.size()) + " tasks on " + std::to_string(devs.size()) +
                      (devs.size() == 1 ? " device, " : " devices, ") + std::to_string(streams.size()) +
                      (streams.size() == 1 ? " stream" : " streams") + " \xC2\xB7 virtual time ";
    detail::append_us(sub, t0);
    sub += " .. ";
    detail::append_us(sub, t1);
    sub += " \xC2\xB5s";
    o += "<text class=\"subtitle\" x=\"" + svg_num(left > 10 ? 10 : left) + "\" y=\"38\" font-size=\"11\" fill=\"#555\">";
    detail::append_xml(o, sub);
    o += "</text>\n";
  }

  // Row backgrounds and labels.
  o += "<g class=\"rows\">\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& rw = rows[r];
    const double y = row_y(r);
    if (rw.header) {
      o += "<rect x=\"0\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(opts.width) + "\" height=\"" + svg_num(rh) +
           "\" fill=\"#e8ecf2\"/>\n";
      o += "<text x=\"6\" y=\"" + svg_num(y + rh * 0.72) + "\" font-size=\"12\" font-weight=\"bold\" fill=\"#222\">";
    } else {
      if (r % 2 == 0)
        o += "<rect x=\"0\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(opts.width) + "\" height=\"" + svg_num(rh) +
             "\" fill=\"#f7f7f7\"/>\n";
      o += "<text x=\"16\" y=\"" + svg_num(y + rh * 0.72) + "\" font-size=\"11\" fill=\"#333\">";
    }
    detail::append_xml(o, rw.label);
    o += "</text>\n";
  }
  o += "</g>\n";

  // Time axis: ticks over the rows, labels above them.
  o += "<g class=\"axis\">\n";
  o += "<line x1=\"" + svg_num(left) + "\" y1=\"" + svg_num(rows_top) + "\" x2=\"" + svg_num(left + plot) + "\" y2=\"" +
       svg_num(rows_top) + "\" stroke=\"#888\" stroke-width=\"1\"/>\n";
  {
    int step_exp = 0;
    const std::int64_t step = detail::tick_step(t1 - t0, step_exp);
    // step is m * 10^step_exp with m in {1, 2, 5}
    std::int64_t first = t0 >= 0 ? (t0 + step - 1) / step * step : t0 / step * step;
    for (std::int64_t t = first; t <= t1; t += step) {
      const double x = x_of(t);
      o += "<line class=\"tick\" x1=\"" + svg_num(x) + "\" y1=\"" + svg_num(rows_top - 4) + "\" x2=\"" + svg_num(x) +
           "\" y2=\"" + svg_num(rows_bottom) + "\" stroke=\"#d8d8d8\" stroke-width=\"1\"/>\n";
      o += "<text class=\"tick-label\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(rows_top - 7) +
           "\" font-size=\"10\" fill=\"#555\" text-anchor=\"middle\">";
      detail::append_xml(o, detail::tick_label(t, step_exp, t1 - t0));
      o += "</text>\n";
    }
  }
  o += "</g>\n";

  std::set<std::pair<std::string_view, std::string_view>> legend;
  auto bar = [&](std::string_view cls, std::size_t r, sim_time a, sim_time b, std::string_view fill,
                 std::string_view label, std::string_view tip, std::uint64_t id, double inset) {
    const double x = x_of(ps(a));
    const double w = std::max(x_of(ps(b)) - x, 1.0);
    const double y = row_y(r) + inset;
    const double h = rh - 2 * inset;
    o += "<rect class=\"";
    o += cls;
    o += "\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(w) + "\" height=\"" + svg_num(h) +
         "\" fill=\"";
    o += fill;
    o += "\" stroke=\"#ffffff\" stroke-width=\"0.6\" data-id=\"" + std::to_string(id) + "\" data-start=\"" + std::to_string(ps(a)) + "\" data-end=\"" +
         std::to_string(ps(b)) + "\"><title>";
    detail::append_xml(o, tip);
    o += "</title></rect>\n";
    // A name fits inside the bar at about 6 px per character of 10 px text.
    if (!label.empty() && w > 6.0 * static_cast<double>(label.size()) + 6) {
      o += "<text class=\"bar-label\" x=\"" + svg_num(x + 3) + "\" y=\"" + svg_num(y + h * 0.5 + 3.5) +
           "\" font-size=\"10\" fill=\"#fff\">";
      detail::append_xml(o, label);
      o += "</text>\n";
    }
  };
  auto tip_of = [&](std::string_view name, std::string_view what, sim_time a, sim_time b) {
    std::string tip{name};
    tip += " (";
    tip += what;
    tip += ") ";
    detail::append_us(tip, a);
    tip += " .. ";
    detail::append_us(tip, b);
    tip += " \xC2\xB5s";
    return tip;
  };

  // Tasks on their streams; control tasks are ticks (waits that blocked are thin bars).
  std::vector<std::size_t> order(data.tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = data.tasks[a];
    const auto& y = data.tasks[b];
    return std::tie(x.start, x.device, x.stream, x.id) < std::tie(y.start, y.device, y.stream, y.id);
  });
  o += "<g class=\"tasks\">\n";
  for (auto i : order) {
    const auto& t = data.tasks[i];
    auto r = row_of.find({t.device + 1, detail::trace_layout::stream_tid(t.stream)});
    if (r == row_of.end()) continue;
    const auto style = detail::task_style(t);
    const auto tip = tip_of(data.str(t.name), to_string(t.kind), t.start, t.end);
    if (t.engine == engine_kind::none) {
      if (!opts.control) continue;
      bar("control", r->second, t.start, t.end, "#9a9a9a", {}, tip, t.id, rh * 0.38);
      continue;
    }
    legend.insert({style.label, style.fill});
    bar("task", r->second, t.start, t.end, style.fill, data.str(t.name), tip, t.id, 2);
  }
  o += "</g>\n";

  if (opts.engines) {
    o += "<g class=\"engines\">\n";
    for (auto i : order) {
      const auto& t = data.tasks[i];
      if (t.engine == engine_kind::none) continue;
      auto r = row_of.find({t.device + 1, lay.task_tid[i]});
      if (r == row_of.end()) continue;
      const auto style = detail::task_style(t);
      bar("engine", r->second, t.start, t.end, style.fill, {}, tip_of(data.str(t.name), to_string(t.engine), t.start, t.end),
          t.id, 3);
    }
    o += "</g>\n";
  }

  if (opts.links) {
    o += "<g class=\"links\">\n";
    for (auto i : lay.step_order) {
      const auto& st = data.steps[i];
      auto r = row_of.find({st.device + 1, lay.step_tid[i]});
      if (r == row_of.end()) continue;
      const std::string name = std::string{data.str(st.op)} + " step " + std::to_string(st.step) + " \xE2\x86\x92 " +
                               detail::endpoint_name(st.peer);
      bar("step", r->second, st.start, st.end, "#f1a2a9", {}, tip_of(name, data.str(st.algorithm), st.start, st.end),
          st.collective, 3);
      legend.insert({"collective step", "#f1a2a9"});
    }
    for (std::size_t k = 0; k < lay.link_order.size(); ++k) {
      const auto i = lay.link_order[k];
      const auto& l = data.links[i];
      auto r = row_of.find({lay.link_pid[i], lay.link_tid[i]});
      if (r == row_of.end()) continue;
      bar("link", r->second, l.start, l.end, "#8cd17d", {},
          tip_of(lay.link_names[lay.link_key[i]], std::to_string(l.bytes) + " bytes", l.start, l.end), k, 3);
      legend.insert({"link transfer", "#8cd17d"});
    }
    o += "</g>\n";
  }

  if (opts.host) {
    // Ranges become bars, nested ones inset a little more; marks are thin lines.
    o += "<g class=\"host\">\n";
    std::map<std::uint32_t, std::vector<const trace_host_range*>> open;
    for (const auto& hr : data.ranges) {
      auto r = row_of.find({0, detail::trace_layout::host_tid(hr.lane)});
      if (r == row_of.end()) continue;
      auto& stack = open[hr.lane];
      if (hr.op == host_range_op::push) {
        stack.push_back(&hr);
      } else if (hr.op == host_range_op::pop) {
        if (stack.empty()) continue;
        const auto* b = stack.back();
        stack.pop_back();
        const double inset = std::min(2.0 + 2.0 * static_cast<double>(stack.size()), rh * 0.4);
        bar("range", r->second, b->time, hr.time, stack.empty() ? "#edc948" : "#f4dc8c", data.str(b->name),
            tip_of(data.str(b->name), "range", b->time, hr.time), hr.lane, inset);
        legend.insert({"host range", "#edc948"});
      } else {
        const double x = x_of(ps(hr.time));
        o += "<line class=\"mark\" x1=\"" + svg_num(x) + "\" y1=\"" + svg_num(row_y(r->second) + 1) + "\" x2=\"" +
             svg_num(x) + "\" y2=\"" + svg_num(row_y(r->second) + rh - 1) +
             "\" stroke=\"#b6992d\" stroke-width=\"2\"><title>";
        detail::append_xml(o, data.str(hr.name));
        o += "</title></line>\n";
      }
    }
    o += "</g>\n";
  }

  // Legend: one swatch per kind of bar drawn, in a fixed order.
  o += "<g class=\"legend\">\n";
  {
    double x = left;
    std::vector<std::pair<std::string_view, std::string_view>> items(legend.begin(), legend.end());
    if (opts.control && std::any_of(data.tasks.begin(), data.tasks.end(), [](const trace_task& t) { return t.engine == engine_kind::none; }))
      items.push_back({"event record / wait", "#9a9a9a"});
    for (const auto& [label, fill] : items) {
      o += "<rect class=\"swatch\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(legend_y - 9) +
           "\" width=\"12\" height=\"10\" fill=\"";
      o += fill;
      o += "\"/>\n<text x=\"" + svg_num(x + 16) + "\" y=\"" + svg_num(legend_y) + "\" font-size=\"11\" fill=\"#333\">";
      detail::append_xml(o, label);
      o += "</text>\n";
      x += 16 + 6.5 * static_cast<double>(label.size()) + 18;
    }
  }
  o += "</g>\n</svg>\n";
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

}  // namespace npurt
