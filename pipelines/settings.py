"""Names the command line and the code location share: environment variables, defaults, the published file's path.

Nothing heavier than the standard library is imported here, so `grpo-warehouse sql` starts without Dagster or polars.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path

ENV_RELEASES = "GRPO_RELEASES"
ENV_WAREHOUSE = "GRPO_WAREHOUSE_DIR"
ENV_LAKE = "GRPO_LAKE_DIR"
ENV_REGISTRY = "GRPO_REGISTRY"
ENV_WORKERS = "GRPO_WORKERS"
DEFAULT_WAREHOUSE = "warehouse"
PUBLISHED_NAME = "warehouse.duckdb"


OBJECT_SCHEME = "s3://"  # a release or a lake under this is in an S3-compatible bucket (docs/scale-out.md)


def release_location(text: str) -> str:
    """A release as given: a bucket URL as it is, a folder made absolute."""
    return text if text.startswith(OBJECT_SCHEME) else str(Path(text).absolute())


def published_path(warehouse: Path) -> Path:
    """The DuckDB file readers open, inside a warehouse folder."""
    return Path(warehouse) / PUBLISHED_NAME


ENV_SENSOR_INTERVAL = "GRPO_SENSOR_INTERVAL"
ENV_SETTLE_SECONDS = "GRPO_SETTLE_SECONDS"
ENV_MEMORY_LIMIT = "GRPO_DUCKDB_MEMORY_LIMIT"
ENV_QUIET_SECONDS = "GRPO_QUIET_SECONDS"
ENV_STORAGE_VERSION = "GRPO_DUCKDB_STORAGE_VERSION"
ENV_EXECUTOR = "GRPO_EXECUTOR"
ENV_DASK_ADDRESS = "GRPO_DASK_ADDRESS"
ENV_PARTITIONS_PER_RUN = "GRPO_PARTITIONS_PER_RUN"
# Each variable: the configuration field it sets, and how its text becomes the field's value.
ENVIRONMENT = {
    ENV_RELEASES: ("releases", "paths"),
    ENV_WAREHOUSE: ("warehouse_dir", "text"),
    ENV_LAKE: ("lake_dir", "text"),
    ENV_REGISTRY: ("registries", "path"),
    ENV_WORKERS: ("workers", "whole"),
    ENV_SENSOR_INTERVAL: ("sensor_interval_seconds", "whole"),
    ENV_SETTLE_SECONDS: ("settle_seconds", "whole"),
    ENV_MEMORY_LIMIT: ("duckdb_memory_limit", "text"),
    ENV_QUIET_SECONDS: ("quiet_seconds", "whole"),
    ENV_STORAGE_VERSION: ("duckdb_storage_version", "text"),
    ENV_EXECUTOR: ("executor", "text"),
    ENV_DASK_ADDRESS: ("dask_address", "text"),
    ENV_PARTITIONS_PER_RUN: ("partitions_per_run", "whole"),
}


class ConfigError(ValueError):
    """A setting that cannot be used: the message names it and says why, on one line."""


def read_environment(environ: Mapping[str, str] | None = None, skip: Collection[str] = ()) -> dict:
    """The configuration fields set by GRPO_* variables of environ (default: this process's; an empty one counts as
    unset), leaving out the fields in skip (set otherwise, by a command-line flag): the one place the warehouse reads
    its environment."""
    environ = os.environ if environ is None else environ
    values: dict = {}
    for name, (field, kind) in ENVIRONMENT.items():
        text = environ.get(name, "")
        if not text or field in skip:
            continue
        if kind == "paths":
            # A separator followed by "//" is a URL's (s3://bucket/prefix), not one between two paths.
            values[field] = [part for part in re.split(f"{re.escape(os.pathsep)}(?!//)", text) if part]
        elif kind == "path":
            values[field] = [text]
        elif kind == "whole":
            try:
                values[field] = int(text.strip())
            except ValueError:
                raise ConfigError(f"{name}={text!r} is not a whole number") from None
        else:
            values[field] = text
    return values


def warehouse_dir(environ: Mapping[str, str] | None = None) -> str:
    """The warehouse folder the environment (default: this process's) names, or the default."""
    return (os.environ if environ is None else environ).get(ENV_WAREHOUSE) or DEFAULT_WAREHOUSE
