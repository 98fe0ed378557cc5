"""The steps of the strategies the planner does not yet price from the core's StepPlan (data
parallelism is priced from it: price_plan.py; tensor parallelism: price_tensor_parallel.py;
parameter servers: price_parameter_servers.py), as simulator tasks in the order the code runs
them, and the pricing helpers they all share:

- pipeline (pipeline_schedule.h): each stage's op list from the core's make_pipeline_schedule
  (GPipe or 1F1B), sends buffered, a receive waiting for its transfer on the link between stages;
  then each stage's gradient sum over its batch-axis replicas and its update.

Replicas of a data-parallel group are identical, so at most `REPLAYED_REPLICAS` of them are
replayed; collectives are costed for the whole group. On a machine whose devices share cores
(Cluster.cores: this one) every device is replayed and its compute and update also hold a core, so
n devices on fewer cores run at most that many at once; a device's layer that runs while another
core computes costs the profile's shared time (measured while every core ran a copy of the model:
the cores share memory bandwidth and caches), alone the alone time (simulate.py applies it to
the overlapping part of each task); a pipeline's receive there costs the measured per-message
send + wake-up."""
import dataclasses

from mdtrain.plan import collectives
from mdtrain.plan.pipeline_memory import peak_in_flight
from mdtrain.plan.profile import BYTES_PER_VALUE
from mdtrain.plan.simulate import COMMUNICATION, COMPUTE, UPDATE, Simulator

REPLAYED_REPLICAS = 4


@dataclasses.dataclass
class StepResult:
    step_time_s: float
    breakdown: dict
    memory_per_device_bytes: float
    timeline: object = None


def update_seconds(values, slots, cluster, profile=None, scale=1.0):
    """On the profiled machine (scale 1), the measured update of the whole model (profile.update_s)
    pro rata; elsewhere an estimate: an update streams each value, its gradient and its slots
    (read + write), memory bound at the device's memory bandwidth."""
    if profile is not None and profile.update_s is not None and scale == 1.0:
        return profile.update_s * values / max(1, profile.params)
    return values * BYTES_PER_VALUE * (3 + 2 * slots) / cluster.memory_bandwidth


def overhead_seconds(profile, scale):
    """The rest of a step the layer timer does not see (batch gather, loss, hand-offs), measured
    on the profiled machine; not known elsewhere (0: GPU launch and framework costs are not
    modelled)."""
    return profile.step_overhead_s if scale == 1.0 else 0.0


def _breakdown(timeline, devices, pipeline=False):
    """Averages over `devices`: compute, update, communication on the device's thread, and the
    rest of the step, idle: waiting for a stream's all-reduce or another rank (exposed
    communication) or, in a pipeline, for a neighbouring stage (the bubble)."""
    n = len(devices)
    step = timeline.makespan
    compute = sum(timeline.busy(d, COMPUTE) for d in devices) / n
    update = sum(timeline.busy(d, UPDATE) for d in devices) / n
    comm = sum(timeline.busy(d, COMMUNICATION) for d in devices) / n
    idle = max(0.0, step - compute - update - comm)
    return {"compute": compute, "communication": comm + (0.0 if pipeline else idle), "update": update,
            "bubble": idle if pipeline else 0.0}


def _activation_bytes(profile, rows, layers=None):
    layers = profile.layers if layers is None else layers
    return rows * BYTES_PER_VALUE * (sum(layer.activation_values for layer in layers) + profile.input_values)


def contention_measured(profile, cluster, scale):
    """Whether the replay charges compute that overlaps another core's at the profile's shared
    layer times: on the profiled machine (scale 1) whose devices share its cores, when the profile
    timed its layers while every core ran a copy."""
    return profile.shared_by > 1 and scale == 1.0 and cluster.cores is not None


def replay_cluster(profile, cluster, scale):
    """The cluster as the replay deals compute over it. When contention was measured on the
    model's own layers, the devices go over every core and the shared layer times say what running
    at once costs (memory bandwidth, caches, and what other load leaves) in place of the GEMM
    probe's whole-core share (Cluster.concurrent_speedup), which would count that twice."""
    if contention_measured(profile, cluster, scale):
        return dataclasses.replace(cluster, concurrent_speedup=None)
    return cluster


class _Compute:
    """Adds a device's compute to the replay: its alone seconds and, when contention was measured,
    the seconds it takes while other cores compute (simulate.py's shared_duration)."""

    def __init__(self, sim, profile, cluster, scale):
        self.sim, self.scale = sim, scale
        self.shared = contention_measured(profile, cluster, scale)

    def add(self, name, resources, seconds_at, deps=(), category=COMPUTE):
        """seconds_at(shared) -> unscaled seconds."""
        shared = seconds_at(True) * self.scale if self.shared else None
        return self.sim.add(name, resources, seconds_at(False) * self.scale, deps=deps, category=category,
                            shared_duration=shared)


def add_update(sim, name, resources, seconds, profile, cluster, scale):
    """An optimizer update: memory bound, so while other cores work it takes its alone time scaled
    as the model's update measured while every other core fits a copy of its own
    (profile.update_shared_s over update_s), when measured."""
    measured = (contention_measured(profile, cluster, scale) and profile.update_s
                and profile.update_shared_s is not None)
    shared = seconds * profile.update_shared_s / profile.update_s if measured else None
    return sim.add(name, resources, seconds, category=UPDATE, shared_duration=shared)


def replayed_devices(cluster, n):
    """The devices replayed of a group of n identical ones: every one when they share cores
    (this machine: the cores decide the step), else at most REPLAYED_REPLICAS."""
    return [f"dev{d}" for d in range(n if cluster.cores is not None else min(n, REPLAYED_REPLICAS))]


def start_replay(profile, cluster, scale, n):
    """A replay of a group of n identical devices: (the replay's cluster, the simulator, its
    compute adder, the replayed devices, the group's resources for a collective: those devices
    and the network)."""
    cluster = replay_cluster(profile, cluster, scale)
    sim = Simulator()
    devices = replayed_devices(cluster, n)
    return cluster, sim, _Compute(sim, profile, cluster, scale), devices, tuple(devices) + ("net",)


def on_core(cluster, device, index):
    """The resources a device's compute holds: the device, and on a machine whose devices share
    cores (Cluster.cores) the core it runs on, so n devices on c < n cores run at most c at once."""
    core = cluster.core_of(index)
    return (device,) if core is None else (device, core)


def balance_stages(times, stages):
    """The first layer of stages 1..p-1 for per-layer `times` (seconds): the core's own cut
    (stage_balance.h), the one PipelineParallel makes."""
    from mdtrain import _core
    return list(_core.balance_stages([round(t * 1e9) for t in times], stages))


def balance_time_starts(profile, stages):
    """Where stages="balance_time" cuts the profiled model: by each layer's time on the rows the
    executor times (it cannot know the micro-batch when it cuts)."""
    from mdtrain import _core
    return balance_stages([layer.time(_core.BALANCE_TIME_ROWS) for layer in profile.layers], stages)


def pipeline_ops(schedule, stages, microbatches):
    from mdtrain import _core
    return _core.pipeline_schedule_ops(schedule, stages, microbatches)


def pipeline(profile, cluster, p, m, schedule, dp, global_batch, scale=1.0, stage_starts=None, ops=None,
             stage_costs=None, measured_stages=None):
    """PipelineParallel on a (pipe=p, batch=dp) mesh with m micro-batches. stage_costs: optional
    [(forward_s, backward_s)] per stage per micro-batch (tests: equal stages); else from the
    profile, stages cut by time as stages='balance_time' does (or at stage_starts), each stage's
    cost the stage timer's (`measured_stages`, stage_profile.measure_stage_costs, the same list
    shape) when given, else the sum of its layers' profiled times. Returns (StepResult, the mean
    bubble per stage in seconds, the pipeline's span: first forward to last backward)."""
    rows = global_batch // (dp * m)
    layers = profile.layers
    cluster = replay_cluster(profile, cluster, scale)
    contended = stage_costs is None and contention_measured(profile, cluster, scale)
    shared_costs = None
    ops = ops if ops is not None else pipeline_ops(schedule, p, m)
    if stage_costs is None:
        starts = stage_starts if stage_starts is not None else balance_time_starts(profile, p)
        bounds = [0] + list(starts) + [len(layers)]
        groups = [layers[bounds[s]:bounds[s + 1]] for s in range(p)]
        if measured_stages is not None:
            if len(measured_stages) != p:
                raise ValueError(f"pipeline: measured_stages has {len(measured_stages)} stages' costs for {p} stages")
            # The stage as it runs, timed alone; while other cores compute it pays what its layers
            # pay then (their shared over alone time).
            stage_costs = [(f * scale, b * scale) for f, b in measured_stages]
            if contended:
                ratios = [sum(x.time(rows, True) for x in g) / max(sum(x.time(rows) for x in g), 1e-30) for g in groups]
                shared_costs = [(f * r, b * r) for (f, b), r in zip(stage_costs, ratios)]
        else:
            # A stage holding k micro-batches' activations at its peak (GPipe: all m) runs each one
            # at the profile's in-flight time (LayerCost.in_flight_factor): measured, not a formula.
            held = [peak_in_flight(stage_ops) for stage_ops in ops]
            stage_costs = [(sum(x.forward_time(rows, in_flight=k) for x in g) * scale,
                            sum(x.backward_time(rows, in_flight=k) for x in g) * scale) for g, k in zip(groups, held)]
            if contended:
                shared_costs = [(sum(x.forward_time(rows, True, k) for x in g) * scale,
                                 sum(x.backward_time(rows, True, k) for x in g) * scale) for g, k in zip(groups, held)]
        boundary_bytes = [rows * g[-1].activation_values * BYTES_PER_VALUE for g in groups]
        stage_values = [sum(x.params for x in g) for g in groups]
    else:
        groups = None
        boundary_bytes = [0.0] * p
        stage_values = [0] * p
    sim = Simulator()
    devs = [f"stage{s}" for s in range(p)]
    # A send is buffered (the stage goes on); the transfer occupies the link between the two
    # stages, in the sender's order; the receive waits for it. Stages' ops are added in rounds
    # so a transfer exists before the receive that waits for it is added.
    last_fwd, last_bwd, transfer = {}, {}, {}
    pending = [list(stage_ops) for stage_ops in ops]
    # Measured on this machine only (0 elsewhere): the step's fixed cost (the two-stage probe's
    # when measured, else that of as many replica threads) and each message's send + wake-up of
    # the stage thread waiting in its receive, on the receiving stage.
    message_s = cluster.pipeline_message_s if groups and cluster.pipeline_message_s is not None else 0.0
    if groups:
        fixed = (cluster.pipeline_step_overhead_s if cluster.pipeline_step_overhead_s is not None and dp == 1
                 else cluster.step_overhead(p * dp))
        sim.add("stage threads hand-off", tuple(devs), fixed, category=COMMUNICATION)
        sim.add("stage0 gather+loss", on_core(cluster, devs[0], 0), overhead_seconds(profile, scale))
    while any(pending):
        progressed = False
        for s in range(p):
            while pending[s]:
                kind, mb = pending[s][0]
                f, b = stage_costs[s]
                sf, sb = shared_costs[s] if shared_costs else (None, None)
                d = devs[s]
                if kind == "forward":
                    last_fwd[(s, mb)] = sim.add(f"{d} F{mb}", on_core(cluster, d, s * dp), f, shared_duration=sf)
                elif kind == "backward":
                    last_bwd[(s, mb)] = sim.add(f"{d} B{mb}", on_core(cluster, d, s * dp), b, shared_duration=sb)
                elif kind == "send_activation":
                    same = (s // cluster.devices_per_host) == ((s + 1) // cluster.devices_per_host)
                    transfer[("act", s + 1, mb)] = sim.add(
                        f"act {s}->{s + 1} mb{mb}", f"link{s}>{s + 1}",
                        collectives.point_to_point(boundary_bytes[s], same, cluster) if groups else 0.0,
                        deps=(last_fwd[(s, mb)],), category=COMMUNICATION)
                elif kind == "send_gradient":
                    same = (s // cluster.devices_per_host) == ((s - 1) // cluster.devices_per_host)
                    transfer[("grad", s - 1, mb)] = sim.add(
                        f"grad {s}->{s - 1} mb{mb}", f"link{s}>{s - 1}",
                        collectives.point_to_point(boundary_bytes[s - 1], same, cluster) if groups else 0.0,
                        deps=(last_bwd[(s, mb)],), category=COMMUNICATION)
                elif kind in ("recv_activation", "recv_gradient"):
                    key = ("act" if kind == "recv_activation" else "grad", s, mb)
                    if key not in transfer:
                        break  # its sender has not reached the send yet: next round
                    sim.add(f"{d} {kind} mb{mb}", d, message_s, deps=(transfer[key],),
                            category=COMMUNICATION if message_s else COMPUTE)
                pending[s].pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline: the schedule's receives never match a send")
    slots = profile.optimizer_slots
    for s, d in enumerate(devs):
        if dp > 1 and stage_values[s]:
            sim.add(f"{d} gradient all-reduce", (d, f"net{s}"),
                    collectives.all_reduce(stage_values[s] * BYTES_PER_VALUE, dp, cluster), category=COMMUNICATION)
        add_update(sim, f"{d} update", on_core(cluster, d, s * dp),
                   update_seconds(stage_values[s], slots, cluster, profile, scale), profile, cluster, scale)
    timeline = sim.run()
    # The bubble: inside the pipeline's span (up to the last backward anywhere), the time a
    # stage does not compute; after the span, waiting for the slowest stage's update is exposed
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
    peak = [peak_in_flight(stage_ops) for stage_ops in ops]
    if groups:
        memory = max(stage_values[s] * BYTES_PER_VALUE * (2 + slots) +
                     peak[s] * _activation_bytes(profile, rows, groups[s]) for s in range(p))
    else:
        memory = 0.0
    return StepResult(timeline.makespan, {"compute": compute, "communication": comm, "update": update,
                                          "bubble": bubble}, memory, timeline), bubble, pipe_end - pipe_start
