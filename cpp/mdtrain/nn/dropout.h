#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.Dropout: in training, zeroes each element with probability `rate` and scales the
// rest by 1/(1-rate); identity in inference. The mask depends on (seed, step, the element's
// position in the global batch), so it is the same whatever the replica count.
class Dropout : public Layer {
 public:
  Dropout(std::string name, double rate, std::uint64_t seed);
  std::string class_name() const override { return "Dropout"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::ElementwiseDropout; }
  std::int64_t held_activation_bytes() const override { return bytes_of({&mask_, &y_, &dx_}); }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  double rate_;
  std::uint64_t seed_;
  bool applied_ = false;  // whether the last forward dropped anything
  Tensor mask_, y_, dx_;
};

}  // namespace mdtrain
