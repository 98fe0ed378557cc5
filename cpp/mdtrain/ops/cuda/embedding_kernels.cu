// CUDA kernels behind ops/embedding.h. The per-element math is ops/embedding_math.h, which the CPU
// loops (ops/cpu/embedding_kernels.cpp) call too; ops/cuda/kernel_list.h lists the kernels and their
// GPU tests. Arguments were validated by embedding.cpp.
#include <cstdint>
#include <cstring>
#include <memory>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cuda/embedding_kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/embedding_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

// rows[i] = the row x[i] names; *first_bad = the lowest position naming none (it starts at n).
template <class I>
__global__ void embedding_rows_kernel(const I* x, std::int64_t n, std::int64_t table_rows, std::int64_t* rows,
                                      unsigned long long* first_bad) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t row = math::embedding_row(x[i], table_rows);
    if (row < 0) atomicMin(first_bad, static_cast<unsigned long long>(i));
    else rows[i] = row;
  }
}

template <class T>
__global__ void embedding_lookup_kernel(const T* table, const std::int64_t* rows, std::int64_t count, std::int64_t dim,
                                        T* out) {
  const std::int64_t total = count * dim;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) out[k] = table[rows[k / dim] * dim + k % dim];
}

// One thread per column of the gradient: it adds the column of every dy row, in index order.
template <class T>
__global__ void embedding_scatter_add_kernel(const T* dy, const std::int64_t* rows, std::int64_t count,
                                             std::int64_t dim, T* grad) {
  for (std::int64_t c = first_index(); c < dim; c += grid_stride())
    for (std::int64_t i = 0; i < count; ++i) grad[rows[i] * dim + c] += dy[i * dim + c];
}

// One thread per element of keep; the first column's thread also writes local.
template <class T>
__global__ void embedding_shard_rows_kernel(const std::int64_t* rows, std::int64_t count, std::int64_t first,
                                            std::int64_t held, std::int64_t dim, std::int64_t* local, T* keep) {
  const std::int64_t total = count * dim;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) {
    const std::int64_t i = k / dim, row = math::shard_row(rows[i], first, held);
    keep[k] = row < 0 ? T(0) : T(1);
    if (k % dim == 0) local[i] = row < 0 ? 0 : row;
  }
}

template <class F>
void dispatch_index(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Int32: return f(std::int32_t{});
    case DType::Int64: return f(std::int64_t{});
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: break;
  }
  fail<std::invalid_argument>("[embedding] indices must be int32, int64, float32 or float64, got ", name_of(dtype));
}

}  // namespace

std::int64_t embedding_rows(const Tensor& x, std::int64_t table_rows, Tensor& rows) {
  const std::int64_t n = x.numel();
  if (n == 0) return -1;
  OnDevice on(x);
  std::shared_ptr<void> first_bad = allocate(x.device(), sizeof(unsigned long long));
  const auto none = static_cast<unsigned long long>(n);
  detail::stage_to_device(x.device().index, first_bad.get(), sizeof(none),
                          [&](void* staging) { std::memcpy(staging, &none, sizeof(none)); });
  dispatch_index(x.dtype(), [&](auto tag) {
    using I = decltype(tag);
    embedding_rows_kernel<I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<I>(), n, table_rows, rows.data<std::int64_t>(),
                                                    static_cast<unsigned long long*>(first_bad.get()));
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("embedding_rows_kernel");
  unsigned long long host = none;
  detail::copy_to_host(&host, first_bad.get(), sizeof(host), on.stream);
  return host == none ? -1 : static_cast<std::int64_t>(host);
}

void embedding_lookup(const Tensor& table, const Tensor& rows, Tensor& out) {
  const std::int64_t count = out.dim(0), dim = out.dim(1);
  if (count == 0) return;
  OnDevice on(table);
  dispatch_floating(table.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    embedding_lookup_kernel<T><<<blocks_for(count * dim), kThreads, 0, on.stream>>>(table.data<T>(),
                                                                                    rows.data<std::int64_t>(), count,
                                                                                    dim, out.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("embedding_lookup_kernel");
}

void embedding_scatter_add(const Tensor& dy, const Tensor& rows, Tensor& grad) {
  const std::int64_t count = dy.dim(0), dim = dy.dim(1);
  OnDevice on(grad);
  MDTRAIN_CUDA_CHECK(cudaMemsetAsync(grad.raw(), 0, grad.nbytes(), on.stream));
  if (count == 0) return;
  dispatch_floating(dy.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    embedding_scatter_add_kernel<T><<<blocks_for(dim), kThreads, 0, on.stream>>>(dy.data<T>(),
                                                                                 rows.data<std::int64_t>(), count, dim,
                                                                                 grad.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("embedding_scatter_add_kernel");
}

void embedding_shard_rows(const Tensor& rows, std::int64_t first, std::int64_t held, Tensor& local, Tensor& keep) {
  const std::int64_t count = keep.dim(0), dim = keep.dim(1);
  if (count == 0) return;
  OnDevice on(keep);
  if (dim == 0) return;
  dispatch_floating(keep.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    embedding_shard_rows_kernel<T>
        <<<blocks_for(count * dim), kThreads, 0, on.stream>>>(rows.data<std::int64_t>(), count, first, held, dim,
                                                              local.data<std::int64_t>(), keep.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("embedding_shard_rows_kernel");
}

}  // namespace mdtrain::cuda
