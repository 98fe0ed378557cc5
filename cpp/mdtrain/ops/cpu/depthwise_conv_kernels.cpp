#include "mdtrain/ops/cpu/depthwise_conv_kernels.h"

#include "mdtrain/ops/depthwise_conv_math.h"

namespace mdtrain::cpu {

template <class T>
void depthwise_conv2d(const T* x, const T* kernel, std::int64_t images, const Window2D& g, std::int64_t dm, T* y) {
  const std::int64_t C = g.channels, in_image = g.in_h * g.in_w * C;
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t m = 0; m < dm; ++m)
            *y++ = math::depthwise_output_at(x + b * in_image, kernel, g, dm, oh, ow, c, m);
}

template <class T>
void depthwise_conv2d_input_grad(const T* dy, const T* kernel, std::int64_t images, const Window2D& g, std::int64_t dm,
                                 T* dx) {
  const std::int64_t C = g.channels, out_image = g.out_h * g.out_w * C * dm;
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t ih = 0; ih < g.in_h; ++ih)
      for (std::int64_t iw = 0; iw < g.in_w; ++iw)
        for (std::int64_t c = 0; c < C; ++c)
          *dx++ = math::depthwise_input_grad_at(dy + b * out_image, kernel, g, dm, ih, iw, c);
}

template <class T>
void depthwise_conv2d_kernel_grad(const T* x, const T* dy, std::int64_t images, const Window2D& g, std::int64_t dm,
                                  T* dkernel) {
  for (std::int64_t kh = 0; kh < g.k_h; ++kh)
    for (std::int64_t kw = 0; kw < g.k_w; ++kw)
      for (std::int64_t c = 0; c < g.channels; ++c)
        for (std::int64_t m = 0; m < dm; ++m)
          *dkernel++ = math::depthwise_kernel_grad_at(x, dy, g, dm, images, kh, kw, c, m);
}

#define MDTRAIN_INSTANTIATE(T)                                                                                       \
  template void depthwise_conv2d<T>(const T*, const T*, std::int64_t, const Window2D&, std::int64_t, T*);            \
  template void depthwise_conv2d_input_grad<T>(const T*, const T*, std::int64_t, const Window2D&, std::int64_t, T*); \
  template void depthwise_conv2d_kernel_grad<T>(const T*, const T*, std::int64_t, const Window2D&, std::int64_t, T*);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::cpu
