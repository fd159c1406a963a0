// npurt/models/resnet50.hpp — ResNet-50 v1.5 (torchvision layout, 224x224) as kernel descriptors.
//
// The layer table is reference §5: a 7x7/2 stem and max-pool, four stages of 3, 4, 6, 3
// bottleneck blocks (1x1 reduce, 3x3 with the stride in the first block of stages 3-5, 1x1
// expand, a 1x1 projection shortcut in each stage's first block), global average pooling and a
// 2048 -> 1000 FC: 53 convolutions, 25,557,032 parameters, 4.089 G forward MACs per image.
//
// training_step() is one step of data-parallel training on one device as the kernels a framework
// launches for it, timing-only (tensors without data): the forward pass (conv, batchnorm in
// training mode, ReLU, the residual adds, pooling, FC, softmax), the backward pass in reverse
// (each conv as conv2d_backward_data + conv2d_backward_weight, batchnorm_backward, ReLU's
// gradient as a multiply by the mask, pooling gradients, the gradient adds of the shortcuts) and
// one SGD-with-momentum update per parameter tensor on FP32 master weights. Activations and
// convolution weights are in the compute dtype (FP16 for mixed precision).
//
// tensors() and accesses() say what the step's memory holds, which the descriptors cannot
// (their data is null and in-place ops reuse one descriptor): every tensor a framework would
// allocate for the step, and which of them each kernel reads and writes. They follow torchvision
// and PyTorch autograd: ReLU and the residual add are in place (the block's bn3 output carries
// the sum and relu3's output), batchnorm writes a new tensor and saves its input, batch mean and
// inverse std, log-softmax writes a new tensor, a gradient is a new tensor per backward kernel
// (an identity shortcut passes its gradient through), and parameters, momentum, the compute-dtype
// weight copies and BN running statistics outlive the step. memory_trace.hpp turns this into an
// allocation trace.
#pragma once

#include <npurt/kernel.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace npurt::models {

/// One convolution of the network.
struct conv_layer {
  std::string name;       // "layer3.0.conv2", "layer1.0.downsample.0", "conv1"
  std::int64_t cin = 0, cout = 0, kernel = 0, stride = 1, pad = 0, h_in = 0, h_out = 0;
  [[nodiscard]] std::uint64_t params() const noexcept {
    return static_cast<std::uint64_t>(cout * cin * kernel * kernel);
  }
  /// Forward MACs per image.
  [[nodiscard]] std::uint64_t macs() const noexcept {
    return static_cast<std::uint64_t>(h_out * h_out * cout * cin * kernel * kernel);
  }
};

/// Which part of the step a kernel belongs to.
enum class step_phase : std::uint8_t { forward, backward, update };

/// What a tensor of the training step holds.
enum class tensor_role : std::uint8_t {
  input,            ///< the batch's images and labels, copied in before the step
  master_weight,    ///< an FP32 parameter the optimizer updates (BN's gamma and beta are read as is)
  compute_weight,   ///< the compute-dtype copy of a conv or FC weight (mixed precision only)
  optimizer_state,  ///< a momentum buffer
  running_stat,     ///< a BN running mean or variance (a module buffer)
  activation,       ///< a forward output
  saved_stat,       ///< a BN batch mean or inverse std, saved for the backward pass
  activation_grad,  ///< the gradient of an activation
  weight_grad,      ///< the gradient of a parameter
};

/// True for the tensors that live across steps rather than within one.
constexpr bool is_persistent(tensor_role r) noexcept {
  return r == tensor_role::master_weight || r == tensor_role::compute_weight || r == tensor_role::optimizer_state ||
         r == tensor_role::running_stat;
}

/// One tensor of the training step.
struct step_tensor {
  std::string name;  // "layer1.0.conv1.out", "layer1.0.conv1.weight.grad", "fc.weight.f16"
  npurt::shape shape;
  dtype type = dtype::f32;
  tensor_role role = tensor_role::activation;
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return static_cast<std::uint64_t>(shape.elements()) * size_of(type);
  }
};

/// The tensors one kernel reads and writes, as indices into resnet50::tensors().
struct tensor_access {
  std::vector<std::uint32_t> reads, writes;
};

class resnet50 {
 public:
  /// The model at a batch size, computing in `compute` (activations, conv weights). A batch below
  /// 1 is npurt::caller_error (errc::invalid_argument); one whose tensors do not fit in memory,
  /// errc::size_overflow.
  explicit resnet50(std::int64_t batch = 256, dtype compute = dtype::f16);
  resnet50(const resnet50&) = delete;  // kernel names point into this object
  resnet50& operator=(const resnet50&) = delete;

  [[nodiscard]] std::int64_t batch() const noexcept { return batch_; }
  /// The 53 convolutions in forward order.
  [[nodiscard]] const std::vector<conv_layer>& convs() const noexcept { return convs_; }
  /// Conv weights + BN gamma/beta + FC weight and bias.
  [[nodiscard]] std::uint64_t parameter_count() const noexcept;
  /// Forward multiply-accumulates per image: the convolutions and the FC.
  [[nodiscard]] std::uint64_t forward_macs() const noexcept;
  /// Parameter tensors (161: 53 conv weights, 53 BN gammas and betas, FC weight and bias).
  [[nodiscard]] std::size_t parameter_tensors() const noexcept { return param_sizes_.size(); }

  /// The kernels of one training step, in launch order (names live as long as this object).
  [[nodiscard]] const std::vector<kernel_desc>& training_step() const noexcept { return step_; }
  /// training_step() as shared descriptors, one per kernel, built once: launching these on many
  /// devices and steps queues references instead of copies (the same tasks, times and traces).
  [[nodiscard]] const std::vector<shared_kernel>& shared_training_step() const noexcept { return shared_step_; }
  /// The phase of each kernel of training_step().
  [[nodiscard]] const std::vector<step_phase>& phases() const noexcept { return phases_; }
  /// The forward pass alone (the first kernels of training_step()).
  [[nodiscard]] std::size_t forward_kernels() const noexcept { return forward_count_; }
  /// The optimizer's first kernel in training_step() (its size if there is none): where a
  /// data-parallel step all-reduces its gradients.
  [[nodiscard]] std::size_t first_update_kernel() const noexcept {
    return static_cast<std::size_t>(std::find(phases_.begin(), phases_.end(), step_phase::update) - phases_.begin());
  }

  /// Every tensor the step touches (see the file comment for the conventions).
  [[nodiscard]] const std::vector<step_tensor>& tensors() const noexcept { return tensors_; }
  /// The tensors each kernel of training_step() reads and writes, by kernel index.
  [[nodiscard]] const std::vector<tensor_access>& accesses() const noexcept { return accesses_; }

 private:
  std::string_view intern(std::string s);
  void build();

  std::int64_t batch_;
  dtype compute_;
  std::vector<conv_layer> convs_;
  std::vector<std::int64_t> param_sizes_;
  std::vector<kernel_desc> step_;
  std::vector<shared_kernel> shared_step_;
  std::vector<step_phase> phases_;
  std::size_t forward_count_ = 0;
  std::deque<std::string> names_;
  std::vector<step_tensor> tensors_;
  std::vector<tensor_access> accesses_;
};

}  // namespace npurt::models
