// Fault detection, recovery and the training loop at the edges of their inputs.
#include "common.hpp"

#include <npurt/graph/session.hpp>
#include <npurt/models/dp_training.hpp>
#include <npurt/models/fault_campaign.hpp>

#include <catch2/catch_test_macros.hpp>

#include <limits>

using namespace fault_test;
using npurt::errc;
using npurt::fault_plan;
using npurt::fault_spec;

namespace {

npurt::graph relu_graph() {
  npurt::graph g("relu");
  auto x = g.add_input("x", {2, 2}, npurt::dtype::f32);
  g.set_output(g.add_op("Relu", {x}, {}, "out"));
  return g;
}

}  // namespace

TEST_CASE("a checkpoint file that cannot be written ends the run in its report, not in an exception",
          "[fault][edges][recovery]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  npurt::models::dp_training_options o;
  o.ranks = {0, 1};
  o.params = 64;
  o.steps = 6;
  o.checkpoint_every = 3;
  o.checkpoint_path = "/nonexistent-npurt-dir/x.ckpt";
  npurt::models::dp_training_report r;
  REQUIRE_NOTHROW(r = npurt::models::train_data_parallel(sys, o));
  CHECK(r.fatal == std::errc::no_such_file_or_directory);
  CHECK(r.checkpoints == 0);
  CHECK(r.steps_done == 3);
}

TEST_CASE("train_data_parallel gives the devices' memory back", "[fault][edges][recovery]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  const auto before = sys.device(0).memory_info();
  npurt::models::dp_training_options o;
  o.ranks = {0, 1};
  o.params = 1 << 16;
  o.steps = 2;
  (void)npurt::models::train_data_parallel(sys, o);
  sys.device(0).mem_pool().empty_cache();
  CHECK(sys.device(0).memory_info().free == before.free);
}

TEST_CASE("a fault campaign takes any probability as its rate and refuses other rates before it runs",
          "[fault][edges][campaign]") {
  npurt::models::fault_campaign_options o;
  o.runs = 1;
  o.ranks = 2;
  o.steps = 2;
  o.params = 64;
  o.rate = 0.5;  // transient_oom runs at 4 x the rate
  CHECK_NOTHROW(npurt::models::run_fault_campaign(o));
  o.rate = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(npurt::models::run_fault_campaign(o), npurt::caller_error);
  o.rate = 0.01;
  o.heartbeat = picoseconds{-5};
  CHECK_THROWS_AS(npurt::models::run_fault_campaign(o), npurt::caller_error);
}

TEST_CASE("run_with_recovery puts back the caller's op-execute watchdog after a short retry one",
          "[fault][edges][session]") {
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_time(at(picoseconds{0}))))};
  auto& faults = npurt::sim::faults_of(sys);
  REQUIRE(!faults.set_op_execute_timeout(sec(5)));
  npurt::session s{sys};
  auto g = relu_graph();
  auto c = s.compile(g);
  npurt::tensor xt({2, 2}, npurt::dtype::f32, std::vector<double>{1, -1, 2, -2});
  (void)s.run_with_recovery(c, {{"x", xt}});
  REQUIRE(s.recovered_errors().size() == 1);
  CHECK(faults.op_execute_timeout() == sec(5));
}

TEST_CASE("a long kernel slowed past the end of the clock times out instead of finishing at once",
          "[fault][edges][throttle]") {
  npurt::system sys{
      preset(1, fault_plan{}.add(fault_spec::thermal_throttle(0, 1e6, picoseconds{0}).at_time(at(picoseconds{0}))))};
  auto s = sys.device(0).make_stream();
  recorder rec;
  sys.add_observer(rec);
  (void)s.launch(fixed_kernel(sec(20), "long"));
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  sys.remove_observer(rec);
  CHECK(ec == errc::task_timeout);
  REQUIRE(rec.named("long"));
  CHECK(rec.named("long")->end - rec.named("long")->start == sec(68));
}

TEST_CASE("backoff_for returns the cap itself when the cap is the largest duration", "[fault][edges][recovery]") {
  npurt::recovery_strategy st;
  st.backoff = picoseconds::max();
  st.max_backoff = picoseconds::max();
  REQUIRE(!st.validate());
  CHECK(st.backoff_for(1) == picoseconds::max());
  CHECK(st.backoff_for(7) == picoseconds::max());
}

TEST_CASE("sleep_for past the end of the clock saturates instead of overflowing", "[fault][edges][recovery]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::sleep_for(sys, ms(1));
  npurt::sleep_for(sys, picoseconds::max());
  CHECK(sys.now() == sim_time::max());
}

TEST_CASE("a negative heartbeat interval is a caller error, not a monitor turned off", "[fault][edges]") {
  npurt::system sys{preset(1, {})};
  auto& faults = npurt::sim::faults_of(sys);
  CHECK_THROWS_AS(faults.enable_fault_detection(picoseconds{-1}), npurt::caller_error);
  CHECK_NOTHROW(faults.enable_fault_detection(picoseconds{0}));
}

TEST_CASE("an exception callback may remove itself, and others, while it is called", "[fault][edges][callback]") {
  // Every kernel fails, so every kernel is reported.
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::aicore_exception(0).random(1.0, 0)))};
  auto& faults = npurt::sim::faults_of(sys);
  // Counts the copies of the one-shot callback's state that exist: the callback being called
  // must be one of them until it returns.
  struct token {
    int* live;
    explicit token(int* l) : live(l) { ++*live; }
    token(const token& o) : live(o.live) { ++*live; }
    token& operator=(const token&) = delete;
    ~token() { --*live; }
  };
  int live = 0;
  std::uint64_t one_shot = 0, removed = 0;
  int one_shot_calls = 0, removed_calls = 0, kept_calls = 0;
  bool alive_after_remove = true;
  one_shot = faults.add_exception_callback([&, t = token{&live}](const npurt::exception_info&) {
    faults.remove_exception_callback(one_shot);
    faults.remove_exception_callback(removed);  // a later one, before its turn
    alive_after_remove = alive_after_remove && *t.live > 0;
    ++one_shot_calls;
  });
  removed = faults.add_exception_callback([&](const npurt::exception_info&) { ++removed_calls; });
  faults.add_exception_callback([&](const npurt::exception_info&) { ++kept_calls; });
  auto s = sys.device(0).make_stream();
  for (int i = 1; i <= 3; ++i) (void)s.launch(fixed_kernel(ms(1), numbered("k", i)));
  std::error_code ec;
  s.synchronize(ec);
  CHECK(ec == errc::kernel_fault);
  CHECK(one_shot_calls == 1);
  CHECK(alive_after_remove);
  CHECK(removed_calls == 0);
  CHECK(kept_calls == 3);
  CHECK(live == 0);
}
