#include "mdtrain/nn/layer_factory.h"

#include <utility>
#include <vector>

#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/activity_regularization.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/bidirectional.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/conv1d.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/conv_transpose.h"
#include "mdtrain/nn/depthwise_conv2d.h"
#include "mdtrain/nn/cropping.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dot.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/gaussian_dropout.h"
#include "mdtrain/nn/gaussian_noise.h"
#include "mdtrain/nn/global_average_pooling1d.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/global_max_pooling.h"
#include "mdtrain/nn/layer_normalization.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/identity.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/masking.h"
#include "mdtrain/nn/parametric_activation_layer.h"
#include "mdtrain/nn/pooling1d.h"
#include "mdtrain/nn/permute.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/prelu.h"
#include "mdtrain/nn/repeat_vector.h"
#include "mdtrain/nn/reshape.h"
#include "mdtrain/nn/separable_conv2d.h"
#include "mdtrain/nn/simple_rnn.h"
#include "mdtrain/nn/softmax_layer.h"
#include "mdtrain/nn/unit_normalization.h"
#include "mdtrain/nn/spatial_dropout.h"
#include "mdtrain/nn/up_sampling.h"
#include "mdtrain/nn/zero_padding.h"

namespace mdtrain {

namespace {

using LayerFromConfig = std::unique_ptr<Layer> (*)(const Json& config);

// Every layer class by its Keras name. A new layer adds one line here (and its class's
// from_config/config); Python and model files both come through this table.
const std::vector<std::pair<std::string, LayerFromConfig>>& layer_classes() {
  static const std::vector<std::pair<std::string, LayerFromConfig>> classes = {
      {"Dense", &Dense::from_config},
      {"Activation", &ActivationLayer::from_config},
      {"Flatten", &Flatten::from_config},
      {"Dropout", &Dropout::from_config},
      {"Conv2D", &Conv2D::from_config},
      {"MaxPooling2D", &MaxPooling2D::from_config},
      {"AveragePooling2D", &AveragePooling2D::from_config},
      {"GlobalAveragePooling2D", &GlobalAveragePooling2D::from_config},
      {"Reshape", &Reshape::from_config},
      {"BatchNormalization", &BatchNormalization::from_config},
      {"LayerNormalization", &LayerNormalization::from_config},
      {"Embedding", &Embedding::from_config},
      {"Add", &Add::from_config},
      {"Multiply", &Multiply::from_config},
      {"Concatenate", &Concatenate::from_config},
      {"SimpleRNN", &SimpleRNN::from_config},
      {"LSTM", &LSTM::from_config},
      {"GRU", &GRU::from_config},
      {"Bidirectional", &Bidirectional::from_config},
      {"Masking", &Masking::from_config},
      {"Conv1D", &Conv1D::from_config},
      {"MaxPooling1D", &MaxPooling1D::from_config},
      {"AveragePooling1D", &AveragePooling1D::from_config},
      {"GlobalAveragePooling1D", &GlobalAveragePooling1D::from_config},
      {"GlobalMaxPooling1D", &GlobalMaxPooling1D::from_config},
      {"GlobalMaxPooling2D", &GlobalMaxPooling2D::from_config},
      {"Permute", &Permute::from_config},
      {"RepeatVector", &RepeatVector::from_config},
      {"Identity", &Identity::from_config},
      {"ZeroPadding1D", &ZeroPadding::from_config_1d},
      {"ZeroPadding2D", &ZeroPadding::from_config_2d},
      {"Cropping1D", &Cropping::from_config_1d},
      {"Cropping2D", &Cropping::from_config_2d},
      {"UpSampling1D", &UpSampling::from_config_1d},
      {"UpSampling2D", &UpSampling::from_config_2d},
      {"Conv2DTranspose", &Conv2DTranspose::from_config},
      {"Conv1DTranspose", &Conv1DTranspose::from_config},
      {"DepthwiseConv2D", &DepthwiseConv2D::from_config},
      {"SeparableConv2D", &SeparableConv2D::from_config},
      {"ReLU", &ParametricActivationLayer::from_config_relu},
      {"LeakyReLU", &ParametricActivationLayer::from_config_leaky_relu},
      {"ELU", &ParametricActivationLayer::from_config_elu},
      {"PReLU", &PReLU::from_config},
      {"Softmax", &SoftmaxLayer::from_config},
      {"UnitNormalization", &UnitNormalization::from_config},
      {"Subtract", &Subtract::from_config},
      {"Average", &Average::from_config},
      {"Maximum", &Maximum::from_config},
      {"Minimum", &Minimum::from_config},
      {"Dot", &Dot::from_config},
      {"GaussianNoise", &GaussianNoise::from_config},
      {"GaussianDropout", &GaussianDropout::from_config},
      {"SpatialDropout1D", &SpatialDropout::from_config_1d},
      {"SpatialDropout2D", &SpatialDropout::from_config_2d},
      {"ActivityRegularization", &ActivityRegularization::from_config},
  };
  return classes;
}

}  // namespace

std::vector<std::string> layer_class_names() {
  std::vector<std::string> names;
  for (const auto& entry : layer_classes()) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Layer> layer_from_config(const Json& spec) {
  const std::string cls = spec.at("class_name").as_string();
  const Json& config = spec.at("config");
  for (const auto& entry : layer_classes())
    if (entry.first == cls) {
      std::unique_ptr<Layer> layer = entry.second(config);
      layer->set_trainable(config.get("trainable", Json(true)).as_bool());
      return layer;
    }
  std::string known;
  for (const auto& entry : layer_classes()) known += (known.empty() ? "" : ", ") + entry.first;
  fail<std::invalid_argument>("[layers] unknown layer class '", cls, "'; known: ", known);
}

Json layer_to_config(const Layer& layer) {
  Json j = Json::object();
  j.set("class_name", layer.class_name());
  j.set("config", layer.config());
  return j;
}

}  // namespace mdtrain
