#include "mdtrain/nn/sequence_mask.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer.h"

namespace mdtrain {

bool passes_mask(const Layer& layer) {
  // Keras's supports_masking layers that keep the mask as it is. Softmax also supports masking but
  // reads the mask (keras/layers/mask_propagation refuses one reaching it).
  const std::string name = layer.class_name();
  return name == "Dense" || name == "Dropout" || name == "Activation" || name == "LayerNormalization" ||
         name == "Identity" || name == "ReLU" || name == "LeakyReLU" || name == "ELU" || name == "PReLU" ||
         name == "UnitNormalization" || name == "GaussianNoise" || name == "GaussianDropout" ||
         name == "SpatialDropout1D" || name == "SpatialDropout2D" || name == "ActivityRegularization";
}

void check_mask_shape(const Tensor& mask, std::int64_t batch, std::int64_t steps, const std::string& area,
                      const std::string& layer) {
  MDTRAIN_CHECK(mask.ndim() == 2 && mask.dim(0) == batch && mask.dim(1) == steps, std::invalid_argument, "[", area,
                "] layer \"", layer, "\": the mask must be (batch, timesteps) = ", to_string(Shape{batch, steps}),
                " of its input, got ", to_string(mask.shape()));
  MDTRAIN_CHECK(mask.device().is_cpu(), std::invalid_argument, "[", area, "] layer \"", layer,
                "\": masks are supported on CPU devices only for now");
}

std::vector<std::uint8_t> mask_to_bytes(const Tensor& mask) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(mask.numel()));
  dispatch_floating(mask.dtype(), "mask", [&](auto tag) {
    using T = decltype(tag);
    const T* m = mask.data<T>();
    for (std::int64_t i = 0; i < mask.numel(); ++i) {
      MDTRAIN_CHECK(m[i] == T(0) || m[i] == T(1), std::invalid_argument, "[mask] mask values must be 0 or 1, got ",
                    static_cast<double>(m[i]), " at position ", i);
      bytes[static_cast<std::size_t>(i)] = m[i] != T(0);
    }
  });
  return bytes;
}

}  // namespace mdtrain
