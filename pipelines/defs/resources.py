"""The one configurable resource: where releases and the warehouse are, and every metric parameter."""

import math
import socket
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import dagster as dg
import duckdb
import pydantic

from pipelines.lake.manifest import DEFAULT_QUIET_SECONDS
from pipelines.lake_store import LakePath, lake_problem, lake_root
from pipelines.models import sql_string
from pipelines.release.discover import RunFolder, SkippedEntry, find_run_folders, release_problem
from pipelines.release.registry import read_registry
from pipelines.release.sample import ensure_sample, sample_folder_problem
from pipelines.settings import (
    DEFAULT_WAREHOUSE,
    ENVIRONMENT,
    OBJECT_SCHEME,
    ConfigError,
    read_environment,
    release_location,
)
from pipelines.warehouse_db import (
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_STORAGE_VERSION,
    duckdb_path_problem,
    hold_build_db,
    lake_dir,
    open_build_db,
)

# Lower bounds of the whole-number settings, and the text that says what they count.
_AT_LEAST = {
    "max_file_bytes": (1, "bytes"),
    "workers": (0, "ingest processes; 0: one per core"),
    "sensor_interval_seconds": (1, "seconds"),
    "settle_seconds": (0, "seconds"),
    "rolling_window": (1, "epochs"),
    "final_window": (1, "epochs"),
    "bootstrap_reps": (1, "replicates"),
    "breakdown_window": (1, "epochs"),
    "partitions_per_run": (1, "run partitions"),
}


class WarehouseConfig(dg.ConfigurableResource):
    """Paths and parameters of the warehouse; `from_env()` builds it from flags and GRPO_* environment variables."""

    releases: list[str] = []  # release folders; none means the bundled sample release
    warehouse_dir: str = DEFAULT_WAREHOUSE
    # Where the Parquet lake is: a folder, or a bucket prefix s3://bucket/prefix (docs/scale-out.md); empty means
    # <warehouse_dir>/lake. The DuckDB files stay in warehouse_dir either way.
    lake_dir: str = ""
    registries: list[str] = []  # registry CSVs overriding the bundled one, later ones win
    max_file_bytes: int = 64 * 2**20
    workers: int = 0  # processes for the ingest and the figures; 0 means one per core
    sample_seed: int = 0
    sensor_interval_seconds: int = 30  # how often the release sensor looks for new or changed files
    settle_seconds: int = 60  # a file whose mtime is this old is complete, even if seen only once
    quiet_seconds: int = DEFAULT_QUIET_SECONDS  # a run last written to this long ago is settled from its folder stamps
    remove_releases: list[str] = []  # releases whose runs may all leave the warehouse (pipelines.removals)
    duckdb_memory_limit: str = DEFAULT_MEMORY_LIMIT  # DuckDB's memory limit on the build database ("2GB", "512MB")
    # The storage version of warehouse.duckdb (and of the build database it is copied from): the oldest DuckDB
    # version that can open it, such as "v1.0.0" or "v1.4.0".
    duckdb_storage_version: str = DEFAULT_STORAGE_VERSION
    # Where the run partitions of the lake are ingested (docs/scale-out.md): "in_process", in this process and its
    # pool of ingest processes; "dask", as Dagster runs of partitions_per_run partitions each whose steps run on
    # the workers of the Dask scheduler at dask_address (tcp://host:8786). The models stay in this process.
    executor: Literal["in_process", "dask"] = "in_process"
    dask_address: str = ""
    partitions_per_run: int = 25
    # Metric parameters (CONTRACT.md), visible to the SQL as getvariable('<name>').
    ema_weight: float = 0.9
    rolling_window: int = 20
    final_window: int = 50
    bootstrap_reps: int = 2000
    bootstrap_seed: int = 20260101
    ci_level: float = 0.95
    # How intervals are computed (docs/statistics.md): "reml" fits a trend + AR(1) drift + noise model by its exact
    # restricted likelihood and holds on autocorrelated curves up to slow drift; "ar1" fits the same model by
    # moments, with more power but too many false claims at slow drift; "iid" is the plain bootstrap of the
    # window's epochs, too narrow on them, for comparison with tools that report it.
    ci_method: Literal["ar1", "reml", "iid"] = "reml"
    ci_fit_epochs: int = 200  # the epochs up to the horizon the reml and ar1 models are fitted to
    breakdown_window: int = 50
    snapshot_model_prefix: str = "claude-haiku-4-5-20251001-"
    # Data checks: slack allowed in group advantage normalisation (group_metrics) and between the reported and
    # recomputed mean reward (the reported_mean_reward_matches check).
    advantage_tolerance: float = 1e-3
    reward_tolerance: float = 1e-6

    @pydantic.field_validator("duckdb_storage_version")
    @classmethod
    def _known_storage_version(cls, version: str) -> str:
        try:
            with duckdb.connect() as con:
                con.execute(f"attach ':memory:' as probe (storage_version {sql_string(version)})")
        except duckdb.Error:
            raise ValueError(
                f"{version!r} is not a DuckDB version this DuckDB can write files for "
                f"(such as {DEFAULT_STORAGE_VERSION} or v{duckdb.__version__})"
            ) from None
        return version

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> "WarehouseConfig":
        """The configuration from GRPO_* variables (settings.ENVIRONMENT) and the given overrides (flags; None is
        not given), checked (check): a bad value raises ConfigError, before any work starts."""
        given = {name: value for name, value in overrides.items() if value is not None}
        values = read_environment(environ, skip=given)
        try:
            config = cls(**{**values, **given})
        except pydantic.ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise ConfigError(f"{_named(field)}: {error['msg'].removeprefix('Value error, ')}") from None
        config.check()
        return config

    def check(self) -> None:
        """Raises ConfigError, naming the setting, for a value no build can use; reads no file."""
        for name, (least, unit) in _AT_LEAST.items():
            if getattr(self, name) < least:
                raise ConfigError(f"{_named(name)} must be {least} or more ({unit}), not {getattr(self, name)}")
        for name in ("ema_weight", "ci_level", "advantage_tolerance", "reward_tolerance"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, not {getattr(self, name)}")
        if not 0 <= self.ema_weight <= 1:
            raise ConfigError(f"ema_weight must be between 0 and 1, not {self.ema_weight}")
        if not 0 < self.ci_level < 1:
            raise ConfigError(f"ci_level must be between 0 and 1 (exclusive), not {self.ci_level}")
        if self.advantage_tolerance < 0 or self.reward_tolerance < 0:
            raise ConfigError("advantage_tolerance and reward_tolerance must be 0 or more")
        _check_memory_limit(self.duckdb_memory_limit)
        _check_executor(self.executor, self.dask_address)
        if problem := duckdb_path_problem(self.warehouse):
            raise ConfigError(f"the warehouse path {self.warehouse} {problem}: choose another folder")

    def check_paths(self) -> None:
        """Raises ConfigError for a release, registry or warehouse folder the build cannot use: called before a
        build starts, as the files may change between builds."""
        for release in self.releases:
            if problem := release_problem(release_location(release)):
                raise ConfigError(problem)
        for registry in self.registries:
            read_registry(Path(registry))  # RegistryError (a ConfigError) names the file, the line and the problem
        if not self.releases and (problem := sample_folder_problem(self.sample_dir)):
            raise ConfigError(problem)
        _check_writable(self.warehouse)
        if self.lake_dir.startswith(OBJECT_SCHEME):
            if problem := lake_problem(self.lake_dir):
                raise ConfigError(problem)
        elif self.lake_dir:
            _check_writable(self.lake, "lake")
        if self.executor == "dask":
            _check_reachable(self.dask_address)

    @property
    def warehouse(self) -> Path:
        return Path(self.warehouse_dir).absolute()

    def build_db(self, read_only: bool = False):
        """The warehouse's build database (warehouse_db.open_build_db), with this configuration's memory limit and
        storage version: a context manager yielding the connection."""
        return open_build_db(
            self.warehouse,
            read_only=read_only,
            memory_limit=self.duckdb_memory_limit,
            storage_version=self.duckdb_storage_version,
        )

    def hold_build_db(self):
        """The build database kept open by this process from its first use until the block ends
        (warehouse_db.hold_build_db)."""
        return hold_build_db(self.warehouse)

    @property
    def lake(self) -> LakePath:
        """The lake: lake_dir (a folder made absolute, or a bucket prefix), or the folder lake in the warehouse."""
        if not self.lake_dir:
            return lake_dir(self.warehouse)
        return lake_root(release_location(self.lake_dir))

    @property
    def sample_dir(self) -> Path:
        return self.warehouse / "sample_release"

    def release_roots(self) -> list[Path | str]:
        """The configured release folders (a bucket's release as its s3:// URL), or the bundled sample release, written
        on first use."""
        if self.releases:
            return [r if r.startswith(OBJECT_SCHEME) else Path(r).absolute() for r in self.releases]
        return [Path(p).absolute() for p in ensure_sample(self.sample_dir, seed=self.sample_seed)]

    def find_runs(self) -> tuple[dict[str, RunFolder], list[SkippedEntry], list[str]]:
        """The run folders of the releases (find_run_folders), the warehouse folder never among them."""
        return find_run_folders(self.release_roots(), warehouse=self.warehouse)

    def metric_parameters(self) -> dict:
        """The parameters the SQL models read with getvariable(), by name."""
        return {
            "ema_weight": self.ema_weight,
            "rolling_window": self.rolling_window,
            "final_window": self.final_window,
            "bootstrap_reps": self.bootstrap_reps,
            "bootstrap_seed": self.bootstrap_seed,
            "ci_level": self.ci_level,
            "ci_method": self.ci_method,
            "ci_fit_epochs": self.ci_fit_epochs,
            "breakdown_window": self.breakdown_window,
            "snapshot_model_prefix": self.snapshot_model_prefix,
            "advantage_tolerance": self.advantage_tolerance,
        }


# The fields `build --param NAME=VALUE` sets: the metric and check parameters, which have no flag or variable of
# their own (docs/configuration.md lists them).
PARAMETERS = (
    "ema_weight",
    "rolling_window",
    "final_window",
    "ci_method",
    "ci_fit_epochs",
    "bootstrap_reps",
    "bootstrap_seed",
    "ci_level",
    "breakdown_window",
    "snapshot_model_prefix",
    "advantage_tolerance",
    "reward_tolerance",
    "max_file_bytes",
    "sample_seed",
)


def _named(field: str) -> str:
    """A field as the user set it: with its environment variable, if it has one."""
    variable = next((name for name, (set_field, _) in ENVIRONMENT.items() if set_field == field), None)
    return f"{field} ({variable})" if variable else field


def _check_memory_limit(limit: str) -> None:
    try:
        duckdb.connect(config={"memory_limit": limit}).close()
    except duckdb.Error:
        raise ConfigError(
            f"{_named('duckdb_memory_limit')} {limit!r} is not a DuckDB memory size such as 512MB or 2GB"
        ) from None


def _check_executor(executor: str, dask_address: str) -> None:
    if executor != "dask":
        return
    if not dask_address:
        raise ConfigError(
            f"{_named('executor')} dask needs the scheduler's address: set {_named('dask_address')} to tcp://host:8786"
        )
    try:
        import dagster_dask  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"{_named('executor')} dask needs dagster-dask and distributed: pip install 'grpo-warehouse[scale-out]'"
        ) from None


def _check_reachable(address: str) -> None:
    """Raises ConfigError unless something accepts a connection at the scheduler's host and port."""
    parts = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port or 8786
        socket.create_connection((parts.hostname or "", port), timeout=10).close()
    except ValueError:
        raise ConfigError(f"{_named('dask_address')} {address!r} is not an address such as tcp://host:8786") from None
    except OSError as exc:
        raise ConfigError(
            f"{_named('dask_address')} {address}: no Dask scheduler answers there ({exc.strerror or exc})"
        ) from None


def _check_writable(folder: Path, what: str = "warehouse") -> None:
    """Raises ConfigError unless the folder (the warehouse's, or the lake's) is one this process can create and
    write files in."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"the {what} {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write in the {what} folder {folder}: {exc.strerror or exc}") from None
