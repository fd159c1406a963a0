// npurt/impl/memplan.ipp
#pragma once

#include <npurt/memplan.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <exception>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <range/v3/action/sort.hpp>
#include <range/v3/action/unique.hpp>
#include <range/v3/algorithm/lower_bound.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>

namespace npurt::memplan {
namespace detail {

inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) noexcept { return (v + a - 1) & ~(a - 1); }

// Deterministic generator for the local search (splitmix64): plans must depend on the seed only.
struct splitmix {
  std::uint64_t s;
  std::uint64_t next() noexcept {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint32_t below(std::uint32_t n) noexcept { return static_cast<std::uint32_t>(next() % n); }
};

// Number of unordered pairs of buffers whose lifetimes intersect, in O(n log n) without
// enumerating them: j overlaps i iff lower_j < upper_i and upper_j > lower_i.
inline std::uint64_t overlap_pairs(const std::vector<buffer>& b) {
  std::vector<std::int64_t> lowers, uppers;
  lowers.reserve(b.size());
  uppers.reserve(b.size());
  for (const auto& x : b) {
    lowers.push_back(x.lower);
    uppers.push_back(x.upper);
  }
  std::sort(lowers.begin(), lowers.end());
  std::sort(uppers.begin(), uppers.end());
  std::uint64_t twice = 0;  // each pair counted from both ends; i itself is in the first count
  for (const auto& x : b) {
    const auto starts_before_end = std::lower_bound(lowers.begin(), lowers.end(), x.upper) - lowers.begin();
    const auto ends_before_start = std::upper_bound(uppers.begin(), uppers.end(), x.lower) - uppers.begin();
    twice += static_cast<std::uint64_t>(starts_before_end - ends_before_start - 1);
  }
  return twice / 2;
}

// The engine keeps every overlapping pair (twice, 4 bytes each) only while that stays within a
// constant factor of the input: beyond it (dense instances, thousands of buffers live at once)
// the planner switches to the sweep below, whose memory is linear.
inline bool adjacency_fits(std::size_t n, std::uint64_t pairs) {
  const std::uint64_t budget = std::max<std::uint64_t>(std::uint64_t{1024} * n, std::uint64_t{1} << 24);
  return pairs <= budget / 2;
}

using slot_list = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // (offset, end) of placed buffers

// Where a buffer of `size` goes among the placed buffers it overlaps in time (`placed`, in any
// order; sorted here): the smallest gap between them that holds it aligned (best fit) or the
// lowest one (first fit), else on top of them. The gaps are the holes of the union of the placed
// ranges, so the result depends on that union only (not on order, repeats or touching pieces).
inline std::uint64_t place_among(slot_list& placed, std::uint64_t size, std::uint64_t align, fit f) {
  std::sort(placed.begin(), placed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::uint64_t cur = 0, best = 0, best_gap = std::numeric_limits<std::uint64_t>::max();
  bool found = false;
  for (const auto& [lo, hi] : placed) {
    if (lo > cur) {
      const std::uint64_t off = align_up(cur, align);
      if (off + size <= lo) {
        if (f == fit::first) return off;
        if (lo - cur < best_gap) {
          best_gap = lo - cur;
          best = off;
          found = true;
        }
      }
    }
    cur = std::max(cur, hi);
  }
  return found ? best : align_up(cur, align);
}

// A union of memory ranges as sorted, disjoint, non-touching (offset, end) pairs.
struct range_union {
  slot_list r;
  void add(std::uint64_t lo, std::uint64_t hi) {
    // The first range that ends at or after lo touches or follows [lo, hi).
    auto it = std::lower_bound(r.begin(), r.end(), lo, [](const auto& x, std::uint64_t v) { return x.second < v; });
    auto jt = it;
    for (; jt != r.end() && jt->first <= hi; ++jt) {
      lo = std::min(lo, jt->first);
      hi = std::max(hi, jt->second);
    }
    if (it == jt) {
      r.insert(it, {lo, hi});
    } else {
      *it = {lo, hi};
      r.erase(it + 1, jt);
    }
  }
};

// Greedy placement in one order without neighbour lists: what the planner uses when no local
// search follows (large instances, greedy_plan), so memory stays near-linear in the buffers and
// the plan is the engine's, buffer for buffer.
//
// place_among depends only on the union of the placed neighbours' ranges (its gaps are the holes
// of that union), so the index keeps unions, not buffers. Time is compressed to the distinct
// first-use steps p_0 < p_1 < ...; buffer j covers the points [a_j, e_j) inside its lifetime. A
// placed j overlaps i exactly when j covers a_i (a_j <= a_i < e_j) or starts inside i's lifetime
// (a_i < a_j < e_i). Two segment trees over the points answer the two cases: in `covering_`,
// j's range joins the union of each of the O(log) nodes that make up [a_j, e_j), and the nodes on
// the path to a_i hold every j covering a_i; in `starting_`, j's range joins the union of the leaf
// a_j and of its ancestors, and the O(log) nodes that make up (a_i, e_i) hold every j starting
// there. Buffers placed at the same addresses at different times collapse into one range, so a
// placement reads a few dozen short lists instead of all its placed neighbours.
class order_placer {
 public:
  order_placer(const std::vector<buffer>& b, std::uint64_t alignment) : b_(b), align_(alignment) {
    namespace rv = ranges::views;
    const auto points =
        b | rv::transform(&buffer::lower) | ranges::to<std::vector>() | ranges::actions::sort | ranges::actions::unique;
    const auto index = [&](std::int64_t t) {
      return static_cast<std::uint32_t>(ranges::lower_bound(points, t) - points.begin());
    };
    first_ = b | rv::transform([&](const buffer& x) { return index(x.lower); }) | ranges::to<std::vector>();
    end_ = b | rv::transform([&](const buffer& x) { return index(x.upper); }) | ranges::to<std::vector>();
    leaves_ = 1;
    while (leaves_ < points.size()) leaves_ *= 2;
    covering_.resize(2 * leaves_);
    starting_.resize(2 * leaves_);
  }

  std::uint64_t run(const std::vector<std::uint32_t>& ord, fit f, std::vector<std::uint64_t>& offsets) {
    for (auto& u : covering_) u.r.clear();
    for (auto& u : starting_) u.r.clear();
    offsets.assign(b_.size(), 0);
    std::uint64_t top = 0;
    const auto append = [&](const range_union& u) { gaps_.insert(gaps_.end(), u.r.begin(), u.r.end()); };
    for (const auto i : ord) {
      const std::size_t a = first_[i], e = end_[i];
      gaps_.clear();
      for (std::size_t v = a + leaves_; v >= 1; v /= 2) append(covering_[v]);
      for (std::size_t l = a + 1 + leaves_, r = e + leaves_; l < r; l /= 2, r /= 2) {
        if (l & 1) append(starting_[l++]);
        if (r & 1) append(starting_[--r]);
      }
      const std::uint64_t off = place_among(gaps_, b_[i].size, align_, f);
      const std::uint64_t hi = off + b_[i].size;
      offsets[i] = off;
      top = std::max(top, hi);
      for (std::size_t l = a + leaves_, r = e + leaves_; l < r; l /= 2, r /= 2) {
        if (l & 1) covering_[l++].add(off, hi);
        if (r & 1) covering_[--r].add(off, hi);
      }
      for (std::size_t v = a + leaves_; v >= 1; v /= 2) starting_[v].add(off, hi);
    }
    return top;
  }

 private:
  const std::vector<buffer>& b_;
  std::uint64_t align_;
  std::vector<std::uint32_t> first_, end_;  // a_j, e_j: the compressed points of each buffer
  std::size_t leaves_ = 1;
  std::vector<range_union> covering_;  // by node: placed buffers covering all of the node's points
  std::vector<range_union> starting_;  // by node: placed buffers first used at one of its points
  slot_list gaps_;
};

// Greedy placement engine. The neighbour lists (buffers overlapping in time) are computed once,
// so one placement pass costs O(sum over buffers of k log k) for k placed neighbours instead of
// the O(n^2) scan over every placed buffer: sorted by lower, every buffer j that starts before i
// ends overlaps i, so the sweep visits overlapping pairs only. Callers check adjacency_fits
// first: the lists take memory proportional to the number of overlapping pairs.
class engine {
 public:
  engine(const std::vector<buffer>& b, std::uint64_t alignment) : b_(b), align_(alignment) {
    const auto n = static_cast<std::uint32_t>(b.size());
    std::vector<std::uint32_t> by_lower(n);
    std::iota(by_lower.begin(), by_lower.end(), 0u);
    std::sort(by_lower.begin(), by_lower.end(), [&](std::uint32_t x, std::uint32_t y) {
      return b[x].lower != b[y].lower ? b[x].lower < b[y].lower : x < y;
    });
    // 64-bit positions: the pair count of a large instance does not fit 32 bits.
    std::vector<std::uint64_t> degree(n, 0);
    for (std::uint32_t p = 0; p < n; ++p) {
      const auto i = by_lower[p];
      for (std::uint32_t q = p + 1; q < n && b[by_lower[q]].lower < b[i].upper; ++q) {
        ++degree[i];
        ++degree[by_lower[q]];
      }
    }
    start_.assign(std::size_t{n} + 1, 0);
    for (std::uint32_t i = 0; i < n; ++i) start_[i + 1] = start_[i] + degree[i];
    adj_.resize(start_[n]);
    std::vector<std::uint64_t> fill(start_.begin(), start_.end() - 1);
    for (std::uint32_t p = 0; p < n; ++p) {
      const auto i = by_lower[p];
      for (std::uint32_t q = p + 1; q < n && b[by_lower[q]].lower < b[i].upper; ++q) {
        const auto j = by_lower[q];
        adj_[fill[i]++] = j;
        adj_[fill[j]++] = i;
      }
    }
    offset_.assign(n, 0);
    slot_.assign(n, {0, 0});
    top_.assign(std::size_t{n} + 1, 0);
  }

  [[nodiscard]] std::uint64_t pass_cost() const noexcept { return adj_.size() + b_.size(); }
  [[nodiscard]] const std::vector<std::uint64_t>& offsets() const noexcept { return offset_; }
  std::uint64_t work = 0;

  // Places ord[from..] assuming ord[0..from) keep the offsets of the previous run over an order
  // with the same prefix. Stops early (returns max) once the arena exceeds `cutoff`.
  std::uint64_t run(const std::vector<std::uint32_t>& ord, fit f, std::size_t from = 0,
                    std::uint64_t cutoff = std::numeric_limits<std::uint64_t>::max()) {
    const std::size_t n = ord.size();
    for (std::size_t p = 0; p < n; ++p) {
      const auto i = ord[p];
      slot_[i] = p < from ? std::make_pair(offset_[i], offset_[i] + b_[i].size)
                          : std::make_pair(std::uint64_t{0}, std::uint64_t{0});
    }
    std::uint64_t top = top_[from];
    for (std::size_t p = from; p < n; ++p) {
      const auto i = ord[p];
      const std::uint64_t off = place(i, f);
      offset_[i] = off;
      slot_[i] = {off, off + b_[i].size};
      top = std::max(top, off + b_[i].size);
      top_[p + 1] = top;
      if (top > cutoff) return std::numeric_limits<std::uint64_t>::max();
    }
    return top;
  }

 private:
  std::uint64_t place(std::uint32_t i, fit f) {
    gaps_.clear();
    // One packed (offset, end) array: a single random access per neighbour; end == 0 means
    // not placed yet (sizes are positive).
    for (auto k = start_[i]; k < start_[i + 1]; ++k) {
      const auto& sl = slot_[adj_[k]];
      if (sl.second) gaps_.push_back(sl);
    }
    work += start_[i + 1] - start_[i] + 1;
    return place_among(gaps_, b_[i].size, align_, f);
  }

  const std::vector<buffer>& b_;
  std::uint64_t align_;
  std::vector<std::uint64_t> start_;
  std::vector<std::uint32_t> adj_;
  std::vector<std::uint64_t> offset_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> slot_;  // (offset, end) of placed buffers
  std::vector<std::uint64_t> top_;  // top_[p]: arena after placing the first p of the order
  slot_list gaps_;
};

inline std::vector<std::uint32_t> make_order(const std::vector<buffer>& b, order o) {
  auto key = [&](std::uint32_t i) -> long double {
    const auto life = static_cast<long double>(b[i].upper - b[i].lower);
    switch (o) {
      case order::size: return static_cast<long double>(b[i].size);
      case order::lifetime: return life;
      case order::area: return life * static_cast<long double>(b[i].size);
      case order::lower: return -static_cast<long double>(b[i].lower);
    }
    return 0;
  };
  // A total order (the input index breaks the last ties), so the plan never depends on the sort.
  return ranges::views::iota(std::uint32_t{0}, static_cast<std::uint32_t>(b.size())) | ranges::to<std::vector>() |
         ranges::actions::sort([&](std::uint32_t x, std::uint32_t y) {
           const auto kx = key(x), ky = key(y);
           if (kx != ky) return kx > ky;
           if (b[x].size != b[y].size) return b[x].size > b[y].size;
           if (b[x].lower != b[y].lower) return b[x].lower < b[y].lower;
           return x < y;
         });
}

inline const char* order_name(order o) {
  switch (o) {
    case order::size: return "size";
    case order::lifetime: return "lifetime";
    case order::area: return "area";
    case order::lower: return "lower";
  }
  return "?";
}

// Local search over the placement order. The arena is fixed by the buffers that reach the top;
// moving one of them (or a random buffer) earlier in the order lets it claim a low gap before
// smaller buffers fragment the space. Equal-cost moves are accepted so the search can cross
// plateaus; re-placement starts at the first changed position, so late moves are cheap.
inline std::uint64_t local_search(engine& eng, std::vector<std::uint32_t>& ord, fit f, std::uint64_t current,
                                  std::uint64_t lb, std::uint64_t budget, splitmix& rng, std::uint64_t& iters,
                                  const std::vector<buffer>& b, std::vector<std::uint64_t>& best_offsets) {
  const auto n = static_cast<std::uint32_t>(ord.size());
  if (n < 2) return current;
  std::vector<std::uint32_t> pos(n);
  std::vector<std::uint32_t> trial;
  std::vector<std::uint32_t> critical;
  const std::uint64_t start_work = eng.work;
  // The engine holds valid offsets for ord[0..valid) only: a rejected trial overwrote the rest,
  // and the next trial re-places from min(its first change, valid) instead of restoring first.
  std::size_t valid = n;
  bool refresh = true;
  // Plateaus are wide (many orders give the same arena), so ties are broken by the total
  // overflow above the lower bound: a move that lowers it is progress toward a smaller arena.
  auto overflow = [&](const std::vector<std::uint64_t>& off) {
    std::uint64_t s = 0;
    for (std::uint32_t i = 0; i < n; ++i) s += off[i] + b[i].size > lb ? off[i] + b[i].size - lb : 0;
    return s;
  };
  std::uint64_t current_overflow = overflow(best_offsets);
  while (eng.work - start_work < budget && current > lb) {
    ++iters;
    ++eng.work;  // skipped moves must still spend budget, so the loop always ends
    if (refresh) {
      for (std::uint32_t p = 0; p < n; ++p) pos[ord[p]] = p;
      critical.clear();
      for (std::uint32_t i = 0; i < n; ++i)
        if (best_offsets[i] + b[i].size == current) critical.push_back(i);
      refresh = false;
    }
    trial = ord;
    std::uint32_t first_changed;
    const auto kind = rng.below(4);
    if (kind < 2 && !critical.empty()) {
      // Move a buffer at the top to a random earlier position.
      const auto c = critical[rng.below(static_cast<std::uint32_t>(critical.size()))];
      const auto p = pos[c];
      if (p == 0) continue;
      const auto q = rng.below(p);
      std::rotate(trial.begin() + q, trial.begin() + p, trial.begin() + p + 1);
      first_changed = q;
    } else if (kind == 2) {
      const auto p = rng.below(n), q = rng.below(n);
      if (p == q) continue;
      std::swap(trial[p], trial[q]);
      first_changed = std::min(p, q);
    } else {
      // Swapping neighbours is a fine-grained move, and cheap near the end of the order.
      const auto p = rng.below(n - 1);
      std::swap(trial[p], trial[p + 1]);
      first_changed = p;
    }
    const std::size_t from = std::min<std::size_t>(first_changed, valid);
    const auto cost = eng.run(trial, f, from, current);
    const auto cost_overflow = cost <= current ? overflow(eng.offsets()) : 0;
    if (cost < current || (cost == current && cost_overflow <= current_overflow)) {
      current = cost;
      current_overflow = cost_overflow;
      ord.swap(trial);
      best_offsets = eng.offsets();
      valid = n;
      refresh = true;
    } else {
      valid = from;
    }
  }
  return current;
}

// Sum of sizes; false if it does not fit 64 bits.
inline bool checked_sum(const std::vector<buffer>& b, std::uint64_t& sum) {
  sum = 0;
  for (const auto& x : b)
    if (__builtin_add_overflow(sum, x.size, &sum)) return false;
  return true;
}

// Lifetime events in time order, ends before starts at equal times (lifetimes are half-open),
// then by input index, so that every consumer sees one deterministic order.
struct sweep_event {
  std::int64_t t;
  std::uint32_t end_first;  // 0 = end, 1 = start
  std::uint32_t i;
  bool operator<(const sweep_event& o) const noexcept {
    return t != o.t ? t < o.t : end_first != o.end_first ? end_first < o.end_first : i < o.i;
  }
};

inline std::vector<sweep_event> sweep_events(const std::vector<buffer>& b) {
  std::vector<sweep_event> ev;
  ev.reserve(b.size() * 2);
  for (std::size_t i = 0; i < b.size(); ++i) {
    ev.push_back({b[i].lower, 1, static_cast<std::uint32_t>(i)});
    ev.push_back({b[i].upper, 0, static_cast<std::uint32_t>(i)});
  }
  std::sort(ev.begin(), ev.end());
  return ev;
}

// The planner for instances whose overlap graph is too large to keep: an allocator simulation
// in time order (free at upper, allocate at lower), best fit among the free ranges below the
// top, the top growing otherwise. O(n log n) time and O(n) memory; optimal when every buffer
// is live at once (the arena is then the sum of sizes, the lower bound).
inline std::uint64_t sweep_plan(const std::vector<buffer>& b, std::uint64_t alignment,
                                std::vector<std::uint64_t>& offsets) {
  offsets.assign(b.size(), 0);
  std::map<std::uint64_t, std::uint64_t> free_by_addr;            // offset -> length
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_size;  // (length, offset)
  std::uint64_t top = 0, arena = 0;
  auto add_free = [&](std::uint64_t off, std::uint64_t len) {
    // Merge with the neighbours, then give the top back if the range reaches it.
    auto next = free_by_addr.lower_bound(off);
    if (next != free_by_addr.end() && next->first == off + len) {
      len += next->second;
      free_by_size.erase({next->second, next->first});
      next = free_by_addr.erase(next);
    }
    if (next != free_by_addr.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        len += prev->second;
        free_by_size.erase({prev->second, prev->first});
        free_by_addr.erase(prev);
      }
    }
    if (off + len == top) {
      top = off;
      return;
    }
    free_by_addr.emplace(off, len);
    free_by_size.emplace(len, off);
  };
  for (const auto& e : sweep_events(b)) {
    const auto& x = b[e.i];
    if (e.end_first == 0) {
      add_free(offsets[e.i], x.size);
      continue;
    }
    // The smallest free range that holds the buffer once aligned; ranges are few and aligned
    // starts rarely waste much, so a short scan upward from the first large-enough one is fine.
    std::uint64_t off = 0;
    bool found = false;
    for (auto it = free_by_size.lower_bound({x.size, 0}); it != free_by_size.end(); ++it) {
      const auto [len, start] = *it;
      const std::uint64_t aligned = align_up(start, alignment);
      if (aligned - start <= len && len - (aligned - start) >= x.size) {
        free_by_size.erase(it);
        free_by_addr.erase(start);
        off = aligned;
        if (aligned > start) {
          free_by_addr.emplace(start, aligned - start);
          free_by_size.emplace(aligned - start, start);
        }
        if (aligned + x.size < start + len) {
          const std::uint64_t rest = aligned + x.size;
          free_by_addr.emplace(rest, start + len - rest);
          free_by_size.emplace(start + len - rest, rest);
        }
        found = true;
        break;
      }
    }
    if (!found) {
      off = align_up(top, alignment);
      if (off > top) {
        free_by_addr.emplace(top, off - top);
        free_by_size.emplace(off - top, top);
      }
      top = off + x.size;
    }
    offsets[e.i] = off;
    arena = std::max(arena, off + x.size);
  }
  return arena;
}

}  // namespace detail

NPURT_DECL std::error_code validate(const std::vector<buffer>& buffers, std::uint64_t alignment, std::string* what) {
  auto fail = [&](errc e, std::string msg) {
    if (what) *what = std::move(msg);
    return make_error_code(e);
  };
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return fail(errc::invalid_argument, "alignment " + std::to_string(alignment) + " is not a power of two");
  if (buffers.size() >= std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow, "too many buffers");
  std::uint64_t sum = 0;
  for (const auto& x : buffers) {
    const std::string name = "buffer " + std::to_string(x.id);
    if (x.size == 0) return fail(errc::zero_size, name + " has size 0");
    if (x.lower < 0) return fail(errc::invalid_argument, name + " has a negative lower bound");
    if (x.upper <= x.lower)
      return fail(errc::invalid_argument,
                  name + " has an empty lifetime [" + std::to_string(x.lower) + ", " + std::to_string(x.upper) + ")");
    // Keep every offset + size representable even when each buffer is padded to the alignment.
    const std::uint64_t padded = x.size + alignment;
    if (padded < x.size || sum + padded < sum) return fail(errc::size_overflow, name + ": total size overflows");
    sum += padded;
  }
  return {};
}

NPURT_DECL std::uint64_t lower_bound(const std::vector<buffer>& buffers, std::error_code& ec) {
  ec.clear();
  // Unsigned and checked: sizes may reach 2^64 - 1, and a live sum past that has no plan.
  std::uint64_t live = 0, peak = 0;
  // A buffer whose lifetime is empty (upper <= lower) is never live. Its end would come before
  // its start in the sweep and take its size from bytes it never added.
  std::vector<buffer> live_ones;
  const bool all_live = std::all_of(buffers.begin(), buffers.end(), [](const buffer& b) { return b.lower < b.upper; });
  if (!all_live)
    std::copy_if(buffers.begin(), buffers.end(), std::back_inserter(live_ones),
                 [](const buffer& b) { return b.lower < b.upper; });
  const std::vector<buffer>& b = all_live ? buffers : live_ones;
  for (const auto& e : detail::sweep_events(b)) {
    const std::uint64_t size = b[e.i].size;
    if (e.end_first == 0) {
      live -= size;
    } else if (__builtin_add_overflow(live, size, &live)) {
      ec = make_error_code(errc::size_overflow);
      return 0;
    } else {
      peak = std::max(peak, live);
    }
  }
  return peak;
}

NPURT_DECL std::uint64_t lower_bound(const std::vector<buffer>& buffers) {
  std::error_code ec;
  const auto lb = lower_bound(buffers, ec);
  if (ec) throw_error(ec, "memplan::lower_bound: the bytes live at one step exceed 2^64 - 1");
  return lb;
}

NPURT_DECL std::uint64_t no_reuse_size(const std::vector<buffer>& buffers, std::error_code& ec) {
  ec.clear();
  std::uint64_t sum = 0;
  if (!detail::checked_sum(buffers, sum)) {
    ec = make_error_code(errc::size_overflow);
    return 0;
  }
  return sum;
}

NPURT_DECL std::uint64_t no_reuse_size(const std::vector<buffer>& buffers) {
  std::error_code ec;
  const auto sum = no_reuse_size(buffers, ec);
  if (ec) throw_error(ec, "memplan::no_reuse_size: the sum of sizes exceeds 2^64 - 1");
  return sum;
}

NPURT_DECL plan greedy_plan(const std::vector<buffer>& buffers, order o, fit f, std::uint64_t alignment) {
  std::error_code ec;
  std::string what;
  ec = validate(buffers, alignment, &what);
  throw_if(ec, what);
  plan p;
  if (!detail::adjacency_fits(buffers.size(), detail::overlap_pairs(buffers))) {
    p.arena_size = p.greedy_arena_size = detail::sweep_plan(buffers, alignment, p.offsets);
    p.method = "sweep/best-fit";
    return p;
  }
  detail::order_placer placer(buffers, alignment);
  p.arena_size = placer.run(detail::make_order(buffers, o), f, p.offsets);
  p.greedy_arena_size = p.arena_size;
  p.method = std::string(detail::order_name(o)) + (f == fit::best ? "/best-fit" : "/first-fit");
  return p;
}

NPURT_DECL plan make_plan(const std::vector<buffer>& buffers, const options& opts, std::error_code& ec) {
  std::string what;
  ec = validate(buffers, opts.alignment, &what);
  if (ec) return {};
  plan result;
  if (buffers.empty()) {
    result.method = "empty";
    return result;
  }
  if (!detail::adjacency_fits(buffers.size(), detail::overlap_pairs(buffers))) {
    result.arena_size = result.greedy_arena_size = detail::sweep_plan(buffers, opts.alignment, result.offsets);
    result.method = "sweep/best-fit";
    return result;
  }
  const std::uint64_t lb = lower_bound(buffers);  // validate() bounded the sum of sizes
  if (buffers.size() > opts.search_max_buffers) {
    // No search follows: the greedy passes run without neighbour lists (order_placer), which
    // gives the engine's plans in near-linear memory. With best_of_orders, the size order with
    // both fits, then the time-order sweep (cheap, and better on graphs whose micro-batches
    // repeat one shape: greedy by size interleaves them).
    detail::order_placer placer(buffers, opts.alignment);
    const auto ord = detail::make_order(buffers, order::size);
    std::vector<std::uint64_t> offsets;
    result.arena_size = std::numeric_limits<std::uint64_t>::max();
    const auto consider = [&](std::uint64_t cost, const char* method) {
      if (cost >= result.arena_size) return;
      result.arena_size = cost;
      result.offsets = offsets;
      result.method = method;
    };
    consider(placer.run(ord, fit::best, offsets), "size/best-fit");
    if (opts.best_of_orders && result.arena_size > lb) consider(placer.run(ord, fit::first, offsets), "size/first-fit");
    if (opts.best_of_orders && result.arena_size > lb)
      consider(detail::sweep_plan(buffers, opts.alignment, offsets), "sweep/best-fit");
    result.greedy_arena_size = result.arena_size;
    return result;
  }
  detail::engine eng(buffers, opts.alignment);
  std::vector<order> orders{order::size};
  std::vector<fit> fits{fit::best};
  if (opts.best_of_orders) {
    fits = {fit::best, fit::first};
    if (buffers.size() <= opts.search_max_buffers) orders = {order::size, order::area, order::lifetime, order::lower};
  }
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint32_t> best_order;
  fit best_fit = fit::best;
  for (auto o : orders) {
    auto ord = detail::make_order(buffers, o);
    for (auto f : fits) {
      const auto cost = eng.run(ord, f);
      if (cost < best) {
        best = cost;
        best_order = ord;
        best_fit = f;
        result.offsets = eng.offsets();
        result.method = std::string(detail::order_name(o)) + (f == fit::best ? "/best-fit" : "/first-fit");
      }
      if (best == lb) break;
    }
    if (best == lb) break;
  }
  result.greedy_arena_size = best;
  if (opts.search_work > 0 && best > lb && buffers.size() <= opts.search_max_buffers) {
    detail::splitmix rng{opts.seed};
    // Two chains, one per fit, each with half the budget: which one wins varies by instance.
    std::uint64_t iters = 0;
    for (auto f : {fit::first, fit::best}) {
      auto ord = best_order;
      const std::uint64_t start = eng.run(ord, f);
      std::vector<std::uint64_t> offs = eng.offsets();
      const auto got = detail::local_search(eng, ord, f, start, lb, opts.search_work / 2, rng, iters, buffers, offs);
      if (got < best) {
        best = got;
        result.offsets = std::move(offs);
        best_fit = f;
        result.method = std::string(f == fit::best ? "best-fit" : "first-fit") + "+search";
      }
    }
    result.search_iterations = iters;
  }
  (void)best_fit;
  result.arena_size = best;
  return result;
}

NPURT_DECL plan make_plan(const std::vector<buffer>& buffers, const options& opts) {
  std::error_code ec;
  auto p = make_plan(buffers, opts, ec);
  if (ec) {
    std::string what;
    validate(buffers, opts.alignment, &what);
    throw_error(ec, "memplan: " + what);
  }
  return p;
}

NPURT_DECL check_report check(const std::vector<buffer>& buffers, const std::vector<std::uint64_t>& offsets,
                              std::uint64_t alignment) {
  check_report r;
  auto fail = [&](std::string msg) {
    r.valid = false;
    r.error = std::move(msg);
    return r;
  };
  if (buffers.size() >= std::numeric_limits<std::uint32_t>::max()) return fail("too many buffers");
  // Before the sweep, which counts on every end coming after its start.
  for (const auto& x : buffers)
    if (x.upper <= x.lower || x.size == 0) return fail("buffer " + std::to_string(x.id) + " is malformed");
  // The bound is recomputed here on purpose rather than calling lower_bound(): the checker
  // must not trust the planner's code. Unsigned and checked: no plan holds more than 2^64 - 1
  // live bytes.
  std::vector<std::pair<std::int64_t, std::size_t>> ends, starts;  // (time, index)
  ends.reserve(buffers.size());
  starts.reserve(buffers.size());
  bool no_reuse_overflow = false;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    no_reuse_overflow = no_reuse_overflow || __builtin_add_overflow(r.no_reuse, buffers[i].size, &r.no_reuse);
    starts.emplace_back(buffers[i].lower, i);
    ends.emplace_back(buffers[i].upper, i);
  }
  if (no_reuse_overflow) r.no_reuse = std::numeric_limits<std::uint64_t>::max();
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  // Merge the two lists: at equal times ends come first (lifetimes are half-open).
  struct event {
    std::int64_t t;
    bool start;
    std::size_t i;
  };
  std::vector<event> ev;
  ev.reserve(buffers.size() * 2);
  {
    std::size_t a = 0, b = 0;
    while (a < starts.size() || b < ends.size()) {
      if (b < ends.size() && (a == starts.size() || ends[b].first <= starts[a].first)) {
        ev.push_back({ends[b].first, false, ends[b].second});
        ++b;
      } else {
        ev.push_back({starts[a].first, true, starts[a].second});
        ++a;
      }
    }
  }
  std::uint64_t live = 0;
  for (const auto& e : ev) {
    if (!e.start) {
      live -= buffers[e.i].size;
    } else if (__builtin_add_overflow(live, buffers[e.i].size, &live)) {
      r.lower_bound = std::numeric_limits<std::uint64_t>::max();
      return fail("the buffers live at step " + std::to_string(e.t) +
                  " need more than 2^64 - 1 bytes: no plan can hold them");
    } else {
      r.lower_bound = std::max(r.lower_bound, live);
    }
  }
  if (offsets.size() != buffers.size())
    return fail("plan has " + std::to_string(offsets.size()) + " offsets for " + std::to_string(buffers.size()) +
                " buffers");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return fail("alignment is not a power of two");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto& x = buffers[i];
    if (offsets[i] % alignment != 0)
      return fail("buffer " + std::to_string(x.id) + " at offset " + std::to_string(offsets[i]) +
                  " is not aligned to " + std::to_string(alignment));
    std::uint64_t end = 0;
    if (__builtin_add_overflow(offsets[i], x.size, &end))
      return fail("buffer " + std::to_string(x.id) + " at offset " + std::to_string(offsets[i]) + " with size " +
                  std::to_string(x.size) + " ends past 2^64 - 1");
    r.arena_size = std::max(r.arena_size, end);
  }
  // Sweep over time with the live buffers ordered by offset. While the live set has no overlap,
  // a new buffer can only collide with its neighbours in offset order.
  std::set<std::pair<std::uint64_t, std::size_t>> live_set;
  for (const auto& e : ev) {
    const auto key = std::make_pair(offsets[e.i], e.i);
    if (!e.start) {
      live_set.erase(key);
      continue;
    }
    const std::uint64_t lo = offsets[e.i], hi = lo + buffers[e.i].size;
    auto it = live_set.lower_bound(key);
    auto clash = [&](std::size_t j) {
      return fail("buffers " + std::to_string(buffers[e.i].id) + " and " + std::to_string(buffers[j].id) +
                  " are live together at step " + std::to_string(e.t) + " and overlap in [" +
                  std::to_string(std::max(lo, offsets[j])) + ", " +
                  std::to_string(std::min(hi, offsets[j] + buffers[j].size)) + ")");
    };
    if (it != live_set.end() && it->first < hi) return clash(it->second);
    if (it != live_set.begin()) {
      auto prev = std::prev(it);
      if (prev->first + buffers[prev->second].size > lo) return clash(prev->second);
    }
    live_set.insert(it, key);
  }
  r.valid = true;
  return r;
}

NPURT_DECL check_report check(const std::vector<buffer>& input, const table& plan, std::uint64_t alignment) {
  check_report r;
  auto fail = [&](std::string msg) {
    r.valid = false;
    r.error = std::move(msg);
    return r;
  };
  if (!plan.has_offsets || plan.offsets.size() != plan.buffers.size()) return fail("the plan has no offset column");
  if (plan.buffers.empty() && !input.empty())
    return fail("the plan has no rows for the " + std::to_string(input.size()) + " input buffers");
  // Every plan row must be an input buffer, unchanged, and every input buffer must appear exactly
  // once: otherwise the overlap check below would judge some other instance than the input.
  std::unordered_map<std::int64_t, std::size_t> index;
  index.reserve(input.size());
  for (std::size_t i = 0; i < input.size(); ++i)
    if (!index.emplace(input[i].id, i).second)
      return fail("the input lists id " + std::to_string(input[i].id) + " twice");
  std::vector<std::uint64_t> offsets(input.size(), 0);
  std::vector<bool> seen(input.size(), false);
  auto lifetime = [](const buffer& b) {
    std::string s = "[";  // appended piece by piece: GCC 12 warns falsely on a chain of operator+
    s += std::to_string(b.lower);
    s += ", ";
    s += std::to_string(b.upper);
    s += ") of ";
    s += std::to_string(b.size);
    s += " bytes";
    return s;
  };
  for (std::size_t k = 0; k < plan.buffers.size(); ++k) {
    const buffer& row = plan.buffers[k];
    const auto it = index.find(row.id);
    if (it == index.end())
      return fail("plan row " + std::to_string(k + 1) + ": buffer " + std::to_string(row.id) + " is not in the input");
    const buffer& in = input[it->second];
    if (seen[it->second]) return fail("the plan places buffer " + std::to_string(row.id) + " twice");
    if (row.lower != in.lower || row.upper != in.upper || row.size != in.size)
      return fail("buffer " + std::to_string(row.id) + " is " + lifetime(row) + " in the plan but " + lifetime(in) +
                  " in the input");
    seen[it->second] = true;
    offsets[it->second] = plan.offsets[k];
  }
  if (plan.buffers.size() != input.size()) {
    const auto miss = static_cast<std::size_t>(std::find(seen.begin(), seen.end(), false) - seen.begin());
    return fail("the plan lacks buffer " + std::to_string(input[miss].id) + " (" +
                std::to_string(input.size() - plan.buffers.size()) + " of " + std::to_string(input.size()) +
                " input buffers have no row)");
  }
  return check(input, offsets, alignment);
}

namespace detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

inline std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t p = 0;
  for (;;) {
    const auto c = line.find(',', p);
    out.push_back(trim(line.substr(p, c == std::string_view::npos ? std::string_view::npos : c - p)));
    if (c == std::string_view::npos) break;
    p = c + 1;
  }
  return out;
}

// Lines longer than this are an error: a reader fed /dev/zero or a binary file must stop with a
// message rather than grow one line until memory runs out. Real rows are a few dozen bytes.
inline constexpr std::size_t max_line_bytes = 64 * 1024;

// std::getline with a bound. Returns false at the end of input with nothing read; sets
// too_long (and stops reading) when the line passes max_line_bytes.
inline bool bounded_getline(std::istream& in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  std::streambuf* sb = in.rdbuf();
  if (!sb || !in.good()) return false;
  for (;;) {
    std::char_traits<char>::int_type c{};
    // A file stream reports a failed read(2) (a directory, an I/O error) by throwing from its
    // buffer; the istream functions would catch that, and so must a caller of the buffer.
    try {
      c = sb->sbumpc();
    } catch (const std::exception&) {
      in.setstate(std::ios::badbit);
      return false;
    }
    if (std::char_traits<char>::eq_int_type(c, std::char_traits<char>::eof())) {
      in.setstate(std::ios::eofbit);
      return !line.empty();
    }
    const char ch = std::char_traits<char>::to_char_type(c);
    if (ch == '\n') return true;
    if (line.size() >= max_line_bytes) {
      too_long = true;
      return true;
    }
    line.push_back(ch);
  }
}

// A field quoted in a message: at most a short prefix, non-printable bytes escaped, so a
// megabyte field or binary garbage gives a readable one-line error.
inline std::string quote(std::string_view v) {
  constexpr std::size_t max_shown = 40;
  std::string out = "'";
  for (std::size_t k = 0; k < v.size() && k < max_shown; ++k) {
    const auto c = static_cast<unsigned char>(v[k]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  out += "'";
  if (v.size() > max_shown) out += "... (" + std::to_string(v.size()) + " bytes)";
  return out;
}

template <class T>
bool parse_int(std::string_view s, T& v) {
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace detail

NPURT_DECL table read_csv(std::istream& in, std::error_code& ec, std::string& message) {
  table t;
  ec.clear();
  message.clear();
  std::string line;
  std::size_t line_no = 0;
  auto fail = [&](errc e, const std::string& msg) {
    ec = make_error_code(e);
    message = "line " + std::to_string(line_no) + ": " + msg;
    return table{};
  };
  // Header: the first non-blank line.
  int col_id = -1, col_lower = -1, col_upper = -1, col_size = -1, col_offset = -1;
  std::size_t ncols = 0;
  bool have_header = false;
  bool too_long = false;
  const auto long_line = [&] {
    return fail(errc::parse_error,
                "line longer than " + std::to_string(detail::max_line_bytes) + " bytes (is this a CSV file?)");
  };
  while (detail::bounded_getline(in, line, too_long)) {
    ++line_no;
    if (too_long) return long_line();
    if (detail::trim(line).empty()) continue;
    const auto f = detail::split(line);
    ncols = f.size();
    for (std::size_t c = 0; c < f.size(); ++c) {
      const auto name = f[c];
      int* slot = name == "id"       ? &col_id
                  : name == "lower"  ? &col_lower
                  : name == "upper"  ? &col_upper
                  : name == "size"   ? &col_size
                  : name == "offset" ? &col_offset
                                     : nullptr;
      if (!slot) continue;
      if (*slot >= 0) return fail(errc::parse_error, "column " + detail::quote(name) + " appears twice");
      if (c > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        return fail(errc::parse_error, "too many columns");
      *slot = static_cast<int>(c);
    }
    for (auto [col, name] : {std::pair{col_id, "id"}, {col_lower, "lower"}, {col_upper, "upper"}, {col_size, "size"}})
      if (col < 0)
        return fail(errc::parse_error,
                    std::string("header lacks column '") + name + "' (expected id,lower,upper,size[,offset])");
    have_header = true;
    break;
  }
  if (in.bad()) return fail(errc::parse_error, "read error");
  if (!have_header) {
    line_no = std::max<std::size_t>(line_no, 1);
    return fail(errc::parse_error, "empty input: expected the header id,lower,upper,size");
  }
  t.has_offsets = col_offset >= 0;
  std::unordered_set<std::int64_t> ids;
  while (detail::bounded_getline(in, line, too_long)) {
    ++line_no;
    if (too_long) return long_line();
    if (detail::trim(line).empty()) continue;
    const auto f = detail::split(line);
    if (f.size() != ncols)
      return fail(errc::parse_error, "expected " + std::to_string(ncols) + " fields, got " + std::to_string(f.size()));
    buffer b;
    auto bad = [&](const char* name, std::string_view v, const char* kind) {
      return fail(errc::parse_error, std::string("field '") + name + "' is not " + kind + ": " + detail::quote(v));
    };
    if (!detail::parse_int(f[col_id], b.id)) return bad("id", f[col_id], "an integer");
    if (!detail::parse_int(f[col_lower], b.lower)) return bad("lower", f[col_lower], "an integer");
    if (!detail::parse_int(f[col_upper], b.upper)) return bad("upper", f[col_upper], "an integer");
    if (!detail::parse_int(f[col_size], b.size)) return bad("size", f[col_size], "a non-negative integer");
    if (t.has_offsets) {
      std::uint64_t off = 0;
      if (!detail::parse_int(f[col_offset], off)) return bad("offset", f[col_offset], "a non-negative integer");
      t.offsets.push_back(off);
    }
    if (!ids.insert(b.id).second) return fail(errc::invalid_argument, "duplicate id " + std::to_string(b.id));
    std::string what;
    if (auto e = validate({b}, 1, &what)) return fail(static_cast<errc>(e.value()), what);
    t.buffers.push_back(b);
  }
  if (in.bad()) return fail(errc::parse_error, "read error");
  if (std::string what; auto e = validate(t.buffers, 1, &what)) return fail(static_cast<errc>(e.value()), what);
  return t;
}

NPURT_DECL table read_csv(std::istream& in) {
  std::error_code ec;
  std::string msg;
  auto t = read_csv(in, ec, msg);
  if (ec) throw_error(ec, msg);
  return t;
}

NPURT_DECL table read_csv_file(const std::string& path, std::error_code& ec, std::string& message) {
  errno = 0;
  std::ifstream in(path);
  // Opening a folder succeeds on POSIX; only the first read fails (EISDIR), too late for errno
  // to be the reason still.
  if (std::error_code fec; std::filesystem::is_directory(path, fec)) {
    ec = make_error_code(errc::invalid_argument);
    message = path + ": cannot read file: " + std::generic_category().message(EISDIR);
    return {};
  }
  if (!in) {
    const int e = errno;
    ec = make_error_code(errc::invalid_argument);
    message = path + ": cannot open file" + (e != 0 ? ": " + std::generic_category().message(e) : std::string());
    return {};
  }
  auto t = read_csv(in, ec, message);
  if (in.bad()) {
    ec = make_error_code(errc::invalid_argument);
    message = path + ": cannot read file";
    return {};
  }
  if (ec) message = path + ":" + message;
  return t;
}

NPURT_DECL table read_csv_file(const std::string& path) {
  std::error_code ec;
  std::string msg;
  auto t = read_csv_file(path, ec, msg);
  if (ec) throw_error(ec, msg);
  return t;
}

NPURT_DECL void write_csv(std::ostream& out, const std::vector<buffer>& buffers,
                          const std::vector<std::uint64_t>* offsets) {
  out << (offsets ? "id,lower,upper,size,offset\n" : "id,lower,upper,size\n");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    out << b.id << ',' << b.lower << ',' << b.upper << ',' << b.size;
    if (offsets) out << ',' << (*offsets)[i];
    out << '\n';
  }
}

}  // namespace npurt::memplan
