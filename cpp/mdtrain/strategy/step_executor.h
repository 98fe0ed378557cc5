#pragma once
// StepExecutor: how a strategy runs the steps of one compiled model. model/ hands its strategy the
// model's Network (the primary: the weights get_weights reads), loss and optimizer once
// (Strategy::make_executor), then one global batch per step, and gets back loss sums; it never
// sees replicas, communicators, meshes or schedules. Each kind of parallelism is an executor of
// its own in strategy/ (ReplicatedExecutor: data parallelism), so a new strategy is a new file
// here, not a branch in model/.
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

// Rows x[indices[i]], y[indices[i]] for i < count: one global batch (the strategy cuts it).
struct GlobalBatch {
  const Tensor& x;
  const Tensor& y;
  const std::int64_t* indices;
  std::int64_t count;
};

// The batch's rows of x and y, in order, into x_out and y_out (made (count, ...) when they are not):
// the whole global batch in one place, for executors that do not cut it into replica slices.
void gather_global_batch(const GlobalBatch& batch, Tensor& x_out, Tensor& y_out);

// What a step reports of its loss, exactly as the caller needs it for Keras's running mean:
// `sum` = the sum of per-example losses over the whole global batch (every replica, every
// worker), `regularization` = the weight penalties of the weights the step started from.
struct StepLoss {
  double sum = 0;
  double regularization = 0;
};

// Where a replica's step time went, summed over steps since the last reset (bench/scaling.py's
// compute / communication / idle split).
struct StepProfile {
  std::int64_t steps = 0;
  double wall = 0;     // whole steps, as seen by the caller
  double compute = 0;  // gather + forward + loss + backward (their collectives excluded)
  // In collectives (data movement and waiting for peers): the gradients', and under tensor
  // parallelism the model axis's (activations summed or gathered inside forward and backward).
  double allreduce = 0;
  double update = 0;  // regularization gradients + optimizer
  // The collectives of the replica's data-parallel group (calls, bytes): what the StepPlan's op
  // list says a step runs, times the steps (tests compare the two). Empty where not counted.
  CollectiveCounts collectives;
};

// Sees each replica's labels and predictions after its forward (for metrics), on that replica's
// thread: calls for different replicas may run at the same time.
class ReplicaOutputSink {
 public:
  virtual ~ReplicaOutputSink() = default;
  virtual void on_replica_output(int local_replica, const Tensor& y, const Tensor& pred) = 0;
  // The same for an output that carries a mask ((batch, timesteps), nn/sequence_mask.h): metrics
  // leave the masked steps out.
  virtual void on_replica_masked_output(int local_replica, const Tensor& y, const Tensor& pred, const Tensor& mask) = 0;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  // One training step (forward, backward, gradient sync, update) on a global batch (count > 0).
  virtual StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) = 0;
  // Forward only, with the loss (scale 1) and the outputs.
  virtual StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) = 0;
  // Forward only on rows [begin, begin + count) of x, written to the same rows of `out`.
  virtual void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) = 0;

  // This process's replicas (local), and their networks (0 is the primary on CPU devices).
  virtual int num_replicas() const = 0;
  virtual Network& replica_network(int replica) = 0;
  // Each local replica's loss sum of the last train or test step.
  virtual std::vector<double> replica_loss_sums() const = 0;

  // Replica 0's optimizer: hyperparameters, learning rate and iterations of every replica.
  virtual Optimizer& optimizer() = 0;
  virtual void set_learning_rate(double lr) = 0;
  // The whole optimizer state (stitched from shards where the update is sharded).
  virtual Optimizer::State optimizer_state() const = 0;
  // Bytes of optimizer state each local replica's optimizer holds, one entry per replica.
  virtual std::vector<std::int64_t> optimizer_state_bytes() const = 0;

  // After the primary's weights were set from outside: copy them to every replica.
  virtual void broadcast_weights_from_primary() = 0;
  // Copies the replicas' trained weights into the primary when it is a separate copy (replica 0
  // on a GPU) and a step ran since; free otherwise.
  virtual void refresh_primary() = 0;
  virtual bool primary_stale() const = 0;

  // Fails every collective of this process's replicas, pending and later, on every rank of their
  // groups (peers in other processes included) with `reason`: a process that stops training
  // (an exception between steps) releases peers waiting for it. The next step makes fresh groups.
  virtual void abort(const std::string& reason) = 0;

  // Whether the loss and metrics leave out the steps an output's mask drops (nn/masked_steps.h).
  // An executor that does not cannot train a network whose output_masked(): TrainEngine refuses.
  virtual bool reads_output_masks() const { return false; }

  virtual std::vector<StepProfile> profile() const = 0;  // one per local replica
  virtual void reset_profile() = 0;
};

}  // namespace mdtrain
