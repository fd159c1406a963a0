// A call refused as errc::wrong_thread (system_options::check_thread) touches nothing of the
// system: the loop thread's recent error, its io_context, clock, pool figures and trace stay as
// they were, and an async call's handler completes through its own associated executor, once,
// after the call has returned.
#include <npurt/graph/session.hpp>
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include "common.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::StartsWith;

namespace {

// Every report the observers hear: a refused call must add none.
struct counting_observer final : npurt::observer {
  std::size_t calls = 0;
  void on_task(const npurt::task_info&) override { ++calls; }
  void on_event_record(const npurt::event_record_info&) override { ++calls; }
  void on_event_wait(const npurt::event_wait_info&) override { ++calls; }
  void on_memory(const npurt::memory_info&) override { ++calls; }
  void on_host_range(const npurt::host_range_info&) override { ++calls; }
  void on_stream_created(npurt::device_id, std::uint32_t, std::uint8_t) override { ++calls; }
};

// A second thread with an io_context of its own: the calls run there, then the handlers they
// were given (bound to that io_context) run when it runs it, after every call has returned.
struct other_thread {
  boost::asio::io_context ioc;
  std::thread::id id;
  bool calling = false;
  struct completion {
    npurt::async_error_code ec;
    bool inside_call = false;
    bool on_this_thread = false;
  };
  std::vector<completion> done;

  auto handler() {
    return boost::asio::bind_executor(ioc, [this](npurt::async_error_code e, auto&&...) {
      done.push_back({e, calling, std::this_thread::get_id() == id});
    });
  }
  void run(const std::function<void()>& calls) {
    std::thread t([&] {
      id = std::this_thread::get_id();
      calling = true;
      calls();
      calling = false;
      ioc.run();
    });
    t.join();
  }
  // Each of `n` handlers ran exactly once, on this thread, not inside its call, with wrong_thread.
  void check_completions(std::size_t n) const {
    REQUIRE(done.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("handler " << i);
      CHECK(done[i].ec == npurt::errc::wrong_thread);
      CHECK_FALSE(done[i].inside_call);
      CHECK(done[i].on_this_thread);
    }
  }
};

template <class Call>
std::error_code code_of(Call&& call) {
  try {
    call();
  } catch (const npurt::error& e) { return e.code(); }
  return {};
}

// A coroutine that runs at once on its caller's thread: enough to await with npurt::use_task
// where no loop runs (a refused await does not suspend).
struct eager {
  struct promise_type {
    eager get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// What each await threw: its code and its words.
eager await_refused(npurt::stream& s, npurt::event& ev, npurt::mem_pool& pool, std::vector<std::error_code>& codes,
                    std::vector<std::string>& words) {
  const auto keep = [&](const npurt::error& e) {
    codes.push_back(e.code());
    words.emplace_back(e.what());
  };
  try {
    co_await s.async_launch(fixed(us(1)), npurt::use_task);
  } catch (const npurt::error& e) { keep(e); }
  try {
    co_await s.async_synchronize(npurt::use_task);
  } catch (const npurt::error& e) { keep(e); }
  try {
    co_await ev.async_wait(npurt::use_task);
  } catch (const npurt::error& e) { keep(e); }
  try {
    void* p = co_await pool.async_malloc(1024, s, npurt::use_task);
    words.emplace_back(p ? "allocated" : "null");
  } catch (const npurt::error& e) { keep(e); }
}

bool ready(std::future<void>& f) { return f.wait_for(std::chrono::seconds(5)) == std::future_status::ready; }

// The words each npurt::use_task await threw ("" if it threw none): what a refused await raises
// once the initiating call has returned, or what an initiation that threw let out.
eager await_device(npurt::device& dev, npurt::stream& s, std::vector<std::string>& words) {
  try {
    (void)co_await dev.async_malloc(1024, s, npurt::use_task);
  } catch (const npurt::error& e) { words[0] = e.what(); }
  try {
    co_await dev.async_free(nullptr, s, npurt::use_task);
  } catch (const npurt::error& e) { words[1] = e.what(); }
}

eager await_session(npurt::session& ses, const npurt::compiled_graph& c, const std::vector<npurt::feed>& feeds,
                    const npurt::tensor& value, std::vector<std::string>& words) {
  try {
    (void)co_await ses.async_run(c, feeds, npurt::use_task);
  } catch (const npurt::error& e) { words[0] = e.what(); }
  const std::vector<std::vector<npurt::feed>> batches{feeds};
  try {
    (void)co_await ses.async_run_batches(c, batches, npurt::use_task);
  } catch (const npurt::error& e) { words[1] = e.what(); }
  try {
    co_await ses.async_set_constant(c, "c", value, npurt::use_task);
  } catch (const npurt::error& e) { words[2] = e.what(); }
}

eager await_copy(npurt::tensor& out, const npurt::tensor& in, npurt::stream& s, std::vector<std::string>& words) {
  try {
    co_await out.async_copy_from(in, s, npurt::use_task);
  } catch (const npurt::error& e) { words[0] = e.what(); }
}

eager await_collectives(npurt::communicator& comm, void* p, npurt::stream& s, std::vector<std::string>& words) {
  try {
    co_await comm.async_all_reduce(p, p, 8, npurt::dtype::f32, npurt::reduce_op::sum, s, npurt::use_task);
  } catch (const npurt::error& e) { words[0] = e.what(); }
  try {
    co_await comm.async_broadcast(p, 8, npurt::dtype::f32, 0, s, npurt::use_task);
  } catch (const npurt::error& e) { words[1] = e.what(); }
}

// The system's loop as a refused call must leave it: nothing posted or counted there, nothing
// to run on it.
struct loop_snapshot {
  npurt::system& sys;
  std::uint64_t posts;
  npurt::sim_time now;
  std::string words;
  explicit loop_snapshot(npurt::system& s)
      : sys(s),
        posts(npurt::detail::runtime_of(s.device(0)).posts_pending()),
        now(s.now()),
        words(s.recent_error_message()) {}
  void check_untouched() const {
    CHECK(npurt::detail::runtime_of(sys.device(0)).posts_pending() == posts);
    CHECK(sys.get_executor().context().poll() == 0);
    CHECK(sys.now() == now);
    CHECK(sys.recent_error_message() == words);
  }
};

constexpr const char* foreign_words = "called from a thread that does not run the system";

}  // namespace

TEST_CASE("a call refused as wrong_thread leaves the system's state alone", "[core][thread][error]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(), opts};
  counting_observer obs;
  sys.add_observer(obs);
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto& pool = dev.mem_pool();
  void* d = dev.malloc(1024);
  void* b = pool.malloc_async(1024, s);
  void* h = sys.host_malloc(1024);
  npurt::event ev = dev.make_event();
  s.record(ev);
  s.launch(fixed(us(1)));
  sys.run();
  // The loop thread's recent error, with words known from the launch's checks.
  std::error_code owner_ec;
  s.launch(fixed(picoseconds{-1}), owner_ec);
  REQUIRE(owner_ec == npurt::errc::invalid_argument);

  const std::uint64_t posts = npurt::detail::runtime_of(dev).posts_pending();
  const std::size_t reports = obs.calls;
  const npurt::sim_time now = sys.now();
  const npurt::allocator_stats stats = pool.stats();
  other_thread other;
  std::vector<std::error_code> codes;
  std::size_t handlers = 0;

  SECTION("launch") {
    other.run([&] {
      std::error_code ec;
      s.launch(fixed(us(1)), ec);
      codes.push_back(ec);
      s.launch(npurt::shared_kernel{}, ec);  // the thread is refused before the argument
      codes.push_back(ec);
      codes.push_back(code_of([&] { s.launch(fixed(us(1))); }));
      s.launch_callback([] {}, ec);
      codes.push_back(ec);
      s.async_launch(fixed(us(1)), other.handler());
      s.async_launch(fixed(picoseconds{-1}), other.handler());
      s.async_callback([] {}, other.handler());
      handlers = 3;
    });
  }
  SECTION("copies") {
    std::vector<std::byte> host(1024);
    other.run([&] {
      std::error_code ec;
      s.memcpy(d, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device, ec);
      codes.push_back(ec);
      s.memset(d, 1024, 0, 1024, ec);
      codes.push_back(ec);
      dev.memcpy(host.data(), 1024, d, 1024, npurt::memcpy_kind::device_to_host, ec);
      codes.push_back(ec);
      codes.push_back(code_of([&] { s.memcpy(d, 1024, host.data(), 1024); }));
      s.async_memcpy(d, 1024, host.data(), 1024, npurt::memcpy_kind::host_to_device, other.handler());
      s.async_memset(d, 1024, 0, 1024, other.handler());
      handlers = 2;
    });
  }
  SECTION("record and wait") {
    other.run([&] {
      std::error_code ec;
      s.record(ev, ec);
      codes.push_back(ec);
      s.wait(ev, ec);
      codes.push_back(ec);
      codes.push_back(code_of([&] { s.wait(ev); }));
      s.async_wait(ev, other.handler());
      handlers = 1;
    });
  }
  SECTION("malloc, free and the pool") {
    other.run([&] {
      std::error_code ec;
      (void)dev.malloc(1024, ec);
      codes.push_back(ec);
      dev.free(d, ec);
      codes.push_back(ec);
      (void)pool.malloc_async(1024, s, ec);
      codes.push_back(ec);
      pool.free_async(b, s, ec);
      codes.push_back(ec);
      (void)sys.host_malloc(1024, ec);
      codes.push_back(ec);
      sys.host_free(h, ec);
      codes.push_back(ec);
      pool.async_malloc(1024, s, other.handler());
      pool.async_free(b, s, other.handler());
      dev.async_malloc(1024, s, other.handler());
      handlers = 3;
    });
  }
  SECTION("synchronize") {
    other.run([&] {
      std::error_code ec;
      s.synchronize(ec);
      codes.push_back(ec);
      dev.synchronize(ec);
      codes.push_back(ec);
      (void)s.query(ec);
      codes.push_back(ec);
      s.async_synchronize(other.handler());
      s.async_synchronize(picoseconds{-1}, other.handler());  // the thread is refused before the timeout
      dev.async_synchronize(other.handler());
      handlers = 3;
    });
  }
  SECTION("events") {
    other.run([&] {
      std::error_code ec;
      (void)dev.make_event({}, ec);
      codes.push_back(ec);
      (void)ev.query(ec);
      codes.push_back(ec);
      ev.synchronize(ec);
      codes.push_back(ec);
      codes.push_back(code_of([&] { ev.synchronize(); }));
      ev.async_wait(other.handler());
      ev.async_wait(picoseconds{-1}, other.handler());
      handlers = 2;
    });
  }
  SECTION("an async call with use_future completes its future") {
    std::future<void> launched, synced;
    std::future<void*> allocated;
    other.run([&] {
      launched = s.async_launch(fixed(us(1)), boost::asio::use_future);
      synced = ev.async_wait(boost::asio::use_future);
      allocated = pool.async_malloc(1024, s, boost::asio::use_future);
    });
    REQUIRE(ready(launched));
    REQUIRE(ready(synced));
    REQUIRE(allocated.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    const auto failure = [](auto& f) -> std::error_code {
      try {
        f.get();
      } catch (const boost::system::system_error& e) { return e.code(); }
      return {};
    };
    codes.push_back(failure(launched));
    codes.push_back(failure(synced));
    codes.push_back(failure(allocated));
  }
  SECTION("an npurt::use_task await does not suspend and throws the call's words") {
    std::vector<std::string> words;
    other.run([&] { await_refused(s, ev, pool, codes, words); });
    REQUIRE(words.size() == 4);
    CHECK_THAT(words[0], StartsWith("npurt::stream::async_launch: called from a thread that does not run the system"));
    CHECK_THAT(words[1], StartsWith("npurt::stream::async_synchronize: called from a thread that does not run"));
    CHECK_THAT(words[2], StartsWith("npurt::event::async_wait: called from a thread that does not run the system"));
    CHECK_THAT(words[3], StartsWith("npurt::mem_pool::async_malloc: called from a thread that does not run"));
  }
  SECTION("a handler without an executor runs on Asio's system executor") {
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> f = ran->get_future();
    auto count = std::make_shared<std::atomic<int>>(0);
    auto got = std::make_shared<npurt::async_error_code>();
    const std::thread::id owner = std::this_thread::get_id();
    auto on = std::make_shared<std::thread::id>();
    other.run([&] {
      s.async_launch(fixed(us(1)), [=](npurt::async_error_code e) {
        *got = e;
        *on = std::this_thread::get_id();
        ++*count;
        ran->set_value();
      });
    });
    REQUIRE(ready(f));
    CHECK(*got == npurt::errc::wrong_thread);
    CHECK(count->load() == 1);
    CHECK(*on != owner);
  }
  SECTION("a handler bound to the system's own executor does not enter its loop from another thread") {
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> f = ran->get_future();
    auto got = std::make_shared<npurt::async_error_code>();
    other.run([&] {
      s.async_synchronize(boost::asio::bind_executor(sys.get_executor(), [=](npurt::async_error_code e) {
        *got = e;
        ran->set_value();
      }));
    });
    REQUIRE(ready(f));
    CHECK(*got == npurt::errc::wrong_thread);
  }

  for (std::size_t i = 0; i < codes.size(); ++i) {
    INFO("call " << i);
    CHECK(codes[i] == npurt::errc::wrong_thread);
  }
  other.check_completions(handlers);
  // Nothing was posted to the system's loop or counted there, nothing ran on it, and nothing
  // was reported.
  CHECK(npurt::detail::runtime_of(dev).posts_pending() == posts);
  CHECK(sys.get_executor().context().poll() == 0);
  CHECK(obs.calls == reports);
  CHECK(sys.now() == now);
  const npurt::allocator_stats after = pool.stats();
  CHECK(after.allocation[npurt::stat_all].current == stats.allocation[npurt::stat_all].current);
  CHECK(after.allocated_bytes[npurt::stat_all].current == stats.allocated_bytes[npurt::stat_all].current);
  CHECK(after.num_ooms == stats.num_ooms);
  // The loop thread's words are its own.
  CHECK_THAT(sys.recent_error_message(),
             StartsWith("npurt::stream::launch: kernels::fixed duration of -1 ps is negative"));
  // And the system goes on: the memory is still allocated, the event still recorded.
  CHECK_NOTHROW(sys.run());
  CHECK(sys.now() == now);
  CHECK(ev.query());
  CHECK_NOTHROW(pool.free_async(b, s));
  CHECK_NOTHROW(dev.free(d));
  CHECK_NOTHROW(sys.host_free(h));
  CHECK(!s.launch(fixed(us(1))).status());
}

TEST_CASE(
    "device::async_malloc and async_free from another thread, before the device has a pool, complete "
    "through their handlers",
    "[core][thread][error][memory]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{simple(), opts};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  sys.run();
  const loop_snapshot before(sys);
  other_thread other;
  std::size_t threw = 0;
  std::vector<std::string> words(2);
  other.run([&] {
    // The pool is made on first use, which only the loop thread may do: the refusal must come
    // through the handler, not out of the initiating call.
    try {
      dev.async_malloc(1024, s, other.handler());
    } catch (const npurt::error&) { ++threw; }
    try {
      dev.async_free(nullptr, s, other.handler());
    } catch (const npurt::error&) { ++threw; }
    await_device(dev, s, words);
  });
  CHECK(threw == 0);
  other.check_completions(2 - threw);
  CHECK_THAT(words[0], StartsWith(std::string("npurt::device::async_malloc: ") + foreign_words));
  CHECK_THAT(words[1], StartsWith(std::string("npurt::device::async_free: ") + foreign_words));
  before.check_untouched();
  // The loop thread makes the pool on its first use, as ever.
  void* p = nullptr;
  dev.async_malloc(1024, s, [&](npurt::async_error_code ec, void* q) {
    CHECK_FALSE(ec);
    p = q;
  });
  sys.run();
  REQUIRE(p != nullptr);
  CHECK(dev.mem_pool().stats().allocated_bytes[npurt::stat_all].current >= 1024);
  dev.free_async(p, s);
}

TEST_CASE("session::async_run, async_run_batches and async_set_constant from another thread touch nothing",
          "[core][thread][error][graph]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{npurt::sim::presets::ascend910(1), opts};
  npurt::session ses{sys};
  npurt::graph g("add");
  auto x = g.add_input("x", {4}, npurt::dtype::f32);
  auto c = g.add_constant("c", npurt::tensor({4}, npurt::dtype::f32, {10, 20, 30, 40}));
  g.set_output(g.add_op("Add", {x, c}, {}, "y"));
  const auto compiled = ses.compile(g);
  const npurt::tensor in({4}, npurt::dtype::f32, {1, 2, 3, 4});
  const npurt::tensor other_c({4}, npurt::dtype::f32, {100, 200, 300, 400});
  const std::vector<npurt::feed> feeds{{"x", in}};
  // The loop thread's own recent error, which the refusals must leave as it is.
  std::error_code owner_ec;
  ses.set_constant(compiled, "nope", other_c, owner_ec);
  REQUIRE(owner_ec == npurt::errc::invalid_argument);
  REQUIRE_THAT(sys.recent_error_message(), StartsWith("npurt::session::set_constant: 'nope'"));
  const npurt::memory_usage_mb usage = ses.memory_usage();
  const loop_snapshot before(sys);
  other_thread other;
  std::size_t threw = 0;
  std::vector<std::string> words(3);  // outlives a handler that runs late

  SECTION("callback handlers") {
    std::string run_error;
    other.run([&] {
      try {
        ses.async_run(compiled, feeds, other.handler());
        ses.async_run_batches(compiled, {feeds, feeds}, other.handler());
        ses.async_set_constant(compiled, "c", other_c, other.handler());
        // A result read for its words rather than the code.
        ses.async_run(compiled, feeds,
                      boost::asio::bind_executor(other.ioc, [&](npurt::async_error_code e, npurt::run_result r) {
                        other.done.push_back({e, other.calling, std::this_thread::get_id() == other.id});
                        run_error = r.error;
                      }));
      } catch (const npurt::error&) { ++threw; }
    });
    CHECK(threw == 0);
    other.check_completions(4);
    CHECK_THAT(run_error, StartsWith(std::string("npurt::session::async_run: ") + foreign_words));
  }
  SECTION("an npurt::use_task await throws the call's words") {
    other.run([&] { await_session(ses, compiled, feeds, other_c, words); });
    CHECK_THAT(words[0], StartsWith(std::string("npurt::session::async_run: ") + foreign_words));
    CHECK_THAT(words[1], StartsWith(std::string("npurt::session::async_run_batches: ") + foreign_words));
    CHECK_THAT(words[2], StartsWith(std::string("npurt::session::async_set_constant: ") + foreign_words));
  }
  SECTION("a tensor copy through a stream") {
    npurt::tensor out({4}, npurt::dtype::f32);
    auto s = sys.device(0).make_stream();
    const loop_snapshot with_stream(sys);
    other.run([&] { out.async_copy_from(in, s, other.handler()); });
    other.check_completions(1);
    // Awaited, the refusal is thrown under the tensor's call, not the stream's.
    other.run([&] { await_copy(out, in, s, words); });
    CHECK_THAT(words[0], StartsWith(std::string("npurt::tensor::async_copy_from: ") + foreign_words));
    with_stream.check_untouched();
    CHECK(out.to_vector() == std::vector<double>{0, 0, 0, 0});
  }

  before.check_untouched();
  CHECK(ses.memory_usage().allocated_mb == usage.allocated_mb);
  CHECK(ses.memory_usage().peak_mb == usage.peak_mb);
  // Nothing was queued and the constant is the one compiled: y = x + c.
  const npurt::run_result r = ses.run(compiled, feeds);
  CHECK(r.outputs.at("y").to_vector() == std::vector<double>{11, 22, 33, 44});
}

TEST_CASE("a communicator's async calls from another thread are refused as the stream's are",
          "[core][thread][error][collective]") {
  npurt::system_options opts;
  opts.check_thread = true;
  npurt::system sys{npurt::sim::presets::ascend910(2), opts};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  std::vector<void*> p;
  for (auto& d : sys.devices()) {
    s.push_back(d.make_stream());
    p.push_back(d.malloc(64));
  }
  sys.run();
  const loop_snapshot before(sys);
  other_thread other;

  SECTION("handlers and awaits") {
    std::vector<std::string> words(2);
    other.run([&] {
      comm.async_all_reduce(p[0], p[0], 8, npurt::dtype::f32, npurt::reduce_op::sum, s[0], other.handler());
      comm.async_barrier(s[1], other.handler());
      await_collectives(comm, p[1], s[1], words);
    });
    other.check_completions(2);
    CHECK_THAT(words[0], StartsWith(std::string("npurt::communicator::async_all_reduce: ") + foreign_words));
    CHECK_THAT(words[1], StartsWith(std::string("npurt::communicator::async_broadcast: ") + foreign_words));
  }
  SECTION("while the loop thread has a group open") {
    comm.group_start();
    const loop_snapshot in_group(sys);
    // The group's depth is the loop thread's: another thread's call is refused for its thread,
    // not as a call made inside the group.
    other.run(
        [&] { comm.async_all_reduce(p[0], p[0], 8, npurt::dtype::f32, npurt::reduce_op::sum, s[0], other.handler()); });
    other.check_completions(1);
    in_group.check_untouched();
    comm.group_end();
  }

  before.check_untouched();
  // Nothing was enqueued: the loop thread's collective runs alone.
  for (int r = 0; r < 2; ++r)
    comm.all_reduce(p[static_cast<std::size_t>(r)], p[static_cast<std::size_t>(r)], 8, npurt::dtype::f32,
                    npurt::reduce_op::sum, s[static_cast<std::size_t>(r)]);
  for (auto& st : s) CHECK_NOTHROW(st.synchronize());
  for (std::size_t r = 0; r < 2; ++r) sys.device(static_cast<npurt::device_id>(r)).free(p[r]);
}
