"""Run attributes (dim_runs): a registry CSV where one is given, what the run's name tells otherwise."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from pipelines.release.decode import utf16_text
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
    # The arm is its ablation's baseline: an ablation of many arms has its contrasts against it (contrast_pairs).
    "baseline": pl.Boolean,
    "release_root": pl.String,
}
REGISTRY_COLUMNS = [c for c in RUN_COLUMNS if c not in ("release", "release_root")]
# A trailing seed number: `_s3`, `_s003`, `-s3`, `_seed3`, `-seed3`, `_seed_3`, `-seed-3` (any case). Runs whose names
# differ only by it are seeds of one configuration, named by what comes before it.
SEED_SUFFIX = re.compile(r"(?P<config>.+)[_-](?:s|seed[_-]?)(?P<seed>[0-9]+)", re.IGNORECASE)
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


def seed_of(name: str) -> tuple[str, int | None]:
    """A run's (or release's) configuration name and seed number: `mt3_2fp_s001` is seed 1 of `mt3_2fp`; a name
    without a seed suffix is its own configuration, seed None."""
    match = SEED_SUFFIX.fullmatch(name)
    return (match["config"], int(match["seed"])) if match else (name, None)


def read_registry(path: Path) -> pl.DataFrame:
    """A registry CSV with run_id and any of the other registry columns (REGISTRY_COLUMNS), typed and checked:
    group_size a positive whole number, fp_per_group a whole number from 0 to the group size. A RegistryError names
    the file, the CSV line and the problem."""
    try:
        # Read as bytes: polars would take `*`, `?` or `[` in the path as a pattern.
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read the registry: {exc.strerror or exc}") from None
    if utf16_text(data):
        raise RegistryError(f"{path}: the registry is UTF-16 or UTF-32 text; save it as UTF-8")
    header = next(csv.reader([data.split(b"\n", 1)[0].decode("utf-8-sig", "replace")]), [])
    if repeated := sorted({name.strip() for name in header if header.count(name) > 1}):
        raise RegistryError(f"{path}: column(s) {', '.join(repeated)} appear more than once in the header")
    try:
        frame = pl.read_csv(data, infer_schema=False)
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


# How a registry writes a yes or a no (any case).
BOOLEAN_TEXT = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _typed(column: str) -> pl.Expr:
    expr = pl.col(column).str.strip_chars().replace("", None)
    if RUN_COLUMNS[column] == pl.Boolean:
        return expr.str.to_lowercase().replace_strict(BOOLEAN_TEXT, default=None, return_dtype=pl.Boolean).alias(column)
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
    for column in [c for c in typed.columns if c != "line" and RUN_COLUMNS[c] in (pl.Int64, pl.Boolean)]:
        written = frame[column].str.strip_chars().replace("", None)
        kind = "a whole number of 64 bits" if RUN_COLUMNS[column] == pl.Int64 else "true or false"
        refuse(
            frame.filter(written.is_not_null() & typed[column].is_null()),
            f"`{column}` of run {{run_id!r}} is not {kind}: {{{column}!r}}",
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
    """One row per run folder: later registries override earlier ones, column by column; names fill the rest.

    A registry row applies to the run it names and to the seeds of that configuration (runs named like it plus a seed
    suffix, SEED_SUFFIX), a run's own row first; a label taken from its configuration's row gets the seed number.
    Without a registry, a run's arm is its configuration and its ablation its arm's: the first (by run id) that a
    registry gives a run of the arm, else the first run's release folder name without its seed suffix."""
    rows = [
        {
            "run_id": run.run_id,
            "release": run.release,
            **infer_from_name(run.run_id),
            "group_size": None,
            "ablation": None,
            "label": None,
            "arm": None,
            "baseline": None,
            "release_root": str(run.release_root),
        }
        for run in runs
    ]
    configs = [(seed_of(run.run_id), seed_of(run.release)[0]) for run in runs]
    dim = pl.DataFrame(rows, schema=RUN_COLUMNS).with_columns(
        _config=pl.Series([config for (config, _), _ in configs], dtype=pl.String),
        _seed=pl.Series([seed for (_, seed), _ in configs], dtype=pl.Int64),
        _release_config=pl.Series([release for _, release in configs], dtype=pl.String),
    )
    for path in (BUNDLED_REGISTRY, *registries):
        dim = _override(dim, read_registry(path))
    return (
        dim.sort("run_id")
        .with_columns(
            pl.col("group_size").fill_null(DEFAULT_GROUP_SIZE),
            pl.col("label").fill_null(pl.col("run_id")),
            pl.col("arm").fill_null(pl.col("_config")),
            pl.col("baseline").fill_null(False),
        )
        .with_columns(
            pl.col("ablation")
            .fill_null(pl.col("ablation").drop_nulls().first().over("arm"))
            .fill_null(pl.col("_release_config").first().over("arm"))
        )
        .select(list(RUN_COLUMNS))
    )


def _override(dim: pl.DataFrame, registry: pl.DataFrame) -> pl.DataFrame:
    """dim with one registry's values where it has them: a run's own row first, then its configuration's."""
    overrides = [c for c in registry.columns if c != "run_id"]
    own = registry.rename({c: f"{c}__own" for c in overrides})
    of_config = registry.rename({"run_id": "_config", **{c: f"{c}__config" for c in overrides}})
    inherited = {c: pl.col(f"{c}__config") for c in overrides}
    if "label" in inherited:
        # null for a run without a seed number, which keeps the label as written
        with_seed = pl.concat_str(inherited["label"], pl.lit(" · seed "), pl.col("_seed"))
        inherited["label"] = pl.coalesce(with_seed, inherited["label"])
    return (
        dim.join(own, on="run_id", how="left")
        .join(of_config, on="_config", how="left")
        .with_columns(pl.coalesce(f"{c}__own", inherited[c], c).alias(c) for c in overrides)
        .drop(f"{c}__{source}" for c in overrides for source in ("own", "config"))
    )


def unmatched_registry_rows(runs: Sequence[RunFolder], registries: Sequence[Path]) -> list[str]:
    """One line per row of the given registries that names neither a run nor a configuration of one (a mistyped
    run id, or a run that is gone): the row is not used."""
    names = {name for run in runs for name in (run.run_id, seed_of(run.run_id)[0])}
    problems = []
    for path in registries:
        for line, run_id in enumerate(read_registry(path)["run_id"], start=2):
            if run_id not in names:
                problems.append(
                    f"{path}, line {line}: run {run_id!r} is not in any release (nor a configuration whose seeds "
                    "are); the row is not used"
                )
    return problems
