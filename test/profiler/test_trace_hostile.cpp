// The trace reader, the outputs and npurt-trace under hostile input: every bad trace is a parse
// error that names what was wrong, and nothing reports figures a real run cannot have.
#include <npurt/profiler.hpp>
#include <npurt/profiler/trace_reader.hpp>

#include "program.hpp"

#include <boost/json.hpp>  // bodies come from test_trace_json.cpp

#include <catch2/catch_test_macros.hpp>

#include <sys/wait.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

using npurt::picoseconds;
using npurt::sim_time;

sim_time at(std::int64_t v) { return sim_time{picoseconds{v}}; }

/// One task event as write_chrome_trace writes it, with the fields a test wants to break.
std::string task_event(std::uint64_t id, std::string_view ts, std::string_view dur, int stream = 0,
                       std::string_view kind = "kernel") {
  std::string e = R"({"ph":"X","cat":"task","name":"k","pid":1,"tid":1,"ts":)" + std::string{ts} + R"(,"dur":)" +
                  std::string{dur} + R"(,"args":{"id":)" + std::to_string(id) + R"(,"kind":")" + std::string{kind} +
                  R"(","engine":"ai_core","device":0,"stream":)" + std::to_string(stream) +
                  R"(,"priority":4,"submitted":0,"ready":0,"bytes":0,"flops":0}})";
  return e;
}

std::string wait_event(std::uint64_t wait_task, std::uint64_t record_task, int stream, int record_stream) {
  return R"({"ph":"f","cat":"dependency","pid":1,"tid":1,"ts":1,"id":1,"args":{"event":1,"wait_task":)" +
         std::to_string(wait_task) + R"(,"device":0,"stream":)" + std::to_string(stream) + R"(,"record_task":)" +
         std::to_string(record_task) + R"(,"record_device":0,"record_stream":)" + std::to_string(record_stream) +
         R"(,"begin":0,"satisfied":1}})";
}

std::string trace_of(const std::vector<std::string>& events) {
  std::string t = R"({"traceEvents":[)";
  for (std::size_t i = 0; i < events.size(); ++i) t += (i ? "," : "") + events[i];
  return t + "]}";
}

/// Reads `text` and expects a parse error whose message holds `expect`.
void expect_rejected(const std::string& text, const std::string& expect) {
  INFO(text.substr(0, 300));
  std::error_code ec;
  std::string why;
  const auto d = npurt::read_chrome_trace(text, ec, why);
  CHECK(ec == npurt::errc::parse_error);
  CHECK(why.find(expect) != std::string::npos);
  CHECK(why.size() < 300);
  CHECK(d.tasks.empty());
}

npurt::trace_data random_trace(unsigned seed, int n) {
  npurt::profiler p;
  std::mt19937_64 rng(seed);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::map<std::pair<int, int>, std::int64_t> cursor;
  std::vector<npurt::task_info> done;
  for (int i = 1; i <= n; ++i) {
    npurt::task_info t;
    t.id = static_cast<std::uint64_t>(i);
    t.device = static_cast<int>(pick(0, 1));
    t.stream = static_cast<std::uint32_t>(t.device * 10 + pick(0, 2));
    const bool control = pick(0, 4) == 0;
    t.kind = control           ? npurt::task_kind::event_wait
             : pick(0, 5) == 0 ? npurt::task_kind::collective
                               : npurt::task_kind::kernel;
    t.engine = control                                  ? npurt::engine_kind::none
               : t.kind == npurt::task_kind::collective ? npurt::engine_kind::collective
                                                        : npurt::engine_kind::ai_core;
    auto& c = cursor[{t.device, static_cast<int>(t.stream)}];
    const std::int64_t gap = pick(0, 2) == 0 ? pick(1, 5000) : 0;
    t.submitted = at(std::max<std::int64_t>(0, c - pick(-3000, 1000)));
    t.ready = at(c + gap / 2);
    t.start = at(c + gap);
    t.end = at(c + gap + (control ? 0 : pick(1, 9000)));
    c = t.end.time_since_epoch().count();
    t.name = pick(0, 1) ? "matmul" : "gelu";
    p.on_task(t);
    if (control && !done.empty()) {
      const auto& r = done[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(done.size()) - 1))];
      p.on_event_wait({static_cast<std::uint64_t>(pick(1, 9)), t.id, t.device, t.stream, r.id, r.device, r.stream,
                       at(pick(0, c)), at(pick(0, c + 100))});
    }
    if (pick(0, 9) == 0)
      p.on_memory({t.device, npurt::memory_op::alloc, 4096, 64, 64, 64, t.stream, at(pick(0, c + 100))});
    done.push_back(t);
  }
  return p.data();
}

/// Gap causes as the definition reads, by scanning everything for every gap.
std::vector<std::tuple<std::int64_t, npurt::gap_cause, std::uint64_t, std::uint64_t>> reference_gaps(
    const npurt::trace_data& d, npurt::device_id dev, std::uint32_t stream) {
  std::vector<const npurt::trace_task*> idx;
  for (const auto& t : d.tasks)
    if (t.device == dev && t.stream == stream) idx.push_back(&t);
  std::sort(idx.begin(), idx.end(), [](auto* a, auto* b) { return a->id < b->id; });
  std::vector<std::pair<std::int64_t, std::int64_t>> busy;
  std::int64_t w0 = std::numeric_limits<std::int64_t>::max(), w1 = std::numeric_limits<std::int64_t>::min();
  for (auto* t : idx) {
    const auto s = t->start.time_since_epoch().count(), e = t->end.time_since_epoch().count();
    w0 = std::min(w0, s);
    w1 = std::max(w1, e);
    if (t->engine != npurt::engine_kind::none && e > s) busy.push_back({s, e});
  }
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps;
  std::int64_t cursor = w0;
  for (const auto& [s, e] : busy) {
    if (s > cursor) gaps.push_back({cursor, s});
    cursor = std::max(cursor, e);
  }
  if (!idx.empty() && w1 > cursor) gaps.push_back({cursor, w1});
  std::vector<std::tuple<std::int64_t, npurt::gap_cause, std::uint64_t, std::uint64_t>> out;
  for (const auto& [a, b] : gaps) {
    const npurt::trace_task* next = nullptr;
    for (auto* t : idx)
      if (t->engine != npurt::engine_kind::none && t->start.time_since_epoch().count() >= b) {
        next = t;
        break;
      }
    if (next == nullptr)
      for (auto* t : idx)
        if (t->end.time_since_epoch().count() >= b) {
          next = t;
          break;
        }
    const npurt::event_wait_info* blocking = nullptr;
    for (const auto& w : d.waits)
      if (w.device == dev && w.stream == stream && w.satisfied > w.begin && w.begin.time_since_epoch().count() < b &&
          w.satisfied.time_since_epoch().count() > a &&
          (blocking == nullptr || std::tie(w.satisfied, w.task) > std::tie(blocking->satisfied, blocking->task)))
        blocking = &w;
    bool alloc = false;
    for (const auto& m : d.memory)
      alloc |= m.device == dev && m.stream == stream && m.op == npurt::memory_op::alloc && m.stream != 0 &&
               m.time.time_since_epoch().count() > a && m.time.time_since_epoch().count() <= b;
    npurt::gap_cause c = npurt::gap_cause::other;
    if (blocking) c = npurt::gap_cause::event;
    else if (next && (next->kind == npurt::task_kind::collective || next->engine == npurt::engine_kind::collective))
      c = npurt::gap_cause::peer;
    else if (alloc) c = npurt::gap_cause::memory;
    else if (next && next->submitted.time_since_epoch().count() > a) c = npurt::gap_cause::host;
    else if (next && next->ready.time_since_epoch().count() > a &&
             std::any_of(d.tasks.begin(), d.tasks.end(), [&](const npurt::trace_task& t) {
               return t.device == next->device && t.priority == next->priority && t.ready == next->ready &&
                      t.id < next->id;
             }))
      c = npurt::gap_cause::queue;
    else if (next && next->start > next->ready) c = npurt::gap_cause::engine;
    out.emplace_back(a, c, next ? next->id : 0, blocking ? blocking->event : 0);
  }
  return out;
}

}  // namespace

TEST_CASE("the gaps of a random trace and their causes equal a scan of every task and wait", "[profiler][summary]") {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    const auto d = random_trace(seed, 600);
    const auto s = npurt::summarize(d);
    REQUIRE(!s.streams.empty());
    std::size_t gaps = 0;
    for (const auto& st : s.streams) {
      const auto want = reference_gaps(d, st.device, st.stream);
      REQUIRE(st.gaps.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        CHECK(st.gaps[k].begin.time_since_epoch().count() == std::get<0>(want[k]));
        CHECK(st.gaps[k].cause == std::get<1>(want[k]));
        CHECK(st.gaps[k].next_task == std::get<2>(want[k]));
        if (st.gaps[k].cause == npurt::gap_cause::event) CHECK(st.gaps[k].event == std::get<3>(want[k]));
      }
      gaps += want.size();
    }
    CHECK(gaps > 50);  // the program has gaps of every kind to check
  }
}

TEST_CASE("every trace the profiler writes passes the reader's checks", "[profiler][reader]") {
  for (unsigned seed : {5u, 6u}) {
    const auto d = random_trace(seed, 400);
    CHECK(npurt::check_trace(d).empty());
    std::ostringstream os;
    npurt::write_chrome_trace(os, d);
    std::error_code ec;
    std::string why;
    const auto back = npurt::read_chrome_trace(os.str(), ec, why);
    INFO(why);
    REQUIRE_FALSE(ec);
    CHECK(back.tasks.size() == d.tasks.size());
  }
}

TEST_CASE("times that are negative, beyond range or overflow their sum are parse errors",
          "[profiler][reader][hostile]") {
  expect_rejected(trace_of({task_event(1, "-5", "1")}), "\"ts\" is negative");
  expect_rejected(trace_of({task_event(1, "5", "-4")}), "\"dur\" is negative");
  expect_rejected(trace_of({task_event(1, "9e12", "1")}), "\"ts\" is beyond the largest trace time");
  // Each within range, their sum not: the end would wrap.
  expect_rejected(trace_of({task_event(1, "4e12", "4e12")}), "\"ts\" + \"dur\"");
  expect_rejected(trace_of({task_event(1, "1e400", "1")}), "\"ts\"");
  // Three tasks whose durations add up past 64 bits.
  expect_rejected(
      trace_of({task_event(1, "0", "4e12", 0), task_event(2, "0", "4e12", 1), task_event(3, "0", "4e12", 2)}),
      "add up");
}

// A double holds the picosecond of a time in microseconds only up to 2^53 ps (about 2.5 hours):
// times are read from their decimal text instead.
TEST_CASE("times past 2^53 ps read back exactly, to the end of the trace range", "[profiler][reader]") {
  struct sample {
    const char* us;
    std::int64_t ps;
  };
  // 2^53 + 1, 2^60 + 3, 2^62 - 1 and 2^62 (max_trace_time) picoseconds; then forms another
  // writer may use: an exponent, and a half picosecond, which rounds up.
  const sample samples[] = {{"9007199254.740993", (std::int64_t{1} << 53) + 1},
                            {"1152921504606.846979", (std::int64_t{1} << 60) + 3},
                            {"4611686018427.387903", npurt::max_trace_time - 1},
                            {"4611686018427.387904", npurt::max_trace_time},
                            {"1.0000005e3", 1'000'000'500},
                            {"12345678.9e-3", 12'345'678'900},
                            {"0.0000015", 2},
                            {"0.00000149", 1}};
  for (const auto& [text, ps] : samples) {
    INFO(text);
    std::error_code ec;
    std::string why;
    const auto d = npurt::read_chrome_trace(trace_of({task_event(1, text, "0")}), ec, why);
    INFO(why);
    REQUIRE_FALSE(ec);
    REQUIRE(d.tasks.size() == 1);
    CHECK(d.tasks[0].start == at(ps));
    CHECK(d.tasks[0].end == at(ps));
  }
  // One picosecond past the range is refused, not read as the range's end.
  expect_rejected(trace_of({task_event(1, "4611686018427.387905", "0")}), "\"ts\" is beyond the largest trace time");
  expect_rejected(trace_of({task_event(1, "4611686018427.387903", "0.000002")}), "\"ts\" + \"dur\"");

  // What the writer prints reads back as it was, for every time field.
  npurt::trace_data d;
  npurt::trace_task t;
  t.id = 1;
  t.stream = 1;
  t.engine = npurt::engine_kind::ai_core;
  t.submitted = at((std::int64_t{1} << 53) + 1);
  t.ready = at((std::int64_t{1} << 55) + 3);
  t.start = at((std::int64_t{1} << 58) + 5);
  t.end = at(npurt::max_trace_time - 7);
  t.name = d.intern("late");
  d.tasks.push_back(t);
  std::ostringstream os;
  npurt::write_chrome_trace(os, d);
  const auto back = npurt::read_chrome_trace(os.str());
  REQUIRE(back.tasks.size() == 1);
  CHECK(back.tasks[0].submitted == t.submitted);
  CHECK(back.tasks[0].ready == t.ready);
  CHECK(back.tasks[0].start == t.start);
  CHECK(back.tasks[0].end == t.end);

  // The file reader parses in 1 MiB pieces: a key and a time cut by a piece's end read the same.
  for (const std::size_t cut : {std::size_t{1}, std::size_t{8}}) {
    const std::string event = task_event(1, "9007199254.740993", "1152921504606.846979");
    const std::string head = R"({"traceEvents":[)";
    const std::size_t at_ts = event.find("\"ts\":") + (cut == 1 ? 2 : 5 + cut);  // in the key, or in the number
    const std::string text = head + std::string((std::size_t{1} << 20) - head.size() - at_ts, ' ') + event + "]}";
    const std::string path = "hostile_piece_cut.json";
    {
      std::ofstream f(path, std::ios::binary);
      f << text;
    }
    std::error_code ec;
    std::string why;
    const auto r = npurt::read_chrome_trace_file(path, ec, why, {});
    std::remove(path.c_str());
    INFO(why);
    REQUIRE_FALSE(ec);
    REQUIRE(r.tasks.size() == 1);
    CHECK(r.tasks[0].start == at((std::int64_t{1} << 53) + 1));
    CHECK(r.tasks[0].end == at((std::int64_t{1} << 53) + 1 + (std::int64_t{1} << 60) + 3));
  }
}

TEST_CASE("duplicate task ids and wait cycles are parse errors, not impossible critical paths",
          "[profiler][reader][hostile]") {
  expect_rejected(trace_of({task_event(7, "0", "1"), task_event(7, "2", "1")}), "task id 7 appears more than once");
  // Task 1 (stream 0) waits for task 4 (stream 1), task 3 (stream 1) waits for task 2 (stream 0):
  // 1 -> 2 -> 3 -> 4 -> 1.
  expect_rejected(trace_of({task_event(1, "0", "1", 0), task_event(2, "1", "1", 0), task_event(3, "0", "1", 1),
                            task_event(4, "1", "1", 1), wait_event(1, 4, 0, 1), wait_event(3, 2, 1, 0)}),
                  "cycle");
  // The same records built by hand: the summary stays within the tasks that exist.
  npurt::trace_data d;
  const auto name = d.intern("k");
  for (std::uint64_t id : {1, 2, 1, 2}) {
    npurt::trace_task t;
    t.id = id;
    t.engine = npurt::engine_kind::ai_core;
    t.start = at(static_cast<std::int64_t>(id) * 10);
    t.end = at(static_cast<std::int64_t>(id) * 10 + 5);
    t.name = name;
    d.tasks.push_back(t);
  }
  d.waits.push_back({1, 1, 0, 0, 2, 0, 0, at(0), at(20)});
  const auto s = npurt::summarize(d);
  CHECK(s.critical_path.size() <= d.tasks.size());
  CHECK(s.critical_path_busy <= s.span);
}

TEST_CASE("device ids, names and kinds out of range are named, quoting only a short prefix",
          "[profiler][reader][hostile]") {
  auto big_device = task_event(1, "0", "1");
  big_device.replace(big_device.find("\"device\":0"), 10, "\"device\":2147483647");
  expect_rejected(trace_of({big_device}), "\"device\" is out of range");
  const std::string huge_kind(100000, 'w');
  expect_rejected(trace_of({task_event(1, "0", "1", 0, huge_kind)}), "is longer than");
  expect_rejected(trace_of({task_event(1, "0", "1", 0, std::string(500, 'q'))}), "unknown task kind \"qqqq");
}

TEST_CASE("a file of zero bytes without end, or a directory, is an error at once", "[profiler][reader][hostile]") {
  std::error_code ec;
  std::string why;
  // /dev/zero never ends: the reader must stop at the first byte that is not JSON.
  (void)npurt::read_chrome_trace_file("/dev/zero", ec, why);
  CHECK(ec == npurt::errc::parse_error);
  CHECK(why.find("line 1, column 1") != std::string::npos);
  (void)npurt::read_chrome_trace_file("/", ec, why);
  CHECK(ec);
  (void)npurt::read_chrome_trace_file("hostile_no_such_file.json", ec, why);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK(why == "cannot open: No such file or directory");
  npurt::trace_read_limits small;
  small.max_bytes = 16;
  { std::ofstream("hostile_big.json") << trace_of({task_event(1, "0", "1")}); }
  (void)npurt::read_chrome_trace_file("hostile_big.json", ec, why, small);
  CHECK(ec == npurt::errc::parse_error);
  CHECK(why.find("larger than 16 bytes") != std::string::npos);
  std::remove("hostile_big.json");
}

TEST_CASE("an SVG near the end of time has a bounded number of ticks inside the plot", "[profiler][svg][hostile]") {
  npurt::trace_data d;
  npurt::trace_task t;
  t.id = 1;
  t.engine = npurt::engine_kind::ai_core;
  t.start = at(std::numeric_limits<std::int64_t>::max() - 1'000'000'000'000'000'000);
  t.end = at(std::numeric_limits<std::int64_t>::max() - 1);
  d.tasks.push_back(t);
  std::ostringstream os;
  npurt::write_svg(os, d);  // a wrapping tick loop never returns
  const auto svg = os.str();
  std::size_t ticks = 0;
  for (auto p = svg.find("class=\"tick\""); p != std::string::npos; p = svg.find("class=\"tick\"", p + 1)) ++ticks;
  CHECK(ticks >= 2);
  CHECK(ticks <= 12);
  CHECK(svg.find("x1=\"-") == std::string::npos);
}

TEST_CASE("SVG options that are not finite pixel counts are caller errors", "[profiler][svg][hostile]") {
  npurt::trace_data d;
  for (double w : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 1e300, 10.0}) {
    npurt::svg_options o;
    o.width = w;
    CHECK_FALSE(o.check().empty());
    std::ostringstream os;
    try {
      npurt::write_svg(os, d, o);
      FAIL("no exception");
    } catch (const npurt::caller_error& e) { CHECK(e.code() == npurt::errc::invalid_argument); }
    CHECK(os.str().empty());
  }
}

TEST_CASE("the SVG of a large trace merges bars instead of growing with the trace", "[profiler][svg]") {
  npurt::trace_data d;
  const auto name = d.intern("k");
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    npurt::trace_task t;
    t.id = static_cast<std::uint64_t>(i + 1);
    t.stream = static_cast<std::uint32_t>(i % 2);
    t.engine = npurt::engine_kind::ai_core;
    t.start = at(std::int64_t{i} * 1000);
    t.end = at(std::int64_t{i} * 1000 + 600);
    t.name = name;
    d.tasks.push_back(t);
  }
  std::ostringstream os;
  npurt::write_svg(os, d);
  const auto svg = os.str();
  std::size_t bars = 0;
  for (auto p = svg.find("class=\"task\""); p != std::string::npos; p = svg.find("class=\"task\"", p + 1)) ++bars;
  // At most about one bar per pixel of the ~1000-pixel plot, on each of the two stream rows.
  CHECK(bars >= 2);
  CHECK(bars <= 2 * 1000);
  CHECK(svg.size() < 4'000'000);
  CHECK(svg.find(std::to_string(n / 2) + " bars") != std::string::npos);  // one stream's tasks as one bar
}

TEST_CASE("npurt-trace rejects bad options with exit 1 and unwritable output with exit 2",
          "[profiler][tool][hostile]") {
  const char* tool = std::getenv("NPURT_TRACE_TOOL");
  if (tool == nullptr || *tool == '\0') SKIP("NPURT_TRACE_TOOL is not set (meson test sets it)");
  npurt::profiler p;
  test_program::feed(p);
  p.write_chrome_trace("hostile_trace.json");
  auto run = [&](const std::string& args) { return test_program::run_tool(tool, args, "hostile_out.txt"); };
  for (const char* w : {"nan", "inf", "1e300", "-5", "abc"}) {
    INFO(w);
    const auto [code, out] = run(std::string{"svg hostile_trace.json -o hostile.svg --width "} + w);
    CHECK(code == 1);
    CHECK(out.find("width") != std::string::npos);
  }
  CHECK(run("summarize hostile_trace.json --top abc").first == 1);
  CHECK(run("svg hostile_trace.json").first == 1);  // no -o
  const auto [unknown, said] = run("summarise hostile_trace.json");
  CHECK(unknown == 1);
  CHECK(said.find("unknown command 'summarise'") != std::string::npos);
  const auto [help, text] = run("--help");
  CHECK(help == 0);
  CHECK(text.find("summarize") != std::string::npos);
  // A full disk: the summary (stdout) and the picture must fail loudly.
  CHECK(std::system((std::string{tool} + " summarize hostile_trace.json > /dev/full 2>/dev/null").c_str()) != 0);
  CHECK(run("svg hostile_trace.json -o /dev/full").first == 2);
  // The system's reason comes with the file's name: what the user has to fix.
  const auto [missing, missing_said] = run("summarize hostile_no_such_trace.json");
  CHECK(missing == 2);
  CHECK(missing_said.find("hostile_no_such_trace.json: cannot open: No such file or directory") != std::string::npos);
  const auto [no_dir, no_dir_said] = run("svg hostile_trace.json -o hostile_no_such_dir/x.svg");
  CHECK(no_dir == 2);
  CHECK(no_dir_said.find("cannot write hostile_no_such_dir/x.svg: No such file or directory") != std::string::npos);
  for (const char* f : {"hostile_trace.json", "hostile_out.txt", "hostile.svg"}) std::remove(f);
}

TEST_CASE("read_chrome_trace_file has a throwing overload naming the file", "[profiler][reader][errors]") {
  const std::string dir = "npurt-test-reader-throwing";
  (void)std::system(("rm -rf " + dir + " && mkdir " + dir).c_str());
  const std::string missing = dir + "/missing.json";
  try {
    (void)npurt::read_chrome_trace_file(missing);
    FAIL("a missing file was read");
  } catch (const npurt::error& e) {
    CHECK(e.code() == std::errc::no_such_file_or_directory);
    CHECK(std::string(e.what()).rfind(missing + ": ", 0) == 0);
  }
  const std::string cut = dir + "/cut.json";
  std::ofstream(cut) << R"({"traceEvents":[)";
  try {
    (void)npurt::read_chrome_trace_file(cut);
    FAIL("a truncated trace was read");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::parse_error);
    CHECK(std::string(e.what()).rfind(cut + ": ", 0) == 0);
  }
  const std::string good = dir + "/good.json";
  std::ofstream(good) << R"({"traceEvents":[]})";
  CHECK(npurt::read_chrome_trace_file(good).tasks.empty());
  (void)std::system(("rm -rf " + dir).c_str());
}
