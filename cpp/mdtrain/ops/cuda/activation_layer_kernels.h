#pragma once
// The CUDA bodies of ops/parametric_activation.h and ops/over_axes.h: kernels on the tensors'
// GPU's compute stream computing the shared math (one thread per element, or per row of a plan).
// Arguments were validated by the op files. Defined in activation_layer_kernels.cu, or by the
// stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/over_axes_math.h"
#include "mdtrain/ops/parametric_activation.h"

namespace mdtrain::cuda {

void parametric_activation(const Tensor& x, const ops::ParametricActivation& a, Tensor& y);
void parametric_activation_backward(const ops::ParametricActivation& a, const Tensor& x, const Tensor& dy, Tensor& dx);
void prelu(const Tensor& x, const Tensor& alpha, const math::AxesPlan& plan, Tensor& y);
void prelu_backward(const Tensor& x, const Tensor& alpha, const Tensor& dy, const math::AxesPlan& plan, Tensor* dx,
                    Tensor& dalpha);
void softmax_over_axes(const Tensor& x, const math::AxesPlan& plan, Tensor& y);
void softmax_over_axes_backward(const Tensor& y, const Tensor& dy, const math::AxesPlan& plan, Tensor& dx);
void unit_normalize(const Tensor& x, const math::AxesPlan& plan, Tensor& y);
void unit_normalize_backward(const Tensor& x, const Tensor& dy, const math::AxesPlan& plan, Tensor& dx);

}  // namespace mdtrain::cuda
