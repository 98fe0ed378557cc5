#pragma once
// CUDA bodies of the ops of ops/normalization.h (same names and contracts). normalization.cpp
// validates the arguments (shapes, dtypes, every tensor on one GPU) and then calls these; they
// enqueue work on the device's compute stream. The per-element math is the MDTRAIN_HD functions of
// ops/normalization_math.h that the CPU loops call; ops/cuda/kernel_list.h names them per kernel.
//
// Sums over the rows are in double and deterministic: per channel, each block adds a fixed chunk of
// rows (the chunking depends only on the row count), and the chunk partials are added in chunk
// order; per row, one block adds the row in a fixed tree. The same inputs give the same bits on
// every run and every GPU; they differ from the CPU's row-order sums by rounding only.
// Defined in normalization_kernels.cu, or by the stub no_cuda.cpp.
#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda {

void channel_moments(const Tensor& x, Tensor& mean, Tensor& variance);
void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sum_squares);
// xhat may be null.
void channel_normalize(const Tensor& x, const Tensor& mean, const Tensor& inv_std, const Tensor& gamma,
                       const Tensor& beta, Tensor* xhat, Tensor& y);
void channel_grad_sums(const Tensor& dy, const Tensor& xhat, Tensor& sum_dy, Tensor& sum_dy_xhat);
void channel_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& scale, const Tensor& mean_dy,
                                const Tensor& mean_dy_xhat, Tensor& dx);
void row_normalize(const Tensor& x, double epsilon, const Tensor& gamma, const Tensor& beta, Tensor& xhat,
                   Tensor& inv_std, Tensor& y);
void row_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& inv_std, const Tensor& gamma,
                            Tensor& dx);

}  // namespace mdtrain::cuda
