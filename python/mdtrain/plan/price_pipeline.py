"""Prices the StepPlan of a pipeline: PipelineParallel's (GPipe or 1F1B micro-batches through stages of
layers) and WavefrontPipeline's (time chunks of a recurrent stack through its stages), the plans the
core makes (cpp/mdtrain/strategy/pipeline_step_plan.h) and the executors run, so the planner holds
no description of its own of a pipeline's step.

`pipeline_plan` asks the core for PipelineParallel's plan of a profiled model (each layer's values
and output values per row, the stage cut, the schedule, micro-batches, pipelines, global batch);
`price_pipeline` replays one pipeline's devices (stage s: the plan's first device of segment s)
op by op in the simulator:

- forward / backward of a segment on a micro-batch: its layers' profiled times at the op's rows
  (a stage holding k micro-batches' activations at its peak, GPipe's all m, at the profile's
  in-flight time), or the stage timer's measured time per micro-batch when given;
- send: buffered (the stage goes on); the transfer of the op's bytes occupies the link between the
  two stages, in the sender's order; receive: waits for it, and on this machine costs the measured
  per-message send + wake-up of the receiving thread;
- after the schedule, each stage's gradient buckets all-reduced over the batch axis (the plan's
  collectives), then its update (its values).

`wavefront_plan` / `price_wavefront` do the same for WavefrontPipeline: a chunk's forward or
backward costs its segment's layers' profiled times at the batch's rows times the chunk's share of
the sequence's steps; the head runs on the last device on the whole sequence; the update of the
whole model closes device 0's list."""
from mdtrain import _core
from mdtrain.plan import collectives
from mdtrain.plan.pipeline_memory import peak_in_flight
from mdtrain.plan.profile import BYTES_PER_VALUE
from mdtrain.plan.simulate import COMMUNICATION, COMPUTE, UPDATE, Simulator
from mdtrain.plan.step_costs import (StepResult, _activation_bytes, _breakdown, add_update, contention_measured, on_core,
                                overhead_seconds, replay_cluster, update_seconds)

_SCHEDULE_KIND = {("send", False): "send_activation", ("send", True): "send_gradient",
                  ("recv", False): "recv_activation", ("recv", True): "recv_gradient"}


def balance_stages(times, stages):
    """The first layer of stages 1..p-1 for per-layer `times` (seconds): the core's own cut
    (stage_balance.h), the one PipelineParallel makes."""
    return list(_core.balance_stages([round(t * 1e9) for t in times], stages))


def balance_time_starts(profile, stages):
    """Where stages="balance_time" cuts the profiled model: by each layer's time on the rows the
    executor times (it cannot know the micro-batch when it cuts)."""
    return balance_stages([layer.time(_core.BALANCE_TIME_ROWS) for layer in profile.layers], stages)


def pipeline_plan(profile, p, m, schedule, dp, global_batch, stage_starts=None, bucket_bytes=None):
    """The core's PipelineParallel StepPlan of the profiled model on a (pipe=p, batch=dp) mesh with m
    micro-batches (stage_starts None: cut as stages="balance_time" cuts it; bucket_bytes None:
    GradientReducer's default buckets)."""
    starts = list(stage_starts) if stage_starts is not None else balance_time_starts(profile, p)
    weights = [(layer.name, layer.params) for layer in profile.layers]
    outputs = [layer.activation_values for layer in profile.layers]
    buckets = {} if bucket_bytes is None else {"bucket_bytes": bucket_bytes}
    return _core.pipeline_step_plan(weights, outputs, starts, schedule, m, pipelines=dp, global_batch=global_batch,
                                    **buckets)


def _stage_plan(p, m, schedule, dp, global_batch):
    """A plan of p one-layer stages without values or bytes: the schedule's ops alone, for stage
    costs given as figures (tests, the published bubble cases)."""
    return _core.pipeline_step_plan([(f"stage{s}", 0) for s in range(p)], [0] * p, list(range(1, p)), schedule, m,
                                    pipelines=dp, global_batch=global_batch)


def _schedule_of(ops):
    """A device's ops as (kind, micro-batch), as the core's pipeline schedule names them."""
    out = []
    for op in ops:
        if op["kind"] in ("forward", "backward"):
            out.append((op["kind"], op["microbatch"]))
        elif op["kind"] in ("send", "recv"):
            out.append((_SCHEDULE_KIND[(op["kind"], op["gradient"])], op["microbatch"]))
    return out


def price_pipeline(plan, profile, cluster, scale=1.0, stage_costs=None, measured_stages=None):
    """The simulated step of a PipelineParallel `plan` of the profiled model. stage_costs: optional
    [(forward_s, backward_s)] per stage per micro-batch (the plan's values and bytes are then not
    priced: tests, equal stages); measured_stages: the stage timer's (stage_profile.measure_stage_costs,
    the same list shape) in place of the stage's layers' profiled times. Returns (StepResult, the
    mean bubble per stage in seconds, the pipeline's span: first forward to last backward)."""
    segments = plan.segments
    p = len(segments)
    dp = plan.syncs[0]["group"]
    layers = profile.layers
    cluster = replay_cluster(profile, cluster, scale)
    free = stage_costs is not None
    contended = not free and contention_measured(profile, cluster, scale)
    # Pipeline 0's devices: stage s on the first device of segment s.
    device = [seg["devices"][0] for seg in segments]
    ops = [plan.ops(device[s]) for s in range(p)]
    schedule_ops = [_schedule_of(o) for o in ops]
    held = [peak_in_flight(o) for o in schedule_ops]
    groups = None if free else [layers[seg["first_layer"]:seg["end_layer"]] for seg in segments]
    if measured_stages is not None and len(measured_stages) != p:
        raise ValueError(f"pipeline: measured_stages has {len(measured_stages)} stages' costs for {p} stages")

    def costs(s, kind, rows):
        """(alone, shared or None) seconds of stage s's forward or backward on `rows` rows."""
        backward = kind == "backward"
        if free:
            return stage_costs[s][backward], None
        g = groups[s]
        if measured_stages is not None:
            # The stage as it runs, timed alone; while other cores compute it pays what its layers
            # pay then (their shared over alone time).
            alone = measured_stages[s][backward] * scale
            if not contended:
                return alone, None
            ratio = sum(x.time(rows, True) for x in g) / max(sum(x.time(rows) for x in g), 1e-30)
            return alone, alone * ratio
        # A stage holding k micro-batches' activations at its peak (GPipe: all m) runs each one at
        # the profile's in-flight time (LayerCost.in_flight_factor): measured, not a formula.
        k = held[s]
        time = (lambda x, *a: x.backward_time(rows, *a)) if backward else (lambda x, *a: x.forward_time(rows, *a))
        alone = sum(time(x, False, k) for x in g) * scale
        return alone, (sum(time(x, True, k) for x in g) * scale if contended else None)

    sim = Simulator()
    devs = [f"stage{s}" for s in range(p)]
    # Measured on this machine only (0 elsewhere): the step's fixed cost (the two-stage probe's when
    # measured, else that of as many replica threads) and each message's send + wake-up of the
    # stage thread waiting in its receive, on the receiving stage.
    message_s = cluster.pipeline_message_s if not free and cluster.pipeline_message_s is not None else 0.0
    if not free:
        fixed = (cluster.pipeline_step_overhead_s if cluster.pipeline_step_overhead_s is not None and dp == 1
                 else cluster.step_overhead(p * dp))
        sim.add("stage threads hand-off", tuple(devs), fixed, category=COMMUNICATION)
        sim.add("stage0 gather+loss", on_core(cluster, devs[0], 0), overhead_seconds(profile, scale))
    # Stages' ops are added in rounds so a transfer exists before the receive that waits for it.
    last_fwd, last_bwd, transfer = {}, {}, {}
    schedule_part = [[op for op in o if op["kind"] in ("forward", "backward", "send", "recv")] for o in ops]
    pending = [list(o) for o in schedule_part]
    while any(pending):
        progressed = False
        for s in range(p):
            d = devs[s]
            while pending[s]:
                op = pending[s][0]
                kind, mb = op["kind"], op["microbatch"]
                if kind in ("forward", "backward"):
                    alone, shared = costs(s, kind, op["rows"])
                    done = last_fwd if kind == "forward" else last_bwd
                    done[(s, mb)] = sim.add(f"{d} {'F' if kind == 'forward' else 'B'}{mb}",
                                            on_core(cluster, d, device[s]), alone, shared_duration=shared)
                elif kind == "send":
                    to = s - 1 if op["gradient"] else s + 1
                    # The hosts of the stages' positions along the pipe (the stage index, as this
                    # replay has always placed them).
                    same = (s // cluster.devices_per_host) == (to // cluster.devices_per_host)
                    what = "grad" if op["gradient"] else "act"
                    transfer[(what, to, mb)] = sim.add(
                        f"{what} {s}->{to} mb{mb}", f"link{s}>{to}",
                        0.0 if free else collectives.point_to_point(op["bytes"], same, cluster),
                        deps=((last_bwd if op["gradient"] else last_fwd)[(s, mb)],), category=COMMUNICATION)
                else:
                    key = ("grad" if op["gradient"] else "act", s, mb)
                    if key not in transfer:
                        break  # its sender has not reached the send yet: next round
                    sim.add(f"{d} {_SCHEDULE_KIND[('recv', op['gradient'])]} mb{mb}", d, message_s,
                            deps=(transfer[key],), category=COMMUNICATION if message_s else COMPUTE)
                pending[s].pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline: the plan's receives never match a send")
    slots = profile.optimizer_slots
    values = [0] * p
    for s, d in enumerate(devs):
        for op in ops[s]:
            if op["kind"] == "collective" and not free:
                sim.add(f"{d} gradient all-reduce", (d, f"net{s}"),
                        collectives.all_reduce(op["bytes"], op["group"], cluster), category=COMMUNICATION)
            elif op["kind"] == "update":
                values[s] = 0 if free else op["values"]
                add_update(sim, f"{d} update", on_core(cluster, d, device[s]),
                           update_seconds(values[s], slots, cluster, profile, scale), profile, cluster, scale)
    timeline = sim.run()
    # The bubble: inside the pipeline's span (up to the last backward anywhere), the time a stage
    # does not compute; after the span, waiting for the slowest stage's update is exposed
    # communication/update skew, not bubble.
    pipe_start = min(t.start for t in last_fwd.values())
    pipe_end = max(t.end for t in last_bwd.values())
    busy = [sum(t.duration for key, t in list(last_fwd.items()) + list(last_bwd.items()) if key[0] == s)
            for s in range(p)]
    # A receive's message cost is communication, not bubble.
    received = [sum(t.duration for t in timeline.tasks if t.resources == (devs[s],) and " recv_" in t.name)
                for s in range(p)]
    bubble = max(0.0, sum(pipe_end - pipe_start - b - r for b, r in zip(busy, received)) / p)
    update = sum(timeline.busy(d, UPDATE) for d in devs) / p
    compute = sum(timeline.busy(d, COMPUTE) for d in devs) / p
    comm = max(0.0, timeline.makespan - compute - update - bubble)
    memory = 0.0
    if not free:
        rows = max((op["rows"] for o in ops for op in o if op["kind"] == "forward"), default=0)
        memory = max(values[s] * BYTES_PER_VALUE * (2 + slots) + held[s] * _activation_bytes(profile, rows, groups[s])
                     for s in range(p))
    return StepResult(timeline.makespan, {"compute": compute, "communication": comm, "update": update,
                                          "bubble": bubble}, memory, timeline), bubble, pipe_end - pipe_start


def pipeline(profile, cluster, p, m, schedule, dp, global_batch, scale=1.0, stage_starts=None, stage_costs=None,
             measured_stages=None):
    """PipelineParallel on a (pipe=p, batch=dp) mesh with m micro-batches: the core's plan
    (pipeline_plan; of p stages without values when stage_costs gives each stage's figures), priced
    (price_pipeline). Returns (StepResult, the mean bubble per stage, the pipeline's span)."""
    if stage_costs is not None:
        plan = _stage_plan(p, m, schedule, dp, global_batch)
    else:
        plan = pipeline_plan(profile, p, m, schedule, dp, global_batch, stage_starts)
    return price_pipeline(plan, profile, cluster, scale, stage_costs=stage_costs, measured_stages=measured_stages)


def wavefront_plan(model, stages, time_chunk, global_batch):
    """The core's WavefrontPipeline StepPlan of a built Sequential `model` (WavefrontStrategy.make_plan's):
    ValueError when its leading layers are not enough recurrent return_sequences layers."""
    return _core.wavefront_step_plan(model._core, stages, time_chunk, global_batch)


def price_wavefront(plan, profile, cluster, timesteps, scale=1.0):
    """The simulated step of a WavefrontPipeline `plan` of the profiled model (one device per stage,
    `timesteps` steps in the model's sequences): each device's ops in order, chunk k's forward or
    backward of a segment its layers' profiled time at the op's rows times the chunk's steps over
    `timesteps`, the head's on the whole sequence, a send's bytes on the link to the next device,
    a receive waiting for it (and on this machine the measured per-message cost), the update last.
    Returns a StepResult."""
    segments = plan.segments
    n = plan.devices
    layers = profile.layers
    cluster = replay_cluster(profile, cluster, scale)
    contended = contention_measured(profile, cluster, scale)
    ops = [plan.ops(d) for d in range(n)]
    devs = [f"stage{d}" for d in range(n)]
    message_s = cluster.pipeline_message_s if cluster.pipeline_message_s is not None else 0.0
    sim = Simulator()
    fixed = cluster.pipeline_step_overhead_s if cluster.pipeline_step_overhead_s is not None else cluster.step_overhead(n)
    sim.add("stage threads hand-off", tuple(devs), fixed, category=COMMUNICATION)
    sim.add("stage0 gather+loss", on_core(cluster, devs[0], 0), overhead_seconds(profile, scale))

    def seconds(op, shared):
        seg = segments[op["segment"]]
        share = op["steps"] / timesteps if op["steps"] else 1.0
        time = (lambda x: x.backward_time(op["rows"], shared)) if op["kind"] == "backward" else \
            (lambda x: x.forward_time(op["rows"], shared))
        return sum(time(x) for x in layers[seg["first_layer"]:seg["end_layer"]]) * share * scale

    last, transfer = {}, {}
    pending = [list(o) for o in ops]
    computed = []
    while any(pending):
        progressed = False
        for d in range(n):
            name = devs[d]
            while pending[d]:
                op = pending[d][0]
                kind = op["kind"]
                if kind in ("forward", "backward"):
                    last[d] = sim.add(f"{name} {kind[0].upper()}{op['segment']}.{op['microbatch']}",
                                      on_core(cluster, name, d), seconds(op, False),
                                      shared_duration=seconds(op, True) if contended else None)
                    computed.append(last[d])
                elif kind == "send":
                    to = op["peer"]
                    same = (d // cluster.devices_per_host) == (to // cluster.devices_per_host)
                    transfer[(op["gradient"], to, op["microbatch"])] = sim.add(
                        f"{'grad' if op['gradient'] else 'act'} {d}->{to} chunk{op['microbatch']}", f"link{d}>{to}",
                        collectives.point_to_point(op["bytes"], same, cluster), deps=(last.get(d),),
                        category=COMMUNICATION)
                elif kind == "recv":
                    key = (op["gradient"], d, op["microbatch"])
                    if key not in transfer:
                        break
                    sim.add(f"{name} recv chunk{op['microbatch']}", name, message_s, deps=(transfer[key],),
                            category=COMMUNICATION if message_s else COMPUTE)
                elif kind == "update":
                    # After every stage's last backward (the executor's optimizer runs on the caller).
                    sim.add(f"{name} wait stages", name, 0.0, deps=tuple(last.values()), category=COMMUNICATION)
                    add_update(sim, f"{name} update", on_core(cluster, name, d),
                               update_seconds(op["values"], profile.optimizer_slots, cluster, profile, scale), profile,
                               cluster, scale)
                pending[d].pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError("wavefront: the plan's receives never match a send")
    timeline = sim.run()
    breakdown = _breakdown(timeline, devs, pipeline=True)
    rows = max((op["rows"] for o in ops for op in o if op["kind"] == "forward"), default=0)
    # The stages share the model's weights, gradients and slots in one process's memory; the chunks'
    # clones of the layers together hold the whole sequence's activations.
    memory = profile.param_bytes * (2 + profile.optimizer_slots) + _activation_bytes(profile, rows)
    return StepResult(timeline.makespan, breakdown, memory, timeline)
