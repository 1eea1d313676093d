"""A sensor that watches the releases and requests ingest for the runs whose epoch files appeared, changed or went away."""

import base64
import hashlib
import json
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipelines.defs.ingest import assets as ingest_assets
from pipelines.defs.ingest.partitions import run_partitions
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake import read_manifest, unchanged_by_stamps
from pipelines.release.discover import find_run_folders, list_run
from pipelines.warehouse_db import lake_dir

CURSOR_FORMAT = 2  # 2: a quiet run is kept as {"quiet": true}, without its files
COMPRESSED = "zlib:"  # prefix of a cursor stored as base64 of zlib-compressed JSON
# Keys, not the asset objects: a module-level asset here would be loaded a second time from this module.
RUN_LAKE_KEYS = sorted(ingest_assets.run_lake.keys)
RELEASE_KEYS = sorted(ingest_assets.release_runs.keys)
Stat = tuple[int, int]  # (size, mtime_ns)


@dataclass
class RunWatch:
    """What the sensor knows of one run folder between ticks."""

    taken: dict[str, Stat] = field(default_factory=dict)  # files handed to ingest, at the stat they had then
    pending: dict[str, Stat] = field(default_factory=dict)  # files seen changing, not yet settled
    others: str = ""  # digest of the run folder's non-epoch entries (they are inventoried too)
    # Settled from the lake's folder stamps (lake.unchanged_by_stamps), not listed: the lake's manifest stands in
    # for taken and others when the run is next listed.
    quiet: bool = False


@dataclass
class ReleaseChanges:
    """The outcome of one look at the releases: which runs to ingest, which appeared or went away."""

    new_runs: list[str]
    gone_runs: list[str]
    runs_to_ingest: dict[str, list[str]]  # run id -> settled new/changed/removed files, as source paths
    waiting: dict[str, list[str]]  # run id -> files still being written
    state: dict[str, RunWatch]


def parse_cursor(cursor: str | None) -> tuple[int, dict[str, RunWatch]]:
    """The tick counter and per-run state kept in the sensor's cursor; an unreadable cursor starts afresh."""
    try:
        if cursor and cursor.startswith(COMPRESSED):
            cursor = zlib.decompress(base64.b64decode(cursor[len(COMPRESSED):])).decode()
        data = json.loads(cursor) if cursor else {}
    except (ValueError, zlib.error):
        data = {}
    if data.get("format") != CURSOR_FORMAT:
        return 0, {}
    runs = {
        run_id: RunWatch(quiet=True) if watch.get("quiet") else RunWatch(
            {p: tuple(s) for p, s in watch["taken"].items()},
            {p: tuple(s) for p, s in watch["pending"].items()},
            watch["others"],
        )
        for run_id, watch in data["runs"].items()
    }
    return int(data["tick"]), runs


def dump_cursor(tick: int, state: dict[str, RunWatch]) -> str:
    runs = {
        run_id: {"quiet": True} if w.quiet else {"taken": w.taken, "pending": w.pending, "others": w.others}
        for run_id, w in sorted(state.items())
    }
    text = json.dumps({"format": CURSOR_FORMAT, "tick": tick, "runs": runs}, separators=(",", ":"))
    # Dagster stores the cursor with every tick; the per-file JSON (~75 bytes a file) shrinks about tenfold.
    return COMPRESSED + base64.b64encode(zlib.compress(text.encode(), 6)).decode()


def _others_digest(entries) -> str:
    """A digest of a run folder's non-epoch entries, as (source path, reason) pairs."""
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()[:16]


def _lake_watch(lake: Path, run_id: str) -> RunWatch:
    """What the lake already holds of a run (from its manifest): its files at the stat they were parsed at, and its
    non-epoch entries; none ("" for others: not compared) when the lake has no manifest of it."""
    manifest = read_manifest(lake, run_id)
    if not manifest:
        return RunWatch()
    return RunWatch(taken={path: (o["size"], o["mtime_ns"]) for path, o in manifest["files"].items()},
                    others=_others_digest((s["source_path"], s["reason"]) for s in manifest["skipped"]))


def scan_releases(
    release_roots: list[Path], lake: Path, state: dict[str, RunWatch], now_ns: int, settle_ns: int
) -> ReleaseChanges:
    """Compares the releases' run folders and file stats with the sensor's state; stats files, parses nothing.

    A file is settled, and taken, when its (size, mtime) is the same as on the previous look, or when its
    mtime is older than settle_ns: a file still being written keeps changing, so it waits. A quiet run the lake
    holds, whose folders have not changed since (lake.unchanged_by_stamps), is not listed: at 100x the releases'
    files are mostly in quiet runs, and a tick would stat every one of them and carry each one's stat in its
    cursor. As for a build, a file of a quiet run rewritten in place is then found by a full listing only (the
    nightly refresh).
    """
    runs, _, problems = find_run_folders(release_roots)
    # A release root that is missing for a moment (an unmounted disk) must not look like its runs were deleted.
    roots_missing = any("does not exist" in p for p in problems)
    new_state: dict[str, RunWatch] = {}
    new_runs, to_ingest, waiting = [], {}, {}
    for run_id, run in sorted(runs.items()):
        previous = state.get(run_id)
        if previous is None:
            new_runs.append(run_id)
        if (previous is None or not previous.pending) and unchanged_by_stamps(run, lake) is not None:
            new_state[run_id] = RunWatch(quiet=True)
            continue
        listing = list_run(run)
        if previous is None or previous.quiet:
            # Files the lake already holds (from an earlier build) are not handed to ingest again.
            previous = _lake_watch(lake, run_id)
        current = {f.source_path: (f.size, f.mtime_ns) for f in listing.epoch_files}
        watch = RunWatch(others=_others_digest((s.source_path, s.reason) for s in listing.skipped))
        changed: list[str] = []
        for path, stat in current.items():
            if previous.taken.get(path) == stat:
                watch.taken[path] = stat
            elif previous.pending.get(path) == stat or now_ns - stat[1] >= settle_ns:
                watch.taken[path] = stat
                changed.append(path)
            else:
                watch.pending[path] = stat
                if path in previous.taken:  # still ingested at its old stat until the new one settles
                    watch.taken[path] = previous.taken[path]
        removed = sorted(set(previous.taken) - set(current))
        others_changed = previous.others not in ("", watch.others)
        if changed or removed or others_changed:
            to_ingest[run_id] = sorted(changed) + removed
        if watch.pending:
            waiting[run_id] = sorted(watch.pending)
        new_state[run_id] = watch
    gone = sorted(set(state) - set(runs))
    if roots_missing:
        new_state.update({run_id: state[run_id] for run_id in gone})
        gone = []
    return ReleaseChanges(new_runs, gone, to_ingest, waiting, new_state)


def release_sensor_result(
    changes: ReleaseChanges, tick: int, known_partitions: set[str]
) -> tuple[list[dg.RunRequest], list]:
    """The run requests and partition changes for one tick's changes."""
    runs_now = set(changes.state)
    add = sorted(runs_now - known_partitions)
    delete = sorted(set(changes.gone_runs) & known_partitions)
    # A partition new to this Dagster instance is materialized once even if the lake is already up to date
    # (built by the CLI, say), so that the models downstream do not wait on a partition that looks missing.
    to_ingest = set(changes.runs_to_ingest) | {run_id for run_id in add if run_id not in changes.waiting}
    requests = []
    if changes.new_runs or changes.gone_runs:
        # The run list (dim_runs) changed; release_runs also clears a vanished run out of the lake.
        requests.append(dg.RunRequest(run_key=f"release_runs@{tick}", asset_selection=RELEASE_KEYS))
    for run_id in sorted(to_ingest):
        requests.append(
            dg.RunRequest(run_key=f"{run_id}@{tick}", asset_selection=RUN_LAKE_KEYS, partition_key=run_id)
        )
    partition_requests = []
    if add:
        partition_requests.append(run_partitions.build_add_request(add))
    if delete:
        partition_requests.append(run_partitions.build_delete_request(delete))
    return requests, partition_requests


_interval = WarehouseConfig.from_env().sensor_interval_seconds


@dg.sensor(
    target=dg.AssetSelection.assets(*RELEASE_KEYS, *RUN_LAKE_KEYS),
    minimum_interval_seconds=_interval,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def release_files_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseConfig) -> dg.SensorResult:
    """Adds a partition per new run folder and ingests the runs whose epoch files settled after a change."""
    tick, state = parse_cursor(context.cursor)
    changes = scan_releases(
        warehouse.release_roots(), lake_dir(warehouse.warehouse), state, time.time_ns(),
        warehouse.settle_seconds * 10**9,
    )
    known = set(context.instance.get_dynamic_partitions(run_partitions.name))
    requests, partition_requests = release_sensor_result(changes, tick, known)
    for run_id, files in changes.runs_to_ingest.items():
        context.log.info(f"{run_id}: {len(files)} new, changed or removed file(s)")
    for run_id, files in changes.waiting.items():
        context.log.info(f"{run_id}: waiting for {len(files)} file(s) still being written")
    if changes.gone_runs:
        context.log.info(f"run folder(s) gone: {', '.join(changes.gone_runs)}")
    skip = None if requests or partition_requests else "no new, changed or removed epoch file"
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        cursor=dump_cursor(tick + 1, changes.state),
        skip_reason=skip,
    )
