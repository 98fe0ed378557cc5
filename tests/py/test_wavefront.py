"""keras.distribution.WavefrontPipeline: a stack of LSTM/GRU layers cut into stages over 2 and 4 logical
CPU devices, time chunks flowing between them, trains to the weights and losses of the same model
trained on one device (float32 rounding of the chunked gradient sums); bad arguments and stacks it
cannot cut are ValueErrors naming the argument or the layer."""
import numpy as np
import pytest

import mdtrain as tf

distribution = tf.keras.distribution


def _stack(seed=5, gru=False):
    tf.keras.utils.set_random_seed(seed)
    L = tf.keras.layers
    rnn = [L.LSTM(8, return_sequences=True, name="r0"), L.LSTM(8, return_sequences=True, name="r1"),
           (L.GRU if gru else L.LSTM)(8, return_sequences=True, name="r2"), L.LSTM(8, return_sequences=True, name="r3")]
    model = tf.keras.Sequential([tf.keras.Input((9, 3))] + rnn + [L.Dense(2, name="head")])
    model.compile(optimizer="adam", loss="mse")
    return model


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((24, 9, 3)).astype("float32"), rng.standard_normal((24, 9, 2)).astype("float32")


@pytest.mark.parametrize("devices,chunk,gru", [(2, 3, False), (4, 2, True)])
def test_weights_match_one_device(logical_cpus, data, devices, chunk, gru):
    logical_cpus(4)
    x, y = data
    ref, piped = _stack(gru=gru), _stack(gru=gru)
    for a, b in zip(ref.get_weights(), piped.get_weights()):
        np.testing.assert_array_equal(a, b)
    mesh = distribution.DeviceMesh((devices,), ("pipe",), devices=distribution.list_devices()[:devices])
    wave = distribution.WavefrontPipeline(mesh, time_chunk=chunk)
    want = [float(ref.train_on_batch(x[i:i + 8], y[i:i + 8])) for i in range(0, 24, 8)]
    got = [wave.train_on_batch(piped, x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert wave.stage_starts(piped) == ([0, 2] if devices == 2 else [0, 1, 2, 3])
    for a, b in zip(piped.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)


def test_bad_time_chunk_and_non_recurrent_stage_are_value_errors(logical_cpus):
    logical_cpus(2)
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    with pytest.raises(ValueError, match="time_chunk"):
        distribution.WavefrontPipeline(mesh, time_chunk=0)
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((5, 3)), tf.keras.layers.LSTM(4, name="last_only"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    wave = distribution.WavefrontPipeline(mesh, time_chunk=2)
    with pytest.raises(ValueError, match="last_only"):
        wave.train_on_batch(model, np.zeros((2, 5, 3), "float32"), np.zeros((2, 1), "float32"))
