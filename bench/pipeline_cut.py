"""Where PipelineParallel cuts a model into stages, and what the cut costs: every 2-stage cut of the
heavy MLP (784-2048-2048-10) and of examples/fashion_mnist_cnn.py's CNN timed as a fit step, next to
the cuts stages="balance_time" and stages="balance_params" choose (the core's balance_stages: the
contiguous cut whose costliest stage costs least) and the cut the earlier greedy rule made (the
next stage starts once the running total reaches its share).

    PYTHONPATH=python python3 bench/pipeline_cut.py [--batch 64] [--microbatches 8] [--repeats 3] [--models heavy,cnn]

Each cut: GPipe on 2 logical CPU devices, the best of --repeats fits of enough epochs of 30 steps
to last 0.3 s, after an untimed warm-up fit; ratios are from the same run. Writes
bench/results/pipeline_cut.json."""
import argparse
import os
import sys
import time
import warnings

import numpy as np

os.environ.setdefault("MDTRAIN_NUM_CPU_DEVICES", "2")
import mdtrain as tf  # noqa: E402
from mdtrain import _core  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from plan_accuracy import build, data, measured_step  # noqa: E402

distribution = tf.keras.distribution


def greedy_cut(costs, stages):
    """The rule PipelineParallel used before balance_stages (removed 2026-11-25), kept here only to
    time the cut it made: stage k starts at the first layer after the running total reached k/p."""
    total, running, starts = float(sum(costs)), 0.0, []
    for i, c in enumerate(costs):
        if len(starts) == stages - 1:
            break
        k = len(starts) + 1
        if i > (starts[-1] if starts else 0) and (running >= total * k / stages or len(costs) - i <= stages - k):
            starts.append(i)
        running += c
    return starts


def param_counts(model):
    return [sum(int(np.prod(w.shape)) for w in layer.get_weights()) for layer in model.layers]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="heavy,cnn")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="PipelineParallel: .* micro-batches")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    rows, started = [], time.time()
    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} cores", flush=True)
    for name in args.models.split(","):
        x, y = data(name, args.batch, 30)
        plain = build(tf, name)
        n = len(plain.layers)
        times = _core.measure_layer_times(plain._core, _core.BALANCE_TIME_ROWS, 5)
        params = param_counts(plain)

        def timed(stages):
            pp = distribution.PipelineParallel(mesh, args.microbatches, schedule="gpipe", stages=stages)
            model = build(tf, name, pp.scope())
            step = measured_step(model, x, y, args.batch, args.repeats)["step"]
            return pp.stage_report(model)["stage_starts"][1], step

        by_cut = {}
        for cut in range(1, n):
            _, by_cut[cut] = timed([cut])
        best_cut = min(by_cut, key=by_cut.get)
        chosen = {"balance_time": timed("balance_time"), "balance_params": timed("balance_params")}
        earlier = {"balance_time": greedy_cut(times, 2)[0], "balance_params": greedy_cut(params, 2)[0]}
        for cut, step in sorted(by_cut.items()):
            rows.append({"model": name, "cut": f"{cut} ({plain.layers[cut].name})", "ms": round(step * 1e3, 3),
                         "vs_best": f"{step / by_cut[best_cut]:.2f}x",
                         "chosen_by": ", ".join(k for k, (c, _) in chosen.items() if c == cut) or "",
                         "earlier_rule": ", ".join(k for k, c in earlier.items() if c == cut) or ""})
        for k, (cut, step) in chosen.items():
            # Both from the explicit cuts' timings (the same kind of fit, the same minutes).
            new, old = by_cut[cut], by_cut[earlier[k]]
            print(f"{name}: {k} cuts before layer {cut} ({plain.layers[cut].name}): {new * 1e3:.3f} ms per step "
                  f"({step * 1e3:.3f} ms as {k!r} itself); the earlier greedy rule cut before layer {earlier[k]}: "
                  f"{old * 1e3:.3f} ms, {old / new:.2f}x; the fastest cut ({best_cut}): "
                  f"{by_cut[best_cut] * 1e3:.3f} ms", flush=True)
    print()
    _common.print_table(rows, ["model", "cut", "ms", "vs_best", "chosen_by", "earlier_rule"])
    path = _common.write_json("pipeline_cut.json", {"machine": _common.machine(), "batch": args.batch,
                                                    "microbatches": args.microbatches, "rows": rows,
                                                    "seconds": time.time() - started})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
