"""Prices a StepPlan: the core's description of one training step (cpp/mdtrain/strategy/step_plan.h),
the same plan the strategy's executor runs, so the planner holds no description of its own of that
strategy's step.

`replicated_plan` asks the core for a data-parallel plan of a profiled model on devices the
planner considers (the core decides the gradient sync: ZeRO-1 on the CPU devices of one process,
an all-reduce first when the optimizer clips by norm, buckets all-reduced during backward on GPUs
and across workers, a reduction to the parameter device for CentralStorage). `price` replays each
device's ops in the simulator from the profile's measured layer times and the cluster's measured
or modelled collectives:

- forward: every layer of the segment on the device's rows; backward: last layer first;
- a collective started during backward (a gradient bucket) runs after the layer that finalizes
  its first value, on a communication stream beside backward when the cluster overlaps (NCCL),
  else on the devices' threads, blocking them (the CPU communicators);
- the other collectives and the updates after backward, in the plan's order; an update costs its
  share of the values (update_seconds).

Replicas of a data-parallel group are identical, so at most `step_costs.REPLAYED_REPLICAS` of them are
replayed; collectives are costed for the whole group."""
from mdtrain import _core
from mdtrain.plan import collectives
from mdtrain.plan.profile import BYTES_PER_VALUE
from mdtrain.plan.simulate import COMMUNICATION
from mdtrain.plan.step_costs import (StepResult, _activation_bytes, _breakdown, add_update, on_core, overhead_seconds,
                                start_replay, update_seconds)


def plan_weights(profile):
    """The profiled model's trainable values as a plan reads them: one (layer name, values) per
    layer, in packed order."""
    return [(layer.name, layer.params) for layer in profile.layers]


def replicated_plan(profile, strategy, local_replicas, workers=1, host_replicas=True, parameter_device=False,
                    bucket_bytes=None, clips_by_norm=False, reduce_to_one=False):
    """The core's data-parallel StepPlan of the profiled model (see the module docstring);
    bucket_bytes None: GradientReducer's default buckets."""
    buckets = {} if bucket_bytes is None else {"bucket_bytes": bucket_bytes}
    return _core.replicated_step_plan(plan_weights(profile), len(profile.layers), strategy, local_replicas,
                                      workers=workers, host_replicas=host_replicas,
                                      parameter_device=parameter_device, reduce_to_one=reduce_to_one,
                                      clips_by_norm=clips_by_norm, **buckets)


def sync_kind(plan):
    return plan.syncs[0]["kind"]


def _finalizing_layer(profile):
    """value index -> the layer whose backward makes it final (the last layer with parameters
    whose values start at or before it): where GradientReducer starts a bucket."""
    first_value, v = [], 0
    for layer in profile.layers:
        first_value.append(v)
        v += layer.params

    def owner(value):
        return max([i for i, f in enumerate(first_value) if f <= value and profile.layers[i].params > 0] or [0])
    return owner


def _collective_seconds(op, cluster, processes):
    size, n = op["bytes"], op["group"]
    kind = op["collective"]
    if kind == "all_reduce":
        return cluster.mpi_all_reduce(size, n) if processes else collectives.all_reduce(size, n, cluster)
    if kind == "reduce_scatter":
        return collectives.reduce_scatter(size, n, cluster)
    if kind == "all_gather":
        return collectives.all_gather(size, n, cluster)
    if kind == "reduce":
        return collectives.reduce_to_one(size, n, cluster)
    if kind == "broadcast":
        return collectives.broadcast(size, n, cluster)
    raise ValueError(f"price_plan: no cost for collective {kind!r}")


def price(plan, profile, cluster, global_batch, scale=1.0, processes=False):
    """The simulated step of a data-parallel `plan` (one segment: the whole network) of the
    profiled model. processes: the replicas are MPI worker processes on this host
    (MultiWorkerMirroredStrategy on one device each): their all-reduces and step's fixed cost are
    the measured MPI ones (Cluster.mpi_processes), not the threads communicator's."""
    n = plan.devices
    if len(plan.segments) != 1:
        raise ValueError(f"price_plan: {plan.strategy}'s plan has {len(plan.segments)} segments; only one-segment "
                         f"plans are priced here")
    rows = -(-global_batch // n)
    cluster, sim, compute, replayed, group = start_replay(profile, cluster, scale, n)
    layers = profile.layers
    ops = [plan.ops(j) for j in range(len(replayed))]
    if n > 1:  # waking and joining the replica threads / processes (measured on this machine only)
        fixed = cluster.mpi_step_overhead(n) if processes else cluster.step_overhead(n)
        sim.add("replica hand-off", group, fixed, category=COMMUNICATION)
    for j, d in enumerate(replayed):
        if not any(op["kind"] == "forward" for op in ops[j]):
            continue
        sim.add(f"{d} gather+loss", on_core(cluster, d, j), overhead_seconds(profile, scale))
        for layer in layers:
            compute.add(f"{d} fwd {layer.name}", on_core(cluster, d, j),
                        lambda shared, layer=layer: layer.forward_time(rows, shared))
    # Every device of the group runs the same collectives in the same order: device 0's list.
    owner = _finalizing_layer(profile)
    during = {}
    for op in ops[0]:
        if op["kind"] == "collective" and op["during_backward"]:
            during.setdefault(owner(op["first_value"]), []).append(op)
    last_backward, pending = {}, []
    for i in reversed(range(len(layers))):
        for j, d in enumerate(replayed):
            last_backward[d] = compute.add(f"{d} bwd {layers[i].name}", on_core(cluster, d, j),
                                           lambda shared, i=i: layers[i].backward_time(rows, shared))
        for op in during.get(i, []):
            name = f"{op['collective']} bucket {op['bucket']}"
            seconds = _collective_seconds(op, cluster, processes)
            if cluster.overlaps_communication:
                pending.append(sim.add(name, ("net",), seconds, deps=tuple(last_backward.values()),
                                       category=COMMUNICATION))
            else:
                sim.add(name, group, seconds, category=COMMUNICATION)
    # After backward: the rest of device 0's list; each update as every replayed device's own.
    after = [op for op in ops[0] if op["kind"] in ("collective", "update") and not op.get("during_backward")]
    updates = [[op for op in ops[j] if op["kind"] == "update"] for j in range(len(replayed))]
    slots = profile.optimizer_slots
    waited, k = False, 0
    for op in after:
        if op["kind"] == "collective":
            sim.add(op["collective"], group, _collective_seconds(op, cluster, processes), category=COMMUNICATION)
            continue
        for j, d in enumerate(replayed):
            if pending and not waited:
                sim.add(f"{d} wait buckets", d, 0.0, deps=tuple(pending), category=COMMUNICATION)
            if k < len(updates[j]):
                add_update(sim, f"{d} update", on_core(cluster, d, j),
                           update_seconds(updates[j][k]["values"], slots, cluster, profile, scale), profile, cluster,
                           scale)
        waited = True
        k += 1
    # Every device holds the weights and their gradients, and the optimizer slots of what it updates.
    held = max((op["values"] for u in updates for op in u), default=0)
    memory = profile.param_bytes * 2 + slots * held * BYTES_PER_VALUE
    timeline = sim.run()
    return StepResult(timeline.makespan, _breakdown(timeline, replayed), memory + _activation_bytes(profile, rows),
                      timeline)
