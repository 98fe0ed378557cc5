"""MirroredStrategy on logical CPU devices: replicas in lock step, exact global-batch semantics."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


def _mirrored(logical_cpus, n):
    logical_cpus(n)
    return tf.distribute.MirroredStrategy()


def test_mirrored_uses_every_logical_cpu(logical_cpus):
    strategy = _mirrored(logical_cpus, 3)
    assert strategy.num_replicas_in_sync == 3
    assert len(strategy.worker_devices) == 3
    assert tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:2"]).num_replicas_in_sync == 2


def test_env_variable_sets_logical_devices(monkeypatch):
    monkeypatch.setenv("MDTRAIN_NUM_CPU_DEVICES", "4")
    assert len(tf.config.list_logical_devices("CPU")) == 4
    monkeypatch.setenv("MDTRAIN_NUM_CPU_DEVICES", "zero")
    with pytest.raises(ValueError, match="MDTRAIN_NUM_CPU_DEVICES"):
        tf.config.list_logical_devices("CPU")


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_stay_bitwise_identical_every_step(logical_cpus, blobs, replicas):
    x, y = blobs
    strategy = _mirrored(logical_cpus, replicas)
    with strategy.scope():
        model = compile_mlp(make_mlp(dropout=0.3))
    checked = []

    def check(batch, logs):
        weights = [model._core.replica_weights(r) for r in range(replicas)]
        for r in range(1, replicas):
            assert all(np.array_equal(a, b) for a, b in zip(weights[0], weights[r]))
        checked.append(batch)

    model.fit(x, y, epochs=1, batch_size=50, verbose=0,
              callbacks=[tf.keras.callbacks.LambdaCallback(on_train_batch_end=check)])
    assert checked == list(range(12))


@pytest.mark.parametrize("replicas", [2, 4])
def test_one_step_matches_single_replica(logical_cpus, blobs, replicas):
    """Same global batch, same seed: N replicas equal one replica to float32 rounding after a step."""
    x, y = blobs
    single = compile_mlp(make_mlp(seed=3), optimizer=tf.keras.optimizers.SGD(0.1))
    single.train_on_batch(x[:64], y[:64])
    strategy = _mirrored(logical_cpus, replicas)
    with strategy.scope():
        mirrored = compile_mlp(make_mlp(seed=3), optimizer=tf.keras.optimizers.SGD(0.1))
    mirrored.train_on_batch(x[:64], y[:64])
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        # float32 rounding of sums taken in another order: a few ulps of the weights' scale.
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)


def test_epoch_matches_single_replica_within_tolerance(logical_cpus, blobs):
    x, y = blobs
    single = compile_mlp(make_mlp(seed=4))
    h1 = single.fit(x, y, epochs=1, batch_size=32, verbose=0)
    strategy = _mirrored(logical_cpus, 2)
    with strategy.scope():
        mirrored = compile_mlp(make_mlp(seed=4))
    h2 = mirrored.fit(x, y, epochs=1, batch_size=32, verbose=0)
    # 19 Adam steps at lr 0.01: rounding differences stay far below the update size (1e-2).
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    assert h1.history["loss"][0] == pytest.approx(h2.history["loss"][0], rel=1e-5)
    assert h1.history["accuracy"][0] == pytest.approx(h2.history["accuracy"][0], abs=1 / 600 + 1e-12)


def test_same_seed_same_replicas_bitwise_reproducible(logical_cpus, blobs):
    x, y = blobs
    strategy = _mirrored(logical_cpus, 2)
    runs = []
    for _ in range(2):
        with strategy.scope():
            model = compile_mlp(make_mlp(seed=9, dropout=0.2))
        model.fit(x, y, epochs=2, batch_size=24, verbose=0)
        runs.append(model.get_weights())
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


def test_uneven_last_batch_and_tiny_batches(logical_cpus, blobs):
    """600 samples at batch 64 end on 24; at batch 3 over 4 replicas one replica gets nothing."""
    x, y = blobs
    strategy = _mirrored(logical_cpus, 4)
    with strategy.scope():
        model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    model.fit(x[:10], y[:10], epochs=1, batch_size=3, verbose=0)
    logits = model.predict(x[:7], batch_size=3).astype(np.float64)
    z = logits - logits.max(axis=1, keepdims=True)
    expected = np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(7), y[:7]])
    assert model.evaluate(x[:7], y[:7], batch_size=3, verbose=0)[0] == pytest.approx(expected, rel=1e-5)


def test_model_built_outside_scope_compiled_inside_is_mirrored(logical_cpus, blobs):
    x, y = blobs
    strategy = _mirrored(logical_cpus, 2)
    model = make_mlp()
    with strategy.scope():
        compile_mlp(model)
    model.fit(x, y, epochs=1, verbose=0)
    assert model._core.num_replicas == 2
    assert model.distribute_strategy is strategy


def test_mixing_strategies_is_an_error(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    a = tf.distribute.MirroredStrategy()
    b = tf.distribute.MirroredStrategy()
    with a.scope():
        model = make_mlp()
    with b.scope():
        with pytest.raises(ValueError, match="created in the scope"):
            compile_mlp(model)
    with a.scope():
        compile_mlp(model)
    with b.scope():
        with pytest.raises(ValueError, match="compiled for"):
            model.fit(x, y, epochs=1, verbose=0)
    with a.scope():
        with pytest.raises(ValueError, match="Mixing different"):
            with b.scope():
                pass


def test_bad_devices_are_clear_errors(logical_cpus):
    logical_cpus(2)
    with pytest.raises(ValueError, match="'/cpu:5' does not exist"):
        tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:5"])
    with pytest.raises(ValueError, match="cannot parse"):
        tf.distribute.MirroredStrategy(["/tpu:0"])
    with pytest.raises(TypeError):
        tf.distribute.MirroredStrategy("/cpu:0")
    with pytest.raises(ValueError, match="listed twice"):
        tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:0"])


def test_error_in_one_replica_does_not_hang(logical_cpus, blobs):
    """A bad label in one replica's slice fails the step on every replica, then training works again."""
    x, y = blobs
    strategy = _mirrored(logical_cpus, 2)
    with strategy.scope():
        model = compile_mlp(make_mlp())
    bad = y[:8].astype(np.float32).copy()
    bad[6] = 0.5  # a fractional class id, seen only by replica 1
    with pytest.raises(ValueError, match="label"):
        model.train_on_batch(x[:8], bad)
    model.fit(x, y, epochs=1, verbose=0)


def test_cross_device_ops_choose_the_reduction_with_identical_results(logical_cpus, blobs):
    """ReductionToOneDevice sums on replica 0 then broadcasts; the sum order is the all-reduce's,
    so the weights are bitwise the same."""
    x, y = blobs
    logical_cpus(2)
    results = []
    for ops in (None, tf.distribute.ReductionToOneDevice(), tf.distribute.HierarchicalCopyAllReduce()):
        strategy = tf.distribute.MirroredStrategy(cross_device_ops=ops)
        with strategy.scope():
            model = compile_mlp(make_mlp(seed=8))
        model.fit(x, y, epochs=1, batch_size=30, verbose=0)
        results.append(model.get_weights())
    for other in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(results[0], other))
    with pytest.raises(TypeError, match="CrossDeviceOps"):
        tf.distribute.MirroredStrategy(cross_device_ops="nccl")


def test_sharded_update_keeps_optimizer_state_whole(logical_cpus, blobs, tmp_path):
    """Each replica updates its shard of the weights; the checkpointed optimizer state is whole:
    training 1 epoch, saving, reloading on ONE device and training on equals 2 epochs mirrored
    to float32 rounding, and the state equals the single-device run's to rounding."""
    x, y = blobs
    logical_cpus(3)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = compile_mlp(make_mlp(seed=11))
    model.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    single = compile_mlp(make_mlp(seed=11))
    single.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    for a, b in zip(model.optimizer.variables, single.optimizer.variables):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    model.save(tmp_path / "m.mdtrain")
    restored = tf.keras.models.load_model(tmp_path / "m.mdtrain")
    for a, b in zip(model.optimizer.variables, restored.optimizer.variables):
        assert np.array_equal(a, b)


def test_learning_rate_change_reaches_every_replica(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    model.optimizer.learning_rate = 0.0
    before = model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert all(np.array_equal(a, b) for a, b in zip(model._core.replica_weights(0), model._core.replica_weights(1)))


def test_layer_set_weights_reaches_every_replica(logical_cpus, blobs):
    """Setting one layer's weights on a mirrored model updates every replica, not only the first."""
    x, y = blobs
    strategy = _mirrored(logical_cpus, 2)
    with strategy.scope():
        model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    layer = model.layers[0]
    new = [np.full_like(w, 0.25) for w in layer.get_weights()]
    layer.set_weights(new)
    for r in range(2):
        np.testing.assert_array_equal(model._core.replica_weights(r)[0], new[0])
    model.fit(x, y, epochs=1, verbose=0)
    np.testing.assert_array_equal(model._core.replica_weights(0)[0], model._core.replica_weights(1)[0])
