// Pipeline schedules as data: the op lists of GPipe and 1F1B (checked against hand-written lists),
// their in-flight counts, the simulated bubble against (p - 1) / (m + p - 1), and the errors.
#include "mdtrain/strategy/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace mdtrain {
namespace {

using K = PipelineOpKind;

// "F0 B0 ..." with transfers as ">a0" (send activation), "<a0" (recv activation), ">g0", "<g0".
std::string compact(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const auto& op : ops) {
    if (!s.empty()) s += ' ';
    switch (op.kind) {
      case K::Forward: s += 'F'; break;
      case K::Backward: s += 'B'; break;
      case K::SendActivation: s += ">a"; break;
      case K::RecvActivation: s += "<a"; break;
      case K::SendGradient: s += ">g"; break;
      case K::RecvGradient: s += "<g"; break;
    }
    s += std::to_string(op.microbatch);
  }
  return s;
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackwardInAscendingOrder) {
  const auto s = make_pipeline_schedule(PipelineScheduleKind::GPipe, 2, 3);
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(compact(s.ops[0]), "F0 >a0 F1 >a1 F2 >a2 <g0 B0 <g1 B1 <g2 B2");
  EXPECT_EQ(compact(s.ops[1]), "<a0 F0 <a1 F1 <a2 F2 B0 >g0 B1 >g1 B2 >g2");
  EXPECT_EQ(peak_in_flight(s.ops[0]), 3);
  EXPECT_EQ(peak_in_flight(s.ops[1]), 3);
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  const auto s = make_pipeline_schedule(PipelineScheduleKind::OneFOneB, 3, 4);
  EXPECT_EQ(compact(s.ops[0]), "F0 >a0 F1 >a1 F2 >a2 <g0 B0 F3 >a3 <g1 B1 <g2 B2 <g3 B3");
  EXPECT_EQ(compact(s.ops[1]),
            "<a0 F0 >a0 <a1 F1 >a1 <g0 B0 >g0 <a2 F2 >a2 <g1 B1 >g1 <a3 F3 >a3 <g2 B2 >g2 <g3 B3 >g3");
  EXPECT_EQ(compact(s.ops[2]), "<a0 F0 B0 >g0 <a1 F1 B1 >g1 <a2 F2 B2 >g2 <a3 F3 B3 >g3");
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostStagesMinusSMicroBatchesAndGPipeHoldsAll) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {p, p + 1, 2 * p, 4 * p + 3}) {
      const auto one = make_pipeline_schedule(PipelineScheduleKind::OneFOneB, p, m);
      const auto gpipe = make_pipeline_schedule(PipelineScheduleKind::GPipe, p, m);
      validate(one);
      validate(gpipe);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak_in_flight(one.ops[s]), std::min(p - s, m)) << "p " << p << " m " << m << " stage " << s;
        EXPECT_EQ(peak_in_flight(gpipe.ops[s]), m);
        // The same backwards in the same order: gradients accumulate identically.
        std::vector<int> a, b;
        for (const auto& op : one.ops[s])
          if (op.kind == K::Backward) a.push_back(op.microbatch);
        for (const auto& op : gpipe.ops[s])
          if (op.kind == K::Backward) b.push_back(op.microbatch);
        EXPECT_EQ(a, b);
      }
    }
  }
}

TEST(PipelineSchedule, SimulatedGPipeBubbleIsTheFormula) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 16}) {
      if (m < p) continue;
      const auto t = simulate(make_pipeline_schedule(PipelineScheduleKind::GPipe, p, m), {1.0, 2.0, 0.0});
      EXPECT_DOUBLE_EQ(t.makespan, 3.0 * (m + p - 1));
      EXPECT_NEAR(t.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1), 1e-12) << "p " << p << " m " << m;
      // 1F1B has the same bubble here; it saves memory, not time.
      const auto u = simulate(make_pipeline_schedule(PipelineScheduleKind::OneFOneB, p, m), {1.0, 2.0, 0.0});
      EXPECT_DOUBLE_EQ(u.makespan, t.makespan);
    }
  }
}

TEST(PipelineSchedule, FewerMicroBatchesThanStagesIsInvalidArgument) {
  try {
    make_pipeline_schedule(PipelineScheduleKind::OneFOneB, 4, 3);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[pipeline] num_microbatches (3) must be >= the number of stages (4)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_pipeline_schedule(PipelineScheduleKind::GPipe, 0, 3), std::invalid_argument);
  EXPECT_THROW(pipeline_schedule_kind("interleaved"), std::invalid_argument);
  EXPECT_EQ(pipeline_schedule_kind("1f1b"), PipelineScheduleKind::OneFOneB);
  EXPECT_EQ(pipeline_schedule_kind("gpipe"), PipelineScheduleKind::GPipe);
}

TEST(PipelineSchedule, ValidationCatchesBrokenLists) {
  auto s = make_pipeline_schedule(PipelineScheduleKind::GPipe, 2, 2);
  auto backward_first = s;
  std::swap(backward_first.ops[1][1], backward_first.ops[1][4]);  // B0 before F0 on stage 1
  EXPECT_THROW(validate(backward_first), std::logic_error);
  auto missing = s;
  missing.ops[0].pop_back();  // stage 0 never runs B1
  EXPECT_THROW(validate(missing), std::logic_error);
  // Stage 0 waits for the gradient of micro-batch 0 before sending its activation: a deadlock.
  auto deadlock = s;
  deadlock.ops[0] = {{K::RecvGradient, 0},   {K::Forward, 0},  {K::SendActivation, 0}, {K::Forward, 1},
                     {K::SendActivation, 1}, {K::Backward, 0}, {K::RecvGradient, 1},   {K::Backward, 1}};
  try {
    validate(deadlock);
    FAIL() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
  // 1F1B with too many in flight.
  auto greedy = make_pipeline_schedule(PipelineScheduleKind::GPipe, 2, 3);
  greedy.kind = PipelineScheduleKind::OneFOneB;
  EXPECT_THROW(validate(greedy), std::logic_error);
}

}  // namespace
}  // namespace mdtrain
