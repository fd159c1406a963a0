// Tasks ended before they finish (a device reset, a lost heartbeat, the op-execute watchdog)
// while a transfer is still in its latency, before it draws on any link; failures the fault
// layer decides for collectives, as the communicator reports them; the device a device_error
// names.
#include "common.hpp"

#include <npurt/models/dp_training.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <system_error>
#include <vector>

namespace dropped_jobs_test {

using namespace fault_test;
using npurt::dtype;
using npurt::errc;
using npurt::reduce_op;

struct ranks {
  std::vector<npurt::stream> streams;
  std::vector<void*> buffers;
};

inline ranks two_ranks(npurt::system& sys, std::size_t bytes) {
  ranks r;
  for (int d = 0; d < 2; ++d) {
    r.streams.push_back(sys.device(d).make_stream());
    r.buffers.push_back(sys.device(d).malloc(bytes));
  }
  return r;
}

/// A system of `devices` whose device `lost` an HBM ECC fault at time 0 takes down: the memset
/// queued on s runs into it.
struct lost_device {
  static npurt::fault_plan ecc_at_start(int d) {
    npurt::fault_plan plan;
    plan.add(npurt::fault_spec::hbm_ecc(d).at_time(at(npurt::picoseconds{0})));
    return plan;
  }
  lost_device(int devices, int lost)
      : sys{preset(devices, ecc_at_start(lost))}, dev{sys.device(lost)}, s{dev.make_stream()}, p{dev.malloc(64)} {
    s.memset(p, 64, 0, 64);
  }
  npurt::system sys;
  npurt::device& dev;
  npurt::stream s;
  void* p;
};

inline std::error_code sync_code(npurt::stream& s) {
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  return ec;
}

// When the fault-free 2-rank all_reduce of 1024 floats starts moving data.
inline sim_time all_reduce_start() {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
  ranks r = two_ranks(sys, 4096);
  for (int d = 0; d < 2; ++d)
    comm.all_reduce(r.buffers[d], r.buffers[d], 1024, dtype::f32, reduce_op::sum, r.streams[d]);
  for (auto& s : r.streams) s.synchronize();
  return comm.records().at(0).start;
}

TEST_CASE("a device reset while a collective's first transfer is in its latency aborts the collective",
          "[fault][reset][collective]") {
  npurt::system sys{npurt::sim::presets::ascend910(3)};
  auto comm = npurt::communicator::init_all(sys, std::vector<npurt::device_id>{0, 1});
  ranks r = two_ranks(sys, 4096);
  npurt::stream timer = sys.device(2).make_stream();  // outside the communicator
  for (int d = 0; d < 2; ++d)
    comm.all_reduce(r.buffers[d], r.buffers[d], 1024, dtype::f32, reduce_op::sum, r.streams[d]);
  std::error_code reset_ec = make_error_code(errc::invalid_argument);
  namespace asio = boost::asio;
  asio::co_spawn(
      sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        co_await timer.async_launch(npurt::kernels::fixed{std::chrono::nanoseconds{1}}, asio::use_awaitable);
        sys.device(1).reset(reset_ec);
      },
      asio::detached);
  sys.run();
  CHECK_FALSE(reset_ec);
  CHECK(sync_code(r.streams[0]) == errc::operation_aborted);
  // The run goes on: the surviving device and the reset one both take new work.
  r.streams[0].launch(npurt::kernels::fixed{std::chrono::microseconds{1}});
  CHECK_FALSE(sync_code(r.streams[0]));
  npurt::stream fresh = sys.device(1).make_stream();
  fresh.launch(npurt::kernels::fixed{std::chrono::microseconds{1}});
  CHECK_FALSE(sync_code(fresh));
}

TEST_CASE("a lost heartbeat while a collective's transfers are in their latency fails both ranks",
          "[fault][heartbeat][collective]") {
  const sim_time start = all_reduce_start();
  npurt::fault_plan plan;
  plan.add(npurt::fault_spec::lost_heartbeat(1).at_time(start + std::chrono::nanoseconds{1}));
  npurt::system sys{preset(2, plan)};
  npurt::sim::faults_of(sys).enable_fault_detection(ms(1));
  auto comm = npurt::communicator::init_all(sys);
  ranks r = two_ranks(sys, 4096);
  for (int d = 0; d < 2; ++d)
    comm.all_reduce(r.buffers[d], r.buffers[d], 1024, dtype::f32, reduce_op::sum, r.streams[d]);
  CHECK(sync_code(r.streams[0]) == errc::remote_error);
  CHECK(sync_code(r.streams[1]) == errc::lost_heartbeat);
  r.streams[0].launch(npurt::kernels::fixed{std::chrono::microseconds{1}});
  CHECK_FALSE(sync_code(r.streams[0]));
}

TEST_CASE("the op-execute watchdog ends a copy still in its link latency", "[fault][timeout][watchdog][copy]") {
  const std::size_t bytes = std::size_t{1} << 20;
  for (const std::int64_t limit_ps : {1'000, 100'000, 1'000'000}) {
    npurt::system sys{preset(2, npurt::fault_plan{})};
    npurt::sim::faults_of(sys).set_op_execute_timeout(picoseconds{limit_ps});
    npurt::host_buffer h(sys, bytes);
    void* d0 = sys.device(0).malloc(bytes);
    void* d1 = sys.device(1).malloc(bytes);
    auto s = sys.device(0).make_stream();
    s.memcpy(d0, bytes, h.data(), bytes, npurt::memcpy_kind::host_to_device);
    s.memcpy(d1, bytes, d0, bytes, npurt::memcpy_kind::device_to_device);
    CHECK(sync_code(s) == errc::task_timeout);
    // The links it would have used still carry the next copy.
    npurt::sim::faults_of(sys).set_op_execute_timeout(picoseconds{0});
    s.memcpy(d1, bytes, d0, bytes, npurt::memcpy_kind::device_to_device);
    CHECK_FALSE(sync_code(s));
  }
}

TEST_CASE("data-parallel training survives a lost heartbeat mid-collective", "[fault][heartbeat][models]") {
  npurt::fault_plan plan;
  plan.add(npurt::fault_spec::lost_heartbeat(1).at_time(at(picoseconds{80'000'000})));
  npurt::system sys{preset(5, plan)};
  npurt::sim::faults_of(sys).enable_fault_detection(ms(1));
  npurt::models::dp_training_options o;
  o.ranks = {0, 1, 2, 3};
  o.spares = {4};
  o.steps = 12;
  o.checkpoint_every = 4;
  o.params = 1000;
  const auto result = npurt::models::train_data_parallel(sys, o);
  CHECK(result.failures >= 1);
  CHECK_FALSE(result.fatal);
  CHECK(result.steps_done == 12);
}

TEST_CASE("a collective failed by the fault layer sets the communicator's async error and records",
          "[fault][collective][async_error]") {
  SECTION("a link down fails the operation before it reaches the collective engine") {
    npurt::fault_plan plan;
    plan.add(npurt::fault_spec::link_down(1, ms(1)).at_time(at(picoseconds{0})));
    npurt::system sys{preset(2, plan)};
    auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
    ranks r = two_ranks(sys, 64);
    for (int d = 0; d < 2; ++d)
      comm.all_reduce(r.buffers[d], r.buffers[d], 4, dtype::f32, reduce_op::sum, r.streams[d]);
    CHECK(sync_code(r.streams[0]) == errc::link_failure);
    CHECK(sync_code(r.streams[1]) == errc::link_failure);
    std::string message;
    CHECK(comm.async_error(&message) == errc::link_failure);
    CHECK(message.find("all_reduce #") != std::string::npos);
    REQUIRE(comm.records().size() == 1);  // one operation, however many ranks failed
    CHECK(comm.records()[0].error == errc::link_failure);
    CHECK(comm.records()[0].op == npurt::collective_op::all_reduce);
  }
  SECTION("a lost member: the first error is the one kept, with a message per operation") {
    npurt::fault_plan plan;
    plan.add(npurt::fault_spec::hbm_ecc(1).at_time(at(picoseconds{0})));
    npurt::system sys{preset(2, plan)};
    auto comm = npurt::communicator::init_all(sys, {.exec_timeout = ms(3)});
    ranks r = two_ranks(sys, 64);
    r.streams[1].memset(r.buffers[1], 64, 0, 64);
    CHECK(sync_code(r.streams[1]) == errc::hbm_ecc_error);
    comm.all_reduce(r.buffers[0], r.buffers[0], 4, dtype::f32, reduce_op::sum, r.streams[0]);
    std::error_code ec;  // the lost rank's own call is refused at the call
    comm.all_reduce(r.buffers[1], r.buffers[1], 4, dtype::f32, reduce_op::sum, r.streams[1], ec);
    CHECK(ec == errc::device_lost);
    CHECK(sync_code(r.streams[0]) == errc::remote_error);
    CHECK_FALSE(sync_code(r.streams[1]));  // nothing of it was enqueued
    std::string message;
    CHECK(comm.async_error(&message) == errc::remote_error);
    CAPTURE(message);
    CHECK(message.find("all_reduce #0") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  SECTION("a member that stops answering mid-operation: the ranks' error, not a reset") {
    npurt::fault_plan plan;
    plan.add(npurt::fault_spec::lost_heartbeat(1).at_time(all_reduce_start() + std::chrono::nanoseconds{1}));
    npurt::system sys{preset(2, plan)};
    npurt::sim::faults_of(sys).enable_fault_detection(ms(1));
    auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
    ranks r = two_ranks(sys, 4096);
    for (int d = 0; d < 2; ++d)
      comm.all_reduce(r.buffers[d], r.buffers[d], 1024, dtype::f32, reduce_op::sum, r.streams[d]);
    const std::error_code e0 = sync_code(r.streams[0]), e1 = sync_code(r.streams[1]);
    CHECK(e0 == errc::remote_error);
    CHECK(e1 == errc::lost_heartbeat);
    // HcclGetCommAsyncError reports what the ranks were told; nothing was reset.
    std::string message;
    const std::error_code async = comm.async_error(&message);
    CAPTURE(message);
    CHECK((async == e0 || async == e1));
    CHECK(message.find("reset") == std::string::npos);
    CHECK(message.find("all_reduce #0") != std::string::npos);
    REQUIRE(comm.records().size() == 1);
    CHECK(comm.records()[0].error == async);
  }
  SECTION("a fault-free communicator keeps no error") {
    npurt::system sys{preset(2, npurt::fault_plan{})};
    auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
    ranks r = two_ranks(sys, 64);
    for (int d = 0; d < 2; ++d)
      comm.all_reduce(r.buffers[d], r.buffers[d], 4, dtype::f32, reduce_op::sum, r.streams[d]);
    for (auto& s : r.streams) CHECK_FALSE(sync_code(s));
    CHECK_FALSE(comm.async_error());
    REQUIRE(comm.records().size() == 1);
    CHECK_FALSE(comm.records()[0].error);
  }
}

TEST_CASE("a device_error names the device when the raiser knows it", "[fault][lost][error]") {
  // Plain references: clang before 16 cannot capture structured bindings in lambdas.
  lost_device lost(2, 1);
  auto& dev = lost.dev;
  auto& s = lost.s;
  void* p = lost.p;
  const auto device_of = [](auto&& f) {
    try {
      f();
    } catch (const npurt::device_error& e) {
      CHECK(e.status() == npurt::device_status::lost);
      return e.device();
    }
    FAIL("no device_error");
    return -2;
  };
  CHECK(device_of([&] { dev.synchronize(); }) == 1);
  CHECK(device_of([&] { (void)dev.malloc(64); }) == 1);
  CHECK(device_of([&] { s.launch(npurt::kernels::fixed{std::chrono::milliseconds{1}}); }) == 1);
  CHECK(device_of([&] { s.memset(p, 64, 0, 64); }) == 1);
  // Raised with no device to name, it stays -1.
  try {
    npurt::throw_error(make_error_code(errc::device_lost), "no device");
  } catch (const npurt::device_error& e) { CHECK(e.device() == -1); }
}

TEST_CASE("work ended early leaves no end behind: the clock stops at the last real work",
          "[fault][reset][watchdog][clock]") {
  SECTION("a device reset of a running ten-second kernel") {
    npurt::system sys{npurt::sim::presets::ascend910(2)};
    auto& dev = sys.device(0);
    auto s = dev.make_stream();
    s.launch(fixed_kernel(sec(10), "ten_seconds"));
    auto other = dev.make_stream();
    other.launch(fixed_kernel(ms(1), "short"));  // waits for the cores, then is aborted too
    auto timer = sys.device(1).make_stream();
    sim_time reset_at{};
    namespace asio = boost::asio;
    asio::co_spawn(
        sys.get_executor(),
        [&]() -> asio::awaitable<void> {
          co_await timer.async_launch(fixed_kernel(ms(2), "timer"), asio::use_awaitable);  // "ten_seconds" runs
          reset_at = sys.now();
          dev.reset();
        },
        asio::detached);
    sys.run();
    REQUIRE(reset_at > sim_time{});
    CHECK(sys.now() == reset_at);
  }
  SECTION("a copy the op-execute watchdog ends") {
    const std::size_t bytes = std::size_t{64} << 20;
    npurt::system sys{preset(1, npurt::fault_plan{})};
    npurt::sim::faults_of(sys).set_op_execute_timeout(ms(1));
    recorder rec;
    sys.add_observer(rec);
    npurt::host_buffer h(sys, bytes);
    void* d = sys.device(0).malloc(bytes);
    auto s = sys.device(0).make_stream();
    s.memcpy(d, bytes, h.data(), bytes, npurt::memcpy_kind::host_to_device);  // longer than 1 ms
    CHECK(sync_code(s) == errc::task_timeout);
    s.memcpy(d, 4096, h.data(), 4096, npurt::memcpy_kind::host_to_device);
    CHECK_FALSE(sync_code(s));
    sys.run();
    REQUIRE(rec.rows.size() == 2);
    CHECK(rec.rows[0].end - rec.rows[0].start == ms(1));  // ended by the watchdog
    CHECK(sys.now() == rec.rows[1].end);  // not the big copy's modelled end
  }
}

TEST_CASE("the stream-ordered pool on a lost device fails with device_lost, not out of memory", "[fault][lost][pool]") {
  lost_device lost(1, 0);
  auto& dev = lost.dev;
  auto& s = lost.s;
  CHECK(sync_code(s) == errc::hbm_ecc_error);
  std::error_code ec;
  CHECK(dev.mem_pool().malloc_async(4096, s, ec) == nullptr);
  CHECK(ec == errc::device_lost);
  try {
    (void)dev.mem_pool().malloc_async(4096, s);
    FAIL("no device_error");
  } catch (const npurt::device_error& e) {
    CHECK(e.code() == errc::device_lost);
    CHECK(e.device() == 0);
    CHECK(e.status() == npurt::device_status::lost);
  }
  // Not counted as an out-of-memory event, and nothing was synchronised or freed for it.
  const auto st = dev.mem_pool().stats();
  CHECK(st.num_ooms == 0);
  CHECK(st.num_alloc_retries == 0);
  CHECK(st.num_sync_all_streams == 0);
}

}  // namespace dropped_jobs_test
