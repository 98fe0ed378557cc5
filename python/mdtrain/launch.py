"""python -m mdtrain.launch -n N [--devices-per-worker D] script.py [args...]

Starts N workers of a MultiWorkerMirroredStrategy job on this machine through mpirun, for people
who do not know it. Each worker runs `python script.py args...`; with --devices-per-worker each
splits its CPU into D logical devices (MDTRAIN_NUM_CPU_DEVICES). On a cluster, use your MPI
launcher (mpirun -H ..., srun) directly: the strategy reads the rank and size from it.
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mdtrain.launch", description=__doc__.split("\n\n")[1])
    parser.add_argument("-n", "--num-workers", type=int, required=True, help="number of worker processes")
    parser.add_argument("--devices-per-worker", type=int, default=None,
                        help="logical CPU devices (replicas) per worker (default: MDTRAIN_NUM_CPU_DEVICES or 1)")
    parser.add_argument("--mpirun", default=os.environ.get("MDTRAIN_MPIRUN", "mpirun"),
                        help="the MPI launcher to use (default: mpirun)")
    parser.add_argument("script", help="the Python script each worker runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    args = parser.parse_args(argv)
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
