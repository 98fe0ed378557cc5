"""Small probes of this machine's per-step costs that the layer timer and the threads link do not
see, each timed in child processes (so the caller's process, its devices and MPI stay untouched):

- MPI between worker processes (MultiWorkerMirroredStrategy): under `mpirun -n k`, all-reduces of
  the MPI communicator at 4 KB..64 MB (the median of 5 rounds of 10, rank 0's clock; from 16 MB
  10 single calls from memory, collective_timer.py), read
  piecewise-linearly (alpha_beta.MeasuredTransfer), and the step of a one-weight model under
  MultiWorkerMirroredStrategy (one_weight_step.py: what a step of k workers costs besides their
  work). With k processes on fewer cores, both
  include the oversubscription (MPI waits by polling).
- Pipeline messages: a two-stage PipelineParallel of a one-weight model at 2 and 16
  micro-batches. Its step grows by one send and one wake-up of a waiting stage thread per
  message (2 per micro-batch on 2 stages: an activation and a gradient), so the per-message cost
  is the difference of the two steps over the difference of their message counts, and the step's
  fixed cost what is left at 2 micro-batches. Both are this probe's measurement, not fitted to
  any model's table."""
import json
import os
import shutil
import subprocess
import sys
import time

from mdtrain.plan.alpha_beta import measured_transfer

# Up to 64 MB, as the threads all-reduce (cluster.py): a 25 MiB gradient bucket streams from memory,
# and the 4 KB..16 MB points' last segment extrapolated to the heavy MLP's 23 MB put its 4-process
# step 24 % under.
MPI_SIZES = (4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)

_MPI_SCRIPT = r"""
import json, sys
import mdtrain as tf
from mdtrain import _core
from mdtrain.plan.collective_timer import COLD_BYTES, time_collective
from mdtrain.plan.one_weight_step import best_step
sizes = [int(s) for s in sys.argv[1].split(",")]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
k = strategy.num_replicas_in_sync
step = best_step(strategy.scope(), k)
comm = _core.make_communicators("mpi")[0]
times = [time_collective(comm, s, 5, 10 if s < COLD_BYTES else 2) for s in sizes]
if comm.rank == 0:
    print("PROBE " + json.dumps({"ranks": comm.size, "sizes": sizes, "seconds": times, "step": step}))
"""


def probe_env(**extra):
    """The environment of a probe child: this one's, the caller's sys.path as PYTHONPATH (the
    child imports this mdtrain, not another installed one), and `extra`."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)


def run_probe(cmd, env, timeout):
    """Runs a probe child `cmd` under `env` (probe_env); (the text after its "PROBE " line, None),
    or (None, how it failed: "timed out after ..." / "failed: " and the end of its output)."""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")), None)
    if proc.returncode != 0 or line is None:
        return None, f"failed: {(proc.stderr or proc.stdout)[-300:]}"
    return line[len("PROBE "):], None


def mpi_available():
    from mdtrain import _core
    return shutil.which("mpirun") is not None and _core.mpi_available()


def measure_mpi_processes(counts, timeout=180):
    """((k, AlphaBeta of a k-rank all-reduce, a k-worker step's fixed seconds), ...) for each k in
    `counts`, and a sentence saying where they come from (or why they are missing)."""
    if not mpi_available():
        return (), "MPI not measured (no mpirun or no MPI build)"
    from mdtrain import launch
    out = []
    for k in counts:
        env = probe_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = launch.mpirun_command(k, ["-c", _MPI_SCRIPT, ",".join(str(s) for s in MPI_SIZES)],
                                    devices_per_worker=1, env=env)
        text, failure = run_probe(cmd, env, timeout)
        if text is None:
            return tuple(out), f"MPI probe of {k} processes {failure}"
        r = json.loads(text)
        out.append((k, measured_transfer(r["sizes"], r["seconds"]), float(r["step"])))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return tuple(out), (f"MPI measured {stamp} under mpirun -n {'/'.join(str(k) for k in counts)} "
                        f"(all-reduce 4 KB..64 MB, one-weight MultiWorkerMirrored step)")


_PIPELINE_SCRIPT = r"""
import mdtrain as tf
from mdtrain.plan.one_weight_step import best_step
dist = tf.keras.distribution
out = [best_step(dist.PipelineParallel(dist.DeviceMesh((2,), ("pipe",)), m, schedule="gpipe").scope(), 16,
                 layers=2, steps=100) for m in (2, 16)]
print("PROBE", out[0], out[1])
"""


def measure_pipeline_messages(timeout=180):
    """(seconds per message between two stages, a two-stage pipeline step's fixed seconds), or
    (None, None) when the probe fails."""
    text, _ = run_probe([sys.executable, "-c", _PIPELINE_SCRIPT], probe_env(MDTRAIN_NUM_CPU_DEVICES="2"), timeout)
    if text is None:
        return None, None
    few, many = (float(v) for v in text.split())
    messages_few, messages_many = 2 * 2, 2 * 16  # an activation and a gradient per micro-batch
    per_message = max(0.0, (many - few) / (messages_many - messages_few))
    return per_message, max(0.0, few - per_message * messages_few)
