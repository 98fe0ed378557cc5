#!/usr/bin/env python3
"""Optimizer update benchmark: one step's update of the seed model's 101,770 float32 parameters.

Configures and builds bench/cpp/optimizer_update_bench (cmake -DMDTRAIN_BENCH=ON in build-bench/)
and runs it: for SGD (plain, momentum, Nesterov), Adam (plain, AMSGrad), AdamW, RMSprop (plain,
centered with momentum) and Adagrad it prints microseconds per update of the old per-parameter
loops (a verbatim copy of the code before the optimizer ops) and of Optimizer::apply over the
optimizer ops on one thread and on the intra-op team, measured in the same run, and the ratios.

    python bench/optimizer_update.py [--updates N] [--build-dir DIR]

Timings need the cores to themselves: on a busy machine the intra-op team's threads wait for a
core and the split column means nothing.
"""
import argparse
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
    parser.add_argument("--updates", type=int, default=3000, help="updates timed per column")
    args = parser.parse_args()

    build = pathlib.Path(args.build_dir)
    configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DMDTRAIN_BENCH=ON"]
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    run(configure)
    run(["cmake", "--build", build, "-j2", "--target", "optimizer_update_bench"])
    exe = next((p for p in build.rglob("optimizer_update_bench") if p.is_file() and os.access(p, os.X_OK)), None)
    if exe is None:
        sys.exit(f"optimizer_update_bench was not built under {build}")
    run([exe, "--updates", args.updates])


if __name__ == "__main__":
    main()
