// The Chrome trace as JSON: parsed back with Boost.JSON (its compiled library), checked for what
// Perfetto and chrome://tracing need, and read back by the reader.
#include <npurt/detail/trace_reader.hpp>

#include "program.hpp"

#include <boost/json.hpp>

#include <catch2/catch_test_macros.hpp>

#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

namespace json = boost::json;

namespace {

std::string chrome(const npurt::trace_data& d) {
  std::ostringstream os;
  npurt::write_chrome_trace(os, d);
  return os.str();
}

std::string summary_json(const npurt::trace_data& d) {
  std::ostringstream os;
  npurt::write_summary_json(os, npurt::summarize(d));
  return os.str();
}

std::int64_t to_ps(const json::value& v) { return std::llround(json::value_to<double>(v) * 1e6); }

}  // namespace

TEST_CASE("the chrome trace is valid JSON with the fields Perfetto needs", "[profiler][chrome]") {
  npurt::profiler p;
  test_program::feed(p);
  const auto text = chrome(p.data());
  json::value root;
  REQUIRE_NOTHROW(root = json::parse(text));
  REQUIRE(root.is_object());
  REQUIRE(root.as_object().contains("traceEvents"));
  CHECK(root.at("displayTimeUnit").as_string() == "ns");
  const auto& events = root.at("traceEvents").as_array();
  REQUIRE(events.size() > 40);

  std::map<std::int64_t, int> flow_s, flow_f;  // id -> count
  std::map<std::pair<std::int64_t, std::int64_t>, int> open_ranges;
  std::set<std::pair<std::int64_t, std::int64_t>> named_threads, used_threads;
  std::set<std::int64_t> named_processes;
  for (const auto& ev : events) {
    const auto& e = ev.as_object();
    const auto ph = std::string{e.at("ph").as_string()};
    INFO(json::serialize(ev));
    REQUIRE(e.at("pid").is_int64());
    REQUIRE(e.at("tid").is_int64());
    const auto pid = e.at("pid").as_int64(), tid = e.at("tid").as_int64();
    if (ph == "M") {
      const auto name = std::string{e.at("name").as_string()};
      if (name == "process_name") named_processes.insert(pid);
      if (name == "thread_name") named_threads.insert({pid, tid});
      CHECK(e.at("args").as_object().size() >= 1);
      continue;
    }
    REQUIRE(e.at("ts").is_number());
    CHECK(json::value_to<double>(e.at("ts")) >= 0);
    used_threads.insert({pid, tid});
    if (ph == "X") {
      REQUIRE(e.at("dur").is_number());
      CHECK(json::value_to<double>(e.at("dur")) >= 0);
      CHECK(e.at("name").is_string());
      CHECK(e.at("cat").is_string());
    } else if (ph == "s" || ph == "f") {
      CHECK(e.at("cat").as_string() == "dependency");
      (ph == "s" ? flow_s : flow_f)[e.at("id").as_int64()]++;
      if (ph == "f") CHECK(e.at("bp").as_string() == "e");
    } else if (ph == "C") {
      for (const auto& kv : e.at("args").as_object()) CHECK(kv.value().is_number());
    } else if (ph == "B") {
      open_ranges[{pid, tid}]++;
    } else if (ph == "E") {
      CHECK(open_ranges[{pid, tid}]-- > 0);
    } else {
      CHECK(ph == "i");
      CHECK(e.at("s").as_string() == "t");
    }
  }
  CHECK(flow_s == flow_f);  // every arrow has both ends, once
  CHECK(flow_s.size() == 1);
  for (const auto& [k, n] : open_ranges) CHECK(n == 0);
  // Every track that holds events has a name, and so does every process.
  for (const auto& t : used_threads) {
    INFO(t.first << "/" << t.second);
    CHECK(named_threads.count(t) == 1);
    CHECK(named_processes.count(t.first) == 1);
  }
}

TEST_CASE("the task events of the two-stream program are exactly the expected ones", "[profiler][chrome]") {
  npurt::profiler p;
  test_program::feed(p);
  const auto root = json::parse(chrome(p.data()));
  // (name, pid, tid, ts, end) of every task event, in picoseconds.
  using row = std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  std::multiset<row> got, want;
  for (const auto& ev : root.at("traceEvents").as_array()) {
    const auto& e = ev.as_object();
    if (e.at("ph").as_string() != "X" || e.at("cat").as_string() != "task") continue;
    const auto ts = to_ps(e.at("ts"));
    got.insert({std::string{e.at("name").as_string()}, e.at("pid").as_int64(), e.at("tid").as_int64(), ts,
                ts + to_ps(e.at("dur"))});
  }
  for (const auto& t : test_program::tasks())
    want.insert({t.name, t.device + 1, std::int64_t{t.stream} + 1, static_cast<std::int64_t>(t.start * 1e6),
                 static_cast<std::int64_t>(t.end * 1e6)});
  CHECK(got == want);
}

TEST_CASE("a trace read back gives the same summary and writes the same bytes", "[profiler][reader]") {
  npurt::profiler p;
  test_program::feed(p);
  const auto text = chrome(p.data());
  std::error_code ec;
  std::string why;
  const auto back = npurt::read_chrome_trace(text, ec, why);
  REQUIRE_FALSE(ec);
  CHECK(back.tasks.size() == p.data().tasks.size());
  CHECK(back.waits.size() == 1);
  CHECK(back.records.size() == 1);
  CHECK(back.memory.size() == 1);
  CHECK(back.links.size() == 1);
  CHECK(back.steps.size() == 2);
  CHECK(back.ranges.size() == 3);
  CHECK(back.streams.size() == 4);
  REQUIRE(back.shutdown.has_value());
  CHECK(*back.shutdown == test_program::us(40));
  CHECK(summary_json(back) == summary_json(p.data()));
  CHECK(chrome(back) == text);
  std::ostringstream svg_a, svg_b;
  npurt::write_svg(svg_a, p.data());
  npurt::write_svg(svg_b, back);
  CHECK(svg_a.str() == svg_b.str());
}

TEST_CASE("times survive the round trip to the picosecond", "[profiler][reader]") {
  npurt::profiler p;
  npurt::task_info t;
  t.id = 1;
  t.engine = npurt::engine_kind::ai_core;
  t.start = npurt::sim_time{npurt::picoseconds{123'456'789'012'345}};  // 123 s and odd picoseconds
  t.end = t.start + npurt::picoseconds{7};
  t.name = "odd";
  p.on_task(t);
  const auto back = npurt::read_chrome_trace(chrome(p.data()));
  REQUIRE(back.tasks.size() == 1);
  CHECK(back.tasks[0].start == t.start);
  CHECK(back.tasks[0].end == t.end);
}

TEST_CASE("the reader rejects what is not a trace with a parse error that says why", "[profiler][reader]") {
  const std::pair<std::string, std::string> cases[] = {
      {"this is not json", "not valid JSON"},
      {"{\"traceEvents\": [", "not valid JSON"},
      {"[1, 2, 3]", "not a JSON object"},
      {"{}", "traceEvents"},
      {"{\"traceEvents\": 5}", "not an array"},
      {"{\"traceEvents\": [7]}", "traceEvents[0]"},
      {"{\"traceEvents\": [{\"pid\": 1}]}", "\"ph\""},
      {R"({"traceEvents": [{"ph":"X","cat":"task","name":"k","pid":1,"tid":1,"ts":"zero","dur":1,)"
       R"("args":{"id":1,"kind":"kernel","engine":"ai_core","device":0,"stream":0,"priority":4,"submitted":0,"ready":0,"bytes":0,"flops":0}}]})",
       "\"ts\" is not a number"},
      {R"({"traceEvents": [{"ph":"X","cat":"task","name":"k","pid":1,"tid":1,"ts":0,"dur":1,)"
       R"("args":{"id":1,"kind":"warp","engine":"ai_core","device":0,"stream":0,"priority":4,"submitted":0,"ready":0,"bytes":0,"flops":0}}]})",
       "unknown task kind"},
      {R"({"traceEvents": [{"ph":"X","cat":"task","name":"k","pid":1,"tid":1,"ts":0,"dur":1,"args":{"id":-3}}]})",
       "\"id\""},
  };
  for (const auto& [text, expect] : cases) {
    INFO(text);
    std::error_code ec;
    std::string why;
    const auto d = npurt::read_chrome_trace(text, ec, why);
    CHECK(ec == npurt::errc::parse_error);
    CHECK(why.find(expect) != std::string::npos);
    CHECK(d.tasks.empty());
    try {
      (void)npurt::read_chrome_trace(text);
      FAIL("no exception");
    } catch (const npurt::caller_error& e) { CHECK(e.code() == npurt::errc::parse_error); }
  }
  // A foreign Chrome trace with none of npurt's events reads as an empty profile.
  std::error_code ec;
  std::string why;
  const auto d =
      npurt::read_chrome_trace(R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":5,"name":"x"}]})", ec, why);
  CHECK_FALSE(ec);
  CHECK(d.tasks.empty());
}

TEST_CASE("npurt-trace summarises and renders a trace, and exits with 2 on a non-trace", "[profiler][tool]") {
  const char* tool = std::getenv("NPURT_TRACE_TOOL");
  if (tool == nullptr || *tool == '\0') SKIP("NPURT_TRACE_TOOL is not set (meson test sets it)");
  npurt::profiler p;
  test_program::feed(p);
  p.write_chrome_trace("tool_trace.json");
  { std::ofstream("tool_bad.json") << "{\"traceEvents\": 3}"; }
  auto run = [&](const std::string& args) { return test_program::run_tool(tool, args, "tool_out.txt"); };
  auto [code, out] = run("summarize tool_trace.json");
  CHECK(code == 0);
  std::ostringstream expect;
  p.write_summary_text(expect);
  CHECK(out == expect.str());

  std::tie(code, out) = run("svg tool_trace.json -o tool_out.svg");
  CHECK(code == 0);
  std::ifstream svg("tool_out.svg");
  std::ostringstream svg_text, svg_expect;
  svg_text << svg.rdbuf();
  p.write_svg(svg_expect);
  CHECK(svg_text.str() == svg_expect.str());

  std::tie(code, out) = run("summarize tool_bad.json");
  CHECK(code == 2);
  CHECK(out.find("not an array") != std::string::npos);
  std::tie(code, out) = run("summarize does_not_exist.json");
  CHECK(code == 2);
  std::tie(code, out) = run("frobnicate tool_trace.json");
  CHECK(code == 1);
  // A directory opens but cannot be read: the system's reason, once, after the path.
  std::tie(code, out) = run("summarize .");
  CHECK(code == 2);
  CHECK(out.find("npurt-trace: .: cannot read: Is a directory") != std::string::npos);
  // An option where the command goes is named, not "a subcommand is required".
  std::tie(code, out) = run("--top 3 summarize tool_trace.json");
  CHECK(code == 1);
  CHECK(out.find("unknown option '--top'") != std::string::npos);
  for (const char* f : {"tool_trace.json", "tool_bad.json", "tool_out.txt", "tool_out.svg"}) std::remove(f);
}

// Kernel names, ONNX node names and file names are bytes. Ill-formed here: a lone 0xFF, a lone
// continuation byte, a lead byte cut short, an overlong '/' (C0 AF) and a surrogate (ED A0 80),
// each byte of them one U+FFFD; U+FFFF (EF BF BF) is UTF-8 but no XML character. Well-formed
// and kept: U+00B5 (C2 B5), U+540D (E5 90 8D) and U+1F600 (F0 9F 98 80).
const std::string ill_formed_name =
    "a\xff"
    "b\x80"
    "c\xc3"
    "d\xc0\xaf"
    "e\xed\xa0\x80"
    "f\xef\xbf\xbf"
    "g\xc2\xb5\xe5\x90\x8d\xf0\x9f\x98\x80";

TEST_CASE("a name that is not UTF-8 is written as U+FFFD so that the trace and the timeline stay readable",
          "[profiler][chrome][svg]") {
  const std::string& raw = ill_formed_name;
  const std::string r = "\xef\xbf\xbd";
  const std::string kept = "g\xc2\xb5\xe5\x90\x8d\xf0\x9f\x98\x80";
  const std::string in_json = "a" + r + "b" + r + "c" + r + "d" + r + r + "e" + r + r + r + "f\xef\xbf\xbf" + kept;
  const std::string in_xml = "a" + r + "b" + r + "c" + r + "d" + r + r + "e" + r + r + r + "f" + r + kept;

  npurt::trace_data d;
  npurt::trace_task t;
  t.id = 1;
  t.stream = 1;
  t.engine = npurt::engine_kind::ai_core;
  t.submitted = t.ready = t.start = test_program::us(1);
  t.end = test_program::us(3);
  t.name = d.intern(raw);
  d.tasks.push_back(t);

  const auto text = chrome(d);
  json::value root;
  REQUIRE_NOTHROW(root = json::parse(text));  // Boost.JSON refuses ill-formed UTF-8
  bool found = false;
  for (const auto& ev : root.at("traceEvents").as_array()) {
    const auto* cat = ev.as_object().if_contains("cat");
    if (cat && cat->is_string() && cat->as_string() == "task") {
      CHECK(std::string{ev.as_object().at("name").as_string()} == in_json);
      found = true;
    }
  }
  CHECK(found);
  std::error_code ec;
  std::string why;
  const auto back = npurt::read_chrome_trace(text, ec, why);
  INFO(why);
  REQUIRE_FALSE(ec);
  REQUIRE(back.tasks.size() == 1);
  CHECK(back.str(back.tasks[0].name) == in_json);
  CHECK_NOTHROW(json::parse(summary_json(d)));

  std::ostringstream svg;
  npurt::write_svg(svg, d, {.title = raw});
  const auto picture = svg.str();
  CHECK(picture.find(in_xml) != std::string::npos);
  CHECK(picture.find(raw) == std::string::npos);
  CHECK(picture.find("\xff") == std::string::npos);
  CHECK(picture.find("\xef\xbf\xbf") == std::string::npos);
}

TEST_CASE("the text summary writes a name that is not UTF-8 with U+FFFD, as the trace does", "[profiler][summary]") {
  // The same ill-formed name as above: each byte of a bad sequence is one U+FFFD. Text has no
  // character it must leave out, so U+FFFF stays.
  const std::string& raw = ill_formed_name;
  const std::string r = "\xef\xbf\xbd";
  const std::string clean = "a" + r + "b" + r + "c" + r + "d" + r + r + "e" + r + r + r + "f\xef\xbf\xbf" +
                            "g\xc2\xb5\xe5\x90\x8d\xf0\x9f\x98\x80";
  // Well-formed, and 34 bytes: a 32-byte cut would split U+540D (E5 90 8D) after its first byte.
  const std::string long_name = std::string(31, 'x') + "\xe5\x90\x8d";

  npurt::trace_data d;
  npurt::trace_task t;
  t.stream = 1;
  t.kind = npurt::task_kind::kernel;
  t.engine = npurt::engine_kind::ai_core;
  t.id = 1;
  t.submitted = t.ready = t.start = test_program::us(1);
  t.end = test_program::us(4);
  t.name = d.intern(raw);
  d.tasks.push_back(t);
  t.id = 2;
  t.submitted = t.ready = t.start = test_program::us(4);
  t.end = test_program::us(6);
  t.name = d.intern(long_name);
  d.tasks.push_back(t);

  std::ostringstream os;
  npurt::write_summary_text(os, npurt::summarize(d));
  const std::string text = os.str();  // not shown on failure: Catch2's text wrapping takes no bad UTF-8
  CHECK(text.find(raw) == std::string::npos);
  for (const char* bad : {"\xff", "\xc0", "\xed\xa0"}) CHECK(text.find(bad) == std::string::npos);
  // Top kernels: names in a 32-byte column, cut where a character ends. The clean name's 32nd
  // byte is inside U+FFFF (bytes 30 to 32), so 30 bytes and two spaces of padding remain; the
  // long name keeps its 31 x and loses U+540D whole.
  CHECK(text.find("\n  " + clean.substr(0, 30) + std::string(2 + 1 + 6, ' ') + "1 ") != std::string::npos);
  CHECK(text.find("\n  " + std::string(31, 'x') + "  ") != std::string::npos);
  CHECK(text.find(std::string(31, 'x') + "\xe5 ") == std::string::npos);
  // The critical path writes names whole.
  CHECK(text.find(" " + clean + "\n") != std::string::npos);
  CHECK(text.find(" " + long_name + "\n") != std::string::npos);
}
