// The StepPlans of PipelineStrategy and WavefrontStrategy (strategy/pipeline_step_plan.h): each
// device's ops are its stage's schedule with the micro-batches' rows and the boundary tensors'
// bytes, then the stage's gradient buckets over the batch axis and its update; the executor's
// schedule is the plan's, and after a real step its communicators counted the plan's sends,
// receives and collectives.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/pipeline_step_plan.h"
#include "mdtrain/strategy/pipeline_strategy.h"

namespace mdtrain {
namespace {

// Four layers: values 10, 0, 30, 40; outputs of 3, 3, 5, 2 values per row.
std::vector<PlanLayer> layers() {
  std::vector<PlanLayer> out;
  const std::int64_t values[] = {10, 0, 30, 40}, outputs[] = {3, 3, 5, 2};
  for (int i = 0; i < 4; ++i) {
    PlanLayer l;
    if (values[i] > 0) l.weights.push_back(WeightPlacement{"w" + std::to_string(i), values[i], "", -1, -1});
    l.output_values = outputs[i];
    out.push_back(l);
  }
  return out;
}

PipelinePlanInputs two_by_two(PipelineScheduleKind kind, int m) {
  PipelinePlanInputs in;
  in.schedule = kind;
  in.microbatches = m;
  in.stage_starts = {2};
  in.mesh_shape = {2, 2};
  in.mesh_axes = {"batch", "pipe"};
  in.batch_axis = "batch";
  return in;
}

TEST(PipelineStepPlan, OpsAreTheScheduleWithRowsAndBoundaryBytes) {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB}) {
    const StepPlan plan = pipeline_step_plan(layers(), two_by_two(kind, 3), 23);
    ASSERT_EQ(plan.segments.size(), 2u);
    EXPECT_EQ(plan.segments[0].end_layer, 2u);
    EXPECT_EQ(plan.segments[1].first_layer, 2u);
    // Mesh (batch, pipe): device 2b + s is stage s of pipeline b.
    EXPECT_EQ(plan.segments[0].devices, (std::vector<int>{0, 2}));
    EXPECT_EQ(plan.segments[1].devices, (std::vector<int>{1, 3}));
    ASSERT_EQ(plan.layouts.size(), 3u);
    EXPECT_EQ(plan.layouts[0].segment, 0);
    EXPECT_EQ(plan.layouts[1].segment, 1);
    EXPECT_EQ(plan.layouts[2].segment, 1);
    // The executor's schedule is make_pipeline_schedule's.
    const PipelineSchedule schedule = pipeline_schedule_of(plan, kind, 3);
    EXPECT_EQ(schedule.ops, make_pipeline_schedule(kind, 2, 3).ops);
    // Pipeline 1 has rows 11 of 23: micro-batches of 4, 4, 3.
    const DevicePlan& last = plan.devices[3];
    std::int64_t received = 0;
    for (const PlanOp& op : last.ops) {
      if (op.kind == OpKind::Forward) EXPECT_EQ(op.rows, op.microbatch < 2 ? 4 : 3);
      if (op.kind == OpKind::Recv) {
        EXPECT_FALSE(op.gradient);
        EXPECT_EQ(op.peer, 2);
        EXPECT_EQ(op.segment, 0);
        EXPECT_EQ(op.bytes, op.rows * 3 * 4);  // stage 0's last layer: 3 values per row
        received += op.rows;
      }
      if (op.kind == OpKind::Send) {
        EXPECT_TRUE(op.gradient);
        EXPECT_EQ(op.peer, 2);
      }
    }
    EXPECT_EQ(received, 11);
    // After the schedule: stage 1's 70 values all-reduced over the batch axis, then its update.
    ASSERT_GE(last.ops.size(), 2u);
    const PlanOp& sum = last.ops[last.ops.size() - 2];
    EXPECT_EQ(sum.kind, OpKind::Collective);
    EXPECT_EQ(sum.collective, CountedCollective::AllReduce);
    EXPECT_EQ(sum.axis, "batch");
    EXPECT_EQ(sum.group, 2);
    EXPECT_EQ(sum.bytes, 70 * 4);
    EXPECT_EQ(sum.first_value, 10);
    EXPECT_EQ(last.ops.back().kind, OpKind::Update);
    EXPECT_EQ(last.ops.back().first_value, 10);
    EXPECT_EQ(last.ops.back().values, 70);
    const CollectiveCounts counts = plan.collective_counts(3);
    EXPECT_EQ(counts[CountedCollective::Send].calls, 3);
    EXPECT_EQ(counts[CountedCollective::Recv].calls, 3);
    EXPECT_EQ(counts[CountedCollective::Recv].bytes, 11 * 3 * 4);
    EXPECT_EQ(counts[CountedCollective::AllReduce].calls, 1);
  }
}

TEST(PipelineStepPlan, StageGradientsGoInBucketsLastFirst) {
  PipelinePlanInputs in = two_by_two(PipelineScheduleKind::OneFOneB, 2);
  in.bucket_bytes = 25 * 4;  // 25 values a bucket: stage 1's 70 values in 3
  const StepPlan plan = pipeline_step_plan(layers(), in, 8);
  std::vector<std::int64_t> firsts, values;
  for (const PlanOp& op : plan.devices[1].ops)
    if (op.kind == OpKind::Collective) {
      firsts.push_back(op.first_value);
      values.push_back(op.values);
    }
  EXPECT_EQ(firsts, (std::vector<std::int64_t>{60, 35, 10}));
  EXPECT_EQ(values, (std::vector<std::int64_t>{20, 25, 25}));
}

TEST(PipelineStepPlan, OnePipelineSumsNothing) {
  PipelinePlanInputs in;
  in.microbatches = 3;
  in.stage_starts = {1, 3};
  in.mesh_shape = {3};
  in.mesh_axes = {"pipe"};
  const StepPlan plan = pipeline_step_plan(layers(), in, 8);
  for (const DevicePlan& d : plan.devices) {
    EXPECT_EQ(plan.collective_counts(d.device)[CountedCollective::AllReduce].calls, 0);
    EXPECT_EQ(d.ops.back().kind, OpKind::Update);
  }
  // The middle stage sends activations on and gradients back: two per micro-batch.
  EXPECT_EQ(plan.collective_counts(1)[CountedCollective::Send].calls, 6);
}

TEST(WavefrontStepPlan, ChunksForwardInOrderAndBackwardInReverse) {
  std::vector<PlanLayer> ls(3);
  for (PlanLayer& l : ls) {
    l.weights.push_back(WeightPlacement{"w", 7, "", -1, -1});
    l.output_values = 9 * 4;  // 9 time steps of 4 units
  }
  WavefrontPlanInputs in;
  in.stage_ranges = {{0, 1}, {1, 2}};  // layer 2 is the head
  in.time_chunk = 4;
  in.timesteps = 9;
  const StepPlan plan = wavefront_step_plan(ls, in, 5);
  ASSERT_EQ(plan.segments.size(), 3u);
  EXPECT_EQ(plan.segments[2].name, "head");
  EXPECT_EQ(plan.segments[2].devices, std::vector<int>{1});
  std::vector<int> order;
  std::vector<std::int64_t> bytes;
  for (const PlanOp& op : plan.devices[0].ops) {
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward)
      order.push_back(op.kind == OpKind::Forward ? op.microbatch : -1 - op.microbatch);
    if (op.kind == OpKind::Send) bytes.push_back(op.bytes);
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, -3, -2, -1}));
  EXPECT_EQ(bytes, (std::vector<std::int64_t>{5 * 4 * 4 * 4, 5 * 4 * 4 * 4, 5 * 1 * 4 * 4}));
  EXPECT_EQ(plan.devices[0].ops.back().kind, OpKind::Update);
  EXPECT_EQ(plan.devices[0].ops.back().values, 21);
  EXPECT_EQ(plan.collective_counts(1)[CountedCollective::Recv].calls, 3);
  EXPECT_EQ(plan.collective_counts(1)[CountedCollective::Send].calls, 3);
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("m", 5);
  const std::int64_t units[] = {16, 12, 8, 4};
  for (int i = 0; i < 4; ++i) {
    Dense::Options o;
    o.units = units[i];
    o.activation = i < 3 ? "relu" : "softmax";
    m->add(std::make_shared<Dense>("dense_" + std::to_string(i), o));
  }
  m->build({6});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), make_optimizer("adam"), {},
             std::move(strategy));
  return m;
}

TEST(PipelineStepPlan, ExecutorCountsThePlansSendsAndCollectives) {
  constexpr std::int64_t kRows = 22;
  std::vector<Device> devices;
  for (int i = 0; i < 4; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  for (PipelineScheduleKind kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB}) {
    auto strategy = std::make_shared<PipelineStrategy>(DeviceMesh({2, 2}, {"pipe", "batch"}, devices), 3, kind,
                                                       std::vector<int>{}, "pipe", "batch");
    auto m = make_model(strategy);
    Tensor x{{kRows, 6}, DType::Float32}, y{{kRows}, DType::Int32};
    std::mt19937_64 rng(3);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (std::int64_t i = 0; i < kRows; ++i) {
      y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 4);
      for (std::int64_t f = 0; f < 6; ++f) x.data<float>()[i * 6 + f] = noise(rng);
    }
    std::vector<std::int64_t> order(kRows);
    std::iota(order.begin(), order.end(), 0);
    m->engine().reset_profile();
    m->train_epoch(x, y, order.data(), kRows, kRows, 1, nullptr);
    PlanOptions options;
    options.global_batch = kRows;
    const StepPlan plan = strategy->make_plan(m->network(), strategy->mesh(), options);
    const auto profile = m->engine().profile();
    ASSERT_EQ(profile.size(), 4u);
    for (int d = 0; d < 4; ++d) {
      const CollectiveCounts want = plan.collective_counts(d);
      for (int k = 0; k < kCountedCollectives; ++k) {
        EXPECT_EQ(profile[static_cast<std::size_t>(d)].collectives.of[k].calls, want.of[k].calls)
            << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
        EXPECT_EQ(profile[static_cast<std::size_t>(d)].collectives.of[k].bytes, want.of[k].bytes)
            << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
      }
      EXPECT_GT(want[CountedCollective::Send].calls, 0);
      EXPECT_EQ(want[CountedCollective::AllReduce].calls, 1);
    }
  }
}

}  // namespace
}  // namespace mdtrain
