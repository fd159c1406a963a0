// The compiled form of a graph: what compile() decided and run() executes. Private to the
// graph library.
#pragma once

#include <npurt/graph/session.hpp>
#include <npurt/stream_graph.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace npurt {

/// Refuses a max_parallelism or pipeline_stages that cannot be meant (a pipeline's stages take a
/// stream each beside the copy-in stream), naming only the field that is wrong and its range.
inline void check_schedule_limits(std::string_view call, int max_parallelism, int pipeline_stages) {
  const bool par_ok = max_parallelism >= 1 && static_cast<std::size_t>(max_parallelism) <= session::max_streams;
  const bool stages_ok = pipeline_stages >= 1 && static_cast<std::size_t>(pipeline_stages) < session::max_streams;
  if (par_ok && stages_ok) [[likely]]
    return;
  std::string what = std::string(call) + ": ";
  if (!par_ok)
    what += "max_parallelism " + std::to_string(max_parallelism) + " is out of range (1.." +
            std::to_string(session::max_streams) + ")";
  if (!par_ok && !stages_ok) what += ", ";
  if (!stages_ok)
    what += "pipeline_stages " + std::to_string(pipeline_stages) + " is out of range (1.." +
            std::to_string(session::max_streams - 1) + ")";
  throw_error(make_error_code(errc::invalid_argument), what);
}

/// One tensor of the compiled graph.
struct cvalue {
  std::string name;
  npurt::shape shape{};
  npurt::dtype type = dtype::f32;
  value_kind kind = value_kind::activation;
  int producer = -1;  ///< step index (activations)
  int root = -1;      ///< the value whose memory this one uses (itself unless a view or in place)
  bool output = false;
  const tensor* host = nullptr;  ///< constants: their value (null or without data: timing-only)
  [[nodiscard]] std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(shape.elements()) * size_of(type);
  }
};

/// One operator that launches work.
struct cstep {
  const node* n = nullptr;
  std::vector<int> in, out;  ///< value indices (-1 for an omitted optional input)
  bool relu_after = false;   ///< a fused Relu
  int residual = -1;         ///< a fused residual Add's other operand (also the last of `in`)
  int relu_mask = -1;        ///< ConvGrad: a fused ReluGrad's mask (also the last of `in`)
  bool in_place = false;
  std::uint32_t stream = 0;
  int stage = 0;             ///< pipeline stage
  std::set<int> waits;       ///< steps on other streams this one waits for
  bool concurrent = false;   ///< may run at the same time as a step of another stream
  std::uint32_t peers = 0;   ///< other streams with a step it may overlap
  std::uint32_t block_dim = 0;  ///< cores its kernels use (0: all)
  std::string kernel_name;
  /// A fused elementwise chain (empty otherwise): its operators in order, the last one being n,
  /// and each one's operands as indices into `in` or `chain_value` (the previous one's result).
  std::vector<const node*> chain;
  std::vector<std::array<int, 2>> chain_operands;
  static constexpr int chain_value = -1;
};

/// An output all-reduced inside the run (compile_options::all_reduce).
struct creduction {
  std::size_t output = 0;    ///< index into outputs
  int value = -1;            ///< the value reduced: the output, or the compute-type value it is a Cast of
  int after = -1;            ///< queued after this step, the last to write the output's memory
  std::vector<int> readers;  ///< steps that read the reduced value: each waits for the reduction
};

/// A root's place in the arena and who touches it.
struct root_info {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  int lower = 0, upper = 0;  ///< live on steps [lower, upper)
  std::vector<std::pair<int, bool>> accesses;  ///< (step, writes)
};

/// How compile's rewrites derived the constants of the compiled graph from the user's, so that
/// session::set_constant can derive a new value the way a fresh compile would.
struct refit_log {
  struct derivation {
    std::string source;           ///< the user's constant
    std::optional<double> scale;  ///< multiplied by it (Gemm's beta folded into a constant C)
  };
  /// By constant of the rewritten graph; its dtype says whether the value is converted to it.
  std::map<std::string, derivation, std::less<>> derived;
  /// By user constant: the user's shape and dtype.
  std::map<std::string, std::pair<npurt::shape, npurt::dtype>, std::less<>> sources;
  /// By user constant: why a rewrite folded its value into something else (no refit possible).
  std::map<std::string, std::string, std::less<>> consumed;
  /// The user's constant a constant of the rewritten graph comes from (empty: none).
  [[nodiscard]] std::string source_of(std::string_view name) const {
    const auto at = derived.find(name);
    return at == derived.end() ? std::string() : at->second.source;
  }
};

struct compiled_graph::impl {
  session* owner = nullptr;
  graph g;  ///< the rewritten graph (casts inserted, BN folded); owns constants
  /// The user's operator each step of a chain computes part of, by node name (graph::origin of
  /// the graph compiled: the rewrites keep node names, not origins).
  std::map<std::string, chain_origin, std::less<>> origins;
  std::vector<cvalue> values;
  std::vector<cstep> steps;  ///< in execution order
  std::vector<int> inputs, outputs;  ///< value indices in the graph's order
  std::vector<bool> output_on_device;  ///< by output: returned as a device tensor
  std::vector<creduction> reductions;  ///< in the order a run queues them
  std::optional<output_all_reduce> all_reduce;
  std::vector<root_info> roots;      ///< by value index (meaningful for activation roots)
  compile_report rep;
  int stages = 1;
  std::uint32_t streams = 1;
  std::uint32_t copy_stream = 0;   ///< where inputs are copied in
  std::uint32_t final_stream = 0;  ///< where streams join and outputs are copied out
  // Device memory (functional runs): constants by value index, input and output staging.
  std::vector<void*> const_ptr;
  std::vector<void*> arenas;  ///< one per pipeline slot
  std::vector<std::vector<void*>> input_ptr, output_ptr;  ///< [slot][i]
  std::uint64_t arena_bytes = 0;
  std::vector<std::pair<void*, std::size_t>> held;  ///< everything acquired from the session
  /// Zeros a timing-only feed is copied from: queued copies read it when they run, so it is sized
  /// once, for the largest input, and never moves while the graph lives.
  std::vector<std::byte> staging;
  /// How the constants of `g` derive from the user's (session::set_constant).
  refit_log refit;
  /// The end of the latest run or set_constant queued. Runs of one compiled graph share its
  /// arenas and input slots, so one queued while another is in flight (async_run) starts after
  /// it; a refit's copy starts after the runs before it and the runs after it start after it.
  event last_run;
  /// compile_options::capture_graph: the operators of a run, captured by the first run of each
  /// slot (and again after a device reset took the graph), launched by every run of that slot:
  /// on the copy-in stream, or with overlap on the first compute stream.
  std::vector<stream_graph> run_graphs;

  ~impl();
};

}  // namespace npurt
