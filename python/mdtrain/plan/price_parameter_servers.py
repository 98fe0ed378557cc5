"""Prices a parameter-server worker's StepPlan (ParameterServerWorkerStrategy::make_plan,
parameter_server_step_plan in cpp/mdtrain/strategy/parameter_server/): a pull from every server of
the rows it holds, forward and backward, a push of their gradients to each; the servers apply them.

`ps_plan` asks the core for the plan of a profiled model on k servers: each profiled layer's values
one variable, split by FixedShardsPartitioner(k) (`_core.ps_fixed_shards`) into near-equal shards
placed round-robin (`_core.PsShardLayout`, the placement the strategy uses), so each server's bytes
are the plan's Pull and Push ops'. Two replays of it:

- `parameter_servers` (presets; synchronous, the batch split over the workers): each worker
  computes, pushes each server its bytes over that server's link (shared by every worker, in worker
  order), the server applies its values, the worker pulls its bytes back;
- `parameter_servers_async` (this machine, as python/mdtrain/_ps runs by default): worker and
  server processes sharing the cores, asynchronous, each worker step a whole batch: pull from every
  server, compute, push, and wait for the servers' applies, over the measured ZeroMQ transport
  (ps_probe.py): a pull or a push is one task on the worker's thread holding its core and every
  server (the servers answer concurrently: one α; the worker's thread moves all the plan's bytes)."""
from mdtrain import _core
from mdtrain.plan.simulate import COMMUNICATION, COMPUTE, UPDATE, Simulator
from mdtrain.plan.step_costs import (StepResult, _activation_bytes, _Compute, on_core, overhead_seconds, replay_cluster,
                                update_seconds)


def ps_plan(profile, k):
    """The core's worker plan of the profiled model on k servers (see the module docstring)."""
    variables = [(layer.name, [layer.params], "float32") for layer in profile.layers if layer.params > 0]
    layout = _core.PsShardLayout.make(k, variables, [_core.ps_fixed_shards(k, shape) for _, shape, _ in variables])
    return _core.parameter_server_step_plan(layout, len(profile.layers))


def server_bytes(plan):
    """(pull bytes, push bytes) per server of the worker's ops, in server order."""
    ops = plan.ops(0)
    servers = plan.syncs[0]["group"]
    pulled, pushed = [0] * servers, [0] * servers
    for op in ops:
        if op["kind"] == "pull":
            pulled[op["peer"]] += op["bytes"]
        elif op["kind"] == "push":
            pushed[op["peer"]] += op["bytes"]
    return pulled, pushed


def _server_values(plan, bytes_per_value=4):
    return [b / bytes_per_value for b in server_bytes(plan)[1]]


def parameter_servers(profile, cluster, workers, k, global_batch, scale=1.0, plan=None):
    """ParameterServerStrategy with `workers` workers (one device each) and k servers, synchronous:
    each worker computes, pushes each server its bytes of the gradient over the server's link
    (shared by all workers, in worker order), the server applies them, the worker pulls the new
    values. `plan`: the worker's plan (ps_plan(profile, k) when None)."""
    plan = plan if plan is not None else ps_plan(profile, k)
    pulled, pushed = server_bytes(plan)
    values = _server_values(plan)
    rows = -(-global_batch // workers)
    sim = Simulator()
    link = cluster.inter_host if cluster.hosts > 1 else cluster.intra_host
    ws = [f"worker{w}" for w in range(workers)]
    compute = {}
    for w in ws:
        compute[w] = sim.add(f"{w} fwd+bwd", w, profile.time(rows) * scale + overhead_seconds(profile, scale))
    pushes = {}
    for j in range(k):
        for w in ws:
            push = sim.add(f"{w} push to ps{j}", (f"ps{j}-link",), link.time(pushed[j]), deps=(compute[w],),
                           category=COMMUNICATION)
            upd = sim.add(f"ps{j} apply {w}", f"ps{j}",
                          update_seconds(values[j], profile.optimizer_slots, cluster, profile, scale),
                          deps=(push,), category=UPDATE)
            pushes.setdefault(w, []).append(upd)
    for j in range(k):
        for w in ws:
            pull = sim.add(f"{w} pull from ps{j}", (f"ps{j}-link",), link.time(pulled[j]),
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
                            process_threads=None, push_transport=None, step_overhead_s=0.0, plan=None):
    """ParameterServerStrategy as it runs on this machine (python/mdtrain/_ps, its default mode):
    `workers` worker processes and k server processes sharing the machine's cores, each worker
    step on a whole batch of `global_batch` rows (the strategy has one replica in sync; fit's
    batch is each step's), asynchronous: a step pulls every server's rows, computes forward +
    backward, pushes each server its rows' gradient, and each server applies its values before it
    acks; the worker's next step starts after the acks (ParameterServerWorkerExecutor; the client
    sends to every server, then collects the replies). `plan`: the worker's plan (ps_plan(profile, k)
    when None).

    `transport`: the measured α–β of one pull (ps_probe.py), of all the plan's pull bytes.
    `push_transport`: the measured push (its round trip includes the server's SGD apply of the
    bytes; a push moves them slower than a pull: 0.44 against 0.25 ms at the seed MLP's 407 KB), the
    apply task then costing only the model's update beyond SGD's; None: a push moves the bytes as a
    pull does and the apply is the whole update.
    `step_overhead_s`: what a worker step costs besides (ps_probe.measure_ps_step: the coordinator's
    closure, the worker's step loop), on the worker's core before each pull.
    `process_threads`: the threads each worker or server process splits its ops over (None: every
    core; LocalCluster gives a worker cores // workers and a server one, local_cluster.tasks_threads,
    unless MDTRAIN_CPU_THREADS is set; the planner passes the workers'); `profile` should be timed
    with as many. A worker's compute and a server's apply (the model's measured update pro rata)
    each hold that many cores, starting at the process's own (workers first, then servers), and
    processes time-share them. Each worker's steps are replayed for `rounds` rounds, the workers'
    requests reaching a server round by round in worker order; the step time is the steady state's
    (rounds 2..) seconds per update, i.e. per batch of `global_batch` rows trained. The breakdown is
    a worker step's (compute; its pull + push and waits for a core or a server; its wait for the
    applies), scaled to that per-update time. Not modelled: staleness (an update may use weights
    several updates old)."""
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
    plan = plan if plan is not None else ps_plan(profile, k)
    pulled, pushed = server_bytes(plan)
    values = _server_values(plan)
    rows = global_batch
    cluster = replay_cluster(profile, cluster, scale)
    sim = Simulator()
    compute = _Compute(sim, profile, cluster, scale)
    ws = [f"worker{w}" for w in range(workers)]
    servers = tuple(f"ps{j}" for j in range(k))
    move = transport.time(sum(pulled))
    applies_s = [update_seconds(v, profile.optimizer_slots, cluster, profile, scale) for v in values]
    push_s = transport.time(sum(pushed))
    if push_transport is not None:
        push_s = push_transport.time(sum(pushed))
        # The probe's push already applied SGD: a read of the value and gradient and a write of the
        # value, 3 of the 3 + 2·slots streams of the model's memory-bound update.
        applies_s = [a * (1.0 - 3.0 / (3.0 + 2.0 * profile.optimizer_slots)) for a in applies_s]
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
            applies = [sim.add(f"{s} r{r} apply {w}", (s,) + process_cores(workers + j), applies_s[j], deps=(push,),
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
