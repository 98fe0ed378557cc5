"""What a cluster is to the planner: hosts × devices, each device's peak FLOP/s and memory, and an
α–β model of the links inside a host and between hosts.

Presets come from published figures (vendor datasheets), labelled with their source; they are
peaks, not what a framework reaches. `Cluster.measure()` times this machine instead (our core's
GEMM for FLOP/s, all-reduces of our threads communicator for the intra-host link, a copy for
memory bandwidth, a step of n replicas of a one-weight model for the framework's hand-off)."""
import dataclasses
import os
import threading
import time

import numpy as np

from mdtrain.plan.alpha_beta import AlphaBeta, measured_transfer
from mdtrain.plan.collective_timer import time_collective
from mdtrain.plan.core_threads import core_threads

_GB = 1e9


@dataclasses.dataclass(frozen=True)
class Cluster:
    """hosts × devices_per_host devices. Each device: peak_flops (FLOP/s), memory_bytes,
    memory_bandwidth (bytes/s, what an optimizer update streams at). intra_host / inter_host: the
    α–β of one point-to-point transfer between two devices of one host / of different hosts.
    overlaps_communication: whether a gradient bucket's all-reduce runs beside backward (NCCL's
    communication stream on GPUs) or blocks the device's thread (the CPU communicators: see
    GradientReducer). source: where the figures come from."""
    name: str
    hosts: int
    devices_per_host: int
    peak_flops: float
    memory_bytes: float
    memory_bandwidth: float
    intra_host: AlphaBeta
    inter_host: AlphaBeta
    overlaps_communication: bool
    source: str
    device_kind: str = "GPU"
    # Measured on this machine only: seconds a step of n replicas costs besides their work (waking
    # the replica threads, handing the batch out, joining), as ((n, seconds), ...). Not known for
    # presets (GPU launch and framework costs are not modelled).
    replica_step_overhead: tuple = ()
    # Cores the devices' compute shares (this machine: logical CPU devices on os.cpu_count() cores;
    # None: every device has its own, as GPUs). n devices on c < n cores run at most c at once.
    cores: int = None
    # MPI between worker processes on this host (MultiWorkerMirroredStrategy), measured: per
    # process count n, the α–β of a whole all-reduce of n ranks (not one transfer) and the fixed
    # cost of a step of n workers, as ((n, AlphaBeta, seconds), ...). Empty: not measured.
    mpi_processes: tuple = ()
    # Pipelines on this machine, measured: the cost of one message between stages (a send, the
    # wake-up of the stage thread waiting in the receive) and a step's fixed cost, from a
    # two-stage pipeline of a one-weight model at 2 and 16 micro-batches. None: not measured.
    pipeline_message_s: float = None
    pipeline_step_overhead_s: float = None
    mpi_source: str = ""
    # Measured on this machine: how many one-thread GEMM loops' worth of work `cores` threads
    # running them at once get done (cores on an idle machine; less when other work holds cores).
    # The replay deals devices over that many cores, rounded (effective_cores). None: not measured.
    concurrent_speedup: float = None
    # Measured on this machine: a whole all-reduce of the threads communicator (the collectives
    # of devices of one process) per rank count, as ((n, MeasuredTransfer: the α–β fit and the
    # measured points it is read through), ...); the
    # collectives of n devices of one host use it rather than the link's ring model (with more
    # devices than cores a rank waits for a peer without a core). Empty: not measured.
    threads_all_reduce: tuple = ()
    # And, alike, its reduce onto one rank and broadcast from it (CentralStorage's reduction to the
    # parameter device and the weights sent back), measured where they run: costed from the link
    # (the all-reduce's fit divided through the ring), the heavy MLP's 23 MB reduce + broadcast of
    # 2 threads read 1.5 ms where its CentralStorage step spends about 2.75. Empty: not measured.
    threads_reduce: tuple = ()
    threads_broadcast: tuple = ()
    # Parameter servers on this machine, measured (ps_probe.py): a pull of S bytes from one server
    # over our ZeroMQ transport, and a push (the transfer in plus the server's SGD apply before its
    # ack: the planner adds the model's own update beyond SGD's). None: not measured (ps_source
    # says why); presets use their links.
    ps_transport: AlphaBeta = None
    ps_push: AlphaBeta = None
    ps_source: str = ""
    # And what a worker step costs besides its pull, compute and push, as α–β in its batch's
    # bytes (one-weight models' steps on a LocalCluster: the coordinator's closure per
    # steps_per_execution steps, the worker's step loop drawing the batch in Python;
    # ps_probe.measure_ps_step). None: not measured (0 in the replay).
    ps_step_overhead: AlphaBeta = None

    def step_overhead(self, replicas):
        """The measured fixed cost of a step of `replicas` replicas (0 when not measured)."""
        return dict(self.replica_step_overhead).get(replicas, 0.0)

    def mpi_workers(self):
        """The process counts whose MPI all-reduce was measured on this host."""
        return tuple(n for n, _, _ in self.mpi_processes)

    def mpi_all_reduce(self, nbytes, processes):
        """Seconds of an all-reduce of `nbytes` over `processes` MPI processes (measured fit)."""
        fit = {n: ab for n, ab, _ in self.mpi_processes}[processes]
        return fit.time(nbytes)

    def mpi_step_overhead(self, processes):
        return {n: s for n, _, s in self.mpi_processes}.get(processes, 0.0)

    @property
    def effective_cores(self):
        """The cores the replay deals devices over: `cores`, or fewer when the measured concurrent
        speedup says other work holds some (rounded: the replay's cores are whole)."""
        if self.cores is None:
            return None
        if self.concurrent_speedup is None:
            return self.cores
        return max(1, min(self.cores, int(round(self.concurrent_speedup))))

    def core_of(self, device_index):
        """The core a device's compute runs on in the replay (None: its own). Devices are dealt
        round-robin over the cores: for identical replicas this gives the same step as the OS's
        time sharing (n/c of the work per core)."""
        cores = self.effective_cores
        return None if cores is None else f"core{device_index % cores}"

    def __post_init__(self):
        for field in ("hosts", "devices_per_host"):
            v = getattr(self, field)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"Cluster '{self.name}': {field} must be an integer >= 1, got {v!r} "
                                 f"(a cluster with zero devices has nothing to plan for)")
        for field in ("peak_flops", "memory_bytes", "memory_bandwidth"):
            v = getattr(self, field)
            if not v > 0:
                raise ValueError(f"Cluster '{self.name}': {field} must be > 0, got {v!r}")

    @property
    def num_devices(self):
        return self.hosts * self.devices_per_host

    def link(self, devices_spanned):
        """The α–β of a group of `devices_spanned` consecutive devices: intra-host when it fits in
        one host, else the slower inter-host link (the bottleneck of a ring over hosts)."""
        return self.intra_host if devices_spanned <= self.devices_per_host else self.inter_host

    def with_devices(self, hosts=None, devices_per_host=None):
        """The same hardware with another number of hosts / devices per host."""
        return dataclasses.replace(self, hosts=self.hosts if hosts is None else hosts,
                                   devices_per_host=self.devices_per_host if devices_per_host is None
                                   else devices_per_host)

    @staticmethod
    def preset_names():
        return sorted(_PRESETS)

    @staticmethod
    def preset(name, hosts=None):
        """A cluster from published figures ('dgx-h100', 'dgx-a100', 'v100-25gbe'); `hosts`
        overrides the preset's host count. ValueError for an unknown name."""
        if name == "this-machine":
            c = Cluster.measure()
        elif name in _PRESETS:
            c = _PRESETS[name]
        else:
            raise ValueError(f"unknown cluster preset {name!r}: known presets are "
                             f"{', '.join(Cluster.preset_names() + ['this-machine'])}")
        return c if hosts is None else c.with_devices(hosts=hosts)

    @staticmethod
    def measure(devices=None, repeats=5, mpi=True, pipeline=True, ps=True):
        """This machine: one logical CPU device per core (or `devices`, which may exceed the cores:
        their compute then shares os.cpu_count() cores), each device's FLOP/s (our core's float32
        GEMM on one thread), the threads communicator's all-reduce fitted to α–β over 4 KB..64 MB,
        the whole all-reduce of 2, 4, .. and `devices` ranks (the collectives of that many devices),
        a copy's memory bandwidth, and the fixed cost of a step of 2, 4, .. and `devices`
        replicas (each timed in a child process). `mpi`: also, when mpirun and an MPI build are
        there, the MPI all-reduce of 2, 4, .. `devices` processes and their step's fixed cost
        (mpirun children, a few seconds each). `pipeline`: the per-message and per-step cost of a
        two-stage pipeline (a child). `ps`: the parameter-server transport (ZeroMQ on loopback,
        pull and push at 4 KB..16 MB) and a one-weight step on a LocalCluster (a child), a few
        seconds (ps_probe.py). On a loaded machine the figures
        are what the load leaves."""
        from mdtrain import _core  # the extension: not needed for presets
        n = devices if devices is not None else (os.cpu_count() or 1)
        if n < 1:
            raise ValueError(f"Cluster.measure: devices must be >= 1, got {n}")
        flops = measure_core_gemm_flops(repeats)
        speedup = measure_concurrent_speedup(os.cpu_count() or 1)
        bandwidth = _measure_copy_bandwidth(repeats)
        mem = _physical_memory_bytes() / n
        counts = sorted({2 ** i for i in range(1, n.bit_length()) if 2 ** i <= n} | ({n} if n > 1 else set()))
        collectives = {k: measure_threads_collectives(_core, repeats, k, ("all_reduce", "reduce", "broadcast"))
                       for k in sorted(set(counts) | {2})}
        link = link_of_all_reduce(collectives[2]["all_reduce"], 2)
        overhead = tuple((k, _measure_replica_step_overhead(k)) for k in counts)
        processes, mpi_source = (), "MPI not measured (mpi=False)"
        if mpi:
            from mdtrain.plan.probes import measure_mpi_processes
            processes, mpi_source = measure_mpi_processes(counts)
        message_s = step_s = None
        if pipeline:
            from mdtrain.plan.probes import measure_pipeline_messages
            message_s, step_s = measure_pipeline_messages()
        ps_pull = ps_push = None
        ps_source = "parameter-server transport not measured (ps=False)"
        ps_step = None
        if ps:
            from mdtrain.plan.ps_probe import measure_ps_step, measure_ps_transport
            ps_pull, ps_push, ps_source = measure_ps_transport(repeats)
            if ps_pull is not None:  # without the transport (no ZeroMQ) no LocalCluster runs either
                ps_step, step_source = measure_ps_step()
                ps_source = f"{ps_source}; {step_source}"
        return Cluster(replica_step_overhead=overhead, name="this-machine", hosts=1, devices_per_host=n,
                       cores=os.cpu_count() or 1, concurrent_speedup=speedup,
                       threads_all_reduce=tuple((k, collectives[k]["all_reduce"]) for k in counts),
                       threads_reduce=tuple((k, collectives[k]["reduce"]) for k in counts),
                       threads_broadcast=tuple((k, collectives[k]["broadcast"]) for k in counts),
                       mpi_processes=processes,
                       mpi_source=mpi_source,
                       pipeline_message_s=message_s, pipeline_step_overhead_s=step_s,
                       ps_transport=ps_pull, ps_push=ps_push, ps_source=ps_source, ps_step_overhead=ps_step,
                       peak_flops=flops, memory_bytes=mem,
                       memory_bandwidth=bandwidth, intra_host=link, inter_host=link,
                       overlaps_communication=False, device_kind="CPU",
                       source=f"this machine, measured: {os.cpu_count()} cores, the core's one-thread GEMM, "
                              f"threads-communicator all-reduce fit; {mpi_source}; {ps_source}")

    def __str__(self):
        return (f"{self.name}: {self.hosts} host(s) x {self.devices_per_host} {self.device_kind}(s), "
                f"{self.peak_flops / 1e12:.3g} TFLOP/s and {self.memory_bytes / _GB:.3g} GB each, "
                f"intra-host {self.intra_host.bandwidth / _GB:.3g} GB/s + {self.intra_host.alpha * 1e6:.3g} us, "
                f"inter-host {self.inter_host.bandwidth / _GB:.3g} GB/s + {self.inter_host.alpha * 1e6:.3g} us"
                + (f", compute on {self.cores} cores" if self.cores is not None else "")
                + (f" ({self.concurrent_speedup:.2f}x one thread's GEMM work when all run at once: replayed on "
                   f"{self.effective_cores})"
                   if self.concurrent_speedup is not None else "")
                + "".join(f", threads {what} x{n}: {ab.alpha * 1e6:.3g} us + {ab.bandwidth / _GB:.3g} GB/s"
                          for what, fits in (("all-reduce", self.threads_all_reduce), ("reduce", self.threads_reduce),
                                             ("broadcast", self.threads_broadcast))
                          for n, ab in fits)
                + "".join(f", {n} replicas' step {s * 1e3:.3g} ms" for n, s in self.replica_step_overhead)
                + "".join(f", MPI x{n}: all-reduce {ab.alpha * 1e6:.3g} us + {ab.bandwidth / _GB:.3g} GB/s, "
                          f"step {s * 1e3:.3g} ms" for n, ab, s in self.mpi_processes)
                + (f", pipeline message {self.pipeline_message_s * 1e6:.3g} us, step "
                   f"{self.pipeline_step_overhead_s * 1e3:.3g} ms" if self.pipeline_message_s is not None else "")
                + (f", PS pull {self.ps_transport.alpha * 1e6:.3g} us + {self.ps_transport.bandwidth / _GB:.3g} GB/s"
                   if self.ps_transport is not None else "")
                + (f", PS push (with the server's SGD apply) {self.ps_push.alpha * 1e6:.3g} us + "
                   f"{self.ps_push.bandwidth / _GB:.3g} GB/s" if self.ps_push is not None else "")
                + (f", PS worker step besides them {self.ps_step_overhead.alpha * 1e6:.3g} us + "
                   f"{self.ps_step_overhead.bandwidth / _GB:.3g} GB/s of batch" if self.ps_step_overhead is not None
                   else "")
                + f" [{self.source}]")


def measure_core_gemm_flops(repeats=5, n=512):
    """FLOP/s of one device of this machine: our core's float32 GEMM on one thread (what each
    replica gets while several run; the BLAS itself is single-threaded)."""
    from mdtrain import _core
    with core_threads(1):
        _core.time_gemm(n, n, n, 1)  # warm-up
        seconds = _core.time_gemm(n, n, n, repeats)
    return 2.0 * n ** 3 / seconds


def measure_concurrent_speedup(threads, n=256, calls=100, repeats=5):
    """How much one-thread GEMM work `threads` threads running at once get done, relative to one
    thread alone (the median of `repeats` rounds each): `threads` on an idle machine with that many
    cores, less when other processes hold cores. The core's GEMM releases the GIL."""
    from mdtrain import _core
    if threads <= 1:
        return 1.0

    def work():
        for _ in range(calls):
            _core.time_gemm(n, n, n, 1)

    def wall(k):
        ts = [threading.Thread(target=work) for _ in range(k)]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return time.perf_counter() - t

    with core_threads(1):
        work()  # warm-up
        ratios = [threads * wall(1) / wall(threads) for _ in range(repeats)]
    return float(min(threads, max(1.0, np.median(ratios))))


def _measure_copy_bandwidth(repeats, nbytes=64 << 20):
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2.0 * nbytes / best  # read + write


def measure_threads_collectives(core, repeats, ranks, ops=("all_reduce",)):
    """{op: MeasuredTransfer} of whole collectives of `ranks` ranks of the threads communicator
    (one Python thread per rank; the C++ call releases the GIL) for each op of
    collective_timer.COLLECTIVES in `ops`, read through the median of `repeats` rounds at each
    size: a step pays the typical collective, not the best (the best of 5 put the heavy MLP's
    23 MB all-reduce at 0.8-1 ms on 2 ranks; its median reads 1.65 ms, and the ZeRO-1 step's
    collectives measure 1.7-2.5 ms). From 16 MB each call is timed from memory, as a step meets a
    gradient that large (collective_timer.py). With more ranks than cores it includes what the
    oversubscription costs (a rank waits for a peer that has no core)."""
    comms = core.make_communicators("threads", ranks)
    # Up to 64 MB: the models' gradients are tens of MB, which stream from memory, not from the
    # caches that hold the 4 MB buffers (a fit of 4 KB..4 MB put the heavy MLP's ZeRO-1
    # reduce-scatter + all-gather of 23 MB at a fifth of the communication its step measured).
    sizes = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    times = {op: {} for op in ops}

    def run(rank):
        for op in ops:
            for s in sizes:
                seconds = time_collective(comms[rank], s, repeats, 20 if s <= 4 << 20 else 4, op)
                if rank == 0:
                    times[op][s] = seconds

    threads = [threading.Thread(target=run, args=(r,)) for r in range(1, ranks)]
    for th in threads:
        th.start()
    run(0)
    for th in threads:
        th.join()
    return {op: measured_transfer(sizes, [times[op][s] for s in sizes]) for op in ops}


def link_of_all_reduce(fit, ranks):
    """One point-to-point transfer's α–β from a whole ring all-reduce's: the fit divided back
    through the ring's 2(n-1) messages and 2(n-1)/n of the bytes."""
    steps = 2 * (ranks - 1)
    return AlphaBeta(fit.alpha / steps, fit.beta * ranks / steps)


_OVERHEAD_SCRIPT = r"""
import sys
import mdtrain as tf
from mdtrain.plan.one_weight_step import best_step
n = int(sys.argv[1])
print("PROBE", best_step(tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)]).scope(), n))
"""


def _measure_replica_step_overhead(replicas):
    """The step time of `replicas` replicas of a one-weight model (their work is nothing, so the
    step is the cost of running a step across replica threads), in a child process split into
    that many logical CPU devices."""
    import sys

    from mdtrain.plan.probes import probe_env, run_probe
    text, failure = run_probe([sys.executable, "-c", _OVERHEAD_SCRIPT, str(replicas)],
                              probe_env(MDTRAIN_NUM_CPU_DEVICES=str(replicas)), timeout=300)
    if text is None:
        raise RuntimeError(f"Cluster.measure: timing a {replicas}-replica step {failure}")
    return float(text)


def _physical_memory_bytes():
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8.0 * _GB


def _gbps(gigabits):
    return gigabits * 1e9 / 8


# Published figures. Peak dense FLOP/s are for the precision the planner scales by (our core
# trains in float32: TF32 tensor-core peaks for A100/H100, FP32 for V100), without sparsity.
_PRESETS = {
    "dgx-h100": Cluster(
        name="dgx-h100", hosts=1, devices_per_host=8, peak_flops=494.7e12, memory_bytes=80 * _GB,
        memory_bandwidth=3.35e12,
        intra_host=AlphaBeta(alpha=3e-6, beta=1 / (450 * _GB)),
        inter_host=AlphaBeta(alpha=5e-6, beta=1 / _gbps(400)),
        overlaps_communication=True,
        source="8x H100 SXM (TF32 dense 494.7 TFLOP/s, 80 GB HBM3 3.35 TB/s), NVLink 4 (900 GB/s "
               "bidirectional = 450 GB/s per direction), 400 Gb/s InfiniBand NDR per GPU — NVIDIA "
               "datasheet figures; latencies are typical, not from the datasheet"),
    "dgx-a100": Cluster(
        name="dgx-a100", hosts=1, devices_per_host=8, peak_flops=156e12, memory_bytes=80 * _GB,
        memory_bandwidth=2.039e12,
        intra_host=AlphaBeta(alpha=3e-6, beta=1 / (300 * _GB)),
        inter_host=AlphaBeta(alpha=5e-6, beta=1 / _gbps(200)),
        overlaps_communication=True,
        source="8x A100 SXM 80GB (TF32 dense 156 TFLOP/s, 2.039 TB/s), NVLink 3 (600 GB/s "
               "bidirectional), 200 Gb/s InfiniBand HDR per GPU — NVIDIA datasheet figures; latencies "
               "typical"),
    "v100-25gbe": Cluster(
        name="v100-25gbe", hosts=1, devices_per_host=8, peak_flops=15.7e12, memory_bytes=16 * _GB,
        memory_bandwidth=0.9e12,
        intra_host=AlphaBeta(alpha=5e-6, beta=1 / (150 * _GB)),
        inter_host=AlphaBeta(alpha=25e-6, beta=1 / _gbps(25)),
        overlaps_communication=True,
        source="8x V100 SXM2 16GB (FP32 15.7 TFLOP/s, 900 GB/s), NVLink 2 (300 GB/s bidirectional), "
               "25 Gb/s Ethernet between hosts (the Horovod paper's network; its servers held 4 Pascal GPUs, "
               "see published_record.horovod_cluster) — NVIDIA datasheet figures; "
               "latencies typical"),
}
