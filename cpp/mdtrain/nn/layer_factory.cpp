#include "mdtrain/nn/layer_factory.h"

#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"

namespace mdtrain {

std::unique_ptr<Layer> layer_from_config(const Json& spec) {
  const std::string cls = spec.at("class_name").as_string();
  const Json& c = spec.at("config");
  const std::string name = c.at("name").as_string();
  if (cls == "Dense") {
    Dense::Options o;
    o.units = c.at("units").as_int();
    o.activation = c.get("activation", "linear").as_string();
    o.use_bias = c.get("use_bias", true).as_bool();
    o.kernel_initializer = c.get("kernel_initializer", "glorot_uniform");
    o.bias_initializer = c.get("bias_initializer", "zeros");
    o.kernel_regularizer = c.get("kernel_regularizer", Json());
    o.bias_regularizer = c.get("bias_regularizer", Json());
    return std::make_unique<Dense>(name, o);
  }
  if (cls == "Activation") return std::make_unique<ActivationLayer>(name, c.at("activation").as_string());
  if (cls == "Flatten") return std::make_unique<Flatten>(name);
  if (cls == "Dropout")
    return std::make_unique<Dropout>(name, c.at("rate").as_number(),
                                     static_cast<std::uint64_t>(c.get("seed", 0).as_number()));
  fail<std::invalid_argument>("[layers] unknown layer class '", cls, "'; known: Dense, Activation, Flatten, Dropout");
}

Json layer_to_config(const Layer& layer) {
  Json j = Json::object();
  j.set("class_name", layer.class_name());
  j.set("config", layer.config());
  return j;
}

}  // namespace mdtrain
