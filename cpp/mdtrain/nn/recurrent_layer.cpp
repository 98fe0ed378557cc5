#include "mdtrain/nn/recurrent_layer.h"

#include <optional>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

namespace {

void refuse(const char* area, const std::string& layer, const Json& c, const char* key, const Json& fine) {
  const Json v = c.get(key, fine);
  MDTRAIN_CHECK(v.is_null() ? fine.is_null()
                            : v == fine || (v.is_number() && fine.is_number() && v.as_number() == fine.as_number()),
                std::invalid_argument, "[", area, "] layer \"", layer, "\": ", key, "=", v.dump(),
                " is not supported by mdtrain yet (only ", fine.dump(), ")");
}

}  // namespace

RecurrentLayer::RecurrentLayer(std::string name, Options options, std::string area, std::int64_t gates)
    : Layer(std::move(name)), options_(std::move(options)), area_(std::move(area)), gates_(gates) {
  MDTRAIN_CHECK(options_.units > 0, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": units must be a positive integer, got ", options_.units);
  for (double rate : {options_.dropout, options_.recurrent_dropout})
    MDTRAIN_CHECK(rate >= 0.0 && rate < 1.0, std::invalid_argument, "[", area_, "] layer \"", name_,
                  "\": dropout and recurrent_dropout must be in [0, 1), got ", rate);
  make_initializer(options_.kernel_initializer);  // validate names now, not at build time
  make_initializer(options_.recurrent_initializer);
  make_initializer(options_.bias_initializer);
  weights_ = RecurrentWeights(options_.use_bias, options_.kernel_regularizer, options_.recurrent_regularizer,
                              options_.bias_regularizer);
}

Shape RecurrentLayer::compute_output_shape(const Shape& s) const {
  if (s.size() != 2) {
    std::string full = "(None";
    for (auto d : s) full += ", " + std::to_string(d);
    fail<std::invalid_argument>("[", area_, "] Input 0 of layer \"", name_,
                                "\" is incompatible with the layer: expected ndim=3 (batch, timesteps, features), "
                                "found ndim=",
                                s.size() + 1, ". Full shape received: ", full + (s.empty() ? ",)" : ")"));
  }
  require_known_dim(s, -1, "the kernel's rows");
  MDTRAIN_CHECK((s[0] >= 1 || s[0] == kUnknownDim) && s[1] >= 1, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\" needs at least one timestep and one feature, got input shape ", to_string(s));
  if (options_.return_sequences) return {s[0], options_.units};
  return {options_.units};
}

void RecurrentLayer::build_weights(const Shape& input_shape, std::uint64_t seed) {
  const std::int64_t in = input_shape[1], gu = gates_ * options_.units;
  Rng rng(seed, 0), recurrent_rng(seed, 1), bias_rng(seed, 2);
  weights_.kernel = Parameter(name_ + "/kernel", Tensor({in, gu}, dtype_));
  make_initializer(options_.kernel_initializer)->fill(weights_.kernel.value, in, gu, rng);
  weights_.recurrent_kernel = Parameter(name_ + "/recurrent_kernel", Tensor({options_.units, gu}, dtype_));
  make_initializer(options_.recurrent_initializer)
      ->fill(weights_.recurrent_kernel.value, options_.units, gu, recurrent_rng);
  if (!options_.use_bias) return;
  weights_.bias = Parameter(name_ + "/bias", Tensor(bias_shape(), dtype_));
  make_initializer(options_.bias_initializer)->fill(weights_.bias.value, weights_.bias.value.numel(), 0, bias_rng);
  init_bias(weights_.bias.value);
}

Tensor RecurrentLayer::recurrent_input(std::int64_t t) {
  return recurrent_dropped_ ? step_rows(masked_h_, t) : step_rows(h_, t);
}

Tensor RecurrentLayer::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  const std::int64_t batch = x.dim(0), steps = x.dim(1), in = input_shape_[1], u = options_.units;
  const Device& dev = x.device();
  if (batch != batch_ || steps != steps_ || to_time_major_.empty()) {
    batch_ = batch;
    steps_ = steps;
    // Outputs come back in reading order (reversed with go_backwards), as Keras's.
    recurrent_time_major_order(batch, steps, options_.go_backwards, to_time_major_, to_batch_major_);
  }
  const std::int64_t n = batch * steps;
  step_read_.clear();
  if (input_mask_seq_.defined()) {
    check_mask_shape(input_mask_seq_, batch, steps, area_, name_);
    const std::vector<std::uint8_t> bytes = mask_to_bytes(input_mask_seq_);
    step_read_.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      step_read_[static_cast<std::size_t>(i)] =
          bytes[static_cast<std::size_t>(to_time_major_[static_cast<std::size_t>(i)])];
  }
  ensure_buffer(xt_, {n, in}, dtype_, dev);
  ensure_buffer(xz_, {n, gates_ * u}, dtype_, dev);
  ensure_buffer(h_, {n + batch, u}, dtype_, dev);
  ensure_cell_buffers(n);
  ops::gather_rows(x.reshape({n, in}), to_time_major_.data(), n, xt_);
  // Streams 2 * step and 2 * step + 1: the input and the recurrent mask of this optimizer step.
  input_dropped_ = ctx.training && options_.dropout > 0.0;
  recurrent_dropped_ = ctx.training && options_.recurrent_dropout > 0.0;
  if (input_dropped_) {
    ensure_buffer(input_mask_, {batch, in}, dtype_, dev);
    draw_recurrent_dropout_mask(input_mask_, dx_, options_.dropout, options_.seed, 2 * ctx.step, ctx.global_row_offset);
    multiply_each_step(xt_, input_mask_);
  }
  if (recurrent_dropped_) {
    ensure_buffer(recurrent_mask_, {batch, u}, dtype_, dev);
    draw_recurrent_dropout_mask(recurrent_mask_, dh_scratch_, options_.recurrent_dropout, options_.seed,
                                2 * ctx.step + 1, ctx.global_row_offset);
    ensure_buffer(masked_h_, {n, u}, dtype_, dev);
  }
  weights_.project_inputs(xt_, xz_);
  if (initial_state_.empty()) {
    h_.rows(0, batch).fill(0.0);
  } else {
    h_.rows(0, batch).copy_from(initial_state_[0]);
    load_initial_cell_state(initial_state_);
  }
  const ops::SerialTimeSteps serial_forward_steps;
  for (std::int64_t t = 0; t < steps; ++t) {
    if (recurrent_dropped_) {
      Tensor masked = step_rows(masked_h_, t);
      ops::multiply(step_rows(h_, t), recurrent_mask_, masked);
    }
    step_forward(t);
    carry_masked_rows(t);
  }
  if (!options_.return_sequences) return h_.rows(n, n + batch);
  ensure_buffer(y_, {n, u}, dtype_, dev);
  ops::gather_rows(h_, to_batch_major_.data(), n, y_);
  return y_.reshape({batch, steps, u});
}

Tensor RecurrentLayer::backward(const Tensor& dy, bool need_input_grad) {
  const std::int64_t batch = batch_, steps = steps_, n = batch * steps, in = input_shape_[1], u = options_.units;
  const Device& dev = xt_.device();
  ensure_buffer(dh_, {n, u}, dtype_, dev);
  recurrent_output_grad_time_major(dy, batch, steps, u, options_.return_sequences, dh_);
  if (!final_state_grad_.empty() && final_state_grad_[0].defined()) {
    Tensor last = dh_.rows(n - batch, n);
    add_into(final_state_grad_[0], last, ones_);
  }
  begin_backward_steps();
  std::optional<ops::SerialTimeSteps> serial_backward_steps(std::in_place);
  for (std::int64_t t = steps; t-- > 0;) {
    if (t + 1 < steps) {
      Tensor dh = step_rows(dh_, t);
      if (!recurrent_dropped_) {
        ops::gemm(step_rows(dhz_, t + 1), false, weights_.recurrent_kernel.value, true, dh, 1.0, 1.0);
      } else {
        ensure_buffer(dh_scratch_, {batch, u}, dtype_, dev);
        ops::gemm(step_rows(dhz_, t + 1), false, weights_.recurrent_kernel.value, true, dh_scratch_);
        ops::add_masked(dh_scratch_, recurrent_mask_, dh);
      }
    }
    hold_masked_gradients(t, true);
    step_backward(t);
    hold_masked_gradients(t, false);
  }
  serial_backward_steps.reset();
  if (dh_initial_.defined()) {
    // dL/dh_0: the cell's direct part (GRU's, added in step_backward(0)) plus the recurrent GEMM's.
    if (!recurrent_dropped_) {
      ops::gemm(step_rows(dhz_, 0), false, weights_.recurrent_kernel.value, true, dh_initial_, 1.0, 1.0);
    } else {
      ensure_buffer(dh_scratch_, {batch, u}, dtype_, dev);
      ops::gemm(step_rows(dhz_, 0), false, weights_.recurrent_kernel.value, true, dh_scratch_);
      ops::add_masked(dh_scratch_, recurrent_mask_, dh_initial_);
    }
  }
  weights_.set_gradients(xt_, recurrent_dropped_ ? masked_h_ : h_.rows(0, n), dxz_, dhz_);
  add_cell_weight_gradients();
  if (!need_input_grad) return Tensor();
  ensure_buffer(dxt_, {n, in}, dtype_, dev);
  ops::gemm(dxz_, false, weights_.kernel.value, true, dxt_);
  if (input_dropped_) multiply_each_step(dxt_, input_mask_);
  ensure_buffer(dx_, {n, in}, dtype_, dev);
  recurrent_input_grad_batch_major(dxt_, to_time_major_, dx_);
  return dx_.reshape({batch, steps, in});
}

Tensor RecurrentLayer::forward_from_state(const Tensor& x, const std::vector<Tensor>& initial_state,
                                          const ForwardContext& ctx) {
  check_input(x);
  const std::int64_t batch = x.dim(0), u = options_.units;
  MDTRAIN_CHECK(initial_state.empty() || static_cast<std::int64_t>(initial_state.size()) == state_count(),
                std::invalid_argument, "[", area_, "] layer \"", name_, "\" expects ", state_count(),
                " initial state tensor(s), got ", initial_state.size());
  for (const Tensor& s : initial_state)
    MDTRAIN_CHECK(s.shape() == Shape({batch, u}) && s.dtype() == dtype_, std::invalid_argument, "[", area_,
                  "] layer \"", name_, "\": each initial state must be (batch, units) = ", to_string(Shape({batch, u})),
                  " of the layer's dtype, got ", to_string(s.shape()));
  initial_state_ = initial_state;
  struct Reset {
    std::vector<Tensor>& s;
    ~Reset() { s.clear(); }
  } reset{initial_state_};
  return forward(x, ctx);
}

std::vector<Tensor> RecurrentLayer::final_state() const {
  const std::int64_t n = batch_ * steps_;
  std::vector<Tensor> states{h_.rows(n, n + batch_)};
  append_final_cell_state(states);
  return states;
}

Tensor RecurrentLayer::backward_with_state(const Tensor& dy, const std::vector<Tensor>& final_state_grad,
                                           bool need_input_grad, bool need_state_grad) {
  MDTRAIN_CHECK(final_state_grad.empty() || static_cast<std::int64_t>(final_state_grad.size()) == state_count(),
                std::invalid_argument, "[", area_, "] layer \"", name_, "\" expects ", state_count(),
                " final state gradient(s), got ", final_state_grad.size());
  final_state_grad_ = final_state_grad;
  initial_state_grad_.clear();
  if (need_state_grad) {
    ensure_buffer(dh_initial_, {batch_, options_.units}, dtype_, xt_.device());
    dh_initial_.fill(0.0);
  }
  struct Reset {
    RecurrentLayer& l;
    ~Reset() {
      l.final_state_grad_.clear();
      l.dh_initial_ = Tensor();
    }
  } reset{*this};
  Tensor dx = backward(dy, need_input_grad);
  if (need_state_grad) {
    initial_state_grad_.push_back(dh_initial_);
    append_initial_cell_gradient(initial_state_grad_);
  }
  return dx;
}

void RecurrentLayer::add_into(const Tensor& g, Tensor& acc, Tensor& ones) {
  ensure_buffer(ones, acc.shape(), acc.dtype(), acc.device());
  ones.fill(1.0);
  ops::add_masked(g.reshape(acc.shape()), ones, acc);
}

void RecurrentLayer::carry_masked_rows(std::int64_t t) {
  if (step_read_.empty()) return;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::int64_t row = t * batch_ + b;
    if (step_read_[static_cast<std::size_t>(row)]) continue;
    h_.rows(row + batch_, row + batch_ + 1).copy_from(h_.rows(row, row + 1));
    carry_cell_state(t, row);
  }
}

void RecurrentLayer::hold_masked_gradients(std::int64_t t, bool hold) {
  if (step_read_.empty()) return;
  if (hold) ensure_buffer(held_dh_, {batch_, options_.units}, dtype_, h_.device());
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::int64_t row = t * batch_ + b;
    if (step_read_[static_cast<std::size_t>(row)]) continue;
    hold_cell_gradient(row, hold);
    if (hold) {
      // The step's cell sees no upstream gradient: its dL/d(projections) come out zero.
      held_dh_.rows(b, b + 1).copy_from(dh_.rows(row, row + 1));
      dh_.rows(row, row + 1).fill(0.0);
    } else if (t > 0 || dh_initial_.defined()) {
      // h of step t is h of step t - 1: dL/dh goes on unchanged, at t = 0 to dL/d(initial h) when
      // it is wanted (backward_with_state; otherwise it is lost in the zero state).
      dispatch_floating(dtype_, area_.c_str(), [&](auto tag) {
        using T = decltype(tag);
        const T* g = held_dh_.data<T>() + b * options_.units;
        T* acc = t > 0 ? dh_.data<T>() + (row - batch_) * options_.units : dh_initial_.data<T>() + b * options_.units;
        for (std::int64_t j = 0; j < options_.units; ++j) acc[j] += g[j];
      });
    }
  }
}

std::vector<Parameter*> RecurrentLayer::parameters() {
  if (!built_) return {};
  return weights_.parameters();
}

double RecurrentLayer::regularization_loss() const { return built_ ? weights_.regularization_loss() : 0.0; }

void RecurrentLayer::add_regularization_gradients() {
  if (built_) weights_.add_regularization_gradients();
}

void RecurrentLayer::copy_weights_to(RecurrentLayer& copy) const {
  copy.copy_build_state(*this);
  if (built_) weights_.copy_values_to(copy.weights_);
}

Json RecurrentLayer::config() const {
  Json c = Layer::config();
  c.set("units", options_.units);
  c.set("activation", options_.activation);
  if (gates_ > 1) c.set("recurrent_activation", options_.recurrent_activation);
  c.set("use_bias", options_.use_bias);
  c.set("kernel_initializer", make_initializer(options_.kernel_initializer)->config());
  c.set("recurrent_initializer", make_initializer(options_.recurrent_initializer)->config());
  c.set("bias_initializer", make_initializer(options_.bias_initializer)->config());
  c.set("kernel_regularizer", weights_.kernel_reg ? weights_.kernel_reg->config() : Json());
  c.set("recurrent_regularizer", weights_.recurrent_reg ? weights_.recurrent_reg->config() : Json());
  c.set("bias_regularizer", weights_.bias_reg ? weights_.bias_reg->config() : Json());
  c.set("dropout", options_.dropout);
  c.set("recurrent_dropout", options_.recurrent_dropout);
  c.set("seed", static_cast<double>(options_.seed));
  c.set("return_sequences", options_.return_sequences);
  c.set("return_state", false);
  c.set("go_backwards", options_.go_backwards);
  c.set("stateful", false);
  c.set("unroll", false);
  return c;
}

RecurrentLayer::Options RecurrentLayer::options_from_config(const Json& c, const char* area) {
  const std::string name = c.at("name").as_string();
  refuse(area, name, c, "return_state", Json(false));
  refuse(area, name, c, "stateful", Json(false));
  for (const char* key : {"kernel_constraint", "recurrent_constraint", "bias_constraint"})
    refuse(area, name, c, key, Json());
  Options o;
  o.units = c.at("units").as_int();
  const Json act = c.get("activation", "tanh"), rec = c.get("recurrent_activation", "sigmoid");
  o.activation = act.is_null() ? "linear" : act.as_string();
  o.recurrent_activation = rec.is_null() ? "linear" : rec.as_string();
  o.use_bias = c.get("use_bias", true).as_bool();
  o.kernel_initializer = c.get("kernel_initializer", "glorot_uniform");
  o.recurrent_initializer = c.get("recurrent_initializer", "orthogonal");
  o.bias_initializer = c.get("bias_initializer", "zeros");
  o.unit_forget_bias = c.get("unit_forget_bias", true).as_bool();
  o.reset_after = c.get("reset_after", true).as_bool();
  o.kernel_regularizer = c.get("kernel_regularizer", Json());
  o.recurrent_regularizer = c.get("recurrent_regularizer", Json());
  o.bias_regularizer = c.get("bias_regularizer", Json());
  o.dropout = c.get("dropout", 0.0).as_number();
  o.recurrent_dropout = c.get("recurrent_dropout", 0.0).as_number();
  const Json seed = c.get("seed", Json());
  MDTRAIN_CHECK(seed.is_null() ||
                    (seed.is_number() && seed.as_number() >= 0 && seed.as_number() < 9007199254740992.0 &&
                     seed.as_number() == static_cast<double>(static_cast<std::uint64_t>(seed.as_number()))),
                std::invalid_argument, "[", area, "] layer \"", name,
                "\": seed must be a non-negative integer below 2^53, got ", seed.dump());
  o.seed = seed.is_null() ? 0 : static_cast<std::uint64_t>(seed.as_number());
  o.return_sequences = c.get("return_sequences", false).as_bool();
  o.go_backwards = c.get("go_backwards", false).as_bool();
  return o;
}

std::int64_t RecurrentLayer::held_activation_bytes() const {
  std::int64_t sum = bytes_of({&xt_, &xz_, &h_, &dh_, &dxz_, &dhz_, &dh_initial_, &ones_, &input_mask_seq_, &held_dh_,
                               &y_, &dxt_, &dx_, &input_mask_, &recurrent_mask_, &masked_h_, &dh_scratch_});
  for (const auto* states : {&final_state_grad_, &initial_state_, &initial_state_grad_})
    for (const Tensor& t : *states) sum += bytes_of({&t});
  return sum;
}

}  // namespace mdtrain
