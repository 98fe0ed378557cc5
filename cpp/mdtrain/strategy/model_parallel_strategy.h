#pragma once
#include <memory>
#include <optional>
#include <string>

#include "mdtrain/strategy/mesh_workers_strategy.h"
#include "mdtrain/strategy/tensor_parallel_plan.h"

namespace mdtrain {

class ModelParallelExecutor;

// Keras 3's keras.distribution.ModelParallel on logical CPU devices or GPUs (one thread each; NCCL
// between GPUs, as MirroredStrategy): a mesh with a model
// axis (tensor parallelism: weights split by a layout per weight, see TensorParallelPlan) and
// optionally a batch axis (data parallelism between the model groups: the hybrid batch x model
// mesh). Each device trains its shard of the model on its batch group's slice of the global
// batch; gradients of every shard are summed over the batch axis (ZeRO-1 there: each device
// updates its range, so optimizer state is split along both axes). One communicator per axis,
// split from the world group. The step is ModelParallelExecutor's.
//
// Across MPI workers (a mesh from DeviceMesh::for_workers) the model axis must be the last one, so
// that each model group stays inside a worker, and the batch axis spans the workers; the world
// group and the coordination between workers are those of a MultiWorkerMirroredStrategy over this
// worker's devices (`workers`).
class ModelParallelStrategy : public MeshWorkersStrategy {
 public:
  // `mesh`: one process's devices (all CPU devices or all GPUs); its axes are `batch_axis` (if given) and one model
  // axis (the other one). `layouts`: "layer/weight" -> one axis name or none per dimension; weights not named are
  // replicated. Throws std::invalid_argument("[model_parallel] ...") on a mesh without a model axis, a batch axis not
  // in the mesh, a layout naming an axis that is not the model axis, a mix of CPU devices and GPUs, a GPU this process
  // cannot see, or a mesh across workers without `workers` (the strategy that joined the MPI job, with this worker's
  // devices) or whose model axis would span workers. Layouts are checked against the layers when a model is compiled.
  ModelParallelStrategy(DeviceMesh mesh, WeightLayouts layouts, std::optional<std::string> batch_axis,
                        std::shared_ptr<Strategy> workers = nullptr);
  ~ModelParallelStrategy() override;

  std::string name() const override { return "ModelParallel"; }
  DeviceMesh mesh() const override { return mesh_; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  std::unique_ptr<StepExecutor> make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer) override;
  // The tensor-parallel step of `network` (tensor_parallel_step_plan.h) with the forms this
  // strategy's layouts give its layers; the second form takes that split, decided already.
  StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;
  StepPlan make_plan(Network& network, const TensorParallelPlan& split, const DeviceMesh& mesh,
                     const PlanOptions& options) const;

  const WeightLayouts& layouts() const { return layouts_; }
  const std::string& model_axis() const { return model_axis_; }
  const std::optional<std::string>& batch_axis() const { return batch_axis_; }

  // The executor of the model compiled last under this strategy (for its memory and traffic
  // reports), or null when there is none alive.
  ModelParallelExecutor* executor() const { return executor_; }
  void forget_executor(const ModelParallelExecutor* executor) {
    if (executor_ == executor) executor_ = nullptr;
  }

 private:
  DeviceMesh mesh_;
  WeightLayouts layouts_;
  std::optional<std::string> batch_axis_;
  std::string model_axis_;
  ModelParallelExecutor* executor_ = nullptr;
};

}  // namespace mdtrain
