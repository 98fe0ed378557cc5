#pragma once
// A ShardGroup (what a sharded layer may ask of the other shards, nn/tensor_parallel/shard_group.h)
// served by a model-axis communicator. It reads the communicator through a reference to its
// owner's slot at every call, because executors replace communicators after a failed step, and
// counts the bytes it moves and the time its collectives take (the model axis's communication per
// step: data movement and waiting for the other shards).
#include <chrono>
#include <cstdint>
#include <memory>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"

namespace mdtrain {

class CommunicatorShardGroup final : public ShardGroup {
 public:
  explicit CommunicatorShardGroup(const std::unique_ptr<Communicator>& comm) : comm_(comm) {}
  int size() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }
  void sum(Tensor& t) override {
    const auto start = Clock::now();
    bytes_ += static_cast<std::int64_t>(t.nbytes());
    comm_->all_reduce(t, ReduceOp::Sum);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
  void all_gather(const Tensor& send, Tensor& recv) override {
    const auto start = Clock::now();
    bytes_ += static_cast<std::int64_t>(recv.nbytes());
    comm_->all_gather(send, recv);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
  // Bytes of the results of its collectives since the last reset (all-reduced tensors, gathered
  // outputs), and the seconds spent in them.
  std::int64_t bytes() const { return bytes_; }
  double seconds() const { return seconds_; }
  void reset_bytes() {
    bytes_ = 0;
    seconds_ = 0;
  }

 private:
  using Clock = std::chrono::steady_clock;
  const std::unique_ptr<Communicator>& comm_;
  std::int64_t bytes_ = 0;
  double seconds_ = 0;
};

}  // namespace mdtrain
