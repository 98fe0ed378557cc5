#pragma once
// The StepPlans of the pipelines (step_plan.h): PipelineStrategy's (stages of layers, micro-batches
// by a pipeline schedule, each stage's gradient sum over the batch axis, its update) and
// WavefrontStrategy's (stages of recurrent layers, time chunks flowing stage to stage). The
// strategies' make_plan and the planner's bindings call the same functions, and the executors take
// their stage cuts and op order from the plan.
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/strategy/pipeline_schedule.h"
#include "mdtrain/strategy/step_plan.h"

namespace mdtrain {

class PipelineStrategy;
class WavefrontStrategy;

// One layer as a pipeline plan reads it: its trainable weights in packed order (their layouts
// filled in by the plan) and the values of one row of its output (a sequence's: every time step).
struct PlanLayer {
  std::vector<WeightPlacement> weights;
  std::int64_t output_values = 0;
  // A BatchNormalization's channels: its moving statistics, deferred to once per step, are summed
  // over the pipelines then (two all-reduces of float64: the count and means, then the spread).
  std::int64_t statistics_channels = 0;
};
std::vector<PlanLayer> plan_layers_of(Network& network);

// What a pipeline plan depends on besides the layers.
struct PipelinePlanInputs {
  std::string strategy = "PipelineParallel";
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;
  int microbatches = 1;
  std::vector<int> stage_starts;  // the first layer of stages 1..p-1 (p - 1 entries, ascending)
  // The mesh: the pipe axis and, when there are several pipelines, the batch axis; device d of the
  // plan is the mesh's device d (row-major, DeviceMesh).
  std::vector<int> mesh_shape;
  std::vector<std::string> mesh_axes;
  std::string pipe_axis = "pipe";
  std::string batch_axis;  // empty: one pipeline
  std::size_t bucket_bytes = GradientReducer::kDefaultBucketBytes;
  DType dtype = DType::Float32;
  // The loss counts its labels (ignore_class): every device sums the count over the pipelines
  // before its first forward (one all-reduce of a float64).
  bool counts_labels = false;
};

// Where PipelineStrategy cuts `network` into stages (the first layer of stages 1..p-1): its
// stage_starts when given, else the cut balance_stages makes of the layers' parameter counts or
// (balance_by_time) of their measured times (measure_layer_times: a timing, so two calls may cut a
// model whose layers time alike differently; the executor cuts once, from its plan). Throws
// std::logic_error for a model that is not built, std::invalid_argument("[pipeline] ...") for a
// cut beyond the last layer.
std::vector<int> pipeline_stage_starts(Network& network, const PipelineStrategy& strategy);

// The pipeline's plan on global batches of `global_batch` rows (0: rows and bytes 0). Segment s is
// stage s, run by the devices at position s of the pipe axis; its weights' layouts name it. Device
// d's ops: its stage's schedule (make_pipeline_schedule) with the micro-batches' rows (pipeline
// b's slice of the batch cut into micro-batches, slice_of) and, around each forward and backward,
// the receive and send of the boundary's activations or gradients (rows x the boundary layer's
// output values x the dtype's bytes, to or from the neighbouring stage's device of the same
// pipeline); then, with several pipelines, the stage's BatchNormalization statistics and its
// gradient buckets all-reduced over the batch axis (after the schedule, GradientReducer's buckets
// last first), then the update of the stage's values.
StepPlan pipeline_step_plan(const std::vector<PlanLayer>& layers, const PipelinePlanInputs& in,
                            std::int64_t global_batch);

// The executor's schedule of a pipeline plan: per stage, the (kind, micro-batch) list of the first
// device that runs it. std::logic_error for a plan whose segments are not the schedule's stages.
PipelineSchedule pipeline_schedule_of(const StepPlan& plan, PipelineScheduleKind kind, int microbatches);

// Where WavefrontStrategy cuts `network`: the layers [first, end) of each of `stages` stages, the
// leading recurrent layers with return_sequences=True cut as evenly as possible (earlier stages
// one more); the layers after them (the head) run on the last stage. Throws
// std::invalid_argument("[wavefront] ...") when fewer such layers than stages lead the model.
std::vector<std::pair<int, int>> wavefront_stage_ranges(Network& network, int stages);

struct WavefrontPlanInputs {
  std::string strategy = "WavefrontPipeline";
  std::vector<std::pair<int, int>> stage_ranges;  // per stage: its recurrent layers [first, end)
  std::int64_t time_chunk = 1;
  std::int64_t timesteps = 1;  // of the sequence
  std::string pipe_axis = "pipe";
  DType dtype = DType::Float32;
};

// The wavefront's plan on global batches of `global_batch` rows. Segment s < p is stage s's
// recurrent layers, run by device s; a head (the layers after them) is segment p on the last
// device. Device s runs, chunk by chunk (chunk k: time steps [k * time_chunk, ...), the whole
// batch), the receive of the chunk from device s - 1, its forward and its send to device s + 1;
// the last device then the head's forward and backward on the whole sequence; then every device
// the chunks' backwards in reverse, each after receiving the chunk's gradient from device s + 1
// and followed by the send of its input gradient to device s - 1. The update of the whole model
// (the executor's one optimizer, after every stage) closes device 0's list, the last to finish.
StepPlan wavefront_step_plan(const std::vector<PlanLayer>& layers, const WavefrontPlanInputs& in,
                             std::int64_t global_batch);

}  // namespace mdtrain
