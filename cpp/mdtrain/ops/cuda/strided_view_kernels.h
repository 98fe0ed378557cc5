#pragma once
// The CUDA body of ops::strided_view (ops/strided_view.h): one kernel on the tensors' GPU's
// compute stream, computing math::view_element per written element. Arguments were validated by
// strided_view.cpp. Defined in strided_view_kernels.cu, or by the stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/strided_view_math.h"

namespace mdtrain::cuda {

void strided_view(const Tensor& src, Tensor& dst, const math::ViewArrays& v);

}  // namespace mdtrain::cuda
