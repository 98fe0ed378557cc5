#pragma once
// Keras metrics as running means. Every metric here is Keras's Mean underneath: a total and a
// count (accumulated in double), result() = total / count, 0 before any update (divide_no_nan).
// Per sample, a metric first averages its per-position values over the non-batch axes (Keras's
// reduce_to_samplewise_values), then adds the per-sample values to total and the batch size to
// count. Because both accumulators are plain sums, replicas aggregate exactly: sum their totals()
// element-wise (in a fixed order) and set_totals() the result.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/shape.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

class Loss;

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric();

  // The key in the logs: the identifier the user compiled with ("accuracy", "acc", "mse", ...).
  virtual std::string name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  virtual std::string class_name() const = 0;  // Keras's: "SparseCategoricalAccuracy", ...

  // Accumulates one batch. Throws std::invalid_argument("[metric] <name>: ...") naming both shapes
  // when y_true does not fit y_pred.
  virtual void update(const Tensor& y_true, const Tensor& y_pred) = 0;
  double result() const { return count_ > 0.0 ? total_ / count_ : 0.0; }
  void reset() { total_ = count_ = 0.0; }

  // {total, count}: summed across replicas for exact aggregation.
  std::vector<double> totals() const { return {total_, count_}; }
  void set_totals(const std::vector<double>& totals);

  virtual std::unique_ptr<Metric> clone() const = 0;
  // Keras's get_config(): {"name": ..., "dtype": "float32", ...metric fields}.
  virtual Json config() const;

 protected:
  void accumulate(double total, double count) {
    total_ += total;
    count_ += count;
  }
  // Adds the sum of per-position values as per-sample means: each of the `batch` samples owns
  // positions / batch of them and counts as one. Nothing for an empty batch.
  void accumulate_samples(double sum, std::int64_t positions, std::int64_t batch);
  std::string prefix() const;  // "[metric] <name>: "

 private:
  std::string name_;
  double total_ = 0.0, count_ = 0.0;
};

// keras.metrics.Mean: the weighted mean of the values it is given.
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}
  std::string class_name() const override { return "Mean"; }
  // total += value * weight, count += weight.
  void update_value(double value, double weight = 1.0) { accumulate(value * weight, weight); }
  // Keras's Mean.update_state(values) with values = y_pred (y_true is ignored): each sample's
  // values are averaged over the non-batch axes and count as one.
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<Mean>(*this); }
};

// Resolves a metric identifier as Keras 3's compile does (trainers/compile_utils.py get_metric):
// "accuracy"/"acc" (any case) become BinaryAccuracy when y_pred's last dimension is 1,
// SparseCategoricalAccuracy when y_true has fewer dimensions than y_pred or its last dimension is
// 1 while y_pred's is larger, CategoricalAccuracy otherwise. Also "sparse_categorical_accuracy",
// "categorical_accuracy", "binary_accuracy" (threshold 0.5), "mse"/"mean_squared_error",
// "mae"/"mean_absolute_error", "sparse_top_k_categorical_accuracy" (k = 5), their class names
// and upper-case aliases. The metric is named by the identifier as given, which is the key Keras
// reports in the logs. `loss` is not consulted: Keras 3 resolves from the shapes alone (tf.keras 2
// also looked at the loss); it is accepted so callers need not change if that is ever needed.
// Unknown identifiers throw std::invalid_argument listing the known ones.
std::unique_ptr<Metric> make_metric(const std::string& name, const Loss* loss, const Shape& y_true_shape,
                                    const Shape& y_pred_shape);

namespace metrics {

// keras.metrics.SparseCategoricalAccuracy: label == argmax(y_pred) (first maximum on ties).
class SparseCategoricalAccuracy : public Mean {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy") : Mean(std::move(name)) {}
  std::string class_name() const override { return "SparseCategoricalAccuracy"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<SparseCategoricalAccuracy>(*this); }
};

// keras.metrics.CategoricalAccuracy: argmax(y_true) == argmax(y_pred).
class CategoricalAccuracy : public Mean {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy") : Mean(std::move(name)) {}
  std::string class_name() const override { return "CategoricalAccuracy"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<CategoricalAccuracy>(*this); }
};

// keras.metrics.BinaryAccuracy: y_true == (y_pred > threshold), averaged per sample.
class BinaryAccuracy : public Mean {
 public:
  explicit BinaryAccuracy(std::string name = "binary_accuracy", double threshold = 0.5);
  double threshold() const { return threshold_; }
  std::string class_name() const override { return "BinaryAccuracy"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<BinaryAccuracy>(*this); }
  Json config() const override;

 private:
  double threshold_;
};

// keras.metrics.SparseTopKCategoricalAccuracy: the label is among the k highest scores (TF's
// in_top_k: ties at the boundary count as in).
class SparseTopKCategoricalAccuracy : public Mean {
 public:
  explicit SparseTopKCategoricalAccuracy(std::string name = "sparse_top_k_categorical_accuracy", std::int64_t k = 5);
  std::int64_t k() const { return k_; }
  std::string class_name() const override { return "SparseTopKCategoricalAccuracy"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<SparseTopKCategoricalAccuracy>(*this); }
  Json config() const override;

 private:
  std::int64_t k_;
};

// keras.metrics.MeanSquaredError / MeanAbsoluteError: the losses' per-sample values, averaged.
class MeanSquaredError : public Mean {
 public:
  explicit MeanSquaredError(std::string name = "mean_squared_error") : Mean(std::move(name)) {}
  std::string class_name() const override { return "MeanSquaredError"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<MeanSquaredError>(*this); }
};

class MeanAbsoluteError : public Mean {
 public:
  explicit MeanAbsoluteError(std::string name = "mean_absolute_error") : Mean(std::move(name)) {}
  std::string class_name() const override { return "MeanAbsoluteError"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<MeanAbsoluteError>(*this); }
};

}  // namespace metrics
}  // namespace mdtrain
