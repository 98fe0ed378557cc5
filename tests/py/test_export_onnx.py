"""model.export(path, format="onnx"): onnxruntime runs the exported file with model.predict's
results (max abs difference <= 1e-5 of the output's scale), for every layer family, masks and
recurrent layers included, with a dynamic batch axis (docs/export.md)."""
import warnings

import numpy as np
import pytest

import mdtrain as tf

onnx = pytest.importorskip("onnx", reason="the ONNX export needs the onnx package: pip install '.[test]'")
ort = pytest.importorskip("onnxruntime", reason="running exported models needs onnxruntime: pip install '.[test]'")

from mdtrain.keras import layers as _layers  # noqa: E402
from mdtrain.keras.export import _model_graph  # noqa: E402

L = tf.keras.layers
RNG = np.random.default_rng(0)


def export(model, tmp_path, name="model", **kwargs):
    path = str(tmp_path / f"{name}.onnx")
    model.export(path, format="onnx", verbose=False, **kwargs)
    return path


def run_onnx(path, x):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    arrays = x if isinstance(x, list) else [x]
    feed = {}
    for spec, a in zip(session.get_inputs(), arrays):
        feed[spec.name] = np.asarray(a, np.int32 if spec.type == "tensor(int32)" else np.float32)
    return session.run(None, feed)


def assert_same_predictions(model, x, path):
    want = model.predict(x, verbose=0)
    want = want if isinstance(want, list) else [want]
    got = run_onnx(path, x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = float(np.max(np.abs(w)))
        assert scale > 0
        assert float(np.max(np.abs(g - w))) <= 1e-5 * scale, (float(np.max(np.abs(g - w))), scale)
    return got


def seed_mlp():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((784,)), L.Dense(128, activation="relu", name="hidden"),
                                 L.Dense(10, name="logits")])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def fit_a_little(model, x, y, epochs=1):
    model.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
    return model


def test_seed_mlp_equals_predict_with_a_dynamic_batch(tmp_path):
    model = fit_a_little(seed_mlp(), RNG.normal(size=(64, 784)).astype(np.float32), RNG.integers(0, 10, 64))
    path = export(model, tmp_path)
    proto = onnx.load(path)
    assert proto.opset_import[0].version >= 17
    batch = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch" and not batch.HasField("dim_value")
    for n in (1, 7):  # one file, two batch sizes
        assert_same_predictions(model, RNG.normal(size=(n, 784)).astype(np.float32), path)


def test_cnn_equals_predict(tmp_path):
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([
        tf.keras.Input((12, 12, 3)), L.Conv2D(6, 3, padding="same", activation="relu"), L.MaxPooling2D(),
        L.BatchNormalization(), L.Dropout(0.25), L.Conv2D(4, (3, 2), strides=2, padding="same"),
        L.AveragePooling2D(padding="same"), L.Conv2D(4, 2, dilation_rate=2, padding="same", use_bias=False),
        L.Flatten(), L.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    # trained: BatchNormalization's moving statistics are not their initial values
    fit_a_little(model, RNG.normal(size=(48, 12, 12, 3)).astype(np.float32), RNG.integers(0, 10, 48), epochs=2)
    assert not np.allclose(model.layers[2].moving_mean, 0)
    path = export(model, tmp_path)
    assert_same_predictions(model, RNG.normal(size=(7, 12, 12, 3)).astype(np.float32), path)


def test_the_other_layers_equal_predict(tmp_path):
    tf.keras.utils.set_random_seed(9)
    model = tf.keras.Sequential([
        tf.keras.Input((6,), dtype="int32"), L.Embedding(12, 8), L.Reshape((6, 4, 2)),
        L.Conv2D(3, (2, 3), strides=(2, 1), activation="sigmoid"), L.AveragePooling2D((1, 2)),
        L.MaxPooling2D((3, 2), strides=1, padding="same"), L.Reshape((-1, 3)), L.Activation("softmax"),
        L.PipelineSplit(), L.Dense(5, activation="tanh", use_bias=False), L.BatchNormalization(center=False),
        L.LayerNormalization(scale=False), L.Flatten(), L.Dense(4, activation="gelu")])
    assert_same_predictions(model, RNG.integers(0, 12, size=(7, 6)), export(model, tmp_path))


def test_a_mask_merged_on_the_last_axis_equals_predict(tmp_path):
    tf.keras.utils.set_random_seed(10)
    a, b = tf.keras.Input((5, 3), name="a"), tf.keras.Input((5, 2), name="b")
    joined = L.Concatenate()([L.Masking()(a), L.Masking()(b)])  # the masks ORed
    model = tf.keras.Model([a, b], L.LSTM(4)(joined))
    xa, xb = RNG.normal(size=(6, 5, 3)).astype(np.float32), RNG.normal(size=(6, 5, 2)).astype(np.float32)
    xa[0, 2:], xb[0, 2:] = 0, 0  # skipped
    xa[1, 1:], xb[1, :3] = 0, 0  # each step kept by one of them
    assert_same_predictions(model, [xa, xb], export(model, tmp_path))


def padded_tokens(batch=8, steps=10, vocab=30):
    """Sequences padded at the end, at the start, in the middle, and one that is all padding."""
    tokens = RNG.integers(1, vocab, size=(batch, steps))
    tokens[0, 6:] = 0
    tokens[1, :4] = 0
    tokens[2, 3:5] = 0
    tokens[3, :] = 0
    tokens[4, :] = np.concatenate([np.zeros(4, int), tokens[0, :6]])  # row 0 padded at the start instead
    return tokens


def text_model(recurrent, vocab=30):
    """Embedding(mask_zero) -> recurrent layer(s) -> Dense, its table scaled up so that the
    steps' inputs matter (Keras's uniform(-0.05, 0.05) start makes every output tiny)."""
    tf.keras.utils.set_random_seed(2)
    model = tf.keras.Sequential([tf.keras.Input((10,), dtype="int32"), L.Embedding(vocab, 8, mask_zero=True),
                                 *recurrent, L.Dense(3)])
    table = model.layers[0]
    table.set_weights([RNG.normal(size=table.get_weights()[0].shape)])
    return model


def test_lstm_text_model_with_padded_sequences_equals_predict(tmp_path):
    model = text_model([L.LSTM(16)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fit_a_little(model, padded_tokens(32), RNG.integers(0, 3, 32))
    tokens = padded_tokens()
    got = assert_same_predictions(model, tokens, export(model, tmp_path))[0]
    # The mask is honoured, not only matched: padding at the start or the end gives one result.
    np.testing.assert_allclose(got[0], got[4], rtol=0, atol=1e-6)
    assert not np.allclose(got[0], got[1])


@pytest.mark.parametrize("recurrent", [
    lambda: [L.GRU(8, return_sequences=True), L.GRU(6)],
    lambda: [L.GRU(8, reset_after=False, go_backwards=True)],
    lambda: [L.LSTM(6, return_sequences=True, go_backwards=True), L.Flatten()],
    lambda: [L.SimpleRNN(6, activation="relu", return_sequences=True), L.SimpleRNN(5, activation="linear")],
    lambda: [L.LSTM(5, activation="relu", recurrent_activation="tanh", use_bias=False)],
    lambda: [L.Bidirectional(L.LSTM(5, return_sequences=True), merge_mode="ave"), L.Bidirectional(L.GRU(4))],
    lambda: [L.Bidirectional(L.GRU(4, return_sequences=True), backward_layer=L.SimpleRNN(4, return_sequences=True,
                                                                                        go_backwards=True)),
             L.Flatten()],
], ids=["gru_stack", "gru_reset_before_backwards", "lstm_backwards_sequences", "simple_rnn", "lstm_activations",
        "bidirectional", "bidirectional_backward_layer"])
def test_recurrent_text_models_equal_predict(tmp_path, recurrent):
    model = text_model(recurrent())
    assert_same_predictions(model, padded_tokens(), export(model, tmp_path))


def test_gru_model_without_mask_equals_predict(tmp_path):
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.Input((9, 4)), L.GRU(12, return_sequences=True), L.LayerNormalization(),
                                 L.GRU(6), L.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    fit_a_little(model, RNG.normal(size=(32, 9, 4)).astype(np.float32), RNG.normal(size=(32, 2)).astype(np.float32))
    path = export(model, tmp_path)
    for n in (1, 7):
        assert_same_predictions(model, RNG.normal(size=(n, 9, 4)).astype(np.float32), path)


def test_masking_layer_equals_predict(tmp_path):
    tf.keras.utils.set_random_seed(4)
    model = tf.keras.Sequential([tf.keras.Input((7, 3)), L.Masking(mask_value=-1.0), L.Dense(4, activation="tanh"),
                                 L.LSTM(5), L.Dense(2)])
    x = RNG.normal(size=(6, 7, 3)).astype(np.float32)
    x[0, 4:] = -1.0
    x[1, :2] = -1.0
    x[2, 3, :] = -1.0
    x[3, 1, 0] = -1.0  # one value equal to mask_value: not a padding step
    assert_same_predictions(model, x, export(model, tmp_path))


def residual_model():
    tf.keras.utils.set_random_seed(5)
    inputs = tf.keras.Input((20,), name="features")
    h = L.Dense(16, activation="relu")(inputs)
    for _ in range(3):
        r = L.Dense(16, activation="gelu")(h)
        r = L.Dense(16)(r)
        h = L.LayerNormalization()(L.Add()([h, r]))
    outputs = L.Dense(3, activation="softmax")(L.Dropout(0.2)(h))
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def test_functional_model_with_residual_blocks_equals_predict(tmp_path):
    model = fit_a_little(residual_model(), RNG.normal(size=(48, 20)).astype(np.float32), RNG.integers(0, 3, 48))
    path = export(model, tmp_path)
    assert [i.name for i in onnx.load(path).graph.input] == ["features"]
    for n in (1, 7):
        assert_same_predictions(model, RNG.normal(size=(n, 20)).astype(np.float32), path)


def test_a_loaded_model_exports_as_the_saved_one(tmp_path):
    model = residual_model()
    model.save(str(tmp_path / "m.keras"))
    loaded = tf.keras.models.load_model(str(tmp_path / "m.keras"))
    assert graph_without_values(export(loaded, tmp_path, "loaded")) == graph_without_values(export(model, tmp_path))
    assert_same_predictions(loaded, RNG.normal(size=(7, 20)).astype(np.float32), str(tmp_path / "loaded.onnx"))


def test_functional_model_with_several_inputs_outputs_and_merged_masks(tmp_path):
    tf.keras.utils.set_random_seed(6)
    a, b = tf.keras.Input((6, 4), name="a"), tf.keras.Input((6, 4), name="b")
    masked_a, masked_b = L.Masking()(a), L.Masking()(b)
    summed = L.Add()([L.Dense(4)(masked_a), masked_b])  # both masked: the masks ORed
    joined = L.Concatenate(axis=1)([summed, L.Dense(4)(b)])  # along time: the mask joined, b's all ones
    sequence = L.GRU(5)(joined)
    image = L.GlobalAveragePooling2D()(L.Reshape((6, 4, 1))(b))
    product = L.Multiply()([L.Dense(5)(image), sequence])
    model = tf.keras.Model([a, b], [product, L.Concatenate()([image, sequence])])
    xa, xb = RNG.normal(size=(7, 6, 4)).astype(np.float32), RNG.normal(size=(7, 6, 4)).astype(np.float32)
    xa[0, 3:] = 0
    xb[0, 3:] = 0  # both masked there: those steps are skipped in the first half of the sequence
    xa[1, :2] = 0
    path = export(model, tmp_path)
    assert [i.name for i in onnx.load(path).graph.input] == ["a", "b"]
    assert_same_predictions(model, [xa, xb], path)


def test_subclassed_model_equals_predict(tmp_path):
    class Residual(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = L.Dense(8, activation="tanh")
            self.branch = L.Dense(8)
            self.out = L.Dense(2)

        def call(self, x, training=None):
            h = self.inner(x)
            return self.out(h + self.branch(h))

    tf.keras.utils.set_random_seed(7)
    model = Residual()
    model.build((None, 5))
    assert_same_predictions(model, RNG.normal(size=(7, 5)).astype(np.float32), export(model, tmp_path))


def graph_without_values(path):
    """The exported graph's structure: nodes, inputs, outputs and initializer names and shapes."""
    g = onnx.load(path).graph
    nodes = [(n.op_type, list(n.input), list(n.output), [onnx.helper.printable_attribute(a) for a in n.attribute])
             for n in g.node]
    return (nodes, [str(i) for i in g.input], [str(o) for o in g.output],
            [(t.name, list(t.dims)) for t in g.initializer])


def test_a_model_trained_under_mirrored_strategy_exports_the_one_device_graph(tmp_path, logical_cpus):
    x, y = RNG.normal(size=(32, 784)).astype(np.float32), RNG.integers(0, 10, 32)
    single = fit_a_little(seed_mlp(), x, y)
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        mirrored = seed_mlp()
    fit_a_little(mirrored, x, y)
    single_path, mirrored_path = export(single, tmp_path, "single"), export(mirrored, tmp_path, "mirrored")
    assert graph_without_values(mirrored_path) == graph_without_values(single_path)
    # the weights written are the trained ones (not the initial values), and run as predict does
    initial = seed_mlp().get_weights()[0]
    written = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(mirrored_path).graph.initializer}
    kernel_name = f"{mirrored.layers[0].name}/kernel"
    np.testing.assert_array_equal(written[kernel_name], mirrored.get_weights()[0])
    assert not np.array_equal(written[kernel_name], initial)
    assert_same_predictions(mirrored, RNG.normal(size=(7, 784)).astype(np.float32), mirrored_path)


def _split_mlp():
    tf.keras.utils.set_random_seed(11)
    model = tf.keras.Sequential([tf.keras.Input((20,)), L.Dense(32, activation="relu", name="d0"),
                                 L.PipelineSplit(name="cut"), L.Dense(5, name="out")])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _model_parallel():
    distribution = tf.keras.distribution
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices=distribution.list_devices()[:2])
    layout_map = distribution.LayoutMap(mesh)
    layout_map["d0/kernel"] = (None, "model")  # column-parallel, then row-parallel: Megatron's split
    layout_map["d0/bias"] = ("model",)
    layout_map["out/kernel"] = ("model", None)
    return distribution.ModelParallel(layout_map=layout_map)


def _pipeline():
    distribution = tf.keras.distribution
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    with warnings.catch_warnings():  # two micro-batches: a large bubble, which does not matter here
        warnings.simplefilter("ignore")
        return distribution.PipelineParallel(mesh, num_microbatches=2)


@pytest.mark.parametrize("make_strategy", [_model_parallel, _pipeline,
                                           lambda: tf.distribute.experimental.CentralStorageStrategy()],
                         ids=["model_parallel", "pipeline", "central_storage"])
def test_models_trained_under_other_strategies_export_the_one_device_graph(tmp_path, logical_cpus, make_strategy):
    x, y = RNG.normal(size=(64, 20)).astype(np.float32), RNG.integers(0, 5, 64)
    single = _split_mlp()
    logical_cpus(2)
    with make_strategy().scope():
        split = _split_mlp()
    for model in (single, split):
        model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    path = export(split, tmp_path, "split")
    assert graph_without_values(path) == graph_without_values(export(single, tmp_path, "single"))
    assert_same_predictions(split, x[:7], path)


def test_input_signature_sets_the_index_dtype_and_a_fixed_batch(tmp_path):
    model = text_model([L.GRU(4)])
    path = export(model, tmp_path, input_signature=[tf.TensorSpec((3, 10), "int64")])
    shape = onnx.load(path).graph.input[0].type.tensor_type
    assert shape.elem_type == onnx.TensorProto.INT64 and shape.shape.dim[0].dim_value == 3
    tokens = padded_tokens()[:3]
    got = ort.InferenceSession(path).run(None, {"input_layer": tokens.astype(np.int64)})[0]
    np.testing.assert_allclose(got, model.predict(tokens, verbose=0), rtol=0, atol=1e-6)
    as_floats = export(model, tmp_path, "floats", input_signature=[tf.TensorSpec((None, 10), "float32")])
    got = ort.InferenceSession(as_floats).run(None, {"input_layer": tokens.astype(np.float32)})[0]
    np.testing.assert_allclose(got, model.predict(tokens, verbose=0), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"input_signature\[0\] has shape \(None, 9\)"):
        export(model, tmp_path, input_signature=[tf.TensorSpec((None, 9), "int32")])


def test_every_layer_class_of_the_library_has_a_converter():
    # _CLASSES holds the Python class of every C++ layer (load_model wraps C++ layers through it);
    # PipelineSplit is a linear Activation in C++.
    missing = sorted(set(_layers._CLASSES) - {"PipelineSplit"} - set(_model_graph.CONVERTERS))
    assert missing == []


def test_a_layer_without_converter_is_a_value_error_naming_it(tmp_path, monkeypatch):
    model = text_model([L.GRU(4, name="my_gru")])
    monkeypatch.delitem(_model_graph.CONVERTERS, "GRU")  # as a layer added to the library without one
    with pytest.raises(ValueError, match=r'layer "my_gru" \(GRU\) cannot be exported to ONNX'):
        export(model, tmp_path)
    assert not (tmp_path / "model.onnx").exists()


def test_formats_and_unbuilt_models_are_refused_clearly(tmp_path):
    model = seed_mlp()
    with pytest.raises(ValueError, match="tf_saved_model.*needs TensorFlow"):
        model.export(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match="unrecognized format='tflite'"):
        model.export(str(tmp_path / "m"), format="tflite")
    with pytest.raises(ValueError, match="opset_version must be an int from 17"):
        model.export(str(tmp_path / "m.onnx"), format="onnx", opset_version=11)
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        model.export(str(tmp_path / "m.onnx"), format="onnx", dynamic_axes=True)
    unbuilt = tf.keras.Sequential([L.Dense(3)])
    with pytest.raises(ValueError, match="not built"):
        unbuilt.export(str(tmp_path / "m.onnx"), format="onnx")


def test_newer_opsets_and_verbose(tmp_path, capsys):
    tf.keras.utils.set_random_seed(8)
    model = tf.keras.Sequential([tf.keras.Input((8, 8, 2)), L.Conv2D(3, 3), L.GlobalAveragePooling2D(keepdims=True),
                                 L.Flatten(), L.Dense(2)])
    path = str(tmp_path / "m.onnx")
    model.export(path, format="onnx", opset_version=18)
    assert capsys.readouterr().out.strip() == f"Saved artifact at '{path}'."
    assert onnx.load(path).opset_import[0].version == 18
    assert_same_predictions(model, RNG.normal(size=(5, 8, 8, 2)).astype(np.float32), path)
