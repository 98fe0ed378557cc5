#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/strategy/step_executor.h"
#include "mdtrain/strategy/step_plan.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {

class Strategy;

// Data parallelism (OneDevice, Mirrored, MultiWorkerMirrored): a full replica of the network per
// device, each on its slice of the global batch, gradients summed over all replicas, the same
// update everywhere.
//
// Replica 0 is the primary itself on CPU devices; the others (and replica 0 on a GPU) are copies
// placed on their devices. A global batch of B rows is cut into contiguous slices (slice_of over
// all workers' replicas), possibly empty when B < N: every replica still joins every collective
// (the gradient sync and those its layers run, see Network::step_without_rows), so an uneven last
// batch never hangs. Layers reach the other replicas only through ForwardContext::replicas, a
// CrossReplicaContext on the replica's communicator. Each replica computes d(sum of its losses /
// B)/dw, the packed gradients are summed in a fixed order, and every replica applies the same
// update to the same weights, so the replicas stay bitwise identical and the loss is the exact
// mean over the batch. Non-trainable weights (moving statistics) are outside the packed
// gradients; their layers keep them identical by updating them from cross-replica sums.
//
// The gradient sync comes from the strategy's StepPlan (replicated_step_plan decides it, once, for
// the executor and the planner alike):
// - ZeroOne: several replicas on the CPU devices of one process, all-reduce, no clipping by norm:
//   reduce-scatter, each replica updates its range, all-gather (ZeroShards).
// - ZeroOneAfterAllReduce: the same ranges updated, but the gradients all-reduced first (clipping
//   by norm needs the whole gradient; ReductionToOneDevice is what the user asked for).
// - BucketedAllReduce: GPUs or several workers: buckets all-reduced during backward as soon as a bucket
//   is final (GradientReducer's overlapped form: on NCCL they run on the communication stream
//   while backward continues), then every replica applies the whole update (fused into one launch
//   on a GPU). Across workers each worker so holds the whole optimizer state for checkpoints.
// - ReduceToDevice (CentralStorageStrategy's plan): the gradients are reduced onto replica
//   0, whose network is the stored one on the host; only it updates, with the one optimizer state,
//   and the new weights are broadcast to the other replicas.
class ReplicatedExecutor final : public StepExecutor {
 public:
  // The strategy provides devices, communicators and replica threads; it must outlive this.
  // `plan`: the strategy's data-parallel StepPlan for `primary` (one sync over its replicas).
  ReplicatedExecutor(Network& primary, Strategy& strategy, const Loss& loss, const Optimizer& optimizer, StepPlan plan);
  ~ReplicatedExecutor() override;

  StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  bool supports_sample_weights() const override { return true; }
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) override;

  Optimizer::State optimizer_state() const override;
  void broadcast_weights_from_primary() override;
  void refresh_primary() override;
  void abort(const std::string& reason) override;

  const StepPlan& plan() const { return plan_; }
  SyncKind gradient_sync() const { return sync_; }

 private:
  struct Replica;
  // Cuts the global batch and runs fn(replica, local_index, first_row, rows) on every replica, one
  // thread each. Cut among all workers' replicas, or (predict) among this worker's only.
  template <class F>
  void for_each_slice(std::int64_t count, F&& fn, bool across_workers = true);
  void remake_communicators();
  void attach_communicator(Replica& rep, std::unique_ptr<Communicator> comm);
  static void check_weights_unmasked(const GlobalBatch& batch, bool masked_output);
  void gather_batch(Replica& rep, const GlobalBatch& batch, std::int64_t first, std::int64_t rows);
  // The sum over all replicas (of all workers) of the last step's loss sums.
  double sum_of_replica_losses(std::int64_t count);
  // A replica's step when the network's output carries a mask (nn/masked_steps.h).
  void masked_train_step(Replica& rep, const GlobalBatch& batch, const ForwardContext& ctx, std::int64_t first,
                         std::int64_t rows, const Network::GradientsFinal& on_final, int local,
                         ReplicaOutputSink* outputs);
  void masked_test_step(Replica& rep, const GlobalBatch& batch, std::int64_t first, std::int64_t rows, int local,
                        ReplicaOutputSink* outputs);

  Network& primary_;
  Strategy& strategy_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  StepPlan plan_;
  SyncKind sync_ = SyncKind::BucketedAllReduce;
  std::optional<ZeroShards> shards_;  // set for the Zero* plans
  bool communicators_broken_ = false;
  bool primary_is_replica0_ = true;  // replica 0 trains the primary itself (CPU devices); else
                                     // primary_stale_ is set when replica 0 (on a GPU) trains
  double wall_ = 0;                  // the roster's shared wall
};

}  // namespace mdtrain
