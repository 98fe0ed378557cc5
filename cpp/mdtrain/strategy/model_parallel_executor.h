#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/nn/network.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/strategy/step_executor.h"
#include "mdtrain/strategy/step_plan.h"
#include "mdtrain/strategy/tensor_parallel_plan.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {

class ModelParallelStrategy;

// The step of ModelParallelStrategy (tensor parallelism, optionally x data parallelism): one
// device per mesh position (batch b, model m), one thread each. On GPUs each device's shard, batch
// slice and buffers live on its GPU, and every device applies its shard's whole update (no ZeRO-1,
// as MirroredStrategy on GPUs).
//
// Device (b, m) trains shard m of the model (TensorParallelPlan::build_shard of the primary): its
// sharded layers talk over the model-axis communicator (a CommunicatorShardGroup), so every device
// of a model group computes the same whole outputs and loss. The global batch is cut along the
// batch axis as the replicated executor cuts it among replicas (slice_of: uneven, possibly empty
// slices); every device of model group b sees slice b. After backward each shard's packed
// gradients are summed over the batch axis — reduce-scattered in ZeRO-1 ranges (ZeroShards), each
// device updates its range of its shard with its own optimizer (which holds only that range's
// slots), and the ranges are all-gathered — so weights and optimizer state are split along the
// model axis by the layouts and along the batch axis by ZeRO-1. Replicated weights get identical
// gradients on every device of a model group (their inputs and output gradients are the summed or
// gathered ones), so they stay identical without a model-axis reduction.
//
// Across MPI workers (the model axis inside each worker, the batch axis across them) the batch
// axis's sum is an all-reduce (GradientReducer) and each worker keeps its shards' whole optimizer
// state, as MultiWorkerMirrored does, so any worker can write a checkpoint.
//
// The primary keeps the unsharded weights: refresh_primary gathers the shards into it (checkpoints
// and get_weights hold logical tensors), broadcast_weights_from_primary scatters it, and
// optimizer_state() is the unsharded state, so any strategy loads what this one saves.
class ModelParallelExecutor final : public StepExecutor {
 public:
  // `primary` is any built Network (a Sequential's stack or a Functional model's graph). Throws
  // std::invalid_argument("[model_parallel] ...") for layouts that do not fit its layers and for
  // clipping by norm (the norm of a whole weight spans shards).
  ModelParallelExecutor(Network& primary, ModelParallelStrategy& strategy, const Loss& loss,
                        const Optimizer& optimizer);
  ~ModelParallelExecutor() override;

  StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) override;

  // The roster has one "replica" per device, in mesh order; their networks are the shards, their
  // profiles count both axes' collectives (the plan lists the model axis's and the batch axis's).
  Optimizer::State optimizer_state() const override;
  void broadcast_weights_from_primary() override;
  void refresh_primary() override;
  void abort(const std::string& reason) override;

  // Bytes of the weights each device holds: its packed trainable values and non-trainable ones.
  std::vector<std::int64_t> parameter_bytes() const;
  // Bytes each device moved over the model axis (all-reduced and gathered results) in the last
  // training step.
  std::vector<std::int64_t> model_axis_bytes() const;
  const TensorParallelPlan& plan() const { return *plan_; }
  // The step as data (ModelParallelStrategy::make_plan), global batch left 0.
  const StepPlan& step_plan() const { return step_plan_; }

 protected:
  void reset_own_profile() override;  // the model-axis bytes

 private:
  struct Shard;
  template <class F>
  void run_devices(F&& fn);
  void remake_communicators();
  void gather_batch(Shard& s, const GlobalBatch& batch, std::int64_t first, std::int64_t rows);
  double regularization_loss() const;
  // The step's loss sum over every batch group (of every worker).
  double sum_of_losses();
  Shard& shard_at(int batch, int model) const;

  Network& primary_;
  ModelParallelStrategy& strategy_;
  std::optional<TensorParallelPlan> plan_;
  StepPlan step_plan_;
  std::vector<std::unique_ptr<Shard>> shards_;  // mesh order
  int batch_size_ = 1, model_size_ = 1;         // the axes' sizes
  std::vector<int> local_batches_;              // this worker's batch coordinates, ascending
  std::optional<ZeroShards> zero_;              // set when one process has several batch groups
  bool communicators_broken_ = false;
  double wall_ = 0;  // the roster's shared wall
};

}  // namespace mdtrain
