"""CentralStorageStrategy vs MirroredStrategy on logical CPU devices: seconds per epoch of the seed
MLP (784-128-10, Adam) and of a heavier MLP (784-2048-2048-10) on Fashion-MNIST, each step split
into compute / communication / update, and the optimizer state each replica holds. The three
strategies give bitwise the same weights (tests/py/test_central_storage.py); this measures what
keeping the variables and the one optimizer state on the parameter device costs or saves:
Mirrored (all-reduce, sharded update), Mirrored with ReductionToOneDevice, and CentralStorage.
Where TensorFlow is installed, TF's CentralStorageStrategy on the same logical CPUs is timed too.

    python bench/central_storage.py [--replicas 2] [--repeats 2] [--skip-tf]
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

from scaling import CASES, MODELS  # noqa: E402  (the same models and batches as bench/scaling.py)

TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
n = int(sys.argv[2])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
d = np.load(sys.argv[1]); x, y = d["x"], d["y"]
strategy = tf.distribute.experimental.CentralStorageStrategy([f"/cpu:{i}" for i in range(n)], "/cpu:0")
out = {}
for hidden, batch, steps in json.loads(sys.argv[3]):
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(784,))] + [tf.keras.layers.Dense(h, activation="relu") for h in hidden] + [tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    kw = {"steps_per_epoch": steps} if steps else {}
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw)
    t = time.perf_counter(); model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw); dt = time.perf_counter() - t
    out[f"{hidden}-{batch}"] = dt
print(json.dumps(out))
"""


def strategies(tf, replicas):
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return {
        "Mirrored": lambda: tf.distribute.MirroredStrategy(devices),
        "Mirrored+ReductionToOne": lambda: tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice()),
        "CentralStorage": lambda: tf.distribute.experimental.CentralStorageStrategy(devices),
    }


def time_case(tf, make_strategy, hidden, batch, steps, x, y, repeats):
    with make_strategy().scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.layers.Dense(hidden[0], activation="relu", input_shape=(784,))] +
                                    [tf.keras.layers.Dense(h, activation="relu") for h in hidden[1:]] +
                                    [tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    kw = {"steps_per_epoch": steps} if steps else {}
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, steps_per_epoch=steps or 20)  # warm-up
    model.step_time_breakdown(reset=True)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, **kw)
        best = min(best, time.perf_counter() - t)
    return best, model.step_time_breakdown(), model._core.optimizer_state_bytes()


def main():
    parser = argparse.ArgumentParser(description="CentralStorageStrategy vs MirroredStrategy")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-tf", action="store_true")
    args = parser.parse_args()
    os.environ["MDTRAIN_NUM_CPU_DEVICES"] = str(args.replicas)
    import mdtrain as tf

    x, y, _, _ = _common.fashion_mnist_flat()
    tf_python = None if args.skip_tf else _common.find_python_with("tensorflow")
    tf_times = None
    if tf_python:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "data.npz")
            import numpy as np
            np.savez(path, x=x, y=y)
            cases = [[MODELS[m], b, s] for m, b, s in CASES]
            proc = subprocess.run([tf_python, "-c", TF_SCRIPT, path, str(args.replicas), json.dumps(cases)],
                                  capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
            if proc.returncode == 0:
                tf_times = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                print("TensorFlow run failed:\n" + proc.stderr[-2000:], file=sys.stderr)

    rows = []
    for model_name, batch, steps in CASES:
        hidden = MODELS[model_name]
        mirrored_s = None
        for name, make in strategies(tf, args.replicas).items():
            seconds, split, state = time_case(tf, make, hidden, batch, steps, x, y, args.repeats)
            mirrored_s = mirrored_s or seconds
            row = {"model": model_name, "batch": batch, "strategy": name,
                   "seconds": round(seconds, 3),
                   "vs_mirrored": round(seconds / mirrored_s, 2),
                   "step_us": round(split["step"] * 1e6), "compute": round(split["compute"] * 1e6),
                   "comm": round(split["communication"] * 1e6), "update": round(split["update"] * 1e6),
                   "opt_state_MiB": "/".join(f"{b / 2**20:.2f}" for b in state)}
            if tf_times and name == "CentralStorage":
                tf_s = tf_times[f"{hidden}-{batch}"]
                row.update({"tf_central_s": round(tf_s, 3), "tf/mdtrain": round(tf_s / seconds, 2)})
            rows.append(row)
    print(f"{args.replicas} logical CPU devices; seconds: an epoch (seed) or 24 steps (heavy); per-step times in "
          "microseconds; opt_state_MiB: optimizer state held by each replica")
    _common.print_table(rows, ["model", "batch", "strategy", "seconds", "vs_mirrored", "step_us", "compute", "comm",
                               "update", "opt_state_MiB", "tf_central_s", "tf/mdtrain"])
    path = _common.write_json("central_storage.json", {"machine": _common.machine(), "replicas": args.replicas,
                                                       "rows": rows, "tensorflow_central_storage_s": tf_times})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
