#include "mdtrain/nn/layer_factory.h"

#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/layer_normalization.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/reshape.h"
#include "mdtrain/nn/window_args.h"

namespace mdtrain {

std::unique_ptr<Layer> layer_from_config(const Json& spec) {
  const std::string cls = spec.at("class_name").as_string();
  const Json& c = spec.at("config");
  const std::string name = c.at("name").as_string();
  if (cls == "Dense") {
    Dense::Options o;
    o.units = c.at("units").as_int();
    read_kernel_bias_config(c, o);
    return std::make_unique<Dense>(name, o);
  }
  if (cls == "Activation") return std::make_unique<ActivationLayer>(name, c.at("activation").as_string());
  if (cls == "Flatten") return std::make_unique<Flatten>(name);
  if (cls == "Dropout")
    return std::make_unique<Dropout>(name, c.at("rate").as_number(),
                                     static_cast<std::uint64_t>(c.get("seed", 0).as_number()));
  if (cls == "Conv2D") {
    Conv2D::Options o;
    o.filters = c.at("filters").as_int();
    o.kernel_size = pair_from_json(c.at("kernel_size"));
    o.strides = pair_from_json(c.get("strides", Json(1)));
    o.padding = c.get("padding", "valid").as_string();
    o.data_format = c.get("data_format", "channels_last").as_string();
    o.dilation_rate = pair_from_json(c.get("dilation_rate", Json(1)));
    MDTRAIN_CHECK(c.get("groups", 1).as_int() == 1, std::invalid_argument, "[layers] Conv2D \"", name,
                  "\": groups other than 1 are not supported");
    read_kernel_bias_config(c, o);
    return std::make_unique<Conv2D>(name, o);
  }
  if (cls == "MaxPooling2D" || cls == "AveragePooling2D") {
    Pooling2D::Options o;
    o.pool_size = pair_from_json(c.get("pool_size", Json(2)));
    if (c.contains("strides") && !c.at("strides").is_null()) o.strides = pair_from_json(c.at("strides"));
    o.padding = c.get("padding", "valid").as_string();
    o.data_format = c.get("data_format", "channels_last").as_string();
    if (cls == "MaxPooling2D") return std::make_unique<MaxPooling2D>(name, o);
    return std::make_unique<AveragePooling2D>(name, o);
  }
  if (cls == "GlobalAveragePooling2D")
    return std::make_unique<GlobalAveragePooling2D>(name, c.get("keepdims", false).as_bool(),
                                                    c.get("data_format", "channels_last").as_string());
  if (cls == "Reshape") {
    Shape target;
    for (const auto& d : c.at("target_shape").as_array()) target.push_back(d.as_int());
    return std::make_unique<Reshape>(name, target);
  }
  if (cls == "BatchNormalization") return batch_normalization_from_config(name, c);
  if (cls == "LayerNormalization") return layer_normalization_from_config(name, c);
  fail<std::invalid_argument>("[layers] unknown layer class '", cls,
                              "'; known: Dense, Activation, Flatten, Dropout, Conv2D, MaxPooling2D, "
                              "AveragePooling2D, GlobalAveragePooling2D, Reshape, BatchNormalization, LayerNormalization");
}

Json layer_to_config(const Layer& layer) {
  Json j = Json::object();
  j.set("class_name", layer.class_name());
  j.set("config", layer.config());
  return j;
}

}  // namespace mdtrain
