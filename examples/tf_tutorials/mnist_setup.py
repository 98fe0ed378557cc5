"""The tutorial's mnist_setup.py ("Multi-worker training with Keras"), with the import changed to
mdtrain and MNIST replaced by Fashion-MNIST (same shapes and classes; it ships with the system,
no download). MDTRAIN_TUTORIAL_LIMIT=<n> trains on the first n images (the tests cut it)."""
import os

import mdtrain as tf
import numpy as np

def mnist_dataset(batch_size):
  (x_train, y_train), _ = tf.keras.datasets.fashion_mnist.load_data()
  limit = int(os.environ.get("MDTRAIN_TUTORIAL_LIMIT", "0"))
  if limit:
    x_train, y_train = x_train[:limit], y_train[:limit]
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
  return train_dataset

def build_and_compile_cnn_model():
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28)),
      tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
      metrics=['accuracy'])
  return model
