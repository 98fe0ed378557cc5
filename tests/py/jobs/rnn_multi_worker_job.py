"""One worker of the recurrent-layers MPI job (tests/py/test_rnn_strategies.py), 2 workers x 2 logical
CPU devices: trains LSTM -> GRU -> SimpleRNN (dropout and recurrent_dropout on) and a Bidirectional
model under MultiWorkerMirroredStrategy (4 replicas), and the stacked model under ModelParallel on a
(2, 2) ("batch", "model") mesh (batch across the workers, the recurrent layers' units split over each
worker's 2 devices), and the same models on one device in this process; prints the losses and exits
non-zero unless the weights agree to float32 rounding."""
import json

import numpy as np

import mdtrain as tf

L = tf.keras.layers
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 6, 3)).astype(np.float32)
y = rng.integers(0, 3, size=64)


def stacked():
    return [L.LSTM(8, return_sequences=True, dropout=0.3, recurrent_dropout=0.3),
            L.GRU(6, return_sequences=True, recurrent_dropout=0.3),
            L.SimpleRNN(5, dropout=0.3, recurrent_dropout=0.3)]


def bidirectional():
    return [L.Bidirectional(L.LSTM(4, return_sequences=True, recurrent_dropout=0.3)),
            L.Bidirectional(L.GRU(3))]


def named():
    return [L.LSTM(8, return_sequences=True, dropout=0.3, recurrent_dropout=0.3, name="lstm"),
            L.GRU(6, return_sequences=True, recurrent_dropout=0.3, name="gru"),
            L.SimpleRNN(4, dropout=0.3, recurrent_dropout=0.3, name="rnn")]


def train(layers, strategy):
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((6, 3))] + layers() + [L.Dense(3, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


multi_worker = tf.distribute.MultiWorkerMirroredStrategy()
assert multi_worker.num_replicas_in_sync == 4, multi_worker.num_replicas_in_sync
mesh = tf.keras.distribution.DeviceMesh((2, 2), ("batch", "model"))
layout_map = tf.keras.distribution.LayoutMap(mesh)
for layer in ("lstm", "gru", "rnn"):
    layout_map[f"{layer}/kernel"] = (None, "model")
model_parallel = tf.keras.distribution.ModelParallel(layout_map=layout_map)
report = {}
for name, layers, strategy in (("stacked", stacked, multi_worker), ("bidirectional", bidirectional, multi_worker),
                               ("units_split", named, model_parallel)):
    split_loss, split_weights = train(layers, strategy)
    one_loss, one_weights = train(layers, tf.distribute.OneDeviceStrategy("/cpu:0"))
    np.testing.assert_allclose(split_loss, one_loss, rtol=1e-5)
    assert len(split_weights) == len(one_weights)
    for a, b in zip(split_weights, one_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    report[name] = [round(v, 6) for v in split_loss]
print("RESULT " + json.dumps(report), flush=True)
