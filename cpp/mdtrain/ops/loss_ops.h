#pragma once
// Loss and metric ops on row-major (rows, cols) predictions: cols is the class or feature axis.
// Each loss returns the SUM over rows of the per-row loss (a double) and, when dpred != nullptr,
// writes grad_scale * d(sum)/d(pred) into *dpred, which must have pred's shape and dtype and must
// not alias pred. Callers pass grad_scale = 1 / (number of rows in the global batch) to get the
// gradient of Keras's sum_over_batch_size mean however the batch is split across replicas.
//
// pred is float32 or float64. Labels and targets may be float32, float64, int32, int64 or uint8
// (Keras accepts integer-valued floats as class ids). The tensors of one call are all on the host
// or all on one GPU (then the cuda:: kernels of ops/cuda/loss_kernels.h run; labels are still
// validated on the host). Per-row formulas: ops/loss_math.h.
//
// sample_weight (optional, Keras's): float32 in pred's memory with one weight per sample, the
// rows of pred in equal runs per sample (rows must be a multiple of its element count: a sequence
// output has one row per step); each row's loss and gradient are multiplied by its sample's
// weight. The divisor stays the caller's (Keras divides a weighted sum by the sample count).
#include <cstdint>
#include <optional>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// Flat index of the first label that is neither an integer class id in [0, classes) nor
// ignore_class, or -1 when every label is valid.
std::int64_t first_invalid_label(const Tensor& labels, std::int64_t classes,
                                 std::optional<std::int64_t> ignore_class = std::nullopt);
// labels[index] as a double (for error messages).
double element_as_double(const Tensor& t, std::int64_t index);
// Number of elements of labels equal to value.
std::int64_t count_equal(const Tensor& labels, double value);

// Per row: crossentropy of softmax (from_logits) or of the probabilities against the integer label
// labels[row] (labels.numel() == rows). Rows whose label equals ignore_class add 0 and get a zero
// gradient. Throws std::invalid_argument for a label that is not a valid class id.
double sparse_categorical_crossentropy(const Tensor& labels, const Tensor& pred, bool from_logits,
                                       std::optional<std::int64_t> ignore_class, double grad_scale, Tensor* dpred,
                                       const Tensor* sample_weight = nullptr);
// Per row: crossentropy against dense targets (target.numel() == pred.numel()), smoothed as
// t * (1 - label_smoothing) + label_smoothing / cols.
double categorical_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                                double grad_scale, Tensor* dpred, const Tensor* sample_weight = nullptr);
// Per row: the mean over cols of element-wise binary crossentropy, targets smoothed as
// t * (1 - label_smoothing) + 0.5 * label_smoothing.
double binary_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                           double grad_scale, Tensor* dpred, const Tensor* sample_weight = nullptr);
// Per row: mean over cols of (pred - target)^2, resp. |pred - target|.
double mean_squared_error(const Tensor& target, const Tensor& pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight = nullptr);
double mean_absolute_error(const Tensor& target, const Tensor& pred, double grad_scale, Tensor* dpred,
                           const Tensor* sample_weight = nullptr);

// Metric counts (as doubles, so they add up across replicas without conversion).
// Rows whose label equals the first argmax of the row (labels compared as numbers: 2.5 never matches).
double sparse_categorical_matches(const Tensor& labels, const Tensor& pred);
// Rows where the first argmax of target equals the first argmax of pred.
double categorical_matches(const Tensor& target, const Tensor& pred);
// Rows whose label is in the top k of the row (TF's in_top_k: ties at the boundary count as in).
double sparse_top_k_matches(const Tensor& labels, const Tensor& pred, std::int64_t k);
// Elements where target == (pred > threshold ? 1 : 0).
double binary_matches(const Tensor& target, const Tensor& pred, double threshold);

}  // namespace mdtrain::ops
