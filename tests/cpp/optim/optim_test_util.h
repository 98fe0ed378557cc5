#pragma once
// Small helpers shared by the optimizer tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/parameter.h"

namespace mdtrain::testing {

inline void set_values(Tensor& t, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t.dtype() == DType::Float64) t.data<double>()[i] = v[i];
    else t.data<float>()[i] = static_cast<float>(v[i]);
  }
}

inline std::unique_ptr<Parameter> make_param(const std::string& name, const std::vector<double>& v, Shape shape = {},
                                             DType dtype = DType::Float64) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  auto p = std::make_unique<Parameter>(name, Tensor(shape, dtype));
  set_values(p->value, v);
  return p;
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype() == DType::Float64 ? t.data<double>()[i] : t.data<float>()[i];
  return out;
}

// Equal to a relative 1e-13: the hand-written reference may order a product differently.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         const std::string& where) {
  ASSERT_EQ(actual.size(), expected.size()) << where;
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-13 * std::max(1.0, std::fabs(expected[i]))) << where << " element " << i;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Three steps' gradients for a 4-element parameter: signs and sizes vary so every branch of
// every rule (including the AMSGrad maximum) is exercised.
inline const std::vector<std::vector<double>>& three_grads() {
  static const std::vector<std::vector<double>> g{{0.5, -1.0, 2.0, 0.0},
                                                  {0.1, 0.4, -3.0, 1.0},
                                                  {-0.2, 0.3, 0.05, -2.0}};
  return g;
}
inline const std::vector<double>& start_values() {
  static const std::vector<double> x{1.0, -2.0, 0.5, 3.0};
  return x;
}

// f() must throw std::invalid_argument whose message starts with "[optim]" and contains fragment.
inline void expect_optim_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[optim]", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << what;
  }
}

}  // namespace mdtrain::testing
