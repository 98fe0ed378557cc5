#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/pooling2d.h"

namespace mdtrain {

// keras.layers.MaxPooling1D and AveragePooling1D on channels_last sequences (batch, steps,
// channels), TF's "valid"/"same" padding. A sequence pools as the image (batch, 1, steps,
// channels) with a (1, pool_size) window, so the 2-D pools' kernels (CPU and CUDA) compute them;
// these classes give them Keras's 1-D shapes, arguments (1-tuples) and names.

// The options of a Keras 1-D pooling config: pool_size (default 2), strides (null or absent:
// pool_size), padding, data_format; an integer n is (n,); unknown fields are ignored.
Pooling2D::Options pooling1d_options_from_config(const Json& config);

class MaxPooling1D : public MaxPooling2D {
 public:
  MaxPooling1D(std::string name, Options options)
      : MaxPooling2D(std::move(name), std::move(options), "max_pooling1d", 1) {}
  std::string class_name() const override { return "MaxPooling1D"; }
  static std::unique_ptr<Layer> from_config(const Json& config);
  std::unique_ptr<Layer> clone() const override;
};

class AveragePooling1D : public AveragePooling2D {
 public:
  AveragePooling1D(std::string name, Options options)
      : AveragePooling2D(std::move(name), std::move(options), "average_pooling1d", 1) {}
  std::string class_name() const override { return "AveragePooling1D"; }
  static std::unique_ptr<Layer> from_config(const Json& config);
  std::unique_ptr<Layer> clone() const override;
};

}  // namespace mdtrain
