// The seed case: data-parallel devices whose all-reduce is enqueued on a communication stream
// after a long run of compute kernels. Under the shared FIFO the all-reduce reaches the device
// only after every kernel submitted before it has started, so ranks with more queued compute
// arrive late and their peers wait; with the communication stream at high priority (or with an
// overflow edge, or by direct submission) every rank arrives at once.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>

using namespace npurt;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr int devices = 4;
constexpr std::int64_t kernel_ps = 1'000'000'000;  // 1 ms

struct starts final : observer {
  std::map<device_id, std::vector<sim_time>> compute;  // start times of compute kernels
  void on_task(const task_info& t) override {
    if (t.name == "compute") compute[t.device].push_back(t.start);
  }
};

int queued_kernels(int d) { return 10 + 5 * d; }  // rank 3 has the most compute ahead of its all-reduce

struct outcome {
  collective_record rec;
  starts log;
  std::error_code error;
  std::string message;
};

outcome run_case(dispatch_model model, int comm_priority, stream_flags comm_flags,
                 std::optional<picoseconds> timeout = no_timeout) {
  outcome o;
  system_options so;
  so.dispatch = model;
  npurt::system sys{sim::make_backend(sim::presets::ascend910(devices), coll_test::timing_only()), so};
  sys.add_observer(o.log);
  auto comm = communicator::init_all(sys, {.exec_timeout = timeout, .name = "dp", .keep_records = true});
  std::vector<stream> compute, comms;
  for (auto& d : sys.devices()) {
    compute.push_back(d.make_stream());
    comms.push_back(d.make_stream({.priority = comm_priority, .flags = comm_flags}));
  }
  for (int d = 0; d < devices; ++d) {
    for (int k = 0; k < queued_kernels(d); ++k)
      compute[d].launch(kernel_desc{kernels::fixed{picoseconds{kernel_ps}}, "compute"});
    comm.all_reduce(nullptr, nullptr, 25 << 20, dtype::f16, reduce_op::sum, comms[d]);
  }
  std::error_code ec;
  sys.run(ec);
  o.error = comm.async_error(&o.message);
  if (!comm.records().empty()) o.rec = comm.records().back();
  sys.remove_observer(o.log);
  return o;
}

// Compute kernels of device d that started before its all-reduce reached the device.
std::size_t started_before(const outcome& o, int d) {
  std::size_t n = 0;
  for (sim_time t : o.log.compute.at(d))
    if (t <= o.rec.arrival[static_cast<std::size_t>(d)]) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "under the shared FIFO the all-reduce waits for every kernel queued before it, and peers wait for the late rank",
    "[collective][seed]") {
  const auto o = run_case(dispatch_model::shared_fifo, priority::normal, stream_flags::none);
  REQUIRE_FALSE(o.error);
  for (int d = 0; d < devices; ++d) {
    CAPTURE(d);
    // Every compute kernel submitted before the all-reduce started before it arrived.
    CHECK(started_before(o, d) == static_cast<std::size_t>(queued_kernels(d)));
  }
  // The last rank to arrive is the one with the most queued compute; the data moved only then,
  // and every other rank waited for it for (its extra kernels) milliseconds.
  const auto last = std::max_element(o.rec.arrival.begin(), o.rec.arrival.end()) - o.rec.arrival.begin();
  CHECK(last == devices - 1);
  CHECK(o.rec.start == o.rec.arrival[devices - 1]);
  for (int d = 0; d < devices - 1; ++d) {
    const double wait_ms = to_ms(o.rec.start - o.rec.arrival[static_cast<std::size_t>(d)]);
    CHECK(wait_ms >= (queued_kernels(devices - 1) - queued_kernels(d)) * 1.0 - 0.01);
  }
}

TEST_CASE("a high-priority communication stream, an overflow edge or direct submission removes the wait",
          "[collective][seed]") {
  struct cfg {
    const char* name;
    int prio;
    stream_flags flags;
  };
  for (const cfg c : {cfg{"priority", priority::high, stream_flags::none},
                      cfg{"overflow edge", priority::normal, stream_flags::overflow_edge},
                      cfg{"direct submission", priority::normal, stream_flags::direct_submit}}) {
    CAPTURE(c.name);
    const auto o = run_case(dispatch_model::shared_fifo, c.prio, c.flags);
    REQUIRE_FALSE(o.error);
    for (int d = 0; d < devices; ++d) {
      // Only the kernel already running when it was submitted went first.
      CHECK(started_before(o, d) == 1);
      CHECK(to_ms(o.rec.start - o.rec.arrival[static_cast<std::size_t>(d)]) < 0.01);
    }
    // On the cores a contended dispatch goes by (priority, arrival): a reduction waiting when a
    // kernel ends goes before the compute kernel its stream submits at that instant (and at
    // priority 0 before any compute), so the all-reduce overlapped the compute and ended long
    // before device 3's last kernel started.
    CHECK(o.rec.end < o.log.compute.at(devices - 1).back());
  }
}

TEST_CASE("with a short execution timeout the shared FIFO's wait fires the HCCL timeout, naming the late rank",
          "[collective][seed]") {
  const picoseconds timeout{
      5'000'000'000};  // 5 ms after rank 0 arrives (at 10 ms), ranks 1..3 (at 15, 20, 25 ms) are missing
  const auto fifo = run_case(dispatch_model::shared_fifo, priority::normal, stream_flags::none, timeout);
  CHECK(fifo.error == errc::task_timeout);
  CHECK_THAT(fifo.message, ContainsSubstring("exec_timeout") && ContainsSubstring("'dp'") &&
                               ContainsSubstring("rank(s) 1 2 3 had not arrived"));
  const auto prio = run_case(dispatch_model::shared_fifo, priority::high, stream_flags::none, timeout);
  CHECK_FALSE(prio.error);
}
