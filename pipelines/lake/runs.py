"""Many runs brought up to date: which have work, and their ingest in parallel processes when several do."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait
from dataclasses import dataclass

from pipelines.lake.ingest import ingest_run
from pipelines.lake.manifest import (
    DEFAULT_QUIET_SECONDS,
    RunIngestResult,
    RunWork,
    compare_listing,
    read_manifest,
    settle_unchanged,
    stamps_due,
    unchanged_by_stamps,
)
from pipelines.lake.paths import gone_runs, manifest_file, run_lock
from pipelines.lake_store import LakePath, lake_root
from pipelines.release.discover import RunFolder, RunListing, list_run


def ingest_run_folder(
    run: RunFolder,
    lake: LakePath,
    max_file_bytes: int,
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
    transcript_text: bool = False,
) -> RunIngestResult:
    return ingest_run(list_run(run), lake, max_file_bytes, quiet_seconds=quiet_seconds, transcript_text=transcript_text)


# A run to ingest: (ingest_run, its listing), or (ingest_run_folder, the run) for a run new to the lake.
_Job = tuple[Callable[..., RunIngestResult], RunListing | RunFolder]


def _settle_or_job(
    run: RunFolder, lake: LakePath, max_file_bytes: int, workers: int, full_scan: bool, settings: dict
) -> RunIngestResult | _Job:
    """A run's result when this process can settle it, else its job for the pool.

    A run the lake already holds is listed here, once, and settled here from its manifest when it has nothing
    to parse: a pool of spawned workers (each importing polars and the caller's main module) costs more than
    checking hundreds of unchanged runs. A quiet run whose folders have not changed is not even listed
    (unchanged_by_stamps), unless full_scan. A run new to the lake is listed by the worker that ingests it, so
    that this process does not list a whole new release while the workers wait. With one worker, every run is
    ingested here."""
    if not full_scan and (result := unchanged_by_stamps(run, lake, settings.get("transcript_text", False))) is not None:
        return result
    if workers > 1 and not manifest_file(lake, run.run_id).exists():
        return (ingest_run_folder, run)
    listing = list_run(run)
    if workers <= 1:
        return ingest_run(listing, lake, max_file_bytes, **settings)
    if (result := ingest_run(listing, lake, max_file_bytes, True, **settings)) is not None:
        return result
    return (ingest_run, listing)


def ingest_runs(
    runs: list[RunFolder],
    lake: LakePath,
    max_file_bytes: int,
    workers: int = 0,
    progress: Callable[[RunIngestResult, int, int], None] | None = None,
    full_scan: bool = False,
    **settings,
) -> list[RunIngestResult]:
    """Ingests runs independently, in parallel processes when several have files to parse; reports each as it finishes.

    Runs this process cannot settle (_settle_or_job) go to the pool as they are found, or are ingested here when
    there is only one (one new epoch file). settings: ingest_run's quiet_seconds and transcript_text.
    """
    lake = lake_root(lake)
    workers = min(workers or os.cpu_count() or 1, len(runs))
    results: list[RunIngestResult] = []

    def done(result: RunIngestResult) -> None:
        results.append(result)
        if progress:
            progress(result, len(results), len(runs))

    waiting: _Job | None = None  # the first run to parse, held until a second shows that a pool pays
    pool: ProcessPoolExecutor | None = None
    futures: set = set()

    def submit(job: _Job) -> None:
        # A few runs ahead of the workers, no more: a listing holds an object per file, and all of a large
        # release's listings queued at once would hold the whole release's file list in this process.
        while len(futures) >= 2 * workers:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                futures.remove(future)
                done(future.result())
        futures.add(pool.submit(job[0], job[1], lake, max_file_bytes, **settings))

    try:
        for run in runs:
            job = _settle_or_job(run, lake, max_file_bytes, workers, full_scan, settings)
            if isinstance(job, RunIngestResult):
                done(job)
                continue
            if waiting is None and pool is None:
                waiting = job
                continue
            if pool is None:
                # spawn, not fork: the caller (a Dagster run) has threads; polars' thread pool does not survive fork
                pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
                submit(waiting)
                waiting = None
            submit(job)
        if waiting is not None:
            done(waiting[0](waiting[1], lake, max_file_bytes, **settings))
        for future in as_completed(futures):
            done(future.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return sorted(results, key=lambda r: r.run_id)


@dataclass
class RunSelection:
    """Which run partitions of the lake have work, from one look at the releases (select_runs)."""

    work: dict[str, RunWork]  # every run listed, with what the lake lacks of it (perhaps nothing)
    quiet: list[str]  # runs settled from their folder stamps, not listed
    gone: list[str]  # runs the lake holds whose folders are in no release

    @property
    def stale(self) -> list[str]:
        """The run ids whose lake partitions are out of date: something to parse, drop or inventory, or gone."""
        return sorted([run_id for run_id, work in self.work.items() if work.pending] + self.gone)


def select_runs(
    runs: Iterable[RunFolder],
    lake: LakePath,
    max_file_bytes: int,
    full_scan: bool = False,
    must_list: Collection[str] = (),
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
    transcript_text: bool = False,
) -> RunSelection:
    """Compares every run folder with the lake's manifests: the one decision of which run partitions have work,
    for a build and for the release sensor alike. Parses nothing. A run unchanged_by_stamps settles is not listed,
    unless full_scan or its id is in must_list; a listed run with nothing to do has its stamps brought up to date."""
    lake = lake_root(lake)
    work: dict[str, RunWork] = {}
    quiet: list[str] = []
    for run in runs:
        if (
            not full_scan
            and run.run_id not in must_list
            and unchanged_by_stamps(run, lake, transcript_text) is not None
        ):
            quiet.append(run.run_id)
            continue
        listing = list_run(run)
        # A manifest is written whole (renamed into place), so it is compared without the run's lock: the lock is
        # taken only to write the run's stamps, from the manifest as it is then.
        previous = read_manifest(lake, run.run_id)
        found = compare_listing(listing, lake, max_file_bytes, previous, transcript_text)
        if not found.pending and stamps_due(listing, lake, previous, quiet_seconds, transcript_text)[2]:
            with run_lock(lake, run.run_id):
                previous = read_manifest(lake, run.run_id)
                found = compare_listing(listing, lake, max_file_bytes, previous, transcript_text)
                if not found.pending:
                    settle_unchanged(listing, lake, previous, quiet_seconds, transcript_text)
        work[run.run_id] = found
    present = set(work) | set(quiet)
    return RunSelection(work, sorted(quiet), gone_runs(lake, present))
