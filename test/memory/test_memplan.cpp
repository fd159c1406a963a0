#include <npurt/memplan.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>

namespace mp = npurt::memplan;

namespace {

// The build passes the repository's test/data/memplan; NPURT_MEMPLAN_DATA in the environment
// overrides it (a relocated source tree).
std::string data_dir() {
  if (const char* s = std::getenv("NPURT_MEMPLAN_DATA")) return s;
  return NPURT_MEMPLAN_DATA;
}

// Oracle: the breadth profile by brute force over every time step (Pisarchyk & Lee's operator
// breadth). Fine for the small time ranges of the tests; shares nothing with the library.
std::uint64_t brute_force_lb(const std::vector<mp::buffer>& b) {
  std::vector<std::int64_t> times;
  for (const auto& x : b) times.push_back(x.lower);
  std::uint64_t best = 0;
  for (auto t : times) {
    std::uint64_t live = 0;
    for (const auto& x : b)
      if (x.lower <= t && t < x.upper) live += x.size;
    best = std::max(best, live);
  }
  return best;
}

// Oracle: O(n^2) pairwise overlap check.
bool brute_force_valid(const std::vector<mp::buffer>& b, const std::vector<std::uint64_t>& off) {
  for (std::size_t i = 0; i < b.size(); ++i)
    for (std::size_t j = i + 1; j < b.size(); ++j) {
      const bool time = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
      const bool space = off[i] < off[j] + b[j].size && off[j] < off[i] + b[i].size;
      if (time && space) return false;
    }
  return true;
}

std::vector<mp::buffer> paper_example() {
  // Pisarchyk & Lee's example, (first, last, size) with last use exclusive: reference/memory.md §3.1.
  return {{0, 0, 2, 32}, {1, 1, 5, 28}, {2, 2, 6, 36}, {3, 3, 6, 16},
          {4, 4, 6, 8},  {5, 5, 8, 64}, {6, 6, 9, 10}, {7, 7, 9, 40}};
}

}  // namespace

TEST_CASE("the paper example plans to exactly 124 bytes, its lower bound", "[memory][memplan]") {
  const auto t = mp::read_csv_file(data_dir() + "/paper_example.csv");
  REQUIRE(t.buffers.size() == 8);
  CHECK(brute_force_lb(t.buffers) == 124);
  CHECK(mp::lower_bound(t.buffers) == 124);
  CHECK(mp::no_reuse_size(t.buffers) == 234);

  const auto greedy = mp::greedy_plan(t.buffers, mp::order::size, mp::fit::best);
  CHECK(greedy.arena_size == 124);
  const auto p = mp::make_plan(t.buffers);
  CHECK(p.arena_size == 124);
  const auto r = mp::check(t.buffers, p.offsets);
  CHECK(r.valid);
  CHECK(r.lower_bound == 124);
  CHECK(r.arena_size == 124);
  CHECK(r.no_reuse == 234);
}

TEST_CASE("every MiniMalloc instance gets a valid plan within 1.41 times the lower bound", "[memory][memplan]") {
  // Known lower bounds from the data README (peak live bytes); the optimum is 1,048,576 for all.
  const std::map<char, std::uint64_t> known_lb{{'C', 1039360}, {'D', 986112}, {'J', 989184}};
  std::printf("MiniMalloc   n   greedy/LB   plan/LB   method\n");
  double worst = 0;
  for (char c = 'A'; c <= 'K'; ++c) {
    INFO("instance " << c);
    const auto t = mp::read_csv_file(data_dir() + "/minimalloc_" + c + ".csv");
    const auto lb = brute_force_lb(t.buffers);
    const auto it = known_lb.find(c);
    CHECK(lb == (it != known_lb.end() ? it->second : 1048576u));
    const auto p = mp::make_plan(t.buffers);
    const auto r = mp::check(t.buffers, p.offsets);
    REQUIRE(r.valid);
    CHECK(r.lower_bound == lb);
    CHECK(r.arena_size == p.arena_size);
    CHECK(p.arena_size >= lb);
    const double ratio = static_cast<double>(p.arena_size) / static_cast<double>(lb);
    CHECK(ratio <= 1.41);
    worst = std::max(worst, ratio);
    std::printf("%c        %4zu     %.4f    %.4f   %s\n", c, t.buffers.size(),
                static_cast<double>(p.greedy_arena_size) / static_cast<double>(lb), ratio, p.method.c_str());
  }
  std::printf("worst plan/LB %.4f\n", worst);
  // Greedy alone needs up to 1.41 (reference/memory.md §3.9); the local search must do clearly
  // better. Deterministic: the search is seeded and budgeted in work units, not time.
  CHECK(worst <= 1.30);
}

TEST_CASE("plans are deterministic for the same input and seed", "[memory][memplan]") {
  const auto t = mp::read_csv_file(data_dir() + "/minimalloc_A.csv");
  mp::options o;
  o.search_work = 5'000'000;
  const auto a = mp::make_plan(t.buffers, o);
  const auto b = mp::make_plan(t.buffers, o);
  CHECK(a.offsets == b.offsets);
  CHECK(a.arena_size == b.arena_size);
}

TEST_CASE("the checker catches a broken plan", "[memory][memplan]") {
  const auto b = paper_example();
  auto p = mp::make_plan(b);
  REQUIRE(mp::check(b, p.offsets).valid);

  SECTION("two buffers live together at the same place") {
    auto off = p.offsets;
    off[5] = off[6];  // buffers 5 and 6 are live together at step 6
    const auto r = mp::check(b, off);
    CHECK_FALSE(r.valid);
    CHECK(r.error.find('5') != std::string::npos);
    CHECK(r.error.find('6') != std::string::npos);
  }
  SECTION("a partial overlap by one byte") {
    auto off = p.offsets;
    // Buffer 1 [1,5) and buffer 0 [0,2) are live together at step 1.
    off[1] = off[0] + b[0].size - 1;
    CHECK_FALSE(mp::check(b, off).valid);
  }
  SECTION("a misaligned offset") {
    auto off = p.offsets;
    for (auto& o : off) o *= 64;
    CHECK(mp::check(b, off, 64).valid);
    off[3] += 8;
    const auto r = mp::check(b, off, 64);
    CHECK_FALSE(r.valid);
    CHECK(r.error.find("aligned") != std::string::npos);
  }
  SECTION("a plan with the wrong number of offsets") {
    auto off = p.offsets;
    off.pop_back();
    CHECK_FALSE(mp::check(b, off).valid);
  }
}

TEST_CASE("the checker agrees with a pairwise oracle on random plans", "[memory][memplan]") {
  std::mt19937_64 rng(42);
  int valid = 0, invalid = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<mp::buffer> b;
    const int n = 2 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) {
      const auto lo = static_cast<std::int64_t>(rng() % 10);
      b.push_back({i, lo, lo + 1 + static_cast<std::int64_t>(rng() % 5), 1 + rng() % 16});
    }
    std::vector<std::uint64_t> off(b.size());
    for (auto& o : off) o = rng() % 48;
    const bool oracle = brute_force_valid(b, off);
    const auto r = mp::check(b, off);
    REQUIRE(r.valid == oracle);
    CHECK(r.lower_bound == brute_force_lb(b));
    (oracle ? valid : invalid)++;
    // And the planner's plans always pass both.
    const auto p = mp::make_plan(b);
    REQUIRE(brute_force_valid(b, p.offsets));
    REQUIRE(mp::check(b, p.offsets).valid);
    REQUIRE(p.arena_size >= brute_force_lb(b));
  }
  CHECK(valid > 10);
  CHECK(invalid > 10);
}

TEST_CASE("aligned plans put every offset on the alignment", "[memory][memplan]") {
  const auto t = mp::read_csv_file(data_dir() + "/minimalloc_B.csv");
  mp::options o;
  o.alignment = 4096;
  o.search_work = 2'000'000;
  const auto p = mp::make_plan(t.buffers, o);
  for (auto off : p.offsets) REQUIRE(off % 4096 == 0);
  CHECK(mp::check(t.buffers, p.offsets, 4096).valid);
}

TEST_CASE("bad buffers and options get typed errors", "[memory][memplan]") {
  std::error_code ec;
  auto b = paper_example();
  mp::options o;
  o.alignment = 48;
  (void)mp::make_plan(b, o, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  b[2].size = 0;
  (void)mp::make_plan(b, {}, ec);
  CHECK(ec == npurt::errc::zero_size);
  b = paper_example();
  b[3].upper = b[3].lower;
  (void)mp::make_plan(b, {}, ec);
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK_THROWS_AS(mp::make_plan(b), npurt::caller_error);
  (void)mp::make_plan({}, {}, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("malformed CSV input gets an error naming the line", "[memory][memplan]") {
  struct bad_case {
    const char* text;
    const char* line;
  };
  const bad_case cases[] = {
      {"", "line 1:"},
      {"id,lower,size\n0,1,2\n", "line 1:"},
      {"id,lower,upper,size\n0,0,2,32\n1,1,5\n", "line 3:"},
      {"id,lower,upper,size\n0,0,2,32\n\n1,1,x,28\n", "line 4:"},
      {"id,lower,upper,size\n0,0,2,-4\n", "line 2:"},
      {"id,lower,upper,size\n0,5,5,4\n", "line 2:"},
      {"id,lower,upper,size\n0,0,2,4\n0,1,3,4\n", "line 3:"},
      {"id,lower,upper,size,offset\n0,0,2,4,\n", "line 2:"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    std::istringstream in(c.text);
    std::error_code ec;
    std::string msg;
    const auto t = mp::read_csv(in, ec, msg);
    CHECK(ec);
    CHECK(msg.rfind(c.line, 0) == 0);
    CHECK(t.buffers.empty());
    std::istringstream again(c.text);
    CHECK_THROWS_AS(mp::read_csv(again), npurt::caller_error);
  }
  std::error_code ec;
  std::string msg;
  (void)mp::read_csv_file("/nonexistent/plan.csv", ec, msg);
  CHECK(ec == npurt::errc::invalid_argument);
}

TEST_CASE("plans round-trip through MiniMalloc's CSV format with offsets", "[memory][memplan]") {
  const auto b = paper_example();
  const auto p = mp::make_plan(b);
  std::stringstream s;
  mp::write_csv(s, b, &p.offsets);
  CHECK(s.str().rfind("id,lower,upper,size,offset\n", 0) == 0);
  const auto t = mp::read_csv(s);
  REQUIRE(t.has_offsets);
  REQUIRE(t.buffers.size() == b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    CHECK(t.buffers[i].id == b[i].id);
    CHECK(t.buffers[i].lower == b[i].lower);
    CHECK(t.buffers[i].upper == b[i].upper);
    CHECK(t.buffers[i].size == b[i].size);
  }
  CHECK(t.offsets == p.offsets);
  // Columns are found by name, in any order, with extra columns ignored and CRLF accepted.
  std::istringstream in("size,note,upper,id,lower\r\n32,x,2,0,0\r\n28,y,5,1,1\r\n");
  const auto u = mp::read_csv(in);
  REQUIRE(u.buffers.size() == 2);
  CHECK(u.buffers[1].size == 28);
  CHECK(u.buffers[1].upper == 5);
}
