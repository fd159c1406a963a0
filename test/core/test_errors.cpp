#include <npurt/error.hpp>
#include <npurt/task.hpp>

#include "common.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace npurt_test;

namespace {

TEST_CASE("error codes fall into CANN's three ranges and compare with their class", "[core][error]") {
  std::error_code c = npurt::errc::invalid_device;
  std::error_code r = npurt::errc::out_of_memory;
  std::error_code d = npurt::errc::device_lost;
  CHECK(c.value() == 107001);
  CHECK(c == npurt::error_class::caller);
  CHECK(r == npurt::error_class::resource);
  CHECK(d == npurt::error_class::device);
  CHECK_FALSE(c == npurt::error_class::device);
  CHECK(std::string(c.category().name()) == "npurt");
  CHECK_FALSE(c.message().empty());
}

TEST_CASE("throw_error raises the exception type of the code's class", "[core][error]") {
  CHECK_THROWS_AS(npurt::throw_error(npurt::errc::wait_timeout), npurt::timeout_error);
  CHECK_THROWS_AS(npurt::throw_error(npurt::errc::deadlock), npurt::deadlock_error);
  CHECK_THROWS_AS(npurt::throw_error(npurt::errc::pool_limit), npurt::resource_error);
  CHECK_THROWS_AS(npurt::throw_error(npurt::errc::link_failure), npurt::device_error);
  CHECK_THROWS_AS(npurt::throw_error(npurt::errc::null_pointer), npurt::caller_error);
}

TEST_CASE("an invalid device id is a caller error", "[core][error]") {
  npurt::system sys{simple(2)};
  CHECK_THROWS_AS(sys.device(2), npurt::caller_error);
  CHECK_THROWS_AS(sys.device(-1), npurt::caller_error);
  std::error_code ec;
  CHECK(sys.find_device(7, ec) == nullptr);
  CHECK(ec == npurt::errc::invalid_device);
}

TEST_CASE("bad copies are rejected before anything is enqueued, and the runtime stays usable", "[core][error]") {
  npurt::system sys{simple(2)};
  auto& d0 = sys.device(0);
  auto& d1 = sys.device(1);
  auto s = d0.make_stream();
  void* a = d0.malloc(1024);
  void* b = d1.malloc(1024);
  std::vector<char> host(4096);
  std::error_code ec;

  s.memcpy(nullptr, 16, host.data(), 16, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::null_pointer);
  s.memcpy(a, 1024, host.data(), 0, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::zero_size);
  // destMax smaller than the count, and a count larger than the allocation.
  s.memcpy(a, 512, host.data(), 1024, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::size_overflow);
  s.memcpy(a, 4096, host.data(), 2048, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::size_overflow);
  // The kind must match the pointers.
  s.memcpy(host.data(), 1024, a, 1024, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_copy_kind);
  s.memcpy(a, 1024, host.data(), 1024, npurt::memcpy_kind::device_to_device, ec);
  CHECK(ec == npurt::errc::invalid_copy_kind);
  // A stream of device 0 cannot upload into device 1.
  s.memcpy(b, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::stream_device_mismatch);
  // A pointer npurt never gave out, and a freed one.
  void* bogus = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(a) + (std::uintptr_t{1} << 30));
  s.memcpy(bogus, 16, host.data(), 16, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  void* gone = d0.malloc(64);
  d0.free(gone);
  s.memcpy(gone, 64, host.data(), 64, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  d0.free(gone, ec);
  CHECK(ec == npurt::errc::double_free);
  d0.free(bogus, ec);
  CHECK(ec == npurt::errc::invalid_pointer);
  d1.free(a, ec);
  CHECK(ec == npurt::errc::stream_device_mismatch);
  CHECK_THROWS_AS(s.memcpy(nullptr, 1, host.data(), 1), npurt::caller_error);

  // Nothing was enqueued by any of the above, and good work still runs.
  CHECK(s.query());
  s.memcpy(a, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device);
  s.synchronize();
  CHECK(s.query());
}

TEST_CASE("bad async operations complete with the error instead of throwing", "[core][error][asio]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::error_code got;
  s.async_memcpy(nullptr, 4, nullptr, 4, npurt::memcpy_kind::host_to_device,
                 [&](npurt::async_error_code ec) { got = ec; });
  sys.run();
  CHECK(got == npurt::errc::null_pointer);
  run_coro(sys, [&]() -> asio::awaitable<void> {
    bool threw = false;
    try {
      co_await s.async_memset(nullptr, 4, 0, 4, asio::use_awaitable);
    } catch (const boost::system::system_error& e) {
      threw = true;
      CHECK(e.code() == npurt::errc::null_pointer);
    }
    CHECK(threw);
  }());
}

/// An async call refused at the call: its handler hears the code after the call returns, with
/// words in recent_error_message naming the call and the cause, then the code's own message (as
/// a task failure's do); awaited with npurt::use_task it throws the same words.
template <class Refusal>
void check_async_refusal(npurt::system& sys, const Refusal& r) {
  std::error_code heard;
  std::string recent;
  bool initiating = true, called = false;
  r.start([&](npurt::async_error_code e) {
    called = true;
    CHECK_FALSE(initiating);  // never inside the initiating call
    heard = e;
    recent = sys.recent_error_message();
  });
  initiating = false;
  sys.run();
  REQUIRE(called);
  CHECK(heard == r.code);
  // The words name the call and the cause, then the code's own message, as a task failure's do.
  CHECK(recent.starts_with(r.call));
  CHECK(recent.find(r.cause) != std::string::npos);
  CHECK(recent.ends_with(": " + std::error_code(r.code).message()));

  std::exception_ptr thrown;
  npurt::spawn(sys, r.awaited(), [&](std::exception_ptr e) { thrown = e; });
  sys.run();
  REQUIRE(thrown);
  try {
    std::rethrow_exception(thrown);
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == r.code);
    CHECK(std::string(e.what()).starts_with(r.call));
    CHECK(std::string(e.what()).find(r.cause) != std::string::npos);
  }
}

TEST_CASE("an async call refused at the call says why, as its throwing form does", "[core][error][asio]") {
  // README: code that hears only an error code reads the words from recent_error_message(), and
  // co_await with npurt::use_task throws them. A refusal at the call (before anything is queued)
  // has words too: which argument is wrong and how.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* gone = dev.malloc(64);
  dev.free(gone);
  npurt::event never = dev.make_event();
  const npurt::kernels::fixed negative{picoseconds{-5}};
  std::vector<char> host(64);

  struct refusal {
    const char* call;
    std::function<void(std::function<void(npurt::async_error_code)>)> start;
    std::function<npurt::task<void>()> awaited;
    npurt::errc code;
    const char* cause;  // what the caller passed that is wrong
  };
  const refusal cases[] = {
      {"npurt::stream::async_launch: ", [&](auto h) { s.async_launch(negative, std::move(h)); },
       [&]() -> npurt::task<void> { co_await s.async_launch(negative, npurt::use_task); },
       npurt::errc::invalid_argument, "duration of -5 ps is negative"},
      {"npurt::stream::async_memcpy: ",
       [&](auto h) {
         s.async_memcpy(host.data(), host.size(), gone, 64, npurt::memcpy_kind::device_to_host, std::move(h));
       },
       [&]() -> npurt::task<void> {
         co_await s.async_memcpy(host.data(), host.size(), gone, 64, npurt::memcpy_kind::device_to_host,
                                 npurt::use_task);
       },
       npurt::errc::invalid_pointer, "was freed"},
      {"npurt::stream::async_memset: ", [&](auto h) { s.async_memset(gone, 64, 0, 64, std::move(h)); },
       [&]() -> npurt::task<void> { co_await s.async_memset(gone, 64, 0, 64, npurt::use_task); },
       npurt::errc::invalid_pointer, "was freed"},
      {"npurt::stream::async_wait: ", [&](auto h) { s.async_wait(never, std::move(h)); },
       [&]() -> npurt::task<void> { co_await s.async_wait(never, npurt::use_task); }, npurt::errc::event_not_recorded,
       "never recorded"},
  };
  for (const refusal& r : cases) {
    INFO(r.call);
    check_async_refusal(sys, r);
  }
  CHECK(s.query());  // nothing was queued, nothing is sticky
}

TEST_CASE("a host wait refused at the call says why, as its throwing form does", "[core][error][asio][event]") {
  // As the enqueues above: a wait refused before it waits (a negative timeout, an event that was
  // never recorded, a gone stream) leaves the words of the blocking form in recent_error_message,
  // and an await with npurt::use_task throws them, not a generic "awaited operation failed".
  npurt::system sys{simple(2)};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto gone = sys.device(1).make_stream();
  sys.device(1).reset();  // docs/runtime.md: reset invalidates the device's streams
  npurt::event recorded = dev.make_event();
  s.record(recorded);
  npurt::event never = dev.make_event();
  const picoseconds negative{-5};
  const char* const negative_words = "timeout of -5 ps is negative";
  sys.run();
  const npurt::sim_time start = sys.now();

  struct refusal {
    const char* call;       // the async form's name, which its words begin with
    const char* blocking;   // the throwing form's
    std::function<void(std::function<void(npurt::async_error_code)>)> start;
    std::function<npurt::task<void>()> awaited;
    std::function<void()> block;
    npurt::errc code;
    const char* cause;
  };
  const refusal cases[] = {
      {"npurt::event::async_wait: ", "npurt::event::synchronize: ",
       [&](auto h) { recorded.async_wait(negative, std::move(h)); },
       [&]() -> npurt::task<void> { co_await recorded.async_wait(negative, npurt::use_task); },
       [&] { recorded.synchronize(negative); }, npurt::errc::invalid_argument, negative_words},
      {"npurt::event::async_wait: ", "npurt::event::synchronize: ", [&](auto h) { never.async_wait(std::move(h)); },
       [&]() -> npurt::task<void> { co_await never.async_wait(npurt::use_task); }, [&] { never.synchronize(); },
       npurt::errc::event_not_recorded, "never recorded"},
      {"npurt::stream::async_synchronize: ", "npurt::stream::synchronize: ",
       [&](auto h) { s.async_synchronize(negative, std::move(h)); },
       [&]() -> npurt::task<void> { co_await s.async_synchronize(negative, npurt::use_task); },
       [&] { s.synchronize(negative); }, npurt::errc::invalid_argument, negative_words},
      {"npurt::stream::async_synchronize: ", "npurt::stream::synchronize: ",
       [&](auto h) { gone.async_synchronize(std::move(h)); },
       [&]() -> npurt::task<void> { co_await gone.async_synchronize(npurt::use_task); }, [&] { gone.synchronize(); },
       npurt::errc::invalid_stream, "device was reset"},
      {"npurt::device::async_synchronize: ", "npurt::device::synchronize: ",
       [&](auto h) { dev.async_synchronize(negative, std::move(h)); },
       [&]() -> npurt::task<void> { co_await dev.async_synchronize(negative, npurt::use_task); },
       [&] { dev.synchronize(negative); }, npurt::errc::invalid_argument, negative_words},
  };
  for (const refusal& r : cases) {
    INFO(r.call << " " << r.cause);
    (void)sys.recent_error_message();  // whatever came before is not this call's
    check_async_refusal(sys, r);
    // The blocking form says the same of the same mistake.
    try {
      r.block();
      FAIL("the blocking form accepted what the async form refused");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == r.code);
      CHECK(std::string(e.what()).starts_with(r.blocking));
      CHECK(std::string(e.what()).find(r.cause) != std::string::npos);
    }
  }
  CHECK(sys.now() == start);  // nothing waited
  CHECK(s.query());
}

TEST_CASE("waiting on an event that was never recorded is an error", "[core][error][event]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto ev = dev.make_event();
  std::error_code ec;
  s.wait(ev, ec);
  CHECK(ec == npurt::errc::event_not_recorded);
  CHECK_THROWS_AS(ev.query(), npurt::caller_error);
  CHECK_THROWS_AS(npurt::elapsed_time(ev, ev), npurt::caller_error);
  std::error_code host_ec;
  ev.async_wait([&](npurt::async_error_code e) { host_ec = e; });
  sys.run();
  CHECK(host_ec == npurt::errc::event_not_recorded);
  CHECK(s.query());
}

TEST_CASE("an event of another device cannot be recorded on a stream", "[core][error][event]") {
  npurt::system sys{simple(2)};
  auto s = sys.device(0).make_stream();
  auto ev = sys.device(1).make_event();
  std::error_code ec;
  s.record(ev, ec);
  CHECK(ec == npurt::errc::stream_device_mismatch);
  npurt::event none;
  s.record(none, ec);
  CHECK(ec == npurt::errc::invalid_event);
}

TEST_CASE("a moved-from or default stream reports invalid_stream", "[core][error][stream]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  npurt::stream t = std::move(s);
  std::error_code ec;
  s.launch(fixed(us(1)), ec);
  CHECK(ec == npurt::errc::invalid_stream);
  CHECK_THROWS_AS(s.priority(), npurt::caller_error);
  CHECK_FALSE(s.valid());
  CHECK(t.valid());
}

TEST_CASE("an invalid stream's errors say how it stopped naming a stream", "[core][error][stream]") {
  // errc::invalid_stream's own words ("invalid or destroyed stream") fit a moved-from handle and
  // a stream whose device was reset alike; the message says which, and what to do.
  npurt::system sys{simple(2)};
  auto moved = sys.device(0).make_stream();
  npurt::stream keeper = std::move(moved);
  auto of_reset = sys.device(1).make_stream();
  sys.device(1).reset();  // docs/runtime.md: reset invalidates the device's streams

  struct handle_case {
    npurt::stream* s;
    const char* says;
  };
  for (const handle_case& c : {handle_case{&moved, "moved from"}, handle_case{&of_reset, "device was reset"}}) {
    INFO(c.says);
    npurt::stream& s = *c.s;
    const auto named = [&](const char* call, const std::string& what) {
      CHECK(what.starts_with(call));
      CHECK(what.find(c.says) != std::string::npos);
    };
    try {
      s.launch(fixed(us(1)));
      FAIL("launch on an invalid stream");
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::invalid_stream);
      named("npurt::stream::launch: ", e.what());
    }
    try {
      s.launch_callback([] {});
      FAIL("launch_callback on an invalid stream");
    } catch (const npurt::caller_error& e) { named("npurt::stream::launch_callback: ", e.what()); }
    if (&s == &of_reset) {  // a null handle has no system to keep the recent error in
      std::error_code heard;
      s.async_launch(fixed(us(1)), [&](npurt::async_error_code e) { heard = e; });
      sys.run();
      CHECK(heard == npurt::errc::invalid_stream);
      named("npurt::stream::async_launch: ", sys.recent_error_message());
    }
  }
  CHECK(keeper.valid());
}

TEST_CASE("a kernel the backend cannot run is rejected at launch", "[core][error][kernel]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  npurt::kernels::matmul mm;
  std::error_code ec;
  s.launch(npurt::kernel_desc{mm}, ec);
  CHECK(ec == npurt::errc::not_supported);
  s.launch(npurt::kernel_desc{npurt::kernels::fixed{}, "too wide", 4096}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK(s.query());
}

// CANN's aclGetRecentErrMsg holds the words of the last refused call whatever its form: code that
// takes an error_code cannot read them anywhere else.
TEST_CASE("an error_code form refused at the call leaves its throwing form's words in recent_error_message",
          "[core][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* gone = dev.malloc(64);
  dev.free(gone);
  std::vector<char> host(64);
  npurt::event never = dev.make_event();
  npurt::event task_event = s.launch(fixed(us(1)));
  const npurt::kernels::fixed negative{picoseconds{-5}};

  struct refusal {
    const char* call;
    std::function<void(std::error_code&)> with_code;
    std::function<void()> throwing;
    npurt::errc code;
    const char* cause;
  };
  const refusal cases[] = {
      {"npurt::stream::launch: ", [&](std::error_code& ec) { s.launch(negative, ec); }, [&] { s.launch(negative); },
       npurt::errc::invalid_argument, "duration of -5 ps is negative"},
      {"npurt::stream::launch: ", [&](std::error_code& ec) { s.launch(npurt::make_shared_kernel(negative), ec); },
       [&] { s.launch(npurt::make_shared_kernel(negative)); }, npurt::errc::invalid_argument,
       "duration of -5 ps is negative"},
      {"npurt::stream::launch: ", [&](std::error_code& ec) { s.launch(npurt::shared_kernel{}, ec); },
       [&] { s.launch(npurt::shared_kernel{}); }, npurt::errc::null_pointer, "null shared kernel descriptor"},
      {"npurt::stream::memcpy: ",
       [&](std::error_code& ec) {
         s.memcpy(host.data(), host.size(), gone, 64, npurt::memcpy_kind::device_to_host, ec);
       },
       [&] { s.memcpy(host.data(), host.size(), gone, 64, npurt::memcpy_kind::device_to_host); },
       npurt::errc::invalid_pointer, "was freed"},
      {"npurt::stream::memset: ", [&](std::error_code& ec) { s.memset(gone, 64, 0, 64, ec); },
       [&] { s.memset(gone, 64, 0, 64); }, npurt::errc::invalid_pointer, "was freed"},
      {"npurt::stream::record: ", [&](std::error_code& ec) { s.record(task_event, ec); }, [&] { s.record(task_event); },
       npurt::errc::invalid_event, "a launch's (task) event"},
      {"npurt::stream::wait: ", [&](std::error_code& ec) { s.wait(never, ec); }, [&] { s.wait(never); },
       npurt::errc::event_not_recorded, "never recorded"},
  };
  for (const refusal& r : cases) {
    INFO(r.call << " " << r.cause);
    (void)sys.recent_error_message();  // whatever came before is not this call's
    std::error_code ec;
    r.with_code(ec);
    CHECK(ec == r.code);
    const std::string recent = sys.recent_error_message();
    CHECK(recent.starts_with(r.call));
    CHECK(recent.find(r.cause) != std::string::npos);
    CHECK(recent.ends_with(": " + std::error_code(r.code).message()));
    CHECK(sys.recent_error_message().empty());  // read once
    try {
      r.throwing();
      FAIL("the throwing form accepted what the error_code form refused");
    } catch (const npurt::caller_error& e) { CHECK(std::string(e.what()) == recent); }
  }
  // A launch that succeeds leaves nothing.
  std::error_code ec;
  s.launch(fixed(us(1)), ec);
  CHECK_FALSE(ec);
  CHECK(sys.recent_error_message().empty());
  sys.run();
}

}  // namespace

TEST_CASE("a copy or memset refused for another device's memory names the pointer and both devices", "[core][error]") {
  // The code alone says "stream, event or memory belongs to another device": the words say which.
  npurt::system sys{simple(3)};
  auto& d0 = sys.device(0);
  auto s = d0.make_stream();
  npurt::device_buffer mine(d0, 1024), theirs(sys.device(1), 1024), third(sys.device(2), 1024);
  std::vector<std::byte> host(1024);
  auto refusal = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == npurt::errc::stream_device_mismatch);
      return e.what();
    }
    return "accepted";
  };
  auto text = [](const void* p) {
    std::ostringstream os;
    os << p;
    return os.str();
  };
  const std::string of_1 = text(theirs.data()) + " is memory of device 1, the copy's stream is of device 0";
  using Catch::Matchers::ContainsSubstring;
  CHECK_THAT(refusal([&] { s.memcpy(theirs.data(), 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device); }),
             ContainsSubstring(of_1));
  CHECK_THAT(refusal([&] { s.memcpy(host.data(), 1024, theirs.data(), 1024, npurt::memcpy_kind::device_to_host); }),
             ContainsSubstring(of_1));
  const std::string set_1 = text(theirs.data()) + " is memory of device 1, the memset's stream is of device 0";
  CHECK_THAT(refusal([&] { s.memset(theirs.data(), 1024, 0, 1024); }), ContainsSubstring(set_1));
  // A copy between two other devices names both ends.
  CHECK_THAT(refusal([&] { s.memcpy(third.data(), 1024, theirs.data(), 1024); }),
             ContainsSubstring(text(third.data()) + " is memory of device 2 and " + text(theirs.data()) +
                               " of device 1, the copy's stream is of device 0"));
  // The blocking copy (on the device's own stream) says the same, and names a freed pointer.
  CHECK_THAT(refusal([&] { d0.memcpy(host.data(), 1024, theirs.data(), 1024, npurt::memcpy_kind::device_to_host); }),
             ContainsSubstring(of_1));
  void* gone = d0.malloc(1024);
  d0.free(gone);
  try {
    d0.memcpy(host.data(), 1024, gone, 1024, npurt::memcpy_kind::device_to_host);
    FAIL("a copy from freed memory was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_pointer);
    CHECK_THAT(e.what(), ContainsSubstring(text(gone) + " was freed"));
  }
  // The async form's words reach recent_error_message.
  npurt::async_error_code async_ec;
  s.async_memset(theirs.data(), 1024, 0, 1024, [&](npurt::async_error_code ec) { async_ec = ec; });
  sys.run();
  CHECK(async_ec == npurt::errc::stream_device_mismatch);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring(set_1));
  // Nothing was queued, and the stream's own device still works.
  s.memset(mine.data(), 1024, 0, 1024);
  s.synchronize();
}
