"""Writes legacy_model.mdt: a model file from the JSON code before nlohmann/json (issue #11).

Run once with the mdtrain of commit d9c7b9e (hand-written JSON parser/serializer); the file and
the weights it holds (legacy_model_weights.npz) are committed so that test_legacy_model_file.py can
check that files written before the change still load, bit for bit. Do not regenerate it with a
newer mdtrain: that would test nothing.
"""
import os
import sys

import numpy as np

import mdtrain as tf

here = os.path.dirname(os.path.abspath(__file__))
layers = tf.keras.layers
model = tf.keras.Sequential([
    layers.Input(shape=(6, 6, 2)),
    layers.Conv2D(3, 3, padding="same", activation="relu", kernel_regularizer=tf.keras.regularizers.l2(1e-4)),
    layers.BatchNormalization(momentum=0.9),
    layers.MaxPooling2D(2),
    layers.AveragePooling2D(pool_size=1, strides=1),
    layers.GlobalAveragePooling2D(keepdims=True),
    layers.Reshape((3,)),
    layers.LayerNormalization(epsilon=1e-5),
    layers.Dense(4, activation="tanh", bias_initializer="ones"),
    layers.Dropout(0.25, seed=7),
    layers.Flatten(),
    layers.Activation("softmax"),
], name="legacy")
model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
rng = np.random.default_rng(0)
x = rng.standard_normal((8, 6, 6, 2)).astype(np.float32)
y = rng.integers(0, 4, size=8)
model.fit(x, y, batch_size=4, epochs=1, verbose=0)
model.save(os.path.join(here, "legacy_model.mdt"))
np.savez(os.path.join(here, "legacy_model_weights.npz"), *model.get_weights(),
         predictions=model.predict(x, verbose=0), x=x)
print("wrote", os.path.join(here, "legacy_model.mdt"), file=sys.stderr)
