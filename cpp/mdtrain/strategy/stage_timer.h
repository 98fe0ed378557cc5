#pragma once
// Times one pipeline stage the way PipelineExecutor runs it, for the scaling planner: the stage's
// own copy of its layers, a state slot per micro-batch it holds at once (sharing the stage's
// weights and gradients), its op list in order, the micro-batches' gradients summed as the
// executor sums them. A layer timed alone, one call on a fresh copy of the whole model
// (measure_layer_times), misses what a stage gains from running micro-batch after micro-batch
// through the same weights with only its own layers' working set: the heavy MLP's stage of its
// 2048 x 2048 layer, on 4-8-row micro-batches, ran at 0.72-0.80x the sum of its layers' lone
// times per micro-batch.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mdtrain/strategy/pipeline_schedule.h"

namespace mdtrain {

class LayerStack;

struct StageTime {
  std::int64_t forward_ns = 0;   // the list's forwards, summed
  std::int64_t backward_ns = 0;  // its backwards (with the gradients' accumulation), summed
};

// Layers [first, last) of `model` as one stage running `ops` (a stage's list from
// make_pipeline_schedule) on micro-batches of `rows` rows of zeros: one untimed pass (the slots'
// buffers are allocated in it, as in a training's first step), then `repeats` timed passes, each
// returned. The stage's first layer computes its input gradient unless first == 0, as the
// executor's does for the stage before it. Sends and receives are not run: the planner costs
// them on the links. std::invalid_argument("[pipeline] ...") for an empty or out-of-range layer
// range, rows or repeats below 1, or an op list that runs a backward before its forward.
std::vector<StageTime> measure_stage_time(const LayerStack& model, std::size_t first, std::size_t last,
                                          std::int64_t rows, const std::vector<PipelineOp>& ops, int repeats = 1);

}  // namespace mdtrain
