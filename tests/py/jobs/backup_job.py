"""A small training job for the fault-tolerance tests: trains with BackupAndRestore and writes
the final weights; can kill itself (SIGKILL) after a given number of training steps.

    python backup_job.py --strategy {one,mirrored,multi_worker} --backup-dir D --out W.npz
                         [--kill-after-steps K --kill-rank R] [--epochs E]
"""
import argparse
import os
import signal

import numpy as np

import mdtrain as tf


def data():
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, (3, 8))
    y = rng.integers(0, 3, 500)
    x = (centers[y] + rng.normal(0, 1.5, (500, 8))).astype("float32")
    return x, y


class KillAfter(tf.keras.callbacks.Callback):
    """SIGKILLs this process (no cleanup, no Python exit handlers) after `steps` training steps."""

    def __init__(self, steps):
        super().__init__()
        self.steps, self.seen = steps, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.steps:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", choices=["one", "mirrored", "multi_worker"], required=True)
    p.add_argument("--backup-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--kill-after-steps", type=int, default=0)
    p.add_argument("--kill-rank", type=int, default=0)
    p.add_argument("--save-freq", type=int, default=3)
    args = p.parse_args()

    tf.keras.utils.set_random_seed(11)
    if args.strategy == "one":
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    elif args.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=60))
    x, y = data()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(32, activation="relu", input_shape=(8,)),
            tf.keras.layers.Dropout(0.25),
            tf.keras.layers.Dense(3, activation="softmax"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [tf.keras.callbacks.BackupAndRestore(args.backup_dir, save_freq=args.save_freq)]
    rank = getattr(strategy, "cluster_resolver", None)
    rank = rank.task_id if rank is not None else 0
    if args.kill_after_steps and rank == args.kill_rank:
        callbacks.append(KillAfter(args.kill_after_steps))
    history = model.fit(x, y, batch_size=40, epochs=args.epochs, callbacks=callbacks, verbose=0)
    if strategy.should_checkpoint:
        tmp = args.out + ".tmp.npz"
        np.savez(tmp, *model.get_weights(), epochs=np.array(history.epoch))
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
