"""The core's CPU threads per op, set for a measurement and set back after it."""
import contextlib


@contextlib.contextmanager
def core_threads(threads):
    """Inside the block the core's ops split over `threads` threads (None: as they are); after it,
    as before, however the block ends. The planner times what a replica or stage runs on one
    thread, and one replica alone on every core."""
    from mdtrain import _core
    before = _core.cpu_thread_count()
    if threads is not None:
        _core.set_cpu_threads(threads)
    try:
        yield
    finally:
        _core.set_cpu_threads(before)
