#pragma once
// Functions of a group of a tensor's axes, shared by their CPU loops and CUDA kernels
// (ops/over_axes.h): softmax over any axes (keras.layers.Softmax), Keras 3's L2 normalization
// (keras.layers.UnitNormalization) and PReLU's alpha gradient (a sum over the batch and the shared
// axes). The tensor's axes split into kept ones, which number the rows, and reduced ones, along
// which each row runs; the reduced axes need not be adjacent (Softmax(axis=(1, 3))).
#include <cmath>
#include <cstdint>

#include "mdtrain/core/hd.h"
#include "mdtrain/ops/elementwise_math.h"
#include "mdtrain/ops/strided_view_math.h"

namespace mdtrain::math {

// A row-major tensor seen as rows (ops::axes_plan builds it): adjacent axes of one kind are merged
// and axes of extent 1 dropped, so a plan has at most kMaxViewRank groups of each kind. Fixed
// arrays, so that it travels to a CUDA kernel by value.
struct AxesPlan {
  int kept_rank = 0;
  std::int64_t kept_extent[kMaxViewRank] = {};
  std::int64_t kept_stride[kMaxViewRank] = {};  // element strides in the tensor
  int reduced_rank = 0;
  std::int64_t reduced_extent[kMaxViewRank] = {};
  std::int64_t reduced_stride[kMaxViewRank] = {};
  std::int64_t rows = 1;        // product of kept_extent
  std::int64_t row_length = 1;  // product of reduced_extent
  // The whole tensor as merged groups, for row_of: row_stride is 0 on the reduced groups and the
  // row number's stride on the kept ones.
  int rank = 0;
  std::int64_t extent[2 * kMaxViewRank] = {};
  std::int64_t row_stride[2 * kMaxViewRank] = {};
};

// The offset of row r's first element, and of its j-th element from there (row-major over the
// reduced axes), and the row that the tensor's element i belongs to.
MDTRAIN_HD std::int64_t row_start(const AxesPlan& p, std::int64_t r) {
  return view_offset(r, p.kept_rank, p.kept_extent, p.kept_stride);
}
MDTRAIN_HD std::int64_t row_step(const AxesPlan& p, std::int64_t j) {
  return view_offset(j, p.reduced_rank, p.reduced_extent, p.reduced_stride);
}
MDTRAIN_HD std::int64_t row_of(const AxesPlan& p, std::int64_t i) {
  return view_offset(i, p.rank, p.extent, p.row_stride);
}

// Softmax of row r: exp(v - max) / sum, the operations of softmax_row (ops/elementwise_math.h) in
// its order (Softmax over the last axis alone runs softmax_row itself).
template <class T>
MDTRAIN_HD void softmax_over_row(const T* x, T* y, const AxesPlan& p, std::int64_t r) {
  const std::int64_t base = row_start(p, r);
  T m = T(-INFINITY);
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const T v = x[base + row_step(p, j)];
    m = m < v ? v : m;
  }
  T s = T(0);
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    y[o] = std::exp(x[o] - m);
    s += y[o];
  }
  const T inv = T(1) / s;
  for (std::int64_t j = 0; j < p.row_length; ++j) y[base + row_step(p, j)] *= inv;
}

// dx = y * (dy - <dy, y>) along row r.
template <class T>
MDTRAIN_HD void softmax_over_backward_row(const T* y, const T* dy, T* dx, const AxesPlan& p, std::int64_t r) {
  const std::int64_t base = row_start(p, r);
  T dot = T(0);
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    dot += dy[o] * y[o];
  }
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    dx[o] = y[o] * (dy[o] - dot);
  }
}

// keras.ops.normalize(x, axis, order=2, epsilon=1e-12) as Keras 3 computes it: the row times
// min(1 / sqrt(sum x^2), 1 / epsilon) (a row of zeros stays zeros).
constexpr double kUnitNormEpsilon = 1e-12;

template <class T>
MDTRAIN_HD T unit_norm_scale(T sum_of_squares) {
  const T inv = T(1) / std::sqrt(sum_of_squares);
  const T cap = T(1.0 / kUnitNormEpsilon);
  return inv <= cap ? inv : cap;
}

template <class T>
MDTRAIN_HD T row_sum_of_squares(const T* x, const AxesPlan& p, std::int64_t base) {
  T s = T(0);
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const T v = x[base + row_step(p, j)];
    s += v * v;
  }
  return s;
}

template <class T>
MDTRAIN_HD void unit_normalize_row(const T* x, T* y, const AxesPlan& p, std::int64_t r) {
  const std::int64_t base = row_start(p, r);
  const T scale = unit_norm_scale(row_sum_of_squares(x, p, base));
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    y[o] = x[o] * scale;
  }
}

// The row's gradient from x (the scale is recomputed): with s = 1 / |x|, dx = s (dy - y <dy, y>)
// for y = s x; where the cap holds (|x| < epsilon) the scale is a constant and dx = dy / epsilon,
// as TF's minimum passes the gradient to the cap there.
template <class T>
MDTRAIN_HD void unit_normalize_backward_row(const T* x, const T* dy, T* dx, const AxesPlan& p, std::int64_t r) {
  const std::int64_t base = row_start(p, r);
  const T sum = row_sum_of_squares(x, p, base);
  const T inv = T(1) / std::sqrt(sum);
  const T cap = T(1.0 / kUnitNormEpsilon);
  if (!(inv <= cap)) {
    for (std::int64_t j = 0; j < p.row_length; ++j) {
      const std::int64_t o = base + row_step(p, j);
      dx[o] = dy[o] * cap;
    }
    return;
  }
  T dot = T(0);
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    dot += dy[o] * (x[o] * inv);
  }
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    dx[o] = inv * (dy[o] - x[o] * inv * dot);
  }
}

// PReLU's gradient for its alpha element r: the sum over row r (the batch and the shared axes of
// x) of dy * min(x, 0), added in double in row order (the same sum on the CPU and a GPU).
template <class T>
MDTRAIN_HD T prelu_alpha_grad_row(const T* x, const T* dy, const AxesPlan& p, std::int64_t r) {
  const std::int64_t base = row_start(p, r);
  double s = 0.0;
  for (std::int64_t j = 0; j < p.row_length; ++j) {
    const std::int64_t o = base + row_step(p, j);
    s += static_cast<double>(prelu_alpha_grad_term(dy[o], x[o]));
  }
  return static_cast<T>(s);
}

}  // namespace mdtrain::math
