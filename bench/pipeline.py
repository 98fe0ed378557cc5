"""Pipeline parallelism: measured bubble vs (p-1)/(m+p-1), stashed activations per stage, and
samples/s of one device vs 2 stages vs 2 x 2 (batch x pipe) for a deep MLP and the seed CNN.

    PYTHONPATH=python python3 bench/pipeline.py [--width 2048] [--layers 8] [--batch 128] [--steps 6]
                                                [--bubble-only] [--recompute]

Part 1: a deep MLP (--layers x Dense(--width) after a Dense(--width) projection from 64 input
features, so that the two stages take the same time in forward and in backward; see the comment
in main) cut into 2 stages on 2 logical CPU devices,
GPipe at m = 2, 4, 8, 16 micro-batches: per stage the busy (forward + backward), forward and idle
seconds per step, the measured idle fraction (idle / (busy + idle) over the stages, within the pipeline's span:
step start to the end of the last stage's schedule) against the formula, GPipe's wall time per step,
the peak bytes of micro-batch inputs stashed and of activations held (inputs plus the layers' state
kept for backward), GPipe vs 1F1B. --recompute: the stages keep only the inputs and recompute each
micro-batch's forward before its backward (PipelineParallel(recompute=True)).
Part 2: for the MLP and examples/fashion_mnist_cnn.py's CNN (random 28 x 28 inputs), samples/s of one
device, 2 stages (1F1B) and 2 x 2 (batch x pipe), their ratio to one device, the bubble, and per stage
the weight bytes, the peak stash and the peak activation bytes. One run: ratios are from the same
run. On a machine with fewer free cores than devices the stages do not overlap
(it reports the cores it saw). Writes bench/results/pipeline.json."""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import mdtrain as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

distribution = tf.keras.distribution


def mlp(width, layers, split_at=None, input_width=None, projection=False):
    """layers x Dense(width) and a Dense(10) head; with `projection`, a Dense(width) from input_width
    features first (not counted in `layers`; split_at counts it)."""
    tf.keras.utils.set_random_seed(1)
    out = [tf.keras.Input((input_width or width,))]
    if projection:
        out.append(tf.keras.layers.Dense(width, activation="relu"))
    for i in range(int(projection), layers + int(projection)):
        if split_at is not None and i == split_at:
            out.append(tf.keras.layers.PipelineSplit())
        out.append(tf.keras.layers.Dense(width, activation="relu"))
    out.append(tf.keras.layers.Dense(10))
    return tf.keras.Sequential(out)


def cnn(split_at=None):
    tf.keras.utils.set_random_seed(1)
    layers = tf.keras.layers
    out = [tf.keras.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(),
           layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(), layers.Flatten(), layers.Dropout(0.3),
           layers.Dense(128, activation="relu"), layers.Dense(10)]
    if split_at is not None:
        out.insert(split_at, layers.PipelineSplit())
    return tf.keras.Sequential(out)


def train(strategy, x, y, batch, make, optimizer="sgd"):
    with strategy.scope():
        model = make()
        model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0)  # warm-up
    model.step_time_breakdown(reset=True)
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    return model, len(x) / (time.perf_counter() - start)


def bubble(model):
    stages = model.step_time_breakdown()["stages"]
    return sum(s["idle"] for s in stages) / sum(s["idle"] + s["busy"] for s in stages), stages


def stage_memory(pp, model):
    """Per stage (pipeline 0): weight bytes, peak stashed micro-batch input bytes, and peak activation bytes
    (the inputs plus the layers' state kept for backward)."""
    report = pp.stage_report(model)
    starts = report["stage_starts"]
    weights = [sum(w.size * w.itemsize for layer in model.layers[a:b] for w in layer.get_weights())
               for a, b in zip(starts, starts[1:])]
    stash = [d["peak_stash_bytes"] for d in report["devices"]][:len(weights)]
    return weights, stash, [d["peak_activation_bytes"] for d in report["devices"]][:len(weights)]


def quiet(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bubble-only", action="store_true", help="part 1 only (the bubble table)")
    parser.add_argument("--input-width", type=int, default=None,
                        help="part 1's input features, projected to width by a first Dense (default 64: equal "
                             "stages, see below)")
    parser.add_argument("--recompute", action="store_true",
                        help="PipelineParallel(recompute=True): recompute each micro-batch's forward before its "
                             "backward instead of keeping its activations")
    args = parser.parse_args()
    bubble_rows, throughput_rows = [], []
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch * args.steps, args.width)).astype("float32")
    y = rng.integers(0, 10, len(x)).astype("int32")
    split = args.layers // 2
    # Equal stages for the formula, which assumes every stage takes the same time for a micro-batch's
    # forward and the same for its backward (equal sums are not enough: with 2 stages whose forwards
    # differ by d, the later stage waits d for every micro-batch's activation in the forward phase,
    # and the earlier stage the same in the backward phase when the backwards differ the other way,
    # an idle time that grows with m where the formula's stays one micro-batch). A first stage's
    # first layer computes no gradient for its input (its backward costs as much as its forward,
    # the other layers' twice), so no input width makes a stage that starts with it equal to one of
    # square layers in both passes. So the stages are k = layers / 2 Dense(width) each, and the first
    # is preceded by a Dense(width) projection from few (--input-width, default 64) features:
    # per row stage 0 costs in*w + k*w^2 forward and in*w + 2*k*w^2 backward, stage 1 k*w^2 + 10*w
    # and 2*k*w^2 + 20*w (the head): equal within in / (k*w) (0.8 % at the defaults), with or
    # without --recompute (which adds one more forward to both backwards).
    input_width = args.input_width or 64
    split_at = 1 + args.layers // 2  # after the projection and the first k layers
    xb = rng.standard_normal((args.batch * args.steps, input_width)).astype("float32")
    print(f"cores seen: {os.cpu_count()}; {args.layers} x Dense({args.width}) after a Dense({args.width}) from "
          f"{input_width} input features, "
          f"batch {args.batch}, 2 stages, recompute={args.recompute}")
    pipe = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    grid = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    print(f"{'m':>3} {'formula':>8} {'measured':>9} {'busy0 s':>8} {'fwd0 s':>7} {'idle0 s':>8} {'busy1 s':>8}"
          f" {'fwd1 s':>7} {'idle1 s':>8}"
          f" {'step ms':>8} {'stash GPipe':>12} {'stash 1F1B':>11} {'act GPipe':>10} {'act 1F1B':>10}")
    for m in (2, 4, 8, 16):
        gpipe = quiet(lambda: distribution.PipelineParallel(pipe, num_microbatches=m, schedule="gpipe",
                                                            recompute=args.recompute))
        one_f = quiet(lambda: distribution.PipelineParallel(pipe, num_microbatches=m, schedule="1f1b",
                                                            recompute=args.recompute))
        model, rate = train(gpipe, xb, y, args.batch, lambda: mlp(args.width, args.layers, split_at, input_width, projection=True))
        step_ms = 1e3 * args.batch / rate
        measured, stages = bubble(model)
        _, stash_g, act_g = stage_memory(gpipe, model)
        model_1, _ = train(one_f, xb, y, args.batch, lambda: mlp(args.width, args.layers, split_at, input_width, projection=True))
        _, stash_1, act_1 = stage_memory(one_f, model_1)
        print(f"{m:>3} {(2 - 1) / (m + 2 - 1):>8.3f} {measured:>9.3f} {stages[0]['busy']:>8.3f}"
              f" {stages[0]['forward']:>7.3f} {stages[0]['idle']:>8.3f} {stages[1]['busy']:>8.3f}"
              f" {stages[1]['forward']:>7.3f} {stages[1]['idle']:>8.3f} {step_ms:>8.1f} {max(stash_g):>12}"
              f" {max(stash_1):>11} {max(act_g):>10} {max(act_1):>10}")
        bubble_rows.append({"m": m, "formula": (2 - 1) / (m + 2 - 1), "measured": measured, "step_ms_gpipe": step_ms,
                            "stages": [{"busy": st["busy"], "forward": st["forward"], "idle": st["idle"]}
                                       for st in stages],
                            "peak_stash_gpipe": max(stash_g), "peak_stash_1f1b": max(stash_1),
                            "peak_activation_gpipe": max(act_g), "peak_activation_1f1b": max(act_1)})
    if args.bubble_only:
        _save(args, bubble_rows, throughput_rows)
        return

    xc = rng.standard_normal((args.batch * args.steps, 28, 28, 1)).astype("float32")
    models = {"mlp": (x, lambda s: mlp(args.width, args.layers, s), split, 8, "sgd"),
              "cnn": (xc, cnn, 5, 4, "adam")}  # the CNN cut after its convolutions (Flatten starts stage 1)
    print(f"\n{'model':<5} {'setup':<22} {'samples/s':>10} {'vs 1':>6} {'bubble':>7} {'weights/stage MiB':>18}"
          f" {'peak stash/stage MiB':>21} {'peak act/stage MiB':>19}")
    for name, (xs, make, cut, m, optimizer) in models.items():
        _, one = train(tf.distribute.OneDeviceStrategy("/cpu:0"), xs, y, args.batch, lambda: make(None), optimizer)
        print(f"{name:<5} {'1 device':<22} {one:>10.1f} {1.0:>6.2f}")
        throughput_rows.append({"model": name, "setup": "1 device", "samples_per_s": one})
        for label, mesh, batch_dim in ((f"2 stages (1f1b, m={m})", pipe, None),
                                       (f"2x2 batch x pipe (m={m})", grid, "batch")):
            pp = quiet(lambda: distribution.PipelineParallel(mesh, num_microbatches=m, batch_dim_name=batch_dim,
                                                             recompute=args.recompute))
            model, rate = train(pp, xs, y, args.batch, lambda: make(cut), optimizer)
            frac, _ = bubble(model)
            weights, stash, act = stage_memory(pp, model)
            print(f"{name:<5} {label:<22} {rate:>10.1f} {rate / one:>6.2f} {frac:>7.3f} "
                  f"{' / '.join(f'{w / 2**20:.2f}' for w in weights):>18} "
                  f"{' / '.join(f'{b / 2**20:.3f}' for b in stash):>21} "
                  f"{' / '.join(f'{b / 2**20:.3f}' for b in act):>19}")
            throughput_rows.append({"model": name, "setup": label, "samples_per_s": rate, "vs_one_device": rate / one,
                                    "bubble": frac, "weight_bytes_per_stage": weights, "peak_stash_bytes": stash,
                                    "peak_activation_bytes": act})
    _save(args, bubble_rows, throughput_rows)


def _save(args, bubble_rows, throughput_rows):
    path = _common.write_json("pipeline.json", {"machine": _common.machine(), "args": vars(args),
                                                "bubble": bubble_rows, "throughput": throughput_rows})
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
