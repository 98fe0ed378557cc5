#pragma once
// StepExecutor: how a strategy runs the steps of one compiled model. model/ hands its strategy the
// model's Network (the primary: the weights get_weights reads), loss and optimizer once
// (Strategy::make_executor), then one global batch per step, and gets back loss sums; it never
// sees replicas, communicators, meshes or schedules. Each kind of parallelism is an executor of
// its own in strategy/ (ReplicatedExecutor: data parallelism), so a new strategy is a new file
// here, not a branch in model/.
//
// The virtual interface is only what differs between executors: running the plan's steps, the
// whole optimizer state (stitched from shards or stages), moving weights between the primary and
// the devices, and aborting. What they share — their devices' networks, optimizers, loss sums and
// profiles — is a DeviceRoster (device_roster.h): each executor registers its devices' records
// there once when it is made and fills them during its steps; StepExecutor reads them
// non-virtually. Whether the primary is older than the devices is a flag the executor sets when a
// step trains copies of it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/device_roster.h"
#include "mdtrain/strategy/step_profile.h"

namespace mdtrain {

// Rows x[indices[i]], y[indices[i]] for i < count: one global batch (the strategy cuts it).
struct GlobalBatch {
  const Tensor& x;
  const Tensor& y;
  const std::int64_t* indices;
  std::int64_t count;
  // Keras's sample_weight: one float32 per row of x (indexed like x and y), or null. Only
  // executors whose supports_sample_weights() is true are given one.
  const Tensor* sample_weight = nullptr;
};

// The batch's rows of x and y, in order, into x_out and y_out (made (count, ...) when they are not):
// the whole global batch in one place, for executors that do not cut it into replica slices. With
// w_out, the rows' sample weights too (when the batch has them).
void gather_global_batch(const GlobalBatch& batch, Tensor& x_out, Tensor& y_out, Tensor* w_out = nullptr);

// What a step reports of its loss, exactly as the caller needs it for Keras's running mean:
// `sum` = the sum of per-example losses over the whole global batch (every replica, every
// worker), `regularization` = the weight penalties of the weights the step started from.
struct StepLoss {
  double sum = 0;
  double regularization = 0;
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
  // The three steps are what each executor interprets of its StepPlan: the reason it exists.
  virtual StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) = 0;
  // Forward only, with the loss (scale 1) and the outputs.
  virtual StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) = 0;
  // Whether the steps take GlobalBatch::sample_weight (the data-parallel executors do).
  virtual bool supports_sample_weights() const { return false; }
  // Forward only on rows [begin, begin + count) of x, written to the same rows of `out`.
  virtual void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) = 0;

  // The whole optimizer state, as an optimizer of the unsharded model on one device holds it:
  // virtual because only the executor knows how its devices' states fit together (ZeRO-1 ranges,
  // tensor-parallel shards, pipeline stages, none on a parameter-server worker).
  virtual Optimizer::State optimizer_state() const = 0;

  // After the primary's weights were set from outside: copy them to every device. Virtual: a
  // replica copies the whole primary, a shard or a stage its part of it, and an executor that
  // trains the primary itself copies nothing.
  virtual void broadcast_weights_from_primary() = 0;
  // Copies the devices' trained weights into the primary when it is a separate copy (replica 0
  // on a GPU, shards, stages) and a step ran since (primary_stale()); free otherwise. Virtual for
  // the same reason as broadcast_weights_from_primary.
  virtual void refresh_primary() = 0;

  // Fails every collective of this process's devices, pending and later, on every rank of their
  // groups (peers in other processes included) with `reason`: a process that stops training
  // (an exception between steps) releases peers waiting for it. The next step makes fresh groups.
  // Virtual: each executor knows its communicators (one per replica, or one per mesh axis).
  virtual void abort(const std::string& reason) = 0;

  // This process's devices (replicas, shards or stages; local), and their networks (0 is the
  // primary on CPU devices). Throws std::out_of_range outside [0, num_replicas()).
  int num_replicas() const { return roster_.size(); }
  Network& replica_network(int replica) { return roster_.network(replica); }
  // Each local device's loss sum of the last train or test step.
  std::vector<double> replica_loss_sums() const { return roster_.loss_sums(); }

  // Device 0's optimizer: hyperparameters, learning rate and iterations of every device.
  Optimizer& optimizer() { return roster_.optimizer(); }
  void set_learning_rate(double lr) { roster_.set_learning_rate(lr); }
  // Bytes of optimizer state each local device's optimizer holds, one entry per device.
  std::vector<std::int64_t> optimizer_state_bytes() const { return roster_.optimizer_state_bytes(); }

  // Whether the devices trained since the primary was last refreshed (refresh_primary copies).
  bool primary_stale() const { return primary_stale_; }

  // Whether the loss and metrics leave out the steps an output's mask drops (nn/masked_steps.h).
  // An executor that does not cannot train a network whose output_masked(): TrainEngine refuses.
  bool reads_output_masks() const { return reads_output_masks_; }
  // Whether the loss of its steps includes the layers' activity penalties (Layer::activity_loss)
  // and their training forwards give ForwardContext::global_rows. An executor that does not
  // cannot train a network that adds_activity_loss(): TrainEngine refuses.
  bool reads_activity_losses() const { return reads_activity_losses_; }

  std::vector<StepProfile> profile() const { return roster_.profile(); }  // one per local device
  void reset_profile() {
    roster_.reset_profile();
    reset_own_profile();
  }

 protected:
  // `label` starts the roster's error messages ("[pipeline]").
  explicit StepExecutor(std::string label) : roster_(std::move(label)) {}

  // Counters an executor keeps beside its devices' profiles (bubble seconds, model-axis bytes,
  // stage sends), reset with them. The one hook left: the roster cannot know them.
  virtual void reset_own_profile() {}

  DeviceRoster roster_;
  bool primary_stale_ = false;  // set by a step that trains copies of the primary; cleared by refresh
  bool reads_output_masks_ = false;
  bool reads_activity_losses_ = false;
};

}  // namespace mdtrain
