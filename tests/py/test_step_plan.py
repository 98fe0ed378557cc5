"""The StepPlan of each data-parallel strategy (cpp/mdtrain/strategy/step_plan.h): the executor runs
exactly the plan's collectives (its communicators' counts after one real step), and the planner
prices the same plan (the same ops and bytes from the profile it measures)."""
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp
from mdtrain import _core
from mdtrain.plan import Cluster, price_plan
from mdtrain.plan.profile import profile_model


def _strategies():
    """(name, strategy factory, logical CPUs, the planner's inputs for the same devices, optimizer)."""
    return [
        ("one_device", lambda: tf.distribute.OneDeviceStrategy("/cpu:0"), 1,
         dict(strategy="OneDeviceStrategy", local_replicas=1), None),
        ("mirrored", lambda: tf.distribute.MirroredStrategy(), 2,
         dict(strategy="MirroredStrategy", local_replicas=2), None),
        ("mirrored_clipnorm", lambda: tf.distribute.MirroredStrategy(), 2,
         dict(strategy="MirroredStrategy", local_replicas=2, clips_by_norm=True),
         lambda: tf.keras.optimizers.Adam(0.01, clipnorm=1.0)),
        ("mirrored_reduction_to_one", lambda: tf.distribute.MirroredStrategy(
            cross_device_ops=tf.distribute.ReductionToOneDevice()), 3,
         dict(strategy="MirroredStrategy", local_replicas=3, reduce_to_one=True), None),
        ("central_storage", lambda: tf.distribute.experimental.CentralStorageStrategy(), 2,
         dict(strategy="CentralStorageStrategy", local_replicas=2, parameter_device=True, reduce_to_one=True), None),
    ]


@pytest.mark.parametrize("name,make,cpus,planner_inputs,optimizer", _strategies(), ids=[s[0] for s in _strategies()])
def test_executor_and_planner_run_and_price_the_same_plan(logical_cpus, blobs, name, make, cpus, planner_inputs,
                                                          optimizer):
    x, y = blobs
    logical_cpus(cpus)
    strategy = make()
    with strategy.scope():
        kwargs = {"optimizer": optimizer()} if optimizer else {}
        model = compile_mlp(make_mlp(seed=4), metrics=[], **kwargs)
    plan = _core.make_step_plan(strategy._core, model._core)
    assert plan.strategy == strategy._core.name and plan.devices == cpus
    assert [w["weight"] for w in plan.layouts] == [w.path for w in model.trainable_weights]
    assert all(w["axis"] is None for w in plan.layouts)  # data parallelism: every weight replicated

    # The executor: one real step (the whole batch), its communicators' counts are the plan's.
    model._core.reset_profile()
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0, shuffle=False)
    profile = model._core.profile()
    assert len(profile) == cpus
    for device in range(cpus):
        assert profile[device]["steps"] == 1
        assert profile[device]["collectives"] == plan.collective_counts(device), f"device {device}"

    # The planner: the plan it prices for these devices, from the profile it measures, has the
    # same ops (and so the same bytes per collective).
    prof = profile_model(model, rows=[len(x) // cpus], repeats=1, threads=1, step_costs=False, shared=False)
    priced = price_plan.replicated_plan(prof, bucket_bytes=strategy._core.gradient_bucket_bytes, **planner_inputs)
    assert priced.syncs == plan.syncs
    for device in range(cpus):
        assert priced.ops(device) == plan.ops(device), f"device {device}"
    result = price_plan.price(priced, prof, Cluster.preset(Cluster.preset_names()[0]), len(x))
    assert result.step_time_s > 0


def test_the_sync_follows_the_optimizer_clipping():
    """The planner no longer assumes ZeRO-1 on host devices: under clipnorm the core's plan
    all-reduces first, as the executor does."""
    weights = [("dense/kernel", 320), ("dense/bias", 16)]
    plain = _core.replicated_step_plan(weights, 1, "MirroredStrategy", 4)
    clipped = _core.replicated_step_plan(weights, 1, "MirroredStrategy", 4, clips_by_norm=True)
    assert plain.syncs[0]["kind"] == "zero1" and clipped.syncs[0]["kind"] == "zero1_after_all_reduce"
    assert [op["collective"] for op in plain.ops(0) if op["kind"] == "collective"] == ["reduce_scatter", "all_gather"]
    assert [op["collective"] for op in clipped.ops(0) if op["kind"] == "collective"] == ["all_reduce", "all_gather"]
    gpus = _core.replicated_step_plan(weights, 1, "MirroredStrategy", 4, host_replicas=False, bucket_bytes=4 * 100)
    assert gpus.syncs[0]["kind"] == "bucketed_all_reduce"
    assert [op["bytes"] for op in gpus.ops(0) if op["kind"] == "collective"] == [36 * 4, 400, 400, 400]
    assert [op["values"] for op in gpus.ops(2) if op["kind"] == "update"] == [336]
