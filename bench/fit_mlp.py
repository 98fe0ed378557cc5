"""Seconds per epoch of the seed MLP (784-128-10, Adam, sparse CE from logits) on Fashion-MNIST,
next to the roofline floor (the epoch's GEMM FLOPs at the BLAS peak measured in this run) and,
where TensorFlow is installed (here or in $MDTRAIN_BENCH_PYTHON or /opt/tfenv), Keras on TF on
the same data, batch sizes and machine. Also the peak RSS of examples/fashion_mnist_mlp.py.

    python bench/fit_mlp.py [--epochs 3] [--skip-tf] [--skip-rss]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# Per sample: forward 2*(784*128 + 128*10); backward dW1, dW2 and the hidden layer's input
# gradient 2*128*10 (the first layer's input gradient is never computed).
FLOPS_PER_SAMPLE = 2 * (784 * 128 + 128 * 10) * 2 + 2 * 128 * 10

TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
out = {}
for batch in json.loads(sys.argv[2]):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(784,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    times = []
    class T(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, e, logs=None): self.t = time.perf_counter()
        def on_epoch_end(self, e, logs=None): times.append(time.perf_counter() - self.t)
    model.fit(x, y, batch_size=batch, epochs=int(sys.argv[3]) + 1, verbose=0, callbacks=[T()])
    out[str(batch)] = min(times[1:])  # the first epoch includes tracing
print(json.dumps({"tf_version": tf.__version__, "seconds": out}))
"""


def time_mdtrain(x, y, batch, epochs):
    import mdtrain as tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=50, verbose=0)  # warm-up
    model.step_time_breakdown(reset=True)
    times = []
    for _ in range(epochs):
        t = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        times.append(time.perf_counter() - t)
    # Where a step's time goes, over the timed epochs (the optimizer update's share in particular).
    return min(times), float(np.median(times)), model.step_time_breakdown()


def time_tf(python, x, y, batches, epochs):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, x=x, y=y)
        proc = subprocess.run([python, "-c", TF_SCRIPT, path, json.dumps(batches), str(epochs)],
                              capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if proc.returncode != 0:
        print("TensorFlow run failed:\n" + proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def example_peak_rss():
    """Peak RSS (MiB) of the example run for one epoch in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "fashion_mnist_mlp.py"), "--epochs", "1"],
                   check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(before, after) / 1024


def main():
    parser = argparse.ArgumentParser(description="seed MLP epoch time vs roofline and Keras/TF")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per setting (best is reported)")
    parser.add_argument("--skip-tf", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    args = parser.parse_args()

    from mdtrain import _core

    x, y, _, _ = _common.fashion_mnist_flat()
    peak1, peak2 = _common.blas_peak_gflops(1), _common.blas_peak_gflops(2)
    concurrent = _common.concurrent_gemm_gflops(2)
    threads = _core.cpu_thread_count()
    print(f"BLAS peak (sgemm 2048^3): {peak1:.0f} GFLOP/s on 1 thread, {peak2:.0f} GFLOP/s on 2 threads, "
          f"{concurrent:.0f} GFLOP/s for two single-threaded GEMMs at once; mdtrain uses {threads} BLAS "
          f"thread(s) for one replica. The floor below uses the best of these.")
    flops = FLOPS_PER_SAMPLE * len(x)
    batches = [32, 256]
    # The example's peak RSS first: RUSAGE_CHILDREN keeps the largest child seen, TF's included.
    rss = None if args.skip_rss else example_peak_rss()
    tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
    tf_result = time_tf(tf_python, x, y, batches, args.epochs) if tf_python else None

    rows = []
    for batch in batches:
        best, median, steps = time_mdtrain(x, y, batch, args.epochs)
        floor = flops / (max(peak1, peak2, concurrent) * 1e9)
        row = {"batch": batch, "mdtrain_s": round(best, 3), "median_s": round(median, 3),
               "floor_s": round(floor, 3), "x_floor": round(best / floor, 2),
               "GFLOP/s": round(flops / best / 1e9, 1), "step_us": round(steps["step"] * 1e6, 1),
               "update_us": round(steps["update"] * 1e6, 1),
               "update_%": round(100 * steps["update"] / steps["step"], 1)}
        if tf_result:
            tf_s = tf_result["seconds"][str(batch)]
            row.update({"keras_tf_s": round(tf_s, 3), "tf/mdtrain": round(tf_s / best, 2)})
        rows.append(row)
    print()
    _common.print_table(rows, ["batch", "mdtrain_s", "median_s", "floor_s", "x_floor", "GFLOP/s", "step_us",
                               "update_us", "update_%", "keras_tf_s", "tf/mdtrain"])
    if tf_result:
        print(f"(Keras on TensorFlow {tf_result['tf_version']}, best epoch after the first)")
    else:
        print("(TensorFlow not found: pip install tensorflow-cpu, or set MDTRAIN_BENCH_PYTHON)")
    if rss:
        budget = 2 * x.nbytes / 2**20 + 150
        print(f"examples/fashion_mnist_mlp.py peak RSS: {rss:.0f} MiB (budget: 2 x float32 train set + 150 = "
              f"{budget:.0f} MiB)")
    path = _common.write_json("fit_mlp.json", {
        "machine": _common.machine(), "blas_peak_gflops": {"1": peak1, "2": peak2, "2_concurrent": concurrent},
        "flops_per_epoch": flops,
        "rows": rows, "tensorflow": tf_result, "example_peak_rss_mib": rss})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
