#pragma once
// The CPU bodies of ops::resize_bilinear (ops/resize_bilinear.h). Arguments are already validated.
#include "mdtrain/ops/resize_bilinear_math.h"

namespace mdtrain::cpu {

// y[k] = math::resize_bilinear_element for every output element, in order.
template <class T>
void resize_bilinear(const T* x, T* y, const math::ResizeDims<T>& d);
// dx[k] = math::resize_bilinear_backward_element for every input element, in order.
template <class T>
void resize_bilinear_backward(const T* dy, T* dx, const math::ResizeDims<T>& d);

}  // namespace mdtrain::cpu
