"""Keras models, layers, losses, metrics and optimizers on GradientTape: the custom training loop
gives the weights fit and train_on_batch give."""
import warnings

import numpy as np
import pytest

import mdtrain as tf


def _data(n=96, features=20, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, features)) * 2
    y = rng.integers(0, classes, size=n)
    x = (centers[y] + rng.normal(size=(n, features))).astype(np.float32)
    return x, y


def _model(seed=1, dropout=None, regularizer=None, batch_norm=False):
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.layers.Dense(16, activation="relu", input_shape=(20,), kernel_regularizer=regularizer)]
    if batch_norm:
        layers.append(tf.keras.layers.BatchNormalization())
    if dropout:
        layers.append(tf.keras.layers.Dropout(dropout))
    layers.append(tf.keras.layers.Dense(3, activation="softmax"))
    return tf.keras.Sequential(layers)


def _assert_same_weights(a, b):
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)


def test_one_sgd_step_on_the_tape_equals_train_on_batch():
    x, y = _data(32)
    reference = _model()
    reference.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    expected_loss = reference.train_on_batch(x, y)

    model = _model()
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    assert [g.shape for g in grads] == [w.shape for w in model.trainable_variables]
    assert all(isinstance(g, tf.Tensor) and g.dtype == tf.float32 for g in grads)
    assert int(optimizer.apply_gradients(zip(grads, model.trainable_variables))) == 1
    assert float(loss) == pytest.approx(expected_loss, rel=1e-6)
    _assert_same_weights(reference, model)


@pytest.mark.parametrize("dropout,batch_norm", [(None, False), (0.25, False), (None, True)])
def test_adam_custom_loop_equals_fit(dropout, batch_norm):
    """The TF custom-training tutorial's loop shape (per-example losses, compute_average_loss)."""
    x, y = _data(96)
    reference = _model(dropout=dropout, batch_norm=batch_norm)
    reference.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    reference.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)

    model = _model(dropout=dropout, batch_norm=batch_norm)
    optimizer = tf.keras.optimizers.Adam(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
    for _ in range(2):
        for i in range(0, 96, 32):
            with tf.GradientTape() as tape:
                per_example = loss_fn(y[i:i + 32], model(x[i:i + 32], training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=32)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert int(optimizer.iterations) == int(reference.optimizer.iterations) == 6
    _assert_same_weights(reference, model)


def test_regularization_losses_train_like_fit():
    x, y = _data(32)
    reg = tf.keras.regularizers.L2(0.01)
    reference = _model(regularizer=reg)
    reference.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    reference.train_on_batch(x, y)

    model = _model(regularizer=reg)
    kernel = model.layers[0].get_weights()[0]
    assert len(model.losses) == 1 and float(model.losses[0]) == pytest.approx(0.01 * np.sum(kernel ** 2), rel=1e-5)
    optimizer = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
        loss = loss + tf.nn.scale_regularization_loss(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    _assert_same_weights(reference, model)


def test_model_called_twice_on_one_tape():
    """The first call's backward runs after the second forward: it gets its own buffers back."""
    x, y = _data(32)
    model = _model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    parts = []
    for rows in (slice(0, 12), slice(12, 32)):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[rows], model(x[rows], training=True))
        parts.append(tape.gradient(loss, model.trainable_variables))
    with tf.GradientTape() as tape:
        loss = loss_fn(y[:12], model(x[:12], training=True)) + loss_fn(y[12:], model(x[12:], training=True))
    both = tape.gradient(loss, model.trainable_variables)
    for g, a, b in zip(both, *parts):
        np.testing.assert_allclose(g.numpy(), a.numpy() + b.numpy(), rtol=1e-5, atol=1e-7)


def test_a_call_replayed_for_its_backward_draws_the_same_dropout_mask():
    x, y = _data(32)
    model = _model(dropout=0.5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    model._tape_training_calls = 0  # the step Dropout keys its masks on (see docs/eager.md)
    parts = []
    for rows in (slice(0, 12), slice(12, 32)):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[rows], model(x[rows], training=True))
        parts.append(tape.gradient(loss, model.trainable_variables))
    model._tape_training_calls = 0
    with tf.GradientTape() as tape:
        loss = loss_fn(y[:12], model(x[:12], training=True)) + loss_fn(y[12:], model(x[12:], training=True))
    both = tape.gradient(loss, model.trainable_variables)
    for g, a, b in zip(both, *parts):
        np.testing.assert_allclose(g.numpy(), a.numpy() + b.numpy(), rtol=1e-5, atol=1e-7)


def test_one_step_of_a_cnn_on_the_tape_equals_train_on_batch():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 8, 8, 2)).astype(np.float32)
    y = rng.integers(0, 4, size=8)

    def cnn():
        tf.keras.utils.set_random_seed(4)
        return tf.keras.Sequential([
            tf.keras.layers.Conv2D(4, 3, activation="relu", input_shape=(8, 8, 2)),
            tf.keras.layers.MaxPooling2D(), tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(4, activation="softmax")])

    reference = cnn()
    reference.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    reference.train_on_batch(x, y)
    model = cnn()
    optimizer = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    _assert_same_weights(reference, model)


def test_batch_norm_statistics_update_once_per_training_call():
    x, _ = _data(32)
    model = _model(batch_norm=True)
    twin = _model(batch_norm=True)
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(model(x[:16], training=True)) + tf.reduce_sum(model(x[16:], training=True) ** 2)
    tape.gradient(out, model.trainable_variables)  # re-runs the first call's forward
    twin(x[:16], training=True)
    twin(x[16:], training=True)
    moving = [w.numpy() for w in model.non_trainable_variables]
    assert len(moving) == 2 and not np.array_equal(moving[0], np.zeros(16))
    for a, b in zip(moving, [w.numpy() for w in twin.non_trainable_variables]):
        np.testing.assert_array_equal(a, b)


def test_gradient_with_respect_to_the_input_matches_finite_differences():
    x, _ = _data(4)
    model = _model()
    xt = tf.constant(x)
    w = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = tf.reduce_sum(model(xt) * w)
    gx = tape.gradient(out, xt).numpy()
    eps = 1e-2
    for i, j in [(0, 0), (1, 5), (3, 19)]:
        up, down = x.copy(), x.copy()
        up[i, j] += eps
        down[i, j] -= eps
        numeric = (np.sum(model.predict(up, verbose=0).astype(np.float64) * w) -
                   np.sum(model.predict(down, verbose=0).astype(np.float64) * w)) / (2 * eps)
        assert gx[i, j] == pytest.approx(numeric, rel=2e-2, abs=1e-4)


def test_a_layer_of_no_model_builds_on_its_first_call():
    layer = tf.keras.layers.Dense(2)
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * y)
    kernel, bias = layer.trainable_variables
    assert layer.built and kernel.shape == (2, 2) and bias.shape == (2,)
    gk, gb, gx = tape.gradient(loss, [kernel, bias, x])
    dy = 2 * y.numpy()
    np.testing.assert_allclose(gk.numpy(), x.numpy().T @ dy, rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), dy.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), dy @ kernel.numpy().T, rtol=1e-6)


def test_weights_are_variable_views_of_the_model():
    model = _model()
    variables = model.trainable_variables
    assert variables is not model.trainable_variables and variables[0] is model.trainable_variables[0]
    layers = model.layers
    assert [v.path for v in model.variables] == [f"{layers[0].name}/kernel", f"{layers[0].name}/bias",
                                                 f"{layers[1].name}/kernel", f"{layers[1].name}/bias"]
    assert [v.name for v in model.variables] == ["kernel", "bias", "kernel", "bias"]
    np.testing.assert_array_equal(variables[0].numpy(), model.get_weights()[0])
    variables[1].assign(np.full(16, 0.5, np.float32))
    np.testing.assert_array_equal(model.get_weights()[1], np.full(16, 0.5, np.float32))
    variables[1].assign_sub(tf.ones([16]))
    assert model.layers[0].get_weights()[1].tolist() == [-0.5] * 16
    before = variables[0].value()  # a snapshot: later writes do not change it
    variables[0].assign(np.zeros((20, 16), np.float32))
    assert np.any(before.numpy() != 0) and not np.any(model.get_weights()[0])
    with pytest.raises(ValueError, match="Shape mismatch"):
        variables[0].assign(np.zeros((3, 3), np.float32))


def test_loss_reductions_on_tensors():
    x, y = _data(8)
    model = _model()
    pred = model(x)
    assert isinstance(pred, tf.Tensor) and pred.shape == (8, 3)
    np.testing.assert_allclose(pred.numpy(), model.predict(x, verbose=0), rtol=1e-6)
    # Outside a tape too, the loss comes from the softmax layer's logits, as evaluate computes it.
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert float(tf.keras.losses.SparseCategoricalCrossentropy()(y, pred)) == pytest.approx(
        model.evaluate(x, y, batch_size=8, verbose=0), rel=1e-6)
    per_example = tf.keras.losses.SparseCategoricalCrossentropy(reduction=None)(y, pred)
    assert isinstance(per_example, tf.Tensor) and per_example.shape == (8,)
    mean = tf.keras.losses.SparseCategoricalCrossentropy()(y, pred)
    total = tf.keras.losses.SparseCategoricalCrossentropy(reduction="sum")(y, pred)
    probs = pred.numpy().astype(np.float64)
    expected = -np.log(probs[np.arange(8), y])
    np.testing.assert_allclose(per_example.numpy(), expected, rtol=1e-5)
    assert float(mean) == pytest.approx(expected.mean(), rel=1e-5)
    assert float(total) == pytest.approx(expected.sum(), rel=1e-5)
    weighted = tf.keras.losses.SparseCategoricalCrossentropy()(y, pred, sample_weight=np.arange(8.0))
    assert float(weighted) == pytest.approx(np.sum(expected * np.arange(8)) / 8, rel=1e-5)


@pytest.mark.parametrize("loss", ["categorical", "binary", "mse", "mae"])
@pytest.mark.parametrize("reduction", [None, "sum", "sum_over_batch_size"])
def test_keras_loss_gradient_matches_finite_differences(loss, reduction):
    rng = np.random.default_rng(5)
    pred = rng.uniform(0.1, 0.9, size=(4, 3))
    if loss == "categorical":
        fn, target = tf.keras.losses.CategoricalCrossentropy(reduction=reduction), np.eye(3)[[0, 2, 1, 1]]
        pred = pred / pred.sum(axis=1, keepdims=True)
    elif loss == "binary":
        fn, target = tf.keras.losses.BinaryCrossentropy(reduction=reduction), rng.integers(0, 2, (4, 3)) * 1.0
    elif loss == "mse":
        fn, target = tf.keras.losses.MeanSquaredError(reduction=reduction), rng.normal(size=(4, 3))
    else:
        fn, target = tf.keras.losses.MeanAbsoluteError(reduction=reduction), pred + rng.choice([-0.3, 0.3], (4, 3))
    p = tf.constant(pred)
    with tf.GradientTape() as tape:
        tape.watch(p)
        value = fn(tf.constant(target), p)
    weights = rng.normal(size=value.shape.as_list())
    grad = tape.gradient(value, p, output_gradients=tf.constant(weights)).numpy()
    assert value.dtype == tf.float64
    eps = 1e-6
    numeric = np.zeros_like(pred)
    for i in np.ndindex(*pred.shape):
        up, down = pred.copy(), pred.copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (np.sum(np.asarray(fn(tf.constant(target), tf.constant(up))) * weights) -
                      np.sum(np.asarray(fn(tf.constant(target), tf.constant(down))) * weights)) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_metrics_and_optimizer_iterations_are_tensors():
    metric = tf.keras.metrics.SparseCategoricalAccuracy()
    value = metric(tf.constant([0, 1]), tf.constant([[0.9, 0.1], [0.8, 0.2]]))
    assert isinstance(value, tf.Tensor) and value.dtype == tf.float32 and float(value) == 0.5
    mean = tf.keras.metrics.Mean()
    mean.update_state(tf.constant([1.0, 3.0]))
    assert float(mean.result()) == 2.0
    optimizer = tf.keras.optimizers.SGD(0.1)
    assert isinstance(optimizer.iterations, tf.Tensor) and optimizer.iterations == 0


def test_apply_gradients_to_plain_variables():
    sgd = tf.keras.optimizers.SGD(0.5)
    v = tf.Variable([1.0, 2.0])
    w = tf.Variable([[1.0]], dtype=tf.float64)
    sgd.apply_gradients([(tf.constant([0.5, -1.0]), v), (tf.constant([[2.0]], dtype=tf.float64), w)])
    assert v.numpy().tolist() == [0.75, 2.5] and w.numpy().tolist() == [[0.0]] and w.dtype == tf.float64

    adam = tf.keras.optimizers.Adam(0.1)
    u = tf.Variable(np.array([1.0, -2.0, 3.0], np.float32))
    m = np.zeros(3)
    s = np.zeros(3)
    expected = u.numpy().astype(np.float64)
    for step in range(1, 4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(u * u)
        g = tape.gradient(loss, u)
        adam.apply_gradients([(g, u)])
        gn = 2 * expected
        m = 0.9 * m + 0.1 * gn
        s = 0.999 * s + 0.001 * gn * gn
        lr = 0.1 * np.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
        expected = expected - lr * m / (np.sqrt(s) + 1e-7)
    np.testing.assert_allclose(u.numpy(), expected, rtol=1e-5)
    assert int(adam.iterations) == 3


def test_apply_gradients_checks_its_variables():
    optimizer = tf.keras.optimizers.SGD(0.1)
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    with pytest.raises(TypeError, match="tf.Variable"):
        optimizer.apply_gradients([(tf.constant(1.0), tf.constant(2.0))])
    with pytest.raises(ValueError, match="No gradients provided"):
        optimizer.apply_gradients([(None, a)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer.apply_gradients([(tf.constant(1.0), a), (None, b)])
    assert any("Gradients do not exist" in str(w.message) for w in caught)
    assert float(a) == pytest.approx(0.9) and float(b) == 2.0
    with pytest.raises(ValueError, match="fixed list of variables"):
        optimizer.apply_gradients([(tf.constant(1.0), b)])
    with pytest.raises(ValueError, match="shape"):
        tf.keras.optimizers.SGD(0.1).apply_gradients([(tf.constant([1.0, 2.0]), a)])


def test_second_derivative_through_a_layer_is_a_clear_error():
    model = _model()
    x = tf.constant(_data(4)[0])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            out = tf.reduce_sum(model(x))
        gx = inner.gradient(out, x)
        penalty = tf.reduce_sum(gx * gx)
    with pytest.raises(LookupError, match="Dense"):
        outer.gradient(penalty, x)


def test_assigned_weights_reach_every_replica_and_tape_steps_sum_replicas(logical_cpus):
    logical_cpus(2)
    x, y = _data(16)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = _model()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=8, verbose=0)
    model.trainable_variables[0].assign(np.zeros((20, 16), np.float32))
    assert not np.any(model._core.replica_weights(1)[0])
    optimizer = tf.keras.optimizers.SGD(0.1)

    def step(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(inputs[0], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    # Both replicas get the whole batch: one update from the sum of their (equal) gradients.
    before = [v.numpy() for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    strategy.run(step, args=((x, y),))
    for w, b, g, r in zip(model.trainable_variables, before, grads, model._core.replica_weights(1)):
        np.testing.assert_array_equal(w.numpy(), b - np.float32(0.1) * (g + g))
        np.testing.assert_array_equal(r, w.numpy())


def test_minimize_apply_and_build():
    v = tf.Variable([1.0, -1.0])
    optimizer = tf.keras.optimizers.SGD(0.25)
    optimizer.minimize(lambda: tf.reduce_sum(v * v), [v])
    assert v.numpy().tolist() == [0.5, -0.5]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * v)
    optimizer.minimize(loss, [v], tape=tape)
    assert v.numpy().tolist() == [0.25, -0.25]
    other = tf.keras.optimizers.SGD(1.0)
    other.build([v])
    other.apply([tf.constant([0.25, 0.25])])
    assert v.numpy().tolist() == [0.0, -0.5] and int(other.iterations) == 1


def test_gradients_kept_across_steps_keep_their_values():
    """A layer's gradient arrays are reused only once nothing references them."""
    x, y = _data(64)
    model = _model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    kept_tensors, kept_arrays = [], []
    for i in range(0, 64, 8):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 8], model(x[i:i + 8], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if i < 32:
            kept_tensors.append((grads, [g.numpy() for g in grads]))
        else:
            kept_arrays.append((np.asarray(grads[0]), grads[0].numpy()))  # the tensor itself is dropped
        del grads
    for grads, copies in kept_tensors:
        for g, c in zip(grads, copies):
            np.testing.assert_array_equal(g.numpy(), c)
    for array, copy in kept_arrays:
        np.testing.assert_array_equal(array, copy)
    assert len({id(a) for a, _ in kept_arrays}) == len(kept_arrays)


def test_persistent_tape_and_two_tapes_over_one_model_call():
    x, y = _data(16)
    model = _model(batch_norm=True, dropout=0.3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape(persistent=True) as tape, tf.GradientTape() as other:
        loss = loss_fn(y, model(x, training=True))
    first = tape.gradient(loss, model.trainable_variables)
    second = tape.gradient(loss, model.trainable_variables)
    third = other.gradient(loss, model.trainable_variables)
    for a, b, c in zip(first, second, third):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.numpy(), c.numpy())
