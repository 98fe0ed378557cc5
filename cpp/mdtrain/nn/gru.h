#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.GRU with reset_after=True (Keras 3's default; False is refused for now)
// (nn/recurrent_layer.h): kernel (features, 3u), recurrent_kernel (u, 3u), bias (2, 3u) (row 0 the
// input bias, row 1 the recurrent one), gates in Keras's order z, r, h; hh = tanh(x_h + r * (h_prev
// @ U_h + b_h)), h = z * h_prev + (1 - z) * hh. activation tanh, recurrent_activation sigmoid.
class GRU : public RecurrentLayer {
 public:
  using Options = RecurrentLayer::Options;
  GRU(std::string name, Options options);

  std::string class_name() const override { return "GRU"; }
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  Shape bias_shape() const override { return {2, 3 * options_.units}; }
  void step_forward(std::int64_t t) override;
  void step_backward(std::int64_t t) override;
  void ensure_cell_buffers(std::int64_t rows) override;

 private:
  // Per step (time-major): the recurrent projections (bias included), the activated gates; the
  // gradients of both projections.
  Tensor hz_, gates_buf_, dx_gates_, dh_gates_;
};

}  // namespace mdtrain
