"""PipelineParallel with the pipe axis across MPI workers (stage s on worker s): samples/s of fit.
Run on 2 workers, one logical device each:

    PYTHONPATH=python python3 -m mdtrain.launch -n 2 --devices-per-worker 1 bench/pipeline_across_workers.py \
        [--width 1024] [--layers 6] [--batch 128] [--steps 16] [--microbatches 4] [--repeats 3]

A deep MLP (--layers x Dense(--width), Adam: 2 slots per weight) cut into 2 equal stages, 1F1B; after a
warm-up epoch, --repeats epochs of --steps steps each are timed one by one, and worker 0 prints the
best and median samples/s, the weight bytes per stage, how many times the stages were gathered
(sent to the other worker: weights and optimizer slots) per epoch, and what summing one metric's
accumulators over the workers costs (done after every step since the per-batch logs are shared).
Run it against two builds to compare them under the same conditions (docs/pipeline.md, "Measured
across workers")."""
import argparse
import os
import statistics
import time
import warnings

import numpy as np

import mdtrain as tf

distribution = tf.keras.distribution


def mlp(width, layers):
    tf.keras.utils.set_random_seed(1)
    out = [tf.keras.Input((width,))]
    for i in range(layers):
        if i == layers // 2:
            out.append(tf.keras.layers.PipelineSplit())
        out.append(tf.keras.layers.Dense(width, activation="relu"))
    out.append(tf.keras.layers.Dense(10))
    return tf.keras.Sequential(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    worker = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch * args.steps, args.width)).astype("float32")
    y = rng.integers(0, 10, len(x)).astype("int32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few micro-batches: the bubble warning
        mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices())
        pp = distribution.PipelineParallel(mesh, num_microbatches=args.microbatches, schedule="1f1b")
    with pp.scope():
        model = mlp(args.width, args.layers)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:args.batch * 2], y[:args.batch * 2], batch_size=args.batch, epochs=1, verbose=0)  # warm-up
    gathers_before = pp.stage_report(model).get("gathers")
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
        rates.append(len(x) / (time.perf_counter() - start))
    # What summing a metric's accumulators over the workers costs each step (accuracy: 2 numbers).
    totals, calls = np.zeros(2), 200
    start = time.perf_counter()
    for _ in range(calls):
        pp._core.sum_across_workers(totals)
    metric_sum_us = (time.perf_counter() - start) / calls * 1e6
    report = pp.stage_report(model)
    gathers = report.get("gathers")
    per_epoch = "every step (not counted)" if gathers is None else f"{(gathers - gathers_before) / args.repeats:g}"
    weights = [sum(w.size * w.itemsize for layer in model.layers[a:b] for w in layer.get_weights())
               for a, b in zip(report["stage_starts"], report["stage_starts"][1:])]
    if worker == 0:
        print(f"{args.layers} x Dense({args.width}), Adam, batch {args.batch}, m = {args.microbatches}, "
              f"{args.steps} steps/epoch, 2 workers x 1 stage; weights/stage MiB "
              f"{' / '.join(f'{w / 2**20:.2f}' for w in weights)}; gathers/epoch {per_epoch}")
        print(f"samples/s best {max(rates):.1f} median {statistics.median(rates):.1f} "
              f"(epochs: {', '.join(f'{r:.1f}' for r in rates)}); "
              f"a step {args.batch / statistics.median(rates) * 1e3:.0f} ms, "
              f"summing one metric over the workers {metric_sum_us:.0f} us", flush=True)


if __name__ == "__main__":
    main()
