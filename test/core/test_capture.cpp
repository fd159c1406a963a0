// Stream capture and graph launch: what a capture records, what a launch runs and charges, and
// every refusal, against the closed-form timings of the simple backend.
#include <npurt/stream_graph.hpp>

#include "common.hpp"

#include <npurt/task.hpp>

#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;
using npurt::errc;
using npurt::sim_time;

namespace {

npurt::errc cap_code(const std::error_code& ec) { return static_cast<npurt::errc>(ec.value()); }

// A system of the simple backend whose finished tasks `rec` records (declared first: observers
// outlive the system they observe).
struct observed {
  recorder rec;
  npurt::system sys{simple()};
  observed() { sys.add_observer(rec); }
};

// Two streams of device 0 of an observed system, and two events of it.
struct two_streams : observed {
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::stream other = dev.make_stream();
  npurt::event e = dev.make_event();
  npurt::event join = dev.make_event();
};

TEST_CASE("a capture runs nothing; each launch runs the captured work in order, with data", "[core][capture]") {
  observed o;
  auto& [rec, sys] = o;
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::size_t n = 256;
  auto* pin_in = static_cast<unsigned char*>(sys.host_malloc(n));
  auto* pin_out = static_cast<unsigned char*>(sys.host_malloc(n));
  void* a = dev.malloc(n);
  void* b = dev.malloc(n);
  std::memset(pin_in, 7, n);
  std::memset(pin_out, 0, n);
  int callbacks = 0;

  s.begin_capture();
  CHECK(s.capture_info() == npurt::capture_status::active);
  CHECK_FALSE(s.memset(b, n, 1, n).valid());  // a node has no place in the stream yet
  s.memcpy(a, n, pin_in, n);
  s.launch(fixed(us(3), "k"));
  s.memcpy(b, n, a, n / 2);
  s.launch_callback([&] { ++callbacks; });
  s.memcpy(pin_out, n, b, n);
  npurt::stream_graph g = s.end_capture();
  CHECK(s.capture_info() == npurt::capture_status::none);
  sys.run();
  CHECK(rec.rows.empty());
  CHECK(callbacks == 0);
  REQUIRE(g.valid());
  CHECK(g.size() == 6);
  CHECK(g.device() == 0);

  g.launch(s);
  s.synchronize();
  CHECK(callbacks == 1);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(pin_out[i] == (i < n / 2 ? 7 : 1));
  REQUIRE(rec.rows.size() == 6);
  const std::vector<std::string> names{"memset", "memcpy_h2d", "k", "memcpy_d2d", "host_callback", "memcpy_d2h"};
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(rec.rows[i].name == names[i]);

  // A second launch reads the pinned source as it is now, as a replayed copy does.
  std::memset(pin_in, 9, n);
  std::memset(pin_out, 0, n);
  g.launch(s);
  s.synchronize();
  CHECK(callbacks == 2);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(pin_out[i] == (i < n / 2 ? 9 : 1));
  REQUIRE(rec.rows.size() == 12);
  for (std::size_t i = 6; i < 12; ++i) CHECK(rec.rows[i].id > rec.rows[i - 1].id);  // fresh tasks, in order
  dev.free(a);
  dev.free(b);
  sys.host_free(pin_in);
  sys.host_free(pin_out);
}

TEST_CASE("a launch charges the host lane once for the graph and a node overhead for each other node",
          "[core][capture]") {
  npurt::system_options opts;
  opts.launch_overhead = us(3);
  opts.graph_node_overhead = ns(40);
  constexpr int nodes = 50;
  // Zero-length kernels are host-bound: each starts when its enqueue returns.
  auto starts = [&](bool graph) {
    recorder rec;
    npurt::system sys{simple(), opts};
    sys.add_observer(rec);
    auto s = sys.device(0).make_stream();
    if (graph) {
      s.begin_capture();
      for (int i = 0; i < nodes; ++i) s.launch(fixed(picoseconds{0}));
      npurt::stream_graph g = s.end_capture();
      g.launch(s);
    } else {
      for (int i = 0; i < nodes; ++i) s.launch(fixed(picoseconds{0}));
    }
    sys.run();
    std::vector<sim_time> out;
    for (const auto& r : rec.rows) out.push_back(r.start);
    return out;
  };
  const auto eager = starts(false);
  const auto replay = starts(true);
  REQUIRE(eager.size() == nodes);
  REQUIRE(replay.size() == nodes);
  for (int i = 0; i < nodes; ++i) {
    CHECK(eager[static_cast<std::size_t>(i)] == sim_time{us(3) * (i + 1)});
    CHECK(replay[static_cast<std::size_t>(i)] == sim_time{us(3) + ns(40) * i});
  }
}

TEST_CASE("a graph launches on any stream of its device, after the work queued before it", "[core][capture]") {
  observed o;
  auto& [rec, sys] = o;
  auto s = sys.device(0).make_stream();
  auto t = sys.device(0).make_stream();
  s.begin_capture();
  s.launch(fixed(us(5), "g"));
  npurt::stream_graph g = s.end_capture();
  t.launch(fixed(us(20), "before"));
  npurt::event last = g.launch(t);
  REQUIRE(last.valid());
  last.synchronize();
  const auto rows = rec.of_stream(t.id());
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].name == "g");
  CHECK(rows[1].start == rows[0].end);
  CHECK(last.query());
}

TEST_CASE("a record captured runs at each launch; a captured wait for it is stream order", "[core][capture]") {
  two_streams r;
  r.s.begin_capture();
  r.s.launch(fixed(us(10), "first"));
  r.s.record(r.e);
  r.s.wait(r.e);  // recorded earlier in this capture: nothing to add
  r.s.launch(fixed(us(1), "second"));
  npurt::stream_graph g = r.s.end_capture();
  CHECK(g.size() == 3);
  std::error_code not_yet;
  CHECK_FALSE(r.e.query(not_yet));  // the record runs at a launch
  CHECK(cap_code(not_yet) == errc::event_not_recorded);
  g.launch(r.s);
  r.other.wait(r.e);  // the launch's record
  r.other.launch(fixed(us(1), "after"));
  r.sys.run();
  const auto mine = r.rec.of_stream(r.s.id());
  const auto theirs = r.rec.of_stream(r.other.id());
  REQUIRE(mine.size() == 3);
  REQUIRE(theirs.size() == 2);  // the wait and the kernel
  CHECK(theirs.back().start >= mine[0].end);
  CHECK(r.e.query());
}

TEST_CASE("the capture's own refusals name the call and end the capture invalidated", "[core][capture]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto other = dev.make_stream();
  npurt::event fork = dev.make_event();
  npurt::event join = dev.make_event();
  std::error_code ec;

  SECTION("a second begin_capture") {
    s.begin_capture();
    CHECK(thrown_code([&] { s.begin_capture(); }) == errc::stream_captured);
    CHECK(s.capture_info() == npurt::capture_status::active);  // the first goes on
    CHECK(s.end_capture().valid());
  }
  SECTION("end_capture without a capture") {
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::stream_not_captured);
    (void)s.end_capture(ec);
    CHECK(cap_code(ec) == errc::stream_not_captured);
    CHECK(sys.recent_error_message().find("npurt::stream::end_capture") != std::string::npos);
  }
  SECTION("the stream's synchronize") {
    s.begin_capture();
    s.launch(fixed(us(1)));
    s.synchronize(ec);
    CHECK(cap_code(ec) == errc::stream_captured);
    CHECK(s.capture_info() == npurt::capture_status::invalidated);
    (void)s.end_capture(ec);
    CHECK(cap_code(ec) == errc::capture_invalidated);
    const std::string why = sys.recent_error_message();
    CHECK(why.find("invalidated by npurt::stream::synchronize") != std::string::npos);
    CHECK(s.capture_info() == npurt::capture_status::none);
    s.synchronize();  // usable again
  }
  SECTION("the stream's query") {
    s.begin_capture();
    CHECK(thrown_code([&] { (void)s.query(); }) == errc::stream_captured);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("a wait for work outside the capture") {
    npurt::event before = s.launch(fixed(us(1)));
    s.begin_capture();
    s.wait(before, ec);
    CHECK(cap_code(ec) == errc::capture_dependency);
    CHECK(sys.recent_error_message().find("npurt::stream::wait") != std::string::npos);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("a null event is refused as such, and the capture goes on") {
    s.begin_capture();
    s.wait(npurt::event{}, ec);
    CHECK(cap_code(ec) == errc::invalid_event);
    CHECK(s.capture_info() == npurt::capture_status::active);
    CHECK(s.end_capture().valid());
  }
  SECTION("a stream that joins and is not joined back ends the capture unjoined") {
    s.begin_capture();
    s.record(fork);
    other.wait(fork);  // joins
    CHECK(other.capture_info() == npurt::capture_status::active);
    other.launch(fixed(us(1)));
    (void)s.end_capture(ec);
    CHECK(cap_code(ec) == errc::capture_unjoined);
    CHECK(sys.recent_error_message().find("stream " + std::to_string(other.id()) + " joined the capture") !=
          std::string::npos);
    CHECK(s.capture_info() == npurt::capture_status::none);
    CHECK(other.capture_info() == npurt::capture_status::none);
    other.synchronize();  // usable again, with nothing of the capture run
  }
  SECTION("end_capture on a stream that joined is refused, and the capture goes on") {
    s.begin_capture();
    s.record(fork);
    other.wait(fork);
    other.launch(fixed(us(1)));
    CHECK(thrown_code([&] { (void)other.end_capture(); }) == errc::capture_unmatched);
    CHECK(other.capture_info() == npurt::capture_status::active);
    other.record(join);
    s.wait(join);
    CHECK(s.end_capture().size() == 5);  // record, wait, kernel, record, wait
    CHECK(other.capture_info() == npurt::capture_status::none);
  }
  SECTION("a stream that joined guards itself as the origin does") {
    s.begin_capture();
    s.record(fork);
    other.wait(fork);
    CHECK(thrown_code([&] { other.synchronize(); }) == errc::stream_captured);
    CHECK(s.capture_info() == npurt::capture_status::invalidated);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
    CHECK(other.capture_info() == npurt::capture_status::none);
  }
  SECTION("a stream that joined and was destroyed invalidates the capture") {
    s.begin_capture();
    s.record(fork);
    {
      auto gone = dev.make_stream();
      gone.wait(fork);
    }
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("a record outside the capture makes the event's latest record an ordinary one again") {
    s.begin_capture();
    s.record(fork);
    other.record(fork);
    auto third = dev.make_stream();
    third.wait(fork);  // other's record: no join
    CHECK(third.capture_info() == npurt::capture_status::none);
    CHECK(s.end_capture().size() == 1);
    third.synchronize();
    CHECK(fork.query());
  }
  SECTION("an awaited wait for an event recorded in a capture is refused") {
    s.begin_capture();
    s.record(fork);
    std::error_code got;
    other.async_wait(fork, [&](std::error_code e) { got = e; });
    sys.run();
    CHECK(cap_code(got) == errc::capture_unsupported);
    CHECK(other.capture_info() == npurt::capture_status::none);
    CHECK(s.end_capture().size() == 1);
  }
  SECTION("a copy from pageable host memory") {
    std::vector<unsigned char> pageable(64, 3);
    void* d = dev.malloc(64);
    s.begin_capture();
    s.memcpy(d, 64, pageable.data(), 64, npurt::memcpy_kind::default_kind, ec);
    CHECK(cap_code(ec) == errc::capture_unsupported);
    CHECK(sys.recent_error_message().find("pageable") != std::string::npos);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
    dev.free(d);
  }
  SECTION("a device synchronize in global mode, but not in relaxed mode") {
    auto busy = dev.make_stream();
    busy.launch(fixed(us(4)));
    s.begin_capture(npurt::capture_mode::relaxed);
    dev.synchronize();
    CHECK(busy.query());
    CHECK(s.end_capture().valid());
    s.begin_capture();
    CHECK(thrown_code([&] { dev.synchronize(); }) == errc::capture_unsupported);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("a pool reservation on the capturing stream (allocations and frees are captured, this is not)") {
    s.begin_capture();
    dev.mem_pool().reserve(1 << 20, s, ec);
    CHECK(cap_code(ec) == errc::capture_unsupported);
    CHECK(sys.recent_error_message().find("record_stream") != std::string::npos);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("awaited calls on the capturing stream") {
    s.begin_capture();
    std::error_code got;
    s.async_launch(fixed(us(1)), [&](std::error_code e) { got = e; });
    sys.run();
    CHECK(cap_code(got) == errc::stream_captured);
    bool threw = false;
    auto body = [&]() -> npurt::task<void> {
      try {
        co_await s.async_synchronize(npurt::use_task);
      } catch (const npurt::error& x) { threw = static_cast<errc>(x.code().value()) == errc::stream_captured; }
    };
    npurt::spawn(sys, body());
    sys.run();
    CHECK(threw);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
  }
  SECTION("a call refused for its arguments is not recorded, and the capture goes on") {
    s.begin_capture();
    s.launch(fixed(us(1)));
    s.memset(nullptr, 8, 0, 8, ec);
    CHECK(cap_code(ec) == errc::null_pointer);
    CHECK(s.capture_info() == npurt::capture_status::active);
    CHECK(s.end_capture().size() == 1);
  }
}

TEST_CASE("a graph's launch refuses what it cannot run, with nothing enqueued", "[core][capture]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto s = d0.make_stream();
  auto s1 = sys.device(1).make_stream();
  std::error_code ec;
  npurt::stream_graph null_graph;
  CHECK_FALSE(null_graph.valid());
  CHECK(thrown_code([&] { null_graph.launch(s); }) == errc::invalid_graph);

  void* pin = sys.host_malloc(64);
  void* d = d0.malloc(64);
  s.begin_capture();
  s.memcpy(d, 64, pin, 64);
  npurt::stream_graph g = s.end_capture();

  g.launch(s1, ec);
  CHECK(cap_code(ec) == errc::stream_device_mismatch);
  CHECK(sys.recent_error_message().find("captured on device 0") != std::string::npos);
  npurt::stream none;
  CHECK(thrown_code([&] { g.launch(none); }) == errc::invalid_stream);

  sys.host_free(pin);
  g.launch(s, ec);
  CHECK(cap_code(ec) == errc::invalid_pointer);
  CHECK(sys.recent_error_message().find("node 0 (memcpy_h2d)") != std::string::npos);
  CHECK(s.query());  // nothing was enqueued

  // Moving leaves a null graph behind; the moved-to graph works.
  npurt::stream_graph moved = std::move(g);
  CHECK_FALSE(g.valid());  // NOLINT(bugprone-use-after-move): a moved-from graph is null
  CHECK(moved.valid());

  // A reset destroys the device's graphs.
  d0.reset();
  CHECK_FALSE(moved.valid());
  auto fresh = d0.make_stream();
  CHECK(thrown_code([&] { moved.launch(fresh); }) == errc::invalid_graph);
}

TEST_CASE("a capture forks to another stream and joins back; a launch keeps every dependency", "[core][capture]") {
  two_streams r;
  r.s.begin_capture();
  r.s.launch(fixed(us(2), "a"));
  r.s.record(r.e);
  r.other.wait(r.e);  // joins: its work is the capture's from here
  r.other.launch(fixed(us(7), "b"));
  r.other.record(r.join);
  r.s.launch(fixed(us(3), "c"));
  r.s.wait(r.join);
  r.s.launch(fixed(us(1), "d"));
  npurt::stream_graph g = r.s.end_capture();
  CHECK(r.other.capture_info() == npurt::capture_status::none);
  CHECK(g.size() == 8);
  r.sys.run();
  CHECK(r.rec.rows.empty());
  auto t = r.dev.make_stream();
  t.launch(fixed(us(5), "before"));
  const npurt::event last = g.launch(t);
  t.launch(fixed(us(1), "after"));
  r.sys.run();
  CHECK(last.query());
  auto find = [&](const std::string& name, std::size_t nth) {
    for (const auto& row : r.rec.rows)
      if (row.name == name && nth-- == 0) return row;
    FAIL("no task " << name);
    return r.rec.rows.front();
  };
  const auto before = find("before", 0), a = find("a", 0), b = find("b", 0), c = find("c", 0), d = find("d", 0),
             after = find("after", 0);
  CHECK(a.start >= before.end);
  CHECK(b.start >= a.end);  // the fork
  CHECK(c.start >= a.end);
  CHECK(b.stream != a.stream);  // on a stream of the graph's own
  CHECK(a.stream == t.id());
  CHECK(d.start >= b.end);  // the join
  CHECK(d.start >= c.end);
  CHECK(after.start >= d.end);
  // Launched again, the graph's stream is reused.
  g.launch(t);
  r.sys.run();
  CHECK(find("b", 1).stream == find("b", 0).stream);
  CHECK(find("d", 1).start >= find("b", 1).end);
}

TEST_CASE("captures do not cross devices, merge, or take graphs of several streams", "[core][capture]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto s = d0.make_stream();
  auto far = sys.device(1).make_stream();
  auto near = d0.make_stream();
  npurt::event fork = d0.make_event();
  npurt::event join = d0.make_event();
  std::error_code ec;
  s.begin_capture();
  s.record(fork);
  far.wait(fork, ec);
  CHECK(cap_code(ec) == errc::capture_unsupported);
  CHECK(sys.recent_error_message().find("another device") != std::string::npos);
  CHECK(far.capture_info() == npurt::capture_status::none);
  near.begin_capture();
  near.wait(fork, ec);  // two captures are not merged
  CHECK(cap_code(ec) == errc::capture_unsupported);
  CHECK(near.capture_info() == npurt::capture_status::invalidated);
  CHECK(thrown_code([&] { (void)near.end_capture(); }) == errc::capture_invalidated);
  near.wait(fork);  // joins now
  near.record(join);
  s.wait(join);
  npurt::stream_graph forked = s.end_capture();
  CHECK(forked.size() == 4);
  auto host = d0.make_stream();
  host.begin_capture();
  forked.launch(host, ec);
  CHECK(cap_code(ec) == errc::capture_unsupported);
  CHECK(host.end_capture().size() == 0);
}

TEST_CASE("a graph launched into a capturing stream joins its capture", "[core][capture]") {
  observed o;
  auto& [rec, sys] = o;
  auto s = sys.device(0).make_stream();
  s.begin_capture();
  s.launch(fixed(us(1), "a"));
  s.launch(fixed(us(1), "b"));
  npurt::stream_graph inner = s.end_capture();
  s.begin_capture();
  CHECK_FALSE(inner.launch(s).valid());
  s.launch(fixed(us(1), "c"));
  CHECK_FALSE(inner.launch(s).valid());
  npurt::stream_graph outer = s.end_capture();
  CHECK(outer.size() == 5);
  sys.run();
  CHECK(rec.rows.empty());
  outer.launch(s);
  sys.run();
  std::vector<std::string> names;
  for (const auto& r : rec.rows) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{"a", "b", "c", "a", "b"});
}

TEST_CASE("an awaited graph launch completes when its work has run, with its failure", "[core][capture]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* a = dev.malloc(64);
  void* b = dev.malloc(64);
  s.begin_capture();
  s.launch(fixed(us(7)));
  s.memcpy(b, 64, a, 64);
  npurt::stream_graph g = s.end_capture();
  sim_time done{};
  std::error_code second;
  auto body = [&]() -> npurt::task<void> {
    co_await g.async_launch(s, npurt::use_task);
    done = sys.now();
    // Device memory freed after the capture fails its node when it runs.
    dev.free(b);
    try {
      co_await g.async_launch(s, npurt::use_task);
    } catch (const npurt::error& e) { second = e.code(); }
  };
  npurt::spawn(sys, body());
  sys.run();
  CHECK(done >= sim_time{us(7)});
  CHECK(cap_code(second) == errc::invalid_pointer);
  dev.free(a);
}

TEST_CASE("a failure on a graph's own stream is reported on the stream that launched the graph", "[core][capture]") {
  two_streams r;
  npurt::device& dev = r.dev;
  npurt::stream &s = r.s, &side = r.other;
  npurt::event &fork = r.e, &join = r.join;
  // The side stream stops on failure when called eagerly; the graph's lane must not, since
  // nobody can read its failure to let it run again.
  npurt::stream stopper = dev.make_stream({.flags = npurt::stream_flags::stop_on_failure});
  int calls = 0;
  s.begin_capture();
  s.record(fork);
  stopper.wait(fork);
  stopper.launch_callback([&] {
    if (++calls == 1) throw std::runtime_error("first launch only");
  });
  stopper.record(join);
  s.wait(join);
  npurt::stream_graph g = s.end_capture();
  REQUIRE(g.valid());
  npurt::stream launcher = dev.make_stream();
  npurt::event before = dev.make_event(), after = dev.make_event();
  launcher.record(before);
  g.launch(launcher);
  launcher.record(after);
  r.sys.run();
  REQUIRE(calls == 1);
  // An event of the launching stream after the graph sees the failure; one before it does not.
  std::error_code ec;
  CHECK(before.query(ec));
  CHECK_FALSE(ec);
  (void)after.query(ec);
  CHECK(cap_code(ec) == errc::callback_failed);
  // Read by the launcher's synchronize, as the callback's own exception.
  std::string what;
  try {
    launcher.synchronize();
  } catch (const std::runtime_error& e) { what = e.what(); }
  CHECK(what == "first launch only");
  CHECK_NOTHROW(launcher.synchronize());  // read: cleared
  // The lane was not stopped: the next launch runs it, awaited, and succeeds.
  bool ok = false;
  auto body = [&]() -> npurt::task<void> {
    co_await g.async_launch(launcher, npurt::use_task);
    ok = true;
  };
  npurt::spawn(r.sys, body());
  r.sys.run();
  CHECK(ok);
  CHECK(calls == 2);
  // Eagerly, the same failure belongs to the stream that ran it alone.
  side.launch_callback([] { throw std::runtime_error("eager"); });
  side.record(join);
  s.wait(join);
  r.sys.run();
  CHECK_NOTHROW(s.synchronize());
  CHECK_THROWS_AS(side.synchronize(), std::runtime_error);
}

TEST_CASE("captures and graphs let go of everything when their stream, device or system goes", "[core][capture]") {
  npurt::stream_graph survivor;
  {
    npurt::system sys{simple()};
    auto& dev = sys.device(0);
    {
      auto s = dev.make_stream();
      s.begin_capture();
      s.launch(fixed(us(1)));
      s.launch_callback([] {});
      s.record(dev.make_event());
    }  // destroyed while capturing: the capture goes with it
    auto s = dev.make_stream();
    s.begin_capture();
    s.launch(fixed(us(1)));
    s.launch_callback([] {});
    survivor = s.end_capture();
    CHECK(survivor.valid());
  }
  CHECK_FALSE(survivor.valid());
  CHECK(thrown_code([&] { (void)survivor.size(); }) == errc::invalid_graph);
}

TEST_CASE("graph launches are deterministic", "[core][capture]") {
  auto run = [] {
    recorder rec;
    npurt::system sys{simple()};
    sys.add_observer(rec);
    auto s = sys.device(0).make_stream();
    auto t = sys.device(0).make_stream({.priority = npurt::priority::high});
    s.begin_capture();
    for (int i = 0; i < 20; ++i) s.launch(fixed(ns(100 * (i % 5)), "n"));
    npurt::stream_graph g = s.end_capture();
    for (int i = 0; i < 3; ++i) {
      g.launch(s);
      t.launch(fixed(us(2), "t"));
      g.launch(t);
    }
    sys.run();
    return rec.rows;
  };
  CHECK(run() == run());
}

TEST_CASE("capture and graph calls from another thread are refused as wrong_thread, touching nothing",
          "[core][capture][thread]") {
  npurt::system_options o;
  o.check_thread = true;
  recorder rec;
  npurt::system sys{simple(), o};
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  s.begin_capture();
  s.launch(fixed(us(1)));
  npurt::stream_graph g = s.end_capture();
  std::error_code begun, ended, launched;
  npurt::async_error_code awaited;
  bool completed = false;
  bool inside = false;
  boost::asio::io_context ioc;
  std::thread t([&] {
    s.begin_capture(npurt::capture_mode::global, begun);
    (void)s.end_capture(ended);
    g.launch(s, launched);
    inside = true;
    g.async_launch(s, boost::asio::bind_executor(ioc, [&](npurt::async_error_code e) {
                     awaited = e;
                     completed = !inside;
                   }));
    inside = false;
    ioc.run();
  });
  t.join();
  CHECK(cap_code(begun) == errc::wrong_thread);
  CHECK(cap_code(ended) == errc::wrong_thread);
  CHECK(cap_code(launched) == errc::wrong_thread);
  CHECK(completed);  // on its own thread, after the call returned
  CHECK(awaited == errc::wrong_thread);
  CHECK(sys.recent_error_message().empty());
  CHECK(s.capture_info() == npurt::capture_status::none);
  sys.run();
  CHECK(rec.rows.empty());  // nothing was enqueued
}

TEST_CASE("graph_node_overhead is checked like launch_overhead", "[core][capture]") {
  npurt::system_options o;
  o.graph_node_overhead = picoseconds{-1};
  CHECK(thrown_code([&] { npurt::system sys{simple(), o}; }) == errc::invalid_config);
  o.graph_node_overhead = npurt::max_launch_overhead + picoseconds{1};
  CHECK(thrown_code([&] { npurt::system sys{simple(), o}; }) == errc::invalid_config);
}

}  // namespace
