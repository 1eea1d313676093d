"""grpo-warehouse bench: times ingest against its lower bound and its peers, incremental rebuilds and the whole build.

Every measured step runs in a fresh Python process, so that its peak memory is its own: the child reports its own
high-water mark (VmHWM) and the parent samples the whole process tree's RSS (the ingest's pool workers included).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

DEFAULT_SCALES = (1, 10)
MAX_FILE_BYTES = 64 * 2**20
GIB = 2**30

# Targets of the bench (ratios on a 2-core machine).
TARGET_INGEST_VS_DECODE = 2.0  # ingest within 2x of the decode-only lower bound, at 10x and 100x
TARGET_DUCKDB_VS_INGEST = 2.0  # ingest at least 2x faster than plain DuckDB, at 10x and 100x
TARGET_PEAK_BYTES = 1 * GIB  # at 100x
TARGET_NOCHANGE_GROWTH = 1.5  # no-change rebuild time, 1x -> 100x
TARGET_ONE_FILE_SHARE = 0.05  # one new epoch file at 100x, as a share of a full ingest
TARGET_BUILD_ONE_FILE_SHARE = 0.05  # the whole build after one new epoch file at 100x, as a share of a fresh build
TARGET_BUILD_VS_JSON = 10.0  # fresh whole build within 10x of a 1-process json.loads read-and-decode, at 10x
TARGET_BUILD_VS_INGEST = 3.0  # fresh whole build within 3x of the ingest alone, at 100x
TARGET_INGEST_IN_BUILD = 1.25  # the build's ingest steps within 1.25x of the ingest alone, at 10x and 100x
TARGET_FIGURE_CPU = 0.3  # CPU seconds of one ablation's figure files (median over the ablations)
TARGET_BOOTSTRAP_SHARE = 0.10  # bootstrap_means' share of a fresh whole build
TARGET_QUERY_SECONDS = 0.3  # `grpo-warehouse sql "select 1"`, process wall, start-up included
QUERY_REPEAT = 5  # the query is timed this many times, median reported
BOOTSTRAP_STEPS = ("bootstrap_means",)  # the steps that resample (ablation_contrasts reads their means)


# ---------------------------------------------------------------------------------------------------------------
# Steps: each runs in a child process (`python -m pipelines.bench --child STEP ARGS`) and returns a dict of figures.
# ---------------------------------------------------------------------------------------------------------------


def _runs(releases: list[str]):
    from pipelines.release.discover import find_run_folders

    runs, _, problems = find_run_folders([r if r.startswith("s3://") else Path(r) for r in releases])
    return [runs[k] for k in sorted(runs)], problems


def _epoch_paths(run) -> list[Path]:
    from pipelines.release.discover import list_run

    return [f.path for f in list_run(run).epoch_files]


def _decode_run(run) -> tuple[int, int, int]:
    """Reads and JSON-decodes a run's epoch files with the ingest's own parser; (files, bytes, stdlib fallbacks)."""
    import orjson

    from pipelines.release.decode import DecodeError, parse_json

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
    return files, size, fallbacks


def step_decode(releases: list[str], workers: int) -> dict:
    """The lower bound: list, read and JSON-decode every epoch file, nothing else, in as many processes as ingest."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    runs, _ = _runs(releases)
    workers = min(workers or os.cpu_count() or 1, len(runs)) or 1
    if workers <= 1:
        parts = [_decode_run(run) for run in runs]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = list(pool.map(_decode_run, runs))
    files, size, fallbacks = (sum(p[i] for p in parts) for i in range(3))
    return {
        "seconds": time.perf_counter() - started,
        "files": files,
        "bytes": size,
        "stdlib_fallbacks": fallbacks,
        "workers": workers,
        "runs": len(runs),
    }


def step_json(releases: list[str]) -> dict:
    """The plain reference: list, read and decode every epoch file with the stdlib json.loads, in one process."""
    started = time.perf_counter()
    runs, _ = _runs(releases)
    files = size = 0
    for run in runs:
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

    # the step's environment: runs quiet at once unless GRPO_QUIET_SECONDS says otherwise (_step_environment)
    quiet_seconds = read_environment().get("quiet_seconds", DEFAULT_QUIET_SECONDS)
    started = time.perf_counter()
    runs, _ = _runs(releases)
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


def step_duckdb(releases: list[str], out: str, workers: int) -> dict:
    """Plain DuckDB: one read_json over the same files, lists unnested, streamed by COPY ... TO parquet.

    One pass, one wide table (each epoch's scalars repeated on its trajectories): the cheapest plain form.
    The list columns to unnest are found from one file per run; DuckDB types them over all the files.
    """
    import duckdb

    started = time.perf_counter()
    runs, _ = _runs(releases)
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
    runs, _ = _runs(releases)
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

    from pipelines.defs.exports.assets import EPOCHS_SQL, RUNS_SQL
    from pipelines.exports.figure import FigureJob, Smoothing, ablation_inputs, draw
    from pipelines.exports.report import ordered_ablations
    from pipelines.settings import published_path

    with duckdb.connect(str(published_path(Path(warehouse))), read_only=True) as con:
        runs, epochs = con.sql(RUNS_SQL).pl(), con.sql(EPOCHS_SQL).pl()
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
    "figures": step_figures,
    "ingest": step_ingest,
    "duckdb": step_duckdb,
    "pandas": step_pandas,
    "build": step_build,
    "sensor": step_sensor,
}


def _child_main(step: str, args_json: str) -> None:
    result = STEPS[step](**json.loads(args_json))
    # The process's own high-water mark (wait4's ru_maxrss would include the parent's RSS at fork time).
    result["vmhwm_bytes"] = _status_bytes(os.getpid(), "VmHWM:")
    # CPU time of the step and its pool workers (reaped by now): steadier than wall time on a busy machine.
    import resource

    result["cpu_seconds"] = sum(
        u.ru_utime + u.ru_stime
        for u in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    print("BENCH_RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------------------------
# The parent: run a step in a child, measure wall time and peak memory.
# ---------------------------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
    except OSError:
        pass
    return found


def _status_bytes(pid: int, field_name: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field_name):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(pid: int) -> tuple[int, int]:
    """The RSS of a process and all its descendants: (sum, largest single process)."""
    total = largest = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        rss = _status_bytes(current, "VmRSS:")
        total += rss
        largest = max(largest, rss)
        stack += _children(current)
    return total, largest


@dataclass
class Measurement:
    step: str
    wall_seconds: float  # the child process, interpreter start and imports included
    peak_rss_bytes: int  # the largest single process of the tree (its VmHWM, or sampled for pool workers)
    peak_tree_rss_bytes: int  # the whole tree (child + pool workers), sampled every 50 ms; shared pages counted twice
    result: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """The work itself as the child timed it (imports excluded); the wall time when the child did not say."""
        return self.result.get("seconds", self.wall_seconds)


def _step_environment() -> dict[str, str]:
    """The steps' environment. The releases measured were written minutes ago, and a run counts as quiet (settled
    from its folder stamps) an hour after its last write: unless GRPO_QUIET_SECONDS is set, the steps take runs as
    quiet at once, so the rebuild figures are those of a release left alone for longer, as a published one is."""
    from pipelines.settings import ENV_QUIET_SECONDS

    return {ENV_QUIET_SECONDS: "0", **os.environ}


def measure(step: str, log_dir: Path, **kwargs) -> Measurement:
    """Runs one step in a fresh process and measures it, once what earlier steps wrote is on the disk: otherwise a
    step after a fresh build at 100x (GBs written) waits seconds for the kernel writing them back."""
    log_dir.mkdir(parents=True, exist_ok=True)
    os.sync()
    stamp = f"{step}_{time.monotonic_ns()}"
    out_path, err_path = log_dir / f"{stamp}.out", log_dir / f"{stamp}.err"
    command = [sys.executable, "-m", "pipelines.bench", "--child", step, json.dumps(kwargs)]
    peak_tree = peak_single = 0
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True, env=_step_environment())
        finished = threading.Event()

        def sample() -> None:
            nonlocal peak_tree, peak_single
            while not finished.is_set():
                tree, single = _tree_rss(process.pid)
                peak_tree, peak_single = max(peak_tree, tree), max(peak_single, single)
                finished.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            _, status = os.waitpid(process.pid, 0)
        except BaseException:  # interrupted: take the step and its pool workers down too
            os.killpg(process.pid, signal.SIGTERM)
            finished.set()
            raise
        wall = time.perf_counter() - started
        finished.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
    output = out_path.read_text(errors="replace")
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith("BENCH_RESULT ")), None)
    if process.returncode != 0 or line is None:
        tail = "\n".join(err_path.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"bench step {step} failed (exit {process.returncode}); see {err_path}:\n{tail}")
    result = json.loads(line.removeprefix("BENCH_RESULT "))
    peak = max(result.get("vmhwm_bytes", 0), peak_single)
    return Measurement(step, wall, peak, max(peak_tree, peak), result)


def measure_query(warehouse: Path) -> Measurement:
    """`grpo-warehouse sql "select 1"` as a user runs it (the console script's own two lines), timed from outside:
    its wall time and CPU, interpreter start-up and imports included."""
    import resource

    command = [
        sys.executable,
        "-c",
        "import sys; from pipelines.cli import main; sys.exit(main())",
        "sql",
        "select 1",
        "--warehouse",
        str(warehouse),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=_step_environment())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Measurement("query", wall, 0, 0, {"seconds": wall, "cpu_seconds": cpu})


def add_epoch_file(releases: list[str], nth: int = 0) -> Path:
    """Adds one epoch document to the nth run: a copy of its last epoch, numbered one past it, in the same layout."""
    from pipelines.release.discover import list_run

    runs, _ = _runs(releases)
    listing = list_run(runs[nth % len(runs)])
    last = max(listing.epoch_files, key=lambda f: f.epoch_in_name)
    doc = json.loads(last.path.read_text())
    epoch = last.epoch_in_name + 1
    doc["epoch"] = epoch
    digits = len(re.search(r"epoch_(\d+)", last.path.as_posix()).group(1))
    if last.layout == "file":
        target = last.path.with_name(f"epoch_{epoch:0{digits}d}_results.json")
    else:  # the same name in the next epoch folder, renumbered if it carries the folder's (epoch_NNN_results.json)
        folder = last.path.parent.with_name(f"epoch_{epoch:0{digits}d}")
        target = folder / last.path.name.replace(last.path.parent.name, folder.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc))
    return target


def _mirror(source: Path, target: Path) -> None:
    """A copy of a user's release made of hard links (a plain copy across file systems), so it can be modified."""
    for folder, _, files in os.walk(source):
        relative = Path(folder).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            src, dst = Path(folder) / name, target / relative / name
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


# ---------------------------------------------------------------------------------------------------------------
# One scale, all figures.
# ---------------------------------------------------------------------------------------------------------------


# Over 60 lines: the steps in the order they must run (baselines on the release as given, then the added files).
def bench_release(
    label: str,
    releases: list[str],
    work: Path,
    workers: int,
    repeat: int,
    with_pandas: bool,
    with_serial: bool,
    say,
    with_build: bool = True,
) -> dict:
    """Every figure for one release set, each step in its own process; medians over `repeat` runs of each."""
    logs = work / "logs"
    figures: dict[str, list[Measurement]] = {}

    def run(name: str, step: str, before=None, **kwargs) -> Measurement:
        for attempt in range(repeat):
            if before:
                before(attempt)
            m = measure(step, logs, **kwargs)
            figures.setdefault(name, []).append(m)
            say(
                f"  [{label}] {name}: {m.seconds:.2f} s (process {m.wall_seconds:.2f} s), "
                f"peak {m.peak_rss_bytes / 2**20:.0f} MiB, tree {m.peak_tree_rss_bytes / 2**20:.0f} MiB"
            )
        return figures[name][-1]

    lake = work / "lake"

    def fresh(path: Path):
        return lambda _attempt: shutil.rmtree(path, ignore_errors=True)

    # The baselines first, on exactly the files the full ingest sees; the incremental figures add files after.
    run("decode_lower_bound", "decode", releases=releases, workers=workers)
    run("json_decode", "json", releases=releases)
    run("duckdb", "duckdb", before=fresh(work / "duckdb"), releases=releases, out=str(work / "duckdb"), workers=workers)
    shutil.rmtree(work / "duckdb", ignore_errors=True)
    if with_pandas:
        run("pandas", "pandas", before=fresh(work / "pandas"), releases=releases, out=str(work / "pandas"))
        shutil.rmtree(work / "pandas", ignore_errors=True)
    if with_serial:
        run(
            "ingest_1_worker",
            "ingest",
            before=fresh(work / "lake_serial"),
            releases=releases,
            lake=str(work / "lake_serial"),
            workers=1,
        )
        shutil.rmtree(work / "lake_serial", ignore_errors=True)
    run("ingest_full", "ingest", before=fresh(lake), releases=releases, lake=str(lake), workers=workers)
    run("ingest_no_change", "ingest", releases=releases, lake=str(lake), workers=workers)
    run("sensor_tick", "sensor", releases=releases, lake=str(lake))
    added = iter(range(10**6))
    run(
        "ingest_one_file",
        "ingest",
        before=lambda _a: add_epoch_file(releases, next(added)),
        releases=releases,
        lake=str(lake),
        workers=workers,
    )
    shutil.rmtree(lake, ignore_errors=True)
    if not with_build:
        return {name: [m.__dict__ for m in ms] for name, ms in figures.items()}
    warehouse = work / "warehouse"
    run("build_full", "build", before=fresh(warehouse), releases=releases, warehouse=str(warehouse), workers=workers)
    # The ingest alone again, right after the build: the build is judged against the faster of the two (build_ratios),
    # so that one run slowed by the machine does not set the reference.
    run("ingest_full_after", "ingest", before=fresh(lake), releases=releases, lake=str(lake), workers=workers)
    shutil.rmtree(lake, ignore_errors=True)
    run("figures", "figures", warehouse=str(warehouse))
    for _ in range(QUERY_REPEAT * repeat):
        m = measure_query(warehouse)
        figures.setdefault("query", []).append(m)
        say(f"  [{label}] query: {m.wall_seconds:.2f} s, cpu {m.result['cpu_seconds']:.2f} s")
    run("build_no_change", "build", releases=releases, warehouse=str(warehouse), workers=workers)
    run(
        "build_one_file",
        "build",
        before=lambda _a: add_epoch_file(releases, next(added)),
        releases=releases,
        warehouse=str(warehouse),
        workers=workers,
    )
    shutil.rmtree(warehouse, ignore_errors=True)

    return {name: [m.__dict__ for m in ms] for name, ms in figures.items()}


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment, which the steps inherit, with values set for a while."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def bench_scale_out(label: str, releases: list[str], work: Path, workers: int, repeat: int, say) -> dict:
    """The scale-out figures: the ingest from the same files in a bucket (moto's S3 server on loopback) and the whole
    build with its run partitions on a Dask cluster of two single-threaded workers (processes on loopback)."""
    from pipelines.distributed import local_cluster
    from pipelines.release.objects import filesystem, loopback_s3

    figures: dict[str, list[Measurement]] = {}

    def run(name: str, step: str, fresh: Path | None = None, fresh_prefix: str | None = None, **kwargs) -> None:
        for _ in range(repeat):
            if fresh is not None:
                shutil.rmtree(fresh, ignore_errors=True)
            if fresh_prefix is not None and filesystem().exists(fresh_prefix):
                filesystem().rm(fresh_prefix, recursive=True)
            m = measure(step, work / "logs", **kwargs)
            figures.setdefault(name, []).append(m)
            say(f"  [{label}] {name}: {m.seconds:.2f} s (process {m.wall_seconds:.2f} s)")

    lake = work / "lake_s3"
    with loopback_s3() as aws, _environment(aws):
        filesystem.cache_clear()
        started = time.perf_counter()
        urls = []
        for i, release in enumerate(releases):
            url = f"bench/{i}/{Path(release).name}"
            filesystem().makedirs("bench", exist_ok=True)
            filesystem().put(release, url, recursive=True)
            urls.append(f"s3://{url}")
        seconds = time.perf_counter() - started
        say(f"  [{label}] uploaded {len(urls)} release(s) to the loopback S3 server in {seconds:.1f} s")
        run("ingest_object_storage", "ingest", fresh=lake, releases=urls, lake=str(lake), workers=workers)
        run("ingest_object_storage_no_change", "ingest", releases=urls, lake=str(lake), workers=workers)
        _bench_lake_in_bucket(run, releases, work, workers)
        filesystem.cache_clear()
    shutil.rmtree(lake, ignore_errors=True)
    # The workers import this copy of the package, installed or not.
    path = os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
    with local_cluster(2, work / "dask", {**os.environ, "PYTHONPATH": path}) as address:
        with _environment({"GRPO_EXECUTOR": "dask", "GRPO_DASK_ADDRESS": address}):
            warehouse = work / "warehouse_dask"
            run("build_dask", "build", fresh=warehouse, releases=releases, warehouse=str(warehouse), workers=workers)
    shutil.rmtree(work / "warehouse_dask", ignore_errors=True)
    return {name: [m.__dict__ for m in ms] for name, ms in figures.items()}


def _bench_lake_in_bucket(run, releases: list[str], work: Path, workers: int) -> None:
    """The lake in a bucket of the loopback S3 server, the releases on disk: the full and no-change ingest, and the
    fresh and no-change whole build, whose models DuckDB reads from the bucket."""
    from pipelines.release.objects import filesystem

    filesystem().makedirs("bench-lake", exist_ok=True)
    lake = "s3://bench-lake/ingest"
    run("ingest_lake_in_bucket", "ingest", fresh_prefix=lake, releases=releases, lake=lake, workers=workers)
    run("ingest_lake_in_bucket_no_change", "ingest", releases=releases, lake=lake, workers=workers)
    warehouse, lake = work / "warehouse_lake_in_bucket", "s3://bench-lake/build"
    run(
        "build_lake_in_bucket",
        "build",
        fresh=warehouse,
        fresh_prefix=lake,
        releases=releases,
        warehouse=str(warehouse),
        workers=workers,
        lake_dir=lake,
    )
    arguments = {"releases": releases, "warehouse": str(warehouse), "workers": workers, "lake_dir": lake}
    run("build_lake_in_bucket_no_change", "build", **arguments)
    shutil.rmtree(warehouse, ignore_errors=True)


def _median(raw: dict, name: str, key: str = "seconds") -> float | None:
    runs = raw.get(name)
    if not runs:
        return None
    if key == "seconds":
        return median(r["result"].get("seconds", r["wall_seconds"]) for r in runs)
    return median(r[key] for r in runs)


CHECK_STEP = "select_runs"  # not a Dagster step: the CLI's look at what changed, before launching


def _model_seconds(steps: dict) -> tuple[float, float]:
    """Seconds of a build's ingest steps and of everything after them (models, publication, exports)."""
    ingest = sum(s for k, s in steps.items() if k in ("run_lake", "release_runs", CHECK_STEP))
    return ingest, sum(steps.values()) - ingest


def summarize(raw: dict) -> dict:
    """The headline figures and ratios of one scale."""
    s = {name: _median(raw, name) for name in raw}
    wall = {name: _median(raw, name, "wall_seconds") for name in raw}
    tree = {name: _median(raw, name, "peak_tree_rss_bytes") for name in raw}
    largest = {name: _median(raw, name, "peak_rss_bytes") for name in raw}
    first = {name: runs[0]["result"] for name, runs in raw.items()}
    cpu = {name: median(r["result"].get("cpu_seconds", 0.0) for r in runs) for name, runs in raw.items()}
    summary = {
        "seconds": s,
        "process_seconds": wall,
        "cpu_seconds": cpu,
        "peak_tree_rss_bytes": tree,
        "peak_rss_bytes": largest,
        "files": first["decode_lower_bound"]["files"],
        "bytes": first["decode_lower_bound"]["bytes"],
        "stdlib_fallbacks": first["decode_lower_bound"]["stdlib_fallbacks"],
        "runs": first["decode_lower_bound"]["runs"],
        "trajectories": first["ingest_full"]["trajectories"],
        "no_change_files_parsed": max(r["result"]["files_parsed"] for r in raw["ingest_no_change"]),
        "one_file_files_parsed": max(r["result"]["files_parsed"] for r in raw["ingest_one_file"]),
        "ingest_vs_decode": s["ingest_full"] / s["decode_lower_bound"],
        "duckdb_vs_ingest": s["duckdb"] / s["ingest_full"],
        "one_file_share": s["ingest_one_file"] / s["ingest_full"],
    }
    if "sensor_tick" in raw:
        summary["sensor_cursor_bytes"] = first["sensor_tick"]["cursor_bytes"]
        summary["sensor_quiet_runs"] = first["sensor_tick"]["quiet_runs"]
    if "build_full" in raw:
        summary["build_one_file_share"] = wall["build_one_file"] / wall["build_full"]
        summary["build_one_file_cpu_share"] = cpu["build_one_file"] / cpu["build_full"]
    if "pandas" in s:
        summary["pandas_vs_ingest"] = s["pandas"] / s["ingest_full"]
    if "ingest_1_worker" in s:
        summary["parallel_speedup"] = s["ingest_1_worker"] / s["ingest_full"]
    if "json_decode" in s:
        summary["json_vs_decode"] = s["json_decode"] / s["decode_lower_bound"]
    for name in ("build_full", "build_no_change", "build_one_file") if "build_full" in raw else ():
        steps = raw[name][0]["result"]["steps"]
        ingest, rest = _model_seconds(steps)
        summary[f"{name}_steps"] = {
            "ingest": ingest,
            "models_and_exports": rest,
            "outside_steps": raw[name][0]["wall_seconds"] - ingest - rest,
            "by_step": steps,
        }
    if "build_full" in raw:
        summary.update(build_ratios(raw, summary))
    return summary


def build_ratios(raw: dict, summary: dict) -> dict:
    """The fresh whole build against its references, the bootstrap's share of it, the figures' and the query's cost."""
    s, wall, steps = summary["seconds"], summary["process_seconds"], summary["build_full_steps"]
    bootstrap = sum(steps["by_step"].get(name, 0.0) for name in BOOTSTRAP_STEPS)
    # The ingest alone, before and after the build: the faster of the two, since the machine only ever slows a run
    # down, and the build's ratios to it are then never flattered by a slowed reference.
    bracket = [name for name in ("ingest_full", "ingest_full_after") if name in s]
    alone, alone_wall = min(s[name] for name in bracket), min(wall[name] for name in bracket)
    call = raw["build_full"][0]["result"].get("ingest_call_seconds")
    ratios = {
        "build_vs_json": wall["build_full"] / s["json_decode"] if "json_decode" in s else None,
        "build_vs_ingest": wall["build_full"] / alone_wall,
        "ingest_in_build": steps["ingest"] / alone,
        "ingest_alone_seconds": alone,
        "bootstrap_seconds": bootstrap,
        "bootstrap_share": bootstrap / wall["build_full"],
    }
    if call is not None and "run_lake" in steps["by_step"]:  # the step's time less the call inside it
        ratios["dagster_around_ingest_seconds"] = steps["by_step"]["run_lake"] - call
    if "figures" in raw:
        figures = raw["figures"][0]["result"]
        cpu = figures["cpu_per_ablation"]
        ratios.update(
            figure_ablations=len(cpu),
            figure_cpu_max=max(cpu, default=0.0),
            figure_cpu_setup=figures["setup_cpu"],
            figure_cpu_median=median(cpu) if cpu else 0.0,
        )
    if "query" in raw:
        ratios.update(
            query_seconds=median(m["wall_seconds"] for m in raw["query"]),
            query_cpu=median(m["result"]["cpu_seconds"] for m in raw["query"]),
        )
    return ratios


# Over 60 lines: one check per target, the list of targets read top to bottom.
def check_targets(results: dict[str, dict]) -> list[dict]:
    """Each target at each scale it applies to: the figure, the bar, and whether it holds."""
    checks = []

    def add(scale, target, value, bar, holds, unit=""):
        checks.append({"scale": scale, "target": target, "value": value, "bar": bar, "holds": holds, "unit": unit})

    for label, res in results.items():
        summary, scale = res["summary"], res.get("scale")
        big = scale is None or scale >= 10
        if big:
            add(
                label,
                "ingest / decode-only lower bound",
                summary["ingest_vs_decode"],
                f"<= {TARGET_INGEST_VS_DECODE}",
                summary["ingest_vs_decode"] <= TARGET_INGEST_VS_DECODE,
                "x",
            )
            add(
                label,
                "plain DuckDB / ingest",
                summary["duckdb_vs_ingest"],
                f">= {TARGET_DUCKDB_VS_INGEST}",
                summary["duckdb_vs_ingest"] >= TARGET_DUCKDB_VS_INGEST,
                "x",
            )
        if scale is None or scale >= 100:
            for name, what in (("ingest_full", "ingest"), ("build_full", "whole build")):
                if name in summary["peak_tree_rss_bytes"]:
                    peak = summary["peak_tree_rss_bytes"][name]
                    add(
                        label,
                        f"peak memory, {what} (process tree)",
                        peak / 2**20,
                        "< 1024",
                        peak < TARGET_PEAK_BYTES,
                        "MiB",
                    )
            add(
                label,
                "one new epoch file / full ingest",
                100 * summary["one_file_share"],
                f"< {100 * TARGET_ONE_FILE_SHARE:.0f}",
                summary["one_file_share"] < TARGET_ONE_FILE_SHARE,
                "%",
            )
        add(
            label,
            "no-change rebuild parses nothing",
            summary["no_change_files_parsed"],
            "0",
            summary["no_change_files_parsed"] == 0,
            "files",
        )
        if "build_vs_ingest" in summary:
            build_targets(label, scale, summary, add)
    scaled = sorted((res["scale"], res["summary"]) for res in results.values() if res.get("scale"))
    if len(scaled) >= 2:
        (lo, small), (hi, large) = scaled[0], scaled[-1]
        span = f"{lo}x -> {hi}x"
        bar = (
            f"< {TARGET_NOCHANGE_GROWTH}" if (lo, hi) == (1, 100) else f"< {TARGET_NOCHANGE_GROWTH} (bar is 1x -> 100x)"
        )
        # On the process's wall time, what a user waits for: at 1x the ingest's own work is a few milliseconds.
        for name, what in (("build_no_change", "whole build"), ("ingest_no_change", "ingest")):
            if name not in small["process_seconds"] or name not in large["process_seconds"]:
                continue
            growth = large["process_seconds"][name] / small["process_seconds"][name]
            add(
                span,
                f"no-change rebuild time growth ({what}, process wall)",
                growth,
                bar,
                growth < TARGET_NOCHANGE_GROWTH,
                "x",
            )
    return checks


def build_targets(label: str, scale: int | None, summary: dict, add) -> None:
    """The whole build's targets: against its references at 10x and 100x, its parts at every scale."""
    if scale == 10 and summary.get("build_vs_json") is not None:
        add(
            label,
            "fresh whole build / 1-process json.loads read-and-decode",
            summary["build_vs_json"],
            f"<= {TARGET_BUILD_VS_JSON:g}",
            summary["build_vs_json"] <= TARGET_BUILD_VS_JSON,
            "x",
        )
    if scale is None or scale >= 100:
        add(
            label,
            "fresh whole build / ingest alone (process wall)",
            summary["build_vs_ingest"],
            f"<= {TARGET_BUILD_VS_INGEST:g}",
            summary["build_vs_ingest"] <= TARGET_BUILD_VS_INGEST,
            "x",
        )
    if scale is None or scale >= 100:
        one_file_build_targets(label, summary, add)
    if scale is None or scale >= 10:
        add(
            label,
            "ingest steps in the build / ingest alone",
            summary["ingest_in_build"],
            f"<= {TARGET_INGEST_IN_BUILD:g}",
            summary["ingest_in_build"] <= TARGET_INGEST_IN_BUILD,
            "x",
        )
    add(
        label,
        "bootstrap_means / fresh whole build",
        100 * summary["bootstrap_share"],
        f"<= {100 * TARGET_BOOTSTRAP_SHARE:g}",
        summary["bootstrap_share"] <= TARGET_BOOTSTRAP_SHARE,
        "%",
    )
    if "figure_cpu_median" in summary:
        # The median: the set-up a worker pays once is measured apart (step_figures).
        add(
            label,
            "figure files of one ablation (cpu, median)",
            summary["figure_cpu_median"],
            f"<= {TARGET_FIGURE_CPU:g}",
            summary["figure_cpu_median"] <= TARGET_FIGURE_CPU,
            "s",
        )
    if "query_seconds" in summary:
        add(
            label,
            'grpo-warehouse sql "select 1" (process wall, median)',
            summary["query_seconds"],
            f"<= {TARGET_QUERY_SECONDS:g}",
            summary["query_seconds"] <= TARGET_QUERY_SECONDS,
            "s",
        )


def one_file_build_targets(label: str, summary: dict, add) -> None:
    """The whole build after one new epoch file against a fresh build, on process wall (what a user waits for) and on
    CPU (what a loaded machine does not inflate)."""
    for key, measured in (("build_one_file_share", "process wall"), ("build_one_file_cpu_share", "cpu")):
        if key in summary:
            add(
                label,
                f"whole build after one new epoch file / fresh build ({measured})",
                100 * summary[key],
                f"< {100 * TARGET_BUILD_ONE_FILE_SHARE:.0f}",
                summary[key] < TARGET_BUILD_ONE_FILE_SHARE,
                "%",
            )


# ---------------------------------------------------------------------------------------------------------------
# Reporting.
# ---------------------------------------------------------------------------------------------------------------


def machine() -> dict:
    """The machine and versions the figures were measured with."""
    from importlib.metadata import PackageNotFoundError, version

    info = {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")), "?")
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gib"] = round(int(mem) / 2**20, 1)
    except OSError:
        pass
    for package in ("duckdb", "polars", "dagster", "orjson", "pandas", "pyarrow"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    return info


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _fmt_mib(value: float | None) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


# Over 60 lines: the printed table's rows declared one after another, in the order they print.
def format_table(label: str, summary: dict) -> str:
    s, wall, tree, big, cpu = (
        summary[k] for k in ("seconds", "process_seconds", "peak_tree_rss_bytes", "peak_rss_bytes", "cpu_seconds")
    )
    ingest = s["ingest_full"]
    rows = [
        (
            "decode-only lower bound (orjson)",
            s["decode_lower_bound"],
            wall["decode_lower_bound"],
            f"{ingest / s['decode_lower_bound']:.2f}x = ingest / this",
            "decode_lower_bound",
        ),
        ("ingest, full", ingest, wall["ingest_full"], "", "ingest_full"),
    ]
    if "json_decode" in s:
        rows.insert(
            1,
            (
                "json.loads read-and-decode, 1 process",
                s["json_decode"],
                wall["json_decode"],
                f"{summary['json_vs_decode']:.2f}x = this / lower bound",
                "json_decode",
            ),
        )
    if "ingest_1_worker" in s:
        rows.append(
            (
                "ingest, full, 1 worker",
                s["ingest_1_worker"],
                wall["ingest_1_worker"],
                f"{summary['parallel_speedup']:.2f}x = speedup of the pool",
                "ingest_1_worker",
            )
        )
    rows += [
        (
            "ingest, no change",
            s["ingest_no_change"],
            wall["ingest_no_change"],
            f"{summary['no_change_files_parsed']} files parsed",
            "ingest_no_change",
        ),
        (
            "ingest, one new epoch file",
            s["ingest_one_file"],
            wall["ingest_one_file"],
            f"{100 * summary['one_file_share']:.1f}% of full ingest",
            "ingest_one_file",
        ),
    ]
    if "sensor_tick" in s:
        rows.append(
            (
                "sensor tick, no change",
                s["sensor_tick"],
                wall["sensor_tick"],
                f"cursor {summary['sensor_cursor_bytes'] / 1e3:,.1f} kB, {summary['sensor_quiet_runs']} quiet "
                f"runs not listed",
                "sensor_tick",
            )
        )
    rows += [
        (
            "plain DuckDB read_json+unnest+COPY",
            s["duckdb"],
            wall["duckdb"],
            f"{summary['duckdb_vs_ingest']:.2f}x = this / ingest",
            "duckdb",
        ),
    ]
    if "pandas" in s:
        rows.append(
            (
                "naive json + pandas (1 process)",
                s["pandas"],
                wall["pandas"],
                f"{summary['pandas_vs_ingest']:.2f}x = this / ingest",
                "pandas",
            )
        )
    for name, what in (
        ("build_full", "whole build, fresh"),
        ("build_no_change", "whole build, no change"),
        ("build_one_file", "whole build, one new file"),
    ):
        if name not in s:
            continue
        steps = summary[f"{name}_steps"]
        note = (
            f"ingest {steps['ingest']:.2f} s, models+exports {steps['models_and_exports']:.2f} s, "
            f"outside steps {steps['outside_steps']:.2f} s"
        )
        if name == "build_one_file":
            note += f"; {100 * summary['build_one_file_share']:.1f}% of fresh"
        if name == "build_full":
            note += (
                f"; {wall[name] / s['json_decode']:.1f}x json.loads, {summary['build_vs_ingest']:.1f}x ingest; "
                f"its ingest steps {summary['ingest_in_build']:.2f}x the ingest alone"
            )
            if "dagster_around_ingest_seconds" in summary:
                note += f" (Dagster around the ingest call: {summary['dagster_around_ingest_seconds']:.2f} s)"
        rows.append((what, s[name], wall[name], note, name))
        if name == "build_full" and "ingest_full_after" in s:
            rows.append(
                (
                    "ingest, full, right after the build",
                    s["ingest_full_after"],
                    wall["ingest_full_after"],
                    f"{summary['ingest_alone_seconds']:.2f} s = the ingest alone, the faster of before and after",
                    "ingest_full_after",
                )
            )
    if "figures" in s:
        rows.append(
            (
                "figures, one ablation after another",
                s["figures"],
                wall["figures"],
                f"{summary['figure_ablations']} ablations, cpu each: median {summary['figure_cpu_median']:.2f} s, "
                f"most {summary['figure_cpu_max']:.2f} s; a worker's set-up, its first figure, "
                f"{summary['figure_cpu_setup']:.2f} s",
                "figures",
            )
        )
    rows += _scale_out_rows(summary)
    if "query" in s:
        rows.append(
            (
                'sql "select 1" (process, start-up included)',
                s["query"],
                wall["query"],
                f"median of {QUERY_REPEAT} runs",
                "query",
            )
        )
    header = (
        f"\n{label}: {summary['runs']} runs, {summary['files']:,} epoch files, {summary['bytes'] / 1e6:,.0f} MB "
        f"of JSON, {summary['trajectories']:,} trajectories; {summary['stdlib_fallbacks']} file(s) need the "
        f"stdlib parser (NaN/Infinity)"
    )
    lines = [
        header,
        f"  {'figure':<38} {'work':>9} {'process':>9} {'cpu':>9} {'peak proc':>10} {'peak tree':>10}  note",
    ]
    for what, work, process, note, name in rows:
        lines.append(
            f"  {what:<38} {_fmt_s(work):>9} {_fmt_s(process):>9} {_fmt_s(cpu.get(name)):>9} "
            f"{_fmt_mib(big[name]):>10} {_fmt_mib(tree[name]):>10}  {note}"
        )
    lines.append(
        f"  (work: the step as timed inside its process; process: its wall time, start-up included; cpu: user+sys "
        f"of the process and its pool; ingest / lower bound on cpu: "
        f"{cpu['ingest_full'] / cpu['decode_lower_bound']:.2f}x, DuckDB / ingest on cpu: "
        f"{cpu['duckdb'] / cpu['ingest_full']:.2f}x)"
    )
    if "build_full_steps" in summary:
        by_step = sorted(summary["build_full_steps"]["by_step"].items(), key=lambda item: -item[1])
        lines.append(
            "  fresh build's costliest steps (wall): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in by_step[:8])
            + f"; bootstrap {100 * summary['bootstrap_share']:.1f}% of the build"
        )
    return "\n".join(lines)


def _scale_out_rows(summary: dict) -> list[tuple]:
    """The table's rows for the scale-out figures (bench_scale_out), against the same work on one node's disk."""
    s, wall = summary["seconds"], summary["process_seconds"]
    rows = []
    if "ingest_object_storage" in s:
        rows.append(
            (
                "ingest, full, from S3 (loopback)",
                s["ingest_object_storage"],
                wall["ingest_object_storage"],
                f"{s['ingest_object_storage'] / s['ingest_full']:.2f}x the ingest from disk",
                "ingest_object_storage",
            )
        )
        rows.append(
            (
                "ingest, no change, from S3 (loopback)",
                s["ingest_object_storage_no_change"],
                wall["ingest_object_storage_no_change"],
                f"{s['ingest_object_storage_no_change'] / s['ingest_no_change']:.2f}x from disk: every run "
                "listed, no folder stamps in a bucket",
                "ingest_object_storage_no_change",
            )
        )
    if "ingest_lake_in_bucket" in s:
        rows += _lake_in_bucket_rows(s, wall)
    if "build_dask" in s and "build_full" in s:
        rows.append(
            (
                "whole build, fresh, Dask, 2 workers",
                s["build_dask"],
                wall["build_dask"],
                f"{wall['build_dask'] / wall['build_full']:.2f}x the in-process build (process times)",
                "build_dask",
            )
        )
    return rows


def _lake_in_bucket_rows(s: dict, wall: dict) -> list[tuple]:
    """The rows of the lake in a bucket (_bench_lake_in_bucket), each against the same work with the lake on disk."""
    rows = [
        (
            "ingest, full, lake in S3 (loopback)",
            s["ingest_lake_in_bucket"],
            wall["ingest_lake_in_bucket"],
            f"{s['ingest_lake_in_bucket'] / s['ingest_full']:.2f}x the ingest into a lake on disk",
            "ingest_lake_in_bucket",
        ),
        (
            "ingest, no change, lake in S3 (loopback)",
            s["ingest_lake_in_bucket_no_change"],
            wall["ingest_lake_in_bucket_no_change"],
            f"{s['ingest_lake_in_bucket_no_change'] / s['ingest_no_change']:.2f}x on disk: per run, its stamps "
            "fetched and two partitions looked for, three requests",
            "ingest_lake_in_bucket_no_change",
        ),
    ]
    if "build_full" in s:
        rows.append(
            (
                "whole build, fresh, lake in S3",
                s["build_lake_in_bucket"],
                wall["build_lake_in_bucket"],
                f"{wall['build_lake_in_bucket'] / wall['build_full']:.2f}x the build with its lake on disk (process "
                "times)",
                "build_lake_in_bucket",
            )
        )
        rows.append(
            (
                "whole build, no change, lake in S3",
                s["build_lake_in_bucket_no_change"],
                wall["build_lake_in_bucket_no_change"],
                f"{wall['build_lake_in_bucket_no_change'] / wall['build_no_change']:.2f}x with its lake on disk "
                "(process times)",
                "build_lake_in_bucket_no_change",
            )
        )
    return rows


def format_checks(checks: list[dict]) -> str:
    lines = ["\ntargets:"]
    for c in checks:
        verdict = "holds" if c["holds"] else "MISSED"
        value = f"{c['value']:.2f}" if isinstance(c["value"], float) else str(c["value"])
        lines.append(f"  [{c['scale']}] {c['target']}: {value} {c['unit']} (bar {c['bar']}) -> {verdict}")
    return "\n".join(lines)


def _bench_folders(label: str, work: Path, scale: int | None, given: list[str] | None, say) -> list[str]:
    """The release folders one bench measures: the sample written at `scale`, or a linked copy of the given ones
    (the one-file figures add files to it)."""
    from pipelines.release.sample import write_sample

    started = time.perf_counter()
    if scale:
        folders = [str(f) for f in write_sample(work / "sample", seed=0, scale=scale)]
        say(f"[{label}] generated {len(folders)} release folders in {time.perf_counter() - started:.1f} s")
        return folders
    folders = []
    for i, release in enumerate(given):
        target = work / "releases" / f"{i}" / Path(release).absolute().name
        _mirror(Path(release).absolute(), target)
        folders.append(str(target))
    say(f"[{label}] linked {len(folders)} release folder(s) in {time.perf_counter() - started:.1f} s")
    return folders


def run_bench(
    scales: list[int],
    releases: list[str],
    workdir: str | None,
    workers: int,
    repeat: int,
    json_path: str | None,
    keep: bool,
    with_pandas: bool = True,
    with_serial: bool = True,
    with_build: bool = True,
    say=print,
    with_scale_out: bool = False,
) -> dict:
    """Runs every figure for each scale (generated sample releases) or for the given releases; prints the tables."""

    workers = workers or os.cpu_count() or 1
    if with_pandas:
        try:
            import pandas  # noqa: F401
        except ImportError:
            say("pandas is not installed (pip install -e '.[test]'): the naive pandas baseline is skipped")
            with_pandas = False
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="grpo_bench_"))
    base.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(), "workers": workers, "repeat": repeat, "command": sys.argv, "results": {}}
    say(
        f"benchmark in {base} with {workers} worker(s); every step in its own process, medians of {repeat}; "
        f"runs quiet after {_step_environment()['GRPO_QUIET_SECONDS']} s (GRPO_QUIET_SECONDS)"
    )
    try:
        plans = []
        if releases:
            plans.append(("release", None, releases))
        plans += [(f"scale {k}x", k, None) for k in scales]
        for label, scale, given in plans:
            work = base / (f"scale_{scale}" if scale else "release")
            shutil.rmtree(work, ignore_errors=True)
            folders = _bench_folders(label, work, scale, given, say)
            raw = bench_release(label, folders, work, workers, repeat, with_pandas, with_serial, say, with_build)
            if with_scale_out:
                raw |= bench_scale_out(label, folders, work, workers, repeat, say)
            summary = summarize(raw)
            report["results"][label] = {"scale": scale, "releases": given or folders, "raw": raw, "summary": summary}
            say(format_table(label, summary))
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
        report["targets"] = check_targets(report["results"])
        say(format_checks(report["targets"]))
    finally:
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=1, default=str))
            say(f"\nraw results: {json_path}")
        if not keep and not workdir:
            shutil.rmtree(base, ignore_errors=True)
    return report


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child_main(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: grpo-warehouse bench [--scale K]... [--release DIR]...")
