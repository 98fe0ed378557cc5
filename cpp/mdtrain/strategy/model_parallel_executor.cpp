#include "mdtrain/strategy/model_parallel_executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>

#include "mdtrain/core/memory_stats.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/batch_loss_scale.h"
#include "mdtrain/strategy/batch_split.h"
#include "mdtrain/strategy/communicator_shard_group.h"
#include "mdtrain/strategy/communicator_sums.h"
#include "mdtrain/strategy/model_parallel_strategy.h"

namespace mdtrain {

struct ModelParallelExecutor::Shard {
  int batch = 0, model = 0;  // mesh coordinates along the batch and model axes
  std::unique_ptr<Communicator> model_comm, batch_comm;
  CommunicatorShardGroup group{model_comm};  // what the sharded layers see of the model group
  CommunicatorSums batch_sums{batch_comm};   // what synchronized statistics see of the batch axis
  std::unique_ptr<Network> net;
  std::unique_ptr<Loss> loss, logits_loss;
  std::unique_ptr<Optimizer> optimizer;
  Tensor x_batch, y_batch, dpred;
  double loss_sum = 0;
  std::int64_t step_bytes = 0;  // model-axis bytes of the last training step
  StepProfile profile;
};

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "dense/kernel/momentum" -> "dense/kernel".
std::string weight_of_slot(const std::string& slot) { return slot.substr(0, slot.rfind('/')); }
}  // namespace

ModelParallelExecutor::ModelParallelExecutor(Network& primary, ModelParallelStrategy& strategy, const Loss& loss,
                                             const Optimizer& optimizer)
    : StepExecutor("[model_parallel]"), primary_(primary), strategy_(strategy) {
  MDTRAIN_CHECK(primary_.built(), std::logic_error, "[model_parallel] the model must be built before training");
  const auto& opts = optimizer.options();
  MDTRAIN_CHECK(!opts.clipnorm && !opts.global_clipnorm, std::invalid_argument,
                "[model_parallel] clipnorm and global_clipnorm are not supported under ModelParallel (the norm of a "
                "split weight spans its shards); use clipvalue");
  const DeviceMesh mesh = strategy_.mesh();
  plan_.emplace(primary_, strategy_.layouts(), mesh, strategy_.model_axis());
  // The step as data (tensor_parallel_step_plan.h): its batch-axis sync is what this executor runs.
  step_plan_ = strategy_.make_plan(primary_, *plan_, mesh, plan_options_of(optimizer));
  model_size_ = mesh.axis_size(strategy_.model_axis());
  batch_size_ = strategy_.batch_axis() ? mesh.axis_size(*strategy_.batch_axis()) : 1;

  auto model_comms = strategy_.make_axis_communicators(mesh, {strategy_.model_axis()});
  auto batch_comms =
      strategy_.make_axis_communicators(mesh, strategy_.batch_axis() ? std::vector<std::string>{*strategy_.batch_axis()}
                                                                     : std::vector<std::string>{});
  const Optimizer::State whole_state = optimizer.state();
  // The primary's unsharded weights are the host's copy (checkpoints, get_weights), not a device's:
  // each device's memory is its shard's.
  move_to_host(primary_.packed_values().storage());
  move_to_host(primary_.packed_grads().storage());
  move_to_host(primary_.non_trainable_values().storage());
  for (int d = 0; d < strategy_.num_local_replicas(); ++d) {
    const DeviceMemoryScope on_device(strategy_.devices()[static_cast<std::size_t>(d)]);
    auto s = std::make_unique<Shard>();
    const std::vector<int> at = mesh.coordinates(strategy_.first_local_replica() + d);
    s->model = at[static_cast<std::size_t>(mesh.axis_index(strategy_.model_axis()))];
    s->batch = strategy_.batch_axis() ? at[static_cast<std::size_t>(mesh.axis_index(*strategy_.batch_axis()))] : 0;
    s->model_comm = std::move(model_comms[static_cast<std::size_t>(d)]);
    s->batch_comm = std::move(batch_comms[static_cast<std::size_t>(d)]);
    s->net = plan_->build_shard(primary_, &s->group);
    // Built from the host copy; a GPU's shard is then copied to its GPU (its buffers follow).
    const Device& device = strategy_.devices()[static_cast<std::size_t>(d)];
    if (!device.is_cpu()) s->net = s->net->replicate(device);
    s->loss = loss.clone();
    s->logits_loss = loss.on_logits_of(s->net->output_activation());
    shards_.push_back(std::move(s));
  }
  for (const auto& s : shards_)
    if (local_batches_.empty() || local_batches_.back() != s->batch) local_batches_.push_back(s->batch);
  // ZeRO-1 over the batch axis inside one process. Across workers each worker keeps its shards'
  // whole optimizer state (as MultiWorkerMirrored does), so any worker can write a checkpoint.
  // On GPUs every device applies its shard's whole update, as MirroredStrategy's GPU replicas do.
  const GradientSync& sync = step_plan_.only_sync();
  MDTRAIN_CHECK(sync.values == shards_.front()->net->trainable_count() && sync.group == batch_size_, std::logic_error,
                "[model_parallel] the step plan syncs ", sync.values, " values over ", sync.group,
                " devices; a shard holds ", shards_.front()->net->trainable_count(), " over a batch axis of ",
                batch_size_);
  if (sync.kind == SyncKind::ZeroOne) zero_.emplace(sync.values, batch_size_);
  for (std::size_t d = 0; d < shards_.size(); ++d) {
    Shard* s = shards_[d].get();
    const DeviceMemoryScope on_device(strategy_.devices()[d]);
    // A fresh optimizer over this shard's weights: the clone forgets slots shaped for whole
    // weights (hold_only re-cuts), then takes its pieces of the whole state.
    s->optimizer = optimizer.clone();
    const auto range = zero_ ? zero_->range_of(s->batch)
                             : std::pair<std::int64_t, std::int64_t>{0, std::numeric_limits<std::int64_t>::max()};
    s->optimizer->hold_only(range.first, range.second);
    if (whole_state.size() > 1) {
      Optimizer::State mine;
      for (const auto& [name, t] : whole_state) {
        const int dim = name == "iterations" ? -1 : plan_->split_dim(weight_of_slot(name));
        if (dim < 0) {
          mine.emplace_back(name, t);
          continue;
        }
        Shape piece = t.shape();
        piece[static_cast<std::size_t>(dim)] /= model_size_;
        Tensor part(piece, t.dtype());
        plan_->copy_piece_out(weight_of_slot(name), t, s->model, part);
        mine.emplace_back(name, part);
      }
      s->optimizer->set_state(mine);
    }
  }
  for (auto& s : shards_)
    roster_.add({s->net.get(), s->optimizer.get(), true, &s->loss_sum, &s->profile, {&s->model_comm, &s->batch_comm}});
  roster_.set_shared_wall(&wall_);
}

ModelParallelExecutor::~ModelParallelExecutor() { strategy_.forget_executor(this); }

ModelParallelExecutor::Shard& ModelParallelExecutor::shard_at(int batch, int model) const {
  for (const auto& s : shards_)
    if (s->batch == batch && s->model == model) return *s;
  fail<std::logic_error>("[model_parallel] no device at batch ", batch, ", model ", model);
}

template <class F>
void ModelParallelExecutor::run_devices(F&& fn) {
  if (communicators_broken_) remake_communicators();
  // The first device to fail is the one to report; it releases peers waiting in its groups.
  std::exception_ptr first_failure;
  std::mutex failure_mutex;
  try {
    strategy_.run_replicas([&](int d) {
      Shard& s = *shards_[static_cast<std::size_t>(d)];
      const DeviceMemoryScope on_device(strategy_.devices()[static_cast<std::size_t>(d)]);
      try {
        fn(s, d);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        s.model_comm->abort(e.what());
        s.batch_comm->abort(e.what());
        throw;
      }
    });
  } catch (...) {
    communicators_broken_ = true;  // an aborted group cannot be reused
    if (first_failure) std::rethrow_exception(first_failure);
    throw;
  }
}

void ModelParallelExecutor::remake_communicators() {
  const DeviceMesh mesh = strategy_.mesh();
  auto model_comms = strategy_.make_axis_communicators(mesh, {strategy_.model_axis()});
  auto batch_comms =
      strategy_.make_axis_communicators(mesh, strategy_.batch_axis() ? std::vector<std::string>{*strategy_.batch_axis()}
                                                                     : std::vector<std::string>{});
  for (std::size_t d = 0; d < shards_.size(); ++d) {
    shards_[d]->model_comm = std::move(model_comms[d]);
    shards_[d]->batch_comm = std::move(batch_comms[d]);
  }
  communicators_broken_ = false;
}

void ModelParallelExecutor::gather_batch(Shard& s, const GlobalBatch& batch, std::int64_t first, std::int64_t rows) {
  Shape xs = batch.x.shape(), ys = batch.y.shape();
  xs[0] = rows;
  ys[0] = rows;
  ensure_buffer(s.x_batch, xs, batch.x.dtype(), s.net->device());
  ensure_buffer(s.y_batch, ys, batch.y.dtype(), s.net->device());
  ops::gather_rows(batch.x, batch.indices + first, rows, s.x_batch);
  ops::gather_rows(batch.y, batch.indices + first, rows, s.y_batch);
}

double ModelParallelExecutor::regularization_loss() const {
  // Sharded layers report their shard's share; replicated layers are counted once (model shard 0).
  double total = 0;
  for (int m = 0; m < model_size_; ++m) {
    const auto& layers = shard_at(local_batches_.front(), m).net->layers();
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (plan_->sharded(i) || m == 0) total += layers[i]->regularization_loss();
  }
  return total;
}

StepLoss ModelParallelExecutor::train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[model_parallel] a training batch needs at least one example");
  StepLoss result;
  result.regularization = regularization_loss();  // Keras adds the penalties of the starting weights
  const auto step = static_cast<std::uint64_t>(shards_.front()->optimizer->iterations());
  const auto step_start = Clock::now();
  run_devices([&](Shard& s, int d) {
    Network& net = *s.net;
    const RowSlice slice = slice_of(batch.count, batch_size_, s.batch);
    s.loss_sum = 0;
    const std::int64_t bytes_before = s.group.bytes();
    const double model_axis_before = s.group.seconds();
    auto t = Clock::now();
    ForwardContext ctx;
    ctx.training = true;
    ctx.step = step;
    ctx.global_row_offset = slice.first;
    ctx.replicas = batch_size_ > 1 ? &s.batch_sums : nullptr;
    // ignore_class's label count: every device of a model group holds the same rows, so summing
    // over the batch axis (which spans the workers) counts each row once.
    Communicator* labels_over = batch_size_ > 1 ? s.batch_comm.get() : nullptr;
    if (slice.rows > 0) {
      gather_batch(s, batch, slice.first, slice.rows);
      const std::int64_t labels = global_label_count(*s.loss, &s.y_batch, labels_over);
      Tensor pred = net.forward(s.x_batch, ctx);
      ensure_buffer(s.dpred, pred.shape(), pred.dtype(), pred.device());
      const BatchLossScale ls = batch_loss_scale(*s.loss, s.y_batch, pred, batch.count, labels);
      // Every device of a model group computes the same whole output and loss; shard 0 reports.
      double sum = 0;
      if (s.logits_loss) {
        sum = s.logits_loss->forward_backward(s.y_batch, net.logits(), ls.grad_scale, &s.dpred);
        net.backward_from_logits(s.dpred, {});
      } else {
        sum = s.loss->forward_backward(s.y_batch, pred, ls.grad_scale, &s.dpred);
        net.backward(s.dpred, {});
      }
      if (s.model == 0) {
        s.loss_sum = sum * ls.report_factor;
        if (outputs) outputs->on_replica_output(d, s.y_batch, pred);
      }
    } else {
      // The whole model group has no rows: it skips its model-axis collectives together, but
      // joins the batch axis's with zero gradients.
      global_label_count(*s.loss, nullptr, labels_over);
      net.packed_grads().fill(0.0);
      net.step_without_rows(ctx, {});
    }
    // The model axis's collectives ran inside forward and backward: communication, not compute.
    const double model_axis = s.group.seconds() - model_axis_before;
    s.profile.compute += seconds_since(t) - model_axis;
    s.profile.allreduce += model_axis;
    s.step_bytes = s.group.bytes() - bytes_before;
    t = Clock::now();
    if (zero_) zero_->reduce_scatter_own_range(net, *s.batch_comm);
    else if (batch_size_ > 1)
      GradientReducer(*s.batch_comm, step_plan_.only_sync().bucket_bytes).reduce(net.packed_grads());
    s.profile.allreduce += seconds_since(t);
    t = Clock::now();
    net.add_regularization_gradients();
    if (zero_) {
      const auto [begin, end] = zero_->range_of(s.batch);
      s.optimizer->apply(net.trainable_parameters(), begin, end);
      s.profile.update += seconds_since(t);
      t = Clock::now();
      zero_->gather_ranges(net, *s.batch_comm);
      s.profile.allreduce += seconds_since(t);
    } else {
      s.optimizer->apply(net.trainable_parameters());
      s.profile.update += seconds_since(t);
    }
    s.profile.steps += 1;
  });
  wall_ += seconds_since(step_start);
  primary_stale_ = true;
  result.sum = sum_of_losses();
  return result;
}

StepLoss ModelParallelExecutor::test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument,
                "[model_parallel] an evaluation batch needs at least one example");
  run_devices([&](Shard& s, int d) {
    s.loss_sum = 0;
    const RowSlice slice = slice_of(batch.count, batch_size_, s.batch);
    Communicator* labels_over = batch_size_ > 1 ? s.batch_comm.get() : nullptr;  // as in train_step
    if (slice.rows == 0) {
      global_label_count(*s.loss, nullptr, labels_over);
      return;
    }
    gather_batch(s, batch, slice.first, slice.rows);
    const std::int64_t labels = global_label_count(*s.loss, &s.y_batch, labels_over);
    ForwardContext ctx;
    ctx.global_row_offset = slice.first;
    Tensor pred = s.net->forward(s.x_batch, ctx);
    const double sum = s.logits_loss ? s.logits_loss->forward_backward(s.y_batch, s.net->logits(), 1.0, nullptr)
                                     : s.loss->forward_backward(s.y_batch, pred, 1.0, nullptr);
    if (s.model == 0) {
      s.loss_sum = sum * batch_loss_scale(*s.loss, s.y_batch, pred, batch.count, labels).report_factor;
      if (outputs) outputs->on_replica_output(d, s.y_batch, pred);
    }
  });
  StepLoss result;
  result.sum = sum_of_losses();
  result.regularization = regularization_loss();
  return result;
}

double ModelParallelExecutor::sum_of_losses() {
  double sum = 0;
  for (int b : local_batches_) sum += shard_at(b, 0).loss_sum;  // batch order
  if (strategy_.num_workers() > 1) {
    // Every worker must see the same loss (callbacks decide on it): summed in worker order.
    std::vector<double> v{sum};
    strategy_.sum_across_workers(v);
    sum = v.front();
  }
  return sum;
}

void ModelParallelExecutor::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  // Every worker predicts every row (each process returns the result), cut among its own batch
  // groups: a forward runs collectives on the model axis only.
  const auto groups = static_cast<std::int64_t>(local_batches_.size());
  run_devices([&](Shard& s, int) {
    const auto group = std::find(local_batches_.begin(), local_batches_.end(), s.batch) - local_batches_.begin();
    const RowSlice slice = slice_of(count, groups, group);
    if (slice.rows == 0) return;
    ForwardContext ctx;
    ctx.global_row_offset = slice.first;
    Tensor in = x.rows(begin + slice.first, begin + slice.first + slice.rows);
    if (in.device() != s.net->device()) {
      ensure_buffer(s.x_batch, in.shape(), in.dtype(), s.net->device());
      s.x_batch.copy_from(in);
      in = s.x_batch;
    }
    Tensor pred = s.net->forward(in, ctx);
    if (s.model != 0) return;
    Tensor dst = out.rows(begin + slice.first, begin + slice.first + slice.rows);
    dst.copy_from(pred);
  });
}

Optimizer::State ModelParallelExecutor::optimizer_state() const {
  // Per model shard: the batch group's ZeRO ranges stitched into the shard's whole state; then the
  // shards' pieces put side by side into the unsharded tensors.
  std::vector<Optimizer::State> per_model;
  for (int m = 0; m < model_size_; ++m) {
    if (!zero_) {
      per_model.push_back(shard_at(local_batches_.front(), m).optimizer->state());
      continue;
    }
    std::vector<Optimizer::State> states;
    for (int b = 0; b < batch_size_; ++b) states.push_back(shard_at(b, m).optimizer->state());
    per_model.push_back(zero_->stitch(states, *shard_at(0, m).net));
  }
  Optimizer::State whole = per_model.front();
  for (auto& [name, t] : whole) {
    const int dim = name == "iterations" ? -1 : plan_->split_dim(weight_of_slot(name));
    if (dim < 0) continue;
    Shape shape = t.shape();
    shape[static_cast<std::size_t>(dim)] *= model_size_;
    Tensor joined(shape, t.dtype());
    for (int m = 0; m < model_size_; ++m) {
      for (const auto& [other, piece] : per_model[static_cast<std::size_t>(m)])
        if (other == name) plan_->copy_piece_in(weight_of_slot(name), piece, m, joined);
    }
    t = joined;
  }
  return whole;
}

std::vector<std::int64_t> ModelParallelExecutor::parameter_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& s : shards_)
    out.push_back(
        static_cast<std::int64_t>(s->net->packed_values().nbytes() + s->net->non_trainable_values().nbytes()));
  return out;
}

std::vector<std::int64_t> ModelParallelExecutor::model_axis_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& s : shards_) out.push_back(s->step_bytes);
  return out;
}

void ModelParallelExecutor::broadcast_weights_from_primary() {
  MDTRAIN_CHECK(!primary_stale_, std::logic_error,
                "[model_parallel] the host weights are older than the shards': refresh_primary() before changing them");
  for (auto& s : shards_) plan_->scatter(primary_, *s->net, s->model);
}

void ModelParallelExecutor::refresh_primary() {
  if (!primary_stale_) return;
  for (int m = 0; m < model_size_; ++m) plan_->gather(*shard_at(local_batches_.front(), m).net, m, primary_);
  primary_stale_ = false;
}

void ModelParallelExecutor::abort(const std::string& reason) {
  for (auto& s : shards_) {
    s->model_comm->abort(reason);
    s->batch_comm->abort(reason);
  }
  communicators_broken_ = true;
}

void ModelParallelExecutor::reset_own_profile() {
  for (auto& s : shards_) s->group.reset_bytes();
}

}  // namespace mdtrain
