"""python -m mdtrain.plan MODEL_FILE --batch N [--cluster PRESET [--hosts H]]: the plans table."""
import argparse
import sys


def main(argv=None):
    from mdtrain import keras
    from mdtrain.plan import Cluster, plan
    parser = argparse.ArgumentParser(prog="python -m mdtrain.plan", description=__doc__.splitlines()[0])
    parser.add_argument("model_file", help="a saved model (.keras or .mdtrain)")
    parser.add_argument("--batch", type=int, required=True, help="global batch size")
    parser.add_argument("--cluster", default="this-machine",
                        help=f"a preset ({', '.join(Cluster.preset_names())}) or this-machine (measured)")
    parser.add_argument("--hosts", type=int, help="override the preset's number of hosts")
    args = parser.parse_args(argv)
    try:
        cluster = Cluster.preset(args.cluster, hosts=args.hosts)
        model = keras.models.load_model(args.model_file)
        print(plan(model, args.batch, cluster))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
