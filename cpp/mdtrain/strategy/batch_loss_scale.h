#pragma once
// Keras's "sum_over_batch_size" divides a batch's summed loss by its sample count: every position
// of y_pred except its last axis (batch x time for (batch, time, classes) outputs), less the labels
// ignore_class drops. Executors sum what each replica's slice reports and divide by the global
// batch's rows (the running mean of fit weighs batches by their rows, as Keras's loss tracker
// does); BatchLossScale turns a slice's Loss::forward_backward into exactly that.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/loss.h"

namespace mdtrain {

struct BatchLossScale {
  double grad_scale = 1;     // what to pass to forward_backward in a training step
  double report_factor = 1;  // forward_backward's sum times this, summed over slices, / global rows = the loss
};

// `global_rows`: rows of the whole global batch. `global_labels`: for a loss that counts_labels(),
// the sum of counted_labels() over every slice of the global batch; ignored otherwise. For a
// (batch, classes) output without ignored labels both factors are exactly 1 / global_rows and 1.
// The scale of a loss divided by a count summed over the global batch's slices rather than by its
// shape: the labels ignore_class keeps, or the steps a mask keeps (nn/masked_steps.h).
inline BatchLossScale counted_loss_scale(std::int64_t global_rows, std::int64_t global_count) {
  BatchLossScale s;
  // Keras's divide_no_nan: a batch whose every label is ignored (or step masked) has loss and
  // gradient 0.
  s.grad_scale = global_count > 0 ? 1.0 / static_cast<double>(global_count) : 0.0;
  s.report_factor = global_count > 0 ? static_cast<double>(global_rows) / static_cast<double>(global_count) : 0.0;
  return s;
}

inline BatchLossScale batch_loss_scale(const Loss& loss, const Tensor& y_true, const Tensor& y_pred,
                                       std::int64_t global_rows, std::int64_t global_labels) {
  BatchLossScale s;
  if (loss.counts_labels()) return counted_loss_scale(global_rows, global_labels);
  const std::int64_t rows = y_pred.ndim() > 0 ? y_pred.dim(0) : 0;
  const double per_row =
      rows > 0 ? static_cast<double>(loss.sample_count(y_true, y_pred)) / static_cast<double>(rows) : 1.0;
  s.grad_scale = 1.0 / static_cast<double>(global_rows) / per_row;
  s.report_factor = 1.0 / per_row;
  return s;
}

// The `global_labels` of batch_loss_scale for a loss that counts_labels() (ignore_class): the
// labels of `y` (a slice of the global batch; null for a slice without rows) summed over `group`
// (the ranks that hold the other slices; null when this one holds them all). Every rank of the
// group must call it, rows or not, before any collective of its forward. -1 (and no sum) for a
// loss that does not count labels.
inline std::int64_t global_label_count(const Loss& loss, const Tensor* y, Communicator* group) {
  if (!loss.counts_labels()) return -1;
  double count = y ? static_cast<double>(loss.counted_labels(*y)) : 0.0;
  if (group) group->all_reduce(&count, 1, DType::Float64, ReduceOp::Sum);
  return static_cast<std::int64_t>(count);
}

// `count` (this slice's part of a count: MaskedSteps::count, 0 for a slice without rows) summed
// over `group` (null: this slice is the whole batch). Every rank of the group calls it at the same
// point of the step.
inline std::int64_t global_count(std::int64_t count, Communicator* group) {
  double sum = static_cast<double>(count);
  if (group) group->all_reduce(&sum, 1, DType::Float64, ReduceOp::Sum);
  return static_cast<std::int64_t>(sum);
}

}  // namespace mdtrain
