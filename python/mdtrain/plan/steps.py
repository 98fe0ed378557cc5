"""The steps of the strategies the planner does not yet price from the core's StepPlan (data
parallelism is priced from it in price_plan.py, the pipelines in price_pipeline.py), as simulator
tasks in the order the code runs them, and the pricing helpers they all share:

- tensor parallel (tensor_parallel_plan.h): Dense layers split over the model axis, a
  column-parallel Dense followed by a row-parallel one (Megatron's pairing): an all-reduce of the
  row-parallel layer's output in forward and of the column-parallel layer's input gradient in
  backward; an unpaired column-parallel Dense all-gathers its output (and all-reduces its input
  gradient).
- parameter servers on a preset: each worker's compute, a push of its gradient shards to the k
  servers (each server's link shared by every worker, in worker order), the server's update, the
  pull back (synchronous, the batch split over the workers);
- parameter servers on this machine (parameter_servers_async): worker and server processes
  sharing the cores, asynchronous as the strategy runs by default, each worker step a whole batch:
  pull, compute, push, the servers' applies, over the measured ZeroMQ transport (ps_probe.py).

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


def tensor_parallel_forms(profile, t):
    """Each layer's form over a model axis of t: 'column', 'row', 'column_gather' or 'replicated'
    (the layout a planner would write: Megatron pairs of consecutive Dense layers)."""
    forms = ["replicated"] * len(profile.layers)
    dense = [i for i, layer in enumerate(profile.layers) if layer.kind == "Dense"]
    i = 0
    while i < len(dense):
        a = dense[i]
        la = profile.layers[a]
        if la.activation_values % t != 0:
            i += 1
            continue
        between = profile.layers[a + 1:dense[i + 1]] if i + 1 < len(dense) else None
        if between is not None and all(x.params == 0 for x in between):
            forms[a], forms[dense[i + 1]] = "column", "row"
            i += 2
        else:
            forms[a] = "column_gather"
            i += 1
    return forms


def tensor_parallel(profile, cluster, t, dp, global_batch, scale=1.0):
    """ModelParallel on a (batch=dp, model=t) mesh: sharded layers' time and values divided by t
    (assumed to split evenly); the model axis's collectives on the replica's thread (blocking)."""
    rows = -(-global_batch // dp)
    forms = tensor_parallel_forms(profile, t)
    cluster, sim, compute, devs, group = start_replay(profile, cluster, scale, t)
    layers = profile.layers

    def shard(i):
        return t if forms[i] != "replicated" else 1

    sim.add("replica hand-off", group, cluster.step_overhead(t * dp), category=COMMUNICATION)
    for j, d in enumerate(devs):
        sim.add(f"{d} gather+loss", on_core(cluster, d, j), overhead_seconds(profile, scale))
    for i, layer in enumerate(layers):
        for j, d in enumerate(devs):
            compute.add(f"{d} fwd {layer.name}", on_core(cluster, d, j),
                        lambda shared, layer=layer: layer.forward_time(rows, shared) / shard(i))
        out_bytes = rows * layer.activation_values * BYTES_PER_VALUE
        if forms[i] == "row":
            sim.add(f"all-reduce out {layer.name}", group, collectives.all_reduce(out_bytes, t, cluster),
                    category=COMMUNICATION)
        elif forms[i] == "column_gather":
            sim.add(f"all-gather out {layer.name}", group, collectives.all_gather(out_bytes, t, cluster),
                    category=COMMUNICATION)
    for i in reversed(range(len(layers))):
        for j, d in enumerate(devs):
            compute.add(f"{d} bwd {layers[i].name}", on_core(cluster, d, j),
                        lambda shared: layers[i].backward_time(rows, shared) / shard(i))
        if forms[i] in ("column", "column_gather") and i > 0:
            in_bytes = rows * layers[i - 1].activation_values * BYTES_PER_VALUE
            sim.add(f"all-reduce dx {layers[i].name}", group, collectives.all_reduce(in_bytes, t, cluster),
                    category=COMMUNICATION)
    local_values = sum(layer.params / shard(i) for i, layer in enumerate(layers))
    if dp > 1:
        sim.add("gradient all-reduce (batch axis)", group,
                collectives.all_reduce(local_values * BYTES_PER_VALUE, dp, cluster), category=COMMUNICATION)
    slots = profile.optimizer_slots
    for j, d in enumerate(devs):
        add_update(sim, f"{d} update", on_core(cluster, d, j),
                   update_seconds(local_values, slots, cluster, profile, scale), profile, cluster, scale)
    timeline = sim.run()
    act = rows * BYTES_PER_VALUE * (profile.input_values +
                                    sum(layer.activation_values / shard(i) for i, layer in enumerate(layers)))
    return StepResult(timeline.makespan, _breakdown(timeline, devs),
                      local_values * BYTES_PER_VALUE * (2 + slots) + act, timeline), forms


def parameter_servers(profile, cluster, workers, k, global_batch, scale=1.0):
    """ParameterServerStrategy with `workers` workers (one device each) and k servers: each
    worker computes, pushes 1/k of its gradient to each server over the server's link (shared by
    all workers, in worker order), the server applies it, the worker pulls the new values."""
    rows = -(-global_batch // workers)
    sim = Simulator()
    shard_values = profile.params / k
    shard_bytes = shard_values * BYTES_PER_VALUE
    link = cluster.inter_host if cluster.hosts > 1 else cluster.intra_host
    ws = [f"worker{w}" for w in range(workers)]
    compute = {}
    for w in ws:
        compute[w] = sim.add(f"{w} fwd+bwd", w, profile.time(rows) * scale + overhead_seconds(profile, scale))
    pushes = {}
    for j in range(k):
        for w in ws:
            push = sim.add(f"{w} push to ps{j}", (f"ps{j}-link",), link.time(shard_bytes), deps=(compute[w],),
                           category=COMMUNICATION)
            upd = sim.add(f"ps{j} apply {w}", f"ps{j}",
                          update_seconds(shard_values, profile.optimizer_slots, cluster, profile, scale),
                          deps=(push,), category=UPDATE)
            pushes.setdefault(w, []).append(upd)
    for j in range(k):
        for w in ws:
            pull = sim.add(f"{w} pull from ps{j}", (f"ps{j}-link",), link.time(shard_bytes),
                           deps=(pushes[w][j],), category=COMMUNICATION)
            pushes[w].append(pull)
    for w in ws:
        sim.add(f"{w} has weights", w, 0.0, deps=tuple(pushes[w]), category=COMMUNICATION)
    timeline = sim.run()
    n = len(ws)
    comp = sum(timeline.busy(w, COMPUTE) for w in ws) / n
    upd = timeline.busy("ps0", UPDATE) / workers
    return StepResult(timeline.makespan, {"compute": comp, "communication": max(0.0, timeline.makespan - comp - upd),
                                          "update": upd, "bubble": 0.0},
                      profile.param_bytes * 2 + _activation_bytes(profile, rows), timeline)


def parameter_servers_async(profile, cluster, workers, k, global_batch, transport, rounds=4, scale=1.0,
                            process_threads=None, push_transport=None, step_overhead_s=0.0):
    """ParameterServerStrategy as it runs on this machine (python/mdtrain/_ps, its default mode):
    `workers` worker processes and k server processes sharing the machine's cores, each worker
    step on a whole batch of `global_batch` rows (the strategy has one replica in sync; fit's
    batch is each step's), asynchronous: a step pulls every variable, computes forward + backward,
    pushes the gradient, and each server applies its shard (FixedShardsPartitioner(k): about 1/k
    of the values each) before it acks; the worker's next step starts after the acks
    (ParameterServerWorkerExecutor; the client sends to every server, then collects the replies).

    `transport`: the measured α–β of one pull (ps_probe.py). A pull or a push is one task on the
    worker's thread holding its core and every server (the servers answer concurrently: one α; the
    worker's thread moves all the bytes). `push_transport`: the measured push (its round trip
    includes the server's SGD apply of the bytes; a push moves them slower than a pull: 0.44 against
    0.25 ms at the seed MLP's 407 KB), the apply task then costing only the model's update beyond
    SGD's; None: a push moves the bytes as a pull does and the apply is the whole update.
    `step_overhead_s`: what a worker step costs besides (ps_probe.measure_ps_step: the coordinator's
    closure, the worker's step loop), on the worker's core before each pull.
    `process_threads`: the threads each worker or server process splits its ops over (None: every
    core; LocalCluster gives a worker cores // workers and a server one, local_cluster.tasks_threads,
    unless MDTRAIN_CPU_THREADS is set; the planner passes the workers'); `profile` should be timed
    with as many. A worker's compute and a server's apply (the model's measured update pro rata)
    each hold that many cores, starting at the process's own (workers first, then servers), and
    processes time-share them. Each worker's steps are replayed for `rounds` rounds, the workers'
    requests reaching a server round by round in worker order; the step time is the steady state's
    (rounds 2..) seconds per update, i.e. per batch of `global_batch` rows trained. The breakdown is a worker step's (compute;
    its pull + push and waits for a core or a server; its wait for the applies), scaled to that
    per-update time. Not modelled: staleness (an update may use weights several updates old)."""
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"parameter_servers_async: workers must be an integer >= 1, got {workers!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"parameter_servers_async: k (servers) must be an integer >= 1, got {k!r}")
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"parameter_servers_async: rounds must be an integer >= 2, got {rounds!r}")
    if transport is None:
        raise ValueError("parameter_servers_async: transport (the measured PS α–β) is required")
    if process_threads is not None and (not isinstance(process_threads, int) or process_threads < 1):
        raise ValueError(f"parameter_servers_async: process_threads must be an integer >= 1, got {process_threads!r}")
    rows = global_batch
    cluster = replay_cluster(profile, cluster, scale)
    sim = Simulator()
    compute = _Compute(sim, profile, cluster, scale)
    ws = [f"worker{w}" for w in range(workers)]
    servers = tuple(f"ps{j}" for j in range(k))
    shard_values = profile.params / k
    move = transport.time(profile.param_bytes)
    apply_s = update_seconds(shard_values, profile.optimizer_slots, cluster, profile, scale)
    push_s = move
    if push_transport is not None:
        push_s = push_transport.time(profile.param_bytes)
        # The probe's push already applied SGD: a read of the value and gradient and a write of the
        # value, 3 of the 3 + 2·slots streams of the model's memory-bound update.
        apply_s *= 1.0 - 3.0 / (3.0 + 2.0 * profile.optimizer_slots)
    steps = []  # (round, worker, compute tasks, push task, ack task)
    cores = {w: on_core(cluster, w, i) for i, w in enumerate(ws)}  # the worker's thread and its core
    held = cluster.effective_cores or 0
    held = held if process_threads is None else min(held, process_threads)

    def process_cores(index):
        """The cores a process's ops hold: `held` of them, from the process's own."""
        return tuple(dict.fromkeys(cluster.core_of(index + i) for i in range(held)))

    # Issued phase by phase within a round (every worker's pull, then compute, then push), so a
    # server sees the workers' requests as workers in step with each other send them: one
    # worker's pull does not queue behind another's compute.
    for r in range(rounds):
        for w in ws:
            if step_overhead_s:
                sim.add(f"{w} r{r} step loop", cores[w], step_overhead_s, category=COMMUNICATION)
            sim.add(f"{w} r{r} pull", cores[w] + servers, move, category=COMMUNICATION)
        done = {}
        for i, w in enumerate(ws):
            ops = tuple(dict.fromkeys((w,) + process_cores(i)))
            done[w] = [sim.add(f"{w} r{r} gather+loss", ops, overhead_seconds(profile, scale)),
                       compute.add(f"{w} r{r} fwd+bwd", ops, lambda shared: profile.time(rows, shared))]
        for w in ws:
            push = sim.add(f"{w} r{r} push", cores[w] + servers, push_s, category=COMMUNICATION)
            applies = [sim.add(f"{s} r{r} apply {w}", (s,) + process_cores(workers + j), apply_s, deps=(push,),
                               category=UPDATE) for j, s in enumerate(servers)]
            ack = sim.add(f"{w} r{r} acks", w, 0.0, deps=tuple(applies), category=UPDATE)
            steps.append((r, w, done[w], push, ack))
    timeline = sim.run()
    acks = {(r, w): ack.end for r, w, _, _, ack in steps}
    first = max(acks[(0, w)] for w in ws)
    last = max(acks[(rounds - 1, w)] for w in ws)
    step_time = (last - first) / ((rounds - 1) * workers)
    steady = [s for s in steps if s[0] > 0]
    wall = sum(acks[(r, w)] - acks[(r - 1, w)] for r, w, *_ in steady) / len(steady)
    comp = sum(t.duration for _, _, done, _, _ in steady for t in done) / len(steady)
    waited = sum(ack.end - push.end for _, _, _, push, ack in steady) / len(steady)
    f = step_time / wall if wall > 0 else 0.0
    breakdown = {"compute": comp * f, "communication": max(0.0, wall - comp - waited) * f, "update": waited * f,
                 "bubble": 0.0}
    return StepResult(step_time, breakdown, profile.param_bytes * 2 + _activation_bytes(profile, rows), timeline)
