#pragma once
// A CrossReplicaContext (what a layer may ask of the other replicas, nn/cross_replica.h) served
// by a communicator: float64 sums in rank order. It reads the communicator through a reference to
// its owner's slot at every call, because executors replace communicators after a failed step.
#include <cstddef>
#include <memory>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/cross_replica.h"

namespace mdtrain {

class CommunicatorSums final : public CrossReplicaContext {
 public:
  explicit CommunicatorSums(const std::unique_ptr<Communicator>& comm) : comm_(comm) {}
  int num_replicas() const override { return comm_->size(); }
  void sum(double* data, std::size_t count) override { comm_->all_reduce(data, count, DType::Float64, ReduceOp::Sum); }

 private:
  const std::unique_ptr<Communicator>& comm_;
};

}  // namespace mdtrain
