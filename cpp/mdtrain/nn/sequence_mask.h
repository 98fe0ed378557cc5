#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/core/tensor.h"

namespace mdtrain {

// Keras's masks between layers: a (batch, timesteps) tensor in the layer's dtype, 1 for a step to
// read and 0 for padding to skip (an empty Tensor: no mask). A network hands the mask the previous
// layer's output carries to the next layer. Layers that make a mask (Embedding with mask_zero,
// Masking) or read one (the recurrent layers, Bidirectional) implement MaskedLayer; every other
// layer passes the mask on unchanged (which layers may receive one is checked when the model is
// built, python/mdtrain/keras/models.py, as Keras's supports_masking).
class MaskedLayer {
 public:
  virtual ~MaskedLayer() = default;
  // The mask of the next forward's input (empty: none). Readers throw std::invalid_argument naming
  // the layer and both shapes when it is not (batch, timesteps) of that input, before any compute.
  virtual void set_input_mask(const Tensor& /*mask*/) {}
  // The mask the output of the last forward carries (empty: none).
  virtual Tensor output_mask() const = 0;
  // Whether the output carries a mask, given whether the input does: known before any forward,
  // so that every replica of a step (one without rows too) agrees on it (Network::output_masked).
  virtual bool output_masked(bool input_masked) const = 0;
};

class Layer;
// Whether `layer` (not a MaskedLayer) hands its input's mask on to its output: Dense, Dropout,
// Activation, LayerNormalization, Identity, ReLU, LeakyReLU, ELU, PReLU, UnitNormalization and the
// noise layers (Keras's supports_masking layers whose output keeps the steps).
bool passes_mask(const Layer& layer);

// Throws std::invalid_argument ("[area] layer \"name\": ...") unless `mask` is (batch, steps) on a
// CPU device.
void check_mask_shape(const Tensor& mask, std::int64_t batch, std::int64_t steps, const std::string& area,
                      const std::string& layer);

// The mask as bytes (1: read the step), row b * steps + t; throws on values other than 0 and 1.
std::vector<std::uint8_t> mask_to_bytes(const Tensor& mask);

}  // namespace mdtrain
