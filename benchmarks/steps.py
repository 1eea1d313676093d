"""The measured steps: each runs in a fresh process (`python -m benchmarks --child STEP ARGS`) and returns figures."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.measure import status_bytes

MAX_FILE_BYTES = 64 * 2**20
CHECK_STEP = "select_runs"  # not a Dagster step: the CLI's look at what changed, before launching


def run_folders(releases: list[str]):
    from pipelines.release.releases import find_run_folders

    runs, _, problems = find_run_folders([r if r.startswith("s3://") else Path(r) for r in releases])
    return [runs[k] for k in sorted(runs)], problems


def _epoch_paths(run) -> list[Path]:
    from pipelines.release.discover import list_run

    return [f.path for f in list_run(run).epoch_files]


def _record_texts(path: Path, data: bytes) -> list[bytes]:
    """The JSON texts of a transcript file's records: each line of JSON Lines, or the whole of a .json."""
    from pipelines.release.transcripts import JSON_LINES_SUFFIXES

    records = data.splitlines() if path.name.endswith(JSON_LINES_SUFFIXES) else [data]
    return [record for record in records if record.strip()]


def _transcript_records(run):
    """Each transcript file of a run (what the ingest indexes), as its bytes and its records' JSON texts."""
    from pipelines.release.discover import list_run

    for file in list_run(run).transcript_files:
        data = file.path.read_bytes()
        yield data, _record_texts(file.path, data)


def _decode_run(run) -> tuple[int, int, int, int, int]:
    """Reads and JSON-decodes a run's epoch files with the ingest's own parser, and each record of its transcript
    files with orjson; (files, bytes, stdlib fallbacks, transcript files, transcript bytes)."""
    import orjson

    from pipelines.release.decode import DecodeError, parse_json

    transcript_files = transcript_bytes = 0
    for data, records in _transcript_records(run):
        transcript_files, transcript_bytes = transcript_files + 1, transcript_bytes + len(data)
        for record in records:
            try:
                orjson.loads(record)
            except orjson.JSONDecodeError:
                pass  # a damaged line costs its read; the ingest reports it
    files = size = fallbacks = 0
    for path in _epoch_paths(run):
        data = path.read_bytes()
        files += 1
        size += len(data)
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            fallbacks += 1  # NaN/Infinity tokens, or a broken file: parse_json falls back to the stdlib parser
            try:
                parse_json(data)
            except DecodeError:
                pass
    return files, size, fallbacks, transcript_files, transcript_bytes


def step_decode(releases: list[str], workers: int) -> dict:
    """The lower bound: list, read and JSON-decode every epoch file and transcript record, nothing else, in as many
    processes as ingest."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    runs, _ = run_folders(releases)
    workers = min(workers or os.cpu_count() or 1, len(runs)) or 1
    if workers <= 1:
        parts = [_decode_run(run) for run in runs]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = list(pool.map(_decode_run, runs))
    files, size, fallbacks, transcript_files, transcript_bytes = (sum(p[i] for p in parts) for i in range(5))
    return {
        "seconds": time.perf_counter() - started,
        "files": files,
        "bytes": size,
        "transcript_files": transcript_files,
        "transcript_bytes": transcript_bytes,
        "stdlib_fallbacks": fallbacks,
        "workers": workers,
        "runs": len(runs),
    }


def step_json(releases: list[str]) -> dict:
    """The plain reference: list, read and decode every epoch file and transcript record with the stdlib json.loads,
    in one process."""
    started = time.perf_counter()
    runs, _ = run_folders(releases)
    files = size = 0
    for run in runs:
        for data, records in _transcript_records(run):
            files, size = files + 1, size + len(data)
            for record in records:
                try:
                    json.loads(record)
                except ValueError:
                    pass
        for path in _epoch_paths(run):
            data = path.read_bytes()
            files, size = files + 1, size + len(data)
            try:
                json.loads(data)
            except ValueError:
                pass  # a damaged file costs its read; the ingest quarantines it
    return {"seconds": time.perf_counter() - started, "files": files, "bytes": size}


def step_ingest(releases: list[str], lake: str, workers: int) -> dict:
    """pipelines.lake.runs.ingest_runs over the releases' run folders: full, no-change or incremental, as the lake (a
    folder or a bucket prefix) has it."""
    from pipelines.lake.manifest import DEFAULT_QUIET_SECONDS
    from pipelines.lake.runs import ingest_runs
    from pipelines.lake_store import lake_root
    from pipelines.settings import read_environment

    # the step's environment: runs quiet at once unless GRPO_QUIET_SECONDS says otherwise (step_environment)
    quiet_seconds = read_environment().get("quiet_seconds", DEFAULT_QUIET_SECONDS)
    started = time.perf_counter()
    runs, _ = run_folders(releases)
    results = ingest_runs(runs, lake_root(lake), MAX_FILE_BYTES, workers, quiet_seconds=quiet_seconds)
    return {
        "seconds": time.perf_counter() - started,
        "runs": len(results),
        "runs_changed": sum(r.changed for r in results),
        "files_parsed": sum(r.files_parsed for r in results),
        "epochs": sum(r.epochs for r in results),
        "trajectories": sum(r.trajectories for r in results),
        "workers": min(workers or os.cpu_count() or 1, len(runs)),
    }


def step_transcripts(releases: list[str]) -> dict:
    """Transcript indexing against one read of the transcripts: the CPU time of reading every transcript file and
    parsing each of its records with orjson (a line of JSON Lines, a whole .json), then of reading them again and
    indexing them as the ingest does (index_transcripts, and each run's rows made into a frame), in one process."""
    import orjson

    from pipelines.lake.transcripts import TranscriptRows
    from pipelines.release.discover import list_run
    from pipelines.release.transcripts import index_transcripts

    started = time.perf_counter()
    runs, _ = run_folders(releases)
    files = {run.run_id: [f.path for f in list_run(run).transcript_files] for run in runs}
    read_started, size, records = time.process_time(), 0, 0
    for paths in files.values():
        for path in paths:
            data = path.read_bytes()
            size += len(data)
            records += sum(orjson.loads(part) is not None for part in _record_texts(path, data))
    index_started = time.process_time()
    for run_id, paths in files.items():
        rows = TranscriptRows(run_id)
        for path in paths:
            rows.add(path.name, index_transcripts(path.read_bytes(), path.name))
        rows.frame()
    done = time.process_time()
    return {
        "seconds": time.perf_counter() - started,
        "files": sum(map(len, files.values())),
        "bytes": size,
        "records": records,
        "read_cpu": index_started - read_started,
        "index_cpu": done - index_started,
    }


def step_duckdb(releases: list[str], out: str, workers: int) -> dict:
    """Plain DuckDB: one read_json over the same files, lists unnested, streamed by COPY ... TO parquet.

    One pass, one wide table (each epoch's scalars repeated on its trajectories): the cheapest plain form.
    The list columns to unnest are found from one file per run; DuckDB types them over all the files.
    """
    import duckdb

    started = time.perf_counter()
    runs, _ = run_folders(releases)
    per_run = [_epoch_paths(run) for run in runs]
    files = [str(p) for paths in per_run for p in paths]
    sample = [str(paths[0]) for paths in per_run if paths]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = workers or os.cpu_count() or 1
    # A memory limit (spilling to disk beyond it) so that the baseline cannot take a shared machine down.
    con = duckdb.connect(
        config={"threads": threads, "memory_limit": "4GB", "temp_directory": str(out_dir / "duckdb_tmp")}
    )
    columns = con.execute(
        "select column_name, column_type from (describe select * from read_json($files, union_by_name = true))",
        {"files": sample},
    ).fetchall()
    quote = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731
    selected = [f"unnest({quote(c)}) as {quote(c)}" if kind.endswith("[]") else quote(c) for c, kind in columns]
    target = out_dir / "trajectories.parquet"
    con.execute(
        f"copy (select filename, {', '.join(selected)} "
        f"from read_json($files, union_by_name = true, filename = true)) to '{target}' (format parquet)",
        {"files": files},
    )
    rows = con.execute(f"select count(*) from '{target}'").fetchone()[0]
    con.close()
    return {"seconds": time.perf_counter() - started, "files": len(files), "trajectories": rows, "threads": threads}


def step_pandas(releases: list[str], out: str) -> dict:
    """The naive way: json.load each file, a pandas frame per file, concatenated and written per run (one process)."""
    import pandas as pd

    started = time.perf_counter()
    runs, _ = run_folders(releases)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = 0
    for run in runs:
        epochs, trajectories = [], []
        for path in _epoch_paths(run):
            with open(path) as handle:
                doc = json.load(handle)
            n = len(doc["trajectory_ids"])
            arrays = {k: v for k, v in doc.items() if isinstance(v, list) and len(v) == n}
            frame = pd.DataFrame(arrays)
            frame.insert(0, "epoch", doc["epoch"])
            frame.insert(0, "run_id", run.run_id)
            trajectories.append(frame)
            epochs.append({"run_id": run.run_id, **{k: v for k, v in doc.items() if k not in arrays}})
        epoch_frame = pd.DataFrame(epochs)
        for column in epoch_frame.columns:  # nested extras (dicts) cannot go to Parquet as objects of mixed shape
            if epoch_frame[column].map(lambda v: isinstance(v, (dict, list))).any():
                epoch_frame[column] = epoch_frame[column].map(json.dumps)
        epoch_frame.to_parquet(out_dir / f"{run.run_id}_epochs.parquet")
        traj_frame = pd.concat(trajectories, ignore_index=True)
        traj_frame.to_parquet(out_dir / f"{run.run_id}_trajectories.parquet")
        rows += len(traj_frame)
    return {"seconds": time.perf_counter() - started, "runs": len(runs), "trajectories": rows}


def _timed(function: Callable, spent: list[float]) -> Callable:
    """The function, with the seconds each call takes appended to spent."""

    def timed(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - begun)

    return timed


def step_build(releases: list[str], warehouse: str, workers: int, lake_dir: str | None = None) -> dict:
    """The whole `grpo-warehouse build` (its lake in the warehouse folder, or at lake_dir), Dagster included; step
    durations come from Dagster's own step events."""
    import dagster as dg

    from pipelines.build import BuildError, build_warehouse, configure
    from pipelines.defs.ingest import assets as run_lake_module
    from pipelines.lake import runs as lake_runs_module

    captured = []
    execute = dg.JobDefinition.execute_in_process

    def recording(self, *args, **kwargs):
        result = execute(self, *args, **kwargs)
        captured.append(result)
        return result

    dg.JobDefinition.execute_in_process = recording
    # The CLI's check of which runs to ingest, made before Dagster starts: counted with the ingest steps. The ingest
    # itself inside run_lake: the step's time less this is what Dagster adds around it.
    checked: list[float] = []
    ingested: list[float] = []
    lake_runs_module.select_runs = _timed(lake_runs_module.select_runs, checked)
    run_lake_module.ingest_runs = _timed(run_lake_module.ingest_runs, ingested)
    started = time.perf_counter()
    try:
        build_warehouse(configure(releases, workers=workers, warehouse=str(warehouse), lake=lake_dir))
        status = 0
    except BuildError as exc:
        print(f"grpo-warehouse build: {exc}", file=sys.stderr)
        status = 2
    seconds = time.perf_counter() - started
    steps = {CHECK_STEP: sum(checked)} if checked else {}
    for result in captured:
        for event in result.all_events:
            if event.event_type_value == "STEP_SUCCESS":
                steps[event.step_key] = event.event_specific_data.duration_ms / 1000
    calls = {"ingest_call_seconds": sum(ingested)} if ingested else {}  # none when run_lake ran elsewhere
    return {"seconds": seconds, "status": status, "steps": steps, **calls}


def step_figures(warehouse: str) -> dict:
    """Each ablation's figure files (PNG, SVG, the UI's preview) drawn from a built warehouse, one after another in
    this process: the CPU seconds of each, as ablation_figures' workers spend them once started, and apart from them
    those of the set-up each worker pays once (matplotlib's imports, fonts and caches, its first panels): its first
    figure, the last ablation's (a real one, so that no first-use cost is left to the timed figures), drawn again in
    its turn."""
    import duckdb

    from pipelines.defs.exports.assets import EPOCHS_SQL, FIGURE_RUNS_SQL
    from pipelines.exports.figure import FigureJob, Smoothing, ablation_inputs, draw
    from pipelines.exports.report import ordered_ablations
    from pipelines.settings import published_path

    with duckdb.connect(str(published_path(Path(warehouse))), read_only=True) as con:
        runs, epochs = con.sql(FIGURE_RUNS_SQL).pl(), con.sql(EPOCHS_SQL).pl()
        summary = con.sql("select * from run_summary order by run_id").pl()
    jobs = [
        FigureJob(ablation, ablation_inputs(ablation, runs, epochs, summary), Smoothing(), 50, preview=True)
        for ablation in ordered_ablations(runs)
    ]
    started = time.perf_counter()
    cpu = []
    for job in jobs[-1:] + jobs:
        begun = time.process_time()
        draw(job)
        cpu.append(time.process_time() - begun)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "ablations": len(jobs),
        "cpu_per_ablation": cpu[1:],
        "setup_cpu": cpu[0] if cpu else 0.0,
    }


def step_statistics(warehouse: str) -> dict:
    """The interval statistics the build's models call (pipelines.stats.sql_functions) on a built warehouse's series,
    one call after another in this process: every run's own interval and every contrast of two runs, as run_summary
    and ablation_contrasts compute them (arms of seeds compare a few numbers: left out). Their CPU seconds."""
    import duckdb

    from pipelines.defs.resources import WarehouseConfig
    from pipelines.settings import published_path
    from pipelines.stats import sql_functions

    config = WarehouseConfig()
    options = (config.final_window, config.ci_method, config.ci_level, config.ci_fit_epochs)
    with duckdb.connect(str(published_path(Path(warehouse))), read_only=True) as con:
        series = {
            run: (epochs, values, noise)
            for run, epochs, values, noise in con.execute(
                "select run_id, epochs, mean_rewards, noise_variances from matched_series"
            ).fetchall()
        }
        pairs = con.execute("select run_a, run_b from ablation_contrasts where unit = 'epochs of one run'").fetchall()
    started, begun = time.perf_counter(), time.process_time()
    for values in series.values():
        sql_functions.run_interval(*values, *options)
    runs_cpu = time.process_time() - begun
    for run_a, run_b in pairs:
        sql_functions.pair_interval(*series[run_a], *series[run_b], *options)
    return {
        "seconds": time.perf_counter() - started,
        "runs": len(series),
        "pairs": len(pairs),
        "statistics_cpu_seconds": time.process_time() - begun,
        "runs_cpu_seconds": runs_cpu,
    }


def step_sensor(releases: list[str], lake: str) -> dict:
    """A tick of the release sensor with nothing changed, after the lake was built: the look at the releases and the
    cursor it stores (the first tick, from an empty cursor, is not timed)."""
    from pipelines.defs.ingest.sensors import dump_cursor, scan_releases
    from pipelines.defs.resources import WarehouseConfig

    config = WarehouseConfig.from_env()  # the step's environment: runs quiet at once unless GRPO_QUIET_SECONDS says
    roots, settle_ns = [Path(r) for r in releases], config.settle_seconds * 10**9
    first = scan_releases(roots, Path(lake), set(), {}, time.time_ns(), settle_ns, quiet_seconds=config.quiet_seconds)
    started = time.perf_counter()
    tick = scan_releases(
        roots,
        Path(lake),
        set(first.new_runs),
        first.unsettled,
        time.time_ns(),
        settle_ns,
        quiet_seconds=config.quiet_seconds,
    )
    cursor = dump_cursor(1, tick.unsettled)
    return {
        "seconds": time.perf_counter() - started,
        "cursor_bytes": len(cursor),
        "runs_to_ingest": len(tick.runs_to_ingest),
        "quiet_runs": tick.quiet_runs,
    }


STEPS = {
    "decode": step_decode,
    "json": step_json,
    "transcripts": step_transcripts,
    "figures": step_figures,
    "statistics": step_statistics,
    "ingest": step_ingest,
    "duckdb": step_duckdb,
    "pandas": step_pandas,
    "build": step_build,
    "sensor": step_sensor,
}


def child_main(step: str, args_json: str) -> None:
    result = STEPS[step](**json.loads(args_json))
    # The process's own high-water mark (wait4's ru_maxrss would include the parent's RSS at fork time).
    result["vmhwm_bytes"] = status_bytes(os.getpid(), "VmHWM:")
    # CPU time of the step and its pool workers (reaped by now): steadier than wall time on a busy machine.
    import resource

    result["cpu_seconds"] = sum(
        u.ru_utime + u.ru_stime
        for u in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    print("BENCH_RESULT " + json.dumps(result), flush=True)
