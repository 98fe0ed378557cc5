"""Reading a cost between the sizes it was measured at: piecewise-linear through the measured
points. A single line (a + b·size) cannot follow a cost whose slope changes with size: a layer's
BLAS blocking at a few rows, a collective's buffers falling out of the caches at a few MB."""
import numpy as np


def piecewise_linear(points, x):
    """Through the measured (size, seconds) points, sizes ascending; beyond the last point along
    the last segment's slope (never below the last point), below the first one the first point's
    time (a call on less is not cheaper than the smallest measured one's fixed costs)."""
    xs = [a for a, _ in points]
    ys = [t for _, t in points]
    if len(points) == 1 or x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
        return ys[-1] + slope * (x - xs[-1])
    return float(np.interp(x, xs, ys))
