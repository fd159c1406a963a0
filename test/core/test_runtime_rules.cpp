// The runtime's rules a user relies on without seeing them: failures of fire-and-forget work are
// never lost (sticky errors), a blocking wait returns after the handlers of what it waited for,
// priority wins a tie, a device reset does not wait, names outlive the caller's strings, one
// error identity, null handles never complete inside the call, and one thread owns a system.
#include <npurt/detail/timer_queue.hpp>
#include <npurt/npurt.hpp>

#include "common.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// A copy into device memory that is freed while the copy still waits behind a long kernel:
// accepted at enqueue, fails when it runs.
struct failing_copy {
  std::vector<std::byte> host = std::vector<std::byte>(1024);
  void enqueue(npurt::device& dev, npurt::stream& s) {
    void* p = dev.malloc(1024);
    s.launch(fixed(us(100), "long"));
    s.memcpy(p, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device);
    dev.free(p);
  }
};

TEST_CASE("a failed fire-and-forget copy is reported by the next stream synchronize, once, naming the task",
          "[core][error][sticky]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  failing_copy c;
  c.enqueue(dev, s);
  try {
    s.synchronize();
    FAIL("synchronize returned normally after a failed copy");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_pointer);
    const std::string what = e.what();
    CHECK_THAT(what, ContainsSubstring("memcpy_h2d") && ContainsSubstring("task 2"));
    // The error's own message once, at the end, as std::system_error appends it.
    const std::string message = e.code().message();
    REQUIRE(what.size() > message.size());
    CHECK(what.ends_with(": " + message));
    CHECK(what.find(message) == what.size() - message.size());
  }
  // Read once: the stream is usable again and the next synchronize is clean.
  s.launch(fixed(us(1)));
  CHECK_NOTHROW(s.synchronize());
}

TEST_CASE("the device and the stream's query report a failure too", "[core][error][sticky]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  failing_copy c;
  c.enqueue(dev, s);
  auto after = s.launch(fixed(us(1)));
  std::error_code ec;
  dev.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  dev.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);
  // The event after the failed task reports it while the stream has not read it.
  CHECK(after.status() == npurt::errc::invalid_pointer);
  CHECK(!s.query(ec));
  CHECK(ec == npurt::errc::invalid_pointer);
  CHECK(s.query(ec));
  CHECK(!ec);
  CHECK(!after.status());
}

TEST_CASE("a blocking device memcpy reports and reads the device's earlier failure", "[core][error][sticky]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  failing_copy c;
  c.enqueue(dev, s);
  auto done = dev.make_event();
  s.record(done);
  std::error_code ec;
  done.synchronize(npurt::no_timeout, ec);  // the failure has happened; an event does not read it
  std::vector<char> host(64, 1);
  void* d = dev.malloc(64);
  dev.memcpy(d, 64, host.data(), 64, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  dev.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);
  auto s2 = dev.make_stream();
  s2.launch_callback([] { throw std::runtime_error("callback exploded"); });
  s2.synchronize(npurt::no_timeout, ec);  // reads the stream's record, not the device's
  CHECK(ec == npurt::errc::callback_failed);
  CHECK_THROWS_WITH(dev.memcpy(d, 64, host.data(), 64, npurt::memcpy_kind::host_to_device), "callback exploded");
  CHECK_NOTHROW(dev.memcpy(d, 64, host.data(), 64, npurt::memcpy_kind::host_to_device));
  dev.free(d);
}

TEST_CASE("an event reports its stream's unread failure after the stream is destroyed, until a device reset",
          "[core][error][sticky]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  failing_copy c;
  npurt::event before, after;
  {
    auto s = dev.make_stream();
    before = s.launch(fixed(us(1), "before"));
    c.enqueue(dev, s);
    after = s.launch(fixed(us(1)));
  }  // drained here; nobody read the failure
  CHECK(after.status() == npurt::errc::invalid_pointer);
  CHECK_THROWS_AS(after.synchronize(), npurt::caller_error);
  CHECK(after.status() == npurt::errc::invalid_pointer);  // an event reads it without clearing it
  CHECK(!before.status());                                // before the failed task: clean
  // A later stream is not confused with the destroyed one.
  auto other = dev.make_stream();
  CHECK(!other.launch(fixed(us(1))).status());
  dev.reset();
  CHECK(!after.status());
}

TEST_CASE("async_synchronize completes with the stream's sticky failure", "[core][error][sticky][asio]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  failing_copy c;
  c.enqueue(dev, s);
  npurt::async_error_code first, second;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    co_await s.async_synchronize(asio::redirect_error(asio::use_awaitable, first));
    co_await s.async_synchronize(asio::redirect_error(asio::use_awaitable, second));
  }());
  CHECK(first == npurt::errc::invalid_pointer);
  CHECK(!second);
}

TEST_CASE("an event's async_wait completes with a failure before the event on its stream, and leaves it unread",
          "[core][error][sticky][asio]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto before = s.launch(fixed(us(1), "before"));
  failing_copy c;
  c.enqueue(dev, s);
  auto after = s.launch(fixed(us(1), "after"));
  npurt::async_error_code on_before, on_after, on_done;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    co_await before.async_wait(asio::redirect_error(asio::use_awaitable, on_before));
    co_await after.async_wait(asio::redirect_error(asio::use_awaitable, on_after));
    // Waited again once everything completed: the failure is still unread, still reported.
    co_await after.async_wait(asio::redirect_error(asio::use_awaitable, on_done));
  }());
  CHECK(!on_before);
  CHECK(on_after == npurt::errc::invalid_pointer);
  CHECK(on_done == npurt::errc::invalid_pointer);
  // The stream still reports (and now reads) it.
  std::error_code ec;
  CHECK(!s.query(ec));
  CHECK(ec == npurt::errc::invalid_pointer);
  npurt::async_error_code read_out;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    co_await after.async_wait(asio::redirect_error(asio::use_awaitable, read_out));
  }());
  CHECK(!read_out);
}

TEST_CASE("a host callback that throws puts its exception into the stream's sticky error", "[core][error][callback]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  s.launch_callback([] { throw std::runtime_error("callback exploded"); });
  CHECK_THROWS_WITH(s.synchronize(), "callback exploded");
  s.launch_callback([] { throw std::runtime_error("again"); });
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  CHECK(ec == npurt::errc::callback_failed);
}

TEST_CASE("a blocking synchronize returns after the completion handlers of the work it waited for",
          "[core][stream][completion]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  bool handled = false;
  s.async_launch(fixed(us(10)), [&](npurt::async_error_code ec) { handled = !ec; });
  s.synchronize();
  CHECK(handled);
  bool event_handled = false;
  auto e = s.launch(fixed(us(5)));
  e.async_wait([&](npurt::async_error_code) { event_handled = true; });
  e.synchronize();
  CHECK(event_handled);
}

TEST_CASE("a high-priority kernel ready at the same instant as a low-priority one runs first",
          "[core][stream][priority]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  auto low = dev.make_stream({.priority = npurt::priority::low});
  auto high = dev.make_stream({.priority = npurt::priority::high});
  // Each stream has its own host lane: both launches reach the device at 2.5 us.
  low.launch(fixed(us(500), "long_low"));
  high.launch(fixed(us(10), "short_high"));
  sys.run();
  REQUIRE(rec.rows.size() == 2);
  const auto overhead = sys.options().launch_overhead;
  CHECK(rec.rows[0].name == "short_high");
  CHECK(rec.rows[0].start == npurt::sim_time{overhead});
  CHECK(rec.rows[0].end == npurt::sim_time{overhead + us(10)});
  CHECK(rec.rows[1].name == "long_low");
  CHECK(rec.rows[1].start == npurt::sim_time{overhead + us(10)});
}

TEST_CASE("device reset aborts pending work instead of waiting for it", "[core][device][reset]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  s.launch(fixed(picoseconds{10'000'000'000'000}, "ten_seconds"));
  npurt::async_error_code outcome;
  bool completed = false;
  s.async_launch(fixed(us(1)), [&](npurt::async_error_code ec) {
    outcome = ec;
    completed = true;
  });
  const auto before = sys.now();
  dev.reset();
  CHECK(sys.now() == before);
  sys.run();
  REQUIRE(completed);
  CHECK(outcome == npurt::errc::operation_aborted);
  CHECK_FALSE(s.valid());
  // The device works again after the reset.
  auto fresh = dev.make_stream();
  const auto t0 = sys.now();
  fresh.launch(fixed(us(3)));
  fresh.synchronize();
  CHECK(sys.now() - t0 == sys.options().launch_overhead + us(3));
}

TEST_CASE("a device reset from a host callback of its own stream ends that stream's work, and the run",
          "[core][device][reset]") {
  // aclrtResetDevice from a callback: the callback's own task is among the work the reset
  // drops, so when the callback returns there is nothing left to finish.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  s.launch(fixed(us(1)));
  s.launch_callback([&] {
    dev.reset();
    throw std::runtime_error("thrown after the reset");  // dropped with the device's failures
  });
  const npurt::event after = s.launch(fixed(us(1)));
  npurt::async_error_code awaited;
  s.async_launch(fixed(us(1)), [&](npurt::async_error_code ec) { awaited = ec; });
  std::error_code ec;
  sys.run(ec);
  CHECK_FALSE(ec);
  CHECK(sys.deadlock_report().empty());
  // The callback ran when it reached the device (two enqueues of launch_overhead each, the first
  // kernel having ended before), and the reset left nothing to run after it.
  CHECK(sys.now() == npurt::sim_time{2 * sys.options().launch_overhead});
  CHECK(awaited == npurt::errc::operation_aborted);
  CHECK(after.status() == npurt::errc::invalid_event);
  dev.synchronize(ec);
  CHECK_FALSE(ec);
  auto fresh = dev.make_stream();
  const auto t0 = sys.now();
  fresh.launch(fixed(us(3)));
  fresh.synchronize();
  CHECK(sys.now() - t0 == sys.options().launch_overhead + us(3));
}

TEST_CASE("a device reset from the callback of a stream destroyed inside run() frees it once",
          "[core][device][reset]") {
  // The destroyed stream's record goes with the reset: the callback must not touch it after.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  bool reset_done = false;
  asio::co_spawn(
      sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        auto s = dev.make_stream();
        s.launch(fixed(us(1)));
        s.launch_callback([&] {
          dev.reset();
          reset_done = true;
          throw std::runtime_error("thrown after the reset");
        });
        s.launch(fixed(us(1)));
        co_return;  // the stream is destroyed here, inside run(): its work drains afterwards
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  std::error_code ec;
  sys.run(ec);
  CHECK_FALSE(ec);
  CHECK(reset_done);
  CHECK(sys.deadlock_report().empty());
  dev.synchronize(ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a device reset from an observer's report is refused, and the run goes on", "[core][device][reset]") {
  // on_task is heard from inside the scheduler's bookkeeping of the task it reports, which a
  // reset would free under it.
  struct resetter final : npurt::observer {
    npurt::device* dev = nullptr;
    std::error_code ec;
    std::string words;
    void on_task(const npurt::task_info&) override {
      if (!dev) return;
      npurt::device& d = *std::exchange(dev, nullptr);
      d.reset(ec);
      try {
        d.reset();
      } catch (const npurt::caller_error& e) { words = e.what(); }
    }
  } obs;
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  obs.dev = &dev;
  sys.add_observer(obs);
  s.launch(fixed(us(1)));
  const npurt::event last = s.launch(fixed(us(1)));
  std::error_code ec;
  sys.run(ec);
  sys.remove_observer(obs);
  CHECK(obs.ec == npurt::errc::not_supported);
  CHECK_THAT(obs.words, ContainsSubstring("npurt::device::reset: called from an observer's report"));
  CHECK_FALSE(ec);
  CHECK(sys.deadlock_report().empty());
  // Nothing was dropped: both kernels ran, one after the other.
  CHECK(last.query());
  CHECK(sys.now() == npurt::sim_time{2 * sys.options().launch_overhead + us(1)});
  // Outside a report the reset works as ever.
  dev.reset();
  CHECK_FALSE(s.valid());
}

TEST_CASE("a kernel name taken from a temporary string survives the string", "[core][stream][names]") {
  recorder rec;
  npurt::system sys{simple()};
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  {
    std::string name = "a kernel name far longer than any small-string buffer";
    s.launch(npurt::kernel_desc{npurt::kernels::fixed{us(1)}, name});
    std::string other = "an awaited kernel whose name dies before it starts running";
    s.async_launch(npurt::kernel_desc{npurt::kernels::fixed{us(1)}, other}, [](npurt::async_error_code) {});
    name.assign(name.size(), 'x');
    other.assign(other.size(), 'y');
  }
  sys.run();
  REQUIRE(rec.rows.size() == 2);
  CHECK(rec.rows[0].name == "a kernel name far longer than any small-string buffer");
  CHECK(rec.rows[1].name == "an awaited kernel whose name dies before it starts running");
}

TEST_CASE("an npurt error has one identity as std::error_code and as async_error_code", "[core][error][asio]") {
  const std::error_code sc = npurt::errc::invalid_pointer;
  const npurt::async_error_code bc = sc;
  CHECK(sc.value() == 107007);
  CHECK(std::string(sc.category().name()) == "npurt");
  CHECK(bc.value() == 107007);
  CHECK(std::string(bc.category().name()) == "npurt");
  CHECK(bc == npurt::errc::invalid_pointer);
  const std::error_code back = bc;
  CHECK(back == sc);
  CHECK(back == npurt::error_class::caller);
  CHECK(bc.message() == sc.message());
  // What an operation completes with.
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  npurt::async_error_code got;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    std::byte b[8]{};
    co_await s.async_memcpy(b, 8, reinterpret_cast<void*>(0x4000'0000'0009'0000ULL), 8,
                            npurt::memcpy_kind::device_to_host, asio::redirect_error(asio::use_awaitable, got));
  }());
  CHECK(got.value() == 107007);
  CHECK(std::string(got.category().name()) == "npurt");
  CHECK(std::error_code(got) == npurt::errc::invalid_pointer);
}

TEST_CASE("a blocking call inside a coroutine names the async form to use", "[core][error][messages]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::string message;
  run_coro(sys, [&]() -> asio::awaitable<void> {
    s.launch(fixed(us(1)));
    try {
      s.synchronize();
    } catch (const npurt::caller_error& e) { message = e.what(); }
    co_return;
  }());
  CHECK_THAT(message, ContainsSubstring("async_synchronize"));
}

TEST_CASE("device::memcpy copies in one blocking call, as aclrtMemcpy does", "[core][memory][copy]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  std::vector<int> in(256), out(256, -1);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 + 1);
  npurt::device_buffer buf(dev, in.size() * sizeof(int));
  dev.memcpy(buf.data(), buf.size(), in.data(), buf.size());
  dev.memcpy(out.data(), out.size() * sizeof(int), buf.data(), buf.size());
  CHECK(out == in);
  CHECK_THROWS_AS(dev.memcpy(buf.data(), 4, in.data(), 8), npurt::caller_error);
}

TEST_CASE("device_buffer and host_buffer give their memory back when they die", "[core][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  const auto free_before = dev.memory_info().free;
  {
    npurt::device_buffer a(dev, 1 << 20);
    CHECK(dev.memory_info().free == free_before - (1 << 20));
    npurt::device_buffer b = std::move(a);
    CHECK_FALSE(a);
    CHECK(b.size() == 1 << 20);
    npurt::host_buffer h(sys, 4096);
    REQUIRE(h);
    std::error_code ec;
    void* raw = h.data();
    h.reset();
    sys.host_free(raw, ec);
    CHECK(ec == npurt::errc::double_free);  // already given back by reset()
  }
  CHECK(dev.memory_info().free == free_before);
}

TEST_CASE("operations on null handles complete through the executor, never inside the call", "[core][asio][null]") {
  asio::io_context ioc;
  bool launch_done = false, wait_done = false, sync_done = false;
  npurt::async_error_code launch_ec, wait_ec;
  npurt::stream{}.async_launch(fixed(us(1)), asio::bind_executor(ioc, [&](npurt::async_error_code ec) {
                                 launch_ec = ec;
                                 launch_done = true;
                               }));
  npurt::event{}.async_wait(asio::bind_executor(ioc, [&](npurt::async_error_code ec) {
    wait_ec = ec;
    wait_done = true;
  }));
  npurt::stream{}.async_synchronize(asio::bind_executor(ioc, [&](npurt::async_error_code) { sync_done = true; }));
  CHECK_FALSE(launch_done);
  CHECK_FALSE(wait_done);
  CHECK_FALSE(sync_done);
  ioc.run();
  CHECK(launch_done);
  CHECK(wait_done);
  CHECK(sync_done);
  CHECK(launch_ec == npurt::errc::invalid_stream);
  CHECK(wait_ec == npurt::errc::invalid_event);
}

TEST_CASE("host-to-host copies are timed by the backend's own bandwidth", "[core][copy][timing]") {
  npurt::simple_config cfg = simple();
  cfg.host_copy_bandwidth = 4e9;
  npurt::system sys{cfg};
  auto s = sys.device(0).make_stream();
  std::vector<std::byte> a(1 << 20), b(1 << 20);
  s.memcpy(b.data(), b.size(), a.data(), a.size(), npurt::memcpy_kind::host_to_host);
  s.synchronize();
  // 1 MiB at 4 GB/s after one launch overhead.
  CHECK(sys.now() == npurt::sim_time{sys.options().launch_overhead + picoseconds{262'144'000}});
}

TEST_CASE("a block_dim beyond the device's cores is rejected at launch", "[core][error][kernel]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  npurt::kernel_desc k{npurt::kernels::fixed{us(1)}, "wide", 33};
  std::error_code ec;
  s.launch(k, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  k.block_dim = 32;
  s.launch(k, ec);
  CHECK(!ec);
}

TEST_CASE("a negative timeout is a caller error, not a wait forever", "[core][timeout]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto e = s.launch(fixed(us(10)));
  std::error_code ec;
  s.synchronize(picoseconds{-1}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  e.synchronize(picoseconds{-1}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  dev.synchronize(picoseconds{-1}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  npurt::async_error_code async_ec;
  s.async_synchronize(picoseconds{-1}, [&](npurt::async_error_code c) { async_ec = c; });
  sys.run();
  CHECK(async_ec == npurt::errc::invalid_argument);
  CHECK(sys.now() == npurt::sim_time{sys.options().launch_overhead + us(10)});
}

TEST_CASE("with thread checks on, a call from a second thread is a clear error", "[core][thread]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(), opts};
  auto s = sys.device(0).make_stream();
  std::error_code launch_ec, sync_ec, dev_sync_ec;
  npurt::async_error_code stream_async_ec, dev_async_ec;
  std::thread other([&] {
    s.launch(fixed(us(1)), launch_ec);
    s.synchronize(npurt::no_timeout, sync_ec);
    sys.device(0).synchronize(npurt::no_timeout, dev_sync_ec);
    // The async forms are refused as the blocking ones, their handlers run by their own
    // executors (the system's loop is not this thread's to post to).
    boost::asio::io_context mine;
    s.async_synchronize(boost::asio::bind_executor(mine, [&](npurt::async_error_code c) { stream_async_ec = c; }));
    sys.device(0).async_synchronize(
        boost::asio::bind_executor(mine, [&](npurt::async_error_code c) { dev_async_ec = c; }));
    mine.run();
  });
  other.join();
  CHECK(launch_ec == npurt::errc::wrong_thread);
  CHECK(sync_ec == npurt::errc::wrong_thread);
  CHECK(dev_sync_ec == npurt::errc::wrong_thread);
  CHECK(stream_async_ec == npurt::errc::wrong_thread);
  CHECK(dev_async_ec == npurt::errc::wrong_thread);
  std::error_code ec;
  s.launch(fixed(us(1)), ec);
  CHECK(!ec);
}

TEST_CASE("with thread checks on, set_device, memory_info, observers and annotations refuse a second thread",
          "[core][thread][error]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(2), opts};
  npurt::observer o;
  // Each of these reads or writes state the loop's thread owns (the current device, the memory
  // registry, the observer list, the profiler's ranges): from another thread it is a data race.
  // (remove_observer stays unchecked: destructors call it.)
  const std::vector<std::function<void()>> calls = {
      [&] { sys.set_device(1); },   [&] { (void)sys.device(0).memory_info(); },
      [&] { sys.add_observer(o); }, [&] { sys.mark("m"); },
      [&] { sys.push_range("r"); }, [&] { sys.pop_range(); },
  };
  std::vector<std::error_code> codes(calls.size());
  std::vector<std::string> words(calls.size());
  std::thread other([&] {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      try {
        calls[i]();
      } catch (const npurt::caller_error& e) {
        codes[i] = e.code();
        words[i] = e.what();
      }
    }
  });
  other.join();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO("call " << i << ": " << words[i]);
    CHECK(codes[i] == npurt::errc::wrong_thread);
    CHECK_THAT(words[i], ContainsSubstring("npurt::"));
  }
  // The refused calls changed nothing, and the owner's thread still may.
  CHECK(sys.current_device().id() == 0);
  sys.set_device(1);
  CHECK(sys.current_device().id() == 1);
  CHECK(sys.device(0).memory_info().total > 0);
}

TEST_CASE("memory calls from another thread fail with wrong_thread", "[core][thread][error]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(2), opts};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* d = dev.malloc(1024);
  void* h = sys.host_malloc(1024);
  void* b = pool.malloc_async(1024, s);
  std::error_code malloc_ec, free_ec, host_malloc_ec, host_free_ec, pool_ec;
  void* got_d = nullptr;
  void* got_h = nullptr;
  void* got_b = nullptr;
  std::thread other([&] {
    got_d = dev.malloc(1024, malloc_ec);
    dev.free(d, free_ec);
    got_h = sys.host_malloc(1024, host_malloc_ec);
    sys.host_free(h, host_free_ec);
    got_b = pool.malloc_async(1024, s, pool_ec);
  });
  other.join();
  CHECK(malloc_ec == npurt::errc::wrong_thread);
  CHECK(got_d == nullptr);
  CHECK(free_ec == npurt::errc::wrong_thread);
  CHECK(host_malloc_ec == npurt::errc::wrong_thread);
  CHECK(got_h == nullptr);
  CHECK(host_free_ec == npurt::errc::wrong_thread);
  CHECK(pool_ec == npurt::errc::wrong_thread);
  CHECK(got_b == nullptr);
  // The pool's maintenance calls race with its allocations as much: refused too.
  std::vector<std::error_code> maintenance;
  std::thread again([&] {
    const auto code_of = [&](auto&& f) {
      try {
        f();
        maintenance.emplace_back();
      } catch (const npurt::caller_error& e) { maintenance.push_back(e.code()); }
    };
    code_of([&] { pool.trim_to(0); });
    code_of([&] { pool.empty_cache(); });
    code_of([&] { pool.trigger_gc(); });
    code_of([&] { pool.reset_peak(); });
    code_of([&] { pool.reset_accumulated(); });
    code_of([&] { pool.set_attribute(npurt::mem_pool_attr::release_threshold, 0); });
    code_of([&] { (void)pool.get_attribute(npurt::mem_pool_attr::used_mem_current); });
    code_of([&] { (void)pool.snapshot(); });
    code_of([&] { (void)dev.memory_usage(); });
    // A device whose pool was never used: making it there would race with the owner's first use.
    code_of([&] { (void)sys.device(1).mem_pool(); });
  });
  again.join();
  REQUIRE(maintenance.size() == 10);
  for (const auto& e : maintenance) CHECK(e == npurt::errc::wrong_thread);
  // The owner's own first use still makes it.
  CHECK_NOTHROW(sys.device(1).mem_pool());
  // Nothing was freed by the rejected calls.
  CHECK_NOTHROW(dev.free(d));
  CHECK_NOTHROW(sys.host_free(h));
  CHECK_NOTHROW(pool.free_async(b, s));
}

}  // namespace

TEST_CASE("a device reset invalidates the task events of its streams: aborted work is not reported complete",
          "[core][device][reset][event]") {
  npurt::system sys{simple(2)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto peer = sys.device(1).make_stream();
  npurt::event done_before = s.launch(fixed(us(1)));
  s.synchronize();
  npurt::event aborted = s.launch(fixed(picoseconds{10'000'000'000'000}, "ten_seconds"));
  dev.reset();
  std::error_code ec;
  CHECK_FALSE(aborted.query(ec));
  CHECK(ec == npurt::errc::invalid_event);
  CHECK(aborted.status() == npurt::errc::invalid_event);
  CHECK(done_before.status() == npurt::errc::invalid_event);  // as every event of the device
  CHECK_THROWS_AS(aborted.synchronize(), npurt::caller_error);
  peer.wait(aborted, ec);
  CHECK(ec == npurt::errc::invalid_event);
  npurt::async_error_code awaited;
  aborted.async_wait([&](npurt::async_error_code e) { awaited = e; });
  sys.run();
  CHECK(awaited == npurt::errc::invalid_event);
  // The device's new streams are not confused with the reset ones.
  auto fresh = dev.make_stream();
  CHECK(!fresh.launch(fixed(us(1))).status());
}

TEST_CASE("a handler that throws while a stream's destructor drains the stream leaves through the next run()",
          "[core][stream][lifetime][error]") {
  npurt::system sys{simple()};
  bool later_ran = false;
  {
    auto s = sys.device(0).make_stream();
    s.async_launch(fixed(us(1)), [](npurt::async_error_code) { throw std::runtime_error("from the handler"); });
    s.async_launch(fixed(us(1)), [&](npurt::async_error_code) { later_ran = true; });
  }  // the destructor drives the loop: the exception must not leave it (std::terminate)
  CHECK_THROWS_WITH(sys.run(), "from the handler");
  CHECK_NOTHROW(sys.run());  // reported once; the rest of the work still runs
  CHECK(later_ran);
}

TEST_CASE("make_stream refuses unknown flag bits, and stream and event creation check the thread",
          "[core][stream][thread][error]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(), opts};
  auto& dev = sys.device(0);
  std::error_code ec;
  auto bad = dev.make_stream({.flags = static_cast<npurt::stream_flags>(0x20)}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK_FALSE(bad.valid());
  CHECK_THROWS_AS(dev.make_stream({.flags = static_cast<npurt::stream_flags>(0xffff)}), npurt::caller_error);
  // The message names the call as every throwing form's does ("npurt::<class>::<member>: ...").
  try {
    (void)dev.make_stream({.flags = static_cast<npurt::stream_flags>(0xffff)});
    FAIL("make_stream accepted unknown flag bits");
  } catch (const npurt::caller_error& e) {
    CHECK(std::string_view(e.what()).starts_with("npurt::device::make_stream: unknown stream_flags bits"));
  }
  // Every documented flag together is accepted, and works.
  auto all = dev.make_stream(
      {.flags = npurt::stream_flags::fast_launch | npurt::stream_flags::fast_sync | npurt::stream_flags::overflow_edge |
                npurt::stream_flags::direct_submit | npurt::stream_flags::stop_on_failure},
      ec);
  REQUIRE(!ec);
  CHECK(!all.launch(fixed(us(1))).status());

  std::error_code stream_ec, event_ec;
  npurt::stream from_other;
  npurt::event event_other;
  std::thread other([&] {
    from_other = dev.make_stream({}, stream_ec);
    event_other = dev.make_event({}, event_ec);
  });
  other.join();
  CHECK(stream_ec == npurt::errc::wrong_thread);
  CHECK_FALSE(from_other.valid());
  CHECK(event_ec == npurt::errc::wrong_thread);
  CHECK_FALSE(event_other.valid());
  // The owner thread still creates both.
  CHECK(dev.make_stream().valid());
  CHECK(dev.make_event().valid());
}

TEST_CASE("timer_queue: cancelling a timer that already fired leaves nothing behind", "[core][timer]") {
  npurt::detail::timer_queue q;
  int ran = 0;
  auto count = npurt::detail::timer_action::plain([](void* p, std::uint64_t) { ++*static_cast<int*>(p); }, &ran, 0);
  // A blocking wait's deadline that is reached: the action runs, then the wait cancels it.
  const auto fired = q.call_at_cancellable(npurt::sim_time{us(1)}, count);
  REQUIRE(q.advance());
  CHECK(ran == 1);
  q.cancel(fired);
  CHECK(q.cancelled_pending() == 0);
  // A pending one that is cancelled never runs and never moves the clock; cancelling twice is
  // harmless, and the queue is empty afterwards.
  const auto pending = q.call_at_cancellable(npurt::sim_time{us(5)}, count);
  q.cancel(pending);
  q.cancel(pending);
  CHECK(q.cancelled_pending() == 1);
  CHECK_FALSE(q.advance());
  CHECK(ran == 1);
  CHECK(q.now() == npurt::sim_time{us(1)});
  CHECK(q.cancelled_pending() == 0);
}

namespace {

// The smallest backend that schedules through backend_host: its one task sets up actions at
// one instant the way a device model does (queued ends, work made due at once, a cancellable
// timeout), and records the order in which the system's host runs them.
class ordering_backend final : public npurt::backend {
 public:
  std::vector<std::string> log;
  std::uint64_t revocable_now_ticket = 99;
  npurt::sim_time at{};  // the instant of every action: 1 us after the task reached the backend

  [[nodiscard]] std::string_view name() const noexcept override { return "ordering"; }
  [[nodiscard]] std::size_t device_count() const noexcept override { return 1; }
  [[nodiscard]] const npurt::device_properties& properties(npurt::device_id) const override { return props_; }
  void attach(npurt::backend_host& host) override { host_ = &host; }
  [[nodiscard]] std::error_code validate(npurt::device_id, const npurt::kernel_desc&) const override { return {}; }
  [[nodiscard]] std::error_code validate_fixed(npurt::device_id, std::uint32_t) const override { return {}; }
  [[nodiscard]] bool functional() const noexcept override { return false; }
  void abort(npurt::device_id) override {}
  void submit(npurt::task_info& t) override {
    task_ = &t;
    t.start = host_->now();
    at = t.start + us(1);
    host_->call_at(at, &on_action, this, 'A');
    (void)host_->call_at_revocable(at, &on_action, this, 'B');
    (void)host_->call_at_cancellable(at, &on_action, this, 'C');
  }

 private:
  static void on_action(void* self, std::uint64_t arg) {
    auto* b = static_cast<ordering_backend*>(self);
    npurt::backend_host& h = *b->host_;
    b->log.emplace_back(1, static_cast<char>(arg));
    CHECK(h.now() == b->at);  // every action runs at the one instant
    switch (arg) {
      case 'A':  // at t, with B and C still queued for t
        h.call_at(h.now(), &on_action, b, 'D');
        (void)h.call_at_cancellable(h.now(), &on_action, b, 'E');
        b->revocable_now_ticket = h.call_at_revocable(h.now(), &on_action, b, 'F');
        break;
      case 'D': h.call_at(h.now(), &on_action, b, 'G'); break;
      case 'E':  // the last action: the task ends with it
        b->task_->end = h.now();
        h.complete(*b->task_);
        break;
      default: break;
    }
  }

  npurt::device_properties props_ = npurt::simple_config::default_properties();
  npurt::backend_host* host_ = nullptr;
  npurt::task_info* task_ = nullptr;
};

}  // namespace

// backend_host::call_at documents this order; changing it would change every trace, so it is
// pinned here on a backend that only schedules.
TEST_CASE("backend_host: actions made due now run before timed actions queued earlier for the instant",
          "[core][timer][backend]") {
  auto owned = std::make_unique<ordering_backend>();
  ordering_backend& b = *owned;
  npurt::system sys{std::move(owned)};
  auto s = sys.device(0).make_stream();
  s.launch(fixed(us(5)));
  sys.run();
  // A, B, C were queued for t in that order. A made D due at once (call_at) and F (a revocable
  // action for now), and queued E (a cancellable one, always timed); D made G due at once. What
  // is due at once runs, in call order, before the next queued action: D, F, G before B; then
  // the queued ones in call order, E last.
  CHECK(b.log == std::vector<std::string>{"A", "D", "F", "G", "B", "C", "E"});
  CHECK(b.revocable_now_ticket == 0);  // due at once: nothing to revoke
  CHECK(s.query());
  CHECK(sys.now() == b.at);
}

TEST_CASE("system::run called from inside the loop is refused with what to do instead", "[core][run][error]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::error_code ec_form;
  std::string what;
  std::error_code thrown;
  bool later_ran = false;
  s.launch_callback([&] {
    sys.run(ec_form);
    try {
      sys.run();
    } catch (const npurt::error& e) {
      thrown = e.code();
      what = e.what();
    }
  });
  s.launch(fixed(us(1)));
  s.launch_callback([&] { later_ran = true; });
  CHECK_NOTHROW(sys.run());
  INFO(what);
  CHECK(ec_form == npurt::errc::not_supported);
  CHECK(thrown == npurt::errc::not_supported);
  CHECK_THAT(what, Catch::Matchers::ContainsSubstring("npurt::system::run") &&
                       Catch::Matchers::ContainsSubstring("inside the loop") &&
                       Catch::Matchers::ContainsSubstring("co_await") &&
                       Catch::Matchers::ContainsSubstring("async_synchronize"));
  CHECK(later_ran);  // the refused call changed nothing: the outer run went on
  CHECK(s.query());
}
