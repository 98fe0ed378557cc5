#pragma once
// Factories of the backends a build may leave out. Each is defined either by the real backend
// or by its stub (no_mpi.cpp, no_nccl.cpp: chosen by CMake), so callers never test a build flag:
// they ask *_available(), or call the factory and get a std::runtime_error saying how to rebuild.
#include <memory>
#include <vector>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// True when this build has MPI (the process may still not have been started under mpirun).
bool mpi_available();
// This process's rank of MPI_COMM_WORLD.
std::unique_ptr<Communicator> make_mpi_communicator();

// True when this build has NCCL.
bool nccl_available();
// One communicator per local GPU 0..local_size-1, all in this process.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int local_size);

}  // namespace mdtrain
