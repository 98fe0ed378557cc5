#include "mdtrain/nn/tensor_parallel/unit_parallel_recurrent.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

namespace {

// The weight viewed with its last dimension G*u as (G, u): a unit piece is then a piece of the
// new last dimension.
Tensor by_gate(const Tensor& t, std::int64_t gates) {
  Shape s = t.shape();
  const std::int64_t last = s.back();
  MDTRAIN_CHECK(gates >= 1 && last % gates == 0, std::invalid_argument, "[tensor_parallel] a weight of shape ",
                to_string(t.shape()), " has no ", gates, " gates in its last dimension");
  s.back() = gates;
  s.push_back(last / gates);
  return t.reshape(s);
}

}  // namespace

void copy_gate_units_out(const Tensor& whole, std::int64_t gates, int k, int n, Tensor& part) {
  Tensor w = by_gate(whole, gates), p = by_gate(part, gates);
  copy_piece_out(w, w.ndim() - 1, k, n, p);
}

void copy_gate_units_in(const Tensor& part, std::int64_t gates, int k, int n, Tensor& whole) {
  Tensor w = by_gate(whole, gates), p = by_gate(part, gates);
  copy_piece_in(p, w.ndim() - 1, k, n, w);
}

std::int64_t UnitParallelRecurrent::gates_of(const std::string& class_name) {
  if (class_name == "SimpleRNN") return 1;
  if (class_name == "LSTM") return 4;
  if (class_name == "GRU") return 3;
  fail<std::invalid_argument>("[tensor_parallel] ", class_name, " is not a SimpleRNN, LSTM or GRU");
}

UnitParallelRecurrent::UnitParallelRecurrent(const RecurrentLayer& whole, ShardGroup* group)
    : UnitParallelRecurrent(whole.name(), whole.class_name(), whole.config(), whole.options(), group) {}

UnitParallelRecurrent::UnitParallelRecurrent(std::string name, std::string cell_class, Json config,
                                             RecurrentLayer::Options options, ShardGroup* group)
    : Layer(std::move(name)),
      cell_class_(std::move(cell_class)),
      config_(std::move(config)),
      options_(std::move(options)),
      group_(group),
      gates_(gates_of(cell_class_)),
      units_(options_.units) {
  MDTRAIN_CHECK(group_ != nullptr, std::invalid_argument, "[tensor_parallel] layer \"", name_,
                "\" needs a shard group");
  MDTRAIN_CHECK(units_ % group_->size() == 0, std::invalid_argument, "[model_parallel] layer \"", name_, "\": ", units_,
                " units cannot be split into ", group_->size(), " shards");
  local_ = units_ / group_->size();
  cell_ = gates_ == 1 ? Cell::SimpleRNN : gates_ == 4 ? Cell::LSTM : Cell::GRU;
  if (cell_ == Cell::SimpleRNN) activation_ = parse_activation(options_.activation);
  weights_ = RecurrentWeights(options_.use_bias, options_.kernel_regularizer, options_.recurrent_regularizer,
                              options_.bias_regularizer);
}

Shape UnitParallelRecurrent::compute_output_shape(const Shape& s) const {
  MDTRAIN_CHECK(s.size() == 2, std::invalid_argument, "[", cell_class_, "] layer \"", name_,
                "\" expects inputs (batch, timesteps, features), got ", to_string(s));
  if (options_.return_sequences) return {s[0], units_};
  return {units_};
}

void UnitParallelRecurrent::build_weights(const Shape& input_shape, std::uint64_t /*seed*/) {
  // The values come from the unsharded layer (TensorParallelPlan::scatter).
  const std::int64_t gl = gates_ * local_;
  weights_.kernel = Parameter(name_ + "/kernel", Tensor::zeros({input_shape[1], gl}, dtype_));
  weights_.recurrent_kernel = Parameter(name_ + "/recurrent_kernel", Tensor::zeros({units_, gl}, dtype_));
  if (!options_.use_bias) return;
  weights_.bias =
      Parameter(name_ + "/bias", cell_ == Cell::GRU ? Tensor::zeros({2, gl}, dtype_) : Tensor::zeros({gl}, dtype_));
}

Tensor UnitParallelRecurrent::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  const std::int64_t batch = x.dim(0), steps = input_shape_[0], in = input_shape_[1], u = units_;
  const std::int64_t gl = gates_ * local_;
  const Device& dev = x.device();
  if (batch != batch_ || steps != steps_ || to_time_major_.empty()) {
    batch_ = batch;
    steps_ = steps;
    recurrent_time_major_order(batch, steps, options_.go_backwards, to_time_major_, to_batch_major_);
  }
  const std::int64_t n = batch * steps;
  ensure_buffer(xt_, {n, in}, dtype_, dev);
  ensure_buffer(xz_, {n, gl}, dtype_, dev);
  ensure_buffer(h_, {n + batch, u}, dtype_, dev);
  ensure_buffer(h_local_, {n + batch, local_}, dtype_, dev);
  ensure_buffer(blocks_, {batch * u}, dtype_, dev);
  if (cell_ != Cell::SimpleRNN) ensure_buffer(gates_buf_, {n, gl}, dtype_, dev);
  if (cell_ == Cell::LSTM) {
    ensure_buffer(c_, {n + batch, local_}, dtype_, dev);
    c_.rows(0, batch).fill(0.0);
  }
  if (cell_ == Cell::GRU) ensure_buffer(hz_, {n, gl}, dtype_, dev);
  ops::gather_rows(x.reshape({n, in}), to_time_major_.data(), n, xt_);
  input_dropped_ = ctx.training && options_.dropout > 0.0;
  recurrent_dropped_ = ctx.training && options_.recurrent_dropout > 0.0;
  if (input_dropped_) {
    ensure_buffer(input_mask_, {batch, in}, dtype_, dev);
    draw_recurrent_dropout_mask(input_mask_, mask_scratch_, options_.dropout, options_.seed, 2 * ctx.step,
                                ctx.global_row_offset);
    multiply_each_step(xt_, input_mask_);
  }
  if (recurrent_dropped_) {
    ensure_buffer(recurrent_mask_, {batch, u}, dtype_, dev);
    draw_recurrent_dropout_mask(recurrent_mask_, mask_scratch_, options_.recurrent_dropout, options_.seed,
                                2 * ctx.step + 1, ctx.global_row_offset);
    ensure_buffer(recurrent_mask_piece_, {batch, local_}, dtype_, dev);
    copy_piece_out(recurrent_mask_, 1, group_->rank(), group_->size(), recurrent_mask_piece_);
    ensure_buffer(masked_h_, {n, u}, dtype_, dev);
  }
  weights_.project_inputs(xt_, xz_);
  h_.rows(0, batch).fill(0.0);
  h_local_.rows(0, batch).fill(0.0);
  for (std::int64_t t = 0; t < steps; ++t) {
    if (recurrent_dropped_) {
      Tensor masked = step_rows(masked_h_, t);
      ops::multiply(step_rows(h_, t), recurrent_mask_, masked);
    }
    step_forward(t);
    // Every shard needs the whole new h for the next step's GEMM (and the output).
    group_->all_gather(step_rows(h_local_, t + 1), blocks_);
    Tensor whole = step_rows(h_, t + 1);
    interleave_last_dim(blocks_, group_->size(), whole);
  }
  if (!options_.return_sequences) return h_.rows(n, n + batch);
  ensure_buffer(y_, {n, u}, dtype_, dev);
  ops::gather_rows(h_, to_batch_major_.data(), n, y_);
  return y_.reshape({batch, steps, u});
}

void UnitParallelRecurrent::step_forward(std::int64_t t) {
  const Tensor h_prev = recurrent_dropped_ ? step_rows(masked_h_, t) : step_rows(h_, t);
  Tensor z = step_rows(xz_, t), h = step_rows(h_local_, t + 1);
  switch (cell_) {
    case Cell::SimpleRNN:
      ops::gemm(h_prev, false, weights_.recurrent_kernel.value, false, z, 1.0, 1.0);
      ops::bias_activation(z, Tensor(), activation_, h);
      break;
    case Cell::LSTM: {
      Tensor g = step_rows(gates_buf_, t), c = step_rows(c_, t + 1);
      ops::gemm(h_prev, false, weights_.recurrent_kernel.value, false, z, 1.0, 1.0);
      ops::lstm_step_forward(z, step_rows(c_, t), g, c, h);
      break;
    }
    case Cell::GRU: {
      Tensor hz = step_rows(hz_, t), g = step_rows(gates_buf_, t);
      ops::gemm(h_prev, false, weights_.recurrent_kernel.value, false, hz);
      if (options_.use_bias)
        ops::bias_activation(hz, weights_.bias.value.rows(1, 2).reshape({-1}), Activation::Linear, hz);
      ops::gru_step_forward(z, hz, step_rows(h_local_, t), g, h);
      break;
    }
  }
}

void UnitParallelRecurrent::step_backward(std::int64_t t) {
  switch (cell_) {
    case Cell::SimpleRNN: {
      Tensor dz = step_rows(dxz_, t);
      ops::activation_backward(activation_, step_rows(xz_, t), step_rows(h_local_, t + 1), step_rows(dh_, t), dz);
      break;
    }
    case Cell::LSTM: {
      Tensor dz = step_rows(dxz_, t);
      ops::lstm_step_backward(step_rows(gates_buf_, t), step_rows(c_, t), step_rows(c_, t + 1), step_rows(dh_, t), dc_,
                              dz);
      break;
    }
    case Cell::GRU: {
      Tensor dx = step_rows(dxz_, t), dhz = step_rows(dhz_, t);
      Tensor dh_prev = t > 0 ? step_rows(dh_, t - 1) : Tensor();
      ops::gru_step_backward(step_rows(gates_buf_, t), step_rows(hz_, t), step_rows(h_local_, t), step_rows(dh_, t), dx,
                             dhz, dh_prev);
      break;
    }
  }
}

Tensor UnitParallelRecurrent::backward(const Tensor& dy, bool need_input_grad) {
  const std::int64_t batch = batch_, steps = steps_, n = batch * steps, in = input_shape_[1], u = units_;
  const int k = group_->rank(), shards = group_->size();
  const Device& dev = xt_.device();
  // dy is whole on every shard (the output was); each shard takes its units' columns.
  ensure_buffer(dy_time_major_, {n, u}, dtype_, dev);
  recurrent_output_grad_time_major(dy, batch, steps, u, options_.return_sequences, dy_time_major_);
  ensure_buffer(dh_, {n, local_}, dtype_, dev);
  copy_piece_out(dy_time_major_, 1, k, shards, dh_);
  if (cell_ == Cell::GRU) {
    ensure_buffer(dx_gates_, xz_.shape(), dtype_, dev);
    ensure_buffer(dh_gates_, xz_.shape(), dtype_, dev);
    dxz_ = dx_gates_;
    dhz_ = dh_gates_;
  } else {
    dxz_ = xz_;  // the projections are no longer needed: their rows take dL/dz
    dhz_ = xz_;
  }
  if (cell_ == Cell::LSTM) {
    ensure_buffer(dc_, {batch, local_}, dtype_, dev);
    dc_.fill(0.0);
  }
  ensure_buffer(partial_, {batch, u}, dtype_, dev);
  ensure_buffer(piece_, {batch, local_}, dtype_, dev);
  if (!recurrent_dropped_) {
    ensure_buffer(ones_, {batch, local_}, dtype_, dev);
    ones_.fill(1.0);
  }
  for (std::int64_t t = steps; t-- > 0;) {
    if (t + 1 < steps) {
      // This shard's gate columns' share of dL/dh_prev, summed over the group; keep its units.
      ops::gemm(step_rows(dhz_, t + 1), false, weights_.recurrent_kernel.value, true, partial_);
      group_->sum(partial_);
      copy_piece_out(partial_, 1, k, shards, piece_);
      Tensor dh = step_rows(dh_, t);
      ops::add_masked(piece_, recurrent_dropped_ ? recurrent_mask_piece_ : ones_, dh);
    }
    step_backward(t);
  }
  weights_.set_gradients(xt_, recurrent_dropped_ ? masked_h_ : h_.rows(0, n), dxz_, dhz_);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dxt_, {n, in}, dtype_, dev);
  ops::gemm(dxz_, false, weights_.kernel.value, true, dxt_);
  group_->sum(dxt_);
  if (input_dropped_) multiply_each_step(dxt_, input_mask_);
  ensure_buffer(dx_, {n, in}, dtype_, dev);
  recurrent_input_grad_batch_major(dxt_, to_time_major_, dx_);
  return dx_.reshape({batch, steps, in});
}

std::vector<Parameter*> UnitParallelRecurrent::parameters() {
  if (!built_) return {};
  return weights_.parameters();
}

double UnitParallelRecurrent::regularization_loss() const { return built_ ? weights_.regularization_loss() : 0.0; }

void UnitParallelRecurrent::add_regularization_gradients() {
  if (built_) weights_.add_regularization_gradients();
}

std::unique_ptr<Layer> UnitParallelRecurrent::clone() const {
  auto copy =
      std::unique_ptr<UnitParallelRecurrent>(new UnitParallelRecurrent(name_, cell_class_, config_, options_, group_));
  copy->copy_build_state(*this);
  if (!built_) return copy;
  weights_.copy_values_to(copy->weights_);
  return copy;
}

}  // namespace mdtrain
