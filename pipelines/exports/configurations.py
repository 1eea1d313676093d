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
    return configuration_names(runs.select("run_id", "label", arm=pl.lit(arm, pl.String))).get(arm, arm)


def configuration_names(runs: pl.DataFrame) -> dict[str, str]:
    """configuration_name of every configuration at once, by arm, from dim_runs rows (arm, run_id, label)."""
    own = pl.col("run_id") == pl.col("arm")
    named = (
        pl.when(own.any()).then(pl.col("label").filter(own).first()).when(pl.len() == 1).then(pl.col("label").first())
    )
    name = pl.when(named.fill_null("") != "").then(named).otherwise(pl.col("arm").first())
    names = runs.group_by("arm").agg(name=name)
    return dict(names.select("arm", "name").iter_rows())
