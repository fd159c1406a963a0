#include <npurt/config.hpp>
#include <npurt/memplan.hpp>

#include "../heap_counter.hpp"

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
  // Pisarchyk & Lee's example (arXiv:2001.03288), (first, last, size) with last use exclusive.
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
  // Under AddressSanitizer a plan takes several times as long and the memory checks gain nothing
  // from eleven instances over four: A, D, G and J there, every one in the other builds.
  constexpr char step = NPURT_ASAN ? 3 : 1;
  for (char c = 'A'; c <= 'K'; c = static_cast<char>(c + step)) {
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
  // Greedy alone needs up to 1.41 on these instances; the local search must do clearly
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

namespace {

mp::table as_plan(const std::vector<mp::buffer>& b, const std::vector<std::uint64_t>& off) {
  mp::table t;
  t.buffers = b;
  t.offsets = off;
  t.has_offsets = true;
  return t;
}

}  // namespace

TEST_CASE("the checker compares every plan row with the input before it checks overlaps", "[memory][memplan][check]") {
  const auto b = paper_example();
  const auto p = mp::make_plan(b);
  REQUIRE(mp::check(b, as_plan(b, p.offsets)).valid);

  SECTION("rows in another order are the same plan") {
    auto t = as_plan(b, p.offsets);
    std::reverse(t.buffers.begin(), t.buffers.end());
    std::reverse(t.offsets.begin(), t.offsets.end());
    const auto r = mp::check(b, t);
    CHECK(r.valid);
    CHECK(r.arena_size == p.arena_size);
  }
  SECTION("a missing row") {
    auto t = as_plan(b, p.offsets);
    t.buffers.erase(t.buffers.begin() + 3);
    t.offsets.erase(t.offsets.begin() + 3);
    const auto r = mp::check(b, t);
    CHECK_FALSE(r.valid);
    CHECK(r.error.find("lacks buffer 3") != std::string::npos);
  }
  SECTION("a plan with no rows at all") {
    const auto r = mp::check(b, as_plan({}, {}));
    CHECK_FALSE(r.valid);
    CHECK(r.error.find("no rows") != std::string::npos);
  }
  SECTION("a changed size: smaller buffers would fit anywhere") {
    auto t = as_plan(b, std::vector<std::uint64_t>(b.size(), 0));
    for (auto& x : t.buffers) x.size = 1;
    t.offsets = {0, 1, 2, 3, 4, 5, 6, 7};
    REQUIRE(mp::check(t.buffers, t.offsets).valid);  // valid for the instance it describes
    const auto r = mp::check(b, t);
    CHECK_FALSE(r.valid);
    CHECK(r.error.find("buffer 0") != std::string::npos);
  }
  SECTION("a changed lifetime") {
    auto t = as_plan(b, p.offsets);
    t.buffers[5].upper = t.buffers[5].lower + 1;
    CHECK_FALSE(mp::check(b, t).valid);
  }
  SECTION("a repeated row in place of another") {
    auto t = as_plan(b, p.offsets);
    t.buffers[2] = t.buffers[1];
    t.offsets[2] = t.offsets[1];
    const auto r = mp::check(b, t);
    CHECK_FALSE(r.valid);
    CHECK(r.error.find("twice") != std::string::npos);
  }
  SECTION("a row for a buffer the input does not have") {
    auto t = as_plan(b, p.offsets);
    t.buffers.push_back({99, 0, 1, 8});
    t.offsets.push_back(1000);
    CHECK_FALSE(mp::check(b, t).valid);
  }
  SECTION("no offset column") {
    auto t = as_plan(b, {});
    t.has_offsets = false;
    CHECK_FALSE(mp::check(b, t).valid);
  }
}

TEST_CASE("sizes up to 2^64 - 1 give the right lower bound, and live sums past it a clear error",
          "[memory][memplan][overflow]") {
  constexpr std::uint64_t two63 = std::uint64_t{1} << 63;
  constexpr std::uint64_t max = ~std::uint64_t{0};
  // One buffer of 2^63 bytes and one of 2^63 - 1 together: exactly 2^64 - 1.
  std::vector<mp::buffer> b{{0, 0, 2, two63}, {1, 1, 3, two63 - 1}};
  CHECK(mp::lower_bound(b) == max);
  CHECK(mp::check(b, {0, two63}).lower_bound == max);
  CHECK(mp::check(b, {0, two63}).valid);
  // Apart in time, 2^63 each: the bound is 2^63; together they would need 2^64.
  std::vector<mp::buffer> apart{{0, 0, 1, two63}, {1, 1, 2, two63}};
  CHECK(mp::lower_bound(apart) == two63);
  CHECK(mp::check(apart, {0, 0}).valid);
  std::error_code ec;
  (void)mp::no_reuse_size(apart, ec);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK_THROWS_AS(mp::no_reuse_size(apart), npurt::caller_error);
  CHECK(mp::check(apart, {0, 0}).no_reuse == max);  // saturated, documented

  std::vector<mp::buffer> together{{0, 0, 2, two63}, {1, 1, 3, two63}, {2, 1, 2, 5}};
  (void)mp::lower_bound(together, ec);
  CHECK(ec == npurt::errc::size_overflow);
  CHECK_THROWS_AS(mp::lower_bound(together), npurt::caller_error);
  const auto r = mp::check(together, {0, two63, 0});
  CHECK_FALSE(r.valid);
  CHECK(r.error.find("2^64") != std::string::npos);
  (void)mp::make_plan(together, {}, ec);
  CHECK(ec == npurt::errc::size_overflow);

  // An offset whose end wraps past 2^64 is rejected, not wrapped to a small end.
  std::vector<mp::buffer> one{{7, 0, 1, 100}};
  const auto w = mp::check(one, {max - 10});
  CHECK_FALSE(w.valid);
  CHECK(w.error.find("buffer 7") != std::string::npos);
}

TEST_CASE("65,537 buffers all live at once get a valid plan", "[memory][memplan][dense]") {
  // Their overlapping pairs (2^31 and more) overflowed 32-bit positions in the neighbour lists.
  std::vector<mp::buffer> b;
  for (std::int64_t i = 0; i < 65537; ++i) b.push_back({i, 0, 1, 1});
  const auto p = mp::make_plan(b);
  const auto r = mp::check(b, p.offsets);
  REQUIRE(r.valid);
  CHECK(r.lower_bound == 65537);
  CHECK(p.arena_size == 65537);  // all live at once: no reuse is possible, nor needed
}

TEST_CASE("dense instances of 20,000 and 40,000 buffers live at once plan in memory proportional to the input",
          "[memory][memplan][dense]") {
  for (const std::int64_t n : {20000, 40000}) {
    INFO(n << " buffers");
    std::mt19937_64 rng(7);
    std::vector<mp::buffer> b;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto lo = static_cast<std::int64_t>(rng() % 4);  // all live at steps 3 and 4
      b.push_back({i, lo, 4 + lo + 1, 64 + rng() % 4096});
    }
    mp::plan p;
    const auto peak = heap_counter::peak_during([&] { p = mp::make_plan(b); });
    const auto input = static_cast<std::int64_t>(b.size() * sizeof(mp::buffer));
    CHECK(peak <= 64 * input);  // the pair lists alone would be about 2,000 times the input
    const auto r = mp::check(b, p.offsets);
    REQUIRE(r.valid);
    std::uint64_t sum = 0;
    for (const auto& x : b) sum += x.size;
    CHECK(r.lower_bound == sum);  // everything is live at step 4: no reuse is possible
    CHECK(p.arena_size == sum);
  }
}

TEST_CASE("the CSV reader bounds line length and quotes only a short prefix of a bad field", "[memory][memplan][csv]") {
  SECTION("an endless line (like /dev/zero) stops with a clear error") {
    std::error_code ec;
    std::string msg;
    (void)mp::read_csv_file("/dev/zero", ec, msg);
    CHECK(ec == npurt::errc::parse_error);
    CHECK(msg.find("line 1: line longer than") != std::string::npos);
    CHECK(msg.size() < 200);
  }
  SECTION("a 5 MB field") {
    std::string text = "id,lower,upper,size\n0,0,1," + std::string(5'000'000, '7') + "x\n";
    std::istringstream in(text);
    std::error_code ec;
    std::string msg;
    (void)mp::read_csv(in, ec, msg);
    CHECK(ec == npurt::errc::parse_error);
    CHECK(msg.rfind("line 2:", 0) == 0);
    CHECK(msg.size() < 200);
  }
  SECTION("a long bad field within the line limit is quoted by its prefix and length") {
    std::string text = "id,lower,upper,size\n0,0,1," + std::string(60'000, 'z') + "\n";
    std::istringstream in(text);
    std::error_code ec;
    std::string msg;
    (void)mp::read_csv(in, ec, msg);
    CHECK(ec == npurt::errc::parse_error);
    CHECK(msg.find("'zzzz") != std::string::npos);
    CHECK(msg.find("(60000 bytes)") != std::string::npos);
    CHECK(msg.size() < 200);
  }
  SECTION("binary bytes are escaped") {
    std::istringstream in(std::string("id,lower,upper,size\n0,0,1,\x01\x02\n"));
    std::error_code ec;
    std::string msg;
    (void)mp::read_csv(in, ec, msg);
    CHECK(msg.find("\\x01\\x02") != std::string::npos);
  }
}

TEST_CASE("dense instances whose buffers come and go get valid aligned plans from the sweep",
          "[memory][memplan][dense]") {
  // 4,500 long-lived buffers overlap each other and most of 20,000 short ones: far more
  // overlapping pairs than the neighbour lists may hold, so the planner sweeps in time order,
  // freeing and reusing ranges.
  std::mt19937_64 rng(11);
  std::vector<mp::buffer> b;
  std::int64_t id = 0;
  for (int i = 0; i < 4500; ++i) {
    const auto lo = static_cast<std::int64_t>(rng() % 100);
    b.push_back({id++, lo, lo + 1000 + static_cast<std::int64_t>(rng() % 1000), 1 + rng() % 5000});
  }
  for (int i = 0; i < 20000; ++i) {
    const auto lo = static_cast<std::int64_t>(rng() % 3000);
    b.push_back({id++, lo, lo + 1 + static_cast<std::int64_t>(rng() % 20), 1 + rng() % 5000});
  }
  mp::options o;
  o.alignment = 64;
  const auto p = mp::make_plan(b, o);
  CHECK(p.method == "sweep/best-fit");
  const auto r = mp::check(b, p.offsets, 64);
  REQUIRE(r.valid);
  CHECK(r.arena_size == p.arena_size);
  CHECK(p.arena_size >= r.lower_bound);
  CHECK(p.arena_size < r.no_reuse / 2);  // buffers that end leave room the short ones reuse
  for (auto off : p.offsets) REQUIRE(off % 64 == 0);
  CHECK(mp::make_plan(b, o).offsets == p.offsets);  // deterministic
}

TEST_CASE("a buffer with an empty lifetime is never live: the lower bound and the checker say so",
          "[memory][memplan]") {
  // The sweep sees such a buffer's end before its start: it must not take away bytes it never
  // added, which would wrap the live sum.
  std::error_code ec;
  CHECK(mp::lower_bound({{0, 3, 3, 10}}, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(mp::lower_bound({{0, 5, 2, 10}, {1, 3, 4, 1}}, ec) == 1);
  CHECK_FALSE(ec);
  CHECK(mp::lower_bound({{0, 0, 4, 7}, {1, 2, 2, 100}, {2, 1, 3, 5}}, ec) == 12);
  CHECK_FALSE(ec);
  const auto rep = mp::check({{0, 3, 3, 10}, {1, 0, 5, 4}}, {0, 0});
  CHECK_FALSE(rep.valid);
  CHECK(rep.error == "buffer 0 is malformed");
  const auto rep2 = mp::check({{0, 5, 2, 10}, {1, 3, 4, 1}}, {0, 16});
  CHECK_FALSE(rep2.valid);
  CHECK(rep2.error == "buffer 0 is malformed");
}
