"""Steps per second of the seed MLP (784-128-10, Adam, sparse CE from logits, batch 32) on
Fashion-MNIST trained four ways: a GradientTape loop run eagerly, the same step under
tf.function, model.fit, and Keras/TF's own custom loop (eager and tf.function) in a
TensorFlow interpreter (this one, $MDTRAIN_BENCH_PYTHON, /opt/tfenv or ~/.cache/mdtrain/tfenv).
One run; ratios are printed and written to bench/results/custom_loop.json.

    python bench/custom_loop.py [--steps 600] [--batch 32] [--skip-tf]
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

# The loop both sides time: the step TF's custom-training tutorial writes.
LOOP = r"""
def make_step(tf, model, optimizer, loss_fn, batch):
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step


def time_loop(step, x, y, batch, steps, warmup):
    n = len(x) // batch
    for i in range(warmup):
        j = i % n
        step(x[j * batch:(j + 1) * batch], y[j * batch:(j + 1) * batch])
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for i in range(steps):
            j = i % n
            loss = step(x[j * batch:(j + 1) * batch], y[j * batch:(j + 1) * batch])
        float(loss)  # wait for the last step
        best = min(best, time.perf_counter() - t)
    return steps / best
"""

TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
""" + LOOP + r"""
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
batch, steps = int(sys.argv[2]), int(sys.argv[3])
out = {}
for mode in ("eager", "tf.function"):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(784,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.Adam()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    step = make_step(tf, model, optimizer, loss_fn, batch)
    if mode == "tf.function":
        step = tf.function(step)
    # Tensors in, as TF users feed them (NumPy slices would retrace tf.function per call).
    xt, yt = tf.constant(x), tf.constant(y)
    out[mode] = time_loop(step, xt, yt, batch, steps, warmup=20)
print(json.dumps({"tf_version": tf.__version__, "steps_per_s": out}))
"""


def mdtrain_rates(x, y, batch, steps):
    import mdtrain as tf

    namespace = {"time": time}
    exec(LOOP, namespace)
    out = {}
    for mode in ("eager", "tf.function"):
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                     tf.keras.layers.Dense(10)])
        optimizer = tf.keras.optimizers.Adam()
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        step = namespace["make_step"](tf, model, optimizer, loss_fn, batch)
        if mode == "tf.function":
            step = tf.function(step)
        out[mode] = namespace["time_loop"](step, x, y, batch, steps, warmup=20)

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs, ys = x[:steps * batch], y[:steps * batch]
    model.fit(xs[:20 * batch], ys[:20 * batch], batch_size=batch, epochs=1, verbose=0, shuffle=False)  # warm-up
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        model.fit(xs, ys, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        best = min(best, time.perf_counter() - t)
    out["fit"] = len(xs) // batch / best
    return out


def tf_rates(python, x, y, batch, steps):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, x=x, y=y)
        proc = subprocess.run([python, "-c", TF_SCRIPT, path, str(batch), str(steps)], capture_output=True,
                              text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if proc.returncode != 0:
        print("TensorFlow run failed:\n" + proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description="custom training loop steps/s: mdtrain vs fit vs Keras/TF")
    parser.add_argument("--steps", type=int, default=600, help="timed steps per run (best of 3 runs)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--skip-tf", action="store_true")
    args = parser.parse_args()

    x, y, _, _ = _common.fashion_mnist_flat()
    ours = mdtrain_rates(x, y, args.batch, args.steps)
    tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
    theirs = tf_rates(tf_python, x, y, args.batch, args.steps) if tf_python else None

    rows = [{"loop": f"mdtrain {k}", "steps/s": round(v, 1), "us/step": round(1e6 / v, 1),
             "x fit": round(v / ours["fit"], 3)} for k, v in ours.items()]
    if theirs:
        for k, v in theirs["steps_per_s"].items():
            rows.append({"loop": f"Keras/TF {k}", "steps/s": round(v, 1), "us/step": round(1e6 / v, 1),
                         "x fit": round(v / ours["fit"], 3)})
    _common.print_table(rows, ["loop", "steps/s", "us/step", "x fit"])
    ratios = {"tf.function / eager (mdtrain)": ours["tf.function"] / ours["eager"],
              "eager / fit (mdtrain)": ours["eager"] / ours["fit"]}
    if theirs:
        t = theirs["steps_per_s"]
        ratios.update({"mdtrain eager / Keras-TF eager": ours["eager"] / t["eager"],
                       "mdtrain tf.function / Keras-TF tf.function": ours["tf.function"] / t["tf.function"],
                       "mdtrain fit / Keras-TF tf.function": ours["fit"] / t["tf.function"]})
        print(f"(Keras on TensorFlow {theirs['tf_version']})")
    else:
        print("(TensorFlow not found: pip install tensorflow-cpu, or set MDTRAIN_BENCH_PYTHON)")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}")
    path = _common.write_json("custom_loop.json", {"machine": _common.machine(), "batch": args.batch,
                                                   "steps": args.steps, "mdtrain_steps_per_s": ours,
                                                   "tensorflow": theirs, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
