"""A pipeline stage's measured time per micro-batch: the core's stage timer (measure_stage_time in
cpp/mdtrain/strategy/stage_timer.h) runs the stage's layers as PipelineExecutor does (its own copy
of those layers, a state slot per micro-batch held, the schedule's op list in order, gradients
summed) on one thread, as each stage's thread computes.

Why not the sum of the layers' profiled times: a layer timed alone is one call on a fresh copy of
the whole model, and a stage runs micro-batch after micro-batch through the same weights with only
its own layers' working set. The heavy MLP's second stage (its 2048 x 2048 layer) on 4-8-row
micro-batches ran at 0.72-0.80x the sum of its layers' profiled times in the running pipeline, and
the stage timer read within 10 % of the running stage where the layer sum read 15-30 % over; the
CNN's GPipe stages, which hold every micro-batch's activations, ran slower than the layer sum, and
the stage timer sees that too (it holds them). Only for the machine it runs on: on a preset the
layers' times are scaled by FLOP/s, which says nothing of this machine's caches."""
import numpy as np

from mdtrain.plan.core_threads import core_threads

STAGE_REPEATS = 5  # timed passes per stage (after an untimed one); the median is used


def measure_stage_costs(model, stage_starts, rows, schedule, microbatches, repeats=STAGE_REPEATS):
    """[(forward_s, backward_s) per micro-batch] for each stage of `model` cut at `stage_starts`
    (the first layer of stages 1..p-1), running `schedule` ("gpipe" / "1f1b") with `microbatches`
    micro-batches of `rows` rows: the median of `repeats` passes of the stage's op list, divided by
    the micro-batches. Timed with the core's ops on one thread, the stages one after another."""
    from mdtrain import _core
    bounds = [0] + [int(s) for s in stage_starts] + [len(model.layers)]
    stages = len(bounds) - 1
    costs = []
    with core_threads(1):
        for s in range(stages):
            passes = np.asarray(_core.measure_stage_time(model._core, bounds[s], bounds[s + 1], int(rows), schedule,
                                                         stages, int(microbatches), s, int(repeats)), dtype=np.float64)
            forward, backward = np.median(passes, axis=0) * 1e-9 / microbatches
            costs.append((float(forward), float(backward)))
    return costs
