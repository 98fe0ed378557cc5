#include "mdtrain/strategy/mirrored_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain {

MirroredStrategy::MirroredStrategy(std::vector<Device> devices, std::string communication,
                                   GradientReducer::Algorithm reduction)
    : Strategy(std::move(devices)), communication_(std::move(communication)), reduction_(reduction) {
  for (const auto& d : this->devices())
    MDTRAIN_CHECK(d.is_cpu(), std::invalid_argument, "[mirrored] ", d.to_string(),
                  ": GPU replicas need the CUDA backend, which this build does not have");
}

std::vector<std::unique_ptr<Communicator>> MirroredStrategy::make_replica_communicators() const {
  return create_communicators(communication_, num_replicas_in_sync());
}

}  // namespace mdtrain
