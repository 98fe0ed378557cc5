"""The seed's model trained by several worker processes with MultiWorkerMirroredStrategy.

    python -m mdtrain.launch -n 2 examples/multi_worker_fashion_mnist.py [--epochs 5]
    mpirun -n 2 python examples/multi_worker_fashion_mnist.py            # the same, by hand

Each worker loads the data, drives one replica per local logical CPU device
(--devices-per-worker of the launcher, default 1) and trains on its share of every global batch
(batch_size is global, as with MirroredStrategy); gradients are summed across all replicas over
MPI. Only worker 0 prints progress, writes the backup (BackupAndRestore: kill the job and start
it again, it resumes where it stopped) and saves the final model.

Run without a launcher it is a job of one worker. --mirrored runs the same training with
MirroredStrategy on --devices logical devices in this one process instead, for comparison.
"""
import argparse
import os

import numpy as np

import mdtrain as tf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backup-dir", default=None, help="BackupAndRestore directory (default: none)")
    parser.add_argument("--save", default=None, help="write the trained model here (worker 0)")
    parser.add_argument("--mirrored", action="store_true", help="MirroredStrategy in one process instead")
    parser.add_argument("--devices", type=int, default=2, help="logical devices for --mirrored")
    parser.add_argument("--limit", type=int, default=None, help="train on the first N examples only")
    parser.add_argument("--bytes-per-pack", type=int, default=0,
                        help="gradient bucket size in bytes, each all-reduced as soon as backward finishes it "
                             "(0: 25 MB)")
    args = parser.parse_args()
    tf.keras.utils.set_random_seed(args.seed)

    if args.mirrored:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
        strategy = tf.distribute.MirroredStrategy()
        chief = True
    else:
        options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=args.bytes_per_pack)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        chief = strategy.cluster_resolver.task_id == 0
        print(f"worker {strategy.cluster_resolver.task_id} of {strategy.cluster_resolver.num_workers}, "
              f"{len(strategy.worker_devices)} local device(s)")
    if chief:
        print(f"replicas in sync: {strategy.num_replicas_in_sync}")

    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    x_train = x_train.reshape(-1, 784).astype("float32") / 255.0
    x_test = x_test.reshape(-1, 784).astype("float32") / 255.0
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]

    with strategy.scope():
        model = tf.keras.models.Sequential([
            tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
            tf.keras.layers.Dense(10),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    callbacks = [tf.keras.callbacks.BackupAndRestore(args.backup_dir)] if args.backup_dir else []
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, callbacks=callbacks,
              verbose=2 if chief else 0)
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if chief:
        print(f"test accuracy: {accuracy:.4f} (loss {loss:.4f}) on {strategy.num_replicas_in_sync} replicas")
        if args.save:
            model.save(args.save)
            print(f"saved {os.path.abspath(args.save)}")
    return accuracy


if __name__ == "__main__":
    main()
