// Task groups and task updates (aclmdlRICaptureTaskGrpBegin/End, aclmdlRICaptureTaskUpdateBegin/
// End): tasks marked in a capture are replaced in the graph by a stream's update, without a new
// capture; and what stream_graph::nodes() and to_dot() say a capture recorded.
#include <npurt/stream_graph.hpp>

#include "common.hpp"

#include <algorithm>
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

// Device 0 of an observed simple system, a capturing stream, a stream for updates, and pinned
// and device buffers for copies.
struct group_fixture {
  static constexpr std::size_t n = 512;
  recorder rec;
  npurt::system sys{simple(2)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::stream u = dev.make_stream();
  npurt::stream side = dev.make_stream();
  npurt::event fork = dev.make_event();
  npurt::event join = dev.make_event();
  npurt::host_buffer in{sys, n}, out1{sys, n}, out2{sys, n};
  npurt::device_buffer d{dev, n};
  npurt::task_group group;
  group_fixture() { sys.add_observer(rec); }

  // in -> d outside the group; then the group: a kernel of `k` µs and d -> out1.
  npurt::stream_graph grouped(int k) {
    s.begin_capture();
    s.memcpy(d.data(), n, in.data(), n);
    s.begin_task_group();
    s.launch(fixed(us(k), "old"));
    s.memcpy(out1.data(), n, d.data(), n);
    group = s.end_task_group();
    return s.end_capture();
  }
};

}  // namespace

TEST_CASE_METHOD(group_fixture, "a task update replaces its group's tasks; launches made before keep the old ones",
                 "[core][capture][task_group]") {
  std::memset(in.data(), 7, n);
  npurt::stream_graph g = grouped(3);
  REQUIRE(group.valid());
  CHECK(group.size() == 2);
  CHECK(group.nodes() == std::vector<std::size_t>{1, 2});  // not the copy before the group
  g.launch(s);  // queued: it cloned the old tasks
  u.begin_task_update(group);
  CHECK(u.capture_info() == npurt::capture_status::active);
  u.launch(fixed(us(5), "new"));
  u.memcpy(out2.data(), n, d.data(), n);
  u.end_task_update();
  CHECK(u.capture_info() == npurt::capture_status::none);
  s.synchronize();
  CHECK(all_bytes(out1, 7));
  CHECK(all_bytes(out2, 0));  // the update itself ran nothing
  CHECK(rec.of_stream(u.id()).empty());
  g.launch(s);
  s.synchronize();
  CHECK(all_bytes(out2, 7));
  const auto old_rows = rec.named("old");
  const auto new_rows = rec.named("new");
  REQUIRE(old_rows.size() == 1);
  REQUIRE(new_rows.size() == 1);
  CHECK(new_rows[0].end - new_rows[0].start == us(5));
  CHECK(new_rows[0].stream == s.id());  // the group's place in the graph, not the updating stream
  CHECK(g.size() == 3);
  CHECK(group.valid());
  // Updated again, from the capturing stream itself, back to out1.
  std::memset(out1.data(), 0, n);
  s.begin_task_update(group);
  s.launch(fixed(us(2), "again"));
  s.memcpy(out1.data(), n, d.data(), n);
  s.end_task_update();
  g.launch(s);
  s.synchronize();
  CHECK(all_bytes(out1, 7));
  REQUIRE(rec.named("again").size() == 1);
  CHECK(rec.named("again")[0].end - rec.named("again")[0].start == us(2));
}

TEST_CASE_METHOD(group_fixture, "a group on a joined stream holds its tasks, not the graph's records and waits",
                 "[core][capture][task_group]") {
  s.begin_capture();
  s.record(fork);
  side.wait(fork);
  side.begin_task_group();
  side.launch(fixed(us(4), "branch"));
  npurt::event mid = dev.make_event();
  side.record(mid);  // inside the group's span, but the graph's structure: not the group's
  side.launch(fixed(us(1), "tail"));
  npurt::task_group g_side = side.end_task_group();
  side.record(join);
  s.launch(fixed(us(1), "trunk"));
  s.wait(join);
  npurt::stream_graph g = s.end_capture();
  const std::vector<npurt::graph_node> nodes = g.nodes();
  REQUIRE(nodes.size() == 8);  // the fork's record; side's wait, kernels and records; trunk and join
  const std::vector<std::size_t> members = g_side.nodes();
  REQUIRE(members.size() == 2);
  for (const std::size_t i : members) {
    CHECK(nodes[i].kind == npurt::task_kind::kernel);
    CHECK(nodes[i].stream == 1);
  }
  CHECK(nodes[members[0]].name == "branch");
  CHECK(nodes[members[1]].name == "tail");
  side.begin_task_update(g_side);
  side.launch(fixed(us(9), "branch"));
  side.launch(fixed(us(2), "tail"));
  side.end_task_update();
  g.launch(s);
  s.launch(fixed(us(1), "after"));
  s.synchronize();
  const auto branch = rec.named("branch");
  const auto tail = rec.named("tail");
  const auto after = rec.named("after");
  REQUIRE(branch.size() == 1);
  REQUIRE(tail.size() == 1);
  REQUIRE(after.size() == 1);
  CHECK(branch[0].end - branch[0].start == us(9));
  CHECK(tail[0].end - tail[0].start == us(2));
  CHECK(branch[0].stream != s.id());  // still the graph's own stream
  CHECK(after[0].start >= tail[0].end);  // the join still holds
}

TEST_CASE_METHOD(group_fixture, "stream_graph::nodes and to_dot describe a fork and its join",
                 "[core][capture][task_group]") {
  s.begin_capture();
  s.memcpy(d.data(), n, in.data(), n);  // 0
  s.record(fork);                       // 1
  side.wait(fork);                      // 2: side joins, after the record
  side.launch(fixed(us(4), "branch"));  // 3
  side.record(join);                    // 4
  s.launch(fixed(us(1), "trunk"));      // 5
  s.wait(join);                         // 6: the join
  s.memset(d.data(), n, 0, n);          // 7
  npurt::stream_graph g = s.end_capture();
  const std::vector<npurt::graph_node> ns = g.nodes();
  REQUIRE(ns.size() == 8);
  using deps = std::vector<std::size_t>;
  const std::vector<std::pair<npurt::task_kind, deps>> expected{
      {npurt::task_kind::memcpy, {}},         {npurt::task_kind::event_record, {0}},
      {npurt::task_kind::event_wait, {1}},    {npurt::task_kind::kernel, {2}},
      {npurt::task_kind::event_record, {3}},  {npurt::task_kind::kernel, {1}},
      {npurt::task_kind::event_wait, {4, 5}}, {npurt::task_kind::memset, {6}}};
  for (std::size_t i = 0; i < ns.size(); ++i) {
    INFO("node " << i);
    CHECK(ns[i].kind == expected[i].first);
    CHECK(ns[i].dependencies == expected[i].second);
    CHECK(ns[i].stream == (i >= 2 && i <= 4 ? 1U : 0U));
  }
  CHECK(ns[0].bytes == n);
  CHECK(ns[7].bytes == n);
  CHECK(ns[3].name == "branch");
  const std::string dot = g.to_dot();
  CHECK_THAT(dot, ContainsSubstring("digraph stream_graph {"));
  CHECK_THAT(dot, ContainsSubstring("subgraph cluster_1"));
  CHECK_THAT(dot, ContainsSubstring("n1 -> n2;"));
  CHECK_THAT(dot, ContainsSubstring("n4 -> n6;"));
  CHECK_THAT(dot, ContainsSubstring("n5 -> n6;"));
  CHECK_THAT(dot, ContainsSubstring("\"0: memcpy_h2d (memcpy, 512 B)\""));
  CHECK_THAT(dot, ContainsSubstring("\"3: branch (kernel)\""));
  CHECK_THAT(dot, ContainsSubstring("\"6: event_wait\""));  // a name that is its kind, once
  CHECK(thrown_code([] { (void)npurt::stream_graph{}.nodes(); }) == errc::invalid_graph);
}

TEST_CASE_METHOD(group_fixture, "task groups refuse calls out of place", "[core][capture][task_group][error]") {
  std::error_code ec;
  s.begin_task_group(ec);
  CHECK(ec == errc::stream_not_captured);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("npurt::stream::begin_task_group"));
  (void)s.end_task_group(ec);
  CHECK(ec == errc::stream_not_captured);
  s.end_task_update(ec);
  CHECK(ec == errc::stream_not_captured);
  s.begin_capture();
  (void)s.end_task_group(ec);
  CHECK(ec == errc::invalid_argument);
  s.begin_task_group();
  s.begin_task_group(ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(s.capture_info() == npurt::capture_status::active);  // refusals leave the capture alone
  s.launch(fixed(us(1)));
  npurt::task_group open = s.end_task_group();
  CHECK_FALSE(open.valid());  // its capture is still open
  CHECK(thrown_code([&] { (void)open.size(); }) == errc::invalid_graph);
  u.begin_task_update(open, ec);
  CHECK(ec == errc::invalid_argument);
  s.end_task_update(ec);  // a capture, not an update
  CHECK(ec == errc::capture_unmatched);
  s.begin_task_update(open, ec);
  CHECK(ec == errc::stream_captured);
  s.begin_task_group();  // left open at the capture's end: dropped
  s.launch(fixed(us(1)));
  npurt::stream_graph g = s.end_capture();
  CHECK(open.valid());
  CHECK(open.size() == 1);
  u.begin_task_update(open);
  u.begin_task_group(ec);  // an update marks no group
  CHECK(ec == errc::stream_captured);
  u.begin_task_update(open, ec);
  CHECK(ec == errc::stream_captured);
  (void)u.end_capture(ec);  // an update, not a capture
  CHECK(ec == errc::capture_unmatched);
  u.launch(fixed(us(1)));
  u.end_task_update();
  // Null, foreign, another device's stream.
  CHECK(thrown_code([&] { u.begin_task_update(npurt::task_group{}); }) == errc::invalid_graph);
  npurt::system elsewhere{simple()};
  auto t = elsewhere.device(0).make_stream();
  t.begin_capture();
  t.begin_task_group();
  t.launch(fixed(us(1)));
  npurt::task_group foreign = t.end_task_group();
  npurt::stream_graph fg = t.end_capture();
  CHECK(thrown_code([&] { u.begin_task_update(foreign); }) == errc::invalid_graph);
  auto other = sys.device(1).make_stream();
  other.begin_task_update(open, ec);
  CHECK(ec == errc::stream_device_mismatch);
  // The graph gone: the group with it.
  g = npurt::stream_graph{};
  CHECK_FALSE(open.valid());
  CHECK_THAT(thrown_what([&] { u.begin_task_update(open); }), ContainsSubstring("destroyed"));
  CHECK(u.capture_info() == npurt::capture_status::none);
}

TEST_CASE_METHOD(group_fixture, "an update of another shape, or one a refused call broke, changes nothing",
                 "[core][capture][task_group][error]") {
  std::memset(in.data(), 3, n);
  npurt::stream_graph g = grouped(3);
  std::function<void()> body;
  errc expected{};
  std::string words;
  SECTION("fewer tasks") {
    body = [&] { u.launch(fixed(us(1), "new")); };
    expected = errc::graph_update_mismatch;
    words = "2 tasks, the update 1";
  }
  SECTION("a task of another kind") {
    body = [&] {
      u.launch(fixed(us(1), "new"));
      u.memset(d.data(), n, 0, n);
    };
    expected = errc::graph_update_mismatch;
    words = "task 1 of the group (node 2";
  }
  SECTION("a copy of another direction") {
    body = [&] {
      u.launch(fixed(us(1), "new"));
      u.memcpy(d.data(), n, in.data(), n);
    };
    expected = errc::graph_update_mismatch;
    words = "copies between other memories";
  }
  SECTION("a record of an event") {
    body = [&] {
      u.launch(fixed(us(1), "new"));
      std::error_code rec_ec;
      u.record(fork, rec_ec);
      CHECK(rec_ec == errc::capture_unsupported);
      u.memcpy(out2.data(), n, d.data(), n);
    };
    expected = errc::capture_invalidated;
    words = "npurt::stream::record";
  }
  SECTION("a pool allocation") {
    body = [&] {
      std::error_code pool_ec;
      (void)dev.mem_pool().malloc_async(64, u, pool_ec);
      CHECK(pool_ec == errc::capture_unsupported);
      u.launch(fixed(us(1), "new"));
      u.memcpy(out2.data(), n, d.data(), n);
    };
    expected = errc::capture_invalidated;
    words = "cannot allocate or free graph memory";
  }
  SECTION("a wait for work outside it") {
    body = [&] {
      const npurt::event e = s.launch(fixed(us(1), "outside"));
      std::error_code wait_ec;
      u.wait(e, wait_ec);
      CHECK(wait_ec == errc::capture_dependency);
      u.launch(fixed(us(1), "new"));
      u.memcpy(out2.data(), n, d.data(), n);
    };
    expected = errc::capture_invalidated;
    words = "npurt::stream::wait";
  }
  SECTION("the graph destroyed during the update") {
    body = [&] {
      u.launch(fixed(us(1), "new"));
      u.memcpy(out2.data(), n, d.data(), n);
      g = npurt::stream_graph{};
    };
    expected = errc::invalid_graph;
    words = "destroyed";
  }
  u.begin_task_update(group);
  body();
  std::error_code ec;
  u.end_task_update(ec);
  CHECK(ec == expected);
  CHECK_THAT(sys.recent_error_message(),
             ContainsSubstring("npurt::stream::end_task_update") && ContainsSubstring(words));
  CHECK(u.capture_info() == npurt::capture_status::none);  // ended either way
  s.synchronize();
  CHECK(rec.named("new").empty());
  if (!g.valid()) return;
  g.launch(s);  // as captured
  s.synchronize();
  CHECK(all_bytes(out1, 3));
  CHECK(rec.named("old").size() == 1);
}

TEST_CASE_METHOD(group_fixture, "a failed capture's groups and a graph with graph memory take no update",
                 "[core][capture][task_group][error]") {
  s.begin_capture();
  s.begin_task_group();
  s.launch(fixed(us(1)));
  npurt::task_group lost = s.end_task_group();
  std::error_code ec;
  (void)s.query(ec);  // breaks the capture
  (void)s.end_capture(ec);
  CHECK(ec == errc::capture_invalidated);
  CHECK_FALSE(lost.valid());
  u.begin_task_update(lost, ec);
  CHECK(ec == errc::invalid_graph);

  s.begin_capture();
  void* p = dev.mem_pool().malloc_async(n, s);
  s.begin_task_group();
  s.memcpy(p, n, in.data(), n);
  npurt::task_group with_memory = s.end_task_group();
  dev.mem_pool().free_async(p, s);
  npurt::stream_graph g = s.end_capture();
  CHECK(with_memory.valid());
  u.begin_task_update(with_memory, ec);
  CHECK(ec == errc::graph_update_mismatch);
  CHECK(u.capture_info() == npurt::capture_status::none);
}
