"""tf.function: runs the Python function, checks input_signature as TF does, works on methods."""
import numpy as np
import pytest

import mdtrain as tf


def test_decorator_forms_call_the_function_and_return_tensors():
    calls = []

    @tf.function
    def plain(x):
        calls.append(x)
        return x * 2

    @tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
    def configured(x):
        return x + 1

    called = tf.function(lambda: 1.5)
    assert float(plain(tf.constant(3.0))) == 6.0 and len(calls) == 1
    assert float(configured(tf.constant(1.0))) == 2.0
    out = called()
    assert isinstance(out, tf.Tensor) and out.dtype == tf.float32 and float(out) == 1.5
    assert plain.python_function.__name__ == "plain" and plain.__name__ == "plain"
    plain(tf.constant(1.0))
    assert len(calls) == 2  # no tracing: the Python body runs on every call


def test_python_control_flow_on_tensors_works_as_autograph_would():
    @tf.function
    def count_until(limit):
        total = tf.constant(0)
        for i in tf.range(10):
            if i >= limit:
                break
            total += i
        return total

    assert int(count_until(tf.constant(4))) == 0 + 1 + 2 + 3


def test_input_signature_converts_and_checks_arguments():
    f = tf.function(lambda x: x * 2, input_signature=[tf.TensorSpec([None], tf.float32)])
    assert f.input_signature == (tf.TensorSpec([None], tf.float32),)
    # NumPy and Python values are converted to the spec's dtype, as TF does.
    for value in (np.ones(2), np.ones(2, np.int32), [1, 2]):
        out = f(value)
        assert out.dtype == tf.float32 and out.shape == (2,)
    with pytest.raises(TypeError, match="shape"):
        f(tf.constant([[1.0]]))
    with pytest.raises(TypeError, match="shape"):
        f(3.0)
    with pytest.raises(TypeError, match="dtype"):
        f(tf.constant([1], dtype=tf.int32))  # a tensor of another dtype is not cast
    with pytest.raises(TypeError, match="too many positional arguments"):
        f(np.ones(2), np.ones(2))


def test_input_signature_structures_and_defaults():
    f = tf.function(lambda pair, scale=2: pair[0] * scale + pair[1],
                    input_signature=[(tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32))])
    assert np.allclose(f((np.ones(2), np.zeros(2))), 2.0)
    with pytest.raises(TypeError, match="structure"):
        f(np.ones(2))
    with pytest.raises(TypeError, match="must keep its default"):
        f((np.ones(2), np.zeros(2)), 3)
    with pytest.raises(TypeError, match="missing type constraint for y"):
        tf.function(lambda x, y: x, input_signature=[tf.TensorSpec([], tf.float32)])
    with pytest.raises(TypeError, match="TensorSpec"):
        tf.function(lambda x: x, input_signature=[3])


def test_methods_bind_self_and_keep_one_function_per_instance():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def scale(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    assert float(a.scale(1.0)) == 2.0 and float(b.scale(1.0)) == 3.0
    assert a.scale is a.scale and a.scale is not b.scale
    assert Scaler.scale.python_function is a.scale.python_function
    assert float(Scaler.scale(b, 2.0)) == 6.0  # called on the class with the instance
    with pytest.raises(TypeError, match="shape"):
        a.scale(np.ones(2))


def test_tracing_count_follows_tf_retracing_rules():
    f = tf.function(lambda x: x)
    f(1)
    f(2)  # Python values: one trace each
    f(tf.constant(1.0))
    f(tf.constant(2.0))  # same dtype and shape: no new trace
    f(tf.ones(3))
    assert f.experimental_get_tracing_count() == 4
    relaxed = tf.function(lambda x: x, reduce_retracing=True)
    for n in (2, 3, 4):
        relaxed(tf.ones(n))
    assert relaxed.experimental_get_tracing_count() == 2  # exact, then one relaxed to (None,)


def test_element_spec_signature_accepts_per_replica_values(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.float32).reshape(4, 2)).batch(4)
    dist = strategy.experimental_distribute_dataset(dataset)

    @tf.function(input_signature=[dist.element_spec])
    def step(per_replica):
        return strategy.run(lambda v: 2 * v, args=(per_replica,))

    out = step(next(iter(dist)))
    assert [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)] == [
        [[0, 2], [4, 6]], [[8, 10], [12, 14]]]
    with pytest.raises(TypeError, match="replica 0"):
        step(tf.distribute.PerReplica([np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)]))


def test_wrapped_training_step_gives_the_eager_weights():
    def train(wrap):
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                                     tf.keras.layers.Dense(2)])
        optimizer = tf.keras.optimizers.Adam(0.01)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        step = wrap(step)
        rng = np.random.default_rng(1)
        for _ in range(3):
            step(rng.normal(size=(8, 3)).astype(np.float32), rng.integers(0, 2, size=8))
        return model.get_weights()

    for a, b in zip(train(lambda f: f), train(tf.function)):
        assert np.array_equal(a, b)
