#pragma once
#include <memory>
#include <vector>

#include "mdtrain/nn/gamma_beta.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// keras.layers.BatchNormalization on the last (channels) axis of inputs of any rank >= 2:
// statistics per channel over every other axis (the batch, and the positions of a (B, H, W, C)
// feature map).
//
// Training (ForwardContext::training): y = gamma * (x - mean) / sqrt(var + epsilon) + beta with the
// batch mean and biased variance (Keras 3's ops.moments), and
//   moving_mean = moving_mean * momentum + mean * (1 - momentum)   (the same for moving_variance),
// gradients flowing through the batch statistics. Inference: the moving statistics instead.
// Weights in Keras's order: gamma (if scale), beta (if center), moving_mean, moving_variance; the
// last two are non-trainable (no gradient, not the optimizer's).
//
// Under several replicas (ForwardContext::replicas):
//  - synchronized: the statistics are those of the global batch: one float64 all-reduce of
//    (count, sum, sum of squares) per channel in forward, one of (sum dy, sum dy * xhat) in
//    backward. N replicas give the outputs, gradients and moving statistics of one replica on the
//    whole batch (up to rounding).
//  - not synchronized (Keras's default): each replica normalizes with its own slice's statistics,
//    as Keras on tf.distribute; the moving statistics are updated with the replicas' statistics
//    averaged (one float64 all-reduce in forward), so they stay bitwise identical everywhere.
// A replica with no rows in a step still joins those all-reduces (forward_without_rows).
//
// On a GPU, x, y, xhat and dx stay on the device and the ops run there; the per-channel
// statistics (a few KB of float64) come to the host, where the per-channel arithmetic (counts,
// variances, moving averages) and the cross-replica sums run, and go back for the next op.
class BatchNormalization : public Layer {
 public:
  struct Options {
    std::int64_t axis = -1;  // only the last axis (-1 or its index) is supported
    double momentum = 0.99;
    double epsilon = 1e-3;
    bool center = true;  // beta
    bool scale = true;   // gamma
    Json beta_initializer = "zeros";
    Json gamma_initializer = "ones";
    Json moving_mean_initializer = "zeros";
    Json moving_variance_initializer = "ones";
    Json beta_regularizer;  // null: none
    Json gamma_regularizer;
    bool synchronized = false;
  };
  BatchNormalization(std::string name, Options options);

  std::string class_name() const override { return "BatchNormalization"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  void forward_without_rows(const ForwardContext& ctx) override;
  // Deferred statistics (pipeline micro-batches): the moving statistics move once, to the mean and
  // (population) variance of every recorded micro-batch together (Chan's combination of their
  // counts, means and variances, over the replicas too), as one forward on the whole global batch
  // would move them. Not with synchronized=True (std::invalid_argument at the forward).
  void apply_deferred_statistics(CrossReplicaContext* replicas) override;
  // `to` must be a BatchNormalization of as many channels (std::invalid_argument otherwise).
  void move_deferred_statistics_to(Layer& to) override;
  void backward_without_rows(bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&host_stats_, &stats_, &xhat_, &y_, &dx_}); }
  bool has_cuda_kernels() const override { return true; }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

  const Options& options() const { return options_; }
  Parameter& gamma() { return gamma_beta_.gamma; }
  Parameter& beta() { return gamma_beta_.beta; }
  Parameter& moving_mean() { return moving_mean_; }
  Parameter& moving_variance() { return moving_variance_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  // Rows of the per-channel float64 tables: what one op reads or writes together is adjacent, so
  // one copy moves it between the host and a GPU. kSumA/kSumB receive the ops' per-channel
  // results (moments, sums, gradient sums).
  enum StatRow { kMean, kInvStd, kSumA, kSumB, kScale, kMeanDy, kMeanDyXhat, kShift, kStatRows };

  void allocate_statistics();
  // stats_ on `device`: host_stats_ itself for a CPU device, else a table on that GPU.
  void place_statistics(const Device& device);
  Tensor stat(StatRow row) const;  // a row of stats_, (channels,), for the ops
  double* host_stat(StatRow row);  // the same row of host_stats_
  // host_stats_ rows [first, last] to stats_, or back; nothing to do when both are the host's.
  void upload(StatRow first, StatRow last);
  void download(StatRow first, StatRow last);
  // Sets the mean row, var_ and count_ from this replica's x (rows may be 0) and the other
  // replicas', and updates the moving statistics.
  void training_statistics(const Tensor& x2d, std::int64_t rows);
  void update_moving_statistics(const double* mean, const double* var);

  Options options_;
  GammaBeta gamma_beta_;  // gamma (with scale), beta (with center) and their regularizers
  Parameter moving_mean_, moving_variance_;
  std::int64_t channels_ = 0;

  // Per-call state. The statistics of the last forward (float64, per channel) on the host and on
  // the input's device, the variances behind them, the number of values they were taken over
  // (global when synchronized), whether that forward was a training one and with which replicas
  // (backward's all-reduce goes to the same ones).
  Tensor host_stats_, stats_;  // (kStatRows, channels)
  std::vector<double> var_;
  std::vector<double> exchange_;  // the buffer all-reduced across replicas
  double count_ = 0;
  bool last_training_ = false;
  CrossReplicaContext* replicas_ = nullptr;
  // Deferred statistics: the forward's mode, and per recorded micro-batch its count, then its
  // per-channel means and variances.
  bool defer_ = false, recompute_ = false;
  std::vector<double> deferred_counts_, deferred_means_, deferred_vars_;
  Tensor xhat_, y_, dx_;
  Shape last_input_shape_;
};

// A Keras "axis" config value: an integer or a list of one integer.
std::int64_t normalization_axis_from_json(const std::string& layer, const Json& axis);

// compute_output_shape's check for a layer that normalizes over the last axis only
// (BatchNormalization, LayerNormalization): an input_shape (without the batch) of rank >= 1 and
// `axis` -1 or the last axis's index. Throws std::invalid_argument prefixed "[area]", naming the
// layer, its input shape and `last_axis` (how the layer calls that axis, e.g. "the last axis");
// `features` names what the last axis holds.
void check_last_axis_input(const char* area, const std::string& layer, std::int64_t axis, const Shape& input_shape,
                           const char* features, const char* last_axis);

}  // namespace mdtrain
