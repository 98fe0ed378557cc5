// GEMM on a GPU through cuBLAS. cuBLAS is column-major; a row-major matrix is the column-major
// view of its transpose, so c = op(a) @ op(b) (row-major) is computed as
// c^T = op(b)^T @ op(a)^T (column-major) by passing b before a, with each one's own transpose flag.
#include <cublas_v2.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/cuda/kernels.h"

namespace mdtrain::cuda {

namespace {

// One handle per GPU, created on first use; the mutex keeps two host threads from using a handle
// at once (cuBLAS handles are not thread-safe), which costs nothing when each replica thread
// drives its own GPU.
struct Handle {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
};

Handle& handle_of(int device) {
  require_device(device);
  static std::vector<Handle>* all = new std::vector<Handle>(static_cast<std::size_t>(device_count()));
  Handle& h = (*all)[static_cast<std::size_t>(device)];
  return h;
}

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  const int device = c.device().index;
  const int m = static_cast<int>(c.dim(0)), n = static_cast<int>(c.dim(1));
  const int k = static_cast<int>(ta ? a.dim(0) : a.dim(1));
  if (m == 0 || n == 0) return;
  // Leading dimensions of the row-major buffers; cuBLAS wants at least 1 even for empty k.
  const int lda = std::max<int>(1, static_cast<int>(a.dim(1)));
  const int ldb = std::max<int>(1, static_cast<int>(b.dim(1)));
  const int ldc = n;
  DeviceGuard guard(device);
  Handle& h = handle_of(device);
  std::lock_guard<std::mutex> lock(h.mutex);
  if (!h.handle) MDTRAIN_CUBLAS_CHECK(cublasCreate(&h.handle));
  MDTRAIN_CUBLAS_CHECK(cublasSetStream(h.handle, compute_stream(device).handle()));
  // With k == 0 cuBLAS computes c = beta * c (and ignores c when beta == 0), as ops::gemm requires.
  if (c.dtype() == DType::Float32) {
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    MDTRAIN_CUBLAS_CHECK(cublasSgemm(h.handle, op(tb), op(ta), n, m, k, &al, b.data<float>(), ldb, a.data<float>(), lda,
                                     &be, c.data<float>(), ldc));
  } else {
    MDTRAIN_CUBLAS_CHECK(cublasDgemm(h.handle, op(tb), op(ta), n, m, k, &alpha, b.data<double>(), ldb, a.data<double>(),
                                     lda, &beta, c.data<double>(), ldc));
  }
}

}  // namespace mdtrain::cuda
