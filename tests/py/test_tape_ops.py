"""Every op with a gradient: the tape's gradient against central finite differences in float64,
and second derivatives (a tape around a tape) for element-wise ops and matmul."""
import numpy as np
import pytest

import mdtrain as tf

RNG = np.random.default_rng(7)


def _randn(*shape):
    return RNG.normal(size=shape)


def _positive(*shape):
    return RNG.uniform(0.5, 2.0, size=shape)


def _apart(*shape):
    """Values at least 0.1 from 0 and from each other (no ties for max/min/abs/relu)."""
    n = int(np.prod(shape))
    values = (np.arange(n) - n / 2 + 0.5) * 0.37 + 0.05
    return RNG.permutation(values).reshape(shape)


def _check_gradient(fn, inputs, eps=1e-6, rtol=1e-6, atol=1e-7):
    """d/dx sum(fn(*x) * w) from the tape equals the central differences, for every input."""
    inputs = [np.asarray(x, dtype=np.float64) for x in inputs]
    tensors = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        out = fn(*tensors)
    weights = RNG.normal(size=out.shape.as_list())
    # Differentiate the weighted sum: output_gradients carries the weights.
    grads = tape.gradient(out, tensors, output_gradients=tf.constant(weights))

    def objective(values):
        return float(np.sum(np.asarray(fn(*[tf.constant(v) for v in values])) * weights))

    for k, x in enumerate(inputs):
        assert grads[k] is not None, f"input {k} got no gradient"
        assert grads[k].dtype == tf.float64 and grads[k].shape == x.shape
        numeric = np.zeros_like(x)
        for i in np.ndindex(*x.shape):
            up = [v.copy() for v in inputs]
            down = [v.copy() for v in inputs]
            up[k][i] += eps
            down[k][i] -= eps
            numeric[i] = (objective(up) - objective(down)) / (2 * eps)
        np.testing.assert_allclose(grads[k].numpy(), numeric, rtol=rtol, atol=atol * max(1.0, np.abs(numeric).max()),
                                   err_msg=f"input {k}")


CASES = {
    "add broadcast": (lambda a, b: a + b, [_randn(3, 4), _randn(4)]),
    "add column": (lambda a, b: tf.add(a, b), [_randn(3, 1), _randn(3, 4)]),
    "subtract": (lambda a, b: a - b, [_randn(2, 3), _randn(1, 3)]),
    "multiply": (lambda a, b: a * b, [_randn(3, 4), _randn(3, 1)]),
    "divide": (lambda a, b: a / b, [_randn(3, 4), _positive(4)]),
    "python scalars": (lambda a: 2.0 * a - 1 / (a + 3.0), [_positive(5)]),
    "pow": (lambda a, b: tf.pow(a, b), [_positive(3, 2), _randn(3, 2)]),
    "pow operator": (lambda a: a ** 3, [_randn(4)]),
    "negative": (lambda a: -a, [_randn(2, 3)]),
    "exp": (tf.exp, [_randn(2, 3)]),
    "log": (tf.math.log, [_positive(2, 3)]),
    "sqrt": (tf.sqrt, [_positive(2, 3)]),
    "square": (tf.square, [_randn(2, 3)]),
    "abs": (tf.abs, [_apart(2, 3)]),
    "maximum": (tf.maximum, [_apart(3, 4), _apart(3, 4)]),
    "minimum": (tf.minimum, [_apart(3, 4), _apart(4)]),
    "matmul": (tf.matmul, [_randn(3, 4), _randn(4, 2)]),
    "matmul transpose_a": (lambda a, b: tf.matmul(a, b, transpose_a=True), [_randn(4, 3), _randn(4, 2)]),
    "matmul transpose_b": (lambda a, b: tf.matmul(a, b, transpose_b=True), [_randn(3, 4), _randn(2, 4)]),
    "matmul both": (lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True), [_randn(4, 3), _randn(2, 4)]),
    "matmul batched": (lambda a, b: a @ b, [_randn(2, 3, 4), _randn(4, 2)]),
    "reduce_sum": (tf.reduce_sum, [_randn(3, 4)]),
    "reduce_sum axis": (lambda a: tf.reduce_sum(a, axis=1), [_randn(3, 4)]),
    "reduce_sum keepdims": (lambda a: tf.reduce_sum(a, axis=[0, 2], keepdims=True), [_randn(2, 3, 2)]),
    "reduce_mean": (lambda a: tf.reduce_mean(a, axis=0), [_randn(3, 4)]),
    "reduce_mean keepdims": (lambda a: tf.reduce_mean(a, axis=-1, keepdims=True), [_randn(3, 4)]),
    "reduce_max": (lambda a: tf.reduce_max(a, axis=1), [_apart(3, 4)]),
    "reduce_max all": (tf.reduce_max, [_apart(3, 4)]),
    "reduce_min keepdims": (lambda a: tf.reduce_min(a, axis=0, keepdims=True), [_apart(3, 4)]),
    "reduce_logsumexp": (lambda a: tf.reduce_logsumexp(a, axis=1), [_randn(3, 4)]),
    "reshape": (lambda a: tf.reshape(a, [2, -1]) * tf.constant(np.arange(6.0).reshape(2, 3)), [_randn(3, 2)]),
    "concat": (lambda a, b: tf.concat([a, b, a], axis=1), [_randn(2, 3), _randn(2, 1)]),
    "stack": (lambda a, b: tf.stack([a, b], axis=1), [_randn(2, 3), _randn(2, 3)]),
    "unstack": (lambda a: tf.unstack(a)[1] * 3.0, [_randn(3, 2)]),
    "split": (lambda a: tf.split(a, [1, 3], axis=1)[1], [_randn(2, 4)]),
    "transpose": (lambda a: tf.transpose(a, [2, 0, 1]), [_randn(2, 3, 4)]),
    "transpose default": (tf.transpose, [_randn(2, 3)]),
    "expand_dims squeeze": (lambda a: tf.squeeze(tf.expand_dims(a, 1) * 2.0), [_randn(3, 2)]),
    "broadcast_to": (lambda a: tf.broadcast_to(a, [3, 2, 4]), [_randn(2, 1)]),
    "gather": (lambda a: tf.gather(a, [2, 0, 2, 1]), [_randn(3, 2)]),
    "gather axis 1": (lambda a: tf.gather(a, np.array([[1, 1], [0, 3]]), axis=1), [_randn(2, 4)]),
    "getitem": (lambda a: a[1:, ::2], [_randn(3, 4)]),
    "getitem int": (lambda a: a[1] + a[:, 0, None][1], [_randn(3, 4)]),
    "where": (lambda a, b: tf.where(np.array([[True, False, True]]), a, b), [_randn(2, 3), _randn(3)]),
    "add_n": (lambda a, b: tf.add_n([a, b, a]), [_randn(2, 2), _randn(2, 2)]),
    "identity": (tf.identity, [_randn(3)]),
    "clip_by_value": (lambda a: tf.clip_by_value(a, -0.5, 0.5), [_apart(2, 5)]),
    "relu": (tf.nn.relu, [_apart(3, 4)]),
    "sigmoid": (tf.nn.sigmoid, [_randn(3, 4) * 3]),
    "tanh": (tf.math.tanh, [_randn(3, 4)]),
    "softplus": (tf.math.softplus, [_randn(3, 4)]),
    "softmax": (tf.nn.softmax, [_randn(3, 4)]),
    "softmax axis 0": (lambda a: tf.nn.softmax(a, axis=0), [_randn(3, 4)]),
    "log_softmax": (tf.nn.log_softmax, [_randn(3, 4)]),
    "sparse softmax xent": (lambda a: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=np.array([0, 3, 1]), logits=a), [_randn(3, 4)]),
    "softmax xent": (lambda lab, a: tf.nn.softmax_cross_entropy_with_logits(labels=lab, logits=a),
                     [_positive(3, 4) / 4, _randn(3, 4)]),
    "sigmoid xent": (lambda lab, a: tf.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=a),
                     [_positive(3, 2) / 2, _randn(3, 2)]),
    "compute_average_loss": (lambda a: tf.nn.compute_average_loss(a, global_batch_size=8), [_randn(5)]),
    "compute_average_loss weighted": (lambda a, w: tf.nn.compute_average_loss(a, sample_weight=w),
                                      [_randn(4), _positive(4)]),
    "scale_regularization_loss": (lambda a, b: tf.nn.scale_regularization_loss([a, b]), [_randn(), _randn()]),
    "variance": (lambda a: tf.math.reduce_std(a, axis=0), [_randn(4, 2)]),
    "cast float64": (lambda a: tf.cast(a, tf.float64) * 2.0, [_randn(3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    fn, inputs = CASES[name]
    _check_gradient(fn, inputs)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "square", "sigmoid", "tanh", "multiply", "divide", "pow",
                                  "softmax", "log_softmax", "matmul", "matmul transpose_b", "reduce_max",
                                  "sparse softmax xent"])
def test_second_derivative_matches_finite_differences(name):
    """d/dx of <d f/dx, v> from a tape around a tape, against differences of the first gradient."""
    fn, inputs = CASES[name]
    inputs = [np.asarray(x, dtype=np.float64) for x in inputs]
    out_weights = RNG.normal(size=np.shape(fn(*[tf.constant(x) for x in inputs])))
    vectors = [RNG.normal(size=x.shape) for x in inputs]

    def first(values):
        tensors = [tf.constant(v) for v in values]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            out = tf.reduce_sum(fn(*tensors) * out_weights)
        return tape.gradient(out, tensors)

    def directional(values):
        return sum(float(np.sum(g.numpy() * v)) for g, v in zip(first(values), vectors))

    tensors = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as outer:
        outer.watch(tensors)
        with tf.GradientTape() as inner:
            inner.watch(tensors)
            out = tf.reduce_sum(fn(*tensors) * out_weights)
        grads = inner.gradient(out, tensors)
        dot = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vectors)])
    second = outer.gradient(dot, tensors, unconnected_gradients="zero")
    eps = 1e-5
    for k, x in enumerate(inputs):
        numeric = np.zeros_like(x)
        for i in np.ndindex(*x.shape):
            up = [v.copy() for v in inputs]
            down = [v.copy() for v in inputs]
            up[k][i] += eps
            down[k][i] -= eps
            numeric[i] = (directional(up) - directional(down)) / (2 * eps)
        np.testing.assert_allclose(second[k].numpy(), numeric, rtol=1e-5, atol=1e-6 * max(1, np.abs(numeric).max()))


def test_third_derivative_of_a_cube():
    x = tf.Variable(1.5, dtype=tf.float64)
    with tf.GradientTape() as t3:
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = x * x * x
            dy = t1.gradient(y, x)
        d2y = t2.gradient(dy, x)
    d3y = t3.gradient(d2y, x)
    assert (float(dy), float(d2y), float(d3y)) == (3 * 1.5 ** 2, 6 * 1.5, 6.0)


def test_float32_stays_float32_and_float64_stays_float64():
    for dtype in (tf.float32, tf.float64):
        x = tf.Variable(np.ones((2, 3)), dtype=dtype)
        with tf.GradientTape() as tape:
            y = tf.reduce_mean(tf.nn.softmax(tf.matmul(x, tf.transpose(x)) * 0.5) + tf.exp(x)[:, :2])
        g = tape.gradient(y, x)
        assert y.dtype == dtype and g.dtype == dtype and g.numpy().dtype == dtype.as_numpy_dtype


def test_ops_without_gradient_compute_numpy_values():
    x = tf.constant([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    assert tf.argmax(x).numpy().tolist() == [1, 0, 1] and tf.argmax(x).dtype == tf.int64
    assert tf.argmax(x, axis=1, output_type=tf.int32).numpy().tolist() == [1, 2]
    assert tf.equal(x, 5.0).numpy().tolist() == [[False, True, False], [False, False, False]]
    assert bool(tf.reduce_any(x > 5.5)) and not bool(tf.reduce_all(x > 1.5))
    assert tf.reduce_all(tf.logical_or(x > 3, x <= 3)).numpy()
    assert tf.range(5).dtype == tf.int32 and tf.range(1.0, 2.0, 0.5).numpy().tolist() == [1.0, 1.5]
    assert tf.zeros([2, 3]).dtype == tf.float32 and tf.ones((2,), dtype=tf.int64).numpy().tolist() == [1, 1]
    assert tf.zeros_like(x).shape == (2, 3) and tf.ones_like(x, dtype=tf.int32).dtype == tf.int32
    assert tf.shape(x).numpy().tolist() == [2, 3] and tf.shape(x).dtype == tf.int32
    assert tf.cast(tf.constant([1.7, -1.7]), tf.int32).numpy().tolist() == [1, -1]
    assert tf.one_hot([2, 0], 3).numpy().tolist() == [[0, 0, 1], [1, 0, 0]]
    assert (tf.constant(7) // 2).numpy() == 3 and (tf.constant(7) % 3).numpy() == 1
    assert (tf.constant(3) / tf.constant(2)).dtype == tf.float64  # TF's truediv of int32


def test_stop_gradient_and_int_casts_block_gradients():
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        a = tf.stop_gradient(x * 3.0) * x
        b = tf.cast(tf.cast(x, tf.int32), tf.float32) * 2.0
    assert tape.gradient(a, x).numpy().tolist() == [3.0, 6.0]
    assert tape.gradient(b, x) is None


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import mutually_broadcastable_shapes
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

if given is not None:
    @settings(max_examples=25, deadline=None)
    @given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
           op=st.sampled_from(["add", "subtract", "multiply", "divide", "maximum"]))
    def test_broadcasting_binary_gradients(shapes, op):
        """Any two broadcast-compatible shapes: each gradient has its input's shape and value."""
        a, b = _apart(*shapes.input_shapes[0]), _apart(*shapes.input_shapes[1]) + 0.013
        if op == "divide":
            b = np.abs(b) + 0.5
        _check_gradient(getattr(tf.math, op), [a, b])
