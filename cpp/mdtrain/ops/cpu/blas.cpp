// MDTRAIN_BLAS_PREFIX is set by CMake: "scipy_" for the scipy-openblas32 wheel (whose symbols are
// prefixed so they never clash with another OpenBLAS in the process), empty for a system OpenBLAS.
#include "mdtrain/ops/cpu/blas.h"

#include <cblas.h>

#define MDTRAIN_PASTE2(a, b) a##b
#define MDTRAIN_PASTE(a, b) MDTRAIN_PASTE2(a, b)
#define MDTRAIN_BLAS(name) MDTRAIN_PASTE(MDTRAIN_BLAS_PREFIX, name)

namespace mdtrain::cpu {

namespace {
// mdtrain splits work over its own threads (core/threading/thread_team.h); the BLAS runs single-threaded
// unless a benchmark asks otherwise (set_blas_threads).
void single_threaded_once() {
  static const bool done = [] {
    MDTRAIN_BLAS(openblas_set_num_threads)(1);
    return true;
  }();
  (void)done;
}
}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  single_threaded_once();
  MDTRAIN_BLAS(cblas_sgemm)
  (CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
   c, ldc);
}

void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  single_threaded_once();
  MDTRAIN_BLAS(cblas_dgemm)
  (CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
   c, ldc);
}

void set_blas_threads(int threads) {
  single_threaded_once();
  MDTRAIN_BLAS(openblas_set_num_threads)(threads);
}

int blas_max_threads() { return MDTRAIN_BLAS(openblas_get_num_threads)(); }

}  // namespace mdtrain::cpu
