#pragma once
#include <cstddef>
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// The gradient-sync policy, kept apart from the transport (flashlight's reducers, DDP's buckets):
// a model's gradients live in one packed buffer, which is summed across replicas in buckets of
// at most bucket_bytes, one collective per bucket. With the threads backend one bucket is best
// (a single pass over memory); NCCL and MPI use several so reduction can start early and large
// messages are pipelined.
//
// Two ways to drive it:
// - reduce(grads) after backward: every bucket, blocking.
// - Overlapped with backward (DDP, llm.c): begin(grads) before it, gradients_final_from(e) each
//   time a layer has written its gradients (every element from e on is final), finish() after
//   it. A bucket is started as soon as all of it is final, last bucket first. When the
//   communicator enqueues all-reduces of the gradients' memory (NCCL with GPU memory) a bucket
//   goes on the communication stream (Communicator::enqueue_all_reduce) and backward goes on
//   while it runs; finish() waits for them all (wait_enqueued). Other communicators run each
//   bucket's collective when it is started (they have no stream to put it on), which gives the
//   same sums. Every replica calls these at the same points of the same
//   model, so the buckets' collectives line up across ranks, also with the collectives layers
//   run during backward (synchronized BatchNormalization).
// Either way every bucket is summed over the ranks, so the result does not depend on which.
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

  // The overlapped form (see above). `packed_grads` must stay alive and in place until finish().
  void begin(Tensor& packed_grads);
  void gradients_final_from(std::int64_t first_final_element);
  void finish();
  // True when the buckets of `packed_grads` would be enqueued on a communication stream rather
  // than run at once: the AllReduce algorithm on a communicator that enqueues all-reduces of that
  // memory (Communicator::enqueues_all_reduce: NCCL with GPU memory).
  bool enqueues(const Tensor& packed_grads) const;

  std::size_t bucket_bytes() const { return bucket_bytes_; }
  // How many buckets `packed_grads` is cut into (at least 1: an empty buffer still joins one
  // collective, so replicas of a model without trainable weights stay in step).
  std::size_t bucket_count(const Tensor& packed_grads) const;

 private:
  void start_bucket(std::size_t bucket);
  std::size_t elements_per_bucket(const Tensor& packed_grads) const;

  Communicator& comm_;
  std::size_t bucket_bytes_;
  Algorithm algorithm_;
  // Overlapped state: the buffer, whether its buckets are enqueued, and the lowest bucket started
  // so far (buckets [next_, count) are started).
  Tensor* grads_ = nullptr;
  bool enqueue_ = false;
  std::size_t next_ = 0;
};

}  // namespace mdtrain
