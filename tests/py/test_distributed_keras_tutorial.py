"""TF's tutorial "Distributed training with Keras", its callbacks as written there, on
MirroredStrategy over 2 logical CPU devices (small synthetic images in place of MNIST)."""
import os

import numpy as np
import pytest

import mdtrain as tf

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                        reason="the tensorboard package (test extra) reads the event files")

EPOCHS = 8


def decay(epoch):
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


def images(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n)
    x = rng.normal(size=(n, 12, 12, 1)).astype(np.float32) * 0.3
    x[np.arange(n), y, y, 0] += 3.0  # a learnable bright pixel per class
    return x, y


def test_tutorial_flow(tmp_path, logical_cpus, capsys):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 2
    BATCH_SIZE = 16 * strategy.num_replicas_in_sync
    train_x, train_y = images(512, 0)
    eval_x, eval_y = images(128, 1)
    train_dataset = tf.data.Dataset.from_tensor_slices((train_x, train_y)).shuffle(512, seed=0).batch(BATCH_SIZE)
    eval_dataset = tf.data.Dataset.from_tensor_slices((eval_x, eval_y)).batch(BATCH_SIZE)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(12, 12, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"])

    checkpoint_dir = str(tmp_path / "training_checkpoints")
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}")
    log_dir = str(tmp_path / "logs")

    class PrintLR(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            print("\nLearning rate for epoch {} is {}".format(epoch + 1, model.optimizer.learning_rate.numpy()))

    callbacks = [
        tf.keras.callbacks.TensorBoard(log_dir=log_dir),
        tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix + ".weights.h5", save_weights_only=True),
        tf.keras.callbacks.LearningRateScheduler(decay),
        PrintLR(),
    ]
    model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks, verbose=0)

    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Learning rate")]
    assert printed == [f"Learning rate for epoch {e + 1} is {np.float32(decay(e))}" for e in range(EPOCHS)]
    assert sorted(os.listdir(checkpoint_dir)) == sorted(f"ckpt_{e}.weights.h5" for e in range(1, EPOCHS + 1))

    trained = model.get_weights()
    eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=0)
    assert eval_acc > 0.5  # it learned

    # Restore the latest checkpoint (written at the end of the last epoch) into the model...
    assert tf.train.latest_checkpoint(checkpoint_dir) == os.path.join(checkpoint_dir, f"ckpt_{EPOCHS}.weights.h5")
    model.set_weights([np.zeros_like(w) for w in trained])
    model.load_weights(tf.train.latest_checkpoint(checkpoint_dir))
    for a, b in zip(model.get_weights(), trained):
        np.testing.assert_array_equal(a, b)
    assert model.evaluate(eval_dataset, verbose=0) == pytest.approx([eval_loss, eval_acc])

    # ... and into a fresh model under the same strategy, as the tutorial's second part does.
    with strategy.scope():
        fresh = tf.keras.Sequential([
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(12, 12, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        fresh.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"])
    fresh.load_weights(tf.train.latest_checkpoint(checkpoint_dir))
    assert fresh.evaluate(eval_dataset, verbose=0) == pytest.approx([eval_loss, eval_acc])

    # TensorBoard got the epoch scalars, the scheduled learning rate among them.
    acc = event_accumulator.EventAccumulator(os.path.join(log_dir, "train"))
    acc.Reload()
    assert len(acc.Scalars("epoch_loss")) == EPOCHS
    np.testing.assert_allclose([e.value for e in acc.Scalars("epoch_learning_rate")],
                               [decay(e) for e in range(EPOCHS)], rtol=1e-6)
