"""Timing a collective as a training step meets it, for the probes of this machine's
collectives (the threads communicator's in cluster.py, MPI's all-reduce in probes.py).

A loop of all-reduces over the same buffer finds it in the caches. A step's gradient does too
when the model is small, but a gradient of tens of MB meets its all-reduce from memory: the
backward and the update before it streamed more than the last-level cache holds (a gradient of
COLD_BYTES comes with weights, and optimizer slots, of at least as many bytes each). Measured on
this machine, 2 threads, 23 MB (the heavy MLP's gradient): 1.25-1.3 ms in a loop, 1.8-1.9 ms each
after the caches were evicted; its ZeRO-1 step's reduce-scatter + all-gather took about 1.8 ms
(the step less its slowest replica's compute and update), where the loop's figure read 1.0-1.3.

The buffer is the core's own host memory (`_core.host_buffer`), allocated as the engine allocates a
gradient: what the pages are decides what a copy between processes costs. 23 MB between 2 MPI
processes took 4.2-4.9 ms on 4 KB pages and 2.3-2.4 ms on huge pages; a NumPy array of that
size lands on either, depending on whether malloc found it a fresh mapping or reused its heap."""
import numpy as np

from mdtrain import _core

COLD_BYTES = 16 << 20   # from this size each collective is timed after the caches were evicted
EVICT_BYTES = 64 << 20  # streamed (copied) through each rank to evict them: twice a 32 MB L3


COLLECTIVES = (  # what a timed call runs: the calls a step's synchronization makes
    "all_reduce",   # sum, in place (data parallelism's gradients)
    "reduce",       # onto rank 0 (CentralStorage's gradients onto one device)
    "broadcast",    # from rank 0 (its weights back to the others)
)


def time_collective(comm, nbytes, rounds, iters, op="all_reduce"):
    """Seconds of one collective `op` (COLLECTIVES: "all_reduce", "reduce" onto rank 0, "broadcast"
    from rank 0) of `nbytes` of float32 on this rank (every rank calls this at once): the median of
    `rounds` loops of `iters` back-to-back calls below COLD_BYTES, and from COLD_BYTES the median
    of rounds x iters single calls, each after every rank copied EVICT_BYTES. The calls run in the
    core (`_core.time_collective_calls`), with no Python between them."""
    if op not in COLLECTIVES:
        raise ValueError(f"time_collective: op must be one of {COLLECTIVES}, got {op!r}")
    buf = _core.host_buffer(nbytes // 4)
    _core.time_collective_calls(comm, buf, op, 1)  # first touch
    times = []
    if buf.nbytes < COLD_BYTES:
        for _ in range(rounds):
            comm.barrier()
            times.append(_core.time_collective_calls(comm, buf, op, iters) / iters)
        return float(np.median(times))
    src = np.ones(EVICT_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    for _ in range(rounds * iters):
        np.copyto(dst, src)
        comm.barrier()
        times.append(_core.time_collective_calls(comm, buf, op, 1))
    return float(np.median(times))
