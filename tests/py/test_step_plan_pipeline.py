"""The StepPlans of the pipelines (cpp/mdtrain/strategy/pipeline_step_plan.h): PipelineParallel
(GPipe and 1F1B, one pipeline and two on a batch axis) and WavefrontPipeline. The executor runs the
plan's stages and op order: after one real step of the plan's global batch each device's sends,
receives and collectives are the plan's (calls and bytes); the ops are the core's pipeline schedule
with the micro-batches' rows and the boundary tensors' bytes, then each stage's gradient sum and
update."""
import warnings

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core

distribution = tf.keras.distribution

_RECV = {False: "recv_activation", True: "recv_gradient"}
_SEND = {False: "send_activation", True: "send_gradient"}


def _mlp(seed=7):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(32, activation="relu", name="d0"),
                                tf.keras.layers.Dense(24, activation="tanh", name="d1"),
                                tf.keras.layers.Dense(16, activation="relu", name="d2"),
                                tf.keras.layers.Dense(5, name="out")])


def _normalized_mlp(seed=7):
    tf.keras.utils.set_random_seed(seed)
    L = tf.keras.layers
    return tf.keras.Sequential([tf.keras.Input((20,)), L.Dense(32, activation="relu", name="d0"),
                                L.BatchNormalization(name="bn0"), L.Dense(24, activation="tanh", name="d1"),
                                L.Dense(16, activation="relu", name="d2"), L.BatchNormalization(name="bn1"),
                                L.Dense(5, name="out")])


def test_statistics_and_label_counts_are_summed_over_the_pipelines(logical_cpus):
    """Two pipelines: each stage's BatchNormalization statistics (two float64 all-reduces per
    layer) and an ignore_class loss's label count (one) are collectives of the plan too."""
    logical_cpus(4)
    mesh = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pp = distribution.PipelineParallel(mesh, num_microbatches=2, schedule="1f1b", stages=[3],
                                           batch_dim_name="batch")
    with pp.scope():
        model = _normalized_mlp()
        model.compile(optimizer="adam",
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=4))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 20)).astype("float32")
    y = rng.integers(0, 5, size=40).astype("int32")
    model._core.reset_profile()
    model.fit(x, y, batch_size=40, epochs=1, shuffle=False, verbose=0)
    plan = _core.make_step_plan(pp._compiled_core(model), model._core, 40)
    profile = model._core.profile()
    for d in range(4):
        assert profile[d]["collectives"] == plan.collective_counts(d), f"device {d}"
        sums = [op["bytes"] for op in plan.ops(d) if op["kind"] == "collective"]
        stage = d % 2  # mesh (batch, pipe)
        # The label count first; after the schedule bn0 (32 channels) on stage 0, bn1 (16) on
        # stage 1, then the stage's gradient bucket.
        channels = 32 if stage == 0 else 16
        assert sums[:3] == [8, (1 + channels) * 8, channels * 8] and len(sums) == 4


def _schedule_ops(ops):
    """A device's plan ops as the core's pipeline schedule names them (kind, micro-batch)."""
    out = []
    for op in ops:
        if op["kind"] in ("forward", "backward"):
            out.append((op["kind"], op["microbatch"]))
        elif op["kind"] == "send":
            out.append((_SEND[op["gradient"]], op["microbatch"]))
        elif op["kind"] == "recv":
            out.append((_RECV[op["gradient"]], op["microbatch"]))
    return out


def _slices(count, parts):
    """slice_of's row counts (batch_split.h)."""
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


CASES = [  # (id, mesh shape, mesh axes, micro-batches, schedule, stages argument, global batch)
    ("gpipe_p2", (2,), ("pipe",), 4, "gpipe", [2], 45),
    ("1f1b_p2", (2,), ("pipe",), 4, "1f1b", [2], 45),
    ("1f1b_p4", (4,), ("pipe",), 5, "1f1b", [1, 2, 3], 45),
    ("gpipe_p2_dp2", (2, 2), ("batch", "pipe"), 3, "gpipe", [1], 45),
    ("1f1b_p2_dp2", (2, 2), ("pipe", "batch"), 2, "1f1b", "balance_params", 46),
]


@pytest.mark.parametrize("name,shape,axes,m,schedule,stages,batch", CASES, ids=[c[0] for c in CASES])
def test_pipeline_executor_runs_the_plan(logical_cpus, name, shape, axes, m, schedule, stages, batch):
    logical_cpus(4)
    n = int(np.prod(shape))
    mesh = distribution.DeviceMesh(shape, axes, devices=distribution.list_devices()[:n])
    dp = shape[axes.index("batch")] if "batch" in axes else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pp = distribution.PipelineParallel(mesh, num_microbatches=m, schedule=schedule, stages=stages,
                                           **({"batch_dim_name": "batch"} if dp > 1 else {}))
    with pp.scope():
        model = _mlp()
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 20)).astype("float32")
    y = rng.integers(0, 5, size=batch).astype("int32")
    model._core.reset_profile()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    core = pp._compiled_core(model)
    plan = _core.make_step_plan(core, model._core, batch)
    p = len(plan.segments)

    # The executor ran the plan: its stages, and on every device the plan's sends, receives and
    # collectives (one step of `batch` rows).
    assert plan.strategy == "PipelineParallel" and plan.devices == n
    assert list(plan.mesh_shape) == list(shape) and list(plan.mesh_axes) == list(axes)
    # The executor's stage starts end with the layer count.
    assert [s["first_layer"] for s in plan.segments] + [len(model.layers)] == list(core.stage_starts())
    profile = model._core.profile()
    assert len(profile) == n
    for d in range(n):
        assert profile[d]["steps"] == 1
        assert profile[d]["collectives"] == plan.collective_counts(d), f"device {d}"

    # The plan's structure.
    layers = model.layers
    assert plan.segments[0]["first_layer"] == 0 and plan.segments[-1]["end_layer"] == len(layers)
    assert all(a["end_layer"] == b["first_layer"] for a, b in zip(plan.segments, plan.segments[1:]))
    assert [w["weight"] for w in plan.layouts] == [w.path for w in model.trainable_weights]
    segment_of_layer = {i: s for s, seg in enumerate(plan.segments) for i in range(seg["first_layer"], seg["end_layer"])}
    assert [w["segment"] for w in plan.layouts] == [segment_of_layer[i] for i, layer in enumerate(layers)
                                                    for _ in layer.trainable_weights]
    expected_ops = _core.pipeline_schedule_ops(schedule, p, m)
    pipe_axis = axes.index("pipe")
    for d in range(n):
        at = np.unravel_index(d, shape)
        s = int(at[pipe_axis])
        b = int(at[1 - pipe_axis]) if dp > 1 else 0
        assert d in plan.segments[s]["devices"]
        # Each micro-batch's activations to the next stage and gradients to the one before.
        assert plan.collective_counts(d)["send"]["calls"] == m * ((s > 0) + (s < p - 1))
        ops = plan.ops(d)
        assert _schedule_ops(ops) == [tuple(op) for op in expected_ops[s]]
        rows = _slices(_slices(batch, dp)[b], m)
        seg = plan.segments[s]
        for op in ops:
            if op["kind"] in ("forward", "backward"):
                assert op["segment"] == s and op["rows"] == rows[op["microbatch"]]
            if op["kind"] in ("send", "recv"):
                later = (op["kind"] == "send") != op["gradient"]  # activations go on, gradients back
                peer = list(at)
                peer[pipe_axis] = s + 1 if later else s - 1
                assert op["peer"] == int(np.ravel_multi_index(peer, shape))
                boundary = s if later else s - 1
                assert op["segment"] == boundary
                values = layers[plan.segments[boundary]["end_layer"] - 1].units  # a Dense layer's output
                assert op["bytes"] == rows[op["microbatch"]] * values * 4
        # After the schedule: the stage's gradient buckets over the batch axis, then its update.
        stage_values = sum(int(np.prod(w.shape)) for layer in layers[seg["first_layer"]:seg["end_layer"]]
                           for w in layer.trainable_weights)
        first = sum(int(np.prod(w.shape)) for layer in layers[:seg["first_layer"]] for w in layer.trainable_weights)
        tail = [op for op in ops if op["kind"] in ("collective", "update")]
        assert tail[-1] == {"kind": "update", "first_value": first, "values": stage_values}
        reduces = tail[:-1]
        assert len(reduces) == (1 if dp > 1 else 0)
        for op in reduces:
            assert op["collective"] == "all_reduce" and op["axis"] == "batch" and op["group"] == dp
            assert op["bytes"] == stage_values * 4 and not op["during_backward"]
        assert plan.syncs[s]["values"] == stage_values and plan.syncs[s]["group"] == dp


def test_planner_binding_makes_the_strategys_plan(logical_cpus):
    """_core.pipeline_step_plan (the planner's: per-layer values and outputs) is the strategy's plan."""
    logical_cpus(4)
    mesh = distribution.DeviceMesh((2, 2), ("pipe", "batch"), devices=distribution.list_devices()[:4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pp = distribution.PipelineParallel(mesh, num_microbatches=4, schedule="1f1b", stages=[2],
                                           batch_dim_name="batch")
    with pp.scope():
        model = _mlp()
        model.compile(optimizer="adam", loss="mse")
    core = pp._compiled_core(model)
    plan = _core.make_step_plan(core, model._core, 64)
    weights = [(layer.name, sum(int(np.prod(w.shape)) for w in layer.trainable_weights)) for layer in model.layers]
    outputs = [layer.units for layer in model.layers]
    priced = _core.pipeline_step_plan(weights, outputs, [2], "1f1b", 4, pipelines=2, global_batch=64)
    assert priced.segments == plan.segments and priced.syncs == plan.syncs
    for d in range(4):
        assert priced.ops(d) == plan.ops(d), f"device {d}"


def _stack(seed=5, units=8):
    tf.keras.utils.set_random_seed(seed)
    L = tf.keras.layers
    rnn = [L.LSTM(units, return_sequences=True, name=f"r{i}") for i in range(3)]
    model = tf.keras.Sequential([tf.keras.Input((9, 3))] + rnn + [L.Dense(2, name="head")])
    model.compile(optimizer="adam", loss="mse")
    return model


@pytest.mark.parametrize("devices,chunk", [(2, 4), (3, 3)])
def test_wavefront_executor_runs_the_plan(logical_cpus, devices, chunk):
    logical_cpus(4)
    mesh = distribution.DeviceMesh((devices,), ("pipe",), devices=distribution.list_devices()[:devices])
    wave = distribution.WavefrontPipeline(mesh, time_chunk=chunk)
    with wave.scope():
        model = _stack()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((12, 9, 3)).astype("float32"), rng.standard_normal((12, 9, 2)).astype("float32")
    model._core.reset_profile()
    model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    core = wave._compiled_core(model)
    plan = _core.make_step_plan(core, model._core, 12)
    assert plan.strategy == "WavefrontPipeline" and plan.devices == devices
    stages = plan.segments[:devices]
    assert [s["first_layer"] for s in stages] == list(core.stage_starts())
    assert plan.segments[-1] == {"name": "head", "first_layer": 3, "end_layer": 4, "devices": [devices - 1]}
    counts = core.stage_collectives()
    for d in range(devices):
        assert counts[d] == plan.collective_counts(d), f"device {d}"
    assert _core.wavefront_step_plan(model._core, devices, chunk, 12).ops(0) == plan.ops(0)

    steps = [min(chunk, 9 - t) for t in range(0, 9, chunk)]
    k = len(steps)
    for d in range(devices):
        ops = plan.ops(d)
        fwd = [op for op in ops if op["kind"] == "forward" and op["segment"] == d]
        bwd = [op for op in ops if op["kind"] == "backward" and op["segment"] == d]
        # Forward chunks in order, backward in reverse, each of the whole batch.
        assert [op["microbatch"] for op in fwd] == list(range(k)) and [op["steps"] for op in fwd] == steps
        assert [op["microbatch"] for op in bwd] == list(reversed(range(k)))
        assert all(op["rows"] == 12 for op in fwd + bwd)
        for op in ops:
            if op["kind"] in ("send", "recv"):
                assert op["bytes"] == 12 * op["steps"] * 8 * 4  # the chunk of an 8-unit sequence
                later = (op["kind"] == "send") != op["gradient"]
                assert op["peer"] == (d + 1 if later else d - 1)
        if d == devices - 1:
            head = [op["kind"] for op in ops if op["segment"] == devices]
            assert head == ["forward", "backward"]
            assert ops.index({"kind": "forward", "segment": devices, "microbatch": 0, "rows": 12, "steps": 0}) > \
                ops.index(fwd[-1])
        updates = [op for op in ops if op["kind"] == "update"]
        total = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        assert updates == ([{"kind": "update", "first_value": 0, "values": total}] if d == 0 else [])
