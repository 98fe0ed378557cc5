"""Data-parallel scaling on this machine's cores: samples/s with 1 and 2 replicas
(MirroredStrategy on logical CPU devices) for the seed MLP at global batch 32 and 256 and a
compute-heavy MLP (784-2048-2048-10), with each replica's step split into compute,
all-reduce (communication and waiting for the peer) and update, and the remainder (thread
hand-off) reported as idle. Where TensorFlow is installed (here, $MDTRAIN_BENCH_PYTHON or
/opt/tfenv), TF's MirroredStrategy on the same logical CPUs is timed in the same run.

    python bench/scaling.py [--replicas 1 2] [--repeats 3] [--skip-tf]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

MODELS = {"seed": [128], "heavy": [2048, 2048]}
CASES = [("seed", 32, None), ("seed", 256, None), ("heavy", 256, 24)]  # (model, global batch, steps cap)

TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
n = int(sys.argv[2])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)]) if n > 1 else tf.distribute.get_strategy()
out = {}
for hidden, batch, steps in json.loads(sys.argv[3]):
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(784,))] + [tf.keras.layers.Dense(h, activation="relu") for h in hidden] + [tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    kw = {"steps_per_epoch": steps} if steps else {}
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw)
    t = time.perf_counter(); model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw); dt = time.perf_counter() - t
    out[f"{hidden}-{batch}"] = (steps * batch if steps else len(x)) / dt
print(json.dumps(out))
"""


def run_mdtrain(replicas, hidden, batch, steps, x, y, repeats, blas_threads=None):
    import mdtrain as tf
    from mdtrain import _core

    default_threads = _core.cpu_thread_count()
    if blas_threads:
        _core.set_cpu_threads(blas_threads)
    try:
        return _run_mdtrain(tf, replicas, hidden, batch, steps, x, y, repeats)
    finally:
        _core.set_cpu_threads(default_threads)


def _run_mdtrain(tf, replicas, hidden, batch, steps, x, y, repeats):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    strategy = tf.distribute.MirroredStrategy() if replicas > 1 else tf.distribute.OneDeviceStrategy("/cpu:0")
    tf.keras.utils.set_random_seed(0)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(hidden[0], activation="relu", input_shape=(784,))]
                                    + [tf.keras.layers.Dense(h, activation="relu") for h in hidden[1:]]
                                    + [tf.keras.layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.Adam(),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    kw = {"steps_per_epoch": steps} if steps else {}
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **{"steps_per_epoch": steps or 50})  # warm-up
    best = None
    for _ in range(repeats):
        model._core.reset_profile()
        t = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw)
        dt = time.perf_counter() - t
        if best is None or dt < best[0]:
            best = (dt, model._core.profile())
    dt, profile = best
    samples = steps * batch if steps else len(x)
    p0 = profile[0]
    per_step = lambda v: v / p0["steps"] * 1e6  # noqa: E731
    compute = per_step(max(p["compute"] for p in profile))
    allreduce = per_step(p0["allreduce"])
    update = per_step(p0["update"])
    wall = dt / p0["steps"] * 1e6
    return {"samples_per_s": samples / dt, "epoch_s": dt, "us_per_step": wall, "compute_us": compute,
            "allreduce_us": allreduce, "update_us": update, "idle_us": max(0.0, wall - compute - allreduce - update)}


def main():
    parser = argparse.ArgumentParser(description="1 vs N replica scaling with a per-step breakdown")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2],
                        help="replica counts; 1 replica is also run with single-threaded BLAS")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-tf", action="store_true")
    args = parser.parse_args()
    x, y, _, _ = _common.fashion_mnist_flat()
    one = _common.concurrent_gemm_gflops(1)
    two = _common.concurrent_gemm_gflops(2)
    capacity = two / one
    print(f"sgemm 256x2048x2048, single-threaded: {one:.0f} GFLOP/s alone, {two:.0f} GFLOP/s in total for two "
          f"at once -> this machine's parallel compute capacity is {capacity:.2f}x (the ceiling for any "
          f"2-replica speedup of compute-bound work); load average {os.getloadavg()[0]:.2f}")
    rows = []
    results = {}
    # One replica runs twice: on every core through its intra-op threads (the default), and on one
    # core (the baseline data parallelism is meant to multiply). Speedups are against the latter.
    configs = [(n, None) for n in args.replicas]
    if 1 in args.replicas:
        configs.insert(configs.index((1, None)) + 1, (1, 1))
    for name, batch, steps in CASES:
        for n, threads in configs:
            r = run_mdtrain(n, MODELS[name], batch, steps, x, y, args.repeats, threads)
            results[(name, batch, n, threads)] = r
            label = f"{n}" + (" (1 thread)" if threads == 1 else " (all cores)" if n == 1 else "")
            rows.append({"model": name, "batch": batch, "replicas": label, "samples/s": f"{r['samples_per_s']:.0f}",
                         "epoch_s": f"{r['epoch_s']:.3f}" if not steps else f"({steps} steps)",
                         "rate": r["samples_per_s"], "key": (name, batch),
                         "step_us": f"{r['us_per_step']:.0f}", "compute": f"{r['compute_us']:.0f}",
                         "allreduce": f"{r['allreduce_us']:.0f}", "update": f"{r['update_us']:.0f}",
                         "idle": f"{r['idle_us']:.0f}"})
    for row in rows:  # against 1 replica on 1 thread (or the first configuration run)
        base = results.get((*row["key"], 1, 1)) or results[(*row["key"], *configs[0])]
        row["speedup"] = f"{row.pop('rate') / base['samples_per_s']:.2f}"
        row.pop("key")
    tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
    tf_results = {}
    if tf_python:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "d.npz")
            np.savez(path, x=x, y=y)
            cases = [(MODELS[m], b, s) for m, b, s in CASES]
            for n in args.replicas:
                proc = subprocess.run([tf_python, "-c", TF_SCRIPT, path, str(n), json.dumps(cases)],
                                      capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
                if proc.returncode == 0:
                    tf_results[n] = json.loads(proc.stdout.strip().splitlines()[-1])
                else:
                    print("TF run failed:", proc.stderr[-1500:], file=sys.stderr)
        for row in rows:
            if "1 thread" in row["replicas"]:
                continue
            tf_rate = tf_results.get(int(row["replicas"].split()[0]), {}).get(f"{MODELS[row['model']]}-{row['batch']}")
            if tf_rate:
                row["tf_samples/s"] = f"{tf_rate:.0f}"
                row["mdtrain/tf"] = f"{float(row['samples/s']) / tf_rate:.2f}"
    print()
    _common.print_table(rows, ["model", "batch", "replicas", "samples/s", "epoch_s", "speedup", "step_us", "compute",
                               "allreduce", "update", "idle", "tf_samples/s", "mdtrain/tf"])
    print("(speedup: against 1 replica on 1 thread; per-step times in microseconds, replica 0; compute is "
          "the slowest replica's)")
    path = _common.write_json("scaling.json", {"machine": _common.machine(), "rows": rows,
                                               "gemm_gflops_one_thread": one, "gemm_gflops_two_concurrent": two,
                                               "tensorflow": {str(k): v for k, v in tf_results.items()}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
