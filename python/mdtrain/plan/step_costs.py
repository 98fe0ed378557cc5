"""The costs every StepPlan pricer shares (price_plan.py, price_tensor_parallel.py,
price_pipeline.py, price_parameter_servers.py): an update's seconds, a step's fixed overhead,
the breakdown of a replayed timeline, activation memory, and the replay's devices and cores.

Replicas of a data-parallel group are identical, so at most `REPLAYED_REPLICAS` of them are
replayed; collectives are costed for the whole group. On a machine whose devices share cores
(Cluster.cores: this one) every device is replayed and its compute and update also hold a core, so
n devices on fewer cores run at most that many at once; a device's layer that runs while another
core computes costs the profile's shared time (measured while every core ran a copy of the model:
the cores share memory bandwidth and caches), alone the alone time (simulate.py applies it to
the overlapping part of each task)."""
import dataclasses

from mdtrain.plan import collectives
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


