"""Functional models under the strategies that split or cut the network: a small ResNet-style CNN
(residual Add blocks) trains under ModelParallel (Conv2D split by output channels, a column/row
Dense pair at the head, on a (1, 2) and a 2x2 (batch, model) mesh) to the losses and weights of one
device, to float32 rounding (rtol 1e-5 on losses, 1e-4 / atol 2e-6 on weights after Adam steps, as
test_model_parallel.py)."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import assert_same_training, fit_for_comparison

keras = tf.keras
layers = tf.keras.layers
distribution = tf.keras.distribution


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((96, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 10, size=96)
    return x, y


def _residual_cnn(seed=11):
    tf.keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inputs)
    for b in range(2):
        h = layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block{b}_conv1")(x)
        h = layers.Conv2D(8, 3, padding="same", name=f"block{b}_conv2")(h)
        x = layers.Activation("relu", name=f"block{b}_relu")(layers.Add(name=f"block{b}_add")([x, h]))
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    x = layers.Dense(32, activation="relu", name="up")(x)
    x = layers.Dropout(0.25, seed=5, name="drop")(x)
    outputs = layers.Dense(10, name="head")(x)
    return keras.Model(inputs, outputs, name="residual_cnn")


def _layout_map(mesh):
    layout_map = distribution.LayoutMap(mesh)
    for name in ["stem", "block0_conv1", "block0_conv2", "block1_conv2"]:
        layout_map[f"{name}/kernel"] = (None, None, None, "model")
    layout_map["up/kernel"] = (None, "model")    # column-parallel; its output stays split ...
    layout_map["head/kernel"] = ("model", None)  # ... through the Dropout into the row-parallel head
    return layout_map


def _train(strategy, x, y, epochs=2, batch_size=20):
    return fit_for_comparison(strategy, _residual_cnn, x, y, epochs, batch_size)


@pytest.mark.parametrize("mesh_shape", [(1, 2), (2, 2)])
def test_residual_cnn_under_model_parallel_trains_like_one_device(logical_cpus, images, mesh_shape):
    logical_cpus(4)
    x, y = images
    devices = distribution.list_devices()[:int(np.prod(mesh_shape))]
    mesh = distribution.DeviceMesh(mesh_shape, ("batch", "model"), devices=devices)
    mp = distribution.ModelParallel(layout_map=_layout_map(mesh), batch_dim_name="batch")
    split = _train(mp, x, y)
    one = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y)
    assert_same_training(split, one)
    # the training moved the weights (the comparison is not between two untrained models)
    start = _residual_cnn().get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(split[0].get_weights(), start))
    # each device holds half of every split weight (the kernels named in the layout map and the
    # biases that follow them; head's bias is replicated) and the whole of the others
    model = split[0]
    by_name = {layer.name: layer for layer in model.layers}
    split_bytes = sum(w.nbytes for name in ["stem", "block0_conv1", "block0_conv2", "block1_conv2", "up"]
                      for w in by_name[name].get_weights()) + by_name["head"].get_weights()[0].nbytes
    whole_bytes = sum(w.nbytes for w in model.get_weights())
    per_device = mp.memory_per_device(model)
    assert [d["weights"] for d in per_device] == [whole_bytes - split_bytes // 2] * int(np.prod(mesh_shape))
    # evaluation and prediction run through the shards too
    np.testing.assert_allclose(split[0].predict(x, verbose=0), one[0].predict(x, verbose=0), rtol=1e-4, atol=2e-5)


def test_a_layout_for_a_merge_layer_is_refused_naming_it(logical_cpus, images):
    logical_cpus(2)
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=distribution.list_devices()[:2])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["pool/kernel"] = (None, "model")
    mp = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with pytest.raises(ValueError, match="pool"):
        _train(mp, *images, epochs=1)
