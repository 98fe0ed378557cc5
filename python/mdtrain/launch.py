"""python -m mdtrain.launch -n N [--devices-per-worker D] script.py [args...]
python -m mdtrain.launch --ps P --workers W script.py [args...]

Starts a job on this machine, for people who do not want to set it up by hand.

With -n: N workers of a MultiWorkerMirroredStrategy job, through mpirun. Each worker runs
`python script.py args...`; with --devices-per-worker each splits its CPU into D logical devices
(MDTRAIN_NUM_CPU_DEVICES). On a cluster, use your MPI launcher (mpirun -H ..., srun) directly: the
strategy reads the rank and size from it.

With --ps/--workers: a ParameterServerStrategy job: P parameter-server and W worker tasks on
loopback ports, then the script runs as the chief with TF_CONFIG naming the cluster (so
TFConfigClusterResolver() resolves it, as in TF). Tasks that die while the chief runs are
started again (--max-restarts each); the tasks end with the chief, whose exit status is ours.
The job gets a secret of its own (MDTRAIN_JOB_SECRET, a 0600 file) that the tasks and the chief
share. SIGINT, SIGTERM and SIGHUP stop the chief and every task (exit status 128 + the signal);
if the launcher is killed outright, the tasks and the chief end by themselves.
"""
import argparse
import os
import shutil
import signal
import sys

# One machine's worth: every worker and task is a process (and a worker's devices are threads);
# thousands of them started thread storms that every other job on the machine suffered.
MAX_LOCAL_PROCESSES = 256
MAX_DEVICES_PER_WORKER = 256  # mdtrain.config.MAX_CPU_DEVICES (not imported: the launcher loads no C++)
MAX_LOCAL_DEVICES = 1024  # -n x --devices-per-worker: the job's device threads
MAX_RESTARTS = 1000
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_CHIEF_GRACE_SECONDS = 10.0  # a chief that ignores SIGTERM this long is killed


def mpirun_command(num_workers, script_argv, devices_per_worker=None, mpirun="mpirun", python=None,
                   extra_mpi_args=(), env=None):
    """The mpirun command line that starts the job (separate from main() so it can be tested)."""
    env = os.environ if env is None else env
    cmd = [mpirun, "-n", str(num_workers)]
    # Workers are processes: allow more of them than cores, and let root run them (containers).
    cmd += ["--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    if devices_per_worker is not None:
        cmd += ["-x", f"MDTRAIN_NUM_CPU_DEVICES={devices_per_worker}"]
    for name in ("PYTHONPATH", "MDTRAIN_DATA", "MDTRAIN_CPU_THREADS", "OMP_NUM_THREADS"):
        if name in env:
            cmd += ["-x", name]
    cmd += list(extra_mpi_args)
    cmd += [python or sys.executable, *script_argv]
    return cmd


class _Stopped(BaseException):
    """A stop signal arrived (BaseException: no `except Exception` on the way swallows it)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def run_parameter_server_job(num_ps, num_workers, script_argv, max_restarts=3, log_dir=None):
    """Starts the tasks, runs the script as the chief, stops the tasks; returns the chief's exit
    status, or 128 + the signal that stopped the job (SIGINT, SIGTERM, SIGHUP)."""
    import json
    import subprocess

    from mdtrain._ps.local_cluster import LocalCluster, ends_with_this_process

    # The first stop signal raises _Stopped wherever the main thread is (starting tasks, waiting
    # for the chief); later ones are ignored so the cleanup itself runs to its end.
    armed = [True]

    def on_signal(signum, frame):
        if armed[0]:
            armed[0] = False
            raise _Stopped(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    cluster = chief = None
    status = 1
    try:
        cluster = LocalCluster(num_ps, num_workers, max_restarts=max_restarts, log_dir=log_dir)
        cluster.wait_until_serving()
        print(f"launch: ParameterServerStrategy job: {json.dumps(cluster.cluster)}", file=sys.stderr, flush=True)
        chief = subprocess.Popen([sys.executable, *script_argv], env=cluster.chief_env(),
                                 preexec_fn=ends_with_this_process())
        code = chief.wait()
        status = 128 - code if code < 0 else code  # killed by a signal: the shell's convention
    except _Stopped as stopped:
        status = 128 + stopped.signum
        print(f"launch: {signal.Signals(stopped.signum).name}: stopping the chief and every task", file=sys.stderr,
              flush=True)
    finally:
        while True:  # a first signal landing here, before the cleanup ran, runs it again
            try:
                armed[0] = False
                _stop_chief(chief)
                if cluster is not None:
                    cluster.stop()
                break
            except _Stopped as stopped:
                status = 128 + stopped.signum
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _stop_chief(chief):
    import subprocess

    if chief is None or chief.poll() is not None:
        return
    chief.terminate()
    try:
        chief.wait(_CHIEF_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        chief.kill()
        chief.wait()


def _bounded_count(name, maximum, why, minimum=None):
    """An argparse type: an integer of at most `maximum` (and at least `minimum`), else an error naming
    the flag and the limit."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{name} must be at most {maximum} ({why}), got {value}")
        return value

    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mdtrain.launch", description=__doc__.split("\n\n")[2])
    processes = "processes on one machine"
    parser.add_argument("-n", "--num-workers", type=_bounded_count("-n", MAX_LOCAL_PROCESSES, processes, 1),
                        default=None, help="MultiWorkerMirroredStrategy: number of worker processes (mpirun)")
    parser.add_argument("--ps", type=_bounded_count("--ps", MAX_LOCAL_PROCESSES, processes), default=None,
                        help="ParameterServerStrategy: number of parameter servers")
    parser.add_argument("--workers", type=_bounded_count("--workers", MAX_LOCAL_PROCESSES, processes), default=None,
                        help="ParameterServerStrategy: number of workers")
    parser.add_argument("--max-restarts", type=_bounded_count("--max-restarts", MAX_RESTARTS, "restarts per task", 0),
                        default=3, help="ParameterServerStrategy: times a task that dies is started again (default 3)")
    parser.add_argument("--log-dir", default=None, help="ParameterServerStrategy: write each task's log here")
    parser.add_argument("--devices-per-worker",
                        type=_bounded_count("--devices-per-worker", MAX_DEVICES_PER_WORKER,
                                            "logical CPU devices, one thread each, per worker", 1),
                        default=None,
                        help="logical CPU devices (replicas) per worker (default: MDTRAIN_NUM_CPU_DEVICES or 1)")
    parser.add_argument("--mpirun", default=os.environ.get("MDTRAIN_MPIRUN", "mpirun"),
                        help="the MPI launcher to use (default: mpirun)")
    parser.add_argument("script", help="the Python script each worker runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    args = parser.parse_args(argv)
    if args.ps is not None or args.workers is not None:
        if args.num_workers is not None:
            parser.error("-n (MultiWorkerMirroredStrategy) and --ps/--workers (ParameterServerStrategy) exclude "
                         "each other")
        if args.ps is None or args.workers is None or args.ps < 1 or args.workers < 1:
            parser.error(f"a parameter-server job needs --ps >= 1 and --workers >= 1, got --ps {args.ps} "
                         f"--workers {args.workers}")
        if args.ps + args.workers > MAX_LOCAL_PROCESSES:
            parser.error(f"--ps + --workers must be at most {MAX_LOCAL_PROCESSES} (processes on one machine), got "
                         f"--ps {args.ps} --workers {args.workers}")
        return run_parameter_server_job(args.ps, args.workers, [args.script, *args.args], args.max_restarts,
                                        args.log_dir)
    if args.num_workers is None:
        parser.error("give -n N (MultiWorkerMirroredStrategy) or --ps P --workers W (ParameterServerStrategy)")
    if args.num_workers * (args.devices_per_worker or 1) > MAX_LOCAL_DEVICES:
        parser.error(f"-n x --devices-per-worker must be at most {MAX_LOCAL_DEVICES} (device threads on one "
                     f"machine), got -n {args.num_workers} --devices-per-worker {args.devices_per_worker}")
    if shutil.which(args.mpirun) is None:
        parser.error(f"'{args.mpirun}' was not found: install Open MPI (Debian: apt-get install openmpi-bin "
                     "libopenmpi-dev) and reinstall mdtrain so it is built with MPI")
    cmd = mpirun_command(args.num_workers, [args.script, *args.args], args.devices_per_worker, args.mpirun)
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)  # the job's exit status is the launcher's


if __name__ == "__main__":
    sys.exit(main())
