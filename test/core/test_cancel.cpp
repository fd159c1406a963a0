// Per-operation cancellation, as Asio defines it: a handler bound to a cancellation slot
// (asio::bind_cancellation_slot, the slot of an awaitable's branch under `||`, the slot of a
// co_spawn or npurt::spawn) ends a wait early with errc::operation_aborted, at the virtual time
// of the emit and never inside the emit call; the wait then stops counting as a waiter. Queued
// work is never un-queued: cancelling the await of a launch ends the await and the kernel runs.
#include <npurt/npurt.hpp>
#include <npurt/task.hpp>

#include "common.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <optional>
#include <string>
#include <system_error>
#include <variant>

#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;

namespace {

using ctype = asio::cancellation_type;

npurt::sim_time at_us(std::int64_t v) { return npurt::sim_time{} + us(v); }

/// Emits `type` on `sig` from the completion handler of a `after`-long kernel on `s`, and notes
/// when (and that the emit call has returned).
struct emitter {
  emitter(asio::cancellation_signal& s, npurt::system& y) : sig(s), sys(y) {}
  asio::cancellation_signal& sig;
  npurt::system& sys;
  std::optional<npurt::sim_time> emitted_at;
  bool returned = false;

  void at(npurt::stream& s, picoseconds after, ctype type) {
    s.async_launch(fixed(after, "emitter"), [this, type](npurt::async_error_code) {
      emitted_at = sys.now();
      sig.emit(type);
      returned = true;
    });
  }
};

/// What a plain callback handler saw.
struct outcome {
  int calls = 0;
  std::error_code ec;
  npurt::sim_time at{};
  bool inside_emit = false;
};

/// A stream `s` of device 0 blocked on `gate` until the code under test records it on `other`,
/// once its cancelled wait has ended; `em` emits from stream `t`. The gate lives on another
/// device: device 0's execution queue would hold its record behind the blocked wait.
struct gated {
  npurt::system sys{simple(3)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::stream other = sys.device(1).make_stream();
  npurt::stream t = sys.device(2).make_stream();
  npurt::event gate = sys.device(1).make_event({.wait_for_record = true});
  asio::cancellation_signal sig;
  emitter em{sig, sys};
  gated() { s.wait(gate); }
};

std::optional<npurt::sim_time> end_of(const recorder& rec, std::string_view name) {
  for (const auto& r : rec.rows)
    if (r.name == name) return r.end;
  return std::nullopt;
}

}  // namespace

TEST_CASE("an event wait bound to a slot ends with operation_aborted at the emit's time, after the emit returned",
          "[core][cancel][rules]") {
  npurt::system sys{simple(2)};
  auto s = sys.device(0).make_stream();
  auto t = sys.device(1).make_stream();
  auto long_ev = s.launch(fixed(us(100), "long"));
  asio::cancellation_signal sig;
  emitter em{sig, sys};
  outcome o;
  long_ev.async_wait(asio::bind_cancellation_slot(sig.slot(), [&](npurt::async_error_code ec) {
    ++o.calls;
    o.ec = ec;
    o.at = sys.now();
    o.inside_emit = !em.returned;
  }));
  em.at(t, us(10), ctype::terminal);
  sys.run();
  REQUIRE(em.emitted_at);
  CHECK(o.calls == 1);
  CHECK(o.ec == npurt::errc::operation_aborted);
  CHECK(o.at == *em.emitted_at);
  CHECK(o.at < at_us(100));
  CHECK_FALSE(o.inside_emit);
  CHECK(long_ev.query());  // the kernel waited for still ran
  CHECK_FALSE(sig.slot().has_handler());
}

TEST_CASE("a wait that completed first leaves no handler in its slot; a later emit does nothing", "[core][cancel]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  auto ev = s.launch(fixed(us(5)));
  asio::cancellation_signal sig;
  outcome o;
  ev.async_wait(asio::bind_cancellation_slot(sig.slot(), [&](npurt::async_error_code ec) {
    ++o.calls;
    o.ec = ec;
  }));
  CHECK(sig.slot().has_handler());  // armed while it waits
  sys.run();
  CHECK_FALSE(sig.slot().has_handler());
  sig.emit(ctype::terminal);
  sys.run();
  CHECK(o.calls == 1);
  CHECK_FALSE(o.ec);
}

TEST_CASE("an awaited launch ends early on terminal and partial cancellation, ignores total, and its kernel runs",
          "[core][cancel]") {
  for (const ctype honoured : {ctype::terminal, ctype::partial}) {
    recorder rec;
    npurt::system sys{simple(2)};
    sys.add_observer(rec);
    auto s = sys.device(0).make_stream();
    auto t = sys.device(1).make_stream();
    asio::cancellation_signal sig;
    emitter em{sig, sys};
    outcome o;
    s.async_launch(fixed(us(100), "long"), asio::bind_cancellation_slot(sig.slot(), [&](npurt::async_error_code ec) {
                     ++o.calls;
                     o.ec = ec;
                     o.at = sys.now();
                   }));
    em.at(t, us(10), ctype::total);  // would need the kernel un-queued: ignored
    emitter second{sig, sys};
    second.at(t, us(10), honoured);  // at 20 us
    sys.run();
    REQUIRE(second.emitted_at);
    CHECK(*em.emitted_at < *second.emitted_at);
    CHECK(o.calls == 1);
    CHECK(o.ec == npurt::errc::operation_aborted);
    CHECK(o.at == *second.emitted_at);
    const auto long_end = end_of(rec, "long");  // it ran its full length
    REQUIRE(long_end);
    CHECK(*long_end >= at_us(100));
    sys.remove_observer(rec);
  }
}

TEST_CASE("a cancelled launch await leaves the kernel fire-and-forget: its failure is the stream's sticky error",
          "[core][cancel][error]") {
  npurt::system sys{simple(2)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto t = sys.device(1).make_stream();
  void* p = dev.malloc(1024);
  std::vector<std::byte> host(1024);
  s.launch(fixed(us(50), "before"));
  asio::cancellation_signal sig;
  emitter em{sig, sys};
  outcome o;
  // Freed before it runs: the copy fails when it reaches the device.
  s.async_memcpy(p, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device,
                 asio::bind_cancellation_slot(sig.slot(), [&](npurt::async_error_code ec) {
                   ++o.calls;
                   o.ec = ec;
                 }));
  dev.free(p);
  em.at(t, us(10), ctype::terminal);
  sys.run();
  CHECK(o.calls == 1);
  CHECK(o.ec == npurt::errc::operation_aborted);
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
}

TEST_CASE("use_awaitable: the losing wait of an || ends at once, so the || returns with the winner",
          "[core][cancel][asio]") {
  using namespace asio::experimental::awaitable_operators;
  npurt::system sys{simple(2)};
  auto s = sys.device(0).make_stream();
  auto t = sys.device(1).make_stream();
  auto& dev0 = sys.device(0);
  s.launch(fixed(us(100), "long"));
  std::size_t winner_sync = 9, winner_dev = 9;
  npurt::sim_time after_sync{}, after_dev{};
  run_coro(sys, [&]() -> asio::awaitable<void> {
    auto race = s.async_synchronize(asio::use_awaitable) || t.async_launch(fixed(us(10)), asio::use_awaitable);
    auto r = co_await std::move(race);
    winner_sync = r.index();
    after_sync = sys.now();
    auto race_dev = dev0.async_synchronize(asio::use_awaitable) || t.async_launch(fixed(us(10)), asio::use_awaitable);
    auto r2 = co_await std::move(race_dev);
    winner_dev = r2.index();
    after_dev = sys.now();
  }());
  CHECK(winner_sync == 1);
  // Without cancellation the || would return only when the synchronize did, after 100 us.
  CHECK(after_sync < at_us(50));
  CHECK(winner_dev == 1);
  CHECK(after_dev > after_sync);
  CHECK(after_dev < at_us(50));
}

TEST_CASE(
    "use_awaitable: a co_spawn bound to a slot ends its awaited device synchronize, which stops counting "
    "as a waiter",
    "[core][cancel][asio][deadlock]") {
  gated g;
  auto& [sys, dev, s, other, t, gate, sig, em] = g;
  s.launch(fixed(us(1), "after gate"));
  std::error_code seen;
  npurt::sim_time at{};
  std::exception_ptr escaped;
  asio::co_spawn(
      sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        try {
          co_await dev.async_synchronize(asio::use_awaitable);
        } catch (const boost::system::system_error& e) {
          seen = e.code();
          at = sys.now();
        }
        other.record(gate);
      },
      asio::bind_cancellation_slot(sig.slot(), [&](std::exception_ptr e) { escaped = e; }));
  em.at(t, us(10), ctype::terminal);
  // Had the wait stayed, nothing could run once the emitter is done: a deadlock report.
  CHECK_NOTHROW(sys.run());
  CHECK_FALSE(escaped);
  CHECK(seen == npurt::errc::operation_aborted);
  CHECK(at == *em.emitted_at);
  CHECK(s.query());
}

TEST_CASE(
    "npurt::spawn bound to a slot: the awaited operation throws operation_aborted, later awaits throw at "
    "once, and the kernel runs",
    "[core][cancel][task]") {
  recorder rec;
  npurt::system sys{simple(2)};
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  auto t = sys.device(1).make_stream();
  asio::cancellation_signal sig;
  emitter em{sig, sys};
  std::error_code first, second;
  npurt::sim_time first_at{}, second_at{};
  bool reached_end = false, ended = false;
  auto body = [&]() -> npurt::task<void> {
    try {
      co_await s.async_launch(fixed(us(100), "long"), npurt::use_task);
    } catch (const npurt::caller_error& e) {
      first = e.code();
      first_at = sys.now();
    }
    try {
      co_await t.async_launch(fixed(us(1), "never"), npurt::use_task);
    } catch (const npurt::caller_error& e) {
      second = e.code();
      second_at = sys.now();
    }
    reached_end = true;
  };
  npurt::spawn(sys, body(), asio::bind_cancellation_slot(sig.slot(), [&](std::exception_ptr e) { ended = !e; }));
  em.at(t, us(10), ctype::terminal);
  sys.run();
  CHECK(first == npurt::errc::operation_aborted);
  CHECK(first_at == *em.emitted_at);
  CHECK(second == npurt::errc::operation_aborted);
  CHECK(second_at == first_at);
  CHECK(reached_end);
  CHECK(ended);
  const auto long_end = end_of(rec, "long");  // it ran its full length
  REQUIRE(long_end);
  CHECK(*long_end >= at_us(100));
  CHECK_FALSE(end_of(rec, "never"));  // nothing was started once cancelled
  CHECK_FALSE(sig.slot().has_handler());
  sys.remove_observer(rec);
}

TEST_CASE("npurt::spawn: cancellation reaches a wait in a nested task; a total cancellation is ignored",
          "[core][cancel][task]") {
  for (const ctype type : {ctype::partial, ctype::total}) {
    npurt::system sys{simple(2)};
    auto s = sys.device(0).make_stream();
    auto t = sys.device(1).make_stream();
    auto ev = s.launch(fixed(us(100), "long"));
    asio::cancellation_signal sig;
    emitter em{sig, sys};
    std::error_code seen;
    npurt::sim_time at{};
    auto inner = [&]() -> npurt::task<int> {
      co_await ev.async_wait(npurt::use_task);
      co_return 7;
    };
    auto outer = [&]() -> npurt::task<void> {
      try {
        const int v = co_await inner();
        CHECK(v == 7);
      } catch (const npurt::error& e) { seen = e.code(); }
      at = sys.now();
    };
    npurt::spawn(sys, outer(), asio::bind_cancellation_slot(sig.slot(), [](std::exception_ptr) {}));
    em.at(t, us(10), type);
    sys.run();
    if (type == ctype::total) {
      CHECK_FALSE(seen);
      CHECK(at >= at_us(100));
    } else {
      CHECK(seen == npurt::errc::operation_aborted);
      CHECK(at == *em.emitted_at);
    }
  }
}

TEST_CASE("npurt::spawn: a stream synchronize cancelled while it waits ends at once and run() sees no deadlock",
          "[core][cancel][task][deadlock]") {
  gated g;
  auto& [sys, dev, s, other, t, gate, sig, em] = g;
  std::error_code seen;
  auto body = [&]() -> npurt::task<void> {
    try {
      co_await s.async_synchronize(npurt::use_task);
    } catch (const npurt::error& e) { seen = e.code(); }
    other.record(gate);  // only once the wait has ended
  };
  npurt::spawn(sys, body(), asio::bind_cancellation_slot(sig.slot(), [](std::exception_ptr) {}));
  em.at(t, us(10), ctype::terminal);
  // Had the wait stayed, nothing could run once the emitter is done: a deadlock report.
  CHECK_NOTHROW(sys.run());
  CHECK(seen == npurt::errc::operation_aborted);
  CHECK(s.query());
}
