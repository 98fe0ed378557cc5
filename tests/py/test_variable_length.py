"""Variable-length dimensions (keras.Input(shape=(None,)), Input((None, 3))): a model built once for
sequences of any length trains and predicts each batch at its own length, without being built again.
Against Keras 3 on TF (skipped without it), from the same initial weights: a masked
Embedding + Bidirectional(LSTM) text model fitted on padded arrays and on a dataset padded per batch
(batches of different lengths in one fit), and a Conv1D + pooling time-series model predicting
lengths it was not trained on. Also: MirroredStrategy over 2 devices equal to one on batches of
different lengths, evaluate/predict over such batches, .keras files both ways, summary, the
refusals (a Flatten after a None axis, strategies that size their stages once), and
Dataset.padded_batch."""
import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

VOCAB = 30


def sequences(n, lengths, seed=0):
    """n int32 sequences of word ids >= 1 with lengths drawn from `lengths`, as Python lists, and
    labels: whether ids below VOCAB / 2 are the majority."""
    rng = np.random.default_rng(seed)
    rows = [rng.integers(1, VOCAB, rng.integers(lengths[0], lengths[1] + 1)).astype(np.int32) for _ in range(n)]
    rows.sort(key=len)  # batches of similar lengths (as bucketing makes them): each padded to its own longest
    labels = np.array([np.mean(r < VOCAB // 2) > 0.5 for r in rows], np.float32)
    return rows, labels


def padded(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        out[i, :min(len(r), length)] = r[:length]
    return out


def text_model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(None,), dtype="int32")
    h = L.Embedding(VOCAB, 6, mask_zero=True)(inputs)
    h = L.Bidirectional(L.LSTM(5))(h)
    return keras.Model(inputs, L.Dense(1, activation="sigmoid")(h))


def series_model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((None, 3)), L.Conv1D(6, 3, padding="causal", activation="relu"),
                             L.MaxPooling1D(2), L.Conv1D(4, 2), L.GlobalAveragePooling1D(), L.Dense(2)])


KERAS_TEXT = """
inputs = keras.Input(shape=(None,), dtype="int32")
h = keras.layers.Embedding(30, 6, mask_zero=True)(inputs)
h = keras.layers.Bidirectional(keras.layers.LSTM(5))(h)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(h))
"""
KERAS_SERIES = """
model = keras.Sequential([keras.Input((None, 3)), keras.layers.Conv1D(6, 3, padding="causal", activation="relu"),
                          keras.layers.MaxPooling1D(2), keras.layers.Conv1D(4, 2),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
"""


def series(n, steps, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, steps, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rows, labels = sequences(40, (2, 14))
    return rows, labels


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory, data):
    """Keras's weights after fits of our initial weights: on arrays padded to 14 and on a dataset
    padded per batch; its predictions at other lengths; its .keras file of the text model."""
    tmp = tmp_path_factory.mktemp("varlen")
    rows, labels = data
    np.savez(tmp / "data.npz", x14=padded(rows, 14), y=labels, xs8=series(12, 8), xs16=series(12, 16, seed=2),
             xs11=series(5, 11, seed=3), *rows)
    np.savez(tmp / "w0_text.npz", *text_model().get_weights())
    np.savez(tmp / "w0_series.npz", *series_model().get_weights())
    run_keras(f"""
        import numpy as np, keras, tensorflow as tf
        d = np.load("data.npz")
        rows = [d[f"arr_{{i}}"] for i in range(40)]
        def start(name):
            w0 = np.load(f"w0_{{name}}.npz")
            model.set_weights([w0[f"arr_{{i}}"] for i in range(len(w0.files))])
        {KERAS_TEXT.strip().replace(chr(10), chr(10) + ' ' * 8)}
        start("text")
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
        np.save("text_predict_short.npy", model.predict(d["x14"][:, :9], verbose=0))
        h = model.fit(d["x14"], d["y"], batch_size=8, epochs=2, shuffle=False, verbose=0)
        np.savez("text_arrays.npz", np.array(h.history["loss"]), *model.get_weights())
        start("text")
        ds = tf.data.Dataset.from_generator(lambda: ((r, y) for r, y in zip(rows, d["y"])),
                                            output_signature=(tf.TensorSpec((None,), tf.int32),
                                                              tf.TensorSpec((), tf.float32)))
        ds = ds.padded_batch(8)
        h = model.fit(ds, epochs=2, verbose=0)
        np.savez("text_padded.npz", np.array(h.history["loss"]), *model.get_weights())
        np.save("text_evaluate.npy", np.array(model.evaluate(ds, verbose=0)))
        model.save("text.keras")
        {KERAS_SERIES.strip().replace(chr(10), chr(10) + ' ' * 8)}
        start("series")
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        for steps in (8, 16):
            x = d[f"xs{{steps}}"]
            model.fit(x, x[:, :2, 0], batch_size=4, epochs=1, shuffle=False, verbose=0)
        np.savez("series.npz", model.predict(d["xs11"], verbose=0), *model.get_weights())
    """, tmp, timeout=900)
    return tmp


def assert_weights(model, theirs, first, what):
    weights = model.get_weights()
    assert len(weights) == len(theirs.files) - first, what
    for i, w in enumerate(weights):
        np.testing.assert_allclose(w, theirs[f"arr_{i + first}"], rtol=2e-4, atol=3e-6, err_msg=f"{what} weight {i}")


def padded_dataset(rows, labels, batch=8):
    return tf.data.Dataset.from_generator(lambda: ((r, y) for r, y in zip(rows, labels)),
                                          output_signature=(tf.TensorSpec((None,), tf.int32),
                                                            tf.TensorSpec((), tf.float32))).padded_batch(batch)


def test_a_none_axis_is_declared_and_built_once(data):
    model = text_model()
    assert model.input_shape == (None, None)
    embedding = next(layer for layer in model.layers if isinstance(layer, L.Embedding))
    assert embedding.output_shape == (None, None, 6)
    assert model.output_shape == (None, 1)
    weights = [w.copy() for w in model.get_weights()]
    rows, _ = data
    a, b = model.predict(padded(rows[:4], 5), verbose=0), model.predict(padded(rows[:4], 17), verbose=0)
    assert a.shape == b.shape == (4, 1)
    # Zeros appended are masked steps: the prediction does not depend on the padded length.
    np.testing.assert_allclose(a[[i for i in range(4) if len(rows[i]) <= 5]],
                               b[[i for i in range(4) if len(rows[i]) <= 5]], rtol=1e-6)
    for w0, w in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(w0, w)


def test_text_model_on_padded_arrays_trains_like_keras(keras_runs, data):
    _, labels = data
    d = np.load(keras_runs / "data.npz")
    model = text_model()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    np.testing.assert_allclose(model.predict(d["x14"][:, :9], verbose=0),
                               np.load(keras_runs / "text_predict_short.npy"), rtol=2e-5, atol=2e-6)
    history = model.fit(d["x14"], labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    theirs = np.load(keras_runs / "text_arrays.npz")
    np.testing.assert_allclose(history.history["loss"], theirs["arr_0"], rtol=2e-5)
    assert_weights(model, theirs, 1, "arrays")


def test_batches_of_different_lengths_in_one_fit_train_like_keras(keras_runs, data):
    rows, labels = data
    ds = padded_dataset(rows, labels)
    assert sorted({x.shape[1] for x, _ in ds.as_numpy_iterator()}) != [14]  # lengths differ per batch
    model = text_model()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(ds, epochs=2, verbose=0)
    theirs = np.load(keras_runs / "text_padded.npz")
    np.testing.assert_allclose(history.history["loss"], theirs["arr_0"], rtol=2e-5)
    assert_weights(model, theirs, 1, "padded per batch")
    np.testing.assert_allclose(model.evaluate(ds, verbose=0), np.load(keras_runs / "text_evaluate.npy"), rtol=2e-5)
    predicted = model.predict(ds.map(lambda x, y: x), verbose=0)
    assert predicted.shape == (40, 1)


def test_conv1d_and_pooling_over_a_none_time_axis_match_keras(keras_runs):
    d = np.load(keras_runs / "data.npz")
    model = series_model()
    assert model.output_shape == (None, 2) and model.layers[0].output_shape == (None, None, 6)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    for steps in (8, 16):
        x = d[f"xs{steps}"]
        model.fit(x, x[:, :2, 0], batch_size=4, epochs=1, shuffle=False, verbose=0)
    theirs = np.load(keras_runs / "series.npz")
    np.testing.assert_allclose(model.predict(d["xs11"], verbose=0), theirs["arr_0"], rtol=2e-4, atol=2e-6)
    assert_weights(model, theirs, 1, "series")


def test_mirrored_strategy_on_batches_of_different_lengths_equals_one_device(logical_cpus, data):
    logical_cpus(2)
    rows, labels = data
    trained = []
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])):
        with strategy.scope():
            model = text_model()
            model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy")
        model.fit(padded_dataset(rows, labels), epochs=2, verbose=0)
        trained.append(model.get_weights())
    for a, b in zip(*trained):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_keras_files_of_a_variable_length_model_go_both_ways(keras_runs, tmp_path, data):
    rows, _ = data
    d = np.load(keras_runs / "data.npz")
    theirs = keras.models.load_model(keras_runs / "text.keras")
    assert theirs.input_shape == (None, None)
    weights = np.load(keras_runs / "text_padded.npz")
    assert_weights(theirs, weights, 1, "loaded")
    ours = text_model()
    ours.save(tmp_path / "ours.keras")
    x = d["x14"][:6, :11]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ours_predict.npy", ours.predict(x, verbose=0))
    run_keras("""
        import numpy as np, keras
        m = keras.models.load_model("ours.keras")
        assert m.input_shape == (None, None), m.input_shape
        np.testing.assert_allclose(m.predict(np.load("x.npy"), verbose=0), np.load("ours_predict.npy"), rtol=2e-5,
                                   atol=2e-6)
    """, tmp_path)
    again = keras.models.load_model(tmp_path / "ours.keras")
    assert again.input_shape == (None, None)
    np.testing.assert_allclose(again.predict(x, verbose=0), ours.predict(x, verbose=0), rtol=1e-6)


def test_summary_prints_none_for_the_variable_axis(capsys):
    series_model().summary()
    out = capsys.readouterr().out
    assert "(None, None, 6)" in out and "(None, 2)" in out


def test_layers_that_need_a_known_axis_say_which():
    with pytest.raises(ValueError, match=r'"flatten".*\(Flatten\) needs every dimension of its input known.*'
                                         r"\(None, 4\)"):
        keras.Sequential([keras.Input((None, 4)), L.Flatten(name="flatten"), L.Dense(2)])
    with pytest.raises(ValueError, match=r'"dense".*needs axis 2 of its input known.*\(None, 5, None\)'):
        keras.Sequential([keras.Input((5, None)), L.Dense(2, name="dense")])
    with pytest.raises(ValueError, match=r"2 inputs needs every dimension of each input known"):
        a, b = keras.Input((None, 3)), keras.Input((3,))
        keras.Model([a, b], L.Concatenate()([L.GlobalAveragePooling1D()(a), b]))


def test_strategies_that_size_their_stages_once_refuse_a_none_axis(logical_cpus, data):
    logical_cpus(2)
    rows, labels = data
    mesh = keras.distribution.DeviceMesh((2,), ("pipe",), devices=keras.distribution.list_devices()[:2])
    with keras.distribution.PipelineParallel(mesh, num_microbatches=2).scope():
        model = keras.Sequential([keras.Input((None,), dtype="int32"), L.Embedding(VOCAB, 4, name="embedding"),
                                  L.LSTM(3), L.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"needs every dimension of the model's values known.*"
                                         r'"embedding".*variable-length inputs train under the data-parallel'):
        model.fit(padded(rows, 14), labels, epochs=1, verbose=0)


def test_padded_batch_pads_each_batch_to_its_longest_as_tf():
    ds = tf.data.Dataset.from_generator(
        lambda: ((np.arange(1, n + 1, dtype=np.int64), np.full((n, 2), n, np.float32)) for n in (3, 1, 2, 4, 2)),
        output_signature=(tf.TensorSpec((None,), tf.int64), tf.TensorSpec((None, 2), tf.float32)))
    batches = list(ds.padded_batch(2).as_numpy_iterator())
    assert [b[0].shape for b in batches] == [(2, 3), (2, 4), (1, 2)]
    np.testing.assert_array_equal(batches[0][0], [[1, 2, 3], [1, 0, 0]])
    np.testing.assert_array_equal(batches[0][1][1], [[1, 1], [0, 0], [0, 0]])
    fixed = list(ds.padded_batch(2, padded_shapes=((5,), (None, 2)), padding_values=(-1, 0.5),
                                 drop_remainder=True).as_numpy_iterator())
    assert len(fixed) == 2 and fixed[1][0].shape == (2, 5)
    np.testing.assert_array_equal(fixed[1][0], [[1, 2, -1, -1, -1], [1, 2, 3, 4, -1]])
    np.testing.assert_array_equal(fixed[0][1][1][1:], [[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match=r"size 4 along axis 0, longer than its padded shape \(3,\)"):
        list(ds.padded_batch(5, padded_shapes=((3,), (None, 2))).as_numpy_iterator())


def test_onnx_export_and_the_planner_say_they_need_fixed_lengths(tmp_path):
    model = series_model()
    with pytest.raises(NotImplementedError, match=r"variable-length axis \(None, None, 3\).*export a copy"):
        model.export(str(tmp_path / "m.onnx"), format="onnx")
    from mdtrain.plan import profile
    with pytest.raises(ValueError, match=r"variable length \(None, None, 3\)"):
        profile.check_model(model)
