#pragma once
// Bilinear upsampling of channels_last images by whole factors, TF's half-pixel form (Keras 3's
// UpSampling2D(interpolation="bilinear")), and its adjoint; host or one GPU.
#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// y (batch, h * fh, w * fw, c) = x (batch, h, w, c) resized bilinearly (math::resize_bilinear_element).
// One floating dtype, one memory, 4-D, whole factors fh, fw >= 1; else
// std::invalid_argument("[ops] resize_bilinear: ...") naming the shapes.
void resize_bilinear(const Tensor& x, Tensor& y);
// dx (batch, h, w, c) = the adjoint of resize_bilinear applied to dy (batch, h * fh, w * fw, c):
// each element the sum over the outputs that read it, in row order (the same bits on CPU and GPU).
void resize_bilinear_backward(const Tensor& dy, Tensor& dx);

}  // namespace mdtrain::ops
