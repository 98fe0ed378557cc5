#include "mdtrain/distribute/gradient_reducer.h"

#include <algorithm>

#include "mdtrain/core/errors.h"

namespace mdtrain {

GradientReducer::GradientReducer(Communicator& comm, std::size_t bucket_bytes, Algorithm algorithm)
    : comm_(comm), bucket_bytes_(bucket_bytes), algorithm_(algorithm) {
  MDTRAIN_CHECK(bucket_bytes > 0, std::invalid_argument, "[reducer] bucket_bytes must be positive");
}

void GradientReducer::reduce(Tensor& packed_grads) {
  if (comm_.size() == 1) return;
  const std::size_t elem = size_of(packed_grads.dtype());
  const std::size_t total = static_cast<std::size_t>(packed_grads.numel());
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes_ / elem);
  char* base = static_cast<char*>(packed_grads.raw());
  // Every replica walks the same bucket boundaries, so the collectives line up.
  for (std::size_t begin = 0; begin < total || (total == 0 && begin == 0); begin += per_bucket) {
    const std::size_t count = std::min(per_bucket, total - begin);
    void* bucket = base + begin * elem;
    if (algorithm_ == Algorithm::AllReduce) {
      comm_.all_reduce(bucket, count, packed_grads.dtype(), ReduceOp::Sum);
    } else {
      comm_.reduce(bucket, count, packed_grads.dtype(), ReduceOp::Sum, 0);
      comm_.broadcast(bucket, count, packed_grads.dtype(), 0);
    }
    if (total == 0) break;
  }
}

}  // namespace mdtrain
