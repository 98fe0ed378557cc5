"""keras.distribution.PipelineParallel on GPUs (docs/pipeline.md, "Stages on GPUs"). The test marked
``gpu`` trains two stages on two GPUs against one CPU device and skips, saying why, with fewer GPUs;
the others run everywhere: a mesh mixing CPU devices and GPUs, or GPUs this process does not see,
is a ValueError naming the device, before any training."""
import re
import warnings

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core

_GPUS = _core.cuda_device_count()
distribution = tf.keras.distribution


def _strategy(devices):
    mesh = _core.DeviceMesh([len(devices)], ["pipe"], devices)
    return _core.PipelineStrategy(mesh, 4, "1f1b", [], "pipe", None, False)


@pytest.mark.parametrize("devices", [["/cpu:0", "/gpu:0"], ["/gpu:0", "/cpu:0"]])
def test_a_mesh_mixing_cpu_devices_and_gpus_is_refused(devices):
    first, other = ("/device:CPU:0", "/device:GPU:0") if devices[0] == "/cpu:0" else ("/device:GPU:0",
                                                                                      "/device:CPU:0")
    with pytest.raises(ValueError, match=re.escape(f"[pipeline] {other}: stages must all be on CPU devices or all "
                                                   f"on GPUs, got {first} and {other}")):
        _strategy(devices)


def test_gpus_this_process_does_not_see_are_refused_with_the_reason():
    if _GPUS:
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match=re.escape("[pipeline] /device:GPU:0 is not a visible GPU (this process "
                                                   f"sees 0): {_core.cuda_unavailable_reason()}")):
        _strategy(["/gpu:0", "/gpu:1"])
    # Through the Keras API the mesh refuses them first, naming the device.
    with pytest.raises(ValueError, match="'gpu:0' does not exist"):
        distribution.DeviceMesh((2,), ("pipe",), devices=["gpu:0", "gpu:1"])


def _mlp(x, batch_norm):
    tf.keras.utils.set_random_seed(5)
    layers = [tf.keras.Input((x.shape[1],)), tf.keras.layers.Dense(64, activation="relu")]
    if batch_norm:
        layers.append(tf.keras.layers.BatchNormalization())
    layers += [tf.keras.layers.PipelineSplit(), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(3)]
    return tf.keras.Sequential(layers)


def _train(distribution_or_strategy, x, y, batch_norm):
    with distribution_or_strategy.scope():
        model = _mlp(x, batch_norm)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=2, batch_size=64, shuffle=False, verbose=0)
    return model, history.history["loss"]


def _pipeline(devices):
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=devices)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 4 micro-batches for 2 stages: the bubble warning
        return distribution.PipelineParallel(mesh, num_microbatches=4, schedule="1f1b")


def _assert_close(got, want, x, y):
    (model, loss), (ref, ref_loss) = got, want
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-3, atol=1e-4)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), ref.evaluate(x, y, verbose=0), rtol=1e-3)
    np.testing.assert_allclose(model.predict(x, verbose=0), ref.predict(x, verbose=0), rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_two_stages_on_two_gpus_train_like_one_device(blobs, logical_cpus):
    """Stage 0 on GPU 0, stage 1 on GPU 1 (NCCL send / recv), 1F1B with 4 micro-batches: fit's losses,
    the weights, evaluate and predict equal one CPU device to float32 tolerance; with
    BatchNormalization (each micro-batch normalized by its own statistics, the moving statistics
    deferred to the global batch) they equal the same pipeline on two logical CPU devices."""
    if _GPUS < 2:
        reason = f": {_core.cuda_unavailable_reason()}" if _GPUS == 0 else ""
        pytest.skip(f"needs 2 GPUs, this process sees {_GPUS}{reason}")
    x, y = blobs
    gpus = ["gpu:0", "gpu:1"]
    _assert_close(_train(_pipeline(gpus), x, y, False), _train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, False),
                  x, y)
    logical_cpus(2)
    _assert_close(_train(_pipeline(gpus), x, y, True), _train(_pipeline(["cpu:0", "cpu:1"]), x, y, True), x, y)
