"""Loads the OpenBLAS that mdtrain's extension links against before the extension itself.

The extension is built against the scipy-openblas32 wheel, whose shared library lives in that
wheel's own directory (the build environment's copy may be gone). Loading it first by full path
lets the dynamic linker satisfy _core's dependency by its soname.
"""
import ctypes
import os


def preload():
    try:
        import scipy_openblas32
    except ImportError:  # a build against a system OpenBLAS finds it on the linker path
        return
    lib = os.path.join(scipy_openblas32.get_lib_dir(), "lib" + scipy_openblas32.get_library() + ".so")
    if os.path.exists(lib):
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
