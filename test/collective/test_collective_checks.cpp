// The connect timeout, handles of another system, and the profiler's view of a rank's wait for
// its peers.
#include "helpers.hpp"

#include <npurt/profiler.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>
#include <vector>

using namespace npurt;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr picoseconds seconds_ps(std::int64_t s) { return picoseconds{s * 1'000'000'000'000LL}; }

struct world {
  npurt::system sys;
  std::vector<stream> streams;
  explicit world(const sim::preset& p) : sys(sim::make_backend(p, coll_test::timing_only())) {
    for (auto& d : sys.devices()) streams.push_back(d.make_stream());
  }
  // Rank d first spends `s` seconds of device time (a late rank).
  void busy(int d, std::int64_t s) {
    streams[static_cast<std::size_t>(d)].launch(kernel_desc{kernels::fixed{seconds_ps(s)}, "late"});
  }
};

}  // namespace

TEST_CASE("a rank that never reaches the communicator's first operation fails it at the connect timeout",
          "[collective][errors][connect]") {
  world w(coll_test::roce_preset(3));
  auto comm =
      communicator::init_all(w.sys, {.exec_timeout = seconds_ps(10), .connect_timeout = seconds_ps(2), .name = "boot"});
  comm.barrier(w.streams[0]);
  comm.barrier(w.streams[2]);  // rank 1 never calls
  std::error_code ec;
  w.sys.run(ec);
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::task_timeout);
  CHECK_THAT(msg, ContainsSubstring("connect_timeout") && ContainsSubstring("2 s") && ContainsSubstring("'boot'") &&
                      ContainsSubstring("rank(s) 1 had not arrived"));
  // The connect timer (2 s), not the execution timer (10 s), fired.
  const double t = to_ms(w.sys.now().time_since_epoch());
  CHECK(t >= 2'000.0);
  CHECK(t < 2'001.0);
}

TEST_CASE("a rank later than the connect timeout fails the first operation but not a later one",
          "[collective][errors][connect]") {
  SECTION("first operation: links are not set up, the connect timeout bounds the rendezvous") {
    world w(coll_test::roce_preset(2));
    auto comm = communicator::init_all(w.sys, {.exec_timeout = seconds_ps(10), .connect_timeout = seconds_ps(1)});
    w.busy(1, 3);
    comm.barrier(w.streams[0]);
    comm.barrier(w.streams[1]);
    std::error_code ec;
    w.sys.run(ec);
    std::string msg;
    CHECK(comm.async_error(&msg) == errc::task_timeout);
    CHECK_THAT(msg, ContainsSubstring("connect_timeout"));
  }
  SECTION("after a first operation: only the execution timeout applies") {
    world w(coll_test::roce_preset(2));
    auto comm = communicator::init_all(
        w.sys, {.exec_timeout = seconds_ps(10), .connect_timeout = seconds_ps(1), .keep_records = true});
    comm.barrier(w.streams[0]);
    comm.barrier(w.streams[1]);
    w.busy(1, 3);
    comm.barrier(w.streams[0]);
    comm.barrier(w.streams[1]);
    w.sys.run();
    CHECK_FALSE(comm.async_error());
    REQUIRE(comm.records().size() == 2);
    CHECK(comm.records()[1].start - comm.records()[1].arrival[0] >= seconds_ps(3) - picoseconds{1'000'000'000});
  }
  SECTION("a connect timeout longer than the execution timeout: the execution timer fires first") {
    world w(coll_test::roce_preset(2));
    auto comm = communicator::init_all(w.sys, {.exec_timeout = seconds_ps(1), .connect_timeout = seconds_ps(5)});
    comm.barrier(w.streams[0]);
    std::error_code ec;
    w.sys.run(ec);
    std::string msg;
    CHECK(comm.async_error(&msg) == errc::task_timeout);
    CHECK_THAT(msg, ContainsSubstring("exec_timeout"));
    CHECK(to_ms(w.sys.now().time_since_epoch()) < 1'001.0);
  }
}

TEST_CASE("a stream of another system is rejected with a typed error, even when its id names one of ours",
          "[collective][errors][handles]") {
  world a(coll_test::roce_preset(2));
  world b(coll_test::roce_preset(2));
  // Stream ids are per system: b's first stream has the id of a's.
  REQUIRE(b.streams[0].id() == a.streams[0].id());
  auto comm = communicator::init_all(a.sys);
  std::error_code ec;
  const event e = comm.barrier(b.streams[0], ec);
  CHECK(ec == errc::invalid_stream);
  CHECK_FALSE(e.valid());
  try {
    comm.all_reduce(nullptr, nullptr, 4, dtype::f32, reduce_op::sum, b.streams[0]);
    FAIL("no exception");
  } catch (const caller_error& x) {
    CHECK(x.code() == errc::invalid_stream);
    CHECK_THAT(std::string(x.what()), ContainsSubstring("another system"));
  }
  async_error_code async_ec;
  comm.async_barrier(b.streams[0], [&](async_error_code e2) { async_ec = e2; });
  a.sys.run();
  CHECK(async_ec == errc::invalid_stream);
  // Nothing was enqueued on either system: a's rank 0 has no half-matched barrier pending.
  comm.barrier(a.streams[0]);
  comm.barrier(a.streams[1]);
  a.sys.run();
  CHECK_FALSE(comm.async_error());
  CHECK(b.streams[0].query());
}

TEST_CASE("other mismatched handles get typed errors naming what was wrong", "[collective][errors][handles]") {
  world w(coll_test::roce_preset(3));
  auto pair = communicator::init_all(w.sys, std::vector<device_id>{0, 1});
  std::error_code ec;
  pair.barrier(w.streams[2], ec);  // device 2 has no rank in this communicator
  CHECK(ec == errc::stream_device_mismatch);
  CHECK_THROWS_AS(pair.barrier(w.streams[2]), caller_error);
  communicator empty;
  empty.barrier(w.streams[0], ec);
  CHECK(ec == errc::invalid_argument);
  stream none;
  pair.barrier(none, ec);
  CHECK(ec == errc::invalid_stream);
}

TEST_CASE("the profiler shows each rank's wait for its peers as an idle gap whose cause is peer",
          "[collective][profiler]") {
  auto run = [] {
    world w(coll_test::roce_preset(3));
    npurt::profiler prof;
    w.sys.add_observer(prof);
    auto comm = communicator::init_all(w.sys, {.keep_records = true});
    for (int d = 0; d < 3; ++d) {
      w.streams[static_cast<std::size_t>(d)].launch(
          kernel_desc{kernels::fixed{picoseconds{(d + 1) * 1'000'000'000LL}}, "compute"});  // d+1 ms
      comm.all_reduce(nullptr, nullptr, 1 << 20, dtype::f32, reduce_op::sum, w.streams[static_cast<std::size_t>(d)]);
    }
    w.sys.run();
    w.sys.remove_observer(prof);
    return std::pair{prof.summary(), comm.records().at(0)};
  };
  const auto [s, rec] = run();
  for (int d = 0; d < 3; ++d) {
    const profile_summary::stream_stats* st = nullptr;
    for (const auto& x : s.streams)
      if (x.device == d && x.tasks > 0) st = &x;
    REQUIRE(st != nullptr);
    picoseconds peer{0};
    for (const auto& g : st->gaps)
      if (g.cause == gap_cause::peer) {
        // The gap is exactly the rank's wait: from its arrival to the start of data movement.
        CHECK(g.begin == rec.arrival[static_cast<std::size_t>(d)]);
        CHECK(g.end == rec.start);
        peer += g.duration();
      }
    CAPTURE(d);
    // Ranks 0 and 1 waited for rank 2 (1 ms and 2 ms less compute); rank 2 did not wait.
    CHECK(peer == rec.start - rec.arrival[static_cast<std::size_t>(d)]);
    if (d < 2) CHECK(peer > picoseconds{900'000'000});
    else CHECK(peer == picoseconds{0});
    // Busy time excludes the wait: the kernel, then the data movement (0.1 ms of slack for
    // launch latencies; the waits are 1 ms and more).
    CHECK(st->busy < picoseconds{(d + 1) * 1'000'000'000LL} + (rec.end - rec.start) + picoseconds{100'000'000});
  }
  // Twice, the same gaps.
  const auto [s2, rec2] = run();
  REQUIRE(s2.streams.size() == s.streams.size());
  for (std::size_t i = 0; i < s.streams.size(); ++i) {
    REQUIRE(s2.streams[i].gaps.size() == s.streams[i].gaps.size());
    for (std::size_t k = 0; k < s.streams[i].gaps.size(); ++k) {
      CHECK(s2.streams[i].gaps[k].begin == s.streams[i].gaps[k].begin);
      CHECK(s2.streams[i].gaps[k].cause == s.streams[i].gaps[k].cause);
    }
  }
}

TEST_CASE("a timeout past the end of virtual time never fires", "[collective][errors]") {
  // now + picoseconds::max() does not fit in the clock: the timer must not wrap to a time already
  // passed and fail the operation at once.
  world w(coll_test::roce_preset(2));
  auto comm =
      communicator::init_all(w.sys, {.exec_timeout = picoseconds::max(), .connect_timeout = picoseconds::max()});
  w.busy(1, 10);
  comm.barrier(w.streams[0]);
  comm.barrier(w.streams[1]);
  comm.barrier(w.streams[0]);  // past the first operation: the execution timer alone
  w.busy(1, 10);
  comm.barrier(w.streams[1]);
  CHECK_NOTHROW(w.streams[0].synchronize());
  CHECK_NOTHROW(w.streams[1].synchronize());
  CHECK_FALSE(comm.async_error());
}

TEST_CASE("abort names the operation that was pending", "[collective][errors]") {
  world w(coll_test::roce_preset(2));
  auto comm = communicator::init_all(w.sys);
  comm.broadcast(nullptr, 4, dtype::f32, 1, w.streams[0]);  // rank 1 never calls
  std::error_code ec;
  w.streams[0].synchronize(seconds_ps(1), ec);  // rank 0 has arrived
  comm.abort();
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::operation_aborted);
  CHECK_THAT(msg, ContainsSubstring("broadcast(count=4, f32, root=1) #0 pending"));
  w.streams[0].synchronize(no_timeout, ec);
  CHECK(ec == errc::operation_aborted);
}

TEST_CASE("a buffer refused at the call is named, with the bytes it has and the bytes the call needs",
          "[collective][errors]") {
  // What a caller must fix is which buffer and by how much: a message that only says "size
  // overflow" or "null pointer" leaves them to recompute the rule (all_gather's recv holds
  // ranks x count elements).
  npurt::system sys{sim::presets::ascend910(4)};
  auto comm = communicator::init_all(sys);
  std::vector<stream> s;
  std::vector<void*> b;
  for (auto& d : sys.devices()) {
    s.push_back(d.make_stream());
    b.push_back(d.malloc(64));
  }
  const auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const caller_error& e) { return e.what(); }
    return "accepted";
  };
  // 16 floats from each of 4 ranks: 256 bytes, into 64.
  CHECK_THAT(
      message([&] { comm.all_gather(b[1], b[1], 16, dtype::f32, s[1]); }),
      ContainsSubstring("rank 1's recv buffer") && ContainsSubstring("has 64 bytes") && ContainsSubstring("needs 256"));
  // Past the end from an offset inside the allocation.
  CHECK_THAT(
      message([&] { comm.all_reduce(static_cast<std::byte*>(b[0]) + 48, b[0], 8, dtype::f32, reduce_op::sum, s[0]); }),
      ContainsSubstring("rank 0's send buffer") && ContainsSubstring("has 16 bytes") && ContainsSubstring("needs 32"));
  CHECK_THAT(message([&] { comm.all_reduce(nullptr, b[2], 4, dtype::f32, reduce_op::sum, s[2]); }),
             ContainsSubstring("rank 2's send buffer is null") && ContainsSubstring("timing-only"));
  CHECK_THAT(message([&] { comm.all_reduce(b[0], b[3], 4, dtype::f32, reduce_op::sum, s[3]); }),
             ContainsSubstring("rank 3's send buffer") && ContainsSubstring("memory of device 0, not of device 3"));
  const std::size_t device_bytes = sys.device(0).properties().memory_bytes;
  CHECK_THAT(message([&] { comm.all_reduce(b[0], b[0], device_bytes, dtype::f32, reduce_op::sum, s[0]); }),
             ContainsSubstring("more than device 0's memory"));
  CHECK_THAT(message([&] { comm.all_gather(b[0], b[0], std::size_t{1} << 62, dtype::f32, s[0]); }),
             ContainsSubstring("overflows a byte size"));
  // A stream of a device outside the communicator.
  auto pair = communicator::init_all(sys, std::vector<device_id>{0, 1});
  CHECK_THAT(message([&] { pair.barrier(s[2]); }),
             ContainsSubstring("stream's device 2 has no rank in this communicator (its devices are 0, 1)"));
  // Nothing was enqueued by any of them.
  for (auto& x : s) x.synchronize();
  CHECK_FALSE(comm.async_error());
}
