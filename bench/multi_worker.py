"""Multi-worker vs one process: epoch time of the seed MLP (784-128-10, Adam) on Fashion-MNIST
with MultiWorkerMirroredStrategy, 2 worker processes x 1 device each (mpirun on loopback, MPI
between them), against MirroredStrategy with 2 logical devices in one process (threads), at the
same global batch, with each step split into compute / communication / update / idle.

    python bench/multi_worker.py [--batch 32 256] [--epochs 3]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

JOB = r"""
import json, os, sys, time
import numpy as np
import mdtrain as tf
mode, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tf.keras.utils.set_random_seed(0)
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy()
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
(x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
x = x.reshape(-1, 784).astype("float32") / 255.0
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[:batch * 50], y[:batch * 50], batch_size=batch, epochs=1, verbose=0)  # warm-up
best = None
for _ in range(epochs):
    model.step_time_breakdown(reset=True)
    t = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    dt = time.perf_counter() - t
    if best is None or dt < best[0]:
        best = (dt, model.step_time_breakdown())
if strategy.should_checkpoint:
    print("RESULT " + json.dumps({"epoch_s": best[0], **best[1]}))
"""


def run(mode, batch, epochs):
    env = dict(os.environ)
    if mode == "mirrored":
        cmd = [sys.executable, "-c", JOB, mode, str(batch), str(epochs)]
    else:
        script = os.path.join(_common.RESULTS, "_multi_worker_job.py")
        os.makedirs(_common.RESULTS, exist_ok=True)
        with open(script, "w") as f:
            f.write(JOB)
        cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", script, mode, str(batch), str(epochs)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stdout}\n{out.stderr}")
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per case (the best is kept)")
    args = parser.parse_args()
    rows = []
    for batch in args.batch:
        results = {mode: run(mode, batch, args.epochs) for mode in ("mirrored", "multi_worker")}
        for mode, r in results.items():
            rows.append({"batch": batch, "strategy": "2 workers x 1 device (MPI)" if mode == "multi_worker"
                         else "1 process x 2 devices (threads)", "epoch_s": round(r["epoch_s"], 3),
                         "step_us": round(r["step"] * 1e6), "compute": round(r["compute"] * 1e6),
                         "communication": round(r["communication"] * 1e6), "update": round(r["update"] * 1e6),
                         "idle": round(r["idle"] * 1e6),
                         "vs_mirrored": round(r["epoch_s"] / results["mirrored"]["epoch_s"], 2)})
    print("load average:", os.getloadavg())
    _common.print_table(rows, ["batch", "strategy", "epoch_s", "vs_mirrored", "step_us", "compute",
                               "communication", "update", "idle"])
    print("(per-step times in microseconds, worker 0; vs_mirrored = epoch time / MirroredStrategy's)")
    path = _common.write_json("multi_worker.json", {"machine": _common.machine(), "rows": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
