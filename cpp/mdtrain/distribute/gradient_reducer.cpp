#include "mdtrain/distribute/gradient_reducer.h"

#include <algorithm>

#include "mdtrain/core/errors.h"

namespace mdtrain {

GradientReducer::GradientReducer(Communicator& comm, std::size_t bucket_bytes, Algorithm algorithm)
    : comm_(comm), bucket_bytes_(bucket_bytes), algorithm_(algorithm) {
  MDTRAIN_CHECK(bucket_bytes > 0, std::invalid_argument, "[reducer] bucket_bytes must be positive");
}

std::size_t GradientReducer::elements_per_bucket(const Tensor& packed_grads) const {
  return std::max<std::size_t>(1, bucket_bytes_ / size_of(packed_grads.dtype()));
}

std::size_t GradientReducer::bucket_count(const Tensor& packed_grads) const {
  const std::size_t total = static_cast<std::size_t>(packed_grads.numel());
  const std::size_t per = elements_per_bucket(packed_grads);
  return std::max<std::size_t>(1, (total + per - 1) / per);
}

bool GradientReducer::enqueues(const Tensor& packed_grads) const {
  return comm_.size() > 1 && algorithm_ == Algorithm::AllReduce && comm_.enqueues_all_reduce(packed_grads.device());
}

void GradientReducer::start_bucket(std::size_t bucket) {
  Tensor& grads = *grads_;
  const std::size_t elem = size_of(grads.dtype());
  const std::size_t total = static_cast<std::size_t>(grads.numel());
  const std::size_t per = elements_per_bucket(grads);
  const std::size_t begin = std::min(total, bucket * per);
  const std::size_t count = std::min(per, total - begin);
  void* data = static_cast<char*>(grads.raw()) + begin * elem;
  if (enqueue_) {
    comm_.enqueue_all_reduce(data, count, grads.dtype(), ReduceOp::Sum);
  } else if (algorithm_ == Algorithm::AllReduce && count > 0) {
    // A view sharing the packed gradients' owner: the Tensor form lets a backend that must keep
    // the memory past a failed call (mpi) do so instead of staging every piece through a copy.
    Tensor bucket_view =
        Tensor::wrap(data, {static_cast<std::int64_t>(count)}, grads.dtype(), grads.storage(), grads.device());
    comm_.all_reduce(bucket_view, ReduceOp::Sum);
  } else if (algorithm_ == Algorithm::AllReduce) {
    comm_.all_reduce(data, count, grads.dtype(), ReduceOp::Sum);  // empty: no view of nothing
  } else {
    comm_.reduce(data, count, grads.dtype(), ReduceOp::Sum, 0);
    comm_.broadcast(data, count, grads.dtype(), 0);
  }
}

void GradientReducer::reduce(Tensor& packed_grads) {
  if (comm_.size() == 1) return;
  begin(packed_grads);
  finish();
}

void GradientReducer::begin(Tensor& packed_grads) {
  MDTRAIN_CHECK(grads_ == nullptr, std::logic_error, "[reducer] begin() called twice without finish()");
  grads_ = &packed_grads;
  enqueue_ = enqueues(packed_grads);
  next_ = bucket_count(packed_grads);
}

void GradientReducer::gradients_final_from(std::int64_t first_final_element) {
  MDTRAIN_CHECK(grads_ != nullptr, std::logic_error, "[reducer] gradients_final_from() outside begin()/finish()");
  if (comm_.size() == 1) return;
  const std::size_t per = elements_per_bucket(*grads_);
  const std::size_t first = static_cast<std::size_t>(std::max<std::int64_t>(0, first_final_element));
  // Bucket b covers [b * per, (b + 1) * per): it is final once b * per >= first.
  while (next_ > 0 && (next_ - 1) * per >= first) start_bucket(--next_);
}

void GradientReducer::finish() {
  MDTRAIN_CHECK(grads_ != nullptr, std::logic_error, "[reducer] finish() without begin()");
  // Whatever happens, the next step starts afresh (a failed collective leaves the group aborted;
  // the engine replaces the communicators and their reducers).
  struct Reset {
    GradientReducer& r;
    ~Reset() { r.grads_ = nullptr; }
  } reset{*this};
  if (comm_.size() == 1) return;
  gradients_final_from(0);
  if (enqueue_) comm_.wait_enqueued();
}

}  // namespace mdtrain
