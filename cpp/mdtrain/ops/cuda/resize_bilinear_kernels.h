#pragma once
// The CUDA bodies of ops::resize_bilinear (ops/resize_bilinear.h): one kernel each on the tensors'
// GPU's compute stream, computing the shared math per element. Arguments were validated by
// resize_bilinear.cpp. Defined in resize_bilinear_kernels.cu, or by the stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/resize_bilinear_math.h"

namespace mdtrain::cuda {

void resize_bilinear(const Tensor& x, Tensor& y, const math::ResizeDims<float>& d);
void resize_bilinear(const Tensor& x, Tensor& y, const math::ResizeDims<double>& d);
void resize_bilinear_backward(const Tensor& dy, Tensor& dx, const math::ResizeDims<float>& d);
void resize_bilinear_backward(const Tensor& dy, Tensor& dx, const math::ResizeDims<double>& d);

}  // namespace mdtrain::cuda
