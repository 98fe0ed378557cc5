"""CentralStorageStrategy on logical CPU devices: the variables and the one optimizer state on the
host, gradients summed onto it, one update there."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


def _train(strategy, x, y, *, epochs=2, batch_size=30, **make):
    with strategy.scope():
        model = compile_mlp(make_mlp(seed=8, **make))
    history = model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    return model, history


@pytest.mark.parametrize("replicas", [2, 3])
def test_bitwise_equal_to_mirrored_reduction_to_one_device(logical_cpus, blobs, replicas):
    """Same sums in the same order, then the same element-wise update: the weights, the loss and
    the optimizer state equal MirroredStrategy(ReductionToOneDevice) bit for bit, also with an
    uneven last batch (600 rows in batches of 35), dropout and weight decay."""
    x, y = blobs
    logical_cpus(replicas)
    runs = []
    for strategy in (tf.distribute.experimental.CentralStorageStrategy(),
                     tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())):
        runs.append(_train(strategy, x, y, batch_size=35, dropout=0.2))
    (central, central_history), (mirrored, mirrored_history) = runs
    assert central.distribute_strategy.num_replicas_in_sync == replicas
    for a, b in zip(central.get_weights(), mirrored.get_weights()):
        assert np.array_equal(a, b)
    assert central_history.history["loss"] == mirrored_history.history["loss"]
    for a, b in zip(central.optimizer.variables, mirrored.optimizer.variables):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_batch_normalization_statistics_and_checkpoints_interchange(logical_cpus, blobs, tmp_path):
    """Moving statistics are updated once per step as under Mirrored; a checkpoint written under
    CentralStorage loads under Mirrored (and on one device) and trains on to the same weights."""
    x, y = blobs
    logical_cpus(2)

    def bn_model():
        tf.keras.utils.set_random_seed(3)
        return compile_mlp(tf.keras.Sequential([
            tf.keras.layers.Dense(16, input_shape=(20,)), tf.keras.layers.BatchNormalization(),
            tf.keras.layers.Activation("relu"), tf.keras.layers.Dense(3)]))

    weights = []
    for strategy in (tf.distribute.experimental.CentralStorageStrategy(),
                     tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())):
        with strategy.scope():
            model = bn_model()
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        weights.append(model.get_weights())
        if isinstance(strategy, tf.distribute.experimental.CentralStorageStrategy):
            model.save(tmp_path / "central.mdtrain")
    for a, b in zip(*weights):
        assert np.array_equal(a, b)

    restored = tf.keras.models.load_model(tmp_path / "central.mdtrain")  # one device
    for a, b in zip(restored.get_weights(), weights[0]):
        assert np.array_equal(a, b)
    with tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice()).scope():
        mirrored = tf.keras.models.load_model(tmp_path / "central.mdtrain")
    with tf.distribute.experimental.CentralStorageStrategy().scope():
        central = tf.keras.models.load_model(tmp_path / "central.mdtrain")
    for model in (mirrored, central):
        model.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    for a, b in zip(mirrored.get_weights(), central.get_weights()):
        assert np.array_equal(a, b)


def test_surface_and_evaluate_predict_run_reduce(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.experimental.CentralStorageStrategy()
    assert strategy.num_replicas_in_sync == 2
    assert strategy.parameter_device == "/device:CPU:0"
    model, _ = _train(strategy, x, y, epochs=3)
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert accuracy > 0.9
    assert model.predict(x[:7], verbose=0).shape == (7, 3)
    per_replica = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group + 1)
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None) == 3


def test_bad_arguments_are_clear_errors(logical_cpus):
    logical_cpus(2)
    with pytest.raises(TypeError, match="compute_devices"):
        tf.distribute.experimental.CentralStorageStrategy(compute_devices="/cpu:0")
    with pytest.raises(ValueError, match="compute_devices must not be empty"):
        tf.distribute.experimental.CentralStorageStrategy(compute_devices=[])
    with pytest.raises(ValueError, match="parameter_device must be the host"):
        tf.distribute.experimental.CentralStorageStrategy(parameter_device="/cpu:1")
    with pytest.raises(ValueError):
        tf.distribute.experimental.CentralStorageStrategy(compute_devices=["/cpu:0", "/cpu:7"])
