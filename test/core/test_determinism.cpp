#include <npurt/system.hpp>

#include "common.hpp"

#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;

namespace {

// A program with several devices, streams, cross-stream and cross-device waits, callbacks and
// awaited operations, whose task list must come out the same every time.
std::vector<task_row> program() {
  recorder rec;
  npurt::system sys{simple(3, ns(300))};
  sys.add_observer(rec);
  std::vector<npurt::stream> streams;
  for (auto& d : sys.devices())
    for (int p : {0, 4, 7}) streams.push_back(d.make_stream({.priority = p}));
  run_coro(sys, [&]() -> asio::awaitable<void> {
    std::uint64_t x = 12345;
    for (int round = 0; round < 20; ++round) {
      for (std::size_t i = 0; i < streams.size(); ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;  // fixed-seed LCG
        streams[i].launch(fixed(ns(static_cast<std::int64_t>(x >> 54)), "k"));
        if ((x >> 20) % 5 == 0) {
          auto e = streams[(i + 4) % streams.size()].launch(fixed(ns(100), "dep"));
          streams[i].wait(e);
        }
      }
      co_await streams[static_cast<std::size_t>(round) % streams.size()].async_synchronize(asio::use_awaitable);
    }
  }());
  return rec.rows;
}

TEST_CASE("the same program run twice gives an identical task list", "[core][determinism]") {
  const auto first = program();
  const auto second = program();
  REQUIRE(first.size() > 100);
  CHECK(first == second);
}

}  // namespace
