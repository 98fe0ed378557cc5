#include "mdtrain/strategy/wavefront_executor.h"

#include <chrono>
#include <exception>
#include <mutex>
#include <string>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/graph_segment.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/ops/accumulate.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/batch_loss_scale.h"
#include "mdtrain/strategy/step_plan.h"
#include "mdtrain/strategy/wavefront_strategy.h"

namespace mdtrain {

struct WavefrontExecutor::Stage {
  int index = 0;
  int first = 0, end = 0;  // its recurrent layers [first, end) of the primary
  bool last = false;       // the last stage also runs the head [end of the recurrent prefix, size)
  std::unique_ptr<Communicator> comm;
  // clones[j][k]: layer first + j for chunk k.
  std::vector<std::vector<std::unique_ptr<RecurrentLayer>>> clones;
};

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Steps [t0, t1) of a batch-major (batch, T, f) sequence into `out` (batch, t1 - t0, f), or back.
void copy_steps(const Tensor& seq, std::int64_t t0, std::int64_t t1, Tensor& chunk, bool into_chunk) {
  const std::int64_t batch = seq.dim(0), steps = seq.dim(1), f = seq.row_size() / steps, len = t1 - t0;
  Tensor s = seq.reshape({batch * steps, f}), c = chunk.reshape({batch * len, f});
  for (std::int64_t b = 0; b < batch; ++b) {
    Tensor in_seq = s.rows(b * steps + t0, b * steps + t1), in_chunk = c.rows(b * len, (b + 1) * len);
    if (into_chunk) in_chunk.copy_from(in_seq);
    else in_seq.copy_from(in_chunk);
  }
}

}  // namespace

WavefrontExecutor::WavefrontExecutor(Network& primary, WavefrontStrategy& strategy, const Loss& loss,
                                     const Optimizer& optimizer)
    : StepExecutor("[wavefront]"),
      primary_(primary),
      strategy_(strategy),
      time_chunk_(strategy.time_chunk()),
      loss_(loss.clone()),
      optimizer_(optimizer.clone()) {
  const int devices = strategy.num_stages();
  MDTRAIN_CHECK(primary_.built(), std::invalid_argument, "[wavefront] the model must be built first");
  // The stages are the strategy's plan's (pipeline_step_plan.h: wavefront_stage_ranges).
  const StepPlan plan = strategy_.make_plan(primary_, strategy_.mesh(), plan_options_of(optimizer));
  const int n = static_cast<int>(primary_.layers().size());
  const int prefix = static_cast<int>(plan.segments[static_cast<std::size_t>(devices) - 1].end_layer);
  // The fused logits loss (softmax + crossentropy, ...) as one device runs it, when there is a head.
  if (prefix < n) {
    logits_loss_ = loss.on_logits_of(primary_.output_activation());
    head_ = segment_layers(primary_, prefix, n, false);  // the model's own layers, its blocks as segments
  }
  auto comms = strategy_.make_replica_communicators();
  for (int s = 0; s < devices; ++s) {
    auto st = std::make_unique<Stage>();
    st->index = s;
    st->first = static_cast<int>(plan.segments[static_cast<std::size_t>(s)].first_layer);
    st->end = static_cast<int>(plan.segments[static_cast<std::size_t>(s)].end_layer);
    st->last = s == devices - 1;
    st->comm = std::move(comms[static_cast<std::size_t>(s)]);
    stages_.push_back(std::move(st));
  }
  roster_.add({&primary_, optimizer_.get(), true, &loss_sum_, &profile_, {}});
}

WavefrontExecutor::~WavefrontExecutor() { strategy_.forget_executor(this); }

std::vector<int> WavefrontExecutor::stage_starts() const {
  std::vector<int> starts;
  for (const auto& st : stages_) starts.push_back(st->first);
  return starts;
}

void WavefrontExecutor::prepare(std::int64_t steps) {
  if (steps == steps_) return;
  chunk_begin_.clear();
  for (std::int64_t t = 0; t < steps; t += time_chunk_) chunk_begin_.push_back(t);
  chunk_begin_.push_back(steps);
  const std::size_t chunks = chunk_begin_.size() - 1;
  const auto& layers = primary_.layers();
  for (auto& st : stages_) {
    st->clones.clear();
    for (int i = st->first; i < st->end; ++i) {
      const Layer& master = *layers[static_cast<std::size_t>(i)];
      const std::int64_t features = master.input_shape()[1];
      std::vector<std::unique_ptr<RecurrentLayer>> per_chunk;
      for (std::size_t k = 0; k < chunks; ++k) {
        std::unique_ptr<Layer> copy = master.clone();
        // Built for the chunk's length (the recurrent layers fix timesteps at build).
        copy->build({chunk_begin_[k + 1] - chunk_begin_[k], features}, 0, master.dtype());
        per_chunk.emplace_back(static_cast<RecurrentLayer*>(copy.release()));
      }
      st->clones.push_back(std::move(per_chunk));
    }
  }
  steps_ = steps;
}

void WavefrontExecutor::run_stage(Stage& st, const Tensor& x, const Tensor& y, std::int64_t labels, std::uint64_t step,
                                  ReplicaOutputSink* outputs) {
  const auto& layers = primary_.layers();
  const std::size_t chunks = chunk_begin_.size() - 1, group = st.clones.size();
  const std::int64_t batch = x.dim(0);
  const DType dtype = x.dtype();
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = step;
  // The clones read the model's weights in place (views, re-taken each step in case set_weights
  // moved them): they only read them, and the update comes after every stage's last backward.
  for (std::size_t j = 0; j < group; ++j) {
    auto masters = layers[static_cast<std::size_t>(st.first) + j]->parameters();
    for (auto& clone : st.clones[j]) {
      auto ps = clone->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) ps[i]->value = masters[i]->value;
    }
  }
  auto in_features = [&](std::size_t j) { return layers[static_cast<std::size_t>(st.first) + j]->input_shape()[1]; };
  const std::int64_t out_units = layers[static_cast<std::size_t>(st.end - 1)]->output_shape()[1];
  // Forward, chunk by chunk, as they arrive.
  std::vector<Tensor> outputs_by_chunk(chunks);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::int64_t t0 = chunk_begin_[k], t1 = chunk_begin_[k + 1], len = t1 - t0;
    Tensor in({batch, len, in_features(0)}, dtype);
    if (st.index == 0) copy_steps(x, t0, t1, in, true);
    else st.comm->recv(in.raw(), static_cast<std::size_t>(in.numel()), dtype, st.index - 1);
    for (std::size_t j = 0; j < group; ++j) {
      std::vector<Tensor> initial = k > 0 ? st.clones[j][k - 1]->final_state() : std::vector<Tensor>{};
      in = st.clones[j][k]->forward_from_state(in, initial, ctx);
    }
    if (!st.last) st.comm->send(in.raw(), static_cast<std::size_t>(in.numel()), dtype, st.index + 1);
    else outputs_by_chunk[k] = in;
  }
  // The last stage: the head and the loss on the whole sequence, as one device runs them.
  Tensor dseq;
  if (st.last) {
    Tensor seq({batch, steps_, out_units}, dtype);
    for (std::size_t k = 0; k < chunks; ++k)
      copy_steps(seq, chunk_begin_[k], chunk_begin_[k + 1], outputs_by_chunk[k], false);
    Tensor h = seq;
    for (const auto& unit : head_) h = unit->forward(h, ctx);
    const BatchLossScale ls = batch_loss_scale(*loss_, y, h, batch, labels);
    Tensor d;
    if (logits_loss_) {
      const Tensor logits = head_.back()->logits();
      d = Tensor(logits.shape(), logits.dtype());
      loss_sum_ = logits_loss_->forward_backward(y, logits, ls.grad_scale, &d);
    } else {
      d = Tensor(h.shape(), dtype);
      loss_sum_ = loss_->forward_backward(y, h, ls.grad_scale, &d);
    }
    loss_sum_ *= ls.report_factor;
    if (outputs) outputs->on_replica_output(0, y, h);
    for (std::size_t i = head_.size(); i-- > 0;)
      d = (i + 1 == head_.size() && logits_loss_) ? head_[i]->backward_from_logits(d, true)
                                                  : head_[i]->backward(d, true);
    dseq = d;
  }
  // Backward, chunks in reverse.
  for (std::size_t k = chunks; k-- > 0;) {
    const std::int64_t t0 = chunk_begin_[k], t1 = chunk_begin_[k + 1], len = t1 - t0;
    Tensor dy({batch, len, out_units}, dtype);
    if (st.last) copy_steps(dseq, t0, t1, dy, true);
    else st.comm->recv(dy.raw(), static_cast<std::size_t>(dy.numel()), dtype, st.index + 1);
    for (std::size_t j = group; j-- > 0;) {
      std::vector<Tensor> dfinal =
          k + 1 < chunks ? st.clones[j][k + 1]->initial_state_gradient() : std::vector<Tensor>{};
      const bool need_input = st.index > 0 || j > 0;
      dy = st.clones[j][k]->backward_with_state(dy, dfinal, need_input, k > 0);
    }
    if (st.index > 0) st.comm->send(dy.raw(), static_cast<std::size_t>(dy.numel()), dtype, st.index - 1);
  }
  // Gradients: the chunks' sums (ascending chunk order) into the model's layers.
  for (std::size_t j = 0; j < group; ++j) {
    Layer& master = *layers[static_cast<std::size_t>(st.first) + j];
    auto masters = master.parameters();
    for (std::size_t k = 0; k < chunks; ++k) {
      auto ps = st.clones[j][k]->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        if (k == 0) masters[i]->grad.copy_from(ps[i]->grad);
        else ops::add_into(masters[i]->grad, ps[i]->grad);
      }
    }
  }
}

void WavefrontExecutor::gather_batch(const GlobalBatch& batch) { gather_global_batch(batch, x_batch_, y_batch_); }

void WavefrontExecutor::remake_communicators() {
  auto comms = strategy_.make_replica_communicators();
  for (std::size_t s = 0; s < stages_.size(); ++s) stages_[s]->comm = std::move(comms[s]);
  communicators_broken_ = false;
}

StepLoss WavefrontExecutor::train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[wavefront] a training batch needs at least one example");
  MDTRAIN_CHECK(batch.x.ndim() == 3, std::invalid_argument, "[wavefront] x must be (batch, timesteps, features), got ",
                to_string(batch.x.shape()));
  const auto step_start = Clock::now();
  StepLoss result;
  // Keras adds the weight penalties of the weights the step starts from.
  result.regularization = primary_.regularization_loss();
  gather_batch(batch);
  prepare(x_batch_.dim(1));
  const std::int64_t labels = global_label_count(*loss_, &y_batch_, nullptr);
  // The step number (dropout's key) is the optimizer's, as on one device.
  const auto step = static_cast<std::uint64_t>(optimizer_->iterations());
  if (communicators_broken_) remake_communicators();
  std::exception_ptr first_failure;
  std::mutex failure_mutex;
  try {
    strategy_.run_replicas([&](int s) {
      Stage& st = *stages_[static_cast<std::size_t>(s)];
      try {
        run_stage(st, x_batch_, y_batch_, labels, step, outputs);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        st.comm->abort(e.what());  // releases the neighbours waiting in a recv
        throw;
      }
    });
  } catch (...) {
    communicators_broken_ = true;  // an aborted group stays broken: the next step gets fresh ones
    if (first_failure) std::rethrow_exception(first_failure);
    throw;
  }
  profile_.compute += seconds_since(step_start);
  // One update of the whole model by its optimizer, as one device makes it.
  const auto t = Clock::now();
  primary_.add_regularization_gradients();
  optimizer_->apply(primary_.trainable_parameters());
  profile_.update += seconds_since(t);
  profile_.steps += 1;
  profile_.wall += seconds_since(step_start);
  result.sum = loss_sum_;
  return result;
}

StepLoss WavefrontExecutor::test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[wavefront] an evaluation batch needs at least one example");
  gather_batch(batch);
  const std::int64_t labels = global_label_count(*loss_, &y_batch_, nullptr);
  ForwardContext ctx;
  Tensor pred = primary_.forward(x_batch_, ctx);
  loss_sum_ = logits_loss_ ? logits_loss_->forward_backward(y_batch_, primary_.logits(), 1.0, nullptr)
                           : loss_->forward_backward(y_batch_, pred, 1.0, nullptr);
  loss_sum_ *= batch_loss_scale(*loss_, y_batch_, pred, batch.count, labels).report_factor;
  if (outputs) outputs->on_replica_output(0, y_batch_, pred);
  StepLoss result;
  result.sum = loss_sum_;
  result.regularization = primary_.regularization_loss();
  return result;
}

void WavefrontExecutor::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  ForwardContext ctx;
  Tensor pred = primary_.forward(x.rows(begin, begin + count), ctx);
  Tensor dst = out.rows(begin, begin + count);
  dst.copy_from(pred);
}

std::vector<CollectiveCounts> WavefrontExecutor::stage_collectives() const {
  std::vector<CollectiveCounts> out;
  for (const auto& st : stages_) out.push_back(st->comm->counts());
  return out;
}

void WavefrontExecutor::reset_own_profile() {
  for (auto& st : stages_) st->comm->reset_counts();
}

void WavefrontExecutor::abort(const std::string& reason) {
  for (auto& st : stages_) st->comm->abort(reason);
  communicators_broken_ = true;
}

}  // namespace mdtrain
