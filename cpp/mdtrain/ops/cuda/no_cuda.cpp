// Compiled instead of the CUDA backend when MDTRAIN_CUDA=OFF (or CUDA is not found).
#include "mdtrain/ops/cuda/cuda_runtime.h"

namespace mdtrain::cuda {

int device_count() { return 0; }

std::string unavailable_reason() {
  return "mdtrain was built without CUDA (rebuild with -DMDTRAIN_CUDA=ON on a machine with the CUDA toolkit)";
}

}  // namespace mdtrain::cuda
