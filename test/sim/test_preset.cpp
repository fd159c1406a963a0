#include <npurt/sim/preset.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <sstream>
#include <string>

using namespace npurt;
using namespace npurt::sim;
using Catch::Matchers::ContainsSubstring;

namespace {

// 1-based line of the first line that starts with `prefix` (ignoring leading blanks).
std::size_t line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string l;
  std::size_t n = 0;
  while (std::getline(in, l)) {
    ++n;
    if (l.rfind(prefix, 0) == 0) return n;
  }
  return 0;
}

std::string replace_line(std::string text, const std::string& prefix, const std::string& with) {
  const auto pos = text.find("\n" + prefix);
  REQUIRE(pos != std::string::npos);
  const auto end = text.find('\n', pos + 1);
  return text.substr(0, pos + 1) + with + text.substr(end);
}

}  // namespace

TEST_CASE("the shipped preset files equal the built-in presets", "[sim][preset]") {
  CHECK(load_preset(std::string(NPURT_SIM_PRESETS_DIR) + "/ascend910.ini") == presets::ascend910());
  CHECK(load_preset(std::string(NPURT_SIM_PRESETS_DIR) + "/ascend910b.ini") == presets::ascend910b());
}

TEST_CASE("a preset written as INI reads back equal", "[sim][preset]") {
  for (const preset& p : {presets::ascend910(8), presets::ascend910b(16), presets::ascend910(3)}) {
    CHECK(parse_preset(to_ini(p)) == p);
  }
  preset odd = presets::ascend910b(2);
  odd.clock_hz = 1234.5e6;
  odd.roce_bandwidth = 3.3e9;
  odd.kernel_launch_latency = picoseconds{1500};
  odd.hccs_groups = {{1}, {0}};
  CHECK(parse_preset(to_ini(odd)) == odd);
}

TEST_CASE("the built-in presets hold the reference hardware parameters", "[sim][preset]") {
  const preset a = presets::ascend910(8);
  CHECK(a.ai_core_count == 32);
  CHECK(a.cube_m * a.cube_n * a.cube_k == 4096);
  CHECK(a.vector_lanes == 128);
  CHECK(a.l0a_bytes == 65536);
  CHECK(a.l0c_bytes == 262144);
  CHECK(a.l1_bytes == 1048576);
  CHECK(a.ub_bytes == 262144);
  CHECK(a.l2_bytes == 33554432);
  CHECK(a.memory_bytes == (32ull << 30));
  CHECK(a.hccs_bandwidth == 30e9);
  // Two 4-device full-mesh groups joined over PCIe.
  REQUIRE(a.hccs_groups.size() == 2);
  CHECK(a.hccs_groups[0] == std::vector<device_id>{0, 1, 2, 3});
  CHECK(a.hccs_groups[1] == std::vector<device_id>{4, 5, 6, 7});
  CHECK(a.peak_fp16_flops() == 32.0 * 8192 * 1e9);

  const preset b = presets::ascend910b(8);
  CHECK(b.separated_cores);
  CHECK(b.ai_core_count == 24);
  CHECK(b.vector_core_count == 48);
  CHECK(b.clock_hz == 1800e6);
  CHECK(b.l0c_bytes == 131072);
  CHECK(b.l1_bytes == 524288);
  CHECK(b.ub_bytes == 196608);
  CHECK(b.memory_bytes == (64ull << 30));
  REQUIRE(b.hccs_groups.size() == 1);
  CHECK(b.hccs_groups[0].size() == 8);
}

TEST_CASE("every preset key can be listed, read and changed", "[sim][preset]") {
  preset p = presets::ascend910();
  const auto& keys = preset_keys();
  CHECK(keys.size() > 40);
  const std::string ini = to_ini(p);
  for (const auto& k : keys) {
    // Every key appears in the INI text with the value get_value reports.
    CHECK_THAT(ini, ContainsSubstring(std::string(k.key) + " = " + get_value(p, k.path())));
  }
  REQUIRE_FALSE(set_value(p, "AICoreSpec.cube_freq", "1500"));
  CHECK(p.clock_hz == 1500e6);
  REQUIRE_FALSE(set_value(p, "l2_size", "1024"));  // a bare key works when unambiguous
  CHECK(p.l2_bytes == 1024);
  std::string what;
  const preset before = p;
  CHECK(set_value(p, "AICoreSpec.cube_frq", "1", &what) == errc::invalid_config);
  CHECK_THAT(what, ContainsSubstring("cube_frq"));
  CHECK(set_value(p, "AICoreSpec.l1_size", "-3", &what) == errc::parse_error);
  CHECK_THAT(what, ContainsSubstring("AICoreSpec.l1_size"));
  CHECK(p == before);
}

TEST_CASE("a malformed preset file gets an error naming the key and line", "[sim][preset]") {
  const std::string good = to_ini(presets::ascend910());
  std::error_code ec;
  std::string what;

  SECTION("a bad value") {
    const std::string text = replace_line(good, "cube_freq", "cube_freq = fast");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.cube_freq"));
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "cube_freq"))));
  }
  SECTION("a missing key") {
    const std::string text = replace_line(good, "ub_size", "");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.ub_size"));
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "[AICoreSpec]"))));
  }
  SECTION("an unknown key") {
    const std::string text = replace_line(good, "ub_size", "ub_sise = 4");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.ub_sise"));
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "ub_sise"))));
  }
  SECTION("a syntax error") {
    const std::string text = replace_line(good, "ub_size", "this line has no equals sign");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "this line"))));
  }
  SECTION("a value out of range") {
    const std::string text = replace_line(good, "hccs_groups", "hccs_groups = 0,1");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("hccs_groups"));
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "hccs_groups"))));
  }
  SECTION("the throwing overload raises a caller_error with the same message") {
    const std::string text = replace_line(good, "l1_size", "l1_size = 1MB");
    CHECK_THROWS_AS(parse_preset(text), caller_error);
    try {
      (void)parse_preset(text);
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::parse_error);
      CHECK_THAT(e.what(), ContainsSubstring("AICoreSpec.l1_size"));
    }
  }
  SECTION("a missing file") {
    (void)load_preset("/nonexistent/preset.ini", ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("/nonexistent/preset.ini"));
  }
}

TEST_CASE("a preset file may start from a built-in and change a few keys", "[sim][preset]") {
  const preset p = parse_preset("[SoCInfo]\nbase = ascend910\n[AICoreSpec]\ncube_freq = 1200\n[Interconnect]\ndevice_count = 8\n"
                                "hccs_groups = 0-3;4-7\n");
  preset expected = presets::ascend910(8);
  expected.clock_hz = 1200e6;
  CHECK(p == expected);
}

TEST_CASE("device properties come from the preset", "[sim][preset]") {
  const preset p = presets::ascend910b();
  const device_properties d = p.properties();
  CHECK(d.name == "ascend910b");
  CHECK(d.ai_core_count == 24);
  CHECK(d.vector_core_count == 48);
  CHECK(d.separated_cores);
  CHECK(d.hbm_bandwidth == p.hbm_bandwidth);
  CHECK(d.peak_fp16_flops == 24.0 * 8192 * 1.8e9);
}
