"""The one configurable resource: where releases and the warehouse are, and every metric parameter."""


import os
from pathlib import Path
from typing import Literal

import dagster as dg
import duckdb
import pydantic

from pipelines.models import sql_string
from pipelines.release.sample import ensure_sample
from pipelines.settings import DEFAULT_WAREHOUSE, ENV_REGISTRY, ENV_RELEASES, ENV_WAREHOUSE, ENV_WORKERS
from pipelines.warehouse_db import DEFAULT_MEMORY_LIMIT, DEFAULT_STORAGE_VERSION, ENV_MEMORY_LIMIT, ENV_STORAGE_VERSION

ENV_SENSOR_INTERVAL = "GRPO_SENSOR_INTERVAL"
ENV_SETTLE_SECONDS = "GRPO_SETTLE_SECONDS"


class WarehouseConfig(dg.ConfigurableResource):
    """Paths and parameters of the warehouse; `from_env()` reads them from GRPO_* environment variables."""

    releases: list[str] = []  # release folders; none means the bundled sample release
    warehouse_dir: str = DEFAULT_WAREHOUSE
    registries: list[str] = []  # registry CSVs overriding the bundled one, later ones win
    max_file_bytes: int = 64 * 2**20
    workers: int = 0  # processes for the ingest and the figures; 0 means one per core
    sample_seed: int = 0
    sensor_interval_seconds: int = 30  # how often the release sensor looks for new or changed files
    settle_seconds: int = 60  # a file whose mtime is this old is complete, even if seen only once
    duckdb_memory_limit: str = DEFAULT_MEMORY_LIMIT  # DuckDB's memory limit on the build database ("2GB", "512MB")
    # The storage version of warehouse.duckdb (and of the build database it is copied from): the oldest DuckDB
    # version that can open it, such as "v1.0.0" or "v1.4.0".
    duckdb_storage_version: str = DEFAULT_STORAGE_VERSION
    # Metric parameters (CONTRACT.md), visible to the SQL as getvariable('<name>').
    ema_weight: float = 0.9
    rolling_window: int = 20
    final_window: int = 50
    bootstrap_reps: int = 2000
    bootstrap_seed: int = 20260101
    ci_level: float = 0.95
    # How intervals are computed (docs/statistics.md): "ar1" holds on autocorrelated curves; "iid" is the plain
    # bootstrap of the window's epochs, too narrow on them, kept to reproduce earlier numbers.
    ci_method: Literal["ar1", "iid"] = "ar1"
    ci_fit_epochs: int = 200  # the epochs up to the horizon the ar1 model is fitted to
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
            raise ValueError(f"{version!r} is not a DuckDB version this DuckDB can write files for "
                             f"(such as {DEFAULT_STORAGE_VERSION} or v{duckdb.__version__})") from None
        return version

    @classmethod
    def from_env(cls, **overrides) -> "WarehouseConfig":
        values: dict = {}
        if os.environ.get(ENV_RELEASES):
            values["releases"] = [p for p in os.environ[ENV_RELEASES].split(os.pathsep) if p]
        if os.environ.get(ENV_WAREHOUSE):
            values["warehouse_dir"] = os.environ[ENV_WAREHOUSE]
        if os.environ.get(ENV_REGISTRY):
            values["registries"] = [os.environ[ENV_REGISTRY]]
        if os.environ.get(ENV_WORKERS):
            values["workers"] = int(os.environ[ENV_WORKERS])
        if os.environ.get(ENV_SENSOR_INTERVAL):
            values["sensor_interval_seconds"] = int(os.environ[ENV_SENSOR_INTERVAL])
        if os.environ.get(ENV_SETTLE_SECONDS):
            values["settle_seconds"] = int(os.environ[ENV_SETTLE_SECONDS])
        if os.environ.get(ENV_MEMORY_LIMIT):
            values["duckdb_memory_limit"] = os.environ[ENV_MEMORY_LIMIT]
        if os.environ.get(ENV_STORAGE_VERSION):
            values["duckdb_storage_version"] = os.environ[ENV_STORAGE_VERSION]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def warehouse(self) -> Path:
        return Path(self.warehouse_dir).absolute()

    @property
    def sample_dir(self) -> Path:
        return self.warehouse / "sample_release"

    def release_roots(self) -> list[Path]:
        """The configured release folders, or the bundled sample release, written on first use."""
        if self.releases:
            return [Path(r).absolute() for r in self.releases]
        return [Path(p).absolute() for p in ensure_sample(self.sample_dir, seed=self.sample_seed)]

    def metric_parameters(self) -> dict:
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


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"warehouse": WarehouseConfig.from_env()})
