"""Large host tensors on huge pages (core/host_blocks.h): `_core.host_buffer` hands out memory as
the engine allocates its tensors; from HUGE_PAGE_THRESHOLD_BYTES it starts on a huge page and its
mapping is advised as huge-page memory, unless MDTRAIN_HUGE_PAGES=0; a bad count is a ValueError."""
import os
import subprocess
import sys

import pytest

from mdtrain import _core

THP = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")

_FLAGS = r"""
import sys
from mdtrain import _core
a = _core.host_buffer(_core.HUGE_PAGE_THRESHOLD_BYTES // 4)
addr = a.ctypes.data
inside = False
for line in open("/proc/self/smaps"):
    head = line.split()[0]
    if "-" in head and not line.startswith("VmFlags"):
        lo, hi = (int(x, 16) for x in head.split("-"))
        inside = lo <= addr < hi
    elif inside and line.startswith("VmFlags:"):
        print(addr % _core.HUGE_PAGE_BYTES, "hg" in line.split())
        break
"""


def _flags(env_value):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("MDTRAIN_HUGE_PAGES", None)
    if env_value is not None:
        env["MDTRAIN_HUGE_PAGES"] = env_value
    out = subprocess.run([sys.executable, "-c", _FLAGS], env=env, capture_output=True, text=True, check=True)
    offset, advised = out.stdout.split()
    return int(offset), advised == "True"


@pytest.mark.skipif(not THP, reason="the kernel has no transparent huge pages (/sys/kernel/mm/transparent_hugepage)")
def test_large_host_buffers_are_on_huge_pages_unless_turned_off():
    assert _flags(None) == (0, True)
    offset, advised = _flags("0")
    assert not advised


def test_host_buffer_is_zeroed_float32_and_aligned():
    small = _core.host_buffer(1000)
    big = _core.host_buffer(_core.HUGE_PAGE_THRESHOLD_BYTES // 4 + 3)
    assert small.dtype.name == "float32" and small.shape == (1000,) and not small.any()
    assert big.shape == (_core.HUGE_PAGE_THRESHOLD_BYTES // 4 + 3,) and not big.any()
    assert small.ctypes.data % 64 == 0
    if os.environ.get("MDTRAIN_HUGE_PAGES") != "0":
        assert big.ctypes.data % _core.HUGE_PAGE_BYTES == 0
    big[-1] = 2.0  # writable to its last element
    assert big[-1] == 2.0


def test_host_buffer_refuses_a_negative_count():
    with pytest.raises(ValueError, match="host_buffer: count must be >= 0, got -1"):
        _core.host_buffer(-1)
