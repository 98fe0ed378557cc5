#pragma once
// Per-element math of the depthwise convolution (DepthwiseConv2D, and SeparableConv2D's first
// step) over NHWC images, shared by the CPU loops (ops/cpu/depthwise_conv_kernels.cpp) and the
// CUDA kernels (ops/cuda/depthwise_conv_kernels.cu): each function computes one element of a
// result with the operations in one fixed order, so both backends produce the same bits.
//
// The kernel is Keras's (k_h, k_w, channels, depth_multiplier); input channel c with multiplier
// index m gives output channel c * depth_multiplier + m (tf.nn.depthwise_conv2d's order). The
// geometry is a conv's Window2D on the input (its `channels` the input channels).
#include <cstdint>

#include "mdtrain/ops/conv_math.h"

namespace mdtrain::math {

// y[b, oh, ow, c * dm + m] before the bias: the in-bounds taps of the window, kh then kw
// increasing, each x[b, ih, iw, c] * kernel[kh, kw, c, m]. x points at image b.
template <class T>
MDTRAIN_HD T depthwise_output_at(const T* x, const T* kernel, const Window2D& g, std::int64_t dm, std::int64_t oh,
                                 std::int64_t ow, std::int64_t c, std::int64_t m) {
  const std::int64_t hs = window_start(oh, g.stride_h, g.pad_top), ws = window_start(ow, g.stride_w, g.pad_left);
  std::int64_t h_lo, h_hi, w_lo, w_hi;
  taps_in_bounds(hs, g.k_h, g.dilation_h, g.in_h, h_lo, h_hi);
  taps_in_bounds(ws, g.k_w, g.dilation_w, g.in_w, w_lo, w_hi);
  const std::int64_t C = g.channels;
  T acc = T(0);
  for (std::int64_t kh = h_lo; kh < h_hi; ++kh)
    for (std::int64_t kw = w_lo; kw < w_hi; ++kw) {
      const std::int64_t ih = hs + kh * g.dilation_h, iw = ws + kw * g.dilation_w;
      acc += x[(ih * g.in_w + iw) * C + c] * kernel[((kh * g.k_w + kw) * C + c) * dm + m];
    }
  return acc;
}

// dL/dx[b, ih, iw, c]: over the windows that read the pixel (kh, then kw, decreasing: increasing
// output position, math::window_output_at), the sum over m of dy[b, oh, ow, c * dm + m] *
// kernel[kh, kw, c, m]. dy points at image b.
template <class T>
MDTRAIN_HD T depthwise_input_grad_at(const T* dy, const T* kernel, const Window2D& g, std::int64_t dm, std::int64_t ih,
                                     std::int64_t iw, std::int64_t c) {
  const std::int64_t C = g.channels, out_c = C * dm;
  T acc = T(0);
  for (std::int64_t kh = g.k_h - 1; kh >= 0; --kh) {
    const std::int64_t oh = window_output_at(ih, kh, g.stride_h, g.dilation_h, g.pad_top, g.out_h);
    if (oh < 0) continue;
    for (std::int64_t kw = g.k_w - 1; kw >= 0; --kw) {
      const std::int64_t ow = window_output_at(iw, kw, g.stride_w, g.dilation_w, g.pad_left, g.out_w);
      if (ow < 0) continue;
      const T* d = dy + (oh * g.out_w + ow) * out_c + c * dm;
      const T* k = kernel + ((kh * g.k_w + kw) * C + c) * dm;
      for (std::int64_t m = 0; m < dm; ++m) acc += d[m] * k[m];
    }
  }
  return acc;
}

// dL/dkernel[kh, kw, c, m]: over the images b < images, then the output positions (oh, ow) in
// row-major order whose tap (kh, kw) lies inside the image, the sum of x[b, ih, iw, c] *
// dy[b, oh, ow, c * dm + m].
template <class T>
MDTRAIN_HD T depthwise_kernel_grad_at(const T* x, const T* dy, const Window2D& g, std::int64_t dm, std::int64_t images,
                                      std::int64_t kh, std::int64_t kw, std::int64_t c, std::int64_t m) {
  const std::int64_t C = g.channels, out_c = C * dm;
  const std::int64_t in_image = g.in_h * g.in_w * C, out_image = g.out_h * g.out_w * out_c;
  T acc = T(0);
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
      const std::int64_t ih = window_start(oh, g.stride_h, g.pad_top) + kh * g.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const std::int64_t iw = window_start(ow, g.stride_w, g.pad_left) + kw * g.dilation_w;
        if (iw < 0 || iw >= g.in_w) continue;
        acc +=
            x[b * in_image + (ih * g.in_w + iw) * C + c] * dy[b * out_image + (oh * g.out_w + ow) * out_c + c * dm + m];
      }
    }
  return acc;
}

}  // namespace mdtrain::math
