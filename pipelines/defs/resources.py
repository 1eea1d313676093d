"""The one configurable resource: where releases and the warehouse are, and every metric parameter."""

import os
import socket
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import dagster as dg
import duckdb
import pydantic

from pipelines.lake_store import LakePath, in_bucket, lake_problem, lake_root
from pipelines.models import sql_string
from pipelines.parameters import DECLARED, PARAMETERS, Parameter
from pipelines.release.discover import RunFolder, SkippedEntry
from pipelines.release.registry import read_registry
from pipelines.release.releases import find_run_folders, release_problem
from pipelines.release.sample import ensure_sample, sample_folder_problem
from pipelines.settings import (
    ENVIRONMENT,
    OBJECT_SCHEME,
    ConfigError,
    is_url,
    location_problem,
    read_environment,
    release_location,
)
from pipelines.warehouse_db import (
    DEFAULT_STORAGE_VERSION,
    duckdb_path_problem,
    hold_build_db,
    lake_dir,
    open_build_db,
)


def _field(parameter: Parameter) -> tuple:
    """A declared setting as a field of the resource: its type, its default, what it does."""
    if parameter.choices:
        kind = Literal[parameter.choices]
    elif isinstance(parameter.default, tuple):
        kind = list[str]
    else:
        kind = type(parameter.default)
    default = list(parameter.default) if isinstance(parameter.default, tuple) else parameter.default
    return kind, pydantic.Field(default, description=parameter.what)


# The resource's fields, one per declaration of parameters.py.
_Declared = pydantic.create_model(
    "DeclaredSettings", __base__=dg.ConfigurableResource, **{name: _field(p) for name, p in DECLARED.items()}
)


class WarehouseConfig(_Declared):
    """Paths and parameters of the warehouse; `from_env()` builds it from flags and GRPO_* environment variables.

    Every field but remove_releases is declared in pipelines/parameters.py, with its bounds and what it does.
    """

    remove_releases: list[str] = []  # releases whose runs may all leave the warehouse (pipelines.removals)

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
        for name, parameter in DECLARED.items():
            if problem := parameter.problem(getattr(self, name)):
                raise ConfigError(f"{_named(name)} {problem}")
        if self.ci_fit_epochs < self.final_window:
            raise ConfigError(
                f"ci_fit_epochs ({self.ci_fit_epochs}) must be final_window ({self.final_window}) or more: the "
                "interval of a matched window is fitted on epochs that include the whole window"
            )
        for what, locations in (("release", self.releases), ("the lake", [self.lake_dir])):
            for problem in filter(None, map(location_problem, locations)):
                raise ConfigError(f"{what} {problem}")
        if is_url(self.warehouse_dir):
            raise ConfigError(f"the warehouse {self.warehouse_dir!r} is a URL: the warehouse is a folder on a disk")
        _check_memory_limit(self.duckdb_memory_limit)
        _check_executor(self.executor, self.dask_address)
        if problem := duckdb_path_problem(self.warehouse):
            raise ConfigError(f"the warehouse path {self.warehouse} {problem}: choose another folder")

    def check_paths(self) -> None:
        """Raises ConfigError for a release, registry or warehouse folder the build cannot use: called before a
        build starts, as the files may change between builds."""
        for release in self.releases:
            if problem := release_problem(release_location(release)) or self._shared_folder_problem(release):
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

    def _shared_folder_problem(self, release: str) -> str | None:
        """Why a release folder cannot be read beside the warehouse's own files, or None: it is the warehouse, lies
        in its exports or in the lake, or holds a lake kept outside the warehouse (whose run folders would be read
        as runs). A warehouse inside a release is left out of its runs (find_run_folders)."""
        if is_url(release):
            return None
        root, warehouse = Path(os.path.realpath(release)), Path(os.path.realpath(self.warehouse))
        if root == warehouse:
            return (
                f"release folder {release} is the warehouse folder: its lake and exports would be read as runs; give "
                "the folder of run folders, and keep the warehouse in another folder"
            )
        exports = warehouse / "exports"
        if exports == root or exports in root.parents:
            return (
                f"release folder {release} is inside the warehouse's exports {exports}: its folders would be read as "
                "runs; give the folder of run folders"
            )
        if in_bucket(self.lake):
            return None
        lake = Path(os.path.realpath(self.lake))
        if lake == root or lake in root.parents:
            return f"release folder {release} is inside the lake {self.lake}: give the folder of run folders"
        if root in lake.parents and warehouse not in lake.parents:
            return (
                f"the lake {self.lake} is inside release folder {release}: its folders would be read as runs; keep "
                "the lake in another folder"
            )
        return None

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
        """The parameters (parameters.PARAMETERS) by name: the SQL models read them with getvariable()."""
        return {name: getattr(self, name) for name in PARAMETERS}


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
