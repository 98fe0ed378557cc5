"""The planner prices ModelParallel from the core's StepPlan (price_tensor_parallel.py) and parameter
servers from the worker's (price_parameter_servers.py) to the predictions of the descriptions it held
before (verbatim copies below, the reference: rel 1e-9), where the two describe the same step: a
tensor-parallel batch axis of one, or one that all-reduces (GPUs); on CPU devices of one process the
plan's batch axis is ZeRO-1, as the executor runs it, where the old description all-reduced."""
import dataclasses

import pytest

from mdtrain.plan import AlphaBeta, Cluster, ModelProfile, collectives, price_parameter_servers, price_tensor_parallel
from mdtrain.plan.profile import BYTES_PER_VALUE, LayerCost
from mdtrain.plan.simulate import COMMUNICATION, COMPUTE, UPDATE, Simulator
from mdtrain.plan.step_costs import (StepResult, _activation_bytes, _breakdown, _Compute, add_update, on_core,
                                overhead_seconds, replay_cluster, start_replay, update_seconds)


def synthetic_profile(layers=4, units=256, per_row=1e-6, fixed=1e-5, kinds=None):
    kinds = kinds or ["Dense"] * layers
    costs = tuple(LayerCost(name=f"layer_{i}", kind=kind, params=units * units + units if kind == "Dense" else 0,
                            activation_values=units, forward_flops=2.0 * units * units,
                            backward_flops=4.0 * units * units, fixed_s=fixed, per_row_s=per_row * (1 + i),
                            backward_share=2 / 3) for i, kind in enumerate(kinds))
    return ModelProfile(name="synthetic", layers=costs, input_values=units, optimizer="adam", optimizer_slots=2,
                        rows_measured=(16, 128), threads=1)


def heavy_like_profile():
    """Wide Dense layers with weightless layers between (a pair through Dropout/Activation), an
    unpaired one and an output layer."""
    return synthetic_profile(layers=6, units=1024, per_row=4e-6,
                             kinds=["Dense", "Dropout", "Dense", "Dense", "Activation", "Dense"])


def _measured_like(prof, rows=(1, 2, 4, 8, 16, 32, 64, 128)):
    return dataclasses.replace(prof, layers=tuple(dataclasses.replace(x, points=tuple((r, x.time(r)) for r in rows),
                                                                      shared_points=tuple((r, 1.3 * x.time(r))
                                                                                          for r in rows))
                                                  for x in prof.layers), shared_by=2)


def gpu_cluster(hosts=1, bandwidth=50e9, overlaps=True):
    return Cluster(name="test", hosts=hosts, devices_per_host=8, peak_flops=1e14, memory_bytes=80e9,
                   memory_bandwidth=2e12, intra_host=AlphaBeta(3e-6, 1 / (8 * bandwidth)),
                   inter_host=AlphaBeta(5e-6, 1 / bandwidth), overlaps_communication=overlaps, source="test figures")


def cpu_cluster(devices=4, cores=None):
    return dataclasses.replace(gpu_cluster(overlaps=False), devices_per_host=devices, cores=cores)


def _same(new, old):
    assert new.step_time_s == pytest.approx(old.step_time_s, rel=1e-9)
    assert new.memory_per_device_bytes == pytest.approx(old.memory_per_device_bytes, rel=1e-9)
    for key, value in old.breakdown.items():
        assert new.breakdown[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key


TP_CASES = [(prof, cluster, t, dp, scale)
            for prof in ("synthetic", "heavy", "measured")
            for cluster in ("gpu", "cpu", "cpu_shared")
            for t, dp in ((2, 1), (4, 1), (2, 2), (4, 2))
            if dp == 1 or cluster == "gpu"
            for scale in (1.0, 0.5)]


def _profile(name):
    return {"synthetic": synthetic_profile, "heavy": heavy_like_profile,
            "measured": lambda: _measured_like(synthetic_profile())}[name]()


def _cluster(name):
    return {"gpu": gpu_cluster, "cpu": cpu_cluster, "cpu_shared": lambda: cpu_cluster(4, cores=2)}[name]()


@pytest.mark.parametrize("prof,cluster,t,dp,scale", TP_CASES)
def test_tensor_parallel_priced_from_the_plan_as_before(prof, cluster, t, dp, scale):
    profile, c = _profile(prof), _cluster(cluster)
    new, forms = price_tensor_parallel.tensor_parallel(profile, c, t, dp, 256, scale=scale)
    old, old_forms = _old_tensor_parallel(profile, c, t, dp, 256, scale=scale)
    assert forms == old_forms
    _same(new, old)


def test_tensor_parallel_on_cpu_devices_prices_the_executors_zero1():
    """Two batch groups of CPU devices: the plan reduce-scatters, updates half, all-gathers (the
    executor's ZeRO-1), not one all-reduce and the whole update."""
    profile, c = synthetic_profile(), cpu_cluster(4)
    plan = price_tensor_parallel.tensor_parallel_plan(profile, price_tensor_parallel.forms(profile, 2), 2, 2, 256)
    batch = [op["collective"] for op in plan.ops(0) if op["kind"] == "collective" and op["axis"] == "batch"]
    assert batch == ["reduce_scatter", "all_gather"]
    new, _ = price_tensor_parallel.tensor_parallel(profile, c, 2, 2, 256)
    old, _ = _old_tensor_parallel(profile, c, 2, 2, 256)
    assert new.breakdown["update"] < old.breakdown["update"]


PS_CASES = [(prof, cluster, workers, k) for prof in ("synthetic", "heavy", "measured") for cluster in ("gpu", "cpu")
            for workers in (1, 2, 8) for k in (1, 2, 4)]


@pytest.mark.parametrize("prof,cluster,workers,k", PS_CASES)
def test_parameter_servers_priced_from_the_plan_as_before(prof, cluster, workers, k):
    profile, c = _profile(prof), _cluster(cluster)
    if cluster == "gpu":
        c = dataclasses.replace(c, hosts=2)
    _same(price_parameter_servers.parameter_servers(profile, c, workers, k, 256),
          _old_parameter_servers(profile, c, workers, k, 256))


ASYNC_CASES = [(prof, workers, k, threads, push) for prof in ("synthetic", "measured") for workers in (1, 2, 3)
               for k in (1, 2, 4) for threads in (None, 1) for push in (False, True)]


@pytest.mark.parametrize("prof,workers,k,threads,push", ASYNC_CASES)
def test_asynchronous_parameter_servers_priced_from_the_plan_as_before(prof, workers, k, threads, push):
    profile = _profile(prof)
    c = dataclasses.replace(cpu_cluster(workers + k, cores=2), name="this-machine")
    transport, push_transport = AlphaBeta(2e-4, 1e-9), (AlphaBeta(3e-4, 2e-9) if push else None)
    kwargs = dict(process_threads=threads, push_transport=push_transport, step_overhead_s=1e-4)
    _same(price_parameter_servers.parameter_servers_async(profile, c, workers, k, 64, transport, **kwargs),
          _old_parameter_servers_async(profile, c, workers, k, 64, transport, **kwargs))


def test_each_server_is_priced_for_the_rows_the_partitioner_gives_it():
    """Layers of 5 values on 2 servers: shards of 3 and 2 values, placed round-robin from where the
    previous layer stopped, so the servers' bytes are the real partitioning's, not halves."""
    profile = dataclasses.replace(synthetic_profile(layers=2), layers=tuple(
        dataclasses.replace(x, params=5) for x in synthetic_profile(layers=2).layers))
    plan = price_parameter_servers.ps_plan(profile, 2)
    assert price_parameter_servers.server_bytes(plan) == ([(3 + 3) * 4, (2 + 2) * 4], [(3 + 3) * 4, (2 + 2) * 4])
    one = price_parameter_servers.ps_plan(dataclasses.replace(profile, layers=profile.layers[:1]), 3)
    assert price_parameter_servers.server_bytes(one)[0] == [2 * 4, 2 * 4, 1 * 4]


# ---- the planner's descriptions before the StepPlans (reference copies) --------------------------

def _old_tensor_parallel_forms(profile, t):
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


def _old_tensor_parallel(profile, cluster, t, dp, global_batch, scale=1.0):
    """ModelParallel on a (batch=dp, model=t) mesh: sharded layers' time and values divided by t
    (assumed to split evenly); the model axis's collectives on the replica's thread (blocking)."""
    rows = -(-global_batch // dp)
    forms = _old_tensor_parallel_forms(profile, t)
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




def _old_parameter_servers(profile, cluster, workers, k, global_batch, scale=1.0):
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


def _old_parameter_servers_async(profile, cluster, workers, k, global_batch, transport, rounds=4, scale=1.0,
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
