#pragma once
// CUDA bodies of the convolution and pooling ops of ops/conv_ops.h. conv_ops.cpp validates the
// arguments (shapes, dtypes, one GPU per call) and then calls these for GPU tensors; they enqueue
// work on the device's compute stream. The index math is the MDTRAIN_HD functions of
// ops/conv_math.h that the CPU kernels call (ops/cuda/kernel_list.h names them per kernel).
//
// Every output element is computed by one thread with the CPU's operations in the CPU's order, so
// the results are the CPU's bit for bit. The backward passes of im2col and of the pools are
// gathers: each input element visits the windows that read it (math::window_output_at) and adds
// their contributions in output order, the order in which the CPU's scatter adds them. No atomics:
// the results do not depend on thread timing, and replicas on different GPUs agree bitwise.
//
// Defined in conv_kernels.cu, or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain::cuda {

// The columns of output rows [first_row, first_row + col.dim(0) / g.out_w), numbered across the
// batch (as ops::im2col's row-range form).
void im2col(const Tensor& x, const Window2D& g, std::int64_t first_row, Tensor& col);
// The adjoint of im2col for the same rows: adds them onto dx (accumulate), or overwrites dx with
// them (!accumulate; then col must hold the whole batch's rows, first_row 0, and the elements no
// window reads become 0).
void col2im(const Tensor& col, const Window2D& g, std::int64_t first_row, bool accumulate, Tensor& dx);
// argmax is an Int32 tensor on the same GPU.
void max_pool2d(const Tensor& x, const Window2D& g, Tensor& y, Tensor& argmax);
void max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Window2D& g, Tensor& dx);
void avg_pool2d(const Tensor& x, const Window2D& g, Tensor& y);
void avg_pool2d_backward(const Tensor& dy, const Window2D& g, Tensor& dx);
// x: images x pixels x channels; y: images x channels (any shape of that size).
void global_avg_pool2d(const Tensor& x, std::int64_t images, std::int64_t pixels, std::int64_t channels, Tensor& y);
void global_avg_pool2d_backward(const Tensor& dy, std::int64_t images, std::int64_t pixels, std::int64_t channels,
                                Tensor& dx);
// argmax: Int32, images x channels, on the same GPU.
void global_max_pool2d(const Tensor& x, std::int64_t images, std::int64_t pixels, std::int64_t channels, Tensor& y,
                       Tensor& argmax);
void global_max_pool2d_backward(const Tensor& dy, const Tensor& argmax, std::int64_t images, std::int64_t pixels,
                                std::int64_t channels, Tensor& dx);

}  // namespace mdtrain::cuda
