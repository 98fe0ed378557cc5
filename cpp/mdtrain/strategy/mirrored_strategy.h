#pragma once
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.MirroredStrategy: a replica per device, each on its slice of the global batch;
// gradients summed by an all-reduce with a fixed order, so every replica applies the same update
// and the replicas stay bitwise identical. On logical CPU devices the replicas are threads and
// the all-reduce is the "threads" communicator.
class MirroredStrategy : public Strategy {
 public:
  // `devices`: all logical CPU devices or all GPUs (Device{CUDA, i}, i < cuda::device_count()).
  // `communication`: the communicator backend; "auto" is "nccl" on GPUs and "threads" on CPU
  // devices. `reduction`: all-reduce or reduce-to-one-device (TF's cross_device_ops).
  explicit MirroredStrategy(std::vector<Device> devices, std::string communication = "auto",
                            GradientReducer::Algorithm reduction = GradientReducer::Algorithm::AllReduce);
  std::string name() const override { return "MirroredStrategy"; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  GradientReducer::Algorithm gradient_reduction() const override { return reduction_; }
  const std::string& communication() const { return communication_; }
  // The placement decision, apart from any driver so that it can be tested anywhere: checks the
  // devices against `visible_gpus` and returns the communicator backend for `communication`.
  // Throws std::invalid_argument naming the device or the backend.
  static std::string resolve_communication(const std::vector<Device>& devices, const std::string& communication,
                                           int visible_gpus);

 private:
  std::string communication_;
  GradientReducer::Algorithm reduction_;
};

}  // namespace mdtrain
