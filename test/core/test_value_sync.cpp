// Memory-value sync (aclrtValueWrite / aclrtValueWait, cuStreamWriteValue64 / WaitValue64): a
// stream writes a 64-bit word of device memory, another holds its work until the word meets a
// condition.
#include <npurt/stream_graph.hpp>

#include "common.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;
using npurt::errc;
using npurt::wait_condition;

namespace {

// Two devices of an observed simple system; a producer and a consumer stream of device 0, and
// a word of device memory for them to share. The consumer has a priority of its own: under the
// shared FIFO, the task behind a blocked wait holds its level's queue, as an event wait's does,
// and would hold the producer's work behind it.
struct value_fixture {
  recorder rec;
  npurt::system sys;
  npurt::device& dev;
  npurt::stream producer;
  npurt::stream consumer;
  std::uint64_t* word;

  explicit value_fixture(bool functional = true)
      : sys(config(functional)),
        dev(sys.device(0)),
        producer(dev.make_stream()),
        consumer(dev.make_stream({.priority = 2})),
        word(static_cast<std::uint64_t*>(dev.malloc(64))) {
    sys.add_observer(rec);
  }
  static npurt::simple_config config(bool functional) {
    npurt::simple_config c = simple(2);
    c.functional = functional;
    return c;
  }
  /// The word as the host reads it back (functional mode).
  std::uint64_t host_word() {
    std::uint64_t v = 0;
    dev.memcpy(&v, sizeof v, word, sizeof v, npurt::memcpy_kind::device_to_host);
    return v;
  }
  void set_word(std::uint64_t v) { dev.memcpy(word, sizeof v, &v, sizeof v, npurt::memcpy_kind::host_to_device); }
  /// The one task named `name`.
  task_row only(std::string_view name) const {
    const auto rows = rec.named(name);
    REQUIRE(rows.size() == 1);
    return rows[0];
  }
};

}  // namespace

TEST_CASE("wait conditions compare as CANN and CUDA define them", "[core][value]") {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  // GEQ: (int64_t)(word - operand) >= 0, so a counter that wrapped past the operand meets it.
  STATIC_CHECK(npurt::condition_met(wait_condition::geq, 5, 5));
  STATIC_CHECK(npurt::condition_met(wait_condition::geq, 6, 5));
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::geq, 4, 5));
  STATIC_CHECK(npurt::condition_met(wait_condition::geq, 2, max - 1));        // wrapped: 2 - (-2) = 4
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::geq, max - 1, 2));  // -2 - 2 = -4
  STATIC_CHECK(npurt::condition_met(wait_condition::eq, 7, 7));
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::eq, 8, 7));
  STATIC_CHECK(npurt::condition_met(wait_condition::and_, 0b1010, 0b0010));
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::and_, 0b1010, 0b0101));
  STATIC_CHECK(npurt::condition_met(wait_condition::nor, 0b1010, 0b0101));  // bits above 3 are clear in both
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::nor, max, 0));
  STATIC_CHECK_FALSE(npurt::condition_met(wait_condition::nor, max - 0xf, 0xf));
}

TEST_CASE_METHOD(value_fixture, "a value wait holds its stream until another stream writes the word", "[core][value]") {
  set_word(0);
  consumer.wait_value(word, 1, wait_condition::eq);
  consumer.launch(fixed(us(2), "after"));
  producer.launch(fixed(us(10), "produce"));
  producer.write_value(word, 1);
  consumer.synchronize();
  producer.synchronize();
  const task_row produce = only("produce");
  const task_row write = only("value_write");
  const task_row wait = only("value_wait");
  const task_row after = only("after");
  CHECK(write.start == produce.end);  // stream order on the producer
  CHECK(write.end == write.start);    // a control task: no engine time
  CHECK(wait.end == write.end);       // released at the write's instant, not before
  CHECK(wait.start < produce.end);    // and it was waiting while the producer ran
  CHECK(after.start == wait.end);
  CHECK(after.end - after.start == us(2));
  CHECK(host_word() == 1);
}

TEST_CASE_METHOD(value_fixture, "a GEQ wait on a counter passes at the write that reaches it, not before",
                 "[core][value]") {
  set_word(0);
  consumer.wait_value(word, 3);  // geq by default
  consumer.launch(fixed(us(1), "after"));
  for (int i = 1; i <= 4; ++i) {
    producer.launch(fixed(us(5), "step"));
    producer.write_value(word, static_cast<std::uint64_t>(i));
  }
  sys.run();
  const auto writes = rec.named("value_write");
  REQUIRE(writes.size() == 4);
  const task_row after = only("after");
  CHECK(after.start == writes[2].end);  // the third write (3 >= 3)
  CHECK(after.start > writes[1].end);
  CHECK(host_word() == 4);
}

TEST_CASE_METHOD(value_fixture, "each condition passes or holds as the word says", "[core][value]") {
  struct row {
    wait_condition c;
    std::uint64_t word, operand;
    bool passes;
  };
  const std::vector<row> rows = {
      {wait_condition::geq, 9, 9, true},
      {wait_condition::geq, 8, 9, false},
      {wait_condition::geq, 1, ~std::uint64_t{0}, true},
      {wait_condition::eq, 4, 4, true},
      {wait_condition::eq, 4, 5, false},
      {wait_condition::and_, 6, 2, true},
      {wait_condition::and_, 6, 1, false},
      {wait_condition::nor, 6, 1, true},
      {wait_condition::nor, ~std::uint64_t{0}, 0, false},
  };
  // An unmet wait ends at the event-wait timeout, which bounds value waits too.
  sys.set_event_wait_timeout(us(50));
  for (const row& r : rows) {
    CAPTURE(npurt::to_string(r.c), r.word, r.operand);
    producer.write_value(word, r.word);
    producer.synchronize();
    consumer.wait_value(word, r.operand, r.c);
    std::error_code ec;
    consumer.synchronize(ec);
    CHECK(static_cast<bool>(ec) == !r.passes);
    if (!r.passes) CHECK(ec == errc::event_wait_timeout);
  }
}

TEST_CASE_METHOD(value_fixture, "a value wait nothing can end is a deadlock, reported and failed", "[core][value]") {
  set_word(0);
  consumer.wait_value(word, 1, wait_condition::eq);
  consumer.launch(fixed(us(1), "after"));
  const std::string what = thrown_what([&] { consumer.synchronize(); });
  CHECK_THAT(what, ContainsSubstring("deadlock"));
  CHECK_THAT(what, ContainsSubstring("to meet eq 1"));
  // The failed wait ended; the stream goes on. The device keeps the failure too, until read.
  REQUIRE(rec.named("after").size() == 1);
  std::error_code device_ec;
  dev.synchronize(device_ec);
  CHECK(device_ec == errc::deadlock);
  consumer.write_value(word, 2);
  consumer.synchronize();
  CHECK(host_word() == 2);
}

TEST_CASE_METHOD(value_fixture, "value writes and waits refuse bad words and leave the stream as it was",
                 "[core][value]") {
  auto* bytes = reinterpret_cast<unsigned char*>(word);
  std::uint64_t host = 0;
  const auto write_code = [&](void* p) {
    std::error_code ec;
    const npurt::event e = producer.write_value(p, 1, ec);
    CHECK(e.valid() == !ec);  // a refused write enqueues nothing
    return ec;
  };
  const auto wait_code = [&](const void* p, wait_condition c = wait_condition::geq) {
    std::error_code ec;
    consumer.wait_value(p, 1, c, ec);
    return ec;
  };
  CHECK(write_code(nullptr) == errc::null_pointer);
  CHECK(wait_code(nullptr) == errc::null_pointer);
  CHECK(write_code(&host) == errc::invalid_pointer);  // host memory
  CHECK(wait_code(&host) == errc::invalid_pointer);
  CHECK(write_code(bytes + 4) == errc::invalid_argument);  // misaligned
  CHECK(wait_code(bytes + 4) == errc::invalid_argument);
  CHECK(wait_code(word, static_cast<wait_condition>(9)) == errc::invalid_argument);
  void* big = dev.malloc(12);  // one word, and 4 bytes of the next
  auto* bytes_of_big = static_cast<unsigned char*>(big);
  CHECK(write_code(bytes_of_big) == std::error_code{});
  CHECK(write_code(bytes_of_big + 8) == errc::size_overflow);
  CHECK(wait_code(bytes_of_big + 8) == errc::size_overflow);
  CHECK(write_code(bytes_of_big + (1 << 20)) == errc::invalid_pointer);  // far past it: no allocation
  producer.synchronize();
  dev.free(big);
  CHECK(write_code(big) == errc::invalid_pointer);  // freed
  npurt::stream gone;
  std::error_code ec;
  gone.wait_value(word, 1, wait_condition::geq, ec);
  CHECK(ec == errc::invalid_stream);
  // The throwing forms say why.
  CHECK_THAT(thrown_what([&] { producer.write_value(bytes + 4, 1); }), ContainsSubstring("not 8-byte aligned"));
  CHECK_THAT(thrown_what([&] { consumer.wait_value(&host, 1); }), ContainsSubstring("npurt::stream::wait_value"));
  CHECK(thrown_code([&] { consumer.wait_value(word, 1, static_cast<wait_condition>(4)); }) == errc::invalid_argument);
  // Nothing refused was enqueued: both streams are idle, and the one accepted write ran.
  producer.synchronize();
  consumer.synchronize();
  CHECK(rec.named("value_write").size() == 1);
  CHECK(rec.named("value_wait").empty());
}

TEST_CASE_METHOD(value_fixture, "a word freed while its write or wait is queued fails that task, typed",
                 "[core][value]") {
  void* p = dev.malloc(64);
  producer.launch(fixed(us(10), "long"));
  producer.write_value(p, 1);
  consumer.launch(fixed(us(10), "long"));
  consumer.wait_value(p, 1);
  dev.free(p);
  CHECK(thrown_code([&] { producer.synchronize(); }) == errc::invalid_pointer);
  CHECK_THAT(thrown_what([&] { consumer.synchronize(); }),
             ContainsSubstring("the word of the value wait at") && ContainsSubstring("was freed after the call"));
  // A wait blocked on a word that is then freed fails at the next completion.
  void* q = dev.malloc(64);
  producer.write_value(q, 0);
  consumer.wait_value(q, 1, wait_condition::eq);
  producer.synchronize();
  dev.free(q);
  producer.launch(fixed(us(1), "tick"));
  CHECK(thrown_code([&] { consumer.synchronize(); }) == errc::invalid_pointer);
}

TEST_CASE_METHOD(value_fixture, "awaited value writes and waits resume when the stream passes them", "[core][value]") {
  set_word(0);
  npurt::sim_time resumed{};
  auto waiter = [&]() -> npurt::task<void> {
    co_await consumer.async_wait_value(word, 2, wait_condition::geq, npurt::use_task);
    resumed = sys.now();
  };
  auto writer = [&]() -> npurt::task<void> {
    co_await producer.async_launch(fixed(us(4), "produce"), npurt::use_task);
    co_await producer.async_write_value(word, 1, npurt::use_task);
    co_await producer.async_launch(fixed(us(4), "produce"), npurt::use_task);
    co_await producer.async_write_value(word, 2, npurt::use_task);
  };
  npurt::spawn(sys, waiter());
  npurt::spawn(sys, writer());
  sys.run();
  const auto writes = rec.named("value_write");
  REQUIRE(writes.size() == 2);
  CHECK(resumed >= writes[1].end);
  CHECK(rec.named("value_wait").at(0).end == writes[1].end);
  // An awaited wait that cannot end hears the deadlock.
  std::error_code got;
  asio::co_spawn(
      sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        auto [ec] =
            co_await consumer.async_wait_value(word, 7, wait_condition::eq, asio::as_tuple(asio::use_awaitable));
        got = ec;
      },
      asio::detached);
  std::error_code run_ec;
  sys.run(run_ec);
  CHECK(run_ec == errc::deadlock);
  CHECK(got == errc::deadlock);
}

TEST_CASE_METHOD(value_fixture, "captured value writes and waits replay at each launch and update in place",
                 "[core][value][capture]") {
  set_word(0);
  npurt::stream s = dev.make_stream();
  s.begin_capture();
  s.launch(fixed(us(3), "body"));
  s.begin_task_group();
  s.write_value(word, 5);
  npurt::task_group grp = s.end_task_group();
  s.wait_value(word, 5, wait_condition::eq);
  npurt::stream_graph g = s.end_capture();
  const auto nodes = g.nodes();
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[1].kind == npurt::task_kind::value_write);
  CHECK(nodes[2].kind == npurt::task_kind::value_wait);
  CHECK(host_word() == 0);  // captured, not run
  g.launch(s);
  s.synchronize();
  CHECK(host_word() == 5);
  // The group's write now stores 6 at another word; the graph's wait still wants 5 at `word`.
  s.begin_task_update(grp);
  s.write_value(word + 1, 6);
  s.end_task_update();
  set_word(5);
  g.launch(s);
  s.synchronize();
  std::uint64_t second = 0;
  dev.memcpy(&second, 8, word + 1, 8, npurt::memcpy_kind::device_to_host);
  CHECK(second == 6);
  CHECK(rec.named("value_write").size() == 2);
  CHECK(rec.named("value_wait").size() == 2);
  // An update to a wait in place of the write is another kind of task.
  s.begin_task_update(grp);
  s.wait_value(word, 1);
  std::error_code ec;
  s.end_task_update(ec);
  CHECK(ec == errc::graph_update_mismatch);
}

TEST_CASE("in timing-only mode a value wait reads what value writes stored", "[core][value]") {
  value_fixture f(false);
  f.consumer.wait_value(f.word, 3, wait_condition::eq);
  f.consumer.launch(fixed(us(1), "after"));
  f.producer.launch(fixed(us(5), "produce"));
  f.producer.write_value(f.word, 3);
  f.sys.run();
  CHECK(f.only("after").start == f.only("value_write").end);
  CHECK(f.only("value_write").start == f.only("produce").end);
  // No data behind the memory: a word no value write stored reads 0.
  f.consumer.wait_value(f.word + 1, 0, wait_condition::eq);
  f.consumer.synchronize();
  f.consumer.wait_value(f.word + 1, 1, wait_condition::geq);
  CHECK(thrown_code([&] { f.consumer.synchronize(); }) == errc::deadlock);
}

TEST_CASE("a device reset drops its blocked value waits", "[core][value]") {
  value_fixture f;
  npurt::stream other = f.sys.device(1).make_stream();
  f.consumer.wait_value(f.word, 1, wait_condition::eq);
  other.launch(fixed(us(20), "elsewhere"));
  other.synchronize();  // the wait started meanwhile and blocks
  REQUIRE(f.rec.named("value_wait").empty());
  f.dev.reset();
  CHECK_FALSE(f.consumer.valid());
  // Completions after the reset look at no dropped wait (the sanitizers would see one).
  other.launch(fixed(us(1), "later"));
  other.synchronize();
  CHECK(f.rec.named("later").size() == 1);
  CHECK(f.rec.named("value_wait").empty());
}

namespace {
std::vector<task_row> handoff_rows() {
  value_fixture f;
  for (int i = 1; i <= 3; ++i) {
    f.consumer.wait_value(f.word, static_cast<std::uint64_t>(i));
    f.consumer.launch(fixed(us(2), "consume"));
    f.producer.launch(fixed(us(3 + i), "produce"));
    f.producer.write_value(f.word, static_cast<std::uint64_t>(i));
  }
  f.sys.run();
  return f.rec.rows;
}
}  // namespace

TEST_CASE("a value handoff runs the same way twice", "[core][value][determinism]") {
  const auto a = handoff_rows();
  const auto b = handoff_rows();
  CHECK(a.size() == 12);  // three waits, uses, steps and writes
  CHECK(a == b);
}
