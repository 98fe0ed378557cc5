#include "mdtrain/model/train_engine.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>

#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {
// A replica's CrossReplicaContext for its layers: sums over the replica's communicator. It reads
// the communicator at each call because the engine replaces communicators after a failed step.
class CommunicatorSums final : public CrossReplicaContext {
 public:
  explicit CommunicatorSums(const std::unique_ptr<Communicator>& comm) : comm_(comm) {}
  int num_replicas() const override { return comm_->size(); }
  void sum(double* data, std::size_t count) override {
    comm_->all_reduce(data, count, DType::Float64, ReduceOp::Sum);
  }

 private:
  const std::unique_ptr<Communicator>& comm_;
};
}  // namespace

struct TrainEngine::Replica {
  LayerStack* stack = nullptr;
  std::unique_ptr<LayerStack> owned_stack;  // null for replica 0
  std::unique_ptr<Loss> loss;
  std::unique_ptr<Loss> logits_loss;  // the loss on the output layer's logits, when Keras uses them
  std::unique_ptr<Optimizer> optimizer;
  std::vector<std::unique_ptr<Metric>> metrics;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradientReducer> reducer;
  CommunicatorSums sums{comm};  // what the layers see of the other replicas (ForwardContext)
  Tensor x_batch, y_batch, dpred;
  Tensor y_host, pred_host;  // host copies for the metrics of a GPU replica
  double loss_sum = 0;  // this step's sum of per-example losses on this replica's slice
  double all_workers_loss_sum = 0;  // loss_sum summed over every replica of every worker
  Profile profile;
};

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

TrainEngine::TrainEngine(LayerStack& primary, std::shared_ptr<Strategy> strategy, const Loss& loss,
                         const Optimizer& optimizer)
    : primary_(primary), strategy_(std::move(strategy)) {
  MDTRAIN_CHECK(primary.built(), std::logic_error, "[engine] the model must be built before training");
  // Placement comes from the strategy's devices: a replica on a CPU device trains a host copy (the
  // primary itself for replica 0), a replica on a GPU a copy whose weights live on that GPU. Layers
  // without CUDA kernels are refused here, before any communicator or GPU memory exists.
  for (const Device& d : strategy_->devices()) primary.check_device_support(d);
  primary_is_replica0_ = strategy_->devices().front().is_cpu();
  auto comms = strategy_->make_replica_communicators();
  const int n = strategy_->num_local_replicas();
  MDTRAIN_CHECK(static_cast<int>(comms.size()) == n, std::logic_error, "[engine] strategy made ", comms.size(),
                " communicators for ", n, " replicas");
  MDTRAIN_CHECK(static_cast<std::int64_t>(n) * 16 < LayerStack::kPackedPadding, std::invalid_argument,
                "[engine] at most ", LayerStack::kPackedPadding / 16 - 1, " replicas are supported, got ", n);
  // Gradient clipping by norm needs every replica to hold the whole summed gradient; a reduction
  // to one device is what the user asked for. Otherwise the gradients are reduce-scattered. Across
  // workers the update is not sharded: each worker keeps the whole optimizer state, so any worker
  // can write a checkpoint and a checkpoint loads under any strategy.
  // On GPUs every replica applies the whole update instead: there it is one fused, memory-bound
  // launch that costs little next to the GEMMs, while the all-reduce of each gradient bucket
  // overlaps the rest of backward (a reduce-scatter would have to wait for all of it).
  const auto& opts = optimizer.options();
  sharded_optimizer_ = n > 1 && strategy_->num_workers() == 1 && primary_is_replica0_;
  sharded_update_ = sharded_optimizer_ && !opts.clipnorm && !opts.global_clipnorm &&
                    strategy_->gradient_reduction() == GradientReducer::Algorithm::AllReduce;
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_unique<Replica>();
    const Device& device = strategy_->devices()[static_cast<std::size_t>(r)];
    if (r == 0 && primary_is_replica0_) {
      rep->stack = &primary_;
    } else {
      rep->owned_stack = device.is_cpu() ? primary_.clone() : primary_.clone_to(device);
      rep->stack = rep->owned_stack.get();
    }
    rep->loss = loss.clone();
    rep->logits_loss = loss.on_logits_of(primary_.output_activation());
    rep->optimizer = optimizer.clone();
    attach_communicator(*rep, std::move(comms[static_cast<std::size_t>(r)]));
    replicas_.push_back(std::move(rep));
  }
}

TrainEngine::~TrainEngine() = default;

template <class F>
void TrainEngine::for_each_slice(std::int64_t count, F&& fn, bool across_workers) {
  // Global replica g (of all workers) takes rows [g*base + min(g, extra), +base (+1 if g < extra)).
  const std::int64_t n = across_workers ? strategy_->num_replicas_in_sync() : num_replicas();
  const std::int64_t offset = across_workers ? strategy_->first_local_replica() : 0;
  const std::int64_t base = count / n, extra = count % n;
  if (communicators_broken_) remake_communicators();
  // The first replica to fail is the one to report: it records its error before aborting the
  // group, so the peers' "group failed" errors that follow never hide it.
  std::exception_ptr first_failure;
  std::mutex failure_mutex;
  try {
    strategy_->run_replicas([&](int local) {
      const std::int64_t r = offset + local;
      const std::int64_t first = r * base + std::min<std::int64_t>(r, extra);
      const std::int64_t rows = base + (r < extra ? 1 : 0);
      Replica& rep = *replicas_[static_cast<std::size_t>(local)];
      try {
        fn(rep, first, rows);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        // Peers may be waiting in a collective for this replica: release them now.
        rep.comm->abort(e.what());
        throw;
      }
    });
  } catch (...) {
    communicators_broken_ = true;  // an aborted group cannot be reused
    if (first_failure) std::rethrow_exception(first_failure);
    throw;
  }
}

void TrainEngine::remake_communicators() {
  auto comms = strategy_->make_replica_communicators();
  for (std::size_t r = 0; r < replicas_.size(); ++r) attach_communicator(*replicas_[r], std::move(comms[r]));
  communicators_broken_ = false;
}

void TrainEngine::attach_communicator(Replica& rep, std::unique_ptr<Communicator> comm) {
  rep.comm = std::move(comm);
  rep.reducer = std::make_unique<GradientReducer>(*rep.comm, strategy_->gradient_bucket_bytes(),
                                                  strategy_->gradient_reduction());
}

void TrainEngine::gather_batch(Replica& rep, const Tensor& x, const Tensor& y, const std::int64_t* indices,
                               std::int64_t rows) {
  Shape xs = x.shape(), ys = y.shape();
  xs[0] = rows;
  ys[0] = rows;
  const Device& device = rep.stack->device();
  ensure_buffer(rep.x_batch, xs, x.dtype(), device);
  ensure_buffer(rep.y_batch, ys, y.dtype(), device);
  ops::gather_rows(x, indices, rows, rep.x_batch);
  ops::gather_rows(y, indices, rows, rep.y_batch);
}

double TrainEngine::train_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count) {
  MDTRAIN_CHECK(count > 0, std::invalid_argument, "[engine] a training batch needs at least one example");
  const double scale = 1.0 / static_cast<double>(count);
  // Keras adds the weight penalties of the weights the step starts from.
  const double regularization = replicas_.front()->stack->regularization_loss();
  const auto step_start = Clock::now();
  for_each_slice(count, [&](Replica& rep, std::int64_t first, std::int64_t rows) {
    LayerStack& stack = *rep.stack;
    rep.loss_sum = 0;
    auto t = Clock::now();
    ForwardContext ctx;
    ctx.training = true;
    ctx.step = static_cast<std::uint64_t>(rep.optimizer->iterations());
    ctx.global_row_offset = first;
    ctx.replicas = &rep.sums;
    // Sum the gradients over the replicas: all of them, bucket by bucket as backward finishes
    // them, or (ZeRO-1) after backward only this replica's shard, which is all its update reads.
    // Either way ranks are added in rank order.
    LayerStack::GradientsFinal on_final;
    double in_reducer = 0;  // time backward spent starting buckets: communication, not compute
    if (!sharded_update_) {
      rep.reducer->begin(stack.packed_grads());
      on_final = [&](std::int64_t first_final) {
        const auto r0 = Clock::now();
        rep.reducer->gradients_final_from(first_final);
        in_reducer += seconds_since(r0);
      };
    }
    if (rows > 0) {
      gather_batch(rep, x, y, indices + first, rows);
      Tensor pred = stack.forward(rep.x_batch, ctx);
      ensure_buffer(rep.dpred, pred.shape(), pred.dtype(), pred.device());
      if (rep.logits_loss) {
        rep.loss_sum = rep.logits_loss->forward_backward(rep.y_batch, stack.logits(), scale, &rep.dpred);
        stack.backward_from_logits(rep.dpred, on_final);
      } else {
        rep.loss_sum = rep.loss->forward_backward(rep.y_batch, pred, scale, &rep.dpred);
        stack.backward(rep.dpred, on_final);
      }
      update_metrics(rep, rep.y_batch, pred);
    } else {
      // No rows: zero gradients, but still every collective the layers run in training
      // (synchronized BatchNormalization's statistics) and every bucket's, in the order the
      // other replicas run them.
      stack.packed_grads().fill(0.0);
      stack.step_without_rows(ctx, on_final);
    }
    rep.profile.compute += seconds_since(t) - in_reducer;
    rep.profile.allreduce += in_reducer;
    t = Clock::now();
    if (sharded_update_) {
      reduce_scatter_own_shard(rep);
    } else {
      rep.reducer->finish();
    }
    rep.profile.allreduce += seconds_since(t);
    t = Clock::now();
    stack.add_regularization_gradients();
    if (!sharded_optimizer_) {
      rep.optimizer->apply(stack.trainable_parameters());
    } else {
      // Each replica updates its shard; the updated shards are then gathered everywhere.
      const auto [begin, end] = shard_of(rep.comm->rank());
      rep.optimizer->apply(stack.trainable_parameters(), begin, end);
      rep.profile.update += seconds_since(t);
      t = Clock::now();
      gather_shards(rep);
      rep.profile.allreduce += seconds_since(t);
      t = Clock::now();
    }
    rep.profile.update += seconds_since(t);
    rep.profile.steps += 1;
  });
  wall_ += seconds_since(step_start);
  // The host copy of the weights is refreshed when something reads it, not every step.
  if (!primary_is_replica0_) primary_stale_ = true;
  const double step_loss = sum_of_replica_losses(count) * scale + regularization;
  last_count_ = count;
  loss_total_ += step_loss * static_cast<double>(count);
  loss_count_ += static_cast<double>(count);
  return step_loss;
}

void TrainEngine::test_step(const Tensor& x, const Tensor& y, const std::int64_t* indices, std::int64_t count) {
  MDTRAIN_CHECK(count > 0, std::invalid_argument, "[engine] an evaluation batch needs at least one example");
  for_each_slice(count, [&](Replica& rep, std::int64_t first, std::int64_t rows) {
    rep.loss_sum = 0;
    if (rows == 0) return;
    gather_batch(rep, x, y, indices + first, rows);
    ForwardContext ctx;
    ctx.global_row_offset = first;
    Tensor pred = rep.stack->forward(rep.x_batch, ctx);
    rep.loss_sum = rep.logits_loss ? rep.logits_loss->forward_backward(rep.y_batch, rep.stack->logits(), 1.0, nullptr)
                                   : rep.loss->forward_backward(rep.y_batch, pred, 1.0, nullptr);
    update_metrics(rep, rep.y_batch, pred);
  });
  loss_total_ += sum_of_replica_losses(count) +
                 replicas_.front()->stack->regularization_loss() * static_cast<double>(count);
  loss_count_ += static_cast<double>(count);
}

double TrainEngine::sum_of_replica_losses(std::int64_t count) {
  if (strategy_->num_workers() == 1) {
    double sum = 0;
    for (const auto& rep : replicas_) sum += rep->loss_sum;  // replica order: deterministic
    return sum;
  }
  // Every worker must see the same loss (callbacks such as TerminateOnNaN or EarlyStopping decide
  // on it, and all workers must decide alike): sum it over all replicas, in rank order.
  for_each_slice(count, [&](Replica& rep, std::int64_t, std::int64_t) {
    rep.all_workers_loss_sum = rep.loss_sum;
    rep.comm->all_reduce(&rep.all_workers_loss_sum, 1, DType::Float64, ReduceOp::Sum);
  });
  return replicas_.front()->all_workers_loss_sum;
}

void TrainEngine::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  // Every worker predicts every row (the result is returned by each process), split among its
  // own replicas only.
  for_each_slice(count, [&](Replica& rep, std::int64_t first, std::int64_t rows) {
    if (rows == 0) return;
    ForwardContext ctx;
    ctx.global_row_offset = first;
    Tensor in = x.rows(begin + first, begin + first + rows);
    if (in.device() != rep.stack->device()) {
      ensure_buffer(rep.x_batch, in.shape(), in.dtype(), rep.stack->device());
      rep.x_batch.copy_from(in);
      in = rep.x_batch;
    }
    Tensor pred = rep.stack->forward(in, ctx);
    Tensor dst = out.rows(begin + first, begin + first + rows);
    dst.copy_from(pred);
  }, /*across_workers=*/false);
}

void TrainEngine::set_learning_rate(double lr) {
  for (auto& rep : replicas_) rep->optimizer->set_learning_rate(lr);
}

std::int64_t TrainEngine::shard_size() const {
  // Equal ranges rounded to 16 elements (64 bytes of float32), so no cache line is written by two
  // replicas; the last range may run into the packed buffers' zero padding.
  const std::int64_t total = primary_.trainable_count();
  const std::int64_t n = num_replicas();
  return ((total + n - 1) / n + 15) / 16 * 16;
}

std::pair<std::int64_t, std::int64_t> TrainEngine::shard_of(int replica) const {
  const std::int64_t total = primary_.trainable_count();
  const std::int64_t begin = std::min(total, shard_size() * replica);
  return {begin, std::min(total, begin + shard_size())};
}

void TrainEngine::reduce_scatter_own_shard(Replica& rep) {
  Tensor& grads = rep.stack->padded_grads();
  const std::int64_t per = shard_size();
  char* base = static_cast<char*>(grads.raw());
  const std::size_t elem = size_of(grads.dtype());
  rep.comm->reduce_scatter(base, base + static_cast<std::size_t>(rep.comm->rank() * per) * elem,
                           static_cast<std::size_t>(per), grads.dtype(), ReduceOp::Sum);
}

void TrainEngine::gather_shards(Replica& rep) {
  Tensor& values = rep.stack->padded_values();
  const std::int64_t per = shard_size();
  char* base = static_cast<char*>(values.raw());
  const std::size_t elem = size_of(values.dtype());
  rep.comm->all_gather(base + static_cast<std::size_t>(rep.comm->rank() * per) * elem, base,
                       static_cast<std::size_t>(per), values.dtype());
}

Optimizer::State TrainEngine::optimizer_state() const {
  Optimizer::State merged = replicas_.front()->optimizer->state();
  if (!sharded_optimizer_) return merged;
  // Where each parameter starts in the packed order (the optimizer's element order).
  std::vector<std::pair<std::string, std::int64_t>> offsets;
  std::int64_t offset = 0;
  for (auto* p : const_cast<LayerStack&>(primary_).trainable_parameters()) {
    offsets.emplace_back(p->name, offset);
    offset += p->value.numel();
  }
  auto offset_of = [&](const std::string& slot_name) -> std::int64_t {
    const std::string param = slot_name.substr(0, slot_name.rfind('/'));
    for (const auto& [name, o] : offsets)
      if (name == param) return o;
    return -1;
  };
  for (std::size_t r = 1; r < replicas_.size(); ++r) {
    const Optimizer::State theirs = replicas_[r]->optimizer->state();
    const auto [b, e] = shard_of(static_cast<int>(r));
    for (std::size_t k = 0; k < merged.size(); ++k) {
      const std::int64_t o = offset_of(merged[k].first);
      if (o < 0) continue;  // "iterations": the same on every replica
      const std::int64_t n = merged[k].second.numel();
      const std::int64_t lo = std::max(b, o), hi = std::min(e, o + n);
      if (lo >= hi) continue;
      const std::size_t elem = size_of(merged[k].second.dtype());
      std::memcpy(static_cast<char*>(merged[k].second.raw()) + (lo - o) * elem,
                  static_cast<const char*>(theirs[k].second.raw()) + (lo - o) * elem, (hi - lo) * elem);
    }
  }
  return merged;
}

std::vector<double> TrainEngine::replica_losses() const {
  std::vector<double> out;
  for (const auto& rep : replicas_)
    out.push_back(last_count_ > 0 ? rep->loss_sum / static_cast<double>(last_count_) : 0.0);
  return out;
}

std::vector<TrainEngine::Profile> TrainEngine::profile() const {
  std::vector<Profile> out;
  for (const auto& rep : replicas_) {
    out.push_back(rep->profile);
    out.back().wall = wall_;
  }
  return out;
}

void TrainEngine::reset_profile() {
  for (auto& rep : replicas_) rep->profile = Profile{};
  wall_ = 0;
}

void TrainEngine::set_metrics(const std::vector<std::unique_ptr<Metric>>& metrics) {
  for (auto& rep : replicas_) {
    rep->metrics.clear();
    for (const auto& m : metrics) rep->metrics.push_back(m->clone());
  }
}

void TrainEngine::reset_metrics() {
  loss_total_ = 0;
  loss_count_ = 0;
  for (auto& rep : replicas_)
    for (auto& m : rep->metrics) m->reset();
}

Logs TrainEngine::logs(bool all_workers) const {
  Logs out;
  out.emplace_back("loss", loss_count_ > 0 ? loss_total_ / loss_count_ : 0.0);
  const auto& first = replicas_.front()->metrics;
  for (std::size_t i = 0; i < first.size(); ++i) {
    // Sum each metric's accumulators over the replicas (in replica order), then evaluate once.
    std::vector<double> totals = first[i]->totals();
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      auto t = replicas_[r]->metrics[i]->totals();
      for (std::size_t k = 0; k < totals.size(); ++k) totals[k] += t[k];
    }
    if (all_workers) strategy_->sum_across_workers(totals);
    auto merged = first[i]->clone();
    merged->set_totals(totals);
    out.emplace_back(merged->name(), merged->result());
  }
  return out;
}

void TrainEngine::update_metrics(Replica& rep, const Tensor& y, const Tensor& pred) {
  if (rep.metrics.empty()) return;
  if (y.device().is_cpu() && pred.device().is_cpu()) {
    for (auto& m : rep.metrics) m->update(y, pred);
    return;
  }
  ensure_buffer(rep.y_host, y.shape(), y.dtype());
  ensure_buffer(rep.pred_host, pred.shape(), pred.dtype());
  rep.y_host.copy_from(y);
  rep.pred_host.copy_from(pred);
  for (auto& m : rep.metrics) m->update(rep.y_host, rep.pred_host);
}

void TrainEngine::refresh_primary() {
  if (!primary_stale_) return;
  LayerStack& r0 = *replicas_.front()->stack;
  primary_.packed_values().copy_from(r0.packed_values());
  primary_.non_trainable_values().copy_from(r0.non_trainable_values());
  primary_stale_ = false;
}

void TrainEngine::broadcast_weights_from_primary() {
  MDTRAIN_CHECK(!primary_stale_, std::logic_error,
                "[engine] the host weights are older than the replicas': refresh_primary() before changing them");
  for (std::size_t r = primary_is_replica0_ ? 1 : 0; r < replicas_.size(); ++r) {
    replicas_[r]->stack->packed_values().copy_from(primary_.packed_values());
    replicas_[r]->stack->non_trainable_values().copy_from(primary_.non_trainable_values());
  }
}

Optimizer& TrainEngine::optimizer() { return *replicas_.front()->optimizer; }

LayerStack& TrainEngine::replica_stack(int r) {
  MDTRAIN_CHECK(r >= 0 && r < num_replicas(), std::out_of_range, "[engine] replica ", r, " out of range for ",
                num_replicas(), " replicas");
  return *replicas_[static_cast<std::size_t>(r)]->stack;
}

}  // namespace mdtrain
