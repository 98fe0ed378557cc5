#pragma once
// keras.layers.Dense with its input features split over a ShardGroup: Megatron's row-parallel
// linear layer. Shard k holds kernel rows [k * in / n, (k + 1) * in / n) (kernel (in / n, units));
// its product with its piece of the input is a partial sum, summed over the group, and then the
// bias (replicated, whole) is added once and the activation applied, as the unsharded layer does.
//
// Its input is either already split (the output of a column-parallel layer through element-wise
// layers: Megatron's f/g pairing, nothing gathered) or whole (each shard takes its piece). Backward
// gives each shard its piece of the input gradient; a whole input gets the pieces all-gathered.
#include <memory>
#include <string>

#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"

namespace mdtrain {

class RowParallelDense : public Layer {
 public:
  // `dense_config`: the unsharded Dense's Keras config (units, activation, use_bias, initializers,
  // regularizers). `group` must outlive the layer and its clones.
  RowParallelDense(const Json& dense_config, ShardGroup* group, bool input_split);

  std::string class_name() const override { return "RowParallelDense"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  // This shard's share: its kernel rows' penalty, plus the (replicated) bias penalty on shard 0
  // only, so the sum over the group is the unsharded layer's.
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  bool has_cuda_kernels() const override { return true; }
  Json config() const override { return config_; }

  bool input_split() const { return input_split_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor backward_preactivation(const Tensor& dz, bool need_input_grad);

  Json config_;
  ShardGroup* group_;
  bool input_split_;
  std::int64_t units_ = 0;
  bool use_bias_ = true;
  Activation activation_;
  std::unique_ptr<Dense> inner_;  // the kernel rows, linear and without bias
  Parameter bias_;
  std::shared_ptr<Regularizer> bias_regularizer_;
  // Per call: this shard's piece of a whole input, the summed pre-activation (+ bias), the output,
  // the activation gradient, the gathered input-gradient pieces and the whole input gradient.
  Tensor x_piece_, z_, y_, dz_, blocks_, dx_;
  Shape last_output_shape_;
};

}  // namespace mdtrain
