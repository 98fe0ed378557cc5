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

  // How a bucket is summed: one all-reduce (every rank shares the work), or a reduction on rank 0
  // followed by a broadcast (TF's ReductionToOneDevice). Both add ranks in the same order, so
  // the weights come out bitwise the same either way.
  enum class Algorithm { AllReduce, ReduceToOne };

  explicit GradientReducer(Communicator& comm, std::size_t bucket_bytes = kDefaultBucketBytes,
                           Algorithm algorithm = Algorithm::AllReduce);
  // Sums `packed_grads` over all replicas in place (identical result on every replica).
  void reduce(Tensor& packed_grads);
  std::size_t bucket_bytes() const { return bucket_bytes_; }

 private:
  Communicator& comm_;
  std::size_t bucket_bytes_;
  Algorithm algorithm_;
};

}  // namespace mdtrain
