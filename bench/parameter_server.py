"""ParameterServerStrategy on this machine: steps/s of the seed MLP (784-128-10, Adam, batch 128)
and of a model around a large embedding table (1M x 64 = 256 MB, Adam), for 1, 2, 3 workers and
1, 2 parameter servers (tasks as processes on loopback, LocalCluster), against
MultiWorkerMirroredStrategy on the same number of worker processes (mpirun, MPI all-reduce) at
the same batch per worker; each worker's pull and push time and bytes per step; and
CentralStorageStrategy vs MirroredStrategy step time on 2 logical devices.

PS workers run asynchronously (compile's steps_per_execution=10 for the MLP: ten steps per
closure, one round trip to the coordinator); each step is one worker's batch, so examples/s = steps/s x batch;
a MultiWorkerMirrored step is every worker's batch at once (examples/s = steps/s x batch x workers).

The cost of authentication: the seed MLP's PS job (2 workers, 1 server) trained authenticated
(a job secret: every control frame and every pull and push signed and checked, HMAC-SHA256) and
with MDTRAIN_INSECURE_PS=1 (no secret: the Python control plane and the C++ data endpoint
without a key), alternately, --auth-rounds times each; ms per step of the best run of each and
their ratio. --auth-only runs just that.

    python bench/parameter_server.py [--workers 1 2 3] [--servers 1 2] [--skip-embedding]
                                     [--auth-only] [--auth-rounds 3]
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

import numpy as np  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))

# name -> (build code, batch, timed steps per run, warm-up steps)
MODELS = {
    "seed MLP": ("[tf.keras.layers.Dense(128, activation='relu', input_shape=(784,), name='hidden'),"
                 " tf.keras.layers.Dense(10, activation='softmax', name='out')]", 128, 300, 30),
    "embedding 1M x 64": ("[tf.keras.layers.Embedding(1_000_000, 64, input_length=8, name='table'),"
                          " tf.keras.layers.Flatten(name='flat'), tf.keras.layers.Dense(10, activation='softmax',"
                          " name='out')]", 128, 6, 2),
}


def data(model_name, rows=8192):
    rng = np.random.default_rng(0)
    if model_name == "seed MLP":
        x, y, _, _ = _common.fashion_mnist_flat()
        return x[:rows * 4], y[:rows * 4]
    return rng.integers(0, 1_000_000, size=(rows, 8)).astype(np.int32), rng.integers(0, 10, size=rows)


@contextlib.contextmanager
def job_environment(authenticated):
    """This process (the chief) and the LocalCluster tasks it starts share a new job secret, or run
    with MDTRAIN_INSECURE_PS=1 and none; the caller's environment is restored afterwards."""
    from mdtrain._ps import job_secret

    saved = {k: os.environ.get(k) for k in (job_secret.ENV, job_secret.INSECURE_ENV)}
    path = job_secret.make_secret_file() if authenticated else None
    try:
        os.environ.pop(job_secret.ENV, None)
        os.environ.pop(job_secret.INSECURE_ENV, None)
        if authenticated:
            os.environ[job_secret.ENV] = path
        else:
            os.environ[job_secret.INSECURE_ENV] = "1"
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if path is not None:
            job_secret.remove_secret_file(path)


def run_auth_cost(tf, rounds, model_name="seed MLP", servers=1, workers=2):
    """ms per step of the same PS job authenticated and not, best of `rounds` alternating runs each."""
    runs = {"authenticated": [], "insecure": []}
    for _ in range(rounds):
        for mode in runs:
            with job_environment(mode == "authenticated"):
                runs[mode].append(run_ps(tf, model_name, servers, workers))
            print(f"auth cost: {mode}: {1e3 / runs[mode][-1]['steps_per_s']:.3f} ms/step", flush=True)
    best = {mode: max(r, key=lambda x: x["steps_per_s"]) for mode, r in runs.items()}
    out = {"model": model_name, "servers": servers, "workers": workers, "rounds": rounds}
    for mode, r in best.items():
        out[mode] = {"ms_per_step": 1e3 / r["steps_per_s"], "pull_ms": r["pull_ms"], "push_ms": r["push_ms"],
                     "all_ms_per_step": [1e3 / x["steps_per_s"] for x in runs[mode]]}
    out["ratio"] = out["authenticated"]["ms_per_step"] / out["insecure"]["ms_per_step"]
    out["endpoint"] = run_endpoint_cost()
    return out


def run_endpoint_cost(rounds=5, iters=50):
    """The C++ data endpoint alone, in this process: a pull and a push of the seed MLP's 101,770
    floats (one server, SGD) with a frame key and without, best of `rounds` rounds of `iters`."""
    from mdtrain import _core

    values = 784 * 128 + 128 + 128 * 10 + 10
    layout = _core.PsShardLayout.make(1, [("v", (values,), "float32")], [1])
    optimizer = json.dumps({"class_name": "SGD", "config": {"learning_rate": 1e-6}})
    best = {"authenticated": [1e9, 1e9], "insecure": [1e9, 1e9]}
    for _ in range(rounds):
        for mode in best:
            key = os.urandom(32) if mode == "authenticated" else None
            server = _core.ParameterShardServer(layout, 0, [], _core.make_optimizer(optimizer), auth_key=key)
            try:
                client = _core.ParameterServerClient(layout, [server.endpoint], 0, timeout=30.0, auth_key=key)
                grad = [np.ones(values, np.float32)]
                _, versions = client.pull()
                client.push(grad, versions)
                t = time.perf_counter()
                for _ in range(iters):
                    _, versions = client.pull()
                t1 = time.perf_counter()
                for _ in range(iters):
                    client.push(grad, versions)
                t2 = time.perf_counter()
                best[mode] = [min(best[mode][0], (t1 - t) / iters * 1e3), min(best[mode][1], (t2 - t1) / iters * 1e3)]
            finally:
                server.stop()
    return {mode: {"pull_ms": v[0], "push_ms": v[1]} for mode, v in best.items()} | {"bytes": values * 4}


def print_auth_cost(auth):
    a, i = auth["authenticated"], auth["insecure"]
    print(f"authentication cost ({auth['model']}, {auth['workers']} workers, {auth['servers']} server, best of "
          f"{auth['rounds']}): authenticated {a['ms_per_step']:.3f} ms/step (pull {a['pull_ms']:.3f}, push "
          f"{a['push_ms']:.3f}), MDTRAIN_INSECURE_PS=1 {i['ms_per_step']:.3f} ms/step (pull {i['pull_ms']:.3f}, "
          f"push {i['push_ms']:.3f}): {auth['ratio']:.3f}x, "
          f"{a['ms_per_step'] - i['ms_per_step']:+.3f} ms per step")
    e = auth.get("endpoint")
    if e:
        print(f"the C++ data endpoint alone, in one process, {e['bytes']} bytes: pull "
              f"{e['authenticated']['pull_ms']:.3f} vs {e['insecure']['pull_ms']:.3f} ms without a key, push "
              f"{e['authenticated']['push_ms']:.3f} vs "
              f"{e['insecure']['push_ms']:.3f} ms")


def run_ps(tf, model_name, servers, workers, batch=None, steps=None):
    """batch / steps: override the table's (bench/plan_ps.py times the planner's batch). Runs under
    a new job secret unless the caller set one (or MDTRAIN_INSECURE_PS)."""
    from mdtrain._ps import job_secret

    if job_secret.ENV in os.environ or job_secret.INSECURE_ENV in os.environ:
        return _run_ps(tf, model_name, servers, workers, batch, steps)
    with job_environment(True):
        return _run_ps(tf, model_name, servers, workers, batch, steps)


def _run_ps(tf, model_name, servers, workers, batch, steps):
    from mdtrain._ps.local_cluster import LocalCluster

    build, table_batch, table_steps, warmup = MODELS[model_name]
    batch = table_batch if batch is None else batch
    steps = table_steps if steps is None else steps
    x, y = data(model_name)
    with LocalCluster(servers, workers) as cluster:
        cluster.wait_until_serving()
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster.cluster),
                                                                        task_type="chief", task_id=0)
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(servers),
            timeout=120.0, worker_timeout=60.0)
        with strategy.scope():
            tf.keras.utils.set_random_seed(0)
            model = tf.keras.Sequential(eval(build))  # noqa: S307 - our own table above
            # 10 steps per closure for the MLP (TF's advice for this strategy: fewer round trips)
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                          steps_per_execution=10 if steps >= 100 else 1)
        model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=warmup * workers, verbose=0)
        before = strategy._worker_stats()
        t = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=steps, verbose=0)
        seconds = time.perf_counter() - t
        after = strategy._worker_stats()
        n = sum(after[w]["steps"] - before[w]["steps"] for w in after)
        delta = {k: sum(after[w][k] - before[w][k] for w in after) / n
                 for k in ("pull_seconds", "push_seconds", "compute_seconds", "bytes_pulled", "bytes_pushed")}
        strategy.shutdown()
    return {"steps_per_s": steps / seconds, "examples_per_s": steps * batch / seconds,
            "pull_ms": delta["pull_seconds"] * 1e3, "push_ms": delta["push_seconds"] * 1e3,
            "compute_ms": delta["compute_seconds"] * 1e3,
            "MB_per_step": (delta["bytes_pulled"] + delta["bytes_pushed"]) / 1e6}


MWMS_JOB = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import parameter_server as bench
import mdtrain as tf
name, workers = sys.argv[2], int(sys.argv[3])
build, batch, steps, warmup = bench.MODELS[name]
x, y = bench.data(name)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(eval(build))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=batch * workers, epochs=1, steps_per_epoch=warmup, verbose=0)
t = time.perf_counter()
model.fit(x, y, batch_size=batch * workers, epochs=1, steps_per_epoch=steps, verbose=0)
dt = time.perf_counter() - t
if strategy.should_checkpoint:
    print("RESULT " + json.dumps({"steps_per_s": steps / dt, "examples_per_s": steps * batch * workers / dt}))
"""

CENTRAL_JOB = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["MDTRAIN_NUM_CPU_DEVICES"] = "2"
import mdtrain as tf
import _common
from central_storage import strategies, time_case
x, y, _, _ = _common.fashion_mnist_flat()
out = {}
for name, make in strategies(tf, 2).items():
    seconds, split, _ = time_case(tf, make, [128], 32, None, x, y, 2)
    out[name] = {"epoch_s": seconds, "step_us": split["step"] * 1e6}
print("RESULT " + json.dumps(out))
"""


def run_job(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def run_mwms(model_name, workers):
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "mwms_job.py")
        with open(script, "w") as f:
            f.write(MWMS_JOB)
        return run_job([sys.executable, "-m", "mdtrain.launch", "-n", str(workers), script, BENCH, model_name,
                        str(workers)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-embedding", action="store_true")
    parser.add_argument("--auth-only", action="store_true", help="only the cost of authentication")
    parser.add_argument("--auth-rounds", type=int, default=3)
    args = parser.parse_args()
    import mdtrain as tf

    auth = run_auth_cost(tf, args.auth_rounds)
    if args.auth_only:
        print_auth_cost(auth)
        path = _common.write_json("parameter_server_auth.json", {"machine": _common.machine(), "authentication": auth})
        print("wrote", path)
        return
    with job_environment(True):
        rows, central = measure(tf, args)
    print("load average:", os.getloadavg())
    _common.print_table(rows, ["model", "workers", "strategy", "steps_per_s", "examples_per_s", "vs_mwms", "pull_ms",
                               "push_ms", "compute_ms", "MB_per_step"])
    print("(PS: each worker's pull/push/compute per step, means; MB_per_step: pulled + pushed by one step;"
          " vs_mwms: examples/s over MultiWorkerMirrored's with as many workers)")
    mirrored = central["Mirrored"]["step_us"]
    for name, r in central.items():
        print(f"seed MLP, batch 32, 2 logical devices: {name:24s} {r['step_us']:7.0f} us/step "
              f"({r['step_us'] / mirrored:.2f}x Mirrored)")
    print_auth_cost(auth)
    path = _common.write_json("parameter_server.json", {"machine": _common.machine(), "rows": rows,
                                                        "central_storage_vs_mirrored": central,
                                                        "authentication": auth})
    print("wrote", path)


def measure(tf, args):
    rows = []
    names = [n for n in MODELS if not (args.skip_embedding and n.startswith("embedding"))]
    for name in names:
        for workers in args.workers:
            mwms = run_mwms(name, workers)
            rows.append({"model": name, "workers": workers, "strategy": "MultiWorkerMirrored",
                         "steps_per_s": round(mwms["steps_per_s"], 1),
                         "examples_per_s": round(mwms["examples_per_s"]), "vs_mwms": 1.0})
            for servers in args.servers:
                r = run_ps(tf, name, servers, workers)
                rows.append({"model": name, "workers": workers, "strategy": f"PS, {servers} server(s)",
                             "steps_per_s": round(r["steps_per_s"], 1), "examples_per_s": round(r["examples_per_s"]),
                             "vs_mwms": round(r["examples_per_s"] / mwms["examples_per_s"], 2),
                             "pull_ms": round(r["pull_ms"], 2), "push_ms": round(r["push_ms"], 2),
                             "compute_ms": round(r["compute_ms"], 2), "MB_per_step": round(r["MB_per_step"], 1)})
                print(rows[-1], flush=True)
    central = run_job([sys.executable, "-c", CENTRAL_JOB, BENCH])
    return rows, central


if __name__ == "__main__":
    main()
