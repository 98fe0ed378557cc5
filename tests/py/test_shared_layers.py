"""Layers called at several places and models used as layers, as Keras runs them: a siamese
encoder (one Dense called on two inputs) trains its one set of weights on the sum of both calls'
gradients; a model called on new inputs is its layers called again (transfer learning, an encoder
reused twice). Against Keras 3 on TF (skipped without it): Keras loads mdtrain's .keras file (a
shared layer written with one inbound node per call) and its losses and weights after SGD epochs
match ours; Keras's own file of a siamese model loads here and predicts as Keras. Two replicas
train as one; strategies that split a model by its layers refuse shared layers, clearly."""
import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers


def data(rows=32, seed=0):
    rng = np.random.default_rng(seed)
    return ([rng.normal(size=(rows, 5)).astype(np.float32) for _ in range(2)],
            rng.normal(size=(rows, 1)).astype(np.float32))


def siamese(seed=0):
    """Two inputs, one Dense encoder called on both, their difference and product to a Dense."""
    keras.utils.set_random_seed(seed)
    a, b = keras.Input((5,), name="left"), keras.Input((5,), name="right")
    encoder = L.Dense(4, activation="tanh", name="encoder")
    ea, eb = encoder(a), encoder(b)
    merged = L.Concatenate(name="both")([L.Subtract(name="diff")([ea, eb]), L.Multiply(name="prod")([ea, eb])])
    model = keras.Model([a, b], L.Dense(1, name="head")(merged))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def nested(seed=0):
    """An encoder model used twice in another model (its layers shared by both calls)."""
    keras.utils.set_random_seed(seed)
    encoder = keras.Sequential([keras.Input((5,)), L.Dense(6, activation="relu", name="hidden"),
                                L.Dense(3, name="code")], name="encoder")
    a, b = keras.Input((5,), name="left"), keras.Input((5,), name="right")
    out = L.Dense(1, name="head")(L.Concatenate(name="both")([encoder(a), encoder(b)]))
    model = keras.Model([a, b], out)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model, encoder


def test_a_shared_layer_is_one_layer_with_one_set_of_weights():
    model = siamese()
    assert [layer.name for layer in model.layers].count("encoder") == 1
    assert len(model.get_layer("encoder").get_weights()) == 2
    assert len(model.trainable_weights) == 4  # encoder's and head's kernels and biases
    assert model.count_params() == 5 * 4 + 4 + 8 + 1
    # layer.output is its first call's
    assert model.get_layer("encoder").output is model.get_layer("diff").input[0]


def test_the_shared_gradient_is_the_sum_of_both_calls():
    """Against the same model written with two Dense layers whose weights are tied by hand: one SGD
    step of the shared model moves the encoder by the sum of the two copies' steps."""
    (xa, xb), y = data(rows=8)
    model = siamese()
    keras.utils.set_random_seed(1)
    a, b = keras.Input((5,)), keras.Input((5,))
    one, two = L.Dense(4, activation="tanh"), L.Dense(4, activation="tanh")
    ea, eb = one(a), two(b)
    head = L.Dense(1)
    untied = keras.Model([a, b], head(L.Concatenate()([L.Subtract()([ea, eb]), L.Multiply()([ea, eb])])))
    untied.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    encoder = model.get_layer("encoder").get_weights()
    one.set_weights(encoder)
    two.set_weights(encoder)
    head.set_weights(model.get_layer("head").get_weights())
    model.train_on_batch([xa, xb], y)
    untied.train_on_batch([xa, xb], y)
    for shared, w1, w2, w0 in zip(model.get_layer("encoder").get_weights(), one.get_weights(), two.get_weights(),
                                  encoder):
        np.testing.assert_allclose(shared - w0, (w1 - w0) + (w2 - w0), rtol=1e-5, atol=1e-7)


def test_siamese_training_matches_keras_both_ways(tmp_path):
    (xa, xb), y = data()
    model = siamese()
    model.save(tmp_path / "ours.keras")
    np.savez(tmp_path / "data.npz", xa=xa, xb=xb, y=y)
    run_keras("""
        import numpy as np, keras
        d = np.load("data.npz")
        m = keras.models.load_model("ours.keras", compile=False)
        assert len(m.get_layer("encoder")._inbound_nodes) == 2
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        h = m.fit([d["xa"], d["xb"]], d["y"], batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
        np.savez("keras.npz", np.array(h), *m.get_weights())
        # Keras's own siamese model and file, for mdtrain to read
        a, b = keras.Input((5,), name="a"), keras.Input((5,), name="b")
        shared = keras.layers.Dense(3, name="shared")
        out = keras.layers.Dense(2, name="out")(keras.layers.Add()([shared(a), shared(b)]))
        theirs = keras.Model([a, b], out)
        theirs.save("theirs.keras")
        np.save("theirs_pred.npy", theirs.predict([d["xa"], d["xb"]], verbose=0))
    """, tmp_path)
    theirs = np.load(tmp_path / "keras.npz")
    history = model.fit([xa, xb], y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(history, theirs["arr_0"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 1}"], rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    loaded = keras.models.load_model(tmp_path / "theirs.keras")
    assert [layer.name for layer in loaded.layers].count("shared") == 1
    np.testing.assert_allclose(loaded.predict([xa, xb], verbose=0), np.load(tmp_path / "theirs_pred.npy"),
                               rtol=1e-5, atol=1e-6)


def test_shared_layers_survive_mdtrain_files_and_configs(tmp_path):
    (xa, xb), y = data()
    model = siamese()
    model.fit([xa, xb], y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    expected = model.predict([xa, xb], verbose=0)
    for path in (tmp_path / "m.mdtrain", tmp_path / "m.keras"):
        model.save(path)
        loaded = keras.models.load_model(path)
        assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers], path
        np.testing.assert_allclose(loaded.predict([xa, xb], verbose=0), expected, rtol=1e-6, atol=1e-6)
    clone = keras.Model.from_config(model.get_config())
    assert [layer.name for layer in clone.layers].count("encoder") == 1


def test_a_model_used_twice_as_a_layer_trains_its_own_layers():
    (xa, xb), y = data()
    model, encoder = nested()
    assert len(model.trainable_weights) == 6
    before = [w.copy() for w in encoder.get_weights()]
    model.fit([xa, xb], y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    after = encoder.get_weights()
    assert all(not np.allclose(a, b) for a, b in zip(after, before))
    # the encoder is the outer model's layers: it predicts with the trained weights
    hidden = np.maximum(xa @ after[0] + after[1], 0)
    np.testing.assert_allclose(encoder.predict(xa, verbose=0), hidden @ after[2] + after[3], rtol=1e-5, atol=1e-5)


def test_transfer_learning_with_a_frozen_base():
    (xa, _), y = data()
    keras.utils.set_random_seed(0)
    base = keras.Sequential([keras.Input((5,)), L.Dense(8, activation="relu"), L.BatchNormalization()], name="base")
    base.trainable = False
    inputs = keras.Input((5,))
    model = keras.Model(inputs, L.Dense(1)(base(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    kept = [w.copy() for w in base.get_weights()]
    model.fit(xa, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for w, k in zip(base.get_weights(), kept):
        np.testing.assert_array_equal(w, k)
    base.trainable = True  # fine-tuning: recompile, and the base trains too
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(xa, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert not np.allclose(base.get_weights()[0], kept[0])


def test_two_replicas_train_shared_layers_as_one(logical_cpus):
    logical_cpus(2)
    (xa, xb), y = data()
    weights = []
    for devices in (["/cpu:0"], ["/cpu:0", "/cpu:1"]):
        with tf.distribute.MirroredStrategy(devices).scope():
            model = siamese()
        model.fit([xa, xb], y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bad_shared_calls_are_clear_errors():
    dense = L.Dense(3, name="d")
    dense(keras.Input((4,)))
    with pytest.raises(ValueError, match='"d".*shape'):
        a = keras.Input((4,))
        b = keras.Input((6,))
        keras.Model([a, b], L.Add()([dense(a), dense(b)]))
    _, encoder = nested()
    with pytest.raises(ValueError, match="encoder"):
        encoder(keras.Input((7,)))


def test_strategies_that_split_a_model_by_its_layers_refuse_shared_layers(logical_cpus):
    logical_cpus(2)
    distribution = keras.distribution
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=distribution.list_devices()[:2])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["head/kernel"] = ("model", None)
    with pytest.raises(ValueError, match='"encoder" is called at several places'):
        with distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
            model = siamese()
        model.fit(*data(), batch_size=8, epochs=1, verbose=0)
