#include "mdtrain/strategy/one_device_strategy.h"

#include "mdtrain/distribute/registry.h"

namespace mdtrain {

std::vector<std::unique_ptr<Communicator>> OneDeviceStrategy::make_replica_communicators() const {
  return create_communicators("single", 1);
}

}  // namespace mdtrain
