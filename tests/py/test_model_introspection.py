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


def test_feature_extraction_from_a_sequential_model_as_keras_documents():
    """keras.Model(inputs=model.inputs, outputs=[layer.output for layer in model.layers]): the new
    model shares the layers (and so the weights, also after training) and gives every layer's
    output."""
    model = three_dense()
    x, y = data()
    extractor = keras.Model(inputs=model.inputs, outputs=[layer.output for layer in model.layers])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    features = extractor.predict(x, verbose=0)
    assert [f.shape for f in features] == [(32, 5), (32, 3), (32, 2)]
    w = [layer.get_weights() for layer in model.layers]
    h1 = np.tanh(x @ w[0][0] + w[0][1])
    np.testing.assert_allclose(features[0], h1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features[2], model.predict(x, verbose=0), rtol=1e-6, atol=1e-7)
    assert model.input.shape == (None, 4) and model.output.shape == (None, 2)
    assert model.layers[1].input is model.layers[0].output


def test_a_new_head_on_a_trained_models_features():
    model = three_dense()
    head = L.Dense(1, name="new_head")(model.get_layer("d2").output)
    transfer = keras.Model(model.input, head)
    assert [layer.name for layer in transfer.layers] == ["d1", "d2", "new_head"]
    transfer.compile(optimizer="sgd", loss="mse")
    x, _ = data()
    transfer.fit(x, np.ones((32, 1), np.float32), epochs=1, verbose=0)
    # The shared layers trained in place: the original model computes with their new weights.
    w = [layer.get_weights() for layer in transfer.layers[:2]]
    hidden = np.maximum(np.tanh(x @ w[0][0] + w[0][1]) @ w[1][0] + w[1][1], 0)
    d3 = model.get_layer("d3").get_weights()
    np.testing.assert_allclose(model.predict(x, verbose=0), hidden @ d3[0] + d3[1], rtol=1e-5, atol=1e-6)


def test_functional_models_keep_the_tensors_they_were_made_from():
    inputs = keras.Input((4,))
    hidden = L.Dense(3, name="h")(inputs)
    outputs = L.Dense(2, name="o")(hidden)
    model = keras.Model(inputs, outputs)
    assert model.input is inputs and model.inputs == [inputs] and model.output is outputs
    assert model.get_layer("h").output is hidden and model.get_layer("o").input is hidden


def test_a_loaded_model_has_inputs_and_outputs_too(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, L.Dense(2, name="o")(L.Dense(3, name="h")(inputs)))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    extractor = keras.Model(loaded.inputs, loaded.get_layer("h").output)
    x, _ = data()
    h = loaded.get_layer("h").get_weights()
    np.testing.assert_allclose(extractor.predict(x, verbose=0), x @ h[0] + h[1], rtol=1e-5, atol=1e-6)


def test_an_unbuilt_model_or_uncalled_layer_has_no_symbolic_input():
    model = keras.Sequential([L.Dense(2)])
    with pytest.raises(AttributeError, match="has never been called and thus has no defined input"):
        model.inputs
    with pytest.raises(AttributeError, match="has never been called and thus has no defined output"):
        L.Dense(2).output
