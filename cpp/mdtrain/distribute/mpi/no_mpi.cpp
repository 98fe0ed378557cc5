// Compiled instead of the MPI communicator when mdtrain is built without MPI.
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/optional_backends.h"

namespace mdtrain {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator() {
  fail<std::runtime_error>("[mpi] mdtrain was built without MPI; rebuild with -DMDTRAIN_MPI=ON");
}

MpiWorldInfo mpi_world_info() {
  fail<std::runtime_error>("[mpi] mdtrain was built without MPI; rebuild with -DMDTRAIN_MPI=ON");
}

void mpi_finalize() {}

void mpi_end_job_on_failure(bool) {}

}  // namespace mdtrain
