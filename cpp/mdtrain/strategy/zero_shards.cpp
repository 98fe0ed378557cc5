#include "mdtrain/strategy/zero_shards.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "mdtrain/core/errors.h"

namespace mdtrain {

ZeroShards::ZeroShards(std::int64_t total, int ranks)
    : total_(total), ranks_(ranks), shard_size_(((total + ranks - 1) / ranks + 15) / 16 * 16) {
  MDTRAIN_CHECK(ranks >= 1, std::invalid_argument, "[zero] ranks must be >= 1, got ", ranks);
  MDTRAIN_CHECK(static_cast<std::int64_t>(ranks) * 16 < Network::kPackedPadding, std::invalid_argument,
                "[zero] at most ", Network::kPackedPadding / 16 - 1, " ranks can share an update, got ", ranks);
}

std::pair<std::int64_t, std::int64_t> ZeroShards::range_of(int rank) const {
  const std::int64_t begin = std::min(total_, shard_size_ * rank);
  return {begin, std::min(total_, begin + shard_size_)};
}

void ZeroShards::reduce_scatter_own_range(Network& net, Communicator& comm) const {
  Tensor& grads = net.padded_grads();
  char* base = static_cast<char*>(grads.raw());
  const std::size_t elem = size_of(grads.dtype());
  comm.reduce_scatter(base, base + static_cast<std::size_t>(comm.rank() * shard_size_) * elem,
                      static_cast<std::size_t>(shard_size_), grads.dtype(), ReduceOp::Sum);
}

void ZeroShards::gather_ranges(Network& net, Communicator& comm) const {
  Tensor& values = net.padded_values();
  char* base = static_cast<char*>(values.raw());
  const std::size_t elem = size_of(values.dtype());
  comm.all_gather(base + static_cast<std::size_t>(comm.rank() * shard_size_) * elem, base,
                  static_cast<std::size_t>(shard_size_), values.dtype());
}

Optimizer::State ZeroShards::stitch(const std::vector<Optimizer::State>& states, Network& primary) const {
  Optimizer::State merged = states.front();
  // Where each parameter starts in the packed order (the optimizer's element order).
  std::vector<std::pair<std::string, std::int64_t>> offsets;
  std::int64_t offset = 0;
  for (auto* p : primary.trainable_parameters()) {
    offsets.emplace_back(p->name, offset);
    offset += p->value.numel();
  }
  auto offset_of = [&](const std::string& slot_name) -> std::int64_t {
    const std::string param = slot_name.substr(0, slot_name.rfind('/'));
    for (const auto& [name, o] : offsets)
      if (name == param) return o;
    return -1;
  };
  for (std::size_t r = 1; r < states.size(); ++r) {
    const Optimizer::State& theirs = states[r];
    const auto [b, e] = range_of(static_cast<int>(r));
    for (std::size_t k = 0; k < merged.size(); ++k) {
      const std::int64_t o = offset_of(merged[k].first);
      if (o < 0) continue;  // "iterations": the same on every replica
      const std::int64_t n = merged[k].second.numel();
      const std::int64_t lo = std::max(b, o), hi = std::min(e, o + n);
      if (lo >= hi) continue;
      const std::size_t elem = size_of(merged[k].second.dtype());
      std::memcpy(static_cast<char*>(merged[k].second.raw()) + (lo - o) * elem,
                  static_cast<const char*>(theirs[k].second.raw()) + (lo - o) * elem, (hi - lo) * elem);
    }
  }
  return merged;
}

}  // namespace mdtrain
