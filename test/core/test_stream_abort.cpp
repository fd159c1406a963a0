// stream::abort (aclrtStreamAbort): a stream's queued work is dropped and its running task
// stopped at the call's instant; whoever waited for that work hears errc::operation_aborted,
// and the stream goes on with what is enqueued after.
#include "common.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;
using npurt::errc;

namespace {

errc abort_code(const std::error_code& ec) { return static_cast<errc>(ec.value()); }

// Device 0 holds the stream under test; device 1's stream is a clock: its 4 us kernel ends,
// and its host callback then runs `at_4us` (an abort, typically) at that instant.
struct abort_fixture {
  recorder rec;
  npurt::system sys{simple(2)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::stream clock = sys.device(1).make_stream();
  npurt::sim_time fired{};

  abort_fixture() { sys.add_observer(rec); }
  template <class F>
  void at_4us(F f) {
    clock.launch(fixed(us(4), "clock"));
    clock.launch_callback([this, f] {
      fired = sys.now();
      f();
    });
  }
  [[nodiscard]] std::size_t count(std::string_view name) const { return rec.named(name).size(); }
};

// Makes one call from its first report, and keeps what the call said.
struct acting_observer final : npurt::observer {
  std::function<void(std::error_code&)> act;
  std::error_code heard;
  bool acted = false;
  void on_task(const npurt::task_info&) override {
    if (act && !acted) {
      acted = true;
      act(heard);
    }
  }
};

}  // namespace

TEST_CASE("an abort drops the queued work, stops the running kernel, and the stream goes on", "[stream][abort]") {
  abort_fixture f;
  auto* buf = static_cast<unsigned char*>(f.dev.malloc(256));
  f.s.memset(buf, 256, 0x11, 256);
  npurt::event a = f.s.launch(fixed(us(10), "a"));
  npurt::event b = f.s.launch(fixed(us(10), "b"));
  npurt::event fill = f.s.memset(buf, 256, 0x22, 256);
  npurt::event d;
  f.at_4us([&] {
    f.s.abort();
    d = f.s.launch(fixed(us(3), "d"));
  });
  f.sys.run();
  REQUIRE(f.fired > npurt::sim_time{});
  // Dropped work leaves no task in the timeline, the stopped `a` included (as a device reset's).
  CHECK(f.count("a") + f.count("b") == 0);
  // Work enqueued after the call starts as soon as it is submitted: `a` stopped and left its
  // engine free. The stream's host lane charges each enqueue the launch overhead in turn, so `d`,
  // its fifth, is submitted at 5 overheads; `a`, submitted at 2, would have held the engine
  // until 2 overheads + 10 us.
  const picoseconds overhead = npurt::system_options{}.launch_overhead;
  REQUIRE(f.count("d") == 1);
  CHECK(f.rec.named("d")[0].start == npurt::sim_time{5 * overhead});
  CHECK(f.rec.named("d")[0].start < npurt::sim_time{2 * overhead + us(10)});
  CHECK(f.fired < f.rec.named("d")[0].start);
  CHECK(f.rec.named("d")[0].end - f.rec.named("d")[0].start == us(3));
  CHECK(f.rec.named("d")[0].end < f.fired + us(10));
  std::vector<unsigned char> host(256);
  f.dev.memcpy(host.data(), host.size(), buf, host.size(), npurt::memcpy_kind::device_to_host);
  CHECK(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0x11; }));
  // The dropped work's events say it never ran; the work after it completed.
  std::error_code ec;
  for (const npurt::event* e : {&a, &b, &fill}) {
    CHECK_FALSE(e->query(ec));
    CHECK(abort_code(ec) == errc::operation_aborted);
  }
  CHECK(d.query());
  CHECK_THAT(thrown_what([&] { (void)b.query(); }),
             ContainsSubstring("dropped by an abort (stream::abort, device::abort_tasks)"));
  CHECK(thrown_code([&] { b.synchronize(); }) == errc::operation_aborted);
  // An abort is the caller's request, not a failure of the stream.
  CHECK_NOTHROW(f.s.synchronize());
  CHECK(f.s.query());
}

TEST_CASE("awaiting callers of dropped work resume with operation_aborted", "[stream][abort]") {
  abort_fixture f;
  npurt::event rec_ev = f.dev.make_event();
  std::vector<std::error_code> heard(4, make_error_code(errc::invalid_argument));
  f.s.launch(fixed(us(10), "long"));
  f.s.record(rec_ev);
  asio::co_spawn(
      f.s.get_executor(),
      [&]() -> asio::awaitable<void> {
        auto [ec] = co_await f.s.async_launch(fixed(us(1), "awaited"), asio::as_tuple(asio::use_awaitable));
        heard[0] = ec;
      },
      asio::detached);
  f.s.async_synchronize([&](std::error_code ec) { heard[1] = ec; });
  rec_ev.async_wait([&](std::error_code ec) { heard[2] = ec; });
  f.at_4us([&] {
    f.s.abort();
    // After the call: the record it dropped can never be reached.
    rec_ev.async_wait([&](std::error_code ec) { heard[3] = ec; });
  });
  f.sys.run();
  for (const auto& ec : heard) CHECK(abort_code(ec) == errc::operation_aborted);
  CHECK(f.count("awaited") == 0);
  CHECK_NOTHROW(f.s.synchronize());
}

TEST_CASE("a wait on a dropped record fails on the waiting stream, whose later work runs", "[stream][abort]") {
  abort_fixture f;
  npurt::stream waiter = f.dev.make_stream({.priority = 2});
  npurt::event ev = f.dev.make_event();
  f.s.launch(fixed(us(10), "producer"));
  f.s.record(ev);
  waiter.wait(ev);
  waiter.launch(fixed(us(1), "consumer"));
  f.at_4us([&] { f.s.abort(); });
  f.sys.run();
  // The consumer did not wait for work that never came: it ran after the abort, and the
  // waiting stream reports its failed wait.
  REQUIRE(f.count("consumer") == 1);
  CHECK(f.rec.named("consumer")[0].start >= f.fired);
  CHECK(thrown_code([&] { waiter.synchronize(); }) == errc::operation_aborted);
  CHECK_THAT(thrown_what([&] { ev.synchronize(); }), ContainsSubstring("before it completed"));
  CHECK_NOTHROW(f.s.synchronize());
}

TEST_CASE("an abort lets the streams its queued work held back in the device's queue go", "[stream][abort]") {
  // One execution queue per priority level (the default shared FIFO): `other`'s kernel was
  // enqueued after the three of `s` and waits for them to be dispatched. Without the abort it
  // would start after 30 us.
  abort_fixture f;
  npurt::stream other = f.dev.make_stream();
  REQUIRE(other.priority() == f.s.priority());
  for (const char* n : {"s1", "s2", "s3"}) f.s.launch(fixed(us(10), n));
  other.launch(fixed(us(1), "held"));
  f.at_4us([&] { f.s.abort(); });
  f.sys.run();
  REQUIRE(f.count("held") == 1);
  CHECK(f.rec.named("held")[0].start == f.fired);
  CHECK(f.count("s2") + f.count("s3") == 0);
}

TEST_CASE("positions dropped by two aborts stay dropped, and the work between them counts", "[stream][abort]") {
  abort_fixture f;
  npurt::event first = f.s.launch(fixed(us(10), "first"));
  npurt::event between;
  npurt::event second;
  f.at_4us([&] {
    f.s.abort();
    between = f.s.launch(fixed(us(1), "between"));
    second = f.s.launch(fixed(us(50), "second"));
  });
  f.sys.run();
  // The second abort comes once the first run has drained: only `second` is pending then.
  f.s.launch(fixed(us(50), "third"));
  npurt::event third_ev = f.s.launch(fixed(us(1), "third_tail"));
  f.s.abort();
  f.sys.run();
  std::error_code ec;
  CHECK_FALSE(first.query(ec));
  CHECK(abort_code(ec) == errc::operation_aborted);
  CHECK(between.query());
  CHECK(second.query());  // it had completed before the second abort
  CHECK_FALSE(third_ev.query(ec));
  CHECK(abort_code(ec) == errc::operation_aborted);
  CHECK(f.count("third") == 0);
  CHECK(f.s.query());
}

TEST_CASE("a pool's reuse wait on a dropped free is no failure of the reusing stream", "[stream][abort][pool]") {
  abort_fixture f;
  npurt::stream reuser = f.dev.make_stream({.priority = 2});
  npurt::mem_pool& pool = f.dev.mem_pool();
  void* p = pool.malloc_async(4096, f.s);
  f.s.launch(fixed(us(20), "user"));
  pool.free_async(p, f.s);
  // Another stream takes the block behind a wait for the free (reuse_allow_internal_dependencies).
  void* q = pool.malloc_async(4096, reuser);
  REQUIRE(q == p);
  reuser.launch(fixed(us(1), "reuse"));
  f.at_4us([&] { f.s.abort(); });
  f.sys.run();
  // The block's last user was dropped: the wait ends at the abort, and nothing failed.
  REQUIRE(f.count("reuse") == 1);
  CHECK(f.rec.named("reuse")[0].start >= f.fired);
  CHECK(f.rec.named("reuse")[0].start < npurt::sim_time{us(20)});
  CHECK_NOTHROW(reuser.synchronize());
  pool.free_async(q, reuser);
  reuser.synchronize();
}

TEST_CASE("an abort is refused for a null stream, another thread and a capturing stream", "[stream][abort]") {
  abort_fixture f;
  std::error_code ec;
  npurt::stream none;
  none.abort(ec);
  CHECK(abort_code(ec) == errc::invalid_stream);
  CHECK_THAT(thrown_what([&] { none.abort(); }), ContainsSubstring("npurt::stream::abort: the stream is null"));
  {
    npurt::system_options opts;
    opts.check_thread = true;
    npurt::system checked{simple(1), opts};
    npurt::stream t = checked.device(0).make_stream();
    t.launch(fixed(us(5), "kept"));
    std::thread([&] { t.abort(ec); }).join();
    CHECK(abort_code(ec) == errc::wrong_thread);
    CHECK_FALSE(t.query());  // nothing was dropped
    t.synchronize();
  }
  // An idle stream: nothing to drop, and nothing refused.
  f.s.abort(ec);
  CHECK_FALSE(ec);
  // Capture: the nodes are not work, and the illegal call ends the capture as CUDA's do.
  f.s.begin_capture();
  f.s.launch(fixed(us(1), "node"));
  f.s.abort(ec);
  CHECK(abort_code(ec) == errc::stream_captured);
  CHECK_THAT(f.sys.recent_error_message(), ContainsSubstring("nothing to abort"));
  CHECK(f.s.capture_info() == npurt::capture_status::invalidated);
  CHECK(thrown_code([&] { (void)f.s.end_capture(); }) == errc::capture_invalidated);
  CHECK(thrown_code([&] {
          f.s.begin_capture();
          f.s.abort();
        }) == errc::stream_captured);
  CHECK(thrown_code([&] { (void)f.s.end_capture(); }) == errc::capture_invalidated);
  // An observer's report: the reported task is the scheduler's until the report returns.
  acting_observer obs;
  obs.act = [&](std::error_code& ec) { f.s.abort(ec); };
  f.sys.add_observer(obs);
  f.s.launch(fixed(us(1), "reported"));
  f.s.launch(fixed(us(1), "reported_too"));
  f.sys.run();
  f.sys.remove_observer(obs);
  CHECK(abort_code(obs.heard) == errc::not_supported);
  CHECK_THAT(f.sys.recent_error_message(), ContainsSubstring("called from an observer's report"));
  CHECK(f.count("reported_too") == 1);  // nothing was dropped
  // The stream still works.
  f.s.launch(fixed(us(1), "after"));
  f.s.synchronize();
  CHECK(f.count("after") == 1);
  CHECK(f.count("node") == 0);
}

TEST_CASE("a host callback and waits dropped by an abort never run", "[stream][abort]") {
  abort_fixture f;
  npurt::event never = f.dev.make_event({.wait_for_record = true});
  bool called = false;
  f.s.launch(fixed(us(10), "k"));
  f.s.launch_callback([&] { called = true; });
  f.s.wait(never);  // would block for good: there is no record
  f.s.launch(fixed(us(1), "tail"));
  f.at_4us([&] { f.s.abort(); });
  f.sys.run();
  CHECK_FALSE(called);
  CHECK(f.count("tail") == 0);
  // A stream aborting itself from its own callback: the callback's task completes nothing.
  bool second = false;
  f.s.launch_callback([&] {
    f.s.abort();
    second = true;
  });
  f.s.launch(fixed(us(1), "behind"));
  f.sys.run();
  CHECK(second);
  CHECK(f.count("behind") == 0);
  CHECK_NOTHROW(f.s.synchronize());
}

TEST_CASE("a blocking synchronize whose work an abort drops meanwhile reports operation_aborted",
          "[stream][device][abort]") {
  // The abort comes from a callback at 4 us, while the host blocks in the synchronize: the
  // synchronize must not end in success (CANN's aclrtSynchronizeStream returns
  // ACL_ERROR_RT_STREAM_ABORT), as async_synchronize's pending callers do not.
  {
    abort_fixture f;
    f.s.launch(fixed(us(10), "k"));
    f.at_4us([&] { f.s.abort(); });
    std::error_code ec;
    f.s.synchronize(ec);
    CHECK(abort_code(ec) == errc::operation_aborted);
    CHECK(f.sys.now() == f.fired);  // the wait ended at the abort, not after the 10 us kernel
    // Read once: the stream holds no failure, and a later synchronize with nothing pending is
    // no abort of its own.
    f.s.synchronize(ec);
    CHECK_FALSE(ec);
    f.s.launch(fixed(us(1), "after"));
    f.s.synchronize(ec);
    CHECK_FALSE(ec);
  }
  {
    abort_fixture f;
    f.s.launch(fixed(us(10), "k"));
    f.at_4us([&] { f.s.abort(); });
    CHECK_THAT(thrown_what([&] { f.s.synchronize(); }),
               ContainsSubstring("npurt::stream::synchronize") && ContainsSubstring("dropped by an abort"));
  }
  {
    // The device's form: one of its streams aborted from a callback.
    abort_fixture f;
    npurt::stream second = f.dev.make_stream();
    f.s.launch(fixed(us(10), "k"));
    second.launch(fixed(us(2), "short"));
    f.at_4us([&] { f.s.abort(); });
    std::error_code ec;
    f.dev.synchronize(ec);
    CHECK(abort_code(ec) == errc::operation_aborted);
    CHECK(f.count("short") == 1);
    f.s.launch(fixed(us(1), "after"));
    f.dev.synchronize(ec);
    CHECK_FALSE(ec);
    f.s.launch(fixed(us(10), "k2"));
    f.at_4us([&] { f.dev.abort_tasks(); });
    CHECK_THAT(thrown_what([&] { f.dev.synchronize(); }),
               ContainsSubstring("npurt::device::synchronize") && ContainsSubstring("dropped by an abort"));
  }
  {
    // A failure the stream holds comes first: it is what the synchronize reads.
    abort_fixture f;
    f.s.launch_callback([] { throw std::runtime_error("before the abort"); });
    f.s.launch(fixed(us(10), "k"));
    f.at_4us([&] { f.s.abort(); });
    std::error_code ec;
    f.s.synchronize(ec);
    CHECK(abort_code(ec) == errc::callback_failed);
  }
}

TEST_CASE("an abort scenario run twice gives the same timeline", "[stream][abort][determinism]") {
  const auto once = [] {
    abort_fixture f;
    npurt::stream other = f.dev.make_stream({.priority = 1});
    for (int i = 0; i < 6; ++i) {
      f.s.launch(fixed(us(2 + i), "s"));
      other.launch(fixed(us(3), "o"));
    }
    f.at_4us([&] {
      f.s.abort();
      f.s.launch(fixed(us(1), "after"));
    });
    f.sys.run();
    return f.rec.rows;
  };
  const auto first = once();
  CHECK(first == once());
  CHECK_FALSE(first.empty());
}

TEST_CASE("a device's task abort drops the work of each of its streams and of no other device", "[device][abort]") {
  abort_fixture f;
  npurt::stream second = f.dev.make_stream({.priority = 1});
  auto* buf = static_cast<unsigned char*>(f.dev.malloc(64));
  npurt::event a = f.s.launch(fixed(us(20), "a"));
  npurt::event b = second.launch(fixed(us(20), "b"));
  second.memset(buf, 64, 0x5a, 64);
  npurt::stream other_dev = f.sys.device(1).make_stream({.priority = 7});  // after the clock's kernel
  other_dev.launch(fixed(us(20), "elsewhere"));
  std::error_code awaited = make_error_code(errc::invalid_argument);
  second.async_launch(fixed(us(1), "awaited"), [&](std::error_code ec) { awaited = ec; });
  f.at_4us([&] { f.dev.abort_tasks(); });
  f.sys.run();
  std::error_code ec;
  CHECK_FALSE(a.query(ec));
  CHECK(abort_code(ec) == errc::operation_aborted);
  CHECK_FALSE(b.query(ec));
  CHECK(abort_code(ec) == errc::operation_aborted);
  CHECK(abort_code(awaited) == errc::operation_aborted);
  CHECK(f.count("a") + f.count("b") + f.count("awaited") == 0);
  CHECK(f.count("elsewhere") == 1);
  // Memory, streams and events stay: the streams go on, the buffer was never written.
  unsigned char first = 0;
  f.dev.memcpy(&first, 1, buf, 1, npurt::memcpy_kind::device_to_host);
  CHECK(first != 0x5a);
  second.memset(buf, 64, 0x5a, 64);
  f.s.launch(fixed(us(1), "again"));
  f.dev.synchronize();
  f.dev.memcpy(&first, 1, buf, 1, npurt::memcpy_kind::device_to_host);
  CHECK(first == 0x5a);
  CHECK(f.count("again") == 1);
  // Refused from another thread and from an observer's report.
  {
    npurt::system_options opts;
    opts.check_thread = true;
    npurt::system checked{simple(1), opts};
    std::thread([&] { checked.device(0).abort_tasks(ec); }).join();
    CHECK(abort_code(ec) == errc::wrong_thread);
  }
  acting_observer obs;
  obs.act = [&](std::error_code& e) { f.dev.abort_tasks(e); };
  f.sys.add_observer(obs);
  f.s.launch(fixed(us(1), "seen"));
  f.sys.run();
  f.sys.remove_observer(obs);
  CHECK(abort_code(obs.heard) == errc::not_supported);
  CHECK_THAT(f.sys.recent_error_message(), ContainsSubstring("npurt::device::abort_tasks: called from an observer"));
}
