"""Unique default names, as Keras gives them: dense, dense_1, dense_2, ..."""
import collections
import re

_counts = collections.Counter()


def to_snake_case(name):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()  # Keras: Conv2D -> conv2d


def unique_name(prefix):
    n = _counts[prefix]
    _counts[prefix] += 1
    return prefix if n == 0 else f"{prefix}_{n}"


def reset():
    _counts.clear()
