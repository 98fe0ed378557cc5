#include "mdtrain/ops/cpu/strided_view_kernels.h"

namespace mdtrain::cpu {

template <class T>
void strided_view(const T* src, T* dst, const math::ViewArrays& v) {
  for (std::int64_t i = 0; i < v.count; ++i) math::view_element(src, dst, i, v);
}

template void strided_view<float>(const float*, float*, const math::ViewArrays&);
template void strided_view<double>(const double*, double*, const math::ViewArrays&);

}  // namespace mdtrain::cpu
