#pragma once
#include <cstddef>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// The gradient-sync policy, kept apart from the transport (flashlight's reducers, DDP's buckets):
// a model's gradients live in one packed buffer, which is summed across replicas in buckets of
// at most bucket_bytes, one collective per bucket. With the threads backend one bucket is best
// (a single pass over memory); NCCL and MPI use several so reduction can start early and large
// messages are pipelined.
class GradientReducer {
 public:
  static constexpr std::size_t kDefaultBucketBytes = 25u << 20;  // DDP's default

  explicit GradientReducer(Communicator& comm, std::size_t bucket_bytes = kDefaultBucketBytes);
  // Sums `packed_grads` over all replicas in place (identical result on every replica).
  void reduce(Tensor& packed_grads);
  std::size_t bucket_bytes() const { return bucket_bytes_; }

 private:
  Communicator& comm_;
  std::size_t bucket_bytes_;
};

}  // namespace mdtrain
