"""Training samples/s of an LSTM model, mdtrain vs Keras on TensorFlow (same model, data, batch and
machine; TF found as bench/_common.find_python_with says): Fashion-MNIST row by row (28 steps of 28
features), LSTM(units) -> Dense 10, Adam, sparse CE from logits. One run each; the best epoch after
a warm-up epoch (TF's first epoch traces).

    python bench/rnn.py [--units 128] [--rows 4096] [--batch-size 128] [--epochs 2] [--skip-tf]

--deep-stack runs only the deep-stack rows (docs/wavefront.md): 4 x LSTM(512, return_sequences) ->
Dense over 64 steps, MSE, Adam; samples/s of model.train_on_batch on one device, under
keras.distribution.WavefrontPipeline's scope on 2 and 4 logical CPU devices, and under
MirroredStrategy (data parallel) on 2, all in one run (ratios to the one-device row).

    python bench/rnn.py --deep-stack [--deep-batch 32] [--deep-steps 3] [--time-chunk 8]
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

TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
units, batch, epochs = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([tf.keras.Input(x.shape[1:]), tf.keras.layers.LSTM(units), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
times = []
class T(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, e, logs=None): self.t = time.perf_counter()
    def on_epoch_end(self, e, logs=None): times.append(time.perf_counter() - self.t)
model.fit(x, y, batch_size=batch, epochs=epochs + 1, verbose=0, callbacks=[T()])
print(json.dumps({"tf_version": tf.__version__, "seconds": min(times[1:])}))
"""


def time_mdtrain(x, y, units, batch, epochs):
    import mdtrain as tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(x.shape[1:]), tf.keras.layers.LSTM(units), tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = []
    for _ in range(epochs + 1):
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        times.append(time.perf_counter() - start)
    return min(times[1:])


DEEP_UNITS, DEEP_LAYERS, DEEP_STEPS, DEEP_FEATURES = 512, 4, 64, 32


def _deep_model(tf):
    tf.keras.utils.set_random_seed(0)
    layers = [tf.keras.Input((DEEP_STEPS, DEEP_FEATURES))]
    layers += [tf.keras.layers.LSTM(DEEP_UNITS, return_sequences=True) for _ in range(DEEP_LAYERS)]
    model = tf.keras.Sequential(layers + [tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def deep_stack_rows(batch, steps, time_chunk):
    """samples/s of the deep stack: the best of `steps` timed optimizer steps after one warm-up."""
    import mdtrain as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, DEEP_STEPS, DEEP_FEATURES)).astype("float32")
    y = rng.standard_normal((batch, DEEP_STEPS, 1)).astype("float32")

    def best(step):
        # Wall time, and the process's CPU time (all threads): on a machine shared with other jobs the
        # wall figure mostly says how much of the cores a setup got; samples per CPU-second says how
        # much work it does per core-second, which contention does not change as much.
        step()
        times, cpu = [], []
        for _ in range(steps):
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        return batch / min(times), batch / min(cpu)

    rows = []
    model = _deep_model(tf)
    rows.append({"setup": "1 device", "samples_s": best(lambda: model.train_on_batch(x, y))})
    dist = tf.keras.distribution
    for n in (2, 4):
        mesh = dist.DeviceMesh((n,), ("pipe",), devices=dist.list_devices()[:n])
        with dist.WavefrontPipeline(mesh, time_chunk=time_chunk).scope():
            model = _deep_model(tf)
        rows.append({"setup": f"wavefront {n} devices (time_chunk {time_chunk})",
                     "samples_s": best(lambda: model.train_on_batch(x, y))})
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = _deep_model(tf)
    rows.append({"setup": "MirroredStrategy 2 devices", "samples_s": best(lambda: model.train_on_batch(x, y))})
    for r in rows:
        r["samples_s"], r["samples_per_cpu_s"] = r["samples_s"]
    for r in rows:
        r["over_1_device"] = round(r["samples_s"] / rows[0]["samples_s"], 2)
        r["cpu_efficiency_vs_1"] = round(r["samples_per_cpu_s"] / rows[0]["samples_per_cpu_s"], 2)
    for r in rows:
        r["samples_s"], r["samples_per_cpu_s"] = round(r["samples_s"], 2), round(r["samples_per_cpu_s"], 2)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--skip-tf", action="store_true")
    parser.add_argument("--deep-stack", action="store_true", help="run only the deep-stack rows")
    parser.add_argument("--deep-batch", type=int, default=32)
    parser.add_argument("--deep-steps", type=int, default=3)
    parser.add_argument("--time-chunk", type=int, default=8)
    args = parser.parse_args()
    if args.deep_stack:
        rows = deep_stack_rows(args.deep_batch, args.deep_steps, args.time_chunk)
        _common.print_table(rows, ["setup", "samples_s", "over_1_device", "samples_per_cpu_s", "cpu_efficiency_vs_1"])
        path = _common.write_json("rnn_deep_stack.json", {"machine": _common.machine(), "args": vars(args),
                                                          "model": f"{DEEP_LAYERS} x LSTM({DEEP_UNITS}) "
                                                                   f"{DEEP_STEPS} steps -> Dense(1)",
                                                          "results": rows})
        print(f"wrote {path}")
        return
    x, y, _, _ = _common.fashion_mnist_flat()
    x, y = x[:args.rows].reshape(-1, 28, 28), y[:args.rows]
    ours = time_mdtrain(x, y, args.units, args.batch_size, args.epochs)
    row = {"model": f"LSTM({args.units}) 28x28", "batch": args.batch_size,
           "mdtrain_samples_s": round(len(x) / ours, 1)}
    tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
    tf_version = None
    if tf_python:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "data.npz")
            np.savez(path, x=x, y=y)
            proc = subprocess.run([tf_python, "-c", TF_SCRIPT, path, str(args.units), str(args.batch_size),
                                   str(args.epochs)], capture_output=True, text=True,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
        if proc.returncode == 0:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            tf_version = result["tf_version"]
            row["tf_samples_s"] = round(len(x) / result["seconds"], 1)
            row["mdtrain_over_tf"] = round(row["mdtrain_samples_s"] / row["tf_samples_s"], 2)
        else:
            print("TensorFlow run failed:", proc.stderr[-2000:], file=sys.stderr)
    _common.print_table([row], ["model", "batch", "mdtrain_samples_s", "tf_samples_s", "mdtrain_over_tf"])
    path = _common.write_json("rnn.json", {"machine": _common.machine(), "tf_version": tf_version,
                                           "args": vars(args), "results": [row]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
