"""The 1-D window layers (Conv1D, MaxPooling1D, AveragePooling1D), GlobalAveragePooling1D with
and without a mask, and GlobalMaxPooling1D/2D: outputs and SGD steps against Keras 3 on TF (skipped without it) from the same
initial weights, a Conv1D + BatchNormalization + ReLU + GlobalAveragePooling1D time-series
classifier and an Embedding(mask_zero=True) + GlobalAveragePooling1D text model trained with fit,
Keras's own .keras files loaded, MirroredStrategy over 2 devices equal to one, .keras round trips,
ONNX files in onnxruntime, and the errors Keras raises."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

STEPS, CHANNELS, CLASSES = 16, 3, 3
VOCAB, LENGTH = 20, 10

# (name, Conv1D kwargs, pooling layer): every padding, strides, dilation and both pools.
CONV_CASES = [
    ("valid", dict(filters=4, kernel_size=3), ("MaxPooling1D", {})),
    ("same_strided", dict(filters=4, kernel_size=4, strides=2, padding="same", activation="tanh"),
     ("AveragePooling1D", dict(pool_size=3, strides=1, padding="same"))),
    ("causal_dilated", dict(filters=5, kernel_size=3, padding="causal", dilation_rate=2, activation="relu"),
     ("MaxPooling1D", dict(pool_size=3, strides=2, padding="same"))),
    ("causal_strided_no_bias", dict(filters=3, kernel_size=2, strides=3, padding="causal", use_bias=False),
     ("AveragePooling1D", dict(pool_size=2))),
]


def series(n=48, seed=0):
    """A learnable 3-class time series problem: each class a sine of its own frequency, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, n)
    t = np.arange(STEPS)[None, :, None]
    x = np.sin(t * (0.4 + 0.5 * y[:, None, None]) + rng.uniform(0, 6, (n, 1, CHANNELS)))
    return (x + 0.3 * rng.normal(size=x.shape)).astype(np.float32), y


def texts(n=48, seed=1):
    """Sequences of word ids padded with 0 at the end (lengths 2..LENGTH); the label is whether
    word ids below 10 are the majority, a mean over the unmasked steps."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, LENGTH), np.int32)
    for i in range(n):
        k = rng.integers(2, LENGTH + 1)
        x[i, :k] = rng.integers(1, VOCAB, k)
    y = np.array([np.mean(row[row > 0] < 10) > 0.5 for row in x], np.float32)[:, None]
    return x, y


def conv_model(conv, pool, seed=0):
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((STEPS, CHANNELS)), L.Conv1D(**conv), getattr(L, pool[0])(**pool[1]),
                             L.Flatten(), L.Dense(2)])


def classifier(seed=0):
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((STEPS, CHANNELS)), L.Conv1D(8, 3, padding="causal"),
                             L.BatchNormalization(), L.Activation("relu"), L.GlobalAveragePooling1D(),
                             L.Dense(CLASSES)])


def text_model(seed=0, keepdims=False):
    tf.keras.utils.set_random_seed(seed)
    layers = [keras.Input((LENGTH,)), L.Embedding(VOCAB, 4, mask_zero=True), L.GlobalAveragePooling1D(keepdims=keepdims)]
    if keepdims:
        layers.append(L.Flatten())
    return keras.Sequential(layers + [L.Dense(1, activation="sigmoid")])


def gmp1d_model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((STEPS, CHANNELS)), L.Conv1D(4, 3, padding="same", activation="tanh"),
                             L.GlobalMaxPooling1D(), L.Dense(2)])


def gmp2d_model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6, 6, 2)), L.Conv2D(3, 3), L.GlobalMaxPooling2D(keepdims=True),
                             L.Flatten(), L.Dense(2)])


def images(n=48, seed=2):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6, 6, 2)).astype(np.float32)
    return x, x[:, :2, 0, 0]


def nan_series():
    """Sequences with a NaN in one step of one channel (and ties elsewhere)."""
    x = np.zeros((2, 5, 3), np.float32)
    x[:, :, 0] = [[1, 3, 3, 2, 0], [0, 0, 0, 0, 0]]
    x[:, :, 1] = [[1, np.nan, 5, 2, 0], [-1, -2, np.nan, -3, np.nan]]
    x[:, :, 2] = [[-4, -4, -5, -6, -4], [2, 1, 2, 1, 0]]
    return x


# The same models in Keras, one line each (they are pasted into the indented Keras snippet).
KERAS_CLASSIFIER = ('keras.Sequential([keras.Input((16, 3)), keras.layers.Conv1D(8, 3, padding="causal"), '
                    'keras.layers.BatchNormalization(), keras.layers.Activation("relu"), '
                    'keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)])')
KERAS_GMP1D = ('keras.Sequential([keras.Input((16, 3)), keras.layers.Conv1D(4, 3, padding="same", activation="tanh"), '
               'keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(2)])')
KERAS_GMP2D = ('keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3), '
               'keras.layers.GlobalMaxPooling2D(keepdims=True), keras.layers.Flatten(), keras.layers.Dense(2)])')
KERAS_TEXT = ('keras.Sequential([keras.Input((10,)), keras.layers.Embedding(20, 4, mask_zero=True), '
              'keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1, activation="sigmoid")])')


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """Keras's predictions, weights and losses after 3 SGD epochs of each model from our initial
    weights; and the classifier Keras trained, saved as a .keras file."""
    tmp = tmp_path_factory.mktemp("conv1d")
    (xs, ys), (xt, yt), (xi, yi) = series(), texts(), images()
    np.savez(tmp / "data.npz", xs=xs, ys=ys, xt=xt, yt=yt, xi=xi, yi=yi, xn=nan_series())
    np.savez(tmp / "w0_gmp1d.npz", *gmp1d_model().get_weights())
    np.savez(tmp / "w0_gmp2d.npz", *gmp2d_model().get_weights())
    for name, conv, pool in CONV_CASES:
        np.savez(tmp / f"w0_{name}.npz", *conv_model(conv, pool).get_weights())
    np.savez(tmp / "w0_classifier.npz", *classifier().get_weights())
    np.savez(tmp / "w0_text.npz", *text_model().get_weights())
    run_keras(f"""
        import numpy as np, keras
        d = np.load("data.npz")
        def train(m, name, x, y, loss, lr=0.05):
            w0 = np.load(f"w0_{{name}}.npz")
            m.set_weights([w0[f"arr_{{i}}"] for i in range(len(w0.files))])
            out = m.predict(x, verbose=0)
            m.compile(optimizer=keras.optimizers.SGD(lr), loss=loss)
            h = m.fit(x, y, batch_size=12, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", out, np.array(h.history["loss"]), *m.get_weights())
            return m
        for name, conv, (pool, pool_kwargs) in {[(n, c, p) for n, c, p in CONV_CASES]!r}:
            m = keras.Sequential([keras.Input((16, 3)), keras.layers.Conv1D(**conv),
                                  getattr(keras.layers, pool)(**pool_kwargs), keras.layers.Flatten(),
                                  keras.layers.Dense(2)])
            train(m, name, d["xs"], d["xs"][:, :2, 0], "mse")
        m = train({KERAS_CLASSIFIER}, "classifier", d["xs"], d["ys"],
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), lr=0.1)
        m.save("classifier.keras")
        np.save("classifier_predict.npy", m.predict(d["xs"], verbose=0))
        train({KERAS_TEXT}, "text", d["xt"], d["yt"], "binary_crossentropy", lr=0.5)
        train({KERAS_GMP1D}, "gmp1d", d["xs"], d["xs"][:, :2, 0], "mse")
        train({KERAS_GMP2D}, "gmp2d", d["xi"], d["yi"], "mse")
        np.save("gmp_nan.npy", np.asarray(keras.layers.GlobalMaxPooling1D()(d["xn"])))
    """, tmp, timeout=600)
    return tmp


def fit_like_keras(model, x, y, loss, lr=0.05):
    model.compile(optimizer=keras.optimizers.SGD(lr), loss=loss)
    return model.fit(x, y, batch_size=12, epochs=3, shuffle=False, verbose=0)


def assert_matches_keras(model, theirs, x, y, loss, lr=0.05, what=""):
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_0"], rtol=2e-5, atol=2e-6, err_msg=what)
    history = fit_like_keras(model, x, y, loss, lr)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_1"], rtol=2e-5, err_msg=what)
    weights = model.get_weights()
    assert len(weights) == len(theirs.files) - 2
    for i, w in enumerate(weights):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 2}"], rtol=2e-4, atol=2e-6, err_msg=f"{what} weight {i}")
    assert history.history["loss"][-1] < history.history["loss"][0], what


@pytest.mark.parametrize("name,conv,pool", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv1d_and_pooling_outputs_and_sgd_steps_match_keras(keras_runs, name, conv, pool):
    x, _ = series()
    model = conv_model(conv, pool)
    assert model.layers[0].kernel.shape == (conv["kernel_size"], CHANNELS, conv["filters"])
    assert_matches_keras(model, np.load(keras_runs / f"keras_{name}.npz"), x, x[:, :2, 0], "mse", what=name)


def test_time_series_classifier_trains_like_keras(keras_runs):
    x, y = series()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert_matches_keras(classifier(), np.load(keras_runs / "keras_classifier.npz"), x, y, loss, lr=0.1,
                         what="classifier")


def test_masked_text_model_trains_like_keras(keras_runs):
    x, y = texts()
    assert_matches_keras(text_model(), np.load(keras_runs / "keras_text.npz"), x, y, "binary_crossentropy", lr=0.5,
                         what="text")


def test_global_max_pooling_models_train_like_keras(keras_runs):
    x, _ = series()
    assert_matches_keras(gmp1d_model(), np.load(keras_runs / "keras_gmp1d.npz"), x, x[:, :2, 0], "mse", what="gmp1d")
    xi, yi = images()
    assert_matches_keras(gmp2d_model(), np.load(keras_runs / "keras_gmp2d.npz"), xi, yi, "mse", what="gmp2d")


def test_global_max_pooling_of_nan_and_ties_is_kerass_value(keras_runs):
    x = nan_series()
    ours = keras.Sequential([keras.Input((5, 3)), L.GlobalMaxPooling1D()]).predict(x, verbose=0)
    np.testing.assert_array_equal(ours, np.load(keras_runs / "gmp_nan.npy"))  # NaN where TF's max gives NaN
    assert np.isnan(ours[:, 1]).all() and ours[0, 0] == 3 and ours[0, 2] == -4


def test_the_mask_leaves_padding_out_of_the_mean():
    x, _ = texts()
    model = text_model()
    table, (kernel, bias) = model.layers[0].get_weights()[0], model.layers[2].get_weights()
    kept = (x > 0)[..., None]
    mean = (table[x] * kept).sum(1) / kept.sum(1)  # over the unmasked steps only
    want = 1 / (1 + np.exp(-(mean @ kernel + bias)))
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    # The padding id's row is never read: changing it changes nothing.
    before = model.predict(x, verbose=0)
    table[0] += 100.0
    model.layers[0].set_weights([table])
    np.testing.assert_array_equal(model.predict(x, verbose=0), before)


def test_keras_trained_classifier_file_loads_and_predicts_alike(keras_runs):
    x, _ = series()
    model = tf.keras.models.load_model(keras_runs / "classifier.keras")
    assert [type(l).__name__ for l in model.layers] == ["Conv1D", "BatchNormalization", "Activation",
                                                        "GlobalAveragePooling1D", "Dense"]
    assert model.layers[0].padding == "causal" and model.layers[0].kernel_size == (3,)
    np.testing.assert_allclose(model.predict(x, verbose=0), np.load(keras_runs / "classifier_predict.npy"),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build,data", [
    (lambda: conv_model(*CONV_CASES[2][1:]), "series"),
    (lambda: conv_model(*CONV_CASES[1][1:]), "series"),
    (text_model, "texts"),
    (gmp1d_model, "series"),
    (gmp2d_model, "images"),
])
def test_mirrored_strategy_on_two_devices_matches_one(logical_cpus, build, data):
    logical_cpus(2)
    if data == "series":
        x, _ = series()
        y, loss = x[:, :2, 0], "mse"
    elif data == "images":
        (x, y), loss = images(), "mse"
    else:
        (x, y), loss = texts(), "binary_crossentropy"
    one = build()
    fit_like_keras(one, x, y, loss)
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        two = build()
        fit_like_keras(two, x, y, loss)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(one.get_weights()[0], build().get_weights()[0])  # it trained


def inputs_of(data):
    return {"series": series, "texts": texts, "images": images}[data]()[0]


@pytest.mark.parametrize("build,data", [(classifier, "series"), (lambda: conv_model(*CONV_CASES[2][1:]), "series"),
                                        (lambda: text_model(keepdims=True), "texts"), (gmp1d_model, "series"),
                                        (gmp2d_model, "images")])
def test_keras_file_round_trip(tmp_path, build, data):
    x = inputs_of(data)
    model = build()
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "m.keras")
    restored = tf.keras.models.load_model(tmp_path / "m.keras")
    assert [l.get_config() for l in restored.layers] == [l.get_config() for l in model.layers]
    np.testing.assert_array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
@pytest.mark.parametrize("build,data", [
    *[(lambda c=c: conv_model(*c[1:]), "series") for c in CONV_CASES],
    (classifier, "series"), (text_model, "texts"), (lambda: text_model(keepdims=True), "texts"),
    (gmp1d_model, "series"), (gmp2d_model, "images"),
])
def test_onnx_export_matches_predict(tmp_path, build, data):
    import onnxruntime
    x = inputs_of(data)
    model = build()
    if data == "series":  # moving statistics away from 0 and 1, so the file must carry them
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, np.zeros((len(x),) + model.output_shape[1:], np.float32), epochs=1, verbose=0)
    path = tmp_path / "m.onnx"
    model.export(str(path), format="onnx", verbose=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)


def test_aliases_names_and_configs_are_kerass():
    assert L.Convolution1D is L.Conv1D and L.MaxPool1D is L.MaxPooling1D and L.AvgPool1D is L.AveragePooling1D
    assert L.GlobalAvgPool1D is L.GlobalAveragePooling1D
    assert L.GlobalMaxPool1D is L.GlobalMaxPooling1D and L.GlobalMaxPool2D is L.GlobalMaxPooling2D
    for cls, prefix in ((L.GlobalMaxPooling1D, "global_max_pooling1d"), (L.GlobalMaxPooling2D, "global_max_pooling2d")):
        layer = cls(keepdims=True)
        assert layer.name.startswith(prefix) and layer.keepdims is True and layer.data_format == "channels_last"
        assert cls.from_config(layer.get_config()).get_config() == layer.get_config()
    conv = L.Conv1D(2, 3)
    assert conv.name.startswith("conv1d")
    config = conv.get_config()
    assert (config["kernel_size"], config["strides"], config["dilation_rate"]) == ([3], [1], [1])
    assert config["padding"] == "valid" and config["groups"] == 1
    again = L.Conv1D.from_config(config)
    assert again.get_config() == config
    pool = L.MaxPooling1D()
    assert pool.name.startswith("max_pooling1d") and pool.pool_size == (2,) and pool.strides == (2,)
    assert L.AveragePooling1D(3, strides=1).get_config()["strides"] == [1]
    assert L.AveragePooling1D.from_config(L.AveragePooling1D(3).get_config()).pool_size == (3,)
    gap = L.GlobalAveragePooling1D(keepdims=True)
    assert gap.name.startswith("global_average_pooling1d") and gap.keepdims is True
    assert gap.supports_masking and not getattr(L.GlobalMaxPooling1D(), "supports_masking", False)
    assert L.GlobalAveragePooling1D.from_config(gap.get_config()).get_config() == gap.get_config()


@pytest.mark.parametrize("cls,kwargs,error,pattern", [
    (L.Conv1D, {"filters": 2, "kernel_size": (3, 3)}, ValueError,
     r"The `kernel_size` argument must be a tuple of 1 integers\. Received kernel_size=\(3, 3\)"),
    (L.Conv1D, {"filters": 2, "kernel_size": 0}, ValueError, r"including values \{0\} that do not satisfy `value > 0`"),
    (L.Conv1D, {"filters": 0, "kernel_size": 2}, ValueError, r"Invalid value for argument `filters`"),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "strides": 2, "dilation_rate": 2}, ValueError,
     r"`strides > 1` not supported in conjunction with `dilation_rate > 1`"),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "padding": "full"}, ValueError,
     r'must be one of "valid", "same", "causal"\. Received: padding=full'),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "data_format": "channels_first"}, ValueError,
     r'data_format="channels_first" is not supported'),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "groups": 2}, NotImplementedError, r"groups other than 1"),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "kernel_constraint": "non_neg"}, NotImplementedError,
     r"kernel_constraint is not supported"),
    (L.Conv2D, {"filters": 2, "kernel_size": 3, "padding": "causal"}, ValueError,
     r'must be one of "valid", "same"\. Received: padding=causal'),
    (L.MaxPooling1D, {"pool_size": (2, 2)}, ValueError, r"`pool_size` argument must be a tuple of 1 integers"),
    (L.AveragePooling1D, {"pool_size": 2, "strides": 0}, ValueError, r"`strides` argument.*including values \{0\}"),
    (L.AveragePooling1D, {"padding": "causal"}, ValueError, r"`padding` argument"),
    (L.GlobalAveragePooling1D, {"data_format": "channels_first"}, ValueError, r"channels_first"),
    (L.GlobalMaxPooling1D, {"data_format": "channels_first"}, ValueError, r"channels_first"),
    (L.GlobalMaxPooling2D, {"data_format": "channels_first"}, ValueError, r"channels_first"),
])
def test_bad_arguments_name_the_layer_and_the_argument(cls, kwargs, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        cls(name="bad", **kwargs)
    assert '"bad"' in str(info.value)


def test_bad_inputs_are_keras_rank_and_size_errors():
    with pytest.raises(ValueError, match=r'layer "c".*expected ndim=3, found ndim=4'):
        keras.Sequential([keras.Input((4, 4, 2)), L.Conv1D(2, 2, name="c")])
    with pytest.raises(ValueError, match=r'kernel_size \(5,\) is larger than the input\'s spatial size \(3,\)'):
        keras.Sequential([keras.Input((3, 2)), L.Conv1D(2, 5, name="c")])
    with pytest.raises(ValueError, match=r'layer "p".*pool_size \(4,\) is larger'):
        keras.Sequential([keras.Input((3, 2)), L.MaxPooling1D(4, name="p")])
    with pytest.raises(ValueError, match=r'layer "g".*expected ndim=3, found ndim=2'):
        keras.Sequential([keras.Input((3,)), L.GlobalAveragePooling1D(name="g")])
    with pytest.raises(ValueError, match=r'layer "m".*expected ndim=4, found ndim=3'):
        keras.Sequential([keras.Input((3, 2)), L.GlobalMaxPooling2D(name="m")])
