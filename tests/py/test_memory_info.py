"""tf.config.experimental.get_memory_info / reset_memory_stats: measured bytes per device. Each
device of a 2-way tensor-parallel model holds its shard's weights, gradients and optimizer state plus
its activations (about half of the unsharded model's), the host holds the unsharded copy, peaks are
at least the current bytes, reset_memory_stats brings the peak down to them, and device names are
checked as TF checks them."""
import gc

import numpy as np
import pytest

import mdtrain as tf

distribution = tf.keras.distribution
get_memory_info = tf.config.experimental.get_memory_info
reset_memory_stats = tf.config.experimental.reset_memory_stats


def _mlp():
    tf.keras.utils.set_random_seed(3)
    return tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(1024, activation="relu", name="h0"),
                                tf.keras.layers.Dense(1024, name="h1"), tf.keras.layers.Dense(10, name="out")])


def _data(rows=128):
    rng = np.random.default_rng(0)
    return rng.random((rows, 784), dtype=np.float32), rng.integers(0, 10, rows)


def _compiled(model):
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_each_tensor_parallel_device_holds_about_half_of_the_model(logical_cpus):
    logical_cpus(2)
    x, y = _data()
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=["cpu:0", "cpu:1"])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["h0/kernel"] = (None, "model")
    layout_map["h0/bias"] = ("model",)
    layout_map["h1/kernel"] = ("model", None)
    mp = distribution.ModelParallel(layout_map=layout_map)
    gc.collect()  # models of earlier tests: freed now, not while this one measures
    host_before = tf._core.host_memory_info()["current"]
    before = [get_memory_info(d)["current"] for d in ("CPU:0", "CPU:1")]
    with mp.scope():
        model = _compiled(_mlp())
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    params = (784 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 10 + 10)
    unsharded = params * 4 * 4  # weights, gradients and Adam's two slots, float32
    for m, device, start in zip(mp.memory_per_device(model), ["CPU:0", "CPU:1"], before):
        info = get_memory_info(device)
        held = info["current"] - start
        weights_and_state = 2 * m["weights"] + m["optimizer_state"]  # weights + gradients + slots
        # the shard's weights, gradients and optimizer state are measured allocations of this device
        assert held >= weights_and_state
        # plus activations of 64 rows (a few (64, 1024) buffers): far below the unsharded model
        assert held - weights_and_state < 4 * 2**20
        assert 0.45 * unsharded < held < 0.6 * unsharded
        assert info["peak"] >= info["current"]
    # the unsharded copy (get_weights, checkpoints) is the host's, not a device's
    assert tf._core.host_memory_info()["current"] - host_before >= params * 4 * 2


def test_mirrored_replicas_each_hold_a_whole_copy(logical_cpus):
    logical_cpus(2)
    x, y = _data()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    gc.collect()
    before = get_memory_info("CPU:1")["current"]
    with strategy.scope():
        model = _compiled(_mlp())
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    params = (784 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 10 + 10)
    # replica 1: whole weights and gradients, half the Adam slots (ZeRO-1 over 2 replicas)
    held = get_memory_info("CPU:1")["current"] - before
    assert params * 4 * 3 <= held < params * 4 * 3 + 4 * 2**20
    del model


def test_peak_and_reset(logical_cpus):
    logical_cpus(2)
    x, y = _data()
    model = _compiled(_mlp())
    model.fit(x, y, batch_size=128, epochs=1, verbose=0)
    info = get_memory_info("CPU:0")
    assert info["peak"] >= info["current"] > 0
    reset_memory_stats("/device:CPU:0")
    after = get_memory_info("CPU:0")
    assert after["peak"] == after["current"]
    # a forward on a bigger batch needs bigger activations for a while: the peak rises past current
    model.predict(np.zeros((2048, 784), np.float32), batch_size=2048, verbose=0)
    again = get_memory_info("CPU:0")
    assert again["peak"] >= after["current"] + 2048 * 1024 * 4


@pytest.mark.parametrize("name, message", [("GPU", "Failed parsing device name"), ("CPU:", "Failed parsing"),
                                           ("nonexistent", "Failed parsing"), ("CPU:7", "No matching devices"),
                                           ("GPU:0", "No matching devices")])
def test_device_names_are_checked_like_tf(logical_cpus, name, message):
    if name == "GPU:0" and tf.config.list_logical_devices("GPU"):
        pytest.skip("this machine has a GPU 0")
    logical_cpus(2)
    with pytest.raises(ValueError, match=message):
        get_memory_info(name)
    with pytest.raises(ValueError, match=message):
        reset_memory_stats(name)
