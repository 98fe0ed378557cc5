"""keras.distribution.WavefrontPipeline: a stack of LSTM/GRU layers compiled under its scope and trained
with model.fit over 2 and 4 logical CPU devices, time chunks flowing between them, ends with the weights,
optimizer state and losses of the same model trained on one device (float32 rounding of the chunked
gradient sums); model.optimizer counts the steps and a saved model holds the trained state; evaluate and
predict give one device's results; bad arguments and stacks it cannot cut are ValueErrors naming the
argument or the layer."""
import numpy as np
import pytest

import mdtrain as tf

distribution = tf.keras.distribution


def _stack(seed=5, gru=False, head_activation=None):
    tf.keras.utils.set_random_seed(seed)
    L = tf.keras.layers
    rnn = [L.LSTM(8, return_sequences=True, name="r0"), L.LSTM(8, return_sequences=True, name="r1"),
           (L.GRU if gru else L.LSTM)(8, return_sequences=True, name="r2"), L.LSTM(8, return_sequences=True, name="r3")]
    model = tf.keras.Sequential([tf.keras.Input((9, 3))] + rnn + [L.Dense(2, activation=head_activation, name="head")])
    model.compile(optimizer="adam", loss="mse")
    return model


def _mesh(devices):
    return distribution.DeviceMesh((devices,), ("pipe",), devices=distribution.list_devices()[:devices])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((24, 9, 3)).astype("float32"), rng.standard_normal((24, 9, 2)).astype("float32")


@pytest.mark.parametrize("devices,chunk,gru", [(2, 3, False), (4, 2, True)])
def test_fit_matches_one_device(logical_cpus, data, tmp_path, devices, chunk, gru):
    logical_cpus(4)
    x, y = data
    ref = _stack(gru=gru)
    wave = distribution.WavefrontPipeline(_mesh(devices), time_chunk=chunk)
    with wave.scope():
        piped = _stack(gru=gru)
    for a, b in zip(ref.get_weights(), piped.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Batches of 10: the last one (4 rows) is smaller.
    want = ref.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0).history["loss"]
    got = piped.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert wave.stage_starts(piped) == ([0, 2] if devices == 2 else [0, 1, 2, 3])
    assert int(piped.optimizer.iterations) == 6 == int(ref.optimizer.iterations)
    for a, b in zip(piped.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)
    # The model's own optimizer took the steps: its Adam slots are the one-device model's.
    slots, ref_slots = piped.optimizer.variables, ref.optimizer.variables
    assert len(slots) == len(ref_slots) > 1
    for a, b in zip(slots, ref_slots):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-6)
    # A saved model holds the trained weights and optimizer state.
    path = str(tmp_path / "wave.keras")
    piped.save(path)
    loaded = tf.keras.models.load_model(path)
    for a, b in zip(loaded.get_weights(), piped.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert int(loaded.optimizer.iterations) == 6
    # evaluate and predict run forward as one device does.
    np.testing.assert_allclose(piped.evaluate(x, y, verbose=0), ref.evaluate(x, y, verbose=0), rtol=1e-5)
    np.testing.assert_allclose(piped.predict(x, verbose=0), ref.predict(x, verbose=0), rtol=1e-4, atol=1e-6)


def test_fused_softmax_head_and_train_on_batch(logical_cpus, data):
    logical_cpus(2)
    x, _ = data
    labels = (np.arange(24 * 9).reshape(24, 9) % 2).astype("int32")
    models = []
    for wave in (None, distribution.WavefrontPipeline(_mesh(2), time_chunk=4)):
        if wave is None:
            m = _stack(head_activation="softmax")
        else:
            with wave.scope():
                m = _stack(head_activation="softmax")
        m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        losses = [m.train_on_batch(x[i:i + 8], labels[i:i + 8], return_dict=True) for i in range(0, 24, 8)]
        models.append((m, losses))
    (ref, want), (piped, got) = models
    for w, g in zip(want, got):
        assert g["accuracy"] == pytest.approx(w["accuracy"])
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
    for a, b in zip(piped.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("clip", [{"clipnorm": 0.05}, {"global_clipnorm": 0.05}])
def test_clipping_sees_the_whole_gradient(logical_cpus, data, clip):
    logical_cpus(2)
    x, y = data
    models = []
    for wave in (None, distribution.WavefrontPipeline(_mesh(2), time_chunk=4)):
        if wave is None:
            m = _stack()
        else:
            with wave.scope():
                m = _stack()
        m.compile(optimizer=tf.keras.optimizers.SGD(0.5, **clip), loss="mse")
        m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        models.append(m)
    for a, b in zip(models[1].get_weights(), models[0].get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)


def test_bad_time_chunk_and_non_recurrent_stage_are_value_errors(logical_cpus):
    logical_cpus(2)
    with pytest.raises(ValueError, match="time_chunk"):
        distribution.WavefrontPipeline(_mesh(2), time_chunk=0)
    wave = distribution.WavefrontPipeline(_mesh(2), time_chunk=2)
    tf.keras.utils.set_random_seed(1)
    with wave.scope():
        model = tf.keras.Sequential([tf.keras.Input((5, 3)), tf.keras.layers.LSTM(4, name="last_only"),
                                     tf.keras.layers.Dense(1)])
        with pytest.raises(ValueError, match="last_only"):
            model.compile(optimizer="sgd", loss="mse")
