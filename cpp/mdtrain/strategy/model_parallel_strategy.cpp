#include "mdtrain/strategy/model_parallel_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/strategy/model_parallel_executor.h"

namespace mdtrain {

namespace {
std::string model_axis_of(const DeviceMesh& mesh, const std::optional<std::string>& batch_axis) {
  MDTRAIN_CHECK(mesh.num_workers() == 1, std::invalid_argument,
                "[model_parallel] a mesh across workers is not supported yet: ", mesh.to_string());
  for (const auto& d : mesh.devices())
    MDTRAIN_CHECK(d.is_cpu(), std::invalid_argument, "[model_parallel] ", d.to_string(),
                  ": model parallelism runs on logical CPU devices for now");
  if (batch_axis)
    MDTRAIN_CHECK(mesh.has_axis(*batch_axis), std::invalid_argument, "[model_parallel] the batch axis '", *batch_axis,
                  "' is not in the mesh ", mesh.to_string());
  std::vector<std::string> others;
  for (const auto& a : mesh.axis_names())
    if (!batch_axis || a != *batch_axis) others.push_back(a);
  MDTRAIN_CHECK(others.size() == 1, std::invalid_argument, "[model_parallel] the mesh ", mesh.to_string(),
                " needs exactly one model axis besides the batch axis ",
                batch_axis ? "'" + *batch_axis + "'" : std::string("(none)"), ", got ", others.size());
  return others.front();
}
}  // namespace

ModelParallelStrategy::ModelParallelStrategy(DeviceMesh mesh, WeightLayouts layouts,
                                             std::optional<std::string> batch_axis)
    : Strategy(mesh.devices()),
      mesh_(std::move(mesh)),
      layouts_(std::move(layouts)),
      batch_axis_(std::move(batch_axis)),
      model_axis_(model_axis_of(mesh_, batch_axis_)) {
  for (const auto& [key, layout] : layouts_)
    for (const auto& axis : layout)
      if (axis) {
        MDTRAIN_CHECK(mesh_.has_axis(*axis), std::invalid_argument, "[model_parallel] layout ", layout_string(layout),
                      " for '", key, "': axis '", *axis, "' is not in the mesh ", mesh_.to_string());
        MDTRAIN_CHECK(*axis == model_axis_, std::invalid_argument, "[model_parallel] layout ", layout_string(layout),
                      " for '", key, "': weights are split along the model axis '", model_axis_, "' only, not '", *axis,
                      "'");
      }
}

ModelParallelStrategy::~ModelParallelStrategy() = default;

std::vector<std::unique_ptr<Communicator>> ModelParallelStrategy::make_replica_communicators() const {
  return create_communicators("threads", num_replicas_in_sync());
}

std::unique_ptr<StepExecutor> ModelParallelStrategy::make_executor(Network& primary, const Loss& loss,
                                                                   const Optimizer& optimizer) {
  auto executor = std::make_unique<ModelParallelExecutor>(primary, *this, loss, optimizer);
  executor_ = executor.get();
  return executor;
}

}  // namespace mdtrain
