#pragma once
// Keras's activations with arguments, element-wise on the host or one GPU (the per-element math
// is in ops/elementwise_math.h): relu(x, negative_slope, max_value, threshold) for the ReLU and
// LeakyReLU layers, elu(x, alpha) for ELU, and PReLU's learned slopes.
#include <cmath>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/elementwise_math.h"

namespace mdtrain::ops {

struct ParametricActivation {
  enum class Kind { ReLU, ELU };
  Kind kind = Kind::ReLU;
  double negative_slope = 0.0;  // ReLU
  double max_value = INFINITY;  // ReLU; +inf: none
  double threshold = 0.0;       // ReLU
  double alpha = 1.0;           // ELU
};

// The element type's form of a ReLU's arguments, with the derivative at its kinks that TF takes
// on the path Keras's relu picks for them (math::ReluArgs).
template <class T>
math::ReluArgs<T> relu_args(const ParametricActivation& a) {
  math::ReluArgs<T> r;
  r.negative_slope = static_cast<T>(a.negative_slope);
  r.threshold = static_cast<T>(a.threshold);
  r.max_value = static_cast<T>(a.max_value);
  const bool leaky_path = a.negative_slope != 0.0 && std::isinf(a.max_value) && a.threshold == 0.0;
  r.slope_at_threshold = leaky_path ? r.negative_slope : T(0);
  r.passes_at_max = !(a.max_value == 6.0 && a.threshold == 0.0);
  return r;
}

// y = the activation of x (same shape, one floating dtype, one memory; y may be x).
// std::invalid_argument("[ops] parametric_activation: ...") naming the tensors otherwise.
void parametric_activation(const Tensor& x, const ParametricActivation& a, Tensor& y);
// dx = dy * the activation's derivative at x.
void parametric_activation_backward(const ParametricActivation& a, const Tensor& x, const Tensor& dy, Tensor& dx);

// y = x > 0 ? x : alpha * x, x (batch, d1..dk) and alpha (d1..dk) with 1 on the shared axes
// (Keras's PReLU layout) broadcast over the batch and the shared axes.
void prelu(const Tensor& x, const Tensor& alpha, Tensor& y);
// dalpha = the sum over the batch and the shared axes of dy * min(x, 0) (in double, in order);
// dx (when not null) = dy * the derivative in x.
void prelu_backward(const Tensor& x, const Tensor& alpha, const Tensor& dy, Tensor* dx, Tensor& dalpha);

}  // namespace mdtrain::ops
