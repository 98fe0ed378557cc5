#!/usr/bin/env python3
"""All-reduce benchmark of the MPI communicator against plain MPI_Allreduce, in one run.

Configures and builds bench/cpp/allreduce_mpi_bench (cmake -DMDTRAIN_BENCH=ON -DMDTRAIN_MPI=ON in
build-bench/), runs it under `mpirun -np 2` and prints its table: float32 sum all-reduces of
1 KB..256 MB, mdtrain's time and bus bandwidth next to MPI_Allreduce's on the same buffers
(rounds alternate between the two; mdtrain's Tensor form, which skips the staging copies, is timed
in the same rounds), then the whole-step gradient sync of the seed model
(101,770 floats): one fused mdtrain all-reduce vs one MPI_Allreduce per gradient tensor. Writes
bench/results/allreduce_mpi.json.

    python bench/allreduce_mpi.py [--ranks 2] [--max-bytes N] [--chunk-bytes N] [--in-flight K]
                                  [--build-dir DIR] [-D CMAKE_DEFINE ...]

Both sides poll or spin: run it on an otherwise idle machine.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _common import machine  # noqa: E402


def run(cmd, env=None):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, env=env)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build-bench"))
    parser.add_argument("-D", dest="defines", action="append", default=[],
                        help="extra CMake definition, e.g. -D MDTRAIN_CUDA=OFF")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=1 << 10)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--chunk-bytes", type=int, help="MpiOptions::chunk_bytes (default: mdtrain's)")
    parser.add_argument("--in-flight", type=int, help="MpiOptions::chunks_in_flight")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "allreduce_mpi.json"))
    args = parser.parse_args()

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun was not found (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    build = pathlib.Path(args.build_dir)
    configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DMDTRAIN_BENCH=ON",
                 "-DMDTRAIN_MPI=ON"] + [f"-D{d}" for d in args.defines]
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    run(configure)
    run(["cmake", "--build", build, "-j2", "--target", "allreduce_mpi_bench"])
    exe = next((p for p in build.rglob("allreduce_mpi_bench") if p.is_file() and os.access(p, os.X_OK)), None)
    if exe is None:
        sys.exit(f"allreduce_mpi_bench was not built under {build}")

    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [mpirun, "-np", args.ranks]
    env = dict(os.environ)
    if "Open MPI" in subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if args.ranks > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")  # else each rank keeps its own core (bound)
    cmd += [exe, out, "--min-bytes", args.min_bytes, "--max-bytes", args.max_bytes, "--rounds", args.rounds]
    if args.chunk_bytes:
        cmd += ["--chunk-bytes", args.chunk_bytes]
    if args.in_flight:
        cmd += ["--in-flight", args.in_flight]
    run(cmd, env=env)

    result = json.loads(out.read_text())
    result["machine"] = machine()
    result["mpi"] = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out.write_text(json.dumps(result, indent=2) + "\n")

    rows = result["results"]
    big = [r for r in rows if r["bytes"] >= 1 << 20]
    if big:
        worst = min(big, key=lambda r: r["ratio"])
        print(f"\n>= 1 MB: mdtrain busbw / MPI_Allreduce busbw >= {worst['ratio']:.2f} "
              f"(at {worst['bytes'] >> 20} MB; target >= 0.90)")
        staged = [r["staged_over_tensor"] for r in big]
        print(f">= 1 MB: raw-pointer (staged) / Tensor form (zero-copy) time: "
              f"{min(staged):.2f}..{max(staged):.2f}")
    small = [r for r in rows if r["bytes"] < 1 << 20]
    if small:
        worst = min(small, key=lambda r: r["ratio"])
        print(f"< 1 MB: worst ratio {worst['ratio']:.2f} at {worst['bytes']} bytes "
              f"({worst['mdtrain_us']:.1f} us vs {worst['mpi_us']:.1f} us)")
    g = result["gradient_sync"]
    print(f"seed-model gradient sync: {g['mdtrain_fused_us']:.1f} us fused vs {g['mpi_per_tensor_us']:.1f} us "
          f"per tensor ({g['speedup_vs_per_tensor']:.2f}x)")
    print(f"result: {out}")


if __name__ == "__main__":
    main()
