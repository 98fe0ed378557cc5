#pragma once
#include <memory>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"
#include "mdtrain/nn/sequence_mask.h"

namespace mdtrain {

// keras.layers.Embedding: y[..., :] = embeddings[x[...], :]. Its input holds row numbers of the
// table (int32, int64, or floats holding whole numbers: a model's batch arrives in any of them),
// its output is (batch, *input_shape, output_dim) in the layer's dtype.
//
// Indices are not differentiable: the layer has no input gradient, so it must be a model's first
// layer (backward with need_input_grad refuses). The table's gradient is dense: zero, then each
// index's row of dy added in index order (deterministic, repeated indices accumulate).
//
// Every index is checked before anything is computed: a value that is not a whole number in
// [0, input_dim) is std::invalid_argument naming the layer, the value and its position.
class Embedding : public Layer, public MaskedLayer {
 public:
  struct Options {
    std::int64_t input_dim = 0;               // rows of the table (vocabulary size)
    std::int64_t output_dim = 0;              // columns (the embedding's size)
    Json embeddings_initializer = "uniform";  // Keras's "uniform": RandomUniform(-0.05, 0.05)
    Json embeddings_regularizer;              // null: none
    // Keras's mask_zero: index 0 is padding and later layers see a mask (inputs != 0, on inputs
    // (batch, timesteps); nn/sequence_mask.h). This layer's own output does not depend on it.
    bool mask_zero = false;
  };
  Embedding(std::string name, Options options);

  std::string class_name() const override { return "Embedding"; }
  // Its buffers follow the input's device and it calls only ops with CUDA kernels (ops/embedding.h).
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::Embedding; }
  std::unique_ptr<Layer> with_output_share(int shards, bool drop_activation) const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&rows_, &y_}); }
  Json config() const override;
  // Keras's config; missing fields take Keras's defaults. A non-null embeddings_constraint is
  // refused (mdtrain has no constraints); Keras 2's input_length is ignored.
  static std::unique_ptr<Layer> from_config(const Json& config);

  // Throws what forward would for these indices (x: (rows, *input_shape)), positions counted from
  // row `first_row`: a whole data set can be checked before training starts.
  void check_indices(const Tensor& x, std::int64_t first_row = 0);

  // mask_zero: the last forward's input shape, 1 where its index was not 0 (on CPU devices); else empty.
  Tensor output_mask() const override;
  bool output_masked(bool /*input_masked*/) const override { return options_.mask_zero; }

  const Options& options() const { return options_; }
  Parameter& embeddings() { return embeddings_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  void check_index_shape(const Tensor& x) const;
  // Fills rows_ from x, or throws naming the first bad index.
  void index_rows(const Tensor& x, std::int64_t first_row);

  Options options_;
  std::shared_ptr<Regularizer> regularizer_;  // null: none
  Parameter embeddings_;
  // Per-call state: the table rows of the last forward's indices, and its output.
  Tensor rows_, y_;
  Shape index_shape_;  // of the last forward's input
};

}  // namespace mdtrain
