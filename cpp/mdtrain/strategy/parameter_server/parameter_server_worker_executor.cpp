#include "mdtrain/strategy/parameter_server/parameter_server_worker_executor.h"

#include <chrono>
#include <thread>

#include "mdtrain/core/errors.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/batch_loss_scale.h"

namespace mdtrain {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ParameterServerWorkerExecutor::ParameterServerWorkerExecutor(Network& primary, ParameterServerWorkerStrategy& strategy,
                                                             const Loss& loss, const Optimizer& optimizer)
    : StepExecutor("[ps]"),
      primary_(primary),
      strategy_(strategy),
      loss_(loss.clone()),
      logits_loss_(loss.on_logits_of(primary.output_activation())),
      optimizer_(optimizer.clone()) {
  MDTRAIN_CHECK(primary.built(), std::logic_error, "[engine] the model must be built before training");
  MDTRAIN_CHECK(primary.device().is_cpu(), std::invalid_argument,
                "[ps] a parameter-server worker trains on its CPU, not on ", primary.device().to_string());
  const auto fixed = primary.non_trainable_parameters();
  MDTRAIN_CHECK(fixed.empty(), std::invalid_argument, "[ps] '", fixed.empty() ? "" : fixed.front()->name,
                "' is a non-trainable weight (BatchNormalization's moving statistics): ParameterServerStrategy "
                "does not keep those on the servers yet; use MirroredStrategy or MultiWorkerMirroredStrategy");
  const ShardLayout& layout = strategy.layout();
  const auto params = primary.trainable_parameters();
  MDTRAIN_CHECK(params.size() == layout.variables.size(), std::invalid_argument, "[ps] the model has ", params.size(),
                " trainable weights, the servers hold ", layout.variables.size(), " variables");
  for (std::size_t v = 0; v < params.size(); ++v) {
    const auto& spec = layout.variables[v];
    MDTRAIN_CHECK(params[v]->value.shape() == spec.shape && params[v]->value.dtype() == spec.dtype,
                  std::invalid_argument, "[ps] weight '", params[v]->name, "' ", to_string(params[v]->value.shape()),
                  " does not match the servers' variable '", spec.name, "'");
    values_.push_back(params[v]->value);
    grads_.push_back(params[v]->grad);
  }
  roster_.add({&primary_, optimizer_.get(), /*holds_optimizer_state=*/false, &loss_sum_, &profile_, {}});
  roster_.fix_learning_rate(
      "[ps] the learning rate lives on the parameter servers' optimizers: give a LearningRateSchedule at compile "
      "instead of changing it during training");
}

ParameterServerClient& ParameterServerWorkerExecutor::client() {
  if (!client_ || client_generation_ != strategy_.endpoints_generation()) {
    // A server restarted elsewhere (set_endpoints) is reached with the same key.
    client_ = std::make_unique<ParameterServerClient>(strategy_.layout(), strategy_.endpoints(), strategy_.worker(),
                                                      strategy_.timeout_seconds(), strategy_.auth_key());
    client_generation_ = strategy_.endpoints_generation();
  }
  return *client_;
}

void ParameterServerWorkerExecutor::pull() {
  const auto t = Clock::now();
  std::vector<Tensor> into = values_;  // views: the pull writes the primary's weights in place
  versions_ = client().pull(into);
  auto& stats = strategy_.stats();
  stats.pull_seconds += seconds_since(t);
  for (const auto& v : values_) stats.bytes_pulled += v.nbytes();
  profile_.allreduce += seconds_since(t);
}

void ParameterServerWorkerExecutor::wait_for_version(std::uint64_t version, std::uint64_t token) {
  // The deterministic schedule: every server must have applied the steps before this one.
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(strategy_.timeout_seconds());
  for (;;) {
    bool ready = true;
    for (auto v : client().versions()) ready = ready && v >= version;
    if (ready) break;
    MDTRAIN_CHECK(Clock::now() < deadline, TimeoutError, "[ps] worker ", strategy_.worker(), " waited ",
                  strategy_.timeout_seconds(), " s for the servers to reach version ", version, " before step ", token,
                  " (a step before it was lost?)");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  profile_.allreduce += seconds_since(start);
}

void ParameterServerWorkerExecutor::gather_batch(const GlobalBatch& batch) {
  gather_global_batch(batch, x_batch_, y_batch_, &w_batch_);
}

StepLoss ParameterServerWorkerExecutor::train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[engine] a training batch needs at least one example");
  const auto step_start = Clock::now();
  const auto plan = strategy_.next_step();
  if (plan.start_version) wait_for_version(*plan.start_version, plan.token);
  pull();
  StepLoss result;
  result.regularization = primary_.regularization_loss();

  auto t = Clock::now();
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = plan.token;  // dropout masks differ per step, and a retried step draws the same ones
  gather_batch(batch);
  Tensor pred = primary_.forward(x_batch_, ctx);
  ensure_buffer(dpred_, pred.shape(), pred.dtype());
  // A worker's batch is the whole global batch of its step (asynchronous training).
  const BatchLossScale ls = batch_loss_scale(*loss_, y_batch_, pred, batch.count, loss_->counted_labels(y_batch_));
  const Tensor* weights = batch.sample_weight ? &w_batch_ : nullptr;
  if (logits_loss_) {
    loss_sum_ = logits_loss_->forward_backward(y_batch_, primary_.logits(), ls.grad_scale, &dpred_, weights);
    primary_.backward_from_logits(dpred_, {});
  } else {
    loss_sum_ = loss_->forward_backward(y_batch_, pred, ls.grad_scale, &dpred_, weights);
    primary_.backward(dpred_, {});
  }
  loss_sum_ *= ls.report_factor;
  if (outputs) outputs->on_replica_output(0, y_batch_, pred);
  primary_.add_regularization_gradients();
  auto& stats = strategy_.stats();
  stats.compute_seconds += seconds_since(t);
  profile_.compute += seconds_since(t);

  t = Clock::now();
  const PushResult pushed = client().push(grads_, versions_, plan.token);
  for (PsStatus s : pushed.status) {
    switch (s) {
      case PsStatus::Applied: ++stats.applied; break;
      case PsStatus::Rescaled:
        ++stats.applied;
        ++stats.rescaled;
        break;
      case PsStatus::Aggregated: ++stats.aggregated; break;
      case PsStatus::DroppedStale:
      case PsStatus::DroppedLate: ++stats.dropped; break;
      case PsStatus::Duplicate: ++stats.duplicate; break;
      default: break;
    }
  }
  for (const auto& g : grads_) stats.bytes_pushed += g.nbytes();
  stats.push_seconds += seconds_since(t);
  profile_.allreduce += seconds_since(t);
  ++stats.steps;
  ++profile_.steps;
  profile_.wall += seconds_since(step_start);
  result.sum = loss_sum_;
  return result;
}

StepLoss ParameterServerWorkerExecutor::test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[engine] an evaluation batch needs at least one example");
  pull();
  gather_batch(batch);
  ForwardContext ctx;
  Tensor pred = primary_.forward(x_batch_, ctx);
  const Tensor* weights = batch.sample_weight ? &w_batch_ : nullptr;
  loss_sum_ = logits_loss_ ? logits_loss_->forward_backward(y_batch_, primary_.logits(), 1.0, nullptr, weights)
                           : loss_->forward_backward(y_batch_, pred, 1.0, nullptr, weights);
  loss_sum_ *= batch_loss_scale(*loss_, y_batch_, pred, batch.count, loss_->counted_labels(y_batch_)).report_factor;
  if (outputs) outputs->on_replica_output(0, y_batch_, pred);
  StepLoss result;
  result.sum = loss_sum_;
  result.regularization = primary_.regularization_loss();
  return result;
}

void ParameterServerWorkerExecutor::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  if (count == 0) return;
  if (begin == 0) pull();  // once per predict call, not per batch
  ForwardContext ctx;
  Tensor pred = primary_.forward(x.rows(begin, begin + count), ctx);
  out.rows(begin, begin + count).copy_from(pred);
}

}  // namespace mdtrain
