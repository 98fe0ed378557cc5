#pragma once
// A recurrent layer (SimpleRNN, LSTM, GRU: nn/recurrent_layer.h) with its units split over a
// ShardGroup: shard k of n owns units [k * u / n, (k + 1) * u / n) of every gate. Keras's weights
// are gate-major — kernel (features, G*u) is [gate 0's u columns | gate 1's | ...] — so shard k
// holds, of kernel, recurrent_kernel and bias, the columns of its units in each of the G gates,
// in the same gate-major order: kernel (features, G*u/n), recurrent_kernel (u, G*u/n) (every row:
// the recurrent GEMM reads the whole h), bias (G*u/n) or GRU's (2, G*u/n). The cell of a unit
// needs only that unit's gates, so each shard runs the unsharded cell on its u/n units.
// (copy_gate_units_out/in cut and join such pieces.)
//
// Forward, per step: h_prev (whole, gathered) @ the shard's recurrent_kernel columns, the cell on
// the shard's units, then an all-gather of the new h so every shard has the whole h for the next
// step's GEMM. The output (last h or every h) is whole on every shard. Dropout masks are drawn over
// the whole input and the whole h, as the unsharded layer draws them (keyed by global row).
//
// Backward, per step: the shard's dL/d(recurrent projection) @ its recurrent_kernel columns^T is a
// partial dL/dh_prev over its gate columns, summed over the group; each shard keeps its units'
// part. dL/dx is likewise a partial sum, summed once. Weight gradients are the shard's columns,
// computed locally. Results equal the unsharded layer's to float32 rounding (the recurrent and
// input-gradient sums add their gate columns in shard pieces).
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/nn/recurrent_weights.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"

namespace mdtrain {

class UnitParallelRecurrent : public Layer {
 public:
  // `whole`: the unsharded SimpleRNN, LSTM or GRU (its class, name and options; its weights are
  // not copied: the plan scatters them). `group` must outlive the layer and its clones; its size
  // must divide the units.
  UnitParallelRecurrent(const RecurrentLayer& whole, ShardGroup* group);

  std::string class_name() const override { return "UnitParallel" + cell_class_; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  // This shard's share: the sum over the group is the unsharded layer's penalty.
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override { return config_; }

  // The gate count G of a SimpleRNN (1), LSTM (4) or GRU (3).
  static std::int64_t gates_of(const std::string& class_name);

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  enum class Cell { SimpleRNN, LSTM, GRU };
  UnitParallelRecurrent(std::string name, std::string cell_class, Json config, RecurrentLayer::Options options,
                        ShardGroup* group);
  void step_forward(std::int64_t t);
  void step_backward(std::int64_t t);
  Tensor step_rows(const Tensor& t, std::int64_t step) const { return t.rows(step * batch_, (step + 1) * batch_); }

  std::string cell_class_;
  Cell cell_;
  Json config_;
  RecurrentLayer::Options options_;
  ShardGroup* group_;
  std::int64_t gates_, units_, local_;        // G, u, u / n
  Activation activation_ = Activation::Tanh;  // SimpleRNN's
  RecurrentWeights weights_;  // this shard's columns of kernel, recurrent_kernel, bias; the regularizers
  std::int64_t batch_ = 0, steps_ = 0;
  std::vector<std::int64_t> to_time_major_, to_batch_major_;
  // Per call, time-major: the input, its projection (G*u/n columns), the whole h of steps 0..T
  // (gathered) and this shard's units of it, the cell's per-step state, and dL/dh of its units.
  Tensor xt_, xz_, h_, h_local_, gates_buf_, c_, hz_, dh_, dxz_, dhz_, dc_, dx_gates_, dh_gates_;
  // Scratch: the gathered blocks, a partial dL/dh_prev, its piece, ones (no mask), dL/dx, outputs.
  Tensor blocks_, partial_, piece_, ones_, dy_time_major_, dxt_, dx_, y_;
  bool input_dropped_ = false, recurrent_dropped_ = false;
  Tensor input_mask_, recurrent_mask_, recurrent_mask_piece_, masked_h_, mask_scratch_;
};

// Piece k of n of a gate-major weight (last dimension G*u): the columns of units
// [k * u / n, (k + 1) * u / n) of each of the G gates, gate-major in `part` (last dimension G*u/n).
void copy_gate_units_out(const Tensor& whole, std::int64_t gates, int k, int n, Tensor& part);
// The inverse: writes `part` into the whole weight.
void copy_gate_units_in(const Tensor& part, std::int64_t gates, int k, int n, Tensor& whole);

}  // namespace mdtrain
