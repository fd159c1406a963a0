// npurt/kernel.hpp — the kernel descriptor a launch carries: which operation, on which tensors,
// over how many AI cores. The device layer (sim/) computes its result and its cost.
#pragma once

#include <npurt/tensor.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace npurt {
namespace kernels {

/// A kernel that takes exactly `duration` of device time and computes nothing: the unit of
/// scheduling tests and overhead benchmarks. flops and bytes only feed the profiler.
struct fixed {
  picoseconds duration{0};
  std::uint64_t flops = 0;
  std::uint64_t bytes = 0;
};

constexpr std::string_view op_name(const fixed&) noexcept { return "kernel"; }

// The kernel library's operations (matmul, conv2d, ...) are declared in kernel_ops.hpp.

}  // namespace kernels
}  // namespace npurt

#include <npurt/kernel_ops.hpp>

namespace npurt {

/// Every operation a kernel_desc can carry.
using kernel_op = std::variant<kernels::fixed NPURT_KERNEL_OP_LIST>;

/// The name of the i-th tensor field of an operation, in declaration order ("x", "w", "y" of a
/// conv2d), for messages that name an operand; "?" past the last one.
constexpr std::string_view tensor_name(const kernel_op& op, std::size_t i) noexcept {
  constexpr std::string_view lists[] = {"",  // kernels::fixed
                                        "a b c bias residual",
                                        "x w y bias residual",
                                        "dy w dx relu_y",
                                        "x dy dw",
                                        "a b y",
                                        "x gamma beta running_mean running_var y saved_mean saved_invstd",
                                        "x dy gamma saved_mean saved_invstd dx dgamma dbeta",
                                        "x gamma beta y",
                                        "x y indices",
                                        "x dy dx",
                                        "x y",
                                        "x y",
                                        "x y",
                                        "x y",
                                        "param grad momentum_buffer",
                                        "a b c d e y",
                                        "x y",
                                        "x y",
                                        "data indices y",
                                        "x y",
                                        "x target weight y",
                                        "x y",
                                        "x y",
                                        "data indices y",
                                        "x y",
                                        "x grid y",
                                        "data indices updates y",
                                        "data indices updates y",
                                        "data indices y",
                                        "x values indices",
                                        "a b y",
                                        "cond x y out",
                                        "a b y",
                                        "x y",
                                        "x scale zero_point y",
                                        "x w r b sequence_lens y y_h y_c",
                                        "x y",
                                        "x sequence_lens y",
                                        "x y",
                                        "a b a_zero_point b_zero_point y",
                                        "x w x_zero_point w_zero_point y",
                                        "x window y",
                                        "x rois batch_indices y"};
  static_assert(std::size(lists) == std::variant_size_v<kernel_op>, "one name list per operation");
  std::string_view names = op.index() < std::size(lists) ? lists[op.index()] : std::string_view{};
  for (std::size_t k = 0; k < i; ++k) {
    const auto sp = names.find(' ');
    if (sp == std::string_view::npos) return "?";
    names.remove_prefix(sp + 1);
  }
  const auto sp = names.find(' ');
  names = names.substr(0, sp);
  return names.empty() ? std::string_view{"?"} : names;
}

/// One kernel launch. Cheap to copy when it carries no tensors. A plain value: copies may be
/// used from any thread; launching is a call on a stream, on the system's thread.
struct kernel_desc {
  kernel_op op{};
  /// Shown in traces. Only needs to live until the launch call returns: the runtime keeps its
  /// own copy of every name it is given.
  std::string_view name{};
  /// AI cores the kernel is spread over; 0 means all the cores of its pool (the cube cores for
  /// cube kernels and kernels::fixed, the vector cores for vector kernels on a part with separate
  /// ones, such as the 910B's 24 AIC and 48 AIV). More than the pool holds is refused at launch.
  std::uint32_t block_dim = 0;

  kernel_desc() = default;
  template <class Op>
    requires std::is_constructible_v<kernel_op, Op&&> && (!std::is_same_v<std::remove_cvref_t<Op>, kernel_desc>)
  kernel_desc(Op&& o, std::string_view n = {}, std::uint32_t blocks = 0)  // NOLINT: implicit on purpose
      : op(std::forward<Op>(o)), name(n), block_dim(blocks) {}

  /// The name to show: the given one, or the operation's.
  [[nodiscard]] std::string_view display_name() const noexcept {
    if (!name.empty()) return name;
    return std::visit([](const auto& o) -> std::string_view { return kernels::op_name(o); }, op);
  }
};

/// A kernel descriptor shared by many launches: a model builds it once per layer and launches it
/// on every device and every step. A launch of it references it (the queued task holds one
/// reference) instead of copying it, so a queued kernel costs its task record alone. Immutable:
/// every launch of it sees the same operation, shapes and name.
using shared_kernel = std::shared_ptr<const kernel_desc>;

/// A shared copy of `k`. Its name is copied with it only as a view: it must outlive the launches
/// (the runtime interns the name it shows at each launch).
inline shared_kernel make_shared_kernel(const kernel_desc& k) { return std::make_shared<const kernel_desc>(k); }

}  // namespace npurt
