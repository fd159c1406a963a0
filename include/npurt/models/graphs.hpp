// npurt/models/graphs.hpp — models as npurt graphs (ONNX operators): a small MLP, ResNet-50 v1.5
// (the layer table of models/resnet50.hpp), a Transformer encoder block and BERT-Large.
//
// Each builder takes `with_data`: true fills every weight with deterministic pseudo-random
// values (seeded; functional runs at small sizes), false makes them timing-only (full-size
// simulation without data). Weights are scaled by 1/sqrt(fan-in) so activations stay O(1).
//
// Sizes are checked before anything is built: a batch, width, sequence, hidden size, head count
// or vocabulary below 1, a hidden size that is not a multiple of the heads, or a negative layer
// count is npurt::caller_error (errc::invalid_argument); a model whose tensors do not fit in
// memory is errc::size_overflow.
//
// bert_training_step() is one BERT-Large training step as the kernels a framework launches
// (forward, backward, optimizer update), timing-only, for the fidelity comparison with
// MindSpore's published throughput.
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/kernel.hpp>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace npurt::models {

/// x[batch, widths[0]] -> Gemm+Relu ... -> Gemm -> Softmax; output "prob".
[[nodiscard]] graph mlp(std::int64_t batch, const std::vector<std::int64_t>& widths, bool with_data = true,
                        std::uint64_t seed = 1);

/// One SGD training step of the same MLP as a graph: forward (Gemm + Relu ... Gemm), the mean
/// squared error against input "target" (output "loss", shape [1, 1]), backward (Gemm with
/// transA/transB for the weight and input gradients, ReduceSum for the bias gradients, ReluGrad)
/// and an SGDUpdate per parameter. Inputs "x" [batch, widths[0]] and "target" [batch,
/// widths.back()]; outputs "loss" and "fc<i>.weight.next", "fc<i>.bias.next" (the updated
/// parameters, same names as mlp()'s weights plus ".next"); "fc<i>.weight.grad" etc. are the
/// gradients' tensor names.
[[nodiscard]] graph mlp_training_step(std::int64_t batch, const std::vector<std::int64_t>& widths, double lr = 0.1,
                                      bool with_data = true, std::uint64_t seed = 1);

/// ResNet-50 v1.5 inference (Conv, BatchNormalization, Relu, MaxPool, Add, GlobalAveragePool,
/// Flatten, Gemm); input "input" [batch, 3, image, image], output "logits" [batch, 1000].
[[nodiscard]] graph resnet50_graph(std::int64_t batch, std::int64_t image = 224, bool with_data = false,
                                   std::uint64_t seed = 1, dtype type = dtype::f32);

/// A bottleneck ResNet (v1.5: the stride on each stage's first 3x3 convolution). The defaults are
/// ResNet-50 at 224x224; smaller ones (fewer blocks, a narrower base width, fewer classes, a
/// smaller image) compute real results quickly.
struct resnet_config {
  std::int64_t batch = 32, image = 224;
  std::vector<std::int64_t> blocks{3, 4, 6, 3};  ///< bottleneck blocks per stage
  std::int64_t width = 64;                        ///< the stem's channels; stage s's 3x3 has width * 2^s
  std::int64_t classes = 1000;
  double lr = 0.1;
  double momentum = 0.9;  ///< BatchNormInternal's (ONNX's: the weight of the old running statistic)
};

/// One SGD training step of a bottleneck ResNet as a graph, with torchvision's parameter names
/// (as resnet50_graph's): forward with batch statistics (BatchNormInternal), softmax
/// cross-entropy against input "labels" (one-hot, [batch, classes]; output "loss" [1, 1], the
/// batch mean), backward (ReluGrad, BatchNormalizationGrad, ConvGrad, MaxPoolGrad,
/// GlobalAveragePoolGrad, Gemm and ReduceSum for the classifier, Add where a block's input
/// feeds both paths; the stem's ConvGrad leaves the image's gradient out) and an SGDUpdate per
/// parameter. Input "input" [batch, 3, image, image];
/// outputs "loss", "<param>.next" for every parameter and the BatchNorms' updated
/// "<bn>.running_mean.next" and "<bn>.running_var.next". The gradients are "<param>.grad";
/// `gradients`, when given, receives their names in the order backward produces them (the
/// classifier's first), the order compile_options::all_reduce wants (which reduces outputs: mark
/// each with graph::set_output). Sizes are checked as the
/// other builders check them; an image too small for the stem, the pooling and the strided
/// stages (at least 32) is invalid_argument.
[[nodiscard]] graph resnet_training_step(const resnet_config& c, bool with_data = false, std::uint64_t seed = 1,
                                         std::vector<std::string>* gradients = nullptr);

struct transformer_config {
  std::int64_t batch = 1, seq = 128, hidden = 1024, heads = 16, ffn = 4096;
  dtype type = dtype::f32;
};

/// Adds one post-LayerNorm encoder block (BERT's) reading `x` [batch, seq, hidden]; returns its
/// output's name. Weights are named "<prefix>.*".
std::string add_encoder_block(graph& g, const std::string& x, const transformer_config& c, const std::string& prefix,
                              bool with_data, std::uint64_t seed);
/// One encoder block as a graph: input "x", output "y".
[[nodiscard]] graph transformer_encoder(const transformer_config& c, bool with_data = true, std::uint64_t seed = 1);
/// BERT-Large's encoder (24 blocks, hidden 1024, 16 heads, FFN 4096) over embedded input "x"
/// [batch, seq, 1024] after the embedding LayerNorm; output "y".
[[nodiscard]] graph bert_large(std::int64_t batch, std::int64_t seq = 128, bool with_data = false, int layers = 24,
                               dtype type = dtype::f32);

/// A BERT-style masked-language-model training step's sizes: the encoder's (transformer_config's,
/// in float32), the vocabulary, the block count and SGD's learning rate. The defaults are
/// BERT-Large's; small ones compute real results quickly.
struct bert_step_config {
  std::int64_t batch = 1, seq = 128, hidden = 1024, heads = 16, ffn = 4096, vocab = 30522;
  int layers = 24;
  double lr = 1e-4;
  /// Positions predicted per sequence (BERT's masked language model: 20 of 128 in its
  /// pre-training), fed as "masked_lm_positions" [batch, masked] int64; 0 predicts every position.
  std::int64_t masked = 0;
  /// Token types (BERT's segment embeddings: 2), fed as "token_type_ids" [batch, seq] int64; 0
  /// leaves them out.
  std::int64_t type_vocab = 0;
};

/// One SGD training step of a BERT-style encoder as a graph, with Hugging Face's parameter names:
/// forward (Gather of "input_ids" [batch, seq] int64 from the word embeddings, plus the position
/// embeddings and, with `type_vocab`, the token type embeddings of "token_type_ids",
/// LayerNormalization; per block post-LayerNorm self-attention through MatMul and Softmax and a
/// GELU (tanh form) feed-forward; a classifier over the vocabulary at every position, or with
/// `masked` only at the "masked_lm_positions" of each sequence, gathered by GatherND), softmax
/// cross-entropy against one-hot "labels" [rows, vocab], rows = batch·masked (batch·seq without
/// masking), in position order (output "loss" [1, 1], the mean over the rows), backward (Gemm and
/// MatMul pairs, SoftmaxGrad, GeluGrad, LayerNormalizationGrad, the gathered rows' gradient
/// scattered back by ScatterND, the embeddings' gradients as OneHot(ids)ᵀ · dE) and an SGDUpdate
/// per parameter ("<param>.next"). `gradients`, when given, receives the gradients' names
/// ("<param>.grad") in the order backward produces them. Sizes are checked as
/// transformer_encoder's; a layer count below 1, a negative type_vocab and a masked count outside
/// [0, seq] are invalid_argument. A position outside [-seq, seq) fails the run naming "mlm.gather".
[[nodiscard]] graph bert_training_step_graph(const bert_step_config& c, bool with_data = false, std::uint64_t seed = 1,
                                             std::vector<std::string>* gradients = nullptr);

/// The kernels of one BERT-Large pre-training step (mixed precision: fp16 compute, fp32 master
/// weights), timing-only, in launch order. Names point into `names`.
[[nodiscard]] std::vector<kernel_desc> bert_training_step(std::int64_t batch, std::int64_t seq,
                                                          std::deque<std::string>& names, int layers = 24,
                                                          std::int64_t vocab = 21128);

}  // namespace npurt::models
