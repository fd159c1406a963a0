// npurt/detail/trace_reader.hpp — loads a Chrome trace written by npurt::write_chrome_trace back
// into trace_data, so a trace file can be summarised and rendered again (npurt-trace does).
//
// Uses Boost.JSON: the program must compile its bodies once, by including <boost/json/src.hpp>
// in exactly one translation unit. This header includes only the declarations.
//
// What comes back is what the trace holds: tasks, event waits (from the flow arrows), event
// records (attached to their record tasks), memory operations, link transfers, collective
// steps, host ranges and streams. Engine tracks and counters are derived data and are skipped.
#pragma once

#include <npurt/error.hpp>
#include <npurt/profiler.hpp>

#include <boost/json/parse_options.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace npurt {
namespace detail {

struct trace_parse_failure {
  std::string message;
};

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
      if (other->get_object().contains("shutdown")) data_.shutdown = time(other->get_object(), "shutdown");
    }
    return std::move(data_);
  }

 private:
  [[noreturn]] static void fail(std::string msg) { throw trace_parse_failure{std::move(msg)}; }

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
    fail(where_ + ": \"" + std::string{key} + "\" is not a number");
  }
  std::int64_t integer(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(v.get_uint64());
    if (v.is_double() && std::trunc(v.get_double()) == v.get_double() && std::abs(v.get_double()) < 9.0e18)
      return static_cast<std::int64_t>(v.get_double());
    fail(where_ + ": \"" + std::string{key} + "\" is not an integer");
  }
  std::uint64_t unsigned_integer(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (v.is_uint64()) return v.get_uint64();
    if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
    if (v.is_double() && std::trunc(v.get_double()) == v.get_double() && v.get_double() >= 0 && v.get_double() < 1.8e19)
      return static_cast<std::uint64_t>(v.get_double());
    fail(where_ + ": \"" + std::string{key} + "\" is not a non-negative integer");
  }
  std::string_view string(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (!v.is_string()) fail(where_ + ": \"" + std::string{key} + "\" is not a string");
    return v.get_string();
  }
  const boost::json::object& object(const boost::json::object& o, std::string_view key) {
    const auto& v = field(o, key);
    if (!v.is_object()) fail(where_ + ": \"" + std::string{key} + "\" is not an object");
    return v.get_object();
  }
  /// Microseconds with 6 decimals back to whole picoseconds.
  sim_time time(const boost::json::object& o, std::string_view key) {
    const double us = number(o, key);
    if (!std::isfinite(us) || std::abs(us) > 9.0e12) fail(where_ + ": \"" + std::string{key} + "\" is out of range");
    return sim_time{picoseconds{std::llround(us * 1e6)}};
  }
  template <class T>
  T small(const boost::json::object& o, std::string_view key, std::int64_t lo, std::int64_t hi) {
    const auto v = integer(o, key);
    if (v < lo || v > hi) fail(where_ + ": \"" + std::string{key} + "\" is out of range");
    return static_cast<T>(v);
  }
  device_id device(const boost::json::object& o, std::string_view key) {
    return small<device_id>(o, key, -1, INT32_MAX);
  }
  std::uint32_t u32(const boost::json::object& o, std::string_view key) {
    return small<std::uint32_t>(o, key, 0, UINT32_MAX);
  }

  task_kind kind(std::string_view s) {
    for (auto k : {task_kind::kernel, task_kind::memcpy, task_kind::memset, task_kind::event_record,
                   task_kind::event_wait, task_kind::host_callback, task_kind::collective})
      if (to_string(k) == s) return k;
    fail(where_ + ": unknown task kind \"" + std::string{s} + "\"");
  }
  engine_kind engine(std::string_view s) {
    for (auto e : {engine_kind::none, engine_kind::ai_core, engine_kind::copy_h2d, engine_kind::copy_d2h,
                   engine_kind::copy_d2d, engine_kind::collective, engine_kind::host})
      if (to_string(e) == s) return e;
    fail(where_ + ": unknown engine \"" + std::string{s} + "\"");
  }

  void event(const boost::json::object& e) {
    const auto ph = string(e, "ph");
    std::string_view cat;
    if (const auto* c = e.if_contains("cat"); c != nullptr) {
      if (!c->is_string()) fail(where_ + ": \"cat\" is not a string");
      cat = c->get_string();
    }
    if (ph == "M") {
      if (string(e, "name") != "thread_name") return;
      const auto& a = object(e, "args");
      if (!a.contains("stream")) return;
      data_.streams.push_back({device(a, "device"), u32(a, "stream"), small<std::uint8_t>(a, "priority", 0, 255)});
    } else if (ph == "X" && cat == "task") {
      const auto& a = object(e, "args");
      trace_task t;
      t.id = unsigned_integer(a, "id");
      t.kind = kind(string(a, "kind"));
      t.engine = engine(string(a, "engine"));
      t.device = device(a, "device");
      t.stream = u32(a, "stream");
      t.priority = small<std::uint8_t>(a, "priority", 0, 255);
      t.submitted = time(a, "submitted");
      t.ready = time(a, "ready");
      t.start = time(e, "ts");
      t.end = t.start + (time(e, "dur") - sim_time{});
      t.name = data_.intern(string(e, "name"));
      t.bytes = unsigned_integer(a, "bytes");
      t.flops = unsigned_integer(a, "flops");
      if (a.contains("block_dim")) t.block_dim = u32(a, "block_dim");
      if (a.contains("src_device")) t.src_device = device(a, "src_device");
      if (a.contains("dst_device")) t.dst_device = device(a, "dst_device");
      if (a.contains("event"))
        data_.records.push_back({unsigned_integer(a, "event"), t.id, t.device, t.stream, time(a, "event_time")});
      data_.tasks.push_back(t);
    } else if (ph == "X" && cat == "link") {
      const auto& a = object(e, "args");
      const auto start = time(e, "ts");
      data_.links.push_back({data_.intern(string(a, "link")), device(a, "src"), device(a, "dst"),
                             static_cast<std::size_t>(unsigned_integer(a, "bytes")), start,
                             start + (time(e, "dur") - sim_time{})});
    } else if (ph == "X" && cat == "collective_step") {
      const auto& a = object(e, "args");
      const auto start = time(e, "ts");
      trace_collective_step s;
      s.collective = unsigned_integer(a, "collective");
      s.op = data_.intern(string(a, "op"));
      s.algorithm = data_.intern(string(a, "algorithm"));
      s.device = device(a, "device");
      s.peer = device(a, "peer");
      s.step = u32(a, "step");
      s.bytes = static_cast<std::size_t>(unsigned_integer(a, "bytes"));
      s.start = start;
      s.end = start + (time(e, "dur") - sim_time{});
      data_.steps.push_back(s);
    } else if ((ph == "f" && cat == "dependency") || (ph == "i" && cat == "event_wait")) {
      const auto& a = object(e, "args");
      event_wait_info w;
      w.event = unsigned_integer(a, "event");
      w.task = unsigned_integer(a, "wait_task");
      w.device = device(a, "device");
      w.stream = u32(a, "stream");
      w.record_task = unsigned_integer(a, "record_task");
      w.record_device = device(a, "record_device");
      w.record_stream = u32(a, "record_stream");
      w.begin = time(a, "begin");
      w.satisfied = time(a, "satisfied");
      data_.waits.push_back(w);
    } else if (ph == "i" && cat == "event_record") {
      const auto& a = object(e, "args");
      data_.records.push_back(
          {unsigned_integer(a, "event"), unsigned_integer(a, "task"), device(a, "device"), u32(a, "stream"), time(e, "ts")});
    } else if (ph == "i" && cat == "memory") {
      const auto& a = object(e, "args");
      memory_info m;
      m.device = device(a, "device");
      const auto op = string(a, "op");
      if (op != "alloc" && op != "free") fail(where_ + ": unknown memory op \"" + std::string{op} + "\"");
      m.op = op == "alloc" ? memory_op::alloc : memory_op::free;
      m.address = unsigned_integer(a, "address");
      m.bytes = static_cast<std::size_t>(unsigned_integer(a, "bytes"));
      m.in_use = static_cast<std::size_t>(unsigned_integer(a, "in_use"));
      m.reserved = static_cast<std::size_t>(unsigned_integer(a, "reserved"));
      m.stream = u32(a, "stream");
      m.time = time(e, "ts");
      data_.memory.push_back(m);
    } else if ((ph == "B" || ph == "E" || ph == "i") && cat == "range") {
      const auto& a = object(e, "args");
      trace_host_range r;
      r.op = ph == "B" ? host_range_op::push : ph == "E" ? host_range_op::pop : host_range_op::mark;
      if (const auto* n = e.if_contains("name"); n != nullptr) {
        if (!n->is_string()) fail(where_ + ": \"name\" is not a string");
        r.name = data_.intern(n->get_string());
      }
      r.lane = u32(a, "lane");
      r.time = time(e, "ts");
      data_.ranges.push_back(r);
    }
    // Anything else (engine copies, counters, metadata, other tools' events) is derived or foreign.
  }

  trace_data data_;
  std::string where_;
};

}  // namespace detail

/// Reads a Chrome trace JSON text written by npurt. On failure sets ec to errc::parse_error,
/// puts a message saying where and what in `message`, and returns empty data.
inline trace_data read_chrome_trace(std::string_view text, std::error_code& ec, std::string& message) {
  ec.clear();
  message.clear();
  boost::json::parse_options opts;
  opts.numbers = boost::json::number_precision::precise;  // times round-trip to the picosecond
  opts.max_depth = 64;
  boost::json::stream_parser p({}, opts);
  boost::system::error_code jec;
  const std::size_t n = p.write(text.data(), text.size(), jec);
  if (!jec) p.finish(jec);
  if (jec) {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < n && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    ec = make_error_code(errc::parse_error);
    message = "not valid JSON (line " + std::to_string(line) + ", column " + std::to_string(col) + "): " + jec.message();
    return {};
  }
  try {
    return detail::trace_reader{}.read(p.release());
  } catch (const detail::trace_parse_failure& f) {
    ec = make_error_code(errc::parse_error);
    message = f.message;
    return {};
  }
}

/// Throwing overload: npurt::caller_error with code errc::parse_error.
inline trace_data read_chrome_trace(std::string_view text) {
  std::error_code ec;
  std::string message;
  auto data = read_chrome_trace(text, ec, message);
  if (ec) throw_error(ec, message);
  return data;
}

/// Reads a trace file. A file that cannot be opened sets ec to no_such_file_or_directory.
inline trace_data read_chrome_trace_file(const std::string& path, std::error_code& ec, std::string& message) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ec = std::make_error_code(std::errc::no_such_file_or_directory);
    message = "cannot open " + path;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return read_chrome_trace(ss.str(), ec, message);
}

}  // namespace npurt
