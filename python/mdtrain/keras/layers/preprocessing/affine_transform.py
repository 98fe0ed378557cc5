"""The projective image transform the rotation, zoom and translation layers share (Keras's
ops.image.affine_transform, TF's ImageProjectiveTransformV3): each output pixel (x, y) reads the
input at ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1, with TF's fill
modes for points outside the image."""
import numpy as np

# Keras also has fill_mode="wrap" and interpolation="nearest": not matched to TF yet, so refused.
FILL_MODES = ("reflect", "constant", "nearest")
INTERPOLATIONS = ("bilinear",)


def _map_coordinate(c, size, fill_mode):
    """A coordinate outside [0, size - 1] brought back inside as TF's fill modes do (nearest
    clamps; constant is handled by the reader)."""
    if fill_mode == "reflect":
        period = 2 * size
        c = np.where(c < 0, np.where(c < -period, c + period * np.trunc(-c / period), c), c)
        c = np.where(c < 0, np.where(c < -size, c + period, -c - 1), c)
        c = np.where(c > size - 1, c - period * np.trunc(c / period), c)
        c = np.where(c >= size, period - c - 1, c)
    return np.clip(c, 0, size - 1)


def affine_transform(images, transforms, interpolation="bilinear", fill_mode="reflect", fill_value=0.0):
    """`images` (N, H, W, C) float32 under one 8-number transform per image (N, 8)."""
    n, h, w, _ = images.shape
    ys, xs = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    out = np.empty_like(images)
    for i in range(n):
        a0, a1, a2, b0, b1, b2, c0, c1 = np.asarray(transforms[i], dtype=np.float32)
        k = c0 * xs + c1 * ys + 1
        src_x = (a0 * xs + a1 * ys + a2) / k
        src_y = (b0 * xs + b1 * ys + b2) / k
        out[i] = _sample(images[i], src_y, src_x, interpolation, fill_mode, np.float32(fill_value))
    return out


def _read(image, y, x, fill_mode, fill_value):
    h, w = image.shape[:2]
    if fill_mode == "constant":
        inside = (y >= 0) & (y <= h - 1) & (x >= 0) & (x <= w - 1)
        yi = np.clip(y, 0, h - 1).astype(np.int64)
        xi = np.clip(x, 0, w - 1).astype(np.int64)
        return np.where(inside[..., None], image[yi, xi], fill_value)
    return image[_map_coordinate(y, h, fill_mode).astype(np.int64), _map_coordinate(x, w, fill_mode).astype(np.int64)]


def _sample(image, y, x, interpolation, fill_mode, fill_value):  # bilinear (the one interpolation kept)
    h, w = image.shape[:2]
    if fill_mode != "constant":
        y, x = _map_coordinate(y, h, fill_mode), _map_coordinate(x, w, fill_mode)
    y0, x0 = np.floor(y), np.floor(x)
    dy, dx = (y - y0)[..., None], (x - x0)[..., None]
    top = (1 - dx) * _read(image, y0, x0, fill_mode, fill_value) + dx * _read(image, y0, x0 + 1, fill_mode, fill_value)
    bottom = ((1 - dx) * _read(image, y0 + 1, x0, fill_mode, fill_value) +
              dx * _read(image, y0 + 1, x0 + 1, fill_mode, fill_value))
    return ((1 - dy) * top + dy * bottom).astype(np.float32)


def check_fill(fill_mode, interpolation, owner):
    if fill_mode not in FILL_MODES:
        raise NotImplementedError(f"{owner}: Unknown `fill_mode` {fill_mode}. Expected of one {FILL_MODES}.")
    if interpolation not in INTERPOLATIONS:
        raise NotImplementedError(f"{owner}: Unknown `interpolation` {interpolation}. Expected of one "
                                  f"{INTERPOLATIONS}.")
