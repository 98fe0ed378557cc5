#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/model/logs.h"
#include "mdtrain/model/metric.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/masked_steps.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/step_executor.h"
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// The training loop's side of a compiled model: Keras's running loss and metrics over the steps
// its strategy runs. How a step runs — replicas, the batch cut, gradient sync, where weights and
// optimizer state live — is the strategy's StepExecutor (strategy/step_executor.h); this class
// only feeds it global batches, turns the loss sums it returns into Keras's running mean, and
// keeps a copy of the metrics per replica, updated on the replicas' threads with their outputs
// and summed exactly when logs are read.
class TrainEngine final : private ReplicaOutputSink {
 public:
  using Profile = StepProfile;

  TrainEngine(Network& primary, std::shared_ptr<Strategy> strategy, const Loss& loss, const Optimizer& optimizer);
  ~TrainEngine() override;

  // One training step on rows x[indices[i]], y[indices[i]], i < count (count = the global batch),
  // weighted by sample_weight[indices[i]] when given (Keras's: the loss is the weighted sum over
  // the batch divided by count). Returns the step's loss (that mean plus regularization).
  // std::invalid_argument when the strategy's executor takes no sample weights.
  double train_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count,
                    const Tensor* sample_weight = nullptr);
  // Forward only; updates the loss tracker and metrics.
  void test_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count,
                 const Tensor* sample_weight = nullptr);
  // Forward only on rows [begin, begin + count) of x; writes them to the same rows of `out`.
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out);

  // Gives every replica its own copy of these metrics (replacing earlier ones).
  void set_metrics(const std::vector<std::unique_ptr<Metric>>& metrics);
  void reset_metrics();
  std::vector<Profile> profile() const { return executor_->profile(); }  // one per replica
  void reset_profile() { executor_->reset_profile(); }
  // Each replica's loss sum of the last step divided by that step's global batch.
  std::vector<double> replica_losses() const;
  // "loss" (running mean since the last reset) then each metric's result, aggregated exactly over
  // the replicas. The loss is always over all workers' replicas; metrics are this worker's
  // replicas' unless `all_workers` (a collective between workers: every worker must ask at the
  // same point, as the training loop does at the end of an epoch).
  Logs logs(bool all_workers = false) const;

  // See StepExecutor: weights set from outside, the host copy of GPU-trained weights, the
  // optimizer of every replica.
  void broadcast_weights_from_primary() { executor_->broadcast_weights_from_primary(); }
  void refresh_primary() { executor_->refresh_primary(); }
  bool primary_stale() const { return executor_->primary_stale(); }
  Optimizer& optimizer() { return executor_->optimizer(); }
  void set_learning_rate(double lr) { executor_->set_learning_rate(lr); }
  Optimizer::State optimizer_state() const { return executor_->optimizer_state(); }
  std::vector<std::int64_t> optimizer_state_bytes() const { return executor_->optimizer_state_bytes(); }
  void abort(const std::string& reason) { executor_->abort(reason); }
  int num_replicas() const { return executor_->num_replicas(); }
  Network& replica_network(int r) { return executor_->replica_network(r); }
  const Strategy& strategy() const { return *strategy_; }

 private:
  void check_sample_weights(const Tensor* sample_weight) const;
  // Metrics accumulate on the host: labels and predictions of a GPU replica are copied back first.
  void on_replica_output(int local_replica, const Tensor& y, const Tensor& pred) override;
  // Metrics of an output that carries a mask: updated on the kept steps only (nn/masked_steps.h).
  void on_replica_masked_output(int local_replica, const Tensor& y, const Tensor& pred, const Tensor& mask) override;

  struct ReplicaMetrics {
    std::vector<std::unique_ptr<Metric>> metrics;
    Tensor y_host, pred_host;  // host copies for the metrics of a GPU replica
    MaskedSteps kept;          // the kept steps of a masked output
  };

  std::shared_ptr<Strategy> strategy_;  // outlives executor_, which refers to it
  std::unique_ptr<StepExecutor> executor_;
  std::vector<ReplicaMetrics> replica_metrics_;
  std::int64_t last_count_ = 0;  // global batch of the last train or test step
  double loss_total_ = 0;        // sum over steps of (step loss * rows)
  double loss_count_ = 0;
};

}  // namespace mdtrain
