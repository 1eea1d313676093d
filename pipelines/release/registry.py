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
    """A registry CSV with run_id and any of the other registry columns (REGISTRY_COLUMNS), typed and checked:
    group_size a positive whole number, fp_per_group a whole number from 0 to the group size. A RegistryError names
    the file, the CSV line and the problem."""
    try:
        # Read as bytes: polars would take `*`, `?` or `[` in the path as a pattern.
        frame = pl.read_csv(Path(path).read_bytes(), infer_schema=False)
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read the registry: {exc.strerror or exc}") from None
    except pl.exceptions.PolarsError as exc:
        raise RegistryError(f"{path}: not a CSV file: {str(exc).splitlines()[0]}") from None
    if "run_id" not in frame.columns:
        raise RegistryError(f"{path}: the registry has no `run_id` column (columns: {', '.join(frame.columns)})")
    unknown = [c for c in frame.columns if c not in REGISTRY_COLUMNS]
    if unknown:
        raise RegistryError(
            f"{path}: unknown registry column(s) {', '.join(unknown)}; known: {', '.join(REGISTRY_COLUMNS)}"
        )
    # Line numbers as a person counts them in the file: the header is line 1.
    frame = frame.with_row_index("line", offset=2)
    typed = frame.select("line", *(_typed(column) for column in frame.columns if column != "line"))
    _check_rows(path, frame, typed)
    return typed.drop("line")


def _typed(column: str) -> pl.Expr:
    expr = pl.col(column).str.strip_chars().replace("", None)
    return (expr.cast(pl.Int64, strict=False) if RUN_COLUMNS[column] == pl.Int64 else expr).alias(column)


def _check_rows(path: Path, frame: pl.DataFrame, typed: pl.DataFrame) -> None:
    """Raises RegistryError at the first line with a problem."""

    def refuse(rows: pl.DataFrame, problem: str) -> None:
        if rows.height:
            row = rows.row(0, named=True)
            raise RegistryError(f"{path}, line {row['line']}: {problem.format(**row)}")

    refuse(typed.filter(pl.col("run_id").is_null()), "no run_id")
    refuse(
        typed.filter(~pl.col("run_id").is_first_distinct()), "run {run_id!r} is listed twice (this is its second line)"
    )
    for column in [c for c in typed.columns if c != "line" and RUN_COLUMNS[c] == pl.Int64]:
        written = frame[column].str.strip_chars().replace("", None)
        refuse(
            frame.filter(written.is_not_null() & typed[column].is_null()),
            f"`{column}` of run {{run_id!r}} is not a whole number: {{{column}!r}}",
        )
    if "group_size" in typed.columns:
        refuse(
            typed.filter(pl.col("group_size") < 1), "`group_size` of run {run_id!r} must be 1 or more, not {group_size}"
        )
    if "fp_per_group" in typed.columns:
        size = pl.col("group_size") if "group_size" in typed.columns else pl.lit(None)
        refuse(
            typed.with_columns(size.fill_null(DEFAULT_GROUP_SIZE).alias("size")).filter(
                (pl.col("fp_per_group") < 0) | (pl.col("fp_per_group") > pl.col("size"))
            ),
            "`fp_per_group` of run {run_id!r} must be from 0 to its group size, {size}, not {fp_per_group}",
        )


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
    return (
        dim.with_columns(
            pl.col("group_size").fill_null(DEFAULT_GROUP_SIZE),
            pl.col("ablation").fill_null(pl.col("release")),
            pl.col("label").fill_null(pl.col("run_id")),
            pl.col("arm").fill_null(pl.col("run_id")),
        )
        .select(list(RUN_COLUMNS))
        .sort("run_id")
    )
