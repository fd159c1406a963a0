// npurt/memplan.hpp — static memory planning: one arena, an offset for every buffer whose
// lifetime is known in advance, so that buffers live at the same time never overlap.
//
// The problem is dynamic storage allocation (NP-hard). The planner runs greedy placement in
// several orders (Pisarchyk & Lee's greedy by size with best fit; XLA's "best of several heaps"),
// then a deterministic local search over the placement order. Lifetimes are half-open
// [lower, upper), the convention of MiniMalloc's CSV format, which read_csv/write_csv speak.
//
// The checker (check()) shares no code with the planner: it recomputes the lower bound (peak live
// bytes) and verifies a plan by a sweep over time, so it can judge any plan, including a
// hand-made or foreign one.
#pragma once

#include <npurt/config.hpp>
#include <npurt/error.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <system_error>
#include <vector>

namespace npurt::memplan {

/// One buffer to place: live on the time steps [lower, upper), needing `size` bytes.
struct buffer {
  std::int64_t id = 0;
  std::int64_t lower = 0;
  std::int64_t upper = 0;
  std::uint64_t size = 0;
};

/// The greedy orders the planner tries. Ties are broken by lower, then input index, so plans
/// never depend on sort stability.
enum class order {
  size,      ///< size descending (Pisarchyk & Lee, TFLite ArenaPlanner, XLA kSpatial)
  lifetime,  ///< upper - lower descending (XLA kTemporal)
  area,      ///< size x lifetime descending
  lower,     ///< first use ascending (greedy in order)
};

/// Where a buffer goes among the gaps left by the already placed buffers it overlaps in time.
enum class fit {
  best,   ///< the smallest gap that holds it, else on top (Pisarchyk & Lee, Algorithm 3)
  first,  ///< the lowest gap that holds it (MiniMalloc's canonical placement)
};

struct options {
  std::uint64_t alignment = 1;  ///< every offset is a multiple of this (a power of two)
  /// Try every order x fit and keep the smallest arena. false: size order, best fit only.
  bool best_of_orders = true;
  /// Local-search work budget, counted in overlap pairs visited by the placement routine, so
  /// the result depends only on input and seed (never on the wall clock). 0 disables the
  /// search. The default costs well under a second on a few hundred buffers and shrinks the
  /// iteration count on large inputs.
  std::uint64_t search_work = 60'000'000;
  /// Above this many buffers the planner tries the size order with both fits and skips the
  /// search: large graphs are near the bound already (greedy by size is within 0-2 % on real
  /// DNN graphs) and time matters more there.
  std::size_t search_max_buffers = 10'000;
  // Instances whose overlapping pairs exceed max(512 n, 2^23) (dense ones: thousands of buffers
  // live at once) are planned by a best-fit sweep in time order ("sweep/best-fit": O(n log n)
  // time, O(n) memory, optimal when every buffer is live at once) instead of the greedy orders,
  // whose neighbour lists would take memory proportional to the pairs.
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
};

struct plan {
  std::vector<std::uint64_t> offsets;  ///< by input index
  std::uint64_t arena_size = 0;        ///< max(offset + size)
  std::string method;                  ///< which order/fit won, "+search" if local search improved it
  std::uint64_t greedy_arena_size = 0; ///< the best greedy result before the search
  std::uint64_t search_iterations = 0;
};

/// Result of the independent checker.
struct check_report {
  bool valid = false;
  std::uint64_t lower_bound = 0;  ///< peak live bytes, recomputed by the checker
  std::uint64_t arena_size = 0;   ///< max(offset + size) of the checked plan
  std::uint64_t no_reuse = 0;     ///< sum of sizes (every buffer in its own place)
  std::string error;              ///< the first violation found, naming the buffer ids
};

/// Rejects empty lifetimes, zero sizes, negative steps, a non power-of-two alignment and sums
/// that overflow 64 bits. `what` (optional) says which buffer is wrong.
NPURT_DECL std::error_code validate(const std::vector<buffer>& buffers, std::uint64_t alignment,
                                    std::string* what = nullptr);

/// Plans the buffers. Deterministic: same input, options and seed give the same plan.
NPURT_DECL plan make_plan(const std::vector<buffer>& buffers, const options& opts, std::error_code& ec);
NPURT_DECL plan make_plan(const std::vector<buffer>& buffers, const options& opts = {});

/// One greedy pass in a given order and fit (the building block, exposed for benchmarks).
NPURT_DECL plan greedy_plan(const std::vector<buffer>& buffers, order o, fit f, std::uint64_t alignment = 1);

/// Peak live bytes: no plan can use a smaller arena. A buffer with an empty lifetime (upper <=
/// lower) is never live. Any sizes up to 2^64 - 1 are accepted; if
/// the bytes live at one step exceed 2^64 - 1 (no plan exists), ec is errc::size_overflow and
/// the result 0. The throwing form raises npurt::caller_error instead.
NPURT_DECL std::uint64_t lower_bound(const std::vector<buffer>& buffers, std::error_code& ec);
NPURT_DECL std::uint64_t lower_bound(const std::vector<buffer>& buffers);
/// Sum of sizes: the arena without any reuse. errc::size_overflow past 2^64 - 1.
NPURT_DECL std::uint64_t no_reuse_size(const std::vector<buffer>& buffers, std::error_code& ec);
NPURT_DECL std::uint64_t no_reuse_size(const std::vector<buffer>& buffers);

/// A CSV table in MiniMalloc's format: `id,lower,upper,size` and, in plans, `offset`.
struct table {
  std::vector<buffer> buffers;
  std::vector<std::uint64_t> offsets;  ///< filled when the file has an offset column
  bool has_offsets = false;
};

/// Verifies a plan given as offsets by input index: one offset per buffer, each aligned, no
/// offset + size past 2^64 - 1, no two buffers that are live at a common step overlapping in
/// memory. Independent of the planner's code. O(n log n) time, O(n) memory.
NPURT_DECL check_report check(const std::vector<buffer>& buffers, const std::vector<std::uint64_t>& offsets,
                              std::uint64_t alignment = 1);
/// Verifies a plan read from a file against the input it claims to plan: every plan row must be
/// an input buffer with the same id, lifetime and size, and every input buffer must have exactly
/// one row (a plan with missing, extra, repeated or changed rows, or with no rows, is invalid),
/// then the offsets are checked as above. Rows may come in any order.
NPURT_DECL check_report check(const std::vector<buffer>& input, const table& plan, std::uint64_t alignment = 1);

/// Reads a table. Columns are found by name in the header (any order, extra columns ignored);
/// blank lines are skipped; lines longer than 64 KiB are an error, and messages quote at most a
/// short prefix of a bad field. On error, ec is errc::parse_error (or invalid_argument for a
/// well-formed but impossible buffer) and `message` starts with "line N:".
NPURT_DECL table read_csv(std::istream& in, std::error_code& ec, std::string& message);
/// Throwing form: npurt::caller_error whose what() names the line.
NPURT_DECL table read_csv(std::istream& in);
/// Reads a file; messages start with "PATH:line N:". A missing file, or one that cannot be read
/// (a directory), is errc::invalid_argument.
NPURT_DECL table read_csv_file(const std::string& path, std::error_code& ec, std::string& message);
NPURT_DECL table read_csv_file(const std::string& path);

/// Writes `id,lower,upper,size` and, if offsets is given, `,offset`. Write errors show in the
/// stream's state (callers check it, and close files explicitly).
NPURT_DECL void write_csv(std::ostream& out, const std::vector<buffer>& buffers,
                          const std::vector<std::uint64_t>* offsets = nullptr);

}  // namespace npurt::memplan

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/memplan.ipp>
#endif
