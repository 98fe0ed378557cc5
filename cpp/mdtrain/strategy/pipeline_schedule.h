#pragma once
// A pipeline schedule as data: for p stages and m micro-batches, each stage's list of operations
// (forward / backward of a micro-batch, and the transfers between neighbouring stages), in the
// order that stage runs them. The pipeline executor runs these lists (one thread per stage); the
// same lists are simulated here to cost a schedule (makespan, busy and idle time per stage) and to
// validate it. One description, two uses, so the planner and the executor cannot drift apart.
//
// Dependencies are implicit in the ops: RecvActivation(s, mb) needs SendActivation(s - 1, mb),
// RecvGradient(s, mb) needs SendGradient(s + 1, mb), and each stage runs its list in order. Sends
// are buffered (Communicator::send never waits for the receiver), so a send has no dependency.
//
// Both schedules run each stage's backwards in ascending micro-batch order, so gradients are
// accumulated in the same order and the two schedules give bitwise the same weights.
// - GPipe: every forward, then every backward. Up to m micro-batches' activations stashed.
// - 1F1B (PipeDream-flush): stage s runs min(p - s - 1, m) warm-up forwards, then alternates one
//   forward and one backward, then the remaining backwards: at most p - s micro-batches in flight.
#include <string>
#include <vector>

namespace mdtrain {

enum class PipelineOpKind { Forward, Backward, SendActivation, RecvActivation, SendGradient, RecvGradient };

// "forward", "backward", "send_activation", "recv_activation", "send_gradient", "recv_gradient".
const char* name_of(PipelineOpKind kind);

struct PipelineOp {
  PipelineOpKind kind;
  int microbatch;
  bool operator==(const PipelineOp& o) const { return kind == o.kind && microbatch == o.microbatch; }
};

enum class PipelineScheduleKind { GPipe, OneFOneB };

// "gpipe" / "1f1b" and back; std::invalid_argument("[pipeline] ...") for another name.
const char* name_of(PipelineScheduleKind kind);
PipelineScheduleKind pipeline_schedule_kind(const std::string& name);

struct PipelineSchedule {
  PipelineScheduleKind kind;
  int stages;
  int microbatches;
  std::vector<std::vector<PipelineOp>> ops;  // ops[stage], in the order the stage runs them
};

// The most micro-batches a pipeline step may have. The schedule (about 3 ops per micro-batch and
// stage), the per-micro-batch state and, without recomputation, a copy of the stage's layers per
// micro-batch in flight grow with the count before any batch is seen: 10^8 took gigabytes before
// training. 4096 is far beyond use (the bubble (p-1)/(m+p-1) of 8 stages is 0.2 % there, and a
// micro-batch of a batch below 4096 rows would have no row).
inline constexpr int kMaxMicrobatches = 4096;

// std::invalid_argument("[pipeline] ...") unless stages >= 1 and stages <= microbatches <=
// kMaxMicrobatches (fewer micro-batches than stages would leave stages with nothing to overlap;
// other libraries hang).
PipelineSchedule make_pipeline_schedule(PipelineScheduleKind kind, int stages, int microbatches);

// The most micro-batches whose forward ran and whose backward did not yet, over a stage's list:
// how many micro-batches' activations the stage holds at its peak.
int peak_in_flight(const std::vector<PipelineOp>& ops);

// The costs of a simulation: one forward / one backward of a micro-batch on a stage (equal on
// every stage), and one transfer between neighbouring stages (the time from the send to when the
// receiver can use the data).
struct PipelineCosts {
  double forward = 1.0;
  double backward = 2.0;
  double transfer = 0.0;
};

struct PipelineTiming {
  double makespan = 0;             // from the first op to the last op of any stage
  std::vector<double> busy;        // per stage: forward + backward time
  std::vector<double> idle;        // per stage: makespan - busy (the bubble)
  double bubble_fraction() const;  // total idle / (stages * makespan)
};

// Runs the schedule's lists against each other with these costs. Throws std::logic_error
// ("[pipeline] ...") when the schedule is invalid: a stage's ops do not cover every micro-batch's
// forward and backward (and the transfers its position needs) exactly once, a backward comes
// before its forward, or the stages deadlock (a recv whose send never comes).
PipelineTiming simulate(const PipelineSchedule& schedule, const PipelineCosts& costs = {});

// simulate() with unit costs, plus (1F1B) at most stages - s micro-batches in flight on stage s.
void validate(const PipelineSchedule& schedule);

}  // namespace mdtrain
