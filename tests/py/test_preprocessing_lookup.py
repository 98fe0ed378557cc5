"""Rescaling, Normalization (adapt on arrays, lists of batches and Datasets), CategoryEncoding,
Hashing (TF's FarmHash and SipHash buckets), IntegerLookup and StringLookup (vocabularies, adapt,
mask and OOV tokens, hashed OOV buckets, invert, every output_mode) against Keras 3 on TF (skipped
without it): the same layer code runs on both sides and its outputs, vocabularies and configs must
agree; then inside Dataset.map and a distributed dataset, and bad arguments as Keras's."""
import json

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers

S = "np.array([['a', 'b', 'zz'], ['c', 'a', '']])"
I = "np.array([[3, 7, 100], [7, 0, -2]])"
# name: (the layer as Keras writes it, the data adapt() reads or None, the input it is called on)
CASES = {
    "rescaling": ("L.Rescaling(1 / 255.0, offset=-0.5)", None, "np.array([[0, 17, 255]], np.uint8)"),
    "rescaling_channels": ("L.Rescaling([0.5, 2.0, 3.0])", None, "np.arange(12.0).reshape(2, 2, 3)"),
    "normalization_adapt": ("L.Normalization()", "np.array([[1.0, 2.0], [3.0, 5.0], [0.0, -4.0]])",
                            "np.array([[1.0, 2.0], [9.0, 0.5]])"),
    "normalization_axis_none": ("L.Normalization(axis=None)", "np.arange(12.0).reshape(3, 4)",
                                "np.array([[1.0, 2.0, 3.0, 4.0]])"),
    "normalization_axis_pair": ("L.Normalization(axis=(1, 2))", "np.arange(24.0).reshape(2, 3, 4) ** 1.5",
                                "np.ones((1, 3, 4))"),
    "normalization_given": ("L.Normalization(mean=[1.0, 2.0], variance=[4.0, 0.0])", None,
                            "np.array([[3.0, 3.0]])"),
    "normalization_invert": ("L.Normalization(invert=True)", "np.array([[1.0, 2.0], [3.0, 6.0]])",
                             "np.array([[1.0, -1.0]])"),
    "normalization_batches": ("L.Normalization()", "[np.array([[1.0, 2.0], [3.0, 5.0]]), np.array([[7.0, 1.0]])]",
                              "np.array([[1.0, 2.0]])"),
    "normalization_dataset": ("L.Normalization()",
                              "tf.data.Dataset.from_tensor_slices(np.arange(20.0).reshape(10, 2) ** 2).batch(3)",
                              "np.array([[1.0, 2.0]])"),
    "normalization_rows": ("L.Normalization()", "tf.data.Dataset.from_tensor_slices(np.arange(20.0).reshape(10, 2))",
                           "np.array([[1.0, 2.0]])"),
    "category_multi_hot": ("L.CategoryEncoding(num_tokens=5)", None, "np.array([[0, 1, 1], [4, 3, 3]])"),
    "category_one_hot": ("L.CategoryEncoding(num_tokens=4, output_mode='one_hot')", None, "np.array([[1], [3]])"),
    "category_one_hot_1d": ("L.CategoryEncoding(num_tokens=4, output_mode='one_hot')", None, "np.array([0, 2, 2])"),
    "category_count_1d": ("L.CategoryEncoding(num_tokens=4, output_mode='count')", None, "np.array([0, 2, 2])"),
    "hashing_strings": ("L.Hashing(num_bins=7)", None, S),
    "hashing_ints": ("L.Hashing(num_bins=5)", None, I),
    "hashing_floats": ("L.Hashing(num_bins=5)", None, "np.array([[1.7, -3.2]])"),
    "hashing_mask": ("L.Hashing(num_bins=6, mask_value='')", None, S),
    "hashing_salt": ("L.Hashing(num_bins=9, salt=[133, 137])", None, S),
    "hashing_salt_int": ("L.Hashing(num_bins=9, salt=1337)", None, I),
    "hashing_multi_hot": ("L.Hashing(num_bins=4, output_mode='multi_hot')", None, S),
    "hashing_one_hot": ("L.Hashing(num_bins=4, output_mode='one_hot')", None, "np.array([['x'], ['y']])"),
    "hashing_long": ("L.Hashing(num_bins=1000)", None,
                     "np.array(['a' * n for n in (5, 17, 40, 64, 65, 128, 200)])"),
    "string_vocab": ("L.StringLookup(vocabulary=['a', 'b', 'c'])", None, S),
    "string_mask": ("L.StringLookup(vocabulary=['a', 'b', 'c'], mask_token='')", None, S),
    "string_with_specials": ("L.StringLookup(vocabulary=['', '[UNK]', 'a', 'b'], mask_token='')", None, S),
    "string_oov2": ("L.StringLookup(vocabulary=['a', 'b'], num_oov_indices=2)", None,
                    "np.array(['a', 'q', 'r', 's', 'b', 'tt'])"),
    "string_oov2_salt": ("L.StringLookup(vocabulary=['a'], num_oov_indices=3, salt=5)", None,
                         "np.array(['a', 'q', 'r', 's', 'tt'])"),
    "string_oov0": ("L.StringLookup(vocabulary=['a', 'b', 'c', 'zz', ''], num_oov_indices=0)", None, S),
    "string_adapt": ("L.StringLookup()", "np.array([['b', 'a', 'c'], ['a', 'b', 'a'], ['d', 'c', 'e']])", S),
    "string_adapt_max": ("L.StringLookup(max_tokens=4, mask_token='')",
                         "np.array(['b', 'a', 'c', 'a', 'b', 'a', 'd', '', '', ''])", S),
    "string_adapt_dataset": ("L.StringLookup()",
                             "tf.data.Dataset.from_tensor_slices(np.array(['x', 'y', 'y', 'a', 'x', 'y'])).batch(4)",
                             "np.array(['x', 'y', 'a', 'b'])"),
    "string_invert": ("L.StringLookup(vocabulary=['a', 'b'], invert=True)", None, "np.array([[0, 1, 2, 5]])"),
    "string_invert_mask": ("L.StringLookup(vocabulary=['a', 'b'], mask_token='[M]', invert=True)", None,
                           "np.array([0, 1, 2, 3, 7])"),
    "string_one_hot": ("L.StringLookup(vocabulary=['a', 'b', 'c'], output_mode='one_hot')", None,
                       "np.array(['a', 'q', 'c'])"),
    "string_multi_hot_mask": ("L.StringLookup(vocabulary=['a', 'b', 'c'], mask_token='', output_mode='multi_hot')",
                              None, S),
    "string_count_padded": ("L.StringLookup(vocabulary=['a', 'b'], output_mode='count', pad_to_max_tokens=True, "
                            "max_tokens=6)", None, S),
    "string_tf_idf_given": ("L.StringLookup(vocabulary=['a', 'b', 'c'], idf_weights=[0.5, 0.25, 2.0], "
                            "output_mode='tf_idf')", None, S),
    "string_tf_idf_adapt": ("L.StringLookup(output_mode='tf_idf')",
                            "np.array([['a', 'b', 'a'], ['b', 'c', 'c'], ['a', 'd', 'd']])", S),
    "string_scalar": ("L.StringLookup(vocabulary=['a', 'b'])", None, "'b'"),
    "integer_vocab": ("L.IntegerLookup(vocabulary=[7, 3, 100])", None, I),
    "integer_mask": ("L.IntegerLookup(vocabulary=[7, 3], mask_token=0)", None, I),
    "integer_oov3": ("L.IntegerLookup(vocabulary=[7], num_oov_indices=3)", None, I),
    "integer_oov3_farmhash": ("L.IntegerLookup(vocabulary=[7], num_oov_indices=3, oov_method='farmhash')", None, I),
    "integer_adapt": ("L.IntegerLookup()", "np.array([[3, 3, 7], [7, 9, 3], [12, 12, 12]])", I),
    "integer_adapt_max": ("L.IntegerLookup(max_tokens=3)", "np.array([5, 5, 6, 6, 1, 1, 1, 2])", I),
    "integer_invert": ("L.IntegerLookup(vocabulary=[7, 3], invert=True)", None, "np.array([[0, 1, 2, 9]])"),
    "integer_multi_hot": ("L.IntegerLookup(vocabulary=[7, 3], output_mode='multi_hot')", None, I),
    "integer_list_input": ("L.IntegerLookup(vocabulary=[7, 3])", None, "[7, 3, 5]"),
    "text_adapt": ("L.TextVectorization()", "TEXT", "np.array(['The cat, the DOG!', 'a bird?'])"),
    "text_sequence_length": ("L.TextVectorization(output_sequence_length=4)", "TEXT",
                             "np.array([['the cat sat on the mat'], ['dog']])"),
    "text_max_tokens": ("L.TextVectorization(max_tokens=5, output_mode='multi_hot')", "TEXT",
                        "np.array(['the cat', 'dog dog x'])"),
    "text_count_ngrams": ("L.TextVectorization(ngrams=2, output_mode='count')", "TEXT",
                          "np.array(['the cat sat', 'the cat'])"),
    "text_ngram_widths": ("L.TextVectorization(ngrams=(1, 3), standardize='lower')", "TEXT",
                          "np.array(['The cat sat.', 'the'])"),
    "text_tf_idf": ("L.TextVectorization(output_mode='tf_idf')", "TEXT", "np.array(['the cat cat', 'zebra'])"),
    "text_characters": ("L.TextVectorization(split='character', standardize=None)", "np.array(['abca', 'bd'])",
                        "np.array(['dab', 'e'])"),
    "text_no_split": ("L.TextVectorization(split=None, standardize='strip_punctuation')",
                      "np.array(['yes!', 'no', 'yes'])", "np.array([['yes'], ['No'], ['no.']])"),
    "text_vocab": ("L.TextVectorization(vocabulary=['cat', 'the'], output_sequence_length=3)", None,
                   "np.array(['The Cat in the hat'])"),
    "text_dataset": ("L.TextVectorization()", "tf.data.Dataset.from_tensor_slices(TEXT).batch(2)",
                     "np.array(['on the mat'])"),
}

ORACLE = """
import json
import numpy as np
{imports}
L = keras.layers
def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    v = np.asarray(v)
    if v.dtype == object:
        return [plain(x) for x in v] if v.ndim else plain(v.item())
    return v.tolist()
TEXT = np.array(["The cat sat on the mat.", "the dog ate the cat", "A cat-dog? The end!", "dog, Dog, DOG"])
cases = json.loads({cases!r})
out = {{}}
for name, (ctor, adapt, x) in cases.items():
    layer = eval(ctor)
    if adapt is not None:
        layer.adapt(eval(adapt))
    y = layer(eval(x))
    record = {{"out": plain(y), "dtype": str(np.asarray(y).dtype)}}
    if hasattr(layer, "get_vocabulary"):
        record["vocab"] = [v if isinstance(v, str) else int(v) for v in layer.get_vocabulary()]
        record["size"] = int(layer.vocabulary_size())
    if type(layer).__name__ == "Normalization" and adapt is not None:
        record["weights"] = [np.asarray(w).tolist() for w in layer.get_weights()]
    config = layer.get_config()
    record["config"] = {{k: v for k, v in config.items() if k not in ("name", "dtype")}}
    out[name] = record
print(json.dumps(out))
"""


def run_cases(code_imports, cases, keras_side, tmp_path):
    code = ORACLE.format(imports=code_imports, cases=json.dumps(cases))
    if keras_side:
        return json.loads(run_keras(code, tmp_path).strip().splitlines()[-1])
    printed = []
    scope = {"print": printed.append}
    exec(code, scope)  # noqa: S102 (the cases above)
    return json.loads(printed[-1])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lookup")
    theirs = run_cases("import keras, tensorflow as tf", CASES, True, tmp)
    ours = run_cases("import mdtrain as tf\nfrom mdtrain import keras", CASES, False, tmp)
    return theirs, ours


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(results, name):
    theirs, ours = results
    want, got = theirs[name], ours[name]
    if want["dtype"].startswith("float"):
        np.testing.assert_allclose(np.asarray(got["out"]), np.asarray(want["out"]), rtol=1e-5, atol=1e-6)
    else:
        assert got["out"] == want["out"]
    assert got["dtype"] == want["dtype"]
    for key in ("vocab", "size"):
        assert got.get(key) == want.get(key)
    if "weights" in want:
        for g, w in zip(got["weights"], want["weights"]):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
    want_config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in want["config"].items()}
    assert got["config"] == want_config


def test_in_dataset_map_and_a_distributed_dataset(logical_cpus):
    lookup = L.StringLookup(vocabulary=["a", "b", "c"])
    ds = tf.data.Dataset.from_tensor_slices(np.array(["c", "a", "q", "b"])).batch(2)
    assert [np.asarray(b).tolist() for b in ds.map(lookup)] == [[3, 1], [0, 2]]
    rows = tf.data.Dataset.from_tensor_slices((np.array(["b", "q"]), np.array([1.0, 2.0])))
    pairs = list(rows.map(lambda s, y: (lookup(s), y)))
    assert [(int(s), float(y)) for s, y in pairs] == [(2, 1.0), (0, 2.0)]
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dist = strategy.experimental_distribute_dataset(ds.map(lookup))
    seen = [np.concatenate([np.asarray(v) for v in strategy.experimental_local_results(b)]).tolist() for b in dist]
    assert seen == [[3, 1], [0, 2]]


def test_call_on_tensors_and_lists():
    lookup = L.IntegerLookup(vocabulary=[4, 9])
    assert lookup(tf.constant([9, 4, 1])).numpy().tolist() == [2, 1, 0]
    strings = L.StringLookup(vocabulary=["x"])
    assert strings(tf.constant(["x", "y"])).numpy().tolist() == [1, 0]
    assert strings([b"x", "x"]).numpy().tolist() == [1, 1]
    inverse = L.StringLookup(vocabulary=["x"], invert=True)
    assert inverse(np.array([1, 0])).numpy().tolist() == [b"x", b"[UNK]"]


def test_config_round_trip():
    layer = L.StringLookup(vocabulary=["a", "b"], mask_token="", num_oov_indices=2)
    again = L.StringLookup.from_config(layer.get_config())
    assert again.get_vocabulary() == layer.get_vocabulary()
    x = np.array(["a", "", "b", "q"])
    assert again(x).numpy().tolist() == layer(x).numpy().tolist()
    norm = L.Normalization(mean=[1.0], variance=[4.0])
    assert L.Normalization.from_config(norm.get_config())(np.array([[5.0]])).numpy().tolist() == [[2.0]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_oov_indices=0"):
        L.StringLookup(vocabulary=["a"], num_oov_indices=0)(np.array(["b"]))
    with pytest.raises(ValueError, match="repeated"):
        L.StringLookup(vocabulary=["a", "a"])
    with pytest.raises(ValueError, match="invert"):
        L.StringLookup(vocabulary=["a"], invert=True, output_mode="one_hot")
    with pytest.raises(RuntimeError, match="vocabulary before calling"):
        L.StringLookup(output_mode="multi_hot")(np.array(["a"]))
    with pytest.raises(ValueError, match="Cannot adapt"):
        L.IntegerLookup(vocabulary=[1]).adapt(np.array([1, 2]))
    with pytest.raises(TypeError, match="takes strings"):
        L.StringLookup(vocabulary=["a"])(np.array([1, 2]))
    with pytest.raises(ValueError, match="num_bins"):
        L.Hashing(num_bins=0)
    with pytest.raises(ValueError, match="num_tokens"):
        L.CategoryEncoding()
    with pytest.raises(ValueError, match="both `mean` and `variance`"):
        L.Normalization(mean=[1.0])
    with pytest.raises(ValueError, match="sparse=True"):
        L.CategoryEncoding(3, sparse=True)
