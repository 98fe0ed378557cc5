#!/usr/bin/env python3
"""GPU benchmarks of the CUDA backend, in one command on a machine with NVIDIA GPUs:

    python bench/gpu/run.py [gemm|epoch|fit|allreduce|all] [--arch native] [--build-dir DIR]

Builds bench/gpu/gpu_bench (cmake -DMDTRAIN_CUDA=ON -DMDTRAIN_BENCH=ON in build-bench-gpu/, device
code for this machine's GPUs), runs it, prints its tables and writes bench/results/gpu.json:
cuBLAS GEMM at the seed MLP's shapes against the sgemm peak measured in the same run, the epoch
time of the seed MLP on 1..N GPUs (the backend's ops, NCCL and fused Adam in a plain loop), fit
(Model::train_epoch under MirroredStrategy on 1..N GPUs: the seed MLP and the Fashion-MNIST CNN,
with the communication left exposed after backward for 25 MB and 1 MB gradient buckets), and
NCCL all-reduce bus bandwidth. Without nvcc or without a GPU it says so and exits with status 2.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=["all", "gemm", "epoch", "fit", "allreduce"])
    parser.add_argument("--build-dir", default=str(ROOT / "build-bench-gpu"))
    parser.add_argument("--arch", default="native", help="CMAKE_CUDA_ARCHITECTURES (default: this machine's GPUs)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "gpu.json"))
    args = parser.parse_args()

    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if pathlib.Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not nvcc:
        print("bench/gpu: nvcc not found: the GPU benchmarks need the CUDA toolkit (and a GPU). Nothing was run.")
        return 2
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
    if not listed or listed.returncode != 0 or "GPU" not in listed.stdout:
        print("bench/gpu: no NVIDIA GPU here (nvidia-smi missing or lists none). Nothing was run: "
              "these benchmarks report GPU figures only from a GPU.")
        return 2

    build = pathlib.Path(args.build_dir)
    configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DMDTRAIN_BENCH=ON",
                 "-DMDTRAIN_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={args.arch}"]
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    subprocess.run(configure, check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "gpu_bench", "-j"], check=True)

    exe = build / "bench" / "gpu" / "gpu_bench"
    proc = subprocess.run([str(exe), args.what], capture_output=True, text=True)
    results = []
    for line in proc.stdout.splitlines():
        if line.startswith("json: "):
            results.append(json.loads(line[6:]))
        else:
            print(line)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return proc.returncode
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpus": listed.stdout.strip().splitlines(), "results": results}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
