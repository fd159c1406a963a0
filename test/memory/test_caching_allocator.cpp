#include <npurt/detail/caching_allocator.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace npurt::detail;
using npurt::errc;

namespace {

// The runtime's side of the callbacks: fences complete when the test says so.
struct fake_streams {
  std::set<std::uint64_t> done;
  std::uint64_t next_fence = 1;
  int syncs = 0;
  std::map<std::pair<std::uint32_t, std::uint64_t>, bool> waits;  // (stream, fence) -> already waits
  std::vector<std::pair<std::uint32_t, std::uint64_t>> inserted;

  stream_callbacks basic() {
    stream_callbacks cb;
    cb.fence_done = [this](std::uint64_t f) { return done.count(f) != 0; };
    cb.synchronize_all = [this] {
      ++syncs;
      for (std::uint64_t f = 1; f < next_fence; ++f) done.insert(f);
    };
    return cb;
  }
  stream_callbacks ordered() {
    auto cb = basic();
    cb.record_fence = [this](std::uint32_t) { return next_fence++; };
    cb.stream_waits_on = [this](std::uint32_t s, std::uint64_t f) { return waits[{s, f}]; };
    cb.insert_wait = [this](std::uint32_t s, std::uint64_t f) { inserted.emplace_back(s, f); };
    return cb;
  }
};

void check_invariants(const caching_allocator& a) {
  const auto& s = a.stats();
  INFO(a.check_consistency());
  REQUIRE(a.check_consistency().empty());
  for (int p = 0; p < 3; ++p) {
    INFO("pool " << p);
    REQUIRE(s.requested_bytes[p].current <= s.allocated_bytes[p].current);
    REQUIRE(s.allocated_bytes[p].current <= s.active_bytes[p].current);
    REQUIRE(s.active_bytes[p].current <= s.reserved_bytes[p].current);
    REQUIRE(s.allocation[p].current <= s.active[p].current);
    for (const stat_array* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                                  &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
      REQUIRE((*arr)[p].current >= 0);
      REQUIRE((*arr)[p].peak >= (*arr)[p].current);
      REQUIRE((*arr)[p].allocated - (*arr)[p].freed == (*arr)[p].current);
    }
  }
  for (const stat_array* arr : {&s.allocated_bytes, &s.reserved_bytes, &s.requested_bytes})
    REQUIRE((*arr)[stat_all].current == (*arr)[stat_small].current + (*arr)[stat_large].current);
}

std::size_t segment_count(const caching_allocator& a) { return a.snapshot().segments.size(); }

// One row of a statistic as an independent model keeps it (PyTorch's Stat).
struct row {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(std::int64_t n) {
    current += n;
    peak = std::max(peak, current);
    allocated += n;
  }
  void sub(std::int64_t n) {
    current -= n;
    freed += n;
  }
};

}  // namespace

TEST_CASE("sizes round up to 512 bytes, and Ascend-compat mode adds 32 bytes first", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  CHECK(a.round_size(1) == 512);
  CHECK(a.round_size(512) == 512);
  CHECK(a.round_size(513) == 1024);
  CHECK(a.round_size(3 * mib + 1) == 3 * mib + 512);
  const auto p = a.allocate(513, 0);
  CHECK(a.block_size(p) == 1024);
  CHECK(a.stats().requested_bytes[stat_all].current == 513);
  CHECK(a.stats().allocated_bytes[stat_all].current == 1024);

  caching_allocator_options o;
  o.ascend_pad = true;
  caching_allocator npu(dev, o);
  CHECK(npu.round_size(480) == 512);   // 480 + 32 fits one granule
  CHECK(npu.round_size(481) == 1024);  // 481 + 32 does not
  CHECK(npu.round_size(512) == 1024);
  CHECK(npu.block_size(npu.allocate(512, 0)) == 1024);
}

TEST_CASE("requests up to 1 MiB use 2 MiB small segments; larger ones 20 MiB or 2 MiB-rounded segments",
          "[memory][allocator]") {
  CHECK(caching_allocator::allocation_size(512) == 2 * mib);
  CHECK(caching_allocator::allocation_size(1 * mib) == 2 * mib);
  CHECK(caching_allocator::allocation_size(1 * mib + 512) == 20 * mib);
  CHECK(caching_allocator::allocation_size(10 * mib - 512) == 20 * mib);
  CHECK(caching_allocator::allocation_size(10 * mib) == 10 * mib);
  CHECK(caching_allocator::allocation_size(11 * mib) == 12 * mib);

  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  a.allocate(1 * mib, 0);
  CHECK(a.stats().reserved_bytes[stat_small].current == static_cast<std::int64_t>(2 * mib));
  CHECK(a.stats().reserved_bytes[stat_large].current == 0);
  a.allocate(1 * mib + 1, 0);
  CHECK(a.stats().reserved_bytes[stat_large].current == static_cast<std::int64_t>(20 * mib));
  a.allocate(11 * mib, 1);  // another stream: cannot use the 20 MiB segment's remainder
  CHECK(a.stats().reserved_bytes[stat_large].current == static_cast<std::int64_t>(32 * mib));
  CHECK(a.stats().segment[stat_all].current == 3);
  CHECK(dev.used() == 34 * mib);
  check_invariants(a);
}

TEST_CASE("large blocks split only when more than 1 MiB would remain; small ones when 512 bytes would",
          "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  // 19.5 MiB in a 20 MiB segment leaves 0.5 MiB: kept inside the block as slack.
  const auto big = a.allocate(19 * mib + 512 * kib, 0);
  CHECK(a.block_size(big) == 20 * mib);
  CHECK(a.stats().inactive_split_bytes[stat_all].current == 0);
  // 1.5 MiB leaves 18.5 MiB: split.
  const auto mid = a.allocate(1 * mib + 512 * kib, 1);
  CHECK(a.block_size(mid) == 1 * mib + 512 * kib);
  CHECK(a.stats().inactive_split_bytes[stat_large].current == static_cast<std::int64_t>(18 * mib + 512 * kib));
  // Small pool: 1.5 KiB in a 2 MiB segment splits down to the 512 B granule.
  const auto s = a.allocate(1536, 0);
  CHECK(a.block_size(s) == 1536);
  CHECK(a.stats().inactive_split_bytes[stat_small].current == static_cast<std::int64_t>(2 * mib - 1536));
  check_invariants(a);
}

TEST_CASE("freed neighbours coalesce inside a segment but never across segments", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  std::vector<std::uint64_t> p;
  for (int i = 0; i < 4; ++i) p.push_back(a.allocate(512 * kib, 0));  // fills one 2 MiB segment exactly
  const auto q = a.allocate(512 * kib, 0);                            // second segment, adjacent addresses
  REQUIRE(segment_count(a) == 2);
  a.deallocate(p[0]);
  a.deallocate(p[2]);
  auto snap = a.snapshot();
  CHECK(snap.segments[0].blocks.size() == 4);
  CHECK(snap.total_free == 1 * mib + 1536 * kib);  // two holes in segment 0, the 1.5 MiB tail of segment 1
  a.deallocate(p[1]);  // merges with both neighbours
  snap = a.snapshot();
  CHECK(snap.segments[0].blocks.size() == 2);
  CHECK(snap.segments[0].blocks[0].size == 1536 * kib);
  a.deallocate(p[3]);
  a.deallocate(q);
  snap = a.snapshot();
  REQUIRE(snap.segments.size() == 2);
  CHECK(snap.segments[0].addr + snap.segments[0].size == snap.segments[1].addr);  // adjacent...
  CHECK(snap.segments[0].blocks.size() == 1);  // ...yet each is one free block of its own
  CHECK(snap.segments[1].blocks.size() == 1);
  CHECK(snap.largest_free == 2 * mib);
  CHECK(snap.fragmentation() == 0.5);
  check_invariants(a);
}

TEST_CASE("fragmentation is one minus the largest free block over all free bytes", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  std::vector<std::uint64_t> p;
  for (int i = 0; i < 4; ++i) p.push_back(a.allocate(512 * kib, 0));
  CHECK(a.snapshot().fragmentation() == 0.0);  // nothing free
  a.deallocate(p[0]);
  a.deallocate(p[2]);
  CHECK(a.snapshot().fragmentation() == 0.5);  // two equal holes
  a.deallocate(p[1]);
  CHECK(a.snapshot().fragmentation() == 0.0);  // one hole
}

TEST_CASE("a freed block is reused at once on its own stream, never on another without an event",
          "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  const auto x = a.allocate(4096, 7);
  a.deallocate(x, 7);
  CHECK(a.allocate(4096, 7) == x);
  const auto y = a.allocate(4096, 8);
  CHECK(y != x);
  a.deallocate(y, 8);
  // Best fit prefers the smallest block, then the lowest address, among the stream's own.
  const auto big = a.allocate(64 * kib, 8);
  const auto sep1 = a.allocate(512, 8);  // keeps the two holes apart
  const auto small = a.allocate(8 * kib, 8);
  const auto sep2 = a.allocate(512, 8);
  (void)sep1;
  (void)sep2;
  a.deallocate(big, 8);
  a.deallocate(small, 8);
  CHECK(a.allocate(6 * kib, 8) == small);
  check_invariants(a);
}

namespace {

// One 8 KiB block x on stream 0 of an allocator over a 1 GiB device, whose fences the test
// completes by hand; with `ordered`, each free also records a fence.
template <bool ordered>
struct one_block {
  counting_provider dev{1024 * mib};
  fake_streams rt;
  caching_allocator a{dev, {}, ordered ? rt.ordered() : rt.basic()};
  const std::uint64_t x = a.allocate(8192, 0);
};

// Frees x on stream 0 after recording these (stream, fence) uses of it.
void free_after_uses(caching_allocator& a, std::uint64_t x,
                     std::initializer_list<std::pair<std::uint32_t, std::uint64_t>> uses) {
  for (const auto& [stream, fence] : uses) a.record_stream(x, stream, fence);
  a.deallocate(x, 0);
}

}  // namespace

TEST_CASE_METHOD(one_block<false>, "record_stream delays reuse until the recorded fence is done",
                 "[memory][allocator]") {
  free_after_uses(a, x, {{1, 42}, {0, 99}});  // 99 on its own stream: no effect
  CHECK(a.stats().allocated_bytes[stat_all].current == 0);
  CHECK(a.stats().active_bytes[stat_all].current == 8192);  // freed but pending
  CHECK(a.snapshot().segments[0].blocks[0].pending);
  const auto y = a.allocate(8192, 0);
  CHECK(y != x);
  std::error_code ec;
  a.deallocate(x, 0, ec);  // pending is not live: a second free is a double free
  CHECK(ec == errc::double_free);
  rt.done.insert(42);
  a.process_events();
  CHECK(a.stats().active_bytes[stat_all].current == 8192);  // only y now
  CHECK(a.allocate(8192, 0) == x);
  check_invariants(a);
}

TEST_CASE_METHOD(one_block<false>, "record_stream in any order keeps one use per stream, the latest fence of each",
                 "[memory][allocator]") {
  // Streams out of order and repeated: a repeat moves its stream's fence forward, never back.
  free_after_uses(a, x, {{9, 10}, {3, 11}, {5, 12}, {3, 20}, {9, 5}});
  const std::uint64_t order[] = {10, 12, 11};  // 11 is stream 3's stale fence: done, not enough
  for (const auto f : order) {
    rt.done.insert(f);
    a.process_events();
    CHECK(a.stats().active_bytes[stat_all].current == 8192);
  }
  rt.done.insert(20);
  a.process_events();
  CHECK(a.stats().active_bytes[stat_all].current == 0);
  CHECK(a.allocate(8192, 0) == x);
  check_invariants(a);
}

TEST_CASE_METHOD(one_block<true>, "record_stream without a fence records one at free time", "[memory][allocator]") {
  a.record_stream(x, 3);
  a.deallocate(x, 0);  // fence 1: the free on stream 0; fence 2: stream 3's use
  CHECK(rt.next_fence == 3);
  CHECK(a.allocate(8192, 0) != x);
  rt.done.insert(2);
  CHECK(a.allocate(8192, 0) == x);
  check_invariants(a);
}

TEST_CASE("trigger_gc keeps a segment whose free is still ahead of its stream", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  fake_streams rt;
  caching_allocator_options o;
  o.garbage_collection_threshold = 0.5;
  caching_allocator a(dev, o, rt.ordered());
  const auto busy = a.allocate(30 * mib, 0);
  const auto idle = a.allocate(30 * mib, 1);
  a.deallocate(busy, 0);  // fence 1, not reached: queued work on stream 0 may still write it
  a.deallocate(idle, 1);  // fence 2
  rt.done.insert(2);
  a.trigger_gc();
  CHECK(a.reserved_current() == 30 * mib);
  CHECK(a.stats().num_gc_freed_blocks == 1);
  const auto snap = a.snapshot();
  REQUIRE(snap.segments.size() == 1);
  CHECK(snap.segments.front().addr == busy);
  rt.done.insert(1);
  a.trigger_gc();
  CHECK(a.reserved_current() == 0);
  check_invariants(a);
}

TEST_CASE("max_split_size keeps oversize blocks whole and reserves them for big requests", "[memory][allocator]") {
  counting_provider dev(4096 * mib);
  caching_allocator_options o;
  o.max_split_size = 40 * mib;
  o.max_non_split_rounding = 5 * mib;
  caching_allocator a(dev, o);
  const auto big = a.allocate(50 * mib, 0);
  a.deallocate(big);
  // A request below max_split_size never takes an oversize block.
  const auto below = a.allocate(30 * mib, 0);
  CHECK(below != big);
  // An oversize request takes it only if the waste stays under max_non_split_rounding.
  const auto wasteful = a.allocate(44 * mib, 0);  // 50 >= 44 + 5
  CHECK(wasteful != big);
  const auto close = a.allocate(46 * mib, 0);  // 50 < 46 + 5
  CHECK(close == big);
  CHECK(a.block_size(close) == 50 * mib);  // not split
  CHECK(a.stats().oversize_allocations.current == 2);  // 44 and 50 MiB; 30 MiB is below max_split_size
  CHECK(a.stats().oversize_segments.current == 2);
  check_invariants(a);

  caching_allocator_options bad;
  bad.max_split_size = 4 * mib;
  CHECK_THROWS_AS(caching_allocator(dev, bad), npurt::caller_error);
}

TEST_CASE("a max_non_split_rounding near SIZE_MAX accepts any waste rather than none", "[memory][allocator]") {
  counting_provider dev(4096 * mib);
  caching_allocator_options o;
  o.max_split_size = 40 * mib;
  o.max_non_split_rounding = SIZE_MAX;  // "take any cached oversize block"
  caching_allocator a(dev, o);
  const auto big = a.allocate(100 * mib, 0);
  a.deallocate(big);
  // 100 MiB wastes 50 MiB of a 50 MiB request: less than SIZE_MAX.
  CHECK(a.allocate(50 * mib, 0) == big);
  CHECK(a.stats().num_device_alloc == 1);
  check_invariants(a);
}

TEST_CASE("compact sizes that rounding to the granule would wrap are refused or clamped", "[memory][allocator]") {
  counting_provider dev(256 * mib);
  caching_allocator_options o;
  o.strategy = allocation_strategy::compact;
  SECTION("an address space that cannot be rounded up is invalid_config at construction") {
    for (const std::size_t va : {SIZE_MAX, SIZE_MAX - o.granule + 2}) {
      o.arena_address_space = va;
      try {
        caching_allocator a(dev, o);
        FAIL("accepted arena_address_space " << va);
      } catch (const npurt::caller_error& e) {
        CHECK(e.code() == errc::invalid_config);
        CHECK(std::string(e.what()).find("arena_address_space") != std::string::npos);
      }
    }
    // A multiple of the granule does not wrap: it is refused only as more than the device holds.
    o.arena_address_space = SIZE_MAX - o.granule + 1;
    try {
      caching_allocator a(dev, o);
      FAIL("accepted arena_address_space " << o.arena_address_space);
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK(std::string(e.what()).find("more than the device's capacity") != std::string::npos);
    }
  }
  SECTION("an initial reservation past the arena reserves the whole arena") {
    o.arena_address_space = 8 * mib;
    for (const std::size_t initial : {SIZE_MAX, SIZE_MAX - 100, 64 * mib}) {
      INFO(initial);
      o.initial_reserve = initial;
      caching_allocator a(dev, o);
      const auto x = a.allocate(1000, 0);
      CHECK(x != 0);
      CHECK(a.reserved_current() == 8 * mib);  // the arena, mapped at its creation
      CHECK(a.stats().num_device_alloc == 1);
      check_invariants(a);
    }
  }
}

TEST_CASE("compact arenas keep pages whose stream-ordered free is still ahead", "[memory][allocator]") {
  // Work queued before a free may still use the block: its pages stay mapped until the free is
  // behind its stream, as a segment stays cached (the trigger_gc and retry tests above).
  counting_provider dev(64 * mib);
  fake_streams rt;
  auto cb = rt.ordered();
  cb.synchronize_all = [&rt] { ++rt.syncs; };  // cannot block: no fence completes
  caching_allocator_options o;
  o.strategy = allocation_strategy::compact;
  caching_allocator a(dev, o, cb);
  const auto x = a.allocate(8 * mib, 0);
  a.deallocate(x, 0);  // fence 1, not reached
  a.empty_cache();
  CHECK(a.reserved_current() == 8 * mib);
  a.trim_to(0);
  CHECK(a.reserved_current() == 8 * mib);
  a.trigger_gc();
  CHECK(a.reserved_current() == 8 * mib);
  a.on_synchronize(false);  // another stream's synchronize
  CHECK(a.reserved_current() == 8 * mib);
  // Stream 1 needs more than the device has left: the retry chain may not unmap stream 0's pages.
  std::error_code ec;
  CHECK(a.allocate(60 * mib, 1, ec) == 0);
  CHECK(ec == errc::out_of_memory);
  CHECK(a.reserved_current() == 8 * mib);
  CHECK(rt.syncs >= 1);
  check_invariants(a);
  // Once the free is behind, the same calls give the pages back.
  rt.done.insert(1);
  a.empty_cache();
  CHECK(a.reserved_current() == 0);
  check_invariants(a);
  // A device-wide synchronize vouches for every stream.
  const auto y = a.allocate(8 * mib, 0);
  a.deallocate(y, 0);
  a.on_synchronize(true);
  CHECK(a.reserved_current() == 0);
  check_invariants(a);
  // A cached block whose free is ahead stays below the cut, and loses its cached successor: its
  // split accounting follows.
  const auto lo = a.allocate(4 * mib, 0), hi = a.allocate(4 * mib, 0);
  a.deallocate(lo, 0);  // not reached
  a.deallocate(hi, 1);  // another stream's free: no merge with lo
  rt.done.insert(rt.next_fence - 1);
  a.trim_to(0);
  CHECK(a.reserved_current() == 4 * mib);
  check_invariants(a);
}

TEST_CASE("garbage collection frees the oldest cached segments once usage passes the threshold",
          "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator_options o;
  o.garbage_collection_threshold = 0.5;
  o.pool_size_limit = 100 * mib;
  caching_allocator a(dev, o);
  std::vector<retry_step> steps;
  a.on_retry_step = [&](retry_step s) { steps.push_back(s); };
  std::vector<std::uint64_t> p;
  for (int i = 0; i < 5; ++i) p.push_back(a.allocate(12 * mib, 0));
  for (auto x : p) a.deallocate(x);
  // Keep the first two young: reuse them a few times.
  for (int r = 0; r < 4; ++r) {
    const auto u = a.allocate(12 * mib, 0);
    const auto v = a.allocate(12 * mib, 0);
    a.deallocate(u);
    a.deallocate(v);
  }
  REQUIRE(a.reserved_current() == 60 * mib);  // above 0.5 x 100 MiB
  const auto n = a.allocate(14 * mib, 0);     // fits no cached block
  (void)n;
  REQUIRE(!steps.empty());
  CHECK(steps.front() == retry_step::garbage_collect_preemptive);
  CHECK(a.stats().num_gc_freed_blocks == 1);  // 12 MiB covers the 10 MiB overshoot
  CHECK(a.reserved_current() == 62 * mib);
  // The survivors include the two young segments (p[0], p[1]): the allocator reused the
  // lowest addresses, so those are the ones GC must keep.
  const auto snap = a.snapshot();
  std::set<std::uint64_t> bases;
  for (auto& s : snap.segments) bases.insert(s.addr);
  CHECK(bases.count(p[0]) == 1);
  CHECK(bases.count(p[1]) == 1);
  check_invariants(a);

  // Without a threshold there is no GC.
  caching_allocator_options off;
  off.pool_size_limit = 100 * mib;
  caching_allocator b(dev, off);
  for (int i = 0; i < 5; ++i) b.deallocate(b.allocate(12 * mib, 0));
  b.allocate(14 * mib, 0);
  CHECK(b.stats().num_gc_freed_blocks == 0);
  CHECK(b.reserved_current() == 26 * mib);  // the reused 12 MiB segment stays cached next to the new one
}

TEST_CASE(
    "the retry chain frees fitting cached blocks, then collects garbage, then synchronises and frees "
    "everything, then raises out of memory",
    "[memory][allocator]") {
  counting_provider dev(64 * mib);
  fake_streams rt;
  caching_allocator_options o;
  o.device = 3;
  std::vector<retry_step> steps;
  // Two 24 MiB segments cached on `stream`, then 30 MiB asked for on stream 0: the 64 MiB device
  // has room for it only once cached memory goes back.
  auto cache_two_then_ask = [](caching_allocator& a, std::uint32_t stream) {
    const auto x = a.allocate(24 * mib, stream), y = a.allocate(24 * mib, stream);
    a.deallocate(x);
    a.deallocate(y);
    a.allocate(30 * mib, 0);
  };
  // Giving segments back to the device synchronises it first, as cudaFree and aclrtFree do: once,
  // for the one retry.
  auto check_one_synced_retry = [&](const caching_allocator& a) {
    CHECK(rt.syncs == 1);
    CHECK(a.stats().num_sync_all_streams == 1);
    CHECK(a.stats().num_alloc_retries == 1);
  };

  SECTION("cached blocks of the stream are enough") {
    caching_allocator a(dev, o, rt.basic());
    a.on_retry_step = [&](retry_step s) { steps.push_back(s); };
    cache_two_then_ask(a, 0);
    CHECK(steps == std::vector<retry_step>{retry_step::device_alloc_failed, retry_step::free_fitting_cached});
    check_one_synced_retry(a);
    CHECK(a.stats().num_gc_freed_blocks == 2);
    check_invariants(a);
  }
  SECTION("only another stream's cache helps: synchronise and free everything") {
    caching_allocator a(dev, o, rt.basic());
    a.on_retry_step = [&](retry_step s) { steps.push_back(s); };
    cache_two_then_ask(a, 1);
    CHECK(steps == std::vector<retry_step>{retry_step::device_alloc_failed, retry_step::free_fitting_cached,
                                           retry_step::synchronize_and_free_all});
    check_one_synced_retry(a);
    check_invariants(a);
  }
  SECTION("nothing helps: every step in order, then out_of_memory_error with PyTorch's fields") {
    o.garbage_collection_threshold = 0.9;
    caching_allocator a(dev, o, rt.basic());
    a.on_retry_step = [&](retry_step s) { steps.push_back(s); };
    const auto x = a.allocate(24 * mib, 0), y = a.allocate(24 * mib, 0);
    bool thrown = false;
    try {
      a.allocate(30 * mib, 0);
    } catch (const npurt::out_of_memory_error& e) {
      thrown = true;
      CHECK(e.code() == errc::out_of_memory);
      CHECK(e.requested() == 30 * mib);
      CHECK(e.device() == 3);
      CHECK(e.details().total == 64 * mib);
      CHECK(e.details().free == 16 * mib);
      CHECK(e.details().allocated == 48 * mib);
      CHECK(e.details().reserved == 48 * mib);
      const std::string m = e.what();
      CHECK(m.find("Tried to allocate 30.00 MiB") != std::string::npos);
      CHECK(m.find("NPU 3") != std::string::npos);
      CHECK(m.find("total capacity of 64.00 MiB of which 16.00 MiB is free") != std::string::npos);
      CHECK(m.find("48.00 MiB is allocated by the pool") != std::string::npos);
      CHECK(m.find("0 bytes is reserved by the pool but unallocated") != std::string::npos);
      CHECK(m.find("max_split_size") != std::string::npos);
    }
    CHECK(thrown);
    CHECK(steps == std::vector<retry_step>{retry_step::device_alloc_failed, retry_step::free_fitting_cached,
                                           retry_step::garbage_collect, retry_step::synchronize_and_free_all,
                                           retry_step::out_of_memory});
    CHECK(a.stats().num_ooms == 1);
    check_invariants(a);
    // Still usable.
    a.deallocate(x);
    a.deallocate(y);
    CHECK(a.allocate(30 * mib, 0) != 0);
    check_invariants(a);
  }
  SECTION("a pool size limit reports pool_limit") {
    o.pool_size_limit = 32 * mib;
    caching_allocator a(dev, o, rt.basic());
    std::error_code ec;
    a.allocate(24 * mib, 0, ec);
    CHECK_FALSE(ec);
    CHECK(a.allocate(24 * mib, 0, ec) == 0);
    CHECK(ec == errc::pool_limit);
    CHECK_THROWS_AS(a.allocate(24 * mib, 0), npurt::out_of_memory_error);
    check_invariants(a);
  }
}

TEST_CASE("a small request out of memory takes a cached large-pool block before it is refused", "[memory][allocator]") {
  // The 20 MiB device holds one large segment whose first 2 MiB are live. A 4 KiB request needs
  // a 2 MiB small segment the device cannot give, and no cached segment is whole, so nothing can
  // be released: the 18 MiB free block after the live one serves it, split as large blocks are.
  counting_provider dev(20 * mib);
  fake_streams rt;
  std::vector<retry_step> steps;
  std::error_code ec;
  SECTION("the stream's own block") {
    caching_allocator a(dev, {}, rt.basic());
    a.on_retry_step = [&](retry_step s) { steps.push_back(s); };
    const auto x = a.allocate(2 * mib, 0);
    const auto y = a.allocate(4096, 0, ec);
    REQUIRE_FALSE(ec);
    CHECK(y == x + 2 * mib);
    CHECK(steps == std::vector<retry_step>{retry_step::device_alloc_failed, retry_step::free_fitting_cached,
                                           retry_step::synchronize_and_free_all});
    const auto& st = a.stats();
    CHECK(st.num_ooms == 0);
    CHECK(st.num_alloc_retries == 1);
    CHECK(st.num_device_alloc == 1);
    // The block stays the large pool's: its statistics are that row's.
    CHECK(st.allocation[stat_large].current == 2);
    CHECK(st.allocated_bytes[stat_large].current == static_cast<std::int64_t>(2 * mib + 4096));
    CHECK(st.requested_bytes[stat_large].current == static_cast<std::int64_t>(2 * mib + 4096));
    CHECK(st.allocation[stat_small].current == 0);
    CHECK(st.reserved_bytes[stat_large].current == static_cast<std::int64_t>(20 * mib));
    CHECK(st.inactive_split_bytes[stat_large].current == static_cast<std::int64_t>(18 * mib - 4096));
    CHECK(a.block_size(y) == 4096);
    check_invariants(a);
    a.deallocate(y);
    a.deallocate(x);
    check_invariants(a);
    a.empty_cache();
    CHECK(a.reserved_current() == 0);
  }
  SECTION("another stream's block, once its free is behind") {
    caching_allocator a(dev, {}, rt.ordered());
    const auto x = a.allocate(2 * mib, 0), z = a.allocate(4 * mib, 0);
    a.deallocate(z);
    const auto y = a.allocate(4096, 1, ec);
    REQUIRE_FALSE(ec);
    CHECK(y == x + 2 * mib);
    CHECK(a.stats().num_cross_stream_reuse == 1);
    CHECK(a.stats().num_ooms == 0);
    check_invariants(a);
  }
  SECTION("with auto_growth off, the stock of a large request") {
    caching_allocator_options o;
    o.auto_growth = false;
    caching_allocator a(dev, o, rt.basic());
    a.reserve(2 * mib, 0);  // one 20 MiB large segment
    const auto y = a.allocate(4096, 0, ec);
    REQUIRE_FALSE(ec);
    CHECK(a.snapshot().segments.at(0).addr == y);
    CHECK(a.reserved_current() == 20 * mib);
    check_invariants(a);
  }
  SECTION("a request no cached block can hold is still refused") {
    caching_allocator a(dev, {}, rt.basic());
    const auto x = a.allocate(19 * mib, 0);  // takes the whole 20 MiB segment: 1 MiB would remain
    CHECK(a.block_size(x) == 20 * mib);
    CHECK(a.allocate(4096, 0, ec) == 0);
    CHECK(ec == errc::out_of_memory);
    CHECK(a.stats().num_ooms == 1);
    check_invariants(a);
  }
}

TEST_CASE("statistics count the retry when cached segments are freed to satisfy a request under the pool limit",
          "[memory][allocator][stats]") {
  counting_provider dev(1024 * mib);
  fake_streams rt;
  caching_allocator_options o;
  o.pool_size_limit = 100 * mib;
  caching_allocator a(dev, o, rt.basic());
  std::vector<std::uint64_t> p;
  for (int i = 0; i < 5; ++i) p.push_back(a.allocate(12 * mib, 0));  // five 12 MiB segments
  for (auto x : p) a.deallocate(x);
  REQUIRE(a.reserved_current() == 60 * mib);
  // 60 MiB cached + 90 MiB new exceeds the 100 MiB limit; no cached block holds 90 MiB, so the
  // pool must give all five segments back and ask the device again.
  const auto big = a.allocate(90 * mib, 0);
  CHECK(big != 0);
  CHECK(a.reserved_current() == 90 * mib);
  const auto& s = a.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_gc_freed_blocks == 5);
  CHECK(s.num_sync_all_streams == 1);
  CHECK(rt.syncs == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.num_device_free == 5);
  check_invariants(a);
}

TEST_CASE("a segment whose stream-ordered free is still ahead is not given back to the device",
          "[memory][allocator][stats]") {
  // A runtime that cannot block (inside its event loop) returns from synchronize_all with work
  // still running: the segment must stay cached rather than go back under a running kernel.
  counting_provider dev(64 * mib);
  fake_streams rt;
  auto cb = rt.ordered();
  cb.synchronize_all = [&rt] { ++rt.syncs; };  // cannot block: no fence completes
  caching_allocator a(dev, {}, cb);
  const auto x = a.allocate(24 * mib, 0), y = a.allocate(24 * mib, 0);
  a.deallocate(x);
  a.deallocate(y);
  std::error_code ec;
  CHECK(a.allocate(30 * mib, 0, ec) == 0);
  CHECK(ec == errc::out_of_memory);
  CHECK(a.reserved_current() == 48 * mib);
  CHECK(a.stats().num_gc_freed_blocks == 0);
  CHECK(rt.syncs >= 1);
  check_invariants(a);
  // Once the frees are behind the streams, the same request succeeds.
  for (std::uint64_t f = 1; f < rt.next_fence; ++f) rt.done.insert(f);
  CHECK(a.allocate(30 * mib, 0, ec) != 0);
  CHECK_FALSE(ec);
  CHECK(a.stats().num_gc_freed_blocks == 2);
  check_invariants(a);
}

TEST_CASE("bad input gets a clear error and leaves the pool consistent", "[memory][allocator]") {
  counting_provider dev(256 * mib);
  caching_allocator_options o;
  o.device = 1;
  caching_allocator a(dev, o);
  std::error_code ec;
  CHECK(a.allocate(0, 0, ec) == 0);
  CHECK(ec == errc::zero_size);
  // More than the device holds is out of memory (as cudaMalloc says), a size that cannot be
  // rounded up is a bad argument.
  CHECK(a.allocate(257 * mib, 0, ec) == 0);
  CHECK(ec == errc::out_of_memory);
  CHECK(a.allocate(SIZE_MAX, 0, ec) == 0);
  CHECK(ec == errc::size_overflow);
  CHECK(a.allocate(SIZE_MAX - 510, 0, ec) == 0);  // rounds up past SIZE_MAX
  CHECK(ec == errc::size_overflow);
  CHECK(a.allocate(SIZE_MAX - 511, 0, ec) == 0);  // a multiple of 512 already: representable
  CHECK(ec == errc::out_of_memory);
  CHECK_THROWS_AS(a.allocate(0, 0), npurt::caller_error);
  CHECK_THROWS_AS(a.allocate(257 * mib, 0), npurt::out_of_memory_error);
  CHECK_THROWS_AS(a.allocate(SIZE_MAX, 0), npurt::caller_error);

  const auto x = a.allocate(4096, 0);
  const auto y = a.allocate(4096, 0);
  a.deallocate(0, 0, ec);
  CHECK(ec == errc::null_pointer);
  a.deallocate(x + 512, 0, ec);  // inside a live block
  CHECK(ec == errc::invalid_pointer);
  a.deallocate(0xdead0000, 0, ec);  // never ours
  CHECK(ec == errc::invalid_pointer);
  a.deallocate(x, 0, ec, /*device=*/0);
  CHECK(ec == errc::stream_device_mismatch);
  a.deallocate(x, 0, ec, /*device=*/1);
  CHECK_FALSE(ec);
  a.deallocate(x, 0, ec);
  CHECK(ec == errc::double_free);
  a.deallocate(y, 0);
  a.deallocate(y, 0, ec);  // merged into a larger free block by now
  CHECK(ec == errc::double_free);
  CHECK_THROWS_AS(a.deallocate(y, 0), npurt::caller_error);
  a.record_stream(x, 2, 5, ec);
  CHECK(ec == errc::double_free);
  a.record_stream(0xdead0000, 2, 5, ec);
  CHECK(ec == errc::invalid_pointer);
  check_invariants(a);
  CHECK(a.stats().allocated_bytes[stat_all].current == 0);
  CHECK(a.allocate(4096, 0) != 0);
  check_invariants(a);
}

TEST_CASE("statistics invariants hold at every step of a random workload, and empty_cache returns all",
          "[memory][allocator]") {
  for (auto strategy : {allocation_strategy::segmented, allocation_strategy::compact}) {
    auto run = [&](std::uint64_t seed) {
      counting_provider dev(512 * mib);
      fake_streams rt;
      caching_allocator_options o;
      o.strategy = strategy;
      o.garbage_collection_threshold = 0.7;
      o.max_split_size = seed % 2 ? 64 * mib : o.max_split_size;
      caching_allocator a(dev, o, rt.ordered());
      std::mt19937_64 rng(seed);
      std::vector<std::pair<std::uint64_t, std::uint32_t>> live;
      std::uint64_t ooms = 0;
      for (int step = 0; step < 3000; ++step) {
        const auto r = rng() % 100;
        if (r < 50 || live.empty()) {
          // Log-uniform sizes from 1 B to 64 MiB.
          const std::size_t size = std::size_t{1} << (rng() % 26);
          const std::size_t sz = size + rng() % size;
          const auto s = static_cast<std::uint32_t>(rng() % 3);
          std::error_code ec;
          const auto p = a.allocate(sz, s, ec);
          if (ec) {
            REQUIRE((ec == errc::out_of_memory || ec == errc::pool_limit));
            ++ooms;
          } else {
            live.emplace_back(p, s);
          }
        } else if (r < 85) {
          const auto i = rng() % live.size();
          // Free on the allocation stream mostly, sometimes on another (stream-ordered free).
          const auto s = rng() % 4 == 0 ? static_cast<std::uint32_t>(rng() % 3) : live[i].second;
          a.deallocate(live[i].first, s);
          live[i] = live.back();
          live.pop_back();
        } else if (r < 92) {
          const auto i = rng() % live.size();
          a.record_stream(live[i].first, static_cast<std::uint32_t>(rng() % 3), rng() % 2 ? rt.next_fence++ : 0);
        } else if (r < 97) {
          for (std::uint64_t f = 1; f < rt.next_fence; ++f)
            if (rng() % 2) rt.done.insert(f);
        } else if (r < 98) {
          a.empty_cache();
        } else if (r < 99) {
          a.trigger_gc();
        } else {
          a.trim_to(rng() % (128 * mib));
        }
        check_invariants(a);
      }
      for (auto& [p, s] : live) a.deallocate(p, s);
      a.on_synchronize(/*all_streams=*/true);  // release threshold 0: trims everything
      check_invariants(a);
      CHECK(a.reserved_current() == 0);
      CHECK(dev.used() == 0);
      CHECK(segment_count(a) == 0);
      std::ostringstream digest;
      const auto& st = a.stats();
      digest << st.allocated_bytes[0].peak << ' ' << st.reserved_bytes[0].peak << ' ' << st.num_device_alloc << ' '
             << st.num_ooms << ' ' << st.num_cross_stream_reuse << ' ' << ooms;
      return digest.str();
    };
    const auto first = run(7), second = run(7), other = run(8);
    INFO("strategy " << static_cast<int>(strategy));
    CHECK(first == second);  // deterministic for a seed
    CHECK(first != other);
  }
}

TEST_CASE("empty_cache returns every cached segment and reserved drops to zero", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  std::vector<std::uint64_t> p;
  for (std::size_t s : {1000u, 300000u, 3000000u, 30000000u}) p.push_back(a.allocate(s, 0));
  const auto keep = a.allocate(100, 1);
  for (auto x : p) a.deallocate(x);
  a.empty_cache();
  CHECK(a.reserved_current() == 2 * mib);  // the small segment that still holds `keep`
  a.deallocate(keep);
  a.empty_cache();
  CHECK(a.reserved_current() == 0);
  CHECK(dev.used() == 0);
  CHECK(a.stats().num_device_alloc == a.stats().num_device_free);
  check_invariants(a);
}

TEST_CASE("compact keeps one growable arena per stream with lowest-address best fit", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator_options o;
  o.strategy = allocation_strategy::compact;
  caching_allocator a(dev, o);
  const auto x = a.allocate(3 * mib, 0);
  const auto y = a.allocate(100 * kib, 0);
  const auto z = a.allocate(5 * mib, 0);
  const auto w = a.allocate(100 * kib, 1);
  auto snap = a.snapshot();
  REQUIRE(snap.segments.size() == 2);  // one arena per stream
  CHECK(snap.segments[0].arena);
  CHECK(y == x + 3 * mib);  // packed back to back, no per-size segments
  CHECK(z == y + 100 * kib);
  CHECK(a.reserved_current() % (2 * mib) == 0);
  CHECK(a.reserved_current() == 12 * mib);  // 8.1 MiB on stream 0 -> 10 MiB, 2 MiB on stream 1
  // Freed space is reused in place (best fit: the 3 MiB hole, not the 1.9 MiB top), and split
  // pieces merge again.
  a.deallocate(x);
  const auto x2 = a.allocate(2 * mib, 0);
  CHECK(x2 == x);
  const auto x3 = a.allocate(1 * mib, 0);  // the 1 MiB rest of the hole fits exactly
  CHECK(x3 == x + 2 * mib);
  a.deallocate(x2);
  a.deallocate(x3);
  a.deallocate(y);
  snap = a.snapshot();
  CHECK(snap.segments[0].blocks.front().size == 3 * mib + 100 * kib);
  // Growth merges into a free top block instead of leaving a hole.
  a.deallocate(z);
  const auto big = a.allocate(12 * mib, 0);
  CHECK(big == x);
  CHECK(a.reserved_current() == 12 * mib + 2 * mib);
  a.deallocate(big);
  a.deallocate(w);
  a.empty_cache();
  CHECK(a.reserved_current() == 0);
  CHECK(segment_count(a) == 0);
  check_invariants(a);
}

TEST_CASE("with auto_growth off the pool serves only memory it already reserved", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  std::error_code ec;
  SECTION("compact with an initial reservation") {
    caching_allocator_options o;
    o.strategy = allocation_strategy::compact;
    o.auto_growth = false;
    o.initial_reserve = 8 * mib;
    caching_allocator a(dev, o);
    const auto x = a.allocate(6 * mib, 0, ec);
    CHECK_FALSE(ec);
    CHECK(a.reserved_current() == 8 * mib);
    CHECK(a.allocate(4 * mib, 0, ec) == 0);
    CHECK(ec == errc::pool_limit);
    CHECK(a.allocate(2 * mib, 0, ec) == x + 6 * mib);
    check_invariants(a);
  }
  SECTION("segmented stocked by reserve()") {
    caching_allocator_options o;
    o.auto_growth = false;
    caching_allocator a(dev, o);
    CHECK(a.allocate(25 * mib, 0, ec) == 0);
    CHECK(ec == errc::pool_limit);
    a.reserve(30 * mib, 0, ec);
    CHECK_FALSE(ec);
    CHECK(a.reserved_current() == 30 * mib);
    CHECK(a.allocate(25 * mib, 0, ec) != 0);
    CHECK_FALSE(ec);
    check_invariants(a);
  }
}

TEST_CASE("pool attributes: release threshold, trim_to and the high-water marks", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator_options o;
  o.release_threshold = 30 * mib;
  caching_allocator a(dev, o);
  std::vector<std::uint64_t> p;
  for (int i = 0; i < 3; ++i) p.push_back(a.allocate(24 * mib, 0));
  CHECK(a.used_high() == 72 * mib);
  for (auto x : p) a.deallocate(x);
  CHECK(a.used_current() == 0);
  CHECK(a.used_high() == 72 * mib);
  CHECK(a.reserved_current() == 72 * mib);
  a.on_synchronize();  // above the threshold: trim down to it
  CHECK(a.reserved_current() == 24 * mib);
  a.on_synchronize();  // at or below: nothing
  CHECK(a.reserved_current() == 24 * mib);
  CHECK(a.reserved_high() == 72 * mib);
  a.reset_reserved_high();
  CHECK(a.reserved_high() == 24 * mib);
  a.reset_used_high();
  CHECK(a.used_high() == 0);
  a.trim_to(0);
  CHECK(a.reserved_current() == 0);
  check_invariants(a);

  caching_allocator_options d;  // cudaMemPool default: release threshold 0, all policies on
  CHECK(d.release_threshold == 0);
  CHECK(d.reuse_follow_event_dependencies);
  CHECK(d.reuse_allow_opportunistic);
  CHECK(d.reuse_allow_internal_dependencies);
}

TEST_CASE("memory_usage reports MiB allocated, reserved and peak, and reset_peak sets peaks to current",
          "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  caching_allocator a(dev);
  const auto x = a.allocate(30 * mib, 0);
  const auto y = a.allocate(3 * mib, 0);
  a.deallocate(x);
  const auto u = a.memory_usage();
  CHECK(u.allocated_mb == 3.0);
  CHECK(u.reserved_mb == 50.0);  // 30 MiB segment + 20 MiB segment
  CHECK(u.peak_mb == 33.0);
  a.reset_peak();
  CHECK(a.memory_usage().peak_mb == 3.0);
  CHECK(a.stats().reserved_bytes[stat_all].peak == a.stats().reserved_bytes[stat_all].current);
  a.deallocate(y);
}

TEST_CASE("another stream reuses freed memory only as the pool's reuse policies allow", "[memory][allocator]") {
  counting_provider dev(1024 * mib);
  fake_streams rt;
  caching_allocator_options o;
  o.reuse_follow_event_dependencies = o.reuse_allow_opportunistic = o.reuse_allow_internal_dependencies = false;
  SECTION("all policies off: no cross-stream reuse") {
    caching_allocator a(dev, o, rt.ordered());
    const auto x = a.allocate(4096, 0);
    a.deallocate(x, 0);
    rt.done.insert(1);
    CHECK(a.allocate(4096, 1) != x);
  }
  SECTION("opportunistic: once the free has completed") {
    o.reuse_allow_opportunistic = true;
    caching_allocator a(dev, o, rt.ordered());
    const auto x = a.allocate(4096, 0);
    a.deallocate(x, 0);  // free fence 1
    CHECK(a.allocate(4096, 2) != x);  // the free has not completed yet
    rt.done.insert(1);
    CHECK(a.allocate(4096, 1) == x);
    CHECK(a.stats().num_cross_stream_reuse == 1);
  }
  SECTION("follow event dependencies: the stream already waits for the free") {
    o.reuse_follow_event_dependencies = true;
    caching_allocator a(dev, o, rt.ordered());
    const auto x = a.allocate(4096, 0);
    a.deallocate(x, 0);
    CHECK(a.allocate(4096, 2) != x);
    rt.waits[{1, 1}] = true;
    CHECK(a.allocate(4096, 1) == x);
  }
  SECTION("internal dependencies: the pool inserts the wait itself") {
    o.reuse_allow_internal_dependencies = true;
    caching_allocator a(dev, o, rt.ordered());
    const auto x = a.allocate(4096, 0);
    a.deallocate(x, 0);
    CHECK(a.allocate(4096, 1) == x);
    REQUIRE(rt.inserted.size() == 1);
    CHECK(rt.inserted[0] == std::pair<std::uint32_t, std::uint64_t>{1, 1});
  }
}

TEST_CASE("every row of the per-call statistics stays exact when large blocks join a small-only history",
          "[memory][allocator][stats]") {
  // An independent model of the allocation counts and allocated bytes, per pool and in all: the
  // pool may keep the all-pools row lazily while only small blocks take part, so the test reads
  // every row after each call and once the large pool joins, for compact arenas as well.
  for (const auto strategy : {allocation_strategy::segmented, allocation_strategy::compact}) {
    INFO("strategy " << static_cast<int>(strategy));
    counting_provider dev(4096 * mib);
    caching_allocator_options o;
    o.strategy = strategy;
    caching_allocator a(dev, o);
    std::array<row, 3> count, bytes;  // [stat_all], [stat_small], [stat_large]
    const auto check = [&] {
      const auto& s = a.stats();
      for (std::size_t r = 0; r < 3; ++r) {
        INFO("row " << r);
        REQUIRE(s.allocation[r].current == count[r].current);
        REQUIRE(s.allocation[r].peak == count[r].peak);
        REQUIRE(s.allocation[r].allocated == count[r].allocated);
        REQUIRE(s.allocation[r].freed == count[r].freed);
        REQUIRE(s.allocated_bytes[r].current == bytes[r].current);
        REQUIRE(s.allocated_bytes[r].peak == bytes[r].peak);
        REQUIRE(s.allocated_bytes[r].allocated == bytes[r].allocated);
        REQUIRE(s.allocated_bytes[r].freed == bytes[r].freed);
      }
      REQUIRE(a.used_current() == static_cast<std::size_t>(bytes[stat_all].current));
      REQUIRE(a.used_high() == static_cast<std::size_t>(bytes[stat_all].peak));
    };
    std::mt19937_64 rng(7);
    std::vector<std::pair<std::uint64_t, bool>> live;  // address, small pool
    for (int step = 0; step < 3000; ++step) {
      const bool with_large = step >= 1500;
      if (!live.empty() && rng() % 2 == 0) {
        const std::size_t i = rng() % live.size();
        const auto [addr, small] = live[i];
        const auto n = static_cast<std::int64_t>(a.block_size(addr));
        a.deallocate(addr, 0);
        for (std::size_t r : {std::size_t{stat_all}, small ? std::size_t{stat_small} : std::size_t{stat_large}}) {
          count[r].sub(1);
          bytes[r].sub(n);
        }
        live[i] = live.back();
        live.pop_back();
      } else {
        const bool large = with_large && rng() % 4 == 0;
        const std::size_t size = large ? (2 + rng() % 30) * mib : 1 + rng() % 8192;
        const auto addr = a.allocate(size, 0);
        const auto n = static_cast<std::int64_t>(a.block_size(addr));
        // Compact arenas count as the large pool; the segmented small pool takes <= 1 MiB.
        const bool small = strategy == allocation_strategy::segmented && !large;
        for (std::size_t r : {std::size_t{stat_all}, small ? std::size_t{stat_small} : std::size_t{stat_large}}) {
          count[r].add(1);
          bytes[r].add(n);
        }
        live.emplace_back(addr, small);
      }
      check();
    }
    check_invariants(a);
  }
}

TEST_CASE("the active rows stay exact through frees that wait for other streams' uses and used-memory resets",
          "[memory][allocator][stats]") {
  // An independent model of the allocation and active counts and bytes (all pools and small
  // pool rows): a free counts against the allocation rows at once and against the active rows
  // when the block is really free, which a use on another stream (record_stream with a fence
  // not yet done) delays until the fence completes. The pool may keep the active rows lazily
  // while they equal the allocation rows; they part at the first delayed free, or at the first
  // reset of the used-memory high mark (which leaves the active high mark alone). The rows are
  // read now and then, not after every call, so a lazily kept row must not lose an update.
  for (const std::uint64_t seed : {11u, 12u}) {
    INFO("seed " << seed);
    fake_streams fs;
    counting_provider dev(1024 * mib);
    caching_allocator a(dev, {}, fs.basic());
    row count, bytes, active, active_bytes;
    const auto check = [&] {
      const auto& s = a.stats();
      const std::pair<const stat_array*, const row*> rows[] = {{&s.allocation, &count},
                                                               {&s.allocated_bytes, &bytes},
                                                               {&s.active, &active},
                                                               {&s.active_bytes, &active_bytes}};
      for (const auto& [arr, m] : rows)
        for (const std::size_t r : {std::size_t{stat_all}, std::size_t{stat_small}}) {
          INFO("row " << r);
          REQUIRE((*arr)[r].current == m->current);
          REQUIRE((*arr)[r].peak == m->peak);
          REQUIRE((*arr)[r].allocated == m->allocated);
          REQUIRE((*arr)[r].freed == m->freed);
        }
      REQUIRE(a.used_high() == static_cast<std::size_t>(bytes.peak));
    };
    std::mt19937_64 rng(seed);
    std::vector<std::uint64_t> live;
    std::vector<std::int64_t> waiting;  // sizes of freed blocks whose uses elsewhere are not done
    for (int step = 0; step < 4000; ++step) {
      const auto r = rng() % 100;
      if (r < 45 || live.empty()) {
        const auto addr = a.allocate(1 + rng() % 8192, 0);
        const auto n = static_cast<std::int64_t>(a.block_size(addr));
        count.add(1);
        bytes.add(n);
        active.add(1);
        active_bytes.add(n);
        live.push_back(addr);
      } else if (r < 85) {
        const std::size_t i = rng() % live.size();
        const auto addr = live[i];
        const auto n = static_cast<std::int64_t>(a.block_size(addr));
        // Uses elsewhere only in the second half: the rows part in the middle of a history.
        const bool used_elsewhere = step >= 2000 && rng() % 3 == 0;
        if (used_elsewhere) a.record_stream(addr, 1, fs.next_fence++);
        a.deallocate(addr, 0);
        count.sub(1);
        bytes.sub(n);
        if (used_elsewhere) {
          waiting.push_back(n);
        } else {
          active.sub(1);
          active_bytes.sub(n);
        }
        live[i] = live.back();
        live.pop_back();
      } else if (r < 92) {
        // The other stream's work completes: every delayed free happens.
        for (std::uint64_t f = 1; f < fs.next_fence; ++f) fs.done.insert(f);
        a.process_events();
        for (const auto n : waiting) {
          active.sub(1);
          active_bytes.sub(n);
        }
        waiting.clear();
      } else if (r < 96) {
        // The rows part here first with seed 12, at the first delayed free with seed 11.
        if (step < (seed == 11 ? 3000 : 500)) continue;
        a.reset_used_high();  // cudaMemPoolAttrUsedMemHigh: the allocated bytes' high mark only
        bytes.peak = bytes.current;
      } else if (r < 98) {
        a.reset_peak();
        for (row* m : {&count, &bytes, &active, &active_bytes}) m->peak = m->current;
      } else {
        a.reset_accumulated();
        for (row* m : {&count, &bytes, &active, &active_bytes}) m->allocated = m->freed = 0;
      }
      if (rng() % 7 == 0) check();
    }
    check();
    // Not check_invariants: reset_accumulated leaves current != allocated - freed, as in PyTorch.
    REQUIRE(a.check_consistency().empty());
  }
}
