"""Every setting and parameter of the warehouse, declared once: name, type, bounds, default, what it does.

The resource's fields (defs/resources.py), their checks, the GRPO_* variables (settings.py), the names
`build --param` takes and that the SQL models read as getvariable('<name>'), and the tables of
docs/configuration.md all follow from DECLARED. Only the standard library is imported: `grpo-warehouse sql` reads it.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Parameter:
    """One setting: a GRPO_* variable sets it when it has one, else `build --param` does (a parameter, which the SQL
    models see as getvariable('<name>'))."""

    name: str
    default: bool | int | float | str | tuple[str, ...]  # a tuple: a list of paths
    what: str  # one line for the docs table (markdown) and the resource's field description
    variable: str = ""  # the GRPO_* environment variable that sets it
    low: float | None = None  # the least value allowed
    high: float | None = None  # the largest value allowed
    below_high: bool = False  # high itself is not allowed
    unit: str = ""  # what a whole number counts, named in a refusal
    choices: tuple[str, ...] = ()
    shown_default: str = ""  # the default as the docs say it, where the value itself does not
    separated: bool = False  # a list whose variable holds several paths, os.pathsep-separated

    def problem(self, value) -> str | None:
        """Why a value cannot be used (after `must be`...), or None."""
        if isinstance(self.default, float) and not math.isfinite(value):
            return f"must be a finite number, not {value}"
        if type(self.default) is int and not -(2**63) <= value < 2**63:  # SQL reads it as a BIGINT
            return f"must be a 64-bit integer, from {-(2**63)} to {2**63 - 1}, not {value}"
        if self.low is not None and self.high is not None:
            if self.below_high and not self.low <= value < self.high:
                return f"must be {self.low:g} or more and below {self.high:g}, not {value}"
            if not self.low <= value <= self.high:
                return f"must be between {self.low:g} and {self.high:g}, not {value}"
        elif self.low is not None and value < self.low:
            unit = f" ({self.unit})" if self.unit else ""
            return f"must be {self.low:g} or more{unit}, not {value}"
        return None

    @property
    def reading(self) -> str:
        """How its variable's text becomes its value: "paths", "path", "whole" or "text"."""
        if isinstance(self.default, tuple):
            return "paths" if self.separated else "path"
        return "whole" if isinstance(self.default, int) else "text"

    def shown(self) -> str:
        """The default as the docs table says it."""
        if self.shown_default:
            return self.shown_default
        return f"`{self.default}`" if isinstance(self.default, str) else str(self.default)


_SETTINGS = (
    Parameter(
        "releases",
        (),
        "release folders or [bucket prefixes](scale-out.md#releases-in-a-bucket), `:`-separated",
        variable="GRPO_RELEASES",
        shown_default="the bundled sample release",
        separated=True,
    ),
    Parameter(
        "warehouse_dir",
        "warehouse",
        "the warehouse folder: `warehouse.duckdb`, the lake, the exports",
        variable="GRPO_WAREHOUSE_DIR",
        shown_default="`./warehouse`",
    ),
    Parameter(
        "lake_dir",
        "",
        "the Parquet lake: a folder or a [bucket prefix](scale-out.md#the-lake-in-a-bucket)",
        variable="GRPO_LAKE_DIR",
        shown_default="`<warehouse>/lake`",
    ),
    Parameter(
        "registries",
        (),
        "a CSV of run attributes overriding the bundled registry and what run names tell",
        variable="GRPO_REGISTRY",
        shown_default="none",
    ),
    Parameter(
        "workers",
        0,
        "processes for the ingest and for drawing the figures",
        variable="GRPO_WORKERS",
        low=0,
        unit="ingest processes; 0: one per core",
        shown_default="one per core",
    ),
    Parameter(
        "duckdb_memory_limit",
        "512MB",  # a 100x release builds in under 1 GiB in all; raise it for speed
        "DuckDB's memory limit while building the models; it spills to `<warehouse>/.build/tmp` beyond it",
        variable="GRPO_DUCKDB_MEMORY_LIMIT",
    ),
    Parameter(
        "duckdb_storage_version",
        "v1.0.0",
        "DuckDB storage version of `warehouse.duckdb`: the oldest DuckDB that opens it "
        "([below](#opening-warehouseduckdb-in-other-duckdb-clients))",
        variable="GRPO_DUCKDB_STORAGE_VERSION",
    ),
    Parameter(
        "quiet_seconds",
        3600,
        "how long after its last write (ctime) a run counts as quiet; `0`: at once; negative: never "
        "([refresh.md](refresh.md#quiet-runs))",
        variable="GRPO_QUIET_SECONDS",
    ),
    Parameter(
        "sensor_interval_seconds",
        30,
        "seconds between two looks of the release sensor at the releases",
        variable="GRPO_SENSOR_INTERVAL",
        low=1,
        unit="seconds",
    ),
    Parameter(
        "settle_seconds",
        60,
        "a file whose mtime is this old is taken by the sensor even if seen only once "
        "([refresh.md](refresh.md#live-refresh))",
        variable="GRPO_SETTLE_SECONDS",
        low=0,
        unit="seconds",
    ),
    Parameter(
        "executor",
        "in_process",
        "where run partitions are ingested: `in_process` (this process and its pool) or `dask` "
        "([scale-out.md](scale-out.md))",
        variable="GRPO_EXECUTOR",
        choices=("in_process", "dask"),
    ),
    Parameter(
        "dask_address",
        "",
        "the Dask scheduler, `tcp://host:8786`; needed with `GRPO_EXECUTOR=dask`",
        variable="GRPO_DASK_ADDRESS",
        shown_default="none",
    ),
    Parameter(
        "partitions_per_run",
        25,
        "with `GRPO_EXECUTOR=dask`, run partitions per Dagster run "
        "([scale-out.md](scale-out.md#run-partitions-on-a-dask-cluster))",
        variable="GRPO_PARTITIONS_PER_RUN",
        low=1,
        unit="run partitions",
    ),
)

_PARAMETERS = (
    # At 1 the average never moves from its start: no value is a curve's.
    Parameter("ema_weight", 0.9, "weight of the debiased EMA (`reward_ema`), below 1", low=0, high=1, below_high=True),
    Parameter(
        "rolling_window",
        20,
        "loaded epochs in `reward_rolling`, and the figure's trailing window",
        low=1,
        unit="epochs",
    ),
    Parameter("final_window", 50, "loaded epochs in `final_reward` and `matched_reward`", low=1, unit="epochs"),
    Parameter(
        "ci_method",
        "structural",
        "how intervals are computed ([statistics.md](statistics.md)): `structural` (trend or walk + autocorrelated "
        "drift + noise, t quantile: false claims within target), `reml` (too many false claims on slowly varying "
        "curves), `ar1` (by moments, worse) or `iid` (epochs taken as independent, too narrow)",
        choices=("structural", "reml", "ar1", "iid"),
    ),
    Parameter(
        "ci_fit_epochs",
        200,
        "loaded epochs at or before the horizon that the models are fitted to (a contrast's: the two runs' common "
        "epochs); `structural` backs no claim on fewer than 50 for a contrast or 100 for a run's interval "
        "([statistics.md](statistics.md#short-runs)); at least 5 and `final_window`",
        low=5,  # a quadratic trend and two lags: no model is fitted to fewer epochs
        unit="epochs",
    ),
    Parameter(
        "ci_level",
        0.95,
        "level of every interval (runs' matched reward, contrasts) and of the figure's band: 0.5 or more, below 1",
        low=0.5,  # a narrower interval backs no claim, yet would mark contrasts resolved
        high=1,
        below_high=True,
    ),
    Parameter(
        "pairwise_arms",
        20,
        "an ablation of at most this many arms compares every pair; a larger one, each arm with its `baseline`, else "
        "with its best arm",
        low=2,
        unit="arms",
    ),
    Parameter("breakdown_window", 50, "epochs per window of `reward_breakdowns`", low=1, unit="epochs"),
    Parameter(
        "snapshot_model_prefix", "claude-haiku-4-5-20251001-", "prefix of a snapshot's model name in `snapshots`"
    ),
    Parameter(
        "advantage_tolerance",
        1e-3,
        "slack allowed in a group's advantage normalisation (`group_metrics`)",
        low=0,
        shown_default="1e-3",
    ),
    Parameter(
        "reward_tolerance",
        1e-6,
        "slack between the reported and recomputed mean reward (`reported_mean_reward_matches`)",
        low=0,
        shown_default="1e-6",
    ),
    Parameter(
        "max_file_bytes",
        64 * 2**20,
        "a larger epoch file is quarantined unread (`file_too_large`)",
        low=1,
        unit="bytes",
        shown_default="64 MiB",
    ),
    Parameter("sample_seed", 0, "seed of the bundled sample release", low=0),
    Parameter(
        "transcript_text",
        False,
        "keep the transcripts' messages as text in the lake, for SQL search (`trajectory_transcripts.text`); it costs "
        "disk ([metrics.md](metrics.md#transcripts))",
    ),
)

DECLARED: dict[str, Parameter] = {parameter.name: parameter for parameter in _SETTINGS + _PARAMETERS}
# The parameters: what `build --param NAME=VALUE` sets and the SQL models read as getvariable('<name>').
PARAMETERS: tuple[str, ...] = tuple(parameter.name for parameter in _PARAMETERS)


def variable_of(name: str) -> str:
    """The GRPO_* variable that sets a setting."""
    return DECLARED[name].variable


def docs_tables() -> dict[str, str]:
    """The tables of docs/configuration.md made from the declarations, by the name of their marker."""
    variables = ["| variable | default | what |", "| --- | --- | --- |"] + [
        f"| `{p.variable}` | {p.shown()} | {p.what} |" for p in _SETTINGS
    ]
    parameters = ["| parameter | default | what |", "| --- | --- | --- |"] + [
        f"| `{p.name}` | {p.shown()} | {p.what} |" for p in _PARAMETERS
    ]
    return {"variables": "\n".join(variables), "parameters": "\n".join(parameters)}


_GENERATED = re.compile(r"(<!-- generated: (\w+) -->\n)(?:.*?\n)??(<!-- end generated -->)", re.DOTALL)


def with_docs_tables(text: str) -> str:
    """A docs page with each generated table (between `<!-- generated: NAME -->` and `<!-- end generated -->`) made
    again from the declarations."""
    tables = docs_tables()
    return _GENERATED.sub(lambda match: f"{match.group(1)}{tables[match.group(2)]}\n{match.group(3)}", text)


if __name__ == "__main__":  # python -m pipelines.parameters docs/configuration.md: writes the tables again
    for page in map(Path, sys.argv[1:]):
        page.write_text(with_docs_tables(page.read_text()))
