// Float64 gradient checks shared by the layer tests (layer_gradient_test.cpp, conv_layers_test.cpp,
// normalization_test.cpp): backward()'s input and trainable-parameter gradients of
// L = sum(G * forward(x)) (+ the regularization loss where asked) against central finite
// differences, for a random upstream gradient G.
//
// Header-only (the helpers are inline or templates) because test_nn globs tests/cpp/nn/*.cpp and
// each test file is its own translation unit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"

namespace mdtrain::testing {

// eps = 1e-6 keeps the central difference's truncation error (~eps^2 * f''') far below its
// rounding error (~1e-16 * |L| / eps ~ 1e-10 for the losses in these tests); a gradient must match
// to rtol relative, with an absolute floor of atol for components that are (nearly) zero.
struct GradientTolerance {
  double eps = 1e-6;
  double rtol = 1e-6;
  double atol = 1e-8;
};

// A tensor of the given shape and dtype (Float64 or Float32), uniform in [lo, hi).
inline Tensor random_tensor(const Shape& shape, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::Float64) {
  Tensor t(shape, dtype);
  std::uniform_real_distribution<double> d(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::Float64) t.data<double>()[i] = d(rng);
    else t.data<float>()[i] = static_cast<float>(d(rng));
  }
  return t;
}

// sum(a * b) of two float64 tensors with the same number of elements.
inline double dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

// Every element of the float64 gradient `analytic` matches `numeric` within tol; `what` names it
// in the failure message.
inline void expect_close(const Tensor& analytic, const std::vector<double>& numeric, const std::string& what,
                         const GradientTolerance& tol = {}) {
  ASSERT_EQ(analytic.numel(), static_cast<std::int64_t>(numeric.size())) << what;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double a = analytic.data<double>()[i], n = numeric[i];
    ASSERT_LE(std::fabs(a - n), tol.rtol * std::max(std::fabs(a), std::fabs(n)) + tol.atol)
        << what << "[" << i << "]: backward " << a << " vs finite difference " << n;
  }
}

// Central differences of f() with respect to every element of the float64 tensor t (perturbed in
// place by +-eps, then restored).
template <class F>
std::vector<double> numeric_gradient(Tensor& t, F&& f, double eps = GradientTolerance{}.eps) {
  std::vector<double> g(static_cast<std::size_t>(t.numel()));
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double orig = p[i];
    p[i] = orig + eps;
    const double up = f();
    p[i] = orig - eps;
    const double down = f();
    p[i] = orig;
    g[static_cast<std::size_t>(i)] = (up - down) / (2 * eps);
  }
  return g;
}

namespace detail {

// The body of check_layer_gradients; void so that gtest's ASSERT_* can stop it early.
inline void check_layer_gradients(Layer& layer, Tensor& x, const ForwardContext& ctx, std::uint64_t seed,
                                  bool with_regularization, const GradientTolerance& tol, std::size_t& checked) {
  ASSERT_EQ(layer.dtype(), DType::Float64) << layer.name();
  std::mt19937_64 rng(seed);
  Tensor y = layer.forward(x, ctx);
  Shape expected{x.dim(0)};
  for (auto d : layer.output_shape()) expected.push_back(d);
  ASSERT_EQ(y.shape(), expected) << layer.name();
  const Tensor G = random_tensor(y.shape(), rng);

  Tensor dx = layer.backward(G, true);
  ASSERT_TRUE(dx.defined()) << layer.name();
  ASSERT_EQ(dx.shape(), x.shape()) << layer.name();
  dx = dx.clone();
  if (with_regularization) layer.add_regularization_gradients();
  // Only trainable parameters: backward() gives a non-trainable one (BatchNormalization's moving
  // statistics) no gradient.
  std::vector<Parameter*> trainable;
  std::vector<Tensor> grads;
  for (auto* p : layer.parameters())
    if (p->trainable) {
      trainable.push_back(p);
      grads.push_back(p->grad.clone());
    }

  auto loss = [&] {
    double l = dot(G, layer.forward(x, ctx));
    if (with_regularization) l += layer.regularization_loss();
    return l;
  };
  expect_close(dx, numeric_gradient(x, loss, tol.eps), layer.name() + " dL/dx", tol);
  for (std::size_t k = 0; k < trainable.size(); ++k)
    expect_close(grads[k], numeric_gradient(trainable[k]->value, loss, tol.eps), trainable[k]->name, tol);
  checked = trainable.size();
}

}  // namespace detail

// Runs the whole check on a built float64 layer: forward(x, ctx) has shape [batch] +
// output_shape(); backward(G)'s dL/dx and the trainable parameters' gradients (plus the
// regularization gradients if with_regularization) match central differences of
// L = sum(G * forward(x, ctx)) (+ regularization_loss()). G is drawn from `seed`. Returns the
// number of trainable parameters checked (0 after a fatal failure).
inline std::size_t check_layer_gradients(Layer& layer, Tensor x, const ForwardContext& ctx, std::uint64_t seed,
                                         bool with_regularization = false, const GradientTolerance& tol = {}) {
  std::size_t checked = 0;
  detail::check_layer_gradients(layer, x, ctx, seed, with_regularization, tol, checked);
  return checked;
}

}  // namespace mdtrain::testing
