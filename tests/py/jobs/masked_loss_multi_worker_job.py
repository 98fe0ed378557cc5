"""One worker of the masked-loss MPI job (tests/py/test_masked_loss.py), 2 workers x 2 logical CPU
devices: trains a model whose output carries an Embedding's mask under MultiWorkerMirroredStrategy
(4 replicas; the loss divides by the kept steps of the whole global batch, summed over every
replica of both workers) and on one device in this process; prints MASKED_OK unless the losses,
accuracy (fit and evaluate) and weights differ beyond float32 rounding."""
import numpy as np

import mdtrain as tf

L = tf.keras.layers
rng = np.random.default_rng(0)
x = rng.integers(0, 7, size=(21, 6)).astype(np.int32)
x[::3, 3:] = 0
x[4] = 0
y = rng.integers(0, 3, size=(21, 6))


def train(strategy):
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((6,), dtype="int32"), L.Embedding(7, 4, mask_zero=True),
                                     L.GRU(4, return_sequences=True), L.Dense(3, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    # batch_size 6 over 21 rows: 6 rows split 2, 2, 1, 1; the last batch has 3, so one replica has none
    history = model.fit(x, y, batch_size=6, epochs=2, shuffle=False, verbose=0)
    return history.history, model.evaluate(x, y, batch_size=6, verbose=0), model.get_weights()


multi_worker = tf.distribute.MultiWorkerMirroredStrategy()
assert multi_worker.num_replicas_in_sync == 4, multi_worker.num_replicas_in_sync
split_history, split_eval, split_weights = train(multi_worker)
one_history, one_eval, one_weights = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
np.testing.assert_allclose(split_eval, one_eval, rtol=1e-5)
for key in one_history:
    np.testing.assert_allclose(split_history[key], one_history[key], rtol=1e-5, err_msg=key)
assert len(split_weights) == len(one_weights)
for a, b in zip(split_weights, one_weights):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
print("MASKED_OK", flush=True)
