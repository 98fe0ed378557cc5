#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "mdtrain/nn/initializer.h"
#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"
#include "mdtrain/ops/activation.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// keras.layers.Conv2D on channels_last images: y = activation(conv(x, kernel) + bias) with the
// kernel shaped (kh, kw, in_channels, filters) as Keras stores it, TF's "valid"/"same" padding,
// strides and dilation (not both > 1, as in Keras).
//
// Computed as im2col + one BLAS GEMM per chunk of output rows: the columns (B*OH*OW, kh*kw*cin) times
// the kernel viewed as (kh*kw*cin, filters) is the NHWC output directly. Each chunk runs all its
// passes (im2col, GEMM, bias + activation; backward: activation gradient, bias and kernel
// gradients, input-gradient GEMM, col2im) while it is in cache; chunks hold a chunk's columns
// and output rows within the column budget. Backward rebuilds a chunk's columns unless forward
// kept the whole batch's (see forward). A 1x1 kernel with stride 1 needs no columns at all (the
// input is its own column matrix).
//
// On a GPU the layer runs the same passes on the CUDA kernels (its buffers live on its input's
// device; the GEMMs are cuBLAS through ops::gemm). There is no cache to fit, and every chunk costs
// kernel launches and a smaller GEMM, so a chunk is the whole batch; the GPU budget only bounds
// the memory of the columns (kGpuColumnBudgetBytes).
class Conv2D : public Layer {
 public:
  struct Options {
    std::int64_t filters = 0;
    std::vector<std::int64_t> kernel_size;
    std::vector<std::int64_t> strides{1, 1};
    std::string padding = "valid";
    std::string data_format = "channels_last";
    std::vector<std::int64_t> dilation_rate{1, 1};
    std::string activation = "linear";
    bool use_bias = true;
    Json kernel_initializer = "glorot_uniform";
    Json bias_initializer = "zeros";
    Json kernel_regularizer;  // null: none
    Json bias_regularizer;
  };
  // The default bound of a chunk's columns plus its output rows: of the order of a core's L2
  // cache, and still large enough GEMMs to run at speed. (Measured single-threaded on
  // a small MNIST CNN, batch 128: 2 MB chunks ran the training step ~20% faster than 32 MB ones.)
  static constexpr std::int64_t kColumnBudgetBytes = 2 << 20;
  // The same bound on a GPU, where it only limits memory: 256 MB holds a usual batch whole (128
  // 28x28 images through a 3x3 kernel from 32 channels to 64 filters: ~170 MB in float32) and is
  // a small share of a GPU's memory; larger batches run in a few chunks.
  static constexpr std::int64_t kGpuColumnBudgetBytes = std::int64_t{256} << 20;

  Conv2D(std::string name, Options options) : Conv2D(std::move(name), std::move(options), 2, "conv2d") {}

  std::string class_name() const override { return "Conv2D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::Conv2D; }
  std::unique_ptr<Layer> with_output_share(int shards, bool drop_activation) const override;
  std::int64_t held_activation_bytes() const override {
    return bytes_of({&col_, &z_, &y_, &dz_, &dx_, &run_dw_, &run_db_});
  }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& kernel() { return weights_.kernel; }
  Parameter& bias() { return weights_.bias; }
  const Options& options() const { return options_; }
  // Output rows (of one image each) per chunk on `device`: at least 1, so the budget holds unless
  // a single output row's columns exceed it.
  std::int64_t output_rows_per_chunk(const Device& device = {}) const;
  // Sets the column budget of every device (tests use a small one to exercise chunking), in place
  // of kColumnBudgetBytes / kGpuColumnBudgetBytes. Not part of the config.
  void set_column_budget_bytes(std::int64_t bytes);
  // Into how many runs of whole images the last forward or backward split its batch over the
  // intra-op threads (1: not split).
  int last_runs() const { return last_runs_; }

 protected:
  // spatial_rank 1 is Conv1D (nn/conv1d.h): a (batch, steps, channels) input runs as the image
  // (batch, 1, steps, channels) and a kernel (k, in, filters) has the memory of (1, k, in, filters),
  // so every pass below serves both; options_ then hold 1-tuples and padding may be "causal".
  // `area` prefixes messages ("conv2d"); it must outlive the layer (a string literal).
  Conv2D(std::string name, Options options, int spatial_rank, const char* area);
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;
  // The layer's state (build, geometry, budget, weights) into a fresh copy made from options_.
  void copy_conv_state_to(Conv2D& copy) const;
  const int spatial_rank_;
  const char* area_;

 private:
  Window2D window_for(const Shape& input_shape) const;  // validated; throws naming the layer
  std::vector<std::int64_t> kernel_extents() const;     // the dilated kernel's size per spatial axis
  void check_conv_input(const Tensor& x) const;
  // The output's shape for `images` inputs: (images, out_h, out_w, filters), or (images, out_w,
  // filters) for rank 1.
  Shape output_dims(std::int64_t images) const;
  // dx_ in the input's own shape (a rank-1 layer's input was viewed as an image).
  Tensor input_gradient() const { return spatial_rank_ == 1 ? dx_.reshape({dx_.dim(0), dx_.dim(2), dx_.dim(3)}) : dx_; }
  bool pointwise() const;  // 1x1 kernel, stride 1: no columns needed
  // A (rows, kh*kw*cin) view of `buffer` (col_ or a worker's) on `device`, grown as needed.
  Tensor column_rows(Tensor& buffer, std::int64_t rows, const Device& device);
  // Backward chunk by chunk from dL/dy (through_activation) or dL/dz.
  Tensor backward_chunks(const Tensor& grad, bool through_activation, bool need_input_grad);

  // On a CPU, a batch large enough is split by ops::conv2d_image_runs into runs of whole images,
  // each run in its own chunks with its own scratch; the kernel and bias gradients are then the
  // runs' partial sums added in run order. The result is deterministic for a given thread count
  // (with several threads the gradients are summed in a different order than in one run).
  // Forward of output rows [first, last) in chunks; `col` is the run's column scratch (unused when
  // the columns are kept).
  void forward_rows(const Tensor& x, std::int64_t first, std::int64_t last, std::int64_t chunk, Tensor& col);
  // Backward of output rows [first, last) in chunks: these rows' kernel and bias gradients into
  // dw / db (overwritten), their images' input gradient into dx_; `col` and `dz` are the run's
  // scratch.
  void backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad, std::int64_t first,
                     std::int64_t last, std::int64_t chunk, Tensor dw, Tensor db, Tensor& col, Tensor& dz);

  Options options_;
  bool same_padding_ = false;
  Activation activation_;
  KernelBias weights_;  // the kernel, the bias (with use_bias) and their regularizers
  Window2D window_;     // for the last forward's input size (the built one before)
  // Per-call state: the last input; the columns (the whole batch's when columns_kept_, else one
  // chunk's; also reused for the input-gradient columns); the pre-activation when kept; the
  // output; one chunk's activation gradient; the input gradient. col_ and dz_ grow to the
  // largest size needed and are viewed.
  Tensor x_, col_, z_, y_, dz_, dx_;
  // Scratch of runs 1.. of a split batch (column and activation-gradient buffers), and every
  // run's kernel / bias gradient, (runs, kh*kw*cin*filters) and (runs, filters).
  std::vector<Tensor> run_col_, run_dz_;
  Tensor run_dw_, run_db_;
  int last_runs_ = 1;
  bool columns_kept_ = false;
  std::int64_t column_budget_bytes_ = 0;  // 0: the device's default
};

}  // namespace mdtrain
