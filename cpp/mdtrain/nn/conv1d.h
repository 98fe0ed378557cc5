#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/conv2d.h"

namespace mdtrain {

// keras.layers.Conv1D on channels_last sequences (batch, steps, channels): y = activation(conv(x,
// kernel) + bias) with the kernel shaped (kernel_size, in_channels, filters) as Keras stores it,
// padding "valid", "same" (TF's) or "causal" (dilation * (kernel_size - 1) zeros before the first
// step), strides and dilation (not both > 1, as in Keras).
//
// The sequence is the image (batch, 1, steps, channels) and the kernel has the memory of a Conv2D
// kernel (1, k, in, filters), so Conv2D's passes (im2col + GEMM in cache-sized chunks, the CUDA
// kernels on a GPU) compute it; this class only gives it Keras's 1-D shapes, arguments and name.
// Tensor parallelism: replicated only (TensorParallelForm::None), since the column-parallel
// split of nn/tensor_parallel is written for 4-D Conv2D kernels.
class Conv1D : public Conv2D {
 public:
  // Options hold 1-tuples: kernel_size {k}, strides {s}, dilation_rate {d}.
  Conv1D(std::string name, Options options) : Conv2D(std::move(name), std::move(options), 1, "conv1d") {}

  std::string class_name() const override { return "Conv1D"; }
  std::unique_ptr<Layer> clone() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::None; }
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);
  // Conv1D's kernel_size, strides and dilation_rate in a Keras config: an integer n is (n,).
  static Options options_from_config(const Json& config);
};

}  // namespace mdtrain
