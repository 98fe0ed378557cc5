#pragma once
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.MirroredStrategy: a replica per device, each on its slice of the global batch;
// gradients summed by an all-reduce with a fixed order, so every replica applies the same update
// and the replicas stay bitwise identical. On logical CPU devices the replicas are threads and
// the all-reduce is the "threads" communicator.
class MirroredStrategy : public Strategy {
 public:
  // `communication`: the communicator backend ("threads" for CPU devices).
  explicit MirroredStrategy(std::vector<Device> devices, std::string communication = "threads");
  std::string name() const override { return "MirroredStrategy"; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;

 private:
  std::string communication_;
};

}  // namespace mdtrain
