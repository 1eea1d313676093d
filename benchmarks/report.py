"""The bench's printed tables and verdicts, and the machine the figures were measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from benchmarks.measure import QUERY_REPEAT


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


def format_table(label: str, summary: dict) -> str:
    """One scale's table: a row per figure measured, its times, CPU and peak memory, and a note comparing it."""
    s, wall, tree, big, cpu = (
        summary[k] for k in ("seconds", "process_seconds", "peak_tree_rss_bytes", "peak_rss_bytes", "cpu_seconds")
    )
    rows = _ingest_rows(summary) + _build_rows(summary) + _scale_out_rows(summary) + _query_rows(summary)
    lines = [
        f"\n{label}: {summary['runs']} runs, {summary['files']:,} epoch files, {summary['bytes'] / 1e6:,.0f} MB "
        f"of JSON, {summary['trajectories']:,} trajectories; {summary['stdlib_fallbacks']} file(s) need the "
        f"stdlib parser (NaN/Infinity); {summary.get('transcript_files', 0):,} transcript files, "
        f"{summary.get('transcript_bytes', 0) / 1e6:,.0f} MB",
        f"  {'figure':<38} {'work':>9} {'process':>9} {'cpu':>9} {'peak proc':>10} {'peak tree':>10}  note",
    ]
    for what, name, note in rows:
        lines.append(
            f"  {what:<38} {_fmt_s(s[name]):>9} {_fmt_s(wall[name]):>9} {_fmt_s(cpu.get(name)):>9} "
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
        lines.append("  fresh build's costliest steps (wall): " + ", ".join(f"{k} {v:.2f} s" for k, v in by_step[:8]))
    if "statistics_share" in summary:
        lines.append(
            f"  interval statistics: {summary['statistics_cpu']:.2f} s of cpu ({summary['statistics_runs']} runs' own "
            f"intervals {summary['statistics_runs_cpu']:.2f} s, {summary['statistics_pairs']} contrasts of two runs "
            f"the rest), {100 * summary['statistics_share']:.1f}% of the fresh build's cpu"
        )
    return "\n".join(lines)


def _ingest_rows(summary: dict) -> list[tuple[str, str, str]]:
    """The rows of the ingest and its references, each (what, figure, note)."""
    s = summary["seconds"]
    note = f"{s['ingest_full'] / s['decode_lower_bound']:.2f}x = ingest / this"
    rows = [("decode-only lower bound (orjson)", "decode_lower_bound", note)]
    if "json_decode" in s:
        note = f"{summary['json_vs_decode']:.2f}x = this / lower bound"
        rows.append(("json.loads read-and-decode, 1 process", "json_decode", note))
    if "transcripts" in summary:
        t = summary["transcripts"]
        note = (
            f"{t['files']:,} files, {t['bytes'] / 1e6:,.0f} MB, {t['records']:,} records; cpu: read and parse "
            f"{t['read_cpu']:.2f} s, index {t['index_cpu']:.2f} s = {t['index_vs_read']:.2f}x"
        )
        rows.append(("transcripts: read, then index", "transcripts", note))
    rows.append(("ingest, full", "ingest_full", ""))
    if "ingest_1_worker" in s:
        rows.append(
            ("ingest, full, 1 worker", "ingest_1_worker", f"{summary['parallel_speedup']:.2f}x = speedup of the pool")
        )
    rows += [
        ("ingest, no change", "ingest_no_change", f"{summary['no_change_files_parsed']} files parsed"),
        ("ingest, one new epoch file", "ingest_one_file", f"{100 * summary['one_file_share']:.1f}% of full ingest"),
    ]
    if "sensor_tick" in s:
        note = (
            f"cursor {summary['sensor_cursor_bytes'] / 1e3:,.1f} kB, {summary['sensor_quiet_runs']} quiet runs not "
            "listed"
        )
        rows.append(("sensor tick, no change", "sensor_tick", note))
    rows.append(("plain DuckDB read_json+unnest+COPY", "duckdb", f"{summary['duckdb_vs_ingest']:.2f}x = this / ingest"))
    if "pandas" in s:
        rows.append(
            ("naive json + pandas (1 process)", "pandas", f"{summary['pandas_vs_ingest']:.2f}x = this / ingest")
        )
    return rows


def _build_rows(summary: dict) -> list[tuple[str, str, str]]:
    """The rows of the whole build (fresh, no change, one new file) and the figures drawn from it."""
    rows = []
    for name, what in (
        ("build_full", "whole build, fresh"),
        ("build_no_change", "whole build, no change"),
        ("build_one_file", "whole build, one new file"),
    ):
        if name not in summary["seconds"]:
            continue
        rows.append((what, name, _build_note(summary, name)))
        if name == "build_full" and "ingest_full_after" in summary["seconds"]:
            note = f"{summary['ingest_alone_seconds']:.2f} s = the ingest alone, the faster of before and after"
            rows.append(("ingest, full, right after the build", "ingest_full_after", note))
    if "figures" in summary["seconds"]:
        note = (
            f"{summary['figure_ablations']} ablations, cpu each: median {summary['figure_cpu_median']:.2f} s, "
            f"most {summary['figure_cpu_max']:.2f} s; a worker's set-up, its first figure, "
            f"{summary['figure_cpu_setup']:.2f} s"
        )
        rows.append(("figures, one ablation after another", "figures", note))
    return rows


def _build_note(summary: dict, name: str) -> str:
    """A whole build's note: where its time went, and the fresh build against its references."""
    steps = summary[f"{name}_steps"]
    note = (
        f"ingest {steps['ingest']:.2f} s, models+exports {steps['models_and_exports']:.2f} s, "
        f"outside steps {steps['outside_steps']:.2f} s"
    )
    if name == "build_one_file":
        note += f"; {100 * summary['build_one_file_share']:.1f}% of fresh"
    if name == "build_full":
        json_decode = summary["process_seconds"][name] / summary["seconds"]["json_decode"]
        note += (
            f"; {json_decode:.1f}x json.loads, {summary['build_vs_ingest']:.1f}x ingest; "
            f"its ingest steps {summary['ingest_in_build']:.2f}x the ingest alone"
        )
        if "dagster_around_ingest_seconds" in summary:
            note += f" (Dagster around the ingest call: {summary['dagster_around_ingest_seconds']:.2f} s)"
    return note


def _query_rows(summary: dict) -> list[tuple[str, str, str]]:
    if "query" not in summary["seconds"]:
        return []
    return [('sql "select 1" (process, start-up included)', "query", f"median of {QUERY_REPEAT} runs")]


def _scale_out_rows(summary: dict) -> list[tuple[str, str, str]]:
    """The table's rows for the scale-out figures (bench_scale_out), against the same work on one node's disk."""
    s, wall = summary["seconds"], summary["process_seconds"]
    rows = []
    if "ingest_object_storage" in s:
        note = f"{s['ingest_object_storage'] / s['ingest_full']:.2f}x the ingest from disk"
        rows.append(("ingest, full, from S3 (loopback)", "ingest_object_storage", note))
        note = (
            f"{s['ingest_object_storage_no_change'] / s['ingest_no_change']:.2f}x from disk: every run listed, no "
            "folder stamps in a bucket"
        )
        rows.append(("ingest, no change, from S3 (loopback)", "ingest_object_storage_no_change", note))
    if "ingest_lake_in_bucket" in s:
        rows += _lake_in_bucket_rows(s, wall)
    if "build_dask" in s and "build_full" in s:
        note = f"{wall['build_dask'] / wall['build_full']:.2f}x the in-process build (process times)"
        rows.append(("whole build, fresh, Dask, 2 workers", "build_dask", note))
    return rows


def _lake_in_bucket_rows(s: dict, wall: dict) -> list[tuple[str, str, str]]:
    """The rows of the lake in a bucket (_bench_lake_in_bucket), each against the same work with the lake on disk."""
    rows = [
        (
            "ingest, full, lake in S3 (loopback)",
            "ingest_lake_in_bucket",
            f"{s['ingest_lake_in_bucket'] / s['ingest_full']:.2f}x the ingest into a lake on disk",
        ),
        (
            "ingest, no change, lake in S3 (loopback)",
            "ingest_lake_in_bucket_no_change",
            f"{s['ingest_lake_in_bucket_no_change'] / s['ingest_no_change']:.2f}x on disk: per run, its stamps "
            "fetched and two partitions looked for, three requests",
        ),
    ]
    if "build_full" in s:
        rows.append(
            (
                "whole build, fresh, lake in S3",
                "build_lake_in_bucket",
                f"{wall['build_lake_in_bucket'] / wall['build_full']:.2f}x the build with its lake on disk (process "
                "times)",
            )
        )
        rows.append(
            (
                "whole build, no change, lake in S3",
                "build_lake_in_bucket_no_change",
                f"{wall['build_lake_in_bucket_no_change'] / wall['build_no_change']:.2f}x with its lake on disk "
                "(process times)",
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
