#include "mdtrain/nn/pooling1d.h"

#include "mdtrain/nn/window_args.h"

namespace mdtrain {

Pooling2D::Options pooling1d_options_from_config(const Json& c) {
  Pooling2D::Options o;
  o.pool_size = tuple_from_json(c.get("pool_size", Json(2)), 1);
  if (c.contains("strides") && !c.at("strides").is_null()) o.strides = tuple_from_json(c.at("strides"), 1);
  o.padding = c.get("padding", "valid").as_string();
  o.data_format = c.get("data_format", "channels_last").as_string();
  return o;
}

std::unique_ptr<Layer> MaxPooling1D::from_config(const Json& c) {
  return std::make_unique<MaxPooling1D>(c.at("name").as_string(), pooling1d_options_from_config(c));
}

std::unique_ptr<Layer> MaxPooling1D::clone() const {
  auto copy = std::make_unique<MaxPooling1D>(name_, options_);
  copy->copy_pooling_state(*this);
  return copy;
}

std::unique_ptr<Layer> AveragePooling1D::from_config(const Json& c) {
  return std::make_unique<AveragePooling1D>(c.at("name").as_string(), pooling1d_options_from_config(c));
}

std::unique_ptr<Layer> AveragePooling1D::clone() const {
  auto copy = std::make_unique<AveragePooling1D>(name_, options_);
  copy->copy_pooling_state(*this);
  return copy;
}

}  // namespace mdtrain
