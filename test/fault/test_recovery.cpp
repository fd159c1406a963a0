// Recovery: each fault kind, met by the data-parallel training loop, is handled by the action
// its strategy names, and the run resumes from its last checkpoint to the fault-free result, bit
// for bit. The fault-free result itself is checked against a host reference.
#include "common.hpp"

#include <npurt/models/dp_training.hpp>
#include <npurt/recovery.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <string>

using namespace fault_test;
using npurt::errc;
using npurt::fault_plan;
using npurt::fault_spec;
using npurt::recovery_action;
using npurt::models::dp_training_options;
using npurt::models::dp_training_report;
using npurt::models::train_data_parallel;

namespace {

dp_training_options options(std::vector<npurt::device_id> ranks, std::vector<npurt::device_id> spares = {}) {
  dp_training_options o;
  o.ranks = std::move(ranks);
  o.spares = std::move(spares);
  o.params = 1024;
  o.shards = 8;
  o.steps = 12;
  o.checkpoint_every = 4;
  o.data_seed = 7;
  return o;
}

dp_training_report train(int devices, const fault_plan& plan, const dp_training_options& o,
                         picoseconds heartbeat = picoseconds{0}) {
  npurt::system sys{preset(devices, plan)};
  if (heartbeat.count() > 0) npurt::sim::faults_of(sys).enable_fault_detection(heartbeat);
  return train_data_parallel(sys, o);
}

/// The same loop on the host: w -= lr * (sum of the step's shards), in f32.
std::vector<float> host_reference(const dp_training_options& o) {
  auto w = npurt::models::dp_detail::shard_data(o.data_seed, ~0ULL, 0, o.params);
  for (std::uint32_t step = 0; step < o.steps; ++step) {
    std::vector<float> g(o.params, 0.0f);
    for (std::uint32_t j = 0; j < o.shards; ++j) {
      const auto x = npurt::models::dp_detail::shard_data(o.data_seed, step, j, o.params);
      for (std::size_t i = 0; i < o.params; ++i) g[i] += x[i];
    }
    for (std::size_t i = 0; i < o.params; ++i) w[i] -= o.lr * g[i];
  }
  return w;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const dp_training_report& clean_run() {
  static const dp_training_report r = train(5, fault_plan{}, options({0, 1, 2, 3}, {4}));
  return r;
}

sim_time mid_run() { return clean_run().started + (clean_run().finished - clean_run().started) / 2; }

}  // namespace

TEST_CASE("the fault-free training loop computes the host reference exactly", "[fault][recovery][training]") {
  const auto& r = clean_run();
  REQUIRE_FALSE(r.fatal);
  CHECK(r.steps_done == 12);
  CHECK(r.failures == 0);
  CHECK(r.checkpoints == 3);
  CHECK(bit_identical(r.params, host_reference(options({0, 1, 2, 3}))));
}

TEST_CASE("recovery classes and backoff follow the strategy", "[fault][recovery][policy]") {
  npurt::recovery_strategy s;
  CHECK(s.action_for(make_error_code(errc::kernel_fault)) == recovery_action::retry);
  CHECK(s.action_for(make_error_code(errc::out_of_memory)) == recovery_action::gc_and_retry);
  CHECK(s.action_for(make_error_code(errc::task_timeout)) == recovery_action::retry_with_timeout);
  CHECK(s.action_for(make_error_code(errc::lost_heartbeat)) == recovery_action::restart);
  CHECK(s.action_for(make_error_code(errc::invalid_argument)) == recovery_action::abort);
  CHECK(s.backoff_for(1) == s.backoff);
  CHECK(s.backoff_for(3) == s.backoff * 4);
  CHECK(s.backoff_for(200) == s.max_backoff);  // saturates instead of overflowing
}

TEST_CASE("a strategy that cannot be carried out is refused with the field it gets wrong",
          "[fault][recovery][policy][error]") {
  CHECK_FALSE(npurt::recovery_strategy{}.validate());
  const auto refused = [](npurt::recovery_strategy s, const char* field) {
    std::string what;
    CHECK(s.validate(&what) == errc::invalid_argument);
    CHECK(what.find(field) != std::string::npos);
  };
  npurt::recovery_strategy s;
  s.retry_timeout = npurt::picoseconds{0};
  refused(s, "retry_timeout");
  s = {};
  s.backoff = npurt::picoseconds{-1};
  refused(s, "backoff");
  s = {};
  s.max_backoff = npurt::picoseconds{-1};
  refused(s, "max_backoff");
  s = {};
  s.backoff_factor = 0.5;
  refused(s, "backoff_factor");
  s.backoff_factor = std::nan("");
  refused(s, "backoff_factor");
  s = {};
  s.on_timeout = static_cast<recovery_action>(42);
  refused(s, "action");
  // The training loop refuses it before touching a device.
  npurt::system sys{preset(2, fault_plan{})};
  auto o = options({0, 1});
  o.strategy.retry_timeout = npurt::picoseconds{-5};
  CHECK_THROWS_AS(train_data_parallel(sys, o), npurt::caller_error);
}

TEST_CASE("an AI core exception is retried and the run ends bit-identical to the fault-free one",
          "[fault][recovery][aicore]") {
  const auto r =
      train(5, fault_plan{}.add(fault_spec::aicore_exception(1).at_time(mid_run())), options({0, 1, 2, 3}, {4}));
  REQUIRE_FALSE(r.fatal);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == errc::kernel_fault);
  CHECK(r.actions[0] == recovery_action::retry);
  CHECK(r.retries == 1);
  CHECK(r.finished > clean_run().finished);  // the retry cost time...
  CHECK(bit_identical(r.params, clean_run().params));  // ...and nothing else
}

TEST_CASE("a hanging kernel is cut by the watchdog and retried with a short one", "[fault][recovery][hang]") {
  const auto r = train(5, fault_plan{}.add(fault_spec::kernel_hang(2).at_time(mid_run())), options({0, 1, 2, 3}, {4}));
  REQUIRE_FALSE(r.fatal);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == errc::task_timeout);
  CHECK(r.actions[0] == recovery_action::retry_with_timeout);
  CHECK(r.finished - clean_run().finished >= sec(68));  // the default watchdog fired
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("an ECC error restarts the device and resumes from the checkpoint", "[fault][recovery][ecc]") {
  const auto r = train(5, fault_plan{}.add(fault_spec::hbm_ecc(3).at_time(mid_run())), options({0, 1, 2, 3}, {4}));
  REQUIRE_FALSE(r.fatal);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == errc::hbm_ecc_error);
  CHECK(r.actions[0] == recovery_action::restart);
  CHECK(r.restarts == 1);
  CHECK(r.replayed_steps >= 1);
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("a lost device is detected by the heartbeat and its rank fails over to the spare",
          "[fault][recovery][heartbeat][failover]") {
  auto o = options({0, 1, 2, 3}, {4});
  o.strategy.on_device_lost = recovery_action::failover;
  const auto r = train(5, fault_plan{}.add(fault_spec::lost_heartbeat(1).at_time(mid_run())), o, ms(1));
  REQUIRE_FALSE(r.fatal);
  REQUIRE(!r.errors.empty());
  CHECK(r.errors[0] == errc::lost_heartbeat);
  CHECK(r.actions[0] == recovery_action::failover);
  CHECK(r.final_ranks == std::vector<npurt::device_id>{0, 4, 2, 3});
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("a lost device can be degraded away: fewer ranks, the same result", "[fault][recovery][degrade]") {
  auto o = options({0, 1, 2, 3});
  o.strategy.on_device_lost = recovery_action::degrade;
  const auto r = train(5, fault_plan{}.add(fault_spec::lost_heartbeat(2).at_time(mid_run())), o, ms(1));
  REQUIRE_FALSE(r.fatal);
  CHECK(r.degrades == 1);
  CHECK(r.final_ranks == std::vector<npurt::device_id>{0, 1, 3});
  CHECK(bit_identical(r.params, clean_run().params));  // integer shards: exact in any split
}

TEST_CASE("a transient out-of-memory is collected and retried without replaying", "[fault][recovery][oom]") {
  const auto r = train(5, fault_plan{}.add(fault_spec::transient_oom(0, 1).at_time(mid_run())), options({0, 1, 2, 3}));
  REQUIRE_FALSE(r.fatal);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == errc::out_of_memory);
  CHECK(r.actions[0] == recovery_action::gc_and_retry);
  CHECK(r.replayed_steps == 0);  // nothing had been enqueued
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("a link down and a network interruption are retried with backoff until the link is back",
          "[fault][recovery][link]") {
  SECTION("link down") {
    const auto r =
        train(5, fault_plan{}.add(fault_spec::link_down(1, ms(2)).at_time(mid_run())), options({0, 1, 2, 3}));
    REQUIRE_FALSE(r.fatal);
    REQUIRE(!r.errors.empty());
    CHECK(r.errors[0] == errc::link_failure);
    CHECK(r.retries >= 1);
    CHECK(bit_identical(r.params, clean_run().params));
  }
  SECTION("network interruption between two 2-device servers") {
    auto spec = fault_spec::network_interruption(0, ms(2), 2).at_time(mid_run());
    const auto r = train(5, fault_plan{}.add(spec), options({0, 1, 2, 3}));
    REQUIRE_FALSE(r.fatal);
    REQUIRE(!r.errors.empty());
    CHECK(r.errors[0] == errc::link_failure);
    CHECK(bit_identical(r.params, clean_run().params));
  }
}

TEST_CASE("a throttled device is reported by the slow-device detector, without errors",
          "[fault][recovery][throttle][detection]") {
  const auto r = train(5, fault_plan{}.add(fault_spec::thermal_throttle(2, 3.0, sec(1)).at_time(at(ms(0)))),
                       options({0, 1, 2, 3}));
  REQUIRE_FALSE(r.fatal);
  CHECK(r.failures == 0);
  REQUIRE(!r.slow_devices.empty());
  for (const auto& s : r.slow_devices) {
    CHECK(s.device == 2);
    CHECK(s.ratio > 2.0);
  }
  CHECK(r.finished > clean_run().finished);  // peers waited for it at every all-reduce
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("an abort strategy stops at the first error and reports it", "[fault][recovery][abort]") {
  auto o = options({0, 1, 2, 3});
  o.strategy.on_device_error = recovery_action::abort;
  const auto r = train(5, fault_plan{}.add(fault_spec::aicore_exception(0).at_time(mid_run())), o);
  CHECK(r.fatal == errc::kernel_fault);
  CHECK(r.steps_done < 12);
  CHECK(r.params.empty());
}

TEST_CASE("retries are bounded: a persistent error escalates to restart", "[fault][recovery][bounded]") {
  auto o = options({0, 1, 2, 3});
  o.strategy.max_retries = 2;
  // Device 1's link goes down at its first task, for less than the first backoff, three times:
  // three failed attempts in a row.
  const auto r = train(5, fault_plan{}.add(fault_spec::link_down(1, picoseconds{200'000'000}).random(1.0, 3)), o);
  REQUIRE_FALSE(r.fatal);
  REQUIRE(r.actions.size() >= 3);
  CHECK(r.actions[0] == recovery_action::retry);
  CHECK(r.actions[1] == recovery_action::retry);
  // Past max_retries the error is persistent: every later attempt restarts (no backoff, so one
  // window may fail several of them).
  for (std::size_t i = 2; i < r.actions.size(); ++i) CHECK(r.actions[i] == recovery_action::restart);
  CHECK(r.restarts == r.actions.size() - 2);
  CHECK(bit_identical(r.params, clean_run().params));
}

TEST_CASE("a run with faults is deterministic: the same plan twice gives the same report", "[fault][determinism]") {
  fault_plan plan;
  plan.seed = 99;
  plan.add(fault_spec::aicore_exception(1).random(0.05, 2));
  plan.add(fault_spec::link_down(2, ms(1)).random(0.02));
  const auto a = train(5, plan, options({0, 1, 2, 3}, {4}), ms(1));
  const auto b = train(5, plan, options({0, 1, 2, 3}, {4}), ms(1));
  CHECK(a.errors == b.errors);
  CHECK(a.actions == b.actions);
  CHECK(a.finished == b.finished);
  CHECK(bit_identical(a.params, b.params));
}
