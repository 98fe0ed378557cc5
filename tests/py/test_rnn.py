"""Recurrent layers (LSTM): Keras's weights, outputs and gradients against Keras/TF as an oracle,
configs, errors, training and strategies."""
import os

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers


def _lstm_model(seed=0, steps=5, features=3, cls="LSTM", **kwargs):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((steps, features)), getattr(L, cls)(4, name="rnn", **kwargs)])


def _inputs(n=6, steps=5, features=3, seed=1):
    return np.random.default_rng(seed).normal(size=(n, steps, features)).astype(np.float32)


def _outputs_and_gradients(model, x, target):
    loss_fn = tf.keras.losses.MeanSquaredError()
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = loss_fn(target, y)
    grads = tape.gradient(loss, model.trainable_variables)
    return np.asarray(y), [np.asarray(g) for g in grads]


def _outputs_and_gradients_of_every_step(model, x, target):
    """As _outputs_and_gradients, with the mean squared error written by hand: a masked output's
    masked steps count in the loss (keras.losses would leave them out)."""
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = tf.reduce_mean(tf.square(y - target))
    grads = tape.gradient(loss, model.trainable_variables)
    return np.asarray(y), [np.asarray(g) for g in grads]


KERAS_SIDE = """
import numpy as np, keras, tensorflow as tf
d = np.load("case.npz", allow_pickle=True)
kwargs = d["kwargs"].item()
model = keras.Sequential([keras.Input(d["x"].shape[1:]), keras.layers.{cls}(d["units"].item(), name="rnn", **kwargs)])
model.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
loss_fn = keras.losses.MeanSquaredError()
with tf.GradientTape() as tape:
    y = model(d["x"], training=True)
    loss = loss_fn(d["target"], y)
grads = tape.gradient(loss, model.trainable_variables)
np.savez("keras.npz", y=np.asarray(y), names=np.array([v.path for v in model.weights]),
         **{{f"g{{i}}": np.asarray(g) for i, g in enumerate(grads)}})
"""


def _compare_with_keras(tmp_path, cls, model, kwargs, x):
    target = np.random.default_rng(5).normal(size=(len(x), *model.output_shape[1:])).astype(np.float32)
    y, grads = _outputs_and_gradients(model, x, target)
    weights = model.get_weights()
    np.savez(tmp_path / "case.npz", x=x, target=target, units=np.array(model.layers[0].units), kwargs=np.array(kwargs),
             nw=np.array(len(weights)), **{f"w{i}": w for i, w in enumerate(weights)})
    run_keras(KERAS_SIDE.format(cls=cls), cwd=tmp_path)
    k = np.load(tmp_path / "keras.npz")
    np.testing.assert_allclose(y, k["y"], rtol=1e-5, atol=1e-6)
    assert len(grads) == len(weights)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, k[f"g{i}"], rtol=1e-5, atol=1e-6, err_msg=str(k["names"][i]))


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("kwargs", [{}, {"return_sequences": True}, {"go_backwards": True},
                                    {"return_sequences": True, "go_backwards": True, "use_bias": False}])
def test_recurrent_outputs_and_gradients_equal_keras(tmp_path, cls, kwargs):
    model = _lstm_model(cls=cls, **kwargs)
    # Non-trivial weights everywhere (the forget bias starts at 1, the rest of the bias at 0).
    rng = np.random.default_rng(3)
    model.set_weights([w + rng.normal(scale=0.2, size=w.shape).astype(np.float32) for w in model.get_weights()])
    _compare_with_keras(tmp_path, cls, model, kwargs, _inputs())


def test_simple_rnn_relu_equals_keras(tmp_path):
    model = _lstm_model(cls="SimpleRNN", activation="relu", return_sequences=True)
    _compare_with_keras(tmp_path, "SimpleRNN", model, {"activation": "relu", "return_sequences": True}, _inputs())


def test_gru_and_simple_rnn_weights_have_keras_shapes():
    kernel, recurrent, bias = _lstm_model(cls="GRU").get_weights()
    assert kernel.shape == (3, 12) and recurrent.shape == (4, 12) and bias.shape == (2, 12)
    kernel, recurrent, bias = _lstm_model(cls="SimpleRNN").get_weights()
    assert kernel.shape == (3, 4) and recurrent.shape == (4, 4) and bias.shape == (4,)
    np.testing.assert_allclose(recurrent @ recurrent.T, np.eye(4), atol=1e-5)
    assert _lstm_model(cls="GRU", reset_after=False).get_weights()[2].shape == (12,)  # Keras's (3u,)


def test_lstm_weights_have_keras_shapes_names_and_initial_values():
    model = _lstm_model(steps=7, features=3)
    kernel, recurrent, bias = model.get_weights()
    assert kernel.shape == (3, 16) and recurrent.shape == (4, 16) and bias.shape == (16,)
    assert [v.name for v in model.layers[0].weights] == ["kernel", "recurrent_kernel", "bias"] or \
        [v.name for v in model.layers[0].weights] == ["rnn/kernel", "rnn/recurrent_kernel", "rnn/bias"]
    np.testing.assert_array_equal(bias, np.r_[np.zeros(4), np.ones(4), np.zeros(8)])  # unit_forget_bias
    limit = np.sqrt(6 / (3 + 16))  # glorot_uniform
    assert np.all(np.abs(kernel) <= limit)
    # Orthogonal (4, 16): orthonormal rows.
    np.testing.assert_allclose(recurrent @ recurrent.T, np.eye(4), atol=1e-5)
    assert model.output_shape == (None, 4)
    assert _lstm_model(return_sequences=True, steps=7).output_shape == (None, 7, 4)


@pytest.mark.parametrize("cls", ["SimpleRNN", "GRU"])
def test_config_round_trips(cls):
    layer = getattr(L, cls)(5, return_sequences=True, name="r")
    config = layer.get_config()
    assert getattr(L, cls).from_config(config).get_config() == config
    assert config["activation"] == "tanh"


def test_lstm_config_round_trips_and_keeps_keras_defaults():
    layer = L.LSTM(8, return_sequences=True, go_backwards=True, name="seq")
    config = layer.get_config()
    assert config["units"] == 8 and config["return_sequences"] and config["go_backwards"]
    assert config["activation"] == "tanh" and config["recurrent_activation"] == "sigmoid"
    assert config["unit_forget_bias"] is True and config["use_bias"] is True
    assert config["recurrent_initializer"]["class_name"] == "Orthogonal"
    assert config["kernel_initializer"]["class_name"] == "GlorotUniform"
    again = L.LSTM.from_config(config)
    assert again.get_config() == config


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "SimpleRNN"])
def test_recurrent_model_saves_and_loads(tmp_path, cls):
    model = _lstm_model(cls=cls, return_sequences=True)
    x = _inputs()
    expected = model.predict(x, verbose=0)
    for name in ("m.keras", "m.weights.h5"):
        path = str(tmp_path / name)
        if name.endswith(".keras"):
            model.save(path)
            loaded = tf.keras.models.load_model(path)
        else:
            model.save_weights(path)
            loaded = _lstm_model(seed=9, cls=cls, return_sequences=True)
            loaded.load_weights(path)
        np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)


def test_lstm_refuses_a_sequence_of_the_wrong_rank_naming_the_layer_and_shapes():
    with pytest.raises(ValueError, match=r'layer "rnn".*expected ndim=3.*\(None, 5\)'):
        tf.keras.Sequential([tf.keras.Input((5,)), L.LSTM(4, name="rnn")])
    model = _lstm_model()
    with pytest.raises(ValueError, match=r'rnn'):
        model.predict(np.zeros((2, 6, 3), np.float32), verbose=0)


def test_lstm_unsupported_options_are_refused_by_name():
    for kwargs in ({"activation": "softmax"}, {"stateful": True}):
        with pytest.raises(NotImplementedError, match=list(kwargs)[0]):
            L.LSTM(4, **kwargs)
    # return_state works in eager calls (test_rnn_state.py); a Sequential model still refuses it.
    with pytest.raises(NotImplementedError, match="return_state"):
        tf.keras.Sequential([tf.keras.Input((5, 3)), L.LSTM(4, return_state=True)])


def test_lstm_learns_a_sequence_task():
    """The sign of the sum of the first feature over time: needs memory over the sequence."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 10, 2)).astype(np.float32)
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((10, 2)), L.LSTM(16), L.Dense(2, activation="softmax")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    assert model.evaluate(x, y, verbose=0)[1] >= 0.9


def test_dropout_config_and_bad_rates():
    layer = L.GRU(3, dropout=0.25, recurrent_dropout=0.5, seed=7)
    config = layer.get_config()
    assert (config["dropout"], config["recurrent_dropout"], config["seed"]) == (0.25, 0.5, 7)
    assert L.GRU.from_config(config).get_config() == config
    for bad in (1.0, -0.1, "x"):
        with pytest.raises(ValueError, match="dropout"):
            L.LSTM(3, dropout=bad)


def test_dropout_changes_training_outputs_only():
    model = _lstm_model(return_sequences=True, dropout=0.5, recurrent_dropout=0.5)
    x = _inputs()
    np.testing.assert_array_equal(model(x, training=False), model.predict(x, verbose=0))
    assert not np.allclose(np.asarray(model(x, training=True)), model.predict(x, verbose=0))


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_recurrent_mirrored_and_central_storage_equal_one_device(logical_cpus, dropout):
    logical_cpus(2)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=64)

    def train(strategy):
        with strategy.scope():
            tf.keras.utils.set_random_seed(0)
            model = tf.keras.Sequential([tf.keras.Input((6, 3)),
                                         L.LSTM(8, return_sequences=True, dropout=dropout, recurrent_dropout=dropout),
                                         L.GRU(6, return_sequences=True, recurrent_dropout=dropout),
                                         L.SimpleRNN(5, dropout=dropout),
                                         L.Dense(3, activation="softmax")])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    one = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
    for strategy in (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
                     tf.distribute.experimental.CentralStorageStrategy()):
        for a, b in zip(one, train(strategy)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


BIDIRECTIONAL_KERAS = """
import numpy as np, keras, tensorflow as tf
d = np.load("case.npz")
model = keras.Sequential([keras.Input(d["x"].shape[1:]),
                          keras.layers.Bidirectional(keras.layers.{cls}(3, return_sequences={seq}))])
model.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
with tf.GradientTape() as tape:
    y = model(d["x"], training=True)
    loss = keras.losses.MeanSquaredError()(d["target"], y)
grads = tape.gradient(loss, model.trainable_variables)
np.savez("keras.npz", y=np.asarray(y), **{{f"g{{i}}": np.asarray(g) for i, g in enumerate(grads)}})
"""


@pytest.mark.parametrize("cls,seq", [("LSTM", True), ("GRU", False), ("SimpleRNN", True)])
def test_bidirectional_outputs_and_gradients_equal_keras(tmp_path, cls, seq):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((5, 3)), L.Bidirectional(getattr(L, cls)(3, return_sequences=seq))])
    assert model.output_shape == ((None, 5, 6) if seq else (None, 6))
    rng = np.random.default_rng(3)
    model.set_weights([w + rng.normal(scale=0.2, size=w.shape).astype(np.float32) for w in model.get_weights()])
    x = _inputs()
    target = rng.normal(size=(len(x), *model.output_shape[1:])).astype(np.float32)
    y, grads = _outputs_and_gradients(model, x, target)
    weights = model.get_weights()
    np.savez(tmp_path / "case.npz", x=x, target=target, nw=np.array(len(weights)),
             **{f"w{i}": w for i, w in enumerate(weights)})
    run_keras(BIDIRECTIONAL_KERAS.format(cls=cls, seq=seq), cwd=tmp_path)
    k = np.load(tmp_path / "keras.npz")
    np.testing.assert_allclose(y, k["y"], rtol=1e-5, atol=1e-6)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, k[f"g{i}"], rtol=1e-5, atol=1e-6, err_msg=str(i))


def test_bidirectional_config_round_trips():
    layer = L.Bidirectional(L.LSTM(4, return_sequences=True), name="bi")
    config = layer.get_config()
    assert config["merge_mode"] == "concat" and config["layer"]["class_name"] == "LSTM"
    assert L.Bidirectional.from_config(config).get_config() == config
    for mode in ("sum", "mul", "ave"):
        config = L.Bidirectional(L.GRU(2), merge_mode=mode, name="bi").get_config()
        assert config["merge_mode"] == mode and L.Bidirectional.from_config(config).get_config() == config
    back = L.Bidirectional(L.LSTM(2), backward_layer=L.GRU(2, go_backwards=True, name="g"), name="bb").get_config()
    assert back["backward_layer"]["class_name"] == "GRU"
    assert L.Bidirectional.from_config(back).get_config() == back
    with pytest.raises(NotImplementedError, match="merge_mode=None"):
        L.Bidirectional(L.LSTM(4), merge_mode=None)
    with pytest.raises(ValueError, match="merge mode"):
        L.Bidirectional(L.LSTM(4), merge_mode="max")
    with pytest.raises(ValueError, match="go_backwards"):
        L.Bidirectional(L.LSTM(4), backward_layer=L.LSTM(4))
    with pytest.raises(ValueError, match="units"):
        L.Bidirectional(L.LSTM(4), backward_layer=L.LSTM(3, go_backwards=True))


MASKED_KERAS = """
import numpy as np, keras, tensorflow as tf
L = keras.layers
d = np.load("case.npz")
model = keras.Sequential([keras.Input(d["x"].shape[1:], dtype=str(d["x"].dtype))] + {layers})
model.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
with tf.GradientTape() as tape:
    y = model(d["x"], training=True)
    # By hand, not keras.losses (which would leave the masked steps out): the gradient reaching a
    # masked step's output must flow into the carried state. The mdtrain side does the same.
    loss = tf.reduce_mean(tf.square(y - d["target"]))
grads = tape.gradient(loss, model.trainable_variables)  # the Embedding's: IndexedSlices, made dense
np.savez("keras.npz", y=np.asarray(y), **{{f"g{{i}}": np.asarray(tf.convert_to_tensor(g)) for i, g in enumerate(grads)}})
"""

# Padding at the end, at the start, in the middle, and a sequence that is all padding.
_TOKENS = np.array([[3, 1, 4, 0, 0], [0, 0, 5, 2, 6], [1, 0, 2, 0, 3], [0, 0, 0, 0, 0], [6, 5, 4, 3, 2]], np.int32)


def _compare_masked_with_keras(tmp_path, layers_src, x):
    """The same Sequential model (layers_src evaluated with L = keras.layers in both) with the same
    weights: outputs and weight gradients of a mean squared error against Keras/TF."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(x.shape[1:], dtype=str(x.dtype))] + eval(layers_src, {"L": L}))
    rng = np.random.default_rng(3)
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])
    target = rng.normal(size=(len(x), *model.output_shape[1:])).astype(np.float32)
    y, grads = _outputs_and_gradients_of_every_step(model, x, target)
    weights = model.get_weights()
    np.savez(tmp_path / "case.npz", x=x, target=target, nw=np.array(len(weights)),
             **{f"w{i}": w for i, w in enumerate(weights)})
    run_keras(MASKED_KERAS.format(layers=layers_src), cwd=tmp_path)
    k = np.load(tmp_path / "keras.npz")
    np.testing.assert_allclose(y, k["y"], rtol=1e-5, atol=1e-6)
    assert len(grads) == len(weights)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, k[f"g{i}"], rtol=1e-5, atol=1e-6, err_msg=str(i))
    return y


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("options", ["return_sequences=False", "return_sequences=True",
                                     "return_sequences=True, go_backwards=True"])
def test_masked_recurrent_layers_equal_keras(tmp_path, cls, options):
    layers = f"[L.Embedding(7, 3, mask_zero=True), L.{cls}(4, {options})]"
    y = _compare_masked_with_keras(tmp_path, layers, _TOKENS)
    if "return_sequences=True" in options and "go_backwards" not in options:
        # Keras: a masked step outputs the carried h (zeros before the first step read).
        np.testing.assert_array_equal(y[0, 3], y[0, 2])
        np.testing.assert_array_equal(y[1, 0], 0)


@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave"])
def test_masked_bidirectional_merge_modes_equal_keras(tmp_path, merge_mode):
    layers = f"[L.Embedding(7, 3, mask_zero=True), L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode={merge_mode!r})]"
    y = _compare_masked_with_keras(tmp_path, layers, _TOKENS)
    np.testing.assert_array_equal(y[0, 3:], 0)  # Keras's zero_output_for_mask


def test_masked_bidirectional_with_a_backward_layer_and_dense_equal_keras(tmp_path):
    layers = ("[L.Embedding(7, 3, mask_zero=True), L.Bidirectional(L.LSTM(3, return_sequences=True), merge_mode='ave', "
              "backward_layer=L.GRU(3, return_sequences=True, go_backwards=True)), L.Dense(2), L.SimpleRNN(2)]")
    _compare_masked_with_keras(tmp_path, layers, _TOKENS)


def test_masking_layer_before_recurrent_layers_equals_keras(tmp_path):
    x = np.random.default_rng(4).normal(size=(5, 5, 3)).astype(np.float32)
    x[_TOKENS == 0] = 0.0
    _compare_masked_with_keras(tmp_path, "[L.Masking(0.0), L.LSTM(4, return_sequences=True), L.Dropout(0.0), "
                                         "L.GRU(3, go_backwards=True)]", x)


@pytest.mark.parametrize("activations", ["activation='relu', recurrent_activation='sigmoid'",
                                         "activation='linear', recurrent_activation='tanh', return_sequences=True"])
def test_lstm_other_activations_equal_keras(tmp_path, activations):
    _compare_masked_with_keras(tmp_path, f"[L.Embedding(7, 3, mask_zero=True), L.LSTM(4, {activations})]", _TOKENS)


@pytest.mark.parametrize("mask", [False, True])
def test_gru_reset_after_false_equals_keras(tmp_path, mask):
    if mask:
        _compare_masked_with_keras(tmp_path, "[L.Embedding(7, 3, mask_zero=True), "
                                             "L.GRU(4, reset_after=False, return_sequences=True)]", _TOKENS)
    else:
        _compare_masked_with_keras(tmp_path, "[L.GRU(4, reset_after=False, go_backwards=True)]", _inputs(n=4))


def test_unmasked_bidirectional_merge_mode_equals_keras(tmp_path):
    _compare_masked_with_keras(tmp_path, "[L.Bidirectional(L.LSTM(3), merge_mode='mul')]", _inputs(n=4))


def test_masks_reach_the_recurrent_layer_in_fit_and_predict():
    def model():
        tf.keras.utils.set_random_seed(0)
        m = tf.keras.Sequential([tf.keras.Input((5,), dtype="int32"), L.Embedding(7, 3, mask_zero=True), L.LSTM(4),
                                 L.Dense(1)])
        m.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        return m
    m = model()
    # Padding changes nothing: a sequence with trailing zeros gives the output of its first steps.
    np.testing.assert_array_equal(m.predict(np.array([[3, 1, 0, 0, 0]]), verbose=0),
                                  m.predict(np.array([[0, 3, 0, 1, 0]]), verbose=0))
    y = np.linspace(-1, 1, len(_TOKENS)).astype(np.float32)
    m.fit(_TOKENS, y, batch_size=5, epochs=2, verbose=0)
    eager = model()
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.MeanSquaredError()(y[:, None], eager(_TOKENS, training=True))
    grads = tape.gradient(loss, eager.trainable_variables)
    # One SGD step of fit = one eager step (same masked gradient).
    m1 = model()
    m1.fit(_TOKENS, y, batch_size=5, epochs=1, verbose=0)
    for w, w0, g in zip(m1.get_weights(), eager.get_weights(), grads):
        np.testing.assert_allclose(w, w0 - 0.1 * np.asarray(g), rtol=1e-5, atol=1e-6)


def test_masked_models_train_the_same_under_mirrored(logical_cpus):
    logical_cpus(2)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 7, size=(32, 6)).astype(np.int32)
    x[:, 4:] = 0
    y = rng.integers(0, 3, size=32)

    def train(strategy):
        with strategy.scope():
            tf.keras.utils.set_random_seed(0)
            model = tf.keras.Sequential([tf.keras.Input((6,), dtype="int32"), L.Embedding(7, 4, mask_zero=True),
                                         L.Bidirectional(L.GRU(4, return_sequences=True)), L.LSTM(5),
                                         L.Dense(3, activation="softmax")])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    one = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
    for a, b in zip(one, train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        model = tf.keras.Sequential([tf.keras.Input((6,), dtype="int32"), L.Embedding(7, 4, mask_zero=True, name="emb"),
                                     L.LSTM(5)])
        model.compile(optimizer="sgd", loss="mse")
    bad = x.copy()
    bad[3, 2] = 7
    with pytest.raises(ValueError, match="emb"):
        model.fit(bad, np.zeros((32, 5), np.float32), batch_size=16, verbose=0)
    with pytest.raises(ValueError, match="emb"):
        model.predict(bad, verbose=0)


def test_what_masks_cannot_do_yet_is_refused_by_name():
    seq = tf.keras.Sequential([tf.keras.Input((5,), dtype="int32"), L.Embedding(7, 3, mask_zero=True),
                               L.LSTM(2, return_sequences=True, name="rnn")])
    seq.compile(optimizer="sgd", loss="mse")
    # Keras leaves masked steps out of the loss, as mdtrain's does (test_masked_loss.py): it trains.
    seq.fit(_TOKENS, np.zeros((5, 5, 2), np.float32), verbose=0)
    assert seq.predict(_TOKENS, verbose=0).shape == (5, 5, 2)
    with pytest.raises(NotImplementedError, match="BatchNormalization"):
        seq.add(L.BatchNormalization())
    # A layer that drops the mask (Flatten, as Keras's) lets the loss be used.
    flat = tf.keras.Sequential([tf.keras.Input((5,), dtype="int32"), L.Embedding(7, 3, mask_zero=True),
                                L.Flatten(), L.Dense(1)])
    flat.compile(optimizer="sgd", loss="mse")
    flat.fit(_TOKENS, np.zeros((5, 1), np.float32), verbose=0)
    inputs = tf.keras.Input((5,), dtype="int32")
    masked = L.Embedding(7, 3, mask_zero=True)(inputs)
    # Functional models pass masks too (test_masked_loss.py); Keras's Multiply would read them.
    L.GRU(2, name="g")(masked)
    with pytest.raises(NotImplementedError, match="Multiply"):
        L.Multiply()([masked, L.Embedding(7, 3, mask_zero=True)(inputs)])
    unmasked = tf.keras.Sequential([tf.keras.Input((5,), dtype="int32"), L.Embedding(10, 4), L.GRU(3)])
    assert unmasked.predict(np.array([[1, 2, 3, 0, 0]]), verbose=0).shape == (1, 3)


def test_a_pipeline_refuses_a_model_whose_recurrent_layer_reads_a_mask(logical_cpus):
    import warnings
    from mdtrain.keras import distribution
    logical_cpus(2)
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline = distribution.PipelineParallel(mesh, num_microbatches=2)
    with pipeline.scope():
        model = tf.keras.Sequential([tf.keras.Input((5,), dtype="int32"), L.Embedding(7, 3, mask_zero=True),
                                     L.LSTM(4, name="rnn"), L.Dense(1)])
        with pytest.raises(NotImplementedError, match=r'"rnn".*reads a mask.*PipelineParallel'):
            model.compile(optimizer="sgd", loss="mse")
