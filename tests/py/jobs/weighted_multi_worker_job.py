"""One worker of the sample-weights MPI job (tests/py/test_sample_weights.py), 2 workers x 2 logical
CPU devices: fits with sample_weight and with class_weight under MultiWorkerMirroredStrategy (4
replicas: the weighted sum over every replica of both workers, divided by the global batch) and on
one device in this process; prints WEIGHTED_OK unless the losses, evaluate and weights differ
beyond float32 rounding."""
import numpy as np

import mdtrain as tf

L = tf.keras.layers
rng = np.random.default_rng(0)
x = rng.normal(size=(30, 5)).astype(np.float32)
y = rng.integers(0, 3, 30)
w = rng.uniform(0, 2, 30).astype(np.float32)


def train(strategy, **weights):
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((5,)), L.Dense(6, activation="tanh"),
                                     L.Dense(3, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    # batch_size 7 over 30 rows: slices of 2, 2, 2, 1 and a last batch of 2 (two replicas empty)
    history = model.fit(x, y, batch_size=7, epochs=2, shuffle=False, verbose=0, **weights)
    return history.history, model.evaluate(x, y, sample_weight=w, batch_size=7, verbose=0), model.get_weights()


multi_worker = tf.distribute.MultiWorkerMirroredStrategy()
assert multi_worker.num_replicas_in_sync == 4, multi_worker.num_replicas_in_sync
for weights in ({"sample_weight": w}, {"class_weight": {0: 3.0, 1: 0.5}}):
    split_history, split_eval, split_weights = train(multi_worker, **weights)
    one_history, one_eval, one_weights = train(tf.distribute.OneDeviceStrategy("/cpu:0"), **weights)
    np.testing.assert_allclose(split_eval, one_eval, rtol=1e-5)
    for key in one_history:
        np.testing.assert_allclose(split_history[key], one_history[key], rtol=1e-5, err_msg=key)
    for a, b in zip(split_weights, one_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
print("WEIGHTED_OK", flush=True)
