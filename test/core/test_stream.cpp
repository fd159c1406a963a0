#include <npurt/stream.hpp>

#include "common.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>

#include <set>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;
using npurt::sim_time;

namespace {

TEST_CASE("tasks of one stream run in enqueue order, each after the previous one ends", "[core][stream]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  for (int i = 1; i <= 5; ++i) s.launch(fixed(us(i * 3)));
  sys.run();
  auto rows = rec.of_stream(s.id());
  REQUIRE(rows.size() == 5);
  const picoseconds overhead = sys.options().launch_overhead;
  // Host enqueues cost 2.5 us each; the first kernel starts when its enqueue returns.
  CHECK(rows[0].start == sim_time{overhead});
  for (std::size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i].id > rows[i - 1].id);
    const sim_time submitted{overhead * static_cast<std::int64_t>(i + 1)};
    CHECK(rows[i].start == std::max(rows[i - 1].end, submitted));
    CHECK(rows[i].end - rows[i].start == us(static_cast<std::int64_t>(i + 1) * 3));
  }
}

TEST_CASE("a launch charges the host lane its overhead, so tiny kernels are host-bound", "[core][stream]") {
  npurt::system_options opts;
  opts.launch_overhead = us(4);
  recorder rec;
  npurt::system sys{simple(), opts};
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  for (int i = 0; i < 10; ++i) s.launch(fixed(us(1)));
  sys.run();
  REQUIRE(rec.rows.size() == 10);
  for (std::size_t i = 0; i < 10; ++i) CHECK(rec.rows[i].start == sim_time{us(4) * static_cast<std::int64_t>(i + 1)});
  CHECK(sys.now() == sim_time{us(41)});
}

TEST_CASE("kernels on streams of different devices run at the same time", "[core][stream][device]") {
  recorder rec;
  npurt::system sys{simple(4)};
  sys.add_observer(rec);
  std::vector<npurt::stream> streams;
  for (auto& d : sys.devices()) streams.push_back(d.make_stream());
  for (auto& s : streams) s.launch(fixed(us(100)));
  sys.run();
  REQUIRE(rec.rows.size() == 4);
  for (const auto& r : rec.rows) {
    CHECK(r.start == sim_time{sys.options().launch_overhead});
    CHECK(r.end == r.start + us(100));
  }
  std::set<npurt::device_id> devs;
  for (const auto& r : rec.rows) devs.insert(r.device);
  CHECK(devs.size() == 4);
}

TEST_CASE("two streams of one device share its serial engine in priority order", "[core][stream][priority]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto low = dev.make_stream({.priority = npurt::priority::low});
  auto high = dev.make_stream({.priority = npurt::priority::high});
  // Occupy the engine, then queue one task from each stream while it is busy. Every stream has
  // its own host lane, so all three reach the device at the same instant: the blocker takes the
  // engine by being high priority too, and first by task id.
  auto blocker = dev.make_stream({.priority = npurt::priority::high});
  blocker.launch(fixed(us(100), "blocker"));
  low.launch(fixed(us(10), "low"));
  high.launch(fixed(us(10), "high"));
  sys.run();
  REQUIRE(rec.rows.size() == 3);
  CHECK(rec.rows[0].name == "blocker");
  CHECK(rec.rows[1].name == "high");
  CHECK(rec.rows[2].name == "low");
}

TEST_CASE("stream priorities outside 0..7 clamp as in CANN", "[core][stream]") {
  npurt::system sys{simple()};
  auto a = sys.device(0).make_stream({.priority = -3});
  auto b = sys.device(0).make_stream({.priority = 42});
  CHECK(a.priority() == 0);
  CHECK(b.priority() == 7);
}

TEST_CASE("async operations accept use_awaitable, plain callbacks and deferred", "[core][stream][asio]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::vector<std::string> order;
  sim_time cb_time{};
  s.async_launch(fixed(us(10)), [&](npurt::async_error_code ec) {
    CHECK(!ec);
    cb_time = sys.now();
    order.push_back("callback");
  });
  auto op = s.async_launch(fixed(us(5)), asio::deferred);
  run_coro(sys, [&]() -> asio::awaitable<void> {
    co_await s.async_launch(fixed(us(20)), asio::use_awaitable);
    order.push_back("awaitable");
    co_await std::move(op)(asio::use_awaitable);  // a deferred op starts only when awaited
    order.push_back("deferred");
  }());
  const picoseconds o = sys.options().launch_overhead;
  CHECK(cb_time == sim_time{o + us(10)});
  REQUIRE(order == std::vector<std::string>{"callback", "awaitable", "deferred"});
  // The deferred launch was enqueued after the awaited one finished.
  CHECK(sys.now() == sim_time{o + us(10) + us(20) + o + us(5)});
}

/// Counts what it allocates, to tell whether an operation used the handler's allocator.
struct counting_state {
  long live = 0;
  long total = 0;
};
template <class T>
struct counting_allocator {
  using value_type = T;
  counting_state* st;
  explicit counting_allocator(counting_state& s) noexcept : st(&s) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : st(o.st) {}  // NOLINT
  T* allocate(std::size_t n) {
    ++st->live;
    ++st->total;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    --st->live;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const noexcept {
    return st == o.st;
  }
};

TEST_CASE("an operation is stored with the handler's own allocator when it has one", "[core][stream][asio]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  counting_state st;
  long seen_live = -1;
  bool done = false;
  s.async_launch(fixed(us(5)), asio::bind_allocator(counting_allocator<void>(st), [&](npurt::async_error_code ec) {
                   CHECK(!ec);
                   seen_live = st.live;
                   done = true;
                 }));
  CHECK(st.live >= 1);  // the pending operation lives in the handler's storage
  sys.run();
  CHECK(done);
  CHECK(seen_live == 0);  // released before the handler runs, as Asio's own operations do
  CHECK(st.total >= 1);
  CHECK(st.live == 0);
}

TEMPLATE_TEST_CASE("a completion bound to a stream's strand runs on it, never inside the initiating call",
                   "[core][stream][asio]", asio::any_io_executor, npurt::stream::executor_type) {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  // An empty stream is synchronized at once: the completion is ready during the initiating
  // call, and must still be posted. The executor is type-erased (as a coroutine's is) or the
  // concrete strand. The call is made from host code running inside the loop, where Asio may
  // run handlers inline.
  const TestType ex = s.get_executor();
  bool returned = false;
  int ran = 0;
  asio::post(sys.get_executor(), [&] {
    s.async_synchronize(asio::bind_executor(ex, [&](npurt::async_error_code ec) {
      CHECK(!ec);
      CHECK(returned);
      CHECK(s.get_executor().running_in_this_thread());
      ++ran;
    }));
    returned = true;
  });
  sys.run();
  CHECK(ran == 1);
  // The same for a launch that completes later, from the device side of the loop.
  s.async_launch(fixed(us(3)), asio::bind_executor(ex, [&](npurt::async_error_code ec) {
                   CHECK(!ec);
                   CHECK(s.get_executor().running_in_this_thread());
                   CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(3)});  // nothing else ran before
                   ++ran;
                 }));
  sys.run();
  CHECK(ran == 2);
}

TEST_CASE("a coroutine resumes after an awaited launch on its own strand", "[core][stream][asio]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  auto other = sys.device(0).make_stream();
  int steps = 0;
  bool on_strand = true;
  asio::co_spawn(
      other.get_executor(),
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 3; ++i) {
          co_await s.async_launch(fixed(us(2)), asio::use_awaitable);
          on_strand =
              on_strand && other.get_executor().running_in_this_thread() && !s.get_executor().running_in_this_thread();
          ++steps;
        }
      },
      asio::detached);
  sys.run();
  CHECK(steps == 3);
  CHECK(on_strand);
}

TEST_CASE("host callbacks run in stream order on the stream's strand", "[core][stream][callback]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::vector<std::pair<int, sim_time>> seen;
  s.launch(fixed(us(10)));
  s.launch_callback([&] {
    CHECK(s.get_executor().running_in_this_thread());
    seen.emplace_back(1, sys.now());
  });
  s.launch(fixed(us(10)));
  s.launch_callback([&] { seen.emplace_back(2, sys.now()); });
  sys.run();
  REQUIRE(seen.size() == 2);
  const picoseconds o = sys.options().launch_overhead;
  CHECK(seen[0].second == sim_time{o + us(10)});
  CHECK(seen[1].second == sim_time{o + us(20)});
}

TEST_CASE("a stream synchronize timeout fires at exactly now + timeout", "[core][stream][timeout]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::error_code got;
  sim_time when{};
  run_coro(sys, [&]() -> asio::awaitable<void> {
    s.launch(fixed(us(100)));
    auto [ec] = co_await s.async_synchronize(us(30), asio::as_tuple(asio::use_awaitable));
    got = ec;
    when = sys.now();
  }());
  CHECK(got == npurt::errc::wait_timeout);
  CHECK(when == sim_time{us(30)});
  // The kernel still finished; the clock ends with it, not with the timeout.
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(100)});
}

TEST_CASE("a synchronize that finishes first cancels its timeout and keeps the clock", "[core][stream][timeout]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  run_coro(sys, [&]() -> asio::awaitable<void> {
    s.launch(fixed(us(10)));
    co_await s.async_synchronize(std::chrono::seconds(50), asio::use_awaitable);
  }());
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(10)});
}

TEST_CASE("blocking synchronize outside run drives the simulation and can time out", "[core][stream][timeout]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  s.launch(fixed(us(100)));
  CHECK_FALSE(s.query());
  CHECK_THROWS_AS(s.synchronize(us(40)), npurt::timeout_error);
  CHECK(sys.now() == sim_time{us(40)});
  s.synchronize();
  CHECK(s.query());
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(100)});
}

TEST_CASE("destroying a stream drains its work", "[core][stream]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  {
    auto s = sys.device(0).make_stream();
    s.launch(fixed(us(10)));
    s.launch(fixed(us(10)));
  }
  CHECK(rec.rows.size() == 2);
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(20)});
}

TEST_CASE("a stream destroyed inside run finishes its queued work", "[core][stream]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  run_coro(sys, [&]() -> asio::awaitable<void> {
    auto s = sys.device(0).make_stream();
    s.launch(fixed(us(10)));
    s.launch(fixed(us(10)));
    co_return;  // s dies here, inside run(), with two tasks queued
  }());
  CHECK(rec.rows.size() == 2);
}

TEST_CASE("device synchronize waits for every stream of the device", "[core][device]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto a = d0.make_stream();
  auto b = d0.make_stream();
  auto other = sys.device(1).make_stream();
  a.launch(fixed(us(10)));
  b.launch(fixed(us(50)));
  other.launch(fixed(us(500)));
  d0.synchronize();
  CHECK(a.query());
  CHECK(b.query());
  CHECK_FALSE(other.query());
  // The engine is shared: b's kernel waits for a's.
  CHECK(sys.now() == sim_time{sys.options().launch_overhead + us(60)});
}

}  // namespace
