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
"""
import argparse
import os
import shutil
import sys


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


def run_parameter_server_job(num_ps, num_workers, script_argv, max_restarts=3, log_dir=None):
    """Starts the tasks, runs the script as the chief, stops the tasks; returns the chief's exit status."""
    import json
    import subprocess

    from mdtrain._ps.local_cluster import LocalCluster

    with LocalCluster(num_ps, num_workers, max_restarts=max_restarts, log_dir=log_dir) as cluster:
        cluster.wait_until_serving()
        env = dict(os.environ, TF_CONFIG=cluster.tf_config("chief", 0))
        print(f"launch: ParameterServerStrategy job: {json.dumps(cluster.cluster)}", file=sys.stderr, flush=True)
        return subprocess.call([sys.executable, *script_argv], env=env)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mdtrain.launch", description=__doc__.split("\n\n")[2])
    parser.add_argument("-n", "--num-workers", type=int, default=None,
                        help="MultiWorkerMirroredStrategy: number of worker processes (mpirun)")
    parser.add_argument("--ps", type=int, default=None, help="ParameterServerStrategy: number of parameter servers")
    parser.add_argument("--workers", type=int, default=None, help="ParameterServerStrategy: number of workers")
    parser.add_argument("--max-restarts", type=int, default=3,
                        help="ParameterServerStrategy: times a task that dies is started again (default 3)")
    parser.add_argument("--log-dir", default=None, help="ParameterServerStrategy: write each task's log here")
    parser.add_argument("--devices-per-worker", type=int, default=None,
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
        return run_parameter_server_job(args.ps, args.workers, [args.script, *args.args], args.max_restarts,
                                        args.log_dir)
    if args.num_workers is None:
        parser.error("give -n N (MultiWorkerMirroredStrategy) or --ps P --workers W (ParameterServerStrategy)")
    if args.num_workers < 1:
        parser.error(f"-n must be at least 1, got {args.num_workers}")
    if args.devices_per_worker is not None and args.devices_per_worker < 1:
        parser.error(f"--devices-per-worker must be at least 1, got {args.devices_per_worker}")
    if shutil.which(args.mpirun) is None:
        parser.error(f"'{args.mpirun}' was not found: install Open MPI (Debian: apt-get install openmpi-bin "
                     "libopenmpi-dev) and reinstall mdtrain so it is built with MPI")
    cmd = mpirun_command(args.num_workers, [args.script, *args.args], args.devices_per_worker, args.mpirun)
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)  # the job's exit status is the launcher's


if __name__ == "__main__":
    sys.exit(main())
