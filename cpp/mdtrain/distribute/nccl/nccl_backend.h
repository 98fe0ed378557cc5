#pragma once
// What the rest of mdtrain may ask of the NCCL backend beyond the registry ("nccl") and
// optional_backends.h, without the NCCL headers. (Overlapping an all-reduce with compute is
// Communicator::enqueue_all_reduce / wait_enqueued, on any backend.) Defined by nccl_communicator.cpp, or by the stub
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
std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::string& unique_id, int rank, int size, int device);

// NCCL's version as NCCL_VERSION_CODE (e.g. 22809 for 2.28.9); 0 without NCCL.
int nccl_version();

}  // namespace mdtrain
