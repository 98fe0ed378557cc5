"""Reader for the IDX format used by MNIST and Fashion-MNIST (plain or gzipped).

An IDX file is a 4-byte magic number (two zero bytes, an element-type code,
the number of dimensions), then one big-endian uint32 per dimension, then the
elements in C order. Only unsigned bytes (type code 0x08) are supported: that is
all the MNIST family uses, and it is what Keras returns.
"""

import gzip
import os
import stat
import zlib

import numpy as np

UBYTE = 0x08
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801

_TYPE_NAMES = {
    0x08: "unsigned byte",
    0x09: "signed byte",
    0x0B: "int16",
    0x0C: "int32",
    0x0D: "float32",
    0x0E: "float64",
}
_GZIP_SIGNATURE = b"\x1f\x8b"
# Deflate cannot expand data by more than about 1032:1, so a header that declares
# more than this much per compressed byte is corrupt; checking it up front avoids
# allocating gigabytes for a damaged header.
_MAX_DEFLATE_RATIO = 1100
_CHUNK = 4 << 20


def _open(path):
    """Opens `path`, decompressing when its content (not its name) is gzip. Only regular files:
    opening a named pipe would block until a writer appears (forever, for a stray FIFO), so the
    file is opened non-blocking and checked before anything is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else \
                "not a regular file"
            raise ValueError(f"{path}: cannot read an IDX file from {kind}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    try:
        is_gzip = raw.read(2) == _GZIP_SIGNATURE
        raw.seek(0)
    except BaseException:
        raw.close()
        raise
    if is_gzip:
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, True
    return raw, raw, False


def _read_exact(stream, n):
    data = stream.read(n)
    return data if data is not None else b""


def read_idx(path, ndim):
    """Returns the uint8 array stored in the IDX file at `path` (writeable, C order).

    `ndim` is the number of dimensions the caller expects (3 for images, 1 for
    labels); the magic number must be 0x00000800 | ndim. Raises ValueError naming
    the file and what is wrong when the file is not such an IDX file, or is
    truncated, has trailing bytes, or is a corrupt gzip stream.
    """
    path = os.fspath(path)
    expected_magic = 0x00000800 | ndim
    stream, raw, is_gzip = _open(path)
    try:
        try:
            return _read_body(path, stream, raw, is_gzip, ndim, expected_magic)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({e})") from e
    finally:
        stream.close()
        raw.close()


def _read_body(path, stream, raw, is_gzip, ndim, expected_magic):
    kind = "images" if ndim == 3 else "labels" if ndim == 1 else f"{ndim}-d"
    magic = _read_exact(stream, 4)
    if len(magic) < 4:
        raise ValueError(
            f"{path}: truncated IDX header: {len(magic)} bytes, expected at least 4"
        )
    value = int.from_bytes(magic, "big")
    if magic[0] != 0 or magic[1] != 0:
        raise ValueError(
            f"{path}: not an IDX file: bad magic number 0x{value:08x} "
            f"(an IDX {kind} file starts with 0x{expected_magic:08x})"
        )
    if magic[2] != UBYTE:
        name = _TYPE_NAMES.get(magic[2], "unknown")
        raise ValueError(
            f"{path}: unsupported IDX element type 0x{magic[2]:02x} ({name}); "
            f"only 0x08 (unsigned byte) is supported"
        )
    if magic[3] != ndim:
        raise ValueError(
            f"{path}: IDX file has {magic[3]} dimensions (magic 0x{value:08x}), "
            f"expected {ndim} for an {kind} file (magic 0x{expected_magic:08x})"
        )
    dims_bytes = _read_exact(stream, 4 * ndim)
    if len(dims_bytes) < 4 * ndim:
        raise ValueError(
            f"{path}: truncated IDX header: {4 + len(dims_bytes)} bytes, "
            f"expected {4 + 4 * ndim} for {ndim} dimensions"
        )
    shape = tuple(
        int.from_bytes(dims_bytes[4 * i : 4 * i + 4], "big") for i in range(ndim)
    )
    payload = 1
    for d in shape:
        payload *= d
    header = 4 + 4 * ndim

    file_size = os.fstat(raw.fileno()).st_size
    if not is_gzip and file_size - header != payload:
        what = "truncated" if file_size - header < payload else "has trailing bytes"
        raise ValueError(
            f"{path}: IDX file {what}: header declares shape {shape} = {payload} "
            f"data bytes, but the file holds {file_size - header}"
        )
    if is_gzip and payload > _MAX_DEFLATE_RATIO * file_size + _CHUNK:
        raise ValueError(
            f"{path}: corrupt IDX header: declares shape {shape} = {payload} data "
            f"bytes, more than a {file_size}-byte gzip file can hold"
        )

    try:
        array = np.empty(shape, dtype=np.uint8)
    except (ValueError, MemoryError) as e:  # e.g. (2**32 - 1, 2**32 - 1, 0): no bytes, yet too many elements
        raise ValueError(f"{path}: IDX header declares shape {shape}, which cannot be allocated ({e})") from e
    view = memoryview(array.reshape(-1))  # 1-D bytes (cast() refuses a zero-sized shape)
    filled = 0
    while filled < payload:
        n = stream.readinto(view[filled : min(payload, filled + _CHUNK)])
        if not n:
            break
        filled += n
    if filled < payload:
        raise ValueError(
            f"{path}: IDX file truncated: header declares shape {shape} = {payload} "
            f"data bytes, but the file holds {filled}"
        )
    # Reading to the end also makes gzip verify the stream's CRC and length.
    if is_gzip and _read_exact(stream, 1):
        raise ValueError(
            f"{path}: IDX file has trailing bytes after the {payload} data bytes "
            f"declared by its header (shape {shape})"
        )
    return array


def read_images_and_labels(images_path, labels_path, image_shape=(28, 28)):
    """Returns (images, labels): uint8 arrays of shape (n, *image_shape) and (n,).

    Raises ValueError when either file is invalid, the images are not of
    `image_shape`, or the two files hold different numbers of examples.
    """
    images = read_idx(images_path, 3)
    labels = read_idx(labels_path, 1)
    if images.shape[1:] != tuple(image_shape):
        raise ValueError(
            f"{os.fspath(images_path)}: images have shape {images.shape[1:]}, "
            f"expected {tuple(image_shape)}"
        )
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"image/label count mismatch: {os.fspath(images_path)} holds "
            f"{images.shape[0]} images but {os.fspath(labels_path)} holds "
            f"{labels.shape[0]} labels"
        )
    return images, labels


def load_splits(paths):
    """Loads ((x_train, y_train), (x_test, y_test)) from the four IDX paths in
    train-images, train-labels, t10k-images, t10k-labels order."""
    x_train, y_train = read_images_and_labels(paths[0], paths[1])
    x_test, y_test = read_images_and_labels(paths[2], paths[3])
    return (x_train, y_train), (x_test, y_test)
