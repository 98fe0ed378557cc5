#pragma once
// What a sharded layer may ask of the other shards of its weights (DESIGN.md §8): "I am shard
// rank() of size() along one dimension, and here is my group". The strategy that splits a model
// implements it on its model-axis communicator (strategy/communicator_shard_group.h); nn/ knows
// only this interface, as it knows CrossReplicaContext for synchronized statistics.
#include "mdtrain/core/tensor.h"

namespace mdtrain {

class ShardGroup {
 public:
  virtual ~ShardGroup() = default;

  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place: t becomes the element-wise sum of every shard's t, bitwise identical on every shard
  // (ranks added in rank order). Every shard calls the same collectives in the same order.
  virtual void sum(Tensor& t) = 0;
  // recv (size() * send.numel() elements) gets shard r's send at offset r * send.numel().
  virtual void all_gather(const Tensor& send, Tensor& recv) = 0;
};

}  // namespace mdtrain
