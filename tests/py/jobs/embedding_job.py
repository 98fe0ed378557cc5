"""An Embedding -> Flatten -> Dense model trained under MultiWorkerMirroredStrategy (one worker per
MPI process, launched by mdtrain.launch) or, with --mirrored, MirroredStrategy on logical CPU
devices in one process; worker 0 writes the trained weights to --out (an .npz)."""
import argparse

import numpy as np

import mdtrain as tf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--mirrored", action="store_true")
    parser.add_argument("--devices", type=int, default=2)
    args = parser.parse_args()
    if args.mirrored:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
        strategy = tf.distribute.MirroredStrategy()
        chief = True
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        chief = strategy.cluster_resolver.task_id == 0
    rng = np.random.default_rng(4)
    x = rng.integers(0, 50, size=(120, 6))  # int64, as NumPy makes them
    y = rng.integers(0, 3, size=120)
    tf.keras.utils.set_random_seed(1)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Embedding(50, 8, input_shape=(6,)), tf.keras.layers.Flatten(),
                                     tf.keras.layers.Dense(3)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.5),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=20, epochs=2, verbose=0)
    if chief:
        np.savez(args.out, *model.get_weights())


if __name__ == "__main__":
    main()
