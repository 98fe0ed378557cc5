#pragma once
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.OneDeviceStrategy (and the default strategy): one replica on one device.
class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(Device device = {}) : Strategy({device}) {}
  std::string name() const override { return "OneDeviceStrategy"; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;
};

}  // namespace mdtrain
