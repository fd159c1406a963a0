// npurt::task and the use_task token: awaited launches and event waits resume from the
// completion itself (no Asio post), in stream order, at the completion's virtual time, never
// inside the initiating call, with npurt's typed errors and exceptions crossing task boundaries.
#include <npurt/npurt.hpp>
#include <npurt/task.hpp>

#include "common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>

using namespace npurt_test;

namespace {

npurt::task<void> task_test_three(npurt::system& sys, npurt::stream& s, std::vector<npurt::sim_time>& at) {
  for (int i = 0; i < 3; ++i) {
    co_await s.async_launch(fixed(us(10)), npurt::use_task);
    at.push_back(sys.now());
  }
}

asio::awaitable<void> task_test_three_asio(npurt::system& sys, npurt::stream& s, std::vector<npurt::sim_time>& at) {
  for (int i = 0; i < 3; ++i) {
    co_await s.async_launch(fixed(us(10)), asio::use_awaitable);
    at.push_back(sys.now());
  }
}

npurt::task<int> task_test_add_after(npurt::stream& s, int a, int b) {
  co_await s.async_launch(fixed(us(1)), npurt::use_task);
  co_return a + b;
}

npurt::task<void> task_test_throws_after(npurt::stream& s) {
  co_await s.async_launch(fixed(us(1)), npurt::use_task);
  throw std::runtime_error("from the inner task");
}

}  // namespace

TEST_CASE("a task's awaited launches resume in stream order at the virtual times use_awaitable sees", "[core][task]") {
  std::vector<npurt::sim_time> direct, posted;
  {
    npurt::system sys{simple()};
    auto s = sys.device(0).make_stream();
    bool ended = false;
    npurt::spawn(sys, task_test_three(sys, s, direct), [&](std::exception_ptr e) { ended = !e; });
    sys.run();
    CHECK(ended);
  }
  {
    npurt::system sys{simple()};
    auto s = sys.device(0).make_stream();
    asio::co_spawn(s.get_executor(), task_test_three_asio(sys, s, posted), asio::detached);
    sys.run();
  }
  REQUIRE(direct.size() == 3);
  // Each awaited kernel runs its 10 us after the one before it completed.
  CHECK(direct[0] >= npurt::sim_time{} + us(10));
  CHECK(direct[1] - direct[0] >= us(10));
  CHECK(direct[2] - direct[1] >= us(10));
  CHECK(direct == posted);
}

TEST_CASE("a task never resumes inside the initiating call, even when the operation fails at once",
          "[core][task][rules]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  std::vector<std::string> log;
  auto a = [&]() -> npurt::task<void> {
    log.push_back("a starts");
    npurt::kernel_desc bad = fixed(us(1));
    bad.block_dim = 1'000'000;  // more cores than any device has: refused before anything is enqueued
    try {
      co_await s.async_launch(bad, npurt::use_task);
      log.push_back("a: launched");
    } catch (const npurt::error& e) {
      log.push_back(e.code() == npurt::errc::invalid_argument ? "a: invalid_argument" : "a: other error");
    }
  };
  auto b = [&]() -> npurt::task<void> {
    log.push_back("b starts");
    co_return;
  };
  npurt::spawn(sys, a());
  npurt::spawn(sys, b());
  CHECK(log.empty());  // spawn never runs the task inside the call either
  sys.run();
  // Had a resumed inside async_launch, its error would precede b's start.
  CHECK(log == std::vector<std::string>{"a starts", "b starts", "a: invalid_argument"});
}

TEST_CASE("a task waits on an event of another stream and sees a failure before it", "[core][task][event]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto producer = dev.make_stream();
  auto consumer = dev.make_stream();
  auto ready = producer.launch(fixed(us(100), "produce"));
  npurt::sim_time resumed{};
  // Named: a coroutine lambda's captures live in the closure, which must outlive the task.
  auto consume = [&]() -> npurt::task<void> {
    co_await ready.async_wait(npurt::use_task);
    resumed = sys.now();
    co_await consumer.async_launch(fixed(us(1), "consume"), npurt::use_task);
  };
  npurt::spawn(sys, consume());
  sys.run();
  CHECK(resumed >= npurt::sim_time{} + us(100));

  // A copy that fails when it runs: the event after it reports the failure to the awaiting task.
  void* p = dev.malloc(1024);
  std::vector<std::byte> host(1024);
  producer.launch(fixed(us(50), "long"));
  producer.memcpy(p, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device);
  dev.free(p);
  auto after = producer.launch(fixed(us(1), "after"));
  std::error_code seen;
  auto wait_after = [&]() -> npurt::task<void> {
    try {
      co_await after.async_wait(npurt::use_task);
    } catch (const npurt::error& e) { seen = e.code(); }
  };
  npurt::spawn(sys, wait_after());
  sys.run();
  CHECK(seen == npurt::errc::invalid_pointer);
}

TEST_CASE("spawn of a lambda coroutine keeps the lambda, and so its captures, until the task ends", "[core][task]") {
  // A lambda coroutine reads its captures through the lambda object. asio::co_spawn takes the
  // function object and keeps it; so does npurt::spawn: the captures must outlive every
  // suspension, while the caller's lambda expression is gone when spawn returns.
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  auto owned = std::make_shared<int>(20);
  std::weak_ptr<int> watch = owned;
  int seen = 0;
  npurt::sim_time resumed{};
  bool ended = false;
  npurt::spawn(
      sys,
      [&sys, &s, &seen, &resumed, owned = std::move(owned), add = 22]() -> npurt::task<void> {
        co_await s.async_launch(fixed(us(10)), npurt::use_task);
        resumed = sys.now();
        seen = *owned + add;  // read after a suspension, through the lambda object
      },
      [&](std::exception_ptr e) { ended = !e; });
  CHECK_FALSE(watch.expired());  // the lambda lives in the spawned frame, not in this statement
  sys.run();
  CHECK(ended);
  CHECK(seen == 42);
  // The launch reaches the device after the host's enqueue cost; simple() adds no latency.
  CHECK(resumed == npurt::sim_time{sys.options().launch_overhead + us(10)});
  CHECK(watch.expired());  // and dies with the frame

  // Without a handler, what escapes leaves through run(), as for spawn of a task; a value-
  // returning lambda works too.
  int got = 0;
  npurt::spawn(sys, [&got, &s, base = 40]() -> npurt::task<void> {
    got = co_await task_test_add_after(s, base, 2);
    throw std::runtime_error("from the spawned lambda");
  });
  CHECK_THROWS_WITH(sys.run(), "from the spawned lambda");
  CHECK(got == 42);
}

TEST_CASE("values and exceptions cross task boundaries; spawn reports what escaped", "[core][task][error]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  int sum = 0;
  std::string inner;
  std::exception_ptr escaped;
  auto outer = [&]() -> npurt::task<void> {
    sum = co_await task_test_add_after(s, 2, 3);
    try {
      co_await task_test_throws_after(s);
    } catch (const std::runtime_error& e) { inner = e.what(); }
    co_await task_test_throws_after(s);  // not caught: escapes to spawn's handler
  };
  npurt::spawn(sys, outer(), [&](std::exception_ptr e) { escaped = e; });
  sys.run();
  CHECK(sum == 5);
  CHECK(inner == "from the inner task");
  REQUIRE(escaped);
  CHECK_THROWS_AS(std::rethrow_exception(escaped), std::runtime_error);
}

TEST_CASE("tasks run outside the strands, beside strand coroutines, in one order run after run",
          "[core][task][strand][determinism]") {
  auto once = [] {
    npurt::system sys{simple()};
    auto s1 = sys.device(0).make_stream();
    auto s2 = sys.device(0).make_stream();
    std::vector<std::string> log;
    bool task_outside_strand = true;
    bool asio_inside_strand = true;
    auto native = [&]() -> npurt::task<void> {
      for (int i = 0; i < 4; ++i) {
        co_await s1.async_launch(fixed(us(3)), npurt::use_task);
        task_outside_strand = task_outside_strand && !s1.get_executor().running_in_this_thread();
        log.push_back("task " + std::to_string(i) + " @" + std::to_string(sys.now().time_since_epoch().count()));
      }
    };
    auto on_strand = [&]() -> asio::awaitable<void> {
      for (int i = 0; i < 4; ++i) {
        co_await s2.async_launch(fixed(us(2)), asio::use_awaitable);
        asio_inside_strand = asio_inside_strand && s2.get_executor().running_in_this_thread();
        log.push_back("asio " + std::to_string(i) + " @" + std::to_string(sys.now().time_since_epoch().count()));
      }
    };
    npurt::spawn(sys, native());
    asio::co_spawn(s2.get_executor(), on_strand(), asio::detached);
    sys.run();
    CHECK(task_outside_strand);
    CHECK(asio_inside_strand);
    return log;
  };
  const auto first = once();
  CHECK(first.size() == 8);
  CHECK(first == once());
}

TEST_CASE("use_task on a null stream completes with invalid_stream after the call, without a loop",
          "[core][task][rules]") {
  npurt::system sys{simple()};
  std::error_code seen;
  auto null_launch = [&]() -> npurt::task<void> {
    npurt::stream none;
    try {
      co_await none.async_launch(fixed(us(1)), npurt::use_task);
    } catch (const npurt::error& e) { seen = e.code(); }
  };
  npurt::spawn(sys, null_launch());
  sys.run();
  CHECK(seen == npurt::errc::invalid_stream);
}

namespace {

npurt::task<std::string> task_test_text_after(npurt::stream& s) {
  co_await s.async_launch(fixed(us(1)), npurt::use_task);
  co_return std::string(40, 'x');
}

// Awaits *t through a local reference (the task object belongs to the test).
npurt::task<void> task_test_await_shared(npurt::task<std::string>* t, std::string& got, std::error_code& seen) {
  npurt::task<std::string>& shared = *t;
  try {
    got = co_await shared;
  } catch (const npurt::caller_error& e) { seen = e.code(); }
}

}  // namespace

TEST_CASE("a task is awaited once: an empty task and a second await throw invalid_argument, never UB",
          "[core][task][error]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();

  SECTION("co_await of an empty task, and spawn of one, report invalid_argument") {
    std::error_code awaited;
    auto outer = [&]() -> npurt::task<void> {
      npurt::task<int> empty;
      try {
        (void)co_await std::move(empty);
      } catch (const npurt::caller_error& e) { awaited = e.code(); }
    };
    npurt::spawn(sys, outer());
    // spawn refuses an empty task at the call, and its handler is never called.
    bool handler_called = false;
    try {
      npurt::spawn(sys, npurt::task<void>{}, [&](std::exception_ptr) { handler_called = true; });
      FAIL("spawn of an empty task returned");
    } catch (const std::system_error& e) {
      CHECK(e.code() == npurt::errc::invalid_argument);
      CHECK(std::string(e.what()).find("the task is empty") != std::string::npos);
    }
    npurt::task<void> moved_from = outer();
    npurt::task<void> keeper = std::move(moved_from);
    CHECK(moved_from.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    CHECK_THROWS_AS(npurt::spawn(sys, std::move(moved_from)), npurt::caller_error);
    sys.run();
    CHECK(awaited == npurt::errc::invalid_argument);
    CHECK_FALSE(handler_called);
  }

  SECTION("a second co_await of a finished task does not hand out its moved-from value") {
    std::string first, second;
    std::error_code seen;
    auto outer = [&]() -> npurt::task<void> {
      auto t = task_test_text_after(s);
      first = co_await t;
      try {
        second = co_await t;
      } catch (const npurt::caller_error& e) { seen = e.code(); }
    };
    npurt::spawn(sys, outer());
    sys.run();
    CHECK(first == std::string(40, 'x'));
    CHECK(second.empty());
    CHECK(seen == npurt::errc::invalid_argument);
  }

  SECTION("a second awaiter of a running task is refused; the first gets the value at its time") {
    npurt::task<std::string> shared = task_test_text_after(s);
    std::string a, b;
    std::error_code ea, eb;
    npurt::spawn(sys, task_test_await_shared(&shared, a, ea));
    npurt::spawn(sys, task_test_await_shared(&shared, b, eb));
    sys.run();
    CHECK(a == std::string(40, 'x'));
    CHECK(!ea);
    CHECK(b.empty());
    CHECK(eb == npurt::errc::invalid_argument);
    CHECK(sys.now().time_since_epoch() == npurt::system_options{}.launch_overhead + us(1));
  }
}

namespace {

struct task_test_dies {
  int* destroyed;
  explicit task_test_dies(int* d) : destroyed(d) {}
  task_test_dies(task_test_dies&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)) {}
  ~task_test_dies() {
    if (destroyed) ++*destroyed;
  }
};

// Holds a stream, device memory and a marker in its frame while it waits for a long kernel.
npurt::task<void> task_test_long_wait(npurt::device& dev, [[maybe_unused]] task_test_dies marker, bool& resumed) {
  auto s = dev.make_stream();
  npurt::device_buffer b(dev, 4096);
  co_await s.async_launch(fixed(picoseconds{1'000'000'000'000}), npurt::use_task);
  resumed = true;
}

}  // namespace

TEST_CASE("spawned tasks that have not ended when their system dies are destroyed with it, handles first",
          "[core][task][lifetime]") {
  int destroyed = 0;
  bool resumed = false;
  bool done = false;
  SECTION("never started") {
    {
      npurt::system sys{simple()};
      npurt::spawn(sys, task_test_long_wait(sys.device(0), task_test_dies{&destroyed}, resumed),
                   [&](std::exception_ptr) { done = true; });
    }
    CHECK(destroyed == 1);
  }
  SECTION("suspended on work the system's death aborts") {
    {
      npurt::system sys{simple()};
      npurt::spawn(sys, task_test_long_wait(sys.device(0), task_test_dies{&destroyed}, resumed),
                   [&](std::exception_ptr) { done = true; });
      auto other = sys.device(0).make_stream();
      other.launch(fixed(us(5)));
      other.synchronize();  // drives the loop: the task starts and waits for its kernel
      CHECK(destroyed == 0);
    }
    CHECK(destroyed == 1);
  }
  CHECK_FALSE(resumed);
  CHECK_FALSE(done);  // as co_spawn's handler when its io_context dies: never called
}

namespace {

npurt::task<std::string> task_test_text_with_marker(npurt::stream& s, task_test_dies marker) {
  co_await s.async_launch(fixed(us(1)), npurt::use_task);
  (void)marker;
  co_return std::string(40, 'y');
}

}  // namespace

TEST_CASE("a task moved away from its awaiter and destroyed mid-operation finishes on its own, never a dangling frame",
          "[core][task][lifetime]") {
  npurt::system sys{simple()};
  auto s = sys.device(0).make_stream();
  int destroyed = 0;
  npurt::task<std::string> shared = task_test_text_with_marker(s, task_test_dies{&destroyed});
  std::string got;
  std::error_code seen;
  npurt::spawn(sys, task_test_await_shared(&shared, got, seen));  // starts it, suspends in the launch
  auto thief = [&]() -> npurt::task<void> {
    { npurt::task<std::string> stolen = std::move(shared); }  // destroyed while the launch it waits for is queued
    co_return;
  };
  npurt::spawn(sys, thief());
  sys.run();
  // The awaiter holds a moved-from task: its co_await reports that, once the frame has ended.
  CHECK(seen == npurt::errc::invalid_argument);
  CHECK(got.empty());
  CHECK(destroyed == 1);  // the frame destroyed itself at its end: nothing leaked
  CHECK(sys.now().time_since_epoch() == npurt::system_options{}.launch_overhead + us(1));
}

namespace {

npurt::task<std::string> task_test_long_text(npurt::device& dev, [[maybe_unused]] task_test_dies marker) {
  auto s = dev.make_stream();
  co_await s.async_launch(fixed(picoseconds{1'000'000'000'000}), npurt::use_task);
  co_return std::string(40, 'z');
}

}  // namespace

TEST_CASE("an orphaned frame still suspended when its system dies is destroyed with the system, never leaked",
          "[core][task][lifetime]") {
  int destroyed = 0;
  std::string got;
  std::error_code seen;
  {
    npurt::system sys{simple()};
    npurt::task<std::string> shared = task_test_long_text(sys.device(0), task_test_dies{&destroyed});
    npurt::spawn(sys, task_test_await_shared(&shared, got, seen));
    auto thief = [&]() -> npurt::task<void> {
      { npurt::task<std::string> stolen = std::move(shared); }  // orphans the frame inside its 1 s kernel
      co_return;
    };
    npurt::spawn(sys, thief());
    auto other = sys.device(0).make_stream();
    other.launch(fixed(us(5)));
    other.synchronize();  // drives the loop: the frame starts, suspends, and is orphaned
    CHECK(destroyed == 0);
  }
  CHECK(destroyed == 1);
  CHECK(got.empty());
  CHECK_FALSE(seen);  // its awaiter died with the system, never resumed
}

namespace {

npurt::task<void> task_test_pool(npurt::device& dev, npurt::stream& s, std::vector<float>& out, std::error_code& oom,
                                 bool& resumed_after_oom) {
  const std::size_t bytes = 256 * sizeof(float);
  void* p = co_await dev.async_malloc(bytes, s, npurt::use_task);
  std::vector<float> in(256);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  co_await s.async_memcpy(p, bytes, in.data(), bytes, npurt::memcpy_kind::host_to_device, npurt::use_task);
  out.assign(256, -1.0f);
  co_await s.async_memcpy(out.data(), bytes, p, bytes, npurt::memcpy_kind::device_to_host, npurt::use_task);
  co_await dev.async_free(p, s, npurt::use_task);
  void* big = co_await dev.async_malloc(std::size_t{40} << 20, s, npurt::use_task);
  s.launch(fixed(us(50)));  // a busy device: the pool's last retry waits for it to drain
  try {
    void* second = co_await dev.async_malloc(std::size_t{40} << 20, s, npurt::use_task);
    (void)second;
  } catch (const npurt::error& e) { oom = e.code(); }
  co_await dev.async_free(big, s, npurt::use_task);
  void* again = co_await dev.async_malloc(bytes, s, npurt::use_task);
  resumed_after_oom = again != nullptr;
  co_await dev.async_free(again, s, npurt::use_task);
}

}  // namespace

TEST_CASE("use_task gives a value-carrying completion's value: async_malloc's pointer, and throws its error",
          "[core][task][memory]") {
  auto cfg = simple();
  cfg.properties.memory_bytes = std::size_t{64} << 20;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<float> out;
  std::error_code oom;
  bool again = false;
  bool ended = false;
  npurt::spawn(sys, task_test_pool(dev, s, out, oom, again), [&](std::exception_ptr e) { ended = !e; });
  sys.run();
  CHECK(ended);
  REQUIRE(out.size() == 256);
  CHECK(out[0] == 0.0f);
  CHECK(out[255] == 127.5f);
  CHECK(oom == npurt::errc::out_of_memory);  // typed and thrown, and the task went on
  CHECK(again);
  CHECK(dev.mem_pool().stats().allocated_bytes[0].current == 0);
  CHECK(dev.mem_pool().stats().allocation[0].allocated == 3);  // the refused request took nothing
  CHECK(sys.now() >= npurt::sim_time{} + us(50));             // the retry waited for the kernel
}

namespace {

npurt::task<void> task_test_oom(npurt::device& dev, npurt::stream& s, std::vector<npurt::out_of_memory_error>& seen) {
  const std::size_t big = std::size_t{40} << 20;
  void* first = co_await dev.async_malloc(big, s, npurt::use_task);
  // Refused at once (the device is idle), then after the device drained (it is busy).
  for (int busy = 0; busy < 2; ++busy) {
    if (busy) s.launch(fixed(us(50)));
    try {
      void* second = co_await dev.async_malloc(big, s, npurt::use_task);
      (void)second;
    } catch (const npurt::out_of_memory_error& e) { seen.push_back(e); }
  }
  co_await dev.async_free(first, s, npurt::use_task);
}

}  // namespace

TEST_CASE("an awaited async_malloc that runs out of memory throws out_of_memory_error with its fields",
          "[core][task][memory]") {
  auto cfg = simple();
  cfg.properties.memory_bytes = std::size_t{64} << 20;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<npurt::out_of_memory_error> seen;
  bool ended = false;
  npurt::spawn(sys, task_test_oom(dev, s, seen), [&](std::exception_ptr e) { ended = !e; });
  sys.run();
  CHECK(ended);
  REQUIRE(seen.size() == 2);
  for (const auto& e : seen) {
    CHECK(e.code() == npurt::errc::out_of_memory);
    CHECK(e.requested() == (std::size_t{40} << 20));
    CHECK(e.device() == 0);
    CHECK(e.details().total == (std::size_t{64} << 20));
    CHECK(e.details().allocated >= (std::size_t{40} << 20));  // the first block, held when refused
    CHECK(std::string(e.what()).find("Tried to allocate 40") != std::string::npos);
  }
  // The same as the throwing form raises.
  void* held = dev.mem_pool().malloc_async(std::size_t{40} << 20, s);
  CHECK_THROWS_AS((void)dev.mem_pool().malloc_async(std::size_t{40} << 20, s), npurt::out_of_memory_error);
  dev.mem_pool().free_async(held, s);
  CHECK(dev.mem_pool().stats().allocated_bytes[0].current == 0);
}

namespace {

npurt::task<void> task_test_sync_after_callback(npurt::stream& s, std::string& thrown) {
  s.launch_callback([] { throw std::runtime_error("callback exploded"); });
  try {
    co_await s.async_synchronize(npurt::use_task);
  } catch (const std::runtime_error& e) { thrown = e.what(); }
}

npurt::task<void> task_test_sync_after_copy(npurt::device& dev, npurt::stream& s, std::vector<std::byte>& host,
                                            std::string& what, std::error_code& code) {
  void* p = dev.malloc(1024);
  s.launch(fixed(us(100), "long"));
  s.memcpy(p, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device);
  dev.free(p);  // the copy, still queued behind the kernel, fails when it runs
  try {
    co_await s.async_synchronize(npurt::use_task);
  } catch (const npurt::caller_error& e) {
    code = e.code();
    what = e.what();
  }
}

}  // namespace

TEST_CASE("an awaited async_synchronize throws what synchronize throws: the callback's exception, or the task named",
          "[core][task][error][callback]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  SECTION("a host callback threw: its own exception") {
    std::string thrown;
    npurt::spawn(sys, task_test_sync_after_callback(s, thrown));
    sys.run();
    CHECK(thrown == "callback exploded");
  }
  SECTION("a copy failed: the error class's exception, naming the task") {
    std::vector<std::byte> host(1024);
    std::string what;
    std::error_code code;
    npurt::spawn(sys, task_test_sync_after_copy(dev, s, host, what, code));
    sys.run();
    INFO(what);
    CHECK(code == npurt::errc::invalid_pointer);
    CHECK(what.starts_with("npurt::stream::async_synchronize: task "));
    CHECK(what.find("(memcpy_h2d) on stream " + std::to_string(s.id()) + " failed") != std::string::npos);
  }
  CHECK(s.query());  // the failure was read, once
}

namespace {
npurt::task<void> task_test_timed_waits(npurt::stream& s, npurt::device& dev, npurt::event& ev,
                                        std::vector<std::string>& what, std::vector<npurt::timeout_kind>& timer) {
  // Each wait gives up after 1 us of the 100 us kernel.
  for (int i = 0; i < 3; ++i) {
    try {
      if (i == 0) co_await s.async_synchronize(us(1), npurt::use_task);
      if (i == 1) co_await ev.async_wait(us(1), npurt::use_task);
      if (i == 2) co_await dev.async_synchronize(us(1), npurt::use_task);
      what.emplace_back("no timeout");
    } catch (const npurt::timeout_error& e) {
      what.emplace_back(e.what());
      timer.push_back(e.timer());
    }
  }
}
}  // namespace

// A program with several timed waits needs to know which one gave up: the timer's name and
// limit alone fit every one of them.
TEST_CASE("a wait's timeout thrown through use_task names the call that waited, as its blocking form does",
          "[core][task][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::event ev = dev.make_event();
  const auto wait_for_kernel = [&] {
    s.launch(fixed(us(100)));
    s.record(ev);
  };
  // What the blocking forms throw for the same wait, outside run().
  std::vector<std::string> blocking;
  for (int i = 0; i < 3; ++i) {
    wait_for_kernel();
    try {
      if (i == 0) s.synchronize(us(1));
      if (i == 1) ev.synchronize(us(1));
      if (i == 2) dev.synchronize(us(1));
      blocking.emplace_back("no timeout");
    } catch (const npurt::timeout_error& e) { blocking.emplace_back(e.what()); }
    sys.run();
  }
  wait_for_kernel();
  std::vector<std::string> what;
  std::vector<npurt::timeout_kind> timer;
  npurt::spawn(sys, task_test_timed_waits(s, dev, ev, what, timer));
  sys.run();
  REQUIRE(what.size() == 3);
  const std::pair<std::string, std::string> calls[] = {
      {"npurt::stream::synchronize", "npurt::stream::async_synchronize"},
      {"npurt::event::synchronize", "npurt::event::async_wait"},
      {"npurt::device::synchronize", "npurt::device::async_synchronize"}};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO(blocking[i]);
    // The blocking form's words with the async call's name: "npurt::stream::synchronize (sync
    // timer, limit 0.001 ms): wait timed out" becomes "npurt::stream::async_synchronize (...".
    REQUIRE(blocking[i].starts_with(calls[i].first + " ("));
    CHECK(what[i] == calls[i].second + blocking[i].substr(calls[i].first.size()));
    CHECK(timer[i] == npurt::timeout_kind::sync);
  }
}
