#pragma once
// CUDA bodies of the ops of ops/embedding.h (same contracts). embedding.cpp validates the arguments
// (shapes, dtypes, every tensor on one GPU) and then calls these; they enqueue work on the device's
// compute stream. The per-element math is ops/embedding_math.h, which the CPU loops call too;
// ops/cuda/kernel_list.h names the kernels and their GPU tests.
//
// Deterministic: the first bad index is the minimum of the bad positions (an atomicMin, whose
// result does not depend on the order), and the scatter-add gives each thread whole columns of the
// gradient, walked over the indices in index order (no atomics, the CPU's order).
// Defined in embedding_kernels.cu, or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda {

// The position of the first index value naming no row (rows then holds nothing of use), or -1.
// Waits for the GPU: the answer decides whether the layer may go on.
std::int64_t embedding_rows(const Tensor& x, std::int64_t table_rows, Tensor& rows);
void embedding_lookup(const Tensor& table, const Tensor& rows, Tensor& out);
void embedding_scatter_add(const Tensor& dy, const Tensor& rows, Tensor& grad);
void embedding_shard_rows(const Tensor& rows, std::int64_t first, std::int64_t held, Tensor& local, Tensor& keep);

}  // namespace mdtrain::cuda
