#include "mdtrain/strategy/pipeline_strategy.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/strategy/pipeline_executor.h"
#include "mdtrain/strategy/pipeline_slots.h"
#include "mdtrain/strategy/pipeline_step_plan.h"

namespace mdtrain {

PipelineStrategy::PipelineStrategy(DeviceMesh mesh, int num_microbatches, PipelineScheduleKind schedule,
                                   std::vector<int> stage_starts, std::string pipe_axis,
                                   std::optional<std::string> batch_axis, bool balance_by_time,
                                   std::shared_ptr<Strategy> workers, bool recompute)
    : MeshWorkersStrategy(mesh, std::move(workers), "pipeline"),
      mesh_(std::move(mesh)),
      microbatches_(num_microbatches),
      schedule_(schedule),
      stage_starts_(std::move(stage_starts)),
      pipe_axis_(std::move(pipe_axis)),
      batch_axis_(std::move(batch_axis)),
      balance_by_time_(balance_by_time),
      recompute_(recompute) {
  check_pipeline_devices(devices(), cuda::device_count());
  MDTRAIN_CHECK(mesh_.has_axis(pipe_axis_), std::invalid_argument, "[pipeline] the pipe axis '", pipe_axis_,
                "' is not in the mesh ", mesh_.to_string());
  if (batch_axis_)
    MDTRAIN_CHECK(mesh_.has_axis(*batch_axis_) && *batch_axis_ != pipe_axis_, std::invalid_argument,
                  "[pipeline] the batch axis '", *batch_axis_, "' is not another axis of the mesh ", mesh_.to_string());
  MDTRAIN_CHECK(mesh_.num_axes() == (batch_axis_ ? 2 : 1), std::invalid_argument, "[pipeline] the mesh ",
                mesh_.to_string(), " may only have the pipe axis and the batch axis");
  pipe_across_workers_ = pipe_spans_workers(mesh_, pipe_axis_);
  // Validates num_microbatches against the stages now, before any training.
  make_pipeline_schedule(schedule_, num_stages(), microbatches_);
  const int p = num_stages();
  MDTRAIN_CHECK(stage_starts_.empty() || static_cast<int>(stage_starts_.size()) == p - 1, std::invalid_argument,
                "[pipeline] ", p, " stages need ", p - 1, " stage starts (got ", stage_starts_.size(), ")");
  for (std::size_t i = 0; i < stage_starts_.size(); ++i)
    MDTRAIN_CHECK(stage_starts_[i] >= 1 && (i == 0 || stage_starts_[i] > stage_starts_[i - 1]), std::invalid_argument,
                  "[pipeline] stage starts must be ascending layer indices >= 1 (got ", stage_starts_[i], " for stage ",
                  i + 1, ")");
}

PipelineStrategy::~PipelineStrategy() = default;

void check_pipeline_devices(const std::vector<Device>& devices, int visible_gpus) {
  MDTRAIN_CHECK(!devices.empty(), std::invalid_argument, "[pipeline] a pipeline needs at least one device");
  const bool gpus = !devices.front().is_cpu();
  for (const Device& d : devices)
    MDTRAIN_CHECK(d.is_cpu() != gpus, std::invalid_argument, "[pipeline] ", d.to_string(),
                  ": stages must all be on CPU devices or all on GPUs, got ", devices.front().to_string(), " and ",
                  d.to_string());
  if (!gpus) return;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    MDTRAIN_CHECK(d.index >= 0 && d.index < visible_gpus, std::invalid_argument, "[pipeline] ", d.to_string(),
                  " is not a visible GPU (this process sees ", visible_gpus, ")",
                  visible_gpus == 0 ? ": " + cuda::unavailable_reason() : std::string());
    // This process's NCCL communicators give rank r GPU r (as MirroredStrategy's do): the mesh's
    // devices of this process must be those GPUs in that order.
    MDTRAIN_CHECK(d.index == static_cast<int>(i), std::invalid_argument, "[pipeline] ", d.to_string(),
                  " is this process's device ", i,
                  " of the mesh: GPU stages must be /device:GPU:0, /device:GPU:1, "
                  "... in mesh order (the NCCL communicator of rank r drives GPU r)");
  }
}

bool pipe_spans_workers(const DeviceMesh& mesh, const std::string& pipe_axis) {
  const int workers = mesh.num_workers();
  if (workers == 1 || !mesh.has_axis(pipe_axis)) return false;
  const int p = mesh.axis_size(pipe_axis);
  // Every pipeline (a group along the pipe axis) inside one worker, or every pipeline over all
  // workers, stage s on worker s. One stage per worker: a pipe group with several ranks in each of
  // several workers is a HierarchicalCommunicator, which has no send / recv.
  bool inside = true, across = p == workers;
  for (int i = 0; i < mesh.num_devices(); ++i) {
    const std::vector<int> group = mesh.axis_group(pipe_axis, i);
    for (int s = 0; s < p; ++s) {
      const int w = mesh.worker_of(group[static_cast<std::size_t>(s)]);
      inside = inside && w == mesh.worker_of(group.front());
      across = across && w == s;
    }
  }
  MDTRAIN_CHECK(inside || across, std::invalid_argument, "[pipeline] the pipe axis '", pipe_axis, "' of ",
                mesh.to_string(), " over ", workers,
                " workers must either stay inside each worker (each worker runs whole pipelines: the pipe axis "
                "last) or put stage s of every pipeline on worker s (as many stages as workers, the pipe axis "
                "first, e.g. (\"pipe\", \"batch\")); got ",
                p, " stages laid out neither way");
  return !inside;
}

std::vector<std::unique_ptr<Communicator>> PipelineStrategy::make_replica_communicators() const {
  // Threads between CPU devices, NCCL between GPUs (send / recv of activations and gradients, the
  // batch axis's gradient sums); the axes' groups are split from this one (ncclCommSplit).
  return world_communicators(devices().front().is_cpu() ? "threads" : "nccl");
}

std::unique_ptr<StepExecutor> PipelineStrategy::make_executor(Network& primary, const Loss& loss,
                                                              const Optimizer& optimizer) {
  require_known_dims(primary);
  auto executor = std::make_unique<PipelineExecutor>(primary, *this, loss, optimizer);
  executor_ = executor.get();
  return executor;
}

StepPlan PipelineStrategy::make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const {
  require_known_dims(network);
  PipelinePlanInputs in;
  in.strategy = name();
  in.schedule = schedule();
  in.microbatches = num_microbatches();
  in.stage_starts = pipeline_stage_starts(network, *this);
  in.mesh_shape = mesh.shape();
  in.mesh_axes = mesh.axis_names();
  in.pipe_axis = pipe_axis();
  in.batch_axis = batch_axis().value_or("");
  in.bucket_bytes = gradient_bucket_bytes();
  in.dtype = network.dtype();
  in.counts_labels = options.counts_labels;
  return pipeline_step_plan(plan_layers_of(network), in, options.global_batch);
}

void PipelineStrategy::gather_stages() {
  if (!pipe_across_workers_) return;
  // A worker that has no executor (it released its model's engine) would skip the sends the others
  // wait for: count the workers that have one first, so a mismatch fails everywhere instead. And
  // the workers whose stages are stale: every worker sees the same sums, so all skip a gather that
  // none needs (the model already whole: a second fit, evaluate after fit), or none does.
  std::vector<double> counts{executor_ != nullptr ? 1.0 : 0.0,
                             executor_ != nullptr && !executor_->stages_whole() ? 1.0 : 0.0};
  sum_across_workers(counts);
  const auto have = static_cast<int>(counts[0]);
  MDTRAIN_CHECK(have == 0 || have == num_workers(), std::logic_error, "[pipeline] gathering the stages: ", have, " of ",
                num_workers(),
                " workers have a trained model under this strategy (every worker must train "
                "and gather the same model at the same points)");
  if (executor_ != nullptr && counts[1] > 0) executor_->gather_stages();
}

std::vector<std::int64_t> measure_layer_times(const LayerStack& model, std::int64_t rows, int repeats, int in_flight) {
  MDTRAIN_CHECK(rows >= 1 && repeats >= 1 && in_flight >= 1, std::invalid_argument,
                "[pipeline] measure_layer_times needs rows, repeats and in_flight >= 1, got ", rows, ", ", repeats,
                ", ", in_flight);
  using Clock = std::chrono::steady_clock;
  auto copy = model.clone();  // a training forward may move running statistics: not the model's
  // One state per micro-batch in flight, as the executor's slots: clones on the copy's weights.
  std::vector<std::unique_ptr<LayerStack>> extra;
  std::vector<LayerStack*> states{copy.get()};
  for (int k = 1; k < in_flight; ++k) {
    extra.push_back(copy->clone());
    share_weights(*copy, *extra.back());
    states.push_back(extra.back().get());
  }
  const std::size_t n = copy->layers().size();
  std::vector<std::int64_t> best(n, std::numeric_limits<std::int64_t>::max());
  Shape shape{rows};
  for (auto d : copy->input_shape()) shape.push_back(d);
  const Tensor x = Tensor::zeros(shape, copy->dtype());
  ForwardContext ctx;
  ctx.training = true;
  auto ns = [](Clock::time_point a) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a).count();
  };
  for (int r = 0; r < repeats; ++r) {
    std::vector<std::int64_t> t(n, 0);
    std::vector<Tensor> out;
    for (LayerStack* state : states) {  // every micro-batch's forward, then each one's backward
      Tensor h = x;
      for (std::size_t i = 0; i < n; ++i) {
        const auto start = Clock::now();
        h = state->layers()[i]->forward(h, ctx);
        t[i] += ns(start);
      }
      out.push_back(std::move(h));
    }
    for (std::size_t k = 0; k < states.size(); ++k) {
      Tensor g = Tensor::zeros(out[k].shape(), out[k].dtype());
      for (std::size_t i = n; i-- > 0;) {
        const auto start = Clock::now();
        g = states[k]->layers()[i]->backward(g, i > 0);
        t[i] += ns(start);
      }
    }
    for (std::size_t i = 0; i < n; ++i)
      best[i] = std::min(best[i], std::max<std::int64_t>(1, t[i] / static_cast<std::int64_t>(states.size())));
  }
  return best;
}

}  // namespace mdtrain
