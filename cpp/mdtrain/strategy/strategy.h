#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/device.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/device_mesh.h"
#include "mdtrain/strategy/step_executor.h"
#include "mdtrain/strategy/step_plan.h"

namespace mdtrain {

// How training is spread over devices: which devices take part, how they talk (communicators),
// the threads that drive them, and — through the StepExecutor it makes for each compiled model —
// how a step runs: where the weights live, how the batch is cut, how gradients are synchronized.
// The training loop (model/) hands a strategy its network, loss and optimizer and then one batch
// per step; a layer never learns which strategy runs it.
class Strategy {
 public:
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // TensorFlow's class name: "OneDeviceStrategy", "MirroredStrategy", ...
  virtual std::string name() const = 0;
  // This process's devices: one replica each.
  const std::vector<Device>& devices() const { return devices_; }
  int num_local_replicas() const { return static_cast<int>(devices_.size()); }
  // Processes (workers) that train together, and this one's index; every worker has as many
  // devices as this one. 1 and 0 unless the strategy spans processes.
  virtual int num_workers() const { return 1; }
  virtual int worker_index() const { return 0; }
  // All replicas of all workers (TF's num_replicas_in_sync). Replica r of this worker is global
  // replica worker_index() * num_local_replicas() + r, and that is its communicator's rank.
  int num_replicas_in_sync() const { return num_local_replicas() * num_workers(); }
  int first_local_replica() const { return worker_index() * num_local_replicas(); }
  // Sums `values` element-wise over the workers (rank order), from the thread driving training,
  // while no replica runs; every worker must call it at the same point. One worker: no-op.
  virtual void sum_across_workers(std::vector<double>& /*values*/) {}
  // True when a step's predictions land on some workers only (a pipeline whose stages span the
  // workers: its last stage's), so a worker's own metric accumulators are partial: the training
  // loop then sums them over the workers after every step (a collective), for the batch logs.
  virtual bool metrics_split_across_workers() const { return false; }
  // Fails the strategy's own coordination between workers (pending and later), naming `reason`,
  // on every worker: see StepExecutor::abort, which does the same for the replicas' groups.
  virtual void abort(const std::string& /*reason*/) {}

  // The devices of all workers as a mesh with named axes (DESIGN.md §8): global device g is
  // worker g / L, local device g % L (L local devices per worker), and it is the rank of that
  // device's communicator. Data-parallel strategies are the 1-D mesh ("batch",).
  virtual DeviceMesh mesh() const;

  // One communicator per local replica (rank first_local_replica() + r serves local replica r),
  // made fresh for each compiled model.
  virtual std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const = 0;
  // One communicator per local device for the devices of `mesh` that differ only along `axes`
  // (e.g. {"model"}: each device's tensor-parallel group; {"batch"}: the data-parallel one), in
  // the mesh's key order, split from a fresh world group (make_replica_communicators) with
  // DeviceMesh::axes_split. `mesh` must cover num_replicas_in_sync() devices. Collective over all
  // workers (each calls it at the same point); the splits run on the replica threads, since each
  // in-process rank must act from its own thread.
  std::vector<std::unique_ptr<Communicator>> make_axis_communicators(const DeviceMesh& mesh,
                                                                     const std::vector<std::string>& axes);

  // How gradients are combined (TF's cross_device_ops).
  virtual GradientReducer::Algorithm gradient_reduction() const { return GradientReducer::Algorithm::AllReduce; }
  // The size of the gradient buckets, each summed by one collective as soon as backward has
  // finished it (TF's CommunicationOptions.bytes_per_pack). Smaller buckets start communicating
  // earlier, larger ones make fewer calls. Default GradientReducer::kDefaultBucketBytes; 0 restores
  // it. Read when a model is compiled under the strategy.
  std::size_t gradient_bucket_bytes() const { return bucket_bytes_; }
  void set_gradient_bucket_bytes(std::size_t bytes) {
    bucket_bytes_ = bytes == 0 ? GradientReducer::kDefaultBucketBytes : bytes;
  }

  // What one training step of `network` does on `mesh` (the strategy's mesh()), as data: the
  // plan the executor runs and the planner prices (step_plan.h). The default is data
  // parallelism's (replicated_step_plan); a strategy whose plan is not written yet throws
  // std::logic_error.
  virtual StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const;

  // The executor that runs the steps of one compiled model: `primary` is the model's network
  // (whose weights get_weights reads); the loss and optimizer are copied per replica as needed.
  // The strategy must outlive it. The default replicates the network on every device (data
  // parallelism: ReplicatedExecutor, running make_plan's plan); strategies that shard or
  // pipeline override it.
  virtual std::unique_ptr<StepExecutor> make_executor(Network& primary, const Loss& loss, const Optimizer& optimizer);

  // Runs fn(r) for every replica concurrently, one thread each (see cpu::ThreadTeam).
  void run_replicas(const std::function<void(int)>& fn) { pool_->run(fn); }

 protected:
  explicit Strategy(std::vector<Device> devices);
  // The inputs of this strategy's data-parallel plan (its devices, workers, reduction, buckets).
  ReplicatedPlanInputs replicated_plan_inputs(const DeviceMesh& mesh, const PlanOptions& options) const;

 private:
  std::vector<Device> devices_;
  std::unique_ptr<cpu::ThreadTeam> pool_;
  std::size_t bucket_bytes_ = GradientReducer::kDefaultBucketBytes;
};

}  // namespace mdtrain
