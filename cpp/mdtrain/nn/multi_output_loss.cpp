#include "mdtrain/nn/multi_output_loss.h"

#include <utility>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/packed_columns.h"
#include "mdtrain/nn/target_checks.h"

namespace mdtrain {

namespace {

Shape batched(std::int64_t rows, const Shape& shape) {
  Shape out{rows};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

std::int64_t elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

MultiOutputLoss::MultiOutputLoss(std::vector<Output> outputs) : outputs_(std::move(outputs)) {
  MDTRAIN_CHECK(!outputs_.empty(), std::invalid_argument, "[loss] multi_output_loss: no outputs");
  for (const auto& out : outputs_) {
    MDTRAIN_CHECK(out.loss != nullptr, std::invalid_argument, "[loss] multi_output_loss: output '", out.name,
                  "' has no loss");
    MDTRAIN_CHECK(dynamic_cast<const MultiOutputLoss*>(out.loss.get()) == nullptr, std::invalid_argument,
                  "[loss] multi_output_loss: output '", out.name, "' cannot have a multi-output loss");
    MDTRAIN_CHECK(!out.loss->counts_labels(), std::invalid_argument, "[loss] multi_output_loss: output '", out.name,
                  "': ", out.loss->name(),
                  " with ignore_class is not supported in a model with several outputs (its divisor depends on the "
                  "labels of every replica); compile that output without ignore_class");
    MDTRAIN_CHECK(!out.pred_shape.empty() && elements(out.pred_shape) > 0, std::invalid_argument,
                  "[loss] multi_output_loss: output '", out.name, "' has shape ", to_string(out.pred_shape),
                  "; it needs a non-empty (batch, ...) shape");
    Shape labels = out.pred_shape;
    if (dynamic_cast<const losses::SparseCategoricalCrossentropy*>(out.loss.get()) != nullptr) labels.pop_back();
    pred_offsets_.push_back(pred_width_);
    label_offsets_.push_back(label_width_);
    pred_width_ += elements(out.pred_shape);
    label_width_ += elements(labels);
    label_shapes_.push_back(std::move(labels));
  }
}

void MultiOutputLoss::validate(const Tensor& y_true, const Tensor& y_pred) const {
  targets::check_common([this] { return prefix(); }, y_true, y_pred);
  MDTRAIN_CHECK(y_pred.ndim() == 2 && y_pred.dim(1) == pred_width_, std::invalid_argument, prefix(), "the ",
                outputs_.size(), " outputs come packed as (batch, ", pred_width_, "), got y_pred shape ",
                to_string(y_pred.shape()));
  MDTRAIN_CHECK(y_true.ndim() == 2 && y_true.dim(1) == label_width_, std::invalid_argument, prefix(),
                "the labels of the ", outputs_.size(), " outputs come packed as (batch, ", label_width_,
                "), got y_true shape ", to_string(y_true.shape()));
}

std::int64_t MultiOutputLoss::sample_count(const Tensor& y_true, const Tensor& y_pred) const {
  validate(y_true, y_pred);
  return y_pred.dim(0);
}

void MultiOutputLoss::output_slice(std::size_t k, const Tensor& y_true, const Tensor& y_pred, Tensor* y_true_k,
                                   Tensor* y_pred_k) const {
  const std::int64_t rows = y_pred.dim(0);
  if (y_true_k) {
    ensure_buffer(*y_true_k, batched(rows, label_shapes_[k]), y_true.dtype(), y_true.device());
    read_columns(y_true, label_offsets_[k], *y_true_k);
  }
  if (y_pred_k) {
    ensure_buffer(*y_pred_k, batched(rows, outputs_[k].pred_shape), y_pred.dtype(), y_pred.device());
    read_columns(y_pred, pred_offsets_[k], *y_pred_k);
  }
}

double MultiOutputLoss::output_row_sum(std::size_t k, const Tensor& y_true_k, const Tensor& y_pred_k) const {
  const std::int64_t rows = y_pred_k.dim(0);
  if (rows == 0) return 0.0;
  const Loss& loss = *outputs_[k].loss;
  const double per_row = static_cast<double>(loss.sample_count(y_true_k, y_pred_k)) / static_cast<double>(rows);
  return loss.forward_backward(y_true_k, y_pred_k, 1.0, nullptr) / per_row;
}

double MultiOutputLoss::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                                         const Tensor* sample_weight) const {
  MDTRAIN_CHECK(sample_weight == nullptr, std::invalid_argument, prefix(),
                "sample weights of a model with several outputs are not supported");
  validate(y_true, y_pred);
  const std::int64_t rows = y_pred.dim(0);
  if (dpred) {
    ensure_buffer(*dpred, y_pred.shape(), y_pred.dtype(), y_pred.device());
    MDTRAIN_CHECK(y_pred.numel() == 0 || !dpred->same_storage(y_pred), std::invalid_argument, prefix(),
                  "dpred must not share storage with y_pred");
  }
  if (rows == 0) return 0.0;
  double total = 0.0;
  Tensor t, p, g;  // per call: a loss may be used by several replica threads at once
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    output_slice(k, y_true, y_pred, &t, &p);
    const Output& out = outputs_[k];
    // Output k's mean divides by its own positions (batch x time for a sequence output).
    double per_row = 0, sum = 0;
    try {
      per_row = static_cast<double>(out.loss->sample_count(t, p)) / static_cast<double>(rows);
      sum = out.loss->forward_backward(t, p, grad_scale * out.weight / per_row, dpred ? &g : nullptr);
    } catch (const std::invalid_argument& e) {  // bad labels: say which output they belong to
      fail<std::invalid_argument>(prefix(), "output '", out.name, "': ", e.what());
    }
    total += out.weight * sum / per_row;
    if (dpred) write_columns(*dpred, pred_offsets_[k], g);
  }
  return total;
}

Json MultiOutputLoss::config() const {
  Json j = Loss::config();
  Json outs = Json::array();
  for (const auto& out : outputs_) {
    Json o = Json::object();
    o.set("name", out.name);
    o.set("weight", out.weight);
    Json shape = Json::array();
    for (auto d : out.pred_shape) shape.push_back(Json(d));
    o.set("shape", shape);
    Json loss = Json::object();
    loss.set("class_name", out.loss->class_name());
    loss.set("config", out.loss->config());
    o.set("loss", loss);
    outs.push_back(o);
  }
  j.set("outputs", outs);
  return j;
}

std::unique_ptr<Loss> multi_output_loss_from_config(const Json& config) {
  const Json* cfg = config.contains("config") ? &config.at("config") : &config;
  MDTRAIN_CHECK(cfg->contains("outputs") && cfg->at("outputs").is_array(), std::invalid_argument,
                "[loss] multi_output_loss: the config needs an \"outputs\" list, got ", config.dump());
  std::vector<MultiOutputLoss::Output> outputs;
  for (const auto& o : cfg->at("outputs").as_array()) {
    MultiOutputLoss::Output out;
    out.name = o.at("name").as_string();
    out.weight = o.get("weight", Json(1.0)).as_number();
    for (const auto& d : o.at("shape").as_array()) out.pred_shape.push_back(d.as_int());
    out.loss = std::shared_ptr<const Loss>(loss_from_config(o.at("loss")));
    outputs.push_back(std::move(out));
  }
  return std::make_unique<MultiOutputLoss>(std::move(outputs));
}

}  // namespace mdtrain
