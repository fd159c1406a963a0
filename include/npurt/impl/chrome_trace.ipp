// npurt/impl/chrome_trace.ipp — write_chrome_trace(): one section of the trace per function, in
// the order they appear in the file.
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/trace_format.hpp>
#include <npurt/detail/trace_layout.hpp>
#include <npurt/profiler/chrome_trace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace npurt {
namespace detail {

class chrome_writer {
 public:
  explicit chrome_writer(const trace_data& data) : data_(data), lay_(data) {
    o_.reserve(256 * (data.tasks.size() + data.links.size() + data.steps.size() + data.memory.size() + 64));
  }

  std::string write() {
    o_ += "{\"traceEvents\":[";
    metadata();
    prepare_flows();
    prepare_records();
    for (const auto& e : data_.errors) error_of_task_.try_emplace(e.task, &e);
    const auto order = time_order();
    tasks(order);
    unreported_flows();
    loose_waits();
    loose_records();
    engines(order);
    steps();
    links();
    link_counters();
    memory();
    ranges();
    footer();
    return std::move(o_);
  }

 private:
  void begin_event(char ph, int pid, int tid) {
    o_ += first_ ? "\n{" : ",\n{";
    first_ = false;
    o_ += "\"ph\":\"";
    o_ += ph;
    o_ += "\",\"pid\":";
    append_int(o_, pid);
    o_ += ",\"tid\":";
    append_int(o_, tid);
  }
  void key(std::string_view k) {
    o_ += ",\"";
    o_ += k;
    o_ += "\":";
  }
  void ts(std::string_view k, sim_time t) {
    key(k);
    append_us(o_, t);
  }
  void str(std::string_view k, std::string_view v) {
    key(k);
    append_json_string(o_, v);
  }
  void num(std::string_view k, std::int64_t v) {
    key(k);
    append_int(o_, v);
  }
  void unum(std::string_view k, std::uint64_t v) {
    key(k);
    append_uint(o_, v);
  }
  // args objects start with a key of their own, without the leading comma
  void args_open(std::string_view k) {
    o_ += ",\"args\":{\"";
    o_ += k;
    o_ += "\":";
  }

  /// Names and order of processes and tracks.
  void metadata() {
    for (const auto& p : lay_.processes) {
      begin_event('M', p.pid, 0);
      str("name", "process_name");
      args_open("name");
      append_json_string(o_, p.name);
      o_ += "}}";
      begin_event('M', p.pid, 0);
      str("name", "process_sort_index");
      args_open("sort_index");
      append_int(o_, p.pid);
      o_ += "}}";
      for (const auto& t : p.tracks) {
        begin_event('M', p.pid, t.tid);
        str("name", "thread_name");
        args_open("name");
        append_json_string(o_, t.name);
        if (t.kind == track_kind::stream) {
          num("device", p.pid - 1);
          num("stream", t.stream);
          num("priority", t.priority);
        }
        o_ += "}}";
        begin_event('M', p.pid, t.tid);
        str("name", "thread_sort_index");
        args_open("sort_index");
        append_int(o_, t.tid);
        o_ += "}}";
      }
    }
  }

  /// Flow arrows: one per wait that names its record task, from the record task to the waiter.
  void prepare_flows() {
    const auto& all = data_.waits;
    std::vector<std::size_t> waits(all.size());
    for (std::size_t i = 0; i < waits.size(); ++i) waits[i] = i;
    std::sort(waits.begin(), waits.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = all[a];
      const auto& y = all[b];
      return std::tie(x.task, x.event, x.record_task, x.satisfied) <
             std::tie(y.task, y.event, y.record_task, y.satisfied);
    });
    for (auto wi : waits) {
      const auto& w = all[wi];
      if (w.record_task == 0) {
        loose_waits_.push_back(wi);
        continue;
      }
      flow_wait_.push_back(wi);
      flows_out_[w.record_task].push_back(flow_wait_.size());
      flows_in_[w.task].push_back(flow_wait_.size());
    }
    flow_started_.assign(flow_wait_.size() + 1, false);
    flow_ended_.assign(flow_wait_.size() + 1, false);
  }

  /// Event records attach to their record task's slice; records without a task stand alone.
  void prepare_records() {
    std::unordered_map<std::uint64_t, std::size_t> task_by_id;
    for (std::size_t i = 0; i < data_.tasks.size(); ++i) task_by_id.try_emplace(data_.tasks[i].id, i);
    for (const auto& r : data_.records) {
      if (task_by_id.count(r.task) != 0 && record_of_task_.try_emplace(r.task, &r).second) continue;
      loose_records_.push_back(&r);
    }
  }

  void flow_start(std::size_t f, int pid, int tid, sim_time at) {
    const auto& w = data_.waits[flow_wait_[f - 1]];
    begin_event('s', pid, tid);
    ts("ts", at);
    o_ += ",\"name\":\"event ";
    append_uint(o_, w.event);
    o_ += "\",\"cat\":\"dependency\"";
    unum("id", f);
    args_open("event");
    append_uint(o_, w.event);
    unum("record_task", w.record_task);
    o_ += "}}";
    flow_started_[f] = true;
  }

  void wait_args(const event_wait_info& w, std::uint64_t record_task) {
    args_open("event");
    append_uint(o_, w.event);
    unum("wait_task", w.task);
    num("device", w.device);
    num("stream", w.stream);
    unum("record_task", record_task);
    num("record_device", w.record_device);
    num("record_stream", w.record_stream);
    ts("begin", w.begin);
    ts("satisfied", w.satisfied);
    o_ += "}}";
  }

  void flow_end(std::size_t f, int pid, int tid, sim_time at) {
    const auto& w = data_.waits[flow_wait_[f - 1]];
    begin_event('f', pid, tid);
    ts("ts", at);
    o_ += ",\"name\":\"event ";
    append_uint(o_, w.event);
    o_ += "\",\"cat\":\"dependency\",\"bp\":\"e\"";
    unum("id", f);
    wait_args(w, w.record_task);
    flow_ended_[f] = true;
  }

  [[nodiscard]] std::vector<std::size_t> time_order() const {
    std::vector<std::size_t> order(data_.tasks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = data_.tasks[a];
      const auto& y = data_.tasks[b];
      return std::tie(x.start, x.device, x.stream, x.id, x.end) < std::tie(y.start, y.device, y.stream, y.id, y.end);
    });
    return order;
  }

  void task(const trace_task& t, int pid, int tid) {
    begin_event('X', pid, tid);
    ts("ts", t.start);
    ts("dur", sim_time{t.end - t.start});
    str("name", data_.str(t.name));
    o_ += ",\"cat\":\"task\"";
    args_open("id");
    append_uint(o_, t.id);
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
    if (auto r = record_of_task_.find(t.id); r != record_of_task_.end()) {
      unum("event", r->second->event);
      ts("event_time", r->second->time);
    }
    // Only failed tasks carry these: the trace of a run without failures keeps its bytes.
    if (!error_of_task_.empty()) {
      if (auto e = error_of_task_.find(t.id); e != error_of_task_.end()) {
        str("error", data_.str(e->second->message));
        num("code", e->second->code);
      }
    }
    o_ += "}}";
  }

  /// Tasks on their stream tracks, in time order, each followed by the flows it starts and ends.
  void tasks(const std::vector<std::size_t>& order) {
    for (auto i : order) {
      const auto& t = data_.tasks[i];
      const int pid = t.device + 1;
      const int tid = trace_layout::stream_tid(t.stream);
      task(t, pid, tid);
      // A flow binds to the slice enclosing its timestamp on its track: start inside the record
      // task, end at the wait's end (never before the start, or the viewer drops the arrow).
      if (auto f = flows_out_.find(t.id); f != flows_out_.end())
        for (auto n : f->second) flow_start(n, pid, tid, t.start);
      if (auto f = flows_in_.find(t.id); f != flows_in_.end())
        for (auto n : f->second) flow_end(n, pid, tid, std::max(t.end, t.start));
    }
  }

  /// Flows whose task was not reported still carry the wait.
  void unreported_flows() {
    for (std::size_t f = 1; f <= flow_wait_.size(); ++f) {
      const auto& w = data_.waits[flow_wait_[f - 1]];
      if (!flow_started_[f])
        flow_start(f, w.record_device + 1, trace_layout::stream_tid(w.record_stream), std::min(w.satisfied, w.begin));
      if (!flow_ended_[f]) flow_end(f, w.device + 1, trace_layout::stream_tid(w.stream), w.satisfied);
    }
  }

  void loose_waits() {
    for (auto wi : loose_waits_) {
      const auto& w = data_.waits[wi];
      begin_event('i', w.device + 1, trace_layout::stream_tid(w.stream));
      ts("ts", w.satisfied);
      o_ += ",\"s\":\"t\",\"name\":\"wait event ";
      append_uint(o_, w.event);
      o_ += "\",\"cat\":\"event_wait\"";
      wait_args(w, 0);
    }
  }

  void loose_records() {
    for (const auto* r : loose_records_) {
      begin_event('i', r->device + 1, trace_layout::stream_tid(r->stream));
      ts("ts", r->time);
      o_ += ",\"s\":\"t\",\"name\":\"record event ";
      append_uint(o_, r->event);
      o_ += "\",\"cat\":\"event_record\"";
      args_open("event");
      append_uint(o_, r->event);
      unum("task", r->task);
      num("device", r->device);
      num("stream", r->stream);
      o_ += "}}";
    }
  }

  /// Engine occupancy: the same tasks again, by engine, lanes keeping slices from overlapping.
  void engines(const std::vector<std::size_t>& order) {
    for (auto i : order) {
      const auto& t = data_.tasks[i];
      if (t.engine == engine_kind::none) continue;
      begin_event('X', t.device + 1, lay_.task_tid[i]);
      ts("ts", t.start);
      ts("dur", sim_time{t.end - t.start});
      str("name", data_.str(t.name));
      o_ += ",\"cat\":\"engine\"";
      args_open("id");
      append_uint(o_, t.id);
      o_ += "}}";
    }
  }

  void steps() {
    for (auto i : lay_.step_order) {
      const auto& st = data_.steps[i];
      begin_event('X', st.device + 1, lay_.step_tid[i]);
      ts("ts", st.start);
      ts("dur", sim_time{st.end - st.start});
      o_ += ",\"name\":";
      append_json_string(o_, std::string{data_.str(st.op)} + " step " + std::to_string(st.step));
      o_ += ",\"cat\":\"collective_step\"";
      args_open("collective");
      append_uint(o_, st.collective);
      str("op", data_.str(st.op));
      str("algorithm", data_.str(st.algorithm));
      num("device", st.device);
      num("peer", st.peer);
      unum("step", st.step);
      unum("bytes", st.bytes);
      o_ += "}}";
    }
  }

  void links() {
    for (auto i : lay_.link_order) {
      const auto& l = data_.links[i];
      begin_event('X', lay_.link_pid[i], lay_.link_tid[i]);
      ts("ts", l.start);
      ts("dur", sim_time{l.end - l.start});
      o_ += ",\"name\":";
      append_json_string(o_, lay_.link_names[lay_.link_key[i]]);
      o_ += ",\"cat\":\"link\"";
      args_open("link");
      append_json_string(o_, data_.str(l.link));
      num("src", l.src);
      num("dst", l.dst);
      unum("bytes", l.bytes);
      o_ += "}}";
    }
  }

  /// Per link, a bandwidth counter: GB/s carried at each moment.
  void link_counters() {
    std::vector<std::vector<std::size_t>> by_key(lay_.link_names.size());
    for (std::size_t i = 0; i < data_.links.size(); ++i) by_key[lay_.link_key[i]].push_back(i);
    for (std::size_t k = 0; k < lay_.link_names.size(); ++k) {
      std::vector<std::pair<std::int64_t, double>> changes;
      int pid = 0, tid = 0;
      for (auto i : by_key[k]) {
        const auto& l = data_.links[i];
        pid = lay_.link_pid[i];
        tid = lay_.link_base_tid[k];
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
        o_ += ",\"name\":";
        append_json_string(o_, lay_.link_names[k] + " bandwidth");
        o_ += ",\"args\":{\"GB/s\":";
        append_fixed(o_, level, 6);
        o_ += "}}";
      }
    }
  }

  /// Memory: an instant per operation (what the reader loads) and an in-use counter.
  void memory() {
    const auto& all = data_.memory;
    std::vector<std::size_t> mem(all.size());
    for (std::size_t i = 0; i < mem.size(); ++i) mem[i] = i;
    std::stable_sort(mem.begin(), mem.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(all[a].time, all[a].device) < std::tie(all[b].time, all[b].device);
    });
    // Host pointers differ from run to run (ASLR): the trace names host blocks by allocation order.
    std::unordered_map<std::uint64_t, std::uint64_t> host_block;
    std::uint64_t host_blocks = 0;
    for (auto i : mem) {
      const auto& m = all[i];
      const int pid = m.device < 0 ? 0 : m.device + 1;
      std::uint64_t address = m.address;
      if (m.device < 0) {
        auto it = host_block.find(m.address);
        if (m.op == memory_op::alloc || it == host_block.end())
          it = host_block.insert_or_assign(m.address, ++host_blocks).first;
        address = it->second;
        if (m.op == memory_op::free) host_block.erase(it);
      }
      begin_event('i', pid, trace_layout::memory_tid);
      ts("ts", m.time);
      o_ += ",\"s\":\"t\"";
      str("name", to_string(m.op));
      o_ += ",\"cat\":\"memory\"";
      args_open("device");
      append_int(o_, m.device);
      str("op", to_string(m.op));
      unum("address", address);
      unum("bytes", m.bytes);
      unum("in_use", m.in_use);
      unum("reserved", m.reserved);
      num("stream", m.stream);
      o_ += "}}";
      begin_event('C', pid, trace_layout::memory_tid);
      ts("ts", m.time);
      o_ += ",\"name\":\"memory\",\"args\":{\"in_use\":";
      append_uint(o_, m.in_use);
      unum("reserved", m.reserved);
      o_ += "}}";
    }
  }

  /// Host annotations, in the order the host made them.
  void ranges() {
    for (const auto& r : data_.ranges) {
      const char ph = r.op == host_range_op::push ? 'B' : r.op == host_range_op::pop ? 'E' : 'i';
      begin_event(ph, 0, trace_layout::host_tid(r.lane));
      ts("ts", r.time);
      if (ph == 'i') o_ += ",\"s\":\"t\"";
      str("name", data_.str(r.name));
      o_ += ",\"cat\":\"range\"";
      args_open("lane");
      append_uint(o_, r.lane);
      o_ += "}}";
    }
  }

  void footer() {
    o_ += "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"generator\":\"npurt ";
    o_ += std::to_string(NPURT_VERSION_MAJOR) + "." + std::to_string(NPURT_VERSION_MINOR) + "." +
          std::to_string(NPURT_VERSION_PATCH);
    o_ += "\",\"clock\":\"virtual\"";
    if (data_.shutdown) ts("shutdown", *data_.shutdown);
    // A profile that lacks the work before its profiler was attached says so in the file too, so
    // that a summary made from the file (npurt-trace summarize) carries the same note.
    if (data_.tasks_before_attach != 0) {
      o_ += ",\"tasks_before_attach\":";
      append_uint(o_, data_.tasks_before_attach);
    }
    o_ += "}}\n";
  }

  const trace_data& data_;
  const trace_layout lay_;
  std::string o_;
  bool first_ = true;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> flows_out_, flows_in_;  // task id -> flow numbers
  std::vector<std::size_t> flow_wait_;  // flow number - 1 -> wait index
  std::vector<bool> flow_started_, flow_ended_;
  std::vector<std::size_t> loose_waits_;
  std::unordered_map<std::uint64_t, const event_record_info*> record_of_task_;
  std::unordered_map<std::uint64_t, const trace_task_error*> error_of_task_;
  std::vector<const event_record_info*> loose_records_;
};

}  // namespace detail

NPURT_DECL void write_chrome_trace(std::ostream& os, const trace_data& data) {
  const std::string o = detail::chrome_writer{data}.write();
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

}  // namespace npurt
