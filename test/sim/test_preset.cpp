#include <npurt/sim/preset.hpp>
#include <npurt/sim/sim.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

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
  const preset p = parse_preset(
      "[SoCInfo]\nbase = ascend910\n[AICoreSpec]\ncube_freq = 1200\n[Interconnect]\ndevice_count = 8\n"
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

TEST_CASE(
    "every numeric preset key rejects zero, negative, NaN, infinite, denormal and absurd values, naming the "
    "key and its line",
    "[sim][preset][ranges]") {
  const std::string good = to_ini(presets::ascend910(8));
  struct probe {
    const char* text;
    double value;
  };
  const probe probes[] = {{"0", 0.0},
                          {"-1", -1.0},
                          {"nan", std::numeric_limits<double>::quiet_NaN()},
                          {"inf", std::numeric_limits<double>::infinity()},
                          {"-inf", -std::numeric_limits<double>::infinity()},
                          {"1e-310", 1e-310},
                          {"1e-300", 1e-300},
                          {"1e300", 1e300},
                          {"1e15", 1e15},
                          {"18446744073709551616", 18446744073709551616.0}};
  int rejected = 0;
  for (const auto& k : preset_keys()) {
    if (!k.numeric) continue;
    CHECK(k.min >= 0);
    CHECK(k.max >= k.min);
    CHECK(std::isfinite(k.max));
    for (const auto& pr : probes) {
      // A value the documented range admits is no error (0 for a latency, say); a positive
      // value below 0.001 never is a usable one.
      const bool admitted =
          std::isfinite(pr.value) && pr.value >= k.min && pr.value <= k.max && (pr.value == 0 || pr.value >= 1e-3);
      if (admitted) continue;
      const std::string line_text = std::string(k.key) + " = " + pr.text;
      const std::string text = replace_line(good, std::string(k.key) + " =", line_text);
      INFO(k.path() << " = " << pr.text);
      std::error_code ec;
      std::string what;
      (void)parse_preset(text, ec, &what);
      CHECK((ec == errc::parse_error || ec == errc::invalid_config));
      CHECK_THAT(what, ContainsSubstring(k.path()));
      CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, line_text))));
      ++rejected;
    }
  }
  CHECK(rejected > 200);
}

TEST_CASE("preset counts are bounded by what the simulator supports before anything is allocated",
          "[sim][preset][ranges]") {
  const std::string good = to_ini(presets::ascend910(8));
  std::error_code ec;
  std::string what;
  SECTION("a billion devices") {
    (void)parse_preset(replace_line(good, "device_count =", "device_count = 1000000000"), ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("Interconnect.device_count"));
  }
  SECTION("a billion devices on top of a built-in") {
    const std::string text = "[SoCInfo]\nbase = ascend910\n[Interconnect]\ndevice_count = 1000000000\n";
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("Interconnect.device_count"));
    CHECK_THAT(what, ContainsSubstring("line 4"));
  }
  SECTION("300 HCCS groups of a million devices") {
    std::string groups = "hccs_groups = ";
    for (int g = 0; g < 300; ++g) {
      if (g) groups += ';';
      groups += std::to_string(g);
      groups += '-';
      groups += std::to_string(g + 1'000'000);
    }
    (void)parse_preset(replace_line(good, "hccs_groups =", groups), ec, &what);
    CHECK(ec);
    CHECK_THAT(what, ContainsSubstring("Interconnect.hccs_groups"));
    CHECK(what.size() < 400);  // the value is quoted by a prefix only
  }
  SECTION("a launch latency that would saturate virtual time") {
    (void)parse_preset(replace_line(good, "kernel_launch_latency =", "kernel_launch_latency = 1e15"), ec, &what);
    CHECK(ec);
    CHECK_THAT(what, ContainsSubstring("Runtime.kernel_launch_latency"));
  }
  SECTION("bandwidths and clocks of 1e-300") {
    (void)parse_preset(replace_line(good, "hbm_bandwidth =", "hbm_bandwidth = 1e-300"), ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("Memory.hbm_bandwidth"));
    (void)parse_preset(replace_line(good, "cube_freq =", "cube_freq = 1e-300"), ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.cube_freq"));
  }
  SECTION("built-ins with too many devices") {
    CHECK_THROWS_AS(presets::ascend910(1'000'000'000), caller_error);
    CHECK_THROWS_AS(presets::ascend910b(0), caller_error);
    CHECK(presets::ascend910(static_cast<int>(max_device_count)).device_count == max_device_count);
  }
  SECTION("a programmatic preset out of range is refused by the simulator") {
    preset p = presets::ascend910();
    p.pcie_bandwidth = std::numeric_limits<double>::denorm_min();
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("Interconnect.pcie_bandwidth"));
    CHECK_THROWS_AS(make_backend(p), caller_error);
  }
}

TEST_CASE("duplicate preset keys and sections are errors naming them", "[sim][preset]") {
  const std::string good = to_ini(presets::ascend910());
  std::error_code ec;
  std::string what;
  SECTION("a key given twice") {
    const std::string text = replace_line(good, "ub_size =", "ub_size = 262144\nub_size = 262144");
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.ub_size"));
    CHECK_THAT(what, ContainsSubstring("line " + std::to_string(line_starting(text, "ub_size") + 1)));
  }
  SECTION("a section given twice") {
    const std::string text = good + "\n[Runtime]\ncopy_engine_channels = 1\n";
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("[Runtime]"));
  }
}

TEST_CASE("a preset file is read no further than a preset may be long", "[sim][preset]") {
  SECTION("an endless file is refused, not read until memory runs out") {
    // In a child: the unbounded read never returns, and the parent ends it.
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      std::error_code ec;
      std::string what;
      (void)load_preset("/dev/zero", ec, &what);
      _exit(ec == errc::parse_error && what.find("larger than 1048576 bytes") != std::string::npos ? 0 : 1);
    }
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 300 && done == 0; ++i) {
      done = waitpid(child, &status, WNOHANG);
      if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (done == 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL("load_preset(\"/dev/zero\") did not return within 30 s");
    }
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  SECTION("a file just over the limit is refused by its size, a directory as unreadable") {
    const auto dir = std::filesystem::temp_directory_path() / ("npurt-preset-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const auto big = dir / "big.ini";
    {
      std::ofstream out(big, std::ios::binary);
      out << to_ini(presets::ascend910()) << std::string((1u << 20) + 1, ' ');
    }
    std::error_code ec;
    std::string what;
    (void)load_preset(big, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("larger than 1048576 bytes"));
    (void)load_preset(dir, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("cannot read preset file"));
    CHECK_THAT(what, ContainsSubstring("Is a directory"));  // the system's reason
    (void)load_preset(dir / "missing.ini", ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("missing.ini: No such file or directory"));
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("L0A, L0B and L1 must hold a double-buffered fractal step of every cube dtype", "[sim][preset]") {
  // A fractal of A is cube_m x K elements, of B K x cube_n, K and the element size the dtype's:
  // FP16 16 x 2 bytes, FP32 cube_k_size_fp32 x 4, INT8 cube_k_size_int8 x 1.
  std::string what;
  SECTION("an FP32 K that two fractals of L0A cannot hold") {
    preset p = presets::ascend910();
    p.cube_k_fp32 = 256;  // an FP32 fractal of A: 16 x 256 x 4 = 16384 bytes
    p.l0a_bytes = 16384;
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.l0_a_size must hold two FP32 fractals"));
    CHECK_THAT(what, ContainsSubstring("= 32768 bytes"));
    p.l0a_bytes = 32768;
    p.l0b_bytes = 16384;
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.l0_b_size must hold two FP32 fractals"));
    p.l0b_bytes = 32768;
    CHECK_FALSE(check(p));
  }
  SECTION("an INT8 K that two fractals of L0A cannot hold") {
    preset p = presets::ascend910();
    p.cube_k_int8 = 512;  // 16 x 512 x 1 = 8192 bytes
    p.l0a_bytes = p.l0b_bytes = 8192;
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.l0_a_size must hold two INT8 fractals"));
  }
  SECTION("an L1 that cannot stage two fractals of A and two of B") {
    preset p = presets::ascend910();
    p.l0a_bytes = p.l0b_bytes = p.l1_bytes = 1024;  // two FP16 fractals each; L1 needs 2 x (512 + 512)
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.l1_size must hold two FP16 fractals of A and two of B"));
    CHECK_THAT(what, ContainsSubstring("= 2048 bytes"));
    p.l1_bytes = 2048;
    CHECK_FALSE(check(p));
  }
  SECTION("the INI file's error names the key and its line") {
    const std::string text =
        "[SoCInfo]\nbase = ascend910\n[AICoreSpec]\nl0_a_size = 1024\nl0_b_size = 1024\n"
        "l1_size = 1024\n";
    std::error_code ec;
    (void)parse_preset(text, ec, &what);
    CHECK(ec == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("AICoreSpec.l1_size"));
    CHECK_THAT(what, ContainsSubstring("line 6"));
  }
}

// A name is text that reaches C strings, traces and messages: a NUL byte would cut it short in
// some of them and not in others.
TEST_CASE("a preset name holding a NUL byte is refused, naming the field", "[sim][preset]") {
  using namespace std::string_literals;
  std::string what;
  SECTION("check, and the backend built from the preset") {
    preset p = presets::ascend910();
    p.name = "my\0chip"s;
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("SoCInfo.name holds a NUL byte (at byte 2)"));
    CHECK(what.find('\0') == std::string::npos);  // the message shows it escaped: my\x00chip
    CHECK_THAT(what, ContainsSubstring("preset 'my\\x00chip'"));
    CHECK_THROWS_AS(make_backend(p), caller_error);
    p = presets::ascend910();
    p.soc_version = "Ascend910A\0"s;
    CHECK(check(p, &what) == errc::invalid_config);
    CHECK_THAT(what, ContainsSubstring("SoCInfo.soc_version holds a NUL byte (at byte 10)"));
  }
  SECTION("set_value, which leaves the preset as it was") {
    preset p = presets::ascend910();
    CHECK(set_value(p, "SoCInfo.name", "my\0chip"s, &what) == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("bad value 'my\\x00chip' for SoCInfo.name (text; a NUL byte is not text)"));
    CHECK(p.name == "ascend910");
  }
  SECTION("an INI file") {
    std::error_code ec;
    (void)parse_preset("[SoCInfo]\nbase = ascend910\nname = my\0chip\n"s, ec, &what);
    CHECK(ec == errc::parse_error);
    CHECK_THAT(what, ContainsSubstring("for SoCInfo.name (text; a NUL byte is not text)"));
    CHECK_THAT(what, ContainsSubstring("line 3"));
  }
}

TEST_CASE("coupled cores whose counts differ are an error naming both counts and the line the file set",
          "[sim][preset]") {
  std::error_code ec;
  std::string what;
  // The base's vector_core_cnt (32) stays; the file changed ai_core_cnt on line 3.
  (void)parse_preset("[SoCInfo]\nbase = ascend910\nai_core_cnt = 16\n", ec, &what);
  CHECK(ec == errc::invalid_config);
  CHECK_THAT(what, ContainsSubstring("SoCInfo.vector_core_cnt 32 must equal SoCInfo.ai_core_cnt 16"));
  CHECK_THAT(what, ContainsSubstring("(line 3)"));
  // The file changed vector_core_cnt on line 4 instead.
  (void)parse_preset("[SoCInfo]\nbase = ascend910\n; a comment\nvector_core_cnt = 8\n", ec, &what);
  CHECK(ec == errc::invalid_config);
  CHECK_THAT(what, ContainsSubstring("SoCInfo.vector_core_cnt 8 must equal SoCInfo.ai_core_cnt 32"));
  CHECK_THAT(what, ContainsSubstring("(line 4)"));
}
