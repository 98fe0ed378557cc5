#pragma once
// The one door to the CPU BLAS (OpenBLAS). Row-major throughout.

namespace mdtrain::cpu {

void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);

// OpenBLAS threads for every BLAS call in the process: 1 (mdtrain's ops split their work over
// its own threads, core/threading/thread_team.h); benchmarks may measure OpenBLAS's own threading with
// another value and must set 1 back. (A per-thread setting, openblas_set_num_threads_local, is
// not exported by the scipy-openblas wheels.)
void set_blas_threads(int threads);
int blas_max_threads();

}  // namespace mdtrain::cpu
