#include "mdtrain/nn/window_args.h"

#include <cctype>
#include <set>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

void fail_window_larger_than_input(const char* area, const std::string& layer, const std::string& window,
                                   const Shape& input_shape, int spatial_rank) {
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  const std::vector<std::int64_t> spatial(input_shape.begin(), input_shape.begin() + spatial_rank);
  fail<std::invalid_argument>("[", area, "] layer \"", layer, "\": ", window,
                              " is larger than the input's spatial size ", tuple_string(spatial),
                              " with padding=\"valid\". Received input shape ", to_string(full),
                              ", which would produce an output shape with a zero or negative value in a dimension");
}

std::string tuple_string(const std::vector<std::int64_t>& value) {
  std::string s = "(";
  for (std::size_t i = 0; i < value.size(); ++i) s += (i ? ", " : "") + std::to_string(value[i]);
  if (value.size() == 1) s += ",";
  return s + ")";
}

void check_pair_arg(const char* area, const std::string& layer, const char* arg,
                    const std::vector<std::int64_t>& value) {
  check_tuple_arg(area, layer, arg, value, 2);
}

void check_tuple_arg(const char* area, const std::string& layer, const char* arg,
                     const std::vector<std::int64_t>& value, std::size_t n, bool allow_zero) {
  const std::string what = cat("[", area, "] layer \"", layer, "\": The `", arg, "` argument must be a tuple of ", n,
                               " integers. Received ", arg, "=", tuple_string(value));
  if (value.size() != n) throw std::invalid_argument(what);
  std::set<std::int64_t> bad;
  for (auto v : value)
    if (v < 0 || (v == 0 && !allow_zero)) bad.insert(v);
  if (!bad.empty()) {
    std::string values = "{";
    for (auto v : bad) values += (values.size() > 1 ? ", " : "") + std::to_string(v);
    throw std::invalid_argument(
        cat(what, ", including values ", values, "} that do not satisfy `value ", allow_zero ? ">=" : ">", " 0`"));
  }
}

std::string check_padding_arg(const char* area, const std::string& layer, const std::string& padding,
                              bool allow_causal) {
  std::string p;
  for (char c : padding) p += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  MDTRAIN_CHECK(p == "valid" || p == "same" || (allow_causal && p == "causal"), std::invalid_argument, "[", area,
                "] layer \"", layer, "\": The `padding` argument must be one of \"valid\", \"same\"",
                allow_causal ? ", \"causal\"" : "", ". Received: padding=", padding);
  return p;
}

void check_data_format_arg(const char* area, const std::string& layer, const std::string& data_format) {
  MDTRAIN_CHECK(data_format != "channels_first", std::invalid_argument, "[", area, "] layer \"", layer,
                "\": data_format=\"channels_first\" is not supported: mdtrain's window layers take channels_last "
                "inputs (channels on the last axis)");
  MDTRAIN_CHECK(data_format == "channels_last", std::invalid_argument, "[", area, "] layer \"", layer,
                "\": The `data_format` argument must be one of {\"channels_first\", \"channels_last\"}. Received: "
                "data_format=",
                data_format);
}

void check_image_input_shape(const char* area, const std::string& layer, const Shape& input_shape) {
  if (input_shape.size() == 3) return;
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  fail<std::invalid_argument>("[", area, "] Input 0 of layer \"", layer,
                              "\" is incompatible with the layer: expected ndim=4, found ndim=", full.size(),
                              ". Full shape received: ", to_string(full));
}

void check_sequence_input_shape(const char* area, const std::string& layer, const Shape& input_shape) {
  if (input_shape.size() == 2) return;
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  fail<std::invalid_argument>("[", area, "] Input 0 of layer \"", layer,
                              "\" is incompatible with the layer: expected ndim=3, found ndim=", full.size(),
                              ". Full shape received: ", to_string(full));
}

std::vector<std::int64_t> tuple_from_json(const Json& value, std::size_t n) {
  if (value.is_number()) return std::vector<std::int64_t>(n, value.as_int());
  std::vector<std::int64_t> out;
  for (const auto& v : value.as_array()) out.push_back(v.as_int());
  return out;
}

std::vector<std::int64_t> pair_from_json(const Json& value) {
  if (value.is_number()) return {value.as_int(), value.as_int()};
  std::vector<std::int64_t> out;
  for (const auto& v : value.as_array()) out.push_back(v.as_int());
  return out;
}

Json pair_to_json(const std::vector<std::int64_t>& value) {
  Json a = Json::array();
  for (auto v : value) a.push_back(Json(v));
  return a;
}

Shape with_spatial_stand_ins(const Shape& input_shape, const std::vector<std::int64_t>& extents) {
  Shape probe = input_shape;
  for (std::size_t i = 0; i + 1 < probe.size() && i < extents.size(); ++i)
    if (probe[i] == kUnknownDim) probe[i] = extents[i];
  return probe;
}

Shape with_unknown_spatial_dims(const Shape& input_shape, Shape output_shape) {
  for (std::size_t i = 0; i + 1 < input_shape.size() && i + 1 < output_shape.size(); ++i)
    if (input_shape[i] == kUnknownDim) output_shape[i] = kUnknownDim;
  return output_shape;
}

bool window_fits(const Window2D& g, const Tensor& x) {
  if (x.ndim() == 3) return g.in_h == 1 && g.in_w == x.dim(1);
  return x.ndim() == 4 && g.in_h == x.dim(1) && g.in_w == x.dim(2);
}

}  // namespace mdtrain
