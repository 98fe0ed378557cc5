#include "mdtrain/strategy/mesh_workers_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain {

namespace {
std::vector<Device> local_devices(const DeviceMesh& mesh, const std::shared_ptr<Strategy>& workers, const char* area) {
  if (!workers) {
    MDTRAIN_CHECK(mesh.num_workers() == 1, std::invalid_argument, "[", area, "] the mesh ", mesh.to_string(), " spans ",
                  mesh.num_workers(), " workers: pass the strategy that joined them");
    return mesh.devices();
  }
  MDTRAIN_CHECK(mesh.num_workers() == workers->num_workers() &&
                    mesh.local_device_count() == workers->num_local_replicas(),
                std::invalid_argument, "[", area, "] the mesh ", mesh.to_string(), " covers ", mesh.num_workers(),
                " workers of ", mesh.local_device_count(), " devices; the job has ", workers->num_workers(),
                " workers of ", workers->num_local_replicas());
  return workers->devices();
}
}  // namespace

MeshWorkersStrategy::MeshWorkersStrategy(const DeviceMesh& mesh, std::shared_ptr<Strategy> workers, const char* area)
    : Strategy(local_devices(mesh, workers, area)), workers_(std::move(workers)) {}

std::vector<std::unique_ptr<Communicator>> MeshWorkersStrategy::world_communicators(
    const std::string& local_backend) const {
  if (workers_) return workers_->make_replica_communicators();
  return create_communicators(local_backend, num_replicas_in_sync());
}

StepPlan MeshWorkersStrategy::make_plan(Network&, const DeviceMesh&, const PlanOptions&) const {
  MDTRAIN_CHECK(false, std::logic_error, "[plan] ", name(), " has no StepPlan yet");
  return StepPlan{};
}

void MeshWorkersStrategy::require_known_dims(const Network& network) const {
  if (!network.built()) return;
  for (const auto& layer : network.layers())
    MDTRAIN_CHECK(!has_unknown_dim(layer->input_shape()) && !has_unknown_dim(layer->output_shape()),
                  std::invalid_argument, "[strategy] ", name(),
                  " needs every dimension of the model's values known, but layer \"", layer->name(), "\" (",
                  layer->class_name(), ") has input shape ", to_string(layer->input_shape()), " and output shape ",
                  to_string(layer->output_shape()),
                  "; variable-length inputs train under the data-parallel strategies (OneDeviceStrategy, "
                  "MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy, ParameterServerStrategy)");
}

}  // namespace mdtrain
