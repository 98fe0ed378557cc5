#include "mdtrain/distribute/single_communicator.h"

#include <cstring>

#include "mdtrain/core/errors.h"

namespace mdtrain {

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

void SingleCommunicator::abort(const std::string& reason) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
}

void SingleCommunicator::check_not_aborted(const char* op) const {
  MDTRAIN_CHECK(!aborted_, std::runtime_error, "[single] ", op,
                " cannot run, the group failed earlier: rank 0 aborted the group: ", abort_reason_);
}

// x / 1 == x exactly and x op x == x for Sum over one rank: nothing to do.
void SingleCommunicator::do_all_reduce(void*, std::size_t, DType, ReduceOp) { check_not_aborted("all_reduce"); }

void SingleCommunicator::do_reduce(void*, std::size_t, DType, ReduceOp, int) { check_not_aborted("reduce"); }

void SingleCommunicator::do_broadcast(void*, std::size_t, DType, int) { check_not_aborted("broadcast"); }

void SingleCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  check_not_aborted("all_gather");
  if (count_per_rank > 0 && send != recv) std::memcpy(recv, send, count_per_rank * size_of(dtype));
}

void SingleCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                           ReduceOp) {
  check_not_aborted("reduce_scatter");
  if (count_per_rank > 0 && send != recv) std::memcpy(recv, send, count_per_rank * size_of(dtype));
}

void SingleCommunicator::do_barrier() { check_not_aborted("barrier"); }

std::unique_ptr<Communicator> SingleCommunicator::do_split(int color, int) {
  check_not_aborted("split");
  if (color < 0) return nullptr;
  return std::make_unique<SingleCommunicator>();
}

}  // namespace mdtrain
