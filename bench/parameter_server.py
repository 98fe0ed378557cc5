"""ParameterServerStrategy on this machine: steps/s of the seed MLP (784-128-10, Adam, batch 128)
and of a model around a large embedding table (1M x 64 = 256 MB, Adam), for 1, 2, 3 workers and
1, 2 parameter servers (tasks as processes on loopback, LocalCluster), against
MultiWorkerMirroredStrategy on the same number of worker processes (mpirun, MPI all-reduce) at
the same batch per worker; each worker's pull and push time and bytes per step; and
CentralStorageStrategy vs MirroredStrategy step time on 2 logical devices.

PS workers run asynchronously (compile's steps_per_execution=10 for the MLP: ten steps per
closure, one round trip to the coordinator); each step is one worker's batch, so examples/s = steps/s x batch;
a MultiWorkerMirrored step is every worker's batch at once (examples/s = steps/s x batch x workers).

    python bench/parameter_server.py [--workers 1 2 3] [--servers 1 2] [--skip-embedding]
"""
import argparse
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


def run_ps(tf, model_name, servers, workers, batch=None, steps=None):
    """batch / steps: override the table's (bench/plan_ps.py times the planner's batch)."""
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
    args = parser.parse_args()
    import mdtrain as tf

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
    print("load average:", os.getloadavg())
    _common.print_table(rows, ["model", "workers", "strategy", "steps_per_s", "examples_per_s", "vs_mwms", "pull_ms",
                               "push_ms", "compute_ms", "MB_per_step"])
    print("(PS: each worker's pull/push/compute per step, means; MB_per_step: pulled + pushed by one step;"
          " vs_mwms: examples/s over MultiWorkerMirrored's with as many workers)")
    mirrored = central["Mirrored"]["step_us"]
    for name, r in central.items():
        print(f"seed MLP, batch 32, 2 logical devices: {name:24s} {r['step_us']:7.0f} us/step "
              f"({r['step_us'] / mirrored:.2f}x Mirrored)")
    path = _common.write_json("parameter_server.json", {"machine": _common.machine(), "rows": rows,
                                                        "central_storage_vs_mirrored": central})
    print("wrote", path)


if __name__ == "__main__":
    main()
