"""The figures of one scale summarized, and the bench's targets judged against their bars."""

from __future__ import annotations

from statistics import median

from benchmarks.steps import CHECK_STEP

GIB = 2**30

# Targets of the bench (ratios on a 2-core machine).
TARGET_INGEST_VS_DECODE = 2.0  # ingest within 2x of the decode-only lower bound, at 10x and 100x
TARGET_DUCKDB_VS_INGEST = 2.0  # ingest at least 2x faster than plain DuckDB, at 10x and 100x
TARGET_PEAK_BYTES = 1 * GIB  # at 100x
TARGET_NOCHANGE_GROWTH = 1.5  # no-change rebuild time, 1x -> 100x
TARGET_BUILD_VS_JSON = 10.0  # fresh whole build within 10x of a 1-process json.loads read-and-decode, at 10x
TARGET_BUILD_VS_INGEST = 3.0  # fresh whole build within 3x of the ingest alone, at 100x
TARGET_INGEST_IN_BUILD = 1.25  # the build's ingest steps within 1.25x of the ingest alone, at 10x and 100x
TARGET_STATISTICS_SHARE = 0.10  # the interval statistics' share of a fresh whole build's CPU
TARGET_QUERY_SECONDS = 0.3  # `grpo-warehouse sql "select 1"`, process wall, start-up included
TARGET_TRANSCRIPTS_VS_READ = 2.0  # indexing the transcripts within 2x of reading and parsing them, CPU, at 10x


def _median(raw: dict, name: str, key: str = "seconds") -> float | None:
    runs = raw.get(name)
    if not runs:
        return None
    if key == "seconds":
        return median(r["result"].get("seconds", r["wall_seconds"]) for r in runs)
    return median(r[key] for r in runs)


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
        "transcript_files": first["decode_lower_bound"].get("transcript_files", 0),
        "transcript_bytes": first["decode_lower_bound"].get("transcript_bytes", 0),
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
    if "transcripts" in raw:
        read, index = (median(r["result"][key] for r in raw["transcripts"]) for key in ("read_cpu", "index_cpu"))
        transcripts = first["transcripts"]
        summary["transcripts"] = {key: transcripts[key] for key in ("files", "bytes", "records")}
        summary["transcripts"] |= {"read_cpu": read, "index_cpu": index, "index_vs_read": index / max(read, 1e-9)}
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
    """The fresh whole build against its references, the statistics' share of it, the figures' and the query's cost."""
    s, wall, steps = summary["seconds"], summary["process_seconds"], summary["build_full_steps"]
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
    }
    if "statistics" in raw and "build_full" in summary.get("cpu_seconds", {}):
        statistics = raw["statistics"][0]["result"]
        ratios.update(
            statistics_cpu=statistics["statistics_cpu_seconds"],
            statistics_runs_cpu=statistics["runs_cpu_seconds"],
            statistics_runs=statistics["runs"],
            statistics_pairs=statistics["pairs"],
            statistics_share=statistics["statistics_cpu_seconds"] / summary["cpu_seconds"]["build_full"],
        )
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


def check_targets(results: dict[str, dict]) -> list[dict]:
    """Each target at each scale it applies to: the figure, the bar, and whether it holds."""
    checks = []

    def add(scale, target, value, bar, holds, unit=""):
        checks.append({"scale": scale, "target": target, "value": value, "bar": bar, "holds": holds, "unit": unit})

    for label, res in results.items():
        summary, scale = res["summary"], res.get("scale")
        ingest_targets(label, scale, summary, add)
        if "build_vs_ingest" in summary:
            build_targets(label, scale, summary, add)
    growth_targets(results, add)
    return checks


def ingest_targets(label: str, scale: int | None, summary: dict, add) -> None:
    """The ingest's targets: against its peers at 10x and 100x, its memory and one new file at 100x, and a no-change
    rebuild parsing nothing at every scale."""
    if scale is None or scale >= 10:
        ratio = summary["ingest_vs_decode"]
        bar = TARGET_INGEST_VS_DECODE
        add(label, "ingest / decode-only lower bound", ratio, f"<= {bar}", ratio <= bar, "x")
        ratio = summary["duckdb_vs_ingest"]
        bar = TARGET_DUCKDB_VS_INGEST
        add(label, "plain DuckDB / ingest", ratio, f">= {bar}", ratio >= bar, "x")
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
    parsed = summary["no_change_files_parsed"]
    add(label, "no-change rebuild parses nothing", parsed, "0", parsed == 0, "files")
    if "transcripts" in summary and (scale is None or scale >= 10):
        ratio, bar = summary["transcripts"]["index_vs_read"], TARGET_TRANSCRIPTS_VS_READ
        add(label, "transcript indexing / reading and parsing them, CPU", ratio, f"<= {bar}", ratio <= bar, "x")


def growth_targets(results: dict[str, dict], add) -> None:
    """The no-change rebuild's time from the smallest scale to the largest, on the process's wall time, what a user
    waits for: at 1x the ingest's own work is a few milliseconds."""
    scaled = sorted((res["scale"], res["summary"]) for res in results.values() if res.get("scale"))
    if len(scaled) < 2:
        return
    (lo, small), (hi, large) = scaled[0], scaled[-1]
    bar = f"< {TARGET_NOCHANGE_GROWTH}" if (lo, hi) == (1, 100) else f"< {TARGET_NOCHANGE_GROWTH} (bar is 1x -> 100x)"
    for name, what in (("build_no_change", "whole build"), ("ingest_no_change", "ingest")):
        if name not in small["process_seconds"] or name not in large["process_seconds"]:
            continue
        growth = large["process_seconds"][name] / small["process_seconds"][name]
        target = f"no-change rebuild time growth ({what}, process wall)"
        add(f"{lo}x -> {hi}x", target, growth, bar, growth < TARGET_NOCHANGE_GROWTH, "x")


def build_targets(label: str, scale: int | None, summary: dict, add) -> None:
    """The whole build's targets: against its references at 10x and 100x, its parts at every scale."""

    def at_most(target: str, key: str, bar: float, unit: str, percent: bool = False) -> None:
        value, times = summary[key], 100 if percent else 1
        add(label, target, times * value, f"<= {times * bar:g}", value <= bar, unit)

    if scale == 10 and summary.get("build_vs_json") is not None:
        at_most("fresh whole build / 1-process json.loads read-and-decode", "build_vs_json", TARGET_BUILD_VS_JSON, "x")
    if scale is None or scale >= 100:
        at_most("fresh whole build / ingest alone (process wall)", "build_vs_ingest", TARGET_BUILD_VS_INGEST, "x")
    if scale is None or scale >= 10:
        at_most("ingest steps in the build / ingest alone", "ingest_in_build", TARGET_INGEST_IN_BUILD, "x")
    if "statistics_share" in summary:
        target = "interval statistics / fresh whole build (cpu)"
        at_most(target, "statistics_share", TARGET_STATISTICS_SHARE, "%", percent=True)
    if "query_seconds" in summary:
        at_most('grpo-warehouse sql "select 1" (process wall, median)', "query_seconds", TARGET_QUERY_SECONDS, "s")
