"""grpo-warehouse build: the asset graph materialized in-process, Dagster handed only the run partitions with work."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.settings import ConfigError, published_path, release_location


class BuildError(Exception):
    """A reason the build could not be made, printed on one line."""


def configure(
    releases: list[str],
    registry: str | None = None,
    workers: int | None = None,
    warehouse: str | None = None,
    remove_releases: list[str] | None = None,
    parameters: list[str] | None = None,
    lake: str | None = None,
):
    """The one configuration of a build: the given values (None: not given; parameters as NAME=VALUE texts), the
    environment for the rest, every value checked before any work starts (BuildError naming the first bad one)."""
    from pipelines.defs.resources import WarehouseConfig

    if workers is not None and workers < 0:
        raise BuildError(f"--workers must be 0 (one per core) or more, not {workers}")
    if workers is not None and workers >= 2**63:  # named as the flag, not as the variable the check below names
        raise BuildError(f"--workers must be a 64-bit integer, not {workers}")
    try:
        config = WarehouseConfig.from_env(
            releases=[release_location(r) for r in releases] or None,
            registries=[str(Path(registry).absolute())] if registry else None,
            warehouse_dir=release_location(warehouse) if warehouse else None,
            lake_dir=release_location(lake) if lake else None,
            workers=workers,
            remove_releases=remove_releases or None,
            **_parameters(parameters or []),
        )
        config.check_paths()
    except ConfigError as exc:
        raise BuildError(str(exc)) from None
    return config


def _parameters(settings: list[str]) -> dict[str, str]:
    """`--param NAME=VALUE` texts by name, each name one of the metric and check parameters; WarehouseConfig turns
    each value into its field's type and checks it."""
    from pipelines.parameters import PARAMETERS

    given = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        if not equals or not value:
            raise BuildError(f"--param takes NAME=VALUE, not {setting!r}")
        if name not in PARAMETERS:
            raise BuildError(f"--param {name}: not a parameter; the parameters are {', '.join(PARAMETERS)}")
        given[name] = value
    return given


def build_warehouse(config, full_scan: bool = False, wait: float = 600) -> list[str]:
    """Builds the warehouse a configuration (configure) names, waiting up to `wait` seconds for another build of the
    same warehouse to finish; returns what loaded nothing or far too little (see print_summary)."""
    from filelock import FileLock, Timeout

    warehouse = config.warehouse
    warehouse.mkdir(parents=True, exist_ok=True)
    lock = FileLock(warehouse / ".build.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"another build of {warehouse} is running; waiting up to {wait:.0f} s for it to finish", flush=True)
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            raise BuildError(f"another build of {warehouse} is still running after {wait:.0f} s") from None
    try:
        return _build_locked(config, full_scan)
    finally:
        lock.release()


# Merge two blocks of run partitions to ingest into one Dagster run when fewer than this many unchanged partitions
# lie between them: a separate run costs about as much as Dagster recording that many partitions' materializations.
MAX_PARTITION_GAP = 25


def _build_locked(config, full_scan: bool = False) -> list[str]:
    from pipelines.definitions import build_definitions
    from pipelines.defs.ingest.partitions import partition_key
    from pipelines.removals import removal_refusal

    started = time.perf_counter()
    if not config.releases:
        print(f"no --release given: building the bundled sample release (in {config.sample_dir})", flush=True)
    roots = config.release_roots()
    runs, _, problems = config.find_runs()
    empty = [f"release folder {root} holds no run folder" for root in roots if root not in _roots_of(runs)]
    for problem in problems + empty:
        print(f"warning: {problem}", file=sys.stderr)
    lake = config.lake
    if refusal := removal_refusal(roots, runs, lake, config.remove_releases):
        raise BuildError(refusal)
    # Only the runs whose lake partitions are out of date are handed to run_lake, so that its work follows the change,
    # not the release: on a kept instance, Dagster also records two events per partition and lake table it covers.
    stale = stale_runs(runs, lake, config.max_file_bytes, full_scan, config.quiet_seconds, config.transcript_text)
    print(
        f"found {len(runs)} run(s) in {len(roots)} release(s); {_describe(stale & set(runs), stale - set(runs))}",
        flush=True,
    )

    from pipelines.models import ModelError

    persistent = bool(os.environ.get("DAGSTER_HOME"))  # Dagster's own variable: a kept instance
    # Run partitions for an instance that keeps what Dagster records of them (the UI reads it), or whose executor
    # spreads them over a cluster; a throwaway one ingests the stale runs unpartitioned (unpartitioned_run_lake).
    partitioned = persistent or config.executor != "in_process"
    try:
        definitions = build_definitions(config, run_partitions=partitioned)
    except ModelError as exc:  # a model of sql/ that cannot load: its file and why, on one line
        raise BuildError(str(exc)) from None
    # The build database stays open from the first step to the last, not opened and checkpointed again by each.
    with _instance(persistent, config.executor) as instance, config.hold_build_db():
        if partitioned:
            keys = set(map(partition_key, runs)), set(map(partition_key, stale))
            result = _run_job(definitions, instance, *keys, persistent, config)
        else:  # a run gone from the releases leaves the lake through release_runs
            result = _run_unpartitioned(definitions, instance, set(map(partition_key, stale & set(runs))))
    if not result.success:
        if _interrupted(result):
            raise KeyboardInterrupt  # the command reports it on one line, exit status 130
        raise BuildError(failure_reason(result))
    return empty + print_summary(config.warehouse, time.perf_counter() - started, config.lake)


def _roots_of(runs: dict) -> set:
    """The release roots the runs were found in, as release_roots gives them."""
    return {run.release_root for run in runs.values()}


@contextmanager
def _instance(persistent: bool, executor: str) -> Iterator:
    """The Dagster instance of a build: DAGSTER_HOME's when set; else a throwaway one, in memory, or, for a
    distributed executor, whose workers open it by reference, in a temporary folder."""
    import tempfile

    import dagster as dg

    if persistent:
        with dg.DagsterInstance.get() as instance:
            yield instance
    elif executor == "in_process":
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance
    else:
        with tempfile.TemporaryDirectory(prefix="grpo-dagster-") as home:
            with dg.DagsterInstance.local_temp(home) as instance:
                yield instance


# The build's runs log to the terminal in short lines (defs/loggers.py), never with a traceback.
TERMINAL_RUN_CONFIG = {"loggers": {"terminal": {"config": {"log_level": "INFO"}}}}


def _run_job(definitions, instance, runs: set[str], stale: set[str], persistent: bool, config):
    """Runs refresh_warehouse over the stale run partitions (and, on a kept instance, those it has never seen); runs
    and stale are partition keys."""
    from pipelines.defs.ingest.partitions import THROWAWAY_TAG, run_partitions, run_range_tags

    job = definitions.resolve_job_def("refresh_warehouse")
    known = set(instance.get_dynamic_partitions(run_partitions.name))
    new = runs - known
    # A partition new to a kept instance is materialized once, even if the lake already holds the run (built
    # with another instance), so that the models' automation does not wait on a partition that looks missing.
    selected = stale | new if persistent else stale
    if new:
        # The selected partitions last: a range of consecutive keys, so one Dagster run, covers them all.
        instance.add_dynamic_partitions(run_partitions.name, sorted(new, key=lambda key: (key in selected, key)))
    keys = instance.get_dynamic_partitions(run_partitions.name)
    blocks = _partition_blocks(keys, selected, MAX_PARTITION_GAP)
    run_config = TERMINAL_RUN_CONFIG

    throwaway = {} if persistent else {THROWAWAY_TAG: "true"}

    def execute(tags=None, **selection):
        return job.execute_in_process(
            instance=instance,
            run_config=run_config,
            raise_on_error=False,
            tags={**(tags or {}), **throwaway},
            **selection,
        )

    if config.executor != "in_process":
        failed = _ingest_distributed(
            instance, config, [piece for block in blocks for piece in _pieces(block, config.partitions_per_run)]
        )
        return failed or execute(asset_selection=_asset_keys(definitions, lake_of_runs=False))
    # Blocks apart from the last are ingested on their own; the last goes with every other asset.
    lake_of_runs = _asset_keys(definitions, lake_of_runs=True)
    for block in blocks[:-1]:
        result = execute(tags=run_range_tags(block[0], block[-1]), asset_selection=lake_of_runs)
        if not result.success:
            return result
    if blocks:
        return execute(tags=run_range_tags(blocks[-1][0], blocks[-1][-1]))
    return execute(asset_selection=_asset_keys(definitions, lake_of_runs=False))


def _run_unpartitioned(definitions, instance, stale: set[str]):
    """Runs refresh_warehouse with the unpartitioned lake of runs ingesting the stale run partitions (keys), or,
    when none is stale, without the lake of runs."""
    job = definitions.resolve_job_def("refresh_warehouse")
    if not stale:
        return job.execute_in_process(
            instance=instance,
            run_config=TERMINAL_RUN_CONFIG,
            raise_on_error=False,
            asset_selection=_asset_keys(definitions, lake_of_runs=False),
        )
    lake = {"ops": {"run_lake": {"config": {"partition_keys": sorted(stale)}}}}
    return job.execute_in_process(instance=instance, run_config=TERMINAL_RUN_CONFIG | lake, raise_on_error=False)


def _pieces(block: list[str], size: int) -> list[list[str]]:
    """A block of consecutive partition keys cut into ranges of at most size keys."""
    return [block[start : start + size] for start in range(0, len(block), size)]


def _ingest_distributed(instance, config, ranges: list[list[str]]):
    """Ingests each range of partition keys as its own run of ingest_runs on the configured executor, all at once,
    so that the cluster's workers take the runs' steps in parallel; returns the first failed run's result, or None.

    The job is rebuilt on each worker from the configuration's fields (definitions.ingest_job_for). A step ingests its
    runs in its worker's own process: a Dask worker is a daemon process, which may not start a pool of its own.
    """
    from concurrent.futures import ThreadPoolExecutor

    import dagster as dg

    from pipelines.defs.ingest.partitions import run_range_tags

    fields = {name: getattr(config, name) for name in type(config).model_fields} | {"workers": 1}
    job = dg.build_reconstructable_job(
        "pipelines.definitions", "ingest_job_for", reconstructable_kwargs={"config": fields}
    )

    def ingest(keys: list[str]):
        tags = run_range_tags(keys[0], keys[-1])
        return dg.execute_job(job, instance, run_config=TERMINAL_RUN_CONFIG, tags=tags, raise_on_error=False)

    with ThreadPoolExecutor(max(1, min(len(ranges), 16))) as threads:
        results = list(threads.map(ingest, ranges))
    return next((result for result in results if not result.success), None)


# How an interruption (Ctrl-C, SIGINT) comes back from a step: Dagster's own error, or DuckDB's when the signal
# arrived during a query (Dagster's handler raises inside it, and DuckDB reports the query interrupted).
_INTERRUPTIONS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt", "InterruptException"}


def _interrupted(result) -> bool:
    """Whether the build failed because it was interrupted, which Dagster reports as a failed run or step."""
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None) if event.is_failure else None
        while error is not None:
            if error.cls_name in _INTERRUPTIONS or error.message.startswith("RuntimeError: Query interrupted"):
                return True
            error = error.cause
    return False


def failure_reason(result) -> str:
    """The first failed step's own error, on one line: the innermost cause Dagster wrapped (a step's exception is
    reported as "Error occurred while executing op ..." with the real error as its cause)."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        # The run failed outside its steps (on a Dask cluster: a scheduler or worker that cannot load the code).
        failure = next((e for e in result.all_events if e.is_run_failure), None)
        if failure is None or failure.event_specific_data.error is None:
            return "the build failed"
    error = failure.event_specific_data.error
    # A worker process's error comes back with its traceback as text for a cause: the error itself says it; so does
    # one of our own (the models that failed, each with its error).
    while error.cause is not None and error.cause.cls_name != "_RemoteTraceback" and not _own(error):
        error = error.cause
    message = (error.message.strip().splitlines() or [error.cls_name or "unknown error"])[0]
    # Our own errors say everything in their message; a library's keeps its class name (PermissionError: ...).
    if _own(error) and ": " in message:
        message = message.split(": ", 1)[1]
    return f"the build failed in {failure.step_key}: {message}" if failure.step_key else f"the build failed: {message}"


def _own(error) -> bool:
    """Whether a step's error (Dagster's serializable form) is one of the project's own exceptions."""
    return error.message.startswith("pipelines.")


def stale_runs(
    runs: dict,
    lake: Path,
    max_file_bytes: int,
    full_scan: bool = False,
    quiet_seconds: int | None = None,
    transcript_text: bool = False,
) -> set[str]:
    """The run ids whose lake partitions are out of date (lake.select_runs), and those the lake has no manifest of.

    A run the lake has no manifest of has everything to ingest: it is not listed here, since its ingest lists it
    anyway (on a fresh build, that is every file of the release, listed once instead of twice).
    """
    from pipelines.lake.paths import manifested_runs
    from pipelines.lake.runs import select_runs

    new = set(runs) - manifested_runs(lake, runs)
    known = [run for run_id, run in runs.items() if run_id not in new]
    quiet = {} if quiet_seconds is None else {"quiet_seconds": quiet_seconds}
    selection = select_runs(known, lake, max_file_bytes, full_scan, **quiet, transcript_text=transcript_text)
    return set(selection.stale) | new


def _describe(stale: set[str], gone: set[str]) -> str:
    def listed(names: set[str]) -> str:
        names = sorted(names)
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    parts = [f"{len(stale)} run(s) to ingest (new, changed or removed files): {listed(stale)}"] if stale else []
    parts += [f"{len(gone)} run(s) gone from the releases, leaving the lake: {listed(gone)}"] if gone else []
    return "; ".join(parts) or "the lake is up to date with every run, nothing to ingest"


def _partition_blocks(keys: list[str], selected: set[str], max_gap: int) -> list[list[str]]:
    """The selected keys as blocks of consecutive keys in the instance's order, each block one partition range; two
    blocks with fewer than max_gap unselected keys between them become one (the keys between included)."""
    blocks: list[list[str]] = []
    previous = -1
    for index, key in enumerate(keys):
        if key not in selected:
            continue
        if blocks and index - previous - 1 < max_gap:
            blocks[-1].extend(keys[previous + 1 : index + 1])
        else:
            blocks.append([key])
        previous = index
    return blocks


def _asset_keys(definitions, lake_of_runs: bool) -> list:
    """The keys of the lake of runs (run_lake's tables), or of every other asset."""
    from pipelines.defs.ingest.assets import run_lake

    graph = definitions.resolve_asset_graph()
    return [key for key in graph.get_all_asset_keys() if (key in run_lake.keys) == lake_of_runs]


def print_summary(warehouse: Path, seconds: float, lake=None) -> list[str]:
    """Prints what the build loaded, and what it could not, and where it is (the lake: <warehouse>/lake unless given);
    returns what `--strict` fails on (releases and runs that loaded nothing, or far fewer epochs than their entries,
    registry rows naming no run), one phrase each."""
    import duckdb

    path = published_path(warehouse)
    with duckdb.connect(str(path), read_only=True) as con:

        def count(sql: str) -> int:
            return con.execute(sql).fetchone()[0]

        runs = count("select count(*) from dim_runs")
        epochs = count("select count(*) from fact_epochs")
        trajectories = count("select count(*) from fact_trajectories")
        quarantined = count("select count(*) from file_inventory where status = 'quarantined'")
        problems = count("select count(*) from ingest_errors")
        linked = count("select count(transcript_path) from trajectory_transcripts")
        print(
            f"\nwarehouse built in {seconds:.1f} s: {runs} runs, {epochs:,} epochs, {trajectories:,} trajectories "
            f"({linked:,} with a transcript), {quarantined} file(s) quarantined, {problems} row(s) in ingest_errors"
        )
        not_loading = _print_not_loaded(con) + _print_unused_registry_rows(con)
        show = _show_example(con) if linked else None
    print(f"  DuckDB file: {path}")
    print(f"  Parquet lake: {lake or warehouse / 'lake'}")
    if (warehouse / "exports").is_dir():
        print(f"  exports: {warehouse / 'exports'}")
    if (warehouse / "exports" / "explorer" / "index.html").is_file():
        print(f"  run explorer: {warehouse / 'exports' / 'explorer' / 'index.html'} (open it in a browser)")
    print('  try: grpo-warehouse sql "select * from run_summary"')
    if show:
        print(f"  read the transcript behind the highest reward: {show}")
    return not_loading


# The trajectory of the highest finite reward among those with a transcript (the latest epoch of ties), and whether
# its id is in another run too (then show needs --run).
SHOW_EXAMPLE_SQL = """
select t.trajectory_id, t.run_id, (select count(distinct o.run_id) from trajectory_transcripts as o
                                   where o.trajectory_id = t.trajectory_id) as runs
from trajectory_transcripts as t
inner join fact_trajectories as f using (run_id, epoch, traj_index)
where t.transcript_path is not null and isfinite(f.reward)
order by f.reward desc, t.epoch desc, t.run_id, t.traj_index
limit 1
"""


def _show_example(con) -> str | None:
    """The show command that prints the transcript behind the warehouse's highest reward, quoted for a shell."""
    import shlex

    row = con.execute(SHOW_EXAMPLE_SQL).fetchone()
    if row is None:
        return None
    trajectory_id, run_id, runs = row
    from pipelines.show import shown

    command = f"grpo-warehouse show {shlex.quote(trajectory_id)}"
    return shown(command + (f" --run {shlex.quote(run_id)}" if runs > 1 else ""))


def _print_unused_registry_rows(con) -> list[str]:
    """A warning line per registry row that names no run (the first five; ingest_errors lists them all)."""
    unused = [row[0] for row in con.execute(REGISTRY_ROWS_UNUSED_SQL).fetchall()]
    for message in unused[:5]:
        print(f"warning: {message}", file=sys.stderr)
    if len(unused) > 5:
        print(f"warning: and {len(unused) - 5} more registry row(s) naming no run (see ingest_errors)", file=sys.stderr)
    return [f"{len(unused)} registry row(s) name no run"] if unused else []


REGISTRY_ROWS_UNUSED_SQL = "select message from ingest_errors where error_kind = 'registry_row_unused'"


def _print_not_loaded(con) -> list[str]:
    """The epoch entries not loaded, by reason with an example path; a warning line per release that loaded no
    epoch (the layouts expected, the entries seen) and one for the runs loading far fewer epochs than entries."""
    from pipelines.defs.models.checks import MIN_LOADED_SHARE, RUNS_NOT_LOADING_SQL
    from pipelines.release.discover import EXPECTED_PLACEMENTS

    reasons = con.execute(
        "select reason, count(*), min(source_path) from unloaded_epochs group by reason order by count(*) desc, reason"
    ).fetchall()
    if reasons:
        print(f"  {sum(n for _, n, _ in reasons):,} epoch entr(ies) not loaded (see unloaded_epochs):")
        for reason, n, example in reasons:
            print(f"    {n:>7,}  {reason:<20} e.g. {example}", flush=True)
    failing = []
    empty = con.execute(
        "select release, list(run_id order by run_id) from dim_runs where run_id not in"
        " (select run_id from fact_epochs) group by release"
        " having count(*) = (select count(*) from dim_runs as d where d.release = dim_runs.release) order by release"
    ).fetchall()
    for release, run_ids in empty:
        n_seen, seen = con.execute(
            "select count(*), list(source_path order by source_path)[1:5] from file_inventory"
            " where list_contains(?, run_id)",
            [run_ids],
        ).fetchone()
        print(
            f"warning: release {release} loaded no epoch from its {len(run_ids)} run(s): no document placed as "
            f"{', '.join(EXPECTED_PLACEMENTS)} was loaded; its run folders hold {n_seen} entr(ies), e.g. "
            f"{', '.join(seen) or 'nothing'}",
            file=sys.stderr,
        )
        failing.append(f"release {release} loaded no epoch")
    runs = con.execute(RUNS_NOT_LOADING_SQL).fetchall()
    if runs:
        listed = ", ".join(
            f"{run_id} ({n_loaded} of {n_loaded + n_not} loaded)"
            if n_loaded + n_not
            else f"{run_id} (no epoch entry recognised)"
            for run_id, n_loaded, n_not, *_ in runs[:5]
        )
        more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
        print(
            f"warning: {len(runs)} run(s) loaded no epoch or under {MIN_LOADED_SHARE:.0%} of their epoch entries: "
            f"{listed}{more}",
            file=sys.stderr,
        )
        failing.append(f"{len(runs)} run(s) loaded no epoch or under {MIN_LOADED_SHARE:.0%} of their epoch entries")
    return failing
