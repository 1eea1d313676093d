"""A sensor that watches the releases and ingests the runs whose epoch files appeared, changed or went away."""

import hashlib
import json
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipelines.code_versions import code_version
from pipelines.defs.ingest import assets as ingest_assets
from pipelines.defs.ingest.partitions import REFRESHES_TAG, partition_key, run_partitions, runs_by_partition
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.runs import select_runs
from pipelines.release.releases import find_run_folders, release_problem
from pipelines.removals import removal_refusal

# The cursor: the tick and a digest per run with files still being written (per-file state is the lake's). One
# written by other code (code_versions) is not read: the sensor starts afresh.
CURSOR_FORMAT = code_version(__name__)
# Keys, not the asset objects: a module-level asset here would be loaded a second time from this module.
RUN_LAKE_KEYS = sorted(ingest_assets.run_lake.keys)
RELEASE_KEYS = sorted(ingest_assets.release_runs.keys)
Stat = tuple[int, int]  # (size, mtime_ns)
PARTITION_TAG = "dagster/partition"
IN_FLIGHT = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]

scan_releases_job = dg.define_asset_job(
    "scan_releases",
    selection=dg.AssetSelection.assets(*RELEASE_KEYS),
    description="Lists the run folders of the releases and resolves their attributes (lake/runs); a run folder that "
    "went away leaves the lake. Launched by release_files_sensor when run folders appear or go away.",
)


def ingest_runs_job_on(executor_def: dg.ExecutorDefinition | None = None):
    """The job that ingests run partitions, its steps run by executor_def (None: the code location's executor)."""
    return dg.define_asset_job(
        "ingest_runs",
        selection=dg.AssetSelection.assets(*RUN_LAKE_KEYS),
        executor_def=executor_def,
        description="Flattens the new, changed or removed epoch files of the selected run partitions into the Parquet "
        "lake. Launched by release_files_sensor, one run per run folder whose files settled after a "
        "change, and by `grpo-warehouse build` on a distributed executor, one run per block of partitions.",
    )


ingest_runs_job = ingest_runs_job_on()


@dataclass
class ReleaseChanges:
    """The outcome of one look at the releases: which runs to ingest, which appeared or went away."""

    new_runs: list[str]  # run ids
    gone_runs: list[str]  # partition keys
    runs_to_ingest: dict[str, dict[str, Stat | None]]  # run id -> settled new/changed files (and removed: None)
    waiting: dict[str, list[str]]  # run id -> files still being written
    unsettled: dict[str, str]  # run id -> digest of the stats of its files still being written (the cursor)
    quiet_runs: int = 0  # runs not listed: their folders unchanged since the lake last listed them
    problems: list[str] = field(default_factory=list)
    refusal: str | None = None  # why run partitions gone from the releases are kept (pipelines.removals)


def parse_cursor(cursor: str | None) -> tuple[int, dict[str, str]]:
    """The tick counter and the unsettled-file digests kept in the sensor's cursor; an unreadable one starts afresh."""
    try:
        data = json.loads(cursor) if cursor else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict) or data.get("format") != CURSOR_FORMAT:
        return 0, {}
    return int(data["tick"]), dict(data["unsettled"])


def dump_cursor(tick: int, unsettled: dict[str, str]) -> str:
    # A few dozen bytes: Dagster stores the cursor with every tick and shows it on the sensor's page.
    return json.dumps(
        {"format": CURSOR_FORMAT, "tick": tick, "unsettled": dict(sorted(unsettled.items()))}, separators=(",", ":")
    )


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def scan_releases(
    release_roots: list[Path],
    lake: Path,
    known: set[str],
    unsettled: dict[str, str],
    now_ns: int,
    settle_ns: int,
    warehouse: Path | None = None,
    remove_releases: Collection[str] = (),
    max_file_bytes: int = WarehouseConfig.model_fields["max_file_bytes"].default,
    quiet_seconds: int = WarehouseConfig.model_fields["quiet_seconds"].default,
    transcript_text: bool = False,
) -> ReleaseChanges:
    """Compares the releases' run folders and file stats with what the lake holds; stats files, parses nothing.

    A file the lake does not hold at its current (size, mtime) is settled, and handed to ingest, when its mtime is
    older than settle_ns, or when the run's files still being written have the same stats as on the previous look
    (unsettled, from the cursor): a file still being written keeps changing, so it waits. A quiet run the lake
    holds, whose folders have not changed since (lake.unchanged_by_stamps), is not listed: at 100x the releases'
    files are mostly in quiet runs. As for a build, a file of a quiet run rewritten in place is then found by a
    full listing only (the nightly refresh). known: the run partitions Dagster has (partition_key of each run id).
    What the lake lacks of each run is lake.select_runs' answer, the one a build acts on; the sensor adds the wait.
    """
    runs, _, problems = find_run_folders(release_roots, warehouse=warehouse)
    by_key = runs_by_partition(runs)
    changes = ReleaseChanges(
        sorted(run_id for key, run_id in by_key.items() if key not in known), [], {}, {}, {}, problems=problems
    )
    selection = select_runs(
        runs.values(),
        lake,
        max_file_bytes,
        must_list=unsettled,
        quiet_seconds=quiet_seconds,
        transcript_text=transcript_text,
    )
    changes.quiet_runs = len(selection.quiet)
    for run_id, work in sorted(selection.work.items()):
        changed = {f.source_path: (f.size, f.mtime_ns) for f in [*work.changed, *work.transcripts_changed]}
        young = {path: stat for path, stat in changed.items() if now_ns - stat[1] < settle_ns}
        if young and unsettled.get(run_id) != _digest(sorted(young.items())):
            changes.unsettled[run_id] = _digest(sorted(young.items()))
            changes.waiting[run_id] = sorted(young)
            changed = {path: stat for path, stat in changed.items() if path not in young}
        removed = dict.fromkeys([*work.removed, *work.transcripts_removed])
        # A run new to the lake is ingested once its files settle: its inventory comes with them.
        if changed or removed or work.inventory_changed and work.in_lake:
            changes.runs_to_ingest[run_id] = dict(sorted({**changed, **removed}.items()))
    gone = sorted(known - set(by_key))
    # A release missing for a moment (an unmounted disk), emptied or left out must not look like its runs were
    # deleted (pipelines.removals).
    if gone:
        root_problems = [problem for root in release_roots if (problem := release_problem(root))]
        changes.refusal = (
            root_problems[0] if root_problems else removal_refusal(release_roots, runs, lake, remove_releases)
        )
        changes.gone_runs = [] if changes.refusal else gone
    return changes


def release_sensor_result(
    changes: ReleaseChanges, tick: int, known_partitions: set[str], ingesting: frozenset[str] = frozenset()
) -> tuple[list[dg.RunRequest], list]:
    """The run requests and partition changes for one tick's changes; none for a run partition whose ingest run is
    queued or running (ingesting): until it is done, the lake does not hold the files this tick found again."""
    add = [partition_key(run_id) for run_id in changes.new_runs]
    delete = sorted(set(changes.gone_runs) & known_partitions)
    requests = []
    if changes.new_runs or changes.gone_runs:
        # The run list (dim_runs) changed; release_runs also clears a vanished run out of the lake.
        what = ", ".join([f"{len(add)} new run folder(s)"] * bool(add) + [f"{len(delete)} gone"] * bool(delete))
        requests.append(
            dg.RunRequest(
                run_key=f"release_runs@{tick}",
                job_name=scan_releases_job.name,
                tags={REFRESHES_TAG: f"the run list: {what}"},
            )
        )
    for run_id, files in sorted(changes.runs_to_ingest.items()):
        if (key := partition_key(run_id)) in ingesting:
            continue
        requests.append(
            dg.RunRequest(
                run_key=f"{key}@{tick}",
                job_name=ingest_runs_job.name,
                partition_key=key,
                tags={REFRESHES_TAG: f"lake partition {run_id}: {len(files)} new, changed or removed epoch file(s)"},
            )
        )
    # A partition new to this Dagster instance is materialized once even if the lake is already up to date
    # (built by the CLI, say), so that the models downstream do not wait on a partition that looks missing.
    for run_id in changes.new_runs:
        key = partition_key(run_id)
        if run_id not in changes.runs_to_ingest and run_id not in changes.waiting and key not in ingesting:
            requests.append(
                dg.RunRequest(
                    run_key=f"{key}@{tick}",
                    job_name=ingest_runs_job.name,
                    partition_key=key,
                    tags={REFRESHES_TAG: f"lake partition {run_id}: new to this Dagster instance"},
                )
            )
    partition_requests = []
    if add:
        partition_requests.append(run_partitions.build_add_request(add))
    if delete:
        partition_requests.append(run_partitions.build_delete_request(delete))
    return requests, partition_requests


def ingesting_partitions(instance: dg.DagsterInstance) -> frozenset[str]:
    """The run partitions with an ingest_runs run queued or running."""
    runs = instance.get_runs(dg.RunsFilter(job_name=ingest_runs_job.name, statuses=IN_FLIGHT))
    return frozenset(run.tags[PARTITION_TAG] for run in runs if PARTITION_TAG in run.tags)


def skip_reason(changes: ReleaseChanges, runs: int) -> str:
    """What a tick that launches nothing saw, in words."""
    if changes.waiting:
        files = sum(len(paths) for paths in changes.waiting.values())
        first_run, paths = next(iter(changes.waiting.items()))
        return (
            f"waiting for {files} file(s) still being written to settle ({first_run}: {paths[0]}"
            + (", ..." if files > 1 else "")
            + "); they are taken once unchanged for a tick"
        )
    if not runs:
        return "no run folder in the releases" + (f": {changes.problems[0]}" if changes.problems else "")
    return f"no new, changed or removed epoch file in {runs} run folder(s)" + (
        f" ({changes.quiet_runs} quiet, not listed)" if changes.quiet_runs else ""
    )


def release_files_sensor(
    interval_seconds: int,
    ingest_job=ingest_runs_job,
) -> dg.SensorDefinition:
    """The release sensor, looking every interval_seconds (the configuration's sensor_interval_seconds), launching
    ingest_job (ingest_runs, on the configured executor)."""

    @dg.sensor(
        name="release_files_sensor",
        jobs=[scan_releases_job, ingest_job],
        minimum_interval_seconds=interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Looks at the release folders every {interval_seconds} s. Adds a run partition per new run folder "
            "(scan_releases), and launches ingest_runs for a run whose epoch files were added, changed or removed, "
            "once they have stopped changing: a file still being written waits. Its cursor holds only the tick and a "
            "digest per run with files still being written; what was ingested is in the lake's manifests."
        ),
    )
    def release_files(context: dg.SensorEvaluationContext, warehouse: WarehouseConfig) -> dg.SensorResult:
        """Adds a partition per new run folder and ingests the runs whose epoch files settled after a change."""
        return evaluate_release_sensor(context, warehouse)

    return release_files


def evaluate_release_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseConfig) -> dg.SensorResult:
    """One tick of the release sensor."""
    tick, unsettled = parse_cursor(context.cursor)
    known = set(context.instance.get_dynamic_partitions(run_partitions.name))
    changes = scan_releases(
        warehouse.release_roots(),
        warehouse.lake,
        known,
        unsettled,
        time.time_ns(),
        warehouse.settle_seconds * 10**9,
        warehouse=warehouse.warehouse,
        remove_releases=warehouse.remove_releases,
        max_file_bytes=warehouse.max_file_bytes,
        quiet_seconds=warehouse.quiet_seconds,
        transcript_text=warehouse.transcript_text,
    )
    requests, partition_requests = release_sensor_result(changes, tick, known, ingesting_partitions(context.instance))
    for run_id, files in changes.runs_to_ingest.items():
        context.log.info(f"{run_id}: {len(files)} new, changed or removed file(s)")
    for run_id, files in changes.waiting.items():
        context.log.info(f"{run_id}: waiting for {len(files)} file(s) still being written")
    if changes.gone_runs:
        context.log.info(f"run folder(s) gone: {', '.join(changes.gone_runs)}")
    if changes.refusal:
        context.log.warning(changes.refusal)
    runs = len(known | set(changes.new_runs)) - len(changes.gone_runs)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        cursor=dump_cursor(tick + 1, changes.unsettled),
        skip_reason=None if requests or partition_requests else skip_reason(changes, runs),
    )
