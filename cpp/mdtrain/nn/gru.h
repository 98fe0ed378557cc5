#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.GRU (nn/recurrent_layer.h): kernel (features, 3u), recurrent_kernel (u, 3u), gates
// in Keras's order z, r, h; h = z * h_prev + (1 - z) * hh. activation tanh, recurrent_activation
// sigmoid. reset_after=True (Keras 3's default): bias (2, 3u) (row 0 the input bias, row 1 the
// recurrent one), hh = tanh(x_h + r * (h_prev @ U_h + b_h)). reset_after=False: bias (3u,), hh =
// tanh(x_h + b_h + (r * h_prev) @ U_h): the h part of the recurrent GEMM waits for r, so each step
// runs two GEMMs (U's z, r columns and its h columns, copied out contiguous at each forward).
class GRU : public RecurrentLayer {
 public:
  using Options = RecurrentLayer::Options;
  GRU(std::string name, Options options);

  std::string class_name() const override { return "GRU"; }
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override {
    return RecurrentLayer::held_activation_bytes() +
           bytes_of({&hz_, &gates_buf_, &dx_gates_, &dh_gates_, &rh_, &drh_, &dh_through_});
  }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  Shape bias_shape() const override {
    return options_.reset_after ? Shape{2, 3 * options_.units} : Shape{3 * options_.units};
  }
  void add_cell_weight_gradients() override;
  void step_forward(std::int64_t t) override;
  void step_backward(std::int64_t t) override;
  void ensure_cell_buffers(std::int64_t rows) override;

 private:
  // Per step (time-major): the recurrent projections (bias included), the activated gates; the
  // gradients of both projections.
  Tensor hz_, gates_buf_, dx_gates_, dh_gates_;
  // reset_after=false: U's z, r columns (u, 2u) and h columns (u, u); r * h_prev of every step
  // (dropout applied); scratch for dL/d(r * h_prev) and dL/dh_prev through it.
  void step_forward_reset_before(std::int64_t t);
  void step_backward_reset_before(std::int64_t t);
  Tensor u_zr_, u_h_, rh_, drh_, dh_through_;
};

}  // namespace mdtrain
