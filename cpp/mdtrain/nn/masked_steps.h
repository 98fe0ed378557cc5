#pragma once
// Keras's loss and metrics of an output that carries a mask (nn/sequence_mask.h): the masked time
// steps are left out. Keras applies the mask as a sample weight on the per-step losses
// (keras/src/losses/loss.py apply_mask): with `total` = batch x timesteps positions and `valid` =
// the kept ones, each kept step weighs total / valid and sum_over_batch_size divides by total, so
//
//   loss = sum over kept steps of loss(step) / valid        (0 when valid == 0: divide_no_nan)
//
// and a metric (MeanMetricWrapper, mask as weight) is the mean over the kept steps. Here the kept
// steps are gathered into (valid, features) rows and handed to the ordinary loss or metric, whose
// per-position arithmetic is unchanged; the loss's gradient is scattered back with zeros at the
// masked steps. Under data parallelism `valid` is summed over the replicas of the step first
// (strategy/batch_loss_scale.h), which gives the single-device result of Keras on the whole
// global batch. With SparseCategoricalCrossentropy(ignore_class) a step counts only when it is
// both kept and not ignored (Keras ANDs the two masks).
#include <cstdint>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/nn/loss.h"

namespace mdtrain {

class MaskedSteps {
 public:
  // Selects the steps `mask` keeps ((batch, timesteps), values 0 or 1) of y_true and y_pred.
  // y_pred must be (batch, timesteps, features) and y_true fit it for `loss` (loss.validate);
  // throws std::invalid_argument ("[loss] <name>: ...") naming the shapes otherwise, and when the
  // tensors are not on a CPU device (masks are CPU-only).
  void select(const Loss& loss, const Tensor& y_true, const Tensor& y_pred, const Tensor& mask);
  // The same selection for a metric (no loss to validate against: the metric validates the rows).
  void select(const Tensor& y_true, const Tensor& y_pred, const Tensor& mask, const char* area);

  // The kept steps: (valid, *y_true.shape[2:]) and (valid, *y_pred.shape[2:]).
  const Tensor& y_true() const { return y_true_; }
  const Tensor& y_pred() const { return y_pred_; }
  std::int64_t kept() const { return static_cast<std::int64_t>(positions_.size()); }
  // This slice's part of Keras's divisor `valid`: kept steps (less the labels `loss` ignores).
  std::int64_t count(const Loss& loss) const;
  // loss.forward_backward on the kept steps (their SUM, see nn/loss.h); writes the gradient into
  // *dpred (shaped like the selected y_pred) when given, zero at the masked steps.
  double forward_backward(const Loss& loss, double grad_scale, Tensor* dpred);

 private:
  void gather(const Tensor& y_true, const Tensor& y_pred, const Tensor& mask);

  std::vector<std::int64_t> positions_;  // b * timesteps + t of each kept step, in order
  Shape pred_shape_;
  Tensor y_true_, y_pred_, dpred_;
};

}  // namespace mdtrain
