"""Pipeline parallelism: measured bubble vs (p-1)/(m+p-1) and stashed activations per stage.

    PYTHONPATH=python python3 bench/pipeline.py [--width 2048] [--layers 8] [--batch 128] [--steps 3]

A deep MLP (--layers x Dense(--width)) cut into 2 stages of equal size on 2 logical CPU devices, GPipe
at m = 2, 4, 8, 16 micro-batches: per stage the busy (forward + backward) and idle seconds per step,
the measured idle fraction against the formula, and the peak bytes of micro-batch inputs stashed
(GPipe vs 1F1B). Then samples/s of one device vs 2 stages vs 2 x 2 (batch x pipe). One run: ratios
are from the same run. On a machine with fewer free cores than devices the stages do not overlap and
the measured bubble is meaningless (it reports the cores it saw)."""
import argparse
import os
import time
import warnings

import numpy as np

import mdtrain as tf

distribution = tf.keras.distribution


def mlp(width, layers, split_at=None):
    tf.keras.utils.set_random_seed(1)
    out = [tf.keras.Input((width,))]
    for i in range(layers):
        if split_at is not None and i == split_at:
            out.append(tf.keras.layers.PipelineSplit())
        out.append(tf.keras.layers.Dense(width, activation="relu"))
    out.append(tf.keras.layers.Dense(10))
    return tf.keras.Sequential(out)


def train(strategy, x, y, args, split=True):
    with strategy.scope():
        model = mlp(args.width, args.layers, args.layers // 2 if split else None)
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:args.batch], y[:args.batch], batch_size=args.batch, epochs=1, verbose=0)  # warm-up
    model.step_time_breakdown(reset=True)
    start = time.perf_counter()
    model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
    return model, len(x) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch * args.steps, args.width)).astype("float32")
    y = rng.integers(0, 10, len(x)).astype("int32")
    print(f"cores seen: {os.cpu_count()}; {args.layers} x Dense({args.width}), batch {args.batch}, 2 stages")
    pipe = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    print(f"{'m':>3} {'formula':>8} {'measured':>9} {'busy0 s':>8} {'idle0 s':>8} {'busy1 s':>8} {'idle1 s':>8}"
          f" {'stash GPipe':>12} {'stash 1F1B':>11}")
    for m in (2, 4, 8, 16):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gpipe = distribution.PipelineParallel(pipe, num_microbatches=m, schedule="gpipe")
            one_f = distribution.PipelineParallel(pipe, num_microbatches=m, schedule="1f1b")
        model, _ = train(gpipe, x, y, args)
        stages = model.step_time_breakdown()["stages"]
        measured = sum(s["idle"] for s in stages) / sum(s["idle"] + s["busy"] for s in stages)
        stash_g = [d["peak_stash_bytes"] for d in gpipe.stage_report(model)["devices"]]
        model_1, _ = train(one_f, x, y, args)
        stash_1 = [d["peak_stash_bytes"] for d in one_f.stage_report(model_1)["devices"]]
        print(f"{m:>3} {(2 - 1) / (m + 2 - 1):>8.3f} {measured:>9.3f} {stages[0]['busy']:>8.3f} {stages[0]['idle']:>8.3f}"
              f" {stages[1]['busy']:>8.3f} {stages[1]['idle']:>8.3f} {max(stash_g):>12} {max(stash_1):>11}")
    _, one = train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, args, split=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, two = train(distribution.PipelineParallel(pipe, num_microbatches=8), x, y, args)
        grid = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
        _, four = train(distribution.PipelineParallel(grid, num_microbatches=4, batch_dim_name="batch"), x, y, args)
    print(f"samples/s: 1 device {one:.1f}, 2 stages (1f1b, m=8) {two:.1f} ({two / one:.2f}x), "
          f"2x2 batch x pipe (m=4) {four:.1f} ({four / one:.2f}x)")


if __name__ == "__main__":
    main()
