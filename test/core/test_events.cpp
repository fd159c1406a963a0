#include <npurt/event.hpp>

#include "common.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/detached.hpp>

#include <string>
#include <vector>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;
using npurt::sim_time;

namespace {

TEST_CASE("a stream that waits on another stream's event starts after it", "[core][event]") {
  recorder rec;
  npurt::system sys{simple(2)};
  sys.add_observer(rec);
  auto a = sys.device(0).make_stream();
  auto b = sys.device(1).make_stream();  // another device: the wait crosses devices
  auto ev = sys.device(0).make_event();
  a.launch(fixed(us(100), "producer"));
  a.record(ev);
  b.wait(ev);
  b.launch(fixed(us(10), "consumer"));
  sys.run();
  task_row producer{}, consumer{};
  for (const auto& r : rec.rows) {
    if (r.name == "producer") producer = r;
    if (r.name == "consumer") consumer = r;
  }
  CHECK(consumer.start == producer.end);
  CHECK(ev.query());
}

TEST_CASE("the event a launch returns can be waited on by another stream", "[core][event]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  auto b = dev.make_stream();
  auto done = a.launch(fixed(us(50), "first"));
  CHECK(done.is_task_event());
  b.wait(done);
  b.launch(fixed(us(5), "second"));
  sys.run();
  REQUIRE(rec.rows.size() >= 2);
  sim_time first_end{}, second_start{};
  for (const auto& r : rec.rows) {
    if (r.name == "first") first_end = r.end;
    if (r.name == "second") second_start = r.start;
  }
  CHECK(second_start == first_end);
  // It carries no timestamp: elapsed_time says which events it needs.
  auto user = dev.make_event();
  a.record(user);
  sys.run();
  try {
    (void)npurt::elapsed_time(done, user);
    FAIL("elapsed_time accepted a task event");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_event);
    CHECK(std::string(e.what()).find("stream::record") != std::string::npos);
  }
}

TEST_CASE("elapsed time over a chain of kernels is exactly their sum", "[core][event][timing]") {
  // Launch latency on the device is a backend parameter; the chain's time is the durations plus
  // one latency per kernel, and nothing else when the host runs ahead of the device.
  const picoseconds lat = ns(700);
  npurt::system sys{simple(1, lat)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto start = dev.make_event();
  auto stop = dev.make_event();
  const std::vector<std::int64_t> durations_us{17, 5, 40, 3, 25, 11};
  s.record(start);
  for (auto d : durations_us) s.launch(fixed(us(d)));
  s.record(stop);
  // Recorded, not reached: not ready (cudaErrorNotReady), which is not "never recorded".
  std::error_code ec;
  CHECK(npurt::elapsed_time(start, stop, ec) == 0);
  CHECK(ec == npurt::errc::event_not_complete);
  CHECK(ec == npurt::error_class::caller);
  auto never = dev.make_event();
  CHECK(npurt::elapsed_time(never, stop, ec) == 0);
  CHECK(ec == npurt::errc::event_not_recorded);
  s.synchronize();
  picoseconds expected{0};
  for (auto d : durations_us) expected += us(d) + lat;
  // The first kernel's enqueue returns one launch overhead after the start record's.
  expected += sys.options().launch_overhead;
  CHECK(npurt::elapsed_time(start, stop) == Catch::Approx(npurt::to_ms(expected)).epsilon(1e-12));
  CHECK(*stop.completion_time() - *start.completion_time() == expected);
}

TEST_CASE("host code can co_await an event", "[core][event]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  sim_time resumed{};
  run_coro(sys, [&]() -> asio::awaitable<void> {
    auto e = s.launch(fixed(us(30)));
    co_await e.async_wait(asio::use_awaitable);
    resumed = sys.now();
  }());
  CHECK(resumed == sim_time{sys.options().launch_overhead + us(30)});
}

TEST_CASE("an event wait with a timeout fires at the right virtual time", "[core][event][timeout]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::error_code got;
  sim_time when{};
  run_coro(sys, [&]() -> asio::awaitable<void> {
    auto e = s.launch(fixed(us(300)));
    auto [ec] = co_await e.async_wait(us(120), asio::as_tuple(asio::use_awaitable));
    got = ec;
    when = sys.now();
  }());
  CHECK(got == npurt::errc::wait_timeout);
  CHECK(when == sim_time{us(120)});
}

TEST_CASE("re-recording an event moves it; waits refer to the record current when they were made", "[core][event]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto ev = dev.make_event();
  s.launch(fixed(us(10)));
  s.record(ev);
  s.synchronize();
  const auto first = ev.completion_time();
  REQUIRE(first);
  s.launch(fixed(us(10)));
  s.record(ev);
  CHECK_FALSE(ev.query());
  s.synchronize();
  CHECK(ev.query());
  CHECK(*ev.completion_time() > *first);
}

namespace {

// Two streams of device 0, each waiting on the other's event before recording its own (events
// that a wait may precede, as CANN's synchronising events: the wait holds until the first
// record). a runs a 10 us kernel first, b a 30 us one. Runs the system; returns the error.
struct mutual_waits {
  npurt::stream a, b;
  npurt::event ea, eb;
  std::error_code ec;
  std::string report;
  explicit mutual_waits(npurt::system& sys) {
    auto& dev = sys.device(0);
    a = dev.make_stream();
    b = dev.make_stream();
    ea = dev.make_event({.wait_for_record = true});
    eb = dev.make_event({.wait_for_record = true});
    a.launch(fixed(us(10)));
    a.wait(eb);
    a.record(ea);
    b.launch(fixed(us(30)));
    b.wait(ea);
    b.record(eb);
    sys.run(ec);
    report = sys.deadlock_report();
  }
};

}  // namespace

TEST_CASE("two streams waiting on each other's events are reported as a deadlock at once, naming both",
          "[core][event][deadlock]") {
  // Each stream's head dispatches on its own: the cycle is the two waits alone (under the shared
  // FIFO the same program deadlocks earlier, through the queue: the next test).
  npurt::system sys{simple(), {.dispatch = npurt::dispatch_model::per_stream}};
  const mutual_waits m(sys);
  CHECK(m.ec == npurt::errc::deadlock);
  INFO(m.report);
  CHECK(m.report.find("stream " + std::to_string(m.a.id())) != std::string::npos);
  CHECK(m.report.find("stream " + std::to_string(m.b.id())) != std::string::npos);
  CHECK(m.report.find("event " + std::to_string(m.ea.id())) != std::string::npos);
  CHECK(m.report.find("event " + std::to_string(m.eb.id())) != std::string::npos);
  // Reported as soon as nothing else could run: when b's kernel ended, not at a timeout.
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(10) + us(30)});
  // The runtime stays usable.
  auto c = sys.device(0).make_stream();
  c.launch(fixed(us(1)));
  CHECK_NOTHROW(c.synchronize());
}

TEST_CASE(
    "under the shared FIFO a wait submitted before the record it needs deadlocks through the device's queue, "
    "and the report names the task that holds the queue",
    "[core][event][deadlock]") {
  npurt::system sys{simple()};
  REQUIRE(sys.options().dispatch == npurt::dispatch_model::shared_fifo);  // the default
  const mutual_waits m(sys);
  CHECK(m.ec == npurt::errc::deadlock);
  INFO(m.report);
  // One queue in submission order: a's kernel, a's wait (which leaves the queue at its stream's
  // head), a's record of ea, then b's kernel. The record cannot go before the wait ends, the wait
  // needs b's record of eb, and b's kernel never leaves the queue: deadlock as soon as a's kernel
  // ends (launch overhead 2.5 us + 10 us), with b's kernel not started. (Failing the waits then
  // frees the queue, and b's kernel runs.)
  REQUIRE(sys.options().launch_overhead == us(2) + picoseconds{500'000});
  CHECK(m.report.rfind("deadlock at t=12.5 us:", 0) == 0);
  CHECK(m.report.find("stream " + std::to_string(m.a.id()) + " (device 0) waits at task") != std::string::npos);
  CHECK(m.report.find("event " + std::to_string(m.eb.id())) != std::string::npos);
  CHECK(m.report.find("held in device 0's execution queue behind task") != std::string::npos);
  CHECK(m.report.find("of stream " + std::to_string(m.a.id())) != std::string::npos);
}

TEST_CASE("a wait cycle through task events is found the moment the cycle closes", "[core][event][deadlock]") {
  recorder rec;
  npurt::system sys{simple(2)};
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  auto b = dev.make_stream();
  auto other = sys.device(1).make_stream();
  other.launch(fixed(us(1000), "long"));  // still running when the cycle closes
  a.launch(fixed(us(10)));
  b.launch(fixed(us(10)));
  // a waits for b's third task, b for a's third: each sits behind the other's wait.
  a.wait(npurt::detail::event_access::task_event(npurt::detail::runtime_of(sys), b.id(), 3));
  b.wait(npurt::detail::event_access::task_event(npurt::detail::runtime_of(sys), a.id(), 3));
  a.launch(fixed(us(1)));
  b.launch(fixed(us(1)));
  sys.add_observer(rec);
  std::error_code ec;
  sys.run(ec);
  CHECK(ec == npurt::errc::deadlock);
  // Found before the long kernel ended: at the time the second wait reached its stream's head.
  sim_time long_end{};
  for (const auto& r : rec.rows)
    if (r.name == "long") long_end = r.end;
  const auto report = sys.deadlock_report();
  INFO(report);
  CHECK(report.find("deadlock at t=") != std::string::npos);
  const double t_us = std::stod(report.substr(report.find("t=") + 2));
  CHECK(t_us < npurt::to_us(long_end.time_since_epoch()));
}

TEST_CASE("the throwing run raises deadlock_error with the report", "[core][event][deadlock]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  // A stream waiting on its own future position can never proceed.
  auto future = npurt::detail::event_access::task_event(npurt::detail::runtime_of(sys), a.id(), 2);
  a.wait(future);
  a.launch(fixed(us(1)));
  CHECK_THROWS_AS(sys.run(), npurt::deadlock_error);
}

}  // namespace

TEST_CASE("a wait made before the first record is checked for a cycle when a record binds it",
          "[core][event][deadlock]") {
  // a waits for ev before any record; at 7.5 us a handler records ev on a itself, behind that
  // wait: a cycle from that instant on, while b still has a long kernel to run.
  npurt::system sys{simple(), {.dispatch = npurt::dispatch_model::per_stream}};
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  auto b = dev.make_stream();
  auto ev = dev.make_event({.wait_for_record = true});
  a.wait(ev);
  npurt::sim_time bound_at{};
  b.async_launch(fixed(us(5)), [&](npurt::async_error_code) {
    bound_at = sys.now();
    a.record(ev);
  });
  b.launch(fixed(picoseconds{1'000'000'000'000}));
  std::error_code ec;
  sys.run(ec);
  CHECK(ec == npurt::errc::deadlock);
  const std::string report = sys.deadlock_report();
  INFO(report);
  REQUIRE(sys.options().launch_overhead == us(2) + picoseconds{500'000});
  REQUIRE(bound_at == sim_time{us(7) + picoseconds{500'000}});
  // Reported when the record closed the cycle, not when b's one-second kernel ended.
  CHECK(report.rfind("deadlock at t=7.5 us:", 0) == 0);
  CHECK(report.find("stream " + std::to_string(a.id())) != std::string::npos);
}

TEST_CASE("a deadlock's report outlives a later run that succeeds, until a new deadlock or the user clears it",
          "[core][event][deadlock]") {
  npurt::system sys{simple(), {.dispatch = npurt::dispatch_model::per_stream}};
  const mutual_waits m(sys);
  REQUIRE(m.ec == npurt::errc::deadlock);
  REQUIRE_FALSE(m.report.empty());
  auto c = sys.device(0).make_stream();
  c.launch(fixed(us(1)));
  std::error_code ec;
  sys.run(ec);
  CHECK(!ec);
  CHECK(sys.deadlock_report() == m.report);  // still there to read after the good run
  CHECK_NOTHROW(sys.run());
  CHECK(sys.deadlock_report() == m.report);
  // A new deadlock replaces it rather than adding to it.
  const mutual_waits again(sys);
  CHECK(again.ec == npurt::errc::deadlock);
  CHECK_FALSE(again.report.empty());
  CHECK(again.report != m.report);
  CHECK(again.report.find(m.report) == std::string::npos);
  CHECK(again.report.find("stream " + std::to_string(again.a.id())) != std::string::npos);
  sys.clear_deadlock_report();
  CHECK(sys.deadlock_report().empty());
  // A later error that is no deadlock does not carry a kept report as its message.
  const mutual_waits third(sys);
  REQUIRE_FALSE(sys.deadlock_report().empty());
  c.launch_callback([&] {
    try {
      sys.run();
    } catch (const npurt::error& e) {
      CHECK(e.code() == npurt::errc::not_supported);
      CHECK(std::string(e.what()).find("deadlock at") == std::string::npos);
    }
  });
  CHECK_NOTHROW(sys.run());
}

TEST_CASE("an event of a reset device is not valid(), as query() says it is invalid", "[core][event][reset]") {
  npurt::system sys{simple(2)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto user = dev.make_event();
  s.record(user);
  auto task = s.launch(fixed(us(10)));
  auto never_recorded = dev.make_event();
  auto other = sys.device(1).make_stream().launch(fixed(us(1)));
  REQUIRE(user.valid());
  REQUIRE(task.valid());
  REQUIRE(never_recorded.valid());
  dev.reset();
  for (const npurt::event* e : {&user, &task, &never_recorded}) {
    CHECK(e->status() == npurt::errc::invalid_event);
    CHECK_FALSE(e->valid());
  }
  // Another device's events, and new events of the reset device, are untouched.
  CHECK(other.valid());
  CHECK(!other.status());
  auto fresh = dev.make_event();
  CHECK(fresh.valid());
  auto s2 = dev.make_stream();
  CHECK(s2.launch(fixed(us(1))).valid());
  s2.synchronize();
}

TEST_CASE("record and wait say what is wrong with the event", "[core][event][errors]") {
  npurt::system sys{simple(2)};
  auto s = sys.device(0).make_stream();
  const auto message_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::invalid_event);
      return e.what();
    } catch (const std::system_error& e) { return e.what(); }
    FAIL("no exception");
    return {};
  };
  const auto has = [](const std::string& text, const char* part) { return text.find(part) != std::string::npos; };
  npurt::event null_event;
  const std::string null_record = message_of([&] { s.record(null_event); });
  CHECK(has(null_record, "npurt::stream::record: the event is null"));
  CHECK(has(null_record, "device::make_event()"));
  CHECK(has(message_of([&] { s.wait(null_event); }), "npurt::stream::wait: the event is null"));

  npurt::event task_event = s.launch(fixed(us(1), "k"));
  CHECK(has(message_of([&] { s.record(task_event); }), "launch's (task) event"));

  npurt::system other{simple(1)};
  npurt::event foreign = other.device(0).make_event();
  CHECK(has(message_of([&] { s.record(foreign); }), "another npurt::system"));
  CHECK(has(message_of([&] { s.wait(foreign); }), "another npurt::system"));

  // Another device's event: the code is stream_device_mismatch, and the words name both devices.
  npurt::event on_one = sys.device(1).make_event();
  try {
    s.record(on_one);
    FAIL("recorded another device's event");
  } catch (const std::system_error& e) {
    CHECK(e.code() == npurt::errc::stream_device_mismatch);
    CHECK(has(e.what(), "the event belongs to device 1, the stream to device 0"));
  }
  // Never recorded: the wait says how to wait for a first record instead.
  npurt::event fresh = sys.device(0).make_event();
  try {
    s.wait(fresh);
    FAIL("waited on an event never recorded");
  } catch (const std::system_error& e) {
    CHECK(e.code() == npurt::errc::event_not_recorded);
    CHECK(has(e.what(), "wait_for_record"));
  }
  sys.run();
}

// A handle is a shared reference to its event and a record changes the event, so record takes
// any handle: a const one, or a temporary copy (cudaEventRecord(e, s) with a copied handle).
static_assert(requires(npurt::stream& s, const npurt::event& e, std::error_code& ec) {
  s.record(e);
  s.record(npurt::event{});
  s.record(e, ec);
  s.record(npurt::event{}, ec);
});

TEST_CASE("record takes a const or temporary handle: every copy sees the record", "[core][event]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const npurt::event start = dev.make_event();
  const std::vector<npurt::event> marks{dev.make_event()};
  const auto handle_of = [&](std::size_t i) { return marks[i]; };  // a handle returned by value
  s.record(start);
  s.launch(fixed(us(10)));
  s.record(handle_of(0));
  CHECK_FALSE(marks[0].query());  // recorded, not reached: the record reached the shared event
  // The event's last handle: recorded in stream order, and gone with the handle; the record then
  // runs without an event and fails nothing.
  s.record(dev.make_event());
  std::error_code ec;
  s.record(dev.make_event(), ec);
  CHECK_FALSE(ec);
  // A temporary null handle is refused as a named one is.
  (void)sys.recent_error_message();
  s.record(npurt::event{}, ec);
  CHECK(ec == npurt::errc::invalid_event);
  CHECK(sys.recent_error_message().starts_with("npurt::stream::record: the event is null"));
  s.synchronize();  // throws if any record failed
  CHECK(marks[0].query());
  // As in the chain test above: the kernel starts one launch overhead after the start record.
  CHECK(*marks[0].completion_time() - *start.completion_time() == us(10) + sys.options().launch_overhead);
}

TEST_CASE("an async call given no token returns a deferred operation", "[core][async][token]") {
  // asio::deferred, as Asio's own default from Boost 1.84: co_await-able in an Asio coroutine,
  // or started later with a handler; nothing runs before it is started.
  npurt::system sys{simple(1)};
  auto s = sys.device(0).make_stream();
  auto ev = sys.device(0).make_event();
  sim_time after_launch{}, after_wait{};
  boost::asio::co_spawn(
      s.get_executor(),
      [&]() -> boost::asio::awaitable<void> {
        co_await s.async_launch(fixed(us(40), "k"));
        after_launch = sys.now();
        s.record(ev);
        co_await ev.async_wait();
        after_wait = sys.now();
      },
      boost::asio::detached);
  sys.run();
  // The host lane's launch overhead, then the kernel (the simple backend adds no latency).
  CHECK(after_launch == sim_time{} + ns(2500) + us(40));
  CHECK(after_wait >= after_launch);
  // Started later: the operation does nothing until it is given its handler.
  auto later = s.async_synchronize();
  bool done = false;
  s.launch(fixed(us(10), "k2"));
  const sim_time before = sys.now();
  std::move(later)([&](npurt::async_error_code ec) { done = !ec && sys.now() >= before + us(10); });
  sys.run();
  CHECK(done);  // it waited for k2, enqueued after the operation was made but before it started
}
