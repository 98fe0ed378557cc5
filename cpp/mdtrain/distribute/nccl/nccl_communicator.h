#pragma once
// The "nccl" backend: one rank per GPU, collectives on the GPU's communication stream
// (core/cuda/stream.h). Compiled only when MDTRAIN_NCCL is on; the rest of mdtrain reaches it
// through the registry ("nccl"), optional_backends.h and nccl_backend.h.
//
// - create_group(devices): ncclCommInitAll, all ranks in this process (MirroredStrategy), each
//   driven by its own thread. create_rank(id, rank, size, device): ncclCommInitRank, one GPU per
//   process (multi-worker), the id shared by the caller (nccl_backend.h).
// - Buffers may be GPU memory of the rank's device (used in place) or host memory (staged through
//   pinned and device scratch buffers, so small host values and the shared test suite work too).
// - A collective is ordered after the work already on the device's compute stream, runs on the
//   communication stream inside ncclGroupStart/End, and the compute stream waits for it before
//   later kernels. The blocking forms return when it has finished; while waiting, the rank polls
//   ncclCommGetAsyncError and the group's failure flag, so a failed or aborted peer raises
//   instead of hanging, and after timeout() seconds the rank aborts its communicator
//   (ncclCommAbort) and throws TimeoutError. enqueue_all_reduce + wait_enqueued overlap the
//   all-reduce of one gradient bucket with the backward pass of the next.
// - split(color, key) is ncclCommSplit. In-process groups check that every rank called split
//   (mismatch, timeout) before entering it; across processes ncclCommSplit blocks until every
//   rank calls it (blocking NCCL initialization has no timeout). The new group has its own
//   ledger and failure state: aborting it does not abort this one.
// - Sum uses NCCL's sum, Mean ncclAvg (floats), Max/Min of floats an all-gather and a rank-order
//   fold (NCCL's fmaxf/fminf would drop NaN; the contract propagates it), Max/Min of integers
//   NCCL's. NCCL's reduction order is its own (ring or tree): results are identical on every rank
//   and from run to run on the same topology, but not bitwise equal to a rank-order sum.
//   reduce() is an all-reduce whose result only the root keeps, so its bits equal all_reduce's.
// - send / recv / send_recv are ncclSend / ncclRecv (NCCL 2.7+), grouped when both, and blocking.
// - In-process groups also check that every rank called the same collective with the same
//   arguments (a mismatch fails on every rank, naming both calls) and name the missing ranks on a
//   timeout; groups across processes cannot see their peers' calls and only time out.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/group_failure.h"

struct ncclComm;  // ncclComm_t is ncclComm*

namespace mdtrain {

class NcclCommunicator final : public Communicator {
 public:
  static std::vector<std::unique_ptr<Communicator>> create_group(const std::vector<int>& devices);
  static std::unique_ptr<Communicator> create_rank(const std::string& unique_id, int rank, int size, int device);

  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  void abort(const std::string& reason) override;
  // The GPU this rank drives.
  int device() const { return device_; }

  // enqueue_all_reduce of device memory (Sum or Mean) goes on the communication stream.
  bool enqueues_all_reduce(const Device& device) const override;

  // What every rank of an in-process group shares (defined in the .cpp).
  struct Ledger;
  struct Call;

 protected:
  void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) override;
  void do_broadcast(void* data, std::size_t count, DType dtype, int root) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) override;
  void do_barrier() override;
  void check_device(const Device& device) const override;
  // ncclCommSplit. In-process groups first wait (polling, with the timeout) until every rank
  // entered the split, and the new group gets a ledger of its own.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  // Returns at once for device memory and Sum or Mean (the stream form); others run at once.
  void do_enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  // Blocks until every enqueued all-reduce finished (with the blocking collectives' error and
  // timeout handling) and orders the compute stream after them.
  void do_wait_enqueued() override;
  // Point to point: ncclSend / ncclRecv on the communication stream, waited for like a collective
  // (NCCL's send returns once the peer received, so it blocks until the peer's recv). send_recv
  // puts the two in one group. Zero-count messages are no-ops on both sides.
  void do_send(const void* data, std::size_t count, DType dtype, int peer) override;
  void do_recv(void* data, std::size_t count, DType dtype, int peer) override;
  void do_send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                    std::size_t recv_count, int recv_peer, DType dtype) override;

 private:
  NcclCommunicator(ncclComm* comm, int rank, int size, int device, std::shared_ptr<Ledger> ledger);

  // Records the call in the ledger (checking it against the peers' calls) or throws the group's
  // earlier failure.
  void enter(const Call& call);
  // Runs enqueue(stream) on the communication stream after the compute stream's work, then waits.
  template <class F>
  void run(const Call& call, F&& enqueue);
  // run() without the ledger: enqueue after the compute stream's work, then wait.
  template <class F>
  void launch_and_wait(const Call& call, F&& enqueue);
  // A send (send_peer >= 0) and / or a recv (recv_peer >= 0) in one NCCL group.
  void point_to_point(const void* send, std::size_t send_count, int send_peer, void* recv, std::size_t recv_count,
                      int recv_peer, DType dtype);
  void wait_for(const cuda::Event& done, const Call& call);
  // Waits until every rank of the in-process group entered `call` (timeout, failures).
  void wait_for_peers(const Call& call);
  // "rank 2 did not arrive (rank 2 last entered barrier #1)"; the ledger's mutex held.
  std::string who_is_missing(const Call& call) const;
  // The group's failure: shared through the ledger in-process, this rank's own otherwise.
  GroupFailure& failure() { return ledger_ ? ledger_failure() : own_failure_; }
  GroupFailure& ledger_failure();
  [[noreturn]] void fail_group(const std::string& reason, bool timeout);
  [[noreturn]] void throw_failure(const Call& call, bool entering);
  void abort_comm();
  ncclComm* comm_locked(const Call& call);  // the live handle (comm_mutex_ held) or throws

  // Scratch memory, grown on demand: `bytes` of device memory, and of pinned host memory.
  void* device_scratch(std::size_t bytes, int which);
  void* pinned_scratch(std::size_t bytes, int which);

  std::mutex comm_mutex_;  // guards comm_ (abort() may come from another thread)
  ncclComm* comm_;
  const int rank_, size_, device_;
  std::shared_ptr<Ledger> ledger_;  // null for groups across processes
  GroupFailure own_failure_;        // for groups without a ledger
  unsigned long long seq_ = 0;
  cuda::Event ready_, done_;
  std::vector<std::pair<std::shared_ptr<void>, std::size_t>> device_scratch_, pinned_scratch_;
  std::vector<Call> pending_;  // enqueued, not yet waited for
};

}  // namespace mdtrain
