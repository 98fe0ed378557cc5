"""SimpleRNN, LSTM, GRU and Bidirectional under every strategy that trains them: the weights equal
one device's to float32 rounding, dropout and recurrent_dropout included (their masks are keyed by
global row, so a replica drops what one device drops for that row). Mirrored and CentralStorage
with a stacked model are in test_rnn.py; here: Bidirectional under both, MultiWorkerMirrored across
2 MPI workers, ParameterServer in its deterministic mode, PipelineParallel, and ModelParallel (the
units of every gate split over the model axis: nn/tensor_parallel/unit_parallel_recurrent.h)."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core

L = tf.keras.layers
HERE = os.path.dirname(os.path.abspath(__file__))


def _data(n=64):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6, 3)).astype(np.float32), rng.integers(0, 3, size=n)


def _bidirectional_layers():
    return [L.Bidirectional(L.LSTM(4, return_sequences=True, dropout=0.2, recurrent_dropout=0.3)),
            L.Bidirectional(L.GRU(3)), L.Dense(3, activation="softmax")]


def _train(strategy, layers, x, y, epochs=2):
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input(x.shape[1:])] + layers())
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


def test_bidirectional_under_mirrored_and_central_storage_equals_one_device(logical_cpus):
    logical_cpus(2)
    x, y = _data()
    one_loss, one = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), _bidirectional_layers, x, y)
    for strategy in (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
                     tf.distribute.experimental.CentralStorageStrategy()):
        loss, weights = _train(strategy, _bidirectional_layers, x, y)
        np.testing.assert_allclose(loss, one_loss, rtol=1e-5)
        for a, b in zip(one, weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_recurrent_layers_under_multi_worker_mirrored_and_model_parallel_across_workers_equal_one_device():
    job = os.path.join(HERE, "jobs", "rnn_multi_worker_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the two workers share stdout, so their lines may run together: find each report wherever it is
    results = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", proc.stdout)]
    assert len(results) == 2  # both workers compared their weights with one device's and printed
    assert results[0] == results[1]
    assert set(results[0]) == {"stacked", "bidirectional", "units_split"}


@pytest.mark.skipif(not _core.zmq_available(), reason="mdtrain was built without ZeroMQ (libzmq3-dev)")
def test_recurrent_layers_under_parameter_server_deterministic_mode_equal_serial_training(tmp_path):
    """Deterministic mode (staleness 0, step k on worker k % 2): the servers' weights equal
    train_on_batch on one device over the same batches in the same order."""
    from mdtrain._input_context import InputContext
    from mdtrain._ps.fit import _ArrayBatches
    from mdtrain._ps.local_cluster import LocalCluster

    x, y = _data(128)

    def layers():  # named: the servers hold variables by name
        return [L.LSTM(8, return_sequences=True, name="lstm"), L.GRU(6, return_sequences=True, name="gru"),
                L.Bidirectional(L.SimpleRNN(5), name="bidirectional"), L.Dense(3, activation="softmax", name="out")]

    with LocalCluster(1, 2, log_dir=str(tmp_path)) as cluster:
        cluster.wait_until_serving()
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster.cluster), task_type="chief", task_id=0)
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, deterministic=True)
        try:
            tf.keras.utils.set_random_seed(0)
            with strategy.scope():
                model = tf.keras.Sequential([tf.keras.Input((6, 3))] + layers())
                model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
            initial = model.get_weights()
            model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=6, verbose=0)
            got = model.get_weights()
            epoch_seed = model._epoch_seed()
        finally:
            strategy._close()
    reference = tf.keras.Sequential([tf.keras.Input((6, 3))] + layers())
    reference.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    reference.set_weights(initial)
    batches = [_ArrayBatches(x, y.astype(np.int32), 16, True, epoch_seed)(InputContext(2, w)) for w in range(2)]
    for k in range(6):
        reference.train_on_batch(*next(batches[k % 2]))
    assert len(got) == len(reference.get_weights())
    assert not np.array_equal(got[0], initial[0])  # it trained
    for a, b in zip(got, reference.get_weights()):
        np.testing.assert_array_equal(a, b)  # the same ops in the same order: bit for bit


distribution = tf.keras.distribution


def _recurrent_layers(dropout):
    return [L.LSTM(8, return_sequences=True, dropout=dropout, recurrent_dropout=dropout, name="lstm"),
            L.GRU(6, return_sequences=True, recurrent_dropout=dropout, name="gru"),
            L.SimpleRNN(4, dropout=dropout, recurrent_dropout=dropout, name="rnn"),
            L.Dense(3, activation="softmax", name="out")]


def _unit_split_map(mesh):
    """Every recurrent layer split by units: kernel (None, 'model') names it; the recurrent kernel
    and bias follow (given for the LSTM, left out for the others)."""
    layout_map = distribution.LayoutMap(mesh)
    layout_map["lstm/kernel"] = (None, "model")
    layout_map["lstm/recurrent_kernel"] = (None, "model")
    layout_map["lstm/bias"] = ("model",)
    layout_map["gru/kernel"] = (None, "model")
    layout_map["gru/bias"] = (None, "model")
    layout_map["rnn/kernel"] = (None, "model")
    return layout_map


def _train_mp(strategy, dropout, x, y, optimizer):
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input(x.shape[1:])] + _recurrent_layers(dropout))
        model.compile(optimizer=optimizer(), loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    return model, history.history["loss"]


@pytest.mark.parametrize("mesh_shape,dropout", [((1, 2), 0.0), ((1, 2), 0.3), ((2, 2), 0.3)])
def test_recurrent_layers_split_by_units_train_like_one_device(logical_cpus, mesh_shape, dropout):
    logical_cpus(4)
    x, y = _data()
    mesh = distribution.DeviceMesh(mesh_shape, ("batch", "model"),
                                   devices=distribution.list_devices()[:int(np.prod(mesh_shape))])
    adam = lambda: tf.keras.optimizers.Adam(0.01)  # noqa: E731
    split, split_loss = _train_mp(distribution.ModelParallel(layout_map=_unit_split_map(mesh)), dropout, x, y, adam)
    one, one_loss = _train_mp(tf.distribute.OneDeviceStrategy("/cpu:0"), dropout, x, y, adam)
    np.testing.assert_allclose(split_loss, one_loss, rtol=1e-5)
    for a, b in zip(split.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the optimizer state comes back whole, each shard's units in their gates' places
    for a, b in zip(split.optimizer.variables, one.optimizer.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_a_checkpoint_with_optimizer_state_moves_between_one_device_and_a_units_split(logical_cpus, tmp_path):
    """Weights and Adam slots saved on one device load into the split model (each shard takes its
    units of every gate) and training goes on as on one device."""
    logical_cpus(2)
    x, y = _data()
    adam = lambda: tf.keras.optimizers.Adam(0.01)  # noqa: E731
    one, _ = _train_mp(tf.distribute.OneDeviceStrategy("/cpu:0"), 0.0, x, y, adam)
    path = str(tmp_path / "one.keras")
    one.save(path)
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"))
    with distribution.ModelParallel(layout_map=_unit_split_map(mesh)).scope():
        split = tf.keras.models.load_model(path)
    np.testing.assert_allclose(split.predict(x, verbose=0), one.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    for model in (one, split):
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(split.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(split.optimizer.variables, one.optimizer.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_recurrent_layers_in_pipeline_stages_train_like_one_device(logical_cpus, dropout):
    """LSTM | GRU + Bidirectional(SimpleRNN) | Dense on 2 pipeline stages x 2 batch groups, 4
    micro-batches per group: the masks follow each row wherever its micro-batch runs."""
    import warnings

    logical_cpus(4)
    x, y = _data()

    def layers():
        return [L.LSTM(8, return_sequences=True, dropout=dropout, recurrent_dropout=dropout),
                L.GRU(6, return_sequences=True, recurrent_dropout=dropout),
                L.Bidirectional(L.SimpleRNN(4, recurrent_dropout=dropout)), L.Dense(3, activation="softmax")]

    one_loss, one = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), layers, x, y)
    mesh = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 4 micro-batches for 2 stages: the bubble warning
        pipeline = distribution.PipelineParallel(mesh, num_microbatches=4, schedule="1f1b", batch_dim_name="batch",
                                                 stages=[2])
    loss, weights = _train(pipeline, layers, x, y)
    np.testing.assert_allclose(loss, one_loss, rtol=1e-5)
    for a, b in zip(weights, one):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
