// session::run_with_recovery: a graph run that meets a transient fault is run again and gives
// the fault-free outputs; a fatal one is reported, not hidden.
#include "common.hpp"

#include <npurt/graph/session.hpp>

#include <catch2/catch_test_macros.hpp>

using namespace fault_test;
using npurt::errc;
using npurt::fault_plan;
using npurt::fault_spec;

namespace {

npurt::graph small_graph() {
  npurt::graph g("small");
  auto x = g.add_input("x", {4, 8}, npurt::dtype::f32);
  std::vector<double> wv(8 * 8);
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<double>(i % 5) - 2.0;
  auto w = g.add_constant("w", npurt::tensor({8, 8}, npurt::dtype::f32, wv));
  auto y = g.add_op("MatMul", {x, w}, {}, "mm");
  g.set_output(g.add_op("Relu", {y}, {}, "out"));
  return g;
}

std::vector<double> input() {
  std::vector<double> v(32);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 7) - 3.0;
  return v;
}

std::vector<double> run_once(const fault_plan& plan, npurt::recovery_strategy strategy,
                             std::vector<std::error_code>* recovered = nullptr) {
  npurt::system sys{preset(1, plan)};
  npurt::session s{sys};
  s.set_recovery_strategy(strategy);
  auto g = small_graph();
  auto c = s.compile(g);
  npurt::tensor x({4, 8}, npurt::dtype::f32, input());
  auto r = s.run_with_recovery(c, {{"x", x}});
  if (recovered) *recovered = s.recovered_errors();
  return r.outputs.begin()->second.to_vector();
}

}  // namespace

TEST_CASE("run_with_recovery retries a graph run that hit an AI core exception and returns the fault-free outputs",
          "[fault][recovery][session]") {
  const auto clean = run_once(fault_plan{}, {});
  std::vector<std::error_code> recovered;
  const auto faulty =
      run_once(fault_plan{}.add(fault_spec::aicore_exception(0).at_time(at(picoseconds{0}))), {}, &recovered);
  REQUIRE(recovered.size() == 1);
  CHECK(recovered[0] == errc::kernel_fault);
  CHECK(faulty == clean);
}

TEST_CASE("run_with_recovery retries a hang with the short watchdog", "[fault][recovery][session][hang]") {
  const auto clean = run_once(fault_plan{}, {});
  std::vector<std::error_code> recovered;
  const auto faulty =
      run_once(fault_plan{}.add(fault_spec::kernel_hang(0).at_time(at(picoseconds{0}))), {}, &recovered);
  REQUIRE(recovered.size() == 1);
  CHECK(recovered[0] == errc::task_timeout);
  CHECK(faulty == clean);
}

TEST_CASE("recovered_errors lists only what a retry got past; unrecovered_errors the rest",
          "[fault][recovery][session]") {
  npurt::recovery_strategy once;
  once.max_retries = 1;
  auto g = small_graph();
  npurt::tensor x({4, 8}, npurt::dtype::f32, input());
  {
    // One retry, and an AI core exception in each attempt (the retry starts after a 1 ms backoff,
    // the graph runs in microseconds): the run fails twice and gives up.
    npurt::system sys{preset(1, fault_plan{}
                                    .add(fault_spec::aicore_exception(0).at_time(at(picoseconds{0})))
                                    .add(fault_spec::aicore_exception(0).at_time(at(picoseconds{500'000'000}))))};
    npurt::session s{sys};
    s.set_recovery_strategy(once);
    auto c = s.compile(g);
    CHECK_THROWS_AS(s.run_with_recovery(c, {{"x", x}}), npurt::device_error);
    CHECK(s.recovered_errors().empty());
    REQUIRE(s.unrecovered_errors().size() == 2);
    CHECK(s.unrecovered_errors()[0] == errc::kernel_fault);
    CHECK(s.unrecovered_errors()[1] == errc::kernel_fault);
  }
  {
    // One: the retry completes the run.
    npurt::system sys{preset(1, fault_plan{}.add(fault_spec::aicore_exception(0).at_time(at(picoseconds{0}))))};
    npurt::session s{sys};
    s.set_recovery_strategy(once);
    auto c = s.compile(g);
    CHECK_NOTHROW(s.run_with_recovery(c, {{"x", x}}));
    REQUIRE(s.recovered_errors().size() == 1);
    CHECK(s.recovered_errors()[0] == errc::kernel_fault);
    CHECK(s.unrecovered_errors().empty());
  }
}

TEST_CASE("run_with_recovery reports a lost device and an abort policy instead of retrying",
          "[fault][recovery][session][errors]") {
  CHECK_THROWS_AS(run_once(fault_plan{}.add(fault_spec::hbm_ecc(0).at_time(at(picoseconds{0}))), {}),
                  npurt::device_error);
  npurt::recovery_strategy abort_all;
  abort_all.on_device_error = npurt::recovery_action::abort;
  try {
    (void)run_once(fault_plan{}.add(fault_spec::aicore_exception(0).at_time(at(picoseconds{0}))), abort_all);
    FAIL("the error was hidden");
  } catch (const npurt::device_error& e) { CHECK(e.code() == errc::kernel_fault); }
}

TEST_CASE("set_recovery_strategy refuses a strategy it could not carry out and keeps its own",
          "[fault][recovery][session][error]") {
  npurt::system sys{preset(1, fault_plan{})};
  npurt::session s{sys};
  npurt::recovery_strategy bad;
  bad.retry_timeout = npurt::picoseconds{0};
  CHECK_THROWS_AS(s.set_recovery_strategy(bad), npurt::caller_error);
  CHECK(s.get_recovery_strategy().retry_timeout == npurt::recovery_strategy{}.retry_timeout);
}

TEST_CASE("a session on a lost device refuses compile and run naming the call and what to do",
          "[fault][session][lost][errors]") {
  // An ECC error makes the device lost until it is reset (docs/faults.md). The session's calls
  // then said only what their first internal copy met ("npurt::stream::memcpy: device lost"),
  // not which call failed nor that a reset and a new session are the way back.
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::hbm_ecc(0).at_time(at(ms(1)))))};
  npurt::session s{sys};
  auto g = small_graph();
  auto c = s.compile(g);
  const std::vector<npurt::feed> in{{"x", npurt::tensor({4, 8}, npurt::dtype::f32, input())}};
  (void)s.run(c, in);  // before the fault
  npurt::stream other = sys.device(0).make_stream();
  other.launch(fixed_kernel(ms(2), "wait"));
  other.synchronize();  // now past the fault's time: the next memory task meets it
  CHECK_THROWS_AS(s.run(c, in), npurt::device_error);
  auto expect_lost = [](const char* call, auto&& f) {
    INFO(call);
    try {
      f();
      FAIL("accepted on a lost device");
    } catch (const npurt::device_error& e) {
      CHECK(e.code() == errc::device_lost);
      CHECK(e.status() == npurt::device_status::lost);
      CHECK(e.device() == 0);
      const std::string what = e.what();
      CHECK(what.find(std::string(call) + ": device 0 is lost") != std::string::npos);
      CHECK(what.find("reset it (device::reset) and make a new session") != std::string::npos);
    }
  };
  expect_lost("run", [&] { (void)s.run(c, in); });
  expect_lost("compile", [&] { (void)s.compile(g); });
  sys.device(0).reset();
  npurt::session fresh{sys};
  auto c2 = fresh.compile(g);
  CHECK(fresh.run(c2, in).outputs.at("out").to_vector() == run_once(fault_plan{}, {}));
}
