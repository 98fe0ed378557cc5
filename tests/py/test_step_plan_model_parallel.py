"""ModelParallel's StepPlan (cpp/mdtrain/strategy/tensor_parallel_step_plan.h): after one real step
of the plan's global batch, each device's collective counts (its model-axis and batch-axis
communicators) are the plan's, the plan's layouts are the strategy's layout map, and the planner's
plan of the same mesh from the profiled model has the same ops."""
import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core
from mdtrain.plan import price_tensor_parallel
from mdtrain.plan.profile import profile_model

distribution = tf.keras.distribution


def _mlp(gather):
    """784 -> 64 (column) -> 32 (row) [-> 16 (column, gathered)] -> 10."""
    tf.keras.utils.set_random_seed(3)
    layers = [tf.keras.layers.Dense(64, activation="relu", name="hidden0"),
              tf.keras.layers.Dense(32, activation="relu", name="hidden1")]
    if gather:
        layers.append(tf.keras.layers.Dense(16, activation="relu", name="hidden2"))
    return tf.keras.Sequential([tf.keras.Input((40,))] + layers + [tf.keras.layers.Dense(10, name="out")])


def _layout_map(mesh, gather):
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden0/kernel"] = (None, "model")
    layout_map["hidden0/bias"] = ("model",)
    layout_map["hidden1/kernel"] = ("model", None)
    if gather:
        layout_map["hidden2/kernel"] = (None, "model")
    return layout_map


CASES = [((1, 2), False), ((2, 2), False), ((1, 2), True), ((2, 2), True)]


@pytest.mark.parametrize("mesh_shape,gather", CASES, ids=[f"{m[0]}x{m[1]}{'_gather' if g else ''}" for m, g in CASES])
def test_the_executor_runs_the_plans_collectives(logical_cpus, mesh_shape, gather):
    logical_cpus(4)
    rng = np.random.default_rng(0)
    batch = 30  # cut 15 + 15 on a batch axis of 2
    x = rng.normal(size=(batch, 40)).astype("float32")
    y = rng.integers(0, 10, size=batch)
    devices = distribution.list_devices()[:int(np.prod(mesh_shape))]
    mesh = distribution.DeviceMesh(mesh_shape, ("batch", "model"), devices=devices)
    mp = distribution.ModelParallel(layout_map=_layout_map(mesh, gather), batch_dim_name="batch")
    with mp.scope():
        model = _mlp(gather)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    strategy = mp._compiled_core(model)
    plan = _core.make_step_plan(strategy, model._core, batch)
    n = int(np.prod(mesh_shape))
    assert plan.devices == n and plan.mesh_shape == list(mesh_shape)

    # Layouts: the layout map's split weights on "model" (bias of the column layer too), the rest replicated.
    split = {"hidden0/kernel": 1, "hidden0/bias": 0, "hidden1/kernel": 0}
    if gather:
        split.update({"hidden2/kernel": 1, "hidden2/bias": 0})
    assert [w["weight"] for w in plan.layouts] == [w.path for w in model.trainable_weights]
    for w in plan.layouts:
        assert (w["axis"], w["dim"]) == (("model", split[w["weight"]]) if w["weight"] in split else (None, -1))

    # The model-axis collectives of the forms: row -> all-reduce of the output, gathered column ->
    # all-gather of it, column -> all-reduce of dx.
    model_axis = [(op["collective"], op["bytes"]) for op in plan.ops(0)
                  if op["kind"] == "collective" and op["axis"] == "model"]
    rows = batch // mesh_shape[0]
    want = [("all_reduce", rows * 32 * 4)]
    if gather:
        want += [("all_gather", rows * 16 * 4), ("all_reduce", rows * 32 * 4)]  # hidden2's dx
    assert model_axis == want  # hidden0's dx: it reads only the input, no gradient

    model._core.reset_profile()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    profile = model._core.profile()
    assert len(profile) == n
    for device in range(n):
        assert profile[device]["steps"] == 1
        assert profile[device]["collectives"] == plan.collective_counts(device), f"device {device}"
    # The group's own byte counter (all-reduced and gathered results) agrees with the plan's model-axis bytes.
    per_step = mp._compiled_core(model).model_axis_bytes_per_step()
    assert list(per_step) == [sum(b for _, b in model_axis)] * n

    # The planner's plan of the same mesh and forms from the profiled model: the same model-axis
    # collectives on every device, the same batch-axis sync (its bytes follow the profile's values,
    # one weight per layer).
    prof = profile_model(model, rows=[rows], repeats=1, threads=1, step_costs=False, shared=False)
    forms = ["column", "row"] + (["column_gather"] if gather else []) + ["replicated"]
    priced = price_tensor_parallel.tensor_parallel_plan(prof, forms, mesh_shape[1], mesh_shape[0], batch)
    assert [s["kind"] for s in priced.syncs] == [s["kind"] for s in plan.syncs]
    for device in range(n):
        def model_ops(p):
            return [op for op in p.ops(device) if op["kind"] == "collective" and op["axis"] == "model"]

        def batch_ops(p):
            return [op["collective"] for op in p.ops(device) if op["kind"] == "collective" and op["axis"] == "batch"]
        assert model_ops(priced) == model_ops(plan), f"device {device}"
        assert batch_ops(priced) == batch_ops(plan), f"device {device}"
    # The planner's own layout: Megatron pairs of consecutive Dense layers; an unpaired one whose
    # units divide by t (the output's 10) gathers.
    want = ["column", "row", "column", "row"] if gather else ["column", "row", "column_gather"]
    assert price_tensor_parallel.forms(prof, 2) == want
