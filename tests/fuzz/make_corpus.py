"""Writes the committed seed corpora in tests/fuzz/corpus/ (run again only to refresh them).

    python tests/fuzz/make_corpus.py        # needs mdtrain installed (the model files come from it)

model_file and model_load get small model files written by the library (several layer kinds,
compiled with optimizer state and not), plus truncated and byte-flipped variants; idx gets small
valid IDX files (images and labels, plain and gzipped) and damaged variants; ps_frame gets
parameter-server messages in authenticated frames signed with the fuzzer's fixed key (hmac here:
the same bytes as the C++ frame_sign, see tests/cpp/ps/test_frame_auth.cpp's known answer). Seeds
are named by content hash, as libFuzzer names its own, and kept small (a few KiB each) so mutations
are fast.
"""
import gzip
import hashlib
import hmac
import os
import random
import struct
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


# The key of tests/fuzz/ps_frame_fuzzer.cpp.
PS_FRAME_FUZZ_KEY = b"mdtrain-ps-frame-fuzzer-key-0032"


def ps_frame(direction, session, counter, body):
    """tag[32] | session[16] | counter[8, LE] | body, as distribute/frame_auth.h defines it."""
    head = session + struct.pack("<Q", counter)
    tag = hmac.new(PS_FRAME_FUZZ_KEY, b"mdtrain-frame-v1" + direction + head + body, hashlib.sha256).digest()
    return tag + head + body


def ps_message(kind, dtype=0, payload=b"", count=None, status=0, version=0, step=0):
    """A PS message (strategy/parameter_server/ps_message.h: a 56-byte header, then the payload)."""
    if count is None:
        count = len(payload) // {0: 1, 1: 4, 2: 8}[dtype]
    header = struct.pack("<4sHHQIIIBBHQQQ", b"MDPS", 2, kind, 7, 1, 0, 0xFFFFFFFF, dtype, status, 0, version,
                         count, step)
    return header + payload


def ps_frames():
    session = bytes(range(0x40, 0x50))
    requests = [ps_message(1), ps_message(3, 1, struct.pack("<3f", 1, 2, 3), version=2, step=9),
                ps_message(5, 2, struct.pack("<2d", 0.5, -1)), ps_message(6, 0, b"/tmp/ck"), ps_message(8),
                ps_message(10)]
    replies = [ps_message(2, 1, struct.pack("<3f", 4, 5, 6), version=3), ps_message(4, status=1, version=4),
               ps_message(9, 0, b'{"version": 4}'), ps_message(12, 0, b"[ps] refused")]
    for i, body in enumerate(requests):
        yield ps_frame(b"Q", session, i + 1, body)
    for i, body in enumerate(replies):
        yield ps_frame(b"R", session, i + 1, body)


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
    ps_rng = random.Random(34)  # its own: the frames' variants do not move when the others change
    for data in ps_frames():
        put("ps_frame", data)
        for v in variants(data, ps_rng, 1):
            put("ps_frame", v)
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
