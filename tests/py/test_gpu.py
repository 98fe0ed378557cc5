"""GPUs as the Python API sees them. The tests marked ``gpu`` need a CUDA device and skip, printing
why, when this process sees none (a CPU-only build, no driver or no GPU); the others check what a
machine without a GPU promises."""
import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core

_GPUS = _core.cuda_device_count()
requires_gpu = pytest.mark.skipif(_GPUS == 0, reason=f"no CUDA device: {_core.cuda_unavailable_reason()}")


def test_gpu_list_is_what_the_driver_reports():
    gpus = tf.config.list_physical_devices("GPU")
    assert len(gpus) == _GPUS
    assert [d.name for d in gpus] == [f"/physical_device:GPU:{i}" for i in range(_GPUS)]
    assert all(d.device_type == "GPU" for d in gpus)
    logical = tf.config.list_logical_devices("GPU")
    assert [d.name for d in logical] == [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(_GPUS)]


def test_no_gpu_is_an_empty_list_and_a_reason_not_an_error():
    if _GPUS:
        pytest.skip("a GPU is present")
    assert tf.config.list_physical_devices("GPU") == []
    assert tf.config.list_logical_devices("GPU") == []
    # The CPU is still there, and the reason says why there is no GPU.
    assert [d.device_type for d in tf.config.list_physical_devices()] == ["CPU"]
    reason = _core.cuda_unavailable_reason()
    assert reason
    assert "built without CUDA" in reason or "cudaGetDeviceCount" in reason or "no CUDA device" in reason


@pytest.mark.gpu
@requires_gpu
def test_every_visible_gpu_is_listed_once():
    names = [d.name for d in tf.config.list_physical_devices("GPU")]
    assert len(set(names)) == len(names) == _GPUS >= 1


def test_mirrored_strategy_refuses_gpus_it_cannot_see():
    if _GPUS:
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match=r"/device:GPU:0 is not a visible GPU \(this process sees 0\)"):
        _core.MirroredStrategy(["/gpu:0"], "auto", "all_reduce")


def test_nccl_cross_device_ops_on_cpu_devices_still_train_with_threads(logical_cpus, blobs):
    """NcclAllReduce means "auto": NCCL on GPUs, the threads backend on logical CPU devices."""
    if _GPUS:
        pytest.skip("MirroredStrategy() takes the GPUs here")
    from conftest import compile_mlp, make_mlp
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.NcclAllReduce())
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        model = compile_mlp(make_mlp())
    history = model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw", "rmsprop", "adagrad"])
def test_mirrored_strategy_trains_the_seed_model_on_every_gpu(blobs, optimizer):
    """MirroredStrategy() picks every GPU and NCCL; one epoch equals the CPU's to float32 tolerance."""
    from conftest import compile_mlp, make_mlp
    x, y = blobs
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync == _GPUS
    with strategy.scope():
        on_gpus = compile_mlp(make_mlp(seed=5, hidden=128, classes=10), optimizer=optimizer)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        on_cpu = compile_mlp(make_mlp(seed=5, hidden=128, classes=10), optimizer=optimizer)
    h_gpu = on_gpus.fit(x, y, epochs=1, batch_size=64, shuffle=False, verbose=0)
    h_cpu = on_cpu.fit(x, y, epochs=1, batch_size=64, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_gpu.history["loss"], h_cpu.history["loss"], rtol=1e-3, atol=1e-4)
    for a, b in zip(on_gpus.get_weights(), on_cpu.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    for r in range(1, _GPUS):  # replicas bitwise identical
        for a, b in zip(on_gpus._core.replica_weights(0), on_gpus._core.replica_weights(r)):
            assert np.array_equal(a, b)


@pytest.mark.gpu
@requires_gpu
def test_layer_weights_read_after_gpu_training_are_the_trained_ones(blobs):
    """Training on a GPU does not copy weights back every step; reading them (layer or model,
    during fit in a callback or after it) gets replica 0's current values."""
    from conftest import compile_mlp, make_mlp
    x, y = blobs
    with tf.distribute.OneDeviceStrategy("/gpu:0").scope():
        model = compile_mlp(make_mlp(seed=5, hidden=64, classes=10))
    first = model.layers[0]
    seen = []
    reader = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(first.get_weights()[0]))
    before = first.get_weights()[0]
    model.fit(x, y, epochs=2, batch_size=64, verbose=0, callbacks=[reader])
    assert not np.array_equal(seen[0], before) and not np.array_equal(seen[1], seen[0])
    np.testing.assert_array_equal(first.get_weights()[0], model._core.replica_weights(0)[0])
    np.testing.assert_array_equal(model.get_weights()[0], seen[1])
    # A layer's set_weights reaches the replica, and training continues from it.
    first.set_weights([np.zeros_like(w) for w in first.get_weights()])
    assert not model._core.replica_weights(0)[0].any()


@pytest.mark.gpu
@requires_gpu
def test_model_parallel_splits_a_megatron_pair_over_two_gpus(blobs):
    """ModelParallel on a 2-GPU model axis (NCCL): hidden0 column-parallel, hidden1 row-parallel;
    one epoch equals one CPU device to float32 tolerance, and each GPU holds about half the model."""
    if _GPUS < 2:
        pytest.skip(f"needs 2 GPUs, this process sees {_GPUS}")
    x, y = blobs
    distribution = tf.keras.distribution
    mesh = distribution.DeviceMesh((2,), ("model",), devices=["gpu:0", "gpu:1"])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden0/kernel"] = (None, "model")
    layout_map["hidden0/bias"] = ("model",)
    layout_map["hidden1/kernel"] = ("model", None)

    def mlp():
        tf.keras.utils.set_random_seed(5)
        return tf.keras.Sequential([tf.keras.Input((x.shape[1],)),
                                    tf.keras.layers.Dense(256, activation="relu", name="hidden0"),
                                    tf.keras.layers.Dense(256, activation="relu", name="hidden1"),
                                    tf.keras.layers.Dense(3, name="out")])

    mp = distribution.ModelParallel(layout_map=layout_map)
    with mp.scope():
        split = mlp()
        split.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        one = mlp()
        one.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h_split = split.fit(x, y, epochs=1, batch_size=64, shuffle=False, verbose=0)
    h_one = one.fit(x, y, epochs=1, batch_size=64, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_split.history["loss"], h_one.history["loss"], rtol=1e-3, atol=1e-4)
    for a, b in zip(split.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    for m, gpu in zip(mp.memory_per_device(split), ["GPU:0", "GPU:1"]):
        assert tf.config.experimental.get_memory_info(gpu)["current"] >= 2 * m["weights"] + m["optimizer_state"]
