#include "mdtrain/strategy/central_storage_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain {

namespace {
std::vector<Device> checked_compute_devices(std::vector<Device> devices, const Device& parameter_device) {
  MDTRAIN_CHECK(!devices.empty(), std::invalid_argument, "[central_storage] compute_devices must not be empty");
  for (const Device& d : devices)
    MDTRAIN_CHECK(d.is_cpu(), std::invalid_argument, "[central_storage] compute device ", d.to_string(),
                  ": only logical CPU devices are supported as compute devices so far (GPU replicas would need "
                  "their gradients staged through pinned host memory)");
  MDTRAIN_CHECK(parameter_device.is_cpu() && parameter_device.index == 0, std::invalid_argument,
                "[central_storage] parameter_device must be the host, CPU:0; got ", parameter_device.to_string());
  return devices;
}
}  // namespace

CentralStorageStrategy::CentralStorageStrategy(std::vector<Device> compute_devices, Device parameter_device)
    : Strategy(checked_compute_devices(std::move(compute_devices), parameter_device)),
      parameter_device_(parameter_device) {}

std::vector<std::unique_ptr<Communicator>> CentralStorageStrategy::make_replica_communicators() const {
  return create_communicators("threads", num_replicas_in_sync());
}

StepPlan CentralStorageStrategy::make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const {
  ReplicatedPlanInputs in = replicated_plan_inputs(mesh, options);
  in.parameter_device = true;
  return replicated_step_plan(plan_weights_of(network), in);
}

}  // namespace mdtrain
