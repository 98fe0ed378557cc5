"""The seed's example, run as written (only the import and the data set changed), on two logical
CPU devices under MirroredStrategy: the model is built outside the scope and compiled inside it,
and its softmax output is given to a loss told to expect logits (mdtrain warns, as Keras does,
and trains anyway).

    python examples/mirrored_fashion_mnist.py [--devices 2] [--epochs 5]
"""
import argparse

import mdtrain as tf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2, help="logical CPU devices (replicas)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tf.keras.utils.set_random_seed(args.seed)

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)

    # ---- the seed's example from here on ----
    # Define the model
    model = tf.keras.models.Sequential([
        tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])

    # Define the optimizer and loss function
    optimizer = tf.keras.optimizers.Adam()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # Define the distribution strategy
    strategy = tf.distribute.MirroredStrategy()
    print(f"Number of devices: {strategy.num_replicas_in_sync}")

    with strategy.scope():
        # Compile the model
        model.compile(optimizer=optimizer, loss=loss_fn, metrics=["accuracy"])

    # Load and preprocess the data
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    x_train = x_train.reshape(-1, 784).astype("float32") / 255.0
    x_test = x_test.reshape(-1, 784).astype("float32") / 255.0

    # Train the model
    model.fit(x_train, y_train, epochs=args.epochs, validation_data=(x_test, y_test))
    # ---- end of the seed's example ----

    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"test accuracy: {accuracy:.4f} (loss {loss:.4f}) on {strategy.num_replicas_in_sync} replicas")
    return accuracy


if __name__ == "__main__":
    main()
