"""Tensor parallelism vs data parallelism on logical CPU devices: the wide MLP 784-4096-4096-10 (Adam)
at batch 256 on Fashion-MNIST rows, on 1 device, 2-way data parallel (MirroredStrategy), 2-way tensor
parallel (ModelParallel on a (1, 2) mesh: hidden0 column-parallel, hidden1 row-parallel, Megatron's
f/g pair: one all-reduce of activations forward, one backward) and a 2x2 hybrid (4 logical devices,
batch x model). For each: step time, communication per step (bytes each device moves and seconds
spent in collectives, model axis included), and measured peak memory per device
(tf.config.experimental.get_memory_info: weights, gradients, optimizer state and activations each
device allocated). Ratios are to the 1-device run of the same invocation.

With --model lstm: LSTM(1024) on Fashion-MNIST images read row by row (28 steps of 28 features),
batch 64, on 1 device and split by units over 2 devices (ModelParallel, kernel (None, "model"):
each device computes its 512 units of every gate, h all-gathered each step).

    python bench/model_parallel.py [--steps 20] [--repeats 3] [--model mlp|lstm]
"""
import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

HIDDEN = [4096, 4096]
BATCH = 256
LSTM_UNITS, LSTM_BATCH = 1024, 64
MODEL = "mlp"


def build(tf):
    if MODEL == "lstm":
        return build_lstm(tf)
    tf.keras.utils.set_random_seed(0)
    layers = [tf.keras.layers.Dense(h, activation="relu", name=f"hidden{i}") for i, h in enumerate(HIDDEN)]
    model = tf.keras.Sequential([tf.keras.Input((784,))] + layers + [tf.keras.layers.Dense(10, name="out")])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def megatron(tf, mesh_shape):
    d = tf.keras.distribution
    devices = d.list_devices()[:mesh_shape[0] * mesh_shape[1]]
    mesh = d.DeviceMesh(mesh_shape, ("batch", "model"), devices=devices)
    layout_map = d.LayoutMap(mesh)
    layout_map["hidden0/kernel"] = (None, "model")
    layout_map["hidden0/bias"] = ("model",)
    layout_map["hidden1/kernel"] = ("model", None)
    return d.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def build_lstm(tf):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((28, 28)), tf.keras.layers.LSTM(LSTM_UNITS, name="lstm"),
                                 tf.keras.layers.Dense(10, name="out")])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def units_split(tf):
    d = tf.keras.distribution
    mesh = d.DeviceMesh((1, 2), ("batch", "model"), devices=d.list_devices()[:2])
    layout_map = d.LayoutMap(mesh)
    layout_map["lstm/kernel"] = (None, "model")  # recurrent_kernel and bias follow: 512 units of each gate
    return d.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def cases(tf):
    if MODEL == "lstm":
        return [("1 device", 1, lambda: None), ("LSTM units split over 2 devices", 2, lambda: units_split(tf))]
    return [
        ("1 device", 1, lambda: None),
        ("2-way data parallel", 2, lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
        ("2-way tensor parallel", 2, lambda: megatron(tf, (1, 2))),
        ("2x2 hybrid", 4, lambda: megatron(tf, (2, 2))),
    ]


def params_of(model):
    return sum(int(w.size) for w in model.get_weights())


def setup_case(tf, name, devices, make, x, y, steps):
    """Builds, compiles and warms up one setup, then trains `steps` steps with the memory peaks reset:
    the bytes each device held at most while training (minus what it held before the setup)."""
    info = tf.config.experimental.get_memory_info
    names = [f"CPU:{i}" for i in range(devices)]
    gc.collect()
    baseline = {n: info(n)["current"] for n in names}
    strategy = make()
    if strategy is None:
        model = build(tf)
    else:
        with strategy.scope():
            model = build(tf)
    model.fit(x, y, batch_size=BATCH, epochs=1, steps_per_epoch=3, shuffle=False, verbose=0)  # warm-up
    for n in names:
        tf.config.experimental.reset_memory_stats(n)
    model.fit(x, y, batch_size=BATCH, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    peaks = [info(n)["peak"] - baseline[n] for n in names]
    # Bytes each device moves per step: the gradients it sums over the data axis (all-reduce, or
    # ZeRO-1's reduce-scatter + all-gather: the same volume) plus the model axis's activations.
    if strategy is None:
        comm_bytes = 0
    elif isinstance(strategy, tf.keras.distribution.ModelParallel):
        memory = strategy.memory_per_device(model)
        model_axis = max(strategy.model_axis_bytes_per_step(model))
        batch_axis = memory[0]["weights"] if strategy.device_mesh.shape[0] > 1 else 0
        comm_bytes = model_axis + batch_axis
    else:
        comm_bytes = params_of(model) * 4
    row = {"setup": name, "devices": devices, "comm_MB": comm_bytes / 1e6, "peak_MiB": [p / 2**20 for p in peaks]}
    return model, row


def time_round(model, x, y, steps):
    """Seconds per step of `steps` training steps, and the step profile of those steps."""
    model.step_time_breakdown(reset=True)
    t = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    return (time.perf_counter() - t) / steps, model.step_time_breakdown()


def main():
    parser = argparse.ArgumentParser(description="tensor vs data parallelism, wide MLP")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", choices=["mlp", "lstm"], default="mlp")
    args = parser.parse_args()
    global MODEL, BATCH
    MODEL = args.model
    if MODEL == "lstm":
        BATCH = LSTM_BATCH
    os.environ["MDTRAIN_NUM_CPU_DEVICES"] = "4"
    import mdtrain as tf

    x, y, _, _ = _common.fashion_mnist_flat()
    x, y = x[:BATCH * args.steps], y[:BATCH * args.steps]
    if MODEL == "lstm":
        x = x.reshape(-1, 28, 28)
    built = [setup_case(tf, name, n, make, x, y, args.steps) for name, n, make in cases(tf)]
    # The setups take turns, round after round, and each keeps its best round: a machine whose load
    # changes (other processes on the 2 cores) slows every setup alike instead of whichever ran then.
    best = [None] * len(built)
    for _ in range(args.repeats):
        for i, (model, _row) in enumerate(built):
            seconds, split = time_round(model, x, y, args.steps)
            if best[i] is None or seconds < best[i][0]:
                best[i] = (seconds, split)
    rows = []
    for (model, row), (seconds, split) in zip(built, best):
        row.update({"step_ms": seconds * 1e3, "compute_ms": split["compute"] * 1e3,
                    "comm_ms": split["communication"] * 1e3, "update_ms": split["update"] * 1e3})
        rows.append(row)
    one = rows[0]
    table = []
    for r in rows:
        r["step_vs_1"] = r["step_ms"] / one["step_ms"]
        r["max_peak_vs_1"] = max(r["peak_MiB"]) / max(one["peak_MiB"])
        table.append({"setup": r["setup"], "step_ms": f"{r['step_ms']:.1f}", "vs_1": f"{r['step_vs_1']:.2f}",
                      "compute_ms": f"{r['compute_ms']:.1f}", "comm_ms": f"{r['comm_ms']:.1f}",
                      "update_ms": f"{r['update_ms']:.1f}", "comm_MB/step": f"{r['comm_MB']:.1f}",
                      "peak_MiB/device": "/".join(f"{p:.0f}" for p in r["peak_MiB"]),
                      "peak_vs_1": f"{r['max_peak_vs_1']:.2f}"})
    what = f"LSTM({LSTM_UNITS}) on 28x28 rows" if MODEL == "lstm" else f"wide MLP 784-{'-'.join(map(str, HIDDEN))}-10"
    print(f"{what}, Adam, batch {BATCH}, {args.steps} steps, best of "
          f"{args.repeats} rounds taken in turn; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; comm_MB: bytes each "
          "device moves per step; peak: measured bytes each device held at most (weights, gradients, optimizer "
          "state, activations)")
    _common.print_table(table, ["setup", "step_ms", "vs_1", "compute_ms", "comm_ms", "update_ms", "comm_MB/step",
                                "peak_MiB/device", "peak_vs_1"])
    path = _common.write_json("model_parallel.json" if MODEL == "mlp" else "model_parallel_lstm.json",
                              {"machine": _common.machine(), "batch": BATCH, "model": MODEL,
                               "hidden": [LSTM_UNITS] if MODEL == "lstm" else HIDDEN, "steps": args.steps,
                               "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
