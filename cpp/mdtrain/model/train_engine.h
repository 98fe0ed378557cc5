#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/model/logs.h"
#include "mdtrain/model/metric.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// Runs train, test and predict steps of one compiled model under its strategy.
//
// Replica 0 is the model's own LayerStack (what get_weights reads); the others are clones. A
// global batch of B rows is cut into contiguous slices, replica r taking B/N rows (+1 for the
// first B%N), possibly zero when B < N: every replica still joins the all-reduce (and the
// collectives its layers run, see LayerStack::step_without_rows), so an uneven last batch never
// hangs. Layers reach the other replicas only through ForwardContext::replicas, a
// CrossReplicaContext the engine implements on each replica's communicator (float64 sums).
// Each replica computes d(sum of its losses / B)/dw, the packed gradients are summed in a fixed
// order, and every replica applies the same optimizer update to the same weights, so the
// replicas stay bitwise identical and the loss is the exact mean over the batch.
// Non-trainable weights (moving statistics) are outside the packed gradients and the optimizer's
// ranges; their layers keep them identical by updating them from cross-replica sums.
//
// With several replicas on the CPU devices of one process the optimizer update is sharded (ZeRO
// stage 1): the summed gradients are reduce-scattered, replica r updates only its contiguous
// range of the packed parameters, and the ranges are all-gathered (with clipping by norm, or a
// reduction to one device, the gradients are all-reduced first instead). Otherwise (GPUs, or
// across workers) the gradients are all-reduced in buckets started during backward as soon as a
// bucket's layers are done (GradientReducer's overlapped form: on NCCL they run on the
// communication stream while backward continues), and every replica applies the whole update,
// fused into one launch on a GPU; across workers each worker so holds the whole optimizer state
// for checkpoints.
// The range update is exactly the whole update restricted to those elements (clipping norms are
// still taken over the full reduced gradients), so the weights are bitwise those of an unsharded
// step, and each replica's optimizer slots are current only on its own range:
// optimizer_state() stitches the ranges together for checkpoints.
class TrainEngine {
 public:
  // Where a replica's training-step time went, summed over steps since the last reset: the
  // numbers behind bench/scaling.py's compute / communication / idle split.
  struct Profile {
    std::int64_t steps = 0;
    double wall = 0;       // whole steps, as seen by the caller
    double compute = 0;    // gather + forward + loss + backward
    double allreduce = 0;  // in the gradient all-reduce (data movement and waiting for peers)
    double update = 0;     // regularization gradients + optimizer
  };

  TrainEngine(LayerStack& primary, std::shared_ptr<Strategy> strategy, const Loss& loss,
              const Optimizer& optimizer);
  ~TrainEngine();

  // One training step on rows x[indices[i]], y[indices[i]], i < count (count = the global batch).
  // Returns the step's loss (mean over the batch plus regularization).
  double train_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count);
  // Forward only; updates the loss tracker and metrics.
  void test_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count);
  // Forward only on rows [begin, begin + count) of x; writes them to the same rows of `out`.
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out);

  // Gives every replica its own copy of these metrics (replacing earlier ones).
  void set_metrics(const std::vector<std::unique_ptr<Metric>>& metrics);
  void reset_metrics();
  std::vector<Profile> profile() const;  // one per replica
  void reset_profile();
  // Each replica's loss sum of the last step divided by that step's global batch.
  std::vector<double> replica_losses() const;
  // "loss" (running mean since the last reset) then each metric's result, aggregated exactly over
  // the replicas.
  // The loss is always over all workers' replicas; metrics are this worker's replicas' unless
  // `all_workers` (a collective between workers: every worker must ask at the same point, as the
  // training loop does at the end of an epoch).
  Logs logs(bool all_workers = false) const;

  // After the primary's weights were set from outside: copy them (trainable and not) to every
  // replica. The primary must be current (refresh_primary() first when it may be stale).
  void broadcast_weights_from_primary();
  // When replica 0 trains on a GPU, the primary (the model's host weights: get_weights, save,
  // the layers' weights seen from Python) is a separate copy that training leaves behind; this
  // copies replica 0's weights into it if a training step ran since the last refresh. Everything
  // that reads or writes the primary's weights calls it first (Model does); it costs nothing
  // when the replicas train the primary itself (CPU devices) or nothing changed.
  void refresh_primary();
  bool primary_stale() const { return primary_stale_; }
  // Replica 0's optimizer: hyperparameters, learning rate and iterations are those of every
  // replica; its slots are current only on replica 0's shard (use optimizer_state()).
  Optimizer& optimizer();
  // Sets every replica's learning rate (a constant replaces a schedule, as in Keras).
  void set_learning_rate(double lr);
  // The whole optimizer state, each parameter range taken from the replica that updates it.
  Optimizer::State optimizer_state() const;
  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  LayerStack& replica_stack(int r);
  const Strategy& strategy() const { return *strategy_; }

 private:
  struct Replica;
  // Cuts the global batch and runs fn(replica, first_row, rows) on every replica.
  // Cut among all workers' replicas, or (predict) among this worker's only.
  template <class F>
  void for_each_slice(std::int64_t count, F&& fn, bool across_workers = true);
  // The sum over all replicas (of all workers) of the last step's loss_sum.
  double sum_of_replica_losses(std::int64_t count);
  void remake_communicators();
  void attach_communicator(Replica& rep, std::unique_ptr<Communicator> comm);
  // Sums this replica's shard of the gradients over all replicas, into that shard.
  void reduce_scatter_own_shard(Replica& rep);
  // [begin, end) of the packed parameters that replica r updates; all ranges but the last have
  // shard_size() elements.
  std::pair<std::int64_t, std::int64_t> shard_of(int replica) const;
  std::int64_t shard_size() const;
  // All-gathers the replicas' updated parameter ranges into every replica's weights.
  void gather_shards(Replica& rep);
  void gather_batch(Replica& rep, const Tensor& x, const Tensor& y, const std::int64_t* indices,
                    std::int64_t rows);
  // Metrics accumulate on the host: labels and predictions of a GPU replica are copied back first.
  static void update_metrics(Replica& rep, const Tensor& y, const Tensor& pred);

  LayerStack& primary_;
  std::shared_ptr<Strategy> strategy_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  bool communicators_broken_ = false;
  // Replica 0 trains the primary itself (CPU devices), or its own copy on a GPU.
  bool primary_is_replica0_ = true;
  bool primary_stale_ = false;  // replica 0 (on a GPU) trained since the primary was refreshed
  bool sharded_optimizer_ = false;  // each replica updates its range of the weights, then all-gather
  bool sharded_update_ = false;     // ... and gradients are reduce-scattered rather than all-reduced
  double wall_ = 0;
  std::int64_t last_count_ = 0;  // global batch of the last train or test step
  double loss_total_ = 0;  // sum over steps of (step loss * rows)
  double loss_count_ = 0;
};

}  // namespace mdtrain
