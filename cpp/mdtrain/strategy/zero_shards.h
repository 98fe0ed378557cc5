#pragma once
// ZeRO stage 1 over a group of replicas: the packed trainable parameters are cut into one
// contiguous range per rank; after backward the gradients are reduce-scattered so each rank holds
// the sum of its own range, each rank updates only that range of the weights (and keeps only
// that range of the optimizer slots current), and the updated ranges are all-gathered. The range
// update is exactly the whole update restricted to those elements, so the weights are bitwise
// those of an unsharded step.
#include <cstdint>
#include <utility>
#include <vector>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class ZeroShards {
 public:
  // `total`: trainable elements; `ranks`: replicas sharing the update.
  ZeroShards(std::int64_t total, int ranks);

  // Elements per range: equal ranges rounded up to 16 elements (64 bytes of float32), so no cache
  // line is written by two ranks; the last range may run into the packed buffers' zero padding
  // (Network::kPackedPadding), which must hold ranks * 16 elements.
  std::int64_t shard_size() const { return shard_size_; }
  // [begin, end) of the packed parameters that `rank` updates (clamped to the real elements).
  std::pair<std::int64_t, std::int64_t> range_of(int rank) const;

  // Sums this rank's range of the gradients over all ranks, into that range.
  void reduce_scatter_own_range(Network& net, Communicator& comm) const;
  // All-gathers every rank's updated range into every rank's weights.
  void gather_ranges(Network& net, Communicator& comm) const;
  // The whole optimizer state from per-rank states (states[r] is current on range_of(r) only);
  // `primary` gives the packed order of the parameters the slots belong to.
  Optimizer::State stitch(const std::vector<Optimizer::State>& states, Network& primary) const;

 private:
  std::int64_t total_;
  int ranks_;
  std::int64_t shard_size_;
};

}  // namespace mdtrain
