#pragma once
// What the rest of mdtrain may ask of the NCCL backend beyond the registry ("nccl") and
// optional_backends.h, without the NCCL headers. Defined by nccl_communicator.cpp, or by the stub
// no_nccl.cpp (which throws std::runtime_error saying how to rebuild), so callers never test a
// build flag.
//
// Bootstrap of one GPU per process: rank 0 calls nccl_unique_id(), sends the bytes to every other
// rank (over MPI, a file or TCP: the caller's choice), and every rank then calls
// make_nccl_rank_communicator with the same bytes.
#include <cstddef>
#include <memory>
#include <string>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// NCCL_UNIQUE_ID_BYTES (128) opaque bytes naming a new group (ncclGetUniqueId).
std::string nccl_unique_id();

// This process's rank of a group of `size` processes (ncclCommInitRank), driving GPU `device`.
// Throws std::invalid_argument for an id of the wrong length, a rank outside [0, size) or a device
// this process does not see.
std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::string& unique_id, int rank, int size,
                                                          int device);

// NCCL's version as NCCL_VERSION_CODE (e.g. 22809 for 2.28.9); 0 without NCCL.
int nccl_version();

// Overlap of communication with compute (the gradient buckets of one step): enqueues an
// all-reduce (Sum, or Mean of a floating dtype) of GPU memory of comm's device on the
// communication stream, after the work already on the compute stream, and returns at once.
// nccl_wait then blocks until every enqueued one has finished (polling NCCL's async errors,
// honouring comm.timeout(), raising as the blocking collectives do) and makes the compute stream
// wait for them. `comm` must be an "nccl" communicator (std::invalid_argument otherwise).
void nccl_enqueue_all_reduce(Communicator& comm, void* data, std::size_t count, DType dtype, ReduceOp op);
void nccl_wait(Communicator& comm);

}  // namespace mdtrain
