// npurt/impl/summary_output.ipp — a profile_summary as text (for people) and JSON (for scripts).
#pragma once

#include <npurt/detail/trace_format.hpp>
#include <npurt/profiler/summary.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace npurt {
namespace detail {

inline std::string us_text(picoseconds d) {
  std::string r;
  append_us(r, d);
  return r;
}
inline std::string at_text(sim_time t) {
  std::string r;
  append_us(r, t);
  return r;
}
inline std::string pct_text(double v) {
  std::string r;
  append_fixed(r, v * 100.0, 1);
  return r + "%";
}

/// A byte count for people: whole bytes below 1 KiB, else one decimal in the largest binary
/// unit that keeps the number at least 1 ("12.0 MiB"), as the other columns carry their unit.
inline std::string bytes_text(std::uint64_t bytes) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buf[32];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
    return buf;
  }
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  // 1023.95 and up would print as "1024.0" of the smaller unit.
  while (v >= 1023.95 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

inline void text_devices(std::string& o, const profile_summary& s) {
  char buf[256];
  o += "Devices\n";
  std::snprintf(buf, sizeof buf, "  %-7s %7s %16s %7s %16s %16s %16s %8s %14s\n", "device", "tasks", "busy us", "util",
                "compute us", "comm us", "overlap us", "ovl/comm", "peak memory");
  o += buf;
  for (const auto& d : s.devices) {
    std::snprintf(buf, sizeof buf, "  %-7d %7" PRIu64 " %16s %7s %16s %16s %16s %8s %14s\n", d.device, d.tasks,
                  us_text(d.busy).c_str(), pct_text(d.utilisation).c_str(), us_text(d.compute).c_str(),
                  us_text(d.communication).c_str(), us_text(d.overlap).c_str(), pct_text(d.overlap_fraction).c_str(),
                  bytes_text(d.peak_memory).c_str());
    o += buf;
    for (const auto& e : d.engines) {
      std::snprintf(buf, sizeof buf, "    %-12s %7" PRIu64 " %11s %7s\n", std::string{to_string(e.engine)}.c_str(),
                    e.tasks, us_text(e.busy).c_str(), pct_text(e.utilisation).c_str());
      o += buf;
    }
  }
}

inline void text_streams(std::string& o, const profile_summary& s) {
  char buf[256];
  o += "\nStreams\n";
  std::snprintf(buf, sizeof buf, "  %-7s %-7s %4s %7s %16s %7s %16s %5s\n", "device", "stream", "prio", "tasks",
                "busy us", "util", "idle us", "gaps");
  o += buf;
  for (const auto& st : s.streams) {
    std::snprintf(buf, sizeof buf, "  %-7d %-7u %4u %7" PRIu64 " %16s %7s %16s %5zu\n", st.device, st.stream,
                  unsigned{st.priority}, st.tasks, us_text(st.busy).c_str(), pct_text(st.utilisation).c_str(),
                  us_text(st.idle).c_str(), st.gaps.size());
    o += buf;
  }
}

inline void text_gaps(std::string& o, const profile_summary& s) {
  char buf[256];
  o += "\nIdle gaps (longest 20)\n";
  struct ref {
    const profile_summary::stream_stats* st;
    const profile_summary::gap* g;
  };
  std::vector<ref> gaps;
  for (const auto& st : s.streams)
    for (const auto& g : st.gaps) gaps.push_back({&st, &g});
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const ref& a, const ref& b) { return a.g->duration() > b.g->duration(); });
  if (gaps.empty()) o += "  none\n";
  for (std::size_t i = 0; i < gaps.size() && i < 20; ++i) {
    const auto& [st, g] = gaps[i];
    std::string cause{to_string(g->cause)};
    if (g->cause == gap_cause::event) cause += " " + std::to_string(g->event);
    std::snprintf(buf, sizeof buf, "  device %d stream %u: %s .. %s us (%s us) %s, before task %" PRIu64 "\n",
                  st->device, st->stream, at_text(g->begin).c_str(), at_text(g->end).c_str(),
                  us_text(g->duration()).c_str(), cause.c_str(), g->next_task);
    o += buf;
  }
}

inline void text_kernels(std::string& o, const profile_summary& s) {
  char buf[256];
  o += "\nTop kernels\n";
  std::snprintf(buf, sizeof buf, "  %-32s %7s %16s %16s %16s\n", "name", "count", "total us", "mean us", "max us");
  o += buf;
  std::string name;
  for (const auto& k : s.top_kernels) {
    const picoseconds mean{k.count ? k.total.count() / static_cast<std::int64_t>(k.count) : 0};
    // Cut at 32 bytes, as the column is wide, but never inside a character: a cut sequence is
    // ill-formed UTF-8 again.
    name.clear();
    append_utf8(name, k.name);
    if (name.size() > 32) {
      std::size_t cut = 32;
      while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
      name.resize(cut);
    }
    std::snprintf(buf, sizeof buf, "  %-32s %7" PRIu64 " %16s %16s %16s\n", name.c_str(), k.count,
                  us_text(k.total).c_str(), us_text(mean).c_str(), us_text(k.max).c_str());
    o += buf;
  }
}

inline void text_critical_path(std::string& o, const profile_summary& s) {
  char buf[256];
  o += "\nCritical path: " + us_text(s.critical_path_length) + " us, " + std::to_string(s.critical_path.size()) +
       " tasks, busy " + us_text(s.critical_path_busy) + " us\n";
  // A long path reads best as its start and its end; the JSON summary keeps every task.
  const std::size_t n = s.critical_path.size(), head = n > 40 ? 10 : n, tail = n > 40 ? 25 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == head && tail != 0) {
      o += "  ... " + std::to_string(n - head - tail) + " more tasks ...\n";
      i = n - tail;
    }
    const auto& p = s.critical_path[i];
    // The name goes last and whole: a long one must not be cut by the buffer.
    std::snprintf(buf, sizeof buf, "  %14s .. %14s  device %d stream %u  %-13s ", at_text(p.start).c_str(),
                  at_text(p.end).c_str(), p.device, p.stream, std::string{to_string(p.kind)}.c_str());
    o += buf;
    append_utf8(o, p.name);
    o += p.via_event   ? "  (waited on an event)\n"
         : p.via_host  ? "  (enqueued after the host waited)\n"
         : p.via_peer  ? "  (waited for the last rank to arrive)\n"
         : p.via_queue ? "  (held in the device's execution queue)\n"
                       : "\n";
  }
}

class summary_json {
 public:
  explicit summary_json(const profile_summary& s) : s_(s) {}

  std::string write() {
    o_ += "{\n  ";
    num("tasks", s_.tasks);
    o_ += ", ";
    num("failed_tasks", s_.failed_tasks);
    o_ += ", ";
    if (s_.tasks_before_attach != 0) {  // absent otherwise: summaries of whole runs read as before
      num("tasks_before_attach", s_.tasks_before_attach);
      o_ += ", ";
    }
    at("begin_us", s_.begin);
    o_ += ", ";
    at("end_us", s_.end);
    o_ += ", ";
    us("span_us", s_.span);
    o_ += ",\n  \"devices\": [";
    for (std::size_t i = 0; i < s_.devices.size(); ++i) device(i);
    o_ += "\n  ],\n  \"streams\": [";
    for (std::size_t i = 0; i < s_.streams.size(); ++i) stream(i);
    o_ += "\n  ],\n  \"top_kernels\": [";
    for (std::size_t i = 0; i < s_.top_kernels.size(); ++i) kernel(i);
    o_ += "\n  ],\n  \"critical_path\": {";
    us("length_us", s_.critical_path_length);
    o_ += ", ";
    us("busy_us", s_.critical_path_busy);
    o_ += ", \"tasks\": [";
    for (std::size_t i = 0; i < s_.critical_path.size(); ++i) path_task(i);
    o_ += "\n  ]}\n}\n";
    return std::move(o_);
  }

 private:
  void key(std::string_view k) {
    append_json_string(o_, k);
    o_ += ':';
  }
  void us(std::string_view k, picoseconds d) {
    key(k);
    append_us(o_, d);
  }
  void at(std::string_view k, sim_time t) {
    key(k);
    append_us(o_, t);
  }
  void num(std::string_view k, std::uint64_t v) {
    key(k);
    o_ += std::to_string(v);
  }
  void inum(std::string_view k, std::int64_t v) {
    key(k);
    o_ += std::to_string(v);
  }
  void dbl(std::string_view k, double v) {
    key(k);
    append_fixed(o_, v, 6);
  }
  void text(std::string_view k, std::string_view v) {
    key(k);
    append_json_string(o_, v);
  }

  void device(std::size_t i) {
    const auto& d = s_.devices[i];
    o_ += i ? ",\n    {" : "\n    {";
    inum("device", d.device);
    o_ += ", ";
    num("tasks", d.tasks);
    o_ += ", ";
    us("busy_us", d.busy);
    o_ += ", ";
    dbl("utilisation", d.utilisation);
    o_ += ", ";
    us("compute_us", d.compute);
    o_ += ", ";
    us("communication_us", d.communication);
    o_ += ", ";
    us("overlap_us", d.overlap);
    o_ += ", ";
    dbl("overlap_fraction", d.overlap_fraction);
    o_ += ", ";
    num("peak_memory_bytes", d.peak_memory);
    o_ += ", \"engines\": [";
    for (std::size_t k = 0; k < d.engines.size(); ++k) {
      const auto& e = d.engines[k];
      o_ += k ? ", {" : "{";
      text("engine", to_string(e.engine));
      o_ += ", ";
      num("tasks", e.tasks);
      o_ += ", ";
      us("busy_us", e.busy);
      o_ += ", ";
      dbl("utilisation", e.utilisation);
      o_ += "}";
    }
    o_ += "]}";
  }

  void stream(std::size_t i) {
    const auto& st = s_.streams[i];
    o_ += i ? ",\n    {" : "\n    {";
    inum("device", st.device);
    o_ += ", ";
    num("stream", st.stream);
    o_ += ", ";
    num("priority", st.priority);
    o_ += ", ";
    num("tasks", st.tasks);
    o_ += ", ";
    us("busy_us", st.busy);
    o_ += ", ";
    dbl("utilisation", st.utilisation);
    o_ += ", ";
    us("idle_us", st.idle);
    o_ += ", \"gaps\": [";
    for (std::size_t k = 0; k < st.gaps.size(); ++k) {
      const auto& g = st.gaps[k];
      o_ += k ? ", {" : "{";
      at("begin_us", g.begin);
      o_ += ", ";
      at("end_us", g.end);
      o_ += ", ";
      text("cause", to_string(g.cause));
      o_ += ", ";
      num("next_task", g.next_task);
      if (g.cause == gap_cause::event) {
        o_ += ", ";
        num("event", g.event);
      }
      o_ += "}";
    }
    o_ += "]}";
  }

  void kernel(std::size_t i) {
    const auto& k = s_.top_kernels[i];
    o_ += i ? ",\n    {" : "\n    {";
    text("name", k.name);
    o_ += ", ";
    num("count", k.count);
    o_ += ", ";
    us("total_us", k.total);
    o_ += ", ";
    us("max_us", k.max);
    o_ += ", ";
    num("flops", k.flops);
    o_ += ", ";
    num("bytes", k.bytes);
    o_ += "}";
  }

  void path_task(std::size_t i) {
    const auto& p = s_.critical_path[i];
    o_ += i ? ",\n    {" : "\n    {";
    num("id", p.id);
    o_ += ", ";
    text("name", p.name);
    o_ += ", ";
    inum("device", p.device);
    o_ += ", ";
    num("stream", p.stream);
    o_ += ", ";
    text("kind", to_string(p.kind));
    o_ += ", ";
    text("engine", to_string(p.engine));
    o_ += ", ";
    at("start_us", p.start);
    o_ += ", ";
    at("end_us", p.end);
    o_ += ", \"via_event\": ";
    o_ += p.via_event ? "true" : "false";
    // Only when set, so that summaries of paths without host edges read as before.
    if (p.via_host) o_ += ", \"via_host\": true";
    if (p.via_peer) o_ += ", \"via_peer\": true";
    if (p.via_queue) o_ += ", \"via_queue\": true";
    o_ += "}";
  }

  const profile_summary& s_;
  std::string o_;
};

}  // namespace detail

NPURT_DECL void write_summary_text(std::ostream& os, const profile_summary& s) {
  std::string o = "npurt profile: " + std::to_string(s.tasks) + " tasks, ";
  // Said only when some failed: the summary of a run without failures reads as it always has.
  if (s.failed_tasks != 0) o += std::to_string(s.failed_tasks) + " failed, ";
  o += "span " + detail::us_text(s.span) + " us (" + detail::at_text(s.begin) + " .. " + detail::at_text(s.end) +
       " us)\n";
  if (s.tasks_before_attach != 0)
    o += "note: the profiler was attached after " + std::to_string(s.tasks_before_attach) +
         " tasks had been enqueued; they are not in this profile (call sys.profiler() before the work)\n";
  o += "\n";
  detail::text_devices(o, s);
  detail::text_streams(o, s);
  detail::text_gaps(o, s);
  detail::text_kernels(o, s);
  detail::text_critical_path(o, s);
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

NPURT_DECL void write_summary_json(std::ostream& os, const profile_summary& s) {
  const std::string o = detail::summary_json{s}.write();
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

}  // namespace npurt
