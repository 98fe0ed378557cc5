#pragma once
// A metric of one output of a model with several outputs: it reads that output's columns of the
// packed labels and prediction (MultiOutputLoss's layout) and applies an ordinary metric to them.
// Logged as Keras 3 names it: "<output name>_<metric name>" ("cls_accuracy", "reg_mae").
#include <memory>
#include <string>

#include "mdtrain/model/metric.h"
#include "mdtrain/nn/multi_output_loss.h"

namespace mdtrain {

class OutputMetric final : public Metric {
 public:
  // `layout` gives the packing of every output; `output` is the index of the one this reads.
  OutputMetric(std::shared_ptr<const MultiOutputLoss> layout, std::size_t output, std::unique_ptr<Metric> inner);
  OutputMetric(const OutputMetric& other);

  std::string class_name() const override { return inner_->class_name(); }
  // Accumulates the inner metric's totals on this output's slice of a packed batch.
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<OutputMetric>(*this); }
  Json config() const override;
  std::size_t output() const { return output_; }

 private:
  std::shared_ptr<const MultiOutputLoss> layout_;
  std::size_t output_;
  std::unique_ptr<Metric> inner_;  // reset before each batch: its totals are added to this one's
  Tensor y_true_k_, y_pred_k_;     // this output's slice of the last batch
};

// Output k's own (unweighted) loss as a running mean over the batches' rows, as Keras 3 logs
// "<output name>_loss": each batch's mean counts as many times as the batch has rows.
class OutputLossMetric final : public Metric {
 public:
  OutputLossMetric(std::shared_ptr<const MultiOutputLoss> layout, std::size_t output);

  std::string class_name() const override { return "Mean"; }
  void update(const Tensor& y_true, const Tensor& y_pred) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<OutputLossMetric>(*this); }

 private:
  std::shared_ptr<const MultiOutputLoss> layout_;
  std::size_t output_;
  Tensor y_true_k_, y_pred_k_;
};

}  // namespace mdtrain
