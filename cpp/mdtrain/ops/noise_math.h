#pragma once
// Per-element math of the noise and activity-regularization layers (ops/noise.h), shared by the
// CPU loops and the CUDA kernels. Random numbers are counter-based (core/rng.h): a value is a
// function of (seed, stream, the element's position in the global batch) alone, so the replica
// split, the thread split and the device do not change it.
#include <cmath>
#include <cstdint>

#include "mdtrain/core/hd.h"
#include "mdtrain/core/rng.h"

namespace mdtrain::math {

// A standard normal for global element e: Box-Muller on the two 32-bit uniforms of one half of
// the Philox block e >> 1 (u1 in (0, 1], so the log is finite; u2 in [0, 1)), in double.
MDTRAIN_HD double standard_normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t e) {
  const Philox4 block = philox4x32(seed, stream, e >> 1);
  const unsigned lane = static_cast<unsigned>(e & 1u) * 2u;
  const double u1 = (static_cast<double>(block.v[lane]) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(block.v[lane + 1]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

// GaussianNoise: x + stddev * n.
template <class T>
MDTRAIN_HD T add_gaussian_noise(T x, double stddev, double n) {
  return x + static_cast<T>(stddev * n);
}

// GaussianDropout's multiplier: a normal of mean 1 and standard deviation `stddev`.
template <class T>
MDTRAIN_HD T gaussian_multiplier(double stddev, double n) {
  return static_cast<T>(1.0 + stddev * n);
}

// One element's activity penalty, l1 |x| + l2 x^2, in double.
MDTRAIN_HD double activity_penalty_of(double x, double l1, double l2) { return l1 * std::fabs(x) + l2 * x * x; }

// dy plus the gradient of the penalty times `scale` (1 / the batch's rows): l1 * sign(x) (TF's
// gradient of |x|: 0 at 0, NaN at NaN) + 2 * l2 * x, each already multiplied by scale.
template <class T>
MDTRAIN_HD T add_activity_penalty_grad(T x, T dy, T l1_scaled, T l2_scaled) {
  const T sign = x > T(0) ? T(1) : (x < T(0) ? T(-1) : x * T(0));
  return dy + l1_scaled * sign + T(2) * l2_scaled * x;
}

}  // namespace mdtrain::math
