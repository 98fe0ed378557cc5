"""A two-output functional model (a per-time-step classification head and a regression head)
trained under a chosen strategy; worker 0 writes the trained weights, then the history of every
log and evaluate's values, to --out (an .npz). --strategy: one, mirrored (--devices logical CPUs),
central (CentralStorageStrategy on --devices), mwms (one worker per MPI process, launched by
mdtrain.launch)."""
import argparse

import numpy as np

import mdtrain as tf



def data():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(70, 4, 6)).astype(np.float32)
    return x, rng.integers(0, 3, size=(70, 4)), rng.normal(size=(70, 2)).astype(np.float32)


def two_heads():
    keras, layers = tf.keras, tf.keras.layers
    inputs = keras.Input(shape=(4, 6), name="features")
    trunk = layers.Dense(8, activation="relu", name="trunk")(inputs)
    cls = layers.Dense(3, activation="softmax", name="cls")(trunk)
    reg = layers.Dense(2, name="reg")(layers.Flatten(name="flat")(trunk))
    return keras.Model(inputs, [cls, reg], name="two_heads")


def make_strategy(name, devices):
    if name in ("mirrored", "central"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(), True
    if name == "central":
        return tf.distribute.experimental.CentralStorageStrategy(), True
    if name == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        return strategy, strategy.cluster_resolver.task_id == 0
    return tf.distribute.get_strategy(), True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="one", choices=["one", "mirrored", "central", "mwms"])
    parser.add_argument("--devices", type=int, default=2)
    args = parser.parse_args()
    strategy, chief = make_strategy(args.strategy, args.devices)
    x, y_cls, y_reg = data()
    tf.keras.utils.set_random_seed(13)
    with strategy.scope():
        model = two_heads()
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss=["sparse_categorical_crossentropy", "mse"],
                      loss_weights=[0.7, 1.5], metrics=[["accuracy"], ["mae"]])
    # 70 rows in batches of 24: an uneven last batch (22 rows).
    history = model.fit(x, {"cls": y_cls, "reg": y_reg}, batch_size=24, epochs=3, shuffle=False, verbose=0).history
    evaluated = model.evaluate(x, [y_cls, y_reg], batch_size=24, verbose=0)
    if chief:
        logs = np.array([history[k] for k in model.metrics_names])
        np.savez(args.out, *model.get_weights(), logs, np.array(evaluated))


if __name__ == "__main__":
    main()
