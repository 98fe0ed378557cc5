#pragma once
#include <memory>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/recurrent_weights.h"
#include "mdtrain/nn/regularizer.h"
#include "mdtrain/nn/sequence_mask.h"

namespace mdtrain {

// What Keras's recurrent layers (SimpleRNN, LSTM, GRU) share, on inputs (batch, timesteps,
// features) with Keras's weights kernel (features, G*u), recurrent_kernel (u, G*u) and bias (G*u,
// or (2, G*u) for GRU's reset_after), G the cell's gate count. Output: the last h (batch, u), or
// every step's h (batch, timesteps, u) with return_sequences; go_backwards reads the sequence last
// step first (and, as in Keras, returns the steps in that reversed order).
//
// Runs time-major (row t * batch + b): the input projection of every step is one GEMM
// ((timesteps * batch, features) @ kernel + input bias); the cell then runs step by step (one GEMM
// h_prev @ recurrent_kernel and its element-wise op, ops/recurrent.h) and keeps what backward
// through time needs. Backward runs the steps in reverse; the weight gradients and dL/dx are then
// one GEMM each over all steps.
//
// Masks (nn/sequence_mask.h), as Keras: at a masked step of a sequence the state (h, and LSTM's c)
// is carried over unchanged and the step's output is the carried h (zeros at the start); the step's
// input has no effect, and backward through time passes dL/dh (and dL/dc) straight through it. The
// output carries the mask with return_sequences, none otherwise.
class RecurrentLayer : public Layer, public MaskedLayer {
 public:
  struct Options {
    std::int64_t units = 0;
    std::string activation = "tanh";
    std::string recurrent_activation = "sigmoid";  // LSTM, GRU
    bool use_bias = true;
    Json kernel_initializer = "glorot_uniform";
    Json recurrent_initializer = "orthogonal";
    Json bias_initializer = "zeros";
    bool unit_forget_bias = true;                                      // LSTM: the forget gate's bias starts at 1
    bool reset_after = true;                                           // GRU: only true (Keras's default) for now
    Json kernel_regularizer, recurrent_regularizer, bias_regularizer;  // null: none
    bool return_sequences = false;
    bool go_backwards = false;
    // Keras's dropout (on the inputs) and recurrent_dropout (on h_prev before the recurrent GEMM),
    // in training only: one mask per sequence, the same at every time step, as Keras draws it. The
    // masks are a function of (seed, optimizer step, global row), like Dropout's, so the replica
    // split does not change them.
    double dropout = 0.0;
    double recurrent_dropout = 0.0;
    std::uint64_t seed = 0;
  };

  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  Json config() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::Recurrent; }
  // Every step's state (time-major), masks and backward scratch; cells add theirs.
  std::int64_t held_activation_bytes() const override;
  // The cells' element-wise steps have CUDA kernels (ops/recurrent.h); the rest is ops::gemm etc.
  bool has_cuda_kernels() const override { return true; }
  void set_input_mask(const Tensor& mask) override { input_mask_seq_ = mask; }
  Tensor output_mask() const override { return options_.return_sequences ? input_mask_seq_ : Tensor(); }
  bool output_masked(bool input_masked) const override { return input_masked && options_.return_sequences; }

  const Options& options() const { return options_; }

  // --- State API (Keras's initial_state / return_state; the wavefront pipeline's time chunks) ---
  // The number of state tensors: 1 (h), 2 for LSTM (h, c); each (batch, units).
  virtual std::int64_t state_count() const { return 1; }
  // forward() from the given initial states (state_count() tensors of (batch, units), in Keras's
  // order; empty: zeros, as forward()). The states are copied; the layer's state API then holds
  // the final states (final_state()).
  Tensor forward_from_state(const Tensor& x, const std::vector<Tensor>& initial_state, const ForwardContext& ctx);
  // The states after the last forward's last step (views into the layer's buffers, valid until
  // its next forward): h (the last h read, whatever go_backwards), and c for LSTM.
  std::vector<Tensor> final_state() const;
  // backward() with dL/d(final states) added (empty: none, as backward()). With
  // need_state_grad, initial_state_gradient() then holds dL/d(initial states).
  Tensor backward_with_state(const Tensor& dy, const std::vector<Tensor>& final_state_grad, bool need_input_grad,
                             bool need_state_grad);
  // dL/d(initial states) of the last backward_with_state(need_state_grad = true).
  const std::vector<Tensor>& initial_state_gradient() const { return initial_state_grad_; }

 protected:
  // area: the error prefix ("lstm"); gates: G.
  RecurrentLayer(std::string name, Options options, std::string area, std::int64_t gates);
  // Keras's config fields every recurrent layer reads; the ones mdtrain has not (dropout,
  // recurrent_dropout, return_state, stateful, constraints) must hold their "off" value.
  static Options options_from_config(const Json& config, const char* area);
  void copy_weights_to(RecurrentLayer& copy) const;

  void build_weights(const Shape& input_shape, std::uint64_t seed) override;
  // The bias's shape and initial value (bias_initializer over all of it by default).
  virtual Shape bias_shape() const { return {gates_ * options_.units}; }
  virtual void init_bias(Tensor& /*bias*/) {}
  // Step t forward: xz_ rows of step t hold the input projection (input bias added); reads h_
  // rows of step t (h_prev), writes h_ rows of step t + 1.
  virtual void step_forward(std::int64_t t) = 0;
  // Step t backward: dh_ rows of step t hold the whole dL/dh_t; writes dxz_ and dhz_ rows of
  // step t (dL/d of the input and recurrent projections) and may add into dh_ rows of step t - 1.
  virtual void step_backward(std::int64_t t) = 0;
  // Before the first step_backward (of the last step): buffers and dL/d(cell state) to start from.
  virtual void begin_backward_steps() {}
  // The per-step buffers the cell keeps, sized for `rows` = timesteps * batch.
  virtual void ensure_cell_buffers(std::int64_t rows) = 0;
  // State API hooks of cells with more state than h (LSTM's c): copy the initial states[1..] in
  // after ensure_cell_buffers; append the final states; seed dL/dc of the last step from
  // final_state_grad_ (zeros when absent); append dL/d(initial cell states) after step 0.
  virtual void load_initial_cell_state(const std::vector<Tensor>& /*states*/) {}
  virtual void append_final_cell_state(std::vector<Tensor>& /*states*/) const {}
  virtual void append_initial_cell_gradient(std::vector<Tensor>& /*grads*/) const {}
  // acc += g (same element count), through a ones buffer (any device).
  static void add_into(const Tensor& g, Tensor& acc, Tensor& ones);
  // Masked steps: the cell's own state other than h (LSTM's c) at time-major row `row` of step t + 1
  // takes its value at step t; and in backward, dL/d of that state at `row` is put aside (and zeroed)
  // before the step and put back after it (`hold` true, then false), so it passes the step unchanged.
  virtual void carry_cell_state(std::int64_t /*t*/, std::int64_t /*row*/) {}
  virtual void hold_cell_gradient(std::int64_t /*row*/, bool /*hold*/) {}
  // After backward's weight GEMMs: what a cell adds to the weight gradients beyond
  // h_prev^T @ dhz_ (GRU with reset_after=false).
  virtual void add_cell_weight_gradients() {}
  // Recurrent dropout of the last forward: whether applied, and its (batch, u) mask.
  bool recurrent_dropped() const { return recurrent_dropped_; }
  const Tensor& recurrent_mask() const { return recurrent_mask_; }
  Tensor step_rows(const Tensor& t, std::int64_t step) const { return t.rows(step * batch_, (step + 1) * batch_); }
  // h_prev of step t as the recurrent GEMM takes it (recurrent dropout applied when active).
  Tensor recurrent_input(std::int64_t t);

  Options options_;
  std::string area_;
  std::int64_t gates_;
  RecurrentWeights weights_;  // kernel, recurrent_kernel, bias and their regularizers
  std::int64_t batch_ = 0, steps_ = 0;
  // Per-call state, time-major: the input, its projection, h of steps 0..T (step 0: zeros),
  // dL/dh, and the cell's dL/d(input projection) and dL/d(recurrent projection) (which may be
  // one buffer: dhz_ aliasing dxz_).
  Tensor xt_, xz_, h_, dh_, dxz_, dhz_;
  // State API: dL/d(final states) of the running backward_with_state (empty: none), and
  // dL/dh_0 while it is wanted (defined: cells add their direct part of dL/dh_prev of step 0).
  std::vector<Tensor> final_state_grad_;
  Tensor dh_initial_, ones_;

 private:
  // Masks: the rows of a masked step (time-major) keep h_prev; before/after the cell's step backward.
  void carry_masked_rows(std::int64_t t);
  void hold_masked_gradients(std::int64_t t, bool hold);

  std::vector<std::int64_t> to_time_major_, to_batch_major_;
  // The input's mask as set (empty: none), and per time-major row whether the step is read
  // (empty: every step is).
  Tensor input_mask_seq_;
  std::vector<std::uint8_t> step_read_;
  Tensor held_dh_;  // (batch, u): dL/dh of the masked rows put aside during a step's backward
  Tensor y_, dxt_, dx_;
  // Dropout of the last forward: whether each mask was applied, the masks (0 or 1/(1-rate)),
  // h_prev of every step after the recurrent mask, and scratch for dL/dh_prev through the mask.
  bool input_dropped_ = false, recurrent_dropped_ = false;
  Tensor input_mask_, recurrent_mask_, masked_h_, dh_scratch_;
  std::vector<Tensor> initial_state_, initial_state_grad_;
};

}  // namespace mdtrain
