"""tf.io.gfile over the local file system (no remote schemes: a path with one is an error)."""
import glob as _glob
import os
import shutil


def _local(path, where):
    path = os.fspath(path)
    if "://" in path:
        raise ValueError(f"tf.io.gfile.{where}: {path!r}: only local paths are supported by mdtrain")
    return path


def exists(path):
    return os.path.exists(_local(path, "exists"))


def isdir(path):
    return os.path.isdir(_local(path, "isdir"))


def makedirs(path):
    os.makedirs(_local(path, "makedirs"), exist_ok=True)


def mkdir(path):
    os.mkdir(_local(path, "mkdir"))


def listdir(path):
    return os.listdir(_local(path, "listdir"))


def remove(path):
    os.remove(_local(path, "remove"))


def rmtree(path):
    shutil.rmtree(_local(path, "rmtree"))


def glob(pattern):
    return sorted(_glob.glob(_local(pattern, "glob")))


def rename(src, dst, overwrite=False):
    src, dst = _local(src, "rename"), _local(dst, "rename")
    if not overwrite and os.path.exists(dst):
        raise FileExistsError(f"tf.io.gfile.rename: {dst} exists and overwrite=False")
    os.replace(src, dst)


def copy(src, dst, overwrite=False):
    src, dst = _local(src, "copy"), _local(dst, "copy")
    if not overwrite and os.path.exists(dst):
        raise FileExistsError(f"tf.io.gfile.copy: {dst} exists and overwrite=False")
    shutil.copyfile(src, dst)


def GFile(name, mode="r"):
    """An open file (a context manager, like the built-in open)."""
    return open(_local(name, "GFile"), mode)


Open = GFile
