"""A ResNet-style functional CNN (two residual blocks: Conv2D + Add) trained on a slice of
Fashion-MNIST under a chosen strategy; worker 0 writes the trained weights (and the test accuracy
as the last array) to --out (an .npz). --strategy: one (one device), mirrored (--devices logical
CPUs), central (CentralStorageStrategy on --devices), mwms (MultiWorkerMirroredStrategy, one
worker per MPI process, launched by mdtrain.launch)."""
import argparse

import numpy as np

import mdtrain as tf

TRAIN, TEST = 2048, 1000


def residual_cnn():
    keras, layers = tf.keras, tf.keras.layers
    inputs = keras.Input(shape=(28, 28, 1), name="image")
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D(2)(x)
    for _ in range(2):
        h = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
        h = layers.Conv2D(8, 3, padding="same")(h)
        x = layers.Activation("relu")(layers.Add()([x, h]))
    x = layers.MaxPooling2D(2)(x)
    outputs = layers.Dense(10, activation="softmax")(layers.Flatten()(x))
    return keras.Model(inputs, outputs, name="residual_cnn")


def data():
    (x, y), (xt, yt) = tf.keras.datasets.fashion_mnist.load_data()
    x = (x[:TRAIN, :, :, None] / 255.0).astype(np.float32)
    xt = (xt[:TEST, :, :, None] / 255.0).astype(np.float32)
    return x, y[:TRAIN], xt, yt[:TEST]


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
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    strategy, chief = make_strategy(args.strategy, args.devices)
    x, y, xt, yt = data()
    tf.keras.utils.set_random_seed(5)
    with strategy.scope():
        model = residual_cnn()
        model.compile(optimizer=tf.keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=args.epochs, verbose=0)
    _, accuracy = model.evaluate(xt, yt, batch_size=250, verbose=0)
    if chief:
        np.savez(args.out, *model.get_weights(), np.array(accuracy))
        print(f"test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
