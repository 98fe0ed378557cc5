#pragma once
// StepPlan: what one training step of a strategy does, as data (DESIGN.md §9): the network's
// segments, each weight's layout, each gradient's sync and each device's ordered op list. A
// strategy makes it (Strategy::make_plan), its executor takes its decisions from it (the
// ReplicatedExecutor its gradient sync, the pipeline executors their stages and op order:
// pipeline_step_plan.h), and the planner (python/mdtrain/plan) prices the same plan, so the code
// that trains and the code that predicts cannot drift apart.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

// How a group of gradients is summed over the devices that hold the same weights.
enum class SyncKind {
  BucketedAllReduce,      // buckets all-reduced as backward finishes them; every device updates all
  ZeroOne,                // ZeRO-1: reduce-scatter, each device updates its range, all-gather
  ZeroOneAfterAllReduce,  // buckets all-reduced (clipping by norm needs the whole gradient), each
                          // device updates its range, all-gather
  ReduceToDevice,         // reduce onto the parameter device, its update, broadcast of the weights
  PushPull,               // parameter servers: the worker pulls each server's rows, pushes their
                          // gradients; the servers update
};
const char* name_of(SyncKind kind);

enum class OpKind { Forward, Backward, Collective, Update, Pull, Push, Send, Recv };
const char* name_of(OpKind kind);

// A part of the network one device runs as a unit: the whole network, a pipeline stage, or a
// wavefront stage's recurrent layers (its head on the last device is a segment of its own).
struct Segment {
  std::string name;
  std::size_t first_layer = 0;  // layers [first_layer, end_layer) of Network::layers()
  std::size_t end_layer = 0;
  std::vector<int> devices;  // the devices that run it, ascending (empty: every device)
};

// A weight's layout: replicated on every device (axis empty), or sharded along mesh axis `axis`
// on dimension `dim`. `segment` >= 0: only the devices of that segment hold it (a pipeline stage's
// weights; replicated among them unless `axis` says otherwise).
struct WeightPlacement {
  std::string weight;
  std::int64_t values = 0;
  std::string axis;
  int dim = -1;
  int segment = -1;
};

// The sync of trainable values [first_value, first_value + values) of the packed gradients over
// mesh axis `axis` (`group` devices; a group of 1 sums nothing).
struct GradientSync {
  SyncKind kind = SyncKind::BucketedAllReduce;
  std::string axis;
  int group = 1;
  std::int64_t first_value = 0;
  std::int64_t values = 0;
  std::size_t bucket_bytes = 0;  // BucketedAllReduce, ZeroOneAfterAllReduce
};

// One op of a device's step. Forward/Backward: `segment` on micro-batch `microbatch` (0: the
// device's whole slice) of `rows` rows; a wavefront's time chunk `microbatch` covers `steps` time
// steps of the sequence (0: all of them). Collective: `collective` over `group` devices of `axis`, `bytes` as
// Communicator::counts counts them; a gradient bucket names its first value and its `bucket`
// (during_backward: started by backward as soon as the bucket is final). Update: the optimizer
// on values [first_value, first_value + values). Pull/Push: `bytes` of the rows server `peer`
// holds, its values to the worker or their gradients to it. Send/Recv: `bytes` of the activations
// (`gradient`: their gradients) of `segment`'s output boundary on `microbatch` (`rows` rows,
// `steps` time steps of a wavefront chunk) to or from device `peer`; a send is buffered (it never
// waits for the receiver), a receive waits for the matching send.
struct PlanOp {
  OpKind kind = OpKind::Forward;
  int segment = 0;
  int microbatch = 0;
  std::int64_t rows = 0;
  CountedCollective collective = CountedCollective::AllReduce;
  std::string axis;
  int group = 1;
  std::int64_t bytes = 0;
  int bucket = -1;
  bool during_backward = false;
  std::int64_t first_value = 0;
  std::int64_t values = 0;
  int peer = -1;
  std::int64_t steps = 0;
  bool gradient = false;
};

struct DevicePlan {
  int device = 0;  // global device (mesh rank)
  std::vector<PlanOp> ops;
};

struct StepPlan {
  std::string strategy;
  std::vector<int> mesh_shape;
  std::vector<std::string> mesh_axes;
  std::vector<Segment> segments;
  std::vector<WeightPlacement> layouts;
  std::vector<GradientSync> syncs;
  std::vector<DevicePlan> devices;

  // The one gradient sync of a plan that has one (data parallelism); throws otherwise.
  const GradientSync& only_sync() const;
  // Calls and bytes per collective kind of `device`'s op list, its sends and receives included
  // (what Communicator::counts reports of that device's communicators after one step).
  CollectiveCounts collective_counts(int device) const;
};

// What a plan takes from the compiled model besides its network.
struct PlanOptions {
  bool clips_by_norm = false;  // the optimizer clips by norm (clipnorm or global_clipnorm)
  // Rows of a step's global batch: the plan's activation bytes (sends, tensor-parallel
  // collectives) and ops' rows follow from it; 0 leaves them 0 (the gradient sync needs none).
  std::int64_t global_batch = 0;
  bool counts_labels = false;  // the loss counts its labels (ignore_class): summed over the slices
};

// What a data-parallel plan depends on: the devices, how the strategy reduces, and the
// optimizer's clipping. Strategy::make_plan fills it from the strategy; the planner from a
// cluster it prices.
struct ReplicatedPlanInputs {
  std::string strategy;
  int local_replicas = 1;         // devices of each worker
  int workers = 1;                // processes
  bool host_replicas = true;      // replica 0 trains the host network itself (CPU devices)
  bool parameter_device = false;  // CentralStorage: reduce to replica 0, update there, broadcast
  GradientReducer::Algorithm reduction = GradientReducer::Algorithm::AllReduce;
  std::size_t bucket_bytes = GradientReducer::kDefaultBucketBytes;
  bool clips_by_norm = false;  // the optimizer clips by norm (clipnorm or global_clipnorm)
};

PlanOptions plan_options_of(const Optimizer& optimizer);

// What a plan reads of a network: its layer count, the dtype of its values, and its trainable
// weights in packed order (their values; the layouts the plan fills in). The planner describes
// a profiled model the same way.
struct PlanWeights {
  std::size_t layers = 0;
  DType dtype = DType::Float32;
  std::vector<WeightPlacement> weights;
  std::int64_t values() const;
};
PlanWeights plan_weights_of(Network& network);

// Appends the gradient buckets of `total` values to `ops` as GradientReducer sums them after
// backward (or, `during_backward`, as backward finishes them): last bucket first, each one
// all-reduce (or, `reduce_to_one`, a reduce onto rank 0 and a broadcast) over `group` devices of
// mesh axis `axis`; the buckets' first values are offset by `first_value`.
void add_gradient_buckets(std::vector<PlanOp>& ops, const std::string& axis, int group, std::int64_t first_value,
                          std::int64_t total, std::size_t elem, std::size_t bucket_bytes, bool reduce_to_one,
                          bool during_backward);

// The ops plans are made of: a forward or backward of `segment` on `microbatch` of `rows` rows
// (`steps` time steps, 0: all); collective `kind` of `bytes` over `group` devices of `axis`; the
// optimizer's update of trainable values [first_value, first_value + values).
PlanOp compute_op(OpKind kind, int segment, int microbatch, std::int64_t rows, std::int64_t steps = 0);
PlanOp collective_op(CountedCollective kind, const std::string& axis, int group, std::int64_t bytes);
PlanOp update_op(std::int64_t first_value, std::int64_t values);

// Appends the forward and then the backward of `segment` on `microbatch` to `ops`.
void add_forward_backward(std::vector<PlanOp>& ops, int segment = 0, int microbatch = 0);

// The data-parallel sync plan (see ReplicatedExecutor): decided here once.
SyncKind replicated_sync_kind(const ReplicatedPlanInputs& in);
// The data-parallel step of `network` under `in`: one segment (the whole network), every weight
// replicated on the ("batch",) mesh, one sync of all trainable values; a group of one device runs
// no collective.
StepPlan replicated_step_plan(const PlanWeights& weights, const ReplicatedPlanInputs& in);

}  // namespace mdtrain
