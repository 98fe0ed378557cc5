#include "mdtrain/strategy/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "mdtrain/core/errors.h"

namespace mdtrain {

const char* name_of(PipelineOpKind kind) {
  switch (kind) {
    case PipelineOpKind::Forward: return "forward";
    case PipelineOpKind::Backward: return "backward";
    case PipelineOpKind::SendActivation: return "send_activation";
    case PipelineOpKind::RecvActivation: return "recv_activation";
    case PipelineOpKind::SendGradient: return "send_gradient";
    case PipelineOpKind::RecvGradient: return "recv_gradient";
  }
  return "unknown";
}

const char* name_of(PipelineScheduleKind kind) { return kind == PipelineScheduleKind::GPipe ? "gpipe" : "1f1b"; }

PipelineScheduleKind pipeline_schedule_kind(const std::string& name) {
  if (name == "gpipe") return PipelineScheduleKind::GPipe;
  if (name == "1f1b") return PipelineScheduleKind::OneFOneB;
  fail<std::invalid_argument>("[pipeline] unknown schedule '", name, "' (expected 'gpipe' or '1f1b')");
}

namespace {

// A forward of micro-batch mb on stage s of p, with the transfers around it.
void add_forward(std::vector<PipelineOp>& ops, int s, int p, int mb) {
  if (s > 0) ops.push_back({PipelineOpKind::RecvActivation, mb});
  ops.push_back({PipelineOpKind::Forward, mb});
  if (s < p - 1) ops.push_back({PipelineOpKind::SendActivation, mb});
}

void add_backward(std::vector<PipelineOp>& ops, int s, int p, int mb) {
  if (s < p - 1) ops.push_back({PipelineOpKind::RecvGradient, mb});
  ops.push_back({PipelineOpKind::Backward, mb});
  if (s > 0) ops.push_back({PipelineOpKind::SendGradient, mb});
}

}  // namespace

PipelineSchedule make_pipeline_schedule(PipelineScheduleKind kind, int stages, int microbatches) {
  MDTRAIN_CHECK(stages >= 1, std::invalid_argument, "[pipeline] stages must be >= 1 (got ", stages, ")");
  MDTRAIN_CHECK(microbatches >= stages, std::invalid_argument, "[pipeline] num_microbatches (", microbatches,
                ") must be >= the number of stages (", stages, "): fewer micro-batches leave stages idle");
  MDTRAIN_CHECK(microbatches <= kMaxMicrobatches, std::invalid_argument, "[pipeline] num_microbatches (", microbatches,
                ") exceeds the limit of ", kMaxMicrobatches,
                " (the schedule and per-micro-batch state grow with it before any batch is seen)");
  PipelineSchedule schedule{kind, stages, microbatches, std::vector<std::vector<PipelineOp>>(stages)};
  const int p = stages, m = microbatches;
  for (int s = 0; s < p; ++s) {
    auto& ops = schedule.ops[static_cast<std::size_t>(s)];
    if (kind == PipelineScheduleKind::GPipe) {
      for (int mb = 0; mb < m; ++mb) add_forward(ops, s, p, mb);
      for (int mb = 0; mb < m; ++mb) add_backward(ops, s, p, mb);
      continue;
    }
    const int warmup = std::min(p - s - 1, m);
    for (int mb = 0; mb < warmup; ++mb) add_forward(ops, s, p, mb);
    for (int i = 0; i < m - warmup; ++i) {
      add_forward(ops, s, p, warmup + i);
      add_backward(ops, s, p, i);
    }
    for (int mb = m - warmup; mb < m; ++mb) add_backward(ops, s, p, mb);
  }
  return schedule;
}

int peak_in_flight(const std::vector<PipelineOp>& ops) {
  int now = 0, peak = 0;
  for (const auto& op : ops) {
    if (op.kind == PipelineOpKind::Forward) peak = std::max(peak, ++now);
    if (op.kind == PipelineOpKind::Backward) --now;
  }
  return peak;
}

double PipelineTiming::bubble_fraction() const {
  if (makespan <= 0 || idle.empty()) return 0.0;
  double total = 0;
  for (double t : idle) total += t;
  return total / (makespan * static_cast<double>(idle.size()));
}

namespace {

// Every op a stage must run exactly once, and each backward after its forward.
void check_stage_ops(const PipelineSchedule& schedule, int s) {
  const int p = schedule.stages, m = schedule.microbatches;
  std::map<std::pair<PipelineOpKind, int>, int> seen;
  std::vector<bool> forwarded(static_cast<std::size_t>(m), false);
  for (const auto& op : schedule.ops[static_cast<std::size_t>(s)]) {
    MDTRAIN_CHECK(op.microbatch >= 0 && op.microbatch < m, std::logic_error, "[pipeline] stage ", s, ": ",
                  name_of(op.kind), " of micro-batch ", op.microbatch, " outside [0, ", m, ")");
    ++seen[{op.kind, op.microbatch}];
    if (op.kind == PipelineOpKind::Forward) forwarded[static_cast<std::size_t>(op.microbatch)] = true;
    MDTRAIN_CHECK(op.kind != PipelineOpKind::Backward || forwarded[static_cast<std::size_t>(op.microbatch)],
                  std::logic_error, "[pipeline] stage ", s, ": backward of micro-batch ", op.microbatch,
                  " before its forward");
  }
  const std::pair<PipelineOpKind, bool> needed[] = {{PipelineOpKind::Forward, true},
                                                    {PipelineOpKind::Backward, true},
                                                    {PipelineOpKind::RecvActivation, s > 0},
                                                    {PipelineOpKind::SendGradient, s > 0},
                                                    {PipelineOpKind::SendActivation, s < p - 1},
                                                    {PipelineOpKind::RecvGradient, s < p - 1}};
  for (const auto& [kind, wanted] : needed) {
    for (int mb = 0; mb < m; ++mb) {
      const auto it = seen.find({kind, mb});
      const int n = it == seen.end() ? 0 : it->second;
      MDTRAIN_CHECK(n == (wanted ? 1 : 0), std::logic_error, "[pipeline] stage ", s, " runs ", name_of(kind),
                    " of micro-batch ", mb, " ", n, " times (expected ", wanted ? 1 : 0, ")");
    }
  }
}

}  // namespace

PipelineTiming simulate(const PipelineSchedule& schedule, const PipelineCosts& costs) {
  const int p = schedule.stages, m = schedule.microbatches;
  MDTRAIN_CHECK(static_cast<int>(schedule.ops.size()) == p, std::logic_error, "[pipeline] the schedule has ",
                schedule.ops.size(), " op lists for ", p, " stages");
  for (int s = 0; s < p; ++s) check_stage_ops(schedule, s);
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // When micro-batch mb's activation (sent by stage s) / gradient (sent by stage s) is available.
  std::vector<std::vector<double>> activation(p, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> gradient(p, std::vector<double>(m, kNever));
  std::vector<std::size_t> next(p, 0);
  std::vector<double> clock(p, 0.0);
  PipelineTiming timing;
  timing.busy.assign(p, 0.0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      const auto& ops = schedule.ops[static_cast<std::size_t>(s)];
      for (auto& i = next[s]; i < ops.size(); ++i) {
        const PipelineOp& op = ops[i];
        double& t = clock[s];
        if (op.kind == PipelineOpKind::RecvActivation) {
          const double at = activation[s - 1][op.microbatch];
          if (at == kNever) break;
          t = std::max(t, at);
        } else if (op.kind == PipelineOpKind::RecvGradient) {
          const double at = gradient[s + 1][op.microbatch];
          if (at == kNever) break;
          t = std::max(t, at);
        } else if (op.kind == PipelineOpKind::SendActivation) {
          activation[s][op.microbatch] = t + costs.transfer;
        } else if (op.kind == PipelineOpKind::SendGradient) {
          gradient[s][op.microbatch] = t + costs.transfer;
        } else {
          const double c = op.kind == PipelineOpKind::Forward ? costs.forward : costs.backward;
          t += c;
          timing.busy[s] += c;
        }
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    const auto& ops = schedule.ops[static_cast<std::size_t>(s)];
    MDTRAIN_CHECK(next[s] == ops.size(), std::logic_error, "[pipeline] ", name_of(schedule.kind),
                  " schedule deadlocks: stage ", s, " waits in ", name_of(ops[next[s]].kind), " of micro-batch ",
                  ops[next[s]].microbatch, " for a send that never comes");
    timing.makespan = std::max(timing.makespan, clock[s]);
  }
  timing.idle.resize(p);
  for (int s = 0; s < p; ++s) timing.idle[s] = timing.makespan - timing.busy[s];
  return timing;
}

void validate(const PipelineSchedule& schedule) {
  simulate(schedule);
  if (schedule.kind != PipelineScheduleKind::OneFOneB) return;
  for (int s = 0; s < schedule.stages; ++s) {
    const int peak = peak_in_flight(schedule.ops[static_cast<std::size_t>(s)]);
    MDTRAIN_CHECK(peak <= schedule.stages - s, std::logic_error, "[pipeline] 1f1b stage ", s, " holds ", peak,
                  " micro-batches in flight (at most ", schedule.stages - s, ")");
  }
}

}  // namespace mdtrain
