#pragma once
// Per-element math of BatchNormalization and LayerNormalization, shared by the CPU loops and the
// CUDA kernels. Statistics (means, variances, inverse deviations, sums of gradients) are doubles:
// they are accumulated over many elements and, for synchronized BatchNormalization, summed across
// replicas, where float32 would lose the digits that E[x^2] - E[x]^2 cancels.
//
// Notation: xhat = (x - mean) * inv_std with inv_std = 1 / sqrt(var + epsilon) (var biased, as
// Keras 3's ops.moments), y = gamma * xhat + beta.
#include <cmath>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

MDTRAIN_HD double inverse_std(double variance, double epsilon) { return 1.0 / std::sqrt(variance + epsilon); }

// Biased variance from count n, sum s and sum of squares q of values taken relative to a shift
// (any constant: the closer to the mean, the less cancellation), clamped at 0 against rounding.
MDTRAIN_HD double variance_from_sums(double n, double s, double q) {
  const double m = s / n;
  const double v = q / n - m * m;
  return v > 0.0 ? v : 0.0;
}

// x - center in double: the deviation whose squares the variances sum (channel_moments' second
// pass, channel_sums, row_normalize), and the shifted value channel_sums adds.
template <class T>
MDTRAIN_HD double deviation(T x, double center) {
  return static_cast<double>(x) - center;
}

// g * xhat in double: the terms of sum(dy * xhat) (d(loss)/d(gamma)) and of mean(g * xhat) in the
// input gradient. G, H: float, double.
template <class G, class H>
MDTRAIN_HD double grad_times_xhat(G g, H xhat) {
  return static_cast<double>(g) * static_cast<double>(xhat);
}

// d(loss)/d(xhat) = gamma * dy of y = gamma * xhat + beta, in double (gamma = 1 without scale).
template <class T>
MDTRAIN_HD double scaled_grad(T dy, T gamma) {
  return static_cast<double>(dy) * static_cast<double>(gamma);
}

template <class T>
MDTRAIN_HD T normalize(T x, double mean, double inv_std) {
  return static_cast<T>((static_cast<double>(x) - mean) * inv_std);
}

template <class T>
MDTRAIN_HD T scale_and_shift(T xhat, T gamma, T beta) {
  return gamma * xhat + beta;
}

// d(loss)/dx of xhat = normalize(x) with mean and variance taken over the same n values of x, given
// g = d(loss)/d(xhat) for this element, mean_g = mean of g over those values and mean_g_xhat = mean
// of g * xhat. scale is inv_std (times gamma when g is d(loss)/dy of y = gamma * xhat + beta).
template <class T>
MDTRAIN_HD T normalize_input_grad(T g, T xhat, double scale, double mean_g, double mean_g_xhat) {
  return static_cast<T>(scale * (static_cast<double>(g) - mean_g - static_cast<double>(xhat) * mean_g_xhat));
}

// Keras's moving statistics: moving * momentum + value * (1 - momentum).
MDTRAIN_HD double moving_average(double moving, double value, double momentum) {
  return moving * momentum + value * (1.0 - momentum);
}

}  // namespace mdtrain::math
