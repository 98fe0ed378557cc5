#pragma once
// keras.layers.Embedding with its table's rows (the vocabulary) split over a ShardGroup (Megatron's
// VocabParallelEmbedding): shard k holds rows [k * V / n, (k + 1) * V / n). Each shard looks up the
// indices that fall in its rows and writes zeros for the others; the sum over the group is the
// unsharded lookup (one term is non-zero). Backward adds each of its indices' rows of dy into its
// table's gradient in index order, as the unsharded layer does, so its gradient is bitwise the
// unsharded gradient's rows. Indices are checked against the whole vocabulary.
#include <memory>
#include <string>

#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"

namespace mdtrain {

class VocabParallelEmbedding : public Layer {
 public:
  // `options`: the unsharded layer's. `group` must outlive the layer and its clones.
  VocabParallelEmbedding(std::string name, Embedding::Options options, ShardGroup* group);

  std::string class_name() const override { return "VocabParallelEmbedding"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  // This shard's share (its rows' penalty): the sum over the group is the unsharded layer's.
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  bool has_cuda_kernels() const override { return true; }
  Json config() const override;

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Embedding::Options options_;
  ShardGroup* group_;
  std::shared_ptr<Regularizer> regularizer_;
  Parameter table_;  // (V / n, output_dim)
  // Per call: the whole-vocabulary rows of the indices, this shard's rows (0 for indices it does
  // not hold), 1 on the rows of the indices it holds and 0 elsewhere, the output, and dy with the
  // other shards' rows zeroed. On the device of the input (host or GPU).
  Tensor rows_, local_rows_, keep_, y_, dy_held_;
};

}  // namespace mdtrain
