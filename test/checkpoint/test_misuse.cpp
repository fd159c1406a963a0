// Checkpoint API misuse: arguments a careless or hostile caller passes.
#include "common.hpp"

#include <npurt/npurt.hpp>

#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::dtype;
using npurt::errc;

namespace {

checkpoint misuse_sample() {
  auto ck = npurt::create_checkpoint();
  ck.add_tensor("w", dtype::f32, {2}, std::vector<float>{1.0f, 2.0f});
  ck.set_metadata("step", 7);
  return ck;
}

}  // namespace

TEST_CASE("a path with an embedded NUL is refused, not cut short at the NUL", "[checkpoint][errors]") {
  scratch_dir dir("nul");
  const std::string real = (dir / "a.ckpt").string();
  const std::filesystem::path with_nul = real + std::string("\0.evil", 6);
  std::error_code ec;
  misuse_sample().save(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(misuse_sample().save(with_nul), npurt::caller_error);
  CHECK(dir.entries().empty());

  misuse_sample().save(real);
  auto c = checkpoint::load(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(checkpoint::load(with_nul), npurt::caller_error);
  checkpoint r;
  r.restore(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(r.tensors().empty());
}

TEST_CASE("copying an empty tensor back to the device is an empty task and not a refused copy",
          "[checkpoint][device]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto ck = misuse_sample();
  ck.add_tensor("empty", dtype::f32, {3, 0}, std::vector<float>{});
  const checkpoint back = checkpoint::parse(ck.serialize());
  void* d = dev.malloc(64);
  npurt::event e;
  REQUIRE_NOTHROW(e = back.copy_to_device("empty", d, 64, s));
  s.synchronize();
  CHECK(e.query());
}
