"""The parameter-server transport of this machine, measured with our own classes: a
`ParameterShardServer` (its C++ serving thread, ZeroMQ over tcp://127.0.0.1) and a
`ParameterServerClient` in this process, one float32 variable on one server, SGD on the server.
Both ends share a fresh random frame key, so every frame is tagged and verified (HMAC-SHA256) as
in a real job: the authenticated path is what is measured.

- A pull is one round trip: a small request, a reply carrying the variable's S bytes (the server
  copies its rows out, the client copies them into a new array). Its measured sizes (read
  piecewise-linearly, printed as their α–β fit: MeasuredTransfer) are the transport.
- A push is one round trip the other way (S bytes of gradient in, a small ack out) **and** the
  server applying the gradient before it acks (SGD here: a read and a write of the variable). It
  is fitted separately; push minus pull at a size is roughly that apply, which depends on the
  optimizer, so the planner costs a push as the pull's transfer plus the model's own measured
  update (not this SGD's).

Both ends run in one process on their own threads, so what this measures is the transport when
each end has a core; a worker and servers that share fewer cores than they have threads also wait
for one (the planner's replay deals them over the cores). The median of `repeats` rounds at each
size, as the other probes: a step pays the typical round trip, not the best.

- A step besides its pull, compute and push (measure_ps_step): a one-weight model trained under
  ParameterServerStrategy on a LocalCluster of one worker and one server (processes on loopback,
  in a child process so the caller's strategies stay untouched), steps_per_execution=10, less the
  round trips and compute the worker itself timed: the coordinator's closure (one per 10 steps)
  and the worker's step loop in Python, which draws each batch from its arrays and hands it to the
  core. At two batch sizes, as an α–β in the batch's bytes: the replay adds it to each worker
  step. Without it the seed MLP's one-worker steps were predicted 35 % short."""
import json
import os
import sys
import time

import numpy as np

from mdtrain.plan.alpha_beta import fit_alpha_beta, measured_transfer
from mdtrain.plan.probes import probe_env, run_probe
from mdtrain.plan.profile import BYTES_PER_VALUE

PS_SIZES = (4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20)  # a small layer's bias .. a large layer's kernel


def _sgd():
    from mdtrain import _core
    return _core.make_optimizer(json.dumps({"class_name": "SGD", "config": {"learning_rate": 1e-6}}))


def _round_trips(nbytes, repeats):
    """(median seconds of a pull, of a push) of one float32 variable of `nbytes` on one server."""
    from mdtrain import _core
    values = nbytes // 4
    layout = _core.PsShardLayout.make(1, [("probe", (values,), "float32")], [_core.ps_fixed_shards(1, [values])])
    key = os.urandom(32)
    server = _core.ParameterShardServer(layout, 0, [], _sgd(), auth_key=key)
    try:
        client = _core.ParameterServerClient(layout, [server.endpoint], 0, timeout=30.0, auth_key=key)
        grad = [np.ones(values, np.float32)]
        # Enough round trips per round that a round lasts about a millisecond or more.
        iters = max(2, min(50, (4 << 20) // max(nbytes, 1)))
        _, versions = client.pull()  # connects; first touch of the server's and client's buffers
        client.push(grad, versions)
        pulls, pushes = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(iters):
                _, versions = client.pull()
            pulls.append((time.perf_counter() - t) / iters)
            t = time.perf_counter()
            for _ in range(iters):
                client.push(grad, versions)
            pushes.append((time.perf_counter() - t) / iters)
        return float(np.median(pulls)), float(np.median(pushes))
    finally:
        server.stop()


def measure_ps_transport(repeats=5, sizes=PS_SIZES):
    """(AlphaBeta of a pull, AlphaBeta of a push including the server's SGD apply, a sentence
    saying where they come from), or (None, None, the reason) when they cannot be measured."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"measure_ps_transport: repeats must be an integer >= 1, got {repeats!r}")
    from mdtrain import _core
    if not _core.zmq_available():
        return None, None, "parameter-server transport not measured: mdtrain was built without ZeroMQ"
    try:
        timed = [_round_trips(s, repeats) for s in sizes]
    except (RuntimeError, TimeoutError, OSError) as e:
        return None, None, f"parameter-server transport not measured: the loopback probe failed ({e})"
    pull = measured_transfer(sizes, [t[0] for t in timed])
    push = measured_transfer(sizes, [t[1] for t in timed])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return pull, push, (f"ZeroMQ PS transport measured {stamp}: pull/push of one float32 variable, "
                        f"{sizes[0] >> 10} KB..{sizes[-1] >> 20} MB, one in-process server on tcp://127.0.0.1, "
                        f"median of {repeats} rounds")


# The steps per closure the planner's ParameterServerStrategy plans assume (compile's
# steps_per_execution): TF's advice for this strategy, and what bench/parameter_server.py runs.
PS_STEPS_PER_EXECUTION = 10

# The batches of the step probe: one value, and 64 rows of 1024 features (256 KB, a seed-MLP-sized
# batch): the worker draws each batch from its arrays and hands it to the core in Python, which
# grows with the batch's bytes.
PS_STEP_BATCHES = ((1, 1), (64, 1024))

_STEP_SCRIPT = r"""
import json, sys, time
import numpy as np
import mdtrain as tf
from mdtrain._ps.local_cluster import LocalCluster
spe, steps, repeats = (int(a) for a in sys.argv[1:4])
batches = json.loads(sys.argv[4])


def worker_counters():
    # The worker's own engine counters: its round trips and compute, and its steps.
    s = strategy._worker_stats()[0]
    return np.array([s["pull_seconds"] + s["push_seconds"] + s["compute_seconds"], s["steps"]])


with LocalCluster(1, 1) as cluster:
    cluster.wait_until_serving()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster.cluster),
                                                                    task_type="chief", task_id=0)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, timeout=120.0, worker_timeout=60.0)
    out = []
    for rows, features in batches:
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(features,))])
            model.compile(optimizer="sgd", loss="mse", steps_per_execution=spe)
        x, y = np.zeros((rows * steps, features), np.float32), np.zeros((rows * steps, 1), np.float32)
        model.fit(x, y, batch_size=rows, epochs=1, steps_per_epoch=steps // 5, verbose=0)  # connects, warms up
        best = None
        for _ in range(repeats):
            before = worker_counters()
            t = time.perf_counter()
            model.fit(x, y, batch_size=rows, epochs=1, steps_per_epoch=steps, verbose=0)
            step = (time.perf_counter() - t) / steps
            timed, done = worker_counters() - before
            if best is None or step < best[0]:
                best = (step, timed / max(1, done))
        out.append({"batch_bytes": rows * (features + 1) * 4, "step": best[0], "counted": best[1]})
    strategy.shutdown()
print("PROBE " + json.dumps(out))
"""


def measure_ps_step(steps=300, repeats=3, timeout=300):
    """(AlphaBeta: the seconds a worker step costs besides its pull, compute and push, for a batch
    of S bytes of inputs and labels; a sentence saying where it comes from), or (None, the reason)
    when it cannot be measured. Each point: a one-weight model's step less the round trips and the
    compute the worker itself timed in it, the best of `repeats` fits of `steps` steps (the load
    only adds)."""
    text, failure = run_probe([sys.executable, "-c", _STEP_SCRIPT, str(PS_STEPS_PER_EXECUTION), str(steps),
                               str(repeats), json.dumps(PS_STEP_BATCHES)], probe_env(MDTRAIN_NUM_CPU_DEVICES="1"),
                              timeout)
    if text is None:
        return None, f"parameter-server step not measured: the one-weight LocalCluster run {failure}"
    points = json.loads(text)
    rest = [max(1e-9, p["step"] - p["counted"]) for p in points]
    fit = fit_alpha_beta([p["batch_bytes"] for p in points], rest)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return fit, (f"PS step measured {stamp}: a one-weight model on a LocalCluster of 1 worker and 1 server, "
                 f"steps_per_execution={PS_STEPS_PER_EXECUTION}, less its pull, compute and push as the worker "
                 f"timed them: " + ", ".join(f"{r * 1e3:.3g} ms at {p['batch_bytes'] >> 10} KB batches"
                                             for p, r in zip(points, rest)))


def ps_step_overhead(cluster, profile, rows):
    """Seconds a worker step of `rows` rows costs besides its pull, compute and push on `cluster`
    (measured: Cluster.ps_step_overhead; 0 when not): its batch is the rows' inputs and one label
    each, float32."""
    if cluster.ps_step_overhead is None:
        return 0.0
    return cluster.ps_step_overhead.time(rows * (profile.input_values + 1) * BYTES_PER_VALUE)
