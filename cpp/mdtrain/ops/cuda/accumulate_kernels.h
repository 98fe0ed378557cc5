#pragma once
// The CUDA body of ops::add_into (ops/accumulate.h): one kernel on the tensors' GPU's compute
// stream, computing math::accumulate per element. Arguments were validated by accumulate.cpp.
// Defined in accumulate_kernels.cu, or by the stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda {

void add_into(Tensor& acc, const Tensor& x);

}  // namespace mdtrain::cuda
