#pragma once
// A communicator over W workers x L local ranks, built from two: `local` joins the L ranks of one
// worker (threads on logical CPUs, NCCL on the GPUs of one process), and `cross` joins the W
// workers' local rank 0 (the leader; MPI between processes and hosts). Non-leaders have no cross
// communicator.
//
// Global rank = worker * L + local rank, so a worker's ranks are contiguous and a worker's share
// of a reduce-scatter or all-gather is one contiguous block. Collectives reduce inside the worker
// first (to the leader), then across workers, then hand the result back inside the worker: the
// only traffic between processes is one buffer per worker, as TF's hierarchical all-reduce.
//
// Results are identical on every rank. With more than one rank per worker the float sums are
// grouped (per worker, then across workers), so they may differ in the last bits from a flat
// group of the same size; with one rank per worker they are the cross communicator's.
//
// split(color, key): every rank's (color, key) is gathered through the group, then each new group
// is made from the two levels: its ranks inside one worker split `local`, its ranks' first member
// in each worker (the new group's leader there) gets a split of `cross` made by this worker's
// leader (handed over inside the worker, whose ranks share one process). The result is
// - a flat communicator of the local backend when the new group lies inside one worker,
// - a flat communicator of the cross backend when it has one rank per worker,
// - else a HierarchicalCommunicator over those two, which needs the same number of ranks in
//   every worker it spans, each worker's ranks contiguous in the new order (std::invalid_argument
//   on every rank otherwise, and this group stays usable). Mesh axes split by
//   (color = the other coordinates, key = rank) always are.
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

class HierarchicalCommunicator final : public Communicator {
 public:
  // `local` has L ranks, `cross` (leaders only: local->rank() == 0) has W ranks and its rank is
  // this worker's index. Every rank is told W and its worker index, so non-leaders know their
  // global rank.
  HierarchicalCommunicator(std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> cross, int num_workers,
                           int worker_index);

  int rank() const override { return worker_ * local_->size() + local_->rank(); }
  int size() const override { return workers_ * local_->size(); }
  std::string backend() const override;
  void abort(const std::string& reason) override;

 protected:
  void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) override;
  void do_broadcast(void* data, std::size_t count, DType dtype, int root) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) override;
  void do_barrier() override;
  void on_timeout_changed(double seconds) override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  bool leader() const { return local_->rank() == 0; }
  // Mean is summed at both levels and divided once by the global size.
  static ReduceOp level_op(ReduceOp op) { return op == ReduceOp::Mean ? ReduceOp::Sum : op; }
  void all_reduce_levels(void* data, std::size_t count, DType dtype, ReduceOp op);
  void divide_by_size(void* data, std::size_t count, DType dtype) const;
  void all_gather_levels(const void* send, void* recv, std::size_t count_per_rank, DType dtype);
  // Runs one collective; on failure aborts both levels, so no rank of any worker keeps waiting,
  // and rethrows naming this worker and local rank.
  template <class F>
  void guarded(const char* op, F&& body);

  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;  // null on non-leaders
  int workers_;
  int worker_;
  std::vector<char> scratch_;  // reduce / reduce_scatter work space, reused between calls
};

}  // namespace mdtrain
