"""A configuration (dim_runs' arm, whose runs are its seeds) as the exports show it: its name, and the interquartile
mean of its runs' values."""

from __future__ import annotations

import numpy as np
import polars as pl


def iqm(values: list[float]) -> float | None:
    """The interquartile mean: the mean of the values left after dropping floor(n/4) at each end, as rliable's."""
    ordered = sorted(values)
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut]
    return float(np.mean(middle)) if middle else None


def configuration_name(arm: str, runs: pl.DataFrame) -> str:
    """A configuration's name, from its runs (dim_runs rows: run_id, label): the label of the run named like the arm,
    or of its one run, else the arm."""
    own = runs.filter(pl.col("run_id") == arm)
    named = own if own.height else runs if runs.height == 1 else None
    return named["label"][0] if named is not None and named["label"][0] else arm
