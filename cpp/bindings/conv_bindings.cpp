#include "bindings.h"
#include "mdtrain/nn/conv1d.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/conv_transpose.h"
#include "mdtrain/nn/depthwise_conv2d.h"
#include "mdtrain/nn/global_average_pooling1d.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/global_max_pooling.h"
#include "mdtrain/nn/pooling1d.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/reshape.h"
#include "mdtrain/nn/separable_conv2d.h"

namespace mdtrain::bindings {

// Types only: these layers are made by layer_from_config from their Keras config (nn_bindings.cpp).
void init_conv_layers(py::module_& m) {
  py::class_<Conv2D, Layer, std::shared_ptr<Conv2D>>(m, "Conv2D");
  py::class_<Pooling2D, Layer, std::shared_ptr<Pooling2D>>(m, "Pooling2D");
  py::class_<MaxPooling2D, Pooling2D, std::shared_ptr<MaxPooling2D>>(m, "MaxPooling2D");
  py::class_<AveragePooling2D, Pooling2D, std::shared_ptr<AveragePooling2D>>(m, "AveragePooling2D");
  py::class_<GlobalAveragePooling2D, Layer, std::shared_ptr<GlobalAveragePooling2D>>(m, "GlobalAveragePooling2D");
  py::class_<Conv1D, Conv2D, std::shared_ptr<Conv1D>>(m, "Conv1D");
  py::class_<MaxPooling1D, MaxPooling2D, std::shared_ptr<MaxPooling1D>>(m, "MaxPooling1D");
  py::class_<AveragePooling1D, AveragePooling2D, std::shared_ptr<AveragePooling1D>>(m, "AveragePooling1D");
  py::class_<GlobalAveragePooling1D, Layer, std::shared_ptr<GlobalAveragePooling1D>>(m, "GlobalAveragePooling1D");
  py::class_<GlobalMaxPooling, Layer, std::shared_ptr<GlobalMaxPooling>>(m, "GlobalMaxPooling");
  py::class_<GlobalMaxPooling1D, GlobalMaxPooling, std::shared_ptr<GlobalMaxPooling1D>>(m, "GlobalMaxPooling1D");
  py::class_<GlobalMaxPooling2D, GlobalMaxPooling, std::shared_ptr<GlobalMaxPooling2D>>(m, "GlobalMaxPooling2D");
  py::class_<Reshape, Layer, std::shared_ptr<Reshape>>(m, "Reshape");
  py::class_<Conv2DTranspose, Layer, std::shared_ptr<Conv2DTranspose>>(m, "Conv2DTranspose");
  py::class_<Conv1DTranspose, Conv2DTranspose, std::shared_ptr<Conv1DTranspose>>(m, "Conv1DTranspose");
  py::class_<DepthwiseConv2D, Layer, std::shared_ptr<DepthwiseConv2D>>(m, "DepthwiseConv2D");
  py::class_<SeparableConv2D, Layer, std::shared_ptr<SeparableConv2D>>(m, "SeparableConv2D");
}

}  // namespace mdtrain::bindings
