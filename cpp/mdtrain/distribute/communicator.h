#pragma once
// Communicator: one rank's handle on a group of ranks that run collectives together.
//
// Every rank of a group calls the same collectives in the same order with the same counts,
// dtypes, ops and roots (like MPI). A collective returns once this rank's part is done and its
// buffers may be reused. Backends (threads, single, nccl, mpi) implement the protected do_*
// hooks; the public methods here validate arguments identically for all of them, so a bad
// argument is a std::invalid_argument before any rank waits on another.
//
// A collective that waits longer than timeout() throws mdtrain::TimeoutError naming the
// operation and the ranks that did not arrive. After a timeout or abort() the group is unusable:
// every pending and later collective on any of its ranks throws instead of waiting.
//
// split() makes sub-groups (one per axis of a device mesh); enqueue_all_reduce() and
// wait_enqueued() let a backend with a communication stream overlap an all-reduce with compute.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/device.h"
#include "mdtrain/core/dtype.h"

namespace mdtrain {

class Tensor;

enum class ReduceOp { Sum, Mean, Max, Min };
const char* name_of(ReduceOp op);

// The operations a Communicator counts (Communicator::counts): an enqueued all-reduce is an
// all-reduce, send_recv a send and a receive.
enum class CountedCollective { AllReduce, Reduce, Broadcast, AllGather, ReduceScatter, Send, Recv };
inline constexpr int kCountedCollectives = 7;
const char* name_of(CountedCollective kind);

// Calls of one kind and the bytes of the buffer they combine: all_reduce, reduce, broadcast,
// send and recv their data; all_gather and reduce_scatter every rank's block (size() *
// count_per_rank elements), the message size collective cost models take.
struct CollectiveCount {
  std::int64_t calls = 0;
  std::int64_t bytes = 0;
};
struct CollectiveCounts {
  CollectiveCount of[kCountedCollectives];
  const CollectiveCount& operator[](CountedCollective kind) const { return of[static_cast<int>(kind)]; }
  void add(CountedCollective kind, std::int64_t bytes) {
    CollectiveCount& c = of[static_cast<int>(kind)];
    c.calls += 1;
    c.bytes += bytes;
  }
};

class Communicator {
 public:
  // 300 s: long enough for a slow replica step, short enough that a lost rank is reported.
  static constexpr double kDefaultTimeout = 300.0;

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "threads", "single", "nccl", "mpi": also the "[area]" prefix of this backend's errors.
  virtual std::string backend() const = 0;

  // Seconds a collective may wait for the other ranks; must be > 0 (infinity allowed).
  void set_timeout(double seconds);
  double timeout() const { return timeout_; }

  // Makes every pending and later collective of the whole group throw std::runtime_error naming
  // this rank and `reason`, so that peers of a rank that failed stop waiting at once.
  virtual void abort(const std::string& reason) = 0;

  // In place: data (count elements) becomes the reduction over all ranks, identical on every rank.
  // Mean needs a floating dtype; Max/Min propagate NaN.
  void all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  // root's data (count elements) becomes the reduction over all ranks (in rank order, so the
  // bits equal all_reduce's); other ranks' data is left as it was. One rank does the work, as
  // TF's ReductionToOneDevice.
  void reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root);
  // root's data (count elements) is copied into every other rank's data.
  void broadcast(void* data, std::size_t count, DType dtype, int root);
  // recv (size() * count_per_rank elements) gets rank r's send at offset r * count_per_rank.
  // send may be recv + rank() * count_per_rank (in place); other overlaps are rejected.
  void all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype);
  // recv (count_per_rank elements) gets the reduction of block rank() of every rank's send
  // (size() * count_per_rank elements). recv may be send + rank() * count_per_rank.
  void reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                      ReduceOp op = ReduceOp::Sum);
  void barrier();

  // What this rank called since construction or reset_counts() (see CollectiveCounts): the
  // executors report it per step, and tests compare it with the StepPlan's collectives.
  const CollectiveCounts& counts() const { return counts_; }
  void reset_counts() { counts_ = CollectiveCounts{}; }

  // Collective, like MPI_Comm_split: every rank of this group calls it, in the same order as its
  // other collectives (a rank that calls another collective instead is a "collective mismatch"
  // on every rank; one that never calls it is a TimeoutError naming split). Ranks that pass the
  // same color >= 0 form a new group, in which they are ordered by (key, rank in this group).
  // Returns this rank's communicator of its new group: the same backend (hierarchical groups:
  // see hierarchical_communicator.h), this communicator's timeout, collectives validated and
  // deterministic exactly as here, sequence numbers from #1. A negative color (MPI_UNDEFINED)
  // takes part in the split but joins no group: nullptr. Colors and keys may differ between
  // ranks; they are not checked against each other.
  //
  // The new group is independent of this one: its timeouts and abort() fail only the new group,
  // and a failure of this group does not reach it. A rank that fails should abort every
  // communicator it holds (the world and each mesh axis), so that no peer waits for it until its
  // timeout. The new communicator may outlive this one.
  std::unique_ptr<Communicator> split(int color, int key);

  // Asynchronous all-reduce: starts an all-reduce of data (as all_reduce(data, count, dtype, op))
  // and may return before it finished; wait_enqueued() returns once every all-reduce this rank
  // enqueued has finished. Between the two, data must stay alive and untouched. Backends with a
  // communication stream (nccl, for GPU memory: enqueues_all_reduce(device) is true) put it
  // there, ordered after the compute stream's work, so backward goes on meanwhile; every other
  // backend runs the all-reduce at once (the same sums) and wait_enqueued() has nothing to do.
  // Every rank enqueues the same all-reduces in the same order as its other collectives.
  void enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  void wait_enqueued();
  // True when enqueue_all_reduce of memory of `device` returns before the all-reduce finished.
  virtual bool enqueues_all_reduce(const Device& device) const;

  // Point to point (pipeline stages pass activations and their gradients this way). Not
  // collectives: only the two ranks take part, and they do not count in the collectives'
  // sequence numbers. send copies data (count elements) out and may return before `peer`
  // received it (the buffer may be reused at once); recv waits for the next message from `peer`
  // (messages between two ranks arrive in the order they were sent) and needs the sender's count
  // and dtype (else std::runtime_error, and the group fails). A recv that waits longer than
  // timeout() throws TimeoutError naming the peer and fails the group; a failed group (abort,
  // timeout, mismatch) makes pending and later sends and recvs throw, like the collectives.
  // peer must be another rank of this group (std::invalid_argument).
  void send(const void* data, std::size_t count, DType dtype, int peer);
  void recv(void* data, std::size_t count, DType dtype, int peer);
  // A send to send_peer, then a recv from recv_peer, as one step: the same as send + recv on the
  // buffered backends (threads, MPI); NCCL, whose sends wait for the peer's recv, runs the two in
  // one group, so two neighbours that each send to the other before they receive do not deadlock.
  void send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data, std::size_t recv_count,
                 int recv_peer, DType dtype);

  // Tensor forms: whole tensors, element counts and dtypes taken from them. The tensors'
  // storage owners are known to the backend for the call (buffer_owners()): a backend that must
  // leave requests on abandoned buffers (mpi) keeps the owners alive instead of copying.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  void broadcast(Tensor& tensor, int root);
  // recv.numel() == size() * send.numel().
  void all_gather(const Tensor& send, Tensor& recv);
  // send.numel() == size() * recv.numel().
  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op = ReduceOp::Sum);

 protected:
  Communicator() = default;

  // Called with validated arguments; count may be 0 (every rank still takes part).
  virtual void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) = 0;
  virtual void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) = 0;
  virtual void do_broadcast(void* data, std::size_t count, DType dtype, int root) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                 ReduceOp op) = 0;
  virtual void do_barrier() = 0;
  // Called by split with any color (negative: joins no group, return nullptr). Every built-in
  // backend has it; the default, for backends registered by other code, throws
  // std::logic_error("[backend] split: ... not implemented").
  virtual std::unique_ptr<Communicator> do_split(int color, int key);
  // Called with validated arguments (peer != rank()). The defaults, for backends registered by
  // other code, throw std::logic_error("[backend] send: ... not implemented").
  virtual void do_send(const void* data, std::size_t count, DType dtype, int peer);
  virtual void do_recv(void* data, std::size_t count, DType dtype, int peer);
  // Default: do_send, then do_recv.
  virtual void do_send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                            std::size_t recv_count, int recv_peer, DType dtype);
  // Default: do_all_reduce at once, and nothing to wait for.
  virtual void do_enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op);
  virtual void do_wait_enqueued() {}
  // Throws std::invalid_argument when this backend cannot reach memory of `device`.
  virtual void check_device(const Device& device) const;
  // Called by set_timeout after the new value is stored (composite backends pass it on).
  virtual void on_timeout_changed(double /*seconds*/) {}

  // During a Tensor form (all_reduce, broadcast, all_gather, reduce_scatter): the owners of the
  // tensors' storage (one per tensor; null for none), so that a backend may keep the buffers
  // alive past the call (mpi: a collective given up on leaves MPI requests on them). Empty during
  // the raw-pointer forms: their buffers' lifetime is unknown beyond the call.
  const std::vector<std::shared_ptr<void>>& buffer_owners() const { return buffer_owners_; }

 private:
  void check_buffer(const char* op, const void* ptr, std::size_t count, const char* what) const;
  void check_op(const char* op, DType dtype, ReduceOp reduce) const;
  void check_peer(const char* op, int peer) const;
  void check_tensor(const char* op, const Tensor& tensor, const char* what) const;

  void tally(CountedCollective kind, std::size_t elements, DType dtype) {
    counts_.add(kind, static_cast<std::int64_t>(elements * size_of(dtype)));
  }

  double timeout_ = kDefaultTimeout;
  CollectiveCounts counts_;
  std::vector<std::shared_ptr<void>> buffer_owners_;
  friend class BufferOwnersScope;
};

}  // namespace mdtrain
