#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.ActivityRegularization(l1=0.0, l2=0.0): its input unchanged, and a loss term
// (l1 * sum |x| + l2 * sum x^2) / (the batch's rows) added to the loss of every fit and evaluate
// step, as Keras 3 adds an activity regularizer's loss (divided by the output's batch size).
// Each replica's forward computes the penalty of its slice (activity_loss); the executor adds the
// slices' penalties to the loss sum it divides by the global batch's rows, and backward adds the
// penalty's gradient divided by those rows (ForwardContext::global_rows) to dy, so several
// replicas train as one device. A training forward that gives no global_rows (a custom loop) is
// refused, as the penalty would be lost.
class ActivityRegularization : public Layer {
 public:
  ActivityRegularization(std::string name, double l1, double l2);
  std::string class_name() const override { return "ActivityRegularization"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  bool adds_activity_loss() const override { return l1_ > 0.0 || l2_ > 0.0; }
  double activity_loss() const override { return penalty_; }
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&dx_}); }
  Json config() const override;  // Layer's fields, "l1" and "l2"
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  double l1_, l2_;
  double penalty_ = 0.0;  // the last forward's l1 sum|x| + l2 sum x^2
  double scale_ = 0.0;    // 1 / the global batch's rows of the last training forward
  Tensor x_;              // the last forward's input (its producer keeps it until then)
  Tensor dx_;
};

}  // namespace mdtrain
