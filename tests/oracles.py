"""Reference computations the tests compare the warehouse with, written out from their definitions."""

import math


def tensorboard_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar smoothing (debiased EMA), transcribed from its dashboard code."""
    last, count, out = 0.0, 0, []
    for y in values:
        if y is None or not math.isfinite(y):
            out.append(y)
            continue
        last = last * weight + (1 - weight) * y
        count += 1
        out.append(last / (1 - weight**count) if weight != 1 else last)
    return out
