#pragma once
// The CPU bodies of ops/parametric_activation.h and ops/over_axes.h: loops over the shared math
// (ops/elementwise_math.h, ops/over_axes_math.h). Arguments are already validated.
#include <cstdint>

#include "mdtrain/ops/over_axes_math.h"
#include "mdtrain/ops/parametric_activation.h"

namespace mdtrain::cpu {

template <class T>
void parametric_activation(const T* x, std::int64_t n, const ops::ParametricActivation& a, T* y);
template <class T>
void parametric_activation_backward(const ops::ParametricActivation& a, const T* x, const T* dy, std::int64_t n, T* dx);
// plan: x's rows along the batch and the shared axes (one row per alpha element).
template <class T>
void prelu(const T* x, const T* alpha, std::int64_t n, const math::AxesPlan& plan, T* y);
template <class T>
void prelu_backward(const T* x, const T* alpha, const T* dy, std::int64_t n, const math::AxesPlan& plan, T* dx,
                    T* dalpha);

template <class T>
void softmax_over_axes(const T* x, const math::AxesPlan& plan, T* y);
template <class T>
void softmax_over_axes_backward(const T* y, const T* dy, const math::AxesPlan& plan, T* dx);
template <class T>
void unit_normalize(const T* x, const math::AxesPlan& plan, T* y);
template <class T>
void unit_normalize_backward(const T* x, const T* dy, const math::AxesPlan& plan, T* dx);

}  // namespace mdtrain::cpu
