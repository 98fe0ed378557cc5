// CUDA kernels behind ops/loss_ops.h: one thread per row runs the per-row functions of
// ops/loss_math.h that the CPU loops (ops/cpu/loss_kernels.cpp) run, writes the row's loss (or
// match count), and the host adds the rows in order in double, as the CPU does. Arguments were
// validated by loss_ops.cpp (labels included, on the host).
#include <cstdint>
#include <memory>
#include <vector>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/loss_kernels.h"
#include "mdtrain/ops/loss_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class L>
__device__ inline bool is_ignored(L v, bool has_ignore, std::int64_t ignore) {
  return has_ignore && static_cast<double>(v) == static_cast<double>(ignore);
}

template <class T, class L>
__global__ void sparse_xent_kernel(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols,
                                   bool from_logits, bool has_ignore, std::int64_t ignore, T scale,
                                   math::RowWeights weights, T* g, double* row_loss) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const T* x = pred + i * cols;
    T* gi = g ? g + i * cols : nullptr;
    if (is_ignored(labels[i], has_ignore, ignore)) {
      if (gi)
        for (std::int64_t j = 0; j < cols; ++j) gi[j] = T(0);
      row_loss[i] = 0.0;
      continue;
    }
    const auto label = static_cast<std::int64_t>(labels[i]);
    const T w = math::row_weight<T>(weights, i);
    row_loss[i] = w * (from_logits ? math::sparse_xent_logits_row(x, cols, label, scale * w, gi)
                                   : math::sparse_xent_probs_row(x, cols, label, scale * w, gi));
  }
}

template <class T, class L>
__global__ void dense_xent_kernel(const L* target, const T* pred, std::int64_t rows, std::int64_t cols,
                                  bool from_logits, T smoothing, T scale, math::RowWeights weights, T* g,
                                  double* row_loss) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const T* x = pred + i * cols;
    const L* t = target + i * cols;
    T* gi = g ? g + i * cols : nullptr;
    const T w = math::row_weight<T>(weights, i);
    row_loss[i] = w * (from_logits ? math::xent_logits_row(x, t, cols, smoothing, scale * w, gi)
                                   : math::xent_probs_row(x, t, cols, smoothing, scale * w, gi));
  }
}

// The row mean of binary crossentropy, as cpu::binary_xent: row * (1 / cols).
template <class T, class L>
__global__ void binary_xent_kernel(const L* target, const T* pred, std::int64_t rows, std::int64_t cols,
                                   bool from_logits, T smoothing, T scale, math::RowWeights weights, T* g,
                                   double* row_loss) {
  const T inv_cols = T(1) / T(cols), gscale = scale * inv_cols;
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const T* x = pred + i * cols;
    const L* t = target + i * cols;
    const T w = math::row_weight<T>(weights, i), gw = gscale * w;
    T row = T(0), d = T(0);
    for (std::int64_t j = 0; j < cols; ++j) {
      const T tj = math::smooth_label(static_cast<T>(t[j]), smoothing, T(0.5));
      row += from_logits ? math::bce_logits(x[j], tj, g ? &d : nullptr) : math::bce_probs(x[j], tj, g ? &d : nullptr);
      if (g) g[i * cols + j] = gw * d;
    }
    row_loss[i] = w * (row * inv_cols);
  }
}

// Mean squared (kAbsolute = false) or absolute error of each row, as cpu::elementwise_row_mean.
template <class T, class L, bool kAbsolute>
__global__ void regression_loss_kernel(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                                       math::RowWeights weights, T* g, double* row_loss) {
  const T inv_cols = T(1) / T(cols), gscale = scale * inv_cols;
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const T w = math::row_weight<T>(weights, i), gw = gscale * w;
    T row = T(0), d = T(0);
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t k = i * cols + j;
      const T t = static_cast<T>(target[k]);
      row += kAbsolute ? math::absolute_error(pred[k], t, g ? &d : nullptr)
                       : math::squared_error(pred[k], t, g ? &d : nullptr);
      if (g) g[k] = gw * d;
    }
    row_loss[i] = w * (row * inv_cols);
  }
}

template <class T, class L>
__global__ void sparse_argmax_matches_kernel(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols,
                                             double* row_match) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride())
    row_match[i] = static_cast<double>(labels[i]) == static_cast<double>(math::argmax_first(pred + i * cols, cols));
}

template <class T, class L>
__global__ void argmax_matches_kernel(const L* target, const T* pred, std::int64_t rows, std::int64_t cols,
                                      double* row_match) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride())
    row_match[i] = math::argmax_first(target + i * cols, cols) == math::argmax_first(pred + i * cols, cols);
}

template <class T, class L>
__global__ void top_k_matches_kernel(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols,
                                     std::int64_t k, double* row_match) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const std::int64_t label = math::class_id_or_none(static_cast<double>(labels[i]));
    row_match[i] = math::in_top_k(pred + i * cols, cols, label, k);
  }
}

template <class T, class L>
__global__ void binary_matches_kernel(const L* target, const T* pred, std::int64_t n, T threshold, double* match) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    match[i] = math::binary_match(target[i], pred[i], threshold);
}

// Runs launch(T tag, L tag, double* per_item, stream) over `items` outputs and returns their sum in
// item order (the CPU's order).
template <class Launch>
double sum_per_item(const Tensor& y, const Tensor& pred, std::int64_t items, const char* kernel, Launch&& launch) {
  if (items == 0) return 0.0;
  OnDevice on(pred);
  std::shared_ptr<void> per_item = allocate(pred.device(), static_cast<std::size_t>(items) * sizeof(double));
  dispatch_floating(pred.dtype(), "cuda", [&](auto ttag) {
    dispatch_any(y.dtype(), "cuda",
                 [&](auto ltag) { launch(ttag, ltag, static_cast<double*>(per_item.get()), on.stream); });
  });
  MDTRAIN_CUDA_CHECK_LAUNCH(kernel);
  std::vector<double> host(static_cast<std::size_t>(items));
  detail::copy_to_host(host.data(), per_item.get(), host.size() * sizeof(double), on.stream);
  double sum = 0.0;
  for (double v : host) sum += v;
  return sum;
}

template <class T>
T* grad_ptr(Tensor* dpred) {
  return dpred ? dpred->data<T>() : nullptr;
}

}  // namespace

double sparse_categorical_crossentropy(const Tensor& labels, const Tensor& pred, bool from_logits, bool has_ignore,
                                       std::int64_t ignore_class, double grad_scale, math::RowWeights weights,
                                       Tensor* dpred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(labels, pred, rows, "sparse_xent_kernel", [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
    using T = decltype(ttag);
    using L = decltype(ltag);
    sparse_xent_kernel<T, L><<<blocks_for(rows), kThreads, 0, s>>>(labels.data<L>(), pred.data<T>(), rows, cols,
                                                                   from_logits, has_ignore, ignore_class,
                                                                   static_cast<T>(grad_scale), weights,
                                                                   grad_ptr<T>(dpred), out);
  });
}

double categorical_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                                double grad_scale, math::RowWeights weights, Tensor* dpred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(target, pred, rows, "dense_xent_kernel", [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
    using T = decltype(ttag);
    using L = decltype(ltag);
    dense_xent_kernel<T, L><<<blocks_for(rows), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), rows, cols,
                                                                  from_logits, static_cast<T>(label_smoothing),
                                                                  static_cast<T>(grad_scale), weights,
                                                                  grad_ptr<T>(dpred), out);
  });
}

double binary_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                           double grad_scale, math::RowWeights weights, Tensor* dpred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(target, pred, rows, "binary_xent_kernel", [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
    using T = decltype(ttag);
    using L = decltype(ltag);
    binary_xent_kernel<T, L><<<blocks_for(rows), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), rows, cols,
                                                                   from_logits, static_cast<T>(label_smoothing),
                                                                   static_cast<T>(grad_scale), weights,
                                                                   grad_ptr<T>(dpred), out);
  });
}

double mean_squared_error(const Tensor& target, const Tensor& pred, double grad_scale, math::RowWeights weights,
                          Tensor* dpred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(target, pred, rows, "regression_loss_kernel",
                      [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
                        using T = decltype(ttag);
                        using L = decltype(ltag);
                        regression_loss_kernel<T, L, false>
                            <<<blocks_for(rows), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), rows, cols,
                                                                   static_cast<T>(grad_scale), weights,
                                                                   grad_ptr<T>(dpred), out);
                      });
}

double mean_absolute_error(const Tensor& target, const Tensor& pred, double grad_scale, math::RowWeights weights,
                           Tensor* dpred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(target, pred, rows, "regression_loss_kernel",
                      [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
                        using T = decltype(ttag);
                        using L = decltype(ltag);
                        regression_loss_kernel<T, L, true>
                            <<<blocks_for(rows), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), rows, cols,
                                                                   static_cast<T>(grad_scale), weights,
                                                                   grad_ptr<T>(dpred), out);
                      });
}

double sparse_categorical_matches(const Tensor& labels, const Tensor& pred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(labels, pred, rows, "sparse_argmax_matches_kernel",
                      [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
                        using T = decltype(ttag);
                        using L = decltype(ltag);
                        sparse_argmax_matches_kernel<T, L>
                            <<<blocks_for(rows), kThreads, 0, s>>>(labels.data<L>(), pred.data<T>(), rows, cols, out);
                      });
}

double categorical_matches(const Tensor& target, const Tensor& pred) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(target, pred, rows, "argmax_matches_kernel",
                      [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
                        using T = decltype(ttag);
                        using L = decltype(ltag);
                        argmax_matches_kernel<T, L>
                            <<<blocks_for(rows), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), rows, cols, out);
                      });
}

double sparse_top_k_matches(const Tensor& labels, const Tensor& pred, std::int64_t k) {
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  return sum_per_item(labels, pred, rows, "top_k_matches_kernel",
                      [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
                        using T = decltype(ttag);
                        using L = decltype(ltag);
                        top_k_matches_kernel<T, L><<<blocks_for(rows), kThreads, 0, s>>>(labels.data<L>(),
                                                                                         pred.data<T>(), rows, cols, k,
                                                                                         out);
                      });
}

double binary_matches(const Tensor& target, const Tensor& pred, double threshold) {
  const std::int64_t n = pred.numel();
  return sum_per_item(target, pred, n, "binary_matches_kernel", [&](auto ttag, auto ltag, double* out, cudaStream_t s) {
    using T = decltype(ttag);
    using L = decltype(ltag);
    binary_matches_kernel<T, L>
        <<<blocks_for(n), kThreads, 0, s>>>(target.data<L>(), pred.data<T>(), n, static_cast<T>(threshold), out);
  });
}

}  // namespace mdtrain::cuda
