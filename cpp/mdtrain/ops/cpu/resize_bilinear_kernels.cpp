#include "mdtrain/ops/cpu/resize_bilinear_kernels.h"

namespace mdtrain::cpu {

template <class T>
void resize_bilinear(const T* x, T* y, const math::ResizeDims<T>& d) {
  const std::int64_t n = d.batch * d.out_h * d.out_w * d.c;
  for (std::int64_t k = 0; k < n; ++k) y[k] = math::resize_bilinear_element(x, k, d);
}

template <class T>
void resize_bilinear_backward(const T* dy, T* dx, const math::ResizeDims<T>& d) {
  const std::int64_t n = d.batch * d.h * d.w * d.c;
  for (std::int64_t k = 0; k < n; ++k) dx[k] = math::resize_bilinear_backward_element(dy, k, d);
}

template void resize_bilinear<float>(const float*, float*, const math::ResizeDims<float>&);
template void resize_bilinear<double>(const double*, double*, const math::ResizeDims<double>&);
template void resize_bilinear_backward<float>(const float*, float*, const math::ResizeDims<float>&);
template void resize_bilinear_backward<double>(const double*, double*, const math::ResizeDims<double>&);

}  // namespace mdtrain::cpu
