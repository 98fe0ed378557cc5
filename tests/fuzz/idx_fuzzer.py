"""atheris (libFuzzer for Python) target: the IDX reader, python/mdtrain/keras/datasets/_idx.py.

    python tests/fuzz/idx_fuzzer.py [libFuzzer flags] [corpus dirs]    (scripts/fuzz.sh runs it)

The first input byte chooses the number of dimensions the caller expects (odd: 1, labels; even:
3, images); the rest is the file, plain or gzipped. The property: read_idx returns a writeable,
C-ordered uint8 array of that many dimensions whose bytes are the file's payload, or raises
ValueError whose message starts with the path; any other exception, a crash, a hang or an
allocation beyond -malloc_limit_mb is a finding. The module is loaded from the source tree by
path (it needs only NumPy), so the fuzzer runs without building mdtrain's C++ extension.
"""
import gzip
import importlib.util
import inspect
import os
import sys
import tempfile
import zlib

import atheris

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "mdtrain_idx_under_fuzz", os.path.join(ROOT, "python", "mdtrain", "keras", "datasets", "_idx.py"))
idx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(idx)
import numpy as np  # noqa: E402

# Coverage from the reader's own functions (instrumenting everything loaded, NumPy included,
# takes minutes; the reader's branches are what matters).
for _name, _obj in list(vars(idx).items()):
    if inspect.isfunction(_obj) and _obj.__module__ == idx.__name__:
        setattr(idx, _name, atheris.instrument_func(_obj))

_fd, PATH = tempfile.mkstemp(prefix="mdtrain_idx_fuzz_")
os.close(_fd)


def payload_of(data):
    """The bytes after the header, for the content check (None when not determinable)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except Exception:  # noqa: BLE001  (the reader accepted it: then this cannot fail)
            return None
    return data[4 + 4 * data[3]:] if len(data) >= 4 else None


def test_one_input(data):
    if not data:
        return
    ndim = 1 if data[0] & 1 else 3
    body = data[1:]
    with open(PATH, "wb") as f:
        f.write(body)
    try:
        array = idx.read_idx(PATH, ndim)
    except ValueError as e:
        if not str(e).startswith(PATH):
            raise AssertionError(f"error does not start with the path: {e}") from e
        return
    assert isinstance(array, np.ndarray) and array.dtype == np.uint8, array
    assert array.ndim == ndim and array.flags.c_contiguous and array.flags.writeable, array.flags
    payload = payload_of(body)
    assert payload is not None and array.tobytes() == payload, "array bytes differ from the payload"


def main():
    try:
        atheris.Setup(sys.argv, test_one_input)
        atheris.Fuzz()
    finally:
        os.unlink(PATH)


if __name__ == "__main__":
    main()
