#!/usr/bin/env python3
"""The planner's predictions against measurement on this machine: for each case, the step time
tf.distribute.experimental.plan predicts (from the model's profile and Cluster.measure()) and the
step time the engine measures (model.step_time_breakdown()["step"], the best of --repeats fits),
with the error of each row.

    python bench/plan_accuracy.py [--steps 40] [--repeats 3] [--models seed,heavy]

Cases: OneDevice, Mirrored on 1 and 2 logical CPU devices, CentralStorage on 2, PipelineParallel
(2 stages, m = 2 and 4, GPipe and 1F1B) and ModelParallel (model axis 2). Spinning collectives
and the timings want an idle machine: say how loaded it was when quoting the table.
"""
import argparse
import os
import sys

import numpy as np

MODELS = {"seed": [128], "heavy": [2048, 2048]}


def build(tf, hidden, scope=None):
    def make():
        # Named layers: the ModelParallel case's layout map names their kernels.
        m = tf.keras.Sequential([tf.keras.layers.Dense(hidden[0], activation="relu", input_shape=(784,), name="d0")] +
                                [tf.keras.layers.Dense(h, activation="relu", name=f"d{i + 1}")
                                 for i, h in enumerate(hidden[1:])] +
                                [tf.keras.layers.Dense(10, name=f"d{len(hidden)}")])
        m.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m
    tf.keras.utils.set_random_seed(0)
    if scope is None:
        return make()
    with scope:
        return make()


def measured_step(model, x, y, batch, repeats):
    model.fit(x[:batch * 5], y[:batch * 5], batch_size=batch, epochs=1, verbose=0)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        model._core.reset_profile()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        best = min(best, model.step_time_breakdown()["step"])
    return best


def find(plans, name, n, **settings):
    for p in plans:
        if p.applicable and p.strategy_name == name and p.num_devices == n and \
                all(p.settings.get(k) == v for k, v in settings.items()):
            return p
    raise LookupError(f"no plan {name} n={n} {settings}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--models", default="seed,heavy")
    args = parser.parse_args()
    os.environ.setdefault("MDTRAIN_NUM_CPU_DEVICES", "2")
    import mdtrain as tf
    from mdtrain.plan import Cluster

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    cluster = Cluster.measure(devices=2)
    print(cluster)
    print(f"load average: {os.getloadavg()}")
    b = args.batch
    rng = np.random.default_rng(0)
    x = rng.random((b * args.steps, 784), dtype=np.float32)
    y = rng.integers(0, 10, b * args.steps)
    rows = []
    for model_name in args.models.split(","):
        hidden = MODELS[model_name]
        plans = tf.distribute.experimental.plan(build(tf, hidden), b, cluster)
        dist = tf.keras.distribution
        cases = [
            ("OneDeviceStrategy", lambda: tf.distribute.OneDeviceStrategy("/cpu:0").scope(),
             find(plans, "OneDeviceStrategy", 1)),
            ("MirroredStrategy x1", lambda: tf.distribute.MirroredStrategy(["/cpu:0"]).scope(),
             find(plans, "OneDeviceStrategy", 1)),
            ("MirroredStrategy x2", lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope(),
             find(plans, "MirroredStrategy", 2)),
            ("CentralStorageStrategy x2", lambda: tf.distribute.experimental.CentralStorageStrategy(
                ["/cpu:0", "/cpu:1"]).scope(), find(plans, "CentralStorageStrategy", 2)),
            ("ModelParallel (1, 2)", lambda: _model_parallel(dist, find(plans, "ModelParallel", 2, mesh=(1, 2))),
             find(plans, "ModelParallel", 2, mesh=(1, 2))),
        ]
        for m in (2, 4):
            for schedule in ("gpipe", "1f1b"):
                cases.append((f"PipelineParallel p=2 m={m} {schedule}",
                              lambda m=m, s=schedule: dist.PipelineParallel(
                                  dist.DeviceMesh((2,), ("pipe",)), m, schedule=s,
                                  stages="balance_time").scope(),
                              find(plans, "PipelineParallel", 2, microbatches=m, schedule=schedule)))
        for label, scope, predicted in cases:
            try:
                model = build(tf, hidden, scope())
                measured = measured_step(model, x, y, b, args.repeats)
            except Exception as e:  # a case this build cannot run: say so, keep the table
                print(f"{model_name:6} {label:34} not measured: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            err = (predicted.step_time_s - measured) / measured
            rows.append((model_name, label, predicted.step_time_s, measured, err))
            print(f"{model_name:6} {label:34} predicted {predicted.step_time_s * 1e3:8.3f} ms  "
                  f"measured {measured * 1e3:8.3f} ms  error {err:+.0%}", flush=True)
    print("\n| model | case | predicted ms | measured ms | error |\n|---|---|---:|---:|---:|")
    for model_name, label, p, m, e in rows:
        print(f"| {model_name} | {label} | {p * 1e3:.3f} | {m * 1e3:.3f} | {e:+.0%} |")


def _model_parallel(dist, planned):
    """The layout the planner costed (its settings["layout"]: layer:form, ...)."""
    mesh = dist.DeviceMesh((1, 2), ("batch", "model"))
    layout = dist.LayoutMap(mesh)
    for item in planned.settings["layout"].split(", "):
        layer, form = item.split(":")
        layout[f"{layer}/kernel"] = ("model", None) if form == "row" else (None, "model")
        if form != "row":
            layout[f"{layer}/bias"] = ("model",)
    return dist.ModelParallel(layout_map=layout).scope()


if __name__ == "__main__":
    main()
