#pragma once
// CUDA bodies of the ops in ops/ops.h. ops.cpp validates the arguments (shapes, dtypes, one
// device per call) and then calls these for tensors on a GPU; they enqueue work on the device's
// compute stream. The per-element math is the MDTRAIN_HD functions the CPU kernels call
// (ops/elementwise_math.h, core/rng.h); ops/cuda/kernel_list.h names them for each kernel.
// Defined in elementwise_kernels.cu and gemm.cpp, or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain::cuda {

// cuBLAS (row-major through the transpose identity C^T = op(B)^T op(A)^T).
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha, double beta);
void bias_activation(const Tensor& z, const Tensor& bias, Activation act, Tensor& y);
void activation_backward(Activation act, const Tensor& z, const Tensor& y, const Tensor& dy, Tensor& dz);
void sum_rows(const Tensor& x, Tensor& out, double beta);
void dropout(const Tensor& x, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
             Tensor& mask, Tensor& y);
void multiply(const Tensor& a, const Tensor& b, Tensor& y);
// out is on a GPU; x on the same GPU (a gather kernel) or on the host (the input batch: rows are
// gathered into pinned memory and copied asynchronously). indices are host memory, validated.
void gather_rows(const Tensor& x, const std::int64_t* indices, std::int64_t count, Tensor& out);
bool all_finite(const Tensor& x);
// Sum of squares of every element, accumulated in double (clipnorm / global_clipnorm).
double sum_of_squares(const Tensor& x);

}  // namespace mdtrain::cuda
