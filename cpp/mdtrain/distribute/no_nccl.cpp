// Compiled instead of the NCCL communicator when mdtrain is built without NCCL.
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/optional_backends.h"

namespace mdtrain {

bool nccl_available() { return false; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int) {
  fail<std::runtime_error>("[nccl] mdtrain was built without NCCL; rebuild with -DMDTRAIN_NCCL=ON");
}

}  // namespace mdtrain
