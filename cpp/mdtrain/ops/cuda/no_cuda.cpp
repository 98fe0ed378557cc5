// Compiled instead of the CUDA kernels when MDTRAIN_CUDA=OFF (or CUDA is not found): every kernel
// throws std::runtime_error saying how to rebuild. Defines every function of ops/cuda/*.h; the
// runtime's stub (devices, memory, streams) is core/cuda/no_cuda.cpp.
#include <string>

#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cuda/accumulate_kernels.h"
#include "mdtrain/ops/cuda/activation_layer_kernels.h"
#include "mdtrain/ops/cuda/conv_kernels.h"
#include "mdtrain/ops/cuda/depthwise_conv_kernels.h"
#include "mdtrain/ops/cuda/embedding_kernels.h"
#include "mdtrain/ops/cuda/kernels.h"
#include "mdtrain/ops/cuda/loss_kernels.h"
#include "mdtrain/ops/cuda/noise_kernels.h"
#include "mdtrain/ops/cuda/normalization_kernels.h"
#include "mdtrain/ops/cuda/optimizer_kernels.h"
#include "mdtrain/ops/cuda/recurrent_kernels.h"
#include "mdtrain/ops/cuda/resize_bilinear_kernels.h"
#include "mdtrain/ops/cuda/strided_view_kernels.h"

namespace mdtrain::cuda {

namespace {
[[noreturn]] void unavailable(const char* what) {
  fail<std::runtime_error>("[cuda] ", what, ": ", unavailable_reason());
}
}  // namespace

// ops/cuda/kernels.h
void gemm(const Tensor&, bool, const Tensor&, bool, Tensor&, double, double) { unavailable("gemm"); }
void bias_activation(const Tensor&, const Tensor&, Activation, Tensor&) { unavailable("bias_activation"); }
void activation_backward(Activation, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unavailable("activation_backward");
}
void sum_rows(const Tensor&, Tensor&, double) { unavailable("sum_rows"); }
void dropout(const Tensor&, double, std::uint64_t, std::uint64_t, std::uint64_t, Tensor&, Tensor&) {
  unavailable("dropout");
}
void multiply(const Tensor&, const Tensor&, Tensor&) { unavailable("multiply"); }
void gather_rows(const Tensor&, const std::int64_t*, std::int64_t, Tensor&) { unavailable("gather_rows"); }
bool all_finite(const Tensor&) { unavailable("all_finite"); }
double sum_of_squares(const Tensor&) { unavailable("sum_of_squares"); }

// ops/cuda/loss_kernels.h
double sparse_categorical_crossentropy(const Tensor&, const Tensor&, bool, bool, std::int64_t, double, math::RowWeights,
                                       Tensor*) {
  unavailable("sparse_categorical_crossentropy");
}
double categorical_crossentropy(const Tensor&, const Tensor&, bool, double, double, math::RowWeights, Tensor*) {
  unavailable("categorical_crossentropy");
}
double binary_crossentropy(const Tensor&, const Tensor&, bool, double, double, math::RowWeights, Tensor*) {
  unavailable("binary_crossentropy");
}
double mean_squared_error(const Tensor&, const Tensor&, double, math::RowWeights, Tensor*) {
  unavailable("mean_squared_error");
}
double mean_absolute_error(const Tensor&, const Tensor&, double, math::RowWeights, Tensor*) {
  unavailable("mean_absolute_error");
}
double sparse_categorical_matches(const Tensor&, const Tensor&) { unavailable("sparse_categorical_matches"); }
double categorical_matches(const Tensor&, const Tensor&) { unavailable("categorical_matches"); }
double sparse_top_k_matches(const Tensor&, const Tensor&, std::int64_t) { unavailable("sparse_top_k_matches"); }
double binary_matches(const Tensor&, const Tensor&, double) { unavailable("binary_matches"); }

// ops/cuda/optimizer_kernels.h
void sgd_update(int, DType, const std::vector<UpdateSegment>&, double, double, bool, double) {
  unavailable("sgd_update");
}
void adam_update(int, DType, const std::vector<UpdateSegment>&, double, double, double, double, bool, double) {
  unavailable("adam_update");
}
void rmsprop_update(int, DType, const std::vector<UpdateSegment>&, double, double, double, double, bool, double) {
  unavailable("rmsprop_update");
}
void adagrad_update(int, DType, const std::vector<UpdateSegment>&, double, double, double) {
  unavailable("adagrad_update");
}

// ops/cuda/normalization_kernels.h
void channel_moments(const Tensor&, Tensor&, Tensor&) { unavailable("channel_moments"); }
void channel_sums(const Tensor&, const Tensor&, Tensor&, Tensor&) { unavailable("channel_sums"); }
void channel_normalize(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor*, Tensor&) {
  unavailable("channel_normalize");
}
void channel_grad_sums(const Tensor&, const Tensor&, Tensor&, Tensor&) { unavailable("channel_grad_sums"); }
void channel_normalize_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unavailable("channel_normalize_backward");
}
void row_normalize(const Tensor&, double, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  unavailable("row_normalize");
}
void row_normalize_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unavailable("row_normalize_backward");
}

// ops/cuda/depthwise_conv_kernels.h
void depthwise_conv2d(const Tensor&, const Tensor&, const Window2D&, std::int64_t, Tensor&) {
  unavailable("depthwise_conv2d");
}
void depthwise_conv2d_input_grad(const Tensor&, const Tensor&, const Window2D&, std::int64_t, Tensor&) {
  unavailable("depthwise_conv2d_input_grad");
}
void depthwise_conv2d_kernel_grad(const Tensor&, const Tensor&, const Window2D&, std::int64_t, std::int64_t, Tensor&) {
  unavailable("depthwise_conv2d_kernel_grad");
}

// ops/cuda/conv_kernels.h
void im2col(const Tensor&, const Window2D&, std::int64_t, Tensor&) { unavailable("im2col"); }
void col2im(const Tensor&, const Window2D&, std::int64_t, bool, Tensor&) { unavailable("col2im"); }
void max_pool2d(const Tensor&, const Window2D&, Tensor&, Tensor&) { unavailable("max_pool2d"); }
void max_pool2d_backward(const Tensor&, const Tensor&, const Window2D&, Tensor&) { unavailable("max_pool2d_backward"); }
void avg_pool2d(const Tensor&, const Window2D&, Tensor&) { unavailable("avg_pool2d"); }
void avg_pool2d_backward(const Tensor&, const Window2D&, Tensor&) { unavailable("avg_pool2d_backward"); }
void global_avg_pool2d(const Tensor&, std::int64_t, std::int64_t, std::int64_t, Tensor&) {
  unavailable("global_avg_pool2d");
}
void global_avg_pool2d_backward(const Tensor&, std::int64_t, std::int64_t, std::int64_t, Tensor&) {
  unavailable("global_avg_pool2d_backward");
}
void global_max_pool2d(const Tensor&, std::int64_t, std::int64_t, std::int64_t, Tensor&, Tensor&) {
  unavailable("global_max_pool2d");
}
void global_max_pool2d_backward(const Tensor&, const Tensor&, std::int64_t, std::int64_t, std::int64_t, Tensor&) {
  unavailable("global_max_pool2d_backward");
}

// ops/cuda/embedding_kernels.h
std::int64_t embedding_rows(const Tensor&, std::int64_t, Tensor&) { unavailable("embedding_rows"); }
void embedding_lookup(const Tensor&, const Tensor&, Tensor&) { unavailable("embedding_lookup"); }
void embedding_scatter_add(const Tensor&, const Tensor&, Tensor&) { unavailable("embedding_scatter_add"); }
void embedding_shard_rows(const Tensor&, std::int64_t, std::int64_t, Tensor&, Tensor&) {
  unavailable("embedding_shard_rows");
}

// ops/cuda/recurrent_kernels.h
void lstm_step_forward(const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) { unavailable("lstm_step_forward"); }
void lstm_step_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unavailable("lstm_step_backward");
}
void gru_step_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unavailable("gru_step_forward");
}
void gru_step_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  unavailable("gru_step_backward");
}
void add_masked(const Tensor&, const Tensor&, Tensor&) { unavailable("add_masked"); }

// ops/cuda/accumulate_kernels.h
void add_into(Tensor&, const Tensor&) { unavailable("add_into"); }

// ops/cuda/strided_view_kernels.h
void strided_view(const Tensor&, Tensor&, const math::ViewArrays&) { unavailable("strided_view"); }

// ops/cuda/resize_bilinear_kernels.h
void resize_bilinear(const Tensor&, Tensor&, const math::ResizeDims<float>&) { unavailable("resize_bilinear"); }
void resize_bilinear(const Tensor&, Tensor&, const math::ResizeDims<double>&) { unavailable("resize_bilinear"); }
void resize_bilinear_backward(const Tensor&, Tensor&, const math::ResizeDims<float>&) {
  unavailable("resize_bilinear_backward");
}
void resize_bilinear_backward(const Tensor&, Tensor&, const math::ResizeDims<double>&) {
  unavailable("resize_bilinear_backward");
}

// ops/cuda/activation_layer_kernels.h
void parametric_activation(const Tensor&, const ops::ParametricActivation&, Tensor&) {
  unavailable("parametric_activation");
}
void parametric_activation_backward(const ops::ParametricActivation&, const Tensor&, const Tensor&, Tensor&) {
  unavailable("parametric_activation_backward");
}
void prelu(const Tensor&, const Tensor&, const math::AxesPlan&, Tensor&) { unavailable("prelu"); }
void prelu_backward(const Tensor&, const Tensor&, const Tensor&, const math::AxesPlan&, Tensor*, Tensor&) {
  unavailable("prelu_backward");
}
void softmax_over_axes(const Tensor&, const math::AxesPlan&, Tensor&) { unavailable("softmax_over_axes"); }
void softmax_over_axes_backward(const Tensor&, const Tensor&, const math::AxesPlan&, Tensor&) {
  unavailable("softmax_over_axes_backward");
}
void unit_normalize(const Tensor&, const math::AxesPlan&, Tensor&) { unavailable("unit_normalize"); }
void unit_normalize_backward(const Tensor&, const Tensor&, const math::AxesPlan&, Tensor&) {
  unavailable("unit_normalize_backward");
}
// ops/cuda/noise_kernels.h
void gaussian_noise(const Tensor&, double, std::uint64_t, std::uint64_t, std::uint64_t, Tensor&) {
  unavailable("gaussian_noise");
}
void gaussian_dropout(const Tensor&, double, std::uint64_t, std::uint64_t, std::uint64_t, Tensor&, Tensor&) {
  unavailable("gaussian_dropout");
}
void dropout_mask(double, std::uint64_t, std::uint64_t, std::uint64_t, Tensor&) { unavailable("dropout_mask"); }
void scale_channels(const Tensor&, const Tensor&, std::int64_t, Tensor&) { unavailable("scale_channels"); }
double activity_penalty(const Tensor&, double, double) { unavailable("activity_penalty"); }
void activity_penalty_backward(const Tensor&, const Tensor&, double, double, Tensor&) {
  unavailable("activity_penalty_backward");
}

}  // namespace mdtrain::cuda
