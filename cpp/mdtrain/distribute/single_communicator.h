#pragma once
// The "single" backend: a group of one rank. It is the fallback when no other backend is wanted
// or available, so code written for N ranks runs unchanged on one: reductions leave the data as
// it is (Mean divides by 1), gathers and scatters are local copies, barriers return at once.
#include <memory>
#include <string>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  // With no peer to stop, abort only makes later collectives fail, as on any backend.
  void abort(const std::string& reason) override;

 protected:
  void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) override;
  void do_broadcast(void* data, std::size_t count, DType dtype, int root) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) override;
  void do_barrier() override;
  // A group of one splits into itself (a fresh SingleCommunicator) or, for a negative color,
  // into no group.
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  void check_not_aborted(const char* op) const;

  std::string abort_reason_;
  bool aborted_ = false;
};

std::unique_ptr<Communicator> make_single_communicator();

}  // namespace mdtrain
