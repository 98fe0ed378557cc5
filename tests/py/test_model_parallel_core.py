"""The C++ ModelParallelStrategy through its binding (_core.ModelParallelStrategy(mesh, layouts,
batch_dim_name)), as keras.distribution.ModelParallel calls it: a Keras model split by a layout per
weight trains to the weights of the unsharded model on one device (float32 rounding), each device
holds its share of the weights and optimizer state, and bad layouts are ValueErrors."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core


def _model(seed=3):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.layers.Dense(16, activation="relu", input_shape=(20,), name="up"),
        tf.keras.layers.Dropout(0.25, seed=4, name="drop"),
        tf.keras.layers.Dense(8, activation="relu", name="down"),
        tf.keras.layers.Dense(4, activation="softmax", name="head"),
    ])


LAYOUTS = {"up/kernel": [None, "model"], "up/bias": ["model"], "down/kernel": ["model", None],
           "head/kernel": (None, "model")}


def _train(strategy_core, x, y):
    model = _model()
    if strategy_core is None:
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    else:
        with tf.distribute.Strategy(strategy_core).scope():
            model = _model()
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, epochs=2, batch_size=35, verbose=0, shuffle=False)
    return model, history


@pytest.mark.parametrize("shape,names,batch", [([2], ["model"], None), ([2, 2], ["batch", "model"], "batch")])
def test_split_model_trains_like_one_device(logical_cpus, blobs, shape, names, batch):
    x, y = blobs
    y = y % 4
    devices = int(np.prod(shape))
    logical_cpus(devices)
    mesh = _core.DeviceMesh(shape, names, [f"cpu:{i}" for i in range(devices)])
    strategy = _core.ModelParallelStrategy(mesh, LAYOUTS, batch)
    assert strategy.num_replicas_in_sync == devices and strategy.model_axis == "model"
    split, split_history = _train(strategy, x, y)
    reference, reference_history = _train(None, x, y)
    for a, b in zip(split.get_weights(), reference.get_weights()):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(split_history.history["loss"], reference_history.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(split.predict(x, verbose=0), reference.predict(x, verbose=0), atol=1e-5)
    # Per device: the split weights (up, down/kernel, head) cost half, down/bias is whole.
    total = sum(w.nbytes for w in reference.get_weights())
    replicated = 8 * 4
    per_device = (total - replicated) // 2 + replicated
    assert strategy.parameter_bytes_per_device() == [per_device] * devices
    state = strategy.optimizer_state_bytes_per_device()
    if batch is None:
        assert state == [2 * per_device] * devices  # Adam's two slots
    else:
        assert state[0] + state[2] == 2 * per_device and state[1] + state[3] == 2 * per_device
    assert all(b > 0 for b in strategy.model_axis_bytes_per_step())


def test_bad_layouts_are_value_errors(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    mesh = _core.DeviceMesh([2], ["model"], ["cpu:0", "cpu:1"])
    with pytest.raises(ValueError, match=r"\[model_parallel\] layout \(None, 'tensor'\) for 'up/kernel': axis 'tensor'"):
        _core.ModelParallelStrategy(mesh, {"up/kernel": [None, "tensor"]}, None)
    strategy = _core.ModelParallelStrategy(mesh, {"head/kernel": [None, "model"], "drop/kernel": [None, "model"]}, None)
    with tf.distribute.Strategy(strategy).scope():
        model = _model()
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=r"\[model_parallel\] .*'drop/kernel'.*layer 'drop' \(Dropout\) has no weight"):
        model.fit(x, y % 4, epochs=1, batch_size=50, verbose=0)
    with pytest.raises(RuntimeError, match="no model is compiled"):
        _core.ModelParallelStrategy(mesh, {}, None).parameter_bytes_per_device()


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_batch_axis_across_mpi_workers_model_axis_inside():
    """2 workers x 2 logical CPU devices: the split model trains like one device, every worker
    holding the same weights (tests/py/jobs/model_parallel_job.py checks and exits non-zero)."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "model_parallel_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "worker 0 of 2: OK" in proc.stdout and "worker 1 of 2: OK" in proc.stdout, proc.stdout
