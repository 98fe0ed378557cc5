#pragma once
// Keras losses with the reduction "sum_over_batch_size": the loss of a batch is the mean of its
// per-sample losses. Under data parallelism the global batch is split across replicas (possibly
// unevenly), so the core interface works with SUMS and takes the gradient scale from the caller:
//
//   count = sum over replicas of loss.sample_count(y_true_r, y_pred_r)   (= global batch for
//           (batch, classes) predictions; known before the step)
//   sum_r = loss.forward_backward(y_true_r, y_pred_r, 1.0 / count, &dpred_r)   on each replica
//   loss  = (sum over replicas of sum_r) / count
//
// which is exactly Keras's mean over the global batch, however it was split. Formulas and their
// exact gradients: ops/loss_math.h; differences from Keras: docs/losses_and_metrics.md.
// Losses are stateless: one instance may be used by several replica threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "mdtrain/core/json.h"
#include "mdtrain/ops/activation.h"
#include "mdtrain/core/shape.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

class Loss {
 public:
  virtual ~Loss();

  // Keras's name: "sparse_categorical_crossentropy", "mean_squared_error", ...
  virtual std::string name() const = 0;
  // Keras's class: "SparseCategoricalCrossentropy", ...
  virtual std::string class_name() const = 0;

  // Returns the SUM over the batch of per-sample losses and, if dpred != nullptr, writes
  // d(grad_scale * sum)/d(y_pred) into *dpred (reallocated only when its shape or dtype differs
  // from y_pred's; it must not share y_pred's storage). Validates first (see validate()).
  // sample_weight (optional): Keras's sample weights of these rows, float32 with one value per
  // sample (y_pred's first axis) in y_pred's memory; each sample's loss and gradient are
  // multiplied by its weight, and the divisor stays the caller's, as Keras divides a weighted sum
  // by the sample count. Without it every sample weighs 1 (bitwise the unweighted loss).
  double forward_backward(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight = nullptr) const;

  // Checks y_true against y_pred: dtypes, batch sizes, compatible shapes, class ids in range for
  // sparse losses. Throws std::invalid_argument("[loss] <name>: ...") naming the argument and both
  // shapes.
  virtual void validate(const Tensor& y_true, const Tensor& y_pred) const;

  // How many per-sample loss values this slice contributes to Keras's divisor: the number of
  // positions of y_pred except its last axis (the batch size for (batch, classes) predictions),
  // less the positions whose label is ignore_class for SparseCategoricalCrossentropy.
  virtual std::int64_t sample_count(const Tensor& y_true, const Tensor& y_pred) const;
  // Whether sample_count depends on the label values (ignore_class), not only on the shapes: a
  // strategy then sums counted_labels() over the replicas of a step before scaling gradients.
  virtual bool counts_labels() const { return false; }
  // The labels of y_true that count towards sample_count (all of them unless some are ignored).
  virtual std::int64_t counted_labels(const Tensor& y_true) const { return y_true.numel(); }

  // The single-device convenience: Keras's loss value (the mean; 0 for an empty batch) with its
  // gradient in *dpred when given.
  double mean(const Tensor& y_true, const Tensor& y_pred, Tensor* dpred = nullptr) const;

  // Keras's get_config(): {"name": ..., "reduction": "sum_over_batch_size", ...loss fields}.
  virtual Json config() const;
  virtual std::unique_ptr<Loss> clone() const = 0;

  // Keras computes a crossentropy from the logits when the predictions come out of the matching
  // activation (softmax for the categorical losses, sigmoid for binary), whatever from_logits
  // says: exact gradients, no probability clipping, and a softmax output paired with
  // from_logits=True still trains correctly (after a warning). Returns that logits form of this
  // loss for `activation`, or nullptr when it does not apply.
  virtual std::unique_ptr<Loss> on_logits_of(Activation /*activation*/) const { return nullptr; }

 protected:
  // forward_backward's body, once sample_weight was checked against y_pred's batch.
  virtual double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                                  const Tensor* sample_weight) const = 0;
  // "[loss] <name>: " — the prefix of every message.
  std::string prefix() const;
};

// Builds a loss from a Keras identifier: "sparse_categorical_crossentropy",
// "categorical_crossentropy", "binary_crossentropy" (alias "bce"), "mean_squared_error" (alias
// "mse"), "mean_absolute_error" (alias "mae"), the upper-case aliases and the class names
// ("SparseCategoricalCrossentropy", ...), each with Keras's defaults. Unknown names throw
// std::invalid_argument listing the known ones.
std::unique_ptr<Loss> make_loss(const std::string& name_or_alias);
// Inverse of Loss::config(); also accepts Keras's serialised form {"class_name": ..., "config": {...}}.
// Only the reduction "sum_over_batch_size" is supported.
std::unique_ptr<Loss> loss_from_config(const Json& config);

// Keras's squeeze_or_expand_to_same_rank on shapes: when the ranks differ by one and the longer
// shape ends in 1, squeeze that axis (or, if the shorter shape has rank 1, expand it instead).
std::pair<Shape, Shape> squeeze_or_expand_to_same_rank(const Shape& y_true, const Shape& y_pred);

// The (rows, cols) layout of y_pred for a loss or metric comparing y_true and y_pred position by
// position: after squeeze_or_expand_to_same_rank the shapes must be equal; cols is the last axis
// of that common shape (1 for rank 1). Returns false when the shapes are not compatible.
// Allocates nothing (it runs every step).
// *rank (optional) receives the rank of the common shape.
bool same_shape_layout(const Shape& y_true, const Shape& y_pred, std::int64_t* rows, std::int64_t* cols,
                       int* rank = nullptr);
// True when y_true holds one class id per position of y_pred without its last axis: y_true's
// shape is y_pred's without the last axis, or that followed by 1.
bool is_sparse_label_shape(const Shape& y_true, const Shape& y_pred);

namespace losses {

// keras.losses.SparseCategoricalCrossentropy: y_true holds class ids, shaped like y_pred without
// its last axis (or with a last axis of 1).
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false,
                                         std::optional<std::int64_t> ignore_class = std::nullopt);
  bool from_logits() const { return from_logits_; }
  std::optional<std::int64_t> ignore_class() const { return ignore_class_; }

  std::string name() const override { return "sparse_categorical_crossentropy"; }
  std::string class_name() const override { return "SparseCategoricalCrossentropy"; }
  std::unique_ptr<Loss> on_logits_of(Activation activation) const override {
    if (activation != Activation::Softmax) return nullptr;
    return std::make_unique<SparseCategoricalCrossentropy>(true, ignore_class_);
  }
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  void validate(const Tensor& y_true, const Tensor& y_pred) const override;
  std::int64_t sample_count(const Tensor& y_true, const Tensor& y_pred) const override;
  bool counts_labels() const override { return ignore_class_.has_value(); }
  std::int64_t counted_labels(const Tensor& y_true) const override;
  Json config() const override;
  std::unique_ptr<Loss> clone() const override;

 private:
  void validate_shapes(const Tensor& y_true, const Tensor& y_pred) const;
  bool from_logits_;
  std::optional<std::int64_t> ignore_class_;
};

// Shared by the losses whose y_true has y_pred's shape (after Keras's squeeze/expand of a
// trailing 1): the per-sample loss reduces y_pred's last axis.
class DenseTargetLoss : public Loss {
 public:
  void validate(const Tensor& y_true, const Tensor& y_pred) const override;
  std::int64_t sample_count(const Tensor& y_true, const Tensor& y_pred) const override;

 protected:
  // Validates and returns (rows, cols): cols is the reduced last axis.
  std::pair<std::int64_t, std::int64_t> layout(const Tensor& y_true, const Tensor& y_pred) const;
  // Runs op(y_true, y_pred, dpred) on (rows, cols) views, allocating *dpred if needed. Tensors
  // already shaped (rows, cols) are passed as they are (no per-step copies of their shapes).
  template <class Op>
  double run(const Tensor& y_true, const Tensor& y_pred, Tensor* dpred, const Tensor* sample_weight, Op&& op) const;
  virtual int min_pred_rank() const { return 1; }
};

// keras.losses.CategoricalCrossentropy: y_true is one-hot (or any distribution) shaped like y_pred.
class CategoricalCrossentropy : public DenseTargetLoss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, double label_smoothing = 0.0);
  bool from_logits() const { return from_logits_; }
  double label_smoothing() const { return label_smoothing_; }

  std::string name() const override { return "categorical_crossentropy"; }
  std::string class_name() const override { return "CategoricalCrossentropy"; }
  std::unique_ptr<Loss> on_logits_of(Activation activation) const override {
    if (activation != Activation::Softmax) return nullptr;
    return std::make_unique<CategoricalCrossentropy>(true, label_smoothing_);
  }
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  Json config() const override;
  std::unique_ptr<Loss> clone() const override;

 private:
  int min_pred_rank() const override { return 2; }
  bool from_logits_;
  double label_smoothing_;
};

// keras.losses.BinaryCrossentropy: per sample, the mean over the last axis.
class BinaryCrossentropy : public DenseTargetLoss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false, double label_smoothing = 0.0);
  bool from_logits() const { return from_logits_; }
  double label_smoothing() const { return label_smoothing_; }

  std::string name() const override { return "binary_crossentropy"; }
  std::string class_name() const override { return "BinaryCrossentropy"; }
  std::unique_ptr<Loss> on_logits_of(Activation activation) const override {
    if (activation != Activation::Sigmoid) return nullptr;
    return std::make_unique<BinaryCrossentropy>(true, label_smoothing_);
  }
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  Json config() const override;
  std::unique_ptr<Loss> clone() const override;

 private:
  bool from_logits_;
  double label_smoothing_;
};

// keras.losses.MeanSquaredError: per sample, mean over the last axis of (y_true - y_pred)^2.
class MeanSquaredError : public DenseTargetLoss {
 public:
  std::string name() const override { return "mean_squared_error"; }
  std::string class_name() const override { return "MeanSquaredError"; }
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  std::unique_ptr<Loss> clone() const override;
};

// keras.losses.MeanAbsoluteError: per sample, mean over the last axis of |y_true - y_pred|.
class MeanAbsoluteError : public DenseTargetLoss {
 public:
  std::string name() const override { return "mean_absolute_error"; }
  std::string class_name() const override { return "MeanAbsoluteError"; }
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  std::unique_ptr<Loss> clone() const override;
};

}  // namespace losses
}  // namespace mdtrain
