#include "mdtrain/strategy/stage_timer.h"

#include <chrono>
#include <memory>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/strategy/pipeline_slots.h"

namespace mdtrain {

std::vector<StageTime> measure_stage_time(const LayerStack& model, std::size_t first, std::size_t last,
                                          std::int64_t rows, const std::vector<PipelineOp>& ops, int repeats) {
  const auto& layers = model.layers();
  MDTRAIN_CHECK(first < last && last <= layers.size(), std::invalid_argument, "[pipeline] measure_stage_time: layers [",
                first, ", ", last, ") is not a stage of a model of ", layers.size(), " layers");
  MDTRAIN_CHECK(rows >= 1 && repeats >= 1, std::invalid_argument,
                "[pipeline] measure_stage_time needs rows and repeats >= 1, got ", rows, " and ", repeats);
  using Clock = std::chrono::steady_clock;
  // The stage as the executor makes it: its layers cloned and built on their input shape.
  LayerStack stage;
  for (std::size_t i = first; i < last; ++i) stage.add(std::shared_ptr<Layer>(layers[i]->clone()));
  stage.build(layers[first]->input_shape(), 0, model.dtype());
  std::vector<std::unique_ptr<LayerStack>> slots;
  for (int k = peak_in_flight(ops); k-- > 0;) {
    slots.push_back(stage.clone());
    share_weights(stage, *slots.back());
  }
  Shape in_shape{rows}, out_shape{rows};
  for (auto d : stage.input_shape()) in_shape.push_back(d);
  for (auto d : stage.output_shape()) out_shape.push_back(d);
  const Tensor x = Tensor::zeros(in_shape, stage.dtype());
  const Tensor dy = Tensor::zeros(out_shape, stage.dtype());
  Tensor accumulated;
  ForwardContext ctx;
  ctx.training = true;
  ctx.defer_statistics = true;
  auto ns = [](Clock::time_point a) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a).count();
  };
  auto pass = [&] {
    StageTime t;
    std::vector<int> slot_of(ops.size(), -1), free_slots;
    for (int k = static_cast<int>(slots.size()); k-- > 0;) free_slots.push_back(k);
    MicroBatchGradientSum gradient_sum(stage, accumulated, Device{});
    for (const PipelineOp& op : ops) {
      const auto mb = static_cast<std::size_t>(op.microbatch);
      if (mb >= slot_of.size()) slot_of.resize(mb + 1, -1);
      if (op.kind == PipelineOpKind::Forward) {
        MDTRAIN_CHECK(!free_slots.empty(), std::invalid_argument, "[pipeline] measure_stage_time: micro-batch ", mb,
                      " has no free slot (more forwards in flight than the list's peak)");
        slot_of[mb] = free_slots.back();
        free_slots.pop_back();
        LayerStack& slot = *slots[static_cast<std::size_t>(slot_of[mb])];
        const auto start = Clock::now();
        Tensor h = x;
        for (const auto& layer : slot.layers()) h = layer->forward(h, ctx);
        for (std::size_t j = 0; j < slot.layers().size(); ++j)
          slot.layers()[j]->move_deferred_statistics_to(*stage.layers()[j]);
        t.forward_ns += ns(start);
      } else if (op.kind == PipelineOpKind::Backward) {
        MDTRAIN_CHECK(slot_of[mb] >= 0, std::invalid_argument,
                      "[pipeline] measure_stage_time: the backward of micro-batch ", mb, " comes before its forward");
        LayerStack& slot = *slots[static_cast<std::size_t>(slot_of[mb])];
        const auto start = Clock::now();
        const auto& run = slot.layers();
        gradient_sum.before_backward(run);
        Tensor g = dy;
        for (std::size_t l = run.size(); l-- > 0;) g = run[l]->backward(g, l > 0 || first > 0);
        gradient_sum.after_backward(stage.packed_grads());
        t.backward_ns += ns(start);
        free_slots.push_back(slot_of[mb]);
        slot_of[mb] = -1;
      }
    }
    gradient_sum.finish(stage.packed_grads());
    for (auto& slot : slots) set_accumulate_gradients(*slot, false);
    for (const auto& layer : stage.layers()) layer->apply_deferred_statistics(nullptr);
    return t;
  };
  pass();  // untimed: the slots' activation and gradient buffers are allocated here
  std::vector<StageTime> out;
  for (int r = 0; r < repeats; ++r) out.push_back(pass());
  return out;
}

}  // namespace mdtrain
