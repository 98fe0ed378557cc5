"""TF's custom-training tutorial under MultiWorkerMirroredStrategy (run by test_custom_loop_strategies
with mdtrain.launch): worker 0 saves the weights and the reduced losses to argv[1].
argv[2]: "sgd" or "adam"; argv[3]: "split" (experimental_distribute_dataset) or "function"
(distribute_datasets_from_function)."""
import sys

import numpy as np

import mdtrain as tf

GLOBAL_BATCH, EXAMPLES = 64, 512
out, optimizer_name, input_mode = sys.argv[1], sys.argv[2], sys.argv[3]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
(x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
x = x[:EXAMPLES].reshape(EXAMPLES, 784).astype(np.float32) / 255
y = y[:EXAMPLES].astype(np.int64)

with strategy.scope():
    tf.keras.utils.set_random_seed(7)
    model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                 tf.keras.layers.Dense(10, activation="softmax")])
    optimizer = tf.keras.optimizers.SGD(0.1) if optimizer_name == "sgd" else tf.keras.optimizers.Adam(0.001)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_object(labels, model(images, training=True)),
                                          global_batch_size=GLOBAL_BATCH)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


if input_mode == "split":
    dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
else:
    def dataset_fn(context):
        # Each worker's pipeline: its share of every global batch, batched per replica.
        per_replica = context.get_per_replica_batch_size(GLOBAL_BATCH)
        local = GLOBAL_BATCH // context.num_input_pipelines
        rows = np.concatenate([np.arange(start + context.input_pipeline_id * local,
                                         start + (context.input_pipeline_id + 1) * local)
                               for start in range(0, EXAMPLES, GLOBAL_BATCH)])
        return tf.data.Dataset.from_tensor_slices((x[rows], y[rows])).batch(per_replica)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
losses = []
for batch in dist:
    per_replica = strategy.run(train_step, args=(batch,))
    losses.append(float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)))
assert int(optimizer.iterations) == EXAMPLES // GLOBAL_BATCH, int(optimizer.iterations)
if strategy.cluster_resolver.task_id == 0:
    np.savez(out, *model.get_weights(), losses=np.array(losses))
