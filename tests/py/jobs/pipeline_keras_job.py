"""One worker of a keras.distribution.PipelineParallel job (tests/py/test_pipeline.py): the mesh (2, 2)
("batch", "pipe") over the global devices, two pipeline stages on this worker's 2 logical CPU devices,
the batch axis across the 2 workers. Trains an MLP cut by a PipelineSplit and the same model on one
device; prints the loss pair and exits non-zero unless they agree to float32 rounding."""
import json
import warnings

import numpy as np

import mdtrain as tf

distribution = tf.keras.distribution
rng = np.random.default_rng(3)
x = rng.standard_normal((200, 20)).astype("float32")
y = (np.arange(200) * 7 % 5).astype("int32")


def train(strategy):
    with strategy.scope():
        tf.keras.utils.set_random_seed(7)
        m = tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(32, activation="tanh"), tf.keras.layers.PipelineSplit(),
                                 tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(5)])
        m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = m.fit(x, y, batch_size=45, epochs=2, shuffle=False, verbose=0)
    return history.history["loss"], m.get_weights()


mesh = distribution.DeviceMesh((2, 2), ("batch", "pipe"))
assert mesh._core.num_workers == 2, mesh._core.num_workers
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pp = distribution.PipelineParallel(mesh, num_microbatches=2, batch_dim_name="batch")
piped_loss, piped_weights = train(pp)
one_loss, one_weights = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
np.testing.assert_allclose(piped_loss, one_loss, rtol=1e-5)
for a, b in zip(piped_weights, one_weights):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)
print("RESULT " + json.dumps([float(v) for v in piped_loss]), flush=True)
