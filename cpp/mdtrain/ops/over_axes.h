#pragma once
// Ops over a group of a tensor's axes (ops/over_axes_math.h is their shared math): softmax over
// any set of axes (keras.layers.Softmax) and Keras 3's L2 normalization (UnitNormalization), with
// their backward passes; host or one GPU. `axes` index the tensor's shape, the batch axis being 0.
#include <vector>

#include "mdtrain/core/shape.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/over_axes_math.h"

namespace mdtrain::ops {

// The rows of a tensor of `shape` along `axes` (each in [0, rank), distinct, in any order).
// Throws std::invalid_argument("[ops] <op>: ...") naming the axes and the shape otherwise, or when
// the merged groups exceed math::kMaxViewRank.
math::AxesPlan axes_plan(const char* op, const Shape& shape, const std::vector<int>& axes);

// y = softmax of x along `axes`, each row the same operations as math::softmax_row.
void softmax_over_axes(const Tensor& x, const std::vector<int>& axes, Tensor& y);
// dx = y * (dy - <dy, y>) along `axes`, for y = softmax_over_axes(x).
void softmax_over_axes_backward(const Tensor& y, const Tensor& dy, const std::vector<int>& axes, Tensor& dx);
// y = x * min(1 / sqrt(sum x^2), 1e12) along `axes` (keras.ops.normalize with epsilon 1e-12).
void unit_normalize(const Tensor& x, const std::vector<int>& axes, Tensor& y);
// dx of unit_normalize at x given dy (the scale is recomputed from x).
void unit_normalize_backward(const Tensor& x, const Tensor& dy, const std::vector<int>& axes, Tensor& dx);

}  // namespace mdtrain::ops
