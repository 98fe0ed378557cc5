#include "mdtrain/strategy/wavefront_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/pipeline_step_plan.h"
#include "mdtrain/strategy/wavefront_executor.h"

namespace mdtrain {

WavefrontStrategy::WavefrontStrategy(DeviceMesh mesh, std::int64_t time_chunk, std::string pipe_axis)
    : MeshWorkersStrategy(mesh, nullptr, "wavefront"),
      mesh_(std::move(mesh)),
      time_chunk_(time_chunk),
      pipe_axis_(std::move(pipe_axis)) {
  MDTRAIN_CHECK(time_chunk_ >= 1, std::invalid_argument,
                "[wavefront] time_chunk must be a positive integer (time steps per message), got ", time_chunk_);
  for (const auto& d : mesh_.devices())
    MDTRAIN_CHECK(d.is_cpu(), std::invalid_argument, "[wavefront] ", d.to_string(),
                  ": the wavefront pipeline runs on logical CPU devices for now");
  MDTRAIN_CHECK(mesh_.num_axes() == 1 && mesh_.has_axis(pipe_axis_), std::invalid_argument,
                "[wavefront] the mesh must have the one axis '", pipe_axis_, "', got ", mesh_.to_string());
}

WavefrontStrategy::~WavefrontStrategy() = default;

std::vector<std::unique_ptr<Communicator>> WavefrontStrategy::make_replica_communicators() const {
  return world_communicators("threads");
}

std::unique_ptr<StepExecutor> WavefrontStrategy::make_executor(Network& primary, const Loss& loss,
                                                               const Optimizer& optimizer) {
  require_known_dims(primary);
  auto executor = std::make_unique<WavefrontExecutor>(primary, *this, loss, optimizer);
  executor_ = executor.get();
  return executor;
}

StepPlan WavefrontStrategy::make_plan(Network& network, const DeviceMesh&, const PlanOptions& options) const {
  require_known_dims(network);
  MDTRAIN_CHECK(network.built(), std::invalid_argument, "[wavefront] the model must be built first");
  WavefrontPlanInputs in;
  in.strategy = name();
  in.stage_ranges = wavefront_stage_ranges(network, num_stages());
  in.time_chunk = time_chunk();
  in.timesteps = network.input_shape().empty() ? 1 : network.input_shape()[0];
  in.pipe_axis = pipe_axis();
  in.dtype = network.dtype();
  return wavefront_step_plan(plan_layers_of(network), in, options.global_batch);
}

}  // namespace mdtrain
