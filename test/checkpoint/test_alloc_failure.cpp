// Checkpoint entry points when the host allocator fails: the typed resource error, never a
// std::bad_alloc. This program replaces operator new, so that a test can make every large
// allocation fail without gigabytes of data.
#include "common.hpp"

#include <npurt/npurt.hpp>

#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <system_error>
#include <vector>

namespace {

std::atomic<std::size_t> fail_from{SIZE_MAX};  // operator new throws for this many bytes or more

/// Makes operator new fail for `n` bytes or more while it lives.
struct failing_allocator {
  explicit failing_allocator(std::size_t n) { fail_from = n; }
  ~failing_allocator() { fail_from = SIZE_MAX; }
  failing_allocator(const failing_allocator&) = delete;
  failing_allocator& operator=(const failing_allocator&) = delete;
};

/// The code of the npurt error `f` throws; fails the test if it throws std::bad_alloc instead.
template <class F>
std::error_code thrown_code(F&& f) {
  try {
    f();
  } catch (const npurt::error& e) { return e.code(); } catch (const std::bad_alloc&) {
    FAIL("std::bad_alloc escaped");
  }
  return {};
}

constexpr std::size_t big = std::size_t(1) << 20;

}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (n >= fail_from.load()) throw std::bad_alloc();
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::dtype;
using npurt::errc;

TEST_CASE("save, serialize, load and restore report a failed host allocation as resource_exhausted",
          "[checkpoint][errors][memory]") {
  scratch_dir dir("alloc");
  const auto path = dir / "a.ckpt";
  auto ck = npurt::create_checkpoint();
  ck.add_tensor("w", dtype::u8, {static_cast<std::int64_t>(big)}, std::vector<std::uint8_t>(big, 3));
  SECTION("save with a metadata string whose manifest copy cannot be allocated") {
    ck.set_metadata("note", std::string(big, 'x'));
    const failing_allocator fail(big / 2);
    CHECK(thrown_code([&] { ck.save(path); }) == errc::resource_exhausted);
    std::error_code ec;
    ck.save(path, ec);
    CHECK(ec == errc::resource_exhausted);
    CHECK(dir.entries().empty());
  }
  SECTION("serialize, whose output buffer cannot be allocated") {
    const failing_allocator fail(big / 2);
    CHECK(thrown_code([&] { (void)ck.serialize(); }) == errc::resource_exhausted);
  }
  SECTION("load and restore of a file whose manifest cannot be allocated") {
    ck.set_metadata("note", std::string(big, 'x'));
    ck.save(path);
    const failing_allocator fail(big / 2);
    CHECK(thrown_code([&] { (void)checkpoint::load(path); }) == errc::resource_exhausted);
    std::error_code ec;
    (void)checkpoint::load(path, ec);
    CHECK(ec == errc::resource_exhausted);
    auto other = npurt::create_checkpoint();
    CHECK(thrown_code([&] { other.restore(path); }) == errc::resource_exhausted);
    other.restore(path, ec);
    CHECK(ec == errc::resource_exhausted);
    CHECK(other.metadata().empty());
  }
}
