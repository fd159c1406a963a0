// The fault campaign: random faults of every kind over many seeded runs are all either recovered
// (to the fault-free parameters, bit for bit) or reported fatal; none corrupts silently; and the
// campaign is a function of its seed.
#include <npurt/models/fault_campaign.hpp>

#include <catch2/catch_test_macros.hpp>

namespace {

npurt::models::fault_campaign_options small() {
  npurt::models::fault_campaign_options o;
  o.runs = 6;
  o.steps = 8;
  o.checkpoint_every = 3;
  o.params = 256;
  o.rate = 0.03;
  o.seed = 5;
  return o;
}

}  // namespace

TEST_CASE("a fault campaign injects faults, recovers or reports every one, and corrupts nothing silently",
          "[fault][campaign]") {
  const auto r = npurt::models::run_fault_campaign(small());
  CHECK(r.runs == 6);
  CHECK(r.injected > 0);
  CHECK(r.detected > 0);
  CHECK(r.silent_corruptions == 0);
  CHECK(r.recovered <= r.detected);
  CHECK(r.lost_time_s >= 0);
  std::uint64_t kinds = 0;
  for (const auto& [k, n] : r.injected_by_kind) kinds += n;
  CHECK(kinds == r.injected);
}

TEST_CASE("a fault campaign run twice gives the same result", "[fault][campaign][determinism]") {
  const auto a = npurt::models::run_fault_campaign(small());
  const auto b = npurt::models::run_fault_campaign(small());
  CHECK(a.injected == b.injected);
  CHECK(a.detected == b.detected);
  CHECK(a.recovered == b.recovered);
  CHECK(a.fatal_runs == b.fatal_runs);
  CHECK(a.lost_time_s == b.lost_time_s);
  CHECK(a.injected_by_kind == b.injected_by_kind);
  CHECK(a.errors_by_code == b.errors_by_code);
  CHECK(a.actions == b.actions);
  auto other = small();
  other.seed = 6;
  const auto c = npurt::models::run_fault_campaign(other);
  CHECK((c.injected_by_kind != a.injected_by_kind || c.lost_time_s != a.lost_time_s));
}
