#pragma once
// The CPU body of ops::strided_view (ops/strided_view.h). Arguments are already validated.
#include "mdtrain/ops/strided_view_math.h"

namespace mdtrain::cpu {

// math::view_element for every i in [0, v.count), in order, on the calling thread.
template <class T>
void strided_view(const T* src, T* dst, const math::ViewArrays& v);

}  // namespace mdtrain::cpu
