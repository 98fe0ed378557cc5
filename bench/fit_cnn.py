"""Seconds per epoch of examples/fashion_mnist_cnn.py's CNN (Conv2D 32 -> pool -> Conv2D 64 -> pool
-> Dense 128 -> Dense 10, Adam) on Fashion-MNIST at global batch 128, on 1 and 2 replicas
(MirroredStrategy on logical CPU devices), with the achieved GFLOP/s over the whole training step
next to the BLAS peak measured in the same run, and, where TensorFlow is installed (here, in
$MDTRAIN_BENCH_PYTHON or /opt/tfenv), the same CNN in Keras on TF on the same machine.

    python bench/fit_cnn.py [--epochs 2] [--skip-tf]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import _common  # noqa: E402

BATCH = 128


def flops_per_sample():
    """GEMM FLOPs of one training step per sample: forward, weight gradient, and the input
    gradient of every layer but the first (which is never computed)."""
    total, h, w, c = 0, 28, 28, 1
    first = True
    for filters in (32, 64):
        h, w = h - 2, w - 2
        fwd = 2 * h * w * filters * 3 * 3 * c
        total += fwd * (2 if first else 3)
        first = False
        h, w, c = h // 2, w // 2, filters
    for fan_in, units in ((h * w * c, 128), (128, 10)):
        total += 2 * fan_in * units * 3
    return total


TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([
    tf.keras.Input(shape=(28, 28, 1)),
    tf.keras.layers.Conv2D(32, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Conv2D(64, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(), tf.keras.layers.Dropout(0.3),
    tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
times = []
class T(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, e, logs=None): self.t = time.perf_counter()
    def on_epoch_end(self, e, logs=None): times.append(time.perf_counter() - self.t)
model.fit(x, y, batch_size=int(sys.argv[2]), epochs=int(sys.argv[3]) + 1, verbose=0, callbacks=[T()])
print(json.dumps({"tf_version": tf.__version__, "seconds": min(times[1:])}))
"""

MDTRAIN_SCRIPT = r"""
import json, sys, time
import numpy as np
import mdtrain as tf
from fashion_mnist_cnn import make_model
replicas, batch, epochs = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
tf.keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = make_model()
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
model.fit(x[:batch * 20], y[:batch * 20], batch_size=batch, epochs=1, verbose=0)  # warm-up
best = None
for _ in range(epochs):
    model.step_time_breakdown(reset=True)
    t = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    dt = time.perf_counter() - t
    if best is None or dt < best[0]:
        best = (dt, model.step_time_breakdown())
print(json.dumps({"seconds": best[0], "breakdown": best[1]}))
"""


def run(python, script, args, cwd=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(os.path.dirname(__file__), "..", "examples"),
                                                         os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per setting (best is reported)")
    parser.add_argument("--skip-tf", action="store_true")
    args = parser.parse_args()

    x, y, _, _ = _common.fashion_mnist_flat()
    x = x.reshape(-1, 28, 28, 1)
    peak1, peak2 = _common.blas_peak_gflops(1), _common.blas_peak_gflops(2)
    concurrent = _common.concurrent_gemm_gflops(2)
    peak = max(peak1, peak2, concurrent)
    print(f"BLAS peak (sgemm 2048^3): {peak1:.0f} GFLOP/s on 1 thread, {peak2:.0f} GFLOP/s on 2 threads, "
          f"{concurrent:.0f} GFLOP/s for two single-threaded GEMMs at once; load average {os.getloadavg()[0]:.2f}")
    flops = flops_per_sample() * len(x)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        import numpy as np

        np.savez(path, x=x, y=y)
        tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
        tf_result = run(tf_python, TF_SCRIPT, [path, str(BATCH), str(args.epochs)]) if tf_python else None
        for replicas in (1, 2):
            r = run(sys.executable, MDTRAIN_SCRIPT, [path, str(replicas), str(BATCH), str(args.epochs)])
            if r is None:
                raise SystemExit("mdtrain run failed")
            b = r["breakdown"]
            row = {"replicas": replicas, "epoch_s": round(r["seconds"], 2), "GFLOP/s": round(flops / r["seconds"] / 1e9, 1),
                   "of_peak": f"{flops / r['seconds'] / 1e9 / peak:.0%}",
                   "step_ms": round(b["step"] * 1e3, 2), "compute_ms": round(b["compute"] * 1e3, 2),
                   "comm_ms": round(b["communication"] * 1e3, 2), "update_ms": round(b["update"] * 1e3, 2)}
            if tf_result:
                row.update({"keras_tf_s": round(tf_result["seconds"], 2),
                            "tf/mdtrain": round(tf_result["seconds"] / r["seconds"], 2)})
            rows.append(row)
    print(f"{flops / len(x) / 1e6:.1f} MFLOP per sample per training step, {flops / 1e12:.2f} TFLOP per epoch; "
          f"peak used for of_peak: {peak:.0f} GFLOP/s")
    _common.print_table(rows, ["replicas", "epoch_s", "GFLOP/s", "of_peak", "step_ms", "compute_ms", "comm_ms",
                               "update_ms", "keras_tf_s", "tf/mdtrain"])
    if tf_result:
        print(f"(Keras on TensorFlow {tf_result['tf_version']} on all cores, best epoch after the first)")
    else:
        print("(TensorFlow not found: pip install tensorflow-cpu, or set MDTRAIN_BENCH_PYTHON)")
    out = _common.write_json("fit_cnn.json", {"machine": _common.machine(), "flops_per_epoch": flops,
                                              "blas_peak_gflops": {"1": peak1, "2": peak2, "2_concurrent": concurrent},
                                              "rows": rows, "tensorflow": tf_result})
    print("wrote", out)


if __name__ == "__main__":
    main()
