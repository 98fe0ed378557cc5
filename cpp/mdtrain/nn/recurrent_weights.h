#pragma once
// What a recurrent layer's weights and the bookkeeping around them are, shared by RecurrentLayer
// (nn/recurrent_layer.h) and its unit-parallel shard (nn/tensor_parallel/unit_parallel_recurrent.h),
// which hold the same three weights (all of a layer's gate columns, or a shard's) and run the same
// time-major layout around their cells.
#include <cstdint>
#include <memory>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// kernel (features, C), recurrent_kernel (units, C) and, with use_bias, bias (C,) or (2, C) (GRU's
// reset_after: input bias, recurrent bias), C the gate columns; with their regularizers.
struct RecurrentWeights {
  RecurrentWeights() = default;
  // The regularizers from their configs (null: none).
  RecurrentWeights(bool use_bias, const Json& kernel_regularizer, const Json& recurrent_regularizer,
                   const Json& bias_regularizer);

  // kernel, recurrent_kernel, then bias (with use_bias).
  std::vector<Parameter*> parameters();
  double regularization_loss() const;
  void add_regularization_gradients();
  // `copy` gets deep copies of these values (a layer's clone()).
  void copy_values_to(RecurrentWeights& copy) const;
  // The input part of a bias (or its gradient): all of it unless it has 2 rows, then row 0.
  static Tensor input_bias(const Tensor& b, std::int64_t columns) {
    return b.reshape({-1, columns}).rows(0, 1).reshape({-1});
  }
  // The input projection of every step: xz = xt @ kernel + the input bias (time-major rows).
  void project_inputs(const Tensor& xt, Tensor& xz) const;
  // Backward's weight gradients over all steps (time-major rows): kernel = xt^T dxz,
  // recurrent_kernel = h_prev^T dhz, bias = dxz's column sums (input part) and dhz's (the recurrent
  // row of a 2-row bias).
  void set_gradients(const Tensor& xt, const Tensor& h_prev, const Tensor& dxz, const Tensor& dhz);

  bool use_bias = true;
  std::shared_ptr<Regularizer> kernel_reg, recurrent_reg, bias_reg;
  Parameter kernel, recurrent_kernel, bias;
};

// Row t * batch + b of the time-major layout is row b * steps + t' of a (batch, steps, ...) input,
// t' the t-th step read (reversed with go_backwards): `to_time_major`. `to_batch_major`: for output
// row b * steps + t, the row of h (steps + 1 blocks of batch rows, block 0 the initial state) of
// step t, i.e. (t + 1) * batch + b.
void recurrent_time_major_order(std::int64_t batch, std::int64_t steps, bool go_backwards,
                                std::vector<std::int64_t>& to_time_major, std::vector<std::int64_t>& to_batch_major);
// dL/dh in time-major rows (batch * steps, units) from the output's gradient `dy`: every step's
// (return_sequences, (batch, steps, units)) or the last step's ((batch, units); zeros before it).
void recurrent_output_grad_time_major(const Tensor& dy, std::int64_t batch, std::int64_t steps, std::int64_t units,
                                      bool return_sequences, Tensor& dh);
// dL/dx back in the input's batch-major rows from time-major `dxt` (batch * steps, features).
void recurrent_input_grad_batch_major(const Tensor& dxt, const std::vector<std::int64_t>& to_time_major, Tensor& dx);
// A (rows, cols) dropout mask (0 or 1/(1-rate)) keyed by (seed, stream, global row), through ops::dropout
// on ones: one mask per sequence, as Keras's recurrent layers draw it.
void draw_recurrent_dropout_mask(Tensor& mask, Tensor& scratch, double rate, std::uint64_t seed, std::uint64_t stream,
                                 std::int64_t first_row);

// Each step's block of rows of a time-major tensor (steps blocks of mask.dim(0) rows) times `mask`,
// in place: a dropout mask applied at every step.
void multiply_each_step(Tensor& time_major, const Tensor& mask);

}  // namespace mdtrain
