#include "mdtrain/strategy/mirrored_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/core/cuda/runtime.h"

namespace mdtrain {

std::string MirroredStrategy::resolve_communication(const std::vector<Device>& devices,
                                                    const std::string& communication, int visible_gpus) {
  MDTRAIN_CHECK(!devices.empty(), std::invalid_argument, "[mirrored] a strategy needs at least one device");
  const bool gpus = !devices.front().is_cpu();
  for (const auto& d : devices) {
    MDTRAIN_CHECK(d.is_cpu() != gpus, std::invalid_argument, "[mirrored] ", d.to_string(),
                  ": replicas must all be on CPU devices or all on GPUs, got ", devices.front().to_string(), " and ",
                  d.to_string());
    if (!d.is_cpu())
      MDTRAIN_CHECK(d.index >= 0 && d.index < visible_gpus, std::invalid_argument, "[mirrored] ", d.to_string(),
                    " is not a visible GPU (this process sees ", visible_gpus, ")",
                    visible_gpus == 0 ? ": " + cuda::unavailable_reason() : std::string());
  }
  if (communication == "auto") return gpus ? "nccl" : "threads";
  // The threads backend reduces host memory; GPU gradients need NCCL.
  MDTRAIN_CHECK(!gpus || communication != "threads", std::invalid_argument,
                "[mirrored] the \"threads\" "
                "communicator reduces host memory; replicas on GPUs need \"nccl\" (or \"auto\")");
  return communication;
}

MirroredStrategy::MirroredStrategy(std::vector<Device> devices, std::string communication,
                                   GradientReducer::Algorithm reduction)
    : Strategy(std::move(devices)),
      communication_(resolve_communication(this->devices(), communication, cuda::device_count())),
      reduction_(reduction) {}

std::vector<std::unique_ptr<Communicator>> MirroredStrategy::make_replica_communicators() const {
  return create_communicators(communication_, num_replicas_in_sync());
}

}  // namespace mdtrain
