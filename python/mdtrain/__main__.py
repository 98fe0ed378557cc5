"""python -m mdtrain --cmake-dir | --version | --info"""
import argparse
import sys

import mdtrain


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mdtrain")
    parser.add_argument("--cmake-dir", action="store_true", help="print the directory for find_package(mdtrain)")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--info", action="store_true", help="devices, backends and threads")
    args = parser.parse_args(argv)
    if args.cmake_dir:
        print(mdtrain.cmake_dir())
    elif args.version:
        print(mdtrain.__version__)
    else:
        print(f"mdtrain {mdtrain.__version__}")
        print("physical devices:", [d.name for d in mdtrain.config.list_physical_devices()])
        print("logical devices:", [d.name for d in mdtrain.config.list_logical_devices()])
        print("communicators:", mdtrain._core.available_communicators())
        print("intra-op threads:", mdtrain._core.cpu_thread_count())
        print("CUDA:", mdtrain._core.cuda_device_count() or mdtrain._core.cuda_unavailable_reason())
    return 0


if __name__ == "__main__":
    sys.exit(main())
