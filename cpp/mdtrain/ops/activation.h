#pragma once
#include <string>

namespace mdtrain {

// Activations a Dense or Activation layer can apply. GELU is Keras's default, exact (erf) form.
enum class Activation { Linear, ReLU, Sigmoid, Tanh, Softmax, GELU };

// Keras names: "linear" (also None/""), "relu", "sigmoid", "tanh", "softmax", "gelu".
// Unknown names → std::invalid_argument listing the known ones.
Activation parse_activation(const std::string& name);
const char* name_of(Activation activation);

}  // namespace mdtrain
