#include "mdtrain/nn/conv1d.h"

#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/window_args.h"

namespace mdtrain {

std::unique_ptr<Layer> Conv1D::clone() const {
  auto copy = std::make_unique<Conv1D>(name_, options());
  copy_conv_state_to(*copy);
  return copy;
}

Conv2D::Options Conv1D::options_from_config(const Json& c) {
  Options o;
  o.filters = c.at("filters").as_int();
  o.kernel_size = tuple_from_json(c.at("kernel_size"), 1);
  o.strides = tuple_from_json(c.get("strides", Json(1)), 1);
  o.padding = c.get("padding", "valid").as_string();
  o.data_format = c.get("data_format", "channels_last").as_string();
  o.dilation_rate = tuple_from_json(c.get("dilation_rate", Json(1)), 1);
  read_kernel_bias_config(c, o);
  return o;
}

std::unique_ptr<Layer> Conv1D::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  MDTRAIN_CHECK(c.get("groups", 1).as_int() == 1, std::invalid_argument, "[layers] Conv1D \"", name,
                "\": groups other than 1 are not supported");
  return std::make_unique<Conv1D>(name, options_from_config(c));
}

}  // namespace mdtrain
