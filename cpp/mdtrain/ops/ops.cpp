#include "mdtrain/ops/ops.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/blas.h"
#include "mdtrain/ops/cpu/kernels.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/cuda/kernels.h"

namespace mdtrain::ops {

namespace {

using detail::same_memory;

void require_usable(const char* op, const Tensor& t) { detail::require_usable_device(op, nullptr, "tensor", t); }

void require_same_device(const char* op, const Tensor& a, const Tensor& b, const char* what_b) {
  require_usable(op, a);
  detail::require_same_memory(op, nullptr, what_b, b, a);
}

void require_same(const char* op, const Tensor& a, const Tensor& b, const char* what_b) {
  MDTRAIN_CHECK(is_floating(a.dtype()), std::invalid_argument, "[", op, "] expected a float tensor, got ",
                name_of(a.dtype()));
  MDTRAIN_CHECK(a.dtype() == b.dtype(), std::invalid_argument, "[", op, "] dtype mismatch: ", name_of(a.dtype()),
                " vs ", what_b, " ", name_of(b.dtype()));
  require_same_device(op, a, b, what_b);
}

// Below this many multiply-adds a GEMM runs on the calling thread: waking the team would cost
// more than the second core gives.
constexpr std::int64_t kMinSplitMacs = std::int64_t{1} << 20;

// C (m x n, row-major, ldc = n) = alpha op(A) op(B) + beta C on the CPU, split over the intra-op
// team in blocks of whole rows or columns of C, each one single-threaded BLAS call. K is never
// split, so every element is one dot product as in a single call; only the BLAS's choice of kernel
// for a block's size (OpenBLAS has a separate small-matrix path) may round differently. The blocks
// depend only on the shape and the thread count: the same inputs and thread count give the same
// bits on every run. The split takes the dimension whose blocks share the smaller operand: blocks
// of rows each pack their rows of op(A) and all of op(B) (k x n), blocks of columns all of op(A)
// (m x k): so rows when m >= n.
template <class T>
void cpu_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
              const T* b, std::int64_t ldb, T beta, T* c) {
  const auto whole = [&](std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
    // Rows m0.. of op(A): rows of A, or columns of A^T's storage; columns n0.. of op(B) likewise.
    const T* ab = ta ? a + m0 : a + m0 * lda;
    const T* bb = tb ? b + n0 * ldb : b + n0;
    cpu::gemm(ta, tb, static_cast<int>(m1 - m0), static_cast<int>(n1 - n0), static_cast<int>(k), alpha, ab,
              static_cast<int>(lda), bb, static_cast<int>(ldb), beta, c + m0 * n + n0, static_cast<int>(n));
  };
  const bool split_rows = m >= n;
  const std::int64_t extent = split_rows ? m : n;
  const int wanted =
      m * n * k >= kMinSplitMacs ? static_cast<int>(std::min<std::int64_t>(cpu_thread_count(), extent / 8)) : 1;
  cpu::IntraOpTeam team(wanted > 1);
  if (!team.get()) return whole(0, m, 0, n);
  const int parts = std::min(wanted, team.get()->size());
  team.get()->run([&](int p) {
    if (p >= parts) return;
    // Blocks rounded to 8 (a SIMD width of floats) except the last.
    const std::int64_t step = (extent / parts + 7) / 8 * 8;
    const std::int64_t lo = std::min(extent, step * p), hi = p == parts - 1 ? extent : std::min(extent, lo + step);
    if (lo >= hi) return;
    if (split_rows) whole(lo, hi, 0, n);
    else whole(0, m, lo, hi);
  });
}

// (rows, cols) view of a tensor whose last axis is the feature axis.
std::int64_t cols_of(const Tensor& t) { return t.ndim() == 0 ? 1 : t.shape().back(); }

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  require_same("gemm", a, b, "b");
  require_same("gemm", a, c, "c");
  MDTRAIN_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, std::invalid_argument,
                "[gemm] expected 2-D tensors, got ", to_string(a.shape()), ", ", to_string(b.shape()), ", ",
                to_string(c.shape()));
  std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  std::int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  MDTRAIN_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n, std::invalid_argument, "[gemm] shapes do not match: a",
                to_string(a.shape()), ta ? "^T" : "", " @ b", to_string(b.shape()), tb ? "^T" : "", " -> c",
                to_string(c.shape()));
  MDTRAIN_CHECK(m < INT_MAX && n < INT_MAX && k < INT_MAX, std::invalid_argument,
                "[gemm] dimensions exceed the BLAS's 32-bit range");
  if (m == 0 || n == 0) return;
  if (!c.device().is_cpu()) return cuda::gemm(a, ta, b, tb, c, alpha, beta);
  if (k == 0) {  // an empty sum: c = beta * c, which BLAS implementations disagree on
    if (beta == 0.0) std::memset(c.raw(), 0, c.nbytes());
    else
      dispatch_floating(c.dtype(), "ops", [&](auto tag) {
        using T = decltype(tag);
        T* p = c.data<T>();
        for (std::int64_t i = 0; i < c.numel(); ++i) p[i] *= static_cast<T>(beta);
      });
    return;
  }
  dispatch_floating(a.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu_gemm<T>(ta, tb, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
                static_cast<T>(beta), c.data<T>());
  });
}

void bias_activation(const Tensor& z, const Tensor& bias, Activation act, Tensor& y) {
  require_same("bias_activation", z, y, "y");
  MDTRAIN_CHECK(z.numel() == y.numel(), std::invalid_argument, "[bias_activation] z ", to_string(z.shape()), " and y ",
                to_string(y.shape()), " differ in size");
  std::int64_t cols = cols_of(z), rows = cols ? z.numel() / cols : 0;
  if (bias.defined()) {
    require_same("bias_activation", z, bias, "bias");
    MDTRAIN_CHECK(bias.numel() == cols, std::invalid_argument, "[bias_activation] bias ", to_string(bias.shape()),
                  " does not match the last axis of ", to_string(z.shape()));
  }
  if (!z.device().is_cpu()) return cuda::bias_activation(z, bias, act, y);
  dispatch_floating(z.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::bias_activation<T>(z.data<T>(), bias.defined() ? bias.data<T>() : nullptr, rows, cols, act, y.data<T>());
  });
}

void activation_backward(Activation act, const Tensor& z, const Tensor& y, const Tensor& dy, Tensor& dz) {
  require_same("activation_backward", y, dy, "dy");
  require_same("activation_backward", y, dz, "dz");
  MDTRAIN_CHECK(y.numel() == dy.numel() && y.numel() == dz.numel(), std::invalid_argument,
                "[activation_backward] sizes differ: y ", to_string(y.shape()), ", dy ", to_string(dy.shape()), ", dz ",
                to_string(dz.shape()));
  if (needs_forward_input(act))
    MDTRAIN_CHECK(z.defined() && z.numel() == y.numel(), std::invalid_argument, "[activation_backward] ", name_of(act),
                  " needs the forward input");
  if (z.defined()) require_same_device("activation_backward", y, z, "z");
  if (!y.device().is_cpu()) return cuda::activation_backward(act, z, y, dy, dz);
  std::int64_t cols = cols_of(y), rows = cols ? y.numel() / cols : 0;
  dispatch_floating(y.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::activation_backward<T>(act, z.defined() ? z.data<T>() : nullptr, y.data<T>(), dy.data<T>(), rows, cols,
                                dz.data<T>());
  });
}

void sum_rows(const Tensor& x, Tensor& out, double beta) {
  require_same("sum_rows", x, out, "out");
  std::int64_t cols = cols_of(x), rows = cols ? x.numel() / cols : 0;
  MDTRAIN_CHECK(out.numel() == cols, std::invalid_argument, "[sum_rows] out ", to_string(out.shape()),
                " does not match the last axis of ", to_string(x.shape()));
  if (!x.device().is_cpu()) return cuda::sum_rows(x, out, beta);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::sum_rows<T>(x.data<T>(), rows, cols, static_cast<T>(beta), out.data<T>());
  });
}

void dropout(const Tensor& x, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
             Tensor& mask, Tensor& y) {
  require_same("dropout", x, y, "y");
  require_same("dropout", x, mask, "mask");
  MDTRAIN_CHECK(rate >= 0.0 && rate < 1.0, std::invalid_argument, "[dropout] rate must be in [0, 1), got ", rate);
  MDTRAIN_CHECK(x.numel() == y.numel() && x.numel() == mask.numel(), std::invalid_argument, "[dropout] sizes differ");
  if (!x.device().is_cpu()) return cuda::dropout(x, rate, seed, stream, first_element, mask, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    // The mask is a function of each element's position alone: ranges on the intra-op threads give
    // the same bits. From 2^15 elements the split pays (a Philox block per four elements is not a
    // few cycles per element).
    cpu::run_in_ranges(x.numel(), x.numel() >= (std::int64_t{1} << 15), [&](std::int64_t lo, std::int64_t hi) {
      cpu::dropout<T>(x.data<T>() + lo, hi - lo, rate, seed, stream, first_element + static_cast<std::uint64_t>(lo),
                      mask.data<T>() + lo, y.data<T>() + lo);
    });
  });
}

void multiply(const Tensor& a, const Tensor& b, Tensor& y) {
  require_same("multiply", a, b, "b");
  require_same("multiply", a, y, "y");
  MDTRAIN_CHECK(a.numel() == b.numel() && a.numel() == y.numel(), std::invalid_argument,
                "[multiply] sizes differ: ", to_string(a.shape()), ", ", to_string(b.shape()));
  if (!a.device().is_cpu()) return cuda::multiply(a, b, y);
  dispatch_floating(a.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::multiply<T>(a.data<T>(), b.data<T>(), a.numel(), y.data<T>());
  });
}

void gather_rows(const Tensor& x, const std::int64_t* indices, std::int64_t count, Tensor& out) {
  // Host to host, host to GPU (the input batch, through pinned staging) or within one GPU.
  require_usable("gather_rows", x);
  require_usable("gather_rows", out);
  MDTRAIN_CHECK(same_memory(x.device(), out.device()) || x.device().is_cpu(), std::invalid_argument,
                "[gather_rows] cannot gather rows of a tensor on ", x.device().to_string(), " into one on ",
                out.device().to_string());
  MDTRAIN_CHECK(x.dtype() == out.dtype() && x.ndim() >= 1 && out.ndim() >= 1 && out.dim(0) == count &&
                    x.row_size() == out.row_size(),
                std::invalid_argument, "[gather_rows] cannot gather ", count, " rows of ", to_string(x.shape()),
                " into ", to_string(out.shape()));
  const std::int64_t n = x.dim(0);
  if (!out.device().is_cpu()) {
    for (std::int64_t i = 0; i < count; ++i)
      MDTRAIN_CHECK(indices[i] >= 0 && indices[i] < n, std::out_of_range, "[gather_rows] row ", indices[i],
                    " out of range for ", n, " rows");
    return cuda::gather_rows(x, indices, count, out);
  }
  const std::size_t row_bytes = static_cast<std::size_t>(x.row_size()) * size_of(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  for (std::int64_t i = 0; i < count; ++i)
    MDTRAIN_CHECK(indices[i] >= 0 && indices[i] < n, std::out_of_range, "[gather_rows] row ", indices[i],
                  " out of range for ", n, " rows");
  // Shuffled rows of a data set larger than the caches come from DRAM one miss after another:
  // two threads copying keep twice the misses in flight. Worth a team wake-up from ~64 KiB.
  const std::int64_t bytes = count * static_cast<std::int64_t>(row_bytes);
  cpu::run_in_ranges(count, bytes >= (std::int64_t{1} << 16), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) std::memcpy(dst + i * row_bytes, src + indices[i] * row_bytes, row_bytes);
  });
}

bool all_finite(const Tensor& x) {
  require_usable("all_finite", x);
  if (!is_floating(x.dtype())) return true;
  if (!x.device().is_cpu()) return cuda::all_finite(x);
  bool ok = true;
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    ok = cpu::all_finite<T>(x.data<T>(), x.numel());
  });
  return ok;
}

double sum_of_squares(const Tensor& x) {
  require_usable("sum_of_squares", x);
  if (!x.device().is_cpu()) return cuda::sum_of_squares(x);
  return dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    return cpu::sum_of_squares<T>(x.data<T>(), x.numel());
  });
}

void set_cpu_threads(int threads) {
  MDTRAIN_CHECK(threads >= 1, std::invalid_argument, "[ops] thread count must be >= 1, got ", threads);
  cpu::set_intra_op_threads(threads);
}

int cpu_thread_count() { return cpu::intra_op_threads(); }

}  // namespace mdtrain::ops
