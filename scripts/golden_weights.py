"""Golden runs for restructurings: record the weights of fixed training runs, change the code,
then compare bitwise. Every configuration runs in its own process (logical devices are fixed at
start-up); the 2-worker runs go through the MPI launcher.

    python scripts/golden_weights.py record /tmp/golden      # before the change
    python scripts/golden_weights.py compare /tmp/golden     # after: exit 1 on any differing bit

The runs are bitwise reproducible on one machine; BLAS kernels differ between CPUs, so a recording
is only comparable on the machine (CPU model) that made it — never commit one as a test fixture.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

# name -> (model, devices, options); options: clipnorm (turns ZeRO-1 off: the update needs the whole
# gradient), reduce_to_one (ReductionToOneDevice), workers (MPI processes).
CONFIGS = {
    "mlp_1dev": ("mlp", 1, {}),
    "mlp_2dev_zero": ("mlp", 2, {}),
    "mlp_4dev_zero": ("mlp", 4, {}),
    "mlp_2dev_allreduce": ("mlp", 2, {"clipnorm": 1.0}),
    "mlp_4dev_allreduce": ("mlp", 4, {"clipnorm": 1.0}),
    "mlp_2dev_reduce_to_one": ("mlp", 2, {"reduce_to_one": True}),
    "mlp_2workers": ("mlp", 1, {"workers": 2}),
    "cnn_1dev": ("cnn", 1, {}),
    "cnn_2dev_zero": ("cnn", 2, {}),
    "cnn_4dev_zero": ("cnn", 4, {}),
    "cnn_2dev_allreduce": ("cnn", 2, {"clipnorm": 1.0}),
    "cnn_2workers": ("cnn", 1, {"workers": 2}),
}


def train(model_kind, options, out):
    import mdtrain as tf

    tf.keras.utils.set_random_seed(7)
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    n = 3000 if model_kind == "mlp" else 600
    x = x[:n].astype("float32") / 255.0
    y = y[:n]
    if options.get("workers"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif options.get("reduce_to_one"):
        strategy = tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())
    else:
        strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        if model_kind == "mlp":
            x = x.reshape(-1, 784)
            model = tf.keras.Sequential([
                tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                tf.keras.layers.Dense(10)])
        else:
            x = x.reshape(-1, 28, 28, 1)
            model = tf.keras.Sequential([
                tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
                tf.keras.layers.BatchNormalization(),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Conv2D(16, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dropout(0.3),
                tf.keras.layers.Dense(10, activation="softmax")])
        opt_kwargs = {"clipnorm": options["clipnorm"]} if "clipnorm" in options else {}
        model.compile(optimizer=tf.keras.optimizers.Adam(**opt_kwargs),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(
                          from_logits=model_kind == "mlp"), metrics=["accuracy"])
    # 3000 / 64 leaves an uneven last batch (56 rows), 600 / 64 one of 24.
    history = model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if rank == 0:
        np.savez(out, *model.get_weights(), loss=np.array(history.history["loss"]))


def run_config(name, out_dir):
    model_kind, devices, options = CONFIGS[name]
    out = os.path.join(out_dir, name + ".npz")
    args = [__file__, "_train", model_kind, json.dumps(options), out]
    env = dict(os.environ, MDTRAIN_NUM_CPU_DEVICES=str(devices))
    if options.get("workers"):
        cmd = [sys.executable, "-m", "mdtrain.launch", "-n", str(options["workers"]), *args]
    else:
        cmd = [sys.executable, *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return out


def load(path):
    with np.load(path) as f:
        names = sorted((k for k in f.files if k.startswith("arr_")), key=lambda k: int(k.split("_")[1]))
        return [f[k] for k in names] + [f["loss"]]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        train(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["record", "compare"])
    parser.add_argument("dir")
    parser.add_argument("--only", nargs="*", default=None, help="configuration names (default: all)")
    args = parser.parse_args()
    names = args.only or list(CONFIGS)
    os.makedirs(args.dir, exist_ok=True)
    if args.mode == "record":
        for name in names:
            print(name, "->", run_config(name, args.dir), flush=True)
        return
    scratch = os.path.join(args.dir, "after")
    os.makedirs(scratch, exist_ok=True)
    failed = []
    for name in names:
        before = load(os.path.join(args.dir, name + ".npz"))
        after = load(run_config(name, scratch))
        same = len(before) == len(after) and all(
            a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(before, after))
        print(f"{name:26s} {'bitwise equal' if same else 'DIFFERENT'}", flush=True)
        if not same:
            failed.append(name)
    if failed:
        raise SystemExit(f"{len(failed)} configuration(s) differ: {', '.join(failed)}")
    print(f"all {len(names)} configurations bitwise equal")


if __name__ == "__main__":
    main()
