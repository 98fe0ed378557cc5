#include "mdtrain/model/train_engine.h"

namespace mdtrain {

TrainEngine::TrainEngine(Network& primary, std::shared_ptr<Strategy> strategy, const Loss& loss,
                         const Optimizer& optimizer)
    : strategy_(std::move(strategy)),
      executor_(strategy_->make_executor(primary, loss, optimizer)),
      replica_metrics_(static_cast<std::size_t>(executor_->num_replicas())) {
  // Counting the padding would silently train another model than Keras's.
  MDTRAIN_CHECK(!primary.output_masked() || executor_->reads_output_masks(), std::invalid_argument,
                "[engine] the output of the model carries a mask (Keras leaves the masked steps out of the loss and ",
                "metrics), which ", strategy_->name(), " does not read yet; Mirrored, MultiWorkerMirrored, ",
                "CentralStorage and OneDevice do");
  // The penalty would be left out of the loss and its gradient: another model than Keras's.
  MDTRAIN_CHECK(!primary.adds_activity_loss() || executor_->reads_activity_losses(), std::invalid_argument,
                "[engine] the model has an ActivityRegularization layer (Keras adds its penalty to the loss), which ",
                strategy_->name(), " does not collect yet; Mirrored, MultiWorkerMirrored, CentralStorage and ",
                "OneDevice do");
}

TrainEngine::~TrainEngine() = default;

void TrainEngine::check_sample_weights(const Tensor* sample_weight) const {
  MDTRAIN_CHECK(sample_weight == nullptr || executor_->supports_sample_weights(), std::invalid_argument, "[engine] ",
                strategy_->name(), " does not take sample weights yet (the data-parallel strategies do)");
}

double TrainEngine::train_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count,
                               const Tensor* sample_weight) {
  check_sample_weights(sample_weight);
  const StepLoss loss = executor_->train_step(GlobalBatch{x, y, indices, count, sample_weight}, this);
  const double step_loss = loss.sum * (1.0 / static_cast<double>(count)) + loss.regularization;
  last_count_ = count;
  loss_total_ += step_loss * static_cast<double>(count);
  loss_count_ += static_cast<double>(count);
  return step_loss;
}

void TrainEngine::test_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count,
                            const Tensor* sample_weight) {
  check_sample_weights(sample_weight);
  const StepLoss loss = executor_->test_step(GlobalBatch{x, y, indices, count, sample_weight}, this);
  loss_total_ += loss.sum + loss.regularization * static_cast<double>(count);
  loss_count_ += static_cast<double>(count);
}

void TrainEngine::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  executor_->predict_step(x, begin, count, out);
}

std::vector<double> TrainEngine::replica_losses() const {
  std::vector<double> out;
  for (double sum : executor_->replica_loss_sums())
    out.push_back(last_count_ > 0 ? sum / static_cast<double>(last_count_) : 0.0);
  return out;
}

void TrainEngine::set_metrics(const std::vector<std::unique_ptr<Metric>>& metrics) {
  for (auto& rep : replica_metrics_) {
    rep.metrics.clear();
    for (const auto& m : metrics) rep.metrics.push_back(m->clone());
  }
}

void TrainEngine::reset_metrics() {
  loss_total_ = 0;
  loss_count_ = 0;
  for (auto& rep : replica_metrics_)
    for (auto& m : rep.metrics) m->reset();
}

Logs TrainEngine::logs(bool all_workers) const {
  Logs out;
  out.emplace_back("loss", loss_count_ > 0 ? loss_total_ / loss_count_ : 0.0);
  const auto& first = replica_metrics_.front().metrics;
  for (std::size_t i = 0; i < first.size(); ++i) {
    // Sum each metric's accumulators over the replicas (in replica order), then evaluate once.
    std::vector<double> totals = first[i]->totals();
    for (std::size_t r = 1; r < replica_metrics_.size(); ++r) {
      auto t = replica_metrics_[r].metrics[i]->totals();
      for (std::size_t k = 0; k < totals.size(); ++k) totals[k] += t[k];
    }
    if (all_workers) strategy_->sum_across_workers(totals);
    auto merged = first[i]->clone();
    merged->set_totals(totals);
    out.emplace_back(merged->name(), merged->result());
  }
  return out;
}

void TrainEngine::on_replica_output(int local_replica, const Tensor& y, const Tensor& pred) {
  ReplicaMetrics& rep = replica_metrics_[static_cast<std::size_t>(local_replica)];
  if (rep.metrics.empty()) return;
  if (y.device().is_cpu() && pred.device().is_cpu()) {
    for (auto& m : rep.metrics) m->update(y, pred);
    return;
  }
  ensure_buffer(rep.y_host, y.shape(), y.dtype());
  ensure_buffer(rep.pred_host, pred.shape(), pred.dtype());
  rep.y_host.copy_from(y);
  rep.pred_host.copy_from(pred);
  for (auto& m : rep.metrics) m->update(rep.y_host, rep.pred_host);
}

void TrainEngine::on_replica_masked_output(int local_replica, const Tensor& y, const Tensor& pred, const Tensor& mask) {
  ReplicaMetrics& rep = replica_metrics_[static_cast<std::size_t>(local_replica)];
  if (rep.metrics.empty()) return;
  rep.kept.select(y, pred, mask, "metric");
  if (rep.kept.kept() == 0) return;  // Keras adds a weight of 0: nothing
  for (auto& m : rep.metrics) m->update(rep.kept.y_true(), rep.kept.y_pred());
}

}  // namespace mdtrain
