"""TensorFlow's tutorial "Distributed training with Keras" (tensorflow/docs,
site/en/tutorials/distribute/keras.ipynb), step by step, with the import changed to mdtrain.

Changes from the tutorial, and why:
- `import mdtrain as tf`.
- `tfds.load('mnist')` becomes `tf.keras.datasets.fashion_mnist.load_data()` wrapped in
  `tf.data.Dataset.from_tensor_slices` (no TensorFlow Datasets, no download: Fashion-MNIST ships
  with the system; same shapes and classes as MNIST).
- The data and epochs are cut (MDTRAIN_TUTORIAL_FULL=1: all 60,000 images, 12 epochs) so the
  script runs in seconds on 2 CPU cores.
- Checkpoints and logs go to a temporary directory; the checkpoint names end in
  ".weights.h5", as Keras 3 requires for save_weights_only.
- "Export to SavedModel" saves a Keras archive (`model.save("....keras")`) instead: mdtrain does
  not write TF SavedModel directories (docs/differences.md). Loading it without and with
  `strategy.scope()` follows the tutorial.
- The figures the test checks are printed as JSON after "RESULT" at the end.
"""
import json
import os
import tempfile

import mdtrain as tf

print(tf.__version__)

FULL = os.environ.get("MDTRAIN_TUTORIAL_FULL") == "1"
work_dir = tempfile.mkdtemp(prefix="keras_tutorial_")

# ## Download the dataset
(x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
if not FULL:
  x_train, y_train, x_test, y_test = x_train[:4096], y_train[:4096], x_test[:1024], y_test[:1024]
mnist_train = tf.data.Dataset.from_tensor_slices((x_train[..., None], y_train))
mnist_test = tf.data.Dataset.from_tensor_slices((x_test[..., None], y_test))

# ## Define the distribution strategy
strategy = tf.distribute.MirroredStrategy()

print('Number of devices: {}'.format(strategy.num_replicas_in_sync))

# ## Set up the input pipeline
num_train_examples = len(x_train)
num_test_examples = len(x_test)

BUFFER_SIZE = 10000

BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

def scale(image, label):
  image = tf.cast(image, tf.float32)
  image /= 255

  return image, label

train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

# ## Create the model and instantiate the optimizer
with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation='relu'),
      tf.keras.layers.Dense(10)
  ])

  model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(),
                metrics=['accuracy'])

# ## Define the callbacks
# Define the checkpoint directory to store the checkpoints.
checkpoint_dir = os.path.join(work_dir, 'training_checkpoints')
# Define the name of the checkpoint files.
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")

# Define a function for decaying the learning rate.
# You can define any decay function you need.
def decay(epoch):
  if epoch < 3:
    return 1e-3
  elif epoch >= 3 and epoch < 7:
    return 1e-4
  else:
    return 1e-5

learning_rates = []

# Define a callback for printing the learning rate at the end of each epoch.
class PrintLR(tf.keras.callbacks.Callback):
  def on_epoch_end(self, epoch, logs=None):
    print('\nLearning rate for epoch {} is {}'.format(epoch + 1, model.optimizer.learning_rate.numpy()))
    learning_rates.append(float(model.optimizer.learning_rate.numpy()))

# Put all the callbacks together.
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir=os.path.join(work_dir, 'logs')),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix,
                                       save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
    PrintLR()
]

# ## Train and evaluate
EPOCHS = 12 if FULL else 8
history = model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks, verbose=2)

# Check the checkpoint directory.
print(sorted(os.listdir(checkpoint_dir)))

model.load_weights(tf.train.latest_checkpoint(checkpoint_dir))

eval_loss, eval_acc = model.evaluate(eval_dataset)

print('Eval loss: {}, Eval accuracy: {}'.format(eval_loss, eval_acc))

# TensorBoard logs.
print(sorted(os.listdir(os.path.join(work_dir, 'logs'))))

# ## Save the model
# (The tutorial exports a SavedModel directory; mdtrain writes the Keras archive instead.)
path = os.path.join(work_dir, 'my_model.keras')

model.save(path)

# Load the model without `Strategy.scope`.
unreplicated_model = tf.keras.models.load_model(path)

unreplicated_model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=tf.keras.optimizers.Adam(),
    metrics=['accuracy'])

eval_loss_unreplicated, eval_acc_unreplicated = unreplicated_model.evaluate(eval_dataset)

print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss_unreplicated, eval_acc_unreplicated))

# Load the model with `Strategy.scope`.
with strategy.scope():
  replicated_model = tf.keras.models.load_model(path)
  replicated_model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                           optimizer=tf.keras.optimizers.Adam(),
                           metrics=['accuracy'])

  eval_loss_replicated, eval_acc_replicated = replicated_model.evaluate(eval_dataset)
  print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss_replicated, eval_acc_replicated))

print("RESULT " + json.dumps({
    "replicas": strategy.num_replicas_in_sync, "losses": history.history["loss"],
    "checkpoints": sorted(os.listdir(checkpoint_dir)), "learning_rates": learning_rates,
    "latest": tf.train.latest_checkpoint(checkpoint_dir), "eval": [eval_loss, eval_acc],
    "eval_unreplicated": [eval_loss_unreplicated, eval_acc_unreplicated],
    "eval_replicated": [eval_loss_replicated, eval_acc_replicated],
    "logs": sorted(os.listdir(os.path.join(work_dir, 'logs')))}))
