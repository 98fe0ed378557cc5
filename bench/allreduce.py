#!/usr/bin/env python3
"""All-reduce benchmark of the threads communicator.

Configures and builds bench/cpp/allreduce_bench (cmake -DMDTRAIN_BENCH=ON in build-bench/),
runs it for 2 and 4 ranks and message sizes 4 B and 1 KB..256 MB, prints its table (time,
algorithm and bus bandwidth next to one core's memcpy bandwidth measured in the same run) and
writes bench/results/allreduce.json.

    python bench/allreduce.py [--max-bytes N] [--ranks 2,4] [--build-dir DIR]

Spinning collectives need the cores to themselves: run it on an otherwise idle machine.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(cmd):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build-bench"))
    parser.add_argument("--ranks", default="2,4", help="comma-separated group sizes")
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "allreduce.json"))
    args = parser.parse_args()

    build = pathlib.Path(args.build_dir)
    configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DMDTRAIN_BENCH=ON"]
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    run(configure)
    run(["cmake", "--build", build, "-j2", "--target", "allreduce_bench"])

    exe = next((p for p in build.rglob("allreduce_bench") if p.is_file() and os.access(p, os.X_OK)), None)
    if exe is None:
        sys.exit(f"allreduce_bench was not built under {build}")
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    run([exe, out, "--ranks", args.ranks, "--max-bytes", args.max_bytes])

    results = json.loads(out.read_text())["results"]
    big = [r for r in results if r["bytes"] >= 4 << 20 and r["ranks"] == 2]
    small = [r for r in results if r["bytes"] == 4 and r["ranks"] == 2]
    if small:
        print(f"2 ranks, 4-byte all-reduce latency: {small[0]['time_us']:.2f} us (target <= 5 us)")
    if big:
        worst = min(r["busbw_over_memcpy"] for r in big)
        print(f"2 ranks, >= 4 MB: busbw / memcpy >= {worst:.2f} (target >= 0.50)")


if __name__ == "__main__":
    main()
