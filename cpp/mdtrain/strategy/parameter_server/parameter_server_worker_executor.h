#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/loss.h"
#include "mdtrain/strategy/parameter_server/parameter_server_client.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/step_executor.h"

namespace mdtrain {

// A parameter-server worker's steps on its one replica (the primary network, on the CPU):
//   train: pull every variable (the servers' current weights and versions), forward and backward
//          on the whole batch (the gradient of the mean loss plus the weight penalties of the
//          pulled weights, as Keras adds them), push the gradients with the versions they were
//          computed on and the step's token; no update here, the servers own the optimizer;
//   test/predict: pull, then forward.
// The weights the servers hold are the truth: the primary's weights are whatever was last
// pulled. Non-trainable weights (BatchNormalization's moving statistics) would need their own
// protocol and are refused when the executor is made.
class ParameterServerWorkerExecutor final : public StepExecutor {
 public:
  ParameterServerWorkerExecutor(Network& primary, ParameterServerWorkerStrategy& strategy, const Loss& loss,
                                const Optimizer& optimizer);

  StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  bool supports_sample_weights() const override { return true; }
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) override;

  // The roster has one replica, the primary, with the worker's copy of the job's optimizer (its
  // hyperparameters; the servers' clones update and hold the state, so its learning rate is fixed
  // and it reports no state bytes).
  Optimizer::State optimizer_state() const override { return {}; }
  void broadcast_weights_from_primary() override {}
  void refresh_primary() override {}
  void abort(const std::string&) override {}

 private:
  // Pulls every variable into the primary's weights (reconnecting first if the servers moved).
  void pull();
  // Polls the servers' versions until each is at least `version` (deterministic mode).
  void wait_for_version(std::uint64_t version, std::uint64_t token);
  void gather_batch(const GlobalBatch& batch);
  ParameterServerClient& client();

  Network& primary_;
  ParameterServerWorkerStrategy& strategy_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<Loss> logits_loss_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ParameterServerClient> client_;
  std::uint64_t client_generation_ = 0;
  std::vector<Tensor> values_;  // views of the primary's trainable weights, in layout order
  std::vector<Tensor> grads_;   // views of their gradients
  std::vector<std::uint64_t> versions_;
  Tensor x_batch_, y_batch_, w_batch_, dpred_;  // w_batch_: the step's sample weights, when given
  double loss_sum_ = 0;
  StepProfile profile_;
};

}  // namespace mdtrain
