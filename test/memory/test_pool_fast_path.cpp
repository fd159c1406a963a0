// The caching allocator's exact-size fast path (a free held back until the next call, handed out
// again when that call allocates the same size on the same stream and best fit would pick it).
// It must be invisible: the oracle is the same allocator driven through the same calls with an
// observer between every two of them (check_consistency settles the held-back free, so the fast
// path never fires there), and the statistics are compared after every call.
#include <npurt/config.hpp>
#include <npurt/detail/caching_allocator.hpp>

#include <catch2/catch_test_macros.hpp>

#include <random>
#include <set>
#include <vector>

using namespace npurt::detail;

namespace {

void require_same_stats(const allocator_stats& x, const allocator_stats& y) {
  const stat_array allocator_stats::* arrays[] = {
      &allocator_stats::allocation,      &allocator_stats::segment,
      &allocator_stats::active,          &allocator_stats::inactive_split,
      &allocator_stats::allocated_bytes, &allocator_stats::reserved_bytes,
      &allocator_stats::active_bytes,    &allocator_stats::inactive_split_bytes,
      &allocator_stats::requested_bytes};
  for (auto a : arrays)
    for (int p = 0; p < 3; ++p) {
      INFO("pool " << p);
      REQUIRE((x.*a)[p].current == (y.*a)[p].current);
      REQUIRE((x.*a)[p].peak == (y.*a)[p].peak);
      REQUIRE((x.*a)[p].allocated == (y.*a)[p].allocated);
      REQUIRE((x.*a)[p].freed == (y.*a)[p].freed);
    }
  REQUIRE(x.num_device_alloc == y.num_device_alloc);
  REQUIRE(x.num_device_free == y.num_device_free);
  REQUIRE(x.num_alloc_retries == y.num_alloc_retries);
  REQUIRE(x.num_cross_stream_reuse == y.num_cross_stream_reuse);
  REQUIRE(x.num_gc_freed_blocks == y.num_gc_freed_blocks);
}

struct fences {
  std::set<std::uint64_t> done;
  std::uint64_t next = 1;
  stream_callbacks callbacks() {
    stream_callbacks cb;
    cb.fence_done = [this](std::uint64_t f) { return done.count(f) != 0; };
    cb.synchronize_all = [this] {
      for (std::uint64_t f = 1; f < next; ++f) done.insert(f);
    };
    cb.record_fence = [this](std::uint32_t) { return next++; };
    return cb;
  }
};

}  // namespace

TEST_CASE("a free then an allocation of the same size gets the same block and the statistics of a merge and a split",
          "[memory][allocator][fast-path]") {
  counting_provider dev(64 * mib);
  caching_allocator a(dev);
  const auto x = a.allocate(4096, 0);
  a.deallocate(x, 0);
  const auto y = a.allocate(4096, 0);
  CHECK(y == x);
  // PyTorch's rules by hand: the first allocation splits the 2 MiB segment (the remainder is an
  // inactive split block); the free merges the block back (the remainder leaves the free index,
  // the whole segment enters it unsplit); the allocation splits it again.
  const auto rest = static_cast<std::int64_t>(2 * mib - 4096);
  const auto& s = a.stats();
  CHECK(s.allocation[stat_small].current == 1);
  CHECK(s.allocation[stat_small].allocated == 2);
  CHECK(s.allocation[stat_small].freed == 1);
  CHECK(s.active_bytes[stat_all].allocated == 2 * 4096);
  CHECK(s.active_bytes[stat_all].freed == 4096);
  CHECK(s.inactive_split[stat_small].current == 1);
  CHECK(s.inactive_split[stat_small].allocated == 2);
  CHECK(s.inactive_split[stat_small].freed == 1);
  CHECK(s.inactive_split_bytes[stat_small].current == rest);
  CHECK(s.inactive_split_bytes[stat_small].allocated == 2 * rest);
  CHECK(s.inactive_split_bytes[stat_small].freed == rest);
  CHECK(s.inactive_split_bytes[stat_small].peak == rest);
  CHECK(s.requested_bytes[stat_all].current == 4096);
  CHECK(s.num_device_alloc == 1);
  CHECK(a.check_consistency().empty());
}

TEST_CASE("the fast path keeps best fit: a lower-address block of the size wins over the one just freed",
          "[memory][allocator][fast-path]") {
  counting_provider dev(64 * mib);
  caching_allocator a(dev);
  const auto p0 = a.allocate(4096, 0);
  const auto p1 = a.allocate(4096, 0);
  const auto p2 = a.allocate(4096, 0);
  (void)p1;
  a.deallocate(p0, 0);
  a.deallocate(p2, 0);  // merges with the segment's free tail
  CHECK(a.allocate(4096, 0) == p0);
  CHECK(a.allocate(4096, 0) == p2);
  // A smaller request than the block just freed is not an exact hit: best fit decides.
  a.deallocate(p2, 0);
  const auto q = a.allocate(1024, 0);
  CHECK(q == p2);
  CHECK(a.block_size(q) == 1024);
  CHECK(a.check_consistency().empty());
}

TEST_CASE("the fast path keeps stream order: a freed block goes only to the stream that freed it",
          "[memory][allocator][fast-path]") {
  counting_provider dev(64 * mib);
  caching_allocator a(dev);
  const auto x = a.allocate(8192, 0);
  a.deallocate(x, 0);
  const auto other = a.allocate(8192, 1);  // another stream, no event: never x
  CHECK(other != x);
  CHECK(a.allocate(8192, 0) == x);
  // Freed on stream 1 (stream-ordered free): the block now belongs to stream 1.
  a.deallocate(x, 1);
  const auto z = a.allocate(8192, 0);
  CHECK(z != x);
  CHECK(a.allocate(8192, 1) == x);
  // A block used by another stream waits for that use's fence, fast path or not.
  fences f;
  caching_allocator b(dev, {}, f.callbacks());
  const auto u = b.allocate(4096, 0);
  b.record_stream(u, 2, f.next++);
  b.deallocate(u, 0);
  const auto v = b.allocate(4096, 0);
  CHECK(v != u);
  CHECK(b.stats().active[stat_all].current == 2);  // u is still active: its use has not completed
  f.done.insert(1);
  b.process_events();
  CHECK(b.allocate(4096, 0) == u);
  CHECK(a.check_consistency().empty());
  CHECK(b.check_consistency().empty());
}

TEST_CASE("empty_cache, trim_to, synchronize and snapshots see a block freed just before them",
          "[memory][allocator][fast-path]") {
  counting_provider dev(64 * mib);
  {
    caching_allocator a(dev);
    a.deallocate(a.allocate(4096, 0), 0);
    a.empty_cache();
    CHECK(a.reserved_current() == 0);
    CHECK(dev.used() == 0);
    CHECK(a.stats().num_device_free == 1);
  }
  {
    caching_allocator a(dev);
    const auto keep = a.allocate(2 * mib, 0);  // large pool: stays
    a.deallocate(a.allocate(512, 0), 0);
    a.trim_to(0);
    CHECK(a.reserved_current() == 20 * mib);
    a.deallocate(keep, 0);
    a.on_synchronize();  // release threshold 0
    CHECK(a.reserved_current() == 0);
    CHECK(dev.used() == 0);
  }
  {
    caching_allocator a(dev);
    const auto x = a.allocate(4096, 0);
    a.deallocate(x, 0);
    const auto snap = a.snapshot();  // the freed block merged with the segment's free tail
    REQUIRE(snap.segments.size() == 1);
    REQUIRE(snap.segments[0].blocks.size() == 1);
    CHECK(snap.segments[0].blocks[0].size == 2 * mib);
    CHECK_FALSE(snap.segments[0].blocks[0].allocated);
    CHECK(snap.total_free == 2 * mib);
    CHECK(a.block_size(x) == 0);
    std::error_code ec;
    a.deallocate(x, 0, ec);
    CHECK(ec == npurt::errc::double_free);
  }
}

TEST_CASE("with and without the fast path the same calls give the same addresses and statistics",
          "[memory][allocator][fast-path]") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    counting_provider dev_fast(4096 * mib), dev_slow(4096 * mib);
    fences ff, fs;
    caching_allocator_options o;
    o.garbage_collection_threshold = seed == 3 ? 0.5 : 0.0;
    caching_allocator fast(dev_fast, o, ff.callbacks()), slow(dev_slow, o, fs.callbacks());
    std::mt19937_64 rng(seed);
    std::vector<std::pair<std::uint64_t, std::uint32_t>> live;
    std::size_t last_size = 4096;
    // A quarter of the steps under AddressSanitizer, where each costs several times as much.
    constexpr int steps = NPURT_ASAN ? 5000 : 20000;
    for (int step = 0; step < steps; ++step) {
      const auto r = rng() % 100;
      if ((r < 50 && live.size() < 300) || live.empty()) {
        // Mostly the size just freed (the fast path's case), sometimes anything up to 2 MiB.
        const std::size_t size = r % 3 == 0 ? 1 + rng() % (2 * mib) : last_size;
        const auto s = static_cast<std::uint32_t>(rng() % 4 == 0 ? 1 : 0);
        const auto p = fast.allocate(size, s);
        REQUIRE(slow.check_consistency().empty());
        REQUIRE(slow.allocate(size, s) == p);
        live.emplace_back(p, s);
      } else if (r < 95) {
        const auto i = rng() % live.size();
        last_size = fast.block_size(live[i].first);
        const auto s = rng() % 8 == 0 ? 1 - live[i].second : live[i].second;
        fast.deallocate(live[i].first, s);
        REQUIRE(slow.check_consistency().empty());
        slow.deallocate(live[i].first, s);
        live[i] = live.back();
        live.pop_back();
      } else if (r < 97) {
        const auto i = rng() % live.size();
        fast.record_stream(live[i].first, 2, 0);
        slow.record_stream(live[i].first, 2, 0);
      } else if (r < 99) {
        for (auto* f : {&ff, &fs})
          for (std::uint64_t k = 1; k < f->next; ++k) f->done.insert(k);
      } else {
        fast.trim_to(64 * mib);
        slow.trim_to(64 * mib);
      }
      require_same_stats(fast.stats(), slow.stats());
    }
    REQUIRE(fast.check_consistency().empty());
    CHECK(fast.snapshot().total_free == slow.snapshot().total_free);
  }
}
