// stream_graph::update: a graph takes the nodes of another of the same shape in place of its own
// (cudaGraphExecUpdate). What later launches run, what launches already made keep, and every
// difference of shape that refuses the update, leaving both graphs as they were.
#include <npurt/stream_graph.hpp>

#include "common.hpp"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;
using npurt::errc;

namespace {

// Device 0 of an observed simple system, a stream, and pinned and device buffers for copies.
struct update_fixture {
  static constexpr std::size_t n = 1024;
  recorder rec;
  npurt::system sys{simple(2)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::stream side = dev.make_stream();
  npurt::event fork = dev.make_event();
  npurt::event join = dev.make_event();
  npurt::host_buffer in1{sys, n}, in2{sys, n}, out1{sys, n}, out2{sys, n};
  npurt::device_buffer d{dev, n};
  update_fixture() { sys.add_observer(rec); }

  // in -> d, a kernel of `k` µs named `name`, d -> out.
  npurt::stream_graph copy_step(npurt::host_buffer& in, npurt::host_buffer& out, int k, std::string_view name) {
    s.begin_capture();
    s.memcpy(d.data(), n, in.data(), n);
    s.launch(fixed(us(k), name));
    s.memcpy(out.data(), n, d.data(), n);
    return s.end_capture();
  }
  // A fork to `side` and a join back, with kernels of `a` and `b` µs.
  npurt::stream_graph forked(int a, int b) {
    s.begin_capture();
    s.record(fork);
    side.wait(fork);
    side.launch(fixed(us(a), "branch"));
    side.record(join);
    s.launch(fixed(us(b), "trunk"));
    s.wait(join);
    return s.end_capture();
  }
};

}  // namespace

TEST_CASE_METHOD(update_fixture, "an updated graph runs the new nodes; launches made before keep the old ones",
                 "[core][capture][update]") {
  std::memset(in1.data(), 1, n);
  std::memset(in2.data(), 2, n);
  npurt::stream_graph g = copy_step(in1, out1, 3, "old");
  npurt::stream_graph fresh = copy_step(in2, out2, 5, "new");
  g.launch(s);  // queued, not run: it cloned the old nodes
  g.update(std::move(fresh));
  CHECK_FALSE(fresh.valid());  // consumed, as a moved-from graph
  CHECK(g.valid());
  CHECK(g.size() == 3);
  g.launch(s);
  s.synchronize();
  CHECK(all_bytes(out1, 1));  // the first launch: old pointers
  CHECK(all_bytes(out2, 2));  // the second: new ones
  const auto old_rows = rec.named("old");
  const auto new_rows = rec.named("new");
  REQUIRE(old_rows.size() == 1);
  REQUIRE(new_rows.size() == 1);
  CHECK(new_rows[0].end - new_rows[0].start == us(5));
  CHECK(new_rows[0].start >= old_rows[0].end);  // stream order across the update
}

TEST_CASE_METHOD(update_fixture, "an updated graph of several streams keeps its own streams and dependencies",
                 "[core][capture][update]") {
  npurt::stream_graph g = forked(4, 1);
  g.launch(s);
  s.synchronize();
  g.update(forked(9, 1));
  g.launch(s);
  s.launch(fixed(us(1), "after"));
  s.synchronize();
  const auto branch = rec.named("branch");
  const auto trunk = rec.named("trunk");
  const auto after = rec.named("after");
  REQUIRE(branch.size() == 2);
  REQUIRE(trunk.size() == 2);
  REQUIRE(after.size() == 1);
  CHECK(branch[1].stream == branch[0].stream);  // the graph's own stream, made at its first launch
  CHECK(branch[1].stream != s.id());
  CHECK(branch[1].end - branch[1].start == us(9));
  CHECK(trunk[1].end - trunk[1].start == us(1));
  CHECK(after[0].start >= branch[1].end);  // the join: the launch ends on s after the branch
}

TEST_CASE_METHOD(update_fixture, "an update of another shape is refused, naming the difference, and changes nothing",
                 "[core][capture][update][error]") {
  std::memset(in1.data(), 1, n);
  npurt::stream_graph g = copy_step(in1, out1, 3, "old");
  std::function<npurt::stream_graph()> make;
  std::string words;
  SECTION("more nodes") {
    make = [&] {
      s.begin_capture();
      s.launch(fixed(us(1)));
      s.launch(fixed(us(1)));
      return s.end_capture();
    };
    words = "3 nodes";
  }
  SECTION("a node of another kind") {
    make = [&] {
      s.begin_capture();
      s.memcpy(d.data(), n, in2.data(), n);
      s.memset(d.data(), n, 0, n);
      s.memcpy(out2.data(), n, d.data(), n);
      return s.end_capture();
    };
    words = "node 1";
  }
  SECTION("a copy of another direction") {
    make = [&] {
      s.begin_capture();
      s.memcpy(d.data(), n, in2.data(), n);
      s.launch(fixed(us(1)));
      s.memcpy(d.data(), n, d.data(), n);
      return s.end_capture();
    };
    words = "node 2";
  }
  SECTION("work on another stream") {
    make = [&] { return forked(1, 1); };
    words = "node";
  }
  SECTION("graph memory") {
    make = [&] {
      s.begin_capture();
      void* p = dev.mem_pool().malloc_async(n, s);
      s.memcpy(p, n, in2.data(), n);
      s.launch(fixed(us(1)));
      s.memcpy(out2.data(), n, p, n);
      dev.mem_pool().free_async(p, s);
      return s.end_capture();
    };
    words = "graph memory";
  }
  SECTION("a graph of another device") {
    make = [&] {
      auto t = sys.device(1).make_stream();
      t.begin_capture();
      t.launch(fixed(us(1)));
      t.launch(fixed(us(1)));
      t.launch(fixed(us(1)));
      return t.end_capture();
    };
    words = "device 1";
  }
  npurt::stream_graph other = make();
  REQUIRE(other.valid());
  std::error_code ec;
  g.update(std::move(other), ec);
  CHECK(ec == errc::graph_update_mismatch);
  CHECK(ec == npurt::error_class::caller);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("npurt::stream_graph::update") && ContainsSubstring(words));
  CHECK(other.valid());  // refused: still the caller's
  CHECK(thrown_code([&] { g.update(std::move(other)); }) == errc::graph_update_mismatch);
  g.launch(s);  // unchanged
  s.synchronize();
  CHECK(all_bytes(out1, 1));
  CHECK(rec.named("old").size() == 1);
}

TEST_CASE_METHOD(update_fixture, "update refuses a null graph, itself, and a graph of another system",
                 "[core][capture][update][error]") {
  npurt::stream_graph g = copy_step(in1, out1, 3, "old");
  std::error_code ec;
  g.update(npurt::stream_graph{}, ec);
  CHECK(ec == errc::invalid_graph);
  g.update(std::move(g), ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(g.valid());
  npurt::system elsewhere{simple()};
  auto t = elsewhere.device(0).make_stream();
  t.begin_capture();
  t.launch(fixed(us(1)));
  npurt::stream_graph foreign = t.end_capture();
  g.update(std::move(foreign), ec);
  CHECK(ec == errc::invalid_graph);
  CHECK(foreign.valid());
  npurt::stream_graph null;
  CHECK(thrown_code([&] { null.update(copy_step(in2, out2, 1, "x")); }) == errc::invalid_graph);
}
