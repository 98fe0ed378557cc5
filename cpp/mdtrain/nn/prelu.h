#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// keras.layers.PReLU: y = x for x > 0, alpha * x otherwise, with a trainable alpha of Keras's
// shape: the input shape without the batch, 1 on each of shared_axes (axes of the input counted
// with the batch axis, so 1 is the first feature axis). alpha_constraint is refused (mdtrain has
// no weight constraints). Replicated under tensor parallelism: its alpha is not sharded.
class PReLU : public Layer {
 public:
  struct Options {
    Json alpha_initializer = "zeros";
    Json alpha_regularizer;  // null: none
    std::vector<int> shared_axes;
    bool shared_axes_given = false;  // false: Keras's None
  };
  PReLU(std::string name, Options options);

  std::string class_name() const override { return "PReLU"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  // Keras's config; missing fields take Keras's defaults. A non-null alpha_constraint is refused.
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& alpha() { return alpha_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Shape alpha_shape(const Shape& input_shape) const;
  Options options_;
  std::unique_ptr<Regularizer> regularizer_;
  Parameter alpha_;
  Tensor x_, y_, dx_;
};

}  // namespace mdtrain
