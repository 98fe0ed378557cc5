"""Tests for mdtrain.keras.datasets: IDX parsing, file search, checksummed download.

Every test points HOME at a temporary directory and clears the dataset
environment variables, so the real ~/.mdtrain is never read or written.
"""

import contextlib
import functools
import gzip
import hashlib
import http.server
import os
import socket
import threading

import numpy as np
import pytest

from mdtrain.keras.datasets import DatasetNotFoundError, fashion_mnist, mnist
from mdtrain.keras.datasets import _files, _idx

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


def idx_bytes(array, type_code=0x08, ndim=None):
    ndim = array.ndim if ndim is None else ndim
    header = bytes([0, 0, type_code, ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def tiny_split(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=(n,), dtype=np.uint8)
    return x, y


def write_idx_set(directory, gz=True, n_train=5, n_test=3):
    """Writes the four IDX files; returns the arrays written."""
    os.makedirs(directory, exist_ok=True)
    (xtr, ytr), (xte, yte) = tiny_split(n_train, 1), tiny_split(n_test, 2)
    for name, arr in zip(IDX_NAMES, (xtr, ytr, xte, yte)):
        data = idx_bytes(arr)
        path = os.path.join(directory, name + (".gz" if gz else ""))
        with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
            f.write(data)
    return (xtr, ytr), (xte, yte)


def assert_same(loaded, expected):
    for got, want in zip(loaded[0] + loaded[1], expected[0] + expected[1]):
        assert got.dtype == np.uint8
        assert got.flags.writeable and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("MDTRAIN_DATA", "MDTRAIN_OFFLINE", "MDTRAIN_DATASETS_URL"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def no_system_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIR", str(tmp_path / "no-debian"))


# ---------------------------------------------------------------- IDX reader

@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_roundtrip(tmp_path, gz):
    x, _ = tiny_split(4, 0)
    path = tmp_path / ("img.gz" if gz else "img")
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(idx_bytes(x))
    got = _idx.read_idx(path, 3)
    assert got.shape == (4, 28, 28) and got.dtype == np.uint8
    assert got.flags.writeable
    np.testing.assert_array_equal(got, x)


def test_gzip_detected_by_content_not_name(tmp_path):
    x, _ = tiny_split(2, 0)
    path = tmp_path / "images.gz"  # plain content under a .gz name
    path.write_bytes(idx_bytes(x))
    np.testing.assert_array_equal(_idx.read_idx(path, 3), x)


def write(tmp_path, data, gz=False):
    path = tmp_path / ("f.gz" if gz else "f")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("gz", [True, False])
def test_truncated_payload(tmp_path, gz):
    x, _ = tiny_split(3, 0)
    path = write(tmp_path, idx_bytes(x)[:-10], gz)
    with pytest.raises(ValueError, match=r"truncated.*\(3, 28, 28\) = 2352.*holds 2342") as e:
        _idx.read_idx(path, 3)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("gz", [True, False])
def test_trailing_bytes(tmp_path, gz):
    _, y = tiny_split(3, 0)
    path = write(tmp_path, idx_bytes(y) + b"\x00", gz)
    with pytest.raises(ValueError, match="trailing bytes"):
        _idx.read_idx(path, 1)


@pytest.mark.parametrize("data", [b"", b"\x00\x00", b"\x00\x00\x08\x03\x00\x00"])
def test_truncated_header(tmp_path, data):
    with pytest.raises(ValueError, match="truncated IDX header"):
        _idx.read_idx(write(tmp_path, data), 3)


def test_bad_magic(tmp_path):
    x, _ = tiny_split(1, 0)
    data = b"\x12\x34" + idx_bytes(x)[2:]
    with pytest.raises(ValueError, match=r"bad magic number 0x12340803.*0x00000803"):
        _idx.read_idx(write(tmp_path, data), 3)


def test_wrong_type_byte(tmp_path):
    x, _ = tiny_split(1, 0)
    path = write(tmp_path, idx_bytes(x, type_code=0x0D), gz=True)
    with pytest.raises(ValueError, match=r"element type 0x0d \(float32\)") as e:
        _idx.read_idx(path, 3)
    assert str(path) in str(e.value)


def test_wrong_dimension_count(tmp_path):
    _, y = tiny_split(2, 0)
    path = write(tmp_path, idx_bytes(y))  # a labels file where images are expected
    with pytest.raises(ValueError, match=r"has 1 dimensions .* expected 3"):
        _idx.read_idx(path, 3)


def test_huge_declared_shape_in_gzip_rejected_before_allocating(tmp_path):
    header = bytes([0, 0, 8, 3]) + (10**9).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    with pytest.raises(ValueError, match="more than a .*gzip file can hold"):
        _idx.read_idx(write(tmp_path, header, gz=True), 3)


def test_corrupt_gzip_crc(tmp_path):
    x, _ = tiny_split(2, 0)
    path = write(tmp_path, idx_bytes(x), gz=True)
    raw = bytearray(path.read_bytes())
    raw[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt or truncated gzip"):
        _idx.read_idx(path, 3)


def test_truncated_gzip_stream(tmp_path):
    x, _ = tiny_split(20, 0)
    path = write(tmp_path, idx_bytes(x), gz=True)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match=str(path)):
        _idx.read_idx(path, 3)


def test_count_mismatch(tmp_path):
    x, _ = tiny_split(4, 0)
    _, y = tiny_split(3, 0)
    (tmp_path / "x").write_bytes(idx_bytes(x))
    (tmp_path / "y").write_bytes(idx_bytes(y))
    with pytest.raises(ValueError, match="4 images but .* 3 labels"):
        _idx.read_images_and_labels(tmp_path / "x", tmp_path / "y")


def test_wrong_image_size(tmp_path):
    x = np.zeros((2, 32, 32), np.uint8)
    _, y = tiny_split(2, 0)
    (tmp_path / "x").write_bytes(idx_bytes(x))
    (tmp_path / "y").write_bytes(idx_bytes(y))
    with pytest.raises(ValueError, match=r"\(32, 32\), expected \(28, 28\)"):
        _idx.read_images_and_labels(tmp_path / "x", tmp_path / "y")


# ---------------------------------------------------------------- search order

@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("subdir", [True, False])
def test_fashion_from_mdtrain_data(tmp_path, monkeypatch, no_system_dir, gz, subdir):
    root = tmp_path / "data"
    expected = write_idx_set(root / "fashion-mnist" if subdir else root, gz=gz)
    monkeypatch.setenv("MDTRAIN_DATA", str(root))
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    loaded = fashion_mnist.load_data()
    assert loaded[0][0].shape == (5, 28, 28) and loaded[0][1].shape == (5,)
    assert loaded[1][0].shape == (3, 28, 28) and loaded[1][1].shape == (3,)
    assert_same(loaded, expected)


def test_mixed_gz_plain_and_dotted_names(tmp_path, monkeypatch, no_system_dir):
    root = tmp_path / "data"
    expected = write_idx_set(root, gz=True)
    os.rename(root / "t10k-images-idx3-ubyte.gz", root / "t10k-images.idx3-ubyte.gz")
    with gzip.open(root / "train-labels-idx1-ubyte.gz") as f:
        (root / "train-labels-idx1-ubyte").write_bytes(f.read())
    os.remove(root / "train-labels-idx1-ubyte.gz")
    monkeypatch.setenv("MDTRAIN_DATA", str(root))
    assert_same(fashion_mnist.load_data(), expected)


def test_search_order(tmp_path, monkeypatch, isolated_env):
    data, system = tmp_path / "data", tmp_path / "system"
    cache = isolated_env / ".mdtrain" / "datasets" / "fashion-mnist"
    from_system = write_idx_set(system, n_train=1)
    from_cache = write_idx_set(cache, n_train=2)
    from_data = write_idx_set(data, n_train=3)
    from_data_subdir = write_idx_set(data / "fashion-mnist", n_train=4)
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIR", str(system))
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")

    assert_same(fashion_mnist.load_data(), from_cache)  # MDTRAIN_DATA unset
    monkeypatch.setenv("MDTRAIN_DATA", str(data))
    assert_same(fashion_mnist.load_data(), from_data_subdir)
    (data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz").unlink()  # incomplete: skipped
    assert_same(fashion_mnist.load_data(), from_data)
    monkeypatch.delenv("MDTRAIN_DATA")
    for f in cache.iterdir():
        f.unlink()
    assert_same(fashion_mnist.load_data(), from_system)


def test_not_found_lists_every_place(tmp_path, monkeypatch, isolated_env, no_system_dir):
    data = tmp_path / "data"
    write_idx_set(data)
    (data / "t10k-images-idx3-ubyte.gz").unlink()
    monkeypatch.setenv("MDTRAIN_DATA", str(data))
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError) as e:
        fashion_mnist.load_data()
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, OSError)
    msg = str(e.value)
    cache = str(isolated_env / ".mdtrain" / "datasets" / "fashion-mnist")
    for place in (str(data / "fashion-mnist"), str(data), cache, fashion_mnist.SYSTEM_DIR):
        assert place in msg
    assert len(e.value.places) == 5  # 4 directories + the skipped download
    assert "missing t10k-images-idx3-ubyte.gz or" in msg
    assert "MDTRAIN_OFFLINE" in msg
    assert "set MDTRAIN_DATA" in msg and "apt-get install dataset-fashion-mnist" in msg
    assert not os.path.exists(cache)  # offline: nothing created


# ---------------------------------------------------------------- MNIST

def write_npz(path, n_train=5, n_test=3, **override):
    (xtr, ytr), (xte, yte) = tiny_split(n_train, 3), tiny_split(n_test, 4)
    arrays = dict(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    arrays.update(override)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez_compressed(path, **arrays)
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def test_mnist_npz_from_mdtrain_data(tmp_path, monkeypatch):
    expected = write_npz(str(tmp_path / "data" / "mnist" / "mnist.npz"))
    monkeypatch.setenv("MDTRAIN_DATA", str(tmp_path / "data"))
    assert_same(mnist.load_data(), expected)


def test_mnist_custom_relative_and_absolute_path(tmp_path, monkeypatch):
    expected = write_npz(str(tmp_path / "data" / "digits.npz"))
    monkeypatch.setenv("MDTRAIN_DATA", str(tmp_path / "data"))
    assert_same(mnist.load_data(path="digits.npz"), expected)
    monkeypatch.delenv("MDTRAIN_DATA")
    assert_same(mnist.load_data(path=str(tmp_path / "data" / "digits.npz")), expected)


def test_mnist_idx_files_in_cache(isolated_env, monkeypatch):
    expected = write_idx_set(isolated_env / ".mdtrain" / "datasets" / "mnist", gz=False)
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    assert_same(mnist.load_data(), expected)


@pytest.mark.parametrize(
    "override, pattern",
    [
        (dict(x_train=np.zeros((5, 28, 28), np.float32)), "expected uint8"),
        (dict(y_test=np.zeros((4,), np.uint8)), "3 images but y_test holds 4"),
        (dict(x_test=np.zeros((3, 28), np.uint8)), r"expected \(n, 28, 28\)"),
    ],
)
def test_mnist_bad_npz(tmp_path, monkeypatch, override, pattern):
    write_npz(str(tmp_path / "mnist.npz"), **override)
    monkeypatch.setenv("MDTRAIN_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=pattern):
        mnist.load_data()


def test_mnist_npz_missing_key_and_corrupt(tmp_path):
    np.savez(tmp_path / "a.npz", x_train=np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="missing arrays"):
        mnist.load_npz(str(tmp_path / "a.npz"))
    (tmp_path / "b.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match="corrupt or truncated npz"):
        mnist.load_npz(str(tmp_path / "b.npz"))
    np.save(tmp_path / "c.npy", np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="not an npz archive"):
        mnist.load_npz(str(tmp_path / "c.npy"))


def test_mnist_not_found(monkeypatch, isolated_env):
    (isolated_env / ".mdtrain" / "datasets" / "mnist").mkdir(parents=True)
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError) as e:
        mnist.load_data()
    msg = str(e.value)
    assert str(isolated_env / ".mdtrain" / "datasets" / "mnist") in msg
    assert "missing mnist.npz; or missing train-images-idx3-ubyte.gz" in msg


# ---------------------------------------------------------------- download

@contextlib.contextmanager
def http_server(directory):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def serve_fashion(tmp_path, monkeypatch):
    """Writes a tiny gzipped set to serve and patches in its checksums."""
    origin = tmp_path / "origin"
    expected = write_idx_set(origin, gz=True)
    for name in IDX_NAMES:
        monkeypatch.setitem(fashion_mnist.FILE_HASHES, name + ".gz",
                            sha256_of(origin / (name + ".gz")))
    return origin, expected


@pytest.mark.parametrize("transport", ["http", "file"])
def test_download_success(tmp_path, monkeypatch, isolated_env, no_system_dir, transport):
    origin, expected = serve_fashion(tmp_path, monkeypatch)
    cache = isolated_env / ".mdtrain" / "datasets" / "fashion-mnist"
    with contextlib.ExitStack() as stack:
        url = (stack.enter_context(http_server(origin)) if transport == "http"
               else origin.as_uri() + "/")
        monkeypatch.setenv("MDTRAIN_DATASETS_URL", url)
        assert_same(fashion_mnist.load_data(), expected)
    assert sorted(os.listdir(cache)) == sorted(n + ".gz" for n in IDX_NAMES)
    # Cached now: works with the origin gone.
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", (tmp_path / "gone").as_uri())
    assert_same(fashion_mnist.load_data(), expected)


def test_download_only_missing_files(tmp_path, monkeypatch, isolated_env, no_system_dir):
    origin, expected = serve_fashion(tmp_path, monkeypatch)
    cache = isolated_env / ".mdtrain" / "datasets" / "fashion-mnist"
    cache.mkdir(parents=True)
    os.replace(origin / "train-images-idx3-ubyte.gz", cache / "train-images-idx3-ubyte.gz")
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", origin.as_uri())  # no trailing slash
    assert_same(fashion_mnist.load_data(), expected)


def test_download_checksum_mismatch(tmp_path, monkeypatch, isolated_env, no_system_dir):
    origin, _ = serve_fashion(tmp_path, monkeypatch)
    monkeypatch.setitem(fashion_mnist.FILE_HASHES, "t10k-images-idx3-ubyte.gz", "0" * 64)
    cache = isolated_env / ".mdtrain" / "datasets" / "fashion-mnist"
    with http_server(origin) as url:
        monkeypatch.setenv("MDTRAIN_DATASETS_URL", url)
        with pytest.raises(ValueError, match=r"checksum mismatch for .*t10k-images-idx3-ubyte\.gz"
                                             r".*expected 0000") as e:
            fashion_mnist.load_data()
    assert sha256_of(origin / "t10k-images-idx3-ubyte.gz") in str(e.value)
    assert not isinstance(e.value, DatasetNotFoundError)
    left = os.listdir(cache)
    assert "t10k-images-idx3-ubyte.gz" not in left
    assert not [f for f in left if f.endswith(".part")]


def test_download_http_404(tmp_path, monkeypatch, isolated_env, no_system_dir):
    (tmp_path / "empty").mkdir()
    with http_server(tmp_path / "empty") as url:
        monkeypatch.setenv("MDTRAIN_DATASETS_URL", url)
        with pytest.raises(DatasetNotFoundError, match="HTTP 404") as e:
            fashion_mnist.load_data()
    assert "train-images-idx3-ubyte.gz" in e.value.places[-1]
    cache = isolated_env / ".mdtrain" / "datasets" / "fashion-mnist"
    assert os.listdir(cache) == []


def test_download_connection_refused(monkeypatch, no_system_dir):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", f"http://127.0.0.1:{port}/")
    with pytest.raises(DatasetNotFoundError, match=f"127.0.0.1:{port}") as e:
        fashion_mnist.load_data()
    assert "set MDTRAIN_DATA" in str(e.value)


def test_download_times_out(monkeypatch, no_system_dir):
    # A server that accepts the connection and never answers.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    monkeypatch.setattr(_files, "DOWNLOAD_TIMEOUT", 0.2)
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", f"http://127.0.0.1:{listener.getsockname()[1]}/")
    try:
        with pytest.raises(DatasetNotFoundError, match="timed out"):
            fashion_mnist.load_data()
    finally:
        listener.close()


def test_offline_never_downloads(tmp_path, monkeypatch, isolated_env, no_system_dir):
    origin, _ = serve_fashion(tmp_path, monkeypatch)
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", origin.as_uri())
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError, match="skipped because MDTRAIN_OFFLINE"):
        fashion_mnist.load_data()
    assert not (isolated_env / ".mdtrain").exists()


def test_mnist_download_npz(tmp_path, monkeypatch, isolated_env):
    expected = write_npz(str(tmp_path / "origin" / "mnist.npz"))
    monkeypatch.setattr(mnist, "FILE_HASH", sha256_of(tmp_path / "origin" / "mnist.npz"))
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", (tmp_path / "origin").as_uri())
    assert_same(mnist.load_data(), expected)
    assert (isolated_env / ".mdtrain" / "datasets" / "mnist" / "mnist.npz").is_file()
    # An absolute path is where the download goes, under that name.
    target = tmp_path / "elsewhere" / "m.npz"
    assert_same(mnist.load_data(path=str(target)), expected)
    assert target.is_file()


def test_mnist_download_checksum_mismatch(tmp_path, monkeypatch, isolated_env):
    write_npz(str(tmp_path / "origin" / "mnist.npz"))
    monkeypatch.setenv("MDTRAIN_DATASETS_URL", (tmp_path / "origin").as_uri())
    with pytest.raises(ValueError, match="checksum mismatch.*expected 731c5ac6"):
        mnist.load_data()
    assert os.listdir(isolated_env / ".mdtrain" / "datasets" / "mnist") == []


# ---------------------------------------------------------------- real data

@pytest.mark.skipif(
    not all(os.path.isfile(os.path.join(DEBIAN_DIR, n + ".gz")) for n in IDX_NAMES),
    reason=f"Fashion-MNIST not installed in {DEBIAN_DIR} (apt-get install dataset-fashion-mnist)",
)
def test_real_fashion_mnist_from_debian(monkeypatch):
    monkeypatch.setenv("MDTRAIN_OFFLINE", "1")
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert y_train.shape == (60000,) and y_test.shape == (10000,)
    for a in (x_train, y_train, x_test, y_test):
        assert a.dtype == np.uint8 and a.flags.writeable
    # Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
    np.testing.assert_array_equal(np.bincount(y_train, minlength=10), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(y_test, minlength=10), [1000] * 10)
    assert x_train.min() == 0 and x_train.max() == 255
