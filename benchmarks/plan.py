"""What one bench runs: the release folders measured, every step at each scale in order, the scale-out figures."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.measure import QUERY_REPEAT, Measurement, checkout_path, measure, measure_query, step_environment
from benchmarks.report import format_checks, format_table, machine
from benchmarks.steps import run_folders
from benchmarks.targets import check_targets, summarize

DEFAULT_SCALES = (1, 10)


def add_epoch_file(releases: list[str], nth: int = 0) -> Path:
    """Adds one epoch document to the nth run: a copy of its last epoch, numbered one past it, in the same layout."""
    from pipelines.release.discover import list_run

    runs, _ = run_folders(releases)
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


@dataclass
class Figures:
    """The measurements of one release set, by figure: each step measured `repeat` times, each time reported."""

    label: str
    logs: Path
    repeat: int
    say: Callable[[str], None]
    taken: dict[str, list[Measurement]] = field(default_factory=dict)

    def run(self, name: str, step: str, before: Callable[[int], object] | None = None, **kwargs) -> None:
        """Measures a step `repeat` times under a figure's name; before(attempt) prepares each time."""
        for attempt in range(self.repeat):
            if before:
                before(attempt)
            m = measure(step, self.logs, **kwargs)
            self.taken.setdefault(name, []).append(m)
            self.say(
                f"  [{self.label}] {name}: {m.seconds:.2f} s (process {m.wall_seconds:.2f} s), "
                f"peak {m.peak_rss_bytes / 2**20:.0f} MiB, tree {m.peak_tree_rss_bytes / 2**20:.0f} MiB"
            )

    def query(self, warehouse: Path) -> None:
        """`grpo-warehouse sql "select 1"` on the warehouse, QUERY_REPEAT times per repeat."""
        for _ in range(QUERY_REPEAT * self.repeat):
            m = measure_query(warehouse)
            self.taken.setdefault("query", []).append(m)
            self.say(f"  [{self.label}] query: {m.wall_seconds:.2f} s, cpu {m.result['cpu_seconds']:.2f} s")

    def raw(self) -> dict:
        return {name: [m.__dict__ for m in ms] for name, ms in self.taken.items()}


def fresh(path: Path) -> Callable[[int], None]:
    """A step's preparation: the folder it writes removed, so that it starts from nothing."""
    return lambda _attempt: shutil.rmtree(path, ignore_errors=True)


def fresh_prefix(url: str, folder: Path | None = None) -> Callable[[int], None]:
    """A step's preparation: the bucket prefix it writes removed (and the folder, if given)."""

    def remove(_attempt: int) -> None:
        from pipelines.release.objects import filesystem

        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if filesystem().exists(url):
            filesystem().rm(url, recursive=True)

    return remove


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
    """Every figure for one release set, each step in its own process; medians over `repeat` runs of each.

    The steps run in the order they must: the baselines on the release as given, then the figures that add files.
    """
    figures = Figures(label, work / "logs", repeat, say)
    added = iter(range(10**6))  # each added epoch file goes to the next run
    _baselines(figures, releases, work, workers, with_pandas, with_serial)
    _ingest_figures(figures, releases, work / "lake", workers, added)
    if with_build:
        _build_figures(figures, releases, work, workers, added)
    return figures.raw()


def _baselines(
    figures: Figures, releases: list[str], work: Path, workers: int, with_pandas: bool, with_serial: bool
) -> None:
    """The references, on exactly the files the full ingest sees: decoding alone, plain DuckDB, naive pandas, the
    one-process ingest."""
    figures.run("decode_lower_bound", "decode", releases=releases, workers=workers)
    figures.run("json_decode", "json", releases=releases)
    figures.run("transcripts", "transcripts", releases=releases)
    duckdb = work / "duckdb"
    figures.run("duckdb", "duckdb", before=fresh(duckdb), releases=releases, out=str(duckdb), workers=workers)
    shutil.rmtree(duckdb, ignore_errors=True)
    if with_pandas:
        figures.run("pandas", "pandas", before=fresh(work / "pandas"), releases=releases, out=str(work / "pandas"))
        shutil.rmtree(work / "pandas", ignore_errors=True)
    if with_serial:
        serial = work / "lake_serial"
        figures.run("ingest_1_worker", "ingest", before=fresh(serial), releases=releases, lake=str(serial), workers=1)
        shutil.rmtree(serial, ignore_errors=True)


def _ingest_figures(figures: Figures, releases: list[str], lake: Path, workers: int, added: Iterator[int]) -> None:
    """The ingest alone: into an empty lake, with no change, the sensor's tick, after one new epoch file."""
    arguments = {"releases": releases, "lake": str(lake), "workers": workers}
    figures.run("ingest_full", "ingest", before=fresh(lake), **arguments)
    figures.run("ingest_no_change", "ingest", **arguments)
    figures.run("sensor_tick", "sensor", releases=releases, lake=str(lake))
    figures.run("ingest_one_file", "ingest", before=lambda _a: add_epoch_file(releases, next(added)), **arguments)
    shutil.rmtree(lake, ignore_errors=True)


def _build_figures(figures: Figures, releases: list[str], work: Path, workers: int, added: Iterator[int]) -> None:
    """The whole build: fresh, the ingest alone right after it, the figures and the query on what it published, then
    with no change and after one new epoch file."""
    warehouse, lake = work / "warehouse", work / "lake"
    arguments = {"releases": releases, "warehouse": str(warehouse), "workers": workers}
    figures.run("build_full", "build", before=fresh(warehouse), **arguments)
    # The ingest alone again, right after the build: the build is judged against the faster of the two (build_ratios),
    # so that one run slowed by the machine does not set the reference.
    figures.run("ingest_full_after", "ingest", before=fresh(lake), releases=releases, lake=str(lake), workers=workers)
    shutil.rmtree(lake, ignore_errors=True)
    figures.run("figures", "figures", warehouse=str(warehouse))
    figures.run("statistics", "statistics", warehouse=str(warehouse))
    figures.query(warehouse)
    figures.run("build_no_change", "build", **arguments)
    figures.run("build_one_file", "build", before=lambda _a: add_epoch_file(releases, next(added)), **arguments)
    shutil.rmtree(warehouse, ignore_errors=True)


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

    figures = Figures(label, work / "logs", repeat, say)
    lake = work / "lake_s3"
    with loopback_s3() as aws, _environment(aws):
        filesystem.cache_clear()
        urls = _upload(releases, label, say)
        arguments = {"releases": urls, "lake": str(lake), "workers": workers}
        figures.run("ingest_object_storage", "ingest", before=fresh(lake), **arguments)
        figures.run("ingest_object_storage_no_change", "ingest", **arguments)
        _bench_lake_in_bucket(figures, releases, work, workers)
        filesystem.cache_clear()
    shutil.rmtree(lake, ignore_errors=True)
    with local_cluster(2, work / "dask", {**os.environ, "PYTHONPATH": checkout_path()}) as address:
        with _environment({"GRPO_EXECUTOR": "dask", "GRPO_DASK_ADDRESS": address}):
            warehouse = work / "warehouse_dask"
            arguments = {"releases": releases, "warehouse": str(warehouse), "workers": workers}
            figures.run("build_dask", "build", before=fresh(warehouse), **arguments)
    shutil.rmtree(work / "warehouse_dask", ignore_errors=True)
    return figures.raw()


def _upload(releases: list[str], label: str, say) -> list[str]:
    """The releases put in a bucket of the loopback S3 server; their URLs."""
    from pipelines.release.objects import filesystem

    started = time.perf_counter()
    urls = []
    for i, release in enumerate(releases):
        url = f"bench/{i}/{Path(release).name}"
        filesystem().makedirs("bench", exist_ok=True)
        filesystem().put(release, url, recursive=True)
        urls.append(f"s3://{url}")
    seconds = time.perf_counter() - started
    say(f"  [{label}] uploaded {len(urls)} release(s) to the loopback S3 server in {seconds:.1f} s")
    return urls


def _bench_lake_in_bucket(figures: Figures, releases: list[str], work: Path, workers: int) -> None:
    """The lake in a bucket of the loopback S3 server, the releases on disk: the full and no-change ingest, and the
    fresh and no-change whole build, whose models DuckDB reads from the bucket."""
    from pipelines.release.objects import filesystem

    filesystem().makedirs("bench-lake", exist_ok=True)
    lake = "s3://bench-lake/ingest"
    arguments = {"releases": releases, "lake": lake, "workers": workers}
    figures.run("ingest_lake_in_bucket", "ingest", before=fresh_prefix(lake), **arguments)
    figures.run("ingest_lake_in_bucket_no_change", "ingest", **arguments)
    warehouse, lake = work / "warehouse_lake_in_bucket", "s3://bench-lake/build"
    arguments = {"releases": releases, "warehouse": str(warehouse), "workers": workers, "lake_dir": lake}
    figures.run("build_lake_in_bucket", "build", before=fresh_prefix(lake, warehouse), **arguments)
    figures.run("build_lake_in_bucket_no_change", "build", **arguments)
    shutil.rmtree(warehouse, ignore_errors=True)


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
        f"runs quiet after {step_environment()['GRPO_QUIET_SECONDS']} s (GRPO_QUIET_SECONDS)"
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
