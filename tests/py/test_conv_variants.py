"""The convolution variants (Conv2DTranspose, Conv1DTranspose, DepthwiseConv2D, SeparableConv2D)
against Keras 3 on TF (skipped without it): Keras loads mdtrain's .keras file of each model
(initial weights), and its predictions, losses and weights after 3 SGD epochs match ours (a Dense
after the layer, so the layer's weights and input gradient are both exercised); Keras's own .keras
files load here and predict alike; configs are Keras's; MirroredStrategy over 2 devices trains as
one; under ModelParallel the layers run replicated beside a split Dense; ONNX files compute what
predict does; bad arguments raise Keras's errors."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from conftest import assert_same_training, fit_for_comparison
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

# name: (input shape without the batch, the layer's class, its arguments)
CASES = {
    "t2d_same": ((5, 6, 2), "Conv2DTranspose", dict(filters=3, kernel_size=3, strides=2, padding="same",
                                                   activation="tanh")),
    "t2d_valid_output_padding": ((4, 3, 2), "Conv2DTranspose", dict(filters=2, kernel_size=(3, 2), strides=(2, 3),
                                                                   output_padding=(1, 2))),
    "t2d_even_same": ((4, 4, 3), "Conv2DTranspose", dict(filters=2, kernel_size=4, strides=2, padding="same")),
    "t2d_dilated": ((4, 5, 2), "Conv2DTranspose", dict(filters=2, kernel_size=3, dilation_rate=2, use_bias=False)),
    "t1d_same": ((8, 3), "Conv1DTranspose", dict(filters=4, kernel_size=4, strides=2, padding="same",
                                                output_padding=1)),
    "t1d_valid": ((7, 2), "Conv1DTranspose", dict(filters=3, kernel_size=2, strides=3, activation="relu")),
    "dw_same": ((6, 6, 2), "DepthwiseConv2D", dict(kernel_size=3, depth_multiplier=2, padding="same",
                                                  activation="relu")),
    "dw_strided": ((7, 6, 3), "DepthwiseConv2D", dict(kernel_size=(3, 2), strides=2)),
    "dw_dilated": ((7, 7, 2), "DepthwiseConv2D", dict(kernel_size=3, dilation_rate=2, padding="same",
                                                     use_bias=False)),
    "sep_same": ((6, 6, 2), "SeparableConv2D", dict(filters=4, kernel_size=3, depth_multiplier=2, padding="same",
                                                   activation="relu")),
    "sep_strided": ((7, 6, 3), "SeparableConv2D", dict(filters=3, kernel_size=(2, 3), strides=2, use_bias=False)),
    "sep_dilated": ((7, 7, 2), "SeparableConv2D", dict(filters=2, kernel_size=3, dilation_rate=(2, 1),
                                                      depth_multiplier=3)),
}


def data(shape, rows=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (rows, *shape)).astype(np.float32), rng.uniform(-1, 1, (rows, 2)).astype(np.float32)


def model_of(name, seed=0):
    """Input -> the layer -> Flatten -> Dense(2), compiled for SGD on mse."""
    shape, cls, kwargs = CASES[name]
    tf.keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input(shape), getattr(L, cls)(**kwargs), L.Flatten(), L.Dense(2, name="after")])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """For every case, from mdtrain's .keras file (initial weights): Keras's predictions, the
    layer's config and weight paths, losses and weights after 3 SGD epochs, and Keras's own file."""
    tmp = tmp_path_factory.mktemp("conv_variants")
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape)
        np.savez(tmp / f"data_{name}.npz", x=x, y=y)
        model_of(name).save(tmp / f"ours_{name}.keras")
    run_keras(f"""
        import numpy as np, keras
        for name in {sorted(CASES)!r}:
            d = np.load(f"data_{{name}}.npz")
            m = keras.models.load_model(f"ours_{{name}}.keras", compile=False)
            layer = m.layers[0]
            out = m.predict(d["x"], verbose=0)
            config = {{k: v for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype")}}
            paths = [w.path.split("/", 1)[1] for w in layer.weights]
            m.save(f"keras_{{name}}.keras")
            m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
            h = m.fit(d["x"], d["y"], batch_size=4, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", out, np.array(h.history["loss"]), *m.get_weights())
            with open(f"config_{{name}}.txt", "w") as f:
                f.write(repr((config, paths)))
    """, tmp, timeout=600)
    return tmp


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


def _comparable(config):
    """A layer config with tuples as lists and initializers as their class names: Keras writes
    an initializer's module and default arguments, which the .keras reader fills in either way."""
    return {k: v["class_name"] if k.endswith("_initializer") else _normalized(v) for k, v in config.items()
            if k not in ("name", "trainable", "dtype")}


def _keras_config(keras_runs, name):
    config, paths = eval(open(keras_runs / f"config_{name}.txt").read())  # noqa: S307 (our own file)
    return _comparable(config), paths


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_and_sgd_steps_match_keras_from_our_keras_file(keras_runs, name):
    shape, _, _ = CASES[name]
    x, y = data(shape)
    model = model_of(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_0"], rtol=1e-5, atol=1e-6)
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_1"], rtol=1e-5)
    weights = model.get_weights()
    assert len(weights) == len(theirs.files) - 2
    for i, w in enumerate(weights):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 2}"], rtol=1e-4, atol=1e-6, err_msg=f"weight {i}")
    assert not np.allclose(model.get_weights()[0], model_of(name).get_weights()[0])  # the layer trained
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_configs_weight_names_and_shapes_are_kerass(keras_runs, name):
    keras_config, keras_paths = _keras_config(keras_runs, name)
    layer = model_of(name).layers[0]
    assert _comparable(layer.get_config()) == keras_config
    assert [n.split("/", 1)[1] for n in layer._core.weight_names()] == keras_paths
    assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize("name", sorted(CASES))
def test_kerass_keras_file_loads_and_predicts_the_same(keras_runs, name):
    shape, cls, _ = CASES[name]
    x, _ = data(shape)
    loaded = keras.models.load_model(keras_runs / f"keras_{name}.keras")
    assert type(loaded.layers[0]).__name__ == cls
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model_of(name).predict(x, verbose=0), rtol=1e-6,
                               atol=1e-6)


def test_keras_archive_round_trip_keeps_every_layer(tmp_path):
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape)
        model = model_of(name)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        model.save(tmp_path / f"{name}.keras")
        loaded = keras.models.load_model(tmp_path / f"{name}.keras")
        assert loaded.layers[0].get_config() == model.layers[0].get_config()
        np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0), err_msg=name)


def test_two_replicas_train_as_one(logical_cpus):
    logical_cpus(2)
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape)
        one = model_of(name)
        one.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            two = model_of(name)
        two.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        for a, b in zip(one.get_weights(), two.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def _generator(seed=3):
    """Every variant in one small model before a Megatron pair of Dense layers."""
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5, 5, 2)), L.Conv2DTranspose(2, 3, strides=2, padding="same"),
                             L.DepthwiseConv2D(3, depth_multiplier=2), L.SeparableConv2D(3, 3, activation="relu"),
                             L.Reshape((12, 9)), L.Conv1DTranspose(2, 3, strides=2, padding="same"), L.Flatten(),
                             L.Dense(16, activation="relu", name="hidden"), L.Dense(3, name="out")])


def test_the_layers_run_replicated_beside_a_split_dense(logical_cpus):
    logical_cpus(2)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(24, 5, 5, 2)).astype(np.float32), rng.integers(0, 3, 24)
    distribution = tf.keras.distribution
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=["cpu:0", "cpu:1"])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden/kernel"] = (None, "model")
    layout_map["hidden/bias"] = ("model",)
    layout_map["out/kernel"] = ("model", None)
    split = fit_for_comparison(distribution.ModelParallel(layout_map=layout_map), _generator, x, y, 2, 8,
                               optimizer="sgd")
    one = fit_for_comparison(tf.distribute.OneDeviceStrategy("/cpu:0"), _generator, x, y, 2, 8, optimizer="sgd")
    assert_same_training(split, one)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_files_compute_what_predict_does(tmp_path):
    import onnxruntime
    for name, (shape, _, _) in CASES.items():
        x, _ = data(shape, rows=5)
        model = model_of(name)
        path = tmp_path / f"{name}.onnx"
        model.export(str(path), format="onnx", verbose=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-5, atol=1e-6, err_msg=name)


def test_aliases_and_default_names_are_kerass():
    assert L.Convolution2DTranspose is L.Conv2DTranspose and L.Convolution1DTranspose is L.Conv1DTranspose
    assert L.SeparableConvolution2D is L.SeparableConv2D
    for layer, prefix in ((L.Conv2DTranspose(2, 3), "conv2d_transpose"), (L.Conv1DTranspose(2, 3), "conv1d_transpose"),
                          (L.DepthwiseConv2D(3), "depthwise_conv2d"), (L.SeparableConv2D(2, 3), "separable_conv2d")):
        assert layer.name.startswith(prefix)
    t = L.Conv2DTranspose(2, 3)
    assert t.output_padding is None and t.strides == (1, 1) and t.padding == "valid"
    assert L.Conv1DTranspose(2, 3, output_padding=0, strides=2).output_padding == (0,)
    assert L.DepthwiseConv2D(3).depth_multiplier == 1 and L.SeparableConv2D(2, 3).filters == 2
    model = keras.Sequential([keras.Input((6, 6, 2)), L.SeparableConv2D(4, 3, depth_multiplier=3)])
    sep = model.layers[0]
    assert sep.depthwise_kernel.shape == (3, 3, 2, 3) and sep.pointwise_kernel.shape == (1, 1, 6, 4)
    assert sep.bias.shape == (4,)


# (class, arguments, Keras's exception, a part of its message). Keras's own behaviour is checked in
# test_keras_raises_the_same_errors.
BAD_ARGUMENTS = [
    ("Conv2DTranspose", {"filters": 0, "kernel_size": 3}, ValueError, r"Invalid value for argument `filters`"),
    ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 2}, ValueError,
     r"`output_padding` must be strictly less than `strides`"),
    ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "strides": 2, "dilation_rate": 2}, ValueError,
     r"`strides > 1` not supported in conjunction with `dilation_rate > 1`"),
    ("Conv2DTranspose", {"filters": 2, "kernel_size": (3, 3, 3)}, ValueError,
     r"The `kernel_size` argument must be a tuple of 2 integers"),
    ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "output_padding": -1}, ValueError,
     r"that do not satisfy `value >= 0`"),
    ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "padding": "causal"}, ValueError, r"padding"),
    ("Conv1DTranspose", {"filters": 2, "kernel_size": (3, 3)}, ValueError,
     r"The `kernel_size` argument must be a tuple of 1 integers"),
    ("Conv1DTranspose", {"filters": 2, "kernel_size": 0}, ValueError, r"kernel_size"),
    ("DepthwiseConv2D", {"kernel_size": 3, "depth_multiplier": 0}, ValueError,
     r"Invalid value for argument `depth_multiplier`"),
    ("DepthwiseConv2D", {"kernel_size": 3, "strides": 0}, ValueError, r"strides"),
    ("SeparableConv2D", {"filters": 0, "kernel_size": 3}, ValueError, r"Invalid value for argument `filters`"),
    ("SeparableConv2D", {"filters": 2, "kernel_size": 3, "depth_multiplier": -1}, ValueError,
     r"Invalid value for argument `depth_multiplier`"),
]


@pytest.mark.parametrize("cls,kwargs,error,pattern", BAD_ARGUMENTS)
def test_bad_arguments_name_the_layer_and_the_argument(cls, kwargs, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        getattr(L, cls)(name="bad", **kwargs)
    assert '"bad"' in str(info.value)


def test_keras_raises_the_same_errors(tmp_path):
    out = run_keras(f"""
        import keras
        for cls, kwargs in {[(c, k) for c, k, _, _ in BAD_ARGUMENTS]!r}:
            try:
                getattr(keras.layers, cls)(**kwargs)
                print("none")
            except Exception as e:
                print(type(e).__name__)
    """, tmp_path)
    assert out.split() == [error.__name__ for _, _, error, _ in BAD_ARGUMENTS]


@pytest.mark.parametrize("make,error,pattern", [
    (lambda: L.Conv2DTranspose(2, 3, data_format="channels_first"), ValueError, r"channels_first.* is not supported"),
    (lambda: L.DepthwiseConv2D(3, data_format="channels_first"), ValueError, r"channels_first.* is not supported"),
    (lambda: L.SeparableConv2D(2, 3, depthwise_constraint="non_neg"), NotImplementedError,
     r"depthwise_constraint is not supported"),
    (lambda: L.Conv1DTranspose(2, 3, activity_regularizer="l2"), NotImplementedError,
     r"activity_regularizer is not supported"),
    # TF aborts at run time on this one; mdtrain refuses it when the layer is built.
    (lambda: keras.Sequential([keras.Input((4, 4, 2)), L.Conv2DTranspose(2, 2, strides=2, padding="same",
                                                                         output_padding=0, name="t")]),
     ValueError, r'layer "t": padding="same" with kernel_size \(2, 2\).*output_padding \(0, 0\)'),
    (lambda: keras.Sequential([keras.Input((4, 4)), L.DepthwiseConv2D(3, name="d")]), ValueError,
     r'layer "d".*expected ndim=4, found ndim=3'),
    (lambda: keras.Sequential([keras.Input((2, 5, 1)), L.SeparableConv2D(2, 3, name="s")]), ValueError,
     r'layer "s": kernel_size \(3, 3\) is larger than the input'),
])
def test_unsupported_and_bad_inputs_are_clear_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()
