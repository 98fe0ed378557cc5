"""One worker of a keras.distribution.ModelParallel job (tests/py/test_model_parallel.py): the mesh
(2, 2) ("batch", "model") over the global devices list_devices() returns, the model axis on this
worker's 2 logical CPU devices, the batch axis across the 2 workers. Trains the seed model and a wide
MLP on Fashion-MNIST rows and the same models on one device; prints each loss pair and exits non-zero
unless they agree to float32 rounding."""
import json
import sys

import numpy as np

import mdtrain as tf

distribution = tf.keras.distribution
wide = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
(x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
x = x[:256].reshape(-1, 784).astype("float32") / 255.0
y = y[:256]


def model(hidden):
    tf.keras.utils.set_random_seed(7)
    layers = [tf.keras.layers.Dense(h, activation="relu", name=f"hidden{i}") for i, h in enumerate(hidden)]
    return tf.keras.Sequential([tf.keras.Input((784,))] + layers + [tf.keras.layers.Dense(10, name="out")])


def train(hidden, strategy):
    with strategy.scope():
        m = model(hidden)
        m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = m.fit(x, y, batch_size=64, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][0], m.get_weights()


mesh = distribution.DeviceMesh((2, 2), ("batch", "model"))
assert mesh._core.num_workers == 2, mesh._core.num_workers
report = {}
for name, hidden in (("seed", [128]), ("wide", [wide, wide])):
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden0/kernel"] = (None, "model")
    layout_map["hidden0/bias"] = ("model",)
    layout_map[f"hidden{len(hidden) - 1}/kernel" if len(hidden) > 1 else "out/kernel"] = ("model", None)
    split_loss, split_weights = train(hidden, distribution.ModelParallel(layout_map=layout_map))
    one_loss, one_weights = train(hidden, tf.distribute.OneDeviceStrategy("/cpu:0"))
    np.testing.assert_allclose(split_loss, one_loss, rtol=1e-5)
    for a, b in zip(split_weights, one_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)
    report[name] = [split_loss, one_loss]
print("RESULT " + json.dumps(report), flush=True)
