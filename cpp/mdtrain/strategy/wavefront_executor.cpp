#include "mdtrain/strategy/wavefront_executor.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/threads/threads_communicator.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

struct WavefrontExecutor::Stage {
  int index = 0;
  int first = 0, end = 0;  // its recurrent layers [first, end) of the primary
  bool last = false;       // the last stage also runs the head [end of the recurrent prefix, size)
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Optimizer> optimizer;
  ParameterList params;  // the primary's parameters this stage updates
  // clones[j][k]: layer first + j for chunk k.
  std::vector<std::vector<std::unique_ptr<RecurrentLayer>>> clones;
  Tensor ones;
};

namespace {

// acc += g, elementwise (any device), through a ones buffer.
void accumulate(const Tensor& g, Tensor& acc, Tensor& ones) {
  // add_masked takes 2-D tensors: every gradient as one row.
  Tensor row = acc.reshape({1, acc.numel()});
  ensure_buffer(ones, row.shape(), acc.dtype(), acc.device());
  ones.fill(1.0);
  ops::add_masked(g.reshape({1, acc.numel()}), ones, row);
}

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

WavefrontExecutor::WavefrontExecutor(LayerStack& primary, int devices, std::int64_t time_chunk, const Loss& loss,
                                     const Optimizer& optimizer)
    : primary_(primary), time_chunk_(time_chunk), loss_(loss.clone()) {
  MDTRAIN_CHECK(devices >= 1, std::invalid_argument, "[wavefront] devices must be at least 1, got ", devices);
  MDTRAIN_CHECK(time_chunk >= 1, std::invalid_argument, "[wavefront] time_chunk must be a positive integer, got ",
                time_chunk);
  MDTRAIN_CHECK(primary.built(), std::invalid_argument, "[wavefront] the model must be built first");
  const auto& layers = primary.layers();
  int prefix = 0;
  while (prefix < static_cast<int>(layers.size())) {
    auto* r = dynamic_cast<RecurrentLayer*>(layers[static_cast<std::size_t>(prefix)].get());
    if (!r || !r->options().return_sequences) break;
    ++prefix;
  }
  if (prefix < devices) {
    const std::string what = prefix < static_cast<int>(layers.size())
                                 ? "layer \"" + layers[static_cast<std::size_t>(prefix)]->name() +
                                       "\" is not a recurrent layer with return_sequences=True"
                                 : "the model has only " + std::to_string(prefix) + " layers";
    fail<std::invalid_argument>(
        "[wavefront] every stage but the last holds recurrent layers with "
        "return_sequences=True, and there are ",
        devices, " stages: ", what);
  }
  auto comms = ThreadsCommunicator::create_group(devices);
  int start = 0;
  for (int s = 0; s < devices; ++s) {
    auto st = std::make_unique<Stage>();
    st->index = s;
    st->first = start;
    st->end = start + prefix / devices + (s < prefix % devices ? 1 : 0);
    start = st->end;
    st->last = s == devices - 1;
    st->comm = std::move(comms[static_cast<std::size_t>(s)]);
    st->optimizer = optimizer.clone();
    const int stop = st->last ? static_cast<int>(layers.size()) : st->end;
    for (int i = st->first; i < stop; ++i)
      for (Parameter* p : layers[static_cast<std::size_t>(i)]->parameters()) st->params.push_back(p);
    stages_.push_back(std::move(st));
  }
}

WavefrontExecutor::~WavefrontExecutor() = default;

std::vector<int> WavefrontExecutor::stage_starts() const {
  std::vector<int> starts;
  for (const auto& st : stages_) starts.push_back(st->first);
  return starts;
}

void WavefrontExecutor::prepare(std::int64_t batch, std::int64_t steps) {
  if (batch == batch_ && steps == steps_) return;
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
  batch_ = batch;
  steps_ = steps;
}

void WavefrontExecutor::run_stage(Stage& st, const Tensor& x, const Tensor& y, double& loss_out) {
  const auto& layers = primary_.layers();
  const std::size_t chunks = chunk_begin_.size() - 1, group = st.clones.size();
  const std::int64_t batch = batch_;
  const DType dtype = x.dtype();
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = step_;
  // The clones read the primary's weights in place (views, re-taken each step in case the primary's
  // storage moved): they only read them, and this stage's update comes after its last backward.
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
  std::vector<Tensor> outputs(chunks);
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
    else outputs[k] = in;
  }
  // The last stage: the head and the loss on the whole sequence.
  Tensor dseq;
  if (st.last) {
    Tensor seq({batch, steps_, out_units}, dtype);
    for (std::size_t k = 0; k < chunks; ++k) copy_steps(seq, chunk_begin_[k], chunk_begin_[k + 1], outputs[k], false);
    Tensor h = seq;
    for (std::size_t i = static_cast<std::size_t>(st.end); i < layers.size(); ++i) h = layers[i]->forward(h, ctx);
    const std::int64_t count = loss_->sample_count(y, h);
    Tensor dpred(h.shape(), dtype);
    double sum = loss_->forward_backward(y, h, 1.0 / static_cast<double>(count), &dpred);
    double reg = 0;
    for (const auto& l : layers) reg += l->regularization_loss();
    loss_out = sum / static_cast<double>(count) + reg;
    Tensor d = dpred;
    for (std::size_t i = layers.size(); i-- > static_cast<std::size_t>(st.end);) d = layers[i]->backward(d, true);
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
  // Gradients: the chunks' sums (ascending chunk order) into the primary's layers, then one update.
  for (std::size_t j = 0; j < group; ++j) {
    Layer& master = *layers[static_cast<std::size_t>(st.first) + j];
    auto masters = master.parameters();
    for (std::size_t k = 0; k < chunks; ++k) {
      auto ps = st.clones[j][k]->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        if (k == 0) masters[i]->grad.copy_from(ps[i]->grad);
        else accumulate(ps[i]->grad, masters[i]->grad, st.ones);
      }
    }
  }
  const std::size_t stop = st.last ? layers.size() : static_cast<std::size_t>(st.end);
  for (std::size_t i = static_cast<std::size_t>(st.first); i < stop; ++i) layers[i]->add_regularization_gradients();
  st.optimizer->apply(st.params);
}

double WavefrontExecutor::train_step(const Tensor& x, const Tensor& y) {
  MDTRAIN_CHECK(x.ndim() == 3, std::invalid_argument, "[wavefront] x must be (batch, timesteps, features), got ",
                to_string(x.shape()));
  prepare(x.dim(0), x.dim(1));
  double loss = 0;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> threads;
  for (auto& st : stages_) {
    Stage* s = st.get();
    threads.emplace_back([&, s] {
      try {
        run_stage(*s, x, y, loss);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failure) failure = std::current_exception();
        }
        s->comm->abort(e.what());  // releases the neighbours waiting in a recv
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failure) {
    // An aborted group stays broken: the next step gets fresh communicators.
    auto comms = ThreadsCommunicator::create_group(devices());
    for (std::size_t s = 0; s < stages_.size(); ++s) stages_[s]->comm = std::move(comms[s]);
    std::rethrow_exception(failure);
  }
  ++step_;
  return loss;
}

}  // namespace mdtrain
