#include "mdtrain/model/output_metric.h"

#include <utility>

namespace mdtrain {

OutputMetric::OutputMetric(std::shared_ptr<const MultiOutputLoss> layout, std::size_t output,
                           std::unique_ptr<Metric> inner)
    : Metric(layout->outputs().at(output).name + "_" + inner->name()),
      layout_(std::move(layout)),
      output_(output),
      inner_(std::move(inner)) {}

OutputMetric::OutputMetric(const OutputMetric& other)
    : Metric(other), layout_(other.layout_), output_(other.output_), inner_(other.inner_->clone()) {}

void OutputMetric::update(const Tensor& y_true, const Tensor& y_pred) {
  layout_->output_slice(output_, y_true, y_pred, &y_true_k_, &y_pred_k_);
  inner_->reset();
  inner_->update(y_true_k_, y_pred_k_);
  const auto t = inner_->totals();
  accumulate(t[0], t[1]);
}

Json OutputMetric::config() const {
  Json j = inner_->config();
  j.set("name", name());
  return j;
}

OutputLossMetric::OutputLossMetric(std::shared_ptr<const MultiOutputLoss> layout, std::size_t output)
    : Metric(layout->outputs().at(output).name + "_loss"), layout_(std::move(layout)), output_(output) {}

void OutputLossMetric::update(const Tensor& y_true, const Tensor& y_pred) {
  layout_->output_slice(output_, y_true, y_pred, &y_true_k_, &y_pred_k_);
  const std::int64_t rows = y_pred_k_.dim(0);
  if (rows == 0) return;
  accumulate(layout_->output_row_sum(output_, y_true_k_, y_pred_k_), static_cast<double>(rows));
}

}  // namespace mdtrain
