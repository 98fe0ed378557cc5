#include "mdtrain/strategy/replicated_executor.h"

#include <chrono>
#include <exception>
#include <mutex>

#include "mdtrain/core/memory_stats.h"
#include "mdtrain/nn/masked_steps.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/batch_loss_scale.h"
#include "mdtrain/strategy/batch_split.h"
#include "mdtrain/strategy/communicator_sums.h"
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

struct ReplicatedExecutor::Replica {
  Network* net = nullptr;
  std::unique_ptr<Network> owned_net;  // null when the replica trains the primary itself
  std::unique_ptr<Loss> loss;
  std::unique_ptr<Loss> logits_loss;  // the loss on the output layer's logits, when Keras uses them
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradientReducer> reducer;
  CommunicatorSums sums{comm};              // what the layers see of the other replicas (ForwardContext)
  Tensor x_batch, y_batch, w_batch, dpred;  // w_batch: the slice's sample weights, when given
  MaskedSteps masked;                       // the kept steps of an output that carries a mask
  double loss_sum = 0;                      // this step's sum of per-example losses on this replica's slice
  double all_workers_loss_sum = 0;          // loss_sum summed over every replica of every worker
  StepProfile profile;
};

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ReplicatedExecutor::ReplicatedExecutor(Network& primary, Strategy& strategy, const Loss& loss,
                                       const Optimizer& optimizer, StepPlan plan)
    : StepExecutor("[engine]"), primary_(primary), strategy_(strategy), plan_(std::move(plan)) {
  reads_output_masks_ = true;
  reads_activity_losses_ = true;
  MDTRAIN_CHECK(primary.built(), std::logic_error, "[engine] the model must be built before training");
  // Placement comes from the strategy's devices: a replica on a CPU device trains a host copy (the
  // primary itself for replica 0), a replica on a GPU a copy whose weights live on that GPU. Layers
  // without CUDA kernels are refused here, before any communicator or GPU memory exists.
  for (const Device& d : strategy_.devices()) primary.check_device_support(d);
  primary_is_replica0_ = strategy_.devices().front().is_cpu();
  auto comms = strategy_.make_replica_communicators();
  const int n = strategy_.num_local_replicas();
  MDTRAIN_CHECK(static_cast<int>(comms.size()) == n, std::logic_error, "[engine] strategy made ", comms.size(),
                " communicators for ", n, " replicas");
  MDTRAIN_CHECK(static_cast<std::int64_t>(n) * 16 < Network::kPackedPadding, std::invalid_argument, "[engine] at most ",
                Network::kPackedPadding / 16 - 1, " replicas are supported, got ", n);
  // The sync plan is the StepPlan's (replicated_step_plan decided it); the executor only runs it.
  const GradientSync& sync = plan_.only_sync();
  MDTRAIN_CHECK(sync.group == strategy_.num_replicas_in_sync() && sync.values == primary.trainable_count(),
                std::invalid_argument, "[engine] ", strategy_.name(), ": the plan syncs ", sync.values, " values over ",
                sync.group, " replicas, the model has ", primary.trainable_count(), " over ",
                strategy_.num_replicas_in_sync());
  sync_ = sync.kind;
  if (sync_ == SyncKind::ZeroOne || sync_ == SyncKind::ZeroOneAfterAllReduce) shards_.emplace(sync.values, n);
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_unique<Replica>();
    const Device& device = strategy_.devices()[static_cast<std::size_t>(r)];
    const DeviceMemoryScope on_device(device);
    if (r == 0 && primary_is_replica0_) {
      rep->net = &primary_;
    } else {
      rep->owned_net = primary_.replicate(device.is_cpu() ? primary_.device() : device);
      rep->net = rep->owned_net.get();
    }
    rep->loss = loss.clone();
    rep->logits_loss = loss.on_logits_of(primary_.output_activation());
    rep->optimizer = optimizer.clone();
    // ZeRO-1: each replica keeps the optimizer state of its own range only.
    if (shards_) rep->optimizer->hold_only(shards_->range_of(r).first, shards_->range_of(r).second);
    attach_communicator(*rep, std::move(comms[static_cast<std::size_t>(r)]));
    replicas_.push_back(std::move(rep));
  }
  for (auto& rep : replicas_)
    roster_.add({rep->net, rep->optimizer.get(), true, &rep->loss_sum, &rep->profile, {&rep->comm}});
  roster_.set_shared_wall(&wall_);
}

ReplicatedExecutor::~ReplicatedExecutor() = default;

template <class F>
void ReplicatedExecutor::for_each_slice(std::int64_t count, F&& fn, bool across_workers) {
  const std::int64_t parts = across_workers ? strategy_.num_replicas_in_sync() : num_replicas();
  const std::int64_t offset = across_workers ? strategy_.first_local_replica() : 0;
  if (communicators_broken_) remake_communicators();
  // The first replica to fail is the one to report: it records its error before aborting the
  // group, so the peers' "group failed" errors that follow never hide it.
  std::exception_ptr first_failure;
  std::mutex failure_mutex;
  try {
    strategy_.run_replicas([&](int local) {
      const RowSlice slice = slice_of(count, parts, offset + local);
      Replica& rep = *replicas_[static_cast<std::size_t>(local)];
      const DeviceMemoryScope on_device(strategy_.devices()[static_cast<std::size_t>(local)]);
      try {
        fn(rep, local, slice.first, slice.rows);
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

void ReplicatedExecutor::remake_communicators() {
  auto comms = strategy_.make_replica_communicators();
  for (std::size_t r = 0; r < replicas_.size(); ++r) attach_communicator(*replicas_[r], std::move(comms[r]));
  communicators_broken_ = false;
}

void ReplicatedExecutor::attach_communicator(Replica& rep, std::unique_ptr<Communicator> comm) {
  rep.comm = std::move(comm);
  rep.reducer =
      std::make_unique<GradientReducer>(*rep.comm, strategy_.gradient_bucket_bytes(), strategy_.gradient_reduction());
}

void ReplicatedExecutor::check_weights_unmasked(const GlobalBatch& batch, bool masked_output) {
  // Keras would multiply the mask into the weights; the masked loss (nn/masked_steps.h) takes
  // neither yet, so weights are refused rather than dropped.
  MDTRAIN_CHECK(batch.sample_weight == nullptr || !masked_output, std::invalid_argument,
                "[engine] sample weights with a model output that carries a mask are not supported yet");
}

void ReplicatedExecutor::gather_batch(Replica& rep, const GlobalBatch& batch, std::int64_t first, std::int64_t rows) {
  Shape xs = batch.x.shape(), ys = batch.y.shape();
  xs[0] = rows;
  ys[0] = rows;
  const Device& device = rep.net->device();
  ensure_buffer(rep.x_batch, xs, batch.x.dtype(), device);
  ensure_buffer(rep.y_batch, ys, batch.y.dtype(), device);
  ops::gather_rows(batch.x, batch.indices + first, rows, rep.x_batch);
  ops::gather_rows(batch.y, batch.indices + first, rows, rep.y_batch);
  if (batch.sample_weight != nullptr) {
    ensure_buffer(rep.w_batch, {rows}, DType::Float32, device);
    ops::gather_rows(*batch.sample_weight, batch.indices + first, rows, rep.w_batch);
  }
}

StepLoss ReplicatedExecutor::train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[engine] a training batch needs at least one example");
  StepLoss result;
  // Keras adds the weight penalties of the weights the step starts from.
  result.regularization = replicas_.front()->net->regularization_loss();
  const bool reduce_scatter = sync_ == SyncKind::ZeroOne;
  const bool to_parameter_device = sync_ == SyncKind::ReduceToDevice;
  // The step number (dropout's key) of every replica: under ReduceToDevice only replica 0's
  // optimizer counts steps.
  const auto step = static_cast<std::uint64_t>(replicas_.front()->optimizer->iterations());
  const auto step_start = Clock::now();
  const bool masked_output = primary_.output_masked();
  check_weights_unmasked(batch, masked_output);
  for_each_slice(batch.count, [&](Replica& rep, int local, std::int64_t first, std::int64_t rows) {
    Network& net = *rep.net;
    rep.loss_sum = 0;
    auto t = Clock::now();
    ForwardContext ctx;
    ctx.training = true;
    ctx.step = step;
    ctx.global_row_offset = first;
    ctx.global_rows = batch.count;
    ctx.replicas = &rep.sums;
    // Sum the gradients over the replicas: all of them, bucket by bucket as backward finishes
    // them, or (ZeRO-1) after backward only this replica's range, which is all its update reads.
    // Either way ranks are added in rank order.
    Network::GradientsFinal on_final;
    double in_reducer = 0;  // time backward spent starting buckets: communication, not compute
    if (!reduce_scatter && !to_parameter_device) {
      rep.reducer->begin(net.packed_grads());
      on_final = [&](std::int64_t first_final) {
        const auto r0 = Clock::now();
        rep.reducer->gradients_final_from(first_final);
        in_reducer += seconds_since(r0);
      };
    }
    if (masked_output) {
      masked_train_step(rep, batch, ctx, first, rows, on_final, local, outputs);
    } else if (rows > 0) {
      gather_batch(rep, batch, first, rows);
      const std::int64_t labels = global_label_count(*rep.loss, &rep.y_batch, rep.comm.get());
      Tensor pred = net.forward(rep.x_batch, ctx);
      ensure_buffer(rep.dpred, pred.shape(), pred.dtype(), pred.device());
      const BatchLossScale ls = batch_loss_scale(*rep.loss, rep.y_batch, pred, batch.count, labels);
      const Tensor* weights = batch.sample_weight ? &rep.w_batch : nullptr;
      if (rep.logits_loss) {
        rep.loss_sum = rep.logits_loss->forward_backward(rep.y_batch, net.logits(), ls.grad_scale, &rep.dpred, weights);
        net.backward_from_logits(rep.dpred, on_final);
      } else {
        rep.loss_sum = rep.loss->forward_backward(rep.y_batch, pred, ls.grad_scale, &rep.dpred, weights);
        net.backward(rep.dpred, on_final);
      }
      rep.loss_sum *= ls.report_factor;
      rep.loss_sum += net.activity_loss();  // Keras's activity penalties, / the global rows with the rest
      if (outputs) outputs->on_replica_output(local, rep.y_batch, pred);
    } else {
      // No rows: zero gradients, but still every collective the layers run in training
      // (synchronized BatchNormalization's statistics) and every bucket's, in the order the
      // other replicas run them.
      global_label_count(*rep.loss, nullptr, rep.comm.get());
      net.packed_grads().fill(0.0);
      net.step_without_rows(ctx, on_final);
    }
    rep.profile.compute += seconds_since(t) - in_reducer;
    rep.profile.allreduce += in_reducer;
    t = Clock::now();
    if (to_parameter_device) {
      // Gradients summed onto the parameter device (rank order, as ReductionToOneDevice sums
      // them), one update there, the new weights back to every replica.
      Tensor& grads = net.packed_grads();
      rep.comm->reduce(grads.raw(), static_cast<std::size_t>(grads.numel()), grads.dtype(), ReduceOp::Sum, 0);
      rep.profile.allreduce += seconds_since(t);
      t = Clock::now();
      if (rep.comm->rank() == 0) {
        net.add_regularization_gradients();
        rep.optimizer->apply(net.trainable_parameters());
      }
      rep.profile.update += seconds_since(t);
      t = Clock::now();
      rep.comm->broadcast(net.packed_values(), 0);
      rep.profile.allreduce += seconds_since(t);
      rep.profile.steps += 1;
      return;
    }
    if (reduce_scatter) {
      shards_->reduce_scatter_own_range(net, *rep.comm);
    } else {
      rep.reducer->finish();
    }
    rep.profile.allreduce += seconds_since(t);
    t = Clock::now();
    net.add_regularization_gradients();
    if (!shards_) {
      rep.optimizer->apply(net.trainable_parameters());
    } else {
      // Each replica updates its range; the updated ranges are then gathered everywhere.
      const auto [begin, end] = shards_->range_of(rep.comm->rank());
      rep.optimizer->apply(net.trainable_parameters(), begin, end);
      rep.profile.update += seconds_since(t);
      t = Clock::now();
      shards_->gather_ranges(net, *rep.comm);
      rep.profile.allreduce += seconds_since(t);
      t = Clock::now();
    }
    rep.profile.update += seconds_since(t);
    rep.profile.steps += 1;
  });
  wall_ += seconds_since(step_start);
  // The host copy of the weights is refreshed when something reads it, not every step.
  if (!primary_is_replica0_) primary_stale_ = true;
  result.sum = sum_of_replica_losses(batch.count);
  return result;
}

StepLoss ReplicatedExecutor::test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[engine] an evaluation batch needs at least one example");
  const bool masked_output = primary_.output_masked();
  check_weights_unmasked(batch, masked_output);
  for_each_slice(batch.count, [&](Replica& rep, int local, std::int64_t first, std::int64_t rows) {
    rep.loss_sum = 0;
    if (masked_output) {
      masked_test_step(rep, batch, first, rows, local, outputs);
      return;
    }
    if (rows == 0) {
      global_label_count(*rep.loss, nullptr, rep.comm.get());
      return;
    }
    gather_batch(rep, batch, first, rows);
    const std::int64_t labels = global_label_count(*rep.loss, &rep.y_batch, rep.comm.get());
    ForwardContext ctx;
    ctx.global_row_offset = first;
    Tensor pred = rep.net->forward(rep.x_batch, ctx);
    const Tensor* weights = batch.sample_weight ? &rep.w_batch : nullptr;
    rep.loss_sum = rep.logits_loss
                       ? rep.logits_loss->forward_backward(rep.y_batch, rep.net->logits(), 1.0, nullptr, weights)
                       : rep.loss->forward_backward(rep.y_batch, pred, 1.0, nullptr, weights);
    rep.loss_sum *= batch_loss_scale(*rep.loss, rep.y_batch, pred, batch.count, labels).report_factor;
    rep.loss_sum += rep.net->activity_loss();
    if (outputs) outputs->on_replica_output(local, rep.y_batch, pred);
  });
  StepLoss result;
  result.sum = sum_of_replica_losses(batch.count);
  result.regularization = replicas_.front()->net->regularization_loss();
  return result;
}

void ReplicatedExecutor::masked_train_step(Replica& rep, const GlobalBatch& batch, const ForwardContext& ctx,
                                           std::int64_t first, std::int64_t rows,
                                           const Network::GradientsFinal& on_final, int local,
                                           ReplicaOutputSink* outputs) {
  // Keras's divisor is the kept steps of the whole global batch (nn/masked_steps.h), known only
  // after the forward: every replica sums it between its forward and its backward, a replica
  // without rows too (its layers' collectives, then the count's, then backward's, as the others).
  Network& net = *rep.net;
  if (rows == 0) {
    net.packed_grads().fill(0.0);
    net.forward_without_rows(ctx);
    global_count(0, rep.comm.get());
    net.backward_without_rows(on_final);
    return;
  }
  gather_batch(rep, batch, first, rows);
  Tensor pred = net.forward(rep.x_batch, ctx);
  const Tensor mask = net.output_mask();
  MDTRAIN_CHECK(mask.defined(), std::invalid_argument, "[engine] the output of the model carries a mask, but the ",
                "layer that makes it produced none on ", net.device().to_string(),
                " (masks are supported on CPU devices only for now)");
  const Tensor& scored = rep.logits_loss ? net.logits() : pred;
  rep.masked.select(*rep.loss, rep.y_batch, scored, mask);
  const std::int64_t global = global_count(rep.masked.count(*rep.loss), rep.comm.get());
  const BatchLossScale ls = counted_loss_scale(batch.count, global);
  if (rep.logits_loss) {
    rep.loss_sum = rep.masked.forward_backward(*rep.logits_loss, ls.grad_scale, &rep.dpred);
    net.backward_from_logits(rep.dpred, on_final);
  } else {
    rep.loss_sum = rep.masked.forward_backward(*rep.loss, ls.grad_scale, &rep.dpred);
    net.backward(rep.dpred, on_final);
  }
  rep.loss_sum *= ls.report_factor;
  rep.loss_sum += net.activity_loss();
  if (outputs) outputs->on_replica_masked_output(local, rep.y_batch, pred, mask);
}

void ReplicatedExecutor::masked_test_step(Replica& rep, const GlobalBatch& batch, std::int64_t first, std::int64_t rows,
                                          int local, ReplicaOutputSink* outputs) {
  if (rows == 0) {
    global_count(0, rep.comm.get());
    return;
  }
  gather_batch(rep, batch, first, rows);
  ForwardContext ctx;
  ctx.global_row_offset = first;
  Tensor pred = rep.net->forward(rep.x_batch, ctx);
  const Tensor mask = rep.net->output_mask();
  MDTRAIN_CHECK(mask.defined(), std::invalid_argument, "[engine] the output of the model carries a mask, but the ",
                "layer that makes it produced none on ", rep.net->device().to_string(),
                " (masks are supported on CPU devices only for now)");
  const Tensor& scored = rep.logits_loss ? rep.net->logits() : pred;
  rep.masked.select(*rep.loss, rep.y_batch, scored, mask);
  const std::int64_t global = global_count(rep.masked.count(*rep.loss), rep.comm.get());
  rep.loss_sum = rep.masked.forward_backward(rep.logits_loss ? *rep.logits_loss : *rep.loss, 1.0, nullptr);
  rep.loss_sum *= counted_loss_scale(batch.count, global).report_factor;
  rep.loss_sum += rep.net->activity_loss();
  if (outputs) outputs->on_replica_masked_output(local, rep.y_batch, pred, mask);
}

double ReplicatedExecutor::sum_of_replica_losses(std::int64_t count) {
  if (strategy_.num_workers() == 1) {
    double sum = 0;
    for (const auto& rep : replicas_) sum += rep->loss_sum;  // replica order: deterministic
    return sum;
  }
  // Every worker must see the same loss (callbacks such as TerminateOnNaN or EarlyStopping decide
  // on it, and all workers must decide alike): sum it over all replicas, in rank order.
  for_each_slice(count, [&](Replica& rep, int, std::int64_t, std::int64_t) {
    rep.all_workers_loss_sum = rep.loss_sum;
    rep.comm->all_reduce(&rep.all_workers_loss_sum, 1, DType::Float64, ReduceOp::Sum);
  });
  return replicas_.front()->all_workers_loss_sum;
}

void ReplicatedExecutor::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  // Every worker predicts every row (the result is returned by each process), split among its
  // own replicas only.
  for_each_slice(
      count,
      [&](Replica& rep, int, std::int64_t first, std::int64_t rows) {
        if (rows == 0) return;
        ForwardContext ctx;
        ctx.global_row_offset = first;
        Tensor in = x.rows(begin + first, begin + first + rows);
        if (in.device() != rep.net->device()) {
          ensure_buffer(rep.x_batch, in.shape(), in.dtype(), rep.net->device());
          rep.x_batch.copy_from(in);
          in = rep.x_batch;
        }
        Tensor pred = rep.net->forward(in, ctx);
        Tensor dst = out.rows(begin + first, begin + first + rows);
        dst.copy_from(pred);
      },
      /*across_workers=*/false);
}

Optimizer::State ReplicatedExecutor::optimizer_state() const {
  if (!shards_) return replicas_.front()->optimizer->state();
  std::vector<Optimizer::State> states;
  for (const auto& rep : replicas_) states.push_back(rep->optimizer->state());
  return shards_->stitch(states, primary_);
}

void ReplicatedExecutor::abort(const std::string& reason) {
  for (auto& rep : replicas_) rep->comm->abort(reason);
  communicators_broken_ = true;  // an aborted group cannot be reused
}

void ReplicatedExecutor::refresh_primary() {
  if (!primary_stale_) return;
  Network& r0 = *replicas_.front()->net;
  primary_.packed_values().copy_from(r0.packed_values());
  primary_.non_trainable_values().copy_from(r0.non_trainable_values());
  primary_stale_ = false;
}

void ReplicatedExecutor::broadcast_weights_from_primary() {
  MDTRAIN_CHECK(!primary_stale_, std::logic_error,
                "[engine] the host weights are older than the replicas': refresh_primary() before changing them");
  for (std::size_t r = primary_is_replica0_ ? 1 : 0; r < replicas_.size(); ++r) {
    replicas_[r]->net->packed_values().copy_from(primary_.packed_values());
    replicas_[r]->net->non_trainable_values().copy_from(primary_.non_trainable_values());
  }
}

}  // namespace mdtrain
