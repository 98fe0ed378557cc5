#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/activation.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// keras.layers.Conv2DTranspose on channels_last images: y = activation(conv_transpose(x, kernel)
// + bias) with the kernel shaped (kh, kw, filters, in_channels) as Keras stores it, padding
// "valid" or "same", strides, dilation (not both > 1) and output_padding, the output size being
// Keras's compute_conv_transpose_output_shape:
//   valid: (in - 1) * s + e + output_padding, output_padding None meaning max(e, s) - e
//   same:  in * s when output_padding is None, else (in - 1) * s + e % 2 + output_padding
// with e = (k - 1) * d + 1 the dilated kernel.
//
// A transposed convolution is the adjoint of the convolution that maps its output back to its
// input (a Conv2D from `filters` to in_channels channels with the same kernel memory, TF's
// padding computed on the transposed output's size), so it is built from Conv2D's pieces:
//   forward       = that conv's input gradient: columns = x @ kernel^T, then col2im;
//   input grad    = that conv's forward: im2col(dy) @ kernel;
//   kernel grad   = im2col(dy)^T @ x.
// The batch runs in chunks of whole images whose columns fit the column budget (all of it at
// once on a GPU, within kGpuColumnBudgetBytes).
//
// spatial_rank 1 is Conv1DTranspose: a (batch, steps, channels) input runs as the image (batch,
// 1, steps, channels) and the kernel (k, filters, in) has the memory of (1, k, filters, in).
// Tensor parallelism: replicated only (TensorParallelForm::None).
class Conv2DTranspose : public Layer {
 public:
  struct Options {
    std::int64_t filters = 0;
    std::vector<std::int64_t> kernel_size;
    std::vector<std::int64_t> strides{1, 1};
    std::string padding = "valid";
    std::vector<std::int64_t> output_padding;  // empty: None (Keras's default)
    std::string data_format = "channels_last";
    std::vector<std::int64_t> dilation_rate{1, 1};
    std::string activation = "linear";
    bool use_bias = true;
    Json kernel_initializer = "glorot_uniform";
    Json bias_initializer = "zeros";
    Json kernel_regularizer;  // null: none
    Json bias_regularizer;
  };
  // Bounds of a chunk's columns, as Conv2D's (cache-sized on a CPU, memory-bounding on a GPU).
  static constexpr std::int64_t kColumnBudgetBytes = 2 << 20;
  static constexpr std::int64_t kGpuColumnBudgetBytes = std::int64_t{256} << 20;

  Conv2DTranspose(std::string name, Options options)
      : Conv2DTranspose(std::move(name), std::move(options), 2, "conv2d_transpose") {}

  std::string class_name() const override { return "Conv2DTranspose"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&col_, &z_, &y_, &dz_, &dx_}); }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& kernel() { return weights_.kernel; }
  Parameter& bias() { return weights_.bias; }
  const Options& options() const { return options_; }
  // Sets the column budget of every device (tests use a small one to exercise chunking).
  void set_column_budget_bytes(std::int64_t bytes);
  // Whole images per chunk on `device` (at least 1).
  std::int64_t images_per_chunk(const Device& device = {}) const;

 protected:
  // `area` prefixes messages ("conv2d_transpose"); it must outlive the layer (a string literal).
  Conv2DTranspose(std::string name, Options options, int spatial_rank, const char* area);
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;
  void copy_state_to(Conv2DTranspose& copy) const;
  // Options from a Keras config with n-tuples (an integer n reads as n copies).
  static Options options_from_config(const Json& config, std::size_t rank);
  const int spatial_rank_;
  const char* area_;

 private:
  // The window of the convolution this layer is the transpose of: its input is the transposed
  // output (out_h x out_w x filters), its output the transposed input. Validated; throws naming
  // the layer.
  Window2D window_for(const Shape& input_shape) const;
  void check_transpose_input(const Tensor& x) const;
  Shape output_dims(std::int64_t images) const;
  Tensor backward_chunks(const Tensor& grad, bool through_activation, bool need_input_grad);

  Options options_;
  Activation activation_;
  KernelBias weights_;
  Window2D window_;
  // Per call: the input (as an image), the columns of one chunk, the pre-activation when kept,
  // the output, one chunk's activation gradient, the input gradient.
  Tensor x_, col_, z_, y_, dz_, dx_;
  std::int64_t column_budget_bytes_ = 0;  // 0: the device's default
};

// keras.layers.Conv1DTranspose on channels_last sequences (batch, steps, channels), kernel
// (kernel_size, filters, in_channels): Conv2DTranspose's passes on the one-row image.
class Conv1DTranspose : public Conv2DTranspose {
 public:
  // Options hold 1-tuples.
  Conv1DTranspose(std::string name, Options options)
      : Conv2DTranspose(std::move(name), std::move(options), 1, "conv1d_transpose") {}
  std::string class_name() const override { return "Conv1DTranspose"; }
  std::unique_ptr<Layer> clone() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);
};

// Keras's output length of a transposed convolution along one axis (see Conv2DTranspose);
// output_padding < 0 means None.
std::int64_t conv_transpose_output_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same,
                                        std::int64_t output_padding);

}  // namespace mdtrain
