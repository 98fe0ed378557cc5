"""The reshaping layers (Permute, RepeatVector, Identity, ZeroPadding1D/2D, Cropping1D/2D,
UpSampling1D/2D) against Keras 3 on TF (skipped without it): Keras loads mdtrain's .keras file of
each model, and its layer outputs, predictions and weights after 3 SGD epochs (a Dense before
the layer, so its gradient flows through the layer's backward) match ours; Keras's own .keras
file loads here; MirroredStrategy on 2 devices trains as one; ONNX files compute what predict
does; configs and bad arguments as Keras's."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras
from mdtrain.keras.layers import mask_after

keras = tf.keras
L = keras.layers

# name: (input shape without the batch, the layer, its config as Keras writes it)
CASES = {
    "permute": ((3, 4, 2), lambda: L.Permute((3, 1, 2)), {"dims": [3, 1, 2]}),
    "permute_pair": ((5, 3), lambda: L.Permute((2, 1)), {"dims": [2, 1]}),
    "repeat_vector": ((5,), lambda: L.RepeatVector(3), {"n": 3}),
    "identity": ((4, 3), lambda: L.Identity(), {}),
    "zero_padding1d": ((5, 2), lambda: L.ZeroPadding1D((2, 1)), {"padding": [2, 1], "data_format": "channels_last"}),
    "zero_padding1d_int": ((5, 2), lambda: L.ZeroPadding1D(), {"padding": [1, 1], "data_format": "channels_last"}),
    "zero_padding2d": ((4, 3, 2), lambda: L.ZeroPadding2D(((1, 0), (2, 1))),
                       {"padding": [[1, 0], [2, 1]], "data_format": "channels_last"}),
    "zero_padding2d_pair": ((4, 3, 2), lambda: L.ZeroPadding2D((1, 2)),
                            {"padding": [[1, 1], [2, 2]], "data_format": "channels_last"}),
    "cropping1d": ((6, 2), lambda: L.Cropping1D((2, 1)), {"cropping": [2, 1]}),
    "cropping2d": ((5, 6, 2), lambda: L.Cropping2D(((1, 2), (0, 3))),
                   {"cropping": [[1, 2], [0, 3]], "data_format": "channels_last"}),
    "cropping2d_int": ((5, 6, 2), lambda: L.Cropping2D(1), {"cropping": [[1, 1], [1, 1]], "data_format": "channels_last"}),
    "up_sampling1d": ((4, 2), lambda: L.UpSampling1D(3), {"size": 3}),
    "up_sampling2d": ((3, 4, 2), lambda: L.UpSampling2D((2, 3)),
                      {"size": [2, 3], "data_format": "channels_last", "interpolation": "nearest"}),
    "up_sampling2d_int": ((3, 2, 2), lambda: L.UpSampling2D(2),
                          {"size": [2, 2], "data_format": "channels_last", "interpolation": "nearest"}),
    "up_sampling2d_bilinear": ((3, 4, 2), lambda: L.UpSampling2D((2, 3), interpolation="bilinear"),
                               {"size": [2, 3], "data_format": "channels_last", "interpolation": "bilinear"}),
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
    output, predictions, weights after 3 SGD epochs and losses; and Keras's own .keras file."""
    tmp = tmp_path_factory.mktemp("reshaping")
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
            m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            h = m.fit(d["x"], d["y"], batch_size=4, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", inner, out, np.array(h.history["loss"]), *m.get_weights())
            with open(f"config_{{name}}.txt", "w") as f:
                f.write(repr(config))
    """, tmp, timeout=600)
    return tmp


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_and_sgd_steps_match_keras_from_our_keras_file(keras_runs, name):
    shape, _, config = CASES[name]
    x, y = data(shape)
    model = model_of(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_1"], rtol=1e-5, atol=1e-6)
    keras_config = eval(open(keras_runs / f"config_{name}.txt").read())  # noqa: S307 (our own file)
    assert {k: _normalized(v) for k, v in keras_config.items()} == config
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_2"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 3}"], rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    assert not np.allclose(model.get_weights()[0], model_of(name).get_weights()[0])  # the first Dense trained


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_layer_alone_computes_what_keras_does(keras_runs, name):
    shape, layer, _ = CASES[name]
    x, _ = data(shape)
    model = model_of(name)
    hidden = x @ model.layers[0].get_weights()[0] + model.layers[0].get_weights()[1]
    alone = keras.Sequential([keras.Input(hidden.shape[1:]), layer()])
    theirs = np.load(keras_runs / f"keras_{name}.npz")["arr_0"]
    assert alone.output_shape[1:] == theirs.shape[1:]
    np.testing.assert_allclose(alone.predict(hidden, verbose=0), theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kerass_keras_file_loads_and_predicts_the_same(keras_runs, name):
    shape, _, config = CASES[name]
    x, _ = data(shape)
    loaded = keras.models.load_model(keras_runs / f"keras_{name}.keras")
    layer = loaded.layers[1]
    assert type(layer).__name__ == type(CASES[name][1]()).__name__
    assert {k: v for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype")} == config
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model_of(name).predict(x, verbose=0), rtol=1e-6,
                               atol=1e-6)


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
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-6, atol=1e-6, err_msg=name)


def test_identity_passes_the_mask_and_the_others_drop_it():
    # Keras 3: Identity sets supports_masking; the other reshaping layers do not.
    for name, (_, layer, _) in CASES.items():
        assert mask_after(layer(), "embedding") == ("embedding" if name == "identity" else None), name
    assert L.Identity().supports_masking


def test_default_names_and_arguments_are_kerass():
    assert L.ZeroPadding2D().name.startswith("zero_padding2d")
    assert L.UpSampling1D().name.startswith("up_sampling1d")
    assert L.Cropping2D().name.startswith("cropping2d")
    assert L.RepeatVector(2).name.startswith("repeat_vector")
    assert L.ZeroPadding2D().padding == ((1, 1), (1, 1))
    assert L.Cropping1D().cropping == (1, 1)
    assert L.Cropping2D().cropping == ((0, 0), (0, 0))
    assert L.UpSampling2D().size == (2, 2) and L.UpSampling2D().interpolation == "nearest"
    assert L.UpSampling2D(interpolation="NEAREST").interpolation == "nearest"
    assert L.UpSampling2D(interpolation="Bilinear").interpolation == "bilinear"
    assert L.Permute((2, 1)).dims == (2, 1) and L.RepeatVector(4).n == 4
    for layer in (L.Permute((2, 1)), L.RepeatVector(2), L.Identity(), L.ZeroPadding1D(), L.ZeroPadding2D(),
                  L.Cropping1D(), L.Cropping2D(), L.UpSampling1D(), L.UpSampling2D()):
        again = type(layer).from_config(layer.get_config())
        assert again.get_config() == layer.get_config()


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: L.Permute((1, 3)), ValueError, r"The set of indices in `dims` must be consecutive and start from 1. "
                                            r"Received dims=\(1, 3\)"),
    (lambda: L.RepeatVector(2.0), TypeError, r"Expected an integer value for `n`, got <class 'float'>."),
    (lambda: L.RepeatVector(0), ValueError, r"Argument `n` should be a positive integer. Received: n=0"),
    (lambda: L.ZeroPadding1D((1, 2, 3)), ValueError,
     r"The `padding` argument must be a tuple of 2 integers. Received padding=\(1, 2, 3\)"),
    (lambda: L.ZeroPadding1D(-1), ValueError, r"including values \{-1\} that do not satisfy `value >= 0`"),
    (lambda: L.ZeroPadding2D((1, 2, 3)), ValueError, r"`padding` should have two elements. Received: padding=\(1, 2, 3\)."),
    (lambda: L.ZeroPadding2D(((1, -1), (0, 0))), ValueError,
     r"The `1st entry of padding` argument must be a tuple of 2 integers. Received 1st entry of padding=\(1, -1\), "
     r"including values \{-1\} that do not satisfy `value >= 0`"),
    (lambda: L.Cropping2D(-1), ValueError, r"`cropping` cannot be negative. Received: cropping=-1."),
    (lambda: L.Cropping2D("a"), ValueError, r"`cropping` should be either an int"),
    (lambda: L.Cropping1D((1, "a")), ValueError, r"including element a of type <class 'str'>"),
    (lambda: L.UpSampling1D(2.5), TypeError, r"Expected an integer value for `size`, got <class 'float'>."),
    (lambda: L.UpSampling1D(0), ValueError, r"Argument `size` should be a positive integer. Received: size=0"),
    (lambda: L.UpSampling2D((2, 0)), ValueError, r"including values \{0\} that do not satisfy `value > 0`"),
    (lambda: L.UpSampling2D(interpolation="bicubic"), NotImplementedError, r"interpolation='bicubic' is not "
                                                                            r"supported yet; only 'nearest' and "
                                                                            r"'bilinear'"),
    (lambda: L.UpSampling2D(interpolation="cubic"), ValueError, r"interpolation must be one of"),
    (lambda: L.ZeroPadding2D(data_format="channels_first"), ValueError, r"channels_first.* is not supported"),
    (lambda: L.Cropping2D(data_format="channels_first"), ValueError, r"channels_first.* is not supported"),
    (lambda: L.UpSampling2D(data_format="channels_first"), ValueError, r"channels_first.* is not supported"),
])
def test_bad_arguments_raise_kerass_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("layer, shape, pattern", [
    (lambda: L.Cropping1D((3, 3)), (6, 2), r"`cropping` parameter of `Cropping1D` layer must be smaller than the input "
                                          r"length. Received: input_shape=\(None, 6, 2\), cropping=\(3, 3\)"),
    (lambda: L.Cropping2D(((0, 0), (2, 2))), (3, 4, 1), r"Values in `cropping` argument should be smaller than the "
                                                       r"corresponding spatial dimension of the input"),
    (lambda: L.RepeatVector(2), (3, 4), r'Input 0 of layer "\w+" is incompatible with the layer: expected ndim=2, '
                                       r"found ndim=3"),
    (lambda: L.Permute((2, 1)), (3, 4, 5), r"expected ndim=3, found ndim=4"),
    (lambda: L.UpSampling2D(), (4, 3), r"expected ndim=4, found ndim=3"),
    (lambda: L.ZeroPadding1D(), (4,), r"expected ndim=3, found ndim=2"),
])
def test_bad_input_shapes_raise_kerass_errors(layer, shape, pattern):
    with pytest.raises(ValueError, match=pattern):
        keras.Sequential([keras.Input(shape), layer()])


@pytest.mark.parametrize("layers", [
    "[L.Embedding(7, 3, mask_zero=True), L.Identity(), L.SimpleRNN(4, return_sequences=True)]",  # passed on
    "[L.Embedding(7, 3, mask_zero=True), L.Permute((1, 2)), L.GRU(4)]",  # dropped: every step is read
    "[L.Embedding(7, 3, mask_zero=True), L.ZeroPadding1D(1), L.LSTM(3)]",
    "[L.Embedding(7, 3, mask_zero=True), L.UpSampling1D(2), L.SimpleRNN(2, return_sequences=True)]",
])
def test_masks_through_the_layers_as_kerass(tmp_path, layers):
    from test_rnn import _TOKENS, _compare_masked_with_keras
    _compare_masked_with_keras(tmp_path, layers, _TOKENS)
