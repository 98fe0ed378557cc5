#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.Bidirectional around a recurrent layer: a forward copy ("forward_<name>") and one
// reading the sequence backwards ("backward_<name>", go_backwards flipped, or Keras's
// backward_layer); the backward output flipped back in time first when return_sequences (as
// Keras), then merged: "concat" (Keras's default, on the last axis), "sum", "mul" or "ave"
// (Keras's merge_mode=None, a list of two outputs, is refused: mdtrain layers have one output).
// Weights: the forward layer's, then the backward layer's, as Keras's get_weights(). With a mask
// and return_sequences, the outputs at masked steps are zeros (Keras's zero_output_for_mask).
// CPU only for now.
class Bidirectional : public Layer, public MaskedLayer {
 public:
  Bidirectional(std::string name, std::unique_ptr<RecurrentLayer> forward_layer,
                std::unique_ptr<RecurrentLayer> backward_layer, std::string merge_mode = "concat");
  void set_input_mask(const Tensor& mask) override;
  Tensor output_mask() const override { return forward_->output_mask(); }
  bool output_masked(bool input_masked) const override { return forward_->output_masked(input_masked); }

  std::string class_name() const override { return "Bidirectional"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override;
  Json config() const override;
  // {"layer": {"class_name": "LSTM", "config": ...}, "merge_mode": "concat", "backward_layer":
  // optional}; without backward_layer, the layer's config with go_backwards flipped.
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  std::unique_ptr<RecurrentLayer> forward_, backward_;
  std::string merge_mode_;
  Tensor mask_;  // the input's mask (empty: none)
  // yf_: the forward layer's last output; yb_: the backward one's, in forward time order.
  Tensor yf_, yb_, y_, dy_masked_, dy_forward_, dy_backward_, dy_aligned_, dx_;
};

}  // namespace mdtrain
