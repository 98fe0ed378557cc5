#include "bindings.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/layer_normalization.h"

namespace mdtrain::bindings {

// Types only: these layers are made by layer_from_config from their Keras config (nn_bindings.cpp);
// Python checks argument types, C++ (from_config and the constructors) checks values.
void init_normalization_layers(py::module_& m) {
  py::class_<BatchNormalization, Layer, std::shared_ptr<BatchNormalization>>(m, "BatchNormalization");
  py::class_<LayerNormalization, Layer, std::shared_ptr<LayerNormalization>>(m, "LayerNormalization");
}

}  // namespace mdtrain::bindings
