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
// This process's rank of MPI_COMM_WORLD, on a communicator of its own (mpi_communicator.h).
// Collective: every process of the job makes its MPI communicators in the same order. The first
// call initializes MPI (MPI_THREAD_SERIALIZED); mpi_finalize() runs at exit.
std::unique_ptr<Communicator> make_mpi_communicator();

// Where this process sits in the MPI job.
struct MpiWorldInfo {
  int rank = 0;        // in MPI_COMM_WORLD
  int size = 1;        // of MPI_COMM_WORLD
  int local_rank = 0;  // among the job's processes on this host (MPI_COMM_TYPE_SHARED)
  int local_size = 1;
};
// Initializes MPI like make_mpi_communicator (a process not started by mpirun is a job of one).
MpiWorldInfo mpi_world_info();
// Finalizes MPI if mdtrain initialized it and did not finalize it yet; later calls do nothing.
// Also runs at process exit. MPI communicators still alive throw std::runtime_error afterwards.
void mpi_finalize();
// With `on`, a process in which any MPI group failed (a collective timed out or was aborted)
// ends the whole job with MPI_Abort at exit instead of finalizing: MPI_Finalize would wait for a
// rank that may be stuck outside MPI, and the launcher would never return. Multi-worker training
// turns it on; off by default (a test binary that provokes failures on purpose still finalizes).
void mpi_end_job_on_failure(bool on);

// True when this build has NCCL.
bool nccl_available();
// One communicator per local GPU 0..local_size-1, all in this process.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int local_size);

}  // namespace mdtrain
