// The timeout hierarchy (docs/faults.md): the event-wait timeout of stream waits, the
// op-execute watchdog of long healthy tasks, and every timeout_error naming its timer and its
// limit; and copies and collectives refused at the call on a lost device.
#include "common.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <exception>
#include <optional>
#include <sstream>
#include <string>

using namespace fault_test;
using npurt::errc;
using npurt::fault_plan;
using npurt::fault_spec;
using npurt::timeout_kind;

namespace {

const picoseconds latency = npurt::sim::presets::ascend910(1).kernel_launch_latency;

/// The event waits of a run, as the trace sees them.
class wait_recorder final : public npurt::observer {
 public:
  void on_event_wait(const npurt::event_wait_info& i) override { waits.push_back(i); }
  std::vector<npurt::event_wait_info> waits;
};

/// What a throwing call raised, if it was a timeout_error.
struct caught {
  bool thrown = false;
  std::error_code code;
  timeout_kind timer = timeout_kind::sync;
  std::int64_t limit = -1;
  std::string what;
};

/// Checks that a timeout_error was thrown with this code, timer and limit, and that its message
/// names the timer and the limit, then the error's own message once.
void expect(const caught& c, errc code, timeout_kind timer, picoseconds limit) {
  CHECK(c.thrown);
  CHECK(c.code == code);
  CHECK(c.timer == timer);
  CHECK(c.limit == limit.count());
  std::ostringstream detail;
  detail << " (" << npurt::to_string(timer) << " timer, limit " << npurt::to_ms(limit) << " ms)";
  CHECK_THAT(c.what, Catch::Matchers::ContainsSubstring(detail.str()));
  const std::string message = c.code.message();
  CHECK(c.what.find(message) == c.what.size() - message.size());
}

template <class F>
caught catch_timeout(F&& f) {
  caught c;
  try {
    f();
  } catch (const npurt::timeout_error& e) { c = {true, e.code(), e.timer(), e.limit(), e.what()}; }
  return c;
}

npurt::task<void> await_launch(npurt::stream& s, npurt::kernel_desc k, caught& out) {
  try {
    co_await s.async_launch(k, npurt::use_task);
  } catch (const npurt::timeout_error& e) { out = {true, e.code(), e.timer(), e.limit(), e.what()}; }
}

npurt::task<void> await_wait(npurt::stream& s, npurt::event e, caught& out) {
  try {
    co_await s.async_wait(e, npurt::use_task);
  } catch (const npurt::timeout_error& x) { out = {true, x.code(), x.timer(), x.limit(), x.what()}; }
}

npurt::task<void> await_sync(npurt::stream& s, picoseconds limit, caught& out) {
  try {
    co_await s.async_synchronize(limit, npurt::use_task);
  } catch (const npurt::timeout_error& x) { out = {true, x.code(), x.timer(), x.limit(), x.what()}; }
}

}  // namespace

TEST_CASE("the event-wait timeout is off by default and takes only positive limits", "[fault][timeout][event_wait]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  CHECK(sys.event_wait_timeout() == std::nullopt);
  std::error_code ec;
  sys.set_event_wait_timeout(picoseconds{0}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(sys.set_event_wait_timeout(picoseconds{-1}), npurt::caller_error);
  CHECK(sys.event_wait_timeout() == std::nullopt);
  sys.set_event_wait_timeout(ms(5));
  CHECK(sys.event_wait_timeout() == ms(5));
  sys.set_event_wait_timeout(npurt::no_timeout);
  CHECK(sys.event_wait_timeout() == std::nullopt);

  // Off, a wait on an event that is never recorded is what it always was: a deadlock.
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto never = dev.make_event({.wait_for_record = true});
  s.wait(never);
  sys.run(ec);
  CHECK(ec == errc::deadlock);
}

TEST_CASE(
    "a stream wait on an event never recorded fails at exactly start + the event-wait timeout, and the stream "
    "goes on",
    "[fault][timeout][event_wait]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  wait_recorder waits;
  recorder rec;
  sys.add_observer(waits);
  sys.add_observer(rec);
  sys.set_event_wait_timeout(ms(5));
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto never = dev.make_event({.wait_for_record = true});
  s.wait(never);
  (void)s.launch(fixed_kernel(ms(1), "after"));
  expect(catch_timeout([&] { s.synchronize(); }), errc::event_wait_timeout, timeout_kind::event_wait, ms(5));
  REQUIRE(waits.waits.size() == 1);
  CHECK(waits.waits[0].satisfied - waits.waits[0].begin == ms(5));
  // Continue on failure: the kernel behind the wait ran once the wait failed.
  const task_row* after = rec.named("after");
  REQUIRE(after != nullptr);
  CHECK(after->start == waits.waits[0].satisfied);
  CHECK(after->end - after->start == ms(1) + latency);
  // The error is read once; a timeout is a timeout class for recovery.
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);
  CHECK(npurt::classify(make_error_code(errc::event_wait_timeout)) == npurt::failure_class::timeout);
}

TEST_CASE("an event wait satisfied within the limit succeeds and does not move the clock to the deadline",
          "[fault][timeout][event_wait]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  sys.set_event_wait_timeout(sec(10));
  auto& dev = sys.device(0);
  auto producer = dev.make_stream();
  auto consumer = dev.make_stream();
  auto ready = dev.make_event();
  (void)producer.launch(fixed_kernel(ms(2), "produce"));
  producer.record(ready);
  consumer.wait(ready);
  (void)consumer.launch(fixed_kernel(ms(1), "consume"));
  consumer.synchronize();  // no error
  sys.run();
  CHECK(sys.now() < at(ms(4)));  // the 10 s timer was taken back
}

TEST_CASE(
    "the event-wait timeout reaches awaiting handlers and coroutines, and applies to waits enqueued after it is set",
    "[fault][timeout][event_wait]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto& dev = sys.device(0);
  auto s1 = dev.make_stream();
  auto s2 = dev.make_stream();
  auto s3 = dev.make_stream();
  auto never = dev.make_event({.wait_for_record = true});
  s3.wait(never);  // enqueued while the timeout is off: never times out
  sys.set_event_wait_timeout(ms(3));
  npurt::async_error_code handler_ec;
  s1.async_wait(never, [&](npurt::async_error_code e) { handler_ec = e; });
  caught awaited;
  npurt::spawn(sys, await_wait(s2, never, awaited));
  std::error_code ec;
  sys.run(ec);
  CHECK(ec == errc::deadlock);  // s3's wait, and only it, is left
  CHECK(handler_ec == errc::event_wait_timeout);
  expect(awaited, errc::event_wait_timeout, timeout_kind::event_wait, ms(3));
  CHECK_THAT(sys.deadlock_report(),
             Catch::Matchers::ContainsSubstring("stream " + std::to_string(s3.id()) + " (device"));
  CHECK_THAT(sys.deadlock_report(),
             !Catch::Matchers::ContainsSubstring("stream " + std::to_string(s1.id()) + " (device"));
}

TEST_CASE("every timeout error names its timer and its limit, on every path that raises it", "[fault][timeout]") {
  SECTION("sync: stream, device and event synchronize, and an awaited async_synchronize") {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    auto& dev = sys.device(0);
    auto s = dev.make_stream();
    auto done = s.launch(fixed_kernel(ms(10), "long"));
    expect(catch_timeout([&] { s.synchronize(ms(1)); }), errc::wait_timeout, timeout_kind::sync, ms(1));
    expect(catch_timeout([&] { dev.synchronize(ms(2)); }), errc::wait_timeout, timeout_kind::sync, ms(2));
    expect(catch_timeout([&] { done.synchronize(ms(3)); }), errc::wait_timeout, timeout_kind::sync, ms(3));
    caught awaited;
    npurt::spawn(sys, await_sync(s, ms(4), awaited));
    sys.run();
    expect(awaited, errc::wait_timeout, timeout_kind::sync, ms(4));
  }
  SECTION("op execute: a hung kernel, through the stream, the device and an awaited launch") {
    npurt::system sys{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).random(1.0, 0)))};
    npurt::sim::faults_of(sys).set_op_execute_timeout(sec(2));
    auto& dev = sys.device(0);
    auto s = dev.make_stream();
    (void)s.launch(fixed_kernel(ms(1), "hung1"));
    const caught on_stream = catch_timeout([&] { s.synchronize(); });
    (void)s.launch(fixed_kernel(ms(1), "hung2"));
    const caught on_device = catch_timeout([&] { dev.synchronize(); });
    caught awaited;
    npurt::spawn(sys, await_launch(s, fixed_kernel(ms(1), "hung3"), awaited));
    sys.run();
    expect(on_stream, errc::task_timeout, timeout_kind::op_execute, sec(2));
    expect(on_device, errc::task_timeout, timeout_kind::op_execute, sec(2));
    expect(awaited, errc::task_timeout, timeout_kind::op_execute, sec(2));
  }
  SECTION("collective exec: a rank that never arrives") {
    npurt::system sys{npurt::sim::presets::ascend910(2)};
    auto comm = npurt::communicator::init_all(sys, {.exec_timeout = ms(3)});
    auto s = sys.device(0).make_stream();
    comm.barrier(s);  // rank 1 never comes
    expect(catch_timeout([&] { s.synchronize(); }), errc::task_timeout, timeout_kind::collective_exec, ms(3));
  }
  SECTION("collective connect: the first operation's rendezvous, when the connect timeout is the earlier") {
    npurt::system sys{npurt::sim::presets::ascend910(2)};
    auto comm = npurt::communicator::init_all(sys, {.exec_timeout = ms(10), .connect_timeout = ms(3)});
    auto s = sys.device(0).make_stream();
    comm.barrier(s);  // rank 1 never comes
    expect(catch_timeout([&] { s.synchronize(); }), errc::task_timeout, timeout_kind::collective_connect, ms(3));
  }
  SECTION("the message of a task's timeout says which timer and how long") {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    sys.set_event_wait_timeout(ms(7));
    auto s = sys.device(0).make_stream();
    auto never = sys.device(0).make_event({.wait_for_record = true});
    s.wait(never);
    try {
      s.synchronize();
      FAIL("the event wait did not time out");
    } catch (const npurt::timeout_error& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Matchers::ContainsSubstring("failed (event_wait timer, limit 7 ms): "));
      const std::string message = e.code().message();  // once, at the end
      CHECK(what.find(message) == what.size() - message.size());
    }
  }
}

TEST_CASE("a healthy kernel longer than the op-execute watchdog is ended at start + limit and frees its cores",
          "[fault][timeout][watchdog]") {
  npurt::system sys{preset(1, fault_plan{})};
  auto& faults = npurt::sim::faults_of(sys);
  faults.set_op_execute_timeout(ms(5));
  recorder rec;
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto other = dev.make_stream();
  (void)s.launch(fixed_kernel(ms(20), "long"));       // all AI cores, 20 ms: past the 5 ms watchdog
  (void)other.launch(fixed_kernel(ms(1), "queued"));  // needs every core: waits for "long"
  (void)s.launch(fixed_kernel(ms(1), "next"));
  expect(catch_timeout([&] { s.synchronize(); }), errc::task_timeout, timeout_kind::op_execute, ms(5));
  other.synchronize();
  const task_row* lng = rec.named("long");
  const task_row* queued = rec.named("queued");
  const task_row* next = rec.named("next");
  REQUIRE(lng != nullptr);
  REQUIRE(queued != nullptr);
  REQUIRE(next != nullptr);
  CHECK(lng->end - lng->start == ms(5));
  // The cores were free from the watchdog on, not from the kernel's modelled end.
  CHECK(queued->start == lng->end);
  CHECK(queued->end - queued->start == ms(1) + latency);
  CHECK(next->start >= queued->end);
  CHECK(faults.status(0) == npurt::device_status::healthy);  // not a fatal error
  // The simulation ends with its last real work: the long kernel's modelled end (20 ms after its
  // start) was taken back with it, and does not move the clock.
  sys.run();
  CHECK(sys.now() == std::max(queued->end, next->end));
  CHECK(sys.now() < lng->start + ms(20));
}

TEST_CASE("the op-execute watchdog counts from a task's start, not from its submission", "[fault][timeout][watchdog]") {
  npurt::system sys{preset(1, fault_plan{})};
  npurt::sim::faults_of(sys).set_op_execute_timeout(ms(5));
  recorder rec;
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto a = dev.make_stream();
  auto b = dev.make_stream();
  (void)a.launch(fixed_kernel(ms(4), "first"));
  (void)b.launch(fixed_kernel(ms(4), "second"));  // queued behind "first": 8 ms after submission
  a.synchronize();
  b.synchronize();  // neither ran 5 ms on its cores
  REQUIRE(rec.named("second") != nullptr);
  CHECK(rec.named("second")->start >= rec.named("first")->end);
  CHECK(rec.named("second")->end - rec.named("second")->start == ms(4) + latency);
}

TEST_CASE("a throttled kernel slowed past the watchdog times out at start + limit", "[fault][timeout][watchdog]") {
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::thermal_throttle(0, 4.0, sec(1)).at_time(at(ms(0)))))};
  npurt::sim::faults_of(sys).set_op_execute_timeout(ms(5));
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  (void)s.launch(fixed_kernel(ms(2), "slowed"));  // 2 ms alone, 8 ms throttled
  expect(catch_timeout([&] { s.synchronize(); }), errc::task_timeout, timeout_kind::op_execute, ms(5));
  REQUIRE(rec.rows.size() == 1);
  CHECK(rec.rows[0].end - rec.rows[0].start == ms(5));
}

TEST_CASE("a watchdog that no task outlasts changes nothing: the same rows and clock as without one",
          "[fault][timeout][watchdog][determinism]") {
  const auto run = [](picoseconds watchdog) {
    npurt::system sys{preset(2, fault_plan{})};
    npurt::sim::faults_of(sys).set_op_execute_timeout(watchdog);
    recorder rec;
    sys.add_observer(rec);
    constexpr std::size_t n = 1 << 20;
    std::vector<std::byte> host(n, std::byte{1});
    auto& d0 = sys.device(0);
    void* buf = d0.malloc(n);
    auto s = d0.make_stream();
    auto t = d0.make_stream();
    for (int i = 0; i < 4; ++i) {
      (void)s.launch(fixed_kernel(ms(1 + i), numbered("k", i)));
      (void)t.memcpy(buf, n, host.data(), n);
      (void)t.launch(npurt::kernel_desc{npurt::kernels::fixed{ms(2)}, "half", 4});
    }
    s.synchronize();
    t.synchronize();
    d0.free(buf);
    sys.run();
    return std::make_pair(rec.rows, sys.now());
  };
  const auto with_default = run(sec(68));
  const auto without = run(picoseconds{0});
  CHECK(with_default.first.size() == 12);
  CHECK(with_default.first == without.first);
  CHECK(with_default.second == without.second);
}

TEST_CASE("copies and memsets on a lost device are refused at the call, in every form", "[fault][lost][copy]") {
  constexpr std::size_t n = 4096;
  npurt::system sys{preset(2, fault_plan{}.add(fault_spec::hbm_ecc(0).at_time(at(ms(0)))))};
  auto& faults = npurt::sim::faults_of(sys);
  recorder rec;
  sys.add_observer(rec);
  auto& d0 = sys.device(0);
  auto& d1 = sys.device(1);
  void* a = d0.malloc(n);
  void* peer = d1.malloc(n);
  std::vector<std::byte> host(n, std::byte{7});
  auto s = d0.make_stream();
  (void)s.memset(a, n, 0, n);  // touches memory with the ECC fault armed: the device is lost
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  REQUIRE(ec == errc::hbm_ecc_error);
  REQUIRE(faults.status(0) == npurt::device_status::lost);
  const std::size_t rows = rec.rows.size();

  (void)s.memcpy(a, n, host.data(), n, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == errc::device_lost);
  (void)s.memset(a, n, 1, n, ec);
  CHECK(ec == errc::device_lost);
  try {
    (void)s.memcpy(host.data(), n, a, n);
    FAIL("the copy was not refused");
  } catch (const npurt::device_error& e) {
    CHECK(e.code() == errc::device_lost);
    CHECK(e.status() == npurt::device_status::lost);
  }
  CHECK_THROWS_AS((void)s.memset(a, n, 1, n), npurt::device_error);
  npurt::async_error_code async_copy, async_set;
  s.async_memcpy(a, n, host.data(), n, npurt::memcpy_kind::host_to_device,
                 [&](npurt::async_error_code e) { async_copy = e; });
  s.async_memset(a, n, 1, n, [&](npurt::async_error_code e) { async_set = e; });
  d0.memcpy(host.data(), n, a, n, npurt::memcpy_kind::device_to_host, ec);
  CHECK(ec == errc::device_lost);
  // A healthy device's stream may not copy into the lost one's memory either.
  auto s1 = d1.make_stream();
  (void)s1.memcpy(a, n, peer, n, npurt::memcpy_kind::device_to_device, ec);
  CHECK(ec == errc::device_lost);
  sys.run();
  CHECK(async_copy == errc::device_lost);
  CHECK(async_set == errc::device_lost);
  CHECK(rec.rows.size() == rows);  // nothing was enqueued
  s.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);  // and no sticky error was left behind
  // A reset ends it.
  d0.reset();
  void* b = d0.malloc(n);
  auto s2 = d0.make_stream();
  (void)s2.memcpy(b, n, host.data(), n);
  s2.synchronize();
}

TEST_CASE("a hung kernel with the watchdog off is a deadlock that names the task", "[fault][timeout][deadlock]") {
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_task(1, 1)))};
  (void)npurt::sim::faults_of(sys).set_op_execute_timeout(picoseconds{0});  // never
  auto s = sys.device(0).make_stream();
  (void)s.launch(fixed_kernel(ms(1), "stuck"));
  try {
    s.synchronize();
    FAIL("a hung kernel completed");
  } catch (const npurt::deadlock_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("runs task"));
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("(stuck)"));
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("never ends"));
  }
}

TEST_CASE("a collective on a lost device is refused at the call, and the ranks stay matched after a reset",
          "[fault][lost][collective]") {
  constexpr std::size_t n = 256;
  npurt::system sys{preset(2, fault_plan{}.add(fault_spec::hbm_ecc(0).at_time(at(ms(0)))))};
  recorder rec;
  sys.add_observer(rec);
  auto comm = npurt::communicator::init_all(sys);
  auto& d0 = sys.device(0);
  auto& d1 = sys.device(1);
  auto s0 = d0.make_stream();
  auto s1 = d1.make_stream();
  void* scratch = d0.malloc(n);
  (void)s0.memset(scratch, n, 0, n);  // touches memory with the ECC fault armed: the device is lost
  std::error_code ec;
  s0.synchronize(npurt::no_timeout, ec);
  REQUIRE(ec == errc::hbm_ecc_error);
  REQUIRE(npurt::sim::faults_of(sys).status(0) == npurt::device_status::lost);
  const std::size_t rows = rec.rows.size();

  // The device's state comes before the buffers' checks: null buffers would otherwise be
  // refused as null_pointer on this functional backend.
  (void)comm.all_reduce(nullptr, nullptr, n, npurt::dtype::f32, npurt::reduce_op::sum, s0, ec);
  CHECK(ec == errc::device_lost);
  try {
    (void)comm.barrier(s0);
    FAIL("the collective was not refused");
  } catch (const npurt::device_error& e) {
    CHECK(e.code() == errc::device_lost);
    CHECK(e.status() == npurt::device_status::lost);
    CHECK(e.device() == 0);
    CHECK_THAT(std::string(e.what()), Catch::Matchers::ContainsSubstring("device 0 is lost"));
  }
  npurt::async_error_code async_ec;
  comm.async_barrier(s0, [&](npurt::async_error_code e) { async_ec = e; });
  sys.run();
  CHECK(async_ec == errc::device_lost);
  CHECK(rec.rows.size() == rows);  // nothing was enqueued
  s0.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);  // and no sticky error was left behind

  // The refused calls took no call number: after the reset both ranks' next AllReduce matches.
  d0.reset();
  auto r0 = d0.make_stream();
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f), out(n, 0.0f);
  float* b0 = static_cast<float*>(d0.malloc(n * sizeof(float)));
  float* b1 = static_cast<float*>(d1.malloc(n * sizeof(float)));
  (void)r0.memcpy(b0, n * sizeof(float), ones.data(), n * sizeof(float));
  (void)s1.memcpy(b1, n * sizeof(float), twos.data(), n * sizeof(float));
  (void)comm.all_reduce(b0, b0, n, npurt::dtype::f32, npurt::reduce_op::sum, r0);
  (void)comm.all_reduce(b1, b1, n, npurt::dtype::f32, npurt::reduce_op::sum, s1);
  (void)r0.memcpy(out.data(), n * sizeof(float), b0, n * sizeof(float));
  r0.synchronize();
  s1.synchronize();
  CHECK(out == std::vector<float>(n, 3.0f));
}
