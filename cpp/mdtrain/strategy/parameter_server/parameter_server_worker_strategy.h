#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/strategy/parameter_server/shard_layout.h"
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// What one parameter-server worker's steps did, summed since the strategy was made.
struct PsWorkerStats {
  std::int64_t steps = 0;
  std::int64_t applied = 0;     // pushes a server applied (per server; "rescaled" counted here too)
  std::int64_t rescaled = 0;    // applied after scaling for staleness
  std::int64_t dropped = 0;     // too stale (async) or late (sync)
  std::int64_t aggregated = 0;  // synchronous mode: kept for the next step
  std::int64_t duplicate = 0;   // a retried step another worker had pushed already
  std::int64_t bytes_pulled = 0;
  std::int64_t bytes_pushed = 0;
  double pull_seconds = 0;
  double push_seconds = 0;
  double compute_seconds = 0;
};

// The worker side of ParameterServerStrategy: this process trains one replica on its CPU device;
// the weights and the optimizer live on the parameter servers. Each training step pulls the
// weights, computes the gradient of the mean loss of its batch, and pushes it (the servers apply
// it; see ParameterServerWorkerExecutor). The Python coordinator plans the steps: their job-wide
// tokens (a retried step is applied once) and, in the deterministic mode, the version every
// server must have reached before a step may pull: step t starts from the weights step t-1 left
// (staleness 0 whichever worker runs it), so a fixed assignment of steps to workers gives fixed
// weights.
class ParameterServerWorkerStrategy : public Strategy {
 public:
  // `layout` and `endpoints`: the servers of the job; `worker`: this worker's task index;
  // `timeout_seconds`: every wait for a server (the timeout names it); `auth_key`: the job's frame
  // key (32 raw bytes, checked here), which every client of this worker uses, also after
  // set_endpoints (unset: unauthenticated, the insecure opt-out).
  ParameterServerWorkerStrategy(ShardLayout layout, std::vector<std::string> endpoints, int worker,
                                double timeout_seconds, std::optional<std::string> auth_key = std::nullopt);
  std::string name() const override { return "ParameterServerStrategy"; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  std::unique_ptr<StepExecutor> make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer) override;
  // The worker's step: it pulls every server's rows (the layout's), runs forward and backward of
  // the whole network on its batch, and pushes each server its rows' gradients (SyncKind::PushPull;
  // the servers update). Every weight is placed on axis "ps" along dimension 0. Throws
  // std::invalid_argument when the network's weights are not the layout's variables.
  mdtrain::StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;

  const ShardLayout& layout() const { return layout_; }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  int worker() const { return worker_; }
  double timeout_seconds() const { return timeout_seconds_; }
  const std::optional<std::string>& auth_key() const { return auth_key_; }
  // A server restarted elsewhere: executors reconnect before their next step.
  void set_endpoints(std::vector<std::string> endpoints);
  std::uint64_t endpoints_generation() const { return endpoints_generation_; }

  // The next training steps: step k (k = 0, 1, ...) pushes with token first_token + k and, when
  // `first_start_version` is set, first waits until every server's version is at least
  // first_start_version + k before it pulls.
  void plan_steps(std::uint64_t first_token, std::optional<std::uint64_t> first_start_version);
  // The plan of the next step, advancing it (token 0 and no wait when nothing was planned).
  struct StepPlan {
    std::uint64_t token = 0;
    std::optional<std::uint64_t> start_version;
  };
  StepPlan next_step();

  PsWorkerStats& stats() { return stats_; }

 private:
  ShardLayout layout_;
  std::vector<std::string> endpoints_;
  int worker_;
  double timeout_seconds_;
  std::optional<std::string> auth_key_;
  std::uint64_t endpoints_generation_ = 0;
  std::uint64_t next_token_ = 0;  // 0: steps carry no token
  std::optional<std::uint64_t> next_start_version_;
  PsWorkerStats stats_;
};

// The worker's step (ParameterServerWorkerStrategy::make_plan) for `weights` (a network's, or a
// profiled model's as the planner describes it) on `layout`: a pull from every server of the bytes
// of the rows it holds, forward and backward, a push of their gradients to each.
mdtrain::StepPlan parameter_server_step_plan(PlanWeights weights, const ShardLayout& layout,
                                             const std::string& strategy = "ParameterServerStrategy");

}  // namespace mdtrain
