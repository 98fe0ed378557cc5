#pragma once
#include <cstdint>
#include <memory>

#include "mdtrain/core/json.h"
#include "mdtrain/core/rng.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

// Keras initializers. fan_in/fan_out follow Keras: for a Dense kernel (in, units) they are in and
// units.
class Initializer {
 public:
  virtual ~Initializer() = default;
  virtual void fill(Tensor& t, std::int64_t fan_in, std::int64_t fan_out, Rng& rng) const = 0;
  // {"class_name": "GlorotUniform", "config": {...}} as Keras serialises it.
  virtual Json config() const = 0;
};

// Accepts a Keras name ("glorot_uniform", "glorot_normal", "he_normal", "he_uniform", "zeros",
// "ones", "random_normal", "random_uniform", also the CamelCase class names) or a config object.
// Unknown → std::invalid_argument listing the known names.
std::unique_ptr<Initializer> make_initializer(const Json& spec);

}  // namespace mdtrain
