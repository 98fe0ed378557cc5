#pragma once
// CUDA bodies of the losses and metric counts of ops/loss_ops.h. loss_ops.cpp validates first
// (labels are checked on the host: they are few, and an invalid label must name its value and
// index exactly as on the CPU). One GPU thread computes one row with the per-row functions of
// ops/loss_math.h that the CPU loops call; the per-row results are copied back and summed on the
// host in row order, in double, as the CPU does, so the sums agree with the CPU's to the rounding
// of the per-row values. Defined in loss_kernels.cu or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/loss_math.h"

namespace mdtrain::cuda {

double sparse_categorical_crossentropy(const Tensor& labels, const Tensor& pred, bool from_logits, bool has_ignore,
                                       std::int64_t ignore_class, double grad_scale, math::RowWeights weights,
                                       Tensor* dpred);
double categorical_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                                double grad_scale, math::RowWeights weights, Tensor* dpred);
double binary_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                           double grad_scale, math::RowWeights weights, Tensor* dpred);
double mean_squared_error(const Tensor& target, const Tensor& pred, double grad_scale, math::RowWeights weights,
                          Tensor* dpred);
double mean_absolute_error(const Tensor& target, const Tensor& pred, double grad_scale, math::RowWeights weights,
                           Tensor* dpred);

double sparse_categorical_matches(const Tensor& labels, const Tensor& pred);
double categorical_matches(const Tensor& target, const Tensor& pred);
double sparse_top_k_matches(const Tensor& labels, const Tensor& pred, std::int64_t k);
double binary_matches(const Tensor& target, const Tensor& pred, double threshold);

}  // namespace mdtrain::cuda
