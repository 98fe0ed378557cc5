#pragma once
// The "mpi" backend: one rank per process, over MPI (Open MPI, MPICH, ...) between processes
// and hosts. Exists only in builds with MPI (mpi_available()); code that must also build without
// it uses make_mpi_communicator() / mpi_world_info() from optional_backends.h instead.
//
// Making one is collective over MPI_COMM_WORLD (MPI_Comm_idup, waited for with the default
// timeout, then two MPI_Comm_dup of it): every process makes its MPI communicators in the same
// order. They are numbered 1, 2, ... in that order (id()), the same
// number on every process; timeout reports use it. The first one initializes MPI with
// MPI_Init_thread(MPI_THREAD_SERIALIZED): collectives may run on any thread (a replica thread),
// and mdtrain serializes its MPI calls with one process-wide mutex. mpi_finalize() finalizes MPI
// at exit (or earlier, when called).
//
// Every collective starts with a header exchange: each rank sends every other rank (point to
// point) what it called - operation, sequence number, count, dtype, op, root. A mismatch is a
// std::runtime_error on every rank before any user buffer is touched. Small collectives (payload
// up to fused_bytes(size()) per rank: 64 KB for up to 5 ranks) ride in the same message, so they
// cost one exchange. Larger ones then move their data in pieces of MpiOptions::chunk_bytes,
// MpiOptions::chunks_in_flight at a time: all_reduce = MPI_Ialltoallv (rank r receives slice r
// of everyone's piece) + local reduction + MPI_Iallgatherv; reduce = the same with MPI_Igatherv
// to the root; broadcast = MPI_Ibcast; all_gather = MPI_Iallgatherv; reduce_scatter =
// MPI_Ialltoallv + local reduction.
//
// Results are those of the threads backend, bit for bit: every reduction folds the ranks'
// contributions in rank order 0..N-1 (then divides by N for Mean) with mdtrain's own kernels
// (reduce_kernels.h), never with MPI's reduction operators. So the result is identical on every
// rank, in every run, for any chunk size, and reduce's root gets exactly all_reduce's bits. (MPI
// leaves the order to the library - Open MPI 4.1's MPI_Iallreduce uses a binomial tree whose
// shape depends on the rank count, and MPI_Ireduce's on the root - and Open MPI's MPI_MAX drops
// a NaN or keeps it depending on operand order.)
//
// Waiting is polling (MPI_Testsome), never a blocking MPI call, so that:
// - A collective that waits longer than timeout() throws TimeoutError naming the operation, its
//   sequence number, the ranks that did not arrive and what they are doing. Each rank answers
//   status queries on a private control communicator while it polls any collective of any of
//   its MPI communicators; the waiting rank asks every missing peer and reports, e.g.
//     [mpi] all_reduce #12 on rank 0 timed out after 2 s: rank 1 did not arrive (rank 1 last
//     entered barrier #11 and is inside no collective of MPI communicator 1; it waits in
//     barrier #3 of MPI communicator 2)
//   or "... and did not answer within 0.5 s: it is in no MPI collective of mdtrain (computing,
//   blocked elsewhere, or dead)", then tells every peer, so their pending and later collectives
//   throw too. While data moves (everyone arrived) the timeout counts from the last progress, so
//   a huge buffer never times out.
// - abort(reason), from any thread, sends a notice to every peer: their pending and later
//   collectives throw std::runtime_error naming this rank and the reason. A collective already
//   moving data finishes its transfer first (its peers are in it too and need this rank), then
//   throws; one that a peer gave up throws at once.
// MPI never sees the caller's buffers: pipelined pieces go through mdtrain's own staging memory
// (one memcpy in or out per piece), so a collective that throws leaves no MPI request on them,
// and the caller may free them at once. Except in the Tensor forms of all_reduce and broadcast
// (buffer_owners() known): MPI works on the tensors' memory, and a collective that throws keeps
// the owners alive with its pending requests (a late transfer may still write such a tensor).
// send/recv are point to point on the data communicator with their own tag (collectives never
// match them); a send is buffered (MPI_Isend of a copy), so it never waits for the receiver.
// split(color, key) is MPI_Comm_split of this communicator (after a header exchange, so a rank
// that calls something else is a mismatch and one that never comes a TimeoutError, and an
// MPI_Ibarrier, so that no rank enters the blocking MPI_Comm_split unless every rank does); the
// new group gets its own duplicates and control communicator, so its timeouts, aborts and status
// queries are its own. It takes the next id on every process (also when the color is negative),
// and this communicator's options.
// After a timeout, an abort or a mismatch the communicator stays unusable (every collective
// throws); make a new one. Nothing here calls MPI_Abort. A peer process that dies: mpirun ends
// the whole job by default; with `mpirun --enable-recovery` the others time out, reporting that
// the rank did not answer. A collective given up on leaves MPI requests pending (MPI cannot
// cancel a collective): the memory mdtrain owns stays allocated for them (and is the only memory
// they use) and the communicator is never freed (nor is any failed group's, nor any
// communicator's private control communicator: see ~MpiCommunicator).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/optional_backends.h"

namespace mdtrain {

struct MpiOptions {
  // Bytes of each pipelined piece of a large collective (all ranks' share of it for all_gather
  // and reduce_scatter), and how many pieces are in flight at once. Every process of a job must
  // use the same values (they are not checked).
  // 2 MB, 2 in flight: the best of 256 KB..4 MB x 2..8 in bench/allreduce_mpi.py on 2 ranks
  // over shared memory (1 MB L2 per core here), though within the noise of neighbours.
  std::size_t chunk_bytes = std::size_t{2} << 20;
  int chunks_in_flight = 2;
  // Caps fused_bytes(size()): 0 sends every payload through the pipeline (the tests use it).
  std::size_t max_fused_bytes = SIZE_MAX;
};

class MpiCommunicator final : public Communicator {
 public:
  // Payload bytes per rank that travel with the header (one exchange in all): 64 KB up to 5
  // ranks, then 256 KB / (size - 1), at least 4 KB.
  static std::size_t fused_bytes(int size);

  // Collective over MPI_COMM_WORLD; initializes MPI on first use. chunk_bytes must be >= 64 and
  // chunks_in_flight >= 1 (std::invalid_argument).
  explicit MpiCommunicator(const MpiOptions& options = {});
  ~MpiCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "mpi"; }
  void abort(const std::string& reason) override;

  // 1 for the first MPI communicator made in this process, 2 for the second, ...
  int id() const;
  const MpiOptions& options() const;

  // Testing only (tests/cpp/mpi): when set, every pipelined data phase on this rank calls
  // hook(false) before it issues its first pieces and hook(true) right after, without any lock
  // held (the hook may use other communicators). When it returns true, this rank gives the
  // collective up there, as when a peer gave it up: its MPI requests are left pending, the peers
  // are told, and the call throws std::runtime_error. An empty function removes it.
  void set_data_phase_hook(std::function<bool(bool issued)> hook);

  struct State;  // defined in the .cpp, which alone includes mpi.h

 protected:
  void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) override;
  void do_broadcast(void* data, std::size_t count, DType dtype, int root) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) override;
  void do_barrier() override;
  // MPI_Isend of a copy (header + payload) on the data communicator, kept until it completed;
  // recv polls MPI_Improbe / MPI_Imrecv from `peer`, answering status queries and failure notices
  // meanwhile, and times out like a collective.
  void do_send(const void* data, std::size_t count, DType dtype, int peer) override;
  void do_recv(void* data, std::size_t count, DType dtype, int peer) override;
  // MPI_Comm_split of this communicator (plus the new group's own private duplicates), once the
  // header exchange showed every rank calling split and an MPI_Ibarrier that every rank reached.
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  explicit MpiCommunicator(std::unique_ptr<State> state);  // a group made by split

  std::unique_ptr<State> state_;
};

}  // namespace mdtrain
