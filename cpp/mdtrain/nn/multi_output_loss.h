#pragma once
// The loss of a model with several outputs, as Keras 3's compile builds it from a loss per output:
// total = sum over outputs of weight_k * loss_k, each loss_k the mean over its own output
// ("sum_over_batch_size": batch x time for a sequence output). Executors see it as one Loss over
// the packed prediction (batch, sum of the outputs' sizes: each output flattened, side by side, as
// LayerGraph packs them) and packed labels (batch, sum of the labels' sizes, float columns: a
// sparse class id is exact in float32). Its sample_count is the rows, so a strategy's
// batch_loss_scale hands it 1 / global rows; each output's own positions per row are applied
// here, so every output keeps Keras's divisor however the batch is split across replicas.
// Labels whose count depends on their values (ignore_class) are refused: each output would need
// its own count summed over the replicas, which the one-count-per-loss interface cannot carry.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/loss.h"

namespace mdtrain {

class MultiOutputLoss final : public Loss {
 public:
  struct Output {
    std::string name;                  // the output layer's name (Keras's output name)
    std::shared_ptr<const Loss> loss;  // "sum_over_batch_size" over this output
    double weight = 1.0;               // Keras's loss_weights entry
    Shape pred_shape;                  // the output's shape without the batch axis
  };

  // Throws std::invalid_argument naming the output when a loss is missing, counts its labels
  // (ignore_class) or is itself a MultiOutputLoss, or a shape is empty.
  explicit MultiOutputLoss(std::vector<Output> outputs);

  std::string name() const override { return "multi_output_loss"; }
  std::string class_name() const override { return "MultiOutputLoss"; }

  // The weighted sum over outputs of each output's row-normalised sum (its loss sum times rows /
  // its sample count), so that (sum over slices) / global rows = sum_k weight_k * mean_k.
  double sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) const override;
  // Packed shapes: y_pred (batch, pred_width()), y_true (batch, label_width()); then each output.
  void validate(const Tensor& y_true, const Tensor& y_pred) const override;
  // The rows of the slice (each output's positions per row are applied inside forward_backward).
  std::int64_t sample_count(const Tensor& y_true, const Tensor& y_pred) const override;

  // {"name", "reduction", "outputs": [{"name", "weight", "shape", "loss": <loss config>}]}
  Json config() const override;
  std::unique_ptr<Loss> clone() const override { return std::make_unique<MultiOutputLoss>(*this); }

  const std::vector<Output>& outputs() const { return outputs_; }
  // Output k's labels without the batch axis: its shape without the last axis for
  // SparseCategoricalCrossentropy (one class id per position), its shape otherwise.
  const Shape& label_shape(std::size_t k) const { return label_shapes_[k]; }
  std::int64_t pred_width() const { return pred_width_; }
  std::int64_t label_width() const { return label_width_; }
  // Copies output k's columns of the packed labels and prediction into *y_true_k (batch,
  // label_shape(k)) and *y_pred_k (batch, pred_shape), allocating them when their shape differs.
  void output_slice(std::size_t k, const Tensor& y_true, const Tensor& y_pred, Tensor* y_true_k,
                    Tensor* y_pred_k) const;
  // Output k's loss sum on its slice divided by its positions per row: summed over a batch's
  // slices and divided by the batch's rows, it is output k's (unweighted) mean loss.
  double output_row_sum(std::size_t k, const Tensor& y_true_k, const Tensor& y_pred_k) const;

 private:
  std::vector<Output> outputs_;
  std::vector<Shape> label_shapes_;
  std::vector<std::int64_t> pred_offsets_, label_offsets_;
  std::int64_t pred_width_ = 0, label_width_ = 0;
};

// Inverse of MultiOutputLoss::config() (loss_from_config dispatches "MultiOutputLoss" here).
std::unique_ptr<Loss> multi_output_loss_from_config(const Json& config);

}  // namespace mdtrain
