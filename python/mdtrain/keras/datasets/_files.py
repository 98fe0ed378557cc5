"""Finding a dataset's files on disk, or downloading them with a SHA-256 check.

Search order: every directory in $MDTRAIN_DATA (os.pathsep-separated; each tried
as <dir>/<dataset> then <dir>), the cache ~/.mdtrain/datasets/<dataset>, then any
system directory the dataset names (Debian's /usr/share/datasets/...). Files found
on disk are trusted as the user's choice (Debian recompresses its copies, so they
cannot match the download checksums); only downloads are checksum-verified, and a
download reaches its final name only after it passed, so the cache never holds an
unverified file.

Environment: MDTRAIN_DATA (search directories), MDTRAIN_OFFLINE=1 (never
download), MDTRAIN_DATASETS_URL (base URL instead of DEFAULT_BASE_URL; file:// and
http:// work too, which is how the tests exercise downloading).
"""

import hashlib
import os
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

DEFAULT_BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
# Seconds a single network operation may block (connect, one read).
DOWNLOAD_TIMEOUT = 60.0
# Seconds a whole file may take: a server trickling bytes cannot hang load_data().
DOWNLOAD_DEADLINE = 1800.0
# No file of these datasets comes near this; a larger response is not our file.
MAX_DOWNLOAD_BYTES = 256 << 20


class DatasetNotFoundError(FileNotFoundError):
    """The dataset's files were found nowhere and could not be downloaded.

    `places` lists every directory searched (and the download URL tried), each
    with the reason it did not serve.
    """

    def __init__(self, message, places):
        super().__init__(message)
        self.places = list(places)

    def __str__(self):
        return self.args[0]


@dataclass(frozen=True)
class FileSpec:
    """One required file: the names it may have on disk (the first is the name a
    download is saved under) and, if it can be downloaded, its origin (relative
    to the base URL) and SHA-256."""

    names: tuple
    origin: str = None
    sha256: str = None

    def label(self):
        return " or ".join(self.names)


_MNIST_STEMS = (
    ("train-images", "idx3"),
    ("train-labels", "idx1"),
    ("t10k-images", "idx3"),
    ("t10k-labels", "idx1"),
)


def mnist_idx_specs(hashes=None):
    """FileSpecs for the four IDX files of the MNIST family: gzipped or plain, with the
    `train-images-idx3-ubyte` or `train-images.idx3-ubyte` spelling; downloadable
    (as .gz) when `hashes` gives their checksums."""
    specs = []
    for stem, idx in _MNIST_STEMS:
        gz = f"{stem}-{idx}-ubyte.gz"
        names = (gz, f"{stem}-{idx}-ubyte", f"{stem}.{idx}-ubyte.gz", f"{stem}.{idx}-ubyte")
        if hashes is None:
            specs.append(FileSpec(names))
        else:
            specs.append(FileSpec(names, origin=gz, sha256=hashes[gz]))
    return specs


def offline():
    return os.environ.get("MDTRAIN_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def base_url():
    url = os.environ.get("MDTRAIN_DATASETS_URL") or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def cache_dir(dataset):
    return os.path.join(os.path.expanduser("~"), ".mdtrain", "datasets", dataset)


def search_dirs(dataset, system_dirs=()):
    """The ordered (source, directory) pairs searched for `dataset`."""
    dirs = []
    for root in os.environ.get("MDTRAIN_DATA", "").split(os.pathsep):
        if root:
            root = os.path.expanduser(root)
            dirs.append(("$MDTRAIN_DATA", os.path.join(root, dataset)))
            dirs.append(("$MDTRAIN_DATA", root))
    dirs.append(("cache", cache_dir(dataset)))
    for d in system_dirs:
        dirs.append(("system", d))
    return dirs


def _find_in_dir(directory, specs):
    """Returns (paths, None) if `directory` holds every spec, else (None, reason)."""
    if not os.path.isdir(directory):
        return None, "no such directory"
    paths, missing = [], []
    for spec in specs:
        found = next(
            (os.path.join(directory, n) for n in spec.names
             if os.path.isfile(os.path.join(directory, n))),
            None,
        )
        if found is None:
            missing.append(spec.label())
        paths.append(found)
    if missing:
        return None, "missing " + ", ".join(missing)
    return paths, None


def locate(dataset, layouts, dirs, download_dir, how_to_provide):
    """Returns (layout_index, paths) for the first directory in `dirs` that holds
    every file of one of `layouts` (tried in order within each directory).

    Failing that, downloads the first layout whose files all have an origin into
    `download_dir` (keeping files already there) unless MDTRAIN_OFFLINE is set.
    Raises DatasetNotFoundError listing every place looked at and
    `how_to_provide` when nothing worked; a checksum mismatch raises ValueError.
    """
    places = []
    for source, directory in dirs:
        reasons = []
        for i, specs in enumerate(layouts):
            paths, reason = _find_in_dir(directory, specs)
            if paths is not None:
                return i, paths
            reasons.append(reason)
        reason = reasons[0] if len(set(reasons)) == 1 else "; or ".join(reasons)
        places.append(f"{directory} ({source}): {reason}")

    index = next(
        (i for i, specs in enumerate(layouts) if all(s.origin for s in specs)), None
    )
    if index is not None:
        specs = layouts[index]
        url = base_url()
        if offline():
            places.append(f"download from {url}: skipped because MDTRAIN_OFFLINE is set")
        else:
            try:
                paths = []
                for spec in specs:
                    found, _ = _find_in_dir(download_dir, [spec])
                    if found is None:
                        found = [download(url + spec.origin,
                                          os.path.join(download_dir, spec.names[0]),
                                          spec.sha256)]
                    paths.append(found[0])
                return index, paths
            except _DownloadFailed as e:
                places.append(f"download: {e}")

    lines = [f"{dataset}: dataset files not found, and they could not be downloaded.",
             "Looked in:"]
    lines += [f"  - {p}" for p in places]
    lines.append("To provide the files, do one of:")
    lines += [f"  - {h}" for h in how_to_provide]
    raise DatasetNotFoundError("\n".join(lines), places)


class _DownloadFailed(Exception):
    """The file could not be fetched (network, HTTP or disk error)."""


def download(url, dest, sha256):
    """Downloads `url` to `dest`, verifying its SHA-256, and returns `dest`.

    The bytes go to a temporary file beside `dest` that is renamed over it only
    after the checksum matched, so `dest` is either absent or complete and
    verified, even if the process dies mid-download. Raises ValueError on a
    checksum mismatch (leaving no file behind) and _DownloadFailed otherwise.
    """
    directory = os.path.dirname(os.path.abspath(dest))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=directory, prefix="." + os.path.basename(dest) + ".", suffix=".part"
        )
    except OSError as e:
        raise _DownloadFailed(f"cannot write to {directory}: {e}") from e
    try:
        with os.fdopen(fd, "wb") as out:
            digest, size = _fetch(url, out)
            out.flush()
            os.fsync(out.fileno())
        if sha256 is not None and digest != sha256.lower():
            raise ValueError(
                f"checksum mismatch for {url}: SHA-256 of the {size} bytes received "
                f"is {digest}, expected {sha256}; the file was discarded (a corrupt "
                f"or tampered download, or a wrong MDTRAIN_DATASETS_URL)"
            )
        os.replace(tmp, dest)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return dest


def _fetch(url, out):
    """Streams `url` into the open file `out`; returns (sha256 hex, byte count)."""
    print(f"Downloading data from {url}", file=sys.stderr)
    digest = hashlib.sha256()
    size = 0
    deadline = time.monotonic() + DOWNLOAD_DEADLINE
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_DOWNLOAD_BYTES:
                    raise _DownloadFailed(
                        f"{url}: response larger than {MAX_DOWNLOAD_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise _DownloadFailed(
                        f"{url}: not complete after {DOWNLOAD_DEADLINE:.0f} s")
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as e:
        raise _DownloadFailed(f"{url}: HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        raise _DownloadFailed(f"{url}: {e.reason}") from e
    except (socket.timeout, TimeoutError) as e:
        raise _DownloadFailed(
            f"{url}: timed out (no data for {DOWNLOAD_TIMEOUT:g} s)") from e
    except (OSError, ValueError) as e:
        # ValueError: a malformed URL (e.g. a bad MDTRAIN_DATASETS_URL).
        raise _DownloadFailed(f"{url}: {e}") from e
    return digest.hexdigest(), size
