#include "mdtrain/nn/layer_axes.h"

#include <algorithm>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {
int int_axis(const char* area, const std::string& layer, const Json& a, const Json& whole) {
  MDTRAIN_CHECK(a.is_number() && a.as_number() == static_cast<double>(static_cast<int>(a.as_number())),
                std::invalid_argument, "[", area, "] layer \"", layer,
                "\": Invalid value for `axis` argument: expected an int or a list/tuple of ints. Received: axis=",
                whole.dump());
  return static_cast<int>(a.as_number());
}
}  // namespace

LayerAxes LayerAxes::from_json(const char* area, const std::string& layer, const Json& axis) {
  LayerAxes out;
  if (axis.is_array()) {
    out.is_list = true;
    for (const Json& a : axis.as_array()) out.given.push_back(int_axis(area, layer, a, axis));
    MDTRAIN_CHECK(!out.given.empty(), std::invalid_argument, "[", area, "] layer \"", layer,
                  "\": `axis` must name at least one axis, got axis=[]");
  } else {
    out.given.push_back(int_axis(area, layer, axis, axis));
  }
  return out;
}

Json LayerAxes::to_json() const {
  if (!is_list) return Json(given.front());
  Json::Array a;
  for (int v : given) a.emplace_back(v);
  return Json(a);
}

std::vector<int> LayerAxes::resolve(const char* area, const std::string& layer, const Shape& input_shape) const {
  const int rank = static_cast<int>(input_shape.size()) + 1;
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  std::vector<int> axes;
  for (int a : given) {
    MDTRAIN_CHECK(a < rank && a >= -rank, std::invalid_argument, "[", area, "] layer \"", layer, "\": Axis ",
                  to_json().dump(), " is out of bounds for input shape ", to_string(full), ".");
    const int r = a < 0 ? a + rank : a;
    MDTRAIN_CHECK(r != 0, std::invalid_argument, "[", area, "] layer \"", layer, "\": axis ", to_json().dump(),
                  " includes the batch axis of input shape ", to_string(full),
                  ", which mdtrain does not support (the result would depend on how a batch is split)");
    MDTRAIN_CHECK(std::find(axes.begin(), axes.end(), r) == axes.end(), std::invalid_argument, "[", area, "] layer \"",
                  layer, "\": axis ", to_json().dump(), " names axis ", r, " twice for input shape ", to_string(full));
    axes.push_back(r);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

bool LayerAxes::holds_last(const std::vector<int>& axes, const Shape& input_shape) {
  return std::find(axes.begin(), axes.end(), static_cast<int>(input_shape.size())) != axes.end();
}

}  // namespace mdtrain
