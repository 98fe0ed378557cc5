#pragma once
// The StepPlan of ModelParallelStrategy (tensor parallelism over a "model" axis, optionally x data
// parallelism over a batch axis), from each layer's sharded form: the one function both
// ModelParallelStrategy::make_plan (from the TensorParallelPlan it decides for a network) and the
// planner (from a profiled model's layers, python/mdtrain/plan/price_tensor_parallel.py) call, so
// the executor's step and the planner's price are the same list of ops.
//
// The plan has one segment per layer. Each device (b, m) of the mesh runs, for its batch slice
// (slice_of(global_batch, batch size, b) rows): each layer's forward, then the model-axis
// collective its sharded form runs on the activations (all-reduce after a row-parallel layer, an
// all-gather after a column-parallel one that gathers its output); the layers' backwards last
// first, each followed by the model-axis collectives of its input gradient; then the batch axis's
// gradient sync of the device's shard, as the executor runs it (ZeRO-1 inside one process on CPU
// devices, buckets all-reduced otherwise), and the update of the device's values. A model group
// whose slice has no rows skips its model-axis collectives (it joins the batch axis's sync).
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/strategy/step_plan.h"
#include "mdtrain/strategy/tensor_parallel_plan.h"

namespace mdtrain {

// What a sharded layer communicates over the model axis (see nn/tensor_parallel/).
enum class ShardedForm {
  Replicated,      // no collective (a split Dropout on split activations included)
  Column,          // output features split and kept split: all-reduce of the input gradient
  ColumnGather,    // output features split, then all-gathered; all-reduce of the input gradient
  Row,             // input features split, arriving split: all-reduce of the output
  RowWholeInput,   // input features split locally: all-reduce of the output, all-gather of dx
  VocabRows,       // an Embedding split by rows: all-reduce of the output
  RecurrentUnits,  // units split: an all-gather of h per timestep; backward an all-reduce of
                   // dL/dh per timestep but the last, and of the input gradient
};
const char* name_of(ShardedForm form);
// Throws std::invalid_argument naming `name` when it is none of name_of's.
ShardedForm sharded_form_of(const std::string& name);

// One layer as the plan reads it: its form, its values per row (input and output, the batch
// dimension left out), whether backward computes its input gradient (not for a layer that reads
// only the network's input), its timesteps (RecurrentUnits) and its trainable weights in packed
// order (whole values; dim: the dimension split over the model axis, -1: replicated).
struct TensorParallelLayer {
  std::string name;
  ShardedForm form = ShardedForm::Replicated;
  std::int64_t input_values = 0;
  std::int64_t output_values = 0;
  std::int64_t timesteps = 1;
  bool input_grad = true;
  std::vector<WeightPlacement> weights;  // axis left empty: the plan names the model axis
};

struct TensorParallelPlanInputs {
  std::string strategy = "ModelParallel";
  std::vector<int> mesh_shape;         // the mesh (row-major device order)
  std::vector<std::string> mesh_axes;  // its axis names
  std::string model_axis = "model";
  std::string batch_axis;  // empty: no batch axis
  DType dtype = DType::Float32;
  int workers = 1;          // processes (the batch axis spans them)
  bool cpu_devices = true;  // ZeRO-1 over the batch axis needs CPU devices and one process
  std::size_t bucket_bytes = GradientReducer::kDefaultBucketBytes;
  std::int64_t global_batch = 0;  // 0: activation bytes and rows left 0
};

// Whether the batch axis's gradients are ZeRO-1 sharded (reduce-scatter, own range, all-gather).
bool tensor_parallel_zero_one(const TensorParallelPlanInputs& in);

StepPlan tensor_parallel_step_plan(const std::vector<TensorParallelLayer>& layers, const TensorParallelPlanInputs& in);

// The layers of `network` as `plan` splits them (forms, values per row, split weights).
std::vector<TensorParallelLayer> tensor_parallel_layers(Network& network, const TensorParallelPlan& plan);

// What the planner knows of a profiled layer: its class name, trainable values and output values
// per row.
struct ProfiledLayer {
  std::string kind;
  std::int64_t params = 0;
  std::int64_t output_values = 0;
};
// The forms of the layout the planner writes for a model axis of t: Megatron pairs of Dense layers
// (a Dense whose units t divides, column-parallel, and the next Dense, row-parallel, when only
// weightless layers lie between them; a Dense with no such partner gathers its output).
// TensorParallelPlan pairs through element-wise layers only; a profile names no layer's form, so
// here any weightless layer between stands for one (a Flatten between would be gathered there).
std::vector<ShardedForm> megatron_forms(const std::vector<ProfiledLayer>& layers, int t);

}  // namespace mdtrain
