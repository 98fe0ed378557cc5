"""Atomic file replacement for the Python writers (Keras archives, weight files, event-free state).

The content is written to a temporary file in the target's directory, flushed to disk, then
renamed over the target: a reader, or a crash midway, sees the old file or the new one, never a
mix. A failed write removes the temporary file and leaves the previous file as it was.
(C++ writers use core/atomic_file the same way.)
"""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path to write; on success it replaces `path`, on error it is removed."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
