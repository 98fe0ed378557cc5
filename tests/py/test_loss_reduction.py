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
