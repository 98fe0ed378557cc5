"""tf.print.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
import builtins
import sys

import numpy as np

from mdtrain._eager.variables import Variable
from mdtrain._eager.tensor import EagerTensor


# ---- tf.print --------------------------------------------------------------------------------

def _print_text(value, summarize):
    if isinstance(value, str):
        return value
    if isinstance(value, Variable):
        value = value._snapshot()
    if isinstance(value, EagerTensor):
        array = value._value
        if array.ndim == 0:
            item = array[()]
            return item.decode() if isinstance(item, bytes) else str(item)
        edge = 3 if summarize is None else (sys.maxsize if summarize < 0 else int(summarize))
        threshold = sys.maxsize if edge == sys.maxsize else 2 * edge
        return np.array2string(array, separator=" ", threshold=threshold, edgeitems=builtins.max(edge, 1))
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_print_text(v, summarize) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_print_text(k, summarize)}: {_print_text(v, summarize)}"
                               for k, v in value.items()) + "}"
    return str(value)


def print(*inputs, output_stream=None, summarize=3, sep=" ", end="\n", name=None):  # noqa: A001 - tf.print
    """Prints tensors (summarized to `summarize` items per edge) and Python values, to stderr by
    default, or to output_stream: sys.stdout, sys.stderr, a file object or "file://<path>"."""
    text = sep.join(_print_text(v, summarize) for v in inputs) + end
    stream = sys.stderr if output_stream is None else output_stream
    if isinstance(stream, str):
        if not stream.startswith("file://"):
            raise ValueError(f"tf.print: output_stream must be a stream or 'file://<path>', got {stream!r}")
        with open(stream[len("file://"):], "a") as f:
            f.write(text)
        return None
    if callable(stream) and not hasattr(stream, "write"):
        stream(text.rstrip("\n"))  # a logging function (logging.info, ...)
        return None
    stream.write(text)
    stream.flush() if hasattr(stream, "flush") else None
    return None
