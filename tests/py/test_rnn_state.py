"""initial_state= and return_state=True of SimpleRNN / LSTM / GRU in eager calls: outputs, final states
and the gradients (GradientTape) of a loss on all of them with respect to x, the initial states and the
weights equal Keras/TF's (oracle subprocess) within 1e-5; functional models refuse them naming what is
missing."""
import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers

KERAS_SIDE = """
import numpy as np, keras, tensorflow as tf
d = np.load("case.npz", allow_pickle=True)
kwargs = d["kwargs"].item()
layer = keras.layers.{cls}(4, return_state=True, **kwargs)
x = tf.constant(d["x"]); states = [tf.constant(d[f"s{{i}}"]) for i in range(int(d["ns"]))]
layer(x, initial_state=states)
layer.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
with tf.GradientTape() as tape:
    tape.watch(x); tape.watch(states)
    out = layer(x, initial_state=states, training=True)
    loss = sum(tf.reduce_sum(o * d[f"g{{i}}"]) for i, o in enumerate(out))
grads = tape.gradient(loss, [x] + states + layer.trainable_variables)
np.savez("keras.npz", **{{f"o{{i}}": np.asarray(o) for i, o in enumerate(out)}},
         **{{f"d{{i}}": np.asarray(g) for i, g in enumerate(grads)}})
"""


@pytest.mark.parametrize("cls,kwargs", [("LSTM", {}), ("LSTM", {"return_sequences": True, "go_backwards": True}),
                                         ("GRU", {"return_sequences": True, "go_backwards": True}), ("SimpleRNN", {})])
def test_states_and_their_gradients_equal_keras(tmp_path, cls, kwargs):
    rng = np.random.default_rng(2)
    tf.keras.utils.set_random_seed(4)
    layer = getattr(L, cls)(4, return_state=True, **kwargs)
    x = rng.normal(size=(3, 5, 2)).astype(np.float32)
    n_states = 2 if cls == "LSTM" else 1
    states = [rng.normal(scale=0.5, size=(3, 4)).astype(np.float32) for _ in range(n_states)]
    out = layer(x, initial_state=states)
    assert len(out) == 1 + n_states
    weights = [w + rng.normal(scale=0.2, size=w.shape).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    seeds = [rng.normal(size=np.asarray(o).shape).astype(np.float32) for o in out]
    xv = tf.constant(x)
    sv = [tf.constant(s) for s in states]
    with tf.GradientTape() as tape:
        tape.watch(xv)
        for s in sv:
            tape.watch(s)
        out = layer(xv, initial_state=sv, training=True)
        loss = sum(tf.reduce_sum(o * g) for o, g in zip(out, seeds))
    grads = tape.gradient(loss, [xv] + sv + layer.trainable_variables)
    np.savez(tmp_path / "case.npz", x=x, kwargs=np.array(kwargs), ns=np.array(n_states), nw=np.array(len(weights)),
             **{f"s{i}": s for i, s in enumerate(states)}, **{f"w{i}": w for i, w in enumerate(weights)},
             **{f"g{i}": g for i, g in enumerate(seeds)})
    run_keras(KERAS_SIDE.format(cls=cls), cwd=tmp_path)
    k = np.load(tmp_path / "keras.npz")
    for i, o in enumerate(out):
        np.testing.assert_allclose(np.asarray(o), k[f"o{i}"], rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    for i, g in enumerate(grads):
        np.testing.assert_allclose(np.asarray(g), k[f"d{i}"], rtol=1e-5, atol=1e-6, err_msg=f"gradient {i}")


def test_zero_initial_state_is_the_plain_call():
    tf.keras.utils.set_random_seed(1)
    layer = L.LSTM(3, return_state=True)
    x = np.random.default_rng(0).normal(size=(2, 4, 2)).astype(np.float32)
    y, h, c = layer(x)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(h))
    y0, h0, c0 = layer(x, initial_state=[np.zeros((2, 3), np.float32)] * 2)
    np.testing.assert_array_equal(np.asarray(y0), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(c0), np.asarray(c))
    with pytest.raises(ValueError, match="expects 2 initial state"):
        layer(x, initial_state=[np.zeros((2, 3), np.float32)])


def test_functional_models_name_what_is_missing():
    inp = tf.keras.Input((4, 2))
    with pytest.raises(NotImplementedError, match="layer graph"):
        L.LSTM(3, return_state=True)(inp)
