"""Convolutional layers from Python: Keras shapes and weights, values against NumPy references of
TF's formulas, training (one device and MirroredStrategy), save/load, and the errors Keras raises."""
import numpy as np
import pytest

import mdtrain as tf

L = tf.keras.layers


# ---- references, written from TF's definitions ---------------------------------------------------

def _same_pad(size, k, stride, dilation):
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return out, total // 2, total - total // 2


def conv2d_reference(x, kernel, bias, strides, padding, dilation):
    """NHWC convolution in float64 by explicit loops over the kernel taps."""
    n, h, w, _ = x.shape
    kh, kw, _, f = kernel.shape
    (sh, sw), (dh, dw) = strides, dilation
    if padding == "same":
        oh, top, bottom = _same_pad(h, kh, sh, dh)
        ow, left, right = _same_pad(w, kw, sw, dw)
    else:
        oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
        top = bottom = left = right = 0
    xp = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    y = np.zeros((n, oh, ow, f))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            y += patch @ kernel[i, j].astype(np.float64)
    return y + (0 if bias is None else bias)


def make_blobs_images(n=192, size=12, seed=0):
    """A learnable 3-class image problem: a bright 3x3 square in one of three places, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    x = rng.normal(0, 0.3, size=(n, size, size, 1)).astype(np.float32)
    corners = [(1, 1), (1, size - 4), (size - 4, size // 2 - 1)]
    for k, (r, c) in enumerate(corners):
        x[y == k, r:r + 3, c:c + 3, 0] += 2.0
    return x, y


def make_cnn(seed=0, head="gap", input_shape=(12, 12, 1)):
    tf.keras.utils.set_random_seed(seed)
    layers = [L.Conv2D(6, 3, activation="relu", padding="same", input_shape=input_shape),
              L.MaxPooling2D(),
              L.Conv2D(8, (3, 3), strides=(1, 1), activation="relu")]
    layers += [L.GlobalAveragePooling2D()] if head == "gap" else [L.Flatten()]
    layers.append(L.Dense(3))
    return tf.keras.Sequential(layers)


def compile_cnn(model, optimizer=None):
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


# ---- training -------------------------------------------------------------------------------------

@pytest.mark.parametrize("head", ["gap", "flatten"])
def test_small_cnn_fits_and_loss_decreases(head):
    x, y = make_blobs_images()
    model = compile_cnn(make_cnn(head=head))
    history = model.fit(x, y, epochs=6, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0], losses
    assert history.history["accuracy"][-1] > 0.8
    assert model.predict(x[:5], verbose=0).shape == (5, 3)


def test_user_cnn_trains_on_28x28x1_images():
    """The CNN a user writes for MNIST-shaped data, on (N, 28, 28, 1) input."""
    rng = np.random.default_rng(1)
    n = 256
    y = rng.integers(0, 4, size=n)
    x = rng.uniform(0, 0.2, size=(n, 28, 28, 1)).astype(np.float32)
    for k in range(4):  # class k: a vertical bar at column 4 + 6k
        x[y == k, 4:24, 4 + 6 * k: 6 + 6 * k, 0] = 1.0
    tf.keras.utils.set_random_seed(2)
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28, 1)),
        L.Conv2D(16, kernel_size=(3, 3), activation="relu"),
        L.MaxPooling2D(pool_size=(2, 2)),
        L.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        L.MaxPooling2D(pool_size=(2, 2)),
        L.Flatten(),
        L.Dropout(0.25),
        L.Dense(4, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    assert model.output_shape == (None, 4)
    history = model.fit(x, y, batch_size=32, epochs=3, validation_split=0.25, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert accuracy > 0.9


@pytest.mark.parametrize("replicas", [2])
def test_mirrored_strategy_matches_one_replica(logical_cpus, replicas):
    x, y = make_blobs_images(n=64)
    single = compile_cnn(make_cnn(seed=3), optimizer=tf.keras.optimizers.SGD(0.1))
    single.train_on_batch(x, y)
    logical_cpus(replicas)
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync == replicas
    with strategy.scope():
        mirrored = compile_cnn(make_cnn(seed=3), optimizer=tf.keras.optimizers.SGD(0.1))
    mirrored.train_on_batch(x, y)
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    # Replicas stay identical, and predictions split across replicas equal one device's.
    weights = [mirrored._core.replica_weights(r) for r in range(replicas)]
    assert all(np.array_equal(a, b) for a, b in zip(weights[0], weights[1]))
    np.testing.assert_allclose(single.predict(x, verbose=0), mirrored.predict(x, verbose=0), rtol=0, atol=1e-5)


def test_mirrored_fit_epoch_matches_one_replica(logical_cpus):
    x, y = make_blobs_images(n=100)  # 100 = 3 full batches of 32 and an uneven last one of 4
    single = compile_cnn(make_cnn(seed=4))
    h1 = single.fit(x, y, epochs=1, batch_size=32, verbose=0)
    logical_cpus(2)
    with tf.distribute.MirroredStrategy().scope():
        mirrored = compile_cnn(make_cnn(seed=4))
    h2 = mirrored.fit(x, y, epochs=1, batch_size=32, verbose=0)
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    assert h1.history["loss"][0] == pytest.approx(h2.history["loss"][0], rel=1e-5)


# ---- save / load, weights, configs ----------------------------------------------------------------

def test_save_load_round_trip_gives_the_same_predictions(tmp_path):
    x, y = make_blobs_images(n=64)
    tf.keras.utils.set_random_seed(5)
    model = tf.keras.Sequential([
        L.Conv2D(4, (3, 2), strides=2, padding="same", activation="tanh", input_shape=(12, 12, 1)),
        L.AveragePooling2D(pool_size=3, strides=1, padding="same"),
        L.Conv2D(5, 2, dilation_rate=2, kernel_regularizer="l2", use_bias=False),
        L.MaxPooling2D(pool_size=(2, 2), strides=(1, 2)),
        L.Reshape((-1, 5)),
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    path = tmp_path / "cnn.mdtrain"
    model.save(path)
    restored = tf.keras.models.load_model(path)
    assert [type(l).__name__ for l in restored.layers] == [type(l).__name__ for l in model.layers]
    def config(layer):  # the declared input shape lives on the model, not in a loaded layer
        return {k: v for k, v in layer.get_config().items() if k != "batch_input_shape"}

    assert [config(l) for l in restored.layers] == [config(l) for l in model.layers]
    assert np.array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))
    conv = restored.layers[0]
    assert isinstance(conv, L.Conv2D)
    assert (conv.filters, conv.kernel_size, conv.strides, conv.padding) == (4, (3, 2), (2, 2), "same")
    assert restored.layers[4].target_shape == (-1, 5)
    # Training continues identically from the file.
    model.fit(x, y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    restored.fit(x, y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), restored.get_weights()):
        assert np.array_equal(a, b)


def test_weights_and_param_counts_match_keras():
    model = tf.keras.Sequential([
        L.Conv2D(32, 3, input_shape=(28, 28, 1)),
        L.Conv2D(64, (5, 3), use_bias=False),
        L.MaxPooling2D(),
        L.Conv2D(10, 1),
        L.GlobalAveragePooling2D(),
    ])
    shapes = [w.shape for w in model.get_weights()]
    assert shapes == [(3, 3, 1, 32), (32,), (5, 3, 32, 64), (1, 1, 64, 10), (10,)]
    assert [l.count_params() for l in model.layers] == [320, 30720, 0, 650, 0]
    assert model.output_shape == (None, 10)
    assert [l.output_shape for l in model.layers] == [(None, 26, 26, 32), (None, 22, 24, 64), (None, 11, 12, 64),
                                                      (None, 11, 12, 10), (None, 10)]
    assert model.layers[0].kernel.shape == (3, 3, 1, 32) and model.layers[1].bias is None


def test_default_names_and_config_are_kerass():
    tf.keras.backend.clear_session()
    layers = [L.Conv2D(2, 3), L.Conv2D(2, 3), L.MaxPooling2D(), L.AveragePooling2D(), L.GlobalAveragePooling2D(),
              L.Reshape((4, -1)), L.MaxPool2D()]
    assert [l.name for l in layers] == ["conv2d", "conv2d_1", "max_pooling2d", "average_pooling2d",
                                        "global_average_pooling2d", "reshape", "max_pooling2d_1"]
    c = L.Conv2D(8, 5, strides=2, padding="SAME", activation="relu", name="c").get_config()
    assert c["filters"] == 8 and c["kernel_size"] == [5, 5] and c["strides"] == [2, 2]
    assert c["padding"] == "same" and c["data_format"] == "channels_last" and c["dilation_rate"] == [1, 1]
    assert c["activation"] == "relu" and c["kernel_initializer"]["class_name"] == "GlorotUniform"
    assert L.MaxPooling2D(pool_size=3, name="p").get_config()["strides"] == [3, 3]
    assert L.GlobalAveragePooling2D(keepdims=True, name="g").get_config()["keepdims"] is True
    assert L.Reshape((4, -1), name="r").get_config()["target_shape"] == [4, -1]
    for layer in (L.Conv2D(3, (2, 3), dilation_rate=2, name="a"), L.AveragePooling2D(2, 1, "same", name="b"),
                  L.GlobalAveragePooling2D(keepdims=True, name="g2"), L.Reshape((-1,), name="r2")):
        again = type(layer).from_config(layer.get_config())
        assert again.get_config() == layer.get_config()


# ---- values ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("padding,strides,dilation,size", [
    ("valid", 1, 1, (7, 7)), ("same", 1, 1, (7, 6)), ("same", 2, 1, (8, 7)), ("valid", 2, 1, (7, 8)),
    ("same", 1, 2, (7, 7)), ("valid", 1, 2, (8, 6)),
])
def test_conv2d_matches_the_reference(padding, strides, dilation, size):
    rng = np.random.default_rng(7)
    conv = L.Conv2D(4, (3, 2), strides=strides, padding=padding, dilation_rate=dilation, input_shape=(*size, 3))
    model = tf.keras.Sequential([conv])
    kernel = rng.normal(size=(3, 2, 3, 4)).astype(np.float32)
    bias = rng.normal(size=4).astype(np.float32)
    conv.set_weights([kernel, bias])
    x = rng.normal(size=(5, *size, 3)).astype(np.float32)
    want = conv2d_reference(x, kernel, bias, (strides, strides), padding, (dilation, dilation))
    got = model.predict(x, verbose=0)
    assert got.shape == want.shape == (5, *model.output_shape[1:])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pooling_values_follow_tf():
    x = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    avg = tf.keras.Sequential([L.AveragePooling2D(2, 2, "same", input_shape=(3, 3, 1))]).predict(x, verbose=0)
    mx = tf.keras.Sequential([L.MaxPooling2D(2, 2, "same", input_shape=(3, 3, 1))]).predict(x, verbose=0)
    np.testing.assert_array_equal(avg[0, :, :, 0], [[3.0, 4.5], [7.5, 9.0]])  # padding not counted
    np.testing.assert_array_equal(mx[0, :, :, 0], [[5, 6], [8, 9]])
    x = np.random.default_rng(0).normal(size=(2, 5, 4, 3)).astype(np.float32)
    gap = tf.keras.Sequential([L.GlobalAveragePooling2D(input_shape=(5, 4, 3))]).predict(x, verbose=0)
    np.testing.assert_allclose(gap, x.mean(axis=(1, 2)), rtol=1e-6, atol=1e-7)
    gap_keep = tf.keras.Sequential([L.GlobalAveragePooling2D(keepdims=True, input_shape=(5, 4, 3))])
    assert gap_keep.output_shape == (None, 1, 1, 3)
    reshaped = tf.keras.Sequential([L.Reshape((-1, 6), input_shape=(5, 4, 3))]).predict(x, verbose=0)
    np.testing.assert_array_equal(reshaped, x.reshape(2, -1, 6))


# ---- errors ---------------------------------------------------------------------------------------

def test_kernel_larger_than_input_names_layer_shape_and_kernel():
    with pytest.raises(ValueError, match=r'layer "conv2d".*kernel_size \(5, 5\).*\(None, 4, 4, 1\)'):
        tf.keras.Sequential([L.Conv2D(3, 5, input_shape=(4, 4, 1), name="conv2d")])
    with pytest.raises(ValueError, match=r'layer "pool".*pool_size \(3, 3\).*\(None, 2, 2, 1\)'):
        tf.keras.Sequential([L.MaxPooling2D(3, input_shape=(2, 2, 1), name="pool")])


def test_three_dimensional_input_is_keras_rank_error():
    message = ('Input 0 of layer "conv2d" is incompatible with the layer: expected ndim=4, found ndim=3. '
               "Full shape received: (None, 28, 28)")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tf.keras.Sequential([L.Conv2D(32, 3, input_shape=(28, 28), name="conv2d")])
    model = tf.keras.Sequential([L.Conv2D(4, 3, name="conv2d"), L.Flatten(), L.Dense(2)])
    with pytest.raises(ValueError, match="expected ndim=4, found ndim=3"):
        model.predict(np.zeros((2, 28, 28), np.float32), verbose=0)  # the model builds on its first data


def test_channel_mismatch_names_layer_and_shapes():
    model = tf.keras.Sequential([L.Conv2D(4, 3, input_shape=(8, 8, 3), name="conv2d")])
    with pytest.raises(ValueError, match=r'layer "conv2d".*axis -1 of input shape to have value 3.*\(2, 8, 8, 1\)'):
        model.predict(np.zeros((2, 8, 8, 1), np.float32), verbose=0)


@pytest.mark.parametrize("kwargs,pattern", [
    ({"filters": 0, "kernel_size": 3}, r"Invalid value for argument `filters`.*Received filters=0"),
    ({"filters": -4, "kernel_size": 3}, r"Received filters=-4"),
    ({"filters": 2.5, "kernel_size": 3}, r"Received filters=2.5"),
    ({"filters": 2, "kernel_size": (3, 3, 3)}, r"`kernel_size` argument must be a tuple of 2 integers. Received kernel_size=\(3, 3, 3\)"),
    ({"filters": 2, "kernel_size": 0}, r"kernel_size=\(0, 0\), including values \{0\} that do not satisfy `value > 0`"),
    ({"filters": 2, "kernel_size": "3"}, r"`kernel_size` argument must be a tuple of 2 integers"),
    ({"filters": 2, "kernel_size": (3, 1.5)}, r"`kernel_size`.*including element 1.5"),
    ({"filters": 2, "kernel_size": 3, "strides": -1}, r"`strides` argument.*including values \{-1\}"),
    ({"filters": 2, "kernel_size": 3, "strides": (1, 1, 1)}, r"`strides` argument must be a tuple of 2"),
    ({"filters": 2, "kernel_size": 3, "dilation_rate": (0, 1)}, r"`dilation_rate` argument"),
    ({"filters": 2, "kernel_size": 3, "strides": 2, "dilation_rate": 2},
     r"`strides > 1` not supported in conjunction with `dilation_rate > 1`"),
    ({"filters": 2, "kernel_size": 3, "padding": "full"}, r"`padding` argument.*Received: padding=full"),
    ({"filters": 2, "kernel_size": 3, "data_format": "channels_first"}, r'data_format="channels_first" is not supported'),
])
def test_bad_conv2d_arguments_are_value_errors_naming_layer_and_argument(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        L.Conv2D(name="bad_conv", **kwargs)
    assert 'layer "bad_conv"' in str(info.value)


@pytest.mark.parametrize("cls,kwargs,pattern", [
    (L.MaxPooling2D, {"pool_size": (2, 2, 2)}, r"`pool_size` argument must be a tuple of 2"),
    (L.MaxPooling2D, {"pool_size": 2, "strides": 0}, r"`strides` argument.*including values \{0\}"),
    (L.AveragePooling2D, {"padding": "causal"}, r"`padding` argument"),
    (L.AveragePooling2D, {"data_format": "channels_first"}, r"channels_first"),
    (L.GlobalAveragePooling2D, {"data_format": "channels_first"}, r"channels_first"),
    (L.Reshape, {"target_shape": (-1, -1)}, r"at most one unknown dimension \(-1\)"),
    (L.Reshape, {"target_shape": (2, "a")}, r"target_shape must be a tuple of integers"),
])
def test_bad_pooling_and_reshape_arguments(cls, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        cls(name="bad_layer", **kwargs)
    assert 'layer "bad_layer"' in str(info.value)


def test_reshape_size_mismatch_is_a_value_error():
    with pytest.raises(ValueError, match=r'layer "reshape".*must be unchanged.*input_shape=\(4, 4, 1\), '
                                         r"target_shape=\(3, 5\)"):
        tf.keras.Sequential([L.Reshape((3, 5), input_shape=(4, 4, 1), name="reshape")])
