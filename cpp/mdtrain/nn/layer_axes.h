#pragma once
// Keras's `axis` argument of the layers that work along a group of axes (Softmax,
// UnitNormalization): an int or a list of ints, counted with the batch axis, negative from the end.
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/shape.h"

namespace mdtrain {

struct LayerAxes {
  std::vector<int> given;  // as the config gives them
  bool is_list = false;    // written back as a list (Keras keeps the form it was given)

  // From a config's "axis": an int or a non-empty list of ints; std::invalid_argument naming the
  // layer otherwise.
  static LayerAxes from_json(const char* area, const std::string& layer, const Json& axis);
  Json to_json() const;
  // The axes of inputs (batch, *input_shape): each in [1, rank) once negatives are counted from the
  // end, distinct, sorted. The batch axis is refused (a result that would depend on how a batch is
  // split among replicas), as are out-of-range and repeated axes, with Keras's message.
  std::vector<int> resolve(const char* area, const std::string& layer, const Shape& input_shape) const;
  // Whether `axes` (resolved for input_shape) hold the last axis, which tensor parallelism splits.
  static bool holds_last(const std::vector<int>& axes, const Shape& input_shape);
};

}  // namespace mdtrain
