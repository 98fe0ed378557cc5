"""The activation layers with arguments (ReLU, LeakyReLU, ELU, PReLU, Softmax) and
UnitNormalization against Keras 3 on TF (skipped without it): Keras loads mdtrain's .keras file of
each model, and its layer outputs, predictions, losses and weights after 3 SGD epochs (a Dense
before the layer, so its gradient flows through the layer's backward) match ours; Keras's own
.keras files load here (a PReLU with Keras's own random alpha too); the derivatives at the kinks
are TF's; MirroredStrategy on 2 devices trains as one, and ModelParallel passes a split activation
through the element-wise ones; ONNX files compute what predict does; configs, masks and bad
arguments as Keras's."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from conftest import assert_same_training, fit_for_comparison
from keras_oracle import run_keras
from mdtrain.keras.layers import mask_after

keras = tf.keras
L = keras.layers

# name: (input shape without the batch, the layer, its config as Keras writes it)
CASES = {
    "relu": ((3, 4), lambda: L.ReLU(), {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}),
    "relu_arguments": ((3, 4), lambda: L.ReLU(max_value=0.8, negative_slope=0.2, threshold=0.1),
                       {"max_value": 0.8, "negative_slope": 0.2, "threshold": 0.1}),
    "relu6_leaky": ((3, 4), lambda: L.ReLU(max_value=6.0, negative_slope=0.3),
                    {"max_value": 6.0, "negative_slope": 0.3, "threshold": 0.0}),
    "relu_threshold": ((3, 4), lambda: L.ReLU(threshold=0.2), {"max_value": None, "negative_slope": 0.0,
                                                               "threshold": 0.2}),
    "leaky_relu": ((3, 4), lambda: L.LeakyReLU(), {"negative_slope": 0.3}),
    "leaky_relu_slope": ((3, 4), lambda: L.LeakyReLU(negative_slope=0.05), {"negative_slope": 0.05}),
    "elu": ((3, 4), lambda: L.ELU(), {"alpha": 1.0}),
    "elu_alpha": ((3, 4), lambda: L.ELU(alpha=0.4), {"alpha": 0.4}),
    "prelu": ((3, 4), lambda: L.PReLU(alpha_initializer="ones"),
              {"alpha_initializer": {"class_name": "Ones", "config": {}}, "alpha_regularizer": None,
               "alpha_constraint": None, "shared_axes": None}),
    "prelu_shared": ((3, 4, 5), lambda: L.PReLU(shared_axes=[1, 2], alpha_regularizer="l2"),
                     {"alpha_initializer": {"class_name": "Zeros", "config": {}},
                      # "l2" is written as L1L2, as mdtrain's regularizers write it (Keras reads it back)
                      "alpha_regularizer": {"class_name": "L1L2", "config": {"l1": 0.0, "l2": 0.01}},
                      "alpha_constraint": None,
                      "shared_axes": [1, 2]}),
    "softmax": ((3, 4), lambda: L.Softmax(), {"axis": -1}),
    "softmax_axis1": ((3, 4), lambda: L.Softmax(axis=1), {"axis": 1}),
    "softmax_axes": ((3, 4, 5), lambda: L.Softmax(axis=(1, 3)), {"axis": [1, 3]}),
    "unit_normalization": ((3, 4), lambda: L.UnitNormalization(), {"axis": -1}),
    "unit_normalization_axes": ((3, 4, 5), lambda: L.UnitNormalization(axis=[1, 2]), {"axis": [1, 2]}),
}


def data(shape, rows=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (rows, *shape)).astype(np.float32), rng.uniform(-1, 1, (rows, 3)).astype(np.float32)


def model_of(name, seed=0):
    """Input -> Dense(2) -> the layer -> Flatten -> Dense(3), compiled for SGD on mse."""
    shape, layer, _ = CASES[name]
    tf.keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input(shape), L.Dense(2, name="before"), layer(), L.Flatten(),
                              L.Dense(3, name="after")])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """For every case, from mdtrain's .keras file of its model (initial weights): Keras's layer
    output, predictions, weights after 3 SGD epochs and losses; Keras's own .keras file and what it
    predicts once Keras reloads it; and a PReLU model Keras made with its own random alpha."""
    tmp = tmp_path_factory.mktemp("activations")
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape)
        np.savez(tmp / f"data_{name}.npz", x=x, y=y)
        model_of(name).save(tmp / f"ours_{name}.keras")
    run_keras(f"""
        import numpy as np, keras
        for name in {sorted(CASES)!r}:
            d = np.load(f"data_{{name}}.npz")
            m = keras.models.load_model(f"ours_{{name}}.keras", compile=False)
            layer = m.layers[1]
            inner = np.asarray(layer(m.layers[0](d["x"])))
            out = m.predict(d["x"], verbose=0)
            config = {{k: v for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype")}}
            m.save(f"keras_{{name}}.keras")
            reloaded = keras.models.load_model(f"keras_{{name}}.keras").predict(d["x"], verbose=0)
            m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            h = m.fit(d["x"], d["y"], batch_size=4, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", inner, out, np.array(h.history["loss"]), reloaded, *m.get_weights())
            with open(f"config_{{name}}.txt", "w") as f:
                f.write(repr(config))
        keras.utils.set_random_seed(3)
        native = keras.Sequential([keras.Input((3, 3)), keras.layers.PReLU(
            alpha_initializer=keras.initializers.RandomUniform(-1.0, 1.0, seed=5), shared_axes=[1], name="prelu")])
        d = np.load("data_prelu.npz")
        native.save("native_prelu.keras")
        np.savez("native_prelu.npz", native.predict(d["x"][:, :, :3] * 3, verbose=0), *native.get_weights())
    """, tmp, timeout=900)
    return tmp


def _normalized(value):
    """Keras's values as our configs hold them: lists for tuples, initializer and regularizer dicts
    without Keras's module and registered_name."""
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items() if k not in ("module", "registered_name")}
    return value


def _ours(config):
    return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_and_sgd_steps_match_keras_from_our_keras_file(keras_runs, name):
    shape, _, config = CASES[name]
    x, y = data(shape)
    model = model_of(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_1"], rtol=1e-5, atol=1e-6)
    keras_config = eval(open(keras_runs / f"config_{name}.txt").read())  # noqa: S307 (our own file)
    assert _normalized(keras_config) == config
    assert _ours(model.layers[1].get_config()) == config
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_2"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 4}"], rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    assert not np.allclose(model.get_weights()[0], model_of(name).get_weights()[0])  # the first Dense trained
    if name.startswith("prelu"):
        assert not np.allclose(model.layers[1].alpha, model_of(name).layers[1].alpha)  # alpha trained


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_layer_alone_computes_what_keras_does(keras_runs, name):
    shape, layer, _ = CASES[name]
    x, _ = data(shape)
    model = model_of(name)
    hidden = x @ model.layers[0].get_weights()[0] + model.layers[0].get_weights()[1]
    alone = keras.Sequential([keras.Input(hidden.shape[1:]), layer()])
    if name.startswith("prelu"):
        alone.set_weights(model.layers[1].get_weights())
    theirs = np.load(keras_runs / f"keras_{name}.npz")["arr_0"]
    np.testing.assert_allclose(alone.predict(hidden, verbose=0), theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kerass_keras_file_loads_and_predicts_what_keras_reloads(keras_runs, name):
    shape, layer, config = CASES[name]
    x, _ = data(shape)
    loaded = keras.models.load_model(keras_runs / f"keras_{name}.keras")
    assert type(loaded.layers[1]).__name__ == type(layer()).__name__
    assert _ours(loaded.layers[1].get_config()) == config
    np.testing.assert_allclose(loaded.predict(x, verbose=0), np.load(keras_runs / f"keras_{name}.npz")["arr_3"],
                               rtol=1e-6, atol=1e-6)


def test_a_prelu_keras_made_loads_with_its_alpha(keras_runs):
    x, _ = data((3, 4))
    x = x[:, :, :3] * 3
    theirs = np.load(keras_runs / "native_prelu.npz")
    loaded = keras.models.load_model(keras_runs / "native_prelu.keras")
    assert loaded.layers[0].alpha.shape == (1, 3)
    np.testing.assert_array_equal(loaded.layers[0].alpha, theirs["arr_1"])
    np.testing.assert_allclose(loaded.predict(x, verbose=0), theirs["arr_0"], rtol=1e-6, atol=1e-6)


def test_softmax_output_with_a_crossentropy_trains_as_keras(tmp_path):
    """Softmax as the output layer: Keras computes the crossentropy from its logits, and so do we."""
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (16, 5)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 16)]
    tf.keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((5,)), L.Dense(4, kernel_initializer="random_normal"), L.Softmax()])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="categorical_crossentropy")
    model.save(tmp_path / "ours.keras")
    np.savez(tmp_path / "data.npz", x=x, y=y)
    run_keras("""
        import numpy as np, keras
        d = np.load("data.npz")
        m = keras.models.load_model("ours.keras", compile=False)
        m.compile(optimizer=keras.optimizers.SGD(0.5), loss="categorical_crossentropy")
        h = m.fit(d["x"], d["y"], batch_size=4, epochs=3, shuffle=False, verbose=0)
        np.savez("theirs.npz", np.array(h.history["loss"]), *m.get_weights())
    """, tmp_path)
    theirs = np.load(tmp_path / "theirs.npz")
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_0"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 1}"], rtol=1e-5, atol=1e-6)


# Inputs on the kinks: the threshold, max_value and 0 (TF's derivative there is a choice of the ops
# Keras composes; ours is documented in ops/elementwise_math.h).
KINKS = [
    ("L.ReLU()", [-1.0, 0.0, 2.0]),
    ("L.ReLU(max_value=6.0)", [0.0, 6.0, 7.0, 3.0]),
    ("L.ReLU(max_value=2.0)", [0.0, 2.0, 3.0]),
    ("L.ReLU(max_value=6.0, negative_slope=0.1)", [0.0, 6.0, -2.0]),
    ("L.ReLU(negative_slope=0.2)", [0.0, -1.0, 1.0]),
    ("L.ReLU(negative_slope=0.2, threshold=0.5)", [0.5, 0.0, 1.0]),
    ("L.ReLU(max_value=1.0, threshold=2.0)", [1.0, 2.0, 3.0]),
    ("L.LeakyReLU(negative_slope=0.25)", [0.0, -3.0]),
    ("L.ELU(alpha=0.5)", [0.0, -1.0, 1.0]),
    ("L.PReLU(alpha_initializer='ones')", [0.0, -1.0, 1.0]),
    ("L.UnitNormalization()", [0.0, 0.0, 0.0]),
]


def test_derivatives_at_the_kinks_are_tfs(tmp_path):
    xs = {code: np.array([values], dtype=np.float32) for code, values in KINKS}
    np.savez(tmp_path / "kinks.npz", *xs.values())
    run_keras(f"""
        import numpy as np, keras, tensorflow as tf
        L = keras.layers
        d = np.load("kinks.npz")
        out = []
        for k, code in enumerate({[code for code, _ in KINKS]!r}):
            x = tf.constant(d[f"arr_{{k}}"])
            layer = eval(code)
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(layer(x) * tf.range(1.0, x.shape[1] + 1.0))
            out += [np.asarray(layer(x)), tape.gradient(y, x).numpy()]
        np.savez("theirs.npz", *out)
    """, tmp_path)
    theirs = np.load(tmp_path / "theirs.npz")
    for k, (code, _) in enumerate(KINKS):
        x = tf.constant(xs[code])
        layer = eval(code)  # noqa: S307 (the list above)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(layer(x) * tf.constant(np.arange(1.0, x.shape[1] + 1.0, dtype=np.float32)))
        np.testing.assert_array_equal(np.asarray(layer(x)), theirs[f"arr_{2 * k}"], err_msg=code)
        np.testing.assert_array_equal(np.asarray(tape.gradient(y, x)), theirs[f"arr_{2 * k + 1}"], err_msg=code)


def test_keras_archive_round_trip_keeps_every_layer(tmp_path):
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape)
        model = model_of(name)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        model.save(tmp_path / f"{name}.keras")
        loaded = keras.models.load_model(tmp_path / f"{name}.keras")
        assert loaded.layers[1].get_config() == model.layers[1].get_config()
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


@pytest.mark.parametrize("layer", ["L.ReLU(max_value=0.5, negative_slope=0.1)", "L.LeakyReLU(0.2)", "L.ELU(0.7)",
                                   "L.PReLU(alpha_initializer='ones')", "L.Softmax()",
                                   "L.UnitNormalization()"])
def test_model_parallel_between_a_column_and_a_row_dense_trains_as_one_device(logical_cpus, layer):
    """A column-parallel Dense, the layer, then a row-parallel Dense: the element-wise layers take
    the split activation, PReLU, Softmax and UnitNormalization (over the split axis) the gathered
    one; every way trains as one device does."""
    logical_cpus(2)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(40, 6)).astype(np.float32), rng.integers(0, 3, 40)

    def build():
        tf.keras.utils.set_random_seed(5)
        return keras.Sequential([keras.Input((6,)), L.Dense(8, name="up"), eval(layer),  # noqa: S307
                                 L.Dense(3, name="down")])

    mesh = tf.keras.distribution.DeviceMesh((1, 2), ("batch", "model"),
                                            devices=tf.keras.distribution.list_devices()[:2])
    layout_map = tf.keras.distribution.LayoutMap(mesh)
    layout_map["up/kernel"] = (None, "model")
    layout_map["up/bias"] = ("model",)
    layout_map["down/kernel"] = ("model", None)
    mp = tf.keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    split = fit_for_comparison(mp, build, x, y, 2, 10, optimizer="sgd")
    one = fit_for_comparison(tf.distribute.OneDeviceStrategy("/cpu:0"), build, x, y, 2, 10, optimizer="sgd")
    assert_same_training(split, one)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_files_compute_what_predict_does(tmp_path):
    import onnxruntime
    for name, (shape, _, _) in CASES.items():
        x, y = data(shape, rows=5)
        model = model_of(name)
        model.fit(x, y, epochs=1, verbose=0)  # PReLU's alpha away from its initial value
        path = tmp_path / f"{name}.onnx"
        model.export(str(path), format="onnx", verbose=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-6, atol=1e-6, err_msg=name)


def test_masks_pass_through_all_but_softmax_which_refuses_one():
    for name, (_, layer, _) in CASES.items():
        if name.startswith("softmax"):
            with pytest.raises(NotImplementedError, match=r'Softmax layer "\w+" receives the mask of "embedding"'):
                mask_after(layer(), "embedding")
        else:
            assert mask_after(layer(), "embedding") == "embedding", name
        assert layer().supports_masking


def test_masks_through_the_layers_as_kerass(tmp_path):
    from test_rnn import _TOKENS, _compare_masked_with_keras
    _compare_masked_with_keras(tmp_path, "[L.Embedding(7, 3, mask_zero=True), L.PReLU(), L.ELU(), "
                                         "L.SimpleRNN(4, return_sequences=True)]", _TOKENS)


def test_default_names_and_arguments_are_kerass():
    assert L.ReLU().name.startswith("re_lu") and L.LeakyReLU().name.startswith("leaky_re_lu")
    assert L.ELU().name.startswith("elu") and L.PReLU().name.startswith("p_re_lu")
    assert L.Softmax().name.startswith("softmax") and L.UnitNormalization().name.startswith("unit_normalization")
    relu = L.ReLU()
    assert (relu.max_value, relu.negative_slope, relu.threshold) == (None, 0.0, 0.0)
    assert L.LeakyReLU().negative_slope == 0.3 and L.ELU().alpha == 1.0
    assert L.Softmax().axis == -1 and L.UnitNormalization().axis == -1
    assert L.PReLU().shared_axes is None and L.PReLU(shared_axes=2).shared_axes == [2]
    with pytest.warns(UserWarning, match="Argument `alpha` is deprecated. Use `negative_slope` instead."):
        assert L.LeakyReLU(alpha=0.1).negative_slope == 0.1
    for layer in (L.ReLU(6.0), L.LeakyReLU(0.1), L.ELU(0.5), L.PReLU(shared_axes=[1]), L.Softmax((1, 2)),
                  L.UnitNormalization([1])):
        again = type(layer).from_config(layer.get_config())
        assert again.get_config() == layer.get_config()


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: L.ReLU(max_value=-1), ValueError,
     r"max_value of a ReLU layer cannot be a negative value. Received: max_value=-1"),
    (lambda: L.ReLU(negative_slope=-0.5), ValueError,
     r"negative_slope of a ReLU layer cannot be None or a negative value. Received: negative_slope=-0.5"),
    (lambda: L.ReLU(negative_slope=None), ValueError,
     r"negative_slope of a ReLU layer cannot be None or a negative value. Received: negative_slope=None"),
    (lambda: L.ReLU(threshold=-1.0), ValueError,
     r"threshold of a ReLU layer cannot be None or a negative value. Received: threshold=-1.0"),
    (lambda: L.ReLU(max_value="6"), TypeError, r'ReLU "re_lu\w*": max_value must be a number'),
    (lambda: L.LeakyReLU(negative_slope=None), ValueError,
     r"The negative_slope value of a Leaky ReLU layer cannot be None or negative value. Expected a float. "
     r"Received: negative_slope=None"),
    (lambda: L.LeakyReLU(negative_slope=-0.1), ValueError, r"Received: negative_slope=-0.1"),
    (lambda: L.ELU(alpha=None), TypeError, r'ELU "elu\w*": alpha must be a number, got None'),
    (lambda: L.PReLU(alpha_constraint="non_neg"), NotImplementedError, r"alpha_constraint is not supported yet"),
    (lambda: L.PReLU(shared_axes=[1.5]), TypeError, r"shared_axes must be an int or a list of ints"),
    (lambda: L.PReLU(alpha_initializer="nope"), ValueError, r"nope"),
    (lambda: L.Softmax(axis="last"), TypeError, r"Invalid value for `axis` argument"),
    (lambda: L.UnitNormalization(axis=1.0), TypeError,
     r"Invalid value for `axis` argument: expected an int or a list/tuple of ints. Received: axis=1.0"),
])
def test_bad_arguments_raise_kerass_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("layer, shape, pattern", [
    (lambda: L.UnitNormalization(axis=3), (4, 5), r"Axis 3 is out of bounds for input shape \(None, 4, 5\)."),
    (lambda: L.Softmax(axis=-4), (4, 5), r"Axis -4 is out of bounds for input shape \(None, 4, 5\)."),
    (lambda: L.Softmax(axis=0), (4,), r"axis 0 includes the batch axis of input shape \(None, 4\)"),
    (lambda: L.PReLU(shared_axes=[3]), (4, 5), r"shared_axes must be axes of the input from 1"),
])
def test_bad_input_shapes_raise_clear_errors(layer, shape, pattern):
    with pytest.raises(ValueError, match=pattern):
        keras.Sequential([keras.Input(shape), layer()])
