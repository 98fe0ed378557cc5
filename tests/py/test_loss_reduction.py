"""Loss objects called directly reduce as Keras 3's `reduction` says; fit refuses a loss whose
reduction is not the batch mean instead of silently training on something else."""
import numpy as np
import pytest

import mdtrain as tf


def _softmax_xent(labels, logits):
    logits = logits.astype(np.float64)
    z = logits - logits.max(axis=-1, keepdims=True)
    log_softmax = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_softmax, labels[..., None], axis=-1)[..., 0]


def test_sparse_crossentropy_reductions():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=6)
    want = _softmax_xent(labels, logits)
    per_example = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)(labels, logits)
    assert per_example.shape == (6,) and per_example.dtype == np.float32
    np.testing.assert_allclose(per_example, want, rtol=1e-6)
    none = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")(labels, logits)
    np.testing.assert_array_equal(none, per_example)
    total = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")(labels, logits)
    np.testing.assert_allclose(total, want.sum(), rtol=1e-6)
    mean = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    np.testing.assert_allclose(mean, want.mean(), rtol=1e-6)
    # ignore_class: that position's loss is 0 and it leaves the mean's divisor.
    labels[2] = 3
    masked = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=3, reduction=None)
    values = masked(labels, logits)
    keep = labels != 3
    assert np.all(values[~keep] == 0)
    np.testing.assert_allclose(values[keep], _softmax_xent(labels, logits)[keep], rtol=1e-6)


def test_per_position_losses_keep_the_leading_axes():
    rng = np.random.default_rng(1)
    y_pred = rng.normal(size=(3, 5, 2)).astype(np.float32)
    y_true = rng.normal(size=(3, 5, 2)).astype(np.float32)
    mse = tf.keras.losses.MeanSquaredError(reduction=None)(y_true, y_pred)
    assert mse.shape == (3, 5)
    np.testing.assert_allclose(mse, ((y_true.astype(np.float64) - y_pred) ** 2).mean(axis=-1), rtol=1e-6)
    mae_sum = tf.keras.losses.MeanAbsoluteError(reduction="sum")(y_true, y_pred)
    np.testing.assert_allclose(mae_sum, np.abs(y_true.astype(np.float64) - y_pred).mean(axis=-1).sum(), rtol=1e-6)


def test_unknown_reductions_and_compiling_a_non_mean_loss_are_errors():
    with pytest.raises(ValueError, match="reduction must be one of"):
        tf.keras.losses.SparseCategoricalCrossentropy(reduction="mean")
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    with pytest.raises(ValueError, match="fit trains on the mean loss"):
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(reduction=None))
    loss = tf.keras.losses.SparseCategoricalCrossentropy(reduction="sum")
    assert loss.get_config()["reduction"] == "sum"


def _sequence_case(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(7, 3, 5)).astype(np.float32)  # (batch, time, features): 7 rows cut unevenly
    y = rng.integers(0, 4, size=(7, 3))
    return x, y


def _fit_one_step(loss, x, y, replicas):
    tf.keras.utils.set_random_seed(5)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(x.shape[1:]), tf.keras.layers.Dense(4)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss=loss)
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    return before, model, history.history["loss"][0]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("ignore_class", [None, 2])
def test_fit_divides_by_every_position_and_counted_label_like_keras(logical_cpus, replicas, ignore_class):
    """Keras's sum_over_batch_size divides by batch x time for sequence outputs and by the labels
    ignore_class leaves; fit's loss, gradient and evaluate agree with the loss called directly."""
    logical_cpus(2)
    x, y = _sequence_case()
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore_class)
    before, model, fit_loss = _fit_one_step(loss, x, y, replicas)
    kernel, bias = before
    logits = x.astype(np.float64) @ kernel + bias
    per_position = _softmax_xent(y, logits)
    counted = np.ones_like(per_position) if ignore_class is None else (y != ignore_class).astype(np.float64)
    want_loss = (per_position * counted).sum() / counted.sum()
    np.testing.assert_allclose(fit_loss, want_loss, rtol=1e-5)
    # the gradient of that mean, by hand: softmax - one_hot, on counted positions, / counted labels
    z = logits - logits.max(-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    dlogits = (probs - np.eye(4)[y]) * counted[..., None] / counted.sum()
    want_kernel = kernel - 0.5 * np.einsum("btf,btc->fc", x.astype(np.float64), dlogits)
    np.testing.assert_allclose(model.get_weights()[0], want_kernel, rtol=1e-5, atol=1e-6)
    direct = float(loss(y, model.predict(x, verbose=0)))
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=len(x), verbose=0), direct, rtol=1e-5)


def test_fit_mse_on_sequences_is_the_mean_over_positions(logical_cpus):
    logical_cpus(2)
    x, _ = _sequence_case(1)
    y = np.random.default_rng(2).normal(size=(7, 3, 4)).astype(np.float32)
    before, model, fit_loss = _fit_one_step("mse", x, y, 2)
    pred = x.astype(np.float64) @ before[0] + before[1]
    np.testing.assert_allclose(fit_loss, ((pred - y) ** 2).mean(), rtol=1e-5)


def test_a_batch_whose_labels_are_all_ignored_has_loss_zero(logical_cpus):
    logical_cpus(2)
    x, _ = _sequence_case(3)
    y = np.full((7, 3), 1)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=1)
    before, model, fit_loss = _fit_one_step(loss, x, y, 2)
    assert fit_loss == 0.0
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
