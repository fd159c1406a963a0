// stream::abort on the simulator: a kernel still waiting for AI cores leaves the line, a running
// collective (whose peers hold their parts) runs on, a communicator a dropped call puts out of
// step is broken, and an op-execute watchdog goes with the task it watched.
#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace {

using Catch::Matchers::ContainsSubstring;
using npurt::errc;
using npurt::picoseconds;

constexpr picoseconds abort_us(std::int64_t v) { return picoseconds{v * 1'000'000}; }

struct abort_row {
  std::string name;
  npurt::sim_time start, end;
};

class abort_rows final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override { all.push_back({std::string(t.name), t.start, t.end}); }
  [[nodiscard]] std::vector<abort_row> named(std::string_view n) const {
    std::vector<abort_row> out;
    for (const auto& r : all)
      if (r.name == n) out.push_back(r);
    return out;
  }
  std::vector<abort_row> all;
};

npurt::system abort_system(int devices) {
  npurt::sim::sim_options o;
  o.functional = false;
  return npurt::system{npurt::sim::make_backend(npurt::sim::presets::ascend910(devices), o)};
}

npurt::kernel_desc whole_device(std::string_view name, std::int64_t us) {
  return npurt::kernel_desc{npurt::kernels::fixed{abort_us(us)}, name};  // block_dim 0: every core
}

errc abort_errc(const std::error_code& ec) { return static_cast<errc>(ec.value()); }

template <class F>
errc abort_thrown(F&& f) {
  try {
    f();
  } catch (const npurt::error& e) { return static_cast<errc>(e.code().value()); }
  return errc{};
}

}  // namespace

TEST_CASE("an aborted kernel still waiting for the AI cores leaves the line", "[sim][abort]") {
  abort_rows rec;
  npurt::system sys = abort_system(1);
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto x = dev.make_stream();
  auto y = dev.make_stream({.priority = 6});  // lower than x's: x takes the cores first
  x.launch(whole_device("x", 100));
  y.launch(whole_device("y_dropped", 100));
  npurt::sleep_for(sys, abort_us(10));
  y.abort();
  y.launch(whole_device("y_after", 100));
  sys.run();
  REQUIRE(rec.named("x").size() == 1);
  REQUIRE(rec.named("y_after").size() == 1);
  CHECK(rec.named("y_dropped").empty());
  // The cores go from x straight to the work enqueued after the abort.
  CHECK(rec.named("y_after")[0].start == rec.named("x")[0].end);
  CHECK_NOTHROW(y.synchronize());
}

TEST_CASE("a running collective runs on through an abort; the work behind it is dropped", "[sim][abort][collective]") {
  abort_rows rec;
  npurt::system sys = abort_system(2);
  sys.add_observer(rec);
  auto comm = npurt::communicator::init_all(sys, {.keep_records = true});
  auto s0 = sys.device(0).make_stream();
  auto s1 = sys.device(1).make_stream();
  s1.launch(whole_device("late", 100));  // rank 1 joins at 100 us
  comm.all_reduce(nullptr, nullptr, 1 << 20, npurt::dtype::f32, npurt::reduce_op::sum, s0);
  npurt::event behind = s0.launch(whole_device("behind", 5));
  npurt::event recorded = sys.device(0).make_event();
  s0.record(recorded);
  // Waits on the dropped positions hear of it once the collective, which may still use what the
  // dropped work would have, is done: not at the abort.
  auto waiter = sys.device(0).make_stream({.priority = 2});
  waiter.wait(recorded);
  waiter.launch(npurt::kernel_desc{npurt::kernels::fixed{abort_us(1)}, "after_wait", 1});
  std::error_code heard = make_error_code(errc::invalid_argument);
  recorded.async_wait([&](std::error_code ec) { heard = ec; });
  comm.all_reduce(nullptr, nullptr, 1 << 20, npurt::dtype::f32, npurt::reduce_op::sum, s1);
  npurt::sleep_for(sys, abort_us(10));
  s0.abort();  // rank 0's call has started and waits for rank 1
  npurt::event after = s0.launch(whole_device("after", 5));
  sys.run();
  REQUIRE(comm.records().size() == 1);
  const auto& r = comm.records()[0];
  CHECK_FALSE(r.error);
  CHECK(r.end > npurt::sim_time{abort_us(100)});
  CHECK(rec.named("behind").empty());
  REQUIRE(rec.named("after").size() == 1);
  CHECK(rec.named("after")[0].start >= r.end);
  std::error_code ec;
  CHECK_FALSE(behind.query(ec));
  CHECK(abort_errc(ec) == errc::operation_aborted);
  CHECK(after.query());
  CHECK_NOTHROW(s0.synchronize());
  CHECK_NOTHROW(s1.synchronize());
  CHECK_FALSE(comm.async_error());
  CHECK(abort_errc(heard) == errc::operation_aborted);
  REQUIRE(rec.named("after_wait").size() == 1);
  CHECK(rec.named("after_wait")[0].start >= r.end);
  CHECK(abort_thrown([&] { waiter.synchronize(); }) == errc::operation_aborted);
}

TEST_CASE("an abort that drops a queued collective call breaks its communicator", "[sim][abort][collective]") {
  npurt::system sys = abort_system(2);
  auto comm = npurt::communicator::init_all(sys);
  auto s0 = sys.device(0).make_stream();
  auto s1 = sys.device(1).make_stream();
  s1.launch(whole_device("late", 100));
  for (int i = 0; i < 2; ++i) {
    comm.all_reduce(nullptr, nullptr, 1 << 20, npurt::dtype::f32, npurt::reduce_op::sum, s0);
    comm.all_reduce(nullptr, nullptr, 1 << 20, npurt::dtype::f32, npurt::reduce_op::sum, s1);
  }
  npurt::sleep_for(sys, abort_us(10));
  s0.abort();  // drops rank 0's second call: the ranks' calls no longer pair up
  std::error_code ec;
  sys.run(ec);
  CHECK_FALSE(ec);  // no deadlock: nobody waits for the dropped call
  std::string message;
  CHECK(abort_errc(comm.async_error(&message)) == errc::operation_aborted);
  CHECK_THAT(message, ContainsSubstring("was aborted with an operation of communicator"));
  // Rank 1's calls fail; rank 0's running call, broken with them, fails too.
  CHECK(abort_thrown([&] { s1.synchronize(); }) == errc::operation_aborted);
  CHECK(abort_thrown([&] { s0.synchronize(); }) == errc::operation_aborted);
  // Later calls are refused at the call.
  CHECK(abort_thrown([&] { comm.all_reduce(nullptr, nullptr, 16, npurt::dtype::f32, npurt::reduce_op::sum, s0); }) ==
        errc::operation_aborted);
}

TEST_CASE("an aborted task takes its op-execute watchdog with it", "[sim][abort][fault]") {
  npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(1), npurt::fault_plan{})};
  REQUIRE_FALSE(sys.get_backend().set_op_execute_timeout(abort_us(50)));
  auto s = sys.device(0).make_stream();
  s.launch(whole_device("long", 1000));
  npurt::sleep_for(sys, abort_us(10));
  s.abort();
  sys.run();
  // The watchdog would have fired at 50 us and failed the kernel: the clock never moved there.
  CHECK(sys.now() == npurt::sim_time{abort_us(10)});
  CHECK_NOTHROW(s.synchronize());
  // The backend freed the cores: a whole-device kernel starts at once.
  abort_rows rec;
  sys.add_observer(rec);
  s.launch(whole_device("next", 5));
  sys.run();
  REQUIRE(rec.named("next").size() == 1);
  CHECK(rec.named("next")[0].start - npurt::sim_time{abort_us(10)} < abort_us(5));
}
