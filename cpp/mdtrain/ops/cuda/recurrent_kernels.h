#pragma once
// CUDA bodies of the ops of ops/recurrent.h (same contracts). recurrent.cpp validates the arguments
// (shapes, dtypes, every tensor on one GPU) and then calls these; they enqueue one kernel on the
// device's compute stream, one thread per (row, unit). The per-element math is ops/recurrent_math.h,
// which the CPU loops call too; ops/cuda/kernel_list.h names the kernels and their GPU tests.
// Defined in recurrent_kernels.cu, or by the stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda {

void lstm_step_forward(const Tensor& z, const Tensor& c_prev, Tensor& gates, Tensor& c, Tensor& h);
void lstm_step_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c, const Tensor& dh, Tensor& dc,
                        Tensor& dz);
void gru_step_forward(const Tensor& xz, const Tensor& hz, const Tensor& h_prev, Tensor& gates, Tensor& h);
// dh_prev may be undefined (the first step: nothing to add the direct part to).
void gru_step_backward(const Tensor& gates, const Tensor& hz, const Tensor& h_prev, const Tensor& dh, Tensor& dx,
                       Tensor& dhz, Tensor& dh_prev);
void add_masked(const Tensor& g, const Tensor& mask, Tensor& acc);

}  // namespace mdtrain::cuda
