"""Subclassed keras.Model: __init__ with layers as attributes and call(inputs, training=None),
traced into the functional graph the first time it is built, called or trained, so fit runs it
in C++ under any strategy; model(x) works eagerly and on a GradientTape; save/load keeps it."""
import numpy as np
import pytest

import mdtrain as tf

keras = tf.keras
layers = keras.layers


class ResidualClassifier(keras.Model):
    def __init__(self, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.stem = layers.Dense(16, activation="relu")
        self.inner = layers.Dense(16, activation="relu")
        self.project = layers.Dense(16)
        self.dropout = layers.Dropout(0.1)
        self.head = layers.Dense(classes, activation="softmax")

    def call(self, inputs, training=None):
        h = self.stem(inputs)
        h = h + self.project(self.inner(h))  # a residual connection: the Add layer
        return self.head(self.dropout(h, training=training))


def trained(x, y, seed=1, strategy=None, epochs=3):
    tf.keras.utils.set_random_seed(seed)
    scope = (strategy or tf.distribute.get_strategy()).scope()
    with scope:
        model = ResidualClassifier()
        model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=epochs, batch_size=32, verbose=0)
    return model, history


def test_subclassed_model_trains_and_is_a_graph_of_its_layers(blobs):
    x, y = blobs
    model, history = trained(x, y)
    assert history.history["accuracy"][-1] > 0.95
    assert isinstance(model, keras.Model) and model.built
    assert [type(l).__name__ for l in model.layers] == ["Dense", "Dense", "Dense", "Add", "Dropout", "Dense"]
    assert model.layers[0] is model.stem and model.layers[-1] is model.head
    np.testing.assert_allclose(model(x).numpy(), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


def test_save_load_round_trip_gives_identical_predictions(tmp_path, blobs):
    x, y = blobs
    model, _ = trained(x, y, epochs=1)
    model.save(tmp_path / "sub.mdtrain")
    saved_predictions = model.predict(x, verbose=0)
    loaded = keras.models.load_model(tmp_path / "sub.mdtrain")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), saved_predictions)
    # The loaded model is the traced graph (a functional Model): it trains on the same way.
    loaded.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    model.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    fresh = ResidualClassifier()
    fresh.build((None, 20))
    fresh.load_weights(tmp_path / "sub.mdtrain")
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), saved_predictions)


def test_eager_call_builds_and_a_tape_trains_it(blobs):
    x, y = blobs
    model = ResidualClassifier()
    assert not model.built
    assert model(x[:4]).shape == (4, 3)  # the first call traces call() and builds the graph
    assert model.built and len(model.trainable_variables) == 8
    optimizer = keras.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    first = None
    for step in range(30):
        batch = slice(step * 20 % 600, step * 20 % 600 + 20)
        with tf.GradientTape() as tape:
            loss = loss_fn(y[batch], model(x[batch], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        first = float(loss) if first is None else first
    assert float(loss) < first / 2


def test_mirrored_strategy_gives_the_one_device_weights(logical_cpus, blobs):
    x, y = blobs
    one, _ = trained(x[:64], y[:64], epochs=1)
    logical_cpus(2)
    two, _ = trained(x[:64], y[:64], strategy=tf.distribute.MirroredStrategy(), epochs=1)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_call_that_cannot_be_traced_is_a_clear_error(blobs):
    x, _ = blobs

    class ValueDependent(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(2)

        def call(self, inputs):
            if inputs > 0:  # Python control flow on a tensor's value
                return self.dense(inputs)
            return inputs

    with pytest.raises(TypeError, match="call\\(\\) cannot be traced.*only \\+ and \\*"):
        ValueDependent()(x)

    class NumpyInside(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(2)

        def call(self, inputs, training=None):
            return self.dense(np.tanh(inputs))

    with pytest.raises(TypeError, match="cannot be traced.*NumPy"):
        NumpyInside().predict(x, verbose=0)

    class NoCall(keras.Model):
        pass

    with pytest.raises(TypeError, match="define call"):
        NoCall()


def test_several_inputs(blobs):
    x, y = blobs

    class TwoTowers(keras.Model):
        def __init__(self):
            super().__init__()
            self.a, self.b = layers.Dense(8, activation="relu"), layers.Dense(8, activation="relu")
            self.join = layers.Concatenate()
            self.head = layers.Dense(3, activation="softmax")

        def call(self, inputs, training=None):
            left, right = inputs
            return self.head(self.join([self.a(left), self.b(right)]))

    tf.keras.utils.set_random_seed(0)
    model = TwoTowers()
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit([x[:, :10], x[:, 10:]], y, epochs=5, batch_size=32, verbose=0)
    assert history.history["accuracy"][-1] > 0.85
    np.testing.assert_allclose(model([x[:, :10], x[:, 10:]]).numpy(),
                               model.predict([x[:, :10], x[:, 10:]], verbose=0), rtol=1e-5, atol=1e-6)


def test_a_failed_trace_leaves_the_layers_free_for_the_next_one(blobs):
    x, _ = blobs

    class FirstTryFails(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(2)
            self.fail = True

        def call(self, inputs, training=None):
            h = self.dense(inputs)
            return np.tanh(h) if self.fail else h

    model = FirstTryFails()
    with pytest.raises(TypeError, match="cannot be traced"):
        model(x)
    model.fail = False
    assert model(x).shape == (600, 2)
