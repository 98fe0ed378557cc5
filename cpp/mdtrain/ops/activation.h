#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "mdtrain/core/hd.h"

namespace mdtrain {

// Activations a Dense, Conv2D or Activation layer applies in the C++ step, with Keras 3's
// formulas (keras.activations): GELU in its exact (erf) form, LeakyReLU with Keras's default
// negative slope 0.2, HardSigmoid as relu6(x + 3) / 6, SELU with Keras's alpha and scale.
enum class Activation {
  Linear,
  ReLU,
  Sigmoid,
  Tanh,
  Softmax,
  GELU,
  ELU,
  SELU,
  Softplus,
  Softsign,
  SiLU,
  ReLU6,
  HardSigmoid,
  HardSiLU,
  Exponential,
  Mish,
  LeakyReLU,
  LogSigmoid,
};

// Keras names: "linear" (also None/""), "relu", "sigmoid", "tanh", "softmax", "gelu", "elu",
// "selu", "softplus", "softsign", "silu" (also "swish"), "relu6", "hard_sigmoid", "hard_silu"
// (also "hard_swish"), "exponential", "mish", "leaky_relu", "log_sigmoid".
// Unknown names → std::invalid_argument listing the known ones.
Activation parse_activation(const std::string& name);
const char* name_of(Activation activation);
// Every activation, in declaration order (the tests go over it).
const std::vector<Activation>& all_activations();

// Whether the gradient is computed from the forward input x (the rest need only the output y,
// or nothing: linear). Layers keep x for these.
MDTRAIN_HD constexpr bool needs_forward_input(Activation a) {
  return !(a == Activation::Linear || a == Activation::ReLU || a == Activation::Sigmoid || a == Activation::Tanh ||
           a == Activation::Softmax);
}

// Calls f(std::integral_constant<Activation, A>{}) with the runtime activation as a compile-time
// one: a kernel is instantiated per activation and its loop holds no branch on the kind.
template <class F>
decltype(auto) dispatch_activation(Activation a, F&& f) {
  using A = Activation;
  switch (a) {
    case A::Linear: return f(std::integral_constant<A, A::Linear>{});
    case A::ReLU: return f(std::integral_constant<A, A::ReLU>{});
    case A::Sigmoid: return f(std::integral_constant<A, A::Sigmoid>{});
    case A::Tanh: return f(std::integral_constant<A, A::Tanh>{});
    case A::Softmax: return f(std::integral_constant<A, A::Softmax>{});
    case A::GELU: return f(std::integral_constant<A, A::GELU>{});
    case A::ELU: return f(std::integral_constant<A, A::ELU>{});
    case A::SELU: return f(std::integral_constant<A, A::SELU>{});
    case A::Softplus: return f(std::integral_constant<A, A::Softplus>{});
    case A::Softsign: return f(std::integral_constant<A, A::Softsign>{});
    case A::SiLU: return f(std::integral_constant<A, A::SiLU>{});
    case A::ReLU6: return f(std::integral_constant<A, A::ReLU6>{});
    case A::HardSigmoid: return f(std::integral_constant<A, A::HardSigmoid>{});
    case A::HardSiLU: return f(std::integral_constant<A, A::HardSiLU>{});
    case A::Exponential: return f(std::integral_constant<A, A::Exponential>{});
    case A::Mish: return f(std::integral_constant<A, A::Mish>{});
    case A::LeakyReLU: return f(std::integral_constant<A, A::LeakyReLU>{});
    case A::LogSigmoid: return f(std::integral_constant<A, A::LogSigmoid>{});
  }
  return f(std::integral_constant<A, A::Linear>{});
}

}  // namespace mdtrain
