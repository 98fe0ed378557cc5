#pragma once
#include <cstdint>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// Where a replica's step time went, summed over steps since the last reset (bench/scaling.py's
// compute / communication / idle split).
struct StepProfile {
  std::int64_t steps = 0;
  double wall = 0;     // whole steps, as seen by the caller
  double compute = 0;  // gather + forward + loss + backward (their collectives excluded)
  // In collectives (data movement and waiting for peers): the gradients', and under tensor
  // parallelism the model axis's (activations summed or gathered inside forward and backward).
  double allreduce = 0;
  double update = 0;  // regularization gradients + optimizer
  // The collectives of the replica's data-parallel group (calls, bytes): what the StepPlan's op
  // list says a step runs, times the steps (tests compare the two). Empty where not counted.
  CollectiveCounts collectives;
};

}  // namespace mdtrain
