#include "mdtrain/strategy/strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/replicated_executor.h"

namespace mdtrain {

Strategy::Strategy(std::vector<Device> devices) : devices_(std::move(devices)) {
  MDTRAIN_CHECK(!devices_.empty(), std::invalid_argument, "[strategy] a strategy needs at least one device");
  for (std::size_t i = 0; i < devices_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      MDTRAIN_CHECK(devices_[i] != devices_[j], std::invalid_argument, "[strategy] device ", devices_[i].to_string(),
                    " is listed twice");
  pool_ = std::make_unique<cpu::ThreadTeam>(static_cast<int>(devices_.size()));
}

DeviceMesh Strategy::mesh() const {
  return DeviceMesh::for_workers({num_replicas_in_sync()}, {"batch"}, num_workers(), devices());
}

std::vector<std::unique_ptr<Communicator>> Strategy::make_axis_communicators(const DeviceMesh& mesh,
                                                                             const std::vector<std::string>& axes) {
  MDTRAIN_CHECK(mesh.num_devices() == num_replicas_in_sync(), std::invalid_argument, "[strategy] ", name(),
                ": the mesh ", mesh.to_string(), " has ", mesh.num_devices(), " devices, the strategy ",
                num_replicas_in_sync());
  auto world = make_replica_communicators();
  std::vector<std::unique_ptr<Communicator>> out(world.size());
  run_replicas([&](int local) {
    const MeshSplit where = mesh.axes_split(axes, first_local_replica() + local);
    out[static_cast<std::size_t>(local)] = world[static_cast<std::size_t>(local)]->split(where.color, where.key);
  });
  return out;
}

ReplicatedPlanInputs Strategy::replicated_plan_inputs(const DeviceMesh& mesh, const PlanOptions& options) const {
  MDTRAIN_CHECK(mesh.num_devices() == num_replicas_in_sync(), std::invalid_argument, "[strategy] ", name(),
                ": the mesh ", mesh.to_string(), " has ", mesh.num_devices(), " devices, the strategy ",
                num_replicas_in_sync());
  ReplicatedPlanInputs in;
  in.strategy = name();
  in.local_replicas = num_local_replicas();
  in.workers = num_workers();
  in.host_replicas = devices().front().is_cpu();
  in.reduction = gradient_reduction();
  in.bucket_bytes = gradient_bucket_bytes();
  in.clips_by_norm = options.clips_by_norm;
  return in;
}

StepPlan Strategy::make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const {
  return replicated_step_plan(plan_weights_of(network), replicated_plan_inputs(mesh, options));
}

std::unique_ptr<StepExecutor> Strategy::make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer) {
  return std::make_unique<ReplicatedExecutor>(primary, *this, loss, optimizer,
                                              make_plan(primary, mesh(), plan_options_of(optimizer)));
}

}  // namespace mdtrain
