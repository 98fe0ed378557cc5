"""Resizing (bilinear and nearest, up and down, crop_to_aspect_ratio) and CenterCrop against
Keras 3 on TF (skipped without it), and so are RandomRotation, RandomZoom and RandomTranslation
with a fixed draw; every augmentation layer (those and RandomFlip, RandomContrast) is
identity unless training, shape-preserving, reproducible with a seed, and its outputs what its
transformation allows."""
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
# Augmentations with a fixed draw (lower == upper), so both sides move images alike.
FIXED = {
    "rotation_reflect": "L.RandomRotation((0.1, 0.1))",
    "rotation_constant": "L.RandomRotation((-0.3, -0.3), fill_mode='constant', fill_value=7.0)",
    "rotation_nearest": "L.RandomRotation((0.25, 0.25), fill_mode='nearest')",
    "zoom_out": "L.RandomZoom((0.3, 0.3))",
    "zoom_in_xy": "L.RandomZoom((-0.2, -0.2), (0.4, 0.4))",
    "translate_reflect": "L.RandomTranslation((0.25, 0.25), (-0.4, -0.4))",
    "translate_constant": "L.RandomTranslation((-0.3, -0.3), (0.1, 0.1), fill_mode='constant')",
}

SNIPPET = """
import json
import numpy as np
import keras
L = keras.layers
x = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) ** 1.3
out = {name: np.asarray(eval(ctor)(x)).tolist() for name, ctor in json.loads(%r).items()}
out.update({name: np.asarray(eval(ctor)(x, training=True)).tolist() for name, ctor in json.loads(%r).items()})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def keras_outputs(tmp_path_factory):
    code = SNIPPET % (json.dumps(CASES), json.dumps(FIXED))
    return json.loads(run_keras(code, tmp_path_factory.mktemp("image")).splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES) + sorted(FIXED))
def test_image_layers_match_keras(keras_outputs, name):
    x = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) ** 1.3
    if name in CASES:
        got = eval(CASES[name])(x).numpy()  # noqa: S307 (the cases above)
    else:
        got = eval(FIXED[name])(x, training=True).numpy()  # noqa: S307
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
                                  "L.RandomRotation(0.2, seed=3)", "L.RandomZoom(0.3, seed=3)",
                                  "L.RandomTranslation(0.3, 0.3, seed=3)",
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
    elif "Contrast" in ctor:
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
    with pytest.raises(NotImplementedError, match="fill_mode"):
        L.RandomZoom(0.2, fill_mode="wrap")
    with pytest.raises(ValueError, match="images of shape"):
        L.Resizing(2, 2)(np.zeros((4, 4)))


def test_a_preprocessing_layer_in_a_model_is_a_clear_error():
    with pytest.raises(NotImplementedError, match='"scale".*dataset.map'):
        tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Rescaling(0.5, name="scale"), tf.keras.layers.Dense(2)])
    with pytest.raises(NotImplementedError, match='"flip".*symbolic'):
        tf.keras.layers.RandomFlip(name="flip")(tf.keras.Input((8, 8, 3)))
