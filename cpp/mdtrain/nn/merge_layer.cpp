#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

void MergeLayer::build_inputs(const std::vector<Shape>& input_shapes, DType dtype) {
  MDTRAIN_CHECK(input_shapes.size() >= 2, std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                "\" should be called on a list of at least 2 inputs, got ", input_shapes.size());
  for (const auto& s : input_shapes)
    MDTRAIN_CHECK(!has_unknown_dim(s), std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                  "\" needs every dimension of its inputs known, got input shape ", to_string(s));
  output_shape_ = merged_shape(input_shapes);
  input_shapes_ = input_shapes;
  input_shape_ = input_shapes.front();
  dtype_ = dtype;
  built_ = true;
  after_build();
}

Shape MergeLayer::compute_output_shape(const Shape&) const {
  fail<std::logic_error>("[layers] ", class_name(), " layer \"", name_, "\" takes a list of inputs");
}

Tensor MergeLayer::forward(const Tensor&, const ForwardContext&) {
  fail<std::logic_error>("[layers] ", class_name(), " layer \"", name_,
                         "\" takes a list of inputs: it runs inside a functional model only");
}

Tensor MergeLayer::backward(const Tensor&, bool) {
  fail<std::logic_error>("[layers] ", class_name(), " layer \"", name_,
                         "\" takes a list of inputs: it runs inside a functional model only");
}

void MergeLayer::check_inputs(const std::vector<Tensor>& x) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[layers] ", class_name(), " layer \"", name_, "\" is not built");
  MDTRAIN_CHECK(x.size() == input_shapes_.size(), std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                "\" expects ", input_shapes_.size(), " inputs, got ", x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    Shape got(x[k].shape().begin() + (x[k].ndim() > 0 ? 1 : 0), x[k].shape().end());
    MDTRAIN_CHECK(x[k].ndim() >= 1 && got == input_shapes_[k] && x[k].dim(0) == x[0].dim(0), std::invalid_argument,
                  "[layers] Input ", k, " of layer \"", name_,
                  "\" is incompatible with the layer: expected shape=", to_string(input_shapes_[k]),
                  " (batch axis excluded), found shape=", to_string(x[k].shape()));
  }
}

}  // namespace mdtrain
