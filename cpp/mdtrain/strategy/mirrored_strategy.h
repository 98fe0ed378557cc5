#pragma once
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.MirroredStrategy: a replica per device, each on its slice of the global batch;
// gradients summed by an all-reduce with a fixed order, so every replica applies the same update
// and the replicas stay bitwise identical. On logical CPU devices the replicas are threads and
// the all-reduce is the "threads" communicator.
class MirroredStrategy : public Strategy {
 public:
  // `communication`: the communicator backend ("threads" for CPU devices); `reduction`: all-reduce
  // or reduce-to-one-device (TF's cross_device_ops).
  explicit MirroredStrategy(std::vector<Device> devices, std::string communication = "threads",
                            GradientReducer::Algorithm reduction = GradientReducer::Algorithm::AllReduce);
  std::string name() const override { return "MirroredStrategy"; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
  GradientReducer::Algorithm gradient_reduction() const override { return reduction_; }

 private:
  std::string communication_;
  GradientReducer::Algorithm reduction_;
};

}  // namespace mdtrain
