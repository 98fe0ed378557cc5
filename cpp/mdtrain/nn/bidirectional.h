#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.Bidirectional around a recurrent layer, merge_mode="concat" (Keras's default; the
// other modes are refused for now): a forward copy ("forward_<name>") and one reading the sequence
// backwards ("backward_<name>", go_backwards flipped); outputs concatenated on the last axis, the
// backward one flipped back in time first when return_sequences (as Keras). Weights: the forward
// layer's, then the backward layer's, as Keras's get_weights(). CPU only for now.
class Bidirectional : public Layer {
 public:
  Bidirectional(std::string name, std::unique_ptr<RecurrentLayer> forward_layer,
                std::unique_ptr<RecurrentLayer> backward_layer);

  std::string class_name() const override { return "Bidirectional"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // {"layer": {"class_name": "LSTM", "config": ...}, "merge_mode": "concat", "backward_layer":
  // optional}; without backward_layer, the layer's config with go_backwards flipped.
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  std::unique_ptr<RecurrentLayer> forward_, backward_;
  Tensor y_, dy_forward_, dy_backward_, dx_;
};

}  // namespace mdtrain
