// Compiled instead of the NCCL communicator when mdtrain is built without NCCL (MDTRAIN_NCCL=OFF,
// or CUDA off, or NCCL not found).
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/nccl/nccl_backend.h"
#include "mdtrain/distribute/optional_backends.h"

namespace mdtrain {

namespace {
[[noreturn]] void no_nccl() {
  fail<std::runtime_error>("[nccl] mdtrain was built without NCCL; rebuild with -DMDTRAIN_CUDA=ON -DMDTRAIN_NCCL=ON");
}
}  // namespace

bool nccl_available() { return false; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int) { no_nccl(); }

std::string nccl_unique_id() { no_nccl(); }

std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::string&, int, int, int) { no_nccl(); }

int nccl_version() { return 0; }

}  // namespace mdtrain
