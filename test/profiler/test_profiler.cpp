#include <npurt/profiler.hpp>
#include <npurt/profiler/trace_reader.hpp>
#include <npurt/simple_backend.hpp>
#include <npurt/stream.hpp>

#include "program.hpp"

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using test_program::dus;
using test_program::us;

namespace {

const npurt::profile_summary::stream_stats& stream_of(const npurt::profile_summary& s, int dev, unsigned stream) {
  for (const auto& st : s.streams)
    if (st.device == dev && st.stream == stream) return st;
  FAIL("no stream " << dev << "/" << stream);
  throw;
}

const npurt::profile_summary::device_stats& device_of(const npurt::profile_summary& s, int dev) {
  for (const auto& d : s.devices)
    if (d.device == dev) return d;
  FAIL("no device " << dev);
  throw;
}

std::string chrome(const npurt::profiler& p) {
  std::ostringstream os;
  p.write_chrome_trace(os);
  return os.str();
}

}  // namespace

TEST_CASE("the summary of a small program equals the numbers worked out by hand", "[profiler][summary]") {
  npurt::profiler p;
  test_program::feed(p);
  const auto s = p.summary();

  CHECK(s.tasks == 10);
  CHECK(s.begin == us(0));
  CHECK(s.end == us(34));
  CHECK(s.span == dus(34));

  // Device 0: busy is the union [0,25] + [30,34]; compute [0,10]+[12,20]; communication [10,25].
  const auto& d0 = device_of(s, 0);
  CHECK(d0.tasks == 8);
  CHECK(d0.busy == dus(29));
  CHECK(d0.utilisation == Catch::Approx(29.0 / 34.0));
  CHECK(d0.compute == dus(18));
  CHECK(d0.communication == dus(15));
  CHECK(d0.overlap == dus(8));
  CHECK(d0.overlap_fraction == Catch::Approx(8.0 / 15.0));
  CHECK(d0.peak_memory == (1u << 20));
  REQUIRE(d0.engines.size() == 3);
  CHECK(d0.engines[0].engine == npurt::engine_kind::ai_core);
  CHECK(d0.engines[0].tasks == 4);
  CHECK(d0.engines[0].busy == dus(18));

  // Device 1: k1 [0,5] and a collective [9,25] that do not overlap.
  const auto& d1 = device_of(s, 1);
  CHECK(d1.busy == dus(21));
  CHECK(d1.compute == dus(5));
  CHECK(d1.communication == dus(16));
  CHECK(d1.overlap == dus(0));
  CHECK(d1.overlap_fraction == 0.0);

  // Streams: busy time, utilisation over the 34 µs span, and each gap with its cause.
  const auto& s1 = stream_of(s, 0, 1);
  CHECK(s1.busy == dus(18));
  CHECK(s1.utilisation == Catch::Approx(18.0 / 34.0));
  REQUIRE(s1.gaps.size() == 1);
  CHECK(s1.gaps[0].begin == us(10));
  CHECK(s1.gaps[0].end == us(12));
  CHECK(s1.gaps[0].cause == npurt::gap_cause::engine);
  CHECK(s1.gaps[0].next_task == 3);

  const auto& s2 = stream_of(s, 0, 2);
  CHECK(s2.priority == 0);
  CHECK(s2.busy == dus(19));
  REQUIRE(s2.gaps.size() == 2);
  CHECK(s2.gaps[0].begin == us(2));
  CHECK(s2.gaps[0].end == us(10));
  CHECK(s2.gaps[0].cause == npurt::gap_cause::event);
  CHECK(s2.gaps[0].event == 7);
  CHECK(s2.gaps[1].begin == us(25));
  CHECK(s2.gaps[1].end == us(30));
  CHECK(s2.gaps[1].cause == npurt::gap_cause::host);
  CHECK(s2.gaps[1].next_task == 6);
  CHECK(s2.idle == dus(13));

  const auto& s3 = stream_of(s, 0, 3);
  CHECK(s3.busy == dus(4));
  REQUIRE(s3.gaps.size() == 1);
  CHECK(s3.gaps[0].cause == npurt::gap_cause::memory);
  CHECK(s3.gaps[0].duration() == dus(4));

  const auto& s10 = stream_of(s, 1, 10);
  REQUIRE(s10.gaps.size() == 1);
  CHECK(s10.gaps[0].begin == us(5));
  CHECK(s10.gaps[0].end == us(9));
  CHECK(s10.gaps[0].cause == npurt::gap_cause::peer);

  // Top kernels by total time; collectives are not kernels.
  REQUIRE(s.top_kernels.size() == 4);
  CHECK(s.top_kernels[0].name == "matmul");
  CHECK(s.top_kernels[0].total == dus(10));
  CHECK(s.top_kernels[0].flops == 2000000);
  CHECK(s.top_kernels[1].name == "relu");
  CHECK(s.top_kernels[2].name == "k1");
  CHECK(s.top_kernels[3].name == "fill");
  CHECK(s.top_kernels[3].count == 2);
  CHECK(s.top_kernels[3].total == dus(4));
  CHECK(npurt::summarize(p.data(), 2).top_kernels.size() == 2);

  // Critical path: d2h (ends last) <- all_reduce <- wait <-(event 7)- record <- matmul.
  std::vector<std::uint64_t> path;
  for (const auto& t : s.critical_path) path.push_back(t.id);
  CHECK(path == std::vector<std::uint64_t>{1, 2, 4, 5, 6});
  CHECK(s.critical_path[2].via_event);
  CHECK_FALSE(s.critical_path[3].via_event);
  CHECK(s.critical_path_length == dus(34));
  CHECK(s.critical_path_busy == dus(10 + 15 + 4));
}

TEST_CASE("the critical path follows the event edge only when the record ends later", "[profiler][summary]") {
  npurt::profiler p;
  auto task = [&](std::uint64_t id, std::uint32_t stream, npurt::task_kind k, npurt::engine_kind e, double a,
                  double b) {
    npurt::task_info t;
    t.id = id;
    t.stream = stream;
    t.kind = k;
    t.engine = e;
    t.start = us(a);
    t.end = us(b);
    t.name = "t";
    p.on_task(t);
  };
  using K = npurt::task_kind;
  using E = npurt::engine_kind;
  // Stream 1: a [0,3], record [3,3]. Stream 2: b [0,8], wait [8,8] (event already done), c [8,9].
  task(1, 1, K::kernel, E::ai_core, 0, 3);
  task(2, 1, K::event_record, E::none, 3, 3);
  task(3, 2, K::kernel, E::ai_core, 0, 8);
  task(4, 2, K::event_wait, E::none, 8, 8);
  task(5, 2, K::kernel, E::ai_core, 8, 9);
  p.on_event_wait({1, 4, 0, 2, 2, 0, 1, us(8), us(8)});
  const auto s = p.summary();
  std::vector<std::uint64_t> path;
  for (const auto& t : s.critical_path) path.push_back(t.id);
  CHECK(path == std::vector<std::uint64_t>{3, 4, 5});
  CHECK(s.critical_path_length == dus(9));
  // The wait did not block (satisfied == begin), so stream 2 has no gap at all.
  CHECK(stream_of(s, 0, 2).gaps.empty());
}

TEST_CASE("the critical path is the same whether or not a step takes the host edge", "[profiler][summary]") {
  // The tasks sorted by end are only built for the first step without a device predecessor; a
  // path that never takes that edge, one that takes it first, and one that takes it after device
  // steps must each be the path the definition in docs/profiler.md gives.
  using K = npurt::task_kind;
  using E = npurt::engine_kind;
  struct spec {
    std::uint64_t id;
    std::uint32_t stream;
    double submitted, start, end;
  };
  auto path_of = [](const std::vector<spec>& specs) {
    npurt::profiler p;
    for (const auto& x : specs) {
      npurt::task_info t;
      t.id = x.id;
      t.stream = x.stream;
      t.kind = K::kernel;
      t.engine = E::ai_core;
      t.submitted = us(x.submitted);
      t.ready = us(x.start);
      t.start = us(x.start);
      t.end = us(x.end);
      t.name = "t";
      p.on_task(t);
    }
    const auto s = p.summary();
    std::vector<std::pair<std::uint64_t, bool>> path;  // (id, reached the next step through the host)
    for (const auto& t : s.critical_path) path.emplace_back(t.id, t.via_host);
    return std::pair{path, s.critical_path_length};
  };
  using P = std::vector<std::pair<std::uint64_t, bool>>;
  SECTION("no host edge: one stream, every step has a stream predecessor") {
    const auto [path, length] = path_of({{1, 1, 0, 0, 2}, {2, 1, 0, 2, 5}, {3, 1, 0, 5, 6}});
    CHECK(path == P{{1, false}, {2, false}, {3, false}});
    CHECK(length == dus(6));
  }
  SECTION("the host edge on the first step: the last task ended is the first of its stream") {
    // Stream 2's only task was enqueued at 5, after stream 1's [0,4] and stream 3's [0,3] ended:
    // the task that ended last by its submission is stream 1's.
    const auto [path, length] = path_of({{1, 1, 0, 0, 4}, {2, 3, 0, 0, 3}, {3, 2, 5, 5, 12}});
    CHECK(path == P{{1, false}, {3, true}});
    CHECK(length == dus(12));
  }
  SECTION("the host edge after device steps") {
    // Stream 2: b enqueued at 4, then c after it. c <- b by stream order, then b's first-of-stream
    // host edge goes to a (ended at 3), not x (ended at 1); a itself has nothing ended before it.
    const auto [path, length] = path_of({{1, 1, 0, 0, 3}, {2, 3, 0, 0, 1}, {3, 2, 4, 4, 6}, {4, 2, 4, 6, 9}});
    CHECK(path == P{{1, false}, {3, true}, {4, false}});
    CHECK(length == dus(9));
  }
  SECTION("the host edge goes only to work enqueued before the task") {
    // k (id 2) was enqueued at 2 and ends last; c (id 3), enqueued after it, failed at once at 2.
    // The host cannot have waited for c before enqueuing k: k's host edge goes to a (id 1,
    // ended at 1), the last task to end by 2 among those enqueued before k.
    const auto [path, length] = path_of({{1, 3, 0, 0, 1}, {2, 1, 2, 2, 10}, {3, 2, 2, 2, 2}});
    CHECK(path == P{{1, false}, {2, true}});
    CHECK(length == dus(10));
  }
  SECTION("no host edge when everything that ended by then was enqueued later") {
    const auto [path, length] = path_of({{1, 1, 2, 2, 10}, {2, 2, 2, 2, 2}});
    CHECK(path == P{{1, false}});
    CHECK(length == dus(8));
  }
  SECTION("the host edge beside a stream predecessor that ended before the host enqueued") {
    // a (stream 1, [0,1]), then b (stream 2, [0,10]), the host waits for b and enqueues c on
    // stream 1 at 10: c's stream predecessor a ended long before, so b held c back, through the
    // host. The path is b then c, the whole span.
    const auto [path, length] = path_of({{1, 1, 0, 0, 1}, {2, 2, 0, 0, 10}, {3, 1, 10, 10, 11}});
    CHECK(path == P{{2, false}, {3, true}});
    CHECK(length == dus(11));
  }
  SECTION("no host edge when the last task to end by the submission is the stream predecessor") {
    // Launch-bound: b enqueued at 2 on a's stream after a ended at 1, nothing else ran.
    const auto [path, length] = path_of({{1, 1, 0, 0, 1}, {2, 1, 2, 2, 3}});
    CHECK(path == P{{1, false}, {2, false}});
    CHECK(length == dus(3));
  }
  SECTION("no host edge when a stream predecessor ended after the submission") {
    // c enqueued at 5 while its stream predecessor a ran until 8: a held it back, not b (ended
    // at 4, before the submission).
    const auto [path, length] = path_of({{1, 1, 0, 0, 8}, {2, 2, 0, 0, 4}, {3, 1, 5, 8, 9}});
    CHECK(path == P{{1, false}, {3, false}});
    CHECK(length == dus(9));
  }
}

TEST_CASE("the chrome trace holds the expected events of a two-stream program", "[profiler][chrome]") {
  npurt::profiler p;
  test_program::feed(p);
  const auto trace = chrome(p);
  auto has = [&](const std::string& needle) {
    INFO(needle);
    CHECK(trace.find(needle) != std::string::npos);
  };
  // Processes and tracks.
  has(R"J({"ph":"M","pid":0,"tid":0,"name":"process_name","args":{"name":"host"}})J");
  has(R"J({"ph":"M","pid":1,"tid":0,"name":"process_name","args":{"name":"device 0"}})J");
  has(R"J({"ph":"M","pid":2,"tid":0,"name":"process_name","args":{"name":"device 1"}})J");
  has(R"J({"ph":"M","pid":1,"tid":2,"name":"thread_name","args":{"name":"stream 1 (prio 4)","device":0,"stream":1,"priority":4}})J");
  has(R"J({"ph":"M","pid":1,"tid":3,"name":"thread_name","args":{"name":"stream 2 (prio 0)","device":0,"stream":2,"priority":0}})J");
  has(R"J({"ph":"M","pid":1,"tid":1001000,"name":"thread_name","args":{"name":"ai_core"}})J");
  has(R"J({"ph":"M","pid":1,"tid":1001001,"name":"thread_name","args":{"name":"ai_core #2"}})J");
  has(R"J({"ph":"M","pid":1,"tid":3000000,"name":"thread_name","args":{"name":"hccs 0->1"}})J");
  // Tasks on their stream tracks, times in µs with exact picosecond decimals.
  has(R"J({"ph":"X","pid":1,"tid":2,"ts":0.000000,"dur":10.000000,"name":"matmul","cat":"task","args":{"id":1,"kind":"kernel","engine":"ai_core","device":0,"stream":1,"priority":4,"submitted":0.000000,"ready":0.000000,"bytes":65536,"flops":2000000,"block_dim":0}})J");
  has(R"J({"ph":"X","pid":1,"tid":2,"ts":10.000000,"dur":0.000000,"name":"record","cat":"task","args":{"id":2,"kind":"event_record","engine":"control")J");
  has(R"J("event":7,"event_time":10.000000}})J");
  has(R"J({"ph":"X","pid":1,"tid":3,"ts":10.000000,"dur":15.000000,"name":"all_reduce","cat":"task","args":{"id":5,"kind":"collective","engine":"collective")J");
  has(R"J({"ph":"X","pid":1,"tid":3,"ts":30.000000,"dur":4.000000,"name":"d2h","cat":"task","args":{"id":6,"kind":"memcpy","engine":"copy_d2h","device":0,"stream":2,"priority":0,"submitted":30.000000,"ready":30.000000,"bytes":1024,"flops":0,"src_device":0,"dst_device":-1}})J");
  has(R"J({"ph":"X","pid":2,"tid":11,"ts":9.000000,"dur":16.000000,"name":"all_reduce","cat":"task")J");
  // The flow arrow of event 7: from the record task (stream 1) to the wait (stream 2).
  has(R"J({"ph":"s","pid":1,"tid":2,"ts":10.000000,"name":"event 7","cat":"dependency","id":1,"args":{"event":7,"record_task":2}})J");
  has(R"J({"ph":"f","pid":1,"tid":3,"ts":10.000000,"name":"event 7","cat":"dependency","bp":"e","id":1,"args":{"event":7,"wait_task":4,"device":0,"stream":2,"record_task":2,"record_device":0,"record_stream":1,"begin":2.000000,"satisfied":10.000000}})J");
  // Engines: fill [0,2] and matmul [0,10] overlap on the AI cores: the one that ends later gets a
  // second lane.
  has(R"J({"ph":"X","pid":1,"tid":1001000,"ts":0.000000,"dur":2.000000,"name":"fill","cat":"engine","args":{"id":7}})J");
  has(R"J({"ph":"X","pid":1,"tid":1001001,"ts":0.000000,"dur":10.000000,"name":"matmul","cat":"engine","args":{"id":1}})J");
  // Link, its bandwidth counter (4096 B over 15 µs = 0.273067 GB/s), memory and host annotations.
  has(R"J({"ph":"X","pid":1,"tid":3000000,"ts":10.000000,"dur":15.000000,"name":"hccs 0->1","cat":"link","args":{"link":"hccs","src":0,"dst":1,"bytes":4096}})J");
  has(R"J({"ph":"C","pid":1,"tid":3000000,"ts":10.000000,"name":"hccs 0->1 bandwidth","args":{"GB/s":0.273067}})J");
  has(R"J({"ph":"C","pid":1,"tid":3000000,"ts":25.000000,"name":"hccs 0->1 bandwidth","args":{"GB/s":0.000000}})J");
  has(R"J({"ph":"C","pid":1,"tid":4000000,"ts":6.000000,"name":"memory","args":{"in_use":1048576,"reserved":2097152}})J");
  has(R"J({"ph":"X","pid":1,"tid":2000000,"ts":10.000000,"dur":7.000000,"name":"all_reduce step 0","cat":"collective_step","args":{"collective":5,"op":"all_reduce","algorithm":"ring","device":0,"peer":1,"step":0,"bytes":2048}})J");
  has(R"J({"ph":"B","pid":0,"tid":1,"ts":0.000000,"name":"step","cat":"range","args":{"lane":0}})J");
  has(R"J({"ph":"i","pid":0,"tid":1,"ts":1.000000,"s":"t","name":"launch","cat":"range","args":{"lane":0}})J");
  has(R"J({"ph":"E","pid":0,"tid":1,"ts":34.000000,"name":"","cat":"range","args":{"lane":0}})J");
  has(R"J("otherData":{"generator":"npurt 0.1.0","clock":"virtual","shutdown":40.000000}})J");
  // The names were copied: the caller's storage was overwritten before the write.
  CHECK(trace.find("###") == std::string::npos);
  CHECK(trace.find("XXXX") == std::string::npos);
}

TEST_CASE("the summary's peak memory carries its unit in the text and JSON", "[profiler][summary]") {
  // Bytes in the JSON, under a key that says so; binary units with one decimal in the text.
  npurt::profiler p;
  const std::size_t peaks[] = {0, 512, 1536, (1u << 20) - 1, 13107200, std::size_t{3} << 30};
  for (std::size_t d = 0; d < std::size(peaks); ++d)
    p.on_memory(
        {static_cast<npurt::device_id>(d), npurt::memory_op::alloc, 0x1000, peaks[d], peaks[d], peaks[d], 0, us(1)});
  std::ostringstream text, json;
  p.write_summary_text(text);
  p.write_summary_json(json);
  // The device rows of the text, in device order: each ends in its peak.
  std::vector<std::string> rows;
  std::istringstream lines{text.str()};
  bool in_devices = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "Devices") {
      in_devices = true;
      continue;
    }
    if (!in_devices) continue;
    if (line.empty()) break;
    if (line.rfind("  device", 0) != 0 && line.rfind("    ", 0) != 0) rows.push_back(line);
  }
  const std::string expected[] = {" 0 B", " 512 B", " 1.5 KiB", " 1.0 MiB", " 12.5 MiB", " 3.0 GiB"};
  REQUIRE(rows.size() == std::size(expected));
  for (std::size_t d = 0; d < rows.size(); ++d) {
    INFO(rows[d]);
    CHECK(rows[d].ends_with(expected[d]));
  }
  CHECK(text.str().find("peak memory") != std::string::npos);
  const auto js = json.str();
  for (const auto b : peaks) CHECK(js.find("\"peak_memory_bytes\":" + std::to_string(b) + ",") != std::string::npos);
  CHECK(js.find("\"peak_memory\":") == std::string::npos);
}

TEST_CASE("the same records give byte-identical outputs, whatever order they came in", "[profiler][determinism]") {
  npurt::profiler a, b, c;
  test_program::feed(a);
  test_program::feed(b);
  test_program::feed(c, /*shuffle_seed=*/12345);
  CHECK(chrome(a) == chrome(a));
  CHECK(chrome(a) == chrome(b));
  CHECK(chrome(a) == chrome(c));
  auto text = [](const npurt::profiler& p) {
    std::ostringstream os;
    p.write_summary_text(os);
    p.write_summary_json(os);
    p.write_svg(os);
    return os.str();
  };
  CHECK(text(a) == text(b));
  CHECK(text(a) == text(c));
}

TEST_CASE("host pointers, which change from run to run, do not reach the trace", "[profiler][determinism]") {
  auto run = [](std::uint64_t base) {
    npurt::profiler p;
    p.on_memory({-1, npurt::memory_op::alloc, base, 64, 0, 0, 0, us(1)});
    p.on_memory({-1, npurt::memory_op::alloc, base + 4096, 64, 0, 0, 0, us(2)});
    p.on_memory({-1, npurt::memory_op::free, base, 64, 0, 0, 0, us(3)});
    p.on_memory({0, npurt::memory_op::alloc, 0x1000, 64, 64, 64, 0, us(3)});
    return chrome(p);
  };
  const auto a = run(0x7f0000000000), b = run(0x5500000000);
  CHECK(a == b);
  CHECK(a.find(std::to_string(0x7f0000000000ull)) == std::string::npos);
  CHECK(a.find(R"("address":4096)") != std::string::npos);  // device addresses are the runtime's own: kept
}

TEST_CASE("marks and ranges take the time of the profiler's clock", "[profiler][annotations]") {
  npurt::sim_time now = us(3);
  npurt::profiler p{[&] { return now; }};
  p.push_range("outer");
  now = us(4);
  {
    npurt::profiler::scoped_range r{p, "inner", 1};
    now = us(5);
  }
  p.mark("m");
  now = us(9);
  p.pop_range();
  const auto& r = p.data().ranges;
  REQUIRE(r.size() == 5);
  CHECK((r[0].op == npurt::host_range_op::push && r[0].time == us(3) && p.data().str(r[0].name) == "outer"));
  CHECK((r[1].op == npurt::host_range_op::push && r[1].time == us(4) && r[1].lane == 1));
  CHECK((r[2].op == npurt::host_range_op::pop && r[2].time == us(5) && r[2].lane == 1));
  CHECK((r[3].op == npurt::host_range_op::mark && r[3].time == us(5)));
  CHECK((r[4].op == npurt::host_range_op::pop && r[4].time == us(9)));

  // Without a clock a mark lands at the latest time any record reported.
  npurt::profiler q;
  npurt::task_info t;
  t.start = us(1);
  t.end = us(7);
  q.on_task(t);
  q.mark("after");
  CHECK(q.data().ranges.back().time == us(7));
}

TEST_CASE("a profiler with an output path writes its trace at shutdown", "[profiler][env]") {
  const std::string path = "test_profiler_shutdown.json";
  std::remove(path.c_str());
  npurt::profiler p;
  p.set_output(path);
  test_program::feed(p);  // ends with on_shutdown
  CHECK_FALSE(p.shutdown_error());
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str() == chrome(p));
  std::remove(path.c_str());

  npurt::profiler bad;
  bad.set_output("no/such/directory/trace.json");
  bad.on_shutdown(us(1));
  CHECK(bad.shutdown_error());
}

TEST_CASE("NPURT_TRACE makes a profiler that writes to its path", "[profiler][env]") {
  ::setenv("NPURT_TRACE", "", 1);
  CHECK(npurt::profiler::from_environment() == nullptr);
  ::setenv("NPURT_TRACE", "some/trace.json", 1);
  auto p = npurt::profiler::from_environment();
  REQUIRE(p != nullptr);
  CHECK(p->output() == "some/trace.json");
  ::unsetenv("NPURT_TRACE");
  CHECK(npurt::profiler::from_environment() == nullptr);
}

// ---------------------------------------------------------------------------------------------
// SVG

namespace {

using ptree = boost::property_tree::ptree;

void collect(const ptree& node, const std::string& tag, std::vector<const ptree*>& out) {
  for (const auto& [name, child] : node) {
    if (name == tag) out.push_back(&child);
    if (name != "<xmlattr>") collect(child, tag, out);
  }
}

std::string attr(const ptree& n, const std::string& a) { return n.get<std::string>("<xmlattr>." + a, ""); }
double num(const ptree& n, const std::string& a) { return n.get<double>("<xmlattr>." + a); }

}  // namespace

TEST_CASE("the SVG timeline parses as XML and holds one bar per task where the records put it", "[profiler][svg]") {
  npurt::profiler p;
  test_program::feed(p);
  npurt::svg_options opts;
  opts.width = 1000;
  opts.label_width = 200;
  std::ostringstream os;
  p.write_svg(os, opts);
  std::istringstream is(os.str());
  ptree doc;
  REQUIRE_NOTHROW(boost::property_tree::read_xml(is, doc));
  REQUIRE(doc.count("svg") == 1);
  const auto& svg = doc.get_child("svg");
  CHECK(attr(svg, "xmlns") == "http://www.w3.org/2000/svg");

  std::vector<const ptree*> rects;
  collect(svg, "rect", rects);
  std::map<std::string, std::vector<const ptree*>> by_class;
  for (const auto* r : rects) by_class[attr(*r, "class")].push_back(r);

  // 8 tasks use an engine, 2 are control (record, wait).
  REQUIRE(by_class["task"].size() == 8);
  CHECK(by_class["control"].size() == 2);
  CHECK(by_class["engine"].size() == 8);
  CHECK(by_class["link"].size() == 1);
  CHECK(by_class["step"].size() == 2);
  CHECK(by_class["range"].size() == 1);

  // Positions: x = left + (start - t0) * plot / (t1 - t0) with t0 = 0, t1 = 34 µs.
  const double left = 200, plot = 1000 - 200 - 20;
  std::map<std::uint64_t, test_program::task_spec> spec;
  for (const auto& t : test_program::tasks()) spec.emplace(t.id, t);
  std::map<std::pair<int, unsigned>, std::set<double>> row_y;
  std::set<std::uint64_t> seen;
  for (const auto* r : by_class["task"]) {
    const auto id = std::stoull(attr(*r, "data-id"));
    REQUIRE(spec.count(id) == 1);
    seen.insert(id);
    const auto& t = spec.at(id);
    INFO("task " << id);
    CHECK(num(*r, "x") == Catch::Approx(left + t.start / 34.0 * plot).margin(0.006));
    CHECK(num(*r, "width") == Catch::Approx(std::max((t.end - t.start) / 34.0 * plot, 1.0)).margin(0.011));
    row_y[{t.device, t.stream}].insert(num(*r, "y"));
    // Colour by kind: kernels blue, collectives red, device-to-host copies orange.
    const auto fill = attr(*r, "fill");
    if (t.kind == npurt::task_kind::kernel) CHECK(fill == "#4e79a7");
    if (t.kind == npurt::task_kind::collective) CHECK(fill == "#e15759");
    if (t.kind == npurt::task_kind::memcpy) CHECK(fill == "#f28e2b");
    CHECK(r->count("title") == 1);
  }
  CHECK(seen.size() == 8);
  // Each stream is one row, and no two streams share a row.
  REQUIRE(row_y.size() == 4);
  std::set<double> ys;
  for (const auto& [key, y] : row_y) {
    CHECK(y.size() == 1);
    ys.insert(*y.begin());
  }
  CHECK(ys.size() == 4);
  // Device 0's streams come before device 1's, in stream order.
  CHECK(*row_y[{0, 1}].begin() < *row_y[{0, 2}].begin());
  CHECK(*row_y[{0, 3}].begin() < *row_y[{1, 10}].begin());

  // Axis ticks and a legend naming what is drawn.
  std::vector<const ptree*> lines, texts;
  collect(svg, "line", lines);
  collect(svg, "text", texts);
  CHECK(std::count_if(lines.begin(), lines.end(), [](auto* l) { return attr(*l, "class") == "tick"; }) >= 4);
  std::set<std::string> words;
  for (const auto* t : texts) words.insert(t->get_value<std::string>());
  CHECK(words.count("npurt timeline") == 1);
  CHECK(words.count("kernel") == 1);
  CHECK(words.count("collective") == 1);
  CHECK(words.count("copy D2H") == 1);
  CHECK(words.count("device 0") == 1);
  CHECK(words.count("stream 2 (prio 0)") == 1);
  CHECK(words.count("0 \xC2\xB5s") == 1);
}

TEST_CASE("an SVG of an empty profile is still a valid document", "[profiler][svg]") {
  npurt::profiler p;
  std::ostringstream os;
  p.write_svg(os);
  std::istringstream is(os.str());
  ptree doc;
  REQUIRE_NOTHROW(boost::property_tree::read_xml(is, doc));
  CHECK(doc.count("svg") == 1);
  const auto s = p.summary();
  CHECK(s.tasks == 0);
  CHECK(s.critical_path.empty());
}

namespace {

// What a trace_task must hold for a reported task, by the rules profiler.hpp documents: the
// oracle for the compact records the profiler keeps while a run goes on.
npurt::trace_task expected_record(const npurt::task_info& t, std::uint32_t name) {
  npurt::trace_task r;
  r.id = t.id;
  r.device = t.device;
  r.stream = t.stream;
  r.priority = t.priority;
  r.kind = t.kind;
  r.engine = t.engine;
  r.submitted = t.submitted;
  r.ready = t.ready;
  r.start = t.start;
  r.end = t.end;
  r.name = name;
  r.block_dim = t.block_dim;
  r.flops = t.flops != 0 ? t.flops : (t.kernel == nullptr ? t.fixed.flops : 0);
  r.bytes = t.bytes != 0
                ? t.bytes
                : (t.kind == npurt::task_kind::kernel ? (t.kernel == nullptr ? t.fixed.bytes : 0) : t.copy.bytes);
  if (t.kind == npurt::task_kind::memcpy || t.kind == npurt::task_kind::memset) {
    r.src_device = t.copy.src_device;
    r.dst_device = t.copy.dst_device;
  }
  return r;
}

bool same_record(const npurt::trace_task& a, const npurt::trace_task& b) {
  return a.id == b.id && a.device == b.device && a.stream == b.stream && a.priority == b.priority && a.kind == b.kind &&
         a.engine == b.engine && a.submitted == b.submitted && a.ready == b.ready && a.start == b.start &&
         a.end == b.end && a.name == b.name && a.block_dim == b.block_dim && a.flops == b.flops && a.bytes == b.bytes &&
         a.src_device == b.src_device && a.dst_device == b.dst_device;
}

}  // namespace

TEST_CASE("every field of every task survives recording, whatever it holds", "[profiler][records]") {
  using npurt::engine_kind;
  using npurt::task_kind;
  npurt::profiler p;
  std::vector<npurt::task_info> fed;
  std::vector<std::string> fed_names;  // the name each task must come back with
  std::mt19937_64 rng{12345};
  const npurt::kernel_desc named{npurt::kernels::fixed{}, "from_desc"};
  const npurt::kernel_desc unnamed{npurt::kernels::fixed{}};
  static const char* const literals[] = {"k",
                                         "ab",
                                         "abc",
                                         "zero",
                                         "gelu7",
                                         "matmul",
                                         "softmax_",
                                         "layernorm_fwd",
                                         "sixteen_chars_16",
                                         "seventeen_chars17",
                                         "a much longer kernel name than any slot holds"};
  // Storage that keeps its address while its text changes: the cache must notice.
  char reused[40] = {};
  std::string reused_string;
  reused_string.reserve(64);
  const auto ps = [](std::int64_t v) { return npurt::sim_time{npurt::picoseconds{v}}; };
  // Enough tasks to fill several 2 MiB chunks with records of every size.
  for (std::uint64_t i = 0; i < 150'000; ++i) {
    npurt::task_info t;
    t.id = 1'000'000'000'000ull + i * 7;
    t.device = static_cast<npurt::device_id>(rng() % 4);
    t.stream = static_cast<std::uint32_t>(rng() % 5);
    t.priority = static_cast<std::uint8_t>(rng() % 8);
    t.kind = task_kind::kernel;
    t.engine = engine_kind::ai_core;
    const std::int64_t end = 1'000'000 + static_cast<std::int64_t>(i) * 1000;
    t.end = ps(end);
    t.start = ps(end - static_cast<std::int64_t>(rng() % 1000));
    t.ready = t.start - npurt::picoseconds{static_cast<std::int64_t>(rng() % 500)};
    t.submitted = t.ready - npurt::picoseconds{static_cast<std::int64_t>(rng() % 500)};
    // A literal (its address never changes) or a copy in storage that the next task reuses.
    const char* literal = literals[rng() % std::size(literals)];
    std::string name = literal;
    if (rng() % 2 == 0) {
      t.name = literal;
    } else {
      reused_string = literal;
      t.name = reused_string;
    }
    const auto variant = rng() % 16;
    switch (variant) {
      case 0: t.flops = rng() % 100000 + 1; break;
      case 1: t.bytes = rng() % 100000 + 1; break;
      case 2:
        t.fixed.flops = 5;
        t.fixed.bytes = 7;
        break;
      case 3: t.block_dim = 8; break;
      case 4: t.device = 63 + static_cast<npurt::device_id>(rng() % 3); break;
      case 5: t.device = -1; break;
      case 6:
        t.start = ps(end - (std::int64_t{1} << 33));
        t.ready = t.start;
        t.submitted = t.start;
        break;  // a long kernel
      case 7: t.submitted = ps(-5); break;  // launched long before it ran
      case 8: t.start = t.end + npurt::picoseconds{3}; break;  // times out of order: kept as given
      case 9:
        t.kind = task_kind::memcpy;
        t.engine = engine_kind::copy_d2d;
        t.copy.bytes = 4096;
        t.copy.src_device = 0;
        t.copy.dst_device = 1;
        break;
      case 10:
        t.kind = task_kind::event_record;
        t.engine = engine_kind::none;
        break;
      case 11:
        t.name = {};
        t.kernel = &named;
        name = "from_desc";
        break;
      case 12:
        t.name = {};
        t.kernel = &unnamed;
        name = "kernel";
        break;
      case 13:
        t.name = {};
        t.kind = task_kind::event_wait;
        t.engine = engine_kind::none;
        name = "event_wait";
        break;
      case 14: {
        // Same address and length as last time, other characters (in the middle for long ones).
        const bool is_long = rng() % 2 == 0;
        std::string text = is_long ? "aaaaaaaaXaaaaaaaaa" : "abXd";
        text[is_long ? 8 : 2] = static_cast<char>('0' + rng() % 10);
        std::memcpy(reused, text.data(), text.size());
        t.name = std::string_view{reused, text.size()};
        name = text;
        break;
      }
      default: break;
    }
    fed.push_back(t);
    fed_names.push_back(name);
    p.on_task(t);
  }
  const auto& data = p.data();
  REQUIRE(data.tasks.size() == fed.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < fed.size(); ++i) {
    CHECK(data.str(data.tasks[i].name) == fed_names[i]);
    const auto want = expected_record(fed[i], data.tasks[i].name);
    if (!same_record(want, data.tasks[i]) && ++bad <= 5) FAIL_CHECK("task " << i << " came back changed");
  }
  CHECK(bad == 0);
}

TEST_CASE("a mark without a clock lands at the latest end of the tasks recorded before it", "[profiler][annotations]") {
  npurt::profiler p;
  npurt::task_info t;
  t.name = "k";
  const auto at = [](std::int64_t v) { return npurt::sim_time{npurt::picoseconds{v}}; };
  std::int64_t latest = 0;
  // Ends out of order, and across chunk boundaries: the mark must see the largest.
  for (std::int64_t i = 0; i < 120'000; ++i) {
    const std::int64_t end = (i * 7919) % 1'000'003;
    latest = std::max(latest, end);
    t.id = static_cast<std::uint64_t>(i);
    t.start = t.ready = t.submitted = at(end - 10);
    t.end = at(end);
    p.on_task(t);
    if (i == 50'000 || i == 119'999) {
      p.mark("m");
      CHECK(p.data().ranges.back().time == at(latest));
    }
  }
  t.end = at(5);  // earlier than what is known: the mark stays put
  t.start = t.ready = t.submitted = at(1);
  p.on_task(t);
  p.mark("later");
  CHECK(p.data().ranges.back().time == at(latest));
  p.clear();
  p.mark("after clear");
  CHECK(p.data().ranges.back().time == at(0));
}

TEST_CASE("value writes and waits appear in traces and read back as themselves", "[profiler][value]") {
  npurt::profiler prof;
  {
    npurt::simple_config cfg;
    npurt::system sys{cfg};
    sys.add_observer(prof);
    auto& dev = sys.device(0);
    auto producer = dev.make_stream();
    auto consumer = dev.make_stream({.priority = 2});
    void* word = dev.malloc(8);
    consumer.wait_value(word, 1, npurt::wait_condition::eq);
    producer.launch(npurt::kernel_desc{npurt::kernels::fixed{dus(5)}, "produce"});
    producer.write_value(word, 1);
    sys.run();
    dev.free(word);
  }
  const npurt::trace_data back = npurt::read_chrome_trace(chrome(prof));
  CHECK(npurt::check_trace(back).empty());
  int writes = 0, waits = 0;
  for (const auto& t : back.tasks) {
    if (t.kind == npurt::task_kind::value_write) ++writes;
    if (t.kind != npurt::task_kind::value_wait) continue;
    ++waits;
    CHECK(t.end - t.start == dus(5));  // it held its stream while the step ran
    CHECK(t.engine == npurt::engine_kind::none);
  }
  CHECK(writes == 1);
  CHECK(waits == 1);
  std::ostringstream svg;
  npurt::svg_options opts;
  opts.control = true;  // control tasks drawn as ticks and thin bars, named in their tips
  prof.write_svg(svg, opts);
  CHECK(svg.str().find("value_wait") != std::string::npos);
}
