#pragma once
// A layer whose output features (its last output dimension) are split over a ShardGroup: Megatron's
// column-parallel linear layer. Shard k holds the weights of features [k * f / n, (k + 1) * f / n)
// in an `inner` layer of the unsharded kind with f / n features: Dense (kernel (in, f / n)),
// Conv2D by output channels (kernel (kh, kw, cin, f / n)), Embedding by columns (table
// (vocabulary, f / n)).
//
// With gather_output the shards' pre-activations are all-gathered into the whole output and the
// unsharded layer's activation is applied to it (so softmax over the features is the unsharded
// one); the inner layer is then linear. Without it the output stays split — only valid when the
// layers up to a row-parallel Dense are element-wise (Megatron's f/g pairing: no gather, the
// row-parallel layer sums its partial products); the inner layer then applies the activation,
// which must be element-wise.
//
// Backward: each shard's input gradient is a partial sum over its features (Dense, Conv2D), summed
// over the group so every shard continues with the whole input gradient. An Embedding has none.
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

class ColumnParallel : public Layer {
 public:
  // `inner`: unbuilt, named as the unsharded layer (its weights keep the unsharded names), linear
  // when gather_output. `activation`: applied after the gather (Linear without gather_output).
  // `group` must outlive the layer and its clones.
  ColumnParallel(std::unique_ptr<Layer> inner, ShardGroup* group, bool gather_output, Activation activation);

  std::string class_name() const override { return "ColumnParallel" + inner_->class_name(); }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override;
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  // This shard's share: the sum over the group is the unsharded layer's penalty.
  double regularization_loss() const override { return inner_->regularization_loss(); }
  void add_regularization_gradients() override { inner_->add_regularization_gradients(); }
  std::unique_ptr<Layer> clone() const override;
  // The gather and the slicing are device-generic; the inner layer decides.
  bool has_cuda_kernels() const override { return inner_->has_cuda_kernels(); }
  Json config() const override { return inner_->config(); }

  bool gathers_output() const { return gather_; }
  Layer& inner() { return *inner_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  // From d(loss)/d(whole pre-activation): this shard's piece through the inner layer.
  Tensor backward_split(const Tensor& dz_whole, bool need_input_grad);

  std::unique_ptr<Layer> inner_;
  ShardGroup* group_;
  bool gather_;
  Activation activation_;
  // Per call: the gathered blocks, the whole pre-activation and output, the activation gradient
  // and this shard's piece of it.
  Tensor blocks_, z_, y_, dz_, dz_piece_;
};

}  // namespace mdtrain
