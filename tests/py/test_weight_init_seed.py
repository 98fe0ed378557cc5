"""Issue 34, class 10: under keras.utils.set_random_seed, a layer without weights (PipelineSplit,
Flatten, Activation, Reshape, Dropout, Masking, pooling) changes no initial weight of the layers
around it, in a Sequential, a functional model and eagerly built layers, as in Keras."""
import hashlib

import numpy as np
import pytest

import mdtrain as tf

keras = tf.keras
L = keras.layers


def weights(model):
    """The weights of the layers that have any, in order."""
    return [layer.get_weights() for layer in model.layers if layer.get_weights()]


def assert_same(a, b):
    assert len(a) == len(b)
    for wa, wb in zip(a, b):
        assert len(wa) == len(wb)
        for x, y in zip(wa, wb):
            assert x.shape == y.shape and x.tobytes() == y.tobytes()  # bitwise


def seeded(make, seed=123):
    keras.utils.set_random_seed(seed)
    return make()


def mlp(*inserted):
    """Input(6) -> Dense(5) -> [inserted...] -> Dense(4) -> Dense(3); the layers are created inside
    the list, before the Sequential, as users write it."""
    return lambda: keras.Sequential([keras.Input((6,)), L.Dense(5, activation="relu"), *[f() for f in inserted],
                                     L.Dense(4), L.Dense(3)])


WEIGHTLESS = {
    "PipelineSplit": L.PipelineSplit,
    "Activation": lambda: L.Activation("tanh"),
    "Flatten": L.Flatten,
    "Reshape": lambda: L.Reshape((5,)),
    "Dropout": lambda: L.Dropout(0.5),
}


@pytest.mark.parametrize("name", sorted(WEIGHTLESS))
def test_a_weightless_layer_changes_no_initial_weight(name):
    plain = weights(seeded(mlp()))
    assert_same(weights(seeded(mlp(WEIGHTLESS[name]))), plain)


def test_several_weightless_layers_change_no_initial_weight():
    plain = weights(seeded(mlp()))
    many = weights(seeded(mlp(L.PipelineSplit, lambda: L.Dropout(0.2), L.Flatten, lambda: L.Activation("relu"),
                              L.PipelineSplit)))
    assert_same(many, plain)
    # Not trivially equal: another seed gives other weights.
    assert weights(seeded(mlp(), seed=124))[0][0].tobytes() != plain[0][0].tobytes()


def test_weightless_layers_in_a_conv_net_and_built_later():
    def conv(*inserted):
        def make():
            model = keras.Sequential([L.Conv2D(3, 3), *[f() for f in inserted], L.Conv2D(2, 3), L.Flatten(),
                                      L.Dense(4)])
            model.build((None, 8, 8, 2))
            return model
        return make

    plain = weights(seeded(conv()))
    assert_same(weights(seeded(conv(lambda: L.Dropout(0.3), L.PipelineSplit, lambda: L.Activation("relu")))),
                plain)


def test_a_layer_added_after_a_weightless_one_to_a_built_sequential():
    def grown(with_split):
        def make():
            model = keras.Sequential([keras.Input((6,)), L.Dense(5)])
            if with_split:
                model.add(L.PipelineSplit())
            model.add(L.Dense(3))
            return model
        return make

    assert_same(weights(seeded(grown(True))), weights(seeded(grown(False))))


def test_functional_model_with_weightless_layers():
    def functional(with_weightless):
        def make():
            i = keras.Input((6,))
            h = L.Dense(5)(i)
            if with_weightless:
                h = L.Dropout(0.5)(L.Activation("relu")(h))
            return keras.Model(i, L.Dense(3)(h))
        return make

    assert_same(weights(seeded(functional(True))), weights(seeded(functional(False))))


def test_an_eagerly_called_weightless_layer_draws_nothing():
    x = np.ones((2, 6), np.float32)

    def eager(with_flatten):
        keras.utils.set_random_seed(5)
        if with_flatten:
            L.Flatten()(x)
        dense = L.Dense(3)
        dense(x)
        return dense.get_weights()

    assert_same([eager(True)], [eager(False)])


def test_dropout_masks_stay_reproducible_under_the_seed():
    def masks():
        keras.utils.set_random_seed(9)
        model = keras.Sequential([keras.Input((50,)), L.Dropout(0.5)])
        return model.layers[0].get_config()["seed"]

    assert masks() == masks()


# sha256 (first 16 hex digits) of each weighted layer's initial weights, recorded with the code
# before weight initialisation skipped weightless layers (issue 34): models without weightless
# layers keep exactly the weights they had.
GOLDEN = {
    "mlp": ["fe9e64994ed648f5", "8231118d36389bbb", "15290682c1cc8788"],
    "conv": ["5a1f6853d1549c02", "390f17c57bc08928", "bc6b7597e6512c35"],
    "lstm": ["54d230b1021bb979", "176c136be7b3171b"],
    "functional": ["fe9e64994ed648f5", "42598997bc156de7"],
    "built_later": ["fe9e64994ed648f5", "42598997bc156de7"],
    "bn": ["fe9e64994ed648f5", "abfd516ffa603167", "a3a36e2355d086a8"],
}


def _digest(model):
    out = []
    for ws in weights(model):
        h = hashlib.sha256()
        for w in ws:
            h.update(np.ascontiguousarray(w, np.float32).tobytes())
        out.append(h.hexdigest()[:16])
    return out


def _golden_cases():
    def conv():
        return keras.Sequential([keras.Input((8, 8, 2)), L.Conv2D(3, 3), L.Conv2D(2, 3), L.Dense(4)])

    def lstm():
        return keras.Sequential([keras.Input((5, 3)), L.LSTM(4), L.Dense(2)])

    def functional():
        i = keras.Input((6,))
        return keras.Model(i, L.Dense(3)(L.Dense(5)(i)))

    def built_later():
        m = keras.Sequential([L.Dense(5), L.Dense(3)])
        m.build((None, 6))
        return m

    def bn():
        return keras.Sequential([keras.Input((6,)), L.Dense(5), L.BatchNormalization(), L.Dense(3)])

    return dict(mlp=mlp(), conv=conv, lstm=lstm, functional=functional, built_later=built_later, bn=bn)


@pytest.mark.parametrize("name", sorted(_golden_cases()))
def test_models_without_weightless_layers_keep_their_seeded_weights(name):
    assert _digest(seeded(_golden_cases()[name])) == GOLDEN[name]


def test_an_initializers_own_seed_decides_its_values():
    """keras.initializers.X(seed=s): the values depend on s alone (not dropped, issue 34), whatever
    the global seed; another s gives others; the seed survives get_config / a saved model."""
    def kernel(global_seed, seed):
        keras.utils.set_random_seed(global_seed)
        model = keras.Sequential([keras.Input((6,)), L.Dense(5),
                                  L.Dense(4, kernel_initializer=keras.initializers.GlorotUniform(seed=seed))])
        return model.layers[1].get_weights()[0], model.layers[0].get_weights()[0]

    a, first_a = kernel(1, 42)
    b, first_b = kernel(2, 42)
    assert a.tobytes() == b.tobytes()  # the seeded kernel: equal under other global seeds
    assert first_a.tobytes() != first_b.tobytes()  # the unseeded one follows the global seed
    assert kernel(1, 43)[0].tobytes() != a.tobytes()
    assert np.abs(a).max() <= np.sqrt(6 / (5 + 4))  # still Glorot's range
    layer = L.Dense(4, kernel_initializer=keras.initializers.RandomNormal(seed=7))
    assert layer.get_config()["kernel_initializer"]["config"]["seed"] == 7
    with pytest.raises(ValueError, match="seed"):
        keras.initializers.GlorotUniform(seed=-1)
    with pytest.raises(ValueError, match="seed"):
        keras.initializers.Orthogonal(seed="x")


def test_a_seeded_initializer_survives_save_and_load(tmp_path):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6,)), L.Dense(4, kernel_initializer=keras.initializers.HeNormal(seed=5))])
    for path in (tmp_path / "m.keras", tmp_path / "m.mdtrain"):
        model.save(str(path))
        config = keras.models.load_model(str(path)).layers[0].get_config()
        assert config["kernel_initializer"]["config"]["seed"] == 5
