"""keras.saving, keras.models.clone_model / model_from_json and Model.get_config / from_config /
to_json, checked against Keras 3 on TF where a file or a config crosses (skipped without it)."""
import json

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers


def functional(seed=0):
    """Two inputs, two branches merged: what a Sequential model cannot be."""
    keras.utils.set_random_seed(seed)
    a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
    h = L.Dense(8, activation="relu", name="ha")(a)
    g = L.Dense(8, activation="tanh", name="hb")(b)
    out = L.Dense(3, name="out")(L.Concatenate(name="cat")([h, L.Add(name="sum")([h, g])]))
    return keras.Model([a, b], out, name="two_towers")


def sequential(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), L.Dense(5, activation="relu", name="d1"), L.Dense(2, name="d2")],
                            name="seq")


def inputs(n=16, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype(np.float32), rng.normal(size=(n, 4)).astype(np.float32)


# ---- get_config / from_config / to_json / clone_model ---------------------------------------
@pytest.mark.parametrize("make", [sequential, functional])
def test_from_config_rebuilds_the_same_architecture(make):
    model = make()
    config = model.get_config()
    assert config["name"] == model.name and [l["class_name"] for l in config["layers"]][0] == "InputLayer"
    again = type(model).from_config(config)
    assert type(again) is type(model) and again.get_config() == config
    assert [l.name for l in again.layers] == [l.name for l in model.layers]
    again.set_weights(model.get_weights())
    x = list(inputs()) if make is functional else inputs()[0]
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


def test_unbuilt_sequential_config_has_no_input_shape():
    model = keras.Sequential([L.Dense(3, name="d")])
    config = model.get_config()
    assert [l["class_name"] for l in config["layers"]] == ["Dense"] and "build_input_shape" not in config
    again = keras.Sequential.from_config(config)
    assert not again.built and again.layers[0].name == "d"


@pytest.mark.parametrize("make", [sequential, functional])
def test_to_json_round_trip_compiles_as_keras_does(make):
    model = make()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    text = model.to_json()
    assert json.loads(text)["class_name"] == ("Sequential" if make is sequential else "Functional")
    again = keras.models.model_from_json(text)
    assert again.get_config() == model.get_config()
    assert isinstance(again.optimizer, keras.optimizers.Adam) and again.optimizer.learning_rate == pytest.approx(0.01)


@pytest.mark.parametrize("make", [sequential, functional])
def test_clone_model_has_new_weights_and_the_same_structure(make):
    model = make()
    clone = keras.models.clone_model(model)
    assert type(clone) is type(model) and clone.get_config() == model.get_config()
    assert all(a is not b for a, b in zip(clone.layers, model.layers))
    assert any(not np.array_equal(a, b) for a, b in zip(clone.get_weights(), model.get_weights()))
    clone.set_weights(model.get_weights())
    x = list(inputs()) if make is functional else inputs()[0]
    np.testing.assert_array_equal(clone.predict(x, verbose=0), model.predict(x, verbose=0))


def test_clone_function_makes_each_layer():
    def widen(layer):
        config = layer.get_config()
        if layer.name == "ha":
            config["activation"] = "sigmoid"
        return layer.__class__.from_config(config)

    clone = keras.models.clone_model(functional(), clone_function=widen)
    activations = {l.name: l.get_config().get("activation") for l in clone.layers}
    assert activations["ha"] == "sigmoid" and activations["hb"] == "tanh"
    with pytest.raises(ValueError, match="must return a layer"):
        keras.models.clone_model(sequential(), clone_function=lambda layer: None)
    with pytest.raises(NotImplementedError, match="call_function"):
        keras.models.clone_model(sequential(), call_function=lambda layer, *a, **k: layer(*a, **k))


def test_clone_model_on_new_input_tensors():
    a, b = keras.Input((6,), name="new_a"), keras.Input((4,), name="new_b")
    clone = keras.models.clone_model(functional(), input_tensors=[a, b])
    assert [l.name for l in clone.layers] == ["ha", "hb", "sum", "cat", "out"]
    assert clone.get_config()["input_layers"] == [["new_a", 0, 0], ["new_b", 0, 0]]
    seq = keras.models.clone_model(sequential(), input_tensors=keras.Input((6,)))
    assert seq.built and seq.input_shape == (None, 6) and seq.count_params() == sequential().count_params()
    with pytest.raises(ValueError, match="has 2 inputs"):
        keras.models.clone_model(functional(), input_tensors=[a])
    with pytest.raises(ValueError, match="shape"):
        keras.models.clone_model(functional(), input_tensors=[keras.Input((5,)), b])
    with pytest.raises(ValueError, match="keras.Input tensors"):
        keras.models.clone_model(functional(), input_tensors=[L.Dense(6)(a), b])


# ---- custom objects --------------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="mdtrain_tests")
class ScaledDense(L.Dense):
    """A registered subclass of a built-in layer with an argument of its own."""

    def __init__(self, units, scale=1.0, **kwargs):
        super().__init__(units, **kwargs)
        self.scale = scale

    def get_config(self):
        return dict(super().get_config(), scale=self.scale)


def test_register_keras_serializable_names_and_registry():
    assert keras.saving.get_registered_name(ScaledDense) == "mdtrain_tests>ScaledDense"
    assert keras.saving.get_custom_objects()["mdtrain_tests>ScaledDense"] is ScaledDense
    assert keras.saving.get_registered_object("mdtrain_tests>ScaledDense") is ScaledDense
    with pytest.raises(ValueError, match="get_config"):
        keras.saving.register_keras_serializable()(type("NoConfig", (), {}))


def test_registered_layer_round_trips_through_a_keras_file(tmp_path):
    i = keras.Input((6,))
    model = keras.Model(i, ScaledDense(3, scale=2.5, name="sd")(i))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert type(loaded.layers[0]) is ScaledDense and loaded.layers[0].scale == 2.5
    x = inputs()[0]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    entry = model.get_config()["layers"][1]
    assert entry["registered_name"] == "mdtrain_tests>ScaledDense" and entry["module"] == __name__


class Unregistered(L.Dense):
    pass


def test_unregistered_class_needs_custom_objects_or_a_scope(tmp_path):
    i = keras.Input((6,))
    model = keras.Model(i, Unregistered(2, name="u")(i))
    model.save(tmp_path / "u.keras")
    with pytest.raises(ValueError, match="'Unregistered' is not supported"):
        keras.saving.load_model(tmp_path / "u.keras")
    assert type(keras.saving.load_model(tmp_path / "u.keras", custom_objects={"Unregistered": Unregistered})
                .layers[0]) is Unregistered
    with keras.saving.custom_object_scope({"Unregistered": Unregistered}):
        assert type(keras.models.model_from_json(model.to_json()).layers[0]) is Unregistered
    with pytest.raises(ValueError, match="'Unregistered' is not supported"):
        keras.models.model_from_json(model.to_json())  # the scope has ended
    with pytest.raises(ValueError, match="not a subclass of an mdtrain layer"):
        keras.models.model_from_json(model.to_json(), custom_objects={"Unregistered": dict})


def test_a_config_module_is_never_imported():
    # The "module" and class name of a config name os.system: found in no registry, nothing runs.
    evil = {"module": "os", "class_name": "system", "config": {"command": "true"}, "registered_name": "system"}
    with pytest.raises(TypeError, match="Could not locate class 'system'.*never imports"):
        keras.saving.deserialize_keras_object(evil)
    with pytest.raises(TypeError, match="Could not locate function 'getcwd'"):
        keras.saving.deserialize_keras_object({"module": "os", "class_name": "function", "config": "getcwd",
                                               "registered_name": "getcwd"})
    with pytest.raises(ValueError, match="lambda"):
        keras.saving.deserialize_keras_object({"class_name": "__lambda__", "config": {"value": "x"}})


@pytest.mark.parametrize("obj", [keras.optimizers.Adam(0.02), keras.losses.MeanSquaredError(),
                                 keras.initializers.GlorotUniform(seed=3), keras.regularizers.L2(0.01)])
def test_serialize_deserialize_round_trip(obj):
    config = keras.saving.serialize_keras_object(obj)
    assert config["class_name"] == type(obj).__name__ and config["registered_name"] is None
    assert config["module"].startswith("keras.")
    back = keras.saving.deserialize_keras_object(config)
    assert type(back) is type(obj) and keras.saving.serialize_keras_object(back) == config


def test_serialize_plain_values_as_keras():
    s = keras.saving.serialize_keras_object
    assert s([1, "a", None, (2, 3)]) == [1, "a", None, (2, 3)]
    assert s(np.float32(2.5)) == 2.5 and s(np.arange(3)) == {"class_name": "__numpy__",
                                                             "config": {"value": [0, 1, 2], "dtype": "int64"}}
    back = keras.saving.deserialize_keras_object(s(np.arange(3, dtype=np.float32)))
    assert back.dtype == np.float32 and back.tolist() == [0, 1, 2]


def test_save_model_and_load_model(tmp_path):
    model = functional()
    model.compile(optimizer="adam", loss="mse")
    keras.saving.save_model(model, tmp_path / "f.keras")
    loaded = keras.saving.load_model(tmp_path / "f.keras")
    x = list(inputs())
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert keras.saving.load_model(tmp_path / "f.keras", compile=False).optimizer is None


# ---- against Keras 3 on TF -------------------------------------------------------------------
KERAS_FUNCTIONAL = """
import numpy as np, keras
keras.utils.set_random_seed(0)
L = keras.layers
a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
h = L.Dense(8, activation="relu", name="ha")(a)
g = L.Dense(8, activation="tanh", name="hb")(b)
out = L.Dense(3, name="out")(L.Concatenate(name="cat")([h, L.Add(name="sum")([h, g])]))
m = keras.Model([a, b], out, name="two_towers")
m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
"""


def test_functional_keras_file_written_here_loads_in_keras(tmp_path):
    model = functional()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    xa, xb = inputs()
    model.fit([xa, xb], np.ones((16, 3), np.float32), batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "md.keras")
    np.savez(tmp_path / "x.npz", xa=xa, xb=xb, pred=model.predict([xa, xb], verbose=0))
    run_keras("""
        import numpy as np, keras
        d = np.load("x.npz")
        m = keras.saving.load_model("md.keras")
        assert [t.name for t in m.inputs] == ["a", "b"], m.inputs
        np.testing.assert_allclose(m.predict([d["xa"], d["xb"]], verbose=0), d["pred"], atol=1e-6)
        assert isinstance(m.optimizer, keras.optimizers.Adam)
    """, tmp_path)


def test_functional_keras_file_written_by_keras_loads_here(tmp_path):
    xa, xb = inputs()
    np.savez(tmp_path / "x.npz", xa=xa, xb=xb)
    run_keras(KERAS_FUNCTIONAL + """
d = np.load("x.npz")
m.fit([d["xa"], d["xb"]], np.ones((16, 3), np.float32), batch_size=8, epochs=1, verbose=0)
m.save("k.keras")
np.save("pred.npy", m.predict([d["xa"], d["xb"]], verbose=0))
""", tmp_path)
    model = keras.saving.load_model(tmp_path / "k.keras")
    assert model.name == "two_towers" and [l.name for l in model.layers] == ["ha", "hb", "sum", "cat", "out"]
    np.testing.assert_allclose(model.predict([xa, xb], verbose=0), np.load(tmp_path / "pred.npy"), atol=1e-6)
    assert isinstance(model.optimizer, keras.optimizers.Adam)


@pytest.mark.parametrize("make", [sequential, functional])
def test_to_json_here_is_read_by_keras_model_from_json(tmp_path, make):
    model = make()
    (tmp_path / "m.json").write_text(model.to_json())
    model.save_weights(tmp_path / "m.weights.h5")
    x = list(inputs()) if make is functional else [inputs()[0]]
    np.savez(tmp_path / "x.npz", *x, pred=model.predict(x if make is functional else x[0], verbose=0))
    names = run_keras("""
        import json, numpy as np, keras
        d = np.load("x.npz")
        m = keras.models.model_from_json(open("m.json").read())
        m.load_weights("m.weights.h5")
        x = [d[k] for k in sorted(k for k in d.files if k.startswith("arr_"))]
        np.testing.assert_allclose(m.predict(x if len(x) > 1 else x[0], verbose=0), d["pred"], atol=1e-6)
        # Keras's get_config of the model read back names the same layers, in the same order.
        print(json.dumps([l["config"]["name"] for l in m.get_config()["layers"]]))
    """, tmp_path)
    assert json.loads(names.strip().splitlines()[-1]) == [l["config"]["name"] for l in model.get_config()["layers"]]


def test_keras_to_json_and_get_config_are_read_here(tmp_path):
    xa, xb = inputs()
    np.savez(tmp_path / "x.npz", xa=xa, xb=xb)
    out = run_keras(KERAS_FUNCTIONAL + """
import json
print(json.dumps({"json": m.to_json(), "config": m.get_config()}))
m.save_weights("k.weights.h5")
d = np.load("x.npz")
np.save("pred.npy", m.predict([d["xa"], d["xb"]], verbose=0))
""", tmp_path)
    given = json.loads(out.strip().splitlines()[-1])
    for model in (keras.models.model_from_json(given["json"]), keras.Model.from_config(given["config"])):
        assert model.name == "two_towers" and len(model.layers) == 5
        model.load_weights(tmp_path / "k.weights.h5")
        np.testing.assert_allclose(model.predict([xa, xb], verbose=0), np.load(tmp_path / "pred.npy"),
                                   atol=1e-6)
    assert keras.models.model_from_json(given["json"]).optimizer is not None  # compile_config is honoured


def test_keras_file_with_a_registered_layer_loads_with_custom_objects(tmp_path):
    x = inputs()[0]
    np.save(tmp_path / "x.npy", x)
    run_keras("""
        import numpy as np, keras

        @keras.saving.register_keras_serializable(package="mdtrain_tests")
        class ScaledDense(keras.layers.Dense):
            def __init__(self, units, scale=1.0, **kwargs):
                super().__init__(units, **kwargs)
                self.scale = scale

            def get_config(self):
                return dict(super().get_config(), scale=self.scale)

        keras.utils.set_random_seed(0)
        i = keras.Input((6,))
        m = keras.Model(i, ScaledDense(3, scale=1.5, name="sd")(i))
        m.save("custom.keras")
        np.save("pred.npy", m.predict(np.load("x.npy"), verbose=0))
    """, tmp_path)
    model = keras.saving.load_model(tmp_path / "custom.keras")  # registered here under the same name
    assert type(model.layers[0]) is ScaledDense and model.layers[0].scale == 1.5
    np.testing.assert_allclose(model.predict(x, verbose=0), np.load(tmp_path / "pred.npy"), atol=1e-6)


def test_serialized_objects_match_keras(tmp_path):
    out = run_keras("""
        import json, keras
        s = keras.saving.serialize_keras_object
        print(json.dumps([s(keras.optimizers.Adam(0.02)), s(keras.losses.MeanSquaredError()),
                          s(keras.initializers.GlorotUniform(seed=3)), s(keras.regularizers.L2(0.01))]))
    """, tmp_path)
    theirs = json.loads(out.strip().splitlines()[-1])
    s = keras.saving.serialize_keras_object
    mine = [s(keras.optimizers.Adam(0.02)), s(keras.losses.MeanSquaredError()),
            s(keras.initializers.GlorotUniform(seed=3)), s(keras.regularizers.L2(0.01))]
    for a, b in zip(mine, theirs):
        assert {k: a[k] for k in ("module", "class_name", "registered_name")} == \
            {k: b[k] for k in ("module", "class_name", "registered_name")}
        back = keras.saving.deserialize_keras_object(b)  # Keras's config is read here
        assert type(back).__name__ == b["class_name"]


# ---- public layer.build(input_shape) -------------------------------------------------------
BUILDS = [("Dense(3)", (None, 4)), ("Conv2D(2, 3)", (None, 8, 8, 1)), ("LSTM(5)", (None, 7, 3)),
          ("BatchNormalization()", (None, 6)), ("Embedding(10, 4)", (None, 5)), ("Flatten()", (None, 2, 3))]


def test_layer_build_creates_the_weights_keras_creates(tmp_path):
    out = run_keras(f"""
        import json, keras
        from keras import layers
        res = []
        for spec, shape in {BUILDS!r}:
            layer = eval("layers." + spec)
            layer.build(shape)
            res.append([list(w.shape) for w in layer.get_weights()])
        print(json.dumps(res))
    """, tmp_path)
    theirs = json.loads(out.strip().splitlines()[-1])
    for (spec, shape), shapes in zip(BUILDS, theirs):
        layer = eval("L." + spec)
        layer.build(shape)
        assert layer.built and [list(w.shape) for w in layer.get_weights()] == shapes, spec


def test_layer_build_draws_the_seed_a_first_call_draws_and_joins_models():
    def built(how):
        keras.utils.set_random_seed(1)
        layer = L.Dense(3)
        layer.build((None, 4)) if how == "build" else layer(np.ones((2, 4), np.float32))
        return layer

    a, b = built("build"), built("call")
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    a.build((None, 4))  # again, same shape: nothing changes
    with pytest.raises(ValueError, match=r"already built for input shape \(None, 4\)"):
        a.build((None, 5))
    model = keras.Sequential([keras.Input((4,)), a])
    np.testing.assert_array_equal(model.get_weights()[0], b.get_weights()[0])
    with pytest.raises(ValueError, match="batch axis"):
        L.Dense(2).build((4,))
    unbuilt = keras.Sequential([L.Dense(2, name="inside")])
    with pytest.raises(ValueError, match="build the model instead"):
        unbuilt.layers[0].build((None, 3))


def test_registered_layer_written_here_loads_in_keras(tmp_path):
    keras.utils.set_random_seed(2)
    i = keras.Input((6,))
    model = keras.Model(i, ScaledDense(3, scale=0.5, name="sd")(i))
    model.save(tmp_path / "md.keras")
    x = inputs()[0]
    np.savez(tmp_path / "x.npz", x=x, pred=model.predict(x, verbose=0))
    run_keras("""
        import numpy as np, keras

        @keras.saving.register_keras_serializable(package="mdtrain_tests")
        class ScaledDense(keras.layers.Dense):
            def __init__(self, units, scale=1.0, **kwargs):
                super().__init__(units, **kwargs)
                self.scale = scale

            def get_config(self):
                return dict(super().get_config(), scale=self.scale)

        d = np.load("x.npz")
        m = keras.saving.load_model("md.keras")
        assert type(m.layers[1]).__name__ == "ScaledDense" and m.layers[1].scale == 0.5, m.layers
        np.testing.assert_allclose(m.predict(d["x"], verbose=0), d["pred"], atol=1e-6)
    """, tmp_path)
