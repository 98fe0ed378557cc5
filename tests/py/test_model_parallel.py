"""keras.distribution.ModelParallel through fit: a layout map splits Dense layers over the "model" axis
of a (batch, model) mesh; the split model trains to the loss and weights of one device (float32
rounding: rtol 1e-5 on losses, 1e-4 / atol 2e-6 on weights after Adam steps), each device holds its
share of the weights and optimizer state (measured allocations), checkpoints hold unsharded tensors,
and what is not supported is a ValueError / NotImplementedError naming the layer or the call."""
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
from conftest import assert_same_training, fit_for_comparison

distribution = tf.keras.distribution


@pytest.fixture(scope="module")
def fashion():
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    return x[:512].reshape(-1, 784).astype("float32") / 255.0, y[:512]


def _mlp(hidden, seed=7):
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.layers.Dense(h, activation="relu", name=f"hidden{i}") for i, h in enumerate(hidden)]
    return tf.keras.Sequential([tf.keras.Input((784,))] + layers + [tf.keras.layers.Dense(10, name="out")])


def _megatron_map(mesh, hidden):
    """Column-parallel first hidden layer, row-parallel last hidden layer (or the output layer)."""
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden0/kernel"] = (None, "model")
    layout_map["hidden0/bias"] = ("model",)
    layout_map[f"hidden{len(hidden) - 1}/kernel" if len(hidden) > 1 else "out/kernel"] = ("model", None)
    return layout_map


def _train(hidden, strategy, x, y, epochs=1, batch_size=64, optimizer="adam"):
    return fit_for_comparison(strategy, lambda: _mlp(hidden), x, y, epochs, batch_size, optimizer=optimizer,
                              metrics=["accuracy"])


@pytest.mark.parametrize("mesh_shape", [(1, 2), (2, 2)])
def test_seed_model_split_trains_like_one_device(logical_cpus, fashion, mesh_shape):
    logical_cpus(4)
    x, y = fashion
    devices = distribution.list_devices()[:int(np.prod(mesh_shape))]
    mesh = distribution.DeviceMesh(mesh_shape, ("batch", "model"), devices=devices)
    mp = distribution.ModelParallel(layout_map=_megatron_map(mesh, [128]), batch_dim_name="batch")
    # batches of 45 rows: cut 23 + 22 on a batch axis of 2, and the last batch has 17 rows
    split = _train([128], mp, x, y, epochs=2, batch_size=45)
    one = _train([128], tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, epochs=2, batch_size=45)
    assert_same_training(split, one)
    assert mp.num_replicas_in_sync == mesh_shape[0]
    # bitwise reproducible run to run
    again = _train([128], mp, x, y, epochs=2, batch_size=45)
    for a, b in zip(split[0].get_weights(), again[0].get_weights()):
        np.testing.assert_array_equal(a, b)


def test_wide_mlp_on_a_2x2_mesh_trains_like_one_device(logical_cpus, fashion):
    logical_cpus(4)
    x, y = fashion
    hidden = [4096, 4096]
    mesh = distribution.DeviceMesh((2, 2), ("batch", "model"))
    mp = distribution.ModelParallel(layout_map=_megatron_map(mesh, hidden))
    split = _train(hidden, mp, x[:256], y[:256])
    one = _train(hidden, tf.distribute.OneDeviceStrategy("/cpu:0"), x[:256], y[:256])
    assert_same_training(split, one)


def test_each_device_holds_its_share_of_weights_and_optimizer_state(logical_cpus, fashion):
    logical_cpus(4)
    x, y = fashion
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=["cpu:0", "cpu:1"])
    mp = distribution.ModelParallel(layout_map=_megatron_map(mesh, [256]))
    model, _ = _train([256], mp, x[:64], y[:64])
    sharded = (784 * 256 + 256 + 256 * 10) * 4  # hidden0 kernel and bias, out kernel
    replicated = 10 * 4  # out bias
    memory = mp.memory_per_device(model)
    assert [m["device"] for m in memory] == ["cpu:0", "cpu:1"]
    for m in memory:
        assert m["weights"] == sharded // 2 + replicated
        assert m["optimizer_state"] == 2 * (sharded // 2 + replicated)  # Adam's two slots per weight
    traffic = mp.model_axis_bytes_per_step(model)
    assert len(traffic) == 2 and all(b > 0 for b in traffic)
    with pytest.raises(ValueError, match="not compiled under this ModelParallel"):
        mp.memory_per_device(_mlp([8]))


def test_checkpoints_hold_unsharded_weights_both_ways(logical_cpus, fashion, tmp_path):
    logical_cpus(4)
    x, y = fashion
    mesh = distribution.DeviceMesh((2, 2), ("batch", "model"))
    split, _ = _train([128], distribution.ModelParallel(layout_map=_megatron_map(mesh, [128])), x[:128], y[:128])
    path = str(tmp_path / "split.weights.h5")
    split.save_weights(path)
    one = _mlp([128], seed=99)
    one.load_weights(path)
    np.testing.assert_allclose(one.predict(x[:32], verbose=0), split.predict(x[:32], verbose=0), rtol=1e-5, atol=1e-6)
    # and back: one device's weights into a split model, which then predicts the same
    path_one = str(tmp_path / "one.weights.h5")
    one.save_weights(path_one)
    mp = distribution.ModelParallel(layout_map=_megatron_map(mesh, [128]))
    with mp.scope():
        again = _mlp([128], seed=5)
        again.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    again.load_weights(path_one)
    np.testing.assert_allclose(again.predict(x[:32], verbose=0), one.predict(x[:32], verbose=0), rtol=1e-5, atol=1e-6)
    assert [w.shape for w in again.get_weights()] == [w.shape for w in one.get_weights()]


def test_set_distribution_and_unsupported_layouts(logical_cpus, fashion):
    logical_cpus(2)
    x, y = fashion
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=["cpu:0", "cpu:1"])
    distribution.set_distribution(distribution.ModelParallel(layout_map=_megatron_map(mesh, [64])))
    try:
        model = _mlp([64])
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x[:64], y[:64], batch_size=32, verbose=0)
        assert isinstance(model.distribute_strategy, distribution.ModelParallel)
    finally:
        distribution.set_distribution(None)
    layout_map = distribution.LayoutMap(mesh)
    layout_map["norm/gamma"] = ("model",)
    with distribution.ModelParallel(layout_map=layout_map).scope():
        tf.keras.utils.set_random_seed(1)
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.BatchNormalization(name="norm"),
                                     tf.keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"\[model_parallel\].*norm"):  # before any step runs
        model.fit(np.ones((4, 8), "float32"), np.ones((4, 4), "float32"), verbose=0)
    mp = distribution.ModelParallel(layout_map=_megatron_map(mesh, [64]))
    with pytest.raises(NotImplementedError, match="model.fit"):
        mp.run(lambda: None)


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_2_workers_x_2_devices_train_the_seed_model_and_wide_mlp_like_one_device():
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "model_parallel_keras_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]  # wide: 4096
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the two workers share stdout, so their lines may run together: find each report wherever it is
    results = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", proc.stdout)]
    assert len(results) == 2  # both workers checked and printed
    assert results[0] == results[1]  # every worker saw the same losses
