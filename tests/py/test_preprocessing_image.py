"""Resizing (bilinear and nearest, up and down, crop_to_aspect_ratio) and CenterCrop against
Keras 3 on TF (skipped without it); the augmentation layers RandomFlip and RandomContrast:
identity unless training, shape-preserving, reproducible with a seed, and their outputs what
their transformation allows."""
import json

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers

CASES = {
    "bilinear_down": "L.Resizing(3, 2)",
    "bilinear_up": "L.Resizing(9, 11)",
    "bilinear_mixed": "L.Resizing(2, 7)",
    "nearest_down": "L.Resizing(3, 2, interpolation='nearest')",
    "nearest_up": "L.Resizing(8, 13, interpolation='nearest')",
    "crop_aspect": "L.Resizing(4, 4, crop_to_aspect_ratio=True)",
    "crop_aspect_wide": "L.Resizing(2, 6, crop_to_aspect_ratio=True)",
    "center_crop": "L.CenterCrop(3, 2)",
    "center_crop_up": "L.CenterCrop(7, 3)",
}

SNIPPET = """
import json
import numpy as np
import keras
L = keras.layers
x = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) ** 1.3
print(json.dumps({name: np.asarray(eval(ctor)(x)).tolist() for name, ctor in json.loads(%r).items()}))
"""


@pytest.fixture(scope="module")
def keras_outputs(tmp_path_factory):
    return json.loads(run_keras(SNIPPET % json.dumps(CASES), tmp_path_factory.mktemp("image")).splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_resizing_and_center_crop_match_keras(keras_outputs, name):
    x = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) ** 1.3
    got = eval(CASES[name])(x).numpy()  # noqa: S307 (the cases above)
    want = np.asarray(keras_outputs[name], dtype=np.float32)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    assert got.dtype == np.float32


def test_resizing_one_image_and_in_dataset_map():
    image = np.random.default_rng(0).uniform(0, 255, (8, 6, 3)).astype(np.float32)
    resized = L.Resizing(4, 3)(image).numpy()
    assert resized.shape == (4, 3, 3)
    np.testing.assert_allclose(resized, L.Resizing(4, 3)(image[None]).numpy()[0])
    ds = tf.data.Dataset.from_tensor_slices(np.stack([image, image])).map(L.CenterCrop(2, 2))
    assert [np.asarray(e).shape for e in ds] == [(2, 2, 3), (2, 2, 3)]


@pytest.mark.parametrize("ctor", ["L.RandomFlip(seed=3)", "L.RandomFlip('horizontal', seed=3)",
                                  "L.RandomContrast(0.5, seed=3)", "L.RandomContrast((0.2, 0.9), seed=3)"])
def test_augmentation_is_training_only_seeded_and_shape_preserving(ctor):
    x = np.random.default_rng(1).uniform(0, 255, (16, 4, 5, 3)).astype(np.float32)
    layer = eval(ctor)  # noqa: S307 (the cases above)
    np.testing.assert_array_equal(layer(x).numpy(), x)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
    first = layer(x, training=True).numpy()
    assert first.shape == x.shape
    assert not np.array_equal(first, x)
    again = eval(ctor)(x, training=True).numpy()  # noqa: S307
    np.testing.assert_array_equal(again, first)
    if "Flip" in ctor:
        for image, out in zip(x, first):
            candidates = [image, image[:, ::-1]] + ([image[::-1], image[::-1, ::-1]] if "'horizontal'" not in ctor
                                                    else [])
            assert any(np.array_equal(out, c) for c in candidates)
    else:
        assert first.min() >= 0 and first.max() <= 255
        mean = x.mean(axis=(1, 2), keepdims=True)
        factor = (first - mean) / (x - mean)  # one factor per image (where nothing was clipped)
        inside = (first > 0) & (first < 255)
        for f, keep in zip(factor, inside):
            assert np.ptp(f[keep]) < 1e-3


def test_bad_arguments():
    with pytest.raises(ValueError, match="interpolation"):
        L.Resizing(2, 2, interpolation="cubic-ish")
    with pytest.raises(ValueError, match="height"):
        L.CenterCrop(0, 2)
    with pytest.raises(ValueError, match="mode"):
        L.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="factor"):
        L.RandomContrast(1.5)
    with pytest.raises(ValueError, match="images of shape"):
        L.Resizing(2, 2)(np.zeros((4, 4)))
