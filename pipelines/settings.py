"""Names the command line and the code location share: environment variables, defaults, the published file's path.

Nothing heavier than the standard library is imported here, so `grpo-warehouse sql` starts without Dagster or polars.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path

from pipelines.parameters import DECLARED, variable_of

ENV_RELEASES = variable_of("releases")
ENV_WAREHOUSE = variable_of("warehouse_dir")
ENV_LAKE = variable_of("lake_dir")
ENV_REGISTRY = variable_of("registries")
ENV_WORKERS = variable_of("workers")
ENV_MEMORY_LIMIT = variable_of("duckdb_memory_limit")
ENV_QUIET_SECONDS = variable_of("quiet_seconds")
ENV_STORAGE_VERSION = variable_of("duckdb_storage_version")
DEFAULT_WAREHOUSE = DECLARED["warehouse_dir"].default
PUBLISHED_NAME = "warehouse.duckdb"


OBJECT_SCHEME = "s3://"  # a release or a lake under this is in an S3-compatible bucket (docs/scale-out.md)


# What reads as a URL rather than a folder: any scheme://, or s3: in any case and with any number of slashes.
_URL_LIKE = re.compile(r"(?i)s3:|[a-z][a-z0-9+.-]*://")
_BUCKET_PREFIX = re.compile(r"s3://[^/\s]+(/.*)?", re.DOTALL)


def release_location(text: str) -> str:
    """A release (or the lake) as given: a URL as it is, a folder made absolute."""
    return text if is_url(text) else str(Path(text).absolute())


def is_url(text: str) -> bool:
    return bool(_URL_LIKE.match(text))


def location_problem(text: str) -> str | None:
    """Why a release or lake location that reads as a URL is not one the warehouse can use (only s3://bucket/prefix
    is), or None. A folder whose name starts like a URL is given as ./s3: or with its whole path."""
    if not is_url(text) or _BUCKET_PREFIX.fullmatch(text):
        return None
    folder = "" if "//" in text else f" (a folder of that name: ./{text})"
    return f"{text!r} is not a bucket prefix s3://bucket/prefix, the only URL read{folder}"


def published_path(warehouse: Path) -> Path:
    """The DuckDB file readers open, inside a warehouse folder."""
    return Path(warehouse) / PUBLISHED_NAME


# Each variable (parameters.py declares them): the field it sets, and how its text becomes the field's value.
ENVIRONMENT = {setting.variable: (name, setting.reading) for name, setting in DECLARED.items() if setting.variable}


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
