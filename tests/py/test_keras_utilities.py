"""keras.activations, keras.utils.to_categorical / pad_sequences / plot_model and
model.summary(), compared with Keras 3 on TF (skipped without it)."""
import importlib.util
import json
import shutil

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers
A = keras.activations

X = np.array([[-6.0, -3.0, -1.0, -0.5, -1e-3], [0.0, 1e-3, 0.5, 1.0, 3.0], [6.0, 10.0, -10.0, 2.5, -2.5]],
             np.float32)
CALLS = {  # name -> keyword arguments beyond the default call
    "relu": [{}, {"negative_slope": 0.1}, {"max_value": 2.0}, {"threshold": 0.7},
             {"negative_slope": 0.2, "max_value": 4.0, "threshold": 0.5}],
    "leaky_relu": [{}, {"negative_slope": 0.05}], "elu": [{}, {"alpha": 0.5}], "celu": [{}, {"alpha": 2.0}],
    "softmax": [{}, {"axis": 0}], "log_softmax": [{}, {"axis": 0}], "gelu": [{}, {"approximate": True}],
}


@pytest.fixture(scope="module")
def keras_activations(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("act")
    np.save(tmp / "x.npy", X)
    out = run_keras(f"""
        import json, numpy as np, keras
        x = np.load("x.npy")
        calls = {CALLS!r}
        names = {sorted(A.ALL_OBJECTS_DICT)!r}
        res = {{}}
        for name in names:
            for i, kw in enumerate(calls.get(name, [{{}}])):
                res[f"{{name}}/{{i}}"] = np.asarray(keras.activations.get(name)(x, **kw)).tolist()
        from keras.src.activations import ALL_OBJECTS_DICT
        s = keras.saving.serialize_keras_object
        print(json.dumps({{"values": res, "names": sorted(ALL_OBJECTS_DICT),
                          "serialize": keras.activations.serialize(keras.activations.relu),
                          "object": s(keras.activations.relu)}}))
    """, tmp)
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(A.ALL_OBJECTS_DICT))
def test_activation_matches_keras(keras_activations, name):
    for i, kw in enumerate(CALLS.get(name, [{}])):
        mine = np.asarray(A.get(name)(X, **kw))
        assert mine.dtype == np.float32 and mine.shape == X.shape
        np.testing.assert_allclose(mine, np.array(keras_activations["values"][f"{name}/{i}"]), rtol=2e-6, atol=2e-6,
                                   err_msg=f"{name}({kw})")


def test_activation_names_and_serialization_match_keras(keras_activations):
    assert set(A.ALL_OBJECTS_DICT) <= set(keras_activations["names"])
    assert A.serialize(A.relu) == keras_activations["serialize"] == "relu"
    assert keras.saving.serialize_keras_object(A.relu) == keras_activations["object"]
    assert keras.saving.deserialize_keras_object(keras_activations["object"]) is A.relu


def test_get_serialize_deserialize():
    assert A.get(None) is A.linear and A.get("swish") is A.silu and A.get(A.tanh) is A.tanh
    assert A.get({"module": "builtins", "class_name": "function", "config": "elu", "registered_name": "function"}) \
        is A.elu
    with pytest.raises(ValueError, match="Could not interpret activation function identifier: nope"):
        A.get("nope")
    assert A.deserialize("hard_swish") is A.hard_silu
    with pytest.raises(ValueError, match="Unknown activation function: 'nope'"):
        A.deserialize("nope")

    @keras.saving.register_keras_serializable(package="mdtrain_tests")
    def scaled_tanh(x):
        return 2.0 * A.tanh(x)

    config = A.serialize(scaled_tanh)
    assert config["config"] == "mdtrain_tests>scaled_tanh" and A.deserialize(config) is scaled_tanh
    assert A.deserialize("my_act", custom_objects={"my_act": scaled_tanh}) is scaled_tanh


@pytest.mark.parametrize("name", ["gelu", "mish", "selu", "elu", "silu", "softplus", "softsign", "log_sigmoid",
                                  "tanh_shrink", "leaky_relu", "hard_sigmoid"])
def test_activation_gradients_are_the_derivative(name):
    points = np.array([[-2.2, -0.7, 0.3, 1.4, 2.9]], np.float32)  # away from every kink
    x = tf.Variable(points)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(A.get(name)(x))
    h = 1e-3
    numeric = (np.asarray(A.get(name)(points.astype(np.float64) + h)) -
               np.asarray(A.get(name)(points.astype(np.float64) - h))) / (2 * h)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), numeric, rtol=2e-3, atol=2e-3)


def test_layers_take_activation_functions():
    dense = L.Dense(3, activation=A.gelu)
    assert dense.get_config()["activation"] == "gelu"
    assert np.asarray(A.gelu(np.array([1.0], np.float32))).shape == (1,)  # rank 1 goes through the C++ layer too
    assert L.Dense(3, activation=A.swish).get_config()["activation"] == "silu"  # Keras's name for it
    with pytest.raises(ValueError, match="unknown activation 'tanh_shrink'"):  # on tensors only
        L.Dense(3, activation=A.tanh_shrink)


# ---- to_categorical / pad_sequences --------------------------------------------------------
CATEGORICAL = [([[1], [2], [0]], None), ([1, 2, 0], 5), ([[[1], [0]], [[2], [2]]], None), ([[0, 1, 2], [2, 1, 0]], 4),
               ([1.7, 0.2, 2.0], None), ([3], 0)]
PADS = [dict(), dict(maxlen=2), dict(maxlen=5), dict(padding="post"), dict(truncating="post", maxlen=2),
        dict(padding="post", truncating="post", maxlen=3, value=-1), dict(dtype="float32", value=0.5, maxlen=4),
        dict(dtype="float64", padding="post")]
SEQUENCES = [[1, 2, 3], [4], [], [5, 6, 7, 8, 9]]


def test_to_categorical_and_pad_sequences_match_keras(tmp_path):
    out = run_keras(f"""
        import json, numpy as np, keras
        cases = {CATEGORICAL!r}
        pads = {PADS!r}
        seqs = {SEQUENCES!r}
        cat = []
        for y, n in cases:
            r = keras.utils.to_categorical(y, num_classes=n)
            cat.append([r.tolist(), str(r.dtype), list(r.shape)])
        pad = []
        for kw in pads:
            r = keras.utils.pad_sequences(seqs, **kw)
            pad.append([r.tolist(), str(r.dtype)])
        feat = keras.utils.pad_sequences([np.ones((2, 3)), np.zeros((4, 3))], maxlen=3, dtype="float32")
        strs = keras.preprocessing.sequence.pad_sequences([["a", "b"], ["c"]], dtype=object, value="<pad>")
        print(json.dumps({{"cat": cat, "pad": pad, "feat": feat.tolist(), "strs": strs.tolist()}}))
    """, tmp_path)
    theirs = json.loads(out.strip().splitlines()[-1])
    for (y, n), (values, dtype, shape) in zip(CATEGORICAL, theirs["cat"]):
        mine = keras.utils.to_categorical(y, num_classes=n)
        assert str(mine.dtype) == dtype and list(mine.shape) == shape, (y, n)
        np.testing.assert_array_equal(mine, np.array(values))
    for kw, (values, dtype) in zip(PADS, theirs["pad"]):
        mine = keras.utils.pad_sequences(SEQUENCES, **kw)
        assert str(mine.dtype) == dtype, kw
        np.testing.assert_array_equal(mine, np.array(values), err_msg=str(kw))
    feat = keras.preprocessing.sequence.pad_sequences([np.ones((2, 3)), np.zeros((4, 3))], maxlen=3, dtype="float32")
    np.testing.assert_array_equal(feat, np.array(theirs["feat"]))
    strs = keras.utils.pad_sequences([["a", "b"], ["c"]], dtype=object, value="<pad>")
    assert strs.tolist() == theirs["strs"]


def test_to_categorical_refuses_out_of_range_labels():
    with pytest.raises(IndexError, match="out of range"):
        keras.utils.to_categorical([0, 3], num_classes=3)
    with pytest.raises(ValueError, match="non-negative"):
        keras.utils.to_categorical([0, -1], num_classes=3)
    t = keras.utils.to_categorical(tf.constant([[1], [0]]), num_classes=3)
    np.testing.assert_array_equal(t.numpy(), [[0, 1, 0], [1, 0, 0]])


def test_pad_sequences_errors_as_keras():
    with pytest.raises(ValueError, match="Padding type"):
        keras.utils.pad_sequences([[1]], padding="middle")
    with pytest.raises(ValueError, match="Truncating type"):
        keras.utils.pad_sequences([[1]], truncating="middle")
    with pytest.raises(ValueError, match="not compatible with `value`"):
        keras.utils.pad_sequences([[1]], value="x")
    with pytest.raises(ValueError, match="list of iterables"):
        keras.utils.pad_sequences([1, 2])


# ---- plot_model ----------------------------------------------------------------------------
def two_towers():
    a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
    h = L.Dense(8, activation="relu", name="ha")(a)
    g = L.Dense(8, activation="tanh", name="hb")(b)
    out = L.Dense(3, name="out")(L.Concatenate(name="cat")([h, L.Add(name="sum")([h, g])]))
    return keras.Model([a, b], out, name="two_towers")


HAS_PYDOT = importlib.util.find_spec("pydot") is not None


@pytest.mark.skipif(HAS_PYDOT, reason="pydot is installed: the message for a missing pydot cannot be shown")
def test_plot_model_without_pydot_says_what_to_install(tmp_path):
    with pytest.raises(ImportError) as e:
        keras.utils.plot_model(two_towers(), to_file=str(tmp_path / "m.png"))
    theirs = run_keras("""
        import keras
        try:
            import pydot
            print("HAS PYDOT")
        except ImportError:
            m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            try:
                keras.utils.plot_model(m)
            except ImportError as e:
                print(e)
    """, tmp_path).strip().splitlines()[-1]
    if theirs != "HAS PYDOT":
        assert str(e.value) == theirs
    assert "pip install pydot" in str(e.value)
    assert not (tmp_path / "m.png").exists()


@pytest.mark.skipif(not HAS_PYDOT, reason="pydot is not installed (pip install pydot)")
def test_model_to_dot_has_a_node_per_layer_and_an_edge_per_tensor(tmp_path):
    dot = keras.utils.model_to_dot(two_towers(), show_shapes=True, show_layer_activations=True)
    names = {n.get_name().strip('"') for n in dot.get_nodes()} - {"node", "graph", "edge"}
    assert names == {"a", "b", "ha", "hb", "sum", "cat", "out"}
    edges = {(e.get_source().strip('"'), e.get_destination().strip('"')) for e in dot.get_edges()}
    assert edges == {("a", "ha"), ("b", "hb"), ("ha", "sum"), ("hb", "sum"), ("ha", "cat"), ("sum", "cat"),
                     ("cat", "out")}
    label = next(n for n in dot.get_nodes() if n.get_name().strip('"') == "cat").get("label")
    assert "Output shape: <b>(None, 16)</b>" in label and "[(None, 8), (None, 8)]" in label
    if shutil.which("dot"):
        keras.utils.plot_model(two_towers(), to_file=str(tmp_path / "m.png"), show_shapes=True)
        assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    else:
        with pytest.raises(ImportError, match="You must install graphviz"):
            keras.utils.plot_model(two_towers(), to_file=str(tmp_path / "m.png"))


# ---- summary -------------------------------------------------------------------------------
KERAS_MODELS = """
import os, numpy as np, keras
os.environ["COLUMNS"] = "80"
L = keras.layers
def seq():
    return keras.Sequential([keras.Input((6,)), L.Dense(5, activation="relu", name="d1"), L.Dropout(0.1, name="drop"),
                             L.Dense(2, name="d2")], name="seq")
def chain():
    i = keras.Input((6,), name="x")
    return keras.Model(i, L.Dense(2, name="d2")(L.Dense(5, name="d1")(i)), name="chain")
def two_towers():
    a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
    h = L.Dense(8, activation="relu", name="ha")(a)
    g = L.Dense(8, activation="tanh", name="hb")(b)
    out = L.Dense(3, name="out")(L.Concatenate(name="cat")([h, L.Add(name="sum")([h, g])]))
    return keras.Model([a, b], out, name="two_towers")
def unbuilt():
    return keras.Sequential([L.Dense(3, name="dense_u")], name="unbuilt")
def longname():
    a = keras.Input((6,), name="averyveryverylonginputname_abcdefghijklmnop")
    return keras.Model(a, L.Dense(2, name="d")(a), name="longname")
def frozen():
    m = keras.Sequential([keras.Input((6,)), L.Dense(5, name="f1"), L.Dropout(0.1, name="fd"), L.Dense(2, name="f2")],
                         name="frozen")
    m.layers[0].trainable = False
    return m
"""


def _summaries(ns, trained):
    out = {}
    for name in ("seq", "chain", "two_towers", "unbuilt", "longname"):
        for line_length in (None, 80, 120):
            lines = []
            ns[name]().summary(line_length=line_length, print_fn=lines.append)
            out[f"{name}/{line_length}"] = "\n".join(lines)
    out["trained"] = "\n".join(trained)
    for name in ("frozen", "two_towers"):
        lines = []
        ns[name]().summary(show_trainable=True, print_fn=lines.append)
        out[f"{name}/trainable"] = "\n".join(lines)
    return out


def test_summary_is_laid_out_as_keras_prints_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = run_keras(KERAS_MODELS + """
import json
out = {}
for name in ("seq", "chain", "two_towers", "unbuilt", "longname"):
    for line_length in (None, 80, 120):
        lines = []
        globals()[name]().summary(line_length=line_length, print_fn=lambda s, line_break=True: lines.append(s))
        out[f"{name}/{line_length}"] = "\\n".join(lines).rstrip("\\n")
m = seq()
m.compile("adam", "mse")
m.fit(np.ones((4, 6)), np.ones((4, 2)), verbose=0)
lines = []
m.summary(print_fn=lambda s, line_break=True: lines.append(s))
out["trained"] = "\\n".join(lines).rstrip("\\n")
for name in ("frozen", "two_towers"):
    lines = []
    globals()[name]().summary(show_trainable=True, print_fn=lambda s, line_break=True: lines.append(s))
    out[f"{name}/trainable"] = "\\n".join(lines).rstrip("\\n")
print(json.dumps(out))
""", tmp_path)
    theirs = json.loads(out.strip().splitlines()[-1])
    ns = {"keras": keras}
    exec(KERAS_MODELS.replace("import os, numpy as np, keras", "import os, numpy as np").replace(
        'os.environ["COLUMNS"] = "80"', ""), ns)
    m = ns["seq"]()
    m.compile("adam", "mse")
    m.fit(np.ones((4, 6), np.float32), np.ones((4, 2), np.float32), verbose=0)
    trained = []
    m.summary(print_fn=trained.append)
    mine = _summaries(ns, trained)
    for key in theirs:
        # Keras prints the table through rich as one block of text; here it is a line per call.
        assert mine[key].splitlines() == theirs[key].splitlines(), f"{key}:\n{mine[key]}\n---- Keras:\n{theirs[key]}"
