"""Atomic file replacement for the Python writers (Keras archives, weight files, checkpoints, state).

The content is written to a temporary file in the target's directory, flushed to disk, then
renamed over the target: a reader, or a crash midway, sees the old file or the new one, never a
mix. A failed write removes the temporary file and leaves the previous file as it was.

A writer killed outright (SIGKILL, the OOM killer) cannot remove its temporary, and a model's
temporaries are as large as the model. So temporaries are named as the C++ writers name theirs
(core/atomic_file.cpp): "<target>.tmp.<pid>.<n>", and every write first removes the
temporaries of the same target whose writer process is dead. C++ and Python writers thus clean
each other's. A temporary carrying this process's pid is stale unless this process is writing it
right now (the pid was reused). The one case this cannot tell apart: C++ and Python writing the
same target at the same moment in one process (each takes the other's temporary for a dead
one's); two writers racing on one target lose one of the writes anyway.
"""
import contextlib
import itertools
import os
import threading

_counter = itertools.count()
_lock = threading.Lock()
_in_progress = set()  # this process's temporaries being written now (absolute paths)


def _writer_pid(suffix):
    """The pid in "<pid>.<n>" as the writers spell it (decimal, no sign, no leading zero), else 0."""
    pid, dot, n = suffix.partition(".")
    if not dot or not pid.isdigit() or not n.isdigit() or pid[0] == "0" or len(pid) > 9:
        return 0
    if not (pid.isascii() and n.isascii()):
        return 0
    return int(pid)


def _is_dead(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


def remove_stale_temporaries(path):
    """Removes "<path>.tmp.<pid>.<n>" files whose writer is dead. Best effort: a directory that
    cannot be listed or a file that cannot be removed is left, since the write may still work."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    prefix = name + ".tmp."
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    me = os.getpid()
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        pid = _writer_pid(entry[len(prefix):])
        if pid <= 0:
            continue
        full = os.path.join(directory, entry)
        with _lock:
            stale = full not in _in_progress if pid == me else _is_dead(pid)
        if stale:
            with contextlib.suppress(OSError):
                os.remove(full)


@contextlib.contextmanager
def _temporary(path):
    """Creates "<path>.tmp.<pid>.<n>" (O_EXCL; registered as in progress before it exists) and
    yields its path; removes it on the way out unless it was renamed."""
    path = os.path.abspath(os.fspath(path))
    remove_stale_temporaries(path)
    tmp = None
    for _ in range(100):  # a name can be taken by a stale temporary that could not be removed
        candidate = f"{path}.tmp.{os.getpid()}.{next(_counter)}"
        with _lock:
            _in_progress.add(candidate)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            with _lock:
                _in_progress.discard(candidate)
            continue
        except BaseException:
            with _lock:
                _in_progress.discard(candidate)
            raise
        os.close(fd)
        tmp = candidate
        break
    if tmp is None:
        raise FileExistsError(f"cannot write {path}: 100 temporary names beside it are taken")
    try:
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        with _lock:
            _in_progress.discard(tmp)


def _sync_directory(directory):
    """Makes the rename itself durable (filesystems that cannot sync a directory say so)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path to write; on success it replaces `path`, on error it is removed."""
    path = os.path.abspath(os.fspath(path))
    with _temporary(path) as tmp:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    _sync_directory(os.path.dirname(path))


@contextlib.contextmanager
def scratch_path(path):
    """A scratch file named as `path`'s temporaries are ("<path>.tmp.<pid>.<n>"), always removed
    at the end: what a writer needs beside its output (the weights inside a .keras archive) is
    cleaned like its temporary when the writer is killed."""
    with _temporary(path) as tmp:
        yield tmp
