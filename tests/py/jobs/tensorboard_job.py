"""A multi-worker job with the TensorBoard callback, for the test that only the chief writes
(each worker is given LOG_DIR/worker<rank>).

    python -m mdtrain.launch -n 2 tensorboard_job.py LOG_DIR
"""
import sys

import numpy as np

import mdtrain as tf


def main():
    log_dir = sys.argv[1]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # Each worker names its own directory, so a non-chief that wrote would show.
    rank = strategy.cluster_resolver.task_id
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = rng.integers(0, 3, 200)
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                     tf.keras.layers.Dense(3)])
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=40, epochs=2, verbose=0,
              callbacks=[tf.keras.callbacks.TensorBoard(f"{log_dir}/worker{rank}", histogram_freq=1, update_freq=1)])


if __name__ == "__main__":
    main()
