#include "mdtrain/strategy/model_parallel_strategy.h"

#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/strategy/model_parallel_executor.h"
#include "mdtrain/strategy/tensor_parallel_step_plan.h"

namespace mdtrain {

namespace {
std::string model_axis_of(const DeviceMesh& mesh, const std::optional<std::string>& batch_axis) {
  const bool gpus = !mesh.devices().front().is_cpu();
  for (const auto& d : mesh.devices()) {
    MDTRAIN_CHECK(d.is_cpu() != gpus, std::invalid_argument, "[model_parallel] ", d.to_string(),
                  ": devices must all be CPU devices or all GPUs, got ", mesh.devices().front().to_string(), " and ",
                  d.to_string());
    if (!d.is_cpu())
      MDTRAIN_CHECK(d.index >= 0 && d.index < cuda::device_count(), std::invalid_argument, "[model_parallel] ",
                    d.to_string(), " is not a visible GPU (this process sees ", cuda::device_count(), ")",
                    cuda::device_count() == 0 ? ": " + cuda::unavailable_reason() : std::string());
  }
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
                                             std::optional<std::string> batch_axis, std::shared_ptr<Strategy> workers)
    : MeshWorkersStrategy(mesh, std::move(workers), "model_parallel"),
      mesh_(std::move(mesh)),
      layouts_(std::move(layouts)),
      batch_axis_(std::move(batch_axis)),
      model_axis_(model_axis_of(mesh_, batch_axis_)) {
  // Each model group inside one worker: the model axis is the innermost, and for_workers has
  // checked that its size divides the worker's devices.
  MDTRAIN_CHECK(mesh_.num_workers() == 1 || (mesh_.num_axes() > 1 && mesh_.axis_names().back() == model_axis_),
                std::invalid_argument, "[model_parallel] across workers the model axis '", model_axis_,
                "' must be the last axis of the mesh (inside a worker), got ", mesh_.to_string());
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
  // In one process as MirroredStrategy: threads between CPU devices, NCCL between GPUs; the axes'
  // groups are split from this one (ncclCommSplit on GPUs).
  return world_communicators(devices().front().is_cpu() ? "threads" : "nccl");
}

std::unique_ptr<StepExecutor> ModelParallelStrategy::make_executor(Network& primary, const Loss& loss,
                                                                   const Optimizer& optimizer) {
  require_known_dims(primary);
  auto executor = std::make_unique<ModelParallelExecutor>(primary, *this, loss, optimizer);
  executor_ = executor.get();
  return executor;
}

StepPlan ModelParallelStrategy::make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const {
  require_known_dims(network);
  return make_plan(network, TensorParallelPlan(network, layouts_, mesh, model_axis_), mesh, options);
}

StepPlan ModelParallelStrategy::make_plan(Network& network, const TensorParallelPlan& split, const DeviceMesh& mesh,
                                          const PlanOptions& options) const {
  TensorParallelPlanInputs in;
  in.strategy = name();
  in.mesh_shape = mesh.shape();
  in.mesh_axes = mesh.axis_names();
  in.model_axis = model_axis_;
  in.batch_axis = batch_axis_.value_or("");
  in.dtype = network.dtype();
  in.workers = num_workers();
  in.cpu_devices = devices().front().is_cpu();
  in.bucket_bytes = gradient_bucket_bytes();
  in.global_batch = options.global_batch;
  return tensor_parallel_step_plan(tensor_parallel_layers(network, split), in);
}

}  // namespace mdtrain
