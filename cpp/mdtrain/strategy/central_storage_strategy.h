#pragma once
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.experimental.CentralStorageStrategy: the variables and the one optimizer state
// live on the parameter device (the host); every compute device runs a replica on its slice of
// the global batch. Each step the replicas start from the stored weights, their gradients are
// summed onto the parameter device in rank order, one update runs there, and the new weights go
// back to the replicas. The sums are those of MirroredStrategy with ReductionToOneDevice, in
// the same order, so the weights are bitwise the same; the optimizer state is held once, on the
// parameter device, instead of by the replicas.
//
// Here the compute devices are logical CPU devices and the parameter device is the host memory
// they share (replica 0 trains the stored network itself, as under Mirrored). GPUs as compute
// devices are refused for now: their gradients would have to be staged through pinned host
// memory, which is not written yet.
class CentralStorageStrategy : public Strategy {
 public:
  // `compute_devices`: logical CPU devices. `parameter_device`: the host ("CPU:0").
  CentralStorageStrategy(std::vector<Device> compute_devices, Device parameter_device);
  std::string name() const override { return "CentralStorageStrategy"; }
  const Device& parameter_device() const { return parameter_device_; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  // The gradients go to one device, as ReductionToOneDevice's do.
  GradientReducer::Algorithm gradient_reduction() const override { return GradientReducer::Algorithm::ReduceToOne; }
  // Data parallelism whose sync is a reduction onto the parameter device, its update there, and
  // a broadcast of the weights (SyncKind::ReduceToDevice).
  StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;

 private:
  Device parameter_device_;
};

}  // namespace mdtrain
