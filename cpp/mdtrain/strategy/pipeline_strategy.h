#pragma once
// Pipeline parallelism on logical CPU devices (threads) or GPUs (NCCL): the model's layers cut
// into contiguous stages, stage s on the devices at position s of the pipe axis, each global batch
// cut into micro-batches that flow through the stages by a schedule (pipeline_schedule.h: GPipe or
// 1F1B).
// An optional batch axis makes several pipelines that train on their slices of the global batch
// and sum their stages' gradients (data parallelism x pipeline). The step is PipelineExecutor's.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/strategy/pipeline_schedule.h"
#include "mdtrain/strategy/mesh_workers_strategy.h"

namespace mdtrain {

class PipelineExecutor;

class PipelineStrategy : public MeshWorkersStrategy {
 public:
  // `mesh`: CPU devices or GPUs (all one kind, see check_pipeline_devices) with the axis
  // `pipe_axis` (its size: the number of stages) and, optionally, `batch_axis`; no other axis.
  // Across MPI workers (`workers`: the strategy that joined them) either each worker runs whole
  // pipelines, or every pipeline spans the workers, stage s on worker s (the pipe axis first:
  // ("pipe", "batch")); see pipe_spans_workers. `stage_starts`: the index of the first layer of
  // stages 1..p-1 (ascending, each stage at least one layer); empty: cut so that the stages hold
  // about the same number of parameters, or (`balance_by_time`) the same measured forward +
  // backward time (each layer timed on a copy of the model, 32 rows of zeros, best of 3). Throws
  // std::invalid_argument("[pipeline] ...") for a bad mesh, num_microbatches < stages, or devices
  // check_pipeline_devices refuses. Stage cuts are checked against the model when it is compiled.
  // `recompute`: each stage keeps only the inputs of its in-flight micro-batches and runs a
  // micro-batch's forward again before its backward (less memory, one more forward per
  // micro-batch); false: it keeps every in-flight micro-batch's activations (PipelineExecutor).
  // Both give bitwise the same weights.
  PipelineStrategy(DeviceMesh mesh, int num_microbatches, PipelineScheduleKind schedule,
                   std::vector<int> stage_starts = {}, std::string pipe_axis = "pipe",
                   std::optional<std::string> batch_axis = std::nullopt, bool balance_by_time = false,
                   std::shared_ptr<Strategy> workers = nullptr, bool recompute = false);
  ~PipelineStrategy() override;

  std::string name() const override { return "PipelineParallel"; }
  DeviceMesh mesh() const override { return mesh_; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  std::unique_ptr<StepExecutor> make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer) override;
  // The pipeline's StepPlan (pipeline_step_plan.h): the stages cut as pipeline_stage_starts cuts
  // them, the schedule's ops on micro-batches of options.global_batch, each stage's gradient sum
  // over the batch axis and its update. The executor runs the plan it makes with this.
  StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;

  int num_stages() const { return mesh_.axis_size(pipe_axis_); }
  int num_microbatches() const { return microbatches_; }
  PipelineScheduleKind schedule() const { return schedule_; }
  const std::vector<int>& stage_starts() const { return stage_starts_; }
  const std::string& pipe_axis() const { return pipe_axis_; }
  const std::optional<std::string>& batch_axis() const { return batch_axis_; }
  bool balance_by_time() const { return balance_by_time_; }
  bool recompute() const { return recompute_; }
  // True when each pipeline spans the MPI workers (stage s on worker s); false
  // in one process or when each worker runs whole pipelines.
  bool pipe_across_workers() const { return pipe_across_workers_; }
  bool metrics_split_across_workers() const override { return pipe_across_workers_; }

  // Pipe axis across workers: the compiled model's executor gathers the other workers' stages
  // (PipelineExecutor::gather_stages). Collective: every worker first tells whether it has an
  // executor and whether its stages are stale (one sum of two numbers); a worker without one where
  // others have one is std::logic_error("[pipeline] ...") on every worker rather than a hang, and
  // when no worker is stale none gathers. No-op in one process.
  void gather_stages();

  // The executor of the model compiled last under this strategy, or null.
  PipelineExecutor* executor() const { return executor_; }
  void forget_executor(const PipelineExecutor* executor) {
    if (executor_ == executor) executor_ = nullptr;
  }

 private:
  DeviceMesh mesh_;
  int microbatches_;
  PipelineScheduleKind schedule_;
  std::vector<int> stage_starts_;
  std::string pipe_axis_;
  std::optional<std::string> batch_axis_;
  bool balance_by_time_ = false;
  bool recompute_ = false;
  bool pipe_across_workers_ = false;
  PipelineExecutor* executor_ = nullptr;
};

// The devices of a pipeline (this process's devices of its mesh): all CPU devices, or all GPUs
// that this process sees (`visible_gpus`: cuda::device_count()), /device:GPU:i at position i.
// Throws std::invalid_argument("[pipeline] ...") naming the device otherwise (with
// cuda::unavailable_reason() when no GPU is visible).
void check_pipeline_devices(const std::vector<Device>& devices, int visible_gpus);

// How the pipelines (groups along `pipe_axis`) of a mesh lie on its workers: false when each lies
// inside one worker (or the mesh is one process's), true when every one spans all the workers, stage
// s on worker s (as many stages as workers: the pipe axis first, e.g. ("pipe", "batch")). Throws
// std::invalid_argument("[pipeline] ...") for any other layout (a pipeline over some workers only,
// unevenly, or with several stages on a worker: such a pipe group would be a hierarchical
// communicator, which has no point-to-point send / recv).
bool pipe_spans_workers(const DeviceMesh& mesh, const std::string& pipe_axis);

class LayerStack;
// The rows PipelineParallel(stages="balance_time") times each layer on before it cuts the stages:
// the global batch, hence the micro-batch, is not known when the executor is made.
inline constexpr std::int64_t kBalanceTimeRows = 32;

// Nanoseconds of forward + backward of each layer of `model` (timed on a copy, `rows` rows of
// zeros, the best of `repeats`), at least 1 each. `in_flight` > 1 times it as a GPipe stage runs
// that many micro-batches: every one's forward (each on its own state slot sharing the copy's
// weights, as the executor's), then every one's backward, the time per micro-batch: a stage
// holding many micro-batches' activations reads them back from memory rather than cache, which
// one micro-batch at a time does not show. std::invalid_argument for a count below 1.
std::vector<std::int64_t> measure_layer_times(const LayerStack& model, std::int64_t rows = kBalanceTimeRows,
                                              int repeats = 3, int in_flight = 1);

}  // namespace mdtrain
