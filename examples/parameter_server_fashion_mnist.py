"""The seed's model trained with ParameterServerStrategy: variables on parameter servers, steps on
workers that never wait for each other.

    python -m mdtrain.launch --ps 2 --workers 2 examples/parameter_server_fashion_mnist.py [--epochs 5]

The launcher starts the ps and worker tasks on this machine and runs this script as the chief
(TF_CONFIG names the cluster, as TF's launchers do). The chief schedules the steps: `fit` with
`steps_per_epoch` (the per-worker data repeats). With --backup-dir a parameter server that dies is
started again by the launcher and every server reloads the last checkpoint; a worker that dies is
replaced by the others (its step is applied once). On a real cluster, start each task with
`tf.distribute.Server(cluster_spec, job_name, task_index).join()` and the chief with TF_CONFIG.
"""
import argparse

import mdtrain as tf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128, help="batch of one worker's step")
    parser.add_argument("--steps-per-execution", type=int, default=10, help="steps a worker runs per closure")
    parser.add_argument("--backup-dir", default=None, help="BackupAndRestore directory (survives a ps restart)")
    args = parser.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = resolver.cluster_spec().num_tasks("ps")
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=64 << 10, max_shards=num_ps))

    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    x_train, x_test = x_train / 255.0, x_test / 255.0
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                                     tf.keras.layers.Dense(128, activation="relu"),
                                     tf.keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                      steps_per_execution=args.steps_per_execution)
    callbacks = [tf.keras.callbacks.BackupAndRestore(args.backup_dir)] if args.backup_dir else []
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              steps_per_epoch=len(x_train) // args.batch_size, callbacks=callbacks, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"test accuracy: {accuracy:.4f}")
    strategy.shutdown()


if __name__ == "__main__":
    main()
