"""Writes the committed seed corpora in tests/fuzz/corpus/ (run again only to refresh them).

    python tests/fuzz/make_corpus.py        # needs mdtrain installed (the model files come from it)

model_file and model_load get small model files written by the library (several layer kinds,
compiled with optimizer state and not), plus truncated and byte-flipped variants; idx gets small
valid IDX files (images and labels, plain and gzipped) and damaged variants. Seeds are named by
content hash, as libFuzzer names its own, and kept small (a few KiB each) so mutations are fast.
"""
import gzip
import hashlib
import os
import random
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def variants(data, rng, n):
    """Truncations at interesting points and random byte flips of `data`."""
    out = [data[:24], data[:len(data) // 2], data[:-1]]
    for _ in range(n):
        b = bytearray(data)
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


def model_files():
    from mdtrain import keras
    from mdtrain.keras import layers

    def mlp():
        m = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(3, activation="relu"),
                              layers.Dropout(0.5), layers.Dense(2, activation="softmax")])
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        m.fit(np.ones((4, 4), np.float32), np.array([0, 1, 0, 1]), epochs=1, verbose=0)
        return m

    def cnn():
        m = keras.Sequential([keras.Input(shape=(6, 6, 1)), layers.Conv2D(2, 3, padding="same", activation="relu"),
                              layers.BatchNormalization(), layers.MaxPooling2D(2), layers.AveragePooling2D(1),
                              layers.Conv2D(2, (2, 2), strides=1), layers.GlobalAveragePooling2D(),
                              layers.Dense(2)])
        m.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse", metrics=["mae"])
        m.fit(np.ones((2, 6, 6, 1), np.float32), np.ones((2, 2), np.float32), epochs=1, verbose=0)
        return m

    def reshape():
        m = keras.Sequential([keras.Input(shape=(2, 3)), layers.Reshape((6,)), layers.LayerNormalization(),
                              layers.Activation("tanh"), layers.Flatten(), layers.Dense(1, activation="sigmoid")])
        m.compile(optimizer="rmsprop", loss="binary_crossentropy")
        return m

    with tempfile.TemporaryDirectory() as tmp:
        for i, make in enumerate([mlp, cnn, reshape]):
            path = os.path.join(tmp, f"m{i}.keras")
            make().save(path)
            with open(path, "rb") as f:
                yield f.read()


def idx_files(rng):
    images = rng_array(rng, (3, 4, 5))
    labels = rng_array(rng, (3,))
    for arr in (images, labels, rng_array(rng, (0, 28, 28)), rng_array(rng, (2, 28, 28))):
        ndim = arr.ndim
        raw = bytes([0, 0, 8, ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes()
        expect = bytes([1 if ndim == 1 else 0])  # the target's first byte: odd for labels
        yield expect + raw
        yield expect + gzip.compress(raw, mtime=0)


def rng_array(rng, shape):
    return np.array([rng.randrange(256) for _ in range(int(np.prod(shape)))], dtype=np.uint8).reshape(shape)


def main():
    rng = random.Random(19)
    for data in model_files():
        for target in ("model_file", "model_load"):
            put(target, data)
            for v in variants(data, rng, 4):
                put(target, v)
    for data in idx_files(rng):
        put("idx", data)
        for v in variants(data, rng, 2):
            put("idx", v)
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
