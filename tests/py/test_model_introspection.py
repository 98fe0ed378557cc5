"""Keras's ways into a model's structure: Sequential.pop (training goes on, against Keras 3 on TF)
and get_layer."""
import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers


def data():
    rng = np.random.default_rng(5)
    return rng.uniform(-1, 1, (32, 4)).astype(np.float32), rng.uniform(-1, 1, (32, 2)).astype(np.float32)


def three_dense(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), L.Dense(5, activation="tanh", name="d1"),
                             L.Dense(3, activation="relu", name="d2"), L.Dense(2, name="d3")])


def test_pop_removes_the_last_layer_and_keeps_the_others_weights():
    model = three_dense()
    before = [layer.get_weights() for layer in model.layers]
    popped = model.pop()
    assert popped.name == "d3" and [layer.name for layer in model.layers] == ["d1", "d2"]
    assert model.output_shape == (None, 3)
    for layer, weights in zip(model.layers, before):
        for got, want in zip(layer.get_weights(), weights):
            np.testing.assert_array_equal(got, want)
    for got, want in zip(popped.get_weights(), before[2]):  # the popped layer keeps its own
        np.testing.assert_array_equal(got, want)
    x, _ = data()
    hidden = np.maximum(np.tanh(x @ before[0][0] + before[0][1]) @ before[1][0] + before[1][1], 0)
    np.testing.assert_allclose(model.predict(x, verbose=0), hidden, rtol=1e-5, atol=1e-6)


def test_popping_every_layer_then_one_more_is_keras_type_error():
    model = three_dense()
    for _ in range(3):
        model.pop()
    assert model.layers == []
    with pytest.raises(TypeError, match="There are no layers in the model"):
        model.pop()


def test_a_functional_model_has_no_pop():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, L.Dense(2)(inputs))
    with pytest.raises(AttributeError):
        model.pop()


def test_fit_pop_fit_matches_keras(tmp_path):
    """Train, pop the head, train the rest on: the optimizer goes on with its state (Adam's moments
    and step count) for the layers that stay, as Keras's does."""
    x, y = data()
    y3 = np.random.default_rng(6).uniform(0, 1, (32, 3)).astype(np.float32)
    model = three_dense()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    np.savez(tmp_path / "w0.npz", *model.get_weights())
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    model.pop()
    history = model.fit(x, y3, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for name, array in (("x", x), ("y", y), ("y3", y3)):
        np.save(tmp_path / f"{name}.npy", array)
    run_keras("""
        import numpy as np, keras
        x, y, y3 = np.load("x.npy"), np.load("y.npy"), np.load("y3.npy")
        w0 = np.load("w0.npz")
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="tanh", name="d1"),
                              keras.layers.Dense(3, activation="relu", name="d2"), keras.layers.Dense(2, name="d3")])
        m.set_weights([w0[f"arr_{i}"] for i in range(6)])
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        m.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        m.pop()
        h = m.fit(x, y3, batch_size=8, epochs=2, shuffle=False, verbose=0)
        np.savez("keras.npz", *m.get_weights(), np.array(h.history["loss"]))
    """, tmp_path)
    theirs = np.load(tmp_path / "keras.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i}"], rtol=1e-4, atol=1e-5, err_msg=f"weight {i}")
    np.testing.assert_allclose(history.history["loss"], theirs["arr_4"], rtol=1e-4)


def test_a_new_head_gets_fresh_optimizer_slots_and_the_rest_keep_theirs():
    x, y = data()
    model = three_dense()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    # iterations, then Adam's momentums of d1, d2, d3 (kernel, bias each), then their velocities.
    before = model.optimizer.variables
    model.pop()
    model.add(L.Dense(2, name="head"))
    after = model.optimizer.variables
    assert len(after) == len(before) and int(after[0]) == int(before[0]) == 4
    for kind in range(2):  # momentum, velocity
        old, new = before[1 + 6 * kind:7 + 6 * kind], after[1 + 6 * kind:7 + 6 * kind]
        for got, want in zip(new[:4], old[:4]):
            np.testing.assert_array_equal(got, want)
        for slot in new[4:]:
            assert not slot.any()
        assert any(slot.any() for slot in old[4:])
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert int(model.optimizer.variables[0]) == 8


def test_get_layer_by_name_or_index_as_keras():
    model = three_dense()
    assert model.get_layer("d2") is model.layers[1]
    assert model.get_layer(index=2) is model.layers[2]
    with pytest.raises(ValueError, match="Provide only a layer name or a layer index"):
        model.get_layer(name="d1", index=2)
    with pytest.raises(ValueError, match="at index 3 but model only has 3 layers"):
        model.get_layer(index=3)
    with pytest.raises(ValueError, match=r"No such layer: d9. Existing layers are: \['d1', 'd2', 'd3'\]"):
        model.get_layer("d9")
    with pytest.raises(ValueError, match="Provide either a layer name or layer index"):
        model.get_layer()
