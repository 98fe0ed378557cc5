#include "mdtrain/ops/activation.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

Activation parse_activation(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n.empty() || n == "linear" || n == "none") return Activation::Linear;
  if (n == "relu") return Activation::ReLU;
  if (n == "sigmoid") return Activation::Sigmoid;
  if (n == "tanh") return Activation::Tanh;
  if (n == "softmax") return Activation::Softmax;
  if (n == "gelu") return Activation::GELU;
  fail<std::invalid_argument>("[activation] unknown activation '", name,
                              "'; known: linear, relu, sigmoid, tanh, softmax, gelu");
}

const char* name_of(Activation activation) {
  switch (activation) {
    case Activation::Linear: return "linear";
    case Activation::ReLU: return "relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::Softmax: return "softmax";
    case Activation::GELU: return "gelu";
  }
  return "linear";
}

}  // namespace mdtrain
