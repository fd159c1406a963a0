// Error codes made inside the compiled simulator library and codes made by the caller name the
// same error_category object. Built header-only and against lib/ (test_core_separate): a library
// compiled with other NPURT_* flags than its consumer would carry a second category.
#include <npurt/backend.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/sim/backend.hpp>
#include <npurt/sim/preset.hpp>

#include <catch2/catch_test_macros.hpp>

#include <string>
#include <system_error>

namespace {

TEST_CASE("a code the simulator returns compares equal to npurt::errc", "[core][error][sim]") {
  auto backend = npurt::sim::make_backend(npurt::sim::presets::ascend910(1));
  std::error_code ec = backend->validate(3, npurt::kernel_desc{});
  REQUIRE(ec);
  CHECK(&ec.category() == &npurt::error_category());
  CHECK(ec == npurt::errc::invalid_device);
  CHECK(ec == npurt::error_class::caller);
  CHECK_FALSE(ec == npurt::errc::invalid_config);
}

TEST_CASE("an exception the simulator throws carries npurt's category", "[core][error][sim]") {
  try {
    (void)npurt::sim::presets::by_name("no-such-npu");
    FAIL("by_name accepted an unknown preset");
  } catch (const npurt::caller_error& e) {
    CHECK(&e.code().category() == &npurt::error_category());
    CHECK(e.code() == npurt::errc::invalid_config);
  }
  npurt::sim::preset p = npurt::sim::presets::ascend910(1);
  std::string what;
  std::error_code ec = npurt::sim::set_value(p, "NoSection.no_key", "1", &what);
  CHECK(ec == npurt::errc::invalid_config);
  CHECK(ec == npurt::error_class::caller);
}

}  // namespace
