// What a call is bound to: the settings in force when it was enqueued, the communicator's
// options as init_all takes them, and handles that cannot take a call (empty, a destroyed
// system, another thread).
#include "helpers.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace coll_handles_test {

using namespace npurt;
using Catch::Matchers::ContainsSubstring;

std::error_code sync_code(stream& s) {
  std::error_code ec;
  s.synchronize(no_timeout, ec);
  return ec;
}

// The two handles no call can run on, each with the cause its refusals give: a communicator whose
// system was destroyed, and an empty one.
struct unusable_communicators {
  communicator orphan = orphaned();
  communicator empty;
  struct handle {
    communicator* comm;
    const char* cause;
  };
  [[nodiscard]] std::array<handle, 2> each() {
    return {{{&orphan, "its system was destroyed"}, {&empty, "empty communicator handle"}}};
  }

 private:
  static communicator orphaned() {
    npurt::system sys{sim::presets::ascend910(2)};
    return communicator::init_all(sys);
  }
};

struct ranks {
  npurt::system sys;
  std::vector<stream> s;
  explicit ranks(const sim::preset& p) : sys(sim::make_backend(p, coll_test::timing_only())) {
    for (auto& d : sys.devices()) s.push_back(d.make_stream());
  }
  void all_reduce(communicator& comm, std::size_t count) {
    for (std::size_t r = 0; r < s.size(); ++r)
      comm.all_reduce(nullptr, nullptr, count, dtype::f32, reduce_op::sum, s[r]);
  }
};

// A call refused in both forms: the error_code form's words (prefix `call`, containing `cause`)
// and code, and the throwing form's.
struct refusal {
  const char* call;
  std::function<void(std::error_code&)> with_code;
  std::function<void()> throwing;
  errc code;
  const char* cause;
};

// Each case's error_code form reports its code without throwing and leaves its words in
// recent_error_message (read once), and its throwing form throws exactly those words (as a
// caller_error when `caller_errors`).
void check_refusals(npurt::system& sys, std::span<const refusal> cases, bool caller_errors) {
  for (const refusal& r : cases) {
    INFO(r.call << r.cause);
    (void)sys.recent_error_message();  // whatever came before is not this call's
    std::error_code ec;
    CHECK_NOTHROW(r.with_code(ec));
    CHECK(ec == r.code);
    const std::string recent = sys.recent_error_message();
    CHECK(recent.starts_with(r.call));
    CHECK_THAT(recent, ContainsSubstring(r.cause));
    CHECK(recent.ends_with(": " + std::error_code(r.code).message()));
    CHECK(sys.recent_error_message().empty());  // read once
    try {
      r.throwing();
      FAIL("the throwing form accepted what the error_code form refused");
    } catch (const npurt::error& e) {
      CHECK(e.code() == r.code);
      CHECK(std::string(e.what()) == recent);
      if (caller_errors) CHECK(dynamic_cast<const caller_error*>(&e) != nullptr);
    }
  }
}

// The communicator's error message, for the cases that fail.
std::string message_of(const communicator& comm) {
  std::string m;
  (void)comm.async_error(&m);
  return m;
}

TEST_CASE("set_algorithm and set_buffer_size reach only the calls enqueued after them", "[collective][settings]") {
  constexpr std::size_t count = 16u << 20;  // 64 MiB of f32
  // The same call with nothing changed after it: what the call enqueued under ring must match.
  ranks ref(coll_test::mesh_preset(4));
  auto ref_comm = communicator::init_all(ref.sys, {.algorithm = collective_algorithm::ring, .keep_records = true});
  ref.all_reduce(ref_comm, count);
  ref.sys.run();
  const collective_record expected = ref_comm.records().at(0);
  REQUIRE(expected.algorithm == collective_algorithm::ring);

  ranks w(coll_test::mesh_preset(4));
  auto comm = communicator::init_all(w.sys, {.algorithm = collective_algorithm::ring, .keep_records = true});
  w.all_reduce(comm, count);
  comm.set_algorithm(collective_algorithm::mesh);
  comm.set_buffer_size(1u << 20);  // 64 chunks, had it reached the call
  w.all_reduce(comm, count);
  w.sys.run();
  REQUIRE(comm.records().size() == 2);
  const collective_record& before = comm.records()[0];
  CHECK(before.algorithm == collective_algorithm::ring);
  CHECK(before.end - before.start == expected.end - expected.start);
  // The later call runs under the new settings.
  const collective_record& after = comm.records()[1];
  CHECK(after.algorithm == collective_algorithm::mesh);
  CHECK_FALSE(comm.async_error());

  SECTION("a call batched in a group keeps the settings it was enqueued under") {
    comm.set_algorithm(collective_algorithm::ring);
    comm.set_buffer_size(200'000'000);
    comm.group_start();
    w.all_reduce(comm, count);
    comm.set_algorithm(collective_algorithm::mesh);
    comm.group_end();
    w.sys.run();
    REQUIRE(comm.records().size() == 3);
    CHECK(comm.records()[2].algorithm == collective_algorithm::ring);
    CHECK(comm.records()[2].end - comm.records()[2].start == expected.end - expected.start);
  }
}

TEST_CASE("init_all refuses an algorithm outside its enumeration, naming the option", "[collective][args]") {
  npurt::system sys{sim::presets::ascend910(2)};
  const std::vector<device_id> devs{0, 1};
  const auto bad = static_cast<collective_algorithm>(9);
  std::error_code ec;
  const auto comm = communicator::init_all(sys, devs, {.algorithm = bad}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_FALSE(comm.valid());
  try {
    (void)communicator::init_all(sys, {.algorithm = bad});
    FAIL("init_all took algorithm 9");
  } catch (const caller_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("communicator_options::algorithm"));
  }
}

TEST_CASE("a buffer below 1 MiB is refused at init_all and set_buffer_size, the setting unchanged",
          "[collective][args]") {
  // HCCL_BUFFSIZE counts in MB from 1; a buffer of a few bytes would cut a message into millions
  // of simulated chunks.
  npurt::system sys{sim::presets::ascend910(2)};
  const std::vector<device_id> devs{0, 1};
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, min_collective_buffer_size - 1}) {
    CAPTURE(bytes);
    std::error_code ec;
    const auto refused = communicator::init_all(sys, devs, {.buffer_size = bytes}, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK_FALSE(refused.valid());
    // Over every device, as docs/collectives.md's example makes it: the same error_code form.
    ec.clear();
    const auto refused_all = communicator::init_all(sys, {.buffer_size = bytes}, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK_FALSE(refused_all.valid());
    try {
      (void)communicator::init_all(sys, {.buffer_size = bytes});
      FAIL("init_all took a buffer of " << bytes << " bytes");
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(std::string(e.what()), ContainsSubstring("buffer_size") && ContainsSubstring("1 MiB"));
    }
  }
  std::error_code ok;
  const auto every = communicator::init_all(sys, {.buffer_size = min_collective_buffer_size}, ok);
  CHECK_FALSE(ok);
  CHECK(every.size() == 2);
  auto comm = communicator::init_all(sys, {.buffer_size = min_collective_buffer_size});
  CHECK(comm.buffer_size() == min_collective_buffer_size);
  comm.set_buffer_size(2 * min_collective_buffer_size);
  try {
    comm.set_buffer_size(4096);
    FAIL("set_buffer_size took 4096 bytes");
  } catch (const caller_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("4096") && ContainsSubstring("1 MiB"));
  }
  CHECK(comm.buffer_size() == 2 * min_collective_buffer_size);
}

TEST_CASE("an async call on an empty or orphaned communicator completes after the call, through the handler's executor",
          "[collective][async][lifetime]") {
  communicator empty;
  communicator orphan;
  stream orphan_stream;
  {
    npurt::system sys{sim::presets::ascend910(2)};
    orphan = communicator::init_all(sys);
    orphan_stream = sys.device(0).make_stream();
  }
  stream null_stream;
  for (auto* comm : {&empty, &orphan}) {
    stream& s = comm == &empty ? null_stream : orphan_stream;
    boost::asio::io_context io;
    std::optional<async_error_code> got;
    comm->async_barrier(s, boost::asio::bind_executor(io, [&](async_error_code ec) { got = ec; }));
    CHECK_FALSE(got);  // never inside the call
    io.run();
    REQUIRE(got);
    CHECK(std::error_code(*got) == errc::invalid_argument);

    // Without an executor of its own the handler runs on Asio's system executor.
    std::atomic<bool> in_call{true};
    const auto caller = std::this_thread::get_id();
    std::promise<bool> ran_inside;
    auto done = ran_inside.get_future();
    comm->async_barrier(
        s, [&](async_error_code) { ran_inside.set_value(in_call.load() && std::this_thread::get_id() == caller); });
    in_call = false;
    REQUIRE(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK_FALSE(done.get());
  }
}

TEST_CASE("setters, abort and group_start on an orphaned or empty communicator fail with the cause",
          "[collective][args][lifetime]") {
  unusable_communicators u;
  const auto refused = [](auto call, const char* cause) {
    try {
      call();
      FAIL("accepted");
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(std::string(e.what()), ContainsSubstring(cause));
    }
  };
  for (const auto [comm, cause] : u.each()) {
    CAPTURE(cause);
    refused([&] { comm->set_algorithm(collective_algorithm::ring); }, cause);
    refused([&] { comm->set_buffer_size(1u << 20); }, cause);
    refused([&] { comm->set_exec_timeout(std::chrono::seconds{1}); }, cause);
    refused([&] { comm->set_connect_timeout(std::chrono::seconds{1}); }, cause);
    refused([&] { comm->abort(); }, cause);
    refused([&] { comm->group_start(); }, cause);
  }
  // Nothing changed on the orphan.
  CHECK(u.orphan.algorithm() == collective_algorithm::automatic);
  CHECK_FALSE(u.orphan.aborted());
  std::error_code ec;
  u.orphan.group_end(ec);
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("with thread checks on, communicator calls from another thread fail with wrong_thread",
          "[collective][thread]") {
  npurt::system sys{sim::presets::ascend910(2), system_options{.check_thread = true}};
  auto comm = communicator::init_all(sys);
  std::vector<stream> s;
  std::vector<void*> p;
  for (auto& d : sys.devices()) {
    s.push_back(d.make_stream());
    p.push_back(d.malloc(64));
  }
  std::error_code call_ec, group_start_ec, group_end_ec, split_ec, setter_ec;
  std::thread([&] {
    comm.all_reduce(p[1], p[1], 8, dtype::f32, reduce_op::sum, s[1], call_ec);
    const auto code = [](auto f) {
      try {
        f();
      } catch (const error& e) { return e.code(); }
      return std::error_code{};
    };
    group_start_ec = code([&] { comm.group_start(); });
    comm.group_end(group_end_ec);
    split_ec = code([&] { (void)comm.split(std::vector<int>{0, 0}); });
    setter_ec = code([&] { comm.set_algorithm(collective_algorithm::ring); });
  }).join();
  CHECK(call_ec == errc::wrong_thread);
  CHECK(group_start_ec == errc::wrong_thread);
  CHECK(group_end_ec == errc::wrong_thread);
  CHECK(split_ec == errc::wrong_thread);
  CHECK(setter_ec == errc::wrong_thread);
  CHECK(comm.algorithm() == collective_algorithm::automatic);
  // Nothing was enqueued or left open: the owner thread's calls work.
  comm.group_start();
  comm.group_end();
  for (int r = 0; r < 2; ++r) comm.all_reduce(p[r], p[r], 8, dtype::f32, reduce_op::sum, s[r]);
  CHECK(sync_code(s[0]) == std::error_code{});
  CHECK(sync_code(s[1]) == std::error_code{});
}

// The rule of every call that can fail: a throwing form and an error_code form, which reports
// the same refusal with the same words, left in recent_error_message (aclGetRecentErrMsg) as the
// stream's error_code forms leave theirs.
TEST_CASE("the setters, split and group_start have error_code forms that refuse as the throwing forms do",
          "[collective][args][error]") {
  npurt::system sys{sim::presets::ascend910(2)};
  auto comm = communicator::init_all(sys, {.algorithm = collective_algorithm::ring,
                                           .buffer_size = 2 * min_collective_buffer_size,
                                           .exec_timeout = std::optional<picoseconds>(std::chrono::seconds{5}),
                                           .connect_timeout = std::optional<picoseconds>(std::chrono::seconds{7})});
  auto aborted = communicator::init_all(sys);
  aborted.abort();
  const std::vector<int> three_colors{0, 0, 1}, two_colors{0, 1}, one_key{0};
  std::vector<communicator> parts{communicator{}};  // split's result: must come back empty

  const refusal cases[] = {
      {"npurt::communicator::set_algorithm: ",
       [&](std::error_code& ec) { comm.set_algorithm(static_cast<collective_algorithm>(9), ec); },
       [&] { comm.set_algorithm(static_cast<collective_algorithm>(9)); }, errc::invalid_argument, "unknown algorithm"},
      {"npurt::communicator::set_buffer_size: ", [&](std::error_code& ec) { comm.set_buffer_size(4096, ec); },
       [&] { comm.set_buffer_size(4096); }, errc::invalid_argument, "4096 bytes is less than the 1 MiB minimum"},
      {"npurt::communicator::set_exec_timeout: ",
       [&](std::error_code& ec) { comm.set_exec_timeout(picoseconds{-1}, ec); },
       [&] { comm.set_exec_timeout(picoseconds{-1}); }, errc::invalid_argument, "negative timeout"},
      {"npurt::communicator::set_connect_timeout: ",
       [&](std::error_code& ec) { comm.set_connect_timeout(picoseconds{-1}, ec); },
       [&] { comm.set_connect_timeout(picoseconds{-1}); }, errc::invalid_argument, "negative timeout"},
      {"npurt::communicator::split: ", [&](std::error_code& ec) { parts = comm.split(three_colors, ec); },
       [&] { (void)comm.split(three_colors); }, errc::invalid_argument, "one color per rank (2), not 3"},
      {"npurt::communicator::split: ", [&](std::error_code& ec) { parts = comm.split(two_colors, one_key, ec); },
       [&] { (void)comm.split(two_colors, one_key); }, errc::invalid_argument,
       "one color and one key per rank (2), not 2 colors and 1 keys"},
      {"npurt::communicator::group_start: ", [&](std::error_code& ec) { aborted.group_start(ec); },
       [&] { aborted.group_start(); }, errc::operation_aborted, "the communicator was aborted"},
  };
  check_refusals(sys, cases, true);
  CHECK(parts.empty());
  // Nothing changed: the settings in force, no group open on either communicator, no
  // communicator made by a refused split.
  CHECK(comm.algorithm() == collective_algorithm::ring);
  CHECK(comm.buffer_size() == 2 * min_collective_buffer_size);
  CHECK(comm.exec_timeout() == std::optional<picoseconds>(std::chrono::seconds{5}));
  CHECK(comm.connect_timeout() == std::optional<picoseconds>(std::chrono::seconds{7}));
  std::error_code ec;
  comm.group_end(ec);
  CHECK(ec == errc::invalid_argument);  // no group_start to end
  aborted.group_end(ec);
  CHECK(ec == errc::invalid_argument);

  // Accepted: the error_code forms set what the throwing forms set, clear the code and leave no
  // words.
  (void)sys.recent_error_message();
  ec = make_error_code(errc::invalid_argument);
  comm.set_algorithm(collective_algorithm::mesh, ec);
  CHECK_FALSE(ec);
  CHECK(comm.algorithm() == collective_algorithm::mesh);
  ec = make_error_code(errc::invalid_argument);
  comm.set_buffer_size(min_collective_buffer_size, ec);
  CHECK_FALSE(ec);
  CHECK(comm.buffer_size() == min_collective_buffer_size);
  ec = make_error_code(errc::invalid_argument);
  comm.set_exec_timeout(no_timeout, ec);
  CHECK_FALSE(ec);
  CHECK(comm.exec_timeout() == no_timeout);
  ec = make_error_code(errc::invalid_argument);
  comm.set_connect_timeout(picoseconds{0}, ec);
  CHECK_FALSE(ec);
  CHECK(comm.connect_timeout() == std::optional<picoseconds>(picoseconds{0}));
  ec = make_error_code(errc::invalid_argument);
  const auto halves = comm.split(std::vector<int>{1, 0}, ec);
  CHECK_FALSE(ec);
  REQUIRE(halves.size() == 2);
  CHECK(halves[0].devices() == std::vector<device_id>{1});  // color 0 first
  CHECK(halves[0].algorithm() == collective_algorithm::mesh);
  const auto reversed = comm.split(std::vector<int>{0, 0}, std::vector<int>{1, 0}, ec);
  CHECK_FALSE(ec);
  REQUIRE(reversed.size() == 1);
  CHECK(reversed[0].devices() == std::vector<device_id>{1, 0});  // lower key, lower rank
  ec = make_error_code(errc::invalid_argument);
  comm.group_start(ec);
  CHECK_FALSE(ec);
  comm.group_end(ec);
  CHECK_FALSE(ec);
  CHECK(sys.recent_error_message().empty());
}

// Code that hears only a code reads the words from recent_error_message: the operations,
// group_end and the async forms too, as the stream's calls do.
TEST_CASE("a refused operation or group_end heard as a code leaves its throwing form's words in recent_error_message",
          "[collective][args][error]") {
  npurt::system sys{sim::presets::ascend910(3)};
  const std::vector<device_id> two{0, 1};
  auto comm = communicator::init_all(sys, two);
  auto aborted = communicator::init_all(sys, two);
  auto aborted_too = communicator::init_all(sys, two);
  std::vector<stream> s;
  std::vector<void*> p;
  for (auto& d : sys.devices()) {
    s.push_back(d.make_stream());
    p.push_back(d.malloc(64));
  }
  const refusal cases[] = {
      {"npurt::communicator::broadcast: ",
       [&](std::error_code& ec) { comm.broadcast(p[0], 8, dtype::f32, 5, s[0], ec); },
       [&] { comm.broadcast(p[0], 8, dtype::f32, 5, s[0]); }, errc::invalid_argument,
       "root 5 is not a rank of this communicator (0..1)"},
      {"npurt::communicator::all_reduce: ",
       [&](std::error_code& ec) { comm.all_reduce(p[2], p[2], 8, dtype::f32, reduce_op::sum, s[2], ec); },
       [&] { comm.all_reduce(p[2], p[2], 8, dtype::f32, reduce_op::sum, s[2]); }, errc::stream_device_mismatch,
       "the stream's device 2 has no rank in this communicator (its devices are 0, 1)"},
      {"npurt::communicator::all_gather: ",
       [&](std::error_code& ec) { comm.all_gather(p[0], p[0], 16, dtype::f32, s[0], ec); },
       [&] { comm.all_gather(p[0], p[0], 16, dtype::f32, s[0]); }, errc::size_overflow, "rank 0's recv buffer"},
      {"npurt::communicator::group_end: ", [&](std::error_code& ec) { comm.group_end(ec); }, [&] { comm.group_end(); },
       errc::invalid_argument, "no group_start to end"},
      {"npurt::communicator::group_end: ",
       [&](std::error_code& ec) {
         aborted.group_start();
         aborted.abort();
         aborted.group_end(ec);
       },
       [&] {
         aborted_too.group_start();
         aborted_too.abort();
         aborted_too.group_end();
       },
       errc::operation_aborted, ""},
  };
  check_refusals(sys, cases, false);
  // An accepted call leaves nothing, and nothing was enqueued by the refusals.
  std::error_code ec;
  for (int r = 0; r < 2; ++r) comm.all_reduce(p[r], p[r], 8, dtype::f32, reduce_op::sum, s[r], ec);
  CHECK_FALSE(ec);
  CHECK(sys.recent_error_message().empty());
  sys.run();
  CHECK(comm.async_error() == std::error_code{});

  // The async forms: the handler hears the code after the call, with the words (named async_)
  // in recent_error_message, and npurt::use_task throws them.
  std::error_code heard;
  std::string recent;
  comm.async_broadcast(p[0], 8, dtype::f32, 5, s[0], [&](async_error_code e) {
    heard = e;
    recent = sys.recent_error_message();
  });
  sys.run();
  CHECK(heard == errc::invalid_argument);
  CHECK(recent.starts_with("npurt::communicator::async_broadcast: root 5 is not a rank"));
  std::exception_ptr thrown;
  // A named lambda: the coroutine's frame refers to its captures, which must outlive the run.
  auto bad_root = [&]() -> npurt::task<void> {
    co_await comm.async_broadcast(p[0], 8, dtype::f32, 5, s[0], npurt::use_task);
  };
  npurt::spawn(sys, bad_root(), [&](std::exception_ptr e) { thrown = e; });
  sys.run();
  REQUIRE(thrown);
  try {
    std::rethrow_exception(thrown);
  } catch (const caller_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()) == recent);
  }
  // Inside a group an async_ call is not supported, and the words say why.
  comm.group_start();
  comm.async_barrier(s[0], [&](async_error_code e) {
    heard = e;
    recent = sys.recent_error_message();
  });
  comm.group_end();
  sys.run();
  CHECK(heard == errc::not_supported);
  CHECK(recent.starts_with("npurt::communicator::async_barrier: an async_ call cannot be part of a group"));
}

TEST_CASE("the error_code forms report an empty or orphaned communicator without throwing",
          "[collective][args][lifetime]") {
  unusable_communicators u;
  const std::vector<int> colors{0, 0};
  for (const auto [comm, cause] : u.each()) {
    CAPTURE(cause);
    std::vector<std::error_code> codes(7);
    CHECK_NOTHROW(comm->set_algorithm(collective_algorithm::ring, codes[0]));
    CHECK_NOTHROW(comm->set_buffer_size(min_collective_buffer_size, codes[1]));
    CHECK_NOTHROW(comm->set_exec_timeout(std::chrono::seconds{1}, codes[2]));
    CHECK_NOTHROW(comm->set_connect_timeout(std::chrono::seconds{1}, codes[3]));
    std::vector<communicator> parts{communicator{}};
    CHECK_NOTHROW(parts = comm->split(colors, codes[4]));
    CHECK(parts.empty());
    CHECK_NOTHROW(parts = comm->split(colors, colors, codes[5]));
    CHECK(parts.empty());
    CHECK_NOTHROW(comm->group_start(codes[6]));
    for (const std::error_code& ec : codes) CHECK(ec == errc::invalid_argument);
  }
  CHECK(u.orphan.algorithm() == collective_algorithm::automatic);
  CHECK(u.orphan.buffer_size() == 200'000'000);
}

TEST_CASE("an error_code form called from another thread reports wrong_thread and leaves the system's words alone",
          "[collective][thread]") {
  npurt::system sys{sim::presets::ascend910(2), system_options{.check_thread = true}};
  auto comm = communicator::init_all(sys);
  std::vector<std::error_code> codes(4);
  std::vector<communicator> parts{communicator{}};
  std::thread([&] {
    comm.set_algorithm(collective_algorithm::ring, codes[0]);
    comm.set_buffer_size(min_collective_buffer_size, codes[1]);
    parts = comm.split(std::vector<int>{0, 0}, codes[2]);
    comm.group_start(codes[3]);
  }).join();
  for (const std::error_code& ec : codes) CHECK(ec == errc::wrong_thread);
  CHECK(parts.empty());
  // The system is the owner thread's: a refusal from elsewhere does not write its recent error.
  CHECK(sys.recent_error_message().empty());
  CHECK(comm.algorithm() == collective_algorithm::automatic);
  CHECK(comm.buffer_size() == 200'000'000);
  std::error_code ec;
  comm.group_end(ec);
  CHECK(ec == errc::invalid_argument);  // no group was opened
}

TEST_CASE("ranks that ask for different algorithms for one call fail it with collective_mismatch",
          "[collective][settings][mismatch]") {
  ranks w(coll_test::mesh_preset(2));
  auto comm = communicator::init_all(w.sys, {.name = "algo"});
  SECTION("per-call algorithms") {
    for (int r = 0; r < 2; ++r) {
      auto c = communicator::all_reduce_call(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum);
      c.algorithm = r == 0 ? collective_algorithm::ring : collective_algorithm::mesh;
      comm.enqueue(c, w.s[static_cast<std::size_t>(r)]);
    }
    CHECK(sync_code(w.s[0]) == errc::collective_mismatch);
    CHECK(sync_code(w.s[1]) == errc::collective_mismatch);
    CHECK(comm.async_error() == errc::collective_mismatch);
    CHECK_THAT(message_of(comm), ContainsSubstring("'algo'") && ContainsSubstring("call #0") &&
                                     ContainsSubstring("algorithm ring") && ContainsSubstring("algorithm mesh"));
  }
  SECTION("the communicator's algorithm changed between the ranks' calls") {
    comm.all_reduce(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum, w.s[0]);
    comm.set_algorithm(collective_algorithm::rhd);
    comm.all_reduce(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum, w.s[1]);
    CHECK(sync_code(w.s[0]) == errc::collective_mismatch);
    CHECK(sync_code(w.s[1]) == errc::collective_mismatch);
    CHECK_THAT(message_of(comm), ContainsSubstring("algorithm auto") && ContainsSubstring("algorithm rhd"));
  }
  SECTION("the buffer size changed between the ranks' calls") {
    comm.all_reduce(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum, w.s[0]);
    comm.set_buffer_size(1u << 20);
    comm.all_reduce(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum, w.s[1]);
    CHECK(sync_code(w.s[0]) == errc::collective_mismatch);
    CHECK(sync_code(w.s[1]) == errc::collective_mismatch);
    CHECK_THAT(message_of(comm),
               ContainsSubstring("buffer size 200000000 B") && ContainsSubstring("buffer size 1048576 B"));
  }
  SECTION("a per-call algorithm equal to the communicator's is no disagreement") {
    comm.set_algorithm(collective_algorithm::ring);
    auto c = communicator::all_reduce_call(nullptr, nullptr, 1u << 18, dtype::f32, reduce_op::sum);
    comm.enqueue(c, w.s[0]);
    c.algorithm = collective_algorithm::ring;
    comm.enqueue(c, w.s[1]);
    CHECK(sync_code(w.s[0]) == std::error_code{});
    CHECK(sync_code(w.s[1]) == std::error_code{});
  }
}

}  // namespace coll_handles_test
