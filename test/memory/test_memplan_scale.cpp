// The planner on large instances: without a local search it places buffers in linear memory
// (no neighbour lists), and that must not change a single offset. The oracle is the textbook
// greedy (Pisarchyk & Lee, arXiv:2001.03288, Algorithm 3) written out plainly: every earlier
// buffer of the order is scanned for a time overlap, the overlapping ones sorted by offset.
#include <npurt/memplan.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mp = npurt::memplan;

namespace {

std::vector<std::uint64_t> reference_greedy(const std::vector<mp::buffer>& b, mp::fit f, std::uint64_t align,
                                            std::uint64_t& arena) {
  std::vector<std::size_t> ord(b.size());
  for (std::size_t i = 0; i < ord.size(); ++i) ord[i] = i;
  // Size descending; ties by first use, then input index (the planner's documented order).
  std::sort(ord.begin(), ord.end(), [&](std::size_t x, std::size_t y) {
    if (b[x].size != b[y].size) return b[x].size > b[y].size;
    if (b[x].lower != b[y].lower) return b[x].lower < b[y].lower;
    return x < y;
  });
  std::vector<std::uint64_t> off(b.size(), 0);
  arena = 0;
  for (std::size_t p = 0; p < ord.size(); ++p) {
    const auto& x = b[ord[p]];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> placed;
    for (std::size_t q = 0; q < p; ++q) {
      const auto& y = b[ord[q]];
      if (y.lower < x.upper && x.lower < y.upper) placed.emplace_back(off[ord[q]], off[ord[q]] + y.size);
    }
    std::sort(placed.begin(), placed.end());
    std::uint64_t cur = 0, best = 0, best_gap = std::numeric_limits<std::uint64_t>::max();
    bool found = false;
    for (const auto& [lo, hi] : placed) {
      const std::uint64_t start = (cur + align - 1) / align * align;
      if (lo > cur && start + x.size <= lo) {
        if (f == mp::fit::first) {
          best = start;
          found = true;
          break;
        }
        if (lo - cur < best_gap) {
          best_gap = lo - cur;
          best = start;
          found = true;
        }
      }
      cur = std::max(cur, hi);
    }
    off[ord[p]] = found ? best : (cur + align - 1) / align * align;
    arena = std::max(arena, off[ord[p]] + x.size);
  }
  return off;
}

// Lifetimes like a compiler's: mostly short, some long, a few spanning everything.
std::vector<mp::buffer> instance(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<mp::buffer> b;
  for (std::size_t i = 0; i < n; ++i) {
    const auto lo = static_cast<std::int64_t>(rng() % (n / 2 + 1));
    const auto r = rng() % 100;
    const std::int64_t life = r < 80   ? 1 + static_cast<std::int64_t>(rng() % 4)
                              : r < 97 ? 1 + static_cast<std::int64_t>(rng() % 100)
                                       : static_cast<std::int64_t>(n);
    // Few distinct sizes, so ties in the order and equal offsets occur.
    const std::uint64_t size = seed % 2 ? 512 * (1 + rng() % 8) : 1 + rng() % 100000;
    b.push_back({static_cast<std::int64_t>(i) * 3, lo, lo + life, size});
  }
  return b;
}

}  // namespace

TEST_CASE("the greedy pass without neighbour lists places every buffer where the textbook greedy does",
          "[memory][memplan][scale]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed)
    for (std::uint64_t align : {std::uint64_t{1}, std::uint64_t{512}})
      for (auto f : {mp::fit::best, mp::fit::first}) {
        const auto b = instance(seed, 50 + seed * 60);
        std::uint64_t arena = 0;
        const auto want = reference_greedy(b, f, align, arena);
        const auto got = mp::greedy_plan(b, mp::order::size, f, align);
        INFO("seed " << seed << " align " << align << " fit " << (f == mp::fit::best ? "best" : "first"));
        CHECK(got.offsets == want);
        CHECK(got.arena_size == arena);
      }
}

TEST_CASE("above search_max_buffers make_plan returns the best of the size-order greedy plans and the sweep",
          "[memory][memplan][scale]") {
  for (std::uint64_t seed = 20; seed < 26; ++seed) {
    const auto b = instance(seed, 900);
    mp::options o;
    o.alignment = 512;
    o.search_max_buffers = 100;  // 900 buffers: the large-instance path
    const auto p = mp::make_plan(b, o);
    std::uint64_t best_fit = 0, first_fit = 0;
    const auto ob = reference_greedy(b, mp::fit::best, 512, best_fit);
    const auto of = reference_greedy(b, mp::fit::first, 512, first_fit);
    INFO("seed " << seed);
    CHECK(p.arena_size <= std::min(best_fit, first_fit));
    if (p.method == "size/best-fit") {
      CHECK(p.arena_size == best_fit);
      CHECK(p.offsets == ob);
    } else if (p.method == "size/first-fit") {
      CHECK(p.arena_size == first_fit);
      CHECK(first_fit < best_fit);
      CHECK(p.offsets == of);
    } else {
      CHECK(p.method == "sweep/best-fit");
      CHECK(p.arena_size < std::min(best_fit, first_fit));
    }
    CHECK(p.arena_size >= mp::lower_bound(b));
    CHECK(p.search_iterations == 0);
    CHECK(mp::check(b, p.offsets, 512).valid);
    // Deterministic, and the same as the small-instance path with the search off and one order.
    mp::options small = o;
    small.search_max_buffers = 10'000;
    small.best_of_orders = false;
    small.search_work = 0;
    o.best_of_orders = false;
    CHECK(mp::make_plan(b, o).offsets == mp::make_plan(b, small).offsets);
  }
}
