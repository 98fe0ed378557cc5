"""A bidirectional LSTM on sentences of different lengths, as Keras's "Bidirectional LSTM on IMDB"
example builds it: keras.Input(shape=(None,), dtype="int32") -> Embedding(mask_zero=True) ->
Bidirectional(LSTM) x 2 -> Dense(sigmoid). The model is built once; each batch runs at its own
length (Dataset.padded_batch pads a batch to its longest sentence, and the mask leaves the padding
out), under MirroredStrategy on the logical CPU devices asked for.

The sentences come from a small synthetic language, so the example needs no download: a review is
a sequence of filler words with a few sentiment words, some negated ("not good"); its label is
whether the (negation-aware) sentiment is positive. A bag of words cannot solve it; reading the
order can.

    python examples/variable_length_text.py --epochs 8 --devices 2
"""
import argparse

import numpy as np

import mdtrain as tf

keras = tf.keras
L = keras.layers

# Word ids: 0 pads, 1 is "not", 2..9 positive words, 10..17 negative words, the rest filler.
PAD, NOT, POSITIVE, NEGATIVE, VOCAB = 0, 1, range(2, 10), range(10, 18), 200


def reviews(n, seed, min_len=5, max_len=60):
    """n reviews (int32 arrays of different lengths) and their labels (1: positive)."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    while len(rows) < n:
        length = int(rng.integers(min_len, max_len + 1))
        words = rng.integers(18, VOCAB, length)
        score = 0
        for pos in rng.choice(length, size=min(length, int(rng.integers(1, 4))), replace=False):
            positive = rng.random() < 0.5
            words[pos] = rng.choice(POSITIVE if positive else NEGATIVE)
            negated = pos > 0 and rng.random() < 0.4
            if negated:
                words[pos - 1] = NOT
            score += (1 if positive else -1) * (-1 if negated else 1)
        if score == 0:
            continue  # no clear sentiment
        rows.append(words.astype(np.int32))
        labels.append(np.float32(score > 0))
    return rows, np.array(labels)


def dataset(rows, labels, batch_size, shuffle_seed=None):
    ds = tf.data.Dataset.from_generator(lambda: zip(rows, labels),
                                        output_signature=(tf.TensorSpec((None,), tf.int32),
                                                          tf.TensorSpec((), tf.float32)))
    if shuffle_seed is not None:
        ds = ds.shuffle(len(rows), seed=shuffle_seed)
    return ds.padded_batch(batch_size)


def build_model():
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = L.Embedding(VOCAB, 32, mask_zero=True)(inputs)
    x = L.Bidirectional(L.LSTM(32, return_sequences=True))(x)
    x = L.Bidirectional(L.LSTM(32))(x)
    outputs = L.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--train-rows", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    tf.keras.utils.set_random_seed(0)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.devices)])
    print(f"Number of devices: {strategy.num_replicas_in_sync}")

    train_rows, train_labels = reviews(args.train_rows, seed=1)
    test_rows, test_labels = reviews(1000, seed=2)
    lengths = [len(r) for r in train_rows]
    print(f"{len(train_rows)} training reviews of {min(lengths)} to {max(lengths)} words")

    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    model.summary()
    model.fit(dataset(train_rows, train_labels, args.batch_size, shuffle_seed=0), epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(dataset(test_rows, test_labels, args.batch_size), verbose=0)
    print(f"test loss: {loss:.4f}")
    print(f"test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
