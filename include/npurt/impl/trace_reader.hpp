// npurt/impl/trace_reader.hpp — the bodies of npurt/profiler/trace_reader.hpp: a JSON event
// reader that checks every field it takes, and check_trace()'s whole-trace rules.
#pragma once

#include <npurt/profiler/trace_reader.hpp>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_stack.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace npurt {
namespace detail {

struct trace_parse_failure {
  std::string message;
};

/// At most the first 40 bytes of a piece of input, quoted, with control bytes escaped: enough to
/// recognise it, never a whole hostile field.
inline std::string quote_prefix(std::string_view s) {
  constexpr std::size_t shown = 40;
  std::string r = "\"";
  for (std::size_t i = 0; i < s.size() && i < shown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      r += buf;
    } else {
      r += static_cast<char>(c);
    }
  }
  r += s.size() > shown ? "\"... (" + std::to_string(s.size()) + " bytes)" : "\"";
  return r;
}

class trace_reader {
 public:
  trace_data read(const boost::json::value& root) {
    if (!root.is_object()) fail("not a Chrome trace: the top level is not a JSON object");
    const auto& top = root.get_object();
    const auto* events = top.if_contains("traceEvents");
    if (events == nullptr) fail("not a Chrome trace: no \"traceEvents\" member");
    if (!events->is_array()) fail("not a Chrome trace: \"traceEvents\" is not an array");
    const auto& arr = events->get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      where_ = "traceEvents[" + std::to_string(i) + "]";
      if (!arr[i].is_object()) fail(where_ + " is not an object");
      event(arr[i].get_object());
    }
    where_ = "otherData";
    if (const auto* other = top.if_contains("otherData"); other != nullptr && other->is_object()) {
      const auto& o = other->get_object();
      if (o.contains("shutdown")) data_.shutdown = time(o, "shutdown");
      if (o.contains("tasks_before_attach")) {
        const std::int64_t n = integer(o, "tasks_before_attach");
        if (n < 0) fail_field("tasks_before_attach", "is negative");
        data_.tasks_before_attach = static_cast<std::uint64_t>(n);
      }
    }
    if (auto why = check_trace(data_); !why.empty()) fail(std::move(why));
    return std::move(data_);
  }

 private:
  [[noreturn]] static void fail(std::string msg) { throw trace_parse_failure{std::move(msg)}; }
  [[noreturn]] void fail_field(std::string_view key, std::string_view what) {
    fail(where_ + ": \"" + std::string{key} + "\" " + std::string{what});
  }

  const boost::json::value& field(const boost::json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    if (v == nullptr) fail(where_ + ": missing \"" + std::string{key} + "\"");
    return *v;
  }
  double number(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_double()) return v.get_double();
    if (v.is_int64()) return static_cast<double>(v.get_int64());
    if (v.is_uint64()) return static_cast<double>(v.get_uint64());
    fail_field(key, "is not a number");
  }
  std::int64_t integer(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      return static_cast<std::int64_t>(v.get_uint64());
    if (v.is_double() && std::trunc(v.get_double()) == v.get_double() && std::abs(v.get_double()) < 9.0e18)
      return static_cast<std::int64_t>(v.get_double());
    fail_field(key, "is not an integer");
  }
  std::uint64_t unsigned_integer(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_uint64()) return v.get_uint64();
    if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
    if (v.is_double() && std::trunc(v.get_double()) == v.get_double() && v.get_double() >= 0 && v.get_double() < 1.8e19)
      return static_cast<std::uint64_t>(v.get_double());
    fail_field(key, "is not a non-negative integer");
  }
  std::string_view string(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (!v.is_string()) fail_field(key, "is not a string");
    if (v.get_string().size() > max_trace_name)
      fail_field(key, "is longer than " + std::to_string(max_trace_name) + " bytes");
    return v.get_string();
  }
  const boost::json::object& object(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (!v.is_object()) fail_field(key, "is not an object");
    return v.get_object();
  }
  /// Microseconds back to whole picoseconds, 0 .. max_trace_time. json_feed has read the
  /// decimal of every time it could into an int64 of picoseconds; any other number here is one
  /// it could not, and says why.
  sim_time time(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_int64()) return sim_time{picoseconds{v.get_int64()}};
    const double us = number(o, key);
    if (!std::isfinite(us)) fail_field(key, "is not a finite number");
    if (us < 0) fail_field(key, "is negative");
    fail_field(key, "is beyond the largest trace time (2^62 ps)");
  }
  /// An event's end: its start plus a duration, both checked, and the sum within range too.
  sim_time end_of(const boost::json::object& e, sim_time start) {
    const auto dur = time(e, "dur") - sim_time{};
    if (dur.count() > max_trace_time - start.time_since_epoch().count())
      fail(where_ + ": \"ts\" + \"dur\" is beyond the largest trace time (2^62 ps)");
    return start + dur;
  }
  template <class T>
  T small(const boost::json::object& o, std::string_view key, std::int64_t lo, std::int64_t hi) {
    const auto v = integer(o, key);
    if (v < lo || v > hi) fail_field(key, "is out of range (" + std::to_string(lo) + " .. " + std::to_string(hi) + ")");
    return static_cast<T>(v);
  }
  /// A device, or -1 for the host where the field allows it.
  device_id device(const boost::json::object& o, std::string_view key, bool host = true) {
    return small<device_id>(o, key, host ? -1 : 0, max_trace_devices - 1);
  }
  std::uint32_t u32(const boost::json::object& o, std::string_view key) {
    return small<std::uint32_t>(o, key, 0, UINT32_MAX);
  }

  task_kind kind(std::string_view s) {
    for (auto k :
         {task_kind::kernel, task_kind::memcpy, task_kind::memset, task_kind::event_record, task_kind::event_wait,
          task_kind::host_callback, task_kind::collective, task_kind::value_write, task_kind::value_wait})
      if (to_string(k) == s) return k;
    fail(where_ + ": unknown task kind " + quote_prefix(s));
  }
  engine_kind engine(std::string_view s) {
    for (auto e : {engine_kind::none, engine_kind::ai_core, engine_kind::copy_h2d, engine_kind::copy_d2h,
                   engine_kind::copy_d2d, engine_kind::collective, engine_kind::host})
      if (to_string(e) == s) return e;
    fail(where_ + ": unknown engine " + quote_prefix(s));
  }

  void event(const boost::json::object& e) {
    const auto ph = string(e, "ph");
    std::string_view cat;
    if (const auto* c = e.if_contains("cat"); c != nullptr) {
      if (!c->is_string()) fail(where_ + ": \"cat\" is not a string");
      cat = c->get_string();
    }
    if (ph == "M") stream(e);
    else if (ph == "X" && cat == "task") task(e);
    else if (ph == "X" && cat == "link") link(e);
    else if (ph == "X" && cat == "collective_step") step(e);
    else if ((ph == "f" && cat == "dependency") || (ph == "i" && cat == "event_wait")) wait(e);
    else if (ph == "i" && cat == "event_record") record(e);
    else if (ph == "i" && cat == "memory") memory(e);
    else if ((ph == "B" || ph == "E" || ph == "i") && cat == "range") range(e, ph);
    // Anything else (engine copies, counters, metadata, other tools' events) is derived or foreign.
  }

  void stream(const boost::json::object& e) {
    if (string(e, "name") != "thread_name") return;
    const auto& a = object(e, "args");
    if (!a.contains("stream")) return;
    data_.streams.push_back({device(a, "device", false), u32(a, "stream"), small<std::uint8_t>(a, "priority", 0, 255)});
  }

  void task(const boost::json::object& e) {
    const auto& a = object(e, "args");
    trace_task t;
    t.id = unsigned_integer(a, "id");
    t.kind = kind(string(a, "kind"));
    t.engine = engine(string(a, "engine"));
    t.device = device(a, "device", false);
    t.stream = u32(a, "stream");
    t.priority = small<std::uint8_t>(a, "priority", 0, 255);
    t.submitted = time(a, "submitted");
    t.ready = time(a, "ready");
    t.start = time(e, "ts");
    t.end = end_of(e, t.start);
    t.name = data_.intern(string(e, "name"));
    t.bytes = unsigned_integer(a, "bytes");
    t.flops = unsigned_integer(a, "flops");
    if (a.contains("block_dim")) t.block_dim = u32(a, "block_dim");
    if (a.contains("src_device")) t.src_device = device(a, "src_device");
    if (a.contains("dst_device")) t.dst_device = device(a, "dst_device");
    if (a.contains("event"))
      data_.records.push_back({unsigned_integer(a, "event"), t.id, t.device, t.stream, time(a, "event_time")});
    if (a.contains("error"))
      data_.errors.push_back(
          {t.id, small<std::int32_t>(a, "code", INT32_MIN, INT32_MAX), data_.intern(string(a, "error"))});
    data_.tasks.push_back(t);
  }

  void link(const boost::json::object& e) {
    const auto& a = object(e, "args");
    const auto start = time(e, "ts");
    data_.links.push_back({data_.intern(string(a, "link")), device(a, "src"), device(a, "dst"),
                           static_cast<std::size_t>(unsigned_integer(a, "bytes")), start, end_of(e, start)});
  }

  void step(const boost::json::object& e) {
    const auto& a = object(e, "args");
    trace_collective_step s;
    s.collective = unsigned_integer(a, "collective");
    s.op = data_.intern(string(a, "op"));
    s.algorithm = data_.intern(string(a, "algorithm"));
    s.device = device(a, "device", false);
    s.peer = device(a, "peer");
    s.step = u32(a, "step");
    s.bytes = static_cast<std::size_t>(unsigned_integer(a, "bytes"));
    s.start = time(e, "ts");
    s.end = end_of(e, s.start);
    data_.steps.push_back(s);
  }

  void wait(const boost::json::object& e) {
    const auto& a = object(e, "args");
    event_wait_info w;
    w.event = unsigned_integer(a, "event");
    w.task = unsigned_integer(a, "wait_task");
    w.device = device(a, "device", false);
    w.stream = u32(a, "stream");
    w.record_task = unsigned_integer(a, "record_task");
    w.record_device = device(a, "record_device", false);
    w.record_stream = u32(a, "record_stream");
    w.begin = time(a, "begin");
    w.satisfied = time(a, "satisfied");
    data_.waits.push_back(w);
  }

  void record(const boost::json::object& e) {
    const auto& a = object(e, "args");
    data_.records.push_back({unsigned_integer(a, "event"), unsigned_integer(a, "task"), device(a, "device", false),
                             u32(a, "stream"), time(e, "ts")});
  }

  void memory(const boost::json::object& e) {
    const auto& a = object(e, "args");
    memory_info m;
    m.device = device(a, "device");
    const auto op = string(a, "op");
    if (op != "alloc" && op != "free") fail(where_ + ": unknown memory op " + quote_prefix(op));
    m.op = op == "alloc" ? memory_op::alloc : memory_op::free;
    m.address = unsigned_integer(a, "address");
    m.bytes = static_cast<std::size_t>(unsigned_integer(a, "bytes"));
    m.in_use = static_cast<std::size_t>(unsigned_integer(a, "in_use"));
    m.reserved = static_cast<std::size_t>(unsigned_integer(a, "reserved"));
    m.stream = u32(a, "stream");
    m.time = time(e, "ts");
    data_.memory.push_back(m);
  }

  void range(const boost::json::object& e, std::string_view ph) {
    const auto& a = object(e, "args");
    trace_host_range r;
    r.op = ph == "B" ? host_range_op::push : ph == "E" ? host_range_op::pop : host_range_op::mark;
    if (e.contains("name")) r.name = data_.intern(string(e, "name"));
    r.lane = u32(a, "lane");
    r.time = time(e, "ts");
    data_.ranges.push_back(r);
  }

  trace_data data_;
  std::string where_;
};

inline bool time_ok(sim_time t) noexcept {
  const auto v = t.time_since_epoch().count();
  return v >= 0 && v <= max_trace_time;
}
inline bool device_ok(device_id d, bool host) noexcept { return d >= (host ? -1 : 0) && d < max_trace_devices; }

/// Ranges of every task; empty when all hold.
inline std::string check_tasks(const trace_data& data) {
  std::int64_t total = 0;
  std::uint64_t flops = 0, bytes = 0;
  for (const auto& t : data.tasks) {
    auto who = [&] { return "task " + std::to_string(t.id) + ": "; };
    if (!time_ok(t.submitted) || !time_ok(t.ready) || !time_ok(t.start) || !time_ok(t.end))
      return who() + "a time is negative or beyond 2^62 ps";
    if (t.end < t.start) return who() + "ends before it starts";
    if (!device_ok(t.device, false) || !device_ok(t.src_device, true) || !device_ok(t.dst_device, true))
      return who() + "a device id is out of range";
    if (data.str(t.name).size() > max_trace_name) return who() + "the name is too long";
    if (__builtin_add_overflow(total, (t.end - t.start).count(), &total) ||
        __builtin_add_overflow(flops, t.flops, &flops) || __builtin_add_overflow(bytes, t.bytes, &bytes))
      return who() + "the durations, flops or bytes of the tasks add up past what 64 bits hold";
  }
  return {};
}

/// Ranges of everything else a trace holds.
inline std::string check_others(const trace_data& data) {
  for (const auto& w : data.waits)
    if (!time_ok(w.begin) || !time_ok(w.satisfied) || !device_ok(w.device, false) || !device_ok(w.record_device, false))
      return "the wait of task " + std::to_string(w.task) + " has a time or device out of range";
  for (const auto& r : data.records)
    if (!time_ok(r.time) || !device_ok(r.device, false))
      return "the record of event " + std::to_string(r.event) + " has a time or device out of range";
  for (const auto& m : data.memory)
    if (!time_ok(m.time) || !device_ok(m.device, true)) return "a memory operation has a time or device out of range";
  for (const auto& l : data.links)
    if (!time_ok(l.start) || !time_ok(l.end) || l.end < l.start || !device_ok(l.src, true) || !device_ok(l.dst, true))
      return "a link transfer has a time, duration or device out of range";
  for (const auto& s : data.steps)
    if (!time_ok(s.start) || !time_ok(s.end) || s.end < s.start || !device_ok(s.device, false) ||
        !device_ok(s.peer, true))
      return "a step of collective " + std::to_string(s.collective) + " has a time, duration or device out of range";
  for (const auto& r : data.ranges)
    if (!time_ok(r.time)) return "a host range has a time out of range";
  for (const auto& s : data.streams)
    if (!device_ok(s.device, false)) return "stream " + std::to_string(s.stream) + " is on a device out of range";
  if (data.shutdown && !time_ok(*data.shutdown)) return "the shutdown time is out of range";
  return {};
}

/// Unique task ids, and no cycle through stream order (by id) and waits (record task before the
/// waiting task): Kahn's algorithm, O(n log n).
inline std::string check_dependencies(const trace_data& data) {
  const auto& tasks = data.tasks;
  const std::size_t n = tasks.size();
  std::vector<std::size_t> by_id(n), by_stream(n);
  for (std::size_t i = 0; i < n; ++i) by_id[i] = by_stream[i] = i;
  std::sort(by_id.begin(), by_id.end(), [&](auto a, auto b) { return tasks[a].id < tasks[b].id; });
  for (std::size_t k = 1; k < n; ++k)
    if (tasks[by_id[k]].id == tasks[by_id[k - 1]].id)
      return "task id " + std::to_string(tasks[by_id[k]].id) + " appears more than once";
  auto find = [&](std::uint64_t id) -> std::size_t {
    auto it = std::lower_bound(by_id.begin(), by_id.end(), id,
                               [&](std::size_t i, std::uint64_t v) { return tasks[i].id < v; });
    return it != by_id.end() && tasks[*it].id == id ? *it : n;
  };
  std::sort(by_stream.begin(), by_stream.end(), [&](auto a, auto b) {
    return std::tie(tasks[a].device, tasks[a].stream, tasks[a].id) <
           std::tie(tasks[b].device, tasks[b].stream, tasks[b].id);
  });
  std::vector<std::pair<std::size_t, std::size_t>> edges;  // (from, to)
  for (std::size_t k = 1; k < n; ++k) {
    const auto& a = tasks[by_stream[k - 1]];
    const auto& b = tasks[by_stream[k]];
    if (a.device == b.device && a.stream == b.stream) edges.push_back({by_stream[k - 1], by_stream[k]});
  }
  for (const auto& w : data.waits) {
    if (w.record_task == 0) continue;
    const auto from = find(w.record_task), to = find(w.task);
    if (from < n && to < n) edges.push_back({from, to});
  }
  std::sort(edges.begin(), edges.end());
  std::vector<std::size_t> indegree(n, 0), first(n + 1, 0);
  for (const auto& [from, to] : edges) {
    ++indegree[to];
    ++first[from + 1];
  }
  for (std::size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push_back(i);
  std::size_t done = 0;
  while (!ready.empty()) {
    const auto i = ready.back();
    ready.pop_back();
    ++done;
    for (std::size_t e = first[i]; e < first[i + 1]; ++e)
      if (--indegree[edges[e].second] == 0) ready.push_back(edges[e].second);
  }
  if (done == n) return {};
  std::uint64_t id = 0;
  for (auto i : by_id)
    if (indegree[i] != 0) {
      id = tasks[i].id;
      break;
    }
  return "the waits and stream order form a cycle through task " + std::to_string(id);
}

/// The keys under which the Chrome trace writer prints times (microseconds, 6 decimals).
inline bool is_time_key(std::string_view k) noexcept {
  return k == "ts" || k == "dur" || k == "submitted" || k == "ready" || k == "event_time" || k == "begin" ||
         k == "satisfied" || k == "shutdown";
}

/// A JSON number of microseconds as whole picoseconds, from its decimal text and never through
/// a double (whose 53 bits hold the picosecond only up to 2^53 ps): rounded to the nearest
/// picosecond, a half up. False for a negative value or one past `max`.
inline bool exact_picoseconds(std::string_view text, std::int64_t max, std::int64_t& out) noexcept {
  std::size_t i = 0;
  const bool negative = i < text.size() && text[i] == '-';
  if (negative) ++i;
  // The significant digits, leading zeros dropped, and the power of ten they are scaled by.
  const std::size_t start = i;
  std::string_view whole, frac;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  whole = text.substr(start, i - start);
  if (i < text.size() && text[i] == '.') {
    const std::size_t f = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    frac = text.substr(f, i - f);
  }
  std::int64_t exp = 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool exp_negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    for (; i < text.size(); ++i)
      exp = std::min<std::int64_t>(exp * 10 + (text[i] - '0'), std::int64_t{1} << 40);  // far past any digit count
    if (exp_negative) exp = -exp;
  }
  // digit(k): the k-th significant digit of whole then frac; n of them in all.
  std::size_t lead = 0;
  const std::size_t n_all = whole.size() + frac.size();
  const auto at = [&](std::size_t k) { return k < whole.size() ? whole[k] : frac[k - whole.size()]; };
  while (lead < n_all && at(lead) == '0') ++lead;
  if (lead == n_all) {
    out = 0;  // zero, -0 included
    return true;
  }
  if (negative) return false;
  const auto n = static_cast<std::int64_t>(n_all - lead);
  // value = digits * 10^(exp - frac.size()) us; in picoseconds, 10^6 more. The integer part has
  // `int_digits` digits.
  const std::int64_t int_digits = n + exp - static_cast<std::int64_t>(frac.size()) + 6;
  if (int_digits > 19) return false;  // max_trace_time has 19 digits
  std::uint64_t v = 0;
  for (std::int64_t k = 0; k < int_digits; ++k)
    v = v * 10 + static_cast<std::uint64_t>(k < n ? at(lead + static_cast<std::size_t>(k)) - '0' : 0);
  // The first digit dropped decides the rounding.
  if (int_digits >= 0 && int_digits < n && at(lead + static_cast<std::size_t>(int_digits)) >= '5') ++v;
  if (v > static_cast<std::uint64_t>(max)) return false;
  out = static_cast<std::int64_t>(v);
  return true;
}

/// Boost.JSON's own handler (boost::json::stream_parser's: a value_stack), except that a number
/// under a time key is kept as exact picoseconds (an int64, which no time is written as), for
/// the reader's time(). A number it cannot keep so (negative, too large) goes in as a double for
/// time() to refuse; numbers under other keys are left alone.
struct trace_json_handler {
  static constexpr std::size_t max_object_size = boost::json::object::max_size();
  static constexpr std::size_t max_array_size = boost::json::array::max_size();
  static constexpr std::size_t max_key_size = boost::json::string::max_size();
  static constexpr std::size_t max_string_size = boost::json::string::max_size();

  boost::json::value_stack st;
  std::string key;     // a key's text so far, when it comes in parts
  std::string number;  // a time's text so far, when it comes in parts
  bool time = false;   // the value being read is under a time key

  using error_code = boost::system::error_code;
  using string_view = boost::json::string_view;

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) {
    time = false;
    return true;
  }
  bool on_object_end(std::size_t n, error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(error_code&) {
    time = false;
    return true;
  }
  bool on_array_end(std::size_t n, error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(string_view s, std::size_t, error_code&) {
    st.push_chars(s);
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(string_view s, std::size_t, error_code&) {
    st.push_key(s);
    if (key.empty()) {
      time = is_time_key({s.data(), s.size()});
    } else {
      key.append(s.data(), s.size());
      time = is_time_key(key);
      key.clear();
    }
    return true;
  }
  bool on_string_part(string_view s, std::size_t, error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(string_view s, std::size_t, error_code&) {
    time = false;
    st.push_string(s);
    return true;
  }
  bool on_number_part(string_view s, error_code&) {
    if (time) number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, string_view s, error_code&) {
    if (!time || !push_time(s, static_cast<double>(i))) st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, string_view s, error_code&) {
    if (!time || !push_time(s, static_cast<double>(u))) st.push_uint64(u);
    return true;
  }
  bool on_double(double d, string_view s, error_code&) {
    if (!time || !push_time(s, d)) st.push_double(d);
    return true;
  }
  bool on_bool(bool b, error_code&) {
    time = false;
    st.push_bool(b);
    return true;
  }
  bool on_null(error_code&) {
    time = false;
    st.push_null();
    return true;
  }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  // The time, or the double for time() to refuse; true either way.
  bool push_time(string_view last, double d) {
    time = false;
    std::string_view text{last.data(), last.size()};
    if (!number.empty()) text = number.append(last.data(), last.size());
    std::int64_t ps = 0;
    if (exact_picoseconds(text, max_trace_time, ps)) st.push_int64(ps);
    else st.push_double(d);
    number.clear();
    return true;
  }
};

/// Parses JSON text fed in pieces, keeping the line and column for an error message.
class json_feed {
 public:
  json_feed() : parser_(options()) { parser_.handler().st.reset(); }

  /// False on a JSON error (then message() says where).
  bool write(const char* p, std::size_t n) {
    boost::system::error_code jec;
    // As boost::json::stream_parser::write: text after the document is an error.
    const std::size_t used = parser_.write_some(true, p, n, jec);
    if (!jec && used < n) {
      jec = boost::json::error::extra_data;
      parser_.fail(jec);
    }
    advance(p, std::min(used, n));
    if (jec) return fail(jec);
    return true;
  }
  bool finish() {
    boost::system::error_code jec;
    parser_.write_some(false, nullptr, 0, jec);
    return jec ? fail(jec) : true;
  }
  boost::json::value release() { return parser_.handler().st.release(); }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

 private:
  static boost::json::parse_options options() {
    boost::json::parse_options opts;
    opts.numbers = boost::json::number_precision::precise;  // times are read from their text (exact_picoseconds)
    opts.max_depth = 64;
    return opts;
  }
  void advance(const char* p, std::size_t n) {
    for (const char* end = p + n;;) {
      const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      if (nl == nullptr) {
        col_ += static_cast<std::size_t>(end - p);
        return;
      }
      ++line_;
      col_ = 1;
      p = nl + 1;
    }
  }
  bool fail(const boost::system::error_code& jec) {
    message_ =
        "not valid JSON (line " + std::to_string(line_) + ", column " + std::to_string(col_) + "): " + jec.message();
    return false;
  }

  boost::json::basic_parser<trace_json_handler> parser_;
  std::size_t line_ = 1, col_ = 1;
  std::string message_;
};

inline trace_data read_parsed(json_feed& feed, std::error_code& ec, std::string& message) {
  try {
    return trace_reader{}.read(feed.release());
  } catch (const trace_parse_failure& f) {
    ec = make_error_code(errc::parse_error);
    message = f.message;
    return {};
  }
}

}  // namespace detail

inline std::string check_trace(const trace_data& data) {
  if (auto why = detail::check_tasks(data); !why.empty()) return why;
  if (auto why = detail::check_others(data); !why.empty()) return why;
  return detail::check_dependencies(data);
}

inline trace_data read_chrome_trace(std::string_view text, std::error_code& ec, std::string& message) {
  ec.clear();
  message.clear();
  detail::json_feed feed;
  if (!feed.write(text.data(), text.size()) || !feed.finish()) {
    ec = make_error_code(errc::parse_error);
    message = feed.message();
    return {};
  }
  return detail::read_parsed(feed, ec, message);
}

inline trace_data read_chrome_trace(std::string_view text) {
  std::error_code ec;
  std::string message;
  auto data = read_chrome_trace(text, ec, message);
  if (ec) throw_error(ec, message);
  return data;
}

inline trace_data read_chrome_trace_file(const std::string& path, std::error_code& ec, std::string& message,
                                         const trace_read_limits& limits) {
  ec.clear();
  message.clear();
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // The system's reason (missing, a directory, no permission) tells the user what to fix.
    const int e = errno;
    ec = e != 0 ? std::error_code(e, std::generic_category())
                : std::make_error_code(std::errc::no_such_file_or_directory);
    message = "cannot open: " + ec.message();  // callers name the file, as for every other message
    return {};
  }
  detail::json_feed feed;
  std::vector<char> buf(std::size_t{1} << 20);
  std::size_t total = 0;
  for (;;) {
    errno = 0;
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    total += n;
    if (total > limits.max_bytes) {
      ec = make_error_code(errc::parse_error);
      message = "the file is larger than " + std::to_string(limits.max_bytes) + " bytes";
      return {};
    }
    if (!feed.write(buf.data(), n)) {
      ec = make_error_code(errc::parse_error);
      message = feed.message();
      return {};
    }
  }
  if (in.bad()) {
    // A directory opens but does not read (EISDIR): the system's reason, as for open.
    const int e = errno;
    ec = e != 0 ? std::error_code(e, std::generic_category()) : std::make_error_code(std::errc::io_error);
    message = "cannot read: " + ec.message();
    return {};
  }
  if (!feed.finish()) {
    ec = make_error_code(errc::parse_error);
    message = feed.message();
    return {};
  }
  return detail::read_parsed(feed, ec, message);
}

inline trace_data read_chrome_trace_file(const std::string& path, const trace_read_limits& limits) {
  std::error_code ec;
  std::string message;
  auto data = read_chrome_trace_file(path, ec, message, limits);
  if (ec) throw_error(ec, path + ": " + message);
  return data;
}

}  // namespace npurt
