#include "mdtrain/strategy/step_plan.h"

#include <algorithm>

#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {

const char* name_of(SyncKind kind) {
  switch (kind) {
    case SyncKind::BucketedAllReduce: return "bucketed_all_reduce";
    case SyncKind::ZeroOne: return "zero1";
    case SyncKind::ZeroOneAfterAllReduce: return "zero1_after_all_reduce";
    case SyncKind::ReduceToDevice: return "reduce_to_device";
    case SyncKind::PushPull: return "push_pull";
  }
  return "unknown";
}

const char* name_of(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return "forward";
    case OpKind::Backward: return "backward";
    case OpKind::Collective: return "collective";
    case OpKind::Update: return "update";
    case OpKind::Pull: return "pull";
    case OpKind::Push: return "push";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
  }
  return "unknown";
}

const GradientSync& StepPlan::only_sync() const {
  MDTRAIN_CHECK(syncs.size() == 1, std::logic_error, "[plan] ", strategy, ": the plan has ", syncs.size(),
                " gradient syncs, not one");
  return syncs.front();
}

CollectiveCounts StepPlan::collective_counts(int device) const {
  CollectiveCounts out;
  for (const DevicePlan& d : devices) {
    if (d.device != device) continue;
    for (const PlanOp& op : d.ops) {
      if (op.kind == OpKind::Collective) out.add(op.collective, op.bytes);
      if (op.kind == OpKind::Send) out.add(CountedCollective::Send, op.bytes);
      if (op.kind == OpKind::Recv) out.add(CountedCollective::Recv, op.bytes);
    }
  }
  return out;
}

PlanOp compute_op(OpKind kind, int segment, int microbatch, std::int64_t rows, std::int64_t steps) {
  PlanOp op;
  op.kind = kind;
  op.segment = segment;
  op.microbatch = microbatch;
  op.rows = rows;
  op.steps = steps;
  return op;
}

PlanOp collective_op(CountedCollective kind, const std::string& axis, int group, std::int64_t bytes) {
  PlanOp op;
  op.kind = OpKind::Collective;
  op.collective = kind;
  op.axis = axis;
  op.group = group;
  op.bytes = bytes;
  return op;
}

PlanOp update_op(std::int64_t first_value, std::int64_t values) {
  PlanOp op;
  op.kind = OpKind::Update;
  op.first_value = first_value;
  op.values = values;
  return op;
}

void add_forward_backward(std::vector<PlanOp>& ops, int segment, int microbatch) {
  for (OpKind kind : {OpKind::Forward, OpKind::Backward}) {
    PlanOp op;
    op.kind = kind;
    op.segment = segment;
    op.microbatch = microbatch;
    ops.push_back(op);
  }
}

PlanOptions plan_options_of(const Optimizer& optimizer) {
  PlanOptions out;
  out.clips_by_norm = optimizer.options().clipnorm.has_value() || optimizer.options().global_clipnorm.has_value();
  return out;
}

SyncKind replicated_sync_kind(const ReplicatedPlanInputs& in) {
  // CentralStorage: the stored weights are replica 0's network, the primary on the host.
  if (in.parameter_device) {
    MDTRAIN_CHECK(in.host_replicas && in.workers == 1, std::invalid_argument, "[engine] ", in.strategy,
                  ": the parameter device must hold replica 0's weights (host replicas, one worker)");
    return SyncKind::ReduceToDevice;
  }
  // The update is sharded (ZeRO-1) among the replicas of one process on CPU devices. Across
  // workers it is not: each worker keeps the whole optimizer state, so any worker can write a
  // checkpoint and a checkpoint loads under any strategy. On GPUs every replica applies the whole
  // update instead: there it is one fused, memory-bound launch that costs little next to the
  // GEMMs, while the all-reduce of each gradient bucket overlaps the rest of backward (a
  // reduce-scatter would have to wait for all of it). Gradient clipping by norm needs every
  // replica to hold the whole summed gradient, and a reduction to one device is what the user
  // asked for: both all-reduce before the sharded update.
  if (in.local_replicas > 1 && in.workers == 1 && in.host_replicas) {
    const bool reduce_scatter = !in.clips_by_norm && in.reduction == GradientReducer::Algorithm::AllReduce;
    return reduce_scatter ? SyncKind::ZeroOne : SyncKind::ZeroOneAfterAllReduce;
  }
  return SyncKind::BucketedAllReduce;
}

namespace {}  // namespace

void add_gradient_buckets(std::vector<PlanOp>& ops, const std::string& axis, int group, std::int64_t first_value,
                          std::int64_t total, std::size_t elem, std::size_t bucket_bytes, bool reduce_to_one,
                          bool during_backward) {
  const auto per = static_cast<std::int64_t>(std::max<std::size_t>(1, bucket_bytes / elem));
  const std::int64_t count = std::max<std::int64_t>(1, (total + per - 1) / per);
  for (std::int64_t k = count - 1; k >= 0; --k) {
    const std::int64_t begin = std::min(total, k * per);
    const auto bytes = static_cast<std::int64_t>(std::min(per, total - begin) * static_cast<std::int64_t>(elem));
    for (CountedCollective kind :
         reduce_to_one ? std::vector<CountedCollective>{CountedCollective::Reduce, CountedCollective::Broadcast}
                       : std::vector<CountedCollective>{CountedCollective::AllReduce}) {
      PlanOp op = collective_op(kind, "batch", group, bytes);
      op.axis = axis;
      op.bucket = static_cast<int>(k);
      op.first_value = first_value + begin;
      op.values = bytes / static_cast<std::int64_t>(elem);
      op.during_backward = during_backward;
      ops.push_back(op);
    }
  }
}

std::int64_t PlanWeights::values() const {
  std::int64_t total = 0;
  for (const WeightPlacement& w : weights) total += w.values;
  return total;
}

PlanWeights plan_weights_of(Network& network) {
  PlanWeights out;
  out.layers = network.layers().size();
  out.dtype = network.dtype();
  for (const Parameter* p : network.trainable_parameters())
    out.weights.push_back(WeightPlacement{p->name, p->value.numel(), "", -1, -1});
  MDTRAIN_CHECK(out.values() == network.trainable_count(), std::logic_error, "[plan] the trainable weights hold ",
                out.values(), " values, the packed gradients ", network.trainable_count());
  return out;
}

StepPlan replicated_step_plan(const PlanWeights& weights, const ReplicatedPlanInputs& in) {
  MDTRAIN_CHECK(in.local_replicas >= 1 && in.workers >= 1, std::invalid_argument, "[plan] ", in.strategy,
                ": replicas and workers must be >= 1");
  const int n = in.local_replicas * in.workers;
  const SyncKind kind = replicated_sync_kind(in);
  const std::int64_t total = weights.values();
  const std::size_t elem = size_of(weights.dtype);
  const auto elem64 = static_cast<std::int64_t>(elem);

  StepPlan plan;
  plan.strategy = in.strategy;
  plan.mesh_shape = {n};
  plan.mesh_axes = {"batch"};
  plan.segments.push_back(Segment{"network", 0, weights.layers, {}});
  plan.layouts = weights.weights;  // every weight replicated
  GradientSync sync;
  sync.kind = kind;
  sync.axis = "batch";
  sync.group = n;
  sync.values = total;
  if (kind == SyncKind::BucketedAllReduce || kind == SyncKind::ZeroOneAfterAllReduce)
    sync.bucket_bytes = in.bucket_bytes;
  plan.syncs.push_back(sync);

  const bool to_one = in.reduction == GradientReducer::Algorithm::ReduceToOne;
  const bool sharded = kind == SyncKind::ZeroOne || kind == SyncKind::ZeroOneAfterAllReduce;
  const ZeroShards shards(total, sharded ? n : 1);
  for (int d = 0; d < n; ++d) {
    DevicePlan dev;
    dev.device = d;
    add_forward_backward(dev.ops);
    switch (kind) {
      case SyncKind::BucketedAllReduce:
        if (n > 1) add_gradient_buckets(dev.ops, "batch", n, 0, total, elem, in.bucket_bytes, to_one, true);
        dev.ops.push_back(update_op(0, total));
        break;
      case SyncKind::ZeroOne:
      case SyncKind::ZeroOneAfterAllReduce: {
        const std::int64_t shard_bytes = shards.shard_size() * n * elem64;
        if (kind == SyncKind::ZeroOne) {
          dev.ops.push_back(collective_op(CountedCollective::ReduceScatter, "batch", n, shard_bytes));
        } else {
          add_gradient_buckets(dev.ops, "batch", n, 0, total, elem, in.bucket_bytes, to_one, true);
        }
        const auto [begin, end] = shards.range_of(d);
        dev.ops.push_back(update_op(begin, end - begin));
        dev.ops.push_back(collective_op(CountedCollective::AllGather, "batch", n, shard_bytes));
        break;
      }
      case SyncKind::ReduceToDevice:
        dev.ops.push_back(collective_op(CountedCollective::Reduce, "batch", n, total * elem64));
        if (d == 0) dev.ops.push_back(update_op(0, total));
        dev.ops.push_back(collective_op(CountedCollective::Broadcast, "batch", n, total * elem64));
        break;
      case SyncKind::PushPull:
        MDTRAIN_CHECK(false, std::logic_error, "[plan] a data-parallel plan does not push to servers");
        break;
    }
    // Every worker reports the same loss: the loss sums are all-reduced over all replicas.
    if (in.workers > 1) dev.ops.push_back(collective_op(CountedCollective::AllReduce, "batch", n, 8));
    plan.devices.push_back(std::move(dev));
  }
  return plan;
}

}  // namespace mdtrain
