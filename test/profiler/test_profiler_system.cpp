// The profiler on a real run: a two-stream program through npurt::system on the reference
// backend, whose times a reader can check by hand.
#include <npurt/profiler.hpp>

#include <npurt/detail/trace_reader.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/sim.hpp>

#include <boost/json.hpp>  // bodies come from test_trace_json.cpp

#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace json = boost::json;

namespace {

constexpr npurt::picoseconds usec(std::int64_t v) { return npurt::picoseconds{v * 1'000'000}; }

struct seen_task {
  std::uint64_t id;
  npurt::device_id device;
  std::uint32_t stream;
  npurt::task_kind kind;
  std::string name;
  npurt::sim_time start, end;
};

/// An independent witness of what the runtime reported.
class witness final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    tasks.push_back({t.id, t.device, t.stream, t.kind, std::string{t.name}, t.start, t.end});
  }
  std::vector<seen_task> tasks;
  [[nodiscard]] const seen_task& named(const std::string& n) const {
    for (const auto& t : tasks)
      if (t.name == n) return t;
    FAIL("no task " << n);
    throw;
  }
};

npurt::kernel_desc fixed(npurt::picoseconds d, std::string_view name) {
  return npurt::kernel_desc{npurt::kernels::fixed{d}, name};
}

/// The Chrome trace a file holds; a file that is missing or does not parse fails the test.
npurt::trace_data read_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::error_code ec;
  std::string why;
  auto data = npurt::read_chrome_trace(ss.str(), ec, why);
  INFO(why);
  REQUIRE_FALSE(ec);
  return data;
}

/// Device 0 stream a: producer (100 µs), record ev.  Device 1 stream b: early (20 µs), wait ev,
/// consumer (10 µs). The wait holds stream b from 20 µs until the producer ends at 100 µs.
struct run_result {
  std::string trace;
  witness seen;
  npurt::profile_summary summary;
  std::uint32_t stream_a = 0, stream_b = 0;
};

void two_streams(npurt::system& sys, npurt::profiler& prof, run_result& r) {
  sys.add_observer(prof);
  sys.add_observer(r.seen);
  auto a = sys.device(0).make_stream();
  auto b = sys.device(1).make_stream({.priority = 0});
  auto ev = sys.device(0).make_event();
  sys.push_range("step");
  a.launch(fixed(usec(100), "producer"));
  a.record(ev);
  b.launch(fixed(usec(20), "early"));
  b.wait(ev);
  b.launch(fixed(usec(10), "consumer"));
  sys.run();
  sys.pop_range();
  std::ostringstream os;
  prof.write_chrome_trace(os);
  r.trace = os.str();
  r.summary = prof.summary();
}

npurt::simple_config two_devices() {
  npurt::simple_config c;
  c.devices = 2;
  return c;
}

}  // namespace

TEST_CASE("a real two-stream run gives a trace with its tasks, tracks and event arrow", "[profiler][system]") {
  run_result r;
  npurt::system sys{std::make_unique<npurt::simple_backend>(two_devices()), {.trace_from_env = false}};
  npurt::profiler prof{[&] { return sys.now(); }};
  two_streams(sys, prof, r);

  const auto& producer = r.seen.named("producer");
  const auto& early = r.seen.named("early");
  const auto& consumer = r.seen.named("consumer");
  // The runtime's own semantics, which the trace must show.
  CHECK(producer.end - producer.start == usec(100));
  CHECK(consumer.start == producer.end);
  CHECK(early.end <= producer.end);

  const auto root = json::parse(r.trace);
  std::map<std::uint64_t, const json::object*> task_events;
  const json::object* flow_s = nullptr;
  const json::object* flow_f = nullptr;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names;
  for (const auto& ev : root.at("traceEvents").as_array()) {
    const auto& e = ev.as_object();
    const auto ph = e.at("ph").as_string();
    if (ph == "X" && e.at("cat").as_string() == "task")
      task_events[json::value_to<std::uint64_t>(e.at("args").at("id"))] = &e;
    if (ph == "s") flow_s = &e;
    if (ph == "f") flow_f = &e;
    if (ph == "M" && e.at("name").as_string() == "thread_name")
      thread_names[{e.at("pid").as_int64(), e.at("tid").as_int64()}] = std::string{e.at("args").at("name").as_string()};
  }
  // Every task the runtime reported is in the trace, on its device's process and its stream's
  // track, at its exact virtual time.
  REQUIRE(task_events.size() == r.seen.tasks.size());
  for (const auto& t : r.seen.tasks) {
    INFO(t.name);
    REQUIRE(task_events.count(t.id) == 1);
    const auto& e = *task_events[t.id];
    CHECK(e.at("pid").as_int64() == t.device + 1);
    CHECK(e.at("tid").as_int64() == std::int64_t{t.stream} + 1);
    CHECK(std::llround(json::value_to<double>(e.at("ts")) * 1e6) == t.start.time_since_epoch().count());
    CHECK(std::llround(json::value_to<double>(e.at("dur")) * 1e6) == (t.end - t.start).count());
    if (!t.name.empty() && t.kind == npurt::task_kind::kernel) CHECK(e.at("name").as_string() == t.name);
  }
  const auto& b_stream = consumer.stream;
  CHECK(thread_names[{2, std::int64_t{b_stream} + 1}] == "stream " + std::to_string(b_stream) + " (prio 0)");

  // The arrow goes from the record task on device 0 to the wait task on device 1.
  REQUIRE(flow_s != nullptr);
  REQUIRE(flow_f != nullptr);
  CHECK(flow_s->at("id") == flow_f->at("id"));
  CHECK(flow_s->at("pid").as_int64() == 1);
  CHECK(flow_s->at("tid").as_int64() == std::int64_t{producer.stream} + 1);
  CHECK(flow_f->at("pid").as_int64() == 2);
  CHECK(flow_f->at("tid").as_int64() == std::int64_t{b_stream} + 1);
  const auto record_id = json::value_to<std::uint64_t>(flow_s->at("args").at("record_task"));
  REQUIRE(task_events.count(record_id) == 1);
  CHECK(task_events[record_id]->at("args").at("kind").as_string() == "event_record");
  const auto wait_id = json::value_to<std::uint64_t>(flow_f->at("args").at("wait_task"));
  REQUIRE(task_events.count(wait_id) == 1);
  CHECK(task_events[wait_id]->at("args").at("kind").as_string() == "event_wait");

  // The summary explains stream b's idle time: it waited on the event until the producer ended.
  const npurt::profile_summary::stream_stats* sb = nullptr;
  for (const auto& st : r.summary.streams)
    if (st.device == 1 && st.stream == b_stream) sb = &st;
  REQUIRE(sb != nullptr);
  CHECK(sb->busy == usec(30));
  REQUIRE(sb->gaps.size() == 1);
  CHECK(sb->gaps[0].begin == early.end);
  CHECK(sb->gaps[0].end == producer.end);
  CHECK(sb->gaps[0].cause == npurt::gap_cause::event);
  // The critical path runs producer -> record -> wait -> consumer.
  REQUIRE(r.summary.critical_path.size() >= 4);
  CHECK(r.summary.critical_path.back().name == "consumer");
  bool through_producer = false;
  for (const auto& p : r.summary.critical_path) through_producer |= p.name == "producer";
  CHECK(through_producer);
  CHECK(r.summary.critical_path_length == consumer.end - producer.start);

  // Host range from system::push_range/pop_range.
  CHECK(r.trace.find(R"("ph":"B","pid":0,"tid":1,"ts":0.000000,"name":"step")") != std::string::npos);

  // And the reader gives back the same summary.
  std::ostringstream a, b;
  npurt::write_summary_json(a, r.summary);
  npurt::write_summary_json(b, npurt::summarize(npurt::read_chrome_trace(r.trace)));
  CHECK(a.str() == b.str());
}

TEST_CASE("two identical runs write byte-identical traces", "[profiler][system][determinism]") {
  run_result r1, r2;
  {
    npurt::system sys{std::make_unique<npurt::simple_backend>(two_devices()), {.trace_from_env = false}};
    npurt::profiler prof{[&] { return sys.now(); }};
    two_streams(sys, prof, r1);
  }
  {
    npurt::system sys{std::make_unique<npurt::simple_backend>(two_devices()), {.trace_from_env = false}};
    npurt::profiler prof{[&] { return sys.now(); }};
    two_streams(sys, prof, r2);
  }
  CHECK(r1.trace == r2.trace);
}

TEST_CASE("NPURT_TRACE writes the run's trace when the system shuts down", "[profiler][system][env]") {
  const std::string path = "test_profiler_env_trace.json";
  std::remove(path.c_str());
  ::setenv("NPURT_TRACE", path.c_str(), 1);
  run_result r;
  {
    npurt::system sys{std::make_unique<npurt::simple_backend>(two_devices())};
    npurt::profiler mine{[&] { return sys.now(); }};
    two_streams(sys, mine, r);
    sys.remove_observer(mine);
    sys.remove_observer(r.seen);
  }
  ::unsetenv("NPURT_TRACE");
  // The environment's profiler saw the same run as ours, plus the shutdown time.
  const auto data = read_trace_file(path);
  CHECK(data.shutdown.has_value());
  std::ostringstream a, b;
  npurt::write_summary_json(a, r.summary);
  npurt::write_summary_json(b, npurt::summarize(data));
  CHECK(a.str() == b.str());
  std::remove(path.c_str());
}

TEST_CASE("with NPURT_TRACE each system of a program keeps its trace, later ones under numbered paths",
          "[profiler][system][env]") {
  const std::vector<std::string> paths = {"test_profiler_env_multi.json", "test_profiler_env_multi.1.json",
                                          "test_profiler_env_multi.2.json"};
  for (const auto& p : paths) std::remove(p.c_str());
  ::setenv("NPURT_TRACE", paths[0].c_str(), 1);
  // Three systems, the first with two devices, the others with one: each trace shows its own.
  for (int devices : {2, 1, 1}) {
    npurt::simple_config c;
    c.devices = devices;
    npurt::system sys{std::make_unique<npurt::simple_backend>(c)};
    for (int d = 0; d < devices; ++d) {
      auto s = sys.device(d).make_stream();
      s.launch(fixed(usec(10), "work"));
      s.synchronize();
    }
  }
  ::unsetenv("NPURT_TRACE");
  std::vector<std::size_t> tasks;
  for (const auto& p : paths) {
    INFO(p);
    tasks.push_back(read_trace_file(p).tasks.size());
    std::remove(p.c_str());
  }
  CHECK(tasks == std::vector<std::size_t>{2, 1, 1});
}

namespace {

/// Records each task's outcome as on_task sees it.
class outcome_witness final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    outcomes.emplace(std::string{t.name}, t.failure != nullptr ? *t.failure : std::error_code{});
  }
  std::multimap<std::string, std::error_code> outcomes;
};

}  // namespace

TEST_CASE("a task ended by the op-execute watchdog carries its error in the trace, the others do not",
          "[profiler][system][fault]") {
  using namespace std::chrono_literals;
  npurt::fault_plan plan;
  plan.add(npurt::fault_spec::kernel_hang(0).at_task(1, 2));
  npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(1), plan), {.trace_from_env = false}};
  REQUIRE_FALSE(npurt::sim::faults_of(sys).set_op_execute_timeout(5ms));
  npurt::profiler prof{[&] { return sys.now(); }};
  outcome_witness seen;
  sys.add_observer(prof);
  sys.add_observer(seen);
  auto s = sys.device(0).make_stream();
  s.launch(fixed(usec(10), "first"));
  s.launch(fixed(usec(10), "hangs"));
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  REQUIRE(ec == npurt::errc::task_timeout);
  s.launch(fixed(usec(10), "after"));
  s.synchronize();
  sys.remove_observer(seen);

  REQUIRE(seen.outcomes.size() == 3);
  CHECK_FALSE(seen.outcomes.find("first")->second);
  CHECK(seen.outcomes.find("hangs")->second == npurt::errc::task_timeout);
  CHECK_FALSE(seen.outcomes.find("after")->second);

  std::ostringstream os;
  prof.write_chrome_trace(os);
  const auto root = json::parse(os.str());
  std::map<std::string, json::object> slices;
  for (const auto& e : root.at("traceEvents").as_array())
    if (e.as_object().contains("cat") && e.at("cat").as_string() == "task")
      slices.emplace(std::string{e.at("name").as_string()}, e.at("args").as_object());
  REQUIRE(slices.size() == 3);
  const auto& hung = slices.at("hangs");
  REQUIRE(hung.contains("error"));
  CHECK(hung.at("error").as_string() == npurt::make_error_code(npurt::errc::task_timeout).message());
  CHECK(hung.at("code").to_number<std::int64_t>() == static_cast<std::int64_t>(npurt::errc::task_timeout));
  CHECK_FALSE(slices.at("first").contains("error"));
  CHECK_FALSE(slices.at("after").contains("code"));

  // The reader takes the failure back, and the summary counts it.
  std::string why;
  const auto back = npurt::read_chrome_trace(os.str(), ec, why);
  REQUIRE_FALSE(ec);
  REQUIRE(back.errors.size() == 1);
  CHECK(back.errors[0].code == static_cast<std::int32_t>(npurt::errc::task_timeout));
  CHECK(npurt::summarize(back).failed_tasks == 1);
  CHECK(prof.summary().failed_tasks == 1);
  std::ostringstream text;
  npurt::write_summary_text(text, prof.summary());
  CHECK(text.str().find("3 tasks, 1 failed, span") != std::string::npos);
  std::ostringstream again;
  npurt::write_chrome_trace(again, back);
  CHECK(again.str() == os.str());
}

TEST_CASE("numbered trace paths put the number before the extension", "[profiler][env]") {
  using npurt::detail::numbered_trace_path;
  CHECK(numbered_trace_path("p.json", 0) == "p.json");
  CHECK(numbered_trace_path("p.json", 1) == "p.1.json");
  CHECK(numbered_trace_path("out/run.v2/p.json", 12) == "out/run.v2/p.12.json");
  CHECK(numbered_trace_path("out.d/trace", 2) == "out.d/trace.2");
  CHECK(numbered_trace_path("dir/.trace", 1) == "dir/.trace.1");
}

TEST_CASE("a stream held in the device's shared execution queue has a gap whose cause is queue",
          "[profiler][system][summary]") {
  // One device. b's first memset runs at once; a's long kernel and its short follower are
  // submitted before b's second memset, which shared_fifo dispatches only after the follower:
  // when the long kernel ends. The copy engine is free all along, so b waits in the queue alone.
  struct outcome {
    std::vector<npurt::profile_summary::gap> b_gaps;
    npurt::sim_time long_end{};
  };
  const auto run = [](npurt::dispatch_model m) {
    npurt::system sys{std::make_unique<npurt::simple_backend>(npurt::simple_config{}),
                      {.trace_from_env = false, .dispatch = m}};
    npurt::profiler prof{[&] { return sys.now(); }};
    sys.add_observer(prof);
    auto& dev = sys.device(0);
    // Memsets long enough to outlast the launch overhead: b's next one is submitted before its
    // first ends, so the host does not hold b.
    constexpr std::size_t bytes = std::size_t{16} << 20;
    void* p = dev.malloc(bytes);
    auto a = dev.make_stream();
    auto b = dev.make_stream();
    b.memset(p, bytes, 0, bytes);
    a.launch(fixed(usec(100), "long"));
    a.launch(fixed(usec(10), "follower"));
    b.memset(p, bytes, 1, bytes);
    sys.run();
    outcome o;
    for (const auto& st : prof.summary().streams)
      if (st.stream == b.id()) o.b_gaps = st.gaps;
    const auto& data = prof.data();
    for (const auto& t : data.tasks)
      if (data.str(t.name) == "long") o.long_end = t.end;
    sys.remove_observer(prof);
    dev.free(p);
    return o;
  };
  const outcome held = run(npurt::dispatch_model::shared_fifo);
  REQUIRE(held.b_gaps.size() == 1);
  CHECK(held.b_gaps[0].cause == npurt::gap_cause::queue);
  CHECK(to_string(held.b_gaps[0].cause) == "queue");
  CHECK(held.b_gaps[0].end == held.long_end);  // the instant the follower is dispatched
  INFO("b's gap: " << held.b_gaps[0].begin.time_since_epoch().count() << " .. "
                   << held.b_gaps[0].end.time_since_epoch().count() << " ps");
  // Without the shared queue nothing holds b: it has no gap.
  CHECK(run(npurt::dispatch_model::per_stream).b_gaps.empty());
}

TEST_CASE("a profiler made after work was enqueued says how many tasks its profile lacks", "[profiler][system]") {
  npurt::system sys{npurt::sim::presets::ascend910(1), {.trace_from_env = false}};
  auto s = sys.device(0).make_stream();
  for (int i = 0; i < 3; ++i) s.launch(fixed(usec(10), "early"));
  s.synchronize();
  npurt::profiler& prof = sys.profiler();  // late: three tasks already ran
  s.launch(fixed(usec(10), "late"));
  s.launch(fixed(usec(10), "late"));
  s.synchronize();
  const npurt::profile_summary sum = prof.summary();
  CHECK(sum.tasks == 2);
  CHECK(sum.tasks_before_attach == 3);
  std::ostringstream text, js;
  prof.write_summary_text(text);
  CHECK(text.str().find("attached after 3 tasks had been enqueued") != std::string::npos);
  prof.write_summary_json(js);
  CHECK(json::parse(js.str()).as_object().at("tasks_before_attach").as_int64() == 3);
  // The Chrome trace carries the count, and a summary made from the file says what this one says.
  std::ostringstream chrome;
  prof.write_chrome_trace(chrome);
  CHECK(json::parse(chrome.str()).as_object().at("otherData").as_object().at("tasks_before_attach").as_int64() == 3);
  const npurt::trace_data back = npurt::read_chrome_trace(chrome.str());
  CHECK(back.tasks_before_attach == 3);
  std::ostringstream from_file;
  npurt::write_summary_text(from_file, npurt::summarize(back));
  CHECK(from_file.str() == text.str());
  // A count that is no count is refused, naming the field.
  std::string bad = chrome.str();
  bad.replace(bad.find("\"tasks_before_attach\":3"), 23, "\"tasks_before_attach\":-3");
  std::error_code ec;
  std::string why;
  (void)npurt::read_chrome_trace(bad, ec, why);
  CHECK(ec);
  CHECK(why.find("tasks_before_attach") != std::string::npos);
  // clear() starts a new profile: what came before it is the caller's choice, not a miss.
  prof.clear();
  CHECK(prof.summary().tasks_before_attach == 0);

  // Made before any work: no note, no field.
  npurt::system fresh{npurt::sim::presets::ascend910(1), {.trace_from_env = false}};
  npurt::profiler& early = fresh.profiler();
  auto t = fresh.device(0).make_stream();
  t.launch(fixed(usec(10), "k"));
  t.synchronize();
  CHECK(early.summary().tasks == 1);
  CHECK(early.summary().tasks_before_attach == 0);
  std::ostringstream text2, js2;
  early.write_summary_text(text2);
  early.write_summary_json(js2);
  CHECK(text2.str().find("attached after") == std::string::npos);
  CHECK_FALSE(json::parse(js2.str()).as_object().contains("tasks_before_attach"));
  std::ostringstream chrome2;
  early.write_chrome_trace(chrome2);
  CHECK_FALSE(json::parse(chrome2.str()).as_object().at("otherData").as_object().contains("tasks_before_attach"));
}

TEST_CASE("the critical path crosses the host where the host waited for the work", "[profiler][system][critical]") {
  // Upload, compute, a blocking synchronize, then a blocking download on its own stream: the
  // download has no predecessor on the device, but the host enqueued it only after the compute
  // ended. The path must go through the compute, so that its length is the whole span.
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto& prof = sys.profiler();
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const std::int64_t n = 1 << 14;
  npurt::device_buffer a(dev, n * 4), b(dev, n * 4);
  std::vector<float> host(n, 2.0f);
  s.memcpy(a.data(), n * 4, host.data(), n * 4, npurt::memcpy_kind::host_to_device);
  const npurt::shape shp{n};
  s.launch(npurt::kernels::elementwise{
      npurt::kernels::eltwise_fn::relu, {a.data(), shp, npurt::dtype::f32}, {}, {b.data(), shp, npurt::dtype::f32}});
  s.synchronize();
  dev.memcpy(host.data(), n * 4, b.data(), n * 4, npurt::memcpy_kind::device_to_host);
  const npurt::profile_summary sum = prof.summary();
  const auto& path = sum.critical_path;
  REQUIRE(path.size() == 3);
  CHECK(path[0].kind == npurt::task_kind::memcpy);
  CHECK(path[1].kind == npurt::task_kind::kernel);
  CHECK(path[2].kind == npurt::task_kind::memcpy);
  CHECK(path[2].stream != path[1].stream);  // the blocking copy's own stream
  CHECK(path[2].via_host);
  CHECK_FALSE(path[1].via_host);
  CHECK_FALSE(path[2].via_event);
  // Everything ran one after the other: the path spans the whole profile.
  CHECK(sum.critical_path_length == sum.span);
  std::ostringstream text, json;
  npurt::write_summary_text(text, sum);
  CHECK(text.str().find("(enqueued after the host waited)") != std::string::npos);
  npurt::write_summary_json(json, sum);
  CHECK(json.str().find("\"via_host\": true") != std::string::npos);
}

TEST_CASE("a stream's first task started by the host alone has no host edge", "[profiler][system][critical]") {
  // Two independent streams enqueued before anything ran: nothing ended before either was
  // enqueued, so the path is the longer stream's work alone.
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto& prof = sys.profiler();
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  s1.launch(fixed(usec(5), "short"));
  s2.launch(fixed(usec(50), "long"));
  sys.run();
  const npurt::profile_summary sum = prof.summary();
  REQUIRE(sum.critical_path.size() == 1);
  CHECK(sum.critical_path[0].name == "long");
  CHECK_FALSE(sum.critical_path[0].via_host);
}

TEST_CASE("an event wait names the record it waited for in the trace", "[profiler][system][critical]") {
  // Three ways the wait's record used to be lost or wrong: the event's last handle gone before
  // the wait ends, the event recorded again after the wait was enqueued, and a launch's task
  // event (no record task at all). The critical path must go through the work waited for.
  // One stream per device, so that the kernels never queue for each other's cores.
  npurt::system sys{npurt::sim::presets::ascend910(3)};
  auto& prof = sys.profiler();
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  auto b = sys.device(1).make_stream();
  auto c = sys.device(2).make_stream();
  {
    npurt::event gone = dev.make_event();
    a.launch(fixed(usec(100), "first"));
    a.record(gone);
    b.wait(gone);  // the handle dies here, long before the wait ends
  }
  b.launch(fixed(usec(10), "after first"));
  npurt::event again = dev.make_event();
  a.record(again);  // the record c waits for: after "first"
  c.wait(again);
  a.launch(fixed(usec(5), "second"));
  a.record(again);  // recorded again after c's wait was enqueued: c does not wait for this one
  const npurt::event third = b.launch(fixed(usec(300), "third"));
  c.wait(third);  // a task event
  c.launch(fixed(usec(10), "last on c"));
  sys.run();
  const auto& data = prof.data();
  std::map<std::string, std::uint64_t> id_of;
  for (const auto& t : data.tasks) id_of[std::string{data.str(t.name)}] = t.id;
  std::vector<std::uint64_t> record_tasks;
  for (const auto& t : data.tasks)
    if (t.kind == npurt::task_kind::event_record) record_tasks.push_back(t.id);
  REQUIRE(record_tasks.size() == 3);
  REQUIRE(data.waits.size() == 3);
  // In enqueue order: b's wait on `gone`, c's wait on `again`'s first record, c's wait on "third".
  std::vector<npurt::event_wait_info> waits(data.waits.begin(), data.waits.end());
  std::sort(waits.begin(), waits.end(), [](const auto& x, const auto& y) { return x.task < y.task; });
  CHECK(waits[0].record_task == record_tasks[0]);
  CHECK(waits[1].record_task == record_tasks[1]);
  CHECK(waits[2].record_task == id_of.at("third"));
  // c's last kernel ends last: c waited on "third" (b: first, then its own 10 us, then 300 us),
  // so the path runs first -> record -> b's wait -> after first -> third -> c's wait -> last on c.
  const npurt::profile_summary sum = prof.summary();
  std::vector<std::string> names;
  for (const auto& p : sum.critical_path) names.push_back(p.name);
  const std::vector<std::string> kernels_on_path = [&] {
    std::vector<std::string> k;
    for (const auto& p : sum.critical_path)
      if (p.kind == npurt::task_kind::kernel) k.push_back(p.name);
    return k;
  }();
  CHECK(kernels_on_path == std::vector<std::string>{"first", "after first", "third", "last on c"});
  CHECK(sum.critical_path.front().name == "first");
}

TEST_CASE("the critical path goes through the rank an all-reduce waited for", "[profiler][system][critical]") {
  // Four ranks; rank 2 computes 200 us before the all-reduce, the others 10 us. Rank 0's part
  // cannot move data before rank 2 arrives, so the path from rank 0's last kernel runs through
  // rank 2's part to rank 2's slow kernel, not rank 0's short one.
  npurt::system sys{npurt::sim::presets::ascend910(4)};
  auto& prof = sys.profiler();
  auto comm = npurt::communicator::init_all(sys);
  const std::size_t n = 1 << 12;
  std::vector<npurt::stream> s;
  std::vector<npurt::device_buffer> buf;
  for (int r = 0; r < 4; ++r) {
    s.push_back(sys.device(r).make_stream());
    buf.emplace_back(sys.device(r), n * 4);
    s[static_cast<std::size_t>(r)].launch(fixed(usec(r == 2 ? 200 : 10), r == 2 ? "slow" : "quick"));
  }
  for (int r = 0; r < 4; ++r) {
    auto& b = buf[static_cast<std::size_t>(r)];
    comm.all_reduce(b.data(), b.data(), n, npurt::dtype::f32, npurt::reduce_op::sum, s[static_cast<std::size_t>(r)]);
  }
  s[0].launch(fixed(usec(50), "tail"));
  sys.run();
  const npurt::profile_summary sum = prof.summary();
  const auto& path = sum.critical_path;
  REQUIRE(path.size() == 4);
  CHECK(path[0].name == "slow");
  CHECK(path[0].device == 2);
  CHECK(path[1].kind == npurt::task_kind::collective);
  CHECK(path[1].device == 2);
  CHECK(path[2].kind == npurt::task_kind::collective);
  CHECK(path[2].device == 0);
  CHECK(path[2].via_peer);
  CHECK(path[3].name == "tail");
  // Everything of the span hangs on rank 2's kernel: the path starts with the profile.
  CHECK(sum.critical_path_length == sum.span);
  std::ostringstream text;
  npurt::write_summary_text(text, sum);
  CHECK(text.str().find("(waited for the last rank to arrive)") != std::string::npos);
}

namespace {

/// docs/collectives.md's seed case on three devices: device d queues 3 + 2d kernels of 100 us on
/// one stream, then its part of an all-reduce on a second stream of priority `comm_priority`.
npurt::profile_summary queued_all_reduce_summary(int comm_priority) {
  npurt::system sys{npurt::sim::presets::ascend910(3)};
  auto& prof = sys.profiler();
  auto comm = npurt::communicator::init_all(sys);
  const std::size_t n = 1 << 12;
  std::vector<npurt::stream> compute, comm_streams;
  std::vector<npurt::device_buffer> buf;
  for (int d = 0; d < 3; ++d) {
    compute.push_back(sys.device(d).make_stream());
    comm_streams.push_back(sys.device(d).make_stream({.priority = comm_priority}));
    buf.emplace_back(sys.device(d), n * 4);
    for (int k = 0; k < 3 + 2 * d; ++k) compute.back().launch(fixed(usec(100), "backward"));
    comm.all_reduce(buf.back().data(), buf.back().data(), n, npurt::dtype::f32, npurt::reduce_op::sum,
                    comm_streams.back());
  }
  sys.run();
  return prof.summary();
}

}  // namespace

TEST_CASE("the critical path goes through the tasks a collective was held behind in the execution queue",
          "[profiler][system][critical]") {
  // Under shared_fifo (the default) each device's streams of one priority feed one queue in
  // submission order, so an all-reduce submitted after the compute kernels of another stream
  // reaches the device only with the last of them. Device 2 has the most kernels and arrives
  // last. What limited the step is device 2's kernels: the path must hold all 7 of them, then
  // the all-reduce, and span the whole profile.
  const npurt::profile_summary sum = queued_all_reduce_summary(npurt::priority::normal);
  const auto& path = sum.critical_path;
  REQUIRE(path.size() == 8);
  for (std::size_t k = 0; k < 7; ++k) {
    CAPTURE(k);
    CHECK(path[k].name == "backward");
    CHECK(path[k].device == 2);
    CHECK_FALSE(path[k].via_queue);
  }
  CHECK(path[7].kind == npurt::task_kind::collective);
  CHECK(path[7].device == 2);
  CHECK(path[7].via_queue);  // the flag marks the task that waited, as via_peer does
  CHECK(sum.critical_path_length == sum.span);
  std::ostringstream text, json_text;
  npurt::write_summary_text(text, sum);
  npurt::write_summary_json(json_text, sum);
  CHECK(text.str().find("(held in the device's execution queue)") != std::string::npos);
  CHECK(json_text.str().find("\"via_queue\": true") != std::string::npos);
}

TEST_CASE("a collective on a stream of its own priority is not held: the path has no queue edge",
          "[profiler][system][critical]") {
  // The same program with the all-reduce on a priority-0 stream: it reaches the device at once
  // and the compute kernels are not its predecessors.
  const npurt::profile_summary sum = queued_all_reduce_summary(npurt::priority::high);
  for (const auto& p : sum.critical_path) CHECK_FALSE(p.via_queue);
  // The step ends with device 2's seventh kernel; the all-reduce ran beside the first ones.
  REQUIRE_FALSE(sum.critical_path.empty());
  CHECK(sum.critical_path.back().name == "backward");
  CHECK(sum.critical_path.back().device == 2);
}
