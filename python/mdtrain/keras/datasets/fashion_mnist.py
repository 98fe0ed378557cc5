"""Fashion-MNIST, as `keras.datasets.fashion_mnist`."""

import os

from . import _files, _idx

DATASET = "fashion-mnist"
# Debian's dataset-fashion-mnist package installs the four gzipped IDX files here.
SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"

# SHA-256 of the archives at the download origin, the values Keras checks.
# (Debian's copies are recompressed, so they differ; files found on disk are not
# checked against these, only downloads are.)
FILE_HASHES = {
    "train-labels-idx1-ubyte.gz":
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "train-images-idx3-ubyte.gz":
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "t10k-labels-idx1-ubyte.gz":
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    "t10k-images-idx3-ubyte.gz":
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
}


def load_data():
    """Loads the Fashion-MNIST dataset.

    Returns `(x_train, y_train), (x_test, y_test)`: uint8 images of shape
    (60000, 28, 28) and (10000, 28, 28), and uint8 labels 0-9 of shape (60000,)
    and (10000,). Labels: 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat,
    5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot.

    The files are looked for in $MDTRAIN_DATA (directly or in a fashion-mnist/
    subdirectory), ~/.mdtrain/datasets/fashion-mnist, and
    /usr/share/datasets/fashion-mnist (`apt-get install dataset-fashion-mnist`),
    and otherwise downloaded into ~/.mdtrain/datasets/fashion-mnist with their
    SHA-256 checked. Raises `DatasetNotFoundError` (a FileNotFoundError) listing
    every place looked at when that all fails, ValueError for a corrupt file.

    The copyright for Fashion-MNIST is held by Zalando SE; it is licensed under
    the MIT license.
    """
    cache = _files.cache_dir(DATASET)
    names = ", ".join(s.names[0] for s in _files.mnist_idx_specs())
    _, paths = _files.locate(
        DATASET,
        [_files.mnist_idx_specs(FILE_HASHES)],
        _files.search_dirs(DATASET, [SYSTEM_DIR]),
        cache,
        [
            f"set MDTRAIN_DATA to a directory holding {names} (gzipped or not), "
            f"directly or in a {DATASET}{os.sep} subdirectory",
            f"apt-get install dataset-fashion-mnist (installs them in {SYSTEM_DIR})",
            f"copy them into {cache}{os.sep}",
        ],
    )
    return _idx.load_splits(paths)
