// libFuzzer target: the memplan CSV reader, the checker and the planner on whatever the reader
// accepts. Properties, beyond "no crash, no UB, no hang":
// - an error has a message that starts with "line N:" and stays short (a prefix is quoted);
// - the checker agrees with a pairwise oracle on small instances, and accepts the identity
//   mapping of a plan file onto its own rows;
// - every plan the planner makes passes the checker and is at least the lower bound.
#include <npurt/memplan.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace mp = npurt::memplan;

namespace {

__extension__ typedef unsigned __int128 u128;  // exact ends of offset + size

[[noreturn]] void fail(const char* what) {
  __builtin_trap();
  (void)what;
}

bool oracle_valid(const std::vector<mp::buffer>& b, const std::vector<std::uint64_t>& off) {
  for (std::size_t i = 0; i < b.size(); ++i) {
    u128 end_i = static_cast<u128>(off[i]) + b[i].size;
    if (end_i > ~std::uint64_t{0}) return false;
    for (std::size_t j = i + 1; j < b.size(); ++j) {
      const u128 end_j = static_cast<u128>(off[j]) + b[j].size;
      const bool time = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
      const bool space = off[i] < end_j && off[j] < end_i;
      if (time && space) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::error_code ec;
  std::string msg;
  const auto t = mp::read_csv(in, ec, msg);
  if (ec) {
    if (msg.rfind("line ", 0) != 0 || msg.size() > 400) fail("error message");
    if (!t.buffers.empty()) fail("rows returned with an error");
    return 0;
  }
  std::error_code lb_ec;
  const auto lb = mp::lower_bound(t.buffers, lb_ec);
  (void)mp::no_reuse_size(t.buffers, ec);
  if (t.has_offsets) {
    const auto a = mp::check(t.buffers, t.offsets);
    const auto b = mp::check(t.buffers, t);  // the rows are the input: same verdict
    if (a.valid != b.valid) fail("row matching changed the verdict");
    if (t.buffers.size() <= 64 && a.valid != oracle_valid(t.buffers, t.offsets)) fail("checker disagrees with oracle");
    if (a.valid && !lb_ec && a.arena_size < lb) fail("valid plan below the lower bound");
    if (!t.buffers.empty()) {  // a plan without its last row is never valid
      auto missing = t;
      missing.buffers.pop_back();
      missing.offsets.pop_back();
      if (mp::check(t.buffers, missing).valid) fail("missing row accepted");
    }
  }
  if (t.buffers.size() <= 2000) {
    mp::options o;
    o.search_work = 20'000;
    const auto p = mp::make_plan(t.buffers, o, ec);
    if (!ec) {
      const auto r = mp::check(t.buffers, p.offsets);
      if (!r.valid) fail("planner made an invalid plan");
      if (lb_ec || p.arena_size < lb || r.arena_size != p.arena_size) fail("plan arena inconsistent");
    }
  }
  return 0;
}
