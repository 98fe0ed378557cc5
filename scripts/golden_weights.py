"""Golden runs for restructurings: record the weights of fixed training runs, change the code,
then compare bitwise. Every configuration runs in its own process (logical devices are fixed at
start-up); the 2-worker runs go through the MPI launcher.

    python scripts/golden_weights.py record /tmp/golden      # before the change
    python scripts/golden_weights.py compare /tmp/golden     # after: exit 1 on any differing bit
    python scripts/golden_weights.py compare /tmp/golden --only mlp_pipe_gpipe wave_2dev

The runs are bitwise reproducible on one machine; BLAS kernels differ between CPUs, so a recording
is only comparable on the machine (CPU model) that made it — never commit one as a test fixture.

Configurations (Fashion-MNIST slices, seed 7, Adam, 2 epochs of batch 64 with an uneven last batch):

- mlp_*: Dense(128, relu) -> Dense(10) on 3000 rows; cnn_*: Conv2D/BatchNormalization/MaxPooling/
  Dropout CNN on 600 rows. Under MirroredStrategy on 1, 2 and 4 logical devices with ZeRO-1 (the
  default) and without it (clipnorm makes the update need the whole gradient: *_allreduce), with
  ReductionToOneDevice, and MultiWorkerMirroredStrategy over 2 MPI workers (*_2workers).
- *_central_storage: CentralStorageStrategy, 2 compute devices, variables on /cpu:0.
- mlp_mp_2x2: keras.distribution.ModelParallel on a (2, 2) ("batch", "model") mesh; the hidden
  Dense column-parallel, the output Dense row-parallel (Megatron's pairing; ZeRO-1 over "batch").
- mlp_pipe_gpipe, mlp_pipe_1f1b, cnn_pipe_1f1b: PipelineParallel on a (2,) "pipe" mesh, cut at a
  PipelineSplit, 5 micro-batches (uneven: 64, 56 or 24 rows in 5; the CNN's BatchNormalization
  uses the deferred statistics). GPipe and 1F1B give bitwise the same weights by design; both are
  kept since each schedule is its own op list.
- wave_2dev: WavefrontPipeline on 2 devices, time_chunk 8 (28 steps: chunks 8, 8, 8, 4) over
  LSTM(32) -> GRU(32) (return_sequences) with an LSTM(16) -> Dense(10) head, image rows as steps.
- resnet_2dev: a Functional CNN with a residual Add block (keras.Model) on MirroredStrategy, 2
  devices.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# name -> (model, devices, options); options: clipnorm (turns ZeRO-1 off: the update needs the whole
# gradient), reduce_to_one (ReductionToOneDevice), workers (MPI processes), strategy (central_storage,
# model_parallel, pipeline, wavefront; default Mirrored), schedule (a pipeline's).
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
    "mlp_central_storage": ("mlp", 2, {"strategy": "central_storage"}),
    "cnn_central_storage": ("cnn", 2, {"strategy": "central_storage"}),
    "mlp_mp_2x2": ("mlp", 4, {"strategy": "model_parallel"}),
    "mlp_pipe_gpipe": ("mlp", 2, {"strategy": "pipeline", "schedule": "gpipe"}),
    "mlp_pipe_1f1b": ("mlp", 2, {"strategy": "pipeline", "schedule": "1f1b"}),
    "cnn_pipe_1f1b": ("cnn", 2, {"strategy": "pipeline", "schedule": "1f1b"}),
    "wave_2dev": ("rnn", 2, {"strategy": "wavefront"}),
    "resnet_2dev": ("resnet", 2, {}),
}


def make_strategy(tf, options):
    """The strategy (or keras.distribution Distribution) whose scope() the model is built under."""
    kind = options.get("strategy")
    distribution = tf.keras.distribution
    if options.get("workers"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if options.get("reduce_to_one"):
        return tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())
    if kind == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy()
    if kind == "model_parallel":
        mesh = distribution.DeviceMesh((2, 2), ("batch", "model"))
        layout_map = distribution.LayoutMap(mesh)
        layout_map["hidden/kernel"] = (None, "model")   # column-parallel
        layout_map["hidden/bias"] = ("model",)
        layout_map["logits/kernel"] = ("model", None)   # row-parallel
        return distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    if kind == "pipeline":
        mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
        return distribution.PipelineParallel(mesh, num_microbatches=5, schedule=options["schedule"])
    if kind == "wavefront":
        mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
        return distribution.WavefrontPipeline(mesh, time_chunk=8)
    assert kind is None, kind
    return tf.distribute.MirroredStrategy()


def make_model(tf, model_kind, options):
    L = tf.keras.layers
    # A PipelineSplit is an identity layer: it only marks where the pipeline cuts.
    split = [L.PipelineSplit()] if options.get("strategy") == "pipeline" else []
    if model_kind == "mlp":
        # Names only where a layout map needs them: the configurations recorded before these
        # were added keep their layers' default names.
        names = ({"hidden": {"name": "hidden"}, "logits": {"name": "logits"}}
                 if options.get("strategy") == "model_parallel" else {"hidden": {}, "logits": {}})
        return tf.keras.Sequential([
            L.Dense(128, activation="relu", input_shape=(784,), **names["hidden"])] + split + [
            L.Dense(10, **names["logits"])])
    if model_kind == "cnn":
        return tf.keras.Sequential([
            L.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
            L.BatchNormalization(),
            L.MaxPooling2D(),
            L.Conv2D(16, 3, activation="relu"),
            L.MaxPooling2D()] + split + [
            L.Flatten(),
            L.Dropout(0.3),
            L.Dense(10, activation="softmax")])
    if model_kind == "rnn":
        return tf.keras.Sequential([
            tf.keras.Input((28, 28)),
            L.LSTM(32, return_sequences=True),
            L.GRU(32, return_sequences=True),
            L.LSTM(16),
            L.Dense(10)])
    assert model_kind == "resnet", model_kind
    inputs = tf.keras.Input(shape=(28, 28, 1))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = L.MaxPooling2D()(x)
    h = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    h = L.Conv2D(8, 3, padding="same")(h)
    x = L.Activation("relu")(L.Add()([x, h]))
    x = L.MaxPooling2D()(x)
    outputs = L.Dense(10, activation="softmax")(L.Flatten()(x))
    return tf.keras.Model(inputs, outputs, name="resnet_like")


def train(model_kind, options, out):
    import mdtrain as tf

    tf.keras.utils.set_random_seed(7)
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    n = 3000 if model_kind == "mlp" else 600
    x = x[:n].astype("float32") / 255.0
    y = y[:n]
    x = x.reshape({"mlp": (-1, 784), "rnn": (-1, 28, 28)}.get(model_kind, (-1, 28, 28, 1)))
    strategy = make_strategy(tf, options)
    with strategy.scope():
        model = make_model(tf, model_kind, options)
        opt_kwargs = {"clipnorm": options["clipnorm"]} if "clipnorm" in options else {}
        model.compile(optimizer=tf.keras.optimizers.Adam(**opt_kwargs),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(
                          from_logits=model_kind in ("mlp", "rnn")), metrics=["accuracy"])
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
    parser.add_argument("--only", nargs="*", default=None, choices=list(CONFIGS),
                        help="configuration names (default: all)")
    args = parser.parse_args()
    names = args.only or list(CONFIGS)
    os.makedirs(args.dir, exist_ok=True)
    if args.mode == "record":
        for name in names:
            start = time.monotonic()
            out = run_config(name, args.dir)
            print(f"{name:26s} -> {out} ({time.monotonic() - start:.1f} s)", flush=True)
        return
    scratch = os.path.join(args.dir, "after")
    os.makedirs(scratch, exist_ok=True)
    failed = []
    for name in names:
        before = load(os.path.join(args.dir, name + ".npz"))
        start = time.monotonic()
        after = load(run_config(name, scratch))
        seconds = time.monotonic() - start
        same = len(before) == len(after) and all(
            a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(before, after))
        print(f"{name:26s} {'bitwise equal' if same else 'DIFFERENT':14s} ({seconds:.1f} s)", flush=True)
        if not same:
            failed.append(name)
    if failed:
        raise SystemExit(f"{len(failed)} configuration(s) differ: {', '.join(failed)}")
    print(f"all {len(names)} configurations bitwise equal")


if __name__ == "__main__":
    main()
