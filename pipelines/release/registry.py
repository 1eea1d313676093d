"""Run attributes (dim_runs): a registry CSV where one is given, what the run's name tells otherwise."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from pipelines.release.discover import RunFolder
from pipelines.settings import ConfigError

BUNDLED_REGISTRY = Path(__file__).with_name("registry.csv")
DEFAULT_GROUP_SIZE = 8
RUN_COLUMNS = {
    "run_id": pl.String,
    "release": pl.String,
    "reward_family": pl.String,
    "fp_per_group": pl.Int64,
    "group_size": pl.Int64,
    "ablation": pl.String,
    "label": pl.String,
    # The configuration a run is one seed of: runs of one arm are resampled as a unit in ablation_contrasts.
    "arm": pl.String,
    "release_root": pl.String,
}
REGISTRY_COLUMNS = [c for c in RUN_COLUMNS if c not in ("release", "release_root")]
_FP_IN_NAME = re.compile(r"(?:^|_)(\d+)fp(?=_|$)")
_FAMILY_IN_NAME = (
    (re.compile(r"(?:^|_)binary(?=_|$|\d)"), "binary"),
    (re.compile(r"(?:^|_)pw(?=_|$)"), "iterative_pairwise"),
)


class RegistryError(ConfigError):
    """A registry CSV that cannot be used; the message names the file and the problem."""


def infer_from_name(run_id: str) -> dict:
    """What a run id says about its run, e.g. `_4fp` means four false-positive control targets per group."""
    fp = _FP_IN_NAME.findall(run_id)
    family = next((name for pattern, name in _FAMILY_IN_NAME if pattern.search(run_id)), None)
    return {"reward_family": family, "fp_per_group": int(fp[-1]) if fp else None}


def read_registry(path: Path) -> pl.DataFrame:
    """A registry CSV with run_id and any of the other registry columns, typed."""
    try:
        frame = pl.read_csv(path, infer_schema=False)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise RegistryError(f"{path}: cannot read the registry: {exc}") from None
    if "run_id" not in frame.columns:
        raise RegistryError(f"{path}: the registry has no `run_id` column (columns: {', '.join(frame.columns)})")
    unknown = [c for c in frame.columns if c not in REGISTRY_COLUMNS]
    if unknown:
        raise RegistryError(f"{path}: unknown registry column(s) {', '.join(unknown)}; expected {', '.join(REGISTRY_COLUMNS)}")
    duplicated = frame.filter(pl.col("run_id").is_duplicated())["run_id"].unique().to_list()
    if duplicated:
        raise RegistryError(f"{path}: run(s) listed twice: {', '.join(sorted(duplicated))}")
    casts = []
    for column in frame.columns:
        expr = pl.col(column).str.strip_chars().replace("", None)
        if RUN_COLUMNS[column] == pl.Int64:
            expr = expr.cast(pl.Int64, strict=False)
        casts.append(expr.alias(column))
    typed = frame.select(casts)
    for column in frame.columns:
        bad = frame.filter(pl.col(column).str.strip_chars().replace("", None).is_not_null() & typed[column].is_null())
        if bad.height:
            raise RegistryError(f"{path}: `{column}` is not a whole number for run {bad['run_id'][0]!r}: {bad[column][0]!r}")
    return typed


def build_dim_runs(runs: Sequence[RunFolder], registries: Sequence[Path] = ()) -> pl.DataFrame:
    """One row per run folder: later registries override earlier ones, column by column; names fill the rest."""
    rows = [
        {
            "run_id": run.run_id,
            "release": run.release,
            **infer_from_name(run.run_id),
            "group_size": None,
            "ablation": None,
            "label": None,
            "arm": None,
            "release_root": str(run.release_root),
        }
        for run in runs
    ]
    dim = pl.DataFrame(rows, schema=RUN_COLUMNS)
    for path in (BUNDLED_REGISTRY, *registries):
        registry = read_registry(path)
        overrides = [c for c in registry.columns if c != "run_id"]
        dim = (
            dim.join(registry.rename({c: f"{c}__override" for c in overrides}), on="run_id", how="left")
            .with_columns(pl.coalesce(f"{c}__override", c).alias(c) for c in overrides)
            .drop(f"{c}__override" for c in overrides)
        )
    return dim.with_columns(
        pl.col("group_size").fill_null(DEFAULT_GROUP_SIZE),
        pl.col("ablation").fill_null(pl.col("release")),
        pl.col("label").fill_null(pl.col("run_id")),
        pl.col("arm").fill_null(pl.col("run_id")),
    ).select(list(RUN_COLUMNS)).sort("run_id")
