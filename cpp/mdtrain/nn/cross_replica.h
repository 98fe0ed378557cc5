#pragma once
// What a layer may ask of the other replicas running the same training step. The engine that
// runs the replicas implements it on its communicators (model/train_engine.cpp); nn/ knows only
// this interface, so a layer never learns which strategy (or which transport) runs it.
#include <cstddef>

namespace mdtrain {

class CrossReplicaContext {
 public:
  virtual ~CrossReplicaContext() = default;

  // Replicas taking part in the step (1: the layer is alone and needs no collective).
  virtual int num_replicas() const = 0;
  // In place: data[0, count) becomes the element-wise sum over all replicas, bitwise identical on
  // every replica (ranks are added in a fixed order). Like any collective, every replica must
  // make the same calls with the same counts in the same order, including a replica whose slice
  // of the batch is empty (see Layer::forward_without_rows).
  virtual void sum(double* data, std::size_t count) = 0;
};

// The number of replicas behind `ctx`, 1 for none (a layer run on its own).
inline int replica_count(const CrossReplicaContext* ctx) { return ctx ? ctx->num_replicas() : 1; }

}  // namespace mdtrain
