#include "mdtrain/strategy/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <mutex>

#include "mdtrain/core/memory_stats.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/nn/graph_segment.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/batch_loss_scale.h"
#include "mdtrain/strategy/batch_split.h"
#include "mdtrain/strategy/communicator_sums.h"
#include "mdtrain/strategy/pipeline_slots.h"
#include "mdtrain/strategy/pipeline_step_plan.h"
#include "mdtrain/strategy/pipeline_strategy.h"

namespace mdtrain {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct PipelineExecutor::Device {
  int pipeline = 0, stage = 0;  // mesh coordinates along the batch and pipe axes
  mdtrain::Device place;        // the mesh's device
  mdtrain::Device memory;       // where the stage's tensors live: the host for CPU devices, else the GPU
  std::unique_ptr<Communicator> pipe_comm, batch_comm;
  CommunicatorSums batch_sums{batch_comm};  // what deferred statistics see of the batch axis
  std::unique_ptr<LayerStack> net;
  // Without recomputation: one clone of `net` per micro-batch that may be in flight at once, its
  // weights and gradients views of net's (share_weights), holding that micro-batch's activations.
  std::vector<std::unique_ptr<LayerStack>> slots;
  std::int64_t peak_activation = 0;  // peak of stash_bytes + the layers' held state (see header)
  std::unique_ptr<Loss> loss, logits_loss;
  std::unique_ptr<Optimizer> optimizer;
  Tensor accumulated;         // the micro-batches' summed gradients (when a layer cannot sum them)
  std::vector<Tensor> stash;  // per micro-batch: the stage's input, until its backward
  std::vector<Tensor> dpred;  // last stage, per micro-batch: d(loss)/d(output or logits)
  std::vector<Tensor> y;      // last stage, per micro-batch: the labels
  double loss_sum = 0;
  std::int64_t stash_bytes = 0, peak_stash = 0;
  double busy = 0;       // forward + backward seconds since reset_profile
  double forward = 0;    // busy's forward part (a recomputed forward counts as backward)
  double idle = 0;       // seconds waiting inside the schedule's span since reset_profile
  double step_busy = 0;  // this step's share of busy
  Clock::time_point schedule_end;
  StepProfile profile;
};

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string weight_of_slot(const std::string& slot) { return slot.substr(0, slot.rfind('/')); }

Shape with_rows(std::int64_t rows, const Shape& per_row) {
  Shape s{rows};
  s.insert(s.end(), per_row.begin(), per_row.end());
  return s;
}

// The layers of `network` at positions [first, last).
LayerList layers_between(const Network& network, int first, int last) {
  const auto& layers = network.layers();
  return LayerList(layers.begin() + first, layers.begin() + last);
}

// Bytes of the per-call state the layers of `stack` hold (Layer::held_activation_bytes).
std::int64_t held_activation_bytes(const LayerStack& stack) {
  std::int64_t sum = 0;
  for (const auto& layer : stack.layers()) sum += layer->held_activation_bytes();
  return sum;
}
}  // namespace

PipelineExecutor::PipelineExecutor(Network& primary, PipelineStrategy& strategy, const Loss& loss,
                                   const Optimizer& optimizer)
    : StepExecutor("[pipeline]"),
      primary_(primary),
      strategy_(strategy),
      loss_(loss.clone()),
      whole_optimizer_(optimizer.clone()) {
  MDTRAIN_CHECK(primary_.built(), std::logic_error, "[pipeline] the model must be built before training");
  const auto& opts = optimizer.options();
  MDTRAIN_CHECK(!opts.clipnorm && !opts.global_clipnorm, std::invalid_argument,
                "[pipeline] clipnorm and global_clipnorm are not supported under PipelineParallel yet (the norm "
                "spans stages); use clipvalue");
  // The stages and each stage's op list are the strategy's plan (pipeline_step_plan.h).
  PlanOptions options = plan_options_of(optimizer);
  options.counts_labels = loss.counts_labels();
  const StepPlan plan = strategy_.make_plan(primary_, strategy_.mesh(), options);
  schedule_ = pipeline_schedule_of(plan, strategy_.schedule(), strategy_.num_microbatches());
  validate(schedule_);
  // Layers without CUDA kernels are refused here, before any communicator or GPU memory exists.
  for (const mdtrain::Device& d : strategy_.devices()) primary_.check_device_support(d);
  const auto& layers = primary_.layers();
  const int p = strategy_.num_stages();
  for (const Segment& seg : plan.segments) starts_.push_back(static_cast<int>(seg.first_layer));
  starts_.push_back(static_cast<int>(layers.size()));

  const DeviceMesh mesh = strategy_.mesh();
  pipelines_ = strategy_.batch_axis() ? mesh.axis_size(*strategy_.batch_axis()) : 1;
  auto pipe_comms = strategy_.make_axis_communicators(mesh, {strategy_.pipe_axis()});
  auto batch_comms =
      strategy_.make_axis_communicators(mesh, strategy_.batch_axis() ? std::vector<std::string>{*strategy_.batch_axis()}
                                                                     : std::vector<std::string>{});
  const Optimizer::State whole_state = optimizer.state();
  for (int d = 0; d < strategy_.num_local_replicas(); ++d) {
    auto dev = std::make_unique<Device>();
    dev->place = strategy_.devices()[static_cast<std::size_t>(d)];
    dev->memory = dev->place.is_cpu() ? mdtrain::Device{} : dev->place;
    const DeviceMemoryScope on_device(dev->place);
    const std::vector<int> at = mesh.coordinates(strategy_.first_local_replica() + d);
    dev->stage = at[static_cast<std::size_t>(mesh.axis_index(strategy_.pipe_axis()))];
    dev->pipeline = strategy_.batch_axis() ? at[static_cast<std::size_t>(mesh.axis_index(*strategy_.batch_axis()))] : 0;
    dev->pipe_comm = std::move(pipe_comms[static_cast<std::size_t>(d)]);
    dev->batch_comm = std::move(batch_comms[static_cast<std::size_t>(d)]);
    const int first = starts_[static_cast<std::size_t>(dev->stage)];
    const int last = starts_[static_cast<std::size_t>(dev->stage) + 1];
    // The stage: copies of layers [first, last) of the model, its blocks as GraphSegments.
    dev->net = std::make_unique<LayerStack>();
    for (auto& unit : segment_layers(primary_, first, last, true)) dev->net->add(std::move(unit));
    dev->net->build(first == 0 ? primary_.input_shape() : layers[static_cast<std::size_t>(first) - 1]->output_shape(),
                    0, primary_.dtype());
    copy_weights_to_stage(*dev);
    // Built and filled on the host; a GPU's stage is then copied to its GPU (weights and buffers).
    if (!dev->place.is_cpu()) dev->net = dev->net->clone_to(dev->place);
    if (!strategy_.recompute()) {
      // Clones on the stage's device (LayerStack::clone keeps it), weights shared with the stage.
      const int slots = peak_in_flight(schedule_.ops[static_cast<std::size_t>(dev->stage)]);
      for (int k = 0; k < slots; ++k) {
        dev->slots.push_back(dev->net->clone());
        share_weights(*dev->net, *dev->slots.back());
      }
    }
    dev->loss = loss.clone();
    dev->logits_loss = loss.on_logits_of(dev->net->output_activation());
    dev->optimizer = optimizer.clone();
    if (whole_state.size() > 1) {
      // This stage's slots, in the whole state's order (slot kind, then parameter position).
      std::map<std::string, bool> mine;
      for (Parameter* w : dev->net->trainable_parameters()) mine[w->name] = true;
      Optimizer::State part;
      for (const auto& [name, t] : whole_state)
        if (name == "iterations" || mine.count(weight_of_slot(name))) part.emplace_back(name, t);
      dev->optimizer->set_state(part);
    }
    devices_.push_back(std::move(dev));
  }
  first_pipeline_ = devices_.front()->pipeline;  // mesh order: the lowest on this worker
  for (auto& dev : devices_)
    roster_.add({dev->net.get(),
                 dev->optimizer.get(),
                 true,
                 &dev->loss_sum,
                 &dev->profile,
                 {&dev->pipe_comm, &dev->batch_comm}});
  roster_.set_shared_wall(&wall_);
  if (strategy_.pipe_across_workers()) {
    across_workers_ = true;
    // Which stage owns each slot of the whole optimizer's state, in that state's order.
    std::map<std::string, int> stage_of_weight;
    for (int s = 0; s < p; ++s)
      for (int i = starts_[static_cast<std::size_t>(s)]; i < starts_[static_cast<std::size_t>(s) + 1]; ++i)
        for (Parameter* w : layers[static_cast<std::size_t>(i)]->parameters())
          if (w->trainable) stage_of_weight[w->name] = s;
    auto whole = whole_optimizer_->clone();
    whole->build(primary_.trainable_parameters());
    slot_template_ = whole->state();
    stage_slots_.assign(static_cast<std::size_t>(p), {});
    for (const auto& [name, t] : slot_template_) {
      const auto it = name == "iterations" ? stage_of_weight.end() : stage_of_weight.find(weight_of_slot(name));
      if (it != stage_of_weight.end()) stage_slots_[static_cast<std::size_t>(it->second)].push_back(name);
    }
  }
}

PipelineExecutor::~PipelineExecutor() { strategy_.forget_executor(this); }

ParameterList PipelineExecutor::primary_parameters_of_stage(int stage) const {
  return parameters_of(
      layers_between(primary_, starts_[static_cast<std::size_t>(stage)], starts_[static_cast<std::size_t>(stage) + 1]));
}

void PipelineExecutor::copy_weights_to_stage(Device& dev) const {
  copy_parameter_values(primary_parameters_of_stage(dev.stage), dev.net->parameters());
}

void PipelineExecutor::copy_weights_from_stage(Device& dev) const {
  copy_parameter_values(dev.net->parameters(), primary_parameters_of_stage(dev.stage));
}

template <class F>
void PipelineExecutor::run_devices(F&& fn) {
  if (communicators_broken_) remake_communicators();
  std::exception_ptr first_failure;
  std::mutex failure_mutex;
  try {
    strategy_.run_replicas([&](int d) {
      Device& dev = *devices_[static_cast<std::size_t>(d)];
      const DeviceMemoryScope on_device(dev.place);
      try {
        fn(dev, d);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        // Releases the neighbouring stages waiting in a recv and the other pipelines.
        dev.pipe_comm->abort(e.what());
        dev.batch_comm->abort(e.what());
        throw;
      }
    });
  } catch (...) {
    communicators_broken_ = true;
    if (first_failure) std::rethrow_exception(first_failure);
    throw;
  }
}

void PipelineExecutor::remake_communicators() {
  const DeviceMesh mesh = strategy_.mesh();
  auto pipe_comms = strategy_.make_axis_communicators(mesh, {strategy_.pipe_axis()});
  auto batch_comms =
      strategy_.make_axis_communicators(mesh, strategy_.batch_axis() ? std::vector<std::string>{*strategy_.batch_axis()}
                                                                     : std::vector<std::string>{});
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    devices_[d]->pipe_comm = std::move(pipe_comms[d]);
    devices_[d]->batch_comm = std::move(batch_comms[d]);
  }
  communicators_broken_ = false;
}

StepLoss PipelineExecutor::train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[pipeline] a training batch needs at least one example");
  StepLoss result;
  // Across workers the other workers' stages in the primary are as old as the last gather: each
  // worker gives its own stages' layers, summed with the loss below (regularization_from).
  std::vector<double> own_layers;
  if (across_workers_) own_layers = own_layer_regularization();
  else result.regularization = regularization_loss();
  const auto step = static_cast<std::uint64_t>(devices_.front()->optimizer->iterations());
  const int p = schedule_.stages, m = schedule_.microbatches;
  const auto step_start = Clock::now();
  run_devices([&](Device& dev, int d) {
    LayerStack& net = *dev.net;
    const auto& layers = net.layers();
    const bool first_stage = dev.stage == 0, last_stage = dev.stage == p - 1;
    const RowSlice group = slice_of(batch.count, pipelines_, dev.pipeline);
    auto micro = [&](int mb) {
      RowSlice r = slice_of(group.rows, m, mb);
      r.first += group.first;
      return r;
    };
    dev.loss_sum = 0;
    dev.step_busy = 0;
    dev.stash.assign(static_cast<std::size_t>(m), Tensor());
    dev.dpred.assign(static_cast<std::size_t>(m), Tensor());
    dev.y.assign(static_cast<std::size_t>(m), Tensor());
    dev.stash_bytes = 0;
    dev.peak_stash = 0;
    const Shape in_shape = net.input_shape(), out_shape = net.output_shape();
    // The loss divisor for ignore_class losses: the labels of the whole global batch, counted by
    // the last stages (each on its pipeline's rows), summed over the batch axis.
    std::int64_t labels = -1;
    if (dev.loss->counts_labels()) {
      Tensor group_y;
      if (last_stage && group.rows > 0) {
        Shape ys = batch.y.shape();
        ys[0] = group.rows;
        group_y = Tensor(ys, batch.y.dtype(), dev.memory);
        ops::gather_rows(batch.y, batch.indices + group.first, group.rows, group_y);
      }
      labels = global_label_count(*dev.loss, last_stage && group.rows > 0 ? &group_y : nullptr,
                                  pipelines_ > 1 ? dev.batch_comm.get() : nullptr);
    }
    int last_forward = -1;  // recompute: the micro-batch whose forward state the layers hold
    Communicator& pipe = *dev.pipe_comm;
    // Kept activations: micro-batch mb runs forward and backward on slot slot_of[mb], taken from
    // free_slots at its forward and given back after its backward.
    const bool keep = !dev.slots.empty();
    std::vector<int> slot_of(static_cast<std::size_t>(m), -1), free_slots;
    for (int k = static_cast<int>(dev.slots.size()); k-- > 0;) free_slots.push_back(k);
    for (auto& slot : dev.slots) share_weights(net, *slot);
    MicroBatchGradientSum gradient_sum(net, dev.accumulated, dev.memory);
    // Layers overwrite their gradients again after the step, or if it throws (evaluation, other
    // executors and the next step see them as they were).
    struct OverwriteAfterStep {
      Device& dev;
      ~OverwriteAfterStep() {
        set_accumulate_gradients(*dev.net, false);
        for (auto& slot : dev.slots) set_accumulate_gradients(*slot, false);
      }
    } overwrite_after_step{dev};
    auto layers_of = [&](int mb) -> const LayerList& {
      return keep ? dev.slots[static_cast<std::size_t>(slot_of[static_cast<std::size_t>(mb)])]->layers() : layers;
    };
    dev.peak_activation = 0;
    // What the stage holds for backward now: the stashed inputs and every slot's layer state (a
    // slot keeps its buffers between micro-batches), or net's (recompute).
    auto note_activation_bytes = [&] {
      std::int64_t held = dev.stash_bytes;
      if (keep) {
        for (const auto& slot : dev.slots) held += held_activation_bytes(*slot);
      } else {
        held += held_activation_bytes(net);
      }
      dev.peak_activation = std::max(dev.peak_activation, held);
    };
    auto run_forward = [&](int mb, bool recompute) {
      const RowSlice r = micro(mb);
      ForwardContext ctx;
      ctx.training = true;
      ctx.defer_statistics = true;  // BatchNormalization: moving statistics once per global batch
      ctx.recompute = recompute;
      ctx.step = step;
      ctx.global_row_offset = r.first;
      if (keep && !recompute) {
        MDTRAIN_CHECK(!free_slots.empty(), std::logic_error, "[pipeline] stage ", dev.stage,
                      " has no free state slot for micro-batch ", mb);
        slot_of[static_cast<std::size_t>(mb)] = free_slots.back();
        free_slots.pop_back();
      }
      const LayerList& run = layers_of(mb);
      Tensor h = dev.stash[static_cast<std::size_t>(mb)];
      for (const auto& layer : run) h = layer->forward(h, ctx);
      note_activation_bytes();
      // The slot's recorded statistics join the stage's, in forward order (as one set of layers
      // records them).
      if (keep)
        for (std::size_t j = 0; j < run.size(); ++j) run[j]->move_deferred_statistics_to(*layers[j]);
      last_forward = mb;
      return h;
    };
    Tensor out;  // the output of the last forward (sent at once, or used by the loss)
    // A send is held until the next op: when that is a recv the two go as one send_recv (NCCL's
    // sends wait for the peer's recv; the buffered backends do the same as send, then recv).
    const std::vector<PipelineOp>& stage_ops = schedule_.ops[static_cast<std::size_t>(dev.stage)];
    Tensor send_data;
    int send_peer = -1;
    auto flush_send = [&] {
      if (send_peer < 0) return;
      pipe.send(send_data.numel() ? send_data.raw() : nullptr, static_cast<std::size_t>(send_data.numel()),
                primary_.dtype(), send_peer);
      send_peer = -1;
    };
    auto recv_into = [&](Tensor& t, int peer) {
      auto start = Clock::now();
      if (send_peer >= 0) {
        pipe.send_recv(send_data.numel() ? send_data.raw() : nullptr, static_cast<std::size_t>(send_data.numel()),
                       send_peer, t.raw(), static_cast<std::size_t>(t.numel()), peer, t.dtype());
        send_peer = -1;
      } else {
        pipe.recv(t.raw(), static_cast<std::size_t>(t.numel()), t.dtype(), peer);
      }
      dev.profile.allreduce += seconds_since(start);
    };
    for (const PipelineOp& op : stage_ops) {
      const int mb = op.microbatch;
      const RowSlice r = micro(mb);
      const auto i = static_cast<std::size_t>(mb);
      const bool is_recv = op.kind == PipelineOpKind::RecvActivation || op.kind == PipelineOpKind::RecvGradient;
      if (!is_recv) flush_send();
      switch (op.kind) {
        case PipelineOpKind::RecvActivation: {
          Tensor x(with_rows(r.rows, in_shape), primary_.dtype(), dev.memory);
          recv_into(x, dev.stage - 1);
          dev.stash[i] = x;
          dev.stash_bytes += static_cast<std::int64_t>(x.nbytes());
          dev.peak_stash = std::max(dev.peak_stash, dev.stash_bytes);
          break;
        }
        case PipelineOpKind::Forward: {
          if (r.rows == 0) break;
          auto t = Clock::now();
          if (first_stage) {
            Tensor x(with_rows(r.rows, in_shape), batch.x.dtype(), dev.memory);  // gathered on the host, copied
            ops::gather_rows(batch.x, batch.indices + r.first, r.rows, x);
            dev.stash[i] = x;
            dev.stash_bytes += static_cast<std::int64_t>(x.nbytes());
            dev.peak_stash = std::max(dev.peak_stash, dev.stash_bytes);
          }
          out = run_forward(mb, false);
          if (last_stage) {
            Shape ys = batch.y.shape();
            ys[0] = r.rows;
            Tensor y(ys, batch.y.dtype(), dev.memory);
            ops::gather_rows(batch.y, batch.indices + r.first, r.rows, y);
            const BatchLossScale ls = batch_loss_scale(*dev.loss, y, out, batch.count, labels);
            Tensor dp;
            double sum = 0;
            if (dev.logits_loss) {
              const Tensor logits = layers_of(mb).back()->logits();
              dp = Tensor(logits.shape(), logits.dtype(), dev.memory);
              sum = dev.logits_loss->forward_backward(y, logits, ls.grad_scale, &dp);
            } else {
              dp = Tensor(out.shape(), out.dtype(), dev.memory);
              sum = dev.loss->forward_backward(y, out, ls.grad_scale, &dp);
            }
            dev.loss_sum += sum * ls.report_factor;
            if (outputs) outputs->on_replica_output(d, y, out);
            dev.dpred[i] = dp;
            dev.y[i] = y;
          }
          const double busy = seconds_since(t);
          dev.busy += busy;
          dev.forward += busy;
          dev.step_busy += busy;
          dev.profile.compute += busy;
          break;
        }
        case PipelineOpKind::SendActivation: {
          send_data = r.rows == 0 ? Tensor() : out;
          send_peer = dev.stage + 1;
          break;
        }
        case PipelineOpKind::RecvGradient: {
          Tensor g(with_rows(r.rows, out_shape), primary_.dtype(), dev.memory);
          recv_into(g, dev.stage + 1);
          dev.dpred[i] = g;
          break;
        }
        case PipelineOpKind::Backward: {
          if (r.rows == 0) {
            out = Tensor();
            break;
          }
          auto t = Clock::now();
          // Recomputation: the layers hold another micro-batch.
          if (!keep && last_forward != mb) run_forward(mb, true);
          const LayerList& run = layers_of(mb);
          gradient_sum.before_backward(run);
          Tensor g = dev.dpred[i];
          for (std::size_t l = run.size(); l-- > 0;) {
            const bool need = l > 0 || !first_stage;
            g = (l + 1 == run.size() && last_stage && dev.logits_loss) ? run[l]->backward_from_logits(g, need)
                                                                       : run[l]->backward(g, need);
          }
          note_activation_bytes();  // backward scratch; the input is still stashed
          if (keep) {               // the slot is free again; its gradients are in net's (views)
            free_slots.push_back(slot_of[i]);
            slot_of[i] = -1;
          }
          out = g;  // d(loss)/d(stage input), sent next
          gradient_sum.after_backward(net.packed_grads());
          dev.stash_bytes -= static_cast<std::int64_t>(dev.stash[i].nbytes());
          dev.stash[i] = Tensor();
          dev.dpred[i] = Tensor();
          last_forward = last_forward == mb ? -1 : last_forward;
          const double busy = seconds_since(t);
          dev.busy += busy;
          dev.step_busy += busy;
          dev.profile.compute += busy;
          break;
        }
        case PipelineOpKind::SendGradient: {
          send_data = r.rows == 0 ? Tensor() : out;
          send_peer = dev.stage - 1;
          break;
        }
      }
    }
    flush_send();
    dev.schedule_end = Clock::now();
    for (const auto& layer : layers) layer->apply_deferred_statistics(pipelines_ > 1 ? &dev.batch_sums : nullptr);
    Tensor& grads = net.packed_grads();
    gradient_sum.finish(grads);
    auto t = Clock::now();
    if (pipelines_ > 1) GradientReducer(*dev.batch_comm, strategy_.gradient_bucket_bytes()).reduce(grads);
    dev.profile.allreduce += seconds_since(t);
    t = Clock::now();
    net.add_regularization_gradients();
    dev.optimizer->apply(net.trainable_parameters());
    dev.profile.update += seconds_since(t);
    dev.profile.steps += 1;
  });
  wall_ += seconds_since(step_start);
  // The bubble: what each device did not spend in forward or backward between the step's start and
  // the end of the last device's schedule (the pipeline's span). The gradient sum over the batch
  // axis and the update come after the schedule on every device: work, not bubble (profile.update,
  // profile.allreduce).
  Clock::time_point span_end = step_start;
  for (const auto& dev : devices_) span_end = std::max(span_end, dev->schedule_end);
  const double span = std::chrono::duration<double>(span_end - step_start).count();
  for (auto& dev : devices_) dev->idle += std::max(0.0, span - dev->step_busy);
  const bool stale_before = primary_stale_;
  primary_stale_ = true;
  if (across_workers_) ++steps_since_gather_;
  for (const auto& dev : devices_)
    if (dev->stage == p - 1) result.sum += dev->loss_sum;  // pipeline order
  if (strategy_.num_workers() > 1) {
    // Every worker must see the same loss (callbacks decide on it): summed in worker order, with
    // each layer's regularization loss when the stages span the workers (one sum: one latency).
    std::vector<double> v{result.sum};
    v.insert(v.end(), own_layers.begin(), own_layers.end());
    strategy_.sum_across_workers(v);
    result.sum = v.front();
    if (across_workers_) result.regularization = regularization_from(v.data() + 1, stale_before);
  }
  return result;
}

std::vector<double> PipelineExecutor::own_layer_regularization() const {
  std::vector<double> out(primary_.layers().size(), 0.0);
  for (const auto& dev : devices_) {
    if (dev->pipeline != first_pipeline_) continue;
    const auto first = static_cast<std::size_t>(starts_[static_cast<std::size_t>(dev->stage)]);
    const LayerList layers = inner_layers(dev->net->layers());  // one per layer of the model
    for (std::size_t j = 0; j < layers.size(); ++j) out[first + j] = layers[j]->regularization_loss();
  }
  return out;
}

double PipelineExecutor::regularization_from(const double* per_layer, bool stages_newer) const {
  // The folds regularization_loss() makes: over the layers when the primary is current, else
  // stage by stage (each stage's net folds its layers), so the loss is bitwise what it was when
  // the stages were gathered after every step.
  double sum = 0;
  if (!stages_newer) {
    for (std::size_t i = 0; i < primary_.layers().size(); ++i) sum += per_layer[i];
    return sum;
  }
  for (int s = 0; s < schedule_.stages; ++s) {
    double stage = 0;
    for (int i = starts_[static_cast<std::size_t>(s)]; i < starts_[static_cast<std::size_t>(s) + 1]; ++i)
      stage += per_layer[static_cast<std::size_t>(i)];
    sum += stage;
  }
  return sum;
}

void PipelineExecutor::gather_stages() {
  if (!across_workers_) return;
  const auto t = Clock::now();
  run_devices([&](Device& dev, int) {
    if (dev.pipeline == 0) gather_stage(dev);
  });
  const double seconds = seconds_since(t);
  for (auto& dev : devices_) dev->profile.allreduce += seconds;
  steps_since_gather_ = 0;
  ++gathers_;
}

void PipelineExecutor::gather_stage(Device& dev) {
  const int workers = strategy_.num_workers();
  const int p = schedule_.stages;
  const int mine = worker_of_stage(dev.stage);
  Communicator& pipe = *dev.pipe_comm;
  // Sends first: the buffered backends (threads, MPI) do not wait for the receiver.
  std::map<std::string, Tensor> slots;
  for (auto& [name, t] : dev.optimizer->state()) slots.emplace(name, t);
  for (int w = 0; w < workers; ++w) {
    if (w == mine) continue;
    const int to = receiver_of_worker(w);
    for (const auto& layer : dev.net->layers())
      for (Parameter* v : layer->parameters())
        pipe.send(v->value.raw(), static_cast<std::size_t>(v->value.numel()), v->value.dtype(), to);
    for (const std::string& name : stage_slots_[static_cast<std::size_t>(dev.stage)]) {
      const auto it = slots.find(name);
      MDTRAIN_CHECK(it != slots.end(), std::logic_error, "[pipeline] stage ", dev.stage, " has no optimizer slot '",
                    name, "' to send to worker ", w);
      pipe.send(it->second.raw(), static_cast<std::size_t>(it->second.numel()), it->second.dtype(), to);
    }
  }
  if (dev.stage != receiver_of_worker(mine)) return;
  std::map<std::string, Tensor> templates;
  for (const auto& [name, t] : slot_template_) templates.emplace(name, t);
  for (int s = 0; s < p; ++s) {
    if (worker_of_stage(s) == mine) continue;
    for (int i = starts_[static_cast<std::size_t>(s)]; i < starts_[static_cast<std::size_t>(s) + 1]; ++i)
      for (Parameter* v : primary_.layers()[static_cast<std::size_t>(i)]->parameters())
        pipe.recv(v->value.raw(), static_cast<std::size_t>(v->value.numel()), v->value.dtype(), s);
    for (const std::string& name : stage_slots_[static_cast<std::size_t>(s)]) {
      Tensor& slot = gathered_slots_[name];
      const Tensor& like = templates.at(name);
      if (slot.numel() != like.numel()) slot = Tensor(like.shape(), like.dtype());
      pipe.recv(slot.raw(), static_cast<std::size_t>(slot.numel()), slot.dtype(), s);
    }
  }
}

void PipelineExecutor::forward_pipelined(std::int64_t count,
                                         const std::function<Tensor(std::int64_t, std::int64_t)>& input, Tensor& out,
                                         Tensor* logits) {
  const int p = schedule_.stages, m = schedule_.microbatches;
  // Every worker returns every row, cut among its own pipelines; when the pipelines span the
  // workers, among all of them, and the last stages send their rows to the other workers.
  const int local_pipelines = across_workers_ ? pipelines_ : static_cast<int>(devices_.size()) / p;
  run_devices([&](Device& dev, int) {
    const auto& layers = dev.net->layers();
    const RowSlice group = slice_of(count, local_pipelines, dev.pipeline - first_pipeline_);
    for (int mb = 0; mb < m; ++mb) {
      RowSlice r = slice_of(group.rows, m, mb);
      r.first += group.first;
      if (r.rows == 0) continue;  // every stage of the pipeline skips the same micro-batches
      Tensor h;
      if (dev.stage == 0) {
        h = input(r.first, r.rows);
        if (!dev.place.is_cpu()) {  // host rows to the first stage's GPU
          Tensor on_device(h.shape(), h.dtype(), dev.memory);
          on_device.copy_from(h);
          h = on_device;
        }
      } else {
        h = Tensor(with_rows(r.rows, dev.net->input_shape()), primary_.dtype(), dev.memory);
        dev.pipe_comm->recv(h.raw(), static_cast<std::size_t>(h.numel()), h.dtype(), dev.stage - 1);
      }
      ForwardContext ctx;
      ctx.global_row_offset = r.first;
      for (const auto& layer : layers) h = layer->forward(h, ctx);
      if (dev.stage + 1 < p) {
        dev.pipe_comm->send(h.raw(), static_cast<std::size_t>(h.numel()), h.dtype(), dev.stage + 1);
        continue;
      }
      Tensor dst = out.rows(r.first, r.first + r.rows);
      dst.copy_from(h);
      if (logits) {
        Tensor l = logits->rows(r.first, r.first + r.rows);
        l.copy_from(layers.back()->logits());
      }
    }
    if (!across_workers_) return;
    // The whole output on every worker: the last stage's worker sends its rows, micro-batch by
    // micro-batch, to the receiving stage of each other worker (after the forwards: no wait on them).
    const int last_worker = worker_of_stage(p - 1), mine = worker_of_stage(dev.stage);
    const bool sender = dev.stage == p - 1, receiver = mine != last_worker && dev.stage == receiver_of_worker(mine);
    if (!sender && !receiver) return;
    for (int w = 0; w < strategy_.num_workers(); ++w) {
      if (sender ? w == last_worker : w != mine) continue;
      for (int mb = 0; mb < m; ++mb) {
        RowSlice r = slice_of(group.rows, m, mb);
        r.first += group.first;
        if (r.rows == 0) continue;
        for (Tensor* t : {&out, logits}) {
          if (t == nullptr) continue;
          Tensor rows = t->rows(r.first, r.first + r.rows);
          const auto n = static_cast<std::size_t>(rows.numel());
          if (sender) {
            dev.pipe_comm->send(rows.raw(), n, rows.dtype(), receiver_of_worker(w));
          } else {
            dev.pipe_comm->recv(rows.raw(), n, rows.dtype(), p - 1);
          }
        }
      }
    }
  });
}

StepLoss PipelineExecutor::test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) {
  MDTRAIN_CHECK(batch.count > 0, std::invalid_argument, "[pipeline] an evaluation batch needs at least one example");
  // The stages hold the current weights (set_weights reaches them through broadcast_weights_from_primary).
  Shape ys = batch.y.shape();
  ys[0] = batch.count;
  Tensor y(ys, batch.y.dtype());
  ops::gather_rows(batch.y, batch.indices, batch.count, y);
  auto logits_loss = loss_->on_logits_of(primary_.output_activation());
  Tensor pred(with_rows(batch.count, primary_.output_shape()), primary_.dtype());
  Tensor logits;
  if (logits_loss) logits = Tensor(pred.shape(), pred.dtype());
  const Shape in_shape = primary_.input_shape();
  forward_pipelined(
      batch.count,
      [&](std::int64_t first, std::int64_t rows) {
        Tensor x(with_rows(rows, in_shape), batch.x.dtype());
        ops::gather_rows(batch.x, batch.indices + first, rows, x);
        return x;
      },
      pred, logits_loss ? &logits : nullptr);
  // The loss of the whole batch on the calling thread, as one device computes it.
  const double sum = logits_loss ? logits_loss->forward_backward(y, logits, 1.0, nullptr)
                                 : loss_->forward_backward(y, pred, 1.0, nullptr);
  const std::int64_t labels = global_label_count(*loss_, &y, nullptr);
  StepLoss result;
  result.sum = sum * batch_loss_scale(*loss_, y, pred, batch.count, labels).report_factor;
  result.regularization = regularization_loss();
  if (outputs) outputs->on_replica_output(0, y, pred);
  return result;
}

void PipelineExecutor::predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) {
  Tensor dst = out.rows(begin, begin + count);
  forward_pipelined(
      count, [&](std::int64_t first, std::int64_t rows) { return x.rows(begin + first, begin + first + rows); }, dst,
      nullptr);
}

double PipelineExecutor::regularization_loss() const {
  if (!primary_stale_) return primary_.regularization_loss();
  double sum = 0;  // the stages hold the newer weights: one pipeline's stages, in stage order
  if (across_workers_) {
    // This worker's stages from its devices, the others' from the primary (gathered every step).
    for (int s = 0; s < schedule_.stages; ++s) {
      if (worker_of_stage(s) == strategy_.worker_index()) {
        for (const auto& dev : devices_)
          if (dev->pipeline == first_pipeline_ && dev->stage == s) sum += dev->net->regularization_loss();
      } else {
        double stage = 0;
        for (int i = starts_[static_cast<std::size_t>(s)]; i < starts_[static_cast<std::size_t>(s) + 1]; ++i)
          stage += primary_.layers()[static_cast<std::size_t>(i)]->regularization_loss();
        sum += stage;
      }
    }
    return sum;
  }
  for (const auto& dev : devices_)
    if (dev->pipeline == first_pipeline_) sum += dev->net->regularization_loss();
  return sum;
}

Optimizer::State PipelineExecutor::optimizer_state() const {
  // The stages' slots (pipeline 0's: the pipelines hold identical copies), in the order an
  // optimizer of the whole model lists them.
  std::map<std::string, Tensor> by_name;
  for (const auto& dev : devices_)
    if (dev->pipeline == first_pipeline_)
      for (auto& [name, t] : dev->optimizer->state()) by_name.emplace(name, t);
  for (const auto& [name, t] : gathered_slots_) by_name.emplace(name, t);  // the other workers' stages
  if (by_name.size() <= 1) return devices_.front()->optimizer->state();
  auto whole = whole_optimizer_->clone();
  whole->build(primary_.trainable_parameters());
  Optimizer::State out = whole->state();
  for (auto& [name, t] : out) {
    const auto it = by_name.find(name);
    if (it != by_name.end()) t = it->second;
  }
  return out;
}

void PipelineExecutor::broadcast_weights_from_primary() {
  MDTRAIN_CHECK(!primary_stale_, std::logic_error,
                "[pipeline] the host weights are older than the stages': refresh_primary() before changing them");
  for (auto& dev : devices_) copy_weights_to_stage(*dev);
}

void PipelineExecutor::refresh_primary() {
  if (!primary_stale_) return;
  for (auto& dev : devices_) {
    if (dev->pipeline != first_pipeline_) continue;
    copy_weights_from_stage(*dev);
  }
  primary_stale_ = false;
}

void PipelineExecutor::abort(const std::string& reason) {
  for (auto& dev : devices_) {
    dev->pipe_comm->abort(reason);
    dev->batch_comm->abort(reason);
  }
  communicators_broken_ = true;
}

void PipelineExecutor::reset_own_profile() {
  for (auto& dev : devices_) {
    dev->busy = 0;
    dev->forward = 0;
    dev->idle = 0;
  }
}

std::vector<double> PipelineExecutor::busy_seconds() const {
  std::vector<double> out;
  for (const auto& dev : devices_) out.push_back(dev->busy);
  return out;
}

std::vector<double> PipelineExecutor::forward_seconds() const {
  std::vector<double> out;
  for (const auto& dev : devices_) out.push_back(dev->forward);
  return out;
}

std::vector<double> PipelineExecutor::idle_seconds() const {
  std::vector<double> out;
  for (const auto& dev : devices_) out.push_back(dev->idle);
  return out;
}

std::vector<std::int64_t> PipelineExecutor::peak_stash_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& dev : devices_) out.push_back(dev->peak_stash);
  return out;
}

std::vector<std::int64_t> PipelineExecutor::peak_activation_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& dev : devices_) out.push_back(dev->peak_activation);
  return out;
}

std::vector<int> PipelineExecutor::state_slots() const {
  std::vector<int> out;
  for (const auto& dev : devices_) out.push_back(static_cast<int>(dev->slots.size()));
  return out;
}

}  // namespace mdtrain
