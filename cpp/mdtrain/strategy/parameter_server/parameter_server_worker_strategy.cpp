#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_executor.h"

namespace mdtrain {

ParameterServerWorkerStrategy::ParameterServerWorkerStrategy(ShardLayout layout, std::vector<std::string> endpoints,
                                                             int worker, double timeout_seconds,
                                                             std::optional<std::string> auth_key)
    : Strategy({Device{}}),
      layout_(std::move(layout)),
      endpoints_(std::move(endpoints)),
      worker_(worker),
      timeout_seconds_(timeout_seconds),
      auth_key_(std::move(auth_key)) {
  if (auth_key_) (void)FrameKey(*auth_key_);  // a bad key fails here, not at the first step
  layout_.validate();
  MDTRAIN_CHECK(endpoints_.size() == static_cast<std::size_t>(layout_.num_servers), std::invalid_argument, "[ps] ",
                endpoints_.size(), " endpoints for a layout of ", layout_.num_servers, " servers");
  MDTRAIN_CHECK(worker_ >= 0, std::invalid_argument, "[ps] worker index must be >= 0, got ", worker_);
  MDTRAIN_CHECK(timeout_seconds_ > 0, std::invalid_argument, "[ps] timeout must be > 0 s, got ", timeout_seconds_);
}

std::vector<std::unique_ptr<Communicator>> ParameterServerWorkerStrategy::make_replica_communicators() const {
  return create_communicators("single", 1);
}

std::unique_ptr<StepExecutor> ParameterServerWorkerStrategy::make_executor(Network& primary, const Loss& loss,
                                                                           const Optimizer& optimizer) {
  return std::make_unique<ParameterServerWorkerExecutor>(primary, *this, loss, optimizer);
}

mdtrain::StepPlan ParameterServerWorkerStrategy::make_plan(Network& network, const DeviceMesh&,
                                                           const PlanOptions&) const {
  return parameter_server_step_plan(plan_weights_of(network), layout_, name());
}

mdtrain::StepPlan parameter_server_step_plan(PlanWeights weights, const ShardLayout& layout,
                                             const std::string& strategy) {
  MDTRAIN_CHECK(weights.weights.size() == layout.variables.size(), std::invalid_argument, "[ps] the model has ",
                weights.weights.size(), " trainable weights, the servers hold ", layout.variables.size(), " variables");
  mdtrain::StepPlan plan;
  plan.strategy = strategy;
  plan.mesh_shape = {1};
  plan.mesh_axes = {"batch"};
  plan.segments.push_back(Segment{"network", 0, weights.layers, {}});
  for (WeightPlacement& w : weights.weights) {
    w.axis = "ps";
    w.dim = 0;
  }
  plan.layouts = weights.weights;
  GradientSync sync;
  sync.kind = SyncKind::PushPull;
  sync.axis = "ps";
  sync.group = layout.num_servers;
  sync.values = weights.values();
  plan.syncs.push_back(sync);
  // Every server is asked (a pull names each server's version), each for the rows it holds.
  std::vector<std::int64_t> server_bytes(static_cast<std::size_t>(layout.num_servers), 0);
  for (std::size_t v = 0; v < layout.variables.size(); ++v)
    for (int s = 0; s < layout.num_servers; ++s)
      server_bytes[static_cast<std::size_t>(s)] += layout.rows[v][static_cast<std::size_t>(s)].size() *
                                                   layout.row_elements(v) *
                                                   static_cast<std::int64_t>(size_of(layout.variables[v].dtype));
  DevicePlan dev;
  const auto exchange = [&](OpKind kind) {
    for (int s = 0; s < layout.num_servers; ++s) {
      PlanOp op;
      op.kind = kind;
      op.peer = s;
      op.bytes = server_bytes[static_cast<std::size_t>(s)];
      dev.ops.push_back(op);
    }
  };
  exchange(OpKind::Pull);
  add_forward_backward(dev.ops);
  exchange(OpKind::Push);
  plan.devices.push_back(std::move(dev));
  return plan;
}

void ParameterServerWorkerStrategy::set_endpoints(std::vector<std::string> endpoints) {
  MDTRAIN_CHECK(endpoints.size() == endpoints_.size(), std::invalid_argument, "[ps] ", endpoints.size(),
                " endpoints for a layout of ", endpoints_.size(), " servers");
  endpoints_ = std::move(endpoints);
  ++endpoints_generation_;
}

void ParameterServerWorkerStrategy::plan_steps(std::uint64_t first_token,
                                               std::optional<std::uint64_t> first_start_version) {
  next_token_ = first_token;
  next_start_version_ = first_start_version;
}

ParameterServerWorkerStrategy::StepPlan ParameterServerWorkerStrategy::next_step() {
  StepPlan plan{next_token_, next_start_version_};
  if (next_token_ != 0) ++next_token_;
  if (next_start_version_) ++*next_start_version_;
  return plan;
}

}  // namespace mdtrain
