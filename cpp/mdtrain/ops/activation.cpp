#include "mdtrain/ops/activation.h"

#include <cctype>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {
// Keras's other spellings of an activation: swish is silu, hard_swish is hard_silu.
std::string canonical(const std::string& n) {
  if (n == "swish") return "silu";
  if (n == "hard_swish") return "hard_silu";
  return n;
}
}  // namespace

const std::vector<Activation>& all_activations() {
  static const std::vector<Activation> all = [] {
    std::vector<Activation> v;
    for (int a = 0; a <= static_cast<int>(Activation::LogSigmoid); ++a) v.push_back(static_cast<Activation>(a));
    return v;
  }();
  return all;
}

Activation parse_activation(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n.empty() || n == "none") return Activation::Linear;
  n = canonical(n);
  std::string known;
  for (Activation a : all_activations()) {
    if (n == name_of(a)) return a;
    known += (known.empty() ? "" : ", ") + std::string(name_of(a));
  }
  fail<std::invalid_argument>("[activation] unknown activation '", name, "'; known: ", known,
                              " (and swish, hard_swish)");
}

const char* name_of(Activation activation) {
  switch (activation) {
    case Activation::Linear: return "linear";
    case Activation::ReLU: return "relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::Softmax: return "softmax";
    case Activation::GELU: return "gelu";
    case Activation::ELU: return "elu";
    case Activation::SELU: return "selu";
    case Activation::Softplus: return "softplus";
    case Activation::Softsign: return "softsign";
    case Activation::SiLU: return "silu";
    case Activation::ReLU6: return "relu6";
    case Activation::HardSigmoid: return "hard_sigmoid";
    case Activation::HardSiLU: return "hard_silu";
    case Activation::Exponential: return "exponential";
    case Activation::Mish: return "mish";
    case Activation::LeakyReLU: return "leaky_relu";
    case Activation::LogSigmoid: return "log_sigmoid";
  }
  return "linear";
}

}  // namespace mdtrain
