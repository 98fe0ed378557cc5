#pragma once
// The wavefront pipeline of a deep recurrent stack (keras.distribution.WavefrontPipeline): the
// stack's leading recurrent layers cut into stages, one per device of the mesh's pipe axis
// (logical CPU devices, one thread each), the sequence cut into time chunks that flow stage to
// stage. The step is WavefrontExecutor's (strategy/wavefront_executor.h); a model compiled under
// this strategy trains through its own fit / evaluate / predict.
#include <cstdint>
#include <string>

#include "mdtrain/strategy/mesh_workers_strategy.h"

namespace mdtrain {

class WavefrontExecutor;

class WavefrontStrategy : public MeshWorkersStrategy {
 public:
  // `mesh`: one process's CPU devices on the single axis `pipe_axis` (its size: the number of
  // stages). Throws std::invalid_argument("[wavefront] ...") for time_chunk < 1, another axis, a
  // mesh across workers, or GPUs. The model's layers are checked when it is compiled.
  WavefrontStrategy(DeviceMesh mesh, std::int64_t time_chunk, std::string pipe_axis = "pipe");
  ~WavefrontStrategy() override;

  std::string name() const override { return "WavefrontPipeline"; }
  DeviceMesh mesh() const override { return mesh_; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  std::unique_ptr<StepExecutor> make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer) override;
  // The wavefront's StepPlan (pipeline_step_plan.h): its stages as wavefront_stage_ranges cuts the
  // model, the time chunks of its input sequence in the order the executor runs them.
  StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;

  int num_stages() const { return mesh_.axis_size(pipe_axis_); }
  std::int64_t time_chunk() const { return time_chunk_; }
  const std::string& pipe_axis() const { return pipe_axis_; }

  // The executor of the model compiled last under this strategy, or null.
  WavefrontExecutor* executor() const { return executor_; }
  void forget_executor(const WavefrontExecutor* executor) {
    if (executor_ == executor) executor_ = nullptr;
  }

 private:
  DeviceMesh mesh_;
  std::int64_t time_chunk_;
  std::string pipe_axis_;
  WavefrontExecutor* executor_ = nullptr;
};

}  // namespace mdtrain
